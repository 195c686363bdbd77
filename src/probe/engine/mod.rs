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
//! A run goes through the same phases in both, kept by one controller (`control`: the phase,
//! the limits, and how a run ends; the engines only submit, reap and cancel): set-up (threads,
//! ring, buffers), issuing (until the runtime, `number_ios`, a yield request or an I/O error),
//! draining (waiting for what is in flight), and, on the hard timeout or cancellation, aborting
//! (in-flight I/O cancelled where the kernel can, and waited for at most [`DRAIN_GRACE`]). What a hung device still holds after that
//! is left to the engine's leftovers and reported as
//! [`StuckIos`](crate::probe::measurement::StuckIos); no buffer is ever freed while
//! the kernel may still write into it.
//!
//! Files: [`options`] (what a caller asks for), `job` (the profile checked against the target,
//! and its offsets), `durability_setup` (a durability profile's descriptor and fresh space),
//! `schedule` (a run's clock), `control` (the run controller), `tally` (what a run has measured
//! so far), `lateness` (the thread's own delays), and the two engines; the aligned I/O buffers
//! and the system calls std does not wrap are below both the engines and the targets
//! ([`crate::probe::buffer`], [`crate::probe::sys`]).

mod control;
mod durability_setup;
mod job;
mod lateness;
pub(crate) mod options;
pub(crate) mod psync;
mod schedule;
mod tally;
pub(crate) mod uring;

pub(crate) use options::{CANCEL_POLL, DRAIN_GRACE, RunProgress};
pub use options::{DrainingHook, EngineChoice, RunOptions, SETTLE};

use crate::probe::error::ProbeError;
use crate::probe::io_target::OpenTarget;
use crate::probe::measurement::Measurement;
use crate::probe::profile::Profile;
use job::Job;
use std::sync::Once;

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
    // The fresh space of a durability profile is kept until the run returns (then given back).
    let (job, _durable) = Job::new(target, profile, opts)?;
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
