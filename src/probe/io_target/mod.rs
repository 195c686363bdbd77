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
//! - [`filesystem`]: the filesystem a probe file lives on, and the check that it is the one the
//!   target is meant for, before a probe file is made or opened.
//! - [`probe_file`]: probe files: created and filled with random data before they are ever read,
//!   marked as ours ([`mark`]: the extended attribute [`OWNER_XATTR`](mark::OWNER_XATTR), bound
//!   to the file's inode and birth time) and reused across restarts while intact (same size, no
//!   holes, filling finished); writes only to files carrying that mark, refills only for a
//!   target that may write.
//!
//! Read probes open the target read-only. Everything is opened with `O_DIRECT`, but for the
//! descriptors of durability profiles that write through the page cache.

pub(crate) mod block;
mod direct;
pub(crate) mod facts;
pub mod filesystem;
pub(crate) mod fresh_space;
mod mark;
mod opened;
pub(crate) mod probe_file;
pub(crate) mod reopen;
pub(crate) mod space;
mod target_error;

pub use facts::{Cache, TargetFacts, TargetKind, facts};
pub use opened::{OpenTarget, TargetOptions};
pub use target_error::TargetError;

use block::open_block_device;
use probe_file::open_file;
use std::fs;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

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
    open_any(path, opts, progress).map_err(|e| e.in_sandbox(opts.confined))
}

/// [`open_reporting`], its errors as the kernel gave them.
fn open_any(
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A probe file of 1 MiB opened for writing, in a fresh temporary directory (`None` where
    /// the directory's filesystem refuses O_DIRECT).
    pub(crate) fn writable() -> Option<(tempfile::TempDir, OpenTarget)> {
        let dir = tempfile::tempdir().unwrap();
        let opts = TargetOptions {
            write: true,
            rewrite: true,
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
            rewrite: false,
            device_writes: false,
            min_free: 0,
            procfs: "/proc".into(),
            sysfs: "/sys".into(),
            devfs: "/dev".into(),
            pinned: None,
            confined: false,
            filesystem: Default::default(),
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
