//! The io_uring engine's run: a [`UringRun`] submits, waits and reaps on the engine thread over a
//! [`RingIo`], and cancels what is in flight when its [`Control`] (the controller both engines
//! share) orders it.

use super::ring::{Leftovers, RingIo, SPLIT_MAX_DEPTH, SlotState, TICK, setup_error, wait_ended};
use crate::probe::engine::control::{Control, Order, Phase};
use crate::probe::engine::job::{Job, Offsets};
use crate::probe::engine::lateness::{Laps, RunWait};
use crate::probe::engine::options::{CANCEL_POLL, DRAIN_GRACE, RunOptions, SETTLE};
use crate::probe::engine::schedule::{Issue, Schedule, tighten_timer_slack};
use crate::probe::engine::tally::Tally;
use crate::probe::error::ProbeError;
use crate::probe::measurement::{Ending, EngineKind, IoCause, Measurement, RunError, StuckIos};
use crate::probe::profile::SyncCall;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// Runs the job on a thread of its own that owns the ring and the buffers. Returns when the run
/// has ended; if a hung device still holds I/O then, the thread stays behind to reap it (see
/// [`Leftovers`]) and the measurement says so ([`Measurement::stuck`]).
pub(crate) fn run(job: &Job, opts: &RunOptions) -> Result<Measurement, ProbeError> {
    let (tx, rx) = mpsc::sync_channel(1);
    let (job, opts) = (job.clone(), opts.clone());
    thread::Builder::new()
        .name("diskprobe-uring".to_owned())
        .spawn(move || {
            tighten_timer_slack();
            let mut run = match UringRun::set_up(job, opts) {
                Ok(run) => run,
                Err(err) => {
                    let _ = tx.send(Err(err));
                    return;
                }
            };
            run.run();
            let (measurement, leftovers) = run.finish();
            let _ = tx.send(Ok(measurement));
            if let Some(leftovers) = leftovers {
                leftovers.reap_until_clear();
            }
        })
        .map_err(setup_error)?;
    rx.recv().unwrap_or(Err(ProbeError::EnginePanicked {
        engine: EngineKind::IoUring,
    }))
}

/// What became of one completion.
enum Completion {
    /// The whole transfer is done.
    Done,
    /// Transferred in part, or EAGAIN/EINTR: the rest is resubmitted.
    Retry,
    /// Cancelled by us, or cut short by the abort: not counted.
    Dropped,
    /// Failed: counted, and the run stops.
    Failed(IoCause),
}

/// One run on the engine thread.
struct UringRun {
    io: RingIo,
    control: Control,
    /// Free slots, in the order they became free.
    free: VecDeque<usize>,
    offsets: Offsets,
    tally: Tally,
    /// I/Os issued so far (not counting resubmitted remainders).
    issued: u64,
    /// Profiles that sync: after how many writes, and writes completed since the last sync.
    sync_every: Option<u32>,
    unsynced: u32,
    /// When the last wait returned: the submission time of what is issued next, and the
    /// completion time of what was just reaped.
    now: Instant,
    /// Run delay the thread accumulated since the previous wait returned (measured for
    /// rate-capped runs only).
    late: Duration,
    laps: Laps,
    /// The thread's wait for a CPU since the run's clock started.
    wait: RunWait,
    /// Rate-capped runs: its run delay while it had I/O in flight, once per I/O in flight.
    waited_in_flight: Duration,
    cqes: Vec<(u64, i32)>,
}

impl UringRun {
    /// Sets up the ring and buffers, then waits [`SETTLE`] before the run's clock starts.
    fn set_up(job: Job, opts: RunOptions) -> Result<UringRun, ProbeError> {
        let mut rng = SmallRng::from_os_rng();
        let mut io = RingIo::set_up(&job, &mut rng)?;
        let depth = job.iodepth as usize;
        let cqes = Vec::with_capacity(io.completion_capacity());
        thread::sleep(SETTLE);
        let start = Instant::now();
        Ok(UringRun {
            io,
            control: Control::new(opts, Schedule::new(&job, start)),
            free: (0..depth).collect(),
            offsets: job.offsets(),
            tally: Tally::of(&job),
            issued: 0,
            sync_every: job.sync.map(|s| s.every),
            unsynced: 0,
            now: start,
            late: Duration::ZERO,
            laps: Laps::of_this_thread(job.rate_interval.is_some()),
            wait: RunWait::of_this_thread(),
            waited_in_flight: Duration::ZERO,
            cqes,
        })
    }

    /// Issues, waits and reaps until the run has ended, or has been aborted and waited for its
    /// grace period.
    fn run(&mut self) {
        loop {
            self.check_limits();
            let next_due = if self.control.issuing() {
                self.issue()
            } else {
                None
            };
            if self.io.in_kernel() == 0 && next_due.is_none() {
                return;
            }
            if self.wait(next_due).is_err() {
                return;
            }
            // An abort that fell due during the wait starts before its completions are reaped:
            // what it interrupted (a signal that ended the wait, too) is not counted as an error.
            self.check_limits();
            self.reap();
            if self.control.grace_over(self.now) {
                return;
            }
        }
    }

    /// Asks the controller about the limits at the time of the last wait, and cancels what is in
    /// flight when it orders an abort.
    fn check_limits(&mut self) {
        let order = self.control.check(self.now, self.issued);
        self.obey(order);
    }

    /// Cancels everything in flight when the controller ordered it.
    fn obey(&mut self, order: Order) {
        if order == Order::Cancel
            && let Err(err) = self.io.cancel_all()
        {
            self.tally.note(|| RunError::Engine {
                call: "io_uring cancel",
                source: err,
            });
        }
    }

    /// An error: stop issuing, and let what is in flight complete.
    fn fail(&mut self) {
        self.control.failed();
    }

    /// Issues I/O into free slots; returns when the next one is due if a rate cap holds it back.
    fn issue(&mut self) -> Option<Instant> {
        while let Some(&index) = self.free.front() {
            if self.control.schedule().out_of_ios(self.issued) {
                self.control.stop_issuing(Ending::Finished);
                return None;
            }
            let due = self.control.schedule().due(self.issued);
            if let Some(at) = due
                && at > self.now
            {
                return Some(at);
            }
            self.free.pop_front();
            let offset = self.offsets.next_offset();
            let held = self.held_back(index, due);
            let issue = Issue {
                origin: held.map_or(self.now, |(at, late)| (at + late).min(self.now)),
                submitted: self.now,
            };
            let held_from = held.map_or(self.now, |(at, _)| at);
            if let Err(err) = self.io.start(index, offset, issue, held_from) {
                self.free.push_front(index);
                self.tally.error(|| RunError::Engine {
                    call: "io_uring submit",
                    source: err,
                });
                self.fail();
                return None;
            }
            self.issued += 1;
            self.control
                .opts()
                .progress
                .submitted
                .fetch_add(1, Ordering::Relaxed);
            if due.is_some()
                && held.is_none()
                && self.control.schedule().due(self.issued) <= Some(self.now)
            {
                // The engine is behind its own schedule (it woke up late): the next I/O is due
                // already. Catching up, each I/O is submitted in a call of its own, as fio
                // does, rather than all at once as a burst the device would queue.
                return Some(self.now);
            }
        }
        None
    }

    /// With a rate cap, whether the device held back the I/O due at `due` that is issued now into
    /// slot `index`: it held every slot at the due time (a backlog). Then its latency counts from
    /// the due time (plus the engine's own lateness in noticing the slot free, returned with it),
    /// so that the delay the device caused is counted in every I/O it held back (no coordinated
    /// omission). Otherwise (no rate cap, or some slot was free at the due time: the engine, not
    /// the device, is late, by its wake-up or a catch-up after it was preempted) from now, its
    /// submission.
    fn held_back(&self, index: usize, due: Option<Instant>) -> Option<(Instant, Duration)> {
        let at = due?;
        match self.io.slots()[index].state() {
            SlotState::Free { since, late }
                if since > at && self.io.slots().iter().all(|s| s.held_at(at)) =>
            {
                Some((at, late))
            }
            _ => None,
        }
    }

    /// The period of the timeout request that bounds this turn's wait: with a rate cap, the
    /// wait's `timeout` (until the next I/O is due), so that the waits until then sleep on that
    /// one timer.
    fn tick_period(&self, timeout: Option<Duration>) -> Duration {
        match self.control.phase() {
            Phase::Aborting { .. } => CANCEL_POLL,
            phase => {
                let schedule = self.control.schedule();
                let shallow = phase == Phase::Issuing
                    && !schedule.rate_capped()
                    && self.io.slots().len() <= SPLIT_MAX_DEPTH;
                let period = match timeout {
                    Some(t) => t.min(CANCEL_POLL),
                    None if shallow => TICK,
                    None => CANCEL_POLL,
                };
                period.min(schedule.deadline.saturating_duration_since(self.now))
            }
        }
    }

    /// Submits what is queued and waits for completions, or until `next_due`. A failed system
    /// call aborts the run (its error, not a timeout, is reported); during an abort it ends the
    /// run at once (`Err`).
    fn wait(&mut self, next_due: Option<Instant>) -> Result<(), ()> {
        let timeout = next_due.map(|at| at.saturating_duration_since(self.now));
        // A wait that only submits (an I/O is due already) needs no tick.
        if timeout != Some(Duration::ZERO) {
            self.io.keep_tick_armed(self.now, self.tick_period(timeout));
        }
        let in_flight = self.io.in_kernel() as u32;
        let (returned, result) = self.io.wait(timeout);
        self.now = returned;
        self.late = self.laps.lap(self.now);
        // What the thread waited for a CPU before it could reap stamps every I/O in flight late.
        self.waited_in_flight += self.late * in_flight;
        match result {
            Err(err) if !wait_ended(&err) => {
                self.tally.error(|| RunError::Engine {
                    call: "io_uring_enter",
                    source: err,
                });
                if self.control.aborting() {
                    return Err(());
                }
                let order = self.control.abort(Ending::Failed, self.now);
                self.obey(order);
            }
            _ => {}
        }
        Ok(())
    }

    /// Reaps every completion in the ring.
    fn reap(&mut self) {
        let mut cqes = std::mem::take(&mut self.cqes);
        self.io.take_completions(&mut cqes);
        for &(user_data, res) in &cqes {
            self.complete(user_data as usize, res);
        }
        if !cqes.is_empty() {
            // What is issued next is submitted after this processing, not when the wait returned.
            self.now = Instant::now();
        }
        self.cqes = cqes;
    }

    /// What a completion with result `res` means for slot `index`.
    fn classify(&self, index: usize, res: i32) -> Completion {
        let slot = &self.io.slots()[index];
        let aborting = self.control.aborting();
        let bs = self.io.block_size;
        let interrupted = res == -libc::EAGAIN || res == -libc::EINTR;
        match res {
            n if n > 0 && slot.done + n as u32 >= bs => Completion::Done,
            // Cancelled by the abort, interrupted by it (an I/O waiting in a worker thread ends
            // with EINTR when cancelled), or cut short: the abort's doing, not the device's.
            _ if aborting && (res == -libc::ECANCELED || interrupted || res >= 0) => {
                Completion::Dropped
            }
            n if n > 0 => Completion::Retry,
            _ if interrupted => Completion::Retry,
            0 => Completion::Failed(IoCause::ShortAtEnd {
                op: self.op(),
                after: slot.done,
            }),
            n => Completion::Failed(IoCause::Os(-n)),
        }
    }

    fn op(&self) -> &'static str {
        if self.io.write { "write" } else { "read" }
    }

    /// Handles the completion of slot `index`'s I/O, reaped at `self.now`.
    fn complete(&mut self, index: usize, res: i32) {
        if self
            .io
            .slots()
            .get(index)
            .is_none_or(|s| s.state() != SlotState::InKernel)
        {
            return;
        }
        if self.io.slots()[index].sync_since.is_some() {
            self.sync_completed(index, res);
            return;
        }
        let outcome = self.classify(index, res);
        if let Completion::Retry = outcome {
            if res > 0 {
                // Short transfer: submit the remainder, keeping the original issue time.
                self.io.slot_mut(index).done += res as u32;
            }
            match self.io.resubmit(index) {
                Ok(()) => return,
                Err(err) => {
                    self.tally.error(|| RunError::Engine {
                        call: "io_uring resubmit",
                        source: err,
                    });
                    self.fail();
                }
            }
        }
        let now = self.now;
        self.control
            .opts()
            .progress
            .completed
            .fetch_add(1, Ordering::Relaxed);
        let sync_next = matches!(outcome, Completion::Done) && self.sync_due();
        if !sync_next {
            self.io.release(index, now, self.late);
            self.free.push_back(index);
        }
        let bs = self.io.block_size;
        if self.io.write {
            // Fresh data for the buffer's next write, stamped here (after this completion's
            // time was taken, before the next issue time) so it is never part of a latency.
            self.io.stamp(index, self.offsets.rng());
        }
        let slot = self.io.slot_mut(index);
        match outcome {
            Completion::Done => {
                self.tally.completed(u64::from(bs), slot.issue, now);
                if sync_next {
                    self.sync_after_write(index);
                }
            }
            Completion::Failed(cause) => {
                let offset = slot.offset;
                let op = self.op();
                self.tally
                    .failed(|| RunError::Io { op, offset, cause }, now);
                self.fail();
            }
            Completion::Retry | Completion::Dropped => {}
        }
    }

    /// Whether the write that has just completed is the Nth since the last sync of a profile
    /// that syncs every N writes (counted here; QD1, so in the order they were issued). No sync
    /// starts once the run is aborting.
    fn sync_due(&mut self) -> bool {
        let Some(every) = self.sync_every else {
            return false;
        };
        if self.control.aborting() {
            return false;
        }
        self.unsynced += 1;
        if self.unsynced < every {
            return false;
        }
        self.unsynced = 0;
        true
    }

    /// Submits the sync that follows slot `index`'s write, submitted now as fio does once the
    /// write has completed; the slot is released when the sync completes.
    fn sync_after_write(&mut self, index: usize) {
        let now = self.now;
        if let Err(err) = self.io.start_sync(index, now) {
            self.tally.error(|| RunError::Engine {
                call: "io_uring submit of the sync",
                source: err,
            });
            self.io.release(index, now, self.late);
            self.free.push_back(index);
            self.fail();
            return;
        }
        self.control
            .opts()
            .progress
            .submitted
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Handles the completion of slot `index`'s sync (result `res`), reaped at `self.now`.
    fn sync_completed(&mut self, index: usize, res: i32) {
        let aborting = self.control.aborting();
        let interrupted = res == -libc::EAGAIN || res == -libc::EINTR;
        if interrupted && !aborting {
            match self.io.resubmit(index) {
                Ok(()) => return,
                Err(err) => {
                    self.tally.error(|| RunError::Engine {
                        call: "io_uring resubmit of the sync",
                        source: err,
                    });
                    self.fail();
                }
            }
        }
        let now = self.now;
        let since = self.io.slot_mut(index).sync_since.take().unwrap_or(now);
        self.io.release(index, now, self.late);
        self.free.push_back(index);
        self.control
            .opts()
            .progress
            .completed
            .fetch_add(1, Ordering::Relaxed);
        let call = self.io.sync.map_or("sync", SyncCall::as_str);
        match res {
            0.. => self.tally.synced(since, now),
            // Cancelled or interrupted by the abort: not counted.
            _ if aborting && (res == -libc::ECANCELED || interrupted) => {}
            _ if interrupted => {}
            n => {
                let offset = self.io.slots()[index].offset;
                let cause = IoCause::Os(-n);
                self.tally.failed(
                    || RunError::SyncAfterWriteAt {
                        call,
                        offset,
                        cause,
                    },
                    now,
                );
                self.fail();
            }
        }
    }

    /// The run's measurement, and what the kernel still holds: when I/O is still in flight, the
    /// ring and buffers go to [`Leftovers`] and the measurement reports them as stuck.
    fn finish(mut self) -> (Measurement, Option<Leftovers>) {
        let ending = self.control.ending(self.tally.has_errors(), Instant::now());
        let in_latency = self.laps.measuring().then_some(self.waited_in_flight);
        self.tally.waited(self.wait.so_far(), in_latency);
        let UringRun {
            io,
            control,
            mut tally,
            ..
        } = self;
        let schedule = *control.schedule();
        if io.in_kernel() == 0 {
            drop(io);
            let m = tally.into_measurement(EngineKind::IoUring, schedule.start, ending, None);
            return (m, None);
        }
        let stuck = Arc::new(StuckIos::new(schedule.start, io.slots().len()));
        for (index, slot) in io.slots().iter().enumerate() {
            if slot.state() == SlotState::InKernel {
                stuck.set(index, Some(slot.issue.submitted));
            }
        }
        let in_kernel = io.in_kernel();
        tracing::warn!(
            in_kernel,
            "io_uring: I/O still in flight {DRAIN_GRACE:?} after cancellation; a thread keeps the ring and frees it once the kernel completes the I/O"
        );
        tally.note(|| RunError::StillInFlight { ios: in_kernel });
        let m = tally.into_measurement(
            EngineKind::IoUring,
            schedule.start,
            ending,
            Some(stuck.clone()),
        );
        let leftovers = Leftovers::new(io, stuck, control.opts().progress.clone());
        (m, Some(leftovers))
    }
}
