//! The stat of a target's path that finds the device under it, made on a thread of its own (a
//! hung filesystem must not block the runtime), and recorded as the target's info: the labels of
//! its series.

use super::shared::{Counted, Roots, Shared};
use crate::config::TargetSpec;
use crate::probe::target::{self, TargetFacts};
use crate::series::TargetInfo;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

/// How long a cycle waits for the stat of its target's path before giving up on the cycle.
pub const STAT_PATIENCE: Duration = Duration::from_secs(5);

/// [`target::facts`] of the target's path on a thread of its own, counted in `threads` until it
/// returns: a stat on a hung filesystem (NFS, FUSE) must not block the runtime, whose single
/// worker also accepts scrapes. `Ok(None)` when the path cannot be read (the open will say why);
/// an error when the thread cannot start or has not answered within [`STAT_PATIENCE`].
pub(super) async fn stat_target(
    spec: &TargetSpec,
    roots: &Roots,
    threads: &Arc<AtomicUsize>,
) -> Result<Option<TargetFacts>, StatFailure> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (path, roots) = (spec.path.clone(), roots.clone());
    let started = Instant::now();
    let counted = Counted::new(threads);
    let spawned = std::thread::Builder::new()
        .name(super::thread::thread_name("stat", &spec.name))
        .spawn(move || {
            let facts = target::facts(&path, &roots.procfs, &roots.sysfs).ok();
            // Counted out before the scheduler hears of the answer, which may start a run.
            drop(counted);
            let _ = tx.send(facts);
        });
    let failed = |error: String| StatFailure {
        error,
        timed_out: false,
        waited: started.elapsed(),
    };
    if let Err(err) = spawned {
        return Err(failed(format!(
            "cannot start a thread to stat the target: {err}"
        )));
    }
    match tokio::time::timeout(STAT_PATIENCE, rx).await {
        Ok(Ok(facts)) => Ok(facts),
        Ok(Err(_)) => Err(failed("the stat thread ended without a result".to_owned())),
        Err(_) => Err(StatFailure {
            error: format!(
                "stat of {} did not return within {STAT_PATIENCE:?} (hung filesystem?)",
                spec.path.display()
            ),
            timed_out: true,
            waited: started.elapsed(),
        }),
    }
}

/// [`stat_target`], and what it found recorded as the target's info (its series' labels). A
/// target whose path cannot be looked at gets an info without a device, unless one is known.
pub(super) async fn stat_and_label(
    spec: &Arc<TargetSpec>,
    shared: &Shared,
    threads: &Arc<AtomicUsize>,
) -> Result<Option<TargetFacts>, StatFailure> {
    let stat = stat_target(spec, &shared.roots, threads).await;
    let path = spec.path.display().to_string();
    match &stat {
        Ok(Some(facts)) => {
            let news = shared.series.set_info(spec, target_info(path, facts));
            if let Some(warning) = facts.warning(&spec.path).filter(|_| news) {
                tracing::warn!(target = %spec.name, "{warning}");
            }
        }
        _ => shared.series.set_info_if_unknown(
            spec,
            TargetInfo {
                path,
                ..TargetInfo::default()
            },
        ),
    }
    stat
}

/// The labels of `diskprobe_target_info` for a target at `path`.
fn target_info(path: String, facts: &TargetFacts) -> TargetInfo {
    TargetInfo {
        path,
        device: facts.device.clone(),
        kind: Some(facts.kind),
        fstype: facts.fstype.clone(),
        cache: facts.cache,
    }
}

/// Why [`stat_target`] has no answer.
pub(super) struct StatFailure {
    pub(super) error: String,
    /// The stat did not return in time (a timeout), rather than failing to start (an error).
    pub(super) timed_out: bool,
    /// How long the stat was waited for.
    pub(super) waited: Duration,
}
