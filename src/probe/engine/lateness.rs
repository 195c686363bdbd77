//! How late an engine thread ran because the CPU was busy with something else: the scheduler's
//! run delay of the thread (time it was runnable but not running), from
//! `/proc/thread-self/schedstat`.
//!
//! A rate-capped run counts an I/O's latency from its due time only when the device held it back
//! (every queue slot busy when it fell due). A slot looks busy until the engine reaps its
//! completion, so an engine thread that was preempted (other processes on its CPU) would
//! otherwise take its own lateness for the device's. Subtracting the run delay the thread
//! accumulated while it waited for the completion tells the two apart.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Duration;

/// The calling thread's cumulative run delay, readable again and again with one `pread`.
pub(crate) struct RunDelay {
    /// `/proc/thread-self/schedstat` of the thread that opened it; `None` when the kernel does
    /// not provide it (then no lateness is ever subtracted).
    file: Option<File>,
}

impl RunDelay {
    /// Opens the calling thread's schedstat (it keeps describing this thread when read later).
    pub(crate) fn of_this_thread() -> RunDelay {
        RunDelay {
            file: File::open("/proc/thread-self/schedstat").ok(),
        }
    }

    /// The thread's run delay so far.
    pub(crate) fn total(&self) -> Option<Duration> {
        let file = self.file.as_ref()?;
        let mut buf = [0u8; 96];
        let n = file.read_at(&mut buf, 0).ok()?;
        parse_run_delay(std::str::from_utf8(&buf[..n]).ok()?)
    }
}

/// The run delay (second field, nanoseconds) of a schedstat line `exec_ns run_delay_ns slices`.
fn parse_run_delay(text: &str) -> Option<Duration> {
    let ns = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Laps of the thread's time: the run delay accumulated since the previous lap. One reading per
/// lap, taken after the time that matters (a completion's) was stamped, so that reading it never
/// lands in a latency.
pub(crate) struct Laps {
    delay: RunDelay,
    /// The run delay and the time at the previous lap; `None` when not measuring.
    last: Option<(Duration, std::time::Instant)>,
}

impl Laps {
    /// Laps of the calling thread (when `measure`; otherwise every lap is zero).
    pub(crate) fn of_this_thread(measure: bool) -> Laps {
        let delay = RunDelay::of_this_thread();
        let last = if measure {
            delay.total().map(|d| (d, std::time::Instant::now()))
        } else {
            None
        };
        Laps { delay, last }
    }

    /// The run delay since the previous lap, at most the wall time since then; starts a new lap.
    pub(crate) fn lap(&mut self, now: std::time::Instant) -> Duration {
        let Some((before, at)) = self.last else {
            return Duration::ZERO;
        };
        match self.delay.total() {
            Some(total) => {
                self.last = Some((total, now));
                total
                    .saturating_sub(before)
                    .min(now.saturating_duration_since(at))
            }
            None => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_schedstat() {
        assert_eq!(
            parse_run_delay("1234 5061176 7\n"),
            Some(Duration::from_nanos(5_061_176))
        );
        assert_eq!(parse_run_delay("1234\n"), None);
        assert_eq!(parse_run_delay(""), None);
    }

    #[test]
    fn laps_are_bounded_by_the_wall_time() {
        if RunDelay::of_this_thread().total().is_none() {
            eprintln!("SKIPPED: no /proc/thread-self/schedstat");
            return;
        }
        // Never more than the wall time of the lap, whatever the machine is doing.
        let mut laps = Laps::of_this_thread(true);
        let start = std::time::Instant::now();
        std::thread::yield_now();
        let now = std::time::Instant::now();
        assert!(laps.lap(now) <= now - start + Duration::from_millis(1));
        let mut off = Laps::of_this_thread(false);
        assert_eq!(off.lap(std::time::Instant::now()), Duration::ZERO);
    }
}
