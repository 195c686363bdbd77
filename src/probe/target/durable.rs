//! What durability profiles need of a target besides its O_DIRECT descriptor: a descriptor of the
//! same file or device opened with the profile's flags (buffered writes, `O_DSYNC`, `O_SYNC`), and
//! for `etcd-wal` the space it writes into, preallocated beyond a probe file's region for one run
//! and released when the run ends.
//!
//! Preallocation is what etcd does for its WAL segments and what fio does when it lays out the
//! file of etcd's job (`fallocate(fd, 0, 0, size)`): the extents are unwritten until written, so
//! each `fdatasync` also commits their conversion. The space lies beyond the probe file's region
//! (its pre-filled data is never written by it), inside the probe file (the file is extended by
//! `fallocate` and truncated back to its region afterwards), so nothing outside the probe file
//! changes. A probe file found longer than its region when it is opened for writing (an agent
//! stopped in the middle of such a run) is truncated back by [`super::probe_file`].

use super::{OpenTarget, TargetError, TargetKind, fstat};
use crate::probe::profile::OpenSync;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

/// Opens the target again for writes with `O_DIRECT` or without (buffered), and `O_DSYNC` or
/// `O_SYNC` when `open_sync` asks for it: open flags that cannot be changed on the descriptor the
/// target was opened with. The new descriptor must be of the same file (device and inode) or
/// device (device number) as the target's own; a block device is not opened with `O_EXCL` again
/// (the target's descriptor holds that claim).
pub fn reopen(
    target: &OpenTarget,
    direct: bool,
    open_sync: Option<OpenSync>,
) -> Result<File, TargetError> {
    let path = &target.path;
    let mut flags = libc::O_CLOEXEC;
    if direct {
        flags |= libc::O_DIRECT;
    }
    flags |= match open_sync {
        Some(OpenSync::Dsync) => libc::O_DSYNC,
        Some(OpenSync::Sync) => libc::O_SYNC,
        None => 0,
    };
    if target.kind == TargetKind::File {
        flags |= libc::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|source| TargetError::Io {
            path: path.clone(),
            what: "reopen with the profile's flags",
            source,
        })?;
    let (ours, reopened) = (fstat(path, &target.file)?, fstat(path, &file)?);
    let same = match target.kind {
        TargetKind::File => (ours.dev(), ours.ino()) == (reopened.dev(), reopened.ino()),
        TargetKind::BlockDevice => ours.rdev() == reopened.rdev(),
    };
    if !same {
        return Err(match target.kind {
            TargetKind::File => TargetError::Replaced { path: path.clone() },
            TargetKind::BlockDevice => TargetError::DeviceChanged { path: path.clone() },
        });
    }
    Ok(file)
}

/// Space preallocated beyond a probe file's region for one run; released (the file truncated back
/// to its region) when dropped.
#[derive(Debug)]
pub struct FreshSpace {
    file: File,
    path: std::path::PathBuf,
    /// First byte of the space: the end of the region.
    pub start: u64,
    /// Its length.
    pub len: u64,
}

impl FreshSpace {
    /// Preallocates `len` bytes after the region of the probe file `target` (opened for writing)
    /// with `fallocate(fd, 0, region end, len)`, which extends the file over unwritten extents.
    pub fn preallocate(target: &OpenTarget, len: u64) -> Result<FreshSpace, TargetError> {
        let failed = |what: &'static str, source: io::Error| TargetError::Io {
            path: target.path.clone(),
            what,
            source,
        };
        if target.kind != TargetKind::File || !target.writable {
            let why = "only a probe file opened for writing has space of its own";
            return Err(failed(
                "preallocate space for the run",
                io::Error::other(why),
            ));
        }
        let file = target
            .file
            .try_clone()
            .map_err(|e| failed("duplicate the descriptor", e))?;
        let start = target.region_offset + target.region_len;
        let (Ok(offset), Ok(length)) = (i64::try_from(start), i64::try_from(len)) else {
            let too_big = io::Error::from_raw_os_error(libc::EFBIG);
            return Err(failed("preallocate space for the run", too_big));
        };
        // SAFETY: fallocate on an open descriptor with plain integer arguments.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, offset, length) };
        let err = (rc != 0).then(io::Error::last_os_error);
        let space = FreshSpace {
            file,
            path: target.path.clone(),
            start,
            len,
        };
        match err {
            // Whatever part was allocated is given back when `space` drops.
            Some(err) => Err(failed("preallocate space for the run", err)),
            None => Ok(space),
        }
    }
}

impl Drop for FreshSpace {
    fn drop(&mut self) {
        if let Err(err) = self.file.set_len(self.start) {
            tracing::warn!(path = %self.path.display(), %err, "cannot give back the space preallocated for a run; the next open for writing truncates the probe file");
        }
    }
}
