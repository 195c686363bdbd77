//! Probe engines: run one [`Profile`] on an [`OpenTarget`] and measure it.
//!
//! [`run`] blocks the calling thread for the length of the run, so call it from a dedicated
//! thread (the scheduler's probe thread, `std::thread::spawn`, or `tokio::task::spawn_blocking`),
//! never from an async task. Two engines:
//!
//! - [`uring`]: one thread owns an io_uring, registered page-aligned buffers and the registered
//!   file, and keeps `iodepth` I/Os in flight.
//! - [`psync`]: `iodepth` threads each doing `pread`/`pwrite` (a true queue depth of `iodepth`),
//!   the fallback when io_uring cannot be set up (seccomp, `kernel.io_uring_disabled`, old kernels).
//!
//! A run goes through the same phases in both: set-up (threads, ring, buffers), issuing (until
//! the runtime, `number_ios`, a yield request or an I/O error), draining (waiting for what is in
//! flight), and, on the hard timeout or cancellation, aborting (in-flight I/O cancelled where the
//! kernel can, and waited for at most [`DRAIN_GRACE`]). What a hung device still holds after that
//! is left to the engine's leftovers and reported as [`StuckIos`]; no buffer is ever freed while
//! the kernel may still write into it.

pub mod buffer;
mod durable;
mod lateness;
pub mod psync;
pub mod uring;

use crate::probe::ProbeError;
use crate::probe::measurement::{
    Ending, EngineKind, Measurement, StuckIos, Syncs, new_latency_histogram,
};
use crate::probe::profile::{DurabilityError, Profile, Rw, SyncEvery};
use crate::probe::target::OpenTarget;
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Which engine to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum EngineChoice {
    /// io_uring, or psync when io_uring cannot be set up.
    #[default]
    Auto,
    /// io_uring only; fail when it cannot be set up.
    #[value(name = "io_uring")]
    IoUring,
    /// psync only.
    Psync,
}

/// How far a run has got: I/Os submitted and completed so far, updated by the engine as they
/// happen (relaxed atomics, for watchers that want a live view of a run).
#[derive(Debug, Default)]
pub struct RunProgress {
    /// I/Os handed to the kernel (a short transfer's remainder is not a new I/O).
    pub submitted: AtomicU64,
    /// I/Os that ended: completed, failed or cancelled.
    pub completed: AtomicU64,
}

/// Called once by the engine, from its own thread, when a run stops issuing I/O (runtime over,
/// `number_ios` reached, yield, error, timeout or cancellation) and only waits for what is in
/// flight. The scheduler gives the global probe slot back then.
#[derive(Clone)]
pub struct DrainingHook(Arc<dyn Fn() + Send + Sync>);

impl DrainingHook {
    /// A hook calling `f`.
    pub fn new(f: impl Fn() + Send + Sync + 'static) -> DrainingHook {
        DrainingHook(Arc::new(f))
    }
}

impl fmt::Debug for DrainingHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DrainingHook")
    }
}

/// How to run a probe.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Engine choice.
    pub engine: EngineChoice,
    /// Hard limit on the run, from its start: in-flight I/O is cancelled and the result reports
    /// `timed_out`.
    pub timeout: Duration,
    /// Set to `true` (e.g. on SIGTERM) to stop the run early; checked at least every
    /// [`CANCEL_POLL`].
    pub cancel: Arc<AtomicBool>,
    /// Runtime for profiles that set neither a runtime nor a number of I/Os.
    pub default_runtime: Duration,
    /// Live counts of the run's I/Os.
    pub progress: Arc<RunProgress>,
    /// Set to `true` to make the run stop issuing, drain what is in flight as usual and return
    /// with [`Measurement::yielded`]; checked before every issue and at least every
    /// [`CANCEL_POLL`].
    pub yield_now: Arc<AtomicBool>,
    /// Told when the run stops issuing.
    pub on_draining: Option<DrainingHook>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            engine: EngineChoice::Auto,
            timeout: Duration::from_secs(30),
            cancel: Arc::default(),
            default_runtime: Duration::from_secs(1),
            progress: Arc::default(),
            yield_now: Arc::default(),
            on_draining: None,
        }
    }
}

/// Longest an engine waits, after its hard timeout or cancellation, for in-flight I/O to complete
/// before it returns. What is still in flight then is left to the engine's leftovers and reported
/// as [`StuckIos`].
pub const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// How long the io_uring engine waits after setting up a run (starting its thread, creating the
/// ring, allocating and registering buffers) before the first I/O; not part of the run's elapsed
/// time.
///
/// On a 2-vCPU VM, QD1 latency on a loop device has two stable modes: the loop worker runs on the
/// submitting CPU (no idle CPU to wake per I/O), or on the other one (two cross-CPU wake-ups per
/// I/O, about half the IOPS). Which one a run falls into is decided at its first I/Os by what the
/// CPUs were just doing, and it then lasts for most of the run. Started straight after its set-up,
/// a run fell into the slow mode most of the time; after a 100 ms pause (as after fio's own
/// start-up) into the fast one (`bench/qd1_start.sh` shows it with a minimal liburing program).
/// The psync engine does not wait: under blkio throttling a pause before its first I/O let the
/// throttle's first slice through as a burst.
pub const SETTLE: Duration = Duration::from_millis(100);

/// Interval at which a waiting engine checks the cancellation and yield flags.
pub const CANCEL_POLL: Duration = Duration::from_millis(100);

/// Why a profile cannot run on a target.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The block size is zero or does not fit a single system call.
    #[error("profile {profile}: block size {block_size} is out of range")]
    BlockSizeOutOfRange {
        /// The profile.
        profile: String,
        /// Its block size.
        block_size: u64,
    },
    /// The block size is not a multiple of the target's direct-I/O alignment.
    #[error(
        "profile {profile}: block size {block_size} is not a multiple of the direct-I/O alignment {align} of {path}"
    )]
    Unaligned {
        /// The profile.
        profile: String,
        /// Its block size.
        block_size: u64,
        /// The alignment.
        align: u64,
        /// The target.
        path: PathBuf,
    },
    /// A write profile on a target opened read-only.
    #[error(
        "profile {profile} writes, but {path} was opened read-only (write probes need allow_writes / --allow-writes)"
    )]
    ReadOnly {
        /// The profile.
        profile: String,
        /// The target.
        path: PathBuf,
    },
    /// The profile's region is larger than the target's.
    #[error("profile {profile}: size {size} exceeds the target region of {region} bytes")]
    SizeBeyondRegion {
        /// The profile.
        profile: String,
        /// Its size.
        size: u64,
        /// The target's region.
        region: u64,
    },
    /// Not even one block fits the region.
    #[error(
        "profile {profile}: the region of {region} bytes of {path} is smaller than one block of {block_size} bytes"
    )]
    RegionBelowOneBlock {
        /// The profile.
        profile: String,
        /// The region's length.
        region: u64,
        /// The target.
        path: PathBuf,
        /// The block size.
        block_size: u64,
    },
    /// A queue depth of zero.
    #[error("profile {profile}: iodepth must be at least 1")]
    ZeroDepth {
        /// The profile.
        profile: String,
    },
    /// A profile that writes into space of its own (`etcd-wal`) on a block device, which has
    /// none to preallocate.
    #[error(
        "profile {profile} writes into space it preallocates in a probe file; {path} is a block device"
    )]
    FreshSpaceOnDevice {
        /// The profile.
        profile: String,
        /// The target.
        path: PathBuf,
    },
    /// Durability settings that do not fit the rest of the profile (the configuration refuses
    /// them at load; a profile built otherwise is checked here).
    #[error("profile {profile}: {source}")]
    Durability {
        /// The profile.
        profile: String,
        /// What does not fit.
        #[source]
        source: DurabilityError,
    },
}

/// Everything an engine needs, validated.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub fd: std::os::fd::RawFd,
    pub rw: Rw,
    pub region_offset: u64,
    pub blocks: u64,
    pub block_size: u64,
    pub mem_align: usize,
    pub iodepth: u32,
    pub runtime: Option<Duration>,
    pub number_ios: Option<u64>,
    pub rate_interval: Option<Duration>,
    pub timeout: Duration,
    /// Profiles with `fsync`/`fdatasync`: which, and after how many writes.
    pub sync: Option<SyncEvery>,
    /// A descriptor opened for this run (durability profiles' flags), kept open for as long as
    /// the engine's threads use `fd`.
    pub file: Option<Arc<std::fs::File>>,
}

impl Job {
    fn new(target: &OpenTarget, profile: &Profile, opts: &RunOptions) -> Result<Job, ProfileError> {
        let name = || profile.name.clone();
        let bs = profile.block_size;
        if bs == 0 || bs > u64::from(u32::MAX) {
            return Err(ProfileError::BlockSizeOutOfRange {
                profile: name(),
                block_size: bs,
            });
        }
        profile
            .check_durability()
            .map_err(|source| ProfileError::Durability {
                profile: name(),
                source,
            })?;
        // Buffered writes have no alignment to keep.
        if profile.durability.direct && !bs.is_multiple_of(target.offset_align) {
            return Err(ProfileError::Unaligned {
                profile: name(),
                block_size: bs,
                align: target.offset_align,
                path: target.path.clone(),
            });
        }
        if profile.rw.is_write() && !target.writable {
            return Err(ProfileError::ReadOnly {
                profile: name(),
                path: target.path.clone(),
            });
        }
        let region = match profile.size {
            Some(size) if size > target.region_len => {
                return Err(ProfileError::SizeBeyondRegion {
                    profile: name(),
                    size,
                    region: target.region_len,
                });
            }
            Some(size) => size,
            None => target.region_len,
        };
        let blocks = region / bs;
        if blocks == 0 {
            return Err(ProfileError::RegionBelowOneBlock {
                profile: name(),
                region,
                path: target.path.clone(),
                block_size: bs,
            });
        }
        if profile.iodepth == 0 {
            return Err(ProfileError::ZeroDepth { profile: name() });
        }
        let runtime = match (profile.runtime, profile.number_ios) {
            (None, None) => Some(opts.default_runtime),
            (r, _) => r,
        };
        Ok(Job {
            fd: target.fd(),
            rw: profile.rw,
            region_offset: target.region_offset,
            blocks,
            block_size: bs,
            mem_align: (target.mem_align.max(4096)) as usize,
            iodepth: profile.iodepth,
            runtime,
            number_ios: profile.number_ios,
            rate_interval: profile
                .rate_iops
                .map(|r| Duration::from_nanos(1_000_000_000 / u64::from(r.max(1)))),
            timeout: opts.timeout,
            sync: profile.durability.sync_every,
            file: None,
        })
    }

    /// Fresh offsets for a run of this job.
    pub(crate) fn offsets(&self) -> Offsets {
        Offsets::new(
            self.rw.is_random(),
            self.region_offset,
            self.blocks,
            self.block_size,
        )
    }
}

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

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What a run (or one psync thread) has measured so far.
pub(crate) struct Tally {
    ios: u64,
    bytes: u64,
    errors: u64,
    first_error: Option<String>,
    latency_ns: Histogram<u64>,
    /// Rate-capped runs: latency from submission, and how many I/Os the device held back.
    submission_ns: Option<Histogram<u64>>,
    held_back: u64,
    /// Profiles that sync: syncs completed and their latency.
    syncs: Option<(u64, Histogram<u64>)>,
    last_completion: Option<Instant>,
}

impl Tally {
    /// An empty tally; `rate_capped` ones also keep the latency from submission.
    pub(crate) fn new(rate_capped: bool) -> Tally {
        Tally {
            ios: 0,
            bytes: 0,
            errors: 0,
            first_error: None,
            latency_ns: new_latency_histogram(),
            submission_ns: rate_capped.then(new_latency_histogram),
            held_back: 0,
            syncs: None,
            last_completion: None,
        }
    }

    /// The tally of a job: rate-capped jobs also keep the latency from submission, jobs that
    /// sync the latency of their syncs.
    pub(crate) fn of(job: &Job) -> Tally {
        let mut tally = Tally::new(job.rate_interval.is_some());
        if job.sync.is_some() {
            tally.syncs = Some((0, new_latency_histogram()));
        }
        tally
    }

    /// A sync submitted at `since` completed at `at`.
    #[inline]
    pub(crate) fn synced(&mut self, since: Instant, at: Instant) {
        if let Some((count, h)) = &mut self.syncs {
            *count += 1;
            h.saturating_record(nanos(at.saturating_duration_since(since)));
        }
        self.last_completion = Some(at);
    }

    /// An I/O of `bytes`, issued as `issue` says, completed at `at`.
    #[inline]
    pub(crate) fn completed(&mut self, bytes: u64, issue: Issue, at: Instant) {
        self.ios += 1;
        self.bytes += bytes;
        self.latency_ns
            .saturating_record(nanos(at.saturating_duration_since(issue.origin)));
        if let Some(h) = &mut self.submission_ns {
            h.saturating_record(nanos(at.saturating_duration_since(issue.submitted)));
            if issue.origin < issue.submitted {
                self.held_back += 1;
            }
        }
        self.last_completion = Some(at);
    }

    /// An I/O failed at `at` (its completion still ends the run's elapsed time).
    pub(crate) fn failed(&mut self, error: impl FnOnce() -> String, at: Instant) {
        self.error(error);
        self.last_completion = Some(at);
    }

    /// A failure that is not an I/O's completion (a submission or a system call).
    pub(crate) fn error(&mut self, error: impl FnOnce() -> String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(error());
        }
    }

    /// Notes what went wrong without counting a failed I/O.
    pub(crate) fn note(&mut self, error: impl FnOnce() -> String) {
        if self.first_error.is_none() {
            self.first_error = Some(error());
        }
    }

    /// Whether any I/O or system call failed.
    pub(crate) fn has_errors(&self) -> bool {
        self.errors > 0
    }

    /// Adds another thread's tally.
    pub(crate) fn merge(&mut self, other: Tally) {
        self.ios += other.ios;
        self.bytes += other.bytes;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        let _ = self.latency_ns.add(&other.latency_ns);
        if let (Some(a), Some(b)) = (&mut self.submission_ns, &other.submission_ns) {
            let _ = a.add(b);
        }
        self.held_back += other.held_back;
        if let (Some((a, ha)), Some((b, hb))) = (&mut self.syncs, &other.syncs) {
            *a += b;
            let _ = ha.add(hb);
        }
        self.last_completion = self.last_completion.max(other.last_completion);
    }

    /// The measurement of a run that started at `start` and ended as `ending`; its elapsed time
    /// runs to the last completion (or to `now` when nothing completed).
    pub(crate) fn into_measurement(
        self,
        engine: EngineKind,
        start: Instant,
        ending: Ending,
        stuck: Option<Arc<StuckIos>>,
    ) -> Measurement {
        let end = self.last_completion.unwrap_or_else(Instant::now);
        Measurement {
            engine,
            ios: self.ios,
            bytes: self.bytes,
            elapsed: end.saturating_duration_since(start),
            errors: self.errors,
            first_error: self.first_error,
            ending,
            stuck,
            latency_ns: self.latency_ns,
            submission_latency_ns: self.submission_ns,
            held_back: self.held_back,
            syncs: self
                .syncs
                .map(|(count, latency_ns)| Syncs { count, latency_ns }),
        }
    }
}

/// Offsets of a run: uniformly random block-aligned offsets over the region (freshly seeded from
/// the OS every run), or a sequential walk that wraps at the end of the region.
#[derive(Debug)]
pub struct Offsets {
    random: bool,
    start: u64,
    blocks: u64,
    block_size: u64,
    next: u64,
    rng: SmallRng,
}

impl Offsets {
    /// Offsets over `blocks` blocks of `block_size` bytes starting at byte `start`.
    pub fn new(random: bool, start: u64, blocks: u64, block_size: u64) -> Offsets {
        Offsets {
            random,
            start,
            blocks: blocks.max(1),
            block_size,
            next: 0,
            rng: SmallRng::from_os_rng(),
        }
    }

    /// The next offset in bytes.
    #[inline]
    pub fn next_offset(&mut self) -> u64 {
        let block = if self.random {
            self.rng.random_range(0..self.blocks)
        } else {
            let b = self.next;
            self.next += 1;
            if self.next == self.blocks {
                self.next = 0;
            }
            b
        };
        self.start + block * self.block_size
    }

    /// The offset of the `k`-th I/O of the sequential walk (wrapping at the end of the region),
    /// for engines whose threads share one walk through a common counter.
    pub fn sequential(&self, k: u64) -> u64 {
        self.start + (k % self.blocks) * self.block_size
    }

    /// The run's fast random generator (also used for write data).
    pub fn rng(&mut self) -> &mut SmallRng {
        &mut self.rng
    }
}

static FALLBACK_WARNING: Once = Once::new();

/// Runs `profile` on `target` and returns what it measured. Blocks the calling thread for the run
/// (at most `opts.timeout` plus [`SETTLE`] and [`DRAIN_GRACE`]).
///
/// Errors are setup problems (profile does not fit the target, engine cannot start); I/O errors
/// during the run are counted in the result.
pub fn run(
    target: &OpenTarget,
    profile: &Profile,
    opts: &RunOptions,
) -> Result<Measurement, ProbeError> {
    let mut job = Job::new(target, profile, opts)?;
    // The descriptor and the fresh space of a durability profile, kept until the run returns
    // (the space is then given back).
    let _durable = durable::prepare(target, profile, &mut job)?;
    match opts.engine {
        EngineChoice::Psync => psync::run(&job, opts),
        EngineChoice::IoUring => uring::run(&job, opts),
        EngineChoice::Auto => match uring::run(&job, opts) {
            Err(err @ (ProbeError::EngineSetup { .. } | ProbeError::RateCapNeedsExtArg)) => {
                FALLBACK_WARNING.call_once(|| {
                    tracing::warn!(err = %err, "io_uring cannot be set up; using the psync engine (pread/pwrite threads)");
                });
                psync::run(&job, opts)
            }
            other => other,
        },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_offsets_are_aligned_in_region_and_spread() {
        let mut o = Offsets::new(true, 1 << 20, 256, 4096);
        let mut seen = vec![0u32; 256];
        for _ in 0..256 * 100 {
            let off = o.next_offset();
            assert!(off >= 1 << 20);
            assert!(off + 4096 <= (1 << 20) + 256 * 4096);
            assert_eq!(off % 4096, 0);
            seen[((off - (1 << 20)) / 4096) as usize] += 1;
        }
        // Uniform: each block expected 100 times; all within a generous band.
        assert!(seen.iter().all(|&n| (40..=180).contains(&n)), "{seen:?}");
    }

    #[test]
    fn sequential_offsets_walk_and_wrap() {
        let mut o = Offsets::new(false, 8192, 3, 1 << 20);
        let got: Vec<u64> = (0..7).map(|_| o.next_offset()).collect();
        let b = 1u64 << 20;
        assert_eq!(
            got,
            vec![
                8192,
                8192 + b,
                8192 + 2 * b,
                8192,
                8192 + b,
                8192 + 2 * b,
                8192
            ]
        );
        // The shared walk of the psync threads gives the same sequence by I/O number.
        let shared: Vec<u64> = (0..7).map(|k| o.sequential(k)).collect();
        assert_eq!(shared, got);
    }

    #[test]
    fn runs_are_reseeded() {
        let mut a = Offsets::new(true, 0, 1 << 30, 4096);
        let mut b = Offsets::new(true, 0, 1 << 30, 4096);
        let x: Vec<u64> = (0..8).map(|_| a.next_offset()).collect();
        let y: Vec<u64> = (0..8).map(|_| b.next_offset()).collect();
        assert_ne!(x, y);
    }
}
