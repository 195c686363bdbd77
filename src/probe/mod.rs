//! Direct-I/O probes: profiles, targets, engines and results.
//!
//! - [`profile`]: what a probe does, made and checked by one constructor
//!   ([`profile::Profile::new`], with the limits); the built-in profiles.
//! - [`fio`]: fio-style option strings → profiles.
//! - [`io_target`]: opening block devices and probe files, preflight and write-safety checks.
//! - [`engine`]: running a profile on a target (io_uring, psync fallback).
//! - [`measurement`]: what a run measured (counts, HdrHistogram of latency).
//! - [`error`]: why a probe could not run ([`ProbeError`]) or a profile does not fit its target.
//! - [`oneshot`]: the one-shot `diskprobe_exporter probe` command.
//! - [`sys`] and [`buffer`]: what both the engines and the targets stand on, below both: the
//!   system calls std does not wrap, and aligned I/O buffers (with the ring, the only `unsafe`).
//!
//! A scheduler opens a target with [`io_target::open`], then calls [`engine::run`] for each profile
//! from a dedicated thread.

pub(crate) mod buffer;
pub mod engine;
pub(crate) mod error;
pub mod fio;
pub mod io_target;
pub mod measurement;
pub mod oneshot;
pub mod profile;
pub(crate) mod sys;

pub use error::ProbeError;
