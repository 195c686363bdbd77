//! The space a probe file takes, checked before it is taken: a probe file may not be larger than
//! its filesystem, and its fill may not leave less than the reserve free: [`RESERVE_PERCENT`]% of
//! the filesystem, or the target's `min_free` where that is more ([`reserve`]). The same check runs when a configuration is loaded (`--config.check`, start, reload:
//! `config::targets`), and before every fill ([`super::probe_file`]).
//!
//! A fill that runs out of space all the same (another writer took the space meanwhile) removes
//! what it wrote and is not tried again ([`Backoff`]) until the target's size changes or the
//! space it lacked has come back: without that, every cycle would write the filesystem full again.

use crate::probe::sys;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The share of its filesystem a probe file's fill must leave free, in percent.
pub(crate) const RESERVE_PERCENT: u64 = 10;

/// Why a probe file of a size cannot be filled on its filesystem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpaceProblem {
    /// The size is beyond the whole filesystem.
    #[error("size {size} bytes is beyond the size of its filesystem ({fs_size} bytes)")]
    BeyondFilesystem {
        /// The probe file's size.
        size: u64,
        /// The filesystem's.
        fs_size: u64,
    },
    /// Filling it would leave less than the reserve free.
    #[error(
        "a probe file of {size} bytes needs {needed} more bytes, and its filesystem has {available} bytes free: it would leave less than {reserve} bytes free (the larger of {RESERVE_PERCENT}% of the filesystem and min_free)"
    )]
    Reserve {
        /// The probe file's size.
        size: u64,
        /// Bytes the fill would take beyond what the file already holds.
        needed: u64,
        /// Bytes free on the filesystem.
        available: u64,
        /// Bytes that must stay free.
        reserve: u64,
    },
    /// An earlier fill at this size ran out of space, and the space has not come back.
    #[error(
        "an earlier fill at {size} bytes ran out of space; not tried again until the size changes or {wanted} bytes are free (now {available})"
    )]
    BackingOff {
        /// The probe file's size.
        size: u64,
        /// Bytes free that would let the fill be tried again.
        wanted: u64,
        /// Bytes free now.
        available: u64,
    },
}

/// Checks that a probe file of `size` bytes at `path` fits its filesystem with the reserve. The
/// file's own allocated blocks (a probe file already there) count as free. `path` or, when it
/// does not exist, its parent directory is `statvfs`'ed; an error there is returned as is.
pub(crate) fn check(
    path: &Path,
    size: u64,
    min_free: u64,
) -> std::io::Result<Result<(), SpaceProblem>> {
    check_known(
        path,
        std::fs::symlink_metadata(path).ok().as_ref(),
        size,
        min_free,
    )
}

/// [`check`] for a path whose metadata is known already (`None`: it does not exist), so that
/// it is not stat'ed again.
pub(crate) fn check_known(
    path: &Path,
    meta: Option<&std::fs::Metadata>,
    size: u64,
    min_free: u64,
) -> std::io::Result<Result<(), SpaceProblem>> {
    let (on, held) = match meta {
        Some(m) if m.is_file() => (path, m.blocks().saturating_mul(512)),
        Some(_) => return Ok(Ok(())),
        None => (super::facts::parent_dir(path), 0),
    };
    let (fs_size, available) = sys::fs_space(on)?;
    Ok(judge(size, held, fs_size, available, min_free))
}

/// The bytes a fill must leave free on a filesystem of `fs_size` bytes: [`RESERVE_PERCENT`]% of
/// it, or `min_free` where that is more.
pub(crate) fn reserve(fs_size: u64, min_free: u64) -> u64 {
    (fs_size / 100 * RESERVE_PERCENT).max(min_free)
}

/// The check of [`check`] over figures: `held` bytes already allocated to the file, a filesystem
/// of `fs_size` bytes with `available` free, `min_free` bytes to leave free beside the 10%.
pub(crate) fn judge(
    size: u64,
    held: u64,
    fs_size: u64,
    available: u64,
    min_free: u64,
) -> Result<(), SpaceProblem> {
    // A filesystem that reports no size (ramfs, some FUSE filesystems) says nothing to judge by.
    if fs_size == 0 {
        return Ok(());
    }
    if size > fs_size {
        return Err(SpaceProblem::BeyondFilesystem { size, fs_size });
    }
    let needed = size.saturating_sub(held);
    let reserve = reserve(fs_size, min_free);
    if needed > 0 && available < needed.saturating_add(reserve) {
        return Err(SpaceProblem::Reserve {
            size,
            needed,
            available,
            reserve,
        });
    }
    Ok(())
}

/// Fills that ran out of space, by path: the size they were filling and the free space that
/// would have let them finish. Process-wide, as a probe file is (one path, one file).
pub(crate) struct Backoff {
    failed: Mutex<BTreeMap<PathBuf, (u64, u64)>>,
}

/// The agent's fills that ran out of space.
pub(crate) static BACKOFF: Backoff = Backoff::new();

impl Backoff {
    const fn new() -> Backoff {
        Backoff {
            failed: Mutex::new(BTreeMap::new()),
        }
    }

    /// Records that the fill of `path` at `size` ran out of space: it would have needed `wanted`
    /// bytes free when it started.
    pub(crate) fn record(&self, path: &Path, size: u64, wanted: u64) {
        if let Ok(mut failed) = self.failed.lock() {
            failed.insert(path.to_owned(), (size, wanted));
        }
    }

    /// Whether a fill of `path` at `size` may start with `available` bytes free: not while an
    /// earlier fill at the same size ran out of space and less than it wanted is free. A size
    /// change or the space's return clears the record.
    pub(crate) fn admits(
        &self,
        path: &Path,
        size: u64,
        available: u64,
    ) -> Result<(), SpaceProblem> {
        let Ok(mut failed) = self.failed.lock() else {
            return Ok(());
        };
        match failed.get(path) {
            Some(&(s, wanted)) if s == size && available < wanted => {
                Err(SpaceProblem::BackingOff {
                    size,
                    wanted,
                    available,
                })
            }
            Some(_) => {
                failed.remove(path);
                Ok(())
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_beyond_the_filesystem_or_its_reserve_are_refused() {
        const G: u64 = 1 << 30;
        assert!(matches!(
            judge(1 << 60, 0, 100 * G, 90 * G, 0),
            Err(SpaceProblem::BeyondFilesystem { .. })
        ));
        assert_eq!(judge(G, 0, 100 * G, 20 * G, 0), Ok(()));
        // 10 GiB free of 100: a 1 GiB file would leave 9 GiB, under the 10% reserve.
        assert!(matches!(
            judge(G, 0, 100 * G, 10 * G, 0),
            Err(SpaceProblem::Reserve { needed, .. }) if needed == G
        ));
        // The file's own blocks count as free; a file that takes nothing more passes.
        assert_eq!(judge(G, G / 2, 100 * G, 10 * G + G / 2, 0), Ok(()));
        assert_eq!(judge(G, G, 100 * G, 0, 0), Ok(()));
        // A filesystem without a size (ramfs) is not judged.
        assert_eq!(judge(G, 0, 0, 0, 0), Ok(()));
        // min_free above the 10%: 20 GiB free of 100 leaves 19 GiB after a 1 GiB file, below a
        // min_free of 20 GiB; under it (15 GiB) the 10% rules.
        assert!(matches!(
            judge(G, 0, 100 * G, 20 * G, 20 * G),
            Err(SpaceProblem::Reserve { reserve, .. }) if reserve == 20 * G
        ));
        assert_eq!(judge(G, 0, 100 * G, 20 * G, 15 * G), Ok(()));
    }

    #[test]
    fn a_fill_that_ran_out_of_space_waits_for_the_space_or_a_new_size() {
        let b = Backoff::new();
        let p = Path::new("/x/probe.dat");
        assert_eq!(b.admits(p, 100, 0), Ok(()));
        b.record(p, 100, 500);
        assert!(b.admits(p, 100, 499).is_err());
        assert!(b.admits(p, 100, 499).is_err(), "still backing off");
        assert_eq!(b.admits(p, 200, 0), Ok(()), "a new size is tried");
        assert_eq!(b.admits(p, 100, 0), Ok(()), "and the record is gone");
        b.record(p, 100, 500);
        assert_eq!(b.admits(p, 100, 500), Ok(()), "the space came back");
    }
}
