//! The io_uring engine: one dedicated thread owns the ring, page-aligned buffers registered with
//! the ring (`READ_FIXED`/`WRITE_FIXED`) and the registered file, and keeps `iodepth` I/Os in
//! flight.
//!
//! A run is a [`UringRun`] that goes through its phases on that thread:
//! - set-up ([`RingIo::set_up`], then [`SETTLE`] before the first I/O: see there why);
//! - issuing ([`UringRun::issue`]): fill every free slot (with a rate cap, up to the I/O that is
//!   due next), wait, reap, refill;
//! - draining: stopped issuing (runtime over, `number_ios` reached, yield, error) and waiting for
//!   what is in flight;
//! - aborting ([`UringRun::abort`]): on the hard timeout or cancellation, every in-flight I/O gets
//!   an `IORING_OP_ASYNC_CANCEL`, and what completes within [`DRAIN_GRACE`] is reaped;
//! - abandoned ([`Leftovers`]): what a hung device has not completed by then stays in the ring.
//!   The run returns its measurement with [`StuckIos`]; the thread goes on reaping, and frees the
//!   ring and the buffers once the kernel has completed every I/O. [`RingIo`]'s `Drop` never
//!   frees a buffer the kernel may still write into.
//!
//! Per I/O it does no allocation. With at most 4 I/Os in flight (shallow queues, and rate-capped
//! deep ones, which keep few in flight) it uses the system calls fio's io_uring engine uses: one
//! `io_uring_enter` submits, and only if no completion is ready a second one waits for one, so
//! that at QD1 the kernel sees the same calls from us as from fio. With more in flight, one call
//! submits and waits for one completion. Every wait returns as soon as one completion
//! is there, and the time is taken once when it returns, for every completion it brings: each is
//! stamped as close to its arrival as the kernel lets us see it (with deferred task running, when
//! the kernel runs the completion for us in that call). Waits carry no timeout argument: a timeout request in the ring (re-armed every
//! [`CANCEL_POLL`], every [`TICK`] at shallow depth, or sooner for the hard timeout) ends any
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
//! time instead (see [`UringRun::latency_origin`]). Short transfers are resubmitted for the remainder,
//! EAGAIN/EINTR completions are retried, and the first other error ends the run (like fio without
//! `continue_on_error`).

use crate::probe::ProbeError;
use crate::probe::engine::buffer::{AlignedBuf, stamp};
use crate::probe::engine::lateness::Laps;
use crate::probe::engine::{
    CANCEL_POLL, DRAIN_GRACE, Job, Offsets, RunOptions, SETTLE, Schedule, Tally, abort_due,
};
use crate::probe::engine::{Issue, RunProgress, tighten_timer_slack};
use crate::probe::measurement::{Ending, EngineKind, Measurement, StuckIos};
use crate::probe::profile::SyncCall;
use io_uring::{IoUring, opcode, squeue, types};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::collections::VecDeque;
use std::io;
use std::mem::ManuallyDrop;
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// user_data of cancel requests.
const CANCEL_TAG: u64 = u64::MAX;
/// user_data of the timeout request that bounds every wait.
const TICK_TAG: u64 = u64::MAX - 1;

/// Period of the timeout request that bounds every wait at shallow queue depth (at most
/// [`SPLIT_MAX_DEPTH`], no rate cap) while I/O is issued. The request's hrtimer is armed on the
/// submitting CPU, so that CPU nearly always has a timer pending that expires before its next
/// scheduler tick (4 ms at HZ=250; at HZ=1000 only part of the time). When the CPU idles between
/// two I/Os the kernel stops its tick, and restarts it on wake-up (nohz idle); with an earlier
/// timer pending, neither changes the CPU's next expiry, so the timer device is not reprogrammed.
/// On an x86 KVM guest each reprogram is an MSR write and a VM exit, and at QD1 those land in
/// every I/O's latency: the CPU's power management, not the disk. The cost is an interrupt a
/// millisecond, and a wake-up of the thread when it is waiting then (several per I/O on a device
/// slower than 1 ms per I/O). Deeper queues rarely leave the CPU idle, and rate-capped runs wait
/// with a timeout of their own: they re-arm every [`CANCEL_POLL`].
const TICK: Duration = Duration::from_millis(1);

/// Most I/Os in flight for which submitting and waiting are separate system calls, as in fio.
const SPLIT_MAX_DEPTH: usize = 4;
/// `IORING_ENTER_GETEVENTS`.
const ENTER_GETEVENTS: u32 = 1;

/// Sets up a ring with `entries` submission entries and the flags fio 3.33 sets: single issuer
/// and deferred task running (kernel 6.1+: completions are run when the thread asks for them, no
/// interrupts) and cooperative task running (5.19+), dropping what an older kernel rejects.
pub fn setup(entries: u32) -> io::Result<IoUring> {
    let mut last = None;
    for (single_issuer_defer, coop) in [(true, true), (false, true), (false, false)] {
        let mut builder = IoUring::builder();
        if single_issuer_defer {
            builder.setup_single_issuer().setup_defer_taskrun();
        }
        if coop {
            builder.setup_coop_taskrun();
        }
        match builder.build(entries) {
            Ok(ring) => return Ok(ring),
            Err(err) if err.raw_os_error() == Some(libc::EINVAL) => last = Some(err),
            Err(err) => return Err(err),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINVAL)))
}

fn setup_error(source: io::Error) -> ProbeError {
    ProbeError::EngineSetup {
        engine: EngineKind::IoUring,
        source,
    }
}

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
            let ending = run.run();
            let (measurement, leftovers) = run.finish(ending);
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

/// How I/O names the target: the file registered with the ring, or its descriptor.
#[derive(Debug, Clone, Copy)]
enum FileRef {
    Registered,
    Fd(std::os::fd::RawFd),
}

/// How I/O names its buffer: registered with the ring (`*_FIXED` opcodes), or by address only
/// (when registration fails, e.g. for RLIMIT_MEMLOCK).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BufferMode {
    Registered,
    Plain,
}

/// Whether the timeout request that bounds waits is in the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TickState {
    Idle,
    Armed,
}

/// Whether the kernel holds a slot's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    /// Free since the kernel completed its last I/O (or since the set-up), as far as the engine
    /// can tell: when it reaped the completion, less the run delay it had accumulated meanwhile
    /// (`late`, its own lateness rather than the device's).
    Free { since: Instant, late: Duration },
    /// An I/O using the buffer is in the kernel (or queued for it).
    InKernel,
}

/// One queue slot: a buffer and the I/O that uses it.
struct Slot {
    buf: AlignedBuf,
    state: SlotState,
    /// Where the I/O starts.
    offset: u64,
    /// Bytes already transferred (a short transfer's remainder is resubmitted).
    done: u32,
    /// When it was submitted, and what its latency counts from.
    issue: Issue,
    /// Since when the device has held this I/O back: its due time when it was held back, else its
    /// submission.
    held_from: Instant,
    /// While the slot's write is followed by its sync (`IORING_OP_FSYNC`): when the sync was
    /// submitted.
    sync_since: Option<Instant>,
}

impl Slot {
    /// Whether the device held this slot at `at`: its last I/O was held since `at` or earlier (it
    /// was submitted by then, or was itself held back since then) and had not completed by then.
    /// A slot the engine filled only after `at` (catching up) was free at `at`.
    fn held_at(&self, at: Instant) -> bool {
        self.held_from <= at
            && match self.state {
                SlotState::InKernel => true,
                SlotState::Free { since, .. } => since > at,
            }
    }
}

/// The ring and the buffers its I/O reads into and writes from, owned together. Dropped, it
/// frees the buffers only when no slot is in the kernel, and closes the ring before unmapping
/// them; with I/O still in the kernel (a panic mid-run, or a ring that stopped answering) it
/// leaks both rather than unmap memory the kernel may still write into.
struct RingIo {
    ring: ManuallyDrop<IoUring>,
    slots: ManuallyDrop<Vec<Slot>>,
    /// Slots in [`SlotState::InKernel`].
    in_kernel: usize,
    file: FileRef,
    buffers: BufferMode,
    block_size: u32,
    write: bool,
    /// Profiles that sync: the call that follows every Nth write.
    sync: Option<SyncCall>,
    /// The timeout request's time span. The kernel reads it when the request is submitted; it is
    /// rewritten only after that request has completed.
    tick: Box<types::Timespec>,
    tick_state: TickState,
}

impl Drop for RingIo {
    fn drop(&mut self) {
        if self.in_kernel > 0 {
            tracing::error!(
                in_kernel = self.in_kernel,
                "io_uring: the kernel still holds I/O of a ring being dropped; leaking the ring and its buffers"
            );
            return;
        }
        // SAFETY: no slot is in the kernel, so no request refers to a buffer; the ring is closed
        // before the buffers are unmapped, and neither is used again.
        unsafe {
            ManuallyDrop::drop(&mut self.ring);
            ManuallyDrop::drop(&mut self.slots);
        }
    }
}

impl RingIo {
    /// Creates the ring, maps one buffer per slot and registers the buffers and the file.
    fn set_up(job: &Job, rng: &mut SmallRng) -> Result<RingIo, ProbeError> {
        let depth = job.iodepth as usize;
        // Room for every I/O plus the timeout request; the completion queue is twice as large,
        // enough for every I/O, a cancel request per I/O and the timeout request.
        let entries = job.iodepth.saturating_add(1).max(4).next_power_of_two();
        let ring = setup(entries).map_err(setup_error)?;
        if job.rate_interval.is_some() && !ring.params().is_feature_ext_arg() {
            // A rate cap waits for its next issue time with a timeout argument to io_uring_enter,
            // which kernels before 5.11 reject; `auto` then runs the job on psync.
            return Err(ProbeError::RateCapNeedsExtArg);
        }
        let now = Instant::now();
        let mut slots = Vec::with_capacity(depth);
        for _ in 0..depth {
            slots.push(Slot {
                buf: AlignedBuf::new(job.block_size as usize, job.mem_align, rng)?,
                state: SlotState::Free {
                    since: now,
                    late: Duration::ZERO,
                },
                offset: 0,
                done: 0,
                issue: Issue::at(now),
                held_from: now,
                sync_since: None,
            });
        }
        let file = match ring.submitter().register_files(&[job.fd]) {
            Ok(()) => FileRef::Registered,
            Err(_) => FileRef::Fd(job.fd),
        };
        let iovecs: Vec<libc::iovec> = slots
            .iter_mut()
            .map(|s| libc::iovec {
                iov_base: s.buf.as_mut_ptr().cast(),
                iov_len: s.buf.len(),
            })
            .collect();
        // SAFETY: the iovecs describe the slots' buffers, which stay mapped until RingIo's Drop
        // has closed the ring (or are leaked with it).
        let registered = depth <= usize::from(u16::MAX)
            && unsafe { ring.submitter().register_buffers(&iovecs) }.is_ok();
        if !registered {
            tracing::debug!(
                "io_uring: cannot register buffers (RLIMIT_MEMLOCK?); using plain reads/writes"
            );
        }
        Ok(RingIo {
            ring: ManuallyDrop::new(ring),
            slots: ManuallyDrop::new(slots),
            in_kernel: 0,
            file,
            buffers: if registered {
                BufferMode::Registered
            } else {
                BufferMode::Plain
            },
            block_size: job.block_size as u32,
            write: job.rw.is_write(),
            sync: job.sync.map(|s| s.call),
            tick: Box::new(types::Timespec::new()),
            tick_state: TickState::Idle,
        })
    }

    /// The sync of slot `index`, if it is syncing, else the read or write of its remaining bytes.
    fn entry(&mut self, index: usize) -> squeue::Entry {
        if self.slots[index].sync_since.is_some() {
            return self.sync_entry(index);
        }
        let slot = &mut self.slots[index];
        let done = slot.done;
        // SAFETY: done < block size = buffer length, so the pointer stays inside the buffer.
        let ptr = unsafe { slot.buf.as_mut_ptr().add(done as usize) };
        let offset = slot.offset + u64::from(done);
        let len = self.block_size - done;
        let buf_index = index as u16;
        let (write, buffers) = (self.write, self.buffers);
        macro_rules! rw {
            ($fd:expr) => {
                match (write, buffers) {
                    (false, BufferMode::Registered) => {
                        opcode::ReadFixed::new($fd, ptr, len, buf_index)
                            .offset(offset)
                            .build()
                    }
                    (false, BufferMode::Plain) => {
                        opcode::Read::new($fd, ptr, len).offset(offset).build()
                    }
                    (true, BufferMode::Registered) => {
                        opcode::WriteFixed::new($fd, ptr, len, buf_index)
                            .offset(offset)
                            .build()
                    }
                    (true, BufferMode::Plain) => {
                        opcode::Write::new($fd, ptr, len).offset(offset).build()
                    }
                }
            };
        }
        let entry = match self.file {
            FileRef::Registered => rw!(types::Fixed(0)),
            FileRef::Fd(fd) => rw!(types::Fd(fd)),
        };
        entry.user_data(index as u64)
    }

    /// `IORING_OP_FSYNC` of the file (with `IORING_FSYNC_DATASYNC` for `fdatasync`), as fio's
    /// io_uring engine submits it; it refers to no buffer.
    fn sync_entry(&self, index: usize) -> squeue::Entry {
        let flags = match self.sync {
            Some(SyncCall::Fdatasync) => types::FsyncFlags::DATASYNC,
            Some(SyncCall::Fsync) | None => types::FsyncFlags::empty(),
        };
        let entry = match self.file {
            FileRef::Registered => opcode::Fsync::new(types::Fixed(0)).flags(flags).build(),
            FileRef::Fd(fd) => opcode::Fsync::new(types::Fd(fd)).flags(flags).build(),
        };
        entry.user_data(index as u64)
    }

    /// Queues the sync that follows the write slot `index` has just completed; the slot stays
    /// in the kernel until the sync completes.
    fn start_sync(&mut self, index: usize, since: Instant) -> io::Result<()> {
        self.slots[index].sync_since = Some(since);
        let entry = self.sync_entry(index);
        let pushed = self.push(&entry);
        if pushed.is_err() {
            self.slots[index].sync_since = None;
        }
        pushed
    }

    /// Pushes an entry, submitting first when the submission queue is full.
    fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every entry refers to a slot's buffer (kept mapped while the slot is in the
            // kernel, see Drop), to the tick's time span (kept until the request completed), or
            // to nothing (cancels).
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                return Ok(());
            }
            match self.ring.submit() {
                Ok(_) => {}
                // Completion queue overflow (EBUSY): the caller must reap before submitting more.
                Err(err) if err.raw_os_error() == Some(libc::EINTR) => {}
                Err(err) => return Err(err),
            }
        }
    }

    /// Queues a new I/O in slot `index` at `offset`, held back since `held_from` (see
    /// [`Slot::held_from`]).
    fn start(
        &mut self,
        index: usize,
        offset: u64,
        issue: Issue,
        held_from: Instant,
    ) -> io::Result<()> {
        let slot = &mut self.slots[index];
        slot.offset = offset;
        slot.done = 0;
        slot.issue = issue;
        slot.held_from = held_from;
        let entry = self.entry(index);
        self.push(&entry)?;
        self.slots[index].state = SlotState::InKernel;
        self.in_kernel += 1;
        Ok(())
    }

    /// Queues the rest of slot `index`'s I/O (after a short transfer, EAGAIN or EINTR).
    fn resubmit(&mut self, index: usize) -> io::Result<()> {
        let entry = self.entry(index);
        self.push(&entry)
    }

    /// Marks slot `index` free as of `now`, its completion reaped `late` after it arrived; false
    /// when it was not in the kernel.
    fn release(&mut self, index: usize, now: Instant, late: Duration) -> bool {
        match self.slots.get_mut(index) {
            Some(slot) if slot.state == SlotState::InKernel => {
                slot.state = SlotState::Free {
                    since: now.checked_sub(late).unwrap_or(now),
                    late,
                };
                self.in_kernel -= 1;
                true
            }
            _ => false,
        }
    }

    /// Queues a cancel request for every slot in the kernel; the error of the first that could
    /// not be queued.
    fn cancel_all(&mut self) -> io::Result<()> {
        let mut result = Ok(());
        for index in 0..self.slots.len() {
            if self.slots[index].state == SlotState::InKernel {
                let entry = opcode::AsyncCancel::new(index as u64)
                    .build()
                    .user_data(CANCEL_TAG);
                if let Err(err) = self.push(&entry)
                    && result.is_ok()
                {
                    result = Err(err);
                }
            }
        }
        result
    }

    /// Keeps one timeout request in the ring, firing after `period`: it ends a wait that has no
    /// timeout of its own.
    fn keep_tick_armed(&mut self, period: Duration) {
        if self.tick_state == TickState::Armed {
            return;
        }
        *self.tick = types::Timespec::from(period.max(Duration::from_micros(1)));
        let entry = opcode::Timeout::new(&*self.tick)
            .build()
            .user_data(TICK_TAG);
        match self.push(&entry) {
            Ok(()) => self.tick_state = TickState::Armed,
            // This turn waits with a timeout argument instead.
            Err(err) => tracing::debug!("io_uring: cannot arm the timeout request: {err}"),
        }
    }

    /// Submits what is queued and waits for a completion (any that are ready are reaped with it),
    /// or until `timeout`. Without a timeout, the tick (which must be armed) ends the wait;
    /// without a tick, the wait ends after [`CANCEL_POLL`]. Waiting for one completion, not a
    /// batch, lets each be stamped as soon as the kernel hands it over.
    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let timeout = timeout.or((self.tick_state == TickState::Idle).then_some(CANCEL_POLL));
        // With few I/Os in flight (a shallow queue, or a rate cap that keeps a deep one nearly
        // empty), submit in a call of its own and wait only if nothing is ready, as fio does.
        if self.in_kernel <= SPLIT_MAX_DEPTH && self.submit_alone()? {
            return Ok(());
        }
        match timeout {
            Some(t) => {
                let ts = types::Timespec::from(t.max(Duration::from_micros(1)));
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)?;
            }
            None => {
                self.ring.submit_and_wait(1)?;
            }
        }
        Ok(())
    }

    /// Submits what is queued in a call of its own, as fio's `commit` does (`GETEVENTS` also runs
    /// completions that are already due). Returns whether completions are ready to be reaped.
    fn submit_alone(&mut self) -> io::Result<bool> {
        let queued = self.ring.submission().len();
        if queued > 0 {
            // SAFETY: the queued entries refer to memory that outlives the I/O (see `push`); no
            // argument is passed.
            unsafe {
                self.ring.submitter().enter::<libc::sigset_t>(
                    queued as u32,
                    0,
                    ENTER_GETEVENTS,
                    None,
                )?;
            }
        }
        self.ring.completion().sync();
        Ok(!self.ring.completion().is_empty())
    }

    /// Moves every completion in the ring to `out`; a completed tick is noted.
    fn take_completions(&mut self, out: &mut Vec<(u64, i32)>) {
        out.clear();
        for cqe in self.ring.completion() {
            if cqe.user_data() == TICK_TAG {
                self.tick_state = TickState::Idle;
            } else if cqe.user_data() != CANCEL_TAG {
                out.push((cqe.user_data(), cqe.result()));
            }
        }
    }
}

/// Whether an error from `io_uring_enter` only ended a wait (timeout, signal, a full completion
/// queue, no memory for now) rather than failing.
fn wait_ended(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)
    )
}

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Issuing I/O.
    Issuing,
    /// Not issuing any more; waiting for what is in flight.
    Draining(Ending),
    /// In-flight I/O was cancelled at `since`; waiting for it for at most [`DRAIN_GRACE`].
    Aborting { since: Instant, why: Ending },
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
    Failed(String),
}

/// One run on the engine thread.
struct UringRun {
    io: RingIo,
    opts: RunOptions,
    schedule: Schedule,
    phase: Phase,
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
    cqes: Vec<(u64, i32)>,
}

impl UringRun {
    /// Sets up the ring and buffers, then waits [`SETTLE`] before the run's clock starts.
    fn set_up(job: Job, opts: RunOptions) -> Result<UringRun, ProbeError> {
        let mut rng = SmallRng::from_os_rng();
        let mut io = RingIo::set_up(&job, &mut rng)?;
        let depth = job.iodepth as usize;
        let cqes = Vec::with_capacity(io.ring.completion().capacity());
        thread::sleep(SETTLE);
        let start = Instant::now();
        Ok(UringRun {
            io,
            opts,
            schedule: Schedule::new(&job, start),
            phase: Phase::Issuing,
            free: (0..depth).collect(),
            offsets: job.offsets(),
            tally: Tally::of(&job),
            issued: 0,
            sync_every: job.sync.map(|s| s.every),
            unsynced: 0,
            now: start,
            late: Duration::ZERO,
            laps: Laps::of_this_thread(job.rate_interval.is_some()),
            cqes,
        })
    }

    /// Issues, waits and reaps until the run has ended, or has been aborted and waited for its
    /// grace period.
    fn run(&mut self) -> Ending {
        loop {
            self.check_limits();
            let next_due = if self.phase == Phase::Issuing {
                self.issue()
            } else {
                None
            };
            if self.io.in_kernel == 0 && next_due.is_none() {
                return match self.phase {
                    Phase::Issuing => Ending::Finished,
                    Phase::Draining(why) | Phase::Aborting { why, .. } => why,
                };
            }
            if let Err(why) = self.wait(next_due) {
                return why;
            }
            // An abort that fell due during the wait starts before its completions are reaped:
            // what it interrupted (a signal that ended the wait, too) is not counted as an error.
            self.check_limits();
            self.reap();
            if let Phase::Aborting { since, why } = self.phase
                && self.now >= since + DRAIN_GRACE
            {
                return why;
            }
        }
    }

    /// Stops issuing on cancellation, the hard timeout, a yield request, the end of the runtime
    /// or of the job's I/O count.
    fn check_limits(&mut self) {
        if matches!(self.phase, Phase::Aborting { .. }) {
            return;
        }
        if let Some(why) = abort_due(&self.opts, self.now, self.schedule.deadline) {
            self.abort(why);
        } else if self.phase == Phase::Issuing {
            if self.opts.yield_now.load(Ordering::Relaxed) {
                self.stop_issuing(Ending::Yielded);
            } else if self.schedule.runtime_over(self.now) || self.schedule.out_of_ios(self.issued)
            {
                self.stop_issuing(Ending::Finished);
            }
        }
    }

    /// Leaves the issuing phase (telling the caller's hook) for draining.
    fn stop_issuing(&mut self, why: Ending) {
        if self.phase == Phase::Issuing
            && let Some(hook) = &self.opts.on_draining
        {
            (hook.0)();
        }
        self.phase = match self.phase {
            Phase::Aborting { .. } => self.phase,
            _ => Phase::Draining(why),
        };
    }

    /// An error: stop issuing, and let what is in flight complete.
    fn fail(&mut self) {
        self.stop_issuing(Ending::Failed);
    }

    /// Cancels everything in flight and starts the drain grace period.
    fn abort(&mut self, why: Ending) {
        self.stop_issuing(why);
        if let Err(err) = self.io.cancel_all() {
            self.tally.note(|| format!("io_uring cancel: {err}"));
        }
        self.phase = Phase::Aborting {
            since: self.now,
            why,
        };
    }

    /// Issues I/O into free slots; returns when the next one is due if a rate cap holds it back.
    fn issue(&mut self) -> Option<Instant> {
        while let Some(&index) = self.free.front() {
            if self.schedule.out_of_ios(self.issued) {
                self.stop_issuing(Ending::Finished);
                return None;
            }
            let due = self.schedule.due(self.issued);
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
                self.tally.error(|| format!("io_uring submit: {err}"));
                self.fail();
                return None;
            }
            self.issued += 1;
            self.opts.progress.submitted.fetch_add(1, Ordering::Relaxed);
            if due.is_some() && held.is_none() && self.schedule.due(self.issued) <= Some(self.now) {
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
        match self.io.slots[index].state {
            SlotState::Free { since, late }
                if since > at && self.io.slots.iter().all(|s| s.held_at(at)) =>
            {
                Some((at, late))
            }
            _ => None,
        }
    }

    /// The period of the timeout request that bounds this turn's wait.
    fn tick_period(&self) -> Duration {
        match self.phase {
            Phase::Aborting { .. } => CANCEL_POLL,
            phase => {
                let shallow = phase == Phase::Issuing
                    && !self.schedule.rate_capped()
                    && self.io.slots.len() <= SPLIT_MAX_DEPTH;
                let period = if shallow { TICK } else { CANCEL_POLL };
                period.min(self.schedule.deadline.saturating_duration_since(self.now))
            }
        }
    }

    /// Submits what is queued and waits for completions, or until `next_due`. A failed system
    /// call aborts the run (its error, not a timeout, is reported); during an abort it ends the
    /// run at once (`Err`).
    fn wait(&mut self, next_due: Option<Instant>) -> Result<(), Ending> {
        self.io.keep_tick_armed(self.tick_period());
        let timeout = next_due.map(|at| at.saturating_duration_since(self.now));
        let result = self.io.wait(timeout);
        self.now = Instant::now();
        self.late = self.laps.lap(self.now);
        match result {
            Err(err) if !wait_ended(&err) => {
                self.tally.error(|| format!("io_uring_enter: {err}"));
                match self.phase {
                    Phase::Aborting { why, .. } => return Err(why),
                    _ => self.abort(Ending::Failed),
                }
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
        let slot = &self.io.slots[index];
        let aborting = matches!(self.phase, Phase::Aborting { .. });
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
            0 => Completion::Failed(format!(
                "short {}: end of the target after {} bytes",
                self.op(),
                slot.done
            )),
            n => Completion::Failed(io::Error::from_raw_os_error(-n).to_string()),
        }
    }

    fn op(&self) -> &'static str {
        if self.io.write { "write" } else { "read" }
    }

    /// Handles the completion of slot `index`'s I/O, reaped at `self.now`.
    fn complete(&mut self, index: usize, res: i32) {
        if self
            .io
            .slots
            .get(index)
            .is_none_or(|s| s.state != SlotState::InKernel)
        {
            return;
        }
        if self.io.slots[index].sync_since.is_some() {
            self.sync_completed(index, res);
            return;
        }
        let outcome = self.classify(index, res);
        if let Completion::Retry = outcome {
            if res > 0 {
                // Short transfer: submit the remainder, keeping the original issue time.
                self.io.slots[index].done += res as u32;
            }
            match self.io.resubmit(index) {
                Ok(()) => return,
                Err(err) => {
                    self.tally.error(|| format!("io_uring resubmit: {err}"));
                    self.fail();
                }
            }
        }
        let now = self.now;
        self.opts.progress.completed.fetch_add(1, Ordering::Relaxed);
        let sync_next = matches!(outcome, Completion::Done) && self.sync_due();
        if !sync_next {
            self.io.release(index, now, self.late);
            self.free.push_back(index);
        }
        let bs = self.io.block_size;
        let slot = &mut self.io.slots[index];
        if self.io.write {
            // Fresh data for the buffer's next write, stamped here (after this completion's
            // time was taken, before the next issue time) so it is never part of a latency.
            stamp(slot.buf.as_mut_slice(), self.offsets.rng());
        }
        match outcome {
            Completion::Done => {
                self.tally.completed(u64::from(bs), slot.issue, now);
                if sync_next {
                    self.sync_after_write(index);
                }
            }
            Completion::Failed(what) => {
                let offset = slot.offset;
                let op = self.op();
                self.tally
                    .failed(|| format!("{op} at offset {offset}: {what}"), now);
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
        if matches!(self.phase, Phase::Aborting { .. }) {
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
            self.tally
                .error(|| format!("io_uring submit of the sync: {err}"));
            self.io.release(index, now, self.late);
            self.free.push_back(index);
            self.fail();
            return;
        }
        self.opts.progress.submitted.fetch_add(1, Ordering::Relaxed);
    }

    /// Handles the completion of slot `index`'s sync (result `res`), reaped at `self.now`.
    fn sync_completed(&mut self, index: usize, res: i32) {
        let aborting = matches!(self.phase, Phase::Aborting { .. });
        let interrupted = res == -libc::EAGAIN || res == -libc::EINTR;
        if interrupted && !aborting {
            match self.io.resubmit(index) {
                Ok(()) => return,
                Err(err) => {
                    self.tally
                        .error(|| format!("io_uring resubmit of the sync: {err}"));
                    self.fail();
                }
            }
        }
        let now = self.now;
        let since = self.io.slots[index].sync_since.take().unwrap_or(now);
        self.io.release(index, now, self.late);
        self.free.push_back(index);
        self.opts.progress.completed.fetch_add(1, Ordering::Relaxed);
        let call = self.io.sync.map_or("sync", SyncCall::as_str);
        match res {
            0.. => self.tally.synced(since, now),
            // Cancelled or interrupted by the abort: not counted.
            _ if aborting && (res == -libc::ECANCELED || interrupted) => {}
            _ if interrupted => {}
            n => {
                let err = io::Error::from_raw_os_error(-n);
                let offset = self.io.slots[index].offset;
                self.tally.failed(
                    || format!("{call} after the write at offset {offset}: {err}"),
                    now,
                );
                self.fail();
            }
        }
    }

    /// The run's measurement, and what the kernel still holds: when I/O is still in flight, the
    /// ring and buffers go to [`Leftovers`] and the measurement reports them as stuck.
    fn finish(self, ending: Ending) -> (Measurement, Option<Leftovers>) {
        let UringRun {
            io,
            opts,
            schedule,
            mut tally,
            ..
        } = self;
        if io.in_kernel == 0 {
            drop(io);
            let m = tally.into_measurement(EngineKind::IoUring, schedule.start, ending, None);
            return (m, None);
        }
        let stuck = Arc::new(StuckIos::new(schedule.start, io.slots.len()));
        for (index, slot) in io.slots.iter().enumerate() {
            if slot.state == SlotState::InKernel {
                stuck.set(index, Some(slot.issue.submitted));
            }
        }
        let in_kernel = io.in_kernel;
        tracing::warn!(
            in_kernel,
            "io_uring: I/O still in flight {DRAIN_GRACE:?} after cancellation; a thread keeps the ring and frees it once the kernel completes the I/O"
        );
        tally.note(|| format!("{in_kernel} I/Os still in flight after cancellation"));
        let m = tally.into_measurement(
            EngineKind::IoUring,
            schedule.start,
            ending,
            Some(stuck.clone()),
        );
        let leftovers = Leftovers {
            io,
            stuck,
            progress: opts.progress,
        };
        (m, Some(leftovers))
    }
}

/// The ring and buffers of a run that returned while the kernel still held some of its I/O.
struct Leftovers {
    io: RingIo,
    stuck: Arc<StuckIos>,
    progress: Arc<RunProgress>,
}

impl Leftovers {
    /// Waits for every I/O the kernel still holds, then frees the ring and the buffers (the
    /// ring is closed before the last slot is reported clear, so that no new run on the device
    /// starts beside it). A ring that fails to wait is leaked with its buffers.
    fn reap_until_clear(mut self) {
        let mut cqes = Vec::new();
        let mut last = None;
        while self.io.in_kernel > 0 {
            if let Err(err) = self.io.ring.submit_and_wait(1)
                && !wait_ended(&err)
            {
                tracing::error!(%err, in_kernel = self.io.in_kernel, "io_uring: cannot wait for the stuck I/O; leaking the ring and its buffers");
                return;
            }
            self.io.take_completions(&mut cqes);
            let now = Instant::now();
            for &(user_data, _) in &cqes {
                let index = user_data as usize;
                if self.io.release(index, now, Duration::ZERO) {
                    self.progress.completed.fetch_add(1, Ordering::Relaxed);
                    if self.io.in_kernel > 0 {
                        self.stuck.set(index, None);
                    } else {
                        last = Some(index);
                    }
                }
            }
        }
        drop(self.io);
        if let Some(index) = last {
            self.stuck.set(index, None);
        }
        tracing::info!("io_uring: the kernel completed the stuck I/O; ring and buffers freed");
    }
}
