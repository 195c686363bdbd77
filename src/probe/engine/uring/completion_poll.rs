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
//! [`POLL_MIN_IN_FLIGHT`] I/Os in flight (see there why). Up to [`POLL_MAX_IN_FLIGHT`] it always
//! polls (when completions come that quickly).
//!
//! With more in flight, up to [`TRIAL_MAX_IN_FLIGHT`], whether polling pays depends on the machine
//! more than on the device: the device has more queued through a wake-up, and what the wake-up
//! costs varies. 4k random I/O at QD16 on a tmpfs-backed loop device, on the same 2-CPU guest on
//! different days, against fio: one day polling ran at 0.94–0.95× fio's IOPS and sleeping at
//! 1.11–1.12×; another day, reads polling at 1.35× and sleeping at 0.95× (a build that always polls
//! there and one that always sleeps, `OURS_BIN=` each, `DEPTHS=16 WORKLOADS="randread:4k
//! randwrite:4k" sudo bench/qd_sweep.sh 5 1`). So each run tries both ([`Trial`]): its first waits
//! at those depths alternate between sleeping and polling in epochs of at least [`TRIAL_EPOCH`] and
//! [`TRIAL_EPOCH_IOS`] completions (sleep, poll, poll, sleep, twice: a drift of the machine's speed
//! touches both alike), and the rest of the run polls only if the polling epochs took at most
//! 100/[`TRIAL_GAIN_PERCENT`] of the sleeping epochs' time per completion. The run's first
//! epochs ([`TRIAL_EPOCH`]) are measured half polling, half sleeping. Rate-capped runs, whose
//! waits last as long as the cap says, do not try (they sleep), and deeper queues always sleep.

use std::time::{Duration, Instant};

/// Longest a wait polls before it sleeps: 40 µs. A wait polls only while the waits before it
/// found their first completion within this time (a running average); on a slower device it
/// sleeps at once.
pub(super) const POLL_LIMIT: Duration = Duration::from_micros(40);
/// Fewest I/Os in flight at which a wait polls first: 2. At QD1 on a tmpfs-backed loop device
/// polling cost more CPU per I/O than sleeping and brought no IOPS (`bench/qd_sweep.sh`).
pub(super) const POLL_MIN_IN_FLIGHT: usize = 2;
/// Most I/Os in flight at which a wait always polls first (when completions come within
/// [`POLL_LIMIT`]): 8.
pub(super) const POLL_MAX_IN_FLIGHT: usize = 8;
/// Most I/Os in flight at which a wait polls first if the run's [`Trial`] found that it pays:
/// 16. With more in flight the device has enough queued through a wake-up, and waits sleep.
pub(super) const TRIAL_MAX_IN_FLIGHT: usize = 16;
/// Shortest epoch of the trial: 25 ms, so that the eight epochs of [`TRIAL_ORDER`] take the
/// run's first 200 ms or so.
pub(super) const TRIAL_EPOCH: Duration = Duration::from_millis(25);
/// Fewest completions in an epoch of the trial: 512.
pub(super) const TRIAL_EPOCH_IOS: u64 = 512;
/// Whether each epoch of the trial polls: twice sleep, poll, poll, sleep.
const TRIAL_ORDER: [bool; 8] = [false, true, true, false, false, true, true, false];
/// How many times faster than sleeping (time per completion) polling must complete I/O for the
/// run to poll, in percent: 120, 1.2 times. Polling keeps the thread busy, so it must bring
/// enough more I/O to pay for that CPU.
pub(super) const TRIAL_GAIN_PERCENT: u128 = 120;

/// How long the last waits took to their first completion, and whether deeper waits poll.
#[derive(Debug)]
pub(super) struct CompletionPoll {
    /// Exponentially weighted (1/4 per wait), in nanoseconds; `None` before the first wait.
    typical_ns: Option<u64>,
    /// Whether waits with more than [`POLL_MAX_IN_FLIGHT`] in flight poll.
    trial: Trial,
}

/// Whether polling pays with more than [`POLL_MAX_IN_FLIGHT`] (up to [`TRIAL_MAX_IN_FLIGHT`]) in
/// flight, tried once per run: epochs of at least [`TRIAL_EPOCH`] and [`TRIAL_EPOCH_IOS`]
/// completions that sleep or poll in [`TRIAL_ORDER`], then the decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Trial {
    /// Epoch `epoch` of [`TRIAL_ORDER`], begun at `since` (the end of a wait; `None` until the
    /// first wait at these depths returned) with `done` completions since; `time` and `ios` sum
    /// the finished epochs that slept (`[0]`) and polled (`[1]`).
    Running {
        epoch: usize,
        since: Option<Instant>,
        done: u64,
        time: [Duration; 2],
        ios: [u64; 2],
    },
    /// Decided: whether these waits poll for the rest of the run.
    Decided(bool),
}

impl Default for Trial {
    fn default() -> Self {
        Trial::Running {
            epoch: 0,
            since: None,
            done: 0,
            time: [Duration::ZERO; 2],
            ios: [0; 2],
        }
    }
}

impl Trial {
    /// Whether a wait polls now.
    fn polls(&self) -> bool {
        match *self {
            Trial::Running { epoch, .. } => TRIAL_ORDER[epoch],
            Trial::Decided(poll) => poll,
        }
    }

    /// Notes that a wait returned at `now` with `ready` completions.
    fn note(&mut self, ready: u64, now: Instant) {
        let Trial::Running {
            epoch,
            since,
            done,
            time,
            ios,
        } = self
        else {
            return;
        };
        let Some(began) = *since else {
            // The first wait: the epoch's time starts when it returned.
            *since = Some(now);
            return;
        };
        *done += ready;
        if *done < TRIAL_EPOCH_IOS || now.saturating_duration_since(began) < TRIAL_EPOCH {
            return;
        }
        let polled = usize::from(TRIAL_ORDER[*epoch]);
        time[polled] += now.saturating_duration_since(began);
        ios[polled] += *done;
        *epoch += 1;
        *done = 0;
        *since = Some(now);
        if *epoch == TRIAL_ORDER.len() {
            let polls = polling_pays(*time, *ios);
            let per_io = |i: usize| time[i].as_nanos() / u128::from(ios[i].max(1));
            // Logged once per run, after this wait's time was taken (`RingIo::wait`).
            tracing::debug!(
                sleeping_ns_per_io = per_io(0) as u64,
                polling_ns_per_io = per_io(1) as u64,
                polls,
                "io_uring: polling trial decided"
            );
            *self = Trial::Decided(polls);
        }
    }
}

/// Whether the polling epochs' time per completion is at most 100/[`TRIAL_GAIN_PERCENT`] of the
/// sleeping epochs' (false when either completed nothing).
fn polling_pays(time: [Duration; 2], ios: [u64; 2]) -> bool {
    if ios.contains(&0) {
        return false;
    }
    // time[1] / ios[1] * gain / 100 <= time[0] / ios[0], in whole nanoseconds.
    let (t, n) = (time.map(|t| t.as_nanos()), ios.map(u128::from));
    t[1] * n[0] * TRIAL_GAIN_PERCENT <= t[0] * n[1] * 100
}

impl CompletionPoll {
    /// A run's poll policy; a rate-capped run (whose waits last as long as its cap says, not as
    /// long as the device takes) never polls with more than [`POLL_MAX_IN_FLIGHT`] in flight.
    pub(super) fn new(rate_capped: bool) -> CompletionPoll {
        CompletionPoll {
            typical_ns: None,
            trial: if rate_capped {
                Trial::Decided(false)
            } else {
                Trial::default()
            },
        }
    }

    /// How long a wait with `in_flight` I/Os in flight and `timeout` (its own, if it has one)
    /// polls before it sleeps; `None`: it sleeps at once.
    pub(super) fn budget(&self, in_flight: usize, timeout: Option<Duration>) -> Option<Duration> {
        let limit = u64::try_from(POLL_LIMIT.as_nanos()).unwrap_or(u64::MAX);
        let depth_polls = match in_flight {
            POLL_MIN_IN_FLIGHT..=POLL_MAX_IN_FLIGHT => true,
            n if n <= TRIAL_MAX_IN_FLIGHT => self.trial.polls(),
            _ => false,
        };
        if !depth_polls || self.typical_ns.is_some_and(|t| t > limit) {
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

    /// Notes that a wait with `in_flight` I/Os in flight (when it began) returned at `now` with
    /// `ready` completions: the trial counts the waits with more than [`POLL_MAX_IN_FLIGHT`] and
    /// at most [`TRIAL_MAX_IN_FLIGHT`] in flight.
    pub(super) fn note_completions(&mut self, in_flight: usize, ready: usize, now: Instant) {
        if (POLL_MAX_IN_FLIGHT + 1..=TRIAL_MAX_IN_FLIGHT).contains(&in_flight) {
            self.trial.note(ready as u64, now);
        }
    }

    /// The trial's state.
    #[cfg(test)]
    pub(super) fn trial(&self) -> Trial {
        self.trial
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn polls_only_while_completions_come_within_the_limit() {
        let mut poll = CompletionPoll::new(false);
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
        let mut poll = CompletionPoll::new(false);
        poll.note(POLL_LIMIT + US);
        assert_eq!(poll.budget(2, None), None);
        let mut poll = CompletionPoll::new(false);
        poll.note(POLL_LIMIT);
        assert_eq!(
            poll.budget(2, None),
            Some(POLL_LIMIT),
            "exactly the limit still polls"
        );
    }

    #[test]
    fn polls_only_between_its_depths_and_never_past_its_timeout() {
        let poll = CompletionPoll::new(false);
        assert_eq!(poll.budget(POLL_MAX_IN_FLIGHT, None), Some(POLL_LIMIT));
        // The trial's first epoch sleeps.
        assert_eq!(poll.budget(POLL_MAX_IN_FLIGHT + 1, None), None);
        assert_eq!(poll.budget(TRIAL_MAX_IN_FLIGHT + 1, None), None);
        assert_eq!(poll.budget(POLL_MIN_IN_FLIGHT, None), Some(POLL_LIMIT));
        assert_eq!(poll.budget(POLL_MIN_IN_FLIGHT - 1, None), None);
        assert_eq!(poll.budget(0, None), None);
        assert_eq!(poll.budget(2, Some(5 * US)), Some(5 * US));
    }

    /// Runs the trial at `in_flight` with a completion every `sleeping` (sleeping epochs) or
    /// `polling` (polling epochs), `per_wait` completions per wait; returns the budget asked in
    /// each wait and the decision.
    fn run_trial(sleeping: Duration, polling: Duration, per_wait: u64) -> (Vec<bool>, Trial) {
        let mut poll = CompletionPoll::new(false);
        poll.note(10 * US);
        let mut now = Instant::now();
        let mut asked = Vec::new();
        for _ in 0..100_000 {
            let polls = poll.budget(TRIAL_MAX_IN_FLIGHT, None).is_some();
            asked.push(polls);
            now += (if polls { polling } else { sleeping }) * per_wait as u32;
            poll.note_completions(TRIAL_MAX_IN_FLIGHT, per_wait as usize, now);
            if matches!(poll.trial(), Trial::Decided(_)) {
                break;
            }
        }
        (asked, poll.trial())
    }

    #[test]
    fn the_trial_sleeps_polls_polls_sleeps_then_decides() {
        let (asked, decided) = run_trial(4 * US, 2 * US, 4);
        assert_eq!(decided, Trial::Decided(true));
        // The first depth of the trial's range takes part as well.
        let mut poll = CompletionPoll::new(false);
        let now = Instant::now();
        poll.note_completions(POLL_MAX_IN_FLIGHT + 1, 0, now);
        poll.note_completions(POLL_MAX_IN_FLIGHT + 1, 600, now + TRIAL_EPOCH);
        assert!(matches!(poll.trial(), Trial::Running { epoch: 1, .. }));
        // The first wait starts the clock; then 25 ms per epoch: 3125 waits of 8 µs polling,
        // 1563 of 16 µs sleeping (512 completions are fewer).
        let waits =
            |per_io: Duration| TRIAL_EPOCH.as_nanos().div_ceil((per_io * 4).as_nanos()) as usize;
        let per_epoch: Vec<usize> = TRIAL_ORDER
            .iter()
            .map(|&p| waits(if p { 2 * US } else { 4 * US }))
            .collect();
        assert_eq!(asked.len(), 1 + per_epoch.iter().sum::<usize>());
        let mut at = 1;
        for (&n, &polls) in per_epoch.iter().zip(&TRIAL_ORDER) {
            assert!(asked[at..at + n].iter().all(|&p| p == polls));
            at += n;
        }
    }

    #[test]
    fn an_epoch_has_at_least_its_completions() {
        // A slow device: 512 completions take longer than the epoch's time.
        let (asked, decided) = run_trial(200 * US, 200 * US, 1);
        assert_eq!(decided, Trial::Decided(false));
        assert_eq!(
            asked.len(),
            1 + TRIAL_ORDER.len() * TRIAL_EPOCH_IOS as usize
        );
    }

    #[test]
    fn polling_must_be_at_least_the_gain_faster() {
        // Exactly the gain: polls.
        let sleeping = Duration::from_nanos(3600);
        let polling = Duration::from_nanos(3000);
        assert_eq!(run_trial(sleeping, polling, 4).1, Trial::Decided(true));
        // Just below it: sleeps.
        let polling = Duration::from_nanos(3020);
        assert_eq!(run_trial(sleeping, polling, 4).1, Trial::Decided(false));
        // Polling slower than sleeping: sleeps.
        assert_eq!(run_trial(2 * US, 3 * US, 1).1, Trial::Decided(false));
    }

    #[test]
    fn decided_the_deeper_waits_poll_or_sleep_for_the_rest_of_the_run() {
        let mut poll = CompletionPoll {
            trial: Trial::Decided(true),
            ..CompletionPoll::new(false)
        };
        assert_eq!(poll.budget(TRIAL_MAX_IN_FLIGHT, None), Some(POLL_LIMIT));
        assert_eq!(poll.budget(TRIAL_MAX_IN_FLIGHT + 1, None), None);
        // A slow device still sleeps at once.
        poll.note(POLL_LIMIT + US);
        assert_eq!(poll.budget(TRIAL_MAX_IN_FLIGHT, None), None);
        poll.trial = Trial::Decided(false);
        poll.typical_ns = None;
        assert_eq!(poll.budget(TRIAL_MAX_IN_FLIGHT, None), None);
        assert_eq!(poll.budget(POLL_MAX_IN_FLIGHT, None), Some(POLL_LIMIT));
    }

    #[test]
    fn a_rate_capped_run_never_tries_polling_deeper() {
        let poll = CompletionPoll::new(true);
        assert_eq!(poll.trial(), Trial::Decided(false));
        assert_eq!(poll.budget(POLL_MAX_IN_FLIGHT + 1, None), None);
        assert_eq!(poll.budget(POLL_MAX_IN_FLIGHT, None), Some(POLL_LIMIT));
        assert_eq!(CompletionPoll::new(false).trial(), Trial::default());
    }

    #[test]
    fn epochs_that_completed_nothing_never_decide_for_polling() {
        let ms = Duration::from_millis(1);
        assert!(!polling_pays([ms, ms], [0, 10]));
        assert!(!polling_pays([ms, ms], [10, 0]));
        assert!(!polling_pays([ms, Duration::ZERO], [10, 0]));
        assert!(polling_pays([2 * ms, ms], [10, 10]));
    }

    #[test]
    fn shallower_and_deeper_waits_are_no_part_of_the_trial() {
        let mut poll = CompletionPoll::new(false);
        let now = Instant::now();
        for k in 0..10_000u32 {
            poll.note_completions(POLL_MAX_IN_FLIGHT, 4, now + k * US);
            poll.note_completions(TRIAL_MAX_IN_FLIGHT + 1, 4, now + k * US);
        }
        assert_eq!(poll.trial(), Trial::default());
    }
}
