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

/// The run delay accumulated over a stretch of the thread's time.
pub(crate) struct Stopwatch {
    start: Option<Duration>,
}

impl Stopwatch {
    /// Starts measuring (when `measure`; otherwise every reading is zero).
    pub(crate) fn start(delay: &RunDelay, measure: bool) -> Stopwatch {
        Stopwatch {
            start: if measure { delay.total() } else { None },
        }
    }

    /// Run delay since the start, at most `bound` (the stretch's wall time).
    pub(crate) fn read(&self, delay: &RunDelay, bound: Duration) -> Duration {
        match (self.start, self.start.and_then(|_| delay.total())) {
            (Some(a), Some(b)) => b.saturating_sub(a).min(bound),
            _ => Duration::ZERO,
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
    fn a_busy_cpu_shows_as_run_delay() {
        let delay = RunDelay::of_this_thread();
        if delay.total().is_none() {
            eprintln!("SKIPPED: no /proc/thread-self/schedstat");
            return;
        }
        // Never more than the bound, whatever the machine is doing.
        let watch = Stopwatch::start(&delay, true);
        std::thread::yield_now();
        assert!(watch.read(&delay, Duration::from_nanos(5)) <= Duration::from_nanos(5));
        let off = Stopwatch::start(&delay, false);
        assert_eq!(off.read(&delay, Duration::MAX), Duration::ZERO);
    }
}
