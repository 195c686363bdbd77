//! A `[[targets]]` path, stat'ed once, the first time a check asks ([`PathStat`]), and
//! [`with_deadline`]: what asks a filesystem at load (the stat, the space check) is given up after
//! [`SPACE_CHECK_WAIT`], so that a hung filesystem does not stall a start, a reload or
//! `--config.check`.

use std::path::{Path, PathBuf};

/// A `[[targets]]` path, stat'ed (following symlinks) the first time a check asks, on a thread
/// given up after [`SPACE_CHECK_WAIT`]; later checks reuse the answer.
pub(super) struct PathStat {
    /// The path.
    pub(super) path: PathBuf,
    /// `None` inside: the filesystem did not answer in time.
    meta: std::sync::OnceLock<Option<std::io::Result<std::fs::Metadata>>>,
}

impl PathStat {
    pub(super) fn new(path: &Path) -> PathStat {
        PathStat {
            path: path.to_owned(),
            meta: std::sync::OnceLock::new(),
        }
    }

    /// The path's metadata: `Ok(None)` when it does not exist (or cannot be stat'ed), `Err(())`
    /// when its filesystem did not answer in time.
    pub(super) fn meta(&self) -> Result<Option<&std::fs::Metadata>, ()> {
        let answer = self.meta.get_or_init(|| {
            let owned = self.path.clone();
            with_deadline(move || std::fs::metadata(owned))
        });
        match answer {
            None => Err(()),
            Some(Ok(meta)) => Ok(Some(meta)),
            Some(Err(_)) => Ok(None),
        }
    }

    /// The path and its device number when it is a block device now.
    pub(super) fn block_device(&self) -> Option<(&Path, u64)> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let meta = self.meta().ok()??;
        meta.file_type()
            .is_block_device()
            .then(|| (self.path.as_path(), meta.rdev()))
    }
}

/// How long loading the configuration waits for the filesystem of a probe file to answer the
/// space check: a hung filesystem (an NFS server gone, a stuck FUSE daemon) must not stall a
/// start, a reload or `--config.check`; its fill is checked again when it runs.
pub(super) const SPACE_CHECK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// `f` on a thread of its own, given up after [`SPACE_CHECK_WAIT`] (`None`; the thread is left to
/// a system call that a hung filesystem does not answer).
pub(super) fn with_deadline<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("config-stat".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .ok()?;
    rx.recv_timeout(SPACE_CHECK_WAIT).ok()
}
