//! The probe scheduler: runs each target's profiles in sequence every interval, with jitter, and
//! reports every run to [`SeriesStore`](crate::series::SeriesStore).
//!
//! Rules, in the order a cycle applies them:
//! - Each target has its own task; its first cycle starts within a few seconds of start-up (or of
//!   the reload or rescan that added it), then every `interval` (each start shifted at random by
//!   up to ±`jitter` × interval around a fixed grid, so starts do not drift and targets do not
//!   synchronise). Targets added together start one after another in name order, spread over
//!   [`FIRST_CYCLE_MAX_DELAY`](tasks::FIRST_CYCLE_MAX_DELAY) each (at most half their interval): many volumes found at once do
//!   not all start probing at once.
//! - At most `max_concurrent_probes` runs issue I/O at once across all targets (default 1), and
//!   at most one cycle runs per physical device (partitions count as their disk). A run gives its
//!   global slot back as soon as it stops issuing and only waits for its I/O, so that a slow or
//!   hung device does not hold up the others.
//! - A run that returns while the kernel still holds some of its I/O (a hung device: the engine
//!   waits for cancelled I/O for [`DRAIN_GRACE`](crate::probe::engine::DRAIN_GRACE)) leaves it with the engine, which frees
//!   the buffers only once the kernel has completed it; until then no run starts on that device
//!   (its runs count as `skipped`), so a dead device holds one run's ring, buffers and threads.
//! - Duty-cycle budget per device: a token bucket refilled at `max_duty_cycle` seconds per second
//!   (capacity two cycles' worth); a run only starts when the bucket is not in debt, and its
//!   engine time is charged to it. Runs refused by the budget count as `result="skipped"`.
//! - Busy skip: before each run of a capacity profile (uncapped: it takes all the device gives)
//!   the whole disk's load is measured over `busy_window` ([`crate::contention::Load`]: other
//!   processes' IOPS, mean in-flight I/Os, utilisation); above `skip_busy_above` the run is
//!   skipped. Gentle (rate-capped) profiles run whatever the load: latency under load is what they
//!   are for.
//! - Yield: while any run goes on, a watcher compares the disk's counters with the run's own
//!   ([`crate::contention::Watch`]); a capacity run (with `yield_to_other_io`) stops issuing at
//!   the first sight of another process's I/O and counts as skipped, with what was seen as the
//!   reason. The time every run shared the disk with others is recorded as its cost. Runs of
//!   profiles that make their writes durable are not watched: their own flushes and journal
//!   writes look like another process's I/O. Durability profiles are not busy-skipped either.
//! - Probes run on a thread of their own, never on a tokio worker; so does the stat of the
//!   target path that finds its device, which a cycle waits for at most [`crate::host::STAT_PATIENCE`] (5 s, as
//!   node_exporter's `--collector.filesystem.mount-timeout`) before recording a timeout. The
//!   engine enforces the run's hard timeout and drains in-flight I/O for at most
//!   [`DRAIN_GRACE`](crate::probe::engine::DRAIN_GRACE); if a run has not returned [`GRACE`](thread::GRACE) after its timeout, or opening
//!   the target (which may fill a probe file) has made no progress for that long, the scheduler
//!   records a timeout and does not start that target again (not for another profile, nor
//!   after a reload) until the thread returns; a thread given up on during the open does not
//!   start its probe afterwards, and its fill stops at the next chunk.
//!
//! # Files
//! A target's task (`tasks`: [`Scheduler`], one task per target, started and stopped by
//! [`Scheduler::apply`]) runs a cycle every interval (`cycle`). A cycle finds the device under
//! the target (`stat`, on a thread of its own), holds that device's lock (`devices`: one
//! `DeviceState` per physical device with its lock, duty-cycle budget and stuck I/Os),
//! and for each profile passes the admission gates (`gates`: a typed [`Skip`](gates::Skip) whose text is the
//! `skipped` run's reason), takes a global slot (`probe_slots`) and runs the profile on a probe
//! thread (`thread`: the open, the engine run, and the messages it sends back). What every
//! run ends as goes to the [`SeriesStore`](crate::series::SeriesStore) and to the log (`log`).
//! `shared` holds what the tasks share; [`target_devices`] the last device under each configured
//! target, which its series keep while that device is gone (kept in the state directory).

mod cycle;
pub mod devices;
pub(crate) mod gates;
mod log;
mod probe_slots;
mod shared;
mod stat;
pub(crate) mod target_devices;
mod tasks;
mod thread;

pub use tasks::Scheduler;
