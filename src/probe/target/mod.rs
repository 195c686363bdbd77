//! Probe targets: opening block devices and probe files for direct I/O, with the preflight and
//! write-safety checks.
//!
//! - [`facts`]: what a target is, from a stat of its path (kind, the kernel device under it,
//!   filesystem type, whether its probes would measure a cache); also what the scheduler reads
//!   before every cycle.
//! - [`block`]: block devices (size, alignment, and the write-safety rules: not mounted, no
//!   holders, opened with `O_EXCL`, inside the configured region).
//! - [`reopen`]: for durability profiles, the target reopened with their flags (buffered,
//!   `O_DSYNC`, `O_SYNC`).
//! - [`fresh_space`]: the space `etcd-wal` preallocates beyond a probe file's region for a run.
//! - [`probe_file`]: probe files: created and filled with random data before they are ever read,
//!   marked as ours with the extended attribute [`OWNER_XATTR`] and reused across restarts while
//!   intact (same size, no holes, filling finished); writes only to files carrying that mark.
//!
//! Read probes open the target read-only. Everything is opened with `O_DIRECT`, but for the
//! descriptors of durability profiles that write through the page cache.

pub mod block;
pub mod facts;
pub mod fresh_space;
pub mod probe_file;
pub mod reopen;

pub use facts::{Cache, DeviceId, TargetFacts, facts};
pub use probe_file::OWNER_XATTR;

use crate::probe::engine::buffer::BufferError;
use block::open_block_device;
use probe_file::open_file;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

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
    /// Fresh space asked of a target that has none of its own: only a probe file opened for
    /// writing has.
    #[error(
        "{path}: preallocate space for the run: only a probe file opened for writing has space of its own"
    )]
    NoSpaceOfItsOwn {
        /// The target.
        path: PathBuf,
    },
    /// A block device of 0 bytes: a loop device detached from its file, removed media.
    #[error(
        "{path}: the block device is empty (0 bytes: a loop device detached from its file, or removed media)"
    )]
    EmptyDevice {
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
        reason: Refusal,
    },
    /// The path named another device than the one checked a moment before (a `/dev/disk/by-*`
    /// link moved in between).
    #[error("{path}: the path names another device than the one checked a moment before")]
    DeviceChanged {
        /// The target.
        path: PathBuf,
    },
    /// Another file was put at the path between the ownership check and the open.
    #[error("{path}: the file was replaced between the ownership check and the open")]
    Replaced {
        /// The target.
        path: PathBuf,
    },
    /// Another file was put at the path while the probe file was being filled.
    #[error("{path}: the file was replaced while it was being filled")]
    ReplacedDuringFill {
        /// The target.
        path: PathBuf,
    },
    /// No block device at a path for which a region offset is set (no probe file is created in
    /// its place).
    #[error("{path}: no such block device (with an offset set, no probe file is created)")]
    NoSuchDevice {
        /// The target.
        path: PathBuf,
    },
    /// The fill of a probe file was stopped (cancelled, or given up on) before it finished; the
    /// next open finishes it.
    #[error("{path}: the fill of the probe file was stopped before it finished")]
    FillStopped {
        /// The target.
        path: PathBuf,
    },
    /// The buffer of a probe-file fill could not be made.
    #[error("{path}: cannot make the fill buffer: {source}")]
    FillBuffer {
        /// The target.
        path: PathBuf,
        /// Why.
        #[source]
        source: BufferError,
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

/// Which write-safety rule refused a write probe.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// Writes to a block device were not opted into.
    #[error(
        "writes to a block device need their own opt-in (allow_device_writes = true; --allow-writes in one-shot mode)"
    )]
    NoDeviceOptIn,
    /// Someone else has claimed the device (the `O_EXCL` open failed with EBUSY).
    #[error("the device is in use (O_EXCL open failed with EBUSY)")]
    InUse,
    /// The mount table could not be read, so the device cannot be known to be unmounted.
    #[error("cannot read {mountinfo} to check for mounts: {source}")]
    MountsUnknown {
        /// `<procfs>/self/mountinfo`.
        mountinfo: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Sysfs could not be read, so the device cannot be known to have no partitions or holders.
    #[error("cannot read {sysfs} to check for partitions and holders: {source}")]
    HoldersUnknown {
        /// The sysfs root.
        sysfs: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The device (or one of its partitions, `MAJ:MIN`) is mounted.
    #[error("{} {dev} is mounted", if *.partition { "partition" } else { "the device" })]
    Mounted {
        /// `MAJ:MIN`.
        dev: String,
        /// Whether it is a partition of the target.
        partition: bool,
    },
    /// The device (or one of its partitions) has holders (device-mapper, md).
    #[error(
        "{} {dev} has holders (device-mapper, md, ...)",
        if *.partition { "partition" } else { "the device" }
    )]
    Held {
        /// `MAJ:MIN`.
        dev: String,
        /// Whether it is a partition of the target.
        partition: bool,
    },
    /// A write probe on a file this agent did not create.
    #[error(
        "the file was not created by diskprobe_exporter (no {OWNER_XATTR} attribute); write probes only use probe files they created"
    )]
    ForeignFile,
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

/// How [`open_direct`] opens a target.
#[derive(Debug, Clone, Copy)]
pub(super) enum DirectOpen<'a> {
    /// A block device: read-only, or for writes read-write and exclusive (`O_EXCL`: no one else
    /// may have it open exclusively, no filesystem mounted on it).
    Device {
        /// Open it read-write.
        write: bool,
    },
    /// A probe file, never through a symbolic link (`O_NOFOLLOW`).
    File {
        /// Open it read-write.
        write: bool,
        /// Its filesystem, named when that filesystem refuses O_DIRECT.
        fstype: &'a str,
    },
}

/// Opens `path` with `O_DIRECT` as `how` says; the errors name what the kernel refused.
pub(super) fn open_direct(path: &Path, how: DirectOpen<'_>) -> Result<File, TargetError> {
    let (write, excl, nofollow, fstype) = match how {
        DirectOpen::Device { write } => (write, write, false, ""),
        DirectOpen::File { write, fstype } => (write, false, true, fstype),
    };
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
                reason: Refusal::InUse,
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
pub(super) fn set_direct(path: &Path, file: &File, fstype: &str) -> Result<(), TargetError> {
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

pub(super) fn check_aligned(
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

/// `fstat` of an open target, as a [`TargetError`].
pub(super) fn fstat(path: &Path, file: &File) -> Result<fs::Metadata, TargetError> {
    file.metadata().map_err(|source| TargetError::Io {
        path: path.to_owned(),
        what: "stat",
        source,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A probe file of 1 MiB opened for writing, in a fresh temporary directory (`None` where
    /// the directory's filesystem refuses O_DIRECT).
    pub(crate) fn writable() -> Option<(tempfile::TempDir, OpenTarget)> {
        let dir = tempfile::tempdir().unwrap();
        let opts = TargetOptions {
            write: true,
            ..file_opts(Some(1 << 20))
        };
        match open(&dir.path().join("probe.dat"), &opts) {
            Ok(t) => Some((dir, t)),
            Err(TargetError::NoDirectIo { .. }) => {
                no_direct_io_here();
                None
            }
            Err(err) => panic!("{err}"),
        }
    }

    /// Read-only options for a file of `size` bytes, with the machine's procfs and sysfs.
    pub(crate) fn file_opts(size: Option<u64>) -> TargetOptions {
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
    pub(crate) fn no_direct_io_here() {
        assert!(
            std::env::var_os("DISKPROBE_TEST_STRICT").is_none(),
            "the temporary directory's filesystem refuses O_DIRECT"
        );
        eprintln!("SKIPPED: the temporary directory's filesystem refuses O_DIRECT");
    }
}
