//! The [`Scheduler`]: one task per target, started, stopped and replaced as
//! [`Scheduler::apply`] makes them match the configuration and what discovery found.

use super::cycle::TargetTask;
use super::log;
use super::shared::Shared;
use super::target_devices::TargetDevices;
use crate::config::{SchedulerConfig, TargetSpec};
use crate::host::Roots;
use crate::series::SeriesStore;
use rand::Rng;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long [`Scheduler::apply`] waits for the stats that label new targets' series; a target on
/// a filesystem that does not answer by then is exported without a device.
pub(crate) const LABEL_PATIENCE: Duration = Duration::from_secs(1);
/// Longest delay before a target's first cycle, per target added at the same time.
pub(crate) const FIRST_CYCLE_MAX_DELAY: Duration = Duration::from_secs(3);

/// Delay before the first cycle of the `k`-th (from 0) of `n` targets added together, `r` in
/// 0..1 at random: each has a slot of its own in a window of `n` × [`FIRST_CYCLE_MAX_DELAY`], at
/// most half of `interval`, and starts somewhere in it.
pub(crate) fn first_cycle_delay(k: usize, n: usize, interval: Duration, r: f64) -> Duration {
    let n = n.max(1) as f64;
    let window = FIRST_CYCLE_MAX_DELAY.mul_f64(n).min(interval / 2);
    window.div_f64(n).mul_f64(k as f64 + r.clamp(0.0, 1.0))
}

/// A target's running task.
struct RunningTask {
    /// Shared with the target's series in [`SeriesStore`] (see [`SeriesStore::record`]).
    spec: Arc<TargetSpec>,
    /// A child of the scheduler's token: cancelled when the target is removed or changed.
    stop: CancellationToken,
    handle: JoinHandle<()>,
}

/// Owns one task per configured target.
pub struct Scheduler {
    shared: Arc<Shared>,
    max_concurrent: usize,
    tasks: HashMap<String, RunningTask>,
    /// Stops every task: cancelled by [`Scheduler::shutdown`] or by the token it is a child of.
    shutdown: CancellationToken,
}

impl Scheduler {
    /// A scheduler with no targets yet; call [`Scheduler::apply`]. Must be called inside a tokio
    /// runtime.
    pub fn new(series: Arc<SeriesStore>, roots: Roots, config: &SchedulerConfig) -> Self {
        Self::stopped_by(
            series,
            roots,
            config,
            Arc::new(TargetDevices::in_memory()),
            &CancellationToken::new(),
        )
    }

    /// A scheduler whose tasks stop when `shutdown` is cancelled (they have child tokens of it,
    /// which a reload cancels for the targets it removes), and whose configured targets keep
    /// their last devices in `known`.
    pub(crate) fn stopped_by(
        series: Arc<SeriesStore>,
        roots: Roots,
        config: &SchedulerConfig,
        known: Arc<TargetDevices>,
        shutdown: &CancellationToken,
    ) -> Self {
        Scheduler {
            shutdown: shutdown.child_token(),
            shared: Arc::new(Shared::new(
                series,
                roots,
                config.max_concurrent_probes,
                known,
            )),
            max_concurrent: config.max_concurrent_probes,
            tasks: HashMap::new(),
        }
    }

    /// The last devices of the configured targets.
    pub(crate) fn known_devices(&self) -> &Arc<TargetDevices> {
        &self.shared.known
    }

    /// Makes the running tasks match `targets`: removed and changed targets are stopped (their
    /// in-flight run is cancelled), new and changed ones started, unchanged ones left alone.
    /// Returns once every new target's path has been looked at (its series then carry their
    /// final `device` label), or after [`LABEL_PATIENCE`] for a path whose stat hangs.
    pub async fn apply(&mut self, targets: &[TargetSpec], config: &SchedulerConfig) {
        let wanted = config.max_concurrent_probes;
        self.shared.slots.resize(self.max_concurrent, wanted);
        self.max_concurrent = wanted;

        let keep: Vec<String> = self
            .tasks
            .iter()
            .filter(|(name, t)| targets.iter().any(|s| &s.name == *name && *s == *t.spec))
            .map(|(name, _)| name.clone())
            .collect();
        let stale: Vec<String> = self
            .tasks
            .keys()
            .filter(|n| !keep.contains(n))
            .cloned()
            .collect();
        for name in stale {
            if let Some(task) = self.tasks.remove(&name) {
                log::stopping(&name);
                task.stop.cancel();
            }
        }
        // Kept targets go on with their allocation, new and changed ones get a new one: what a
        // task records is told apart from what its predecessors of the same name still return.
        let specs: Vec<Arc<TargetSpec>> = targets
            .iter()
            .map(|s| match self.tasks.get(&s.name) {
                Some(task) => task.spec.clone(),
                None => Arc::new(s.clone()),
            })
            .collect();
        self.shared.series.set_targets(&specs);
        let mut added: Vec<&Arc<TargetSpec>> = specs
            .iter()
            .filter(|s| !self.tasks.contains_key(&s.name))
            .collect();
        added.sort_by(|a, b| a.name.cmp(&b.name));
        let n = added.len();
        let mut labelled = Vec::new();
        for (k, spec) in added.into_iter().enumerate() {
            let first =
                first_cycle_delay(k, n, spec.settings.interval, rand::rng().random::<f64>());
            let stop = self.shutdown.child_token();
            let (label_tx, label_rx) = tokio::sync::oneshot::channel();
            labelled.push(label_rx);
            let task = TargetTask {
                spec: spec.clone(),
                shared: self.shared.clone(),
                cancel: Arc::new(AtomicBool::new(false)),
                threads: self.shared.threads_of(&spec.name),
            };
            let handle = tokio::spawn(task.run(stop.clone(), first, label_tx));
            log::scheduling(spec);
            self.tasks.insert(
                spec.name.clone(),
                RunningTask {
                    spec: spec.clone(),
                    stop,
                    handle,
                },
            );
        }
        self.shared.forget_unheld_threads();
        let deadline = tokio::time::Instant::now() + LABEL_PATIENCE;
        for label in labelled {
            let _ = tokio::time::timeout_at(deadline, label).await;
        }
    }

    /// Stops every target (cancels the scheduler's token, if its parent has not): in-flight
    /// runs are cancelled (the engines stop within 100 ms and drain their I/O) and their tasks
    /// awaited, for at most `deadline`. Returns whether they all stopped by then.
    pub async fn shutdown(self, deadline: Duration) -> bool {
        self.shutdown.cancel();
        let all = async {
            for task in self.tasks.into_values() {
                let _ = task.handle.await;
            }
        };
        let stopped = tokio::time::timeout(deadline, all).await.is_ok();
        if !stopped {
            tracing::warn!("probe tasks did not stop within {deadline:?}");
        }
        stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_cycles_of_targets_added_together_get_a_slot_each() {
        let secs = |d: Duration| d.as_secs_f64();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        let interval = Duration::from_secs(300);
        // One target: within 3 s, as always.
        assert!(close(secs(first_cycle_delay(0, 1, interval, 1.0)), 3.0));
        // Twelve disks found at once: a 3 s slot each, one after another, over 36 s.
        for k in 0..12 {
            let earliest = secs(first_cycle_delay(k, 12, interval, 0.0));
            let latest = secs(first_cycle_delay(k, 12, interval, 1.0));
            assert!(close(earliest, 3.0 * k as f64), "{k}: {earliest}");
            assert!(close(latest, 3.0 * (k + 1) as f64), "{k}: {latest}");
        }
        // Two hundred: spread over half the interval, not 600 s.
        assert!(close(
            secs(first_cycle_delay(199, 200, interval, 1.0)),
            150.0
        ));
        assert!(close(
            secs(first_cycle_delay(100, 200, interval, 0.0)),
            75.0
        ));
        // A short interval bounds a single target's delay too.
        let short = Duration::from_secs(1);
        assert!(close(secs(first_cycle_delay(0, 1, short, 1.0)), 0.5));
    }

    #[tokio::test]
    async fn lowering_the_probe_limit_retires_slots_held_by_running_probes() {
        let config = |max_concurrent_probes| SchedulerConfig {
            max_concurrent_probes,
        };
        let roots = Roots {
            procfs: "/proc".into(),
            sysfs: "/sys".into(),
            devfs: "/dev".into(),
        };
        let mut scheduler = Scheduler::new(Arc::new(SeriesStore::new()), roots, &config(4));
        let shared = scheduler.shared.clone();
        let take = || shared.slots.try_slot();
        let held: Vec<_> = (0..3).map(|_| take().unwrap()).collect();
        // 4 → 1 with three slots in use: the free one goes now, two when their runs end.
        scheduler.apply(&[], &config(1)).await;
        assert_eq!(shared.slots.available(), 0);
        drop(held);
        assert_eq!(shared.slots.available(), 1, "the limit is 1");
        let one = take().unwrap();
        assert!(take().is_none());
        // 1 → 3 while one is held, then back to 2: owed slots are cancelled before new ones.
        scheduler.apply(&[], &config(3)).await;
        assert_eq!(shared.slots.available(), 2);
        scheduler.apply(&[], &config(2)).await;
        drop(one);
        assert_eq!(shared.slots.available(), 2);
        let held: Vec<_> = (0..3).map(|_| take()).collect();
        assert_eq!(held.iter().filter(|s| s.is_some()).count(), 2);
    }
}
