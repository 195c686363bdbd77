//! What one probe run measured: how it ended ([`Ending`]), counts, elapsed time and an
//! HdrHistogram of per-I/O latency; the engines fill it in, the one-shot command prints it, the
//! series store adds it up ([`RunStatus`] is its `result` label).
//!
//! IOPS and bandwidth are computed as fio computes them: completed I/Os (bytes) divided by the
//! elapsed time of the run. The syncs of a profile with `fsync`/`fdatasync` are counted and timed
//! apart ([`Syncs`]), as fio's `sync` section; its I/Os are its writes.
//!
//! The engine depends on this module, never the other way round.

use hdrhistogram::Histogram;
use serde::Serialize;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Highest latency the histogram tracks (larger values are clamped): one hour.
pub(crate) const MAX_TRACKED_LATENCY_NS: u64 = 3_600_000_000_000;

/// A new empty latency histogram (nanoseconds, 1 ns .. 1 h, 3 significant digits).
pub fn new_latency_histogram() -> Histogram<u64> {
    // Bounds are constants that satisfy hdrhistogram's requirements (low >= 1, high >= 2 * low,
    // sigfig <= 5), so construction cannot fail.
    Histogram::new_with_bounds(1, MAX_TRACKED_LATENCY_NS, 3)
        .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid"))
}

/// A run's per-I/O latency in seconds, from its HdrHistogram: what the one-shot output prints,
/// the agent publishes as `diskprobe_probe_latency_seconds{stat}` and the status page shows. All
/// zero when nothing completed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Smallest.
    pub min: f64,
    /// Mean.
    pub mean: f64,
    /// Largest.
    pub max: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// 99.99th percentile.
    pub p9999: f64,
}

impl LatencySummary {
    /// The statistics of a histogram of nanoseconds, in seconds; all zero when it is empty.
    pub(crate) fn of(h: &Histogram<u64>) -> LatencySummary {
        if h.is_empty() {
            return LatencySummary::default();
        }
        let at = |q| h.value_at_quantile(q) as f64 / 1e9;
        LatencySummary {
            min: h.min() as f64 / 1e9,
            mean: Duration::from_secs_f64(h.mean() / 1e9).as_secs_f64(),
            max: h.max() as f64 / 1e9,
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            p999: at(0.999),
            p9999: at(0.9999),
        }
    }

    /// `(stat label, seconds)` in the order they are published: min, mean, the percentiles, max.
    pub(crate) fn stats(&self) -> [(&'static str, f64); 8] {
        [
            ("min", self.min),
            ("mean", self.mean),
            ("p50", self.p50),
            ("p90", self.p90),
            ("p99", self.p99),
            ("p99.9", self.p999),
            ("p99.99", self.p9999),
            ("max", self.max),
        ]
    }
}

/// The engine that ran a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// io_uring with registered buffers and file.
    IoUring,
    /// Threads doing pread/pwrite.
    Psync,
}

impl EngineKind {
    /// `io_uring` or `psync` (the `engine` label).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EngineKind::IoUring => "io_uring",
            EngineKind::Psync => "psync",
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a run ended, as the engine saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Runtime over or every I/O issued, and everything in flight completed.
    Finished,
    /// Stopped issuing on request ([`crate::probe::engine::RunOptions::yield_now`]), and
    /// drained what was in flight.
    Yielded,
    /// The hard timeout ended the run.
    TimedOut,
    /// The cancellation flag ended the run.
    Cancelled,
    /// An I/O or system-call error stopped the run.
    Failed,
}

/// How a run ended, for `diskprobe_probe_runs_total{result}` and the last run's gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RunStatus {
    /// Completed without I/O errors.
    Success,
    /// Could not run, or I/O errors.
    Error,
    /// Ended by the hard timeout.
    Timeout,
    /// Not run (device busy, budget exhausted, previous run still in flight), or stopped early
    /// to yield to other processes' I/O.
    Skipped,
}

impl RunStatus {
    /// All results, in label order.
    pub(crate) const ALL: [RunStatus; 4] = [
        RunStatus::Success,
        RunStatus::Error,
        RunStatus::Timeout,
        RunStatus::Skipped,
    ];

    /// The `result` label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunStatus::Success => "success",
            RunStatus::Error => "error",
            RunStatus::Timeout => "timeout",
            RunStatus::Skipped => "skipped",
        }
    }
}

/// Why a run was skipped: the `reason` label of `diskprobe_probe_last_skip_timestamp_seconds`,
/// so that rules tell a profile rightly skipped on a busy disk from one that cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SkipReason {
    /// An earlier run or stat of the target had not returned.
    InFlight,
    /// The device's duty-cycle budget was used up.
    Budget,
    /// Other processes kept the disk busy (`skip_busy_above`).
    Busy,
    /// The kernel still held I/Os of an earlier run (a hung device).
    HeldByKernel,
    /// A capacity run stopped early to yield to other processes' I/O.
    Yielded,
    /// The target's probe file would be on another filesystem than the one it is meant for
    /// (its volume unmounted, another filesystem mounted there).
    WrongFilesystem,
}

impl SkipReason {
    /// All reasons, in label order.
    pub(crate) const ALL: [SkipReason; 6] = [
        SkipReason::InFlight,
        SkipReason::Budget,
        SkipReason::Busy,
        SkipReason::HeldByKernel,
        SkipReason::Yielded,
        SkipReason::WrongFilesystem,
    ];

    /// The `reason` label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SkipReason::InFlight => "in_flight",
            SkipReason::Budget => "budget",
            SkipReason::Busy => "busy",
            SkipReason::HeldByKernel => "held_by_kernel",
            SkipReason::Yielded => "yielded",
            SkipReason::WrongFilesystem => "wrong_filesystem",
        }
    }
}

/// Why a run failed (`result="error"`): the `reason` label of
/// `diskprobe_probe_last_error_timestamp_seconds`, so that rules and the on-call tell a full
/// filesystem or a missing mount from a failing disk. Bounded: the run's own error text says the
/// rest (the log, the status page).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ErrorReason {
    /// The probe file does not fit its filesystem with the reserve, or its fill ran out of space.
    NoSpace,
    /// The path, its directory or its device is not there (a missing mount, a vanished device, a
    /// detached loop device).
    Missing,
    /// A write-safety rule refused the run (a device mounted, held or in use, a file the agent did
    /// not make, a link, a file replaced under it).
    Refused,
    /// The target cannot be probed as configured (no direct I/O there, neither a file nor a block
    /// device, alignment, a region beyond its end).
    Unsupported,
    /// The run's I/Os or syncs failed, or a system call on the target did.
    Io,
    /// Anything else (a thread or the engine could not be set up, a fill stopped).
    Other,
}

impl ErrorReason {
    /// All reasons, in label order.
    pub(crate) const ALL: [ErrorReason; 6] = [
        ErrorReason::NoSpace,
        ErrorReason::Missing,
        ErrorReason::Refused,
        ErrorReason::Unsupported,
        ErrorReason::Io,
        ErrorReason::Other,
    ];

    /// The `reason` label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ErrorReason::NoSpace => "no_space",
            ErrorReason::Missing => "missing",
            ErrorReason::Refused => "refused",
            ErrorReason::Unsupported => "unsupported",
            ErrorReason::Io => "io",
            ErrorReason::Other => "other",
        }
    }
}

/// What went wrong first in a run: a failed I/O or sync, a failed system call of the engine, or
/// what the run left in the kernel. Its text is the run's error in the one-shot output, the
/// status page and the log.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A read or write failed (`op`: `read`/`write` on io_uring, `pread`/`pwrite` on psync).
    #[error("{op} at offset {offset}: {cause}")]
    Io {
        /// The operation.
        op: &'static str,
        /// Where it was.
        offset: u64,
        /// Why it failed.
        cause: IoCause,
    },
    /// The `fsync`/`fdatasync` after write number `write` (from 1) failed (psync).
    #[error("{call} after write {write}: {cause}")]
    SyncAfterWrite {
        /// `fsync` or `fdatasync`.
        call: &'static str,
        /// The write it followed.
        write: u64,
        /// Why it failed.
        cause: IoCause,
    },
    /// The `fsync`/`fdatasync` after the write at `offset` failed (io_uring).
    #[error("{call} after the write at offset {offset}: {cause}")]
    SyncAfterWriteAt {
        /// `fsync` or `fdatasync`.
        call: &'static str,
        /// Where the write was.
        offset: u64,
        /// Why it failed.
        cause: IoCause,
    },
    /// A system call of the engine failed (`io_uring_enter`, a submission, a cancellation).
    #[error("{call}: {source}")]
    Engine {
        /// What was called.
        call: &'static str,
        /// The system error.
        source: std::io::Error,
    },
    /// A worker's I/O buffer could not be made.
    #[error(transparent)]
    Buffer(Box<dyn std::error::Error + Send + Sync>),
    /// I/Os still in the kernel after the run cancelled them (io_uring).
    #[error("{ios} I/Os still in flight after cancellation")]
    StillInFlight {
        /// How many.
        ios: usize,
    },
    /// Worker threads still blocked in a system call after the timeout (psync).
    #[error("{threads} I/O threads still blocked in the kernel after the timeout")]
    ThreadsBlocked {
        /// How many.
        threads: usize,
    },
}

/// Why an I/O or a sync failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoCause {
    /// The system error it returned (errno).
    Os(i32),
    /// An io_uring transfer ended at the end of the target after `after` of its bytes.
    ShortAtEnd {
        /// `read` or `write`.
        op: &'static str,
        /// Bytes transferred.
        after: u32,
    },
    /// A `pread`/`pwrite` transferred nothing: the end of the target.
    EndOfFile,
}

impl From<&std::io::Error> for IoCause {
    fn from(err: &std::io::Error) -> IoCause {
        match err.raw_os_error() {
            Some(errno) => IoCause::Os(errno),
            None if err.kind() == std::io::ErrorKind::UnexpectedEof => IoCause::EndOfFile,
            None => IoCause::Os(libc::EIO),
        }
    }
}

impl fmt::Display for IoCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoCause::Os(errno) => std::io::Error::from_raw_os_error(*errno).fmt(f),
            IoCause::ShortAtEnd { op, after } => {
                write!(f, "short {op}: end of the target after {after} bytes")
            }
            IoCause::EndOfFile => std::io::Error::from(std::io::ErrorKind::UnexpectedEof).fmt(f),
        }
    }
}

/// The outcome of one probe run.
#[derive(Debug)]
pub struct Measurement {
    /// The engine that ran the I/O.
    pub engine: EngineKind,
    /// I/Os completed successfully (short transfers completed in several pieces count once).
    pub ios: u64,
    /// Bytes transferred by those I/Os (`ios × block size`).
    pub bytes: u64,
    /// From the first submission to the last completion.
    pub elapsed: Duration,
    /// I/Os that failed (errors other than EINTR/EAGAIN, which are retried).
    pub errors: u64,
    /// The first I/O error, when there was one.
    pub first_error: Option<RunError>,
    /// How the run ended.
    pub ending: Ending,
    /// I/Os the kernel still held when the run returned (a hung device), shared with the
    /// engine's leftovers that free the buffers once the kernel lets go of them; `None` when
    /// every I/O was reaped.
    pub stuck: Option<Arc<StuckIos>>,
    /// Per-I/O latency in nanoseconds: completion time minus submission time (fio's `lat`), or
    /// minus the intended issue time for rate-capped I/Os that the device held back.
    pub latency_ns: Histogram<u64>,
    /// Rate-capped runs only: per-I/O latency from submission for every I/O (fio's `lat` under
    /// a rate cap), which differs from `latency_ns` in the I/Os the device held back.
    pub submission_latency_ns: Option<Histogram<u64>>,
    /// Rate-capped I/Os the device held back (every queue slot busy when they fell due), whose
    /// latency counts from their due time.
    pub held_back: u64,
    /// Profiles with `fsync`/`fdatasync`: the syncs, recorded apart from the writes (fio's
    /// `sync` section); `None` for every other profile.
    pub syncs: Option<Syncs>,
    /// How long the threads that submitted and reaped the run's I/O waited for a CPU over the
    /// run; `None` when the kernel does not tell (no `/proc/thread-self/schedstat`).
    pub cpu_wait: Option<CpuWait>,
}

/// The share of a run its I/O threads may wait for a CPU before the run counts as starved
/// (docs/probes.md, "A busy CPU").
pub const DEFAULT_STARVED_ABOVE: f64 = 0.15;

/// How long a run's I/O threads waited for a CPU: their run delay (time runnable but not
/// running, `/proc/thread-self/schedstat`) over the run, added up.
///
/// Rate-capped runs also know which part of it their I/Os' latencies hold
/// ([`CpuWait::in_latency`]): a thread that waits for a CPU while it has I/O in flight stamps
/// those completions late, one that waits after a rate sleep only issues late.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuWait {
    /// The threads' run delay, added up.
    pub waited: Duration,
    /// How many threads (1 on io_uring; the queue depth on psync).
    pub threads: u32,
    /// Rate-capped runs: the run delay the threads accumulated while they had I/O in flight,
    /// each wait counted once per I/O it held in flight (what the wait added to the latencies);
    /// `None` for uncapped runs, whose threads have I/O in flight all the time.
    pub in_latency: Option<Duration>,
}

impl CpuWait {
    /// The share of the run's I/O time its threads spent waiting for a CPU, 0..=1: for a
    /// rate-capped run, [`CpuWait::in_latency`] over the sum of its I/Os' latencies
    /// (`latency_sum`); for an uncapped one (its threads have I/O in flight all the time), the
    /// run delay per thread over the elapsed time. 0 for a run that took no time.
    pub fn share(&self, elapsed: Duration, latency_sum: Duration) -> f64 {
        let (wait, span) = match self.in_latency {
            Some(in_latency) => (in_latency, latency_sum.as_secs_f64()),
            None => (
                self.waited,
                elapsed.as_secs_f64() * f64::from(self.threads.max(1)),
            ),
        };
        if span <= 0.0 {
            return 0.0;
        }
        (wait.as_secs_f64() / span).clamp(0.0, 1.0)
    }
}

/// The syncs of a run: how many completed, and the latency of each from its submission to its
/// completion, in nanoseconds. A sync that failed is counted in [`Measurement::errors`].
#[derive(Debug, Clone)]
pub struct Syncs {
    /// Syncs completed.
    pub count: u64,
    /// Per-sync latency (ns).
    pub latency_ns: Histogram<u64>,
}

impl Measurement {
    /// A run of `engine` that did nothing and finished: the base for building one field by field
    /// (`Measurement { ios: 5, ..Measurement::empty(engine) }`).
    pub fn empty(engine: EngineKind) -> Measurement {
        Measurement {
            engine,
            ios: 0,
            bytes: 0,
            elapsed: Duration::ZERO,
            errors: 0,
            first_error: None,
            ending: Ending::Finished,
            stuck: None,
            latency_ns: new_latency_histogram(),
            submission_latency_ns: None,
            held_back: 0,
            syncs: None,
            cpu_wait: None,
        }
    }

    /// The sum of the per-I/O latencies (`latency_ns`), from its mean and count.
    pub fn latency_sum(&self) -> Duration {
        Duration::from_secs_f64(self.latency_ns.mean() * self.latency_ns.len() as f64 / 1e9)
    }

    /// The share of the run's I/O time its threads waited for a CPU ([`CpuWait::share`]);
    /// `None` when the kernel does not tell.
    pub fn cpu_wait_share(&self) -> Option<f64> {
        self.cpu_wait
            .map(|w| w.share(self.elapsed, self.latency_sum()))
    }

    /// Completed I/Os per second of elapsed time.
    pub fn iops(&self) -> f64 {
        per_second(self.ios, self.elapsed)
    }

    /// Bytes per second of elapsed time.
    pub(crate) fn bandwidth(&self) -> f64 {
        per_second(self.bytes, self.elapsed)
    }

    #[cfg(test)]
    /// Latency at quantile `q` (0.0..=1.0), zero when nothing completed.
    pub(crate) fn latency_at(&self, q: f64) -> Duration {
        if self.latency_ns.is_empty() {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.latency_ns.value_at_quantile(q))
    }

    /// Min, mean, percentiles and max of the run's latency.
    pub(crate) fn latency_summary(&self) -> LatencySummary {
        LatencySummary::of(&self.latency_ns)
    }

    /// Rate-capped runs: the same statistics of the latency from submission.
    pub(crate) fn submission_latency_summary(&self) -> Option<LatencySummary> {
        self.submission_latency_ns.as_ref().map(LatencySummary::of)
    }

    /// Profiles that sync: the same statistics of the syncs' latency.
    pub(crate) fn sync_latency_summary(&self) -> Option<LatencySummary> {
        self.syncs
            .as_ref()
            .map(|s| LatencySummary::of(&s.latency_ns))
    }

    /// The run's `result` label: the one place it is worked out from how the run ended.
    pub fn status(&self) -> RunStatus {
        match self.ending {
            Ending::TimedOut => RunStatus::Timeout,
            Ending::Yielded => RunStatus::Skipped,
            Ending::Cancelled => RunStatus::Error,
            Ending::Finished | Ending::Failed if self.errors == 0 && self.ios > 0 => {
                RunStatus::Success
            }
            Ending::Finished | Ending::Failed => RunStatus::Error,
        }
    }

    /// Whether the run did I/O without error, timeout or cancellation (a run that yielded may
    /// have: its I/O was fine, it only stopped early; its `result` label is still `skipped`).
    pub fn is_success(&self) -> bool {
        self.errors == 0
            && !matches!(self.ending, Ending::TimedOut | Ending::Cancelled)
            && self.ios > 0
    }

    /// Why the run did not succeed, or `None` when it did: the one wording for the one-shot
    /// output, the agent's status and its log. (A yielded run's reason is what it yielded to,
    /// which its watcher knows: `crate::series::RunOutcome::reason`.)
    pub(crate) fn failure(&self) -> Option<String> {
        if self.ending == Ending::TimedOut {
            let cause = self
                .first_error
                .as_ref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default();
            Some(format!(
                "timed out after {:.3}s with {} I/Os done{cause}",
                self.elapsed.as_secs_f64(),
                self.ios
            ))
        } else if self.ending == Ending::Cancelled {
            Some("cancelled".to_owned())
        } else if let Some(err) = &self.first_error {
            Some(err.to_string())
        } else if self.ios == 0 {
            Some("no I/O completed".to_owned())
        } else if self.errors > 0 {
            Some(format!("{} I/O errors", self.errors))
        } else {
            None
        }
    }
}

/// The I/Os of a run that the kernel still held when the run returned (a hung device).
///
/// An engine waits for cancelled I/O for at most `engine::DRAIN_GRACE`; what a hung device has not
/// completed by then stays with the engine's leftovers (the io_uring engine's thread keeps reaping
/// its ring; psync threads stay in their system calls), which free the buffers once the kernel has
/// let go of them and clear their slot here. The scheduler keeps it per device (no new run starts on
/// a device whose earlier run still has I/O in the kernel), and the metrics show how many I/Os are
/// stuck and since when.
///
/// Per queue slot of a run, the issue time of the I/O the kernel holds in it, if any.
#[derive(Debug)]
pub struct StuckIos {
    base: Instant,
    /// Nanoseconds after `base` plus one, or 0 for a slot the kernel does not hold.
    slots: Box<[AtomicU64]>,
}

impl StuckIos {
    /// Room for `depth` slots, none held.
    pub(crate) fn new(base: Instant, depth: usize) -> StuckIos {
        StuckIos {
            base,
            slots: (0..depth).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Records that the kernel holds an I/O issued at `issued` in `slot` (`None`: no longer).
    pub(crate) fn set(&self, slot: usize, issued: Option<Instant>) {
        let value = issued.map_or(0, |at| {
            let ns = at.saturating_duration_since(self.base).as_nanos();
            u64::try_from(ns).unwrap_or(u64::MAX - 1) + 1
        });
        if let Some(s) = self.slots.get(slot) {
            s.store(value, Ordering::Relaxed);
        }
    }

    /// I/Os the kernel still holds.
    pub fn count(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) != 0)
            .count()
    }

    /// Whether the kernel has let go of every I/O.
    pub(crate) fn is_clear(&self) -> bool {
        self.count() == 0
    }

    /// When the oldest I/O the kernel still holds was issued.
    pub(crate) fn oldest(&self) -> Option<Instant> {
        self.slots
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&v| v != 0)
            .min()
            .map(|v| self.base + Duration::from_nanos(v - 1))
    }
}

fn per_second(count: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 { count as f64 / secs } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_percentiles() {
        let mut h = new_latency_histogram();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let r = Measurement {
            ios: 1000,
            bytes: 1000 * 4096,
            elapsed: Duration::from_millis(500),
            latency_ns: h,
            ..Measurement::empty(EngineKind::Psync)
        };
        assert_eq!(r.iops(), 2000.0);
        assert_eq!(r.bandwidth(), 2000.0 * 4096.0);
        let p50 = r.latency_at(0.5).as_nanos() as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.002, "{p50}");
        assert_eq!(r.latency_summary().min, 1e-6);
        assert!(r.is_success());
        let summary = r.latency_summary();
        assert_eq!(summary.p50, r.latency_at(0.5).as_secs_f64());
        assert_eq!(summary.max, r.latency_ns.max() as f64 / 1e9);
        assert!((summary.max - 1e-3).abs() < 1e-6, "{}", summary.max);
        let labels: Vec<&str> = summary.stats().iter().map(|(l, _)| *l).collect();
        assert_eq!(
            labels,
            ["min", "mean", "p50", "p90", "p99", "p99.9", "p99.99", "max"]
        );
        assert_eq!(summary.stats()[5].1, summary.p999);
    }

    #[test]
    fn counts_and_oldest_follow_the_slots() {
        let base = Instant::now();
        let stuck = StuckIos::new(base, 4);
        assert!(stuck.is_clear());
        assert_eq!(stuck.oldest(), None);
        stuck.set(2, Some(base + Duration::from_millis(5)));
        stuck.set(0, Some(base));
        stuck.set(9, Some(base)); // no such slot: ignored
        assert_eq!(stuck.count(), 2);
        assert_eq!(stuck.oldest(), Some(base));
        stuck.set(0, None);
        assert_eq!(stuck.oldest(), Some(base + Duration::from_millis(5)));
        stuck.set(2, None);
        assert!(stuck.is_clear());
    }

    #[test]
    fn run_errors_read_as_the_strings_they_replace() {
        let eio = std::io::Error::from_raw_os_error(libc::EIO);
        let io = RunError::Io {
            op: "pread",
            offset: 4096,
            cause: IoCause::from(&eio),
        };
        assert_eq!(io.to_string(), format!("pread at offset 4096: {eio}"));
        let short = RunError::Io {
            op: "read",
            offset: 0,
            cause: IoCause::ShortAtEnd {
                op: "read",
                after: 512,
            },
        };
        assert_eq!(
            short.to_string(),
            "read at offset 0: short read: end of the target after 512 bytes"
        );
        let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        let sync = RunError::SyncAfterWrite {
            call: "fdatasync",
            write: 3,
            cause: IoCause::from(&eof),
        };
        assert_eq!(sync.to_string(), format!("fdatasync after write 3: {eof}"));
        let enter = RunError::Engine {
            call: "io_uring_enter",
            source: std::io::Error::from_raw_os_error(libc::EBADF),
        };
        let ebadf = std::io::Error::from_raw_os_error(libc::EBADF);
        assert_eq!(enter.to_string(), format!("io_uring_enter: {ebadf}"));
        assert_eq!(
            RunError::StillInFlight { ios: 2 }.to_string(),
            "2 I/Os still in flight after cancellation"
        );
    }

    #[test]
    fn a_run_that_yielded_did_its_io_well_but_is_counted_as_skipped() {
        let yielded = Measurement {
            ios: 10,
            ending: Ending::Yielded,
            ..Measurement::empty(EngineKind::IoUring)
        };
        assert!(yielded.is_success());
        assert_eq!(yielded.status(), RunStatus::Skipped);
        for ending in [Ending::TimedOut, Ending::Cancelled] {
            let m = Measurement {
                ios: 10,
                ending,
                ..Measurement::empty(EngineKind::IoUring)
            };
            assert!(!m.is_success(), "{ending:?}");
        }
    }

    #[test]
    fn the_cpu_wait_share_is_of_the_io_time() {
        let ms = Duration::from_millis;
        // Uncapped: 2 threads waited 100 ms in all over a 1 s run: 5% each.
        let uncapped = CpuWait {
            waited: ms(100),
            threads: 2,
            in_latency: None,
        };
        assert!((uncapped.share(ms(1000), ms(5)) - 0.05).abs() < 1e-9);
        // Rate-capped: 500 ms of waiting, 30 ms of it with I/O in flight, in 120 ms of latency.
        let capped = CpuWait {
            waited: ms(500),
            threads: 1,
            in_latency: Some(ms(30)),
        };
        assert!((capped.share(ms(5000), ms(120)) - 0.25).abs() < 1e-9);
        assert_eq!(capped.share(ms(5000), Duration::ZERO), 0.0);
        assert_eq!(uncapped.share(Duration::ZERO, ms(5)), 0.0);
        // Never above 1.
        assert_eq!(capped.share(ms(5000), ms(10)), 1.0);
    }
}
