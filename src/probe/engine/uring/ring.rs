//! The io_uring engine's ring and the buffers its I/O uses, owned together ([`RingIo`]): every
//! `unsafe` of the engine is here, each block with its `// SAFETY:`. Dropped, a `RingIo` never
//! unmaps a buffer the kernel may still write into; [`Leftovers`] keeps reaping what a hung device
//! still holds after the run returned, and frees both once the kernel has let go.

use super::completion_poll::{CompletionPoll, POLL_LIMIT};
use crate::probe::buffer::{AlignedBuf, stamp};
use crate::probe::engine::job::Job;
use crate::probe::engine::options::{CANCEL_POLL, RunProgress};
use crate::probe::engine::schedule::Issue;
use crate::probe::error::ProbeError;
use crate::probe::measurement::{EngineKind, StuckIos};
use crate::probe::profile::SyncCall;
use io_uring::{IoUring, opcode, squeue, types};
use rand::rngs::SmallRng;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// user_data of cancel requests.
pub(super) const CANCEL_TAG: u64 = u64::MAX;
/// user_data of the timeout request that bounds every wait.
pub(super) const TICK_TAG: u64 = u64::MAX - 1;

/// Period of the timeout request that bounds every wait at shallow queue depth (at most
/// [`SPLIT_MAX_DEPTH`], no rate cap) while I/O is issued. The request's hrtimer is armed on the
/// submitting CPU, so that CPU nearly always has a timer pending that expires before its next
/// scheduler tick (4 ms at HZ=250; at HZ=1000 only part of the time). When the CPU idles between
/// two I/Os the kernel stops its tick, and restarts it on wake-up (nohz idle); with an earlier
/// timer pending, neither changes the CPU's next expiry, so the timer device is not reprogrammed.
/// On an x86 KVM guest each reprogram is an MSR write and a VM exit, and at QD1 those land in
/// every I/O's latency: the CPU's power management, not the disk. The cost is an interrupt a
/// millisecond, and a wake-up of the thread when it is waiting then (several per I/O on a device
/// slower than 1 ms per I/O). Deeper queues rarely leave the CPU idle (they re-arm every
/// [`CANCEL_POLL`]), and rate-capped runs arm it for their next I/O's due time.
pub(super) const TICK: Duration = Duration::from_millis(1);

/// Most I/Os in flight for which submitting and waiting are separate system calls, as in fio,
/// and what is queued is submitted in one call: 4 (shallow queues, and rate-capped deep ones,
/// which keep few in flight), so that at QD1 the kernel sees the same calls from us as from fio.
pub(super) const SPLIT_MAX_DEPTH: usize = 4;
/// Most I/Os in flight for which what is queued is submitted in small groups before a wait: 64.
/// The groups are as fio's io_uring engine submits at its default `iodepth_batch_submit=1` (one
/// I/O a call), but of [`GROUP_ENTRIES`]. Each call also runs the completions that are due
/// (`GETEVENTS`), so the thread keeps finding completions without sleeping, and the device gets
/// the first I/Os as soon as they are queued rather than the batch at the end. Beyond this depth the device is rarely idle and one call per
/// batch costs less (`bench/qd_sweep.sh` on a loop device: 4k random I/O at QD 24–48 was slower
/// than fio's batched).
pub(super) const GROUP_MAX_DEPTH: usize = 64;
/// Most queued entries one call submits in [`Submit::Groups`]. Fewer calls than fio's one entry a
/// call cost less CPU per I/O; with 4, `bench/qd_sweep.sh` put 4k random I/O at QD 24–48 at
/// 1.11–1.23× fio's IOPS and 0.47–0.57× its CPU per I/O on one day, and at 0.97–1.05× and
/// 0.58–0.66× on a day when fio ran faster there. To compare with 1, build with 1 and run
/// `DEPTHS="24 32 48" WORKLOADS="randread:4k randwrite:4k" sudo bench/qd_sweep.sh 5 1` with
/// `OURS_BIN=` set to each build.
pub(super) const GROUP_ENTRIES: usize = 4;
/// `IORING_ENTER_GETEVENTS`.
const ENTER_GETEVENTS: u32 = 1;

/// Sets up a ring with `entries` submission entries and the flags fio 3.33 sets: single issuer
/// and deferred task running (kernel 6.1+: completions are run when the thread asks for them, no
/// interrupts) and cooperative task running (5.19+), dropping what an older kernel rejects.
pub(crate) fn setup(entries: u32) -> io::Result<IoUring> {
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

pub(super) fn setup_error(source: io::Error) -> ProbeError {
    ProbeError::EngineSetup {
        engine: EngineKind::IoUring,
        source,
    }
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

/// Whether the timeout request that bounds waits is in the ring, and when it expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TickState {
    Idle,
    Armed { until: Instant },
}

/// Whether the kernel holds a slot's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlotState {
    /// Free since the kernel completed its last I/O (or since the set-up), as far as the engine
    /// can tell: when it reaped the completion, less the run delay it had accumulated meanwhile
    /// (`late`, its own lateness rather than the device's).
    Free { since: Instant, late: Duration },
    /// An I/O using the buffer is in the kernel (or queued for it).
    InKernel,
}

/// One queue slot: a buffer and the I/O that uses it.
pub(super) struct Slot {
    buf: AlignedBuf,
    state: SlotState,
    /// Where the I/O starts.
    pub(super) offset: u64,
    /// Bytes already transferred (a short transfer's remainder is resubmitted).
    pub(super) done: u32,
    /// When it was submitted, and what its latency counts from.
    pub(super) issue: Issue,
    /// Since when the device has held this I/O back: its due time when it was held back, else its
    /// submission.
    pub(super) held_from: Instant,
    /// While the slot's write is followed by its sync (`IORING_OP_FSYNC`): when the sync was
    /// submitted.
    pub(super) sync_since: Option<Instant>,
}

impl Slot {
    /// Whether the kernel holds its buffer.
    pub(super) fn state(&self) -> SlotState {
        self.state
    }

    /// Whether the device held this slot at `at`: its last I/O was held since `at` or earlier (it
    /// was submitted by then, or was itself held back since then) and had not completed by then.
    /// A slot the engine filled only after `at` (catching up) was free at `at`.
    pub(super) fn held_at(&self, at: Instant) -> bool {
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
pub(super) struct RingIo {
    ring: ManuallyDrop<IoUring>,
    slots: ManuallyDrop<Vec<Slot>>,
    /// Slots in [`SlotState::InKernel`].
    in_kernel: usize,
    file: FileRef,
    buffers: BufferMode,
    pub(super) block_size: u32,
    pub(super) write: bool,
    /// Profiles that sync: the call that follows every Nth write.
    pub(super) sync: Option<SyncCall>,
    /// Kept open for as long as the ring may use it (also after the run, while it reaps).
    _fd: Arc<OwnedFd>,
    /// The timeout request's time span. The kernel reads it when the request is submitted; it is
    /// rewritten only after that request has completed.
    tick: Box<types::Timespec>,
    tick_state: TickState,
    /// Whether waits poll for their completion before they sleep.
    poll: CompletionPoll,
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
        // A registered file is referenced by the ring's file table, which closing the ring frees
        // only in the kernel's deferred ring teardown (a workqueue, after close returns): an
        // O_EXCL open of a block device would stay claimed until then, and the next profile's
        // open would find it busy. Unregistered here, the reference goes before this returns.
        if matches!(self.file, FileRef::Registered)
            && let Err(err) = self.ring.submitter().unregister_files()
        {
            tracing::debug!(%err, "io_uring: cannot unregister the probed file");
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
    /// The queue slots.
    pub(super) fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// Slot `index`; its buffer and state stay this module's.
    pub(super) fn slot_mut(&mut self, index: usize) -> &mut Slot {
        &mut self.slots[index]
    }

    /// Slots whose buffer the kernel holds.
    pub(super) fn in_kernel(&self) -> usize {
        self.in_kernel
    }

    /// Room in the completion queue.
    pub(super) fn completion_capacity(&mut self) -> usize {
        self.ring.completion().capacity()
    }

    /// Fresh data for the next write from free slot `index` (a slot the kernel holds is left
    /// alone).
    pub(super) fn stamp(&mut self, index: usize, rng: &mut SmallRng) {
        let slot = &mut self.slots[index];
        if slot.state != SlotState::InKernel {
            stamp(slot.buf.as_mut_slice(), rng);
        }
    }

    /// Creates the ring, maps one buffer per slot ([`AlignedBuf::many`]) and registers the buffers
    /// and the file.
    pub(super) fn set_up(job: &Job, rng: &mut SmallRng) -> Result<RingIo, ProbeError> {
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
        let bufs = AlignedBuf::many(depth, job.block_size as usize, job.mem_align, rng)?;
        let mut slots = Vec::with_capacity(depth);
        for buf in bufs {
            slots.push(Slot {
                buf,
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
        let file = match ring.submitter().register_files(&[job.fd.as_raw_fd()]) {
            Ok(()) => FileRef::Registered,
            Err(_) => FileRef::Fd(job.fd.as_raw_fd()),
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
            _fd: Arc::clone(&job.fd),
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
            poll: CompletionPoll::new(job.rate_interval.is_some()),
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
    pub(super) fn start_sync(&mut self, index: usize, since: Instant) -> io::Result<()> {
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
    pub(super) fn start(
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
    pub(super) fn resubmit(&mut self, index: usize) -> io::Result<()> {
        let entry = self.entry(index);
        self.push(&entry)
    }

    /// Marks slot `index` free as of `now`, its completion reaped `late` after it arrived; false
    /// when it was not in the kernel.
    pub(super) fn release(&mut self, index: usize, now: Instant, late: Duration) -> bool {
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
    pub(super) fn cancel_all(&mut self) -> io::Result<()> {
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

    /// Keeps one timeout request in the ring, firing `period` after `now`: it ends a wait that
    /// has no timeout of its own, and a wait whose timeout ends no earlier ([`RingIo::wait`]).
    pub(super) fn keep_tick_armed(&mut self, now: Instant, period: Duration) {
        if matches!(self.tick_state, TickState::Armed { .. }) {
            return;
        }
        let period = period.max(Duration::from_micros(1));
        *self.tick = types::Timespec::from(period);
        let entry = opcode::Timeout::new(&*self.tick)
            .build()
            .user_data(TICK_TAG);
        match self.push(&entry) {
            Ok(()) => {
                self.tick_state = TickState::Armed {
                    until: now + period,
                }
            }
            // This turn waits with a timeout argument instead.
            Err(err) => tracing::debug!("io_uring: cannot arm the timeout request: {err}"),
        }
    }

    /// Submits what is queued and waits for a completion (any that are ready are reaped with it),
    /// or until `timeout`; returns when the wait returned (the time of the completions it
    /// brings, taken before anything else is done with them) and its result. Without a timeout,
    /// or with one that the armed tick ends no later, the tick ends the wait; without a tick,
    /// the wait ends after `timeout` or [`CANCEL_POLL`]. Waiting for one completion, not a
    /// batch, lets each be stamped as soon as the kernel hands it over; a wait polls for it
    /// first while completions come quickly ([`CompletionPoll`]).
    pub(super) fn wait(&mut self, timeout: Option<Duration>) -> (Instant, io::Result<()>) {
        let in_flight = self.in_kernel;
        let began = Instant::now();
        let result = self.wait_from(began, timeout);
        let now = Instant::now();
        let waited = now.saturating_duration_since(began);
        self.ring.completion().sync();
        let ready = self.ring.completion().len();
        if ready > 0 || waited > POLL_LIMIT {
            self.poll.note(waited);
        }
        self.poll.note_completions(in_flight, ready, now);
        (now, result)
    }

    fn wait_from(&mut self, began: Instant, timeout: Option<Duration>) -> io::Result<()> {
        let timeout = timeout.or((self.tick_state == TickState::Idle).then_some(CANCEL_POLL));
        // A sleep that the tick ends in time needs no timer of its own: a rate-capped run arms
        // the tick for its next due I/O once, and its waits before then (for the completion,
        // then for the due time) sleep on that one timer, as fio's rate loop arms one (its
        // sleep) per I/O. A timeout of each wait's own would arm and cancel a timer per wait.
        let sleep_timeout = timeout.filter(|&t| match self.tick_state {
            TickState::Armed { until } => until > began + t,
            TickState::Idle => true,
        });
        // Up to GROUP_MAX_DEPTH I/Os in flight, submit apart from the wait (in one call up to
        // SPLIT_MAX_DEPTH, which is also where a rate cap keeps a deep queue; in groups of
        // GROUP_ENTRIES above) and wait only if nothing is ready then, as fio does.
        if let Some(submit) = Submit::before_waiting(self.in_kernel)
            && self.submit_first(submit)?
        {
            return Ok(());
        }
        if let Some(budget) = self.poll.budget(self.in_kernel, timeout)
            && self.poll_until(began + budget)?
        {
            return Ok(());
        }
        match sleep_timeout {
            Some(t) => {
                let left = t.saturating_sub(began.elapsed());
                if left.is_zero() {
                    return Ok(());
                }
                let ts = types::Timespec::from(left.max(Duration::from_micros(1)));
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)?;
            }
            None => {
                self.ring.submit_and_wait(1)?;
            }
        }
        Ok(())
    }

    /// Submits what is queued and asks the kernel for completions (`GETEVENTS`, no minimum)
    /// until one is ready or `until`; returns whether one is.
    fn poll_until(&mut self, until: Instant) -> io::Result<bool> {
        loop {
            let queued = self.ring.submission().len();
            if self.enter_for_events(queued)? {
                return Ok(true);
            }
            if Instant::now() >= until {
                return Ok(false);
            }
        }
    }

    /// Submits what is queued before waiting, in one call or in groups of [`GROUP_ENTRIES`], as
    /// fio's `commit` does (`GETEVENTS` also runs completions that are already due). Returns
    /// whether completions are ready to be reaped.
    fn submit_first(&mut self, submit: Submit) -> io::Result<bool> {
        let mut queued = self.ring.submission().len();
        if queued == 0 {
            self.ring.completion().sync();
            return Ok(!self.ring.completion().is_empty());
        }
        if submit == Submit::Groups {
            while queued > GROUP_ENTRIES {
                self.enter_for_events(GROUP_ENTRIES)?;
                let left = self.ring.submission().len();
                if left >= queued {
                    // The kernel took none (it should fail instead): the rest go in one call.
                    break;
                }
                queued = left;
            }
        }
        self.enter_for_events(queued)
    }

    /// One `io_uring_enter` that submits the first `count` queued entries and runs the
    /// completions that are due (`GETEVENTS`, no minimum, so it never sleeps); returns whether
    /// completions are ready.
    fn enter_for_events(&mut self, count: usize) -> io::Result<bool> {
        // SAFETY: the queued entries refer to memory that outlives the I/O (see `push`); no
        // argument is passed.
        unsafe {
            self.ring.submitter().enter::<libc::sigset_t>(
                count as u32,
                0,
                ENTER_GETEVENTS,
                None,
            )?;
        }
        self.ring.completion().sync();
        Ok(!self.ring.completion().is_empty())
    }

    /// Moves every completion in the ring to `out`; a completed tick is noted.
    pub(super) fn take_completions(&mut self, out: &mut Vec<(u64, i32)>) {
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

/// How a wait submits what is queued before it waits (when not with the wait's own call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Submit {
    /// All queued entries in one call ([`SPLIT_MAX_DEPTH`] I/Os in flight at most).
    Alone,
    /// At most [`GROUP_ENTRIES`] queued entries a call ([`GROUP_MAX_DEPTH`] I/Os in flight at
    /// most).
    Groups,
}

impl Submit {
    /// How a wait with `in_flight` I/Os in flight (queued ones included) submits; `None`: in the
    /// call that waits.
    pub(super) fn before_waiting(in_flight: usize) -> Option<Submit> {
        match in_flight {
            0..=SPLIT_MAX_DEPTH => Some(Submit::Alone),
            n if n <= GROUP_MAX_DEPTH => Some(Submit::Groups),
            _ => None,
        }
    }
}

/// Whether an error from `io_uring_enter` only ended a wait (timeout, signal, a full completion
/// queue, no memory for now) rather than failing.
pub(super) fn wait_ended(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)
    )
}

/// Where a run is.
/// The ring and buffers of a run that returned while the kernel still held some of its I/O.
pub(super) struct Leftovers {
    io: RingIo,
    stuck: Arc<StuckIos>,
    progress: Arc<RunProgress>,
}

impl Leftovers {
    /// What a run leaves behind: its ring and buffers, the slots the kernel still holds, and the
    /// run's progress counts, which go on as the kernel completes them.
    pub(super) fn new(io: RingIo, stuck: Arc<StuckIos>, progress: Arc<RunProgress>) -> Self {
        Leftovers {
            io,
            stuck,
            progress,
        }
    }

    /// Waits for every I/O the kernel still holds, then frees the ring and the buffers (the
    /// ring is closed before the last slot is reported clear, so that no new run on the device
    /// starts beside it). A ring that fails to wait is leaked with its buffers.
    pub(super) fn reap_until_clear(mut self) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submits_apart_from_the_wait_up_to_its_depths() {
        assert_eq!(Submit::before_waiting(0), Some(Submit::Alone));
        assert_eq!(Submit::before_waiting(SPLIT_MAX_DEPTH), Some(Submit::Alone));
        assert_eq!(
            Submit::before_waiting(SPLIT_MAX_DEPTH + 1),
            Some(Submit::Groups)
        );
        assert_eq!(
            Submit::before_waiting(GROUP_MAX_DEPTH),
            Some(Submit::Groups)
        );
        assert_eq!(Submit::before_waiting(GROUP_MAX_DEPTH + 1), None);
    }
}
