//! Direct-I/O probes: profiles, targets, engines and results.
//!
//! - [`profile`]: what a probe does; the built-in profiles.
//! - [`fio`]: fio-style option strings → profiles.
//! - [`target`]: opening block devices and probe files, preflight and write-safety checks.
//! - [`engine`]: running a profile on a target (io_uring, psync fallback).
//! - [`measurement`]: what a run measured (counts, HdrHistogram of latency).
//! - [`cli`]: the one-shot `diskprobe_exporter probe` command.
//!
//! A scheduler opens a target with [`target::open`], then calls [`engine::run`] for each profile
//! from a dedicated thread.
#![warn(clippy::too_many_lines, clippy::fn_params_excessive_bools)]

pub mod cli;
pub mod engine;
pub mod fio;
pub mod measurement;
pub mod profile;
pub mod target;

/// Why a probe could not run. I/O errors during a run are not errors here: they are counted in the
/// [`measurement::Measurement`].
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The target could not be opened or failed a preflight or safety check.
    #[error(transparent)]
    Target(#[from] target::TargetError),
    /// The profile does not fit the target (alignment, size, writes on a read-only target).
    #[error(transparent)]
    Profile(#[from] engine::ProfileError),
    /// The run's I/O buffers could not be made.
    #[error(transparent)]
    Buffer(#[from] engine::buffer::BufferError),
    /// The engine could not be set up (for io_uring this triggers the psync fallback in auto mode).
    #[error("cannot set up the {engine} engine: {source}")]
    EngineSetup {
        /// The engine.
        engine: measurement::EngineKind,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
    /// A rate-capped profile on a kernel whose io_uring cannot wait with a timeout argument (in
    /// auto mode the psync engine runs it instead).
    #[error("rate-capped runs on io_uring need IORING_FEAT_EXT_ARG (Linux 5.11 or later)")]
    RateCapNeedsExtArg,
    /// The psync engine could not start one thread per queue slot: it does not run at a lower
    /// depth than the profile asks for.
    #[error(
        "the psync engine started {started} of the {wanted} threads its queue depth needs: {source}"
    )]
    PsyncShortOfDepth {
        /// Threads the depth needs.
        wanted: u32,
        /// Threads that started (and were stopped again).
        started: u32,
        /// Why the next one did not.
        #[source]
        source: std::io::Error,
    },
    /// The engine's thread panicked.
    #[error("the {engine} engine's thread panicked")]
    EnginePanicked {
        /// The engine.
        engine: measurement::EngineKind,
    },
}
