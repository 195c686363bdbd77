//! The check that the confinement holds where it matters: on a probe thread, started long after
//! `main` applied the ruleset (below Landlock ABI 8 a ruleset binds only the thread that applied
//! it and the threads it creates afterwards).
//!
//! The check tries to write in a directory the ruleset gives no write right to (beside the first
//! directory it does, e.g. the state directory), that file permissions would let the agent write
//! in, in two steps:
//! 1. `open(dir, O_TMPFILE | O_WRONLY)`: an unnamed file, which exercises Landlock's `write_file`
//!    right (checked when the file is opened) and leaves nothing behind even when it succeeds;
//! 2. only when step 1 was refused with `EACCES`: `open(dir/NAME, O_CREAT | O_EXCL | O_WRONLY)`,
//!    which exercises `make_reg` (checked before the file is created); a file it did create is
//!    removed at once.
//!
//! `EACCES` from both is [`Outcome::Denied`]. A read-only filesystem answers `EROFS` before
//! Landlock is asked, and some filesystems have no `O_TMPFILE`: the next candidate directory is
//! tried, and when none gives an answer the outcome is [`Outcome::Unverified`].

use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// What the check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Nothing is enforced, so nothing is checked.
    NotRun,
    /// No probe thread has run yet.
    Pending,
    /// Both attempts got `EACCES`: the confinement holds on the thread that tried.
    Denied {
        /// Where it tried.
        dir: PathBuf,
    },
    /// An attempt succeeded: the thread is not confined.
    Allowed {
        /// Where it succeeded.
        dir: PathBuf,
        /// Which attempt.
        how: &'static str,
    },
    /// No directory gave an answer (read-only, no `O_TMPFILE`, none to try).
    Unverified {
        /// What each directory answered.
        reason: String,
    },
}

impl Outcome {
    /// The `check` label of `diskprobe_sandbox_info`.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Outcome::NotRun => "none",
            Outcome::Pending => "pending",
            Outcome::Denied { .. } => "denied",
            Outcome::Allowed { .. } => "allowed",
            Outcome::Unverified { .. } => "unverified",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The check of one agent: runs once, on the first thread that asks; the others do not wait for
/// it (a directory on a hung filesystem would hold them all).
#[derive(Debug)]
pub(crate) struct Check {
    dirs: Vec<PathBuf>,
    started: AtomicBool,
    outcome: Mutex<Outcome>,
}

impl Check {
    /// A check that tries `dirs` in turn (directories the ruleset gives no write right to).
    pub(crate) fn new(dirs: Vec<PathBuf>) -> Check {
        Check {
            dirs,
            started: AtomicBool::new(false),
            outcome: Mutex::new(Outcome::Pending),
        }
    }

    /// A check that never runs: nothing is enforced.
    pub(crate) fn not_run() -> Check {
        Check {
            dirs: Vec::new(),
            started: AtomicBool::new(true),
            outcome: Mutex::new(Outcome::NotRun),
        }
    }

    /// Runs the check on the calling thread unless another already started it, and logs what it
    /// found.
    pub(crate) fn run_once(&self) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        {
            let outcome = attempt(&self.dirs);
            let thread = std::thread::current();
            let thread = thread.name().unwrap_or("unnamed");
            match &outcome {
                Outcome::Denied { dir } => tracing::info!(
                    thread,
                    dir = %dir.display(),
                    check = %outcome,
                    "sandbox verified: on this thread, O_TMPFILE (write_file) and O_CREAT (make_reg) beside the allowed directories got EACCES"
                ),
                Outcome::Allowed { dir, how } => tracing::error!(
                    thread,
                    dir = %dir.display(),
                    check = %outcome,
                    "sandbox NOT in force on this thread: {how} succeeded (nothing was left behind)"
                ),
                Outcome::Unverified { reason } => tracing::warn!(
                    thread,
                    check = %outcome,
                    "sandbox could not be verified: {reason}"
                ),
                Outcome::NotRun | Outcome::Pending => {}
            }
            *self.lock() = outcome;
        }
    }

    /// What the check found so far.
    pub(crate) fn outcome(&self) -> Outcome {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Outcome> {
        self.outcome.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Tries each of `dirs` until one answers; see the module documentation.
pub(crate) fn attempt(dirs: &[PathBuf]) -> Outcome {
    let mut reasons = Vec::new();
    for dir in dirs {
        if !permissions_allow_writing(dir) {
            reasons.push(format!(
                "{}: file permissions do not let this process write there",
                dir.display()
            ));
            continue;
        }
        match unnamed_file(dir) {
            Ok(()) => {
                return Outcome::Allowed {
                    dir: dir.clone(),
                    how: "O_TMPFILE",
                };
            }
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => {}
            Err(e) => {
                reasons.push(format!("{}: O_TMPFILE: {e}", dir.display()));
                continue;
            }
        }
        return match named_file(dir) {
            Ok(()) => Outcome::Allowed {
                dir: dir.clone(),
                how: "O_CREAT",
            },
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                Outcome::Denied { dir: dir.clone() }
            }
            Err(e) => Outcome::Unverified {
                reason: format!("{}: O_TMPFILE got EACCES, O_CREAT: {e}", dir.display()),
            },
        };
    }
    if reasons.is_empty() {
        reasons.push("no directory to try".to_owned());
    }
    Outcome::Unverified {
        reason: reasons.join("; "),
    }
}

/// An unnamed file in `dir`, closed at once: it never has a name, so nothing remains.
fn unnamed_file(dir: &Path) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir)
        .map(drop)
}

/// A new file in `dir`, removed at once if it was created.
fn named_file(dir: &Path) -> io::Result<()> {
    let path = dir.join(format!(
        ".diskprobe_exporter-sandbox-check.{}",
        std::process::id()
    ));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)?;
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// Whether the mode bits of `dir` let this process create files in it, so that an `EACCES` is
/// Landlock's (or another security module's), not the file permissions'. The effective user and
/// group are those of `/proc/self`; supplementary groups are not counted (such a directory is
/// skipped, not misjudged).
fn permissions_allow_writing(dir: &Path) -> bool {
    let (Ok(meta), Ok(me)) = (std::fs::metadata(dir), std::fs::metadata("/proc/self")) else {
        return false;
    };
    let mode = meta.permissions().mode();
    meta.is_dir()
        && (me.uid() == 0
            || (meta.uid() == me.uid() && mode & 0o300 == 0o300)
            || (meta.gid() == me.gid() && mode & 0o030 == 0o030)
            || mode & 0o003 == 0o003)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unconfined_it_says_allowed_and_leaves_nothing_behind() {
        let tmp = tempfile::tempdir().unwrap();
        let outcome = attempt(&[tmp.path().to_owned()]);
        match outcome {
            Outcome::Allowed { how, .. } => assert_eq!(how, "O_TMPFILE"),
            // tmpfs, ext4, xfs and btrfs have O_TMPFILE; another filesystem may not.
            Outcome::Unverified { reason } => assert!(reason.contains("O_TMPFILE"), "{reason}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
        // The named attempt removes what it created.
        named_file(tmp.path()).unwrap();
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn directories_that_give_no_answer_are_unverified() {
        let tmp = tempfile::tempdir().unwrap();
        let outcome = attempt(&[tmp.path().join("missing")]);
        assert_eq!(outcome.label(), "unverified");
        let Outcome::Unverified { reason } = outcome else {
            unreachable!()
        };
        assert!(reason.contains("missing"), "{reason}");
        assert_eq!(attempt(&[]).label(), "unverified");
    }

    #[test]
    fn the_check_runs_once() {
        let tmp = tempfile::tempdir().unwrap();
        let check = Check::new(vec![tmp.path().to_owned()]);
        assert_eq!(check.outcome(), Outcome::Pending);
        check.run_once();
        let first = check.outcome();
        assert_ne!(first, Outcome::Pending);
        check.run_once();
        assert_eq!(check.outcome(), first);
        let off = Check::not_run();
        off.run_once();
        assert_eq!(off.outcome(), Outcome::NotRun);
    }
}
