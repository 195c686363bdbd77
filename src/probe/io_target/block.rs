//! Block device targets: size and alignment from the kernel, and the write-safety rules (the
//! device and its partitions unmounted and without holders, opened with `O_EXCL`, and the same
//! device as the one checked).

use super::direct::{DirectOpen, check_aligned, fstat, open_direct};
use super::facts::TargetKind;
use super::facts::{cache_of, mounted_devices, resolve_device};
use super::opened::{OpenTarget, TargetOptions};
use super::target_error::{Refusal, TargetError};
use crate::blockdev;
use crate::probe::engine::sys;
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

pub(super) fn open_block_device(
    path: &Path,
    meta: &fs::Metadata,
    opts: &TargetOptions,
) -> Result<OpenTarget, TargetError> {
    let (major, minor) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
    let device = resolve_device(&opts.sysfs, major, minor);
    if opts.write {
        if !opts.device_writes {
            return Err(TargetError::WriteRefused {
                path: path.to_owned(),
                reason: Refusal::NoDeviceOptIn,
            });
        }
        check_block_write_safety(path, major, minor, opts)?;
    }
    let file = open_direct(path, DirectOpen::Device { write: opts.write })?;
    // The checks above were made on the device the path named then; the descriptor must be that
    // device (a /dev/disk/by-* link can move in between).
    let opened = fstat(path, &file)?;
    if !opened.file_type().is_block_device() || opened.rdev() != meta.rdev() {
        return Err(TargetError::DeviceChanged {
            path: path.to_owned(),
        });
    }
    let size = sys::block_device_size(&file).map_err(|source| TargetError::Io {
        path: path.to_owned(),
        what: "BLKGETSIZE64",
        source,
    })?;
    let align = sys::logical_block_size(&file).unwrap_or(512);
    if size == 0 {
        return Err(TargetError::EmptyDevice {
            path: path.to_owned(),
        });
    }
    let available = size.saturating_sub(opts.offset);
    let region_len = opts.size.unwrap_or(available);
    if opts.offset > size || region_len > available || region_len == 0 {
        return Err(TargetError::TooSmall {
            path: path.to_owned(),
            available,
            wanted: region_len.max(1),
        });
    }
    check_aligned(path, "region offset", opts.offset, align)?;
    check_aligned(path, "region size", region_len, align)?;
    let cache = cache_of(&opts.sysfs, "", Some(&device));
    let warnings = cache
        .map(|c| c.warning(path, "", Some(&device)))
        .into_iter()
        .collect();
    Ok(OpenTarget {
        path: path.to_owned(),
        file,
        kind: TargetKind::BlockDevice,
        region_offset: opts.offset,
        region_len,
        offset_align: align,
        mem_align: align,
        device: Some(device),
        fstype: String::new(),
        cache,
        warnings,
        writable: opts.write,
        filled: false,
    })
}

/// Why a write probe on the block device at `path` (device number `rdev`) would be refused now
/// because the device or one of its partitions is mounted or held (what a run checks before it
/// opens the device), for `--config.check` and loading; `None` when it would not be, or when the
/// mount table or sysfs cannot be read (the run checks again, and refuses then).
pub(crate) fn mounted_or_held(
    path: &Path,
    rdev: u64,
    procfs: &Path,
    sysfs: &Path,
) -> Option<Refusal> {
    let opts = TargetOptions {
        size: None,
        offset: 0,
        write: true,
        device_writes: true,
        min_free: 0,
        procfs: procfs.to_owned(),
        sysfs: sysfs.to_owned(),
    };
    match check_block_write_safety(path, libc::major(rdev), libc::minor(rdev), &opts) {
        Err(TargetError::WriteRefused {
            reason: reason @ (Refusal::Mounted { .. } | Refusal::Held { .. }),
            ..
        }) => Some(reason),
        _ => None,
    }
}

pub(super) fn check_block_write_safety(
    path: &Path,
    major: u32,
    minor: u32,
    opts: &TargetOptions,
) -> Result<(), TargetError> {
    let refuse = |reason: Refusal| TargetError::WriteRefused {
        path: path.to_owned(),
        reason,
    };
    let mountinfo_path = opts.procfs.join("self/mountinfo");
    let mountinfo = fs::read_to_string(&mountinfo_path).map_err(|source| {
        refuse(Refusal::MountsUnknown {
            mountinfo: mountinfo_path.clone(),
            source,
        })
    })?;
    let mounted = mounted_devices(&mountinfo);
    let me = format!("{major}:{minor}");
    let unreadable = |source: io::Error| {
        refuse(Refusal::HoldersUnknown {
            sysfs: opts.sysfs.clone(),
            source,
        })
    };
    let mut devices = vec![me.clone()];
    devices.extend(blockdev::sysfs::partitions(&opts.sysfs, major, minor).map_err(unreadable)?);
    for dev in devices {
        let partition = dev != me;
        if mounted.contains(&dev) {
            return Err(refuse(Refusal::Mounted { dev, partition }));
        }
        if blockdev::sysfs::has_holders(&opts.sysfs, &dev).map_err(unreadable)? {
            return Err(refuse(Refusal::Held { dev, partition }));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::io_target::tests::file_opts;

    #[test]
    fn device_writes_are_refused_when_sysfs_cannot_be_read() {
        let empty = tempfile::tempdir().unwrap();
        let opts = TargetOptions {
            write: true,
            device_writes: true,
            sysfs: empty.path().to_owned(),
            ..file_opts(None)
        };
        let err = check_block_write_safety(Path::new("/dev/loop99"), 7, 99, &opts).unwrap_err();
        assert!(matches!(err, TargetError::WriteRefused { .. }), "{err}");
        assert!(err.to_string().contains("cannot read"), "{err}");
        // A partition whose `dev` cannot be read is not taken for no partition.
        let disk = empty.path().join("dev/block/7:99");
        fs::create_dir_all(disk.join("loop99p1")).unwrap();
        fs::write(disk.join("loop99p1/partition"), "1\n").unwrap();
        let err = blockdev::sysfs::partitions(empty.path(), 7, 99).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        fs::write(disk.join("loop99p1/dev"), "7:100\n").unwrap();
        assert_eq!(
            blockdev::sysfs::partitions(empty.path(), 7, 99).unwrap(),
            vec!["7:100"]
        );
    }
}
