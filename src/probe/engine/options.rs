//! How a run is asked for ([`RunOptions`]: engine, hard timeout, cancellation, yield, live
//! progress, the draining hook) and the engines' fixed time limits ([`DRAIN_GRACE`], [`SETTLE`],
//! [`CANCEL_POLL`]).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

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

    /// Calls it.
    pub(crate) fn call(&self) {
        (self.0)();
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
    /// Hard limit on the run, from its start: in-flight I/O is cancelled and the result ends
    /// [`TimedOut`](crate::probe::measurement::Ending::TimedOut).
    pub timeout: Duration,
    /// Set to `true` (e.g. on SIGTERM) to stop the run early; checked at least every
    /// [`CANCEL_POLL`].
    pub cancel: Arc<AtomicBool>,
    /// Runtime for profiles that set neither a runtime nor a number of I/Os.
    pub default_runtime: Duration,
    /// Live counts of the run's I/Os.
    pub progress: Arc<RunProgress>,
    /// Set to `true` to make the run stop issuing, drain what is in flight as usual and return
    /// with [`Ending::Yielded`](crate::probe::measurement::Ending::Yielded); checked before every issue and at least every
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
/// as [`StuckIos`](crate::probe::measurement::StuckIos).
pub(crate) const DRAIN_GRACE: Duration = Duration::from_secs(1);

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
/// Straight after a run at QD128 (another profile of the same cycle, or another program's), a
/// 100 ms pause was not enough and 250 ms were: with each QD1 point run right after a QD128
/// one, `POINTS="write:1M:128 randread:4k:1 randread:4k:128 randwrite:4k:1" MORE=0 sudo
/// bench/qd_sweep.sh 7 1` put 4k QD1 IOPS at 0.90× and 0.35× fio's with 100 ms (most of our runs
/// in the slow mode), at 1.11× and 1.01× with 250 ms. So a latency profile that follows a
/// capacity profile measures the device, not what the run before it left behind.
/// The psync engine does not wait: under blkio throttling a pause before its first I/O let the
/// throttle's first slice through as a burst.
pub const SETTLE: Duration = Duration::from_millis(250);

/// Interval at which a waiting engine checks the cancellation and yield flags.
pub(crate) const CANCEL_POLL: Duration = Duration::from_millis(100);
