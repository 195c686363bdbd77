//! A descriptor of a target's file or device opened again with a durability profile's flags
//! (buffered writes, `O_DSYNC`, `O_SYNC`), which cannot be set on the descriptor the target was
//! opened with; checked to be the same file or device.

use super::direct::fstat;
use super::facts::TargetKind;
use super::opened::OpenTarget;
use super::target_error::TargetError;
use crate::probe::profile::OpenSync;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

/// Opens the target again for writes with `O_DIRECT` or without (buffered), and `O_DSYNC` or
/// `O_SYNC` when `open_sync` asks for it: open flags that cannot be changed on the descriptor the
/// target was opened with. The new descriptor must be of the same file (device and inode) or
/// device (device number) as the target's own; a block device is not opened with `O_EXCL` again
/// (the target's descriptor holds that claim).
pub(crate) fn reopen(
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
    let (ours, reopened) = (fstat(path, target.file())?, fstat(path, &file)?);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::io_target::tests::writable;
    use std::fs;

    #[test]
    fn reopens_the_same_file_with_the_profiles_flags() {
        let Some((_dir, t)) = writable() else { return };
        let file = reopen(&t, false, Some(OpenSync::Dsync)).unwrap();
        let (a, b) = (t.file().metadata().unwrap(), file.metadata().unwrap());
        assert_eq!((a.dev(), a.ino()), (b.dev(), b.ino()));
        let flags = crate::probe::sys::status_flags(&file).unwrap();
        assert_eq!(flags & libc::O_DIRECT, 0, "buffered");
        assert_eq!(flags & libc::O_DSYNC, libc::O_DSYNC);
        // A file put in its place is not taken for it.
        fs::rename(&t.path, t.path.with_extension("old")).unwrap();
        fs::write(&t.path, vec![1u8; 4096]).unwrap();
        let err = reopen(&t, true, None).unwrap_err();
        assert!(matches!(err, TargetError::Replaced { .. }), "{err}");
    }
}
