//! The io_uring engine: one dedicated thread owns the ring, page-aligned buffers registered with
//! the ring (`READ_FIXED`/`WRITE_FIXED`) and the registered file, and keeps `iodepth` I/Os in
//! flight.
//!
//! Three files: `ring` owns the ring and the buffers together (`RingIo`: all of the engine's
//! `unsafe`, each block with its `// SAFETY:`) and keeps what a hung device still holds
//! (`Leftovers`); `run` is the run policy; `completion_poll` decides whether a wait polls before it
//! sleeps. A run is a `UringRun` that goes through its phases on
//! that thread:
//! - set-up (`RingIo::set_up`, then [`SETTLE`](super::SETTLE) before the first I/O: see there why);
//! - issuing (`UringRun::issue`): fill every free slot (with a rate cap, up to the I/O that is
//!   due next), wait, reap, refill;
//! - draining: stopped issuing (runtime over, `number_ios` reached, yield, error) and waiting for
//!   what is in flight;
//! - aborting (`UringRun::abort`): on the hard timeout or cancellation, every in-flight I/O gets
//!   an `IORING_OP_ASYNC_CANCEL`, and what completes within [`DRAIN_GRACE`](super::DRAIN_GRACE) is reaped;
//! - abandoned (`Leftovers`): what a hung device has not completed by then stays in the ring.
//!   The run returns its measurement with [`StuckIos`](crate::probe::measurement::StuckIos); the thread goes on reaping, and frees the
//!   ring and the buffers once the kernel has completed every I/O. `RingIo`'s `Drop` never
//!   frees a buffer the kernel may still write into.
//!
//! Per I/O it does no allocation. With at most `ring::SPLIT_MAX_DEPTH` I/Os in flight it uses the
//! system calls fio's io_uring engine uses: one `io_uring_enter` submits, and only if no
//! completion is ready a second one waits for one. Up to `ring::GROUP_MAX_DEPTH` in flight the
//! same, the queued I/Os submitted in calls of at most `ring::GROUP_ENTRIES`; with more, one call
//! submits and waits for one completion. With `completion_poll::POLL_MIN_IN_FLIGHT` to
//! `POLL_MAX_IN_FLIGHT` in flight on a device whose completions come within `POLL_LIMIT`, a wait
//! first asks for completions without sleeping, for at most that long (`completion_poll`: a sleep
//! and the wake-up after it cost more); with more, up to `TRIAL_MAX_IN_FLIGHT`, only if a trial at
//! the start of the run found that polling completes I/O at least `TRIAL_GAIN_PERCENT` percent as
//! fast as sleeping (each figure is stated, with its reason, beside its constant). Every wait
//! returns as soon as one completion is there, and the time is taken once when it returns, for
//! every completion it brings: each is stamped as close to its arrival as the kernel lets us see
//! it (with deferred task running, when the kernel runs the completion for us in that call). Waits carry no timeout argument: a timeout request in the ring (re-armed every
//! [`CANCEL_POLL`](super::CANCEL_POLL), every `TICK` at shallow depth, or sooner for the hard timeout) ends any
//! wait, so the runtime, the hard timeout and the cancellation flag are still watched. Only
//! rate-capped runs wait with a timeout argument (the kernel's hrtimer, without timer slack), to
//! issue the next I/O when it is due (and so does any turn in which the timeout request could not
//! be queued).
//!
//! A profile with `fsync`/`fdatasync` (QD1) follows every Nth write, once its completion has
//! been reaped, with an `IORING_OP_FSYNC` of the file (`IORING_FSYNC_DATASYNC` for `fdatasync`),
//! as fio's io_uring engine does; the slot is free again when the sync completes, and the sync's
//! latency (its submission to its completion) is recorded apart from the write's.
//!
//! Latency is the time from submission to the reaping of the completion, as fio's `lat`. With a
//! rate cap, an I/O the device held back (every slot busy when it fell due) counts from its due
//! time instead (see `UringRun::latency_origin`). Short transfers are resubmitted for the remainder,
//! EAGAIN/EINTR completions are retried, and the first other error ends the run (like fio without
//! `continue_on_error`).

mod completion_poll;
mod ring;
mod run;

pub(crate) use run::run;
