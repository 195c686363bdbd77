//! Probe targets: opening block devices and probe files for direct I/O, preflight checks
//! (O_DIRECT support, alignment, tmpfs/overlayfs), the kernel device under a target, and the write
//! safety rules for block devices.
//!
//! Read probes open the target read-only. A probe file that does not exist is created at the
//! requested size and filled with random data before it is ever read; it is marked as ours with the
//! extended attribute [`OWNER_XATTR`] and reused across restarts while it is intact (same size, no
//! holes, filling finished). Writes to a file are allowed only when it carries that mark (or was
//! created by this process). Writes to a block device need the caller's explicit opt-in and are
//! refused when the device or one of its partitions is mounted or has holders; the device is then
//! opened with `O_EXCL`, which the kernel refuses while anyone else has claimed it.

use crate::probe::engine::buffer::AlignedBuf;
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Extended attribute that marks a probe file created by diskprobe_exporter.
pub const OWNER_XATTR: &str = "user.diskprobe_exporter";

/// `BLKGETSIZE64` = `_IOR(0x12, 114, size_t)`.
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc64"
))]
const BLKGETSIZE64: libc::Ioctl = 0x4008_1272;
/// `BLKGETSIZE64` = `_IOR(0x12, 114, size_t)`.
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc64"
)))]
const BLKGETSIZE64: libc::Ioctl = 0x8008_1272;

/// Why a target cannot be probed. Messages name the path and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A region offset was given for a file target; probe files are probed from their start.
    #[error(
        "{path}: offset {offset} applies to block devices only; a probe file is probed from its start (set size instead)"
    )]
    OffsetOnFile {
        /// The target.
        path: PathBuf,
        /// The offset given.
        offset: u64,
    },
    /// The path is a symbolic link to something other than a block device.
    #[error(
        "{path}: is a symbolic link; probe files must be regular files at the configured path (symbolic links are only followed to block devices)"
    )]
    Symlink {
        /// The target.
        path: PathBuf,
    },
    /// An operating-system call failed.
    #[error("{path}: {what}: {source}")]
    Io {
        /// The target.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The filesystem or device refuses O_DIRECT.
    #[error("{path}: O_DIRECT is not supported here (filesystem {fstype}); probes need direct I/O")]
    NoDirectIo {
        /// The target.
        path: PathBuf,
        /// The filesystem type, when known.
        fstype: String,
    },
    /// Not a regular file or block device.
    #[error("{path}: not a regular file or block device")]
    Kind {
        /// The target.
        path: PathBuf,
    },
    /// The target is smaller than what was asked for.
    #[error("{path}: target is {available} bytes, smaller than the {wanted} bytes requested")]
    TooSmall {
        /// The target.
        path: PathBuf,
        /// Bytes available from the region start.
        available: u64,
        /// Bytes requested.
        wanted: u64,
    },
    /// Writing was refused by a safety rule.
    #[error("{path}: refusing to write: {reason}")]
    WriteRefused {
        /// The target.
        path: PathBuf,
        /// Which rule.
        reason: String,
    },
    /// Size, offset or block size violate the direct-I/O alignment.
    #[error("{path}: {what} {value} is not a multiple of the direct-I/O alignment {align}")]
    Alignment {
        /// The target.
        path: PathBuf,
        /// Which quantity.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The alignment required.
        align: u64,
    },
}

/// What kind of object a target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// A block device, probed directly.
    BlockDevice,
    /// A regular file on a filesystem.
    File,
}

impl TargetKind {
    /// `block_device` or `file` (the `kind` label).
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::BlockDevice => "block_device",
            TargetKind::File => "file",
        }
    }
}

/// The kernel block device under a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceId {
    /// Kernel name (`sda1`, `loop3`, `nvme0n1`), as in `/proc/diskstats`.
    pub name: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// For a partition, the kernel name of its disk.
    pub parent: Option<String>,
}

/// Size of a probe file created without an explicit size.
pub const DEFAULT_FILE_SIZE: u64 = 256 << 20;

/// How to open a target.
#[derive(Debug, Clone)]
pub struct TargetOptions {
    /// Region length (files: the probe file size). Block devices default to the rest of the
    /// device after `offset`; a missing file is created at [`DEFAULT_FILE_SIZE`].
    pub size: Option<u64>,
    /// Region start in bytes (block devices; files always start at 0).
    pub offset: u64,
    /// Open for writing (write probes). Needs the safety rules to pass.
    pub write: bool,
    /// Writes to a block device are allowed: a separate opt-in on top of `write`, checked here
    /// so that every caller goes through the same gate.
    pub device_writes: bool,
    /// Root of procfs (`/proc`).
    pub procfs: PathBuf,
    /// Root of sysfs (`/sys`).
    pub sysfs: PathBuf,
}

/// A target opened with O_DIRECT, ready for an engine.
#[derive(Debug)]
pub struct OpenTarget {
    /// The path given.
    pub path: PathBuf,
    file: File,
    /// Block device or file.
    pub kind: TargetKind,
    /// First byte of the probe region.
    pub region_offset: u64,
    /// Length of the probe region in bytes.
    pub region_len: u64,
    /// Required alignment of offsets and lengths for direct I/O.
    pub offset_align: u64,
    /// Required alignment of memory buffers for direct I/O.
    pub mem_align: u64,
    /// The block device holding the target, when there is one (not for tmpfs, overlayfs, ...).
    pub device: Option<DeviceId>,
    /// Filesystem type of a file target (`ext4`, `tmpfs`, ...), or `""` for block devices.
    pub fstype: String,
    /// What the probes probably measure instead of a disk (see [`Cache`]), if anything.
    pub cache: Option<Cache>,
    /// Warnings found by the preflight checks (a cache instead of a disk, overlayfs).
    pub warnings: Vec<String>,
    /// Whether the target was opened for writing.
    pub writable: bool,
    /// Whether the probe file was created or refilled by this open.
    pub filled: bool,
}

impl OpenTarget {
    /// The open file descriptor.
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }
}

/// Opens `path` for probing. See the module documentation for the rules.
pub fn open(path: &Path, opts: &TargetOptions) -> Result<OpenTarget, TargetError> {
    open_reporting(path, opts, &|| true)
}

/// [`open`], calling `progress` after each chunk written while a probe file is filled, so that a
/// caller can tell a long fill from a stalled one; the fill stops (an error) when it returns
/// `false`.
pub fn open_reporting(
    path: &Path,
    opts: &TargetOptions,
    progress: &dyn Fn() -> bool,
) -> Result<OpenTarget, TargetError> {
    let io_err = |what: &'static str| {
        move |source: io::Error| TargetError::Io {
            path: path.to_owned(),
            what,
            source,
        }
    };
    // Never follow a symbolic link into another file: only links to block devices (such as
    // /dev/disk/by-id/...) are followed, and files are opened with O_NOFOLLOW.
    if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return match fs::metadata(path) {
            Ok(meta) if meta.file_type().is_block_device() => open_block_device(path, &meta, opts),
            _ => Err(TargetError::Symlink {
                path: path.to_owned(),
            }),
        };
    }
    match fs::metadata(path) {
        Ok(meta) if meta.file_type().is_block_device() => open_block_device(path, &meta, opts),
        Ok(meta) if meta.is_file() => open_file(path, Some(meta), opts, progress),
        Ok(_) => Err(TargetError::Kind {
            path: path.to_owned(),
        }),
        Err(err) if err.kind() == io::ErrorKind::NotFound => open_file(path, None, opts, progress),
        Err(err) => Err(io_err("stat")(err)),
    }
}

fn open_direct(
    path: &Path,
    write: bool,
    excl: bool,
    nofollow: bool,
    fstype: &str,
) -> Result<File, TargetError> {
    let mut options = OpenOptions::new();
    options.read(true).write(write);
    let mut flags = libc::O_DIRECT | libc::O_CLOEXEC;
    if excl {
        flags |= libc::O_EXCL;
    }
    // Files must not be swapped for a link between the checks and the open.
    if nofollow {
        flags |= libc::O_NOFOLLOW;
    }
    options.custom_flags(flags);
    options.open(path).map_err(|err| {
        if err.raw_os_error() == Some(libc::ELOOP) {
            TargetError::Symlink {
                path: path.to_owned(),
            }
        } else if err.raw_os_error() == Some(libc::EINVAL) {
            TargetError::NoDirectIo {
                path: path.to_owned(),
                fstype: fstype.to_owned(),
            }
        } else if excl && err.raw_os_error() == Some(libc::EBUSY) {
            TargetError::WriteRefused {
                path: path.to_owned(),
                reason: "the device is in use (O_EXCL open failed with EBUSY)".to_owned(),
            }
        } else {
            TargetError::Io {
                path: path.to_owned(),
                what: "open with O_DIRECT",
                source: err,
            }
        }
    })
}

/// Turns on O_DIRECT for a descriptor opened without it (a file just created with `O_EXCL`,
/// which must not be reopened by path); a filesystem that refuses it is [`TargetError::NoDirectIo`].
fn set_direct(path: &Path, file: &File, fstype: &str) -> Result<(), TargetError> {
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL on an open descriptor takes no argument and only returns its flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: F_SETFL on an open descriptor with an int argument changes only its status flags.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_DIRECT) } < 0 {
        let err = io::Error::last_os_error();
        return Err(if err.raw_os_error() == Some(libc::EINVAL) {
            TargetError::NoDirectIo {
                path: path.to_owned(),
                fstype: fstype.to_owned(),
            }
        } else {
            TargetError::Io {
                path: path.to_owned(),
                what: "enable O_DIRECT",
                source: err,
            }
        });
    }
    Ok(())
}

fn open_block_device(
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
                reason: "writes to a block device need their own opt-in (allow_device_writes = true; --allow-writes in one-shot mode)".to_owned(),
            });
        }
        check_block_write_safety(path, major, minor, opts)?;
    }
    let file = open_direct(path, opts.write, opts.write, false, "")?;
    // The checks above were made on the device the path named then; the descriptor must be that
    // device (a /dev/disk/by-* link can move in between).
    let opened = fstat(path, &file)?;
    if !opened.file_type().is_block_device() || opened.rdev() != meta.rdev() {
        return Err(TargetError::Io {
            path: path.to_owned(),
            what: "open",
            source: io::Error::other(
                "the path names another device than the one checked a moment before",
            ),
        });
    }
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points to a live local.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) };
    if rc != 0 {
        return Err(TargetError::Io {
            path: path.to_owned(),
            what: "BLKGETSIZE64",
            source: io::Error::last_os_error(),
        });
    }
    let mut lbs: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which points to a live local.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            libc::BLKSSZGET,
            &mut lbs as *mut libc::c_int,
        )
    };
    let align = if rc == 0 && lbs > 0 { lbs as u64 } else { 512 };
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

fn check_aligned(
    path: &Path,
    what: &'static str,
    value: u64,
    align: u64,
) -> Result<(), TargetError> {
    if align > 0 && !value.is_multiple_of(align) {
        return Err(TargetError::Alignment {
            path: path.to_owned(),
            what,
            value,
            align,
        });
    }
    Ok(())
}

/// The kernel name of `major:minor` and, for a partition, its disk, from `<sysfs>/dev/block`
/// ([`crate::block_info::locate`]); `MAJ:MIN` when sysfs does not know the device.
pub fn resolve_device(sysfs: &Path, major: u32, minor: u32) -> DeviceId {
    device_id(crate::block_info::locate(sysfs, major, minor), major, minor)
}

fn device_id(located: crate::block_info::Location, major: u32, minor: u32) -> DeviceId {
    DeviceId {
        name: located.name.unwrap_or_else(|| format!("{major}:{minor}")),
        major,
        minor,
        parent: located.parent,
    }
}

/// What a target is, as a stat of its path tells (without opening it): its kind, the block device
/// under it and the filesystem type. The scheduler reads these before every cycle (so that a
/// target's series carry their final `device` label from the start); an open finds the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetFacts {
    /// Block device or file (a file that does not exist yet is a probe file to be created).
    pub kind: TargetKind,
    /// The block device under the target, when there is one (not for tmpfs, overlayfs, NFS...).
    pub device: Option<DeviceId>,
    /// Filesystem type of a file target (`ext4`, `tmpfs`, ...), or `""` for block devices.
    pub fstype: String,
    /// What the target's probes probably measure instead of a disk, if anything.
    pub cache: Option<Cache>,
}

impl TargetFacts {
    /// The warning a target at `path` with these facts deserves, if any.
    pub fn warning(&self, path: &Path) -> Option<String> {
        self.cache
            .map(|cache| cache.warning(path, &self.fstype, self.device.as_ref()))
    }
}

/// What a target's probes probably measure instead of the disk under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    pub fn as_str(self) -> &'static str {
        match self {
            Cache::Memory => "memory",
            Cache::PageCache => "page_cache",
            Cache::ZfsArc => "zfs_arc",
        }
    }

    fn warning(self, path: &Path, fstype: &str, device: Option<&DeviceId>) -> String {
        let path = path.display();
        match self {
            Cache::Memory => format!("{path} is on {fstype}: probes measure memory, not a disk"),
            Cache::PageCache => format!(
                "{path} is on {}, a loop device without direct I/O: probes measure the page cache of its backing file, not a disk (losetup --direct-io=on avoids it)",
                device.map_or("a loop device", |d| d.name.as_str())
            ),
            Cache::ZfsArc => format!(
                "{path} is on ZFS before 2.3, which serves O_DIRECT reads from its ARC: probes measure memory, not the disks"
            ),
        }
    }
}

/// What a target on a filesystem of type `fstype` (`""` for a block device) over `device`
/// probably measures instead of a disk.
pub fn cache_of(sysfs: &Path, fstype: &str, device: Option<&DeviceId>) -> Option<Cache> {
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
fn loop_without_direct_io(sysfs: &Path, device: &DeviceId) -> bool {
    let disk = crate::block_info::locate(sysfs, device.major, device.minor).disk_dir;
    fs::read_to_string(disk.join("loop/dio")).is_ok_and(|dio| dio.trim() == "0")
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
fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The block device under a file at `path` whose `st_dev` is `dev`, when sysfs knows it.
fn file_device(procfs: &Path, sysfs: &Path, path: &Path, dev: u64) -> Option<DeviceId> {
    let (major, minor) = backing_device(procfs, path, dev)?;
    let located = crate::block_info::locate(sysfs, major, minor);
    located
        .name
        .is_some()
        .then(|| device_id(located, major, minor))
}

/// `MAJ:MIN` of the partitions of a disk, from its sysfs directory; an error when that directory,
/// or a partition's `dev` in it, cannot be read (writes are then refused: the check cannot be
/// made).
fn partitions(sysfs: &Path, major: u32, minor: u32) -> io::Result<Vec<String>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(crate::block_info::device_dir(sysfs, major, minor))? {
        let dir = entry?.path();
        if dir.join("partition").exists() {
            found.push(fs::read_to_string(dir.join("dev"))?.trim().to_owned());
        }
    }
    Ok(found)
}

/// The block device (`major`, `minor`) under `path`, whose `st_dev` is `dev`. Filesystems such as
/// btrfs give their files an anonymous device (major 0, and not even the one mountinfo shows for
/// the mount); for those the source of the mount the path is on (found by its mount ID) names the
/// block device (for a btrfs on several devices, the one it was mounted by). `None` for
/// filesystems without a block device (tmpfs, overlayfs, NFS, FUSE).
pub fn backing_device(procfs: &Path, path: &Path, dev: u64) -> Option<(u32, u32)> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    if major != 0 {
        return Some((major, minor));
    }
    let mount_id = mount_id(path)?;
    let mountinfo = fs::read_to_string(procfs.join("self/mountinfo")).ok()?;
    let source = mount_source(&mountinfo, mount_id)?;
    if !source.starts_with("/dev/") {
        return None;
    }
    let meta = fs::metadata(source).ok()?;
    let rdev = meta.file_type().is_block_device().then(|| meta.rdev())?;
    Some((libc::major(rdev), libc::minor(rdev)))
}

/// The ID of the mount `path` is on (`statx` `STATX_MNT_ID`, Linux 5.8), as in mountinfo.
fn mount_id(path: &Path) -> Option<u64> {
    let path = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statx is a valid value of this plain C struct.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `stx` is a live, writable statx.
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            path.as_ptr(),
            0,
            libc::STATX_MNT_ID,
            &mut stx,
        )
    };
    (rc == 0 && stx.stx_mask & libc::STATX_MNT_ID != 0).then_some(stx.stx_mnt_id)
}

/// The source of the mount with ID `mount_id` in a mountinfo text.
fn mount_source(mountinfo: &str, mount_id: u64) -> Option<&str> {
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        let id = mount.split_whitespace().next()?.parse::<u64>().ok()?;
        (id == mount_id).then(|| fs.split_whitespace().nth(1))?
    })
}

/// Devices (`MAJ:MIN`) that appear as a mount source in a mountinfo text.
pub fn mounted_devices(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2))
        .map(str::to_owned)
        .collect()
}

/// Whether `<sysfs>/dev/block/MAJ:MIN/holders` lists anything; an error when it cannot be read.
fn has_holders(sysfs: &Path, dev: &str) -> io::Result<bool> {
    Ok(
        fs::read_dir(sysfs.join(format!("dev/block/{dev}/holders")))?
            .next()
            .is_some(),
    )
}

fn check_block_write_safety(
    path: &Path,
    major: u32,
    minor: u32,
    opts: &TargetOptions,
) -> Result<(), TargetError> {
    let refuse = |reason: String| TargetError::WriteRefused {
        path: path.to_owned(),
        reason,
    };
    let mountinfo_path = opts.procfs.join("self/mountinfo");
    let mountinfo = fs::read_to_string(&mountinfo_path).map_err(|err| {
        refuse(format!(
            "cannot read {} to check for mounts: {err}",
            mountinfo_path.display()
        ))
    })?;
    let mounted = mounted_devices(&mountinfo);
    let me = format!("{major}:{minor}");
    let unreadable = |err: io::Error| {
        refuse(format!(
            "cannot read {} to check for partitions and holders: {err}",
            opts.sysfs.display()
        ))
    };
    let mut devices = vec![me.clone()];
    devices.extend(partitions(&opts.sysfs, major, minor).map_err(unreadable)?);
    for dev in &devices {
        let what = if *dev == me {
            "the device"
        } else {
            "partition"
        };
        if mounted.iter().any(|m| m == dev) {
            return Err(refuse(format!("{what} {dev} is mounted")));
        }
        if has_holders(&opts.sysfs, dev).map_err(unreadable)? {
            return Err(refuse(format!(
                "{what} {dev} has holders (device-mapper, md, ...)"
            )));
        }
    }
    Ok(())
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

fn statfs_type(path: &Path) -> io::Result<String> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `buf` a live, writable statfs.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut buf) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)]
    Ok(fstype_name(buf.f_type as i64))
}

/// statx DIO alignment `(memory, offset)`, when the kernel and filesystem report it.
fn dio_alignment(file: &File) -> Option<(u64, u64)> {
    // SAFETY: an all-zero statx is a valid value of this plain C struct.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: the fd is open, the path is an empty NUL-terminated string used with
    // AT_EMPTY_PATH, and `stx` is a live, writable statx.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 || stx.stx_dio_offset_align == 0 {
        return None;
    }
    Some((
        u64::from(stx.stx_dio_mem_align),
        u64::from(stx.stx_dio_offset_align),
    ))
}

fn get_xattr(file: &File) -> Option<Vec<u8>> {
    let name = CString::new(OWNER_XATTR).ok()?;
    let mut buf = [0u8; 128];
    // SAFETY: the fd is open, `name` is NUL-terminated and `buf` is writable for its length.
    let n = unsafe {
        libc::fgetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return None;
    }
    Some(buf[..n as usize].to_vec())
}

fn set_xattr(file: &File, value: &[u8]) -> io::Result<()> {
    let name = CString::new(OWNER_XATTR).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: the fd is open, `name` is NUL-terminated and `value` is readable for its length.
    let rc = unsafe {
        libc::fsetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `fstat` of an open target, as a [`TargetError`].
fn fstat(path: &Path, file: &File) -> Result<fs::Metadata, TargetError> {
    file.metadata().map_err(|source| TargetError::Io {
        path: path.to_owned(),
        what: "stat",
        source,
    })
}

/// Fails unless `file` is the file `checked` describes (device and inode).
fn same_file(path: &Path, checked: &fs::Metadata, file: &File) -> Result<(), TargetError> {
    let meta = fstat(path, file)?;
    if (meta.dev(), meta.ino()) != (checked.dev(), checked.ino()) {
        return Err(TargetError::Io {
            path: path.to_owned(),
            what: "open",
            source: io::Error::other(
                "the file was replaced between the ownership check and the open",
            ),
        });
    }
    Ok(())
}

/// Fails unless the file behind `file` carries the mark of a probe file filled to `size`: the one
/// just filled through its path, not another put in its place.
fn check_filled(path: &Path, file: &File, size: u64) -> Result<(), TargetError> {
    if get_xattr(file) == Some(complete_marker(size)) {
        return Ok(());
    }
    Err(TargetError::Io {
        path: path.to_owned(),
        what: "fill the probe file",
        source: io::Error::other("the file was replaced while it was being filled"),
    })
}

fn complete_marker(size: u64) -> Vec<u8> {
    format!("probe-file v1 size={size}").into_bytes()
}

/// The mark of a fill in progress: names the size being filled, so that a fill that was stopped
/// is finished at that size (not at the size it had reached).
fn filling_marker(size: u64) -> Vec<u8> {
    format!("filling size={size}").into_bytes()
}

/// The size a mark names (finished or in progress), if any; marks of an older version name none.
fn marked_size(mark: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(mark).ok()?;
    let size = text
        .strip_prefix("probe-file v1 size=")
        .or_else(|| text.strip_prefix("filling size="))?;
    size.parse().ok().filter(|&n| n > 0)
}

/// Bytes written per system call while filling a probe file; progress is reported after each.
const FILL_CHUNK: usize = 1 << 20;

/// Creates (`existing` is `None`) or refills the probe file at `size` bytes of random data and
/// returns whether it carries our mark, with the filled file's metadata (to check that a later
/// open finds the same file). A refill only proceeds on the file `existing` describes (the one
/// whose mark was checked), not on another put at the path since. The data is written with
/// O_DIRECT: a fill neither floods the page cache nor leaves the whole file dirty for one final
/// `fsync`. O_DIRECT support and the size's alignment are checked before the file is truncated;
/// a file created here that fails them is removed again. `progress` is called after every chunk
/// and stops the fill when it returns `false`; the file then keeps a mark naming `size`, at which
/// the next open finishes it.
fn fill_probe_file(
    path: &Path,
    size: u64,
    existing: Option<&fs::Metadata>,
    fstype: &str,
    progress: &dyn Fn() -> bool,
) -> Result<(bool, fs::Metadata), TargetError> {
    let io_err = |what: &'static str| {
        move |source: io::Error| TargetError::Io {
            path: path.to_owned(),
            what,
            source,
        }
    };
    let mark_filling = |file: &File| match set_xattr(file, &filling_marker(size)) {
        Ok(()) => true,
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "cannot mark the probe file as ours (no user xattrs); write probes will refuse it after a restart");
            false
        }
    };
    // One descriptor does everything: the fill never reopens the path. A new file is marked at
    // once; an existing one (already ours) only once the checks below have passed.
    let (file, marked_at_creation) = match existing {
        None => {
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
                .map_err(io_err("create the probe file"))?;
            // Ours from the start: a fill that fails below leaves a file marked as unfinished.
            let marked = mark_filling(&file);
            (file, Some(marked))
        }
        Some(checked) => {
            let file = open_direct(path, true, false, true, fstype)?;
            same_file(path, checked, &file)?;
            (file, None)
        }
    };
    // A new file gets O_DIRECT here; an existing one was opened with it.
    let preflight = || {
        if marked_at_creation.is_some() {
            set_direct(path, &file, fstype)?;
        }
        let (mem_align, offset_align) = dio_alignment(&file).unwrap_or((512, 512));
        check_aligned(path, "file size", size, offset_align)?;
        Ok(mem_align)
    };
    let mem_align = match preflight() {
        Ok(mem_align) => mem_align,
        Err(err) => {
            if marked_at_creation.is_some() {
                // Nothing was written: remove the empty file this call created (if the path still
                // names it), so that the mistake leaves nothing behind.
                if let (Ok(created), Ok(now)) = (file.metadata(), fs::symlink_metadata(path))
                    && (now.dev(), now.ino()) == (created.dev(), created.ino())
                {
                    let _ = fs::remove_file(path);
                }
            }
            return Err(err);
        }
    };
    let marked = marked_at_creation.unwrap_or_else(|| mark_filling(&file));
    file.set_len(0).map_err(io_err("truncate the probe file"))?;
    let mut rng = SmallRng::from_os_rng();
    let mut buf = AlignedBuf::new(FILL_CHUNK, mem_align as usize, &mut rng).map_err(|err| {
        TargetError::Io {
            path: path.to_owned(),
            what: "allocate the fill buffer",
            source: io::Error::other(err.to_string()),
        }
    })?;
    let mut offset = 0;
    while offset < size {
        let n = (size - offset).min(FILL_CHUNK as u64) as usize;
        let chunk = &mut buf.as_mut_slice()[..n];
        rng.fill_bytes(chunk);
        file.write_all_at(chunk, offset)
            .map_err(io_err("fill the probe file"))?;
        offset += n as u64;
        if !progress() {
            return Err(TargetError::Io {
                path: path.to_owned(),
                what: "fill the probe file",
                source: io::Error::new(io::ErrorKind::Interrupted, "stopped"),
            });
        }
    }
    file.sync_all().map_err(io_err("sync the probe file"))?;
    if marked {
        set_xattr(&file, &complete_marker(size)).map_err(io_err("mark the probe file"))?;
    }
    Ok((marked, fstat(path, &file)?))
}

#[allow(clippy::too_many_lines)] // split with the module (issue 14, step 7)
fn open_file(
    path: &Path,
    meta: Option<fs::Metadata>,
    opts: &TargetOptions,
    progress: &dyn Fn() -> bool,
) -> Result<OpenTarget, TargetError> {
    if opts.offset != 0 {
        if meta.is_none() {
            // An offset means a block device was meant: no probe file is created in its place.
            return Err(TargetError::Io {
                path: path.to_owned(),
                what: "open",
                source: io::Error::new(
                    io::ErrorKind::NotFound,
                    "no such block device (with an offset set, no probe file is created)",
                ),
            });
        }
        return Err(TargetError::OffsetOnFile {
            path: path.to_owned(),
            offset: opts.offset,
        });
    }
    let dir = parent_dir(path);
    let fstype =
        statfs_type(if meta.is_some() { path } else { dir }).map_err(|source| TargetError::Io {
            path: path.to_owned(),
            what: "statfs",
            source,
        })?;
    let mut warnings = Vec::new();
    if fstype == "overlay" {
        warnings.push(format!(
            "{} is on {fstype}: probes measure the container layer, not a disk",
            path.display()
        ));
    }

    let mut filled = false;
    // The descriptor to probe, the size of its region and its device number.
    let (file, size, dev) = match meta {
        None => {
            let size = opts.size.unwrap_or(DEFAULT_FILE_SIZE);
            tracing::info!(path = %path.display(), size, "creating the probe file and filling it with random data");
            let (marked, created) = fill_probe_file(path, size, None, &fstype, progress)?;
            filled = true;
            // A read probe gets a read-only descriptor of the file just filled, as it would for
            // one found at start-up.
            let file = open_direct(path, opts.write, false, true, &fstype)?;
            same_file(path, &created, &file)?;
            if marked {
                check_filled(path, &file, size)?;
            }
            (file, size, created.dev())
        }
        Some(_) => {
            // The owner mark is read through a descriptor of the file that will be probed, opened
            // read-only (opening someone else's file for writing is not harmless: it breaks their
            // leases); a write descriptor is opened only once the file is known to be ours, and
            // must be the same file.
            let probe = open_direct(path, false, false, true, &fstype)?;
            let meta = fstat(path, &probe)?;
            let marker = get_xattr(&probe);
            // Without a configured size, a probe file keeps the size its mark names (that of a
            // finished fill, or of one that was stopped); a foreign file is probed whole.
            let wanted = opts.size.unwrap_or_else(|| match &marker {
                Some(m) => marked_size(m).unwrap_or(DEFAULT_FILE_SIZE),
                None => meta.len(),
            });
            match marker {
                Some(m) => {
                    let intact = m == complete_marker(meta.len())
                        && meta.len() == wanted
                        && meta.blocks().saturating_mul(512) >= meta.len();
                    if !intact {
                        tracing::info!(path = %path.display(), size = wanted, "probe file is incomplete or has another size; refilling it with random data");
                        fill_probe_file(path, wanted, Some(&meta), &fstype, progress)?;
                        filled = true;
                    }
                }
                None => {
                    if opts.write {
                        return Err(TargetError::WriteRefused {
                            path: path.to_owned(),
                            reason: format!(
                                "the file was not created by diskprobe_exporter (no {OWNER_XATTR} attribute); write probes only use probe files they created"
                            ),
                        });
                    }
                    if wanted > meta.len() {
                        return Err(TargetError::TooSmall {
                            path: path.to_owned(),
                            available: meta.len(),
                            wanted,
                        });
                    }
                }
            }
            let file = if opts.write {
                let file = open_direct(path, true, false, true, &fstype)?;
                same_file(path, &meta, &file)?;
                file
            } else {
                probe
            };
            if filled {
                check_filled(path, &file, wanted)?;
            }
            (file, wanted, meta.dev())
        }
    };
    let (mem_align, offset_align) = dio_alignment(&file).unwrap_or((512, 512));
    if size == 0 {
        return Err(TargetError::TooSmall {
            path: path.to_owned(),
            available: 0,
            wanted: 1,
        });
    }
    check_aligned(path, "file size", size, offset_align)?;
    // Files on a filesystem without a block device (tmpfs, overlayfs) have none.
    let device = file_device(&opts.procfs, &opts.sysfs, path, dev);
    let cache = cache_of(&opts.sysfs, &fstype, device.as_ref());
    if let Some(c) = cache {
        warnings.push(c.warning(path, &fstype, device.as_ref()));
    }
    Ok(OpenTarget {
        path: path.to_owned(),
        file,
        kind: TargetKind::File,
        region_offset: 0,
        region_len: size,
        offset_align,
        mem_align,
        device,
        fstype,
        cache,
        warnings,
        writable: opts.write,
        filled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read-only options for a file of `size` bytes, with the machine's procfs and sysfs.
    fn file_opts(size: Option<u64>) -> TargetOptions {
        TargetOptions {
            size,
            offset: 0,
            write: false,
            device_writes: false,
            procfs: "/proc".into(),
            sysfs: "/sys".into(),
        }
    }

    /// For a temporary directory on a filesystem without O_DIRECT: the test cannot run here.
    /// Under `DISKPROBE_TEST_STRICT` (CI) that is a failure, not a skip.
    fn no_direct_io_here() {
        assert!(
            std::env::var_os("DISKPROBE_TEST_STRICT").is_none(),
            "the temporary directory's filesystem refuses O_DIRECT"
        );
        eprintln!("SKIPPED: the temporary directory's filesystem refuses O_DIRECT");
    }

    #[test]
    fn mountinfo_devices() {
        let text = "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n\
                    30 22 0:25 / /dev/shm rw - tmpfs tmpfs rw\n\
                    41 22 0:48 /@home /home rw,relatime shared:9 - btrfs /dev/sda2 rw,subvol=/@home\n";
        assert_eq!(mounted_devices(text), vec!["254:1", "0:25", "0:48"]);
        assert_eq!(mount_source(text, 41), Some("/dev/sda2"));
        assert_eq!(mount_source(text, 30), Some("tmpfs"));
        assert_eq!(mount_source(text, 99), None);
    }

    #[test]
    fn creates_fills_and_reuses_a_probe_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.dat");
        let opts = file_opts(Some(1 << 20));
        let chunks = std::cell::Cell::new(0);
        let count = || {
            chunks.set(chunks.get() + 1);
            true
        };
        let t = match open_reporting(&path, &opts, &count) {
            Ok(t) => t,
            Err(TargetError::NoDirectIo { .. }) => return no_direct_io_here(),
            Err(err) => panic!("{err}"),
        };
        assert!(t.filled);
        assert_eq!(chunks.get(), 1, "progress after each chunk of the fill");
        assert_eq!(t.region_len, 1 << 20);
        let data = fs::read(&path).unwrap();
        assert_eq!(data.len(), 1 << 20);
        assert!(data.chunks(512).all(|c| c.iter().any(|&b| b != 0)));
        drop(t);
        let t = open(&path, &opts).unwrap();
        assert!(!t.filled, "an intact probe file is reused");
        let opts2 = TargetOptions {
            size: Some(2 << 20),
            ..opts.clone()
        };
        let t = open_reporting(&path, &opts2, &count).unwrap();
        assert!(t.filled, "a size change refills");
        assert_eq!(chunks.get(), 3);
        assert_eq!(fs::metadata(&path).unwrap().len(), 2 << 20);
        // A size the file's direct I/O cannot write is refused before any data is written.
        let odd = dir.path().join("odd.dat");
        let opts3 = TargetOptions {
            size: Some((1 << 20) + 100),
            ..opts.clone()
        };
        let err = open_reporting(&odd, &opts3, &|| panic!("no chunk may be written")).unwrap_err();
        assert!(matches!(err, TargetError::Alignment { .. }), "{err}");
        assert!(!odd.exists(), "the empty file created for it is removed");
    }

    #[test]
    fn a_stopped_fill_is_finished_at_the_size_it_was_filling() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.dat");
        let opts = file_opts(Some(3 << 20));
        match open_reporting(&path, &opts, &|| false) {
            Err(TargetError::NoDirectIo { .. }) => return no_direct_io_here(),
            Err(TargetError::Io { source, .. }) => {
                assert_eq!(source.kind(), io::ErrorKind::Interrupted, "{source}")
            }
            other => panic!("the fill did not stop: {:?}", other.map(|_| ())),
        }
        assert_eq!(fs::metadata(&path).unwrap().len(), 1 << 20);
        // Opened again without a size (the embedded default, a one-shot run without --size):
        // the fill is finished at the size it was started with, not at the 1 MiB it reached.
        let unsized_opts = TargetOptions { size: None, ..opts };
        let t = open(&path, &unsized_opts).unwrap();
        assert!(t.filled);
        assert_eq!(t.region_len, 3 << 20);
        assert_eq!(fs::metadata(&path).unwrap().len(), 3 << 20);
        drop(t);
        assert!(!open(&path, &unsized_opts).unwrap().filled, "then reused");
        // A mark of an older version names no size (the default size is then filled).
        assert_eq!(marked_size(b"filling"), None);
        assert_eq!(marked_size(b"probe-file v1 size=0"), None);
        assert_eq!(marked_size(b"filling size=4096"), Some(4096));
    }

    #[test]
    fn a_refill_only_touches_the_checked_file_and_stops_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let fstype = statfs_type(dir.path()).unwrap();
        let (ours, other) = (dir.path().join("ours.dat"), dir.path().join("other.dat"));
        match fill_probe_file(&ours, 2 << 20, None, &fstype, &|| false) {
            Err(TargetError::NoDirectIo { .. }) => return no_direct_io_here(),
            Err(TargetError::Io { source, .. }) => {
                assert_eq!(source.kind(), io::ErrorKind::Interrupted, "{source}")
            }
            other => panic!("the fill did not stop: {:?}", other.map(|_| ())),
        }
        assert_eq!(
            fs::metadata(&ours).unwrap().len(),
            1 << 20,
            "one chunk, then stop"
        );
        // The path now holds another file than the one whose mark was checked: left alone.
        fs::write(&other, b"not ours").unwrap();
        let mark = get_xattr(&File::open(&ours).unwrap());
        let checked = fs::metadata(&other).unwrap();
        let err = fill_probe_file(&ours, 1 << 20, Some(&checked), &fstype, &|| true).unwrap_err();
        assert!(err.to_string().contains("replaced"), "{err}");
        assert_eq!(fs::metadata(&ours).unwrap().len(), 1 << 20);
        assert_eq!(get_xattr(&File::open(&ours).unwrap()), mark);
    }

    #[test]
    fn a_file_swapped_in_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        fs::write(&a, b"a").unwrap();
        fs::write(&b, b"b").unwrap();
        let fa = File::open(&a).unwrap();
        let checked = fa.metadata().unwrap();
        same_file(&a, &checked, &File::open(&a).unwrap()).unwrap();
        let err = same_file(&a, &checked, &File::open(&b).unwrap()).unwrap_err();
        assert!(err.to_string().contains("replaced"), "{err}");
        // A file without the mark of a finished fill is not taken for the one just filled.
        let err = check_filled(&a, &fa, 1).unwrap_err();
        assert!(err.to_string().contains("replaced"), "{err}");
    }

    #[test]
    fn caches_are_recognised_from_sysfs() {
        let sysfs = tempfile::tempdir().unwrap();
        let loop0 = DeviceId {
            name: "loop0".into(),
            major: 7,
            minor: 0,
            parent: None,
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
        let err = partitions(empty.path(), 7, 99).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        fs::write(disk.join("loop99p1/dev"), "7:100\n").unwrap();
        assert_eq!(partitions(empty.path(), 7, 99).unwrap(), vec!["7:100"]);
    }

    #[test]
    fn an_offset_on_a_file_target_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.dat");
        let opts = TargetOptions {
            offset: 4096,
            ..file_opts(Some(1 << 20))
        };
        let err = open(&path, &opts).unwrap_err();
        assert!(err.to_string().contains("no such block device"), "{err}");
        assert!(!path.exists(), "nothing is created");
        fs::write(&path, vec![1u8; 8192]).unwrap();
        let err = open(&path, &opts).unwrap_err();
        assert!(matches!(err, TargetError::OffsetOnFile { .. }), "{err}");
    }

    #[test]
    fn foreign_files_are_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("foreign.dat");
        fs::write(&path, vec![1u8; 8192]).unwrap();
        let opts = TargetOptions {
            write: true,
            ..file_opts(None)
        };
        let err = open(&path, &opts).unwrap_err();
        assert!(matches!(err, TargetError::WriteRefused { .. }), "{err}");
        assert_eq!(fs::read(&path).unwrap(), vec![1u8; 8192]);
    }
}
