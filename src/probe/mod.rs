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
    #[error("{0}")]
    Profile(String),
    /// The engine could not be set up (for io_uring this triggers the psync fallback in auto mode).
    #[error("cannot set up the {engine} engine: {source}")]
    EngineSetup {
        /// The engine.
        engine: engine::EngineKind,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
    /// The engine failed in an unexpected way.
    #[error("{0}")]
    Engine(String),
}
