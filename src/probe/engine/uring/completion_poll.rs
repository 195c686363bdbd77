//! When the io_uring engine polls for a completion before it sleeps ([`CompletionPoll`]).
//!
//! A thread that sleeps in `io_uring_enter` must be woken by whoever completes its I/O: on a
//! loop device the loop worker, on a real disk the interrupt handler. On a virtual machine the
//! wake-up is an inter-processor interrupt (a VM exit) that the completing CPU pays, and the
//! woken thread's scheduling delay lands in the latency it measures. When completions arrive
//! within tens of microseconds, asking the kernel for them a few times (`GETEVENTS` without a
//! minimum, which also runs the deferred completions) costs less CPU than one sleep and wake-up,
//! and stamps each completion when it arrives rather than when the thread is back on a CPU.
//!
//! So a wait polls for at most [`POLL_LIMIT`], and only while the waits before it found their
//! first completion within that time (a running average of how long they took, whether they
//! polled or slept); on a slower device it sleeps at once, as before. It polls only with at least
//! [`POLL_MIN_IN_FLIGHT`] I/Os in flight: at QD1 on a tmpfs-backed loop device polling cost more
//! CPU per I/O than sleeping and brought no IOPS (`bench/qd_sweep.sh`). With more than
//! [`POLL_MAX_IN_FLIGHT`] polling cost more CPU per I/O and brought fewer IOPS than sleeping: 4k
//! random I/O at QD16 on a tmpfs-backed loop device, on a 2-CPU guest, ran below fio's IOPS
//! polling and above them sleeping (docs/benchmarks.md, "Probe engine against fio across queue
//! depths").

use std::time::Duration;

/// Longest a wait polls before it sleeps.
pub(super) const POLL_LIMIT: Duration = Duration::from_micros(40);
/// Fewest I/Os in flight at which a wait polls first.
pub(super) const POLL_MIN_IN_FLIGHT: usize = 2;
/// Most I/Os in flight at which a wait polls first.
pub(super) const POLL_MAX_IN_FLIGHT: usize = 8;

/// The running average of how long the last waits took to their first completion.
#[derive(Debug, Default)]
pub(super) struct CompletionPoll {
    /// Exponentially weighted (1/4 per wait), in nanoseconds; `None` before the first wait.
    typical_ns: Option<u64>,
}

impl CompletionPoll {
    /// How long a wait with `in_flight` I/Os in flight and `timeout` (its own, if it has one)
    /// polls before it sleeps; `None`: it sleeps at once.
    pub(super) fn budget(&self, in_flight: usize, timeout: Option<Duration>) -> Option<Duration> {
        let limit = u64::try_from(POLL_LIMIT.as_nanos()).unwrap_or(u64::MAX);
        if !(POLL_MIN_IN_FLIGHT..=POLL_MAX_IN_FLIGHT).contains(&in_flight)
            || self.typical_ns.is_some_and(|t| t > limit)
        {
            return None;
        }
        Some(timeout.map_or(POLL_LIMIT, |t| t.min(POLL_LIMIT)))
    }

    /// Notes that a wait found its first completion after `waited` (or ended without one after
    /// more than [`POLL_LIMIT`], which says as much about polling).
    pub(super) fn note(&mut self, waited: Duration) {
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.typical_ns = Some(match self.typical_ns {
            None => ns,
            Some(t) => t - t / 4 + ns / 4,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn polls_only_while_completions_come_within_the_limit() {
        let mut poll = CompletionPoll::default();
        assert_eq!(poll.budget(2, None), Some(POLL_LIMIT), "no wait seen yet");
        poll.note(20 * US);
        assert_eq!(poll.budget(8, None), Some(POLL_LIMIT));
        // A slow device: one wait of 200 µs puts the average over the limit.
        poll.note(200 * US);
        assert_eq!(poll.budget(8, None), None);
        // It polls again once the waits are short again.
        for _ in 0..6 {
            poll.note(10 * US);
        }
        assert_eq!(poll.budget(8, None), Some(POLL_LIMIT));
    }

    #[test]
    fn a_slow_first_wait_stops_polling_at_once() {
        let mut poll = CompletionPoll::default();
        poll.note(POLL_LIMIT + US);
        assert_eq!(poll.budget(2, None), None);
        let mut poll = CompletionPoll::default();
        poll.note(POLL_LIMIT);
        assert_eq!(
            poll.budget(2, None),
            Some(POLL_LIMIT),
            "exactly the limit still polls"
        );
    }

    #[test]
    fn polls_only_between_its_depths_and_never_past_its_timeout() {
        let poll = CompletionPoll::default();
        assert_eq!(poll.budget(POLL_MAX_IN_FLIGHT, None), Some(POLL_LIMIT));
        assert_eq!(poll.budget(POLL_MAX_IN_FLIGHT + 1, None), None);
        assert_eq!(poll.budget(POLL_MIN_IN_FLIGHT, None), Some(POLL_LIMIT));
        assert_eq!(poll.budget(POLL_MIN_IN_FLIGHT - 1, None), None);
        assert_eq!(poll.budget(0, None), None);
        assert_eq!(poll.budget(2, Some(5 * US)), Some(5 * US));
    }
}
