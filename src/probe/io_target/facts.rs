//! What a target is, from a stat of its path without opening it: its kind, the kernel block
//! device under it (also for btrfs, whose files have anonymous device numbers), the filesystem
//! type, the direct-I/O alignment, and whether its probes would measure a cache rather than a disk.
//! Also what these need of `/proc/self/mountinfo` (parsed by [`crate::mountinfo`]).

use crate::blockdev::{self, BlockDevice};
use crate::mountinfo;
use crate::probe::sys;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// What kind of object a target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// A block device, probed directly.
    BlockDevice,
    /// A regular file on a filesystem.
    File,
}

impl TargetKind {
    /// `block_device` or `file` (the `kind` label).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TargetKind::BlockDevice => "block_device",
            TargetKind::File => "file",
        }
    }
}

/// The block device `major:minor` ([`blockdev::by_dev`]); one named `MAJ:MIN`, its own only disk,
/// when sysfs does not know it.
pub(crate) fn resolve_device(sysfs: &Path, major: u32, minor: u32) -> BlockDevice {
    blockdev::by_dev(sysfs, major, minor).unwrap_or_else(|| {
        let kname = format!("{major}:{minor}");
        BlockDevice {
            disks: vec![kname.clone()],
            kname,
            major,
            minor,
            ..BlockDevice::default()
        }
    })
}

/// What a target is, as a stat of its path tells (without opening it): its kind, the block device
/// under it and the filesystem type. The scheduler reads these before every cycle (so that a
/// target's series carry their final `device` label from the start); an open finds the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetFacts {
    /// Block device or file (a file that does not exist yet is a probe file to be created).
    pub kind: TargetKind,
    /// The block device under the target, when there is one (not for tmpfs, overlayfs, NFS...).
    pub device: Option<BlockDevice>,
    /// Filesystem type of a file target (`ext4`, `tmpfs`, ...), or `""` for block devices.
    pub fstype: String,
    /// What the target's probes probably measure instead of a disk, if anything.
    pub cache: Option<Cache>,
}

impl TargetFacts {
    /// The warning a target at `path` with these facts deserves, if any.
    pub(crate) fn warning(&self, path: &Path) -> Option<String> {
        self.cache
            .map(|cache| cache.warning(path, &self.fstype, self.device.as_ref()))
    }
}

/// What a target's probes probably measure instead of the disk under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cache {
    /// Memory: a file on tmpfs or ramfs.
    Memory,
    /// The page cache: a loop device without direct I/O (its `loop/dio` is 0) reads and writes its
    /// backing file through the page cache, so a probe under it mostly measures memory.
    PageCache,
    /// ZFS before 2.3 accepts O_DIRECT but serves reads from its ARC (memory).
    ZfsArc,
}

impl Cache {
    /// `memory`, `page_cache` or `zfs_arc` (the `cache` label of `diskprobe_target_info`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Cache::Memory => "memory",
            Cache::PageCache => "page_cache",
            Cache::ZfsArc => "zfs_arc",
        }
    }

    pub(crate) fn warning(self, path: &Path, fstype: &str, device: Option<&BlockDevice>) -> String {
        let path = path.display();
        match self {
            Cache::Memory => format!("{path} is on {fstype}: probes measure memory, not a disk"),
            Cache::PageCache => format!(
                "{path} is on {}, a loop device without direct I/O: probes measure the page cache of its backing file, not a disk (losetup --direct-io=on avoids it)",
                device.map_or("a loop device", |d| d.kname.as_str())
            ),
            Cache::ZfsArc => format!(
                "{path} is on ZFS before 2.3, which serves O_DIRECT reads from its ARC: probes measure memory, not the disks"
            ),
        }
    }
}

/// What a target on a filesystem of type `fstype` (`""` for a block device) over `device`
/// probably measures instead of a disk.
pub(crate) fn cache_of(sysfs: &Path, fstype: &str, device: Option<&BlockDevice>) -> Option<Cache> {
    match fstype {
        "tmpfs" | "ramfs" => Some(Cache::Memory),
        "zfs" => zfs_version(sysfs)
            .is_some_and(|v| v < (2, 3))
            .then_some(Cache::ZfsArc),
        _ => device
            .filter(|d| loop_without_direct_io(sysfs, d))
            .map(|_| Cache::PageCache),
    }
}

/// Whether `device` (or the disk of a partition) is a loop device whose `loop/dio` is 0.
fn loop_without_direct_io(sysfs: &Path, device: &BlockDevice) -> bool {
    blockdev::sysfs::loop_without_direct_io(sysfs, device.major, device.minor)
}

/// The loaded ZFS module's `(major, minor)` version, from `<sysfs>/module/zfs/version`
/// (`2.1.5-1ubuntu6`).
fn zfs_version(sysfs: &Path) -> Option<(u32, u32)> {
    parse_zfs_version(&fs::read_to_string(sysfs.join("module/zfs/version")).ok()?)
}

fn parse_zfs_version(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The facts of the target at `path` (following a symbolic link to a block device). A file that
/// does not exist yet has the facts of its directory.
pub fn facts(path: &Path, procfs: &Path, sysfs: &Path) -> io::Result<TargetFacts> {
    let (path, meta) = match fs::metadata(path) {
        Ok(meta) if meta.file_type().is_block_device() => {
            let (major, minor) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
            let device = resolve_device(sysfs, major, minor);
            return Ok(TargetFacts {
                kind: TargetKind::BlockDevice,
                cache: cache_of(sysfs, "", Some(&device)),
                device: Some(device),
                fstype: String::new(),
            });
        }
        Ok(meta) => (path, meta),
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            let dir = parent_dir(path);
            (dir, fs::metadata(dir)?)
        }
        Err(err) => return Err(err),
    };
    let device = file_device(procfs, sysfs, path, meta.dev());
    let fstype = statfs_type(path)?;
    Ok(TargetFacts {
        kind: TargetKind::File,
        cache: cache_of(sysfs, &fstype, device.as_ref()),
        device,
        fstype,
    })
}

/// The directory a file at `path` is (to be) created in.
pub(super) fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The block device under a file at `path` whose `st_dev` is `dev`, when sysfs knows it.
pub(super) fn file_device(
    procfs: &Path,
    sysfs: &Path,
    path: &Path,
    dev: u64,
) -> Option<BlockDevice> {
    let (major, minor) = backing_device(procfs, path, dev)?;
    blockdev::by_dev(sysfs, major, minor)
}

/// The block device (`major`, `minor`) under `path`, whose `st_dev` is `dev`. Filesystems such as
/// btrfs give their files an anonymous device (major 0, and not even the one mountinfo shows for
/// the mount); for those the source of the mount the path is on (found by its mount ID) names the
/// block device (for a btrfs on several devices, the one it was mounted by). `None` for
/// filesystems without a block device (tmpfs, overlayfs, NFS, FUSE).
pub(crate) fn backing_device(procfs: &Path, path: &Path, dev: u64) -> Option<(u32, u32)> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    if major != 0 {
        return Some((major, minor));
    }
    let mount_id = sys::mount_id(path)?;
    let mountinfo = fs::read_to_string(procfs.join("self/mountinfo")).ok()?;
    let source = mount_source(&mountinfo, mount_id)?;
    if !source.starts_with("/dev/") {
        return None;
    }
    let meta = fs::metadata(&source).ok()?;
    let rdev = meta.file_type().is_block_device().then(|| meta.rdev())?;
    Some((libc::major(rdev), libc::minor(rdev)))
}

/// The source of the mount with ID `mount_id` in a mountinfo text (unescaped).
pub(super) fn mount_source(mountinfo: &str, mount_id: u64) -> Option<String> {
    mountinfo::parse(mountinfo)
        .into_iter()
        .find(|m| m.id == mount_id)
        .map(|m| m.source)
}

/// Filesystem type name from a statfs magic number.
fn fstype_name(magic: i64) -> String {
    match magic {
        0x0102_1994 => "tmpfs",
        0x794c_7630 => "overlay",
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x2FC1_2FC1 => "zfs",
        0xF2F5_2010 => "f2fs",
        0x6969 => "nfs",
        0xFF53_4D42 => "cifs",
        0x6573_5546 => "fuse",
        0x4d44 => "vfat",
        0x858458f6 => "ramfs",
        other => return format!("0x{other:x}"),
    }
    .to_owned()
}

/// The filesystem type of `path`, by its statfs magic number.
pub(super) fn statfs_type(path: &Path) -> io::Result<String> {
    sys::statfs_magic(path).map(fstype_name)
}

/// statx DIO alignment `(memory, offset)`, when the kernel and filesystem report it.
pub(super) fn dio_alignment(file: &File) -> Option<(u64, u64)> {
    sys::dio_alignment(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_devices() {
        let text = "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n\
                    30 22 0:25 / /dev/shm rw - tmpfs tmpfs rw\n\
                    41 22 0:48 /@home /home rw,relatime shared:9 - btrfs /dev/sda2 rw,subvol=/@home\n";
        assert_eq!(mount_source(text, 41).as_deref(), Some("/dev/sda2"));
        assert_eq!(mount_source(text, 30).as_deref(), Some("tmpfs"));
        assert_eq!(mount_source(text, 99), None);
        // Sources are unescaped as the kernel escapes them (a space is \040).
        let escaped = "50 22 8:17 / /mnt/a\\040b rw - ext4 /dev/disk/by-label/my\\040disk rw\n";
        assert_eq!(
            mount_source(escaped, 50).as_deref(),
            Some("/dev/disk/by-label/my disk")
        );
    }

    #[test]
    fn caches_are_recognised_from_sysfs() {
        let sysfs = tempfile::tempdir().unwrap();
        let loop0 = BlockDevice {
            kname: "loop0".into(),
            major: 7,
            minor: 0,
            ..BlockDevice::default()
        };
        let dir = sysfs.path().join("dev/block/7:0/loop");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("dio"), "0\n").unwrap();
        assert_eq!(
            cache_of(sysfs.path(), "", Some(&loop0)),
            Some(Cache::PageCache)
        );
        assert_eq!(
            cache_of(sysfs.path(), "ext4", Some(&loop0)),
            Some(Cache::PageCache),
            "a filesystem on the loop device"
        );
        fs::write(dir.join("dio"), "1\n").unwrap();
        assert_eq!(cache_of(sysfs.path(), "", Some(&loop0)), None);
        assert_eq!(cache_of(sysfs.path(), "tmpfs", None), Some(Cache::Memory));
        // ZFS: before 2.3 its ARC answers O_DIRECT reads; from 2.3 on they reach the disks.
        assert_eq!(cache_of(sysfs.path(), "zfs", None), None, "version unknown");
        let module = sysfs.path().join("module/zfs");
        fs::create_dir_all(&module).unwrap();
        for (version, cache) in [
            ("2.1.5-1ubuntu6~22.04.1\n", Some(Cache::ZfsArc)),
            ("2.2.99\n", Some(Cache::ZfsArc)),
            ("2.3.0-1\n", None),
            ("3.0.1\n", None),
        ] {
            fs::write(module.join("version"), version).unwrap();
            assert_eq!(cache_of(sysfs.path(), "zfs", None), cache, "{version}");
        }
    }
}
