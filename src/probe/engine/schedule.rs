//! A run's clock: its [`Schedule`] (start, hard deadline, end of the runtime, rate cap), when it
//! must stop ([`abort_due`]), when each I/O was issued ([`Issue`]), and the engine threads' timer
//! slack.

use super::job::Job;
use super::options::RunOptions;
use crate::probe::measurement::Ending;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The time frame of a run, fixed when its first I/O is about to be issued.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    /// The run's start: its elapsed time, runtime and rate cap count from here.
    pub start: Instant,
    /// The hard timeout.
    pub deadline: Instant,
    /// End of the runtime, when the job has one.
    pub stop_at: Option<Instant>,
    rate_interval: Option<Duration>,
    number_ios: Option<u64>,
}

impl Schedule {
    pub(crate) fn new(job: &Job, start: Instant) -> Schedule {
        Schedule {
            start,
            deadline: start + job.timeout,
            stop_at: job.runtime.map(|r| start + r),
            rate_interval: job.rate_interval,
            number_ios: job.number_ios,
        }
    }

    /// A schedule from `start` with a hard timeout of `timeout`, for tests of its users.
    #[cfg(test)]
    pub(crate) fn for_test(
        start: Instant,
        timeout: Duration,
        runtime: Option<Duration>,
        number_ios: Option<u64>,
    ) -> Schedule {
        Schedule {
            start,
            deadline: start + timeout,
            stop_at: runtime.map(|r| start + r),
            rate_interval: None,
            number_ios,
        }
    }

    /// With a rate cap, when I/O number `k` (from 0) is due.
    pub(crate) fn due(&self, k: u64) -> Option<Instant> {
        let iv = self.rate_interval?;
        let ns = u64::try_from(iv.as_nanos()).unwrap_or(u64::MAX);
        Some(self.start + Duration::from_nanos(ns.saturating_mul(k)))
    }

    /// Whether the run has a rate cap.
    pub(crate) fn rate_capped(&self) -> bool {
        self.rate_interval.is_some()
    }

    /// Whether `issued` I/Os are all the job may issue.
    pub(crate) fn out_of_ios(&self, issued: u64) -> bool {
        self.number_ios.is_some_and(|n| issued >= n)
    }

    /// Whether the runtime is over at `now`.
    pub(crate) fn runtime_over(&self, now: Instant) -> bool {
        self.stop_at.is_some_and(|s| now >= s)
    }
}

/// Why a run must stop at `now`, if the cancellation flag is set or the deadline has passed.
pub(crate) fn abort_due(opts: &RunOptions, now: Instant, deadline: Instant) -> Option<Ending> {
    if opts.cancel.load(Ordering::Relaxed) {
        Some(Ending::Cancelled)
    } else if now >= deadline {
        Some(Ending::TimedOut)
    } else {
        None
    }
}

/// When an I/O was handed to the kernel, and what its latency counts from: the same instant,
/// or, for a rate-capped I/O the device held back, its due time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Issue {
    pub origin: Instant,
    pub submitted: Instant,
}

impl Issue {
    /// An I/O submitted at `at` whose latency counts from then.
    pub(crate) fn at(at: Instant) -> Issue {
        Issue {
            origin: at,
            submitted: at,
        }
    }
}

/// Lowers the calling thread's timer slack to 1 ns, so that its timed waits (a rate cap's next
/// issue time, the pause before the first I/O) end when asked rather than up to 50 µs later.
pub(crate) fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer and changes only the calling thread's slack.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        tracing::debug!(err = %std::io::Error::last_os_error(), "cannot lower the engine thread's timer slack");
    }
}
