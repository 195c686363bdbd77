//! The psync engine: `iodepth` threads, each doing one `pread`/`pwrite` at a time, so the device
//! sees a true queue depth of `iodepth`. Used when io_uring cannot be set up, or on request.
//!
//! The calling thread drives a [`PsyncRun`]: set-up (start one [`Worker`] per queue slot; each
//! maps its buffer), then the run's clock starts once every worker is ready. Its [`Control`]
//! (the controller both engines share) says when the run stops issuing and when it aborts; the
//! workers then stop at their next I/O. A thread stuck in a system call on a hung device cannot
//! be interrupted; after [`DRAIN_GRACE`](super::options::DRAIN_GRACE) the run returns and leaves
//! it behind (each worker owns its buffer and its duplicate of the file descriptor, so nothing
//! is freed under it), reported in [`StuckIos`].
//!
//! Latency is the time around the system call; with a rate cap, an I/O the device held back counts
//! from its due time (see [`Clocks`]). A profile with `fsync`/`fdatasync` runs at QD1 (one
//! worker), which follows every Nth `pwrite` with the call, timed apart
//! ([`Worker::sync_if_due`]).

use super::control::{Control, Order, limit_at};
use super::job::Job;
use super::options::{CANCEL_POLL, RunOptions};
use super::schedule::{Issue, Schedule, tighten_timer_slack};
use super::tally::Tally;
use crate::probe::buffer::{AlignedBuf, stamp};
use crate::probe::engine::lateness::{Laps, RunWait};
use crate::probe::error::ProbeError;
use crate::probe::measurement::{EngineKind, IoCause, Measurement, RunError, StuckIos};
use crate::probe::profile::SyncCall;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// Runs the job on `iodepth` pread/pwrite threads.
pub(crate) fn run(job: &Job, opts: &RunOptions) -> Result<Measurement, ProbeError> {
    let mut run = PsyncRun::start(job, opts)?;
    run.wait_until_ready();
    let start = run.go();
    let tally = run.collect();
    Ok(run.finish(tally, start))
}

/// What the workers of a run share.
struct WorkerShared {
    /// I/Os taken so far (the number of the next one).
    issued: AtomicU64,
    /// Set when the run stops issuing.
    stop: AtomicBool,
    /// The run's start, set once every thread has set up its buffer: the clock (elapsed time, the
    /// runtime and a rate cap's schedule) starts after the set-up, as the io_uring engine's does.
    start: Mutex<Option<Instant>>,
    started: Condvar,
    /// Per worker, the I/O it has in the kernel.
    in_kernel: Arc<StuckIos>,
    /// Per worker, its last I/O's clock: whether the device held every worker when an I/O fell
    /// due.
    clocks: Clocks,
    /// The run's options: its progress counts, and the flags its limits read.
    opts: RunOptions,
}

/// A run, driven from the calling thread: its workers submit and reap (one system call at a
/// time each), the [`Control`] says when they stop.
struct PsyncRun<'a> {
    job: &'a Job,
    shared: Arc<WorkerShared>,
    results: mpsc::Receiver<Tally>,
    /// Dropped by every worker once its set-up is done (or has failed).
    ready: mpsc::Receiver<()>,
    workers: u32,
    control: Control,
}

impl<'a> PsyncRun<'a> {
    /// Starts one worker per queue slot.
    fn start(job: &'a Job, opts: &'a RunOptions) -> Result<PsyncRun<'a>, ProbeError> {
        let shared = Arc::new(WorkerShared {
            issued: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            start: Mutex::new(None),
            started: Condvar::new(),
            in_kernel: Arc::new(StuckIos::new(Instant::now(), job.iodepth as usize)),
            clocks: Clocks::new(Instant::now(), job.iodepth as usize),
            opts: opts.clone(),
        });
        let (results_tx, results) = mpsc::channel();
        let (ready_tx, ready) = mpsc::channel();
        let mut workers = 0u32;
        for slot in 0..job.iodepth {
            let worker = Worker {
                job: job.clone(),
                file: None,
                shared: Arc::clone(&shared),
                slot: slot as usize,
            };
            match worker.spawn(results_tx.clone(), ready_tx.clone()) {
                Ok(()) => workers += 1,
                Err(source) if workers == 0 => {
                    return Err(ProbeError::EngineSetup {
                        engine: EngineKind::Psync,
                        source,
                    });
                }
                Err(source) => {
                    // A shallower queue would measure another profile: stop the threads that
                    // started (they do no I/O before the start) and refuse the run.
                    shared.stop.store(true, Ordering::Relaxed);
                    *shared.start.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                    shared.started.notify_all();
                    return Err(ProbeError::PsyncShortOfDepth {
                        wanted: job.iodepth,
                        started: workers,
                        source,
                    });
                }
            }
        }
        // Until the clock starts, the hard timeout counts from the set-up's start.
        let control = Control::new(opts.clone(), Schedule::new(job, Instant::now()));
        Ok(PsyncRun {
            job,
            shared,
            results,
            ready,
            workers,
            control,
        })
    }

    /// Waits until every worker has set up (or given up). Set-up is not expected to take long,
    /// but cancellation and the hard timeout are watched meanwhile all the same.
    fn wait_until_ready(&mut self) {
        loop {
            match self.ready.recv_timeout(CANCEL_POLL) {
                Ok(()) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let order = self.control.check_set_up(Instant::now());
                    self.obey(order);
                    if self.control.aborting() {
                        // The workers do no I/O once they get past their set-up.
                        return;
                    }
                }
            }
        }
    }

    /// Starts the run's clock and lets the workers go.
    fn go(&mut self) -> Instant {
        let start = Instant::now();
        self.control.start(Schedule::new(self.job, start));
        *self.shared.start.lock().unwrap_or_else(|e| e.into_inner()) = Some(start);
        self.shared.started.notify_all();
        start
    }

    /// Tells the workers what the controller decided: they stop at their next I/O once the run
    /// stops issuing; what is in a system call cannot be cancelled, and is waited for.
    fn obey(&self, _order: Order) {
        if !self.control.issuing() {
            self.shared.stop.store(true, Ordering::Relaxed);
        }
    }

    /// Collects every worker's tally, watching the limits; gives up on workers still in a system
    /// call [`DRAIN_GRACE`](super::options::DRAIN_GRACE) after an abort.
    fn collect(&mut self) -> Tally {
        let mut tally = Tally::of(self.job);
        let mut received = 0u32;
        while received < self.workers {
            let now = Instant::now();
            let wait = match (self.control.issuing(), self.control.schedule().stop_at) {
                (true, Some(stop_at)) if stop_at > now => (stop_at - now).min(CANCEL_POLL),
                _ => CANCEL_POLL,
            };
            match self.results.recv_timeout(wait) {
                Ok(out) => {
                    received += 1;
                    tally.merge(out);
                    if tally.has_errors() {
                        // Like fio without continue_on_error: the first error ends the run.
                        self.control.failed();
                    }
                    // A worker stops at the end of the run, or at a yield request: the run has
                    // stopped issuing then.
                    self.check_limits(Instant::now());
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let now = Instant::now();
                    self.check_limits(now);
                    if self.control.grace_over(now) {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        tally
    }

    /// Asks the controller about the limits at `now`, and has the workers obey.
    fn check_limits(&mut self, now: Instant) {
        let issued = self.shared.issued.load(Ordering::Relaxed);
        let order = self.control.check(now, issued);
        self.obey(order);
    }

    /// The measurement; workers still in a system call are reported as stuck.
    fn finish(self, tally: Tally, start: Instant) -> Measurement {
        let ending = self.control.ending(tally.has_errors(), Instant::now());
        let stuck = self.shared.in_kernel.count();
        let mut tally = tally;
        let in_kernel = (stuck > 0).then(|| {
            tracing::warn!(
                stuck,
                "psync threads still in a system call after the timeout; leaving them behind"
            );
            tally.note(|| RunError::ThreadsBlocked { threads: stuck });
            Arc::clone(&self.shared.in_kernel)
        });
        tally.into_measurement(EngineKind::Psync, start, ending, in_kernel)
    }
}

/// An I/O a worker has taken.
struct NextIo {
    /// Its number in the run.
    k: u64,
    /// When it is due under a rate cap.
    due: Option<Instant>,
}

/// Per worker, since when the device has held its last I/O back (its due time when it was held
/// back, else its submission) and when the kernel completed it (as far as the worker can tell),
/// so that a worker can tell whether the device held every worker when the I/O it takes fell due
/// (a backlog: then its latency counts from its due time, plus the worker's lateness in noticing
/// its last transfer done; otherwise from its submission, since the lateness of a wake-up or a
/// catch-up is the engine's, not the device's). Times are nanoseconds after `base`, plus one; 0
/// for none yet.
struct Clocks {
    base: Instant,
    held_from: Box<[AtomicU64]>,
    freed: Box<[AtomicU64]>,
}

/// `Clocks::freed` of an I/O still in the kernel.
const IN_FLIGHT: u64 = u64::MAX;

impl Clocks {
    fn new(base: Instant, workers: usize) -> Clocks {
        let zeros = || (0..workers).map(|_| AtomicU64::new(0)).collect();
        Clocks {
            base,
            held_from: zeros(),
            freed: zeros(),
        }
    }

    fn encode(&self, at: Instant) -> u64 {
        let ns = at.saturating_duration_since(self.base).as_nanos();
        u64::try_from(ns).unwrap_or(IN_FLIGHT - 1).saturating_add(1)
    }

    /// Worker `slot` issued an I/O held back since `held_from`.
    fn issued(&self, slot: usize, held_from: Instant) {
        self.held_from[slot].store(self.encode(held_from), Ordering::Relaxed);
        self.freed[slot].store(IN_FLIGHT, Ordering::Relaxed);
    }

    /// Worker `slot`'s I/O completed at `at`.
    fn completed(&self, slot: usize, at: Instant) {
        self.freed[slot].store(self.encode(at), Ordering::Relaxed);
    }

    /// Whether the device held every worker at `at`: each worker's last I/O was held since `at` or
    /// earlier (it was issued by then, or was itself held back since then) and had not
    /// completed by then. A worker that issued only after `at` (catching up) was free at `at`.
    fn all_held_at(&self, at: Instant) -> bool {
        let at = self.encode(at);
        self.held_from.iter().zip(self.freed.iter()).all(|(h, f)| {
            let held_from = h.load(Ordering::Relaxed);
            held_from != 0 && held_from <= at && f.load(Ordering::Relaxed) > at
        })
    }
}

/// One queue slot of a run: a thread doing one I/O at a time.
struct Worker {
    job: Job,
    /// The worker's own duplicate of the target's descriptor.
    file: Option<File>,
    shared: Arc<WorkerShared>,
    slot: usize,
}

impl Worker {
    /// Starts the worker's thread with its own duplicate of the job's descriptor.
    fn spawn(mut self, results: mpsc::Sender<Tally>, ready: mpsc::Sender<()>) -> io::Result<()> {
        self.file = Some(File::from(self.job.fd.try_clone()?));
        thread::Builder::new()
            .name(format!("diskprobe-psync-{}", self.slot))
            .spawn(move || {
                tighten_timer_slack();
                let tally = self.run(ready);
                let _ = results.send(tally);
            })?;
        Ok(())
    }

    /// Sets up the buffer, waits for the run's start and does I/O until the run stops.
    fn run(self, ready: mpsc::Sender<()>) -> Tally {
        let mut tally = Tally::of(&self.job);
        let mut rng = SmallRng::from_os_rng();
        let mut buf =
            match AlignedBuf::new(self.job.block_size as usize, self.job.mem_align, &mut rng) {
                Ok(buf) => buf,
                Err(err) => {
                    tally.error(|| RunError::Buffer(Box::new(err)));
                    return tally;
                }
            };
        drop(ready);
        let Some(start) = self.wait_for_start() else {
            return tally;
        };
        let wait = RunWait::of_this_thread();
        let schedule = Schedule::new(&self.job, start);
        let mut offsets = self.job.offsets();
        let write = self.job.rw.is_write();
        // Run delay this thread accumulated up to its last transfer's end: its own lateness in
        // noticing the transfer done, not the device's.
        let mut laps = Laps::of_this_thread(schedule.rate_capped());
        // Rate-capped runs: the run delay during the transfers (one read of schedstat more per
        // I/O, which their rate affords).
        let measure_in_flight = laps.measuring();
        let mut waited_in_flight = Duration::ZERO;
        let mut late = Duration::ZERO;
        while let Some(next) = self.next_io(&schedule) {
            let offset = if self.job.rw.is_random() {
                offsets.next_offset()
            } else {
                offsets.sequential(next.k)
            };
            if write {
                stamp(buf.as_mut_slice(), offsets.rng());
            }
            let now = Instant::now();
            let held = next.due.filter(|&at| self.shared.clocks.all_held_at(at));
            let issue = Issue {
                origin: held.map_or(now, |at| (at + late).min(now)),
                submitted: now,
            };
            let clocks = &self.shared.clocks;
            clocks.issued(self.slot, held.unwrap_or(now));
            let before = measure_in_flight.then(|| wait.so_far()).flatten();
            let res = self.transfer(buf.as_mut_slice(), offset, now);
            let done = Instant::now();
            if let (Some(before), Some(after)) =
                (before, measure_in_flight.then(|| wait.so_far()).flatten())
            {
                // What the thread waited for a CPU during the transfer is in its latency.
                waited_in_flight += after.saturating_sub(before);
            }
            late = laps.lap(done);
            clocks.completed(self.slot, done.checked_sub(late).unwrap_or(done));
            match res {
                Ok(()) => tally.completed(self.job.block_size, issue, done),
                Err(err) => {
                    let op = if write { "pwrite" } else { "pread" };
                    let cause = IoCause::from(&err);
                    tally.failed(|| RunError::Io { op, offset, cause }, done);
                    // Like fio without continue_on_error: the first error ends the run.
                    self.shared.stop.store(true, Ordering::Relaxed);
                    break;
                }
            }
            if !self.sync_if_due(next.k, &mut tally) {
                self.shared.stop.store(true, Ordering::Relaxed);
                break;
            }
        }
        tally.waited(wait.so_far(), measure_in_flight.then_some(waited_in_flight));
        tally
    }

    /// After write number `k` (from 0) has completed: the profile's `fdatasync`/`fsync` when
    /// this write is the Nth since the last one, timed and recorded in `tally`. Sync profiles
    /// run at QD1, so this worker's writes are all of the run's. False when the sync failed.
    fn sync_if_due(&self, k: u64, tally: &mut Tally) -> bool {
        let Some(sync) = self.job.sync else {
            return true;
        };
        if !(k + 1).is_multiple_of(u64::from(sync.every)) {
            return true;
        }
        let Some(file) = &self.file else {
            return false;
        };
        let progress = &self.shared.opts.progress;
        progress.submitted.fetch_add(1, Ordering::Relaxed);
        let since = Instant::now();
        self.shared.in_kernel.set(self.slot, Some(since));
        let result = match sync.call {
            SyncCall::Fsync => file.sync_all(),
            SyncCall::Fdatasync => file.sync_data(),
        };
        let done = Instant::now();
        self.shared.in_kernel.set(self.slot, None);
        progress.completed.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(()) => {
                tally.synced(since, done);
                true
            }
            Err(err) => {
                let error = RunError::SyncAfterWrite {
                    call: sync.call.as_str(),
                    write: k + 1,
                    cause: IoCause::from(&err),
                };
                tally.failed(|| error, done);
                false
            }
        }
    }

    /// The run's start, once every worker is ready; `None` when the run was stopped first.
    fn wait_for_start(&self) -> Option<Instant> {
        let guard = self.shared.start.lock().unwrap_or_else(|e| e.into_inner());
        let guard = self
            .shared
            .started
            .wait_while(guard, |start| start.is_none())
            .unwrap_or_else(|e| e.into_inner());
        let start = *guard;
        drop(guard);
        if self.shared.stop.load(Ordering::Relaxed) {
            return None;
        }
        start
    }

    /// The next I/O, once it is due under a rate cap; `None` when the run stops issuing: at the
    /// same limits the controller checks ([`limit_at`]), looked at before every I/O and again
    /// once a rate-capped one is due.
    fn next_io(&self, schedule: &Schedule) -> Option<NextIo> {
        if self.shared.stop.load(Ordering::Relaxed) {
            return None;
        }
        let k = self.shared.issued.fetch_add(1, Ordering::Relaxed);
        let limited = || limit_at(&self.shared.opts, schedule, Instant::now(), k).is_some();
        if limited() {
            return None;
        }
        let due = schedule.due(k);
        if let Some(at) = due
            && !self.sleep_until(at, schedule.stop_at)
        {
            return None;
        }
        if limited() {
            return None;
        }
        Some(NextIo { k, due })
    }

    /// Sleeps until `at`; false when the run stops (or its runtime ends) first.
    fn sleep_until(&self, at: Instant, stop_at: Option<Instant>) -> bool {
        loop {
            if self.shared.stop.load(Ordering::Relaxed) {
                return false;
            }
            let now = Instant::now();
            if stop_at.is_some_and(|s| s <= at && now >= s) {
                return false;
            }
            if now >= at {
                return true;
            }
            thread::sleep((at - now).min(CANCEL_POLL));
        }
    }

    /// One full transfer: retries EINTR/EAGAIN and continues short transfers. While it is in the
    /// kernel, the worker's slot shows it (issued at `issued`) to the run's stuck-I/O report.
    fn transfer(&self, buf: &mut [u8], offset: u64, issued: Instant) -> io::Result<()> {
        let Some(file) = &self.file else {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        };
        let progress = &self.shared.opts.progress;
        progress.submitted.fetch_add(1, Ordering::Relaxed);
        self.shared.in_kernel.set(self.slot, Some(issued));
        let result = transfer_all(file, buf, offset, self.job.rw.is_write());
        self.shared.in_kernel.set(self.slot, None);
        progress.completed.fetch_add(1, Ordering::Relaxed);
        result
    }
}

/// Transfers all of `buf` at `offset`: retries EINTR/EAGAIN and continues short transfers.
fn transfer_all(file: &File, buf: &mut [u8], offset: u64, write: bool) -> io::Result<()> {
    let mut done = 0usize;
    while done < buf.len() {
        let res = if write {
            file.write_at(&buf[done..], offset + done as u64)
        } else {
            file.read_at(&mut buf[done..], offset + done as u64)
        };
        match res {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Ok(n) => done += n,
            Err(err)
                if err.kind() == io::ErrorKind::Interrupted
                    || err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}
