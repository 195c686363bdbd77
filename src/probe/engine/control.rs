//! The one run controller both engines share: where a run is ([`Phase`]), when it stops issuing
//! and when it aborts ([`Control::check`]: cancellation, the hard timeout, a yield request, the
//! end of the runtime or of the job's I/O count; an error ends the issuing: [`Control::failed`]),
//! when an abort's grace is over, which completions count, and how the run ends
//! ([`Control::ending`]). An engine only submits, reaps and cancels: it asks the controller at
//! every turn and does what it says ([`Order`]), so that the same events end a run the same way
//! on io_uring and psync.

use super::options::{DRAIN_GRACE, RunOptions};
use super::schedule::{Schedule, abort_due};
use crate::probe::measurement::Ending;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Issuing I/O.
    Issuing,
    /// Not issuing any more; waiting for what is in flight to complete.
    Draining(Ending),
    /// In-flight I/O was cancelled at `since` (cancellation or the hard timeout); what is still
    /// in flight is waited for at most [`DRAIN_GRACE`].
    Aborting {
        /// When the abort started.
        since: Instant,
        /// Why.
        why: Ending,
    },
}

/// A limit a run has reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// Cancellation or the hard timeout: the run aborts.
    Abort(Ending),
    /// A yield request, the end of the runtime or of the job's I/O count: the run stops issuing.
    Stop(Ending),
}

/// The limit a run asked for with `opts` on `schedule` has reached at `now`, with `issued` I/Os
/// issued so far: the one definition of the limits, which the controller acts on
/// ([`Control::check`]) and a thread that issues on its own (a psync worker) looks at before
/// every I/O, so that both engines stop at the same events.
pub(crate) fn limit_at(
    opts: &RunOptions,
    schedule: &Schedule,
    now: Instant,
    issued: u64,
) -> Option<Limit> {
    if let Some(why) = abort_due(opts, now, schedule.deadline) {
        Some(Limit::Abort(why))
    } else if opts.yield_now.load(Ordering::Relaxed) {
        Some(Limit::Stop(Ending::Yielded))
    } else if schedule.runtime_over(now) || schedule.out_of_ios(issued) {
        Some(Limit::Stop(Ending::Finished))
    } else {
        None
    }
}

/// What an engine must do once the controller has looked at the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum Order {
    /// Go on.
    Continue,
    /// An abort started now: cancel what is in flight.
    Cancel,
}

/// A run's controller: its options, its schedule and its phase.
#[derive(Debug)]
pub(crate) struct Control {
    opts: RunOptions,
    schedule: Schedule,
    phase: Phase,
}

impl Control {
    /// The controller of a run asked for with `opts`, on `schedule`, issuing.
    pub(crate) fn new(opts: RunOptions, schedule: Schedule) -> Control {
        Control {
            opts,
            schedule,
            phase: Phase::Issuing,
        }
    }

    /// The run's options.
    pub(crate) fn opts(&self) -> &RunOptions {
        &self.opts
    }

    /// The run's schedule.
    pub(crate) fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Where the run is.
    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    /// Whether the run issues I/O.
    pub(crate) fn issuing(&self) -> bool {
        self.phase == Phase::Issuing
    }

    /// Whether the run was aborted.
    pub(crate) fn aborting(&self) -> bool {
        matches!(self.phase, Phase::Aborting { .. })
    }

    /// Looks at the limits at `now`, with `issued` I/Os issued so far: aborts on cancellation
    /// or the hard timeout ([`Order::Cancel`]), stops issuing on a yield request or the end of
    /// the runtime or of the job's I/O count.
    pub(crate) fn check(&mut self, now: Instant, issued: u64) -> Order {
        if self.aborting() {
            return Order::Continue;
        }
        match limit_at(&self.opts, &self.schedule, now, issued) {
            Some(Limit::Abort(why)) => self.abort(why, now),
            Some(Limit::Stop(why)) => {
                self.stop_issuing(why);
                Order::Continue
            }
            None => Order::Continue,
        }
    }

    /// Stops issuing for `why`: the first reason is kept, and the caller's hook is told once.
    pub(crate) fn stop_issuing(&mut self, why: Ending) {
        if self.phase == Phase::Issuing {
            if let Some(hook) = &self.opts.on_draining {
                hook.call();
            }
            self.phase = Phase::Draining(why);
        }
    }

    /// An I/O, a sync or a system call of the engine failed: the run stops issuing, and ends
    /// [`Ending::Failed`] unless it times out or is cancelled ([`Control::ending`]).
    pub(crate) fn failed(&mut self) {
        self.stop_issuing(Ending::Failed);
    }

    /// While the engine sets up, before the run's clock starts: aborts on cancellation or the
    /// hard timeout only (counted from the set-up's start).
    pub(crate) fn check_set_up(&mut self, now: Instant) -> Order {
        match abort_due(&self.opts, now, self.schedule.deadline) {
            Some(why) => self.abort(why, now),
            None => Order::Continue,
        }
    }

    /// Starts the run's clock on `schedule` (the set-up is over), unless the run was aborted.
    pub(crate) fn start(&mut self, schedule: Schedule) {
        if self.issuing() {
            self.schedule = schedule;
        }
    }

    /// Aborts the run for `why` at `now` (once): the engine cancels what is in flight.
    pub(crate) fn abort(&mut self, why: Ending, now: Instant) -> Order {
        if self.aborting() {
            return Order::Continue;
        }
        self.stop_issuing(why);
        self.phase = Phase::Aborting { since: now, why };
        Order::Cancel
    }

    /// Whether an abort's grace period is over at `now`: the run returns, and leaves what the
    /// kernel still holds to the engine's leftovers.
    pub(crate) fn grace_over(&self, now: Instant) -> bool {
        match self.phase {
            Phase::Aborting { since, .. } => now >= since + DRAIN_GRACE,
            _ => false,
        }
    }

    /// How the run ended, once it has (`errors`: whether it counted a failed I/O or call, `now`:
    /// when it returns). The reason it stopped issuing, or `Finished` (or `Yielded`, when a
    /// yield was asked for and every I/O had ended before the engine looked); then:
    /// - an error makes a run that finished or yielded [`Ending::Failed`] (what the disk did
    ///   outranks why the run stopped);
    /// - a run that returns after its hard deadline without having been aborted (its last
    ///   completions came in late) is [`Ending::TimedOut`], as an aborted one is;
    /// - a timeout or a cancellation stays what it is, errors or not.
    pub(crate) fn ending(&self, errors: bool, now: Instant) -> Ending {
        let stopped = match self.phase {
            Phase::Issuing if self.opts.yield_now.load(Ordering::Relaxed) => Ending::Yielded,
            Phase::Issuing => Ending::Finished,
            Phase::Draining(why) | Phase::Aborting { why, .. } => why,
        };
        let stopped = match stopped {
            Ending::Finished | Ending::Yielded if errors => Ending::Failed,
            other => other,
        };
        match stopped {
            Ending::Finished | Ending::Yielded | Ending::Failed if now > self.schedule.deadline => {
                Ending::TimedOut
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::engine::options::DrainingHook;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    fn control(runtime: Option<Duration>, number_ios: Option<u64>) -> (Control, Arc<AtomicU32>) {
        let hooked = Arc::new(AtomicU32::new(0));
        let h = hooked.clone();
        let opts = RunOptions {
            timeout: Duration::from_secs(2),
            on_draining: Some(DrainingHook::new(move || {
                h.fetch_add(1, Ordering::Relaxed);
            })),
            ..RunOptions::default()
        };
        let start = Instant::now();
        let schedule = Schedule::for_test(start, Duration::from_secs(2), runtime, number_ios);
        (Control::new(opts, schedule), hooked)
    }

    #[test]
    fn a_yield_then_an_error_while_draining_ends_failed() {
        let (mut c, hooked) = control(Some(Duration::from_secs(1)), None);
        let now = c.schedule().start;
        c.opts.yield_now.store(true, Ordering::Relaxed);
        assert_eq!(c.check(now, 3), Order::Continue);
        assert_eq!(c.phase(), Phase::Draining(Ending::Yielded));
        c.failed();
        assert_eq!(
            c.phase(),
            Phase::Draining(Ending::Yielded),
            "the first reason"
        );
        assert_eq!(c.ending(true, now), Ending::Failed);
        assert_eq!(c.ending(false, now), Ending::Yielded);
        assert_eq!(hooked.load(Ordering::Relaxed), 1, "the hook once");
    }

    #[test]
    fn limits_end_the_issuing_and_aborts_order_a_cancel_once() {
        let (mut c, _) = control(Some(Duration::from_secs(1)), Some(10));
        let start = c.schedule().start;
        assert_eq!(c.check(start, 9), Order::Continue);
        assert!(c.issuing());
        assert_eq!(c.check(start, 10), Order::Continue);
        assert_eq!(c.phase(), Phase::Draining(Ending::Finished));
        // The hard timeout during the drain: an abort, ordered once.
        let late = start + Duration::from_secs(2);
        assert_eq!(c.check(late, 10), Order::Cancel);
        assert_eq!(c.check(late, 10), Order::Continue);
        assert!(c.aborting());
        assert!(!c.grace_over(late));
        assert!(c.grace_over(late + DRAIN_GRACE));
        assert_eq!(c.ending(true, late), Ending::TimedOut);
        // Cancellation outranks everything but an abort already under way.
        let (mut c, _) = control(None, Some(10));
        c.opts.cancel.store(true, Ordering::Relaxed);
        assert_eq!(c.check(c.schedule().start, 0), Order::Cancel);
        assert_eq!(c.ending(true, c.schedule().start), Ending::Cancelled);
    }

    #[test]
    fn a_run_that_returns_after_its_deadline_timed_out() {
        let (mut c, _) = control(Some(Duration::from_secs(1)), None);
        let start = c.schedule().start;
        assert_eq!(c.check(start + Duration::from_secs(1), 5), Order::Continue);
        let deadline = c.schedule().deadline;
        assert_eq!(c.ending(false, deadline), Ending::Finished);
        assert_eq!(
            c.ending(false, deadline + Duration::from_millis(1)),
            Ending::TimedOut
        );
        // Every I/O ended before the engine saw the yield request: yielded.
        let (c, _) = control(None, Some(1));
        c.opts.yield_now.store(true, Ordering::Relaxed);
        assert_eq!(c.ending(false, c.schedule().start), Ending::Yielded);
    }
}
