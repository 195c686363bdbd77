//! The outcomes of a target-profile pair's last finished runs, counted in runs rather than in
//! minutes, so that an alert says "3 of the last 10 runs failed" or "3 syncing runs in a row had
//! a p99 above X" the same at a 1-minute and a 1-hour interval (a PromQL range is a literal).
//!
//! A finished run is one that ran or tried to: `success`, `error` or `timeout`. Skipped runs
//! (busy device, budget, a run that yielded to other I/O) and runs cancelled by a reload or a
//! shutdown are not runs of the target and leave the window as it is. The window lives in memory:
//! it starts empty when the agent starts, and is carried over by a reload that keeps the target
//! and the profile (`SeriesStore::set_targets`). The runs of a configured target whose device is
//! gone (`SeriesStore::set_gone`) fail for that and say nothing of the disk: they leave the
//! window as it is too, so that they neither page as failures while `DiskprobeTargetVanished`
//! says why nor after the disk is back.

use crate::probe::measurement::{Ending, LatencySummary, Measurement, RunStatus};
use std::collections::VecDeque;

/// How many finished runs the window holds: `diskprobe_probe_recent_runs` and
/// `diskprobe_probe_recent_io_error_runs` count over the last this many.
pub(crate) const RECENT_RUNS: usize = 10;

/// How many syncing runs `diskprobe_probe_recent_sync_latency_seconds` takes the least of.
pub(crate) const RECENT_SYNC_RUNS: usize = 3;

/// The results a finished run can have, in the order they are published.
pub(crate) const FINISHED: [RunStatus; 3] =
    [RunStatus::Success, RunStatus::Error, RunStatus::Timeout];

/// One finished run.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Finished {
    status: RunStatus,
    /// At least one of its I/Os (or syncs) failed.
    io_errors: bool,
}

/// The last [`RECENT_RUNS`] finished runs of a target-profile pair, and the sync latency
/// statistics of its last [`RECENT_SYNC_RUNS`] runs that completed syncs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecentRuns {
    runs: VecDeque<Finished>,
    syncs: VecDeque<LatencySummary>,
}

/// Pushes `item` onto `window`, dropping the oldest beyond `len`.
fn push<T>(window: &mut VecDeque<T>, len: usize, item: T) {
    if window.len() == len {
        window.pop_front();
    }
    window.push_back(item);
}

impl RecentRuns {
    /// Adds a run that ended with `status` (its `result` label), with the engine's measurement
    /// when the engine ran; skipped and cancelled runs are left out.
    pub(crate) fn record(&mut self, status: RunStatus, measurement: Option<&Measurement>) {
        let cancelled = measurement.is_some_and(|m| m.ending == Ending::Cancelled);
        if status == RunStatus::Skipped || cancelled {
            return;
        }
        let io_errors = measurement.is_some_and(|m| m.errors > 0);
        push(&mut self.runs, RECENT_RUNS, Finished { status, io_errors });
        let synced = measurement
            .and_then(|m| m.syncs.as_ref())
            .filter(|s| s.count > 0 && !s.latency_ns.is_empty());
        if let Some(syncs) = synced {
            push(
                &mut self.syncs,
                RECENT_SYNC_RUNS,
                LatencySummary::of(&syncs.latency_ns),
            );
        }
    }

    /// How many of the window's runs ended with `status`.
    pub(crate) fn count(&self, status: RunStatus) -> usize {
        self.runs.iter().filter(|r| r.status == status).count()
    }

    /// How many of the window's runs saw at least one failed I/O.
    pub(crate) fn io_error_runs(&self) -> usize {
        self.runs.iter().filter(|r| r.io_errors).count()
    }

    /// Each sync latency statistic's least value over the last [`RECENT_SYNC_RUNS`] syncing runs:
    /// above a threshold only when every one of them was. `None` before there are that many.
    pub(crate) fn sync_floor(&self) -> Option<LatencySummary> {
        if self.syncs.len() < RECENT_SYNC_RUNS {
            return None;
        }
        self.syncs.iter().copied().reduce(|a, b| LatencySummary {
            min: a.min.min(b.min),
            mean: a.mean.min(b.mean),
            max: a.max.min(b.max),
            p50: a.p50.min(b.p50),
            p90: a.p90.min(b.p90),
            p99: a.p99.min(b.p99),
            p999: a.p999.min(b.p999),
            p9999: a.p9999.min(b.p9999),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::measurement::{EngineKind, Syncs, new_latency_histogram};
    use std::time::Duration;

    /// What the store hands the window for a run.
    enum StoreOutcome {
        /// The engine ran.
        Ran(Box<Measurement>),
        /// The run did not start, or failed before the engine ran.
        Failed,
        /// The run was given up on.
        Abandoned,
        /// The run was not started.
        Skipped,
    }

    impl RecentRuns {
        fn add(&mut self, outcome: &StoreOutcome) {
            match outcome {
                StoreOutcome::Ran(m) => self.record(m.status(), Some(m)),
                StoreOutcome::Failed => self.record(RunStatus::Error, None),
                StoreOutcome::Abandoned => self.record(RunStatus::Timeout, None),
                StoreOutcome::Skipped => self.record(RunStatus::Skipped, None),
            }
        }
    }

    /// A run of 10 I/Os with `errors` of them failed, ended by `ending`; with syncs of
    /// `sync_us` microseconds each (and one of 10 times that) when given.
    fn ran(ending: Ending, errors: u64, sync_us: Option<u64>) -> StoreOutcome {
        let mut latency = new_latency_histogram();
        latency.record(100_000).unwrap();
        let syncs = sync_us.map(|us| {
            let mut h = new_latency_histogram();
            for i in 0..100 {
                h.record(if i == 99 { us * 10_000 } else { us * 1000 })
                    .unwrap();
            }
            Syncs {
                count: 100,
                latency_ns: h,
            }
        });
        StoreOutcome::Ran(Box::new(Measurement {
            ios: 10,
            errors,
            ending,
            latency_ns: latency,
            elapsed: Duration::from_millis(10),
            syncs,
            ..Measurement::empty(EngineKind::Psync)
        }))
    }

    fn counts(r: &RecentRuns) -> [usize; 4] {
        [
            r.count(RunStatus::Success),
            r.count(RunStatus::Error),
            r.count(RunStatus::Timeout),
            r.io_error_runs(),
        ]
    }

    #[test]
    fn the_window_holds_the_last_ten_finished_runs() {
        let mut r = RecentRuns::default();
        assert_eq!(counts(&r), [0; 4]);
        for _ in 0..7 {
            r.add(&ran(Ending::Finished, 0, None));
        }
        r.add(&ran(Ending::Failed, 2, None));
        r.add(&StoreOutcome::Failed);
        r.add(&StoreOutcome::Abandoned);
        assert_eq!(counts(&r), [7, 2, 1, 1]);
        // Five more successes push out five of the oldest: the failures are still in.
        for _ in 0..5 {
            r.add(&ran(Ending::Finished, 0, None));
        }
        assert_eq!(counts(&r), [7, 2, 1, 1]);
        // Three more push out the two oldest successes and the I/O error run.
        for _ in 0..3 {
            r.add(&ran(Ending::Finished, 0, None));
        }
        assert_eq!(counts(&r), [8, 1, 1, 0]);
        // Two more, the open failure and the abandoned run.
        for _ in 0..2 {
            r.add(&ran(Ending::Finished, 0, None));
        }
        assert_eq!(counts(&r), [10, 0, 0, 0]);
        // A run that timed out with failed I/Os counts as both.
        r.add(&ran(Ending::TimedOut, 1, None));
        assert_eq!(counts(&r), [9, 0, 1, 1]);
    }

    #[test]
    fn skipped_yielded_and_cancelled_runs_do_not_count() {
        let mut r = RecentRuns::default();
        for _ in 0..10 {
            r.add(&StoreOutcome::Failed);
        }
        assert_eq!(counts(&r), [0, 10, 0, 0]);
        let before = r.clone();
        r.add(&StoreOutcome::Skipped);
        r.add(&ran(Ending::Yielded, 0, Some(500)));
        r.add(&ran(Ending::Cancelled, 3, Some(500)));
        assert_eq!(r, before, "nothing moved the window");
        assert_eq!(r.sync_floor(), None);
    }

    #[test]
    fn the_sync_floor_is_the_least_of_the_last_three_syncing_runs() {
        let mut r = RecentRuns::default();
        r.add(&ran(Ending::Finished, 0, Some(400)));
        r.add(&ran(Ending::Finished, 0, Some(900)));
        // A run without syncs (an errored open) is not a syncing run.
        r.add(&StoreOutcome::Failed);
        assert_eq!(r.sync_floor(), None, "two syncing runs only");
        r.add(&ran(Ending::Finished, 0, Some(700)));
        let floor = r.sync_floor().unwrap();
        // Each statistic is its least over 400, 900 and 700 µs runs: the 400 µs run's.
        assert!((floor.p50 - 400e-6).abs() < 1e-6, "{floor:?}");
        assert!((floor.max - 4e-3).abs() < 1e-5, "{floor:?}");
        // The 400 µs run leaves the window: the floor is the 700 µs run's now.
        r.add(&ran(Ending::Finished, 0, Some(800)));
        let floor = r.sync_floor().unwrap();
        assert!((floor.p50 - 700e-6).abs() < 1e-6, "{floor:?}");
        assert!((floor.p99 - 700e-6).abs() < 1e-6, "{floor:?}");
        // One fast run is enough to bring it down: the alert needs three slow ones in a row.
        r.add(&ran(Ending::Finished, 0, Some(100)));
        assert!((r.sync_floor().unwrap().p50 - 100e-6).abs() < 1e-6);
    }
}
