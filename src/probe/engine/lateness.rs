//! How late an engine thread ran because the CPU was busy with something else: the scheduler's
//! run delay of the thread (time it was runnable but not running), from
//! `/proc/thread-self/schedstat`.
//!
//! A rate-capped run counts an I/O's latency from its due time only when the device held it back
//! (every queue slot busy when it fell due). A slot looks busy until the engine reaps its
//! completion, so an engine thread that was preempted (other processes on its CPU) would
//! otherwise take its own lateness for the device's. Subtracting the run delay the thread
//! accumulated while it waited for the completion tells the two apart.
//!
//! Every run also adds up the run delay of each thread that submits or reaps its I/O over the
//! run ([`RunWait`], into [`crate::probe::measurement::CpuWait`]): the time the run waited for a
//! CPU, which a reader needs to tell a busy CPU from a slow disk.

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

/// One thread's run delay over a run: read when the run's clock starts, and again when the
/// thread is done with the run's I/O.
pub(crate) struct RunWait {
    delay: RunDelay,
    /// The run delay when the run's clock started; `None` when the kernel does not provide it.
    at_start: Option<Duration>,
}

impl RunWait {
    /// Starts counting the calling thread's run delay (call it when the run's clock starts).
    pub(crate) fn of_this_thread() -> RunWait {
        let delay = RunDelay::of_this_thread();
        let at_start = delay.total();
        RunWait { delay, at_start }
    }

    /// The run delay the thread accumulated since then; `None` when it cannot be read.
    pub(crate) fn so_far(&self) -> Option<Duration> {
        Some(self.delay.total()?.saturating_sub(self.at_start?))
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

    /// Whether the laps are measured (otherwise every lap is zero).
    pub(crate) fn measuring(&self) -> bool {
        self.last.is_some()
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

    /// Pins the calling thread to CPU 0.
    fn pin_to_cpu0() -> bool {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it, and
        // sched_setaffinity reads `size_of::<cpu_set_t>()` bytes of it for the calling thread (0).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }

    fn spin(d: Duration) {
        let start = std::time::Instant::now();
        while start.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_thread_that_shares_its_cpu_waits_for_it() {
        if RunDelay::of_this_thread().total().is_none() {
            eprintln!("SKIPPED: no /proc/thread-self/schedstat");
            return;
        }
        // Alone on its CPU, a spinning thread hardly waits; beside another spinning thread pinned
        // to the same CPU, it waits for about half the time (the scheduler shares the CPU).
        let measure = || {
            let wait = RunWait::of_this_thread();
            let start = std::time::Instant::now();
            spin(Duration::from_millis(300));
            (
                wait.so_far().expect("schedstat read twice"),
                start.elapsed(),
            )
        };
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let rival = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                assert!(pin_to_cpu0());
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let shared = std::thread::spawn(move || {
            assert!(pin_to_cpu0());
            measure()
        })
        .join()
        .unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        rival.join().unwrap();
        let (waited, wall) = shared;
        assert!(waited <= wall, "{waited:?} of {wall:?}");
        assert!(
            waited >= wall / 5,
            "a thread sharing its CPU with a spinning one waited {waited:?} of {wall:?}"
        );
    }
}
