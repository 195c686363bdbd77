//! The psync engine: `iodepth` threads, each doing one `pread`/`pwrite` at a time, so the device
//! sees a true queue depth of `iodepth`. Used when io_uring cannot be set up, or on request.
//!
//! Latency is the time around the system call (from the intended issue time for rate-capped
//! profiles). A thread stuck in a system call on a hung device cannot be interrupted: after the
//! hard timeout the run returns `timed_out` and leaves such threads to finish on their own (each
//! owns its buffer and its duplicate of the file descriptor, so nothing is freed under them).

use crate::probe::ProbeError;
use crate::probe::engine::{AlignedBuf, CANCEL_POLL, EngineKind, Job, Offsets, stamp};
use crate::probe::measurement::{Measurement, new_latency_histogram};
use hdrhistogram::Histogram;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::fs::File;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// How long to wait for worker threads after a timeout or cancellation before giving up on them.
const GRACE: Duration = Duration::from_secs(2);

struct Shared {
    issued: AtomicU64,
    stop: AtomicBool,
    /// The run's start, set once every thread has set up its buffer: the clock (elapsed time, the
    /// runtime and a rate cap's schedule) starts after the set-up, as the io_uring engine's does.
    start: Mutex<Option<Instant>>,
    started: Condvar,
}

struct WorkerOut {
    ios: u64,
    bytes: u64,
    errors: u64,
    first_error: Option<String>,
    hist: Histogram<u64>,
    last_completion: Option<Instant>,
    yielded: bool,
}

/// Runs the job on `iodepth` pread/pwrite threads.
pub(crate) fn run(job: &Job, cancel: &Arc<AtomicBool>) -> Result<Measurement, ProbeError> {
    // SAFETY: job.fd belongs to the OpenTarget the caller borrows for the whole run; it is only
    // borrowed here to duplicate it.
    let borrowed = unsafe { BorrowedFd::borrow_raw(job.fd) };
    let shared = Arc::new(Shared {
        issued: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        start: Mutex::new(None),
        started: Condvar::new(),
    });
    let (tx, rx) = mpsc::channel::<Result<WorkerOut, String>>();
    // Each thread drops its sender once its set-up is done (or has failed).
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let mut spawned = 0u32;
    for i in 0..job.iodepth {
        let started = borrowed.try_clone_to_owned().and_then(|fd| {
            let file = File::from(fd);
            let job = job.clone();
            let worker_shared = Arc::clone(&shared);
            let tx = tx.clone();
            let ready = ready_tx.clone();
            thread::Builder::new()
                .name(format!("diskprobe-psync-{i}"))
                .spawn(move || {
                    let out = worker(&job, &file, &worker_shared, ready);
                    let _ = tx.send(out);
                })
        });
        match started {
            Ok(_) => spawned += 1,
            Err(source) if spawned == 0 => {
                return Err(ProbeError::EngineSetup {
                    engine: EngineKind::Psync,
                    source,
                });
            }
            Err(source) => {
                // The threads already running carry on: a shallower queue, said in the log.
                tracing::warn!(err = %source, threads = spawned, "cannot start all psync threads; running with fewer");
                break;
            }
        }
    }
    drop(tx);
    drop(ready_tx);
    // Every thread has set up (or given up) once all senders are gone. Set-up is not expected to
    // take long, but cancellation and the hard timeout are watched meanwhile all the same.
    let (mut timed_out, mut cancelled) = (false, false);
    let mut stopped_at: Option<Instant> = None;
    let set_up_from = Instant::now();
    loop {
        match ready_rx.recv_timeout(CANCEL_POLL) {
            Ok(()) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                cancelled = cancel.load(Ordering::Relaxed);
                timed_out = !cancelled && set_up_from.elapsed() >= job.timeout;
                if cancelled || timed_out {
                    // The threads do no I/O once they get past their set-up.
                    shared.stop.store(true, Ordering::Relaxed);
                    stopped_at = Some(Instant::now());
                    break;
                }
            }
        }
    }
    let start = Instant::now();
    *shared.start.lock().unwrap_or_else(|e| e.into_inner()) = Some(start);
    shared.started.notify_all();

    let deadline = start + job.timeout;
    let mut hist = new_latency_histogram();
    let (mut ios, mut bytes, mut errors) = (0u64, 0u64, 0u64);
    let mut first_error: Option<String> = None;
    let mut last: Option<Instant> = None;
    let mut received = 0u32;
    let mut yielded = false;
    while received < spawned {
        match rx.recv_timeout(CANCEL_POLL) {
            Ok(Ok(out)) => {
                received += 1;
                yielded |= out.yielded;
                ios += out.ios;
                bytes += out.bytes;
                errors += out.errors;
                if first_error.is_none() {
                    first_error = out.first_error;
                }
                let _ = hist.add(&out.hist);
                last = match (last, out.last_completion) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
            }
            Ok(Err(err)) => {
                received += 1;
                errors += 1;
                first_error.get_or_insert(err);
                shared.stop.store(true, Ordering::Relaxed);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = Instant::now();
                if stopped_at.is_none() {
                    if cancel.load(Ordering::Relaxed) {
                        cancelled = true;
                    } else if now >= deadline {
                        timed_out = true;
                    }
                    if cancelled || timed_out {
                        shared.stop.store(true, Ordering::Relaxed);
                        stopped_at = Some(now);
                    }
                }
                if stopped_at.is_some_and(|t| now >= t + GRACE) {
                    let stuck = spawned - received;
                    tracing::warn!(
                        stuck,
                        "psync threads still in a system call after the timeout; leaving them behind"
                    );
                    first_error.get_or_insert(format!(
                        "{stuck} I/O threads still blocked in the kernel after the timeout"
                    ));
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if !timed_out && !cancelled && Instant::now() > deadline {
        timed_out = true;
    }
    let end = last.unwrap_or_else(Instant::now);
    Ok(Measurement {
        engine: EngineKind::Psync,
        ios,
        bytes,
        elapsed: end.saturating_duration_since(start),
        errors,
        first_error,
        timed_out,
        cancelled,
        yielded,
        latency_ns: hist,
    })
}

fn worker(
    job: &Job,
    file: &File,
    shared: &Shared,
    ready: mpsc::Sender<()>,
) -> Result<WorkerOut, String> {
    let mut rng = SmallRng::from_os_rng();
    let mut buf = AlignedBuf::new(job.block_size as usize, job.mem_align, &mut rng)
        .map_err(|e| e.to_string())?;
    drop(ready);
    let start = {
        let guard = shared.start.lock().unwrap_or_else(|e| e.into_inner());
        let guard = shared
            .started
            .wait_while(guard, |start| start.is_none())
            .unwrap_or_else(|e| e.into_inner());
        guard.unwrap_or_else(Instant::now)
    };
    let mut offsets = Offsets::new(job.random, job.region_offset, job.blocks, job.block_size);
    let stop_at = job.runtime.map(|r| start + r);
    let mut out = WorkerOut {
        ios: 0,
        bytes: 0,
        errors: 0,
        first_error: None,
        hist: new_latency_histogram(),
        last_completion: None,
        yielded: false,
    };
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        if job.yield_now.load(Ordering::Relaxed) {
            out.yielded = true;
            break;
        }
        let k = shared.issued.fetch_add(1, Ordering::Relaxed);
        if job.number_ios.is_some_and(|n| k >= n) {
            break;
        }
        let intended = match job.rate_interval {
            Some(iv) => {
                let at = start + Duration::from_nanos((iv.as_nanos() as u64).saturating_mul(k));
                if !sleep_until(at, stop_at, shared, &job.yield_now) {
                    out.yielded = job.yield_now.load(Ordering::Relaxed);
                    break;
                }
                Some(at)
            }
            None => None,
        };
        let now = Instant::now();
        if stop_at.is_some_and(|s| now >= s) {
            break;
        }
        let offset = if job.random {
            offsets.next_offset()
        } else {
            offsets.sequential(k)
        };
        if job.write {
            stamp(buf.as_mut_slice(), offsets.rng());
        }
        let issued = intended.unwrap_or_else(Instant::now);
        job.progress.submitted.fetch_add(1, Ordering::Relaxed);
        let res = transfer(file, buf.as_mut_slice(), offset, job.write);
        let done = Instant::now();
        job.progress.completed.fetch_add(1, Ordering::Relaxed);
        match res {
            Ok(()) => {
                out.ios += 1;
                out.bytes += job.block_size;
                out.hist
                    .saturating_record(done.saturating_duration_since(issued).as_nanos() as u64);
                out.last_completion = Some(done);
            }
            Err(err) => {
                out.errors += 1;
                out.first_error.get_or_insert_with(|| {
                    format!(
                        "{} at offset {offset}: {err}",
                        if job.write { "pwrite" } else { "pread" }
                    )
                });
                out.last_completion = Some(done);
                // Like fio without continue_on_error: the first error ends the run.
                shared.stop.store(true, Ordering::Relaxed);
                break;
            }
        }
    }
    Ok(out)
}

/// Sleeps until `at`; false when the run stops, yields (or its runtime ends) first.
fn sleep_until(
    at: Instant,
    stop_at: Option<Instant>,
    shared: &Shared,
    yield_now: &AtomicBool,
) -> bool {
    loop {
        if shared.stop.load(Ordering::Relaxed) || yield_now.load(Ordering::Relaxed) {
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

/// One full transfer: retries EINTR/EAGAIN and continues short transfers.
fn transfer(file: &File, buf: &mut [u8], offset: u64, write: bool) -> io::Result<()> {
    let mut done = 0usize;
    while done < buf.len() {
        let res = if write {
            file.write_at(&buf[done..], offset + done as u64)
        } else {
            file.read_at(&mut buf[done..], offset + done as u64)
        };
        match res {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "end of target reached",
                ));
            }
            Ok(n) => done += n,
            Err(err)
                if err.kind() == io::ErrorKind::Interrupted
                    || err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}
