//! A target's task: a cycle every interval (on a fixed grid, each start shifted by the jitter),
//! each cycle running the target's profiles in order on the device's lock, every run passing
//! the admission gates first and recorded when it ends.

use super::devices::{Budget, DeviceKey};
use super::gates::{Admission, Gates, Skip};
use super::log;
use super::probe_slots::GlobalSlot;
use super::shared::Shared;
use super::stat::{StatFailure, stat_and_label};
use super::thread::run_on_thread;
use crate::blockdev::BlockDevice;
use crate::config::TargetSpec;
use crate::probe::io_target::TargetFacts;
use crate::probe::measurement::ErrorReason;
use crate::probe::profile::Profile;
use crate::series::RunOutcome;
use rand::Rng;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often a configured target whose last device is gone looks at its path between cycles
/// ([`super::target_devices`]): a disk back under another kernel name relabels its series
/// within this, not a probe interval later.
pub(crate) const RELOOK_WHILE_GONE: Duration = Duration::from_secs(30);

/// What the stat at the start of a cycle found: the facts of the target's path, `None` when it
/// cannot be read, or why there is no answer.
type Stat = Result<Option<TargetFacts>, StatFailure>;

/// One target's task: what its cycles need.
pub(super) struct TargetTask {
    /// The same allocation as the target's series in the store.
    pub(super) spec: Arc<TargetSpec>,
    pub(super) shared: Arc<Shared>,
    /// The flag the engine's threads watch: raised when the task's token is cancelled (by a
    /// shutdown or a reload), and the run in flight stops.
    pub(super) cancel: Arc<AtomicBool>,
    /// The target's probe and stat threads that have not returned.
    pub(super) threads: Arc<AtomicUsize>,
}

/// Raises `flag` once `stop` is cancelled.
async fn raise_on_cancel(stop: CancellationToken, flag: Arc<AtomicBool>) {
    stop.cancelled().await;
    flag.store(true, Ordering::SeqCst);
}

/// Whether a cycle goes on after a profile.
enum Next {
    Profile,
    Stop,
}

impl TargetTask {
    /// Runs cycles until `stop`, the first `first` from now; `labelled` is told once the
    /// target's series carry their device.
    pub(super) async fn run(
        self,
        stop: CancellationToken,
        first: Duration,
        labelled: tokio::sync::oneshot::Sender<()>,
    ) {
        // The engine's threads read a flag, not the token: cancelling the token raises it.
        tokio::spawn(raise_on_cancel(stop.clone(), self.cancel.clone()));
        let mut grid = Instant::now() + first;
        let mut next = grid;
        // The first cycle's stat, made at once: it labels the target's series before the first
        // scrape that shows them (Scheduler::apply waits for it).
        let mut first_stat = Some(stat_and_label(&self.spec, &self.shared, &self.threads).await);
        let _ = labelled.send(());
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => {}
                () = self.relook_while_gone() => {
                    // Between cycles, only its labels: the device may be back under another
                    // name, which only a stat tells (one under its own name is in diskstats).
                    if self.threads.load(Ordering::SeqCst) == 0 {
                        let _ = stat_and_label(&self.spec, &self.shared, &self.threads).await;
                    }
                    continue;
                }
                () = stop.cancelled() => return,
            }
            if stop.is_cancelled() {
                return;
            }
            self.cycle(&stop, first_stat.take()).await;
            if stop.is_cancelled() {
                return;
            }
            grid += self.spec.settings.interval;
            let now = Instant::now();
            if grid < now {
                // The cycle overran a whole interval: restart the grid from now.
                grid = now;
            }
            next = self.jittered(grid).max(now);
        }
    }

    /// Waits [`RELOOK_WHILE_GONE`] while the target holds a last device that is gone; for ever
    /// otherwise.
    async fn relook_while_gone(&self) {
        if self.spec.rule.is_none() && self.shared.known.holds_gone(&self.spec.name) {
            tokio::time::sleep(RELOOK_WHILE_GONE).await;
        } else {
            std::future::pending::<()>().await;
        }
    }

    /// `grid` shifted at random by up to ±jitter × interval.
    fn jittered(&self, grid: Instant) -> Instant {
        let settings = &self.spec.settings;
        let shift = settings.interval.as_secs_f64()
            * settings.jitter
            * rand::rng().random_range(-1.0..=1.0);
        if shift >= 0.0 {
            grid + Duration::from_secs_f64(shift)
        } else {
            grid.checked_sub(Duration::from_secs_f64(-shift))
                .unwrap_or(grid)
        }
    }

    fn record(&self, profile: &Profile, outcome: &RunOutcome) {
        self.shared
            .series
            .record(&self.spec, &profile.name, outcome);
    }

    /// Records the same outcome for every profile of the cycle.
    fn record_all(&self, outcome: &RunOutcome) {
        for p in &self.spec.settings.profiles {
            self.record(p, outcome);
        }
    }

    fn skip(&self, profile: &Profile, skip: &Skip) {
        log::skipped(&self.spec, profile, skip);
        self.record(profile, &skip.outcome());
    }

    /// The device under the target for this cycle (`Some(None)`: none), from `stat` or a new
    /// stat; `None` when the cycle is given up on, which is recorded for every profile.
    async fn device(&self, stat: Option<Stat>) -> Option<Option<BlockDevice>> {
        let stat = match stat {
            Some(stat) => stat,
            None if self.threads.load(Ordering::SeqCst) > 0 => {
                log::cycle_skipped(&self.spec);
                self.record_all(&Skip::StillInFlight.outcome());
                return None;
            }
            None => stat_and_label(&self.spec, &self.shared, &self.threads).await,
        };
        match stat {
            Ok(facts) => Some(facts.and_then(|f| f.device)),
            Err(StatFailure {
                error,
                timed_out,
                waited: duration,
            }) => {
                log::cycle_abandoned(&self.spec, &error);
                self.record_all(&if timed_out {
                    RunOutcome::Abandoned { error, duration }
                } else {
                    // The stat's thread could not start, or ended without an answer.
                    RunOutcome::Failed {
                        error,
                        duration,
                        why: ErrorReason::Other,
                    }
                });
                None
            }
        }
    }

    /// One cycle: every profile in order, on the device's lock.
    async fn cycle(&self, stop: &CancellationToken, stat: Option<Stat>) {
        let Some(device) = self.device(stat).await else {
            return;
        };
        let key = DeviceKey::of(&self.spec, device.as_ref());
        let state = self.shared.devices.get(&key);
        if let Some(stuck) = state.stuck() {
            self.record_all(&Skip::held_by_kernel(&key, &stuck).outcome());
            return;
        }
        // The device first, then a global slot for each run: a run gives its slot back while it
        // only drains its I/O, and the cycle takes one again for its next run; taking them in the
        // other order, a cycle holding a slot could wait for this device while this cycle waits
        // for a slot.
        let mut budget = tokio::select! {
            g = state.lock.lock() => g,
            () = stop.cancelled() => return,
        };
        let settings = &self.spec.settings;
        let capacity = (2.0 * settings.busy_per_cycle().as_secs_f64())
            .max(2.0 * settings.max_duty_cycle * settings.interval.as_secs_f64());
        let budget = budget.get_or_insert_with(|| Budget::full(capacity));
        let gates = Gates {
            spec: &self.spec,
            key: &key,
            device: device.as_ref(),
            state: &state,
            threads: &self.threads,
            sysfs: &self.shared.roots.sysfs,
        };
        let mut slot = None;
        for profile in &settings.profiles {
            if stop.is_cancelled() {
                return;
            }
            let admission = gates.admit(profile, budget, capacity, stop).await;
            let next = match admission {
                Admission::Run => {
                    self.run_profile(profile, &gates, budget, &mut slot, stop)
                        .await
                }
                Admission::Skip(skip) => {
                    self.skip(profile, &skip);
                    Next::Profile
                }
                Admission::Stopped => Next::Stop,
            };
            if let Next::Stop = next {
                return;
            }
        }
    }

    /// Runs `profile` once it passed the gates: takes a global slot unless the cycle holds one,
    /// runs it on a probe thread, charges its engine time to the device's budget and records it.
    async fn run_profile<'s>(
        &'s self,
        profile: &Profile,
        gates: &Gates<'_>,
        budget: &mut Budget,
        slot: &mut Option<GlobalSlot<'s>>,
        stop: &CancellationToken,
    ) -> Next {
        if slot.is_none() {
            *slot = self.shared.slots.acquire(stop).await;
            if slot.is_none() {
                return Next::Stop;
            }
        }
        let (outcome, busy) = run_on_thread(
            &self.spec,
            profile,
            &self.shared,
            &self.cancel,
            &self.threads,
            slot,
        )
        .await;
        if stop.is_cancelled() {
            // Cancelled by a shutdown or a reload: not a result of the target, not counted.
            log::cancelled(&self.spec, profile);
            return Next::Stop;
        }
        if let RunOutcome::Ran { result, .. } = &outcome
            && let Some(stuck) = &result.stuck
        {
            log::stuck(&self.spec, profile, gates.key, stuck.count());
            gates.state.set_stuck(Arc::clone(stuck));
        }
        budget.tokens -= busy.as_secs_f64();
        self.record(profile, &outcome);
        log::outcome(&self.spec, profile, &outcome);
        Next::Profile
    }
}
