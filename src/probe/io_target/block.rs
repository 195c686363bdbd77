//! Block device targets: size and alignment from the kernel, and the write-safety rules: nothing
//! a write reaches (the device, its partitions, what lies beneath it and every other view of
//! those bytes: [`stack`]) mounted, a swap area or held by a volume outside it; the views that
//! nothing else claims claimed for the run, the device opened with `O_EXCL` and checked to be
//! the one checked, and, for a configured target, the disk it was pinned to
//! ([`DiskIdentity`]).

use super::direct::{DirectOpen, check_aligned, fstat, open_direct};
use super::facts::TargetKind;
use super::facts::{cache_of, resolve_device};
use super::opened::{OpenTarget, TargetOptions};
use super::target_error::{Refusal, TargetError};
use crate::blockdev::identity::DiskIdentity;
use crate::blockdev::stack::{self, Footprint};
use crate::blockdev::{self, BlockDevice, Kind, sysfs};
use crate::probe::sys;
use std::collections::HashSet;
use std::fs::{self, File};
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
    if opts.write && !opts.device_writes {
        return Err(TargetError::WriteRefused {
            path: path.to_owned(),
            reason: Refusal::NoDeviceOptIn,
        });
    }
    // Writes: the devices beneath and beside the target checked, and those that nothing else
    // claims claimed for the run, before the target itself is opened exclusively.
    let guard = if opts.write {
        Some(WriteGuard::before_open(path, &device, opts)?)
    } else {
        None
    };
    let file = open_direct(path, DirectOpen::Device { write: opts.write })?;
    // The checks above were made on the device the path named then; the descriptor must be that
    // device (a /dev/disk/by-* link can move in between).
    let opened = fstat(path, &file)?;
    if !opened.file_type().is_block_device() || opened.rdev() != meta.rdev() {
        return Err(TargetError::DeviceChanged {
            path: path.to_owned(),
        });
    }
    let (identity, claims) = match guard {
        Some(guard) => {
            let (identity, claims) = guard.after_open(path, &file, opts)?;
            (Some(identity), claims)
        }
        None => (None, Vec::new()),
    };
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
        identity,
        filesystem: None,
        _claims: claims,
    })
}

/// What a write to a block device holds from its checks until its target is open: the
/// footprint it checked, the devices it claimed, and the disk it found at the path.
struct WriteGuard {
    footprint: Footprint,
    claims: Vec<File>,
    identity: DiskIdentity,
}

impl WriteGuard {
    /// The checks of [`check_block_write_safety`], then [`claim`]; then what makes the device at
    /// `path` (`device`) the disk it is, read through a read-only open of the path, checked
    /// against the disk the target was pinned to, if it was.
    fn before_open(
        path: &Path,
        device: &BlockDevice,
        opts: &TargetOptions,
    ) -> Result<WriteGuard, TargetError> {
        let refuse = |reason| TargetError::WriteRefused {
            path: path.to_owned(),
            reason,
        };
        let footprint = check_block_write_safety(path, device.major, device.minor, opts)?;
        let claims = claim(path, &footprint, &opts.devfs)?;
        let node = sysfs::DevNode {
            major: device.major,
            minor: device.minor,
            kname: device.kname.clone(),
        };
        let read_only = stack::open_node(path, &node, false).map_err(|source| TargetError::Io {
            path: path.to_owned(),
            what: "open read-only to tell which disk it is",
            source,
        })?;
        let identity = identity_of(&read_only, device, opts);
        if let Some(pinned) = &opts.pinned
            && let Err(why) = pinned.same_disk(&identity)
        {
            return Err(refuse(Refusal::NotThePinnedDisk {
                pinned: Box::new(pinned.clone()),
                found: Box::new(identity),
                why,
            }));
        }
        Ok(WriteGuard {
            footprint,
            claims,
            identity,
        })
    }

    /// Once the target is open as `file`: the footprint walked again must be the one checked (a
    /// loop device set up over the target, or its file, while the others were being claimed is
    /// not claimed), and the descriptor's disk sequence number the one checked (no other disk
    /// attached at the node in between). Returns what makes it the disk it is.
    fn after_open(
        self,
        path: &Path,
        file: &File,
        opts: &TargetOptions,
    ) -> Result<(DiskIdentity, Vec<File>), TargetError> {
        let number = self.footprint.layers[0].node.number();
        let after = check_block_write_safety(path, number.0, number.1, opts)?;
        if after.shape() != self.footprint.shape() {
            return Err(TargetError::WriteRefused {
                path: path.to_owned(),
                reason: Refusal::StackChanged,
            });
        }
        if let (Ok(now), Some(checked)) = (sys::disk_seq(file), self.identity.diskseq)
            && now != checked
        {
            return Err(TargetError::DeviceChanged {
                path: path.to_owned(),
            });
        }
        Ok((self.identity, self.claims))
    }
}

/// Why a write probe on the block device at `path` (device number `rdev`) would be refused now
/// because a device of its footprint ([`stack`]) is mounted, a swap area or held (what a run
/// checks before it claims them and opens the device), for `--config.check` and loading; `None`
/// when it would not be, or when that cannot be told (the mount table, `/proc/swaps` or sysfs
/// cannot be read, or a loop device's backing: the run checks again, and refuses then).
pub(crate) fn in_use(
    path: &Path,
    rdev: u64,
    procfs: &Path,
    sysfs: &Path,
    devfs: &Path,
) -> Option<Refusal> {
    let footprint = stack::footprint(
        sysfs,
        libc::major(rdev),
        libc::minor(rdev),
        &stack::DevfsLoops { devfs },
    )
    .ok()?;
    match check_footprint(path, &footprint, procfs) {
        Err(TargetError::WriteRefused {
            reason: reason @ (Refusal::Mounted { .. } | Refusal::Swap { .. } | Refusal::Held { .. }),
            ..
        }) => Some(reason),
        _ => None,
    }
}

/// The write-safety checks of a write to the block device `major:minor` at `path` before it is
/// opened: its footprint ([`stack::footprint`]) walked, none of its devices mounted, a swap area
/// in use or held by a volume outside it, and every loop device's backing known. Returns the
/// footprint, whose other views [`claim`] claims next.
pub(super) fn check_block_write_safety(
    path: &Path,
    major: u32,
    minor: u32,
    opts: &TargetOptions,
) -> Result<Footprint, TargetError> {
    let footprint = stack::footprint(
        &opts.sysfs,
        major,
        minor,
        &stack::DevfsLoops { devfs: &opts.devfs },
    )
    .map_err(|source| TargetError::WriteRefused {
        path: path.to_owned(),
        reason: Refusal::HoldersUnknown {
            sysfs: opts.sysfs.clone(),
            source,
        },
    })?;
    check_footprint(path, &footprint, &opts.procfs)?;
    Ok(footprint)
}

/// Refuses a write whose `footprint` has a device mounted (in `<procfs>/self/mountinfo`, by
/// device number or by a `/dev` source), a swap area in use (`<procfs>/swaps`), a holder outside
/// it, or a loop device whose backing cannot be told.
fn check_footprint(path: &Path, footprint: &Footprint, procfs: &Path) -> Result<(), TargetError> {
    let refuse = |reason: Refusal| TargetError::WriteRefused {
        path: path.to_owned(),
        reason,
    };
    let mountinfo_path = procfs.join("self/mountinfo");
    let mountinfo = fs::read_to_string(&mountinfo_path).map_err(|source| {
        refuse(Refusal::MountsUnknown {
            mountinfo: mountinfo_path.clone(),
            source,
        })
    })?;
    let mounted = mounted_devices(&mountinfo);
    let swaps_path = procfs.join("swaps");
    let swaps = match fs::read_to_string(&swaps_path) {
        Ok(text) => swap_devices(&text),
        // A kernel without swap support has no /proc/swaps.
        Err(err) if err.kind() == io::ErrorKind::NotFound => HashSet::new(),
        Err(source) => {
            return Err(refuse(Refusal::SwapsUnknown {
                swaps: swaps_path,
                source,
            }));
        }
    };
    if let Some((node, why)) = footprint.unknown_loops.first() {
        return Err(refuse(Refusal::LoopUnknown {
            device: node.kname.clone(),
            why: why.clone(),
        }));
    }
    for layer in &footprint.layers {
        if mounted.contains(&layer.node.number()) {
            return Err(refuse(Refusal::Mounted {
                layer: layer.to_string(),
            }));
        }
        if swaps.contains(&layer.node.number()) {
            return Err(refuse(Refusal::Swap {
                layer: layer.to_string(),
            }));
        }
    }
    if let Some((i, holder)) = footprint.foreign_holders.first() {
        return Err(refuse(Refusal::Held {
            layer: footprint.layers[*i].to_string(),
            holder: holder.kname.clone(),
        }));
    }
    Ok(())
}

/// Claims the devices of `footprint` that nothing else of it claims ([`Role::claimed_for_the_run`]:
/// loop devices over it or over its backing file, and the devices loop devices of it are backed
/// by), each with an exclusive read-only open of its node under `devfs`, held until the run ends:
/// one in use is refused now (mounted, also in another mount namespace, a swap area, a btrfs or
/// md member), and none can be mounted while the run writes.
pub(super) fn claim(
    path: &Path,
    footprint: &Footprint,
    devfs: &Path,
) -> Result<Vec<File>, TargetError> {
    let mut claims = Vec::new();
    for layer in footprint
        .layers
        .iter()
        .filter(|l| l.role.claimed_for_the_run())
    {
        let node = devfs.join(&layer.node.kname);
        match stack::open_node(&node, &layer.node, true) {
            Ok(file) => claims.push(file),
            Err(err) => {
                let reason = if err.raw_os_error() == Some(libc::EBUSY) {
                    Refusal::Claimed {
                        layer: layer.to_string(),
                    }
                } else {
                    Refusal::ClaimFailed {
                        layer: layer.to_string(),
                        node,
                        source: err,
                    }
                };
                return Err(TargetError::WriteRefused {
                    path: path.to_owned(),
                    reason,
                });
            }
        }
    }
    Ok(claims)
}

/// The devices (`MAJ:MIN`) with a filesystem mounted, in a mountinfo text: each mount's device
/// number, and the device a `/dev` source names (a btrfs mount shows an anonymous number).
pub(crate) fn mounted_devices(mountinfo: &str) -> HashSet<(u32, u32)> {
    let mut mounted = HashSet::new();
    for m in crate::mountinfo::parse(mountinfo) {
        if m.major != 0 {
            mounted.insert((m.major, m.minor));
        }
        if m.source.starts_with("/dev/")
            && let Some(dev) = block_device_number(Path::new(&m.source))
        {
            mounted.insert(dev);
        }
    }
    mounted
}

/// The block devices in use as swap areas, in a `/proc/swaps` text.
fn swap_devices(swaps: &str) -> HashSet<(u32, u32)> {
    crate::swaps::parse(swaps)
        .into_iter()
        .filter(|s| s.device)
        .filter_map(|s| block_device_number(Path::new(&s.path)))
        .collect()
}

/// The number of the block device at `path` (following links), if it is one.
fn block_device_number(path: &Path) -> Option<(u32, u32)> {
    let meta = fs::metadata(path).ok()?;
    let rdev = meta.file_type().is_block_device().then(|| meta.rdev())?;
    Some((libc::major(rdev), libc::minor(rdev)))
}

/// What makes the device open as `file` (`device` in sysfs) the disk it is: its disk sequence
/// number from the descriptor, and a loop device's (or its partition's) backing from the kernel.
fn identity_of(file: &File, device: &BlockDevice, opts: &TargetOptions) -> DiskIdentity {
    let on_loop = match device.kind {
        Some(Kind::Loop) => true,
        Some(Kind::Partition) => device
            .parent
            .as_deref()
            .and_then(|p| blockdev::by_name(&opts.sysfs, p))
            .is_some_and(|d| d.kind == Some(Kind::Loop)),
        _ => false,
    };
    let backing = on_loop
        .then(|| sys::loop_status(file).ok())
        .flatten()
        .map(|s| stack::LoopBacking::from_status(&s));
    DiskIdentity::read(
        &opts.procfs,
        &opts.sysfs,
        device,
        sys::disk_seq(file).ok(),
        backing,
    )
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
        let disk = empty.path().join("devices/loop99");
        fs::create_dir_all(disk.join("loop99p1")).unwrap();
        fs::create_dir_all(disk.join("holders")).unwrap();
        fs::write(disk.join("dev"), "7:99\n").unwrap();
        fs::write(disk.join("loop99p1/partition"), "1\n").unwrap();
        fs::create_dir_all(empty.path().join("dev/block")).unwrap();
        std::os::unix::fs::symlink(&disk, empty.path().join("dev/block/7:99")).unwrap();
        let err = blockdev::sysfs::links(empty.path(), 7, 99).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        fs::write(disk.join("loop99p1/dev"), "7:100\n").unwrap();
        let links = blockdev::sysfs::links(empty.path(), 7, 99).unwrap();
        assert_eq!(links.partitions[0].number(), (7, 100));
    }

    /// Options for a write to a device of the fixture tree `tree` (tests/fixtures/blockdev),
    /// with a procfs whose mountinfo lists `mounted` (`MAJ:MIN`s).
    fn fixture(tree: &str, mounted: &[&str]) -> (tempfile::TempDir, TargetOptions) {
        let proc = tempfile::tempdir().unwrap();
        fs::create_dir_all(proc.path().join("self")).unwrap();
        let mountinfo: String = mounted
            .iter()
            .enumerate()
            .map(|(i, dev)| format!("{} 1 {dev} / /mnt/{i} rw - ext4 /nonexistent rw\n", 30 + i))
            .collect();
        fs::write(proc.path().join("self/mountinfo"), mountinfo).unwrap();
        let sysfs = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/blockdev")
            .join(tree)
            .join("sys");
        let opts = TargetOptions {
            write: true,
            device_writes: true,
            procfs: proc.path().to_owned(),
            sysfs,
            devfs: proc.path().join("no-dev"),
            ..file_opts(None)
        };
        (proc, opts)
    }

    fn refusal(tree: &str, mounted: &[&str], major: u32, minor: u32) -> String {
        let (_proc, opts) = fixture(tree, mounted);
        match check_block_write_safety(Path::new("/dev/x"), major, minor, &opts) {
            Ok(_) => "allowed".to_owned(),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn a_write_over_a_device_mapper_volume_sees_its_members() {
        // dm-0 over vdb (254:16) and vdc (254:32).
        assert_eq!(refusal("dm-two-disks", &[], 253, 0), "allowed");
        assert_eq!(
            refusal("dm-two-disks", &["254:32"], 253, 0),
            "/dev/x: refusing to write: vdc (254:32), a member of dm-0, is mounted"
        );
        // A member written directly is held by the volume.
        assert_eq!(
            refusal("dm-two-disks", &[], 254, 16),
            "/dev/x: refusing to write: the device vdb (254:16) is held by dm-0 (device-mapper, md, ...)"
        );
    }

    #[test]
    fn a_write_over_an_md_array_sees_its_members_and_their_disks() {
        // md127 over sdb1 (8:17) and sdc1 (8:33), partitions of sdb (8:16) and sdc (8:32).
        assert_eq!(refusal("md-raid", &[], 9, 127), "allowed");
        assert_eq!(
            refusal("md-raid", &["8:32"], 9, 127),
            "/dev/x: refusing to write: sdc (8:32), the whole disk of partition sdc1, is mounted"
        );
        // An md member: held by the array; its whole disk mounted is named first.
        assert_eq!(
            refusal("md-raid", &[], 8, 17),
            "/dev/x: refusing to write: the device sdb1 (8:17) is held by md127 (device-mapper, md, ...)"
        );
        assert_eq!(
            refusal("md-raid", &["8:16"], 8, 17),
            "/dev/x: refusing to write: sdb (8:16), the whole disk of partition sdb1, is mounted"
        );
        // The whole disk of a member: its partition is held.
        assert_eq!(
            refusal("md-raid", &[], 8, 16),
            "/dev/x: refusing to write: sdb1 (8:17), a partition of sdb, is held by md127 (device-mapper, md, ...)"
        );
    }

    #[test]
    fn mounts_are_found_by_number_and_by_source() {
        let text = "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n\
                    30 22 0:25 / /dev/shm rw - tmpfs tmpfs rw\n\
                    41 22 0:48 /@home /home rw,relatime shared:9 - btrfs /dev/null rw\n";
        let mounted = mounted_devices(text);
        assert!(mounted.contains(&(254, 1)));
        assert!(!mounted.contains(&(0, 25)), "no device");
        // /dev/null is a character device: not a block device's number.
        assert_eq!(mounted.len(), 1, "{mounted:?}");
    }
}
