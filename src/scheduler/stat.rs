//! The stat of a target's path that finds the device under it, made on a thread of its own (a
//! hung filesystem must not block the runtime), and recorded as the target's info: the labels of
//! its series (for a configured target, weighed against its last device:
//! [`super::target_devices`]; a probe file's path that leads onto another filesystem than its
//! own finds nothing).

use super::shared::{Counted, Shared};
use super::target_devices::Labelled;
use crate::config::TargetSpec;
use crate::host::STAT_PATIENCE;
use crate::probe::io_target::{self, TargetFacts, filesystem};
use crate::series::TargetInfo;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

/// What a stat of a target's path found, and the info to record for it.
pub(super) struct Looked {
    /// The facts of the path; `None` when it cannot be read (the open will say why).
    pub(super) facts: Option<TargetFacts>,
    /// The target's info (from the facts, or for a configured target its last device while
    /// that is gone: [`super::target_devices`]), and whether it is held so.
    label: Labelled,
}

/// [`io_target::facts`] of the target's path on a thread of its own, counted in `threads` until it
/// returns: a stat on a hung filesystem (NFS, FUSE) must not block the runtime, whose single
/// worker also accepts scrapes. For a configured target, the thread also weighs what it found
/// against the target's last device (reading sysfs, and writing the state directory when the
/// last device changes). An error when the thread cannot start or has not answered within
/// [`STAT_PATIENCE`].
async fn stat_target(
    spec: &Arc<TargetSpec>,
    shared: &Shared,
    threads: &Arc<AtomicUsize>,
) -> Result<Looked, StatFailure> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (spec_owned, roots) = (spec.clone(), shared.roots.clone());
    let known = shared.known.clone();
    let started = Instant::now();
    let counted = Counted::new(threads);
    let spawned = std::thread::Builder::new()
        .name(super::thread::thread_name("stat", &spec.name))
        .spawn(move || {
            let spec = spec_owned;
            let facts = io_target::facts(&spec.path, &roots.procfs, &roots.sysfs).ok();
            let path = spec.path.display().to_string();
            // A probe file's path that leads onto another filesystem than its own (its volume
            // unmounted) says nothing of the target: its runs are skipped, and its labels are
            // what they were.
            let configured = spec.rule.is_none().then_some(&*known);
            let expected = super::thread::expected_filesystem(&spec, configured);
            let elsewhere = !expected.is_empty()
                && filesystem::of(&spec.path, &roots.procfs)
                    .is_ok_and(|f| expected.mismatch(&f).is_some());
            let fresh = facts
                .as_ref()
                .filter(|_| !elsewhere)
                .map(|f| target_info(path, f));
            let label = if spec.rule.is_none() {
                known.label(&spec, fresh, &roots.sysfs)
            } else {
                Labelled {
                    info: fresh,
                    held: false,
                }
            };
            // Counted out before the scheduler hears of the answer, which may start a run.
            drop(counted);
            let _ = tx.send(Looked { facts, label });
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
        Ok(Ok(looked)) => Ok(looked),
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
/// target whose path cannot be looked at gets an info without a device, unless one is known (a
/// configured target's last device, or what an earlier stat found); the facts of the path.
pub(super) async fn stat_and_label(
    spec: &Arc<TargetSpec>,
    shared: &Shared,
    threads: &Arc<AtomicUsize>,
) -> Result<Option<TargetFacts>, StatFailure> {
    let stat = stat_target(spec, shared, threads).await;
    match &stat {
        Ok(Looked {
            facts,
            label: Labelled {
                info: Some(info),
                held,
            },
        }) => {
            shared.series.set_gone(spec, *held);
            let news = shared.series.set_info(spec, info.clone());
            // The facts' warning, when the info is theirs (not a last device held).
            let theirs = facts
                .as_ref()
                .filter(|f| f.device == info.device && Some(f.kind) == info.kind);
            if let Some(warning) = theirs.and_then(|f| f.warning(&spec.path)).filter(|_| news) {
                tracing::warn!(target = %spec.name, "{warning}");
            }
        }
        _ => {
            let last = (spec.rule.is_none())
                .then(|| shared.known.last(spec))
                .flatten();
            shared.series.set_info_if_unknown(
                spec,
                last.unwrap_or_else(|| TargetInfo {
                    path: spec.path.display().to_string(),
                    ..TargetInfo::default()
                }),
            );
        }
    }
    stat.map(|looked| looked.facts)
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
