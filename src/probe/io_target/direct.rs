//! Opening a target with `O_DIRECT` ([`open_direct`], [`set_direct`]) and the checks every open
//! makes of what it got (alignment, the descriptor's stat).

use super::target_error::{Refusal, TargetError};
use crate::probe::sys;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// How [`open_direct`] opens a target.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DirectOpen<'a> {
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

/// How long an exclusive open waits for a claim that a run on the device just released.
const EXCL_RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// Between two tries of it.
const EXCL_RETRY: std::time::Duration = std::time::Duration::from_millis(20);

/// Opens `path` with `O_DIRECT` as `how` says; the errors name what the kernel refused.
pub(crate) fn open_direct(path: &Path, how: DirectOpen<'_>) -> Result<File, TargetError> {
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
    // An exclusive open right after a run on the same device may find the device still claimed
    // by that run: the kernel tears an io_uring instance down in the background and drops its
    // file references there, after the run has closed everything. The claim goes within
    // milliseconds; another owner's claim does not, and is refused after a second.
    let mut opened = options.open(path);
    let mut waited = std::time::Duration::ZERO;
    while excl
        && waited < EXCL_RELEASE_WAIT
        && opened
            .as_ref()
            .is_err_and(|e| e.raw_os_error() == Some(libc::EBUSY))
    {
        std::thread::sleep(EXCL_RETRY);
        waited += EXCL_RETRY;
        opened = options.open(path);
    }
    opened.map_err(|err| {
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
        } else if excl {
            TargetError::Io {
                path: path.to_owned(),
                what: super::target_error::WRITE_OPEN,
                source: err,
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
pub(crate) fn set_direct(path: &Path, file: &File, fstype: &str) -> Result<(), TargetError> {
    if let Err(err) = sys::add_status_flags(file, libc::O_DIRECT) {
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

pub(crate) fn check_aligned(
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
pub(crate) fn fstat(path: &Path, file: &File) -> Result<fs::Metadata, TargetError> {
    file.metadata().map_err(|source| TargetError::Io {
        path: path.to_owned(),
        what: "stat",
        source,
    })
}
