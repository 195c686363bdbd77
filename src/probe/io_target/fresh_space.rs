//! The space `etcd-wal` writes into: preallocated beyond a probe file's region for one run and
//! released when the run ends.
//!
//! Preallocation is what etcd does for its WAL segments and what fio does when it lays out the
//! file of etcd's job (`fallocate(fd, 0, 0, size)`): the extents are unwritten until written, so
//! each `fdatasync` also commits their conversion. The space lies beyond the probe file's region
//! (its pre-filled data is never written by it), inside the probe file (the file is extended by
//! `fallocate` and truncated back to its region afterwards), so nothing outside the probe file
//! changes. A probe file found longer than its region when it is opened for writing (an agent
//! stopped in the middle of such a run) is truncated back by [`super::probe_file`].

use super::facts::TargetKind;
use super::opened::OpenTarget;
use super::target_error::TargetError;
use crate::probe::sys;
use std::fs::File;
use std::io;

/// Space preallocated beyond a probe file's region for one run; released (the file truncated back
/// to its region) when dropped.
#[derive(Debug)]
pub(crate) struct FreshSpace {
    file: File,
    path: std::path::PathBuf,
    /// First byte of the space: the end of the region.
    pub start: u64,
    /// Its length.
    #[cfg(test)]
    pub len: u64,
}

impl FreshSpace {
    /// Preallocates `len` bytes after the region of the probe file `target` (opened for writing)
    /// with `fallocate(fd, 0, region end, len)`, which extends the file over unwritten extents.
    pub(crate) fn preallocate(target: &OpenTarget, len: u64) -> Result<FreshSpace, TargetError> {
        let failed = |what: &'static str, source: io::Error| TargetError::Io {
            path: target.path.clone(),
            what,
            source,
        };
        if target.kind != TargetKind::File || !target.writable {
            return Err(TargetError::NoSpaceOfItsOwn {
                path: target.path.clone(),
            });
        }
        let file = target
            .file()
            .try_clone()
            .map_err(|e| failed("duplicate the descriptor", e))?;
        let start = target.region_offset + target.region_len;
        let (Ok(offset), Ok(length)) = (i64::try_from(start), i64::try_from(len)) else {
            let too_big = io::Error::from_raw_os_error(libc::EFBIG);
            return Err(failed("preallocate space for the run", too_big));
        };
        let err = sys::fallocate(&file, offset, length).err();
        let space = FreshSpace {
            file,
            path: target.path.clone(),
            start,
            #[cfg(test)]
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::io_target::tests::{file_opts, no_direct_io_here, writable};
    use crate::probe::io_target::{TargetOptions, open};
    use std::fs;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn fresh_space_lies_beyond_the_region_and_is_given_back() {
        let Some((_dir, t)) = writable() else { return };
        let before = fs::read(&t.path).unwrap();
        let blocks = t.file().metadata().unwrap().blocks();
        {
            let space = FreshSpace::preallocate(&t, 1 << 20).unwrap();
            assert_eq!((space.start, space.len), (1 << 20, 1 << 20));
            let meta = t.file().metadata().unwrap();
            assert_eq!(meta.len(), 2 << 20, "the file is extended over the space");
            assert!(meta.blocks() >= blocks + 2048, "and the space is allocated");
        }
        let meta = t.file().metadata().unwrap();
        assert_eq!(meta.len(), 1 << 20);
        assert_eq!(meta.blocks(), blocks);
        assert_eq!(
            fs::read(&t.path).unwrap(),
            before,
            "the region is untouched"
        );
    }

    #[test]
    fn space_left_behind_is_truncated_by_the_next_write_open_only() {
        let Some((_dir, t)) = writable() else { return };
        let (path, before) = (t.path.clone(), fs::read(&t.path).unwrap());
        // A run that never gave its space back (the agent stopped during it): the space it
        // preallocates beyond the region, left by a process that is gone (its lock with it).
        drop(t);
        let gone = fs::OpenOptions::new().write(true).open(&path).unwrap();
        sys::fallocate(&gone, 1 << 20, 1 << 20).unwrap();
        drop(gone);
        let read_only = open(&path, &file_opts(Some(1 << 20))).unwrap();
        assert!(!read_only.filled, "intact: not refilled");
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            2 << 20,
            "a read open leaves it"
        );
        drop(read_only);
        // Without a configured size the mark's size is the region.
        let opts = TargetOptions {
            write: true,
            ..file_opts(None)
        };
        let t = open(&path, &opts).unwrap();
        assert!(!t.filled);
        assert_eq!(
            (t.region_len, fs::metadata(&path).unwrap().len()),
            (1 << 20, 1 << 20)
        );
        assert_eq!(fs::read(&path).unwrap(), before);
    }

    #[test]
    fn only_probe_files_opened_for_writing_have_space() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.dat");
        let t = match open(&path, &file_opts(Some(1 << 20))) {
            Ok(t) => t,
            Err(TargetError::NoDirectIo { .. }) => return no_direct_io_here(),
            Err(err) => panic!("{err}"),
        };
        assert!(FreshSpace::preallocate(&t, 4096).is_err());
        assert_eq!(fs::metadata(&path).unwrap().len(), 1 << 20);
    }
}
