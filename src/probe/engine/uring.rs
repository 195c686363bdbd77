//! The io_uring engine: one dedicated thread owns the ring, page-aligned buffers registered with
//! the ring (`READ_FIXED`/`WRITE_FIXED`) and the registered file, and keeps `iodepth` I/Os in
//! flight.
//!
//! Per I/O it does no allocation. Shallow queues (depth ≤ 4) use the system calls fio's io_uring
//! engine uses: one `io_uring_enter` submits, and only if no completion is ready a second one
//! waits for one completion, so that at QD1 the kernel sees the same calls from us as from fio.
//! Deep queues submit and wait for an eighth of the depth in one call, so that reaping and refills
//! are batched.
//! Waits carry no timeout argument: a timeout request in the ring (re-armed every [`CANCEL_POLL`],
//! every [`TICK`] at shallow depth, or sooner for the hard timeout) ends any wait, so the runtime,
//! the hard timeout and the cancellation flag are still watched; at shallow depth its short period
//! also spares the probing CPU a timer reprogram each time it idles between I/Os (see [`TICK`]).
//! Only rate-capped runs with I/O in flight wait with a timeout, to issue the next I/O on time
//! (and so does any turn in which the timeout request could not be queued).
//! The first I/O is issued [`SETTLE`] after the set-up (thread, ring, buffers), so that a run
//! starts from a settled machine (see there why that matters at QD1).
//! Latency is the time from submission (or, with a rate cap, from the intended issue time) to the
//! reaping of the completion, as fio's `lat`.
//! Short transfers are resubmitted for the remainder, EAGAIN/EINTR completions are retried, and
//! the first other error ends the run (like fio without `continue_on_error`).
//!
//! On the hard timeout or cancellation every in-flight I/O gets an `IORING_OP_ASYNC_CANCEL` and the
//! engine reaps every completion before the buffers are freed. If the kernel does not complete
//! them within a grace period (a hung device), the ring and the buffers are leaked rather than freed
//! under the kernel's feet.

use crate::probe::ProbeError;
use crate::probe::engine::{
    AlignedBuf, CANCEL_POLL, DRAIN_GRACE, EngineKind, Job, Offsets, SETTLE, stamp,
};
use crate::probe::measurement::{Measurement, new_latency_histogram};
use io_uring::{IoUring, opcode, squeue, types};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

struct Slot {
    buf: AlignedBuf,
    offset: u64,
    done: u32,
    issued: Instant,
}

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

/// Deepest queue that submits and waits in separate system calls, as fio does.
const SPLIT_MAX_DEPTH: usize = 4;
/// `IORING_ENTER_GETEVENTS`.
const ENTER_GETEVENTS: u32 = 1;

/// Submits what is queued in a call of its own, as fio's `commit` does (`GETEVENTS` also runs
/// completions that are already due). Returns whether completions are ready to be reaped.
fn submit_alone(ring: &mut IoUring) -> io::Result<bool> {
    let queued = ring.submission().len();
    if queued > 0 {
        // SAFETY: the queued entries refer to buffers in `slots` (or to `tick`), which outlive
        // the I/O (see `push`); no argument is passed.
        unsafe {
            ring.submitter()
                .enter::<libc::sigset_t>(queued as u32, 0, ENTER_GETEVENTS, None)?;
        }
    }
    ring.completion().sync();
    Ok(!ring.completion().is_empty())
}

/// Runs the job on a dedicated thread that owns the ring and the buffers.
pub(crate) fn run(job: &Job, cancel: &Arc<AtomicBool>) -> Result<Measurement, ProbeError> {
    thread::scope(|scope| {
        let handle = thread::Builder::new()
            .name("diskprobe-uring".to_owned())
            .spawn_scoped(scope, || run_here(job, cancel))
            .map_err(|source| ProbeError::EngineSetup {
                engine: EngineKind::IoUring,
                source,
            })?;
        handle.join().unwrap_or_else(|_| {
            Err(ProbeError::Engine(
                "the io_uring thread panicked".to_owned(),
            ))
        })
    })
}

/// Pushes an entry, submitting first when the submission queue is full.
fn push(ring: &mut IoUring, entry: &squeue::Entry) -> io::Result<()> {
    loop {
        // SAFETY: every entry refers to a buffer in `slots` (or to nothing, for cancels); the
        // buffers outlive the I/O because run_here only returns after reaping every completion,
        // or leaks the buffers.
        if unsafe { ring.submission().push(entry) }.is_ok() {
            return Ok(());
        }
        match ring.submit() {
            Ok(_) => {}
            Err(err) if err.raw_os_error() == Some(libc::EBUSY) => {
                // Completion queue overflow: reap before submitting more.
                return Err(err);
            }
            Err(err) if err.raw_os_error() == Some(libc::EINTR) => {}
            Err(err) => return Err(err),
        }
    }
}

struct IoParams {
    fd: i32,
    fixed_file: bool,
    fixed_bufs: bool,
    write: bool,
}

fn entry(p: &IoParams, slot: &mut Slot, index: usize, len: u32) -> squeue::Entry {
    let done = slot.done as usize;
    // SAFETY: done < buffer length, so the pointer stays inside the slot's allocation.
    let ptr = unsafe { slot.buf.as_mut_ptr().add(done) };
    let offset = slot.offset + u64::from(slot.done);
    let len = len - slot.done;
    let e = match (p.write, p.fixed_bufs, p.fixed_file) {
        (false, true, true) => opcode::ReadFixed::new(types::Fixed(0), ptr, len, index as u16)
            .offset(offset)
            .build(),
        (false, true, false) => opcode::ReadFixed::new(types::Fd(p.fd), ptr, len, index as u16)
            .offset(offset)
            .build(),
        (false, false, true) => opcode::Read::new(types::Fixed(0), ptr, len)
            .offset(offset)
            .build(),
        (false, false, false) => opcode::Read::new(types::Fd(p.fd), ptr, len)
            .offset(offset)
            .build(),
        (true, true, true) => opcode::WriteFixed::new(types::Fixed(0), ptr, len, index as u16)
            .offset(offset)
            .build(),
        (true, true, false) => opcode::WriteFixed::new(types::Fd(p.fd), ptr, len, index as u16)
            .offset(offset)
            .build(),
        (true, false, true) => opcode::Write::new(types::Fixed(0), ptr, len)
            .offset(offset)
            .build(),
        (true, false, false) => opcode::Write::new(types::Fd(p.fd), ptr, len)
            .offset(offset)
            .build(),
    };
    e.user_data(index as u64)
}

fn run_here(job: &Job, cancel: &AtomicBool) -> Result<Measurement, ProbeError> {
    let setup_err = |source| ProbeError::EngineSetup {
        engine: EngineKind::IoUring,
        source,
    };
    let depth = job.iodepth as usize;
    // Room for every I/O plus the timeout request; the completion queue is twice as large, enough
    // for every I/O, a cancel request per I/O and the timeout request.
    let entries = job.iodepth.saturating_add(1).max(4).next_power_of_two();
    let mut ring = setup(entries).map_err(setup_err)?;
    if job.rate_interval.is_some() && !ring.params().is_feature_ext_arg() {
        // A rate cap waits for its next issue time with a timeout argument to io_uring_enter,
        // which kernels before 5.11 reject; `auto` then runs the job on psync.
        return Err(setup_err(io::Error::new(
            io::ErrorKind::Unsupported,
            "rate-capped runs need IORING_FEAT_EXT_ARG (Linux 5.11 or later)",
        )));
    }
    let mut rng = SmallRng::from_os_rng();
    let bs = job.block_size as u32;
    let now = Instant::now();
    let mut slots = Vec::with_capacity(depth);
    for _ in 0..depth {
        slots.push(Slot {
            buf: AlignedBuf::new(bs as usize, job.mem_align, &mut rng)?,
            offset: 0,
            done: 0,
            issued: now,
        });
    }
    let fixed_file = ring.submitter().register_files(&[job.fd]).is_ok();
    let iovecs: Vec<libc::iovec> = slots
        .iter_mut()
        .map(|s| libc::iovec {
            iov_base: s.buf.as_mut_ptr().cast(),
            iov_len: s.buf.len(),
        })
        .collect();
    // SAFETY: the iovecs describe the slots' buffers, which stay allocated (and are not moved:
    // they are heap allocations) until the ring is dropped or leaked at the end of this function.
    let fixed_bufs = depth <= usize::from(u16::MAX)
        && unsafe { ring.submitter().register_buffers(&iovecs) }.is_ok();
    if !fixed_bufs {
        tracing::debug!(
            "io_uring: cannot register buffers (RLIMIT_MEMLOCK?); using plain reads/writes"
        );
    }
    let params = IoParams {
        fd: job.fd,
        fixed_file,
        fixed_bufs,
        write: job.write,
    };
    let mut offsets = Offsets::new(job.random, job.region_offset, job.blocks, job.block_size);
    let mut free: Vec<usize> = (0..depth).rev().collect();
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(ring.completion().capacity());
    let mut hist = new_latency_histogram();
    let (mut ios, mut bytes, mut errors) = (0u64, 0u64, 0u64);
    let mut first_error: Option<String> = None;
    let (mut timed_out, mut cancelled) = (false, false);
    let op = if job.write { "write" } else { "read" };

    // The set-up above is done: let the machine settle before the first I/O (see SETTLE).
    thread::sleep(SETTLE);
    let start = Instant::now();
    let deadline = start + job.timeout;
    let stop_at = job.runtime.map(|r| start + r);
    let interval_ns = job.rate_interval.map(|d| d.as_nanos() as u64);
    let mut now = start;
    let mut last_completion: Option<Instant> = None;
    let mut issued = 0u64;
    let mut stopping = false;
    let mut yielded = false;
    let mut abort_at: Option<Instant> = None;
    let mut leaked = false;
    // The timeout request's time span. The kernel reads it when the request is submitted; it is
    // rewritten only after that request has completed.
    let mut tick = Box::new(types::Timespec::new());
    let mut tick_armed = false;
    // A failed io_uring_enter ends the run like a timeout does, but is reported as the error.
    let mut enter_failed = false;

    loop {
        if abort_at.is_none() {
            if cancel.load(Ordering::Relaxed) {
                cancelled = true;
            } else if now >= deadline {
                timed_out = true;
            }
            if cancelled || timed_out || enter_failed {
                stopping = true;
                abort_at = Some(now);
                let mut idle = vec![false; depth];
                for &index in &free {
                    idle[index] = true;
                }
                for index in (0..depth).filter(|&i| !idle[i]) {
                    let cancel_entry = opcode::AsyncCancel::new(index as u64)
                        .build()
                        .user_data(CANCEL_TAG);
                    if let Err(err) = push(&mut ring, &cancel_entry) {
                        first_error.get_or_insert(format!("io_uring cancel: {err}"));
                    }
                }
            }
        }
        if !stopping
            && (stop_at.is_some_and(|s| now >= s) || job.number_ios.is_some_and(|n| issued >= n))
        {
            stopping = true;
        }
        if !stopping && job.yield_now.load(Ordering::Relaxed) {
            stopping = true;
            yielded = true;
        }

        let mut next_wake: Option<Instant> = None;
        if !stopping {
            while let Some(&index) = free.last() {
                if job.number_ios.is_some_and(|n| issued >= n) {
                    break;
                }
                let issue_time = match interval_ns {
                    Some(iv) => {
                        let at = start + Duration::from_nanos(iv.saturating_mul(issued));
                        if at > now {
                            next_wake = Some(at);
                            break;
                        }
                        at
                    }
                    None => now,
                };
                free.pop();
                let slot = &mut slots[index];
                slot.offset = offsets.next_offset();
                slot.done = 0;
                slot.issued = issue_time;
                let e = entry(&params, slot, index, bs);
                if let Err(err) = push(&mut ring, &e) {
                    free.push(index);
                    first_error.get_or_insert(format!("io_uring submit: {err}"));
                    errors += 1;
                    stopping = true;
                    break;
                }
                issued += 1;
                job.progress.submitted.fetch_add(1, Ordering::Relaxed);
            }
        }

        // Every slot not on the free list has an I/O in the kernel.
        let inflight = depth - free.len();
        if inflight == 0 {
            if stopping {
                break;
            }
            match next_wake {
                Some(at) => {
                    thread::sleep(at.saturating_duration_since(now).min(CANCEL_POLL));
                    now = Instant::now();
                    continue;
                }
                None => break,
            }
        }

        // Keep one timeout request armed: it ends a wait that has no timeout of its own.
        if !tick_armed {
            let until_deadline = if abort_at.is_none() {
                deadline.saturating_duration_since(now)
            } else {
                CANCEL_POLL
            };
            let period = if abort_at.is_none()
                && !stopping
                && interval_ns.is_none()
                && depth <= SPLIT_MAX_DEPTH
            {
                TICK
            } else {
                CANCEL_POLL
            };
            *tick = types::Timespec::from(period.min(until_deadline).max(Duration::from_micros(1)));
            let tick_entry = opcode::Timeout::new(&*tick).build().user_data(TICK_TAG);
            match push(&mut ring, &tick_entry) {
                Ok(()) => tick_armed = true,
                // This turn waits with a timeout argument instead.
                Err(err) => tracing::debug!("io_uring: cannot arm the timeout request: {err}"),
            }
        }
        // Deep queues wait for a batch of completions per system call (an eighth of the depth,
        // never more than is in flight), so that refills are batched too.
        let wait_for = if abort_at.is_none() && !stopping {
            (depth / 8).clamp(1, inflight.max(1))
        } else {
            1
        };
        // A rate cap's next issue time (or, without an armed timeout request, the next check of
        // the clock and the cancellation flag) bounds the wait with a timeout argument.
        let wait_until = next_wake.or((!tick_armed).then(|| now + CANCEL_POLL));
        let waited = match wait_until {
            Some(at) => {
                let ts = types::Timespec::from(
                    at.saturating_duration_since(now)
                        .max(Duration::from_micros(1)),
                );
                let args = types::SubmitArgs::new().timespec(&ts);
                ring.submitter().submit_with_args(wait_for, &args)
            }
            None if depth <= SPLIT_MAX_DEPTH => match submit_alone(&mut ring) {
                Ok(true) => Ok(0),
                // SAFETY: nothing is queued (submit_alone submitted it) and no argument is passed.
                Ok(false) => unsafe {
                    ring.submitter()
                        .enter::<libc::sigset_t>(0, 1, ENTER_GETEVENTS, None)
                },
                Err(err) => Err(err),
            },
            None => ring.submit_and_wait(wait_for),
        };
        match waited {
            Ok(_) => {}
            Err(err)
                if matches!(
                    err.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN)
                ) => {}
            Err(err) => {
                first_error.get_or_insert(format!("io_uring_enter: {err}"));
                errors += 1;
                if abort_at.is_some() {
                    leaked = true;
                    break;
                }
                // Cancel what is in flight on the next turn; the error, not a timeout, is reported.
                enter_failed = true;
            }
        }
        now = Instant::now();

        cqes.clear();
        cqes.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        let reaped_any = !cqes.is_empty();
        for &(user_data, res) in &cqes {
            if user_data == CANCEL_TAG {
                continue;
            }
            if user_data == TICK_TAG {
                tick_armed = false;
                continue;
            }
            let index = user_data as usize;
            let Some(slot) = slots.get_mut(index) else {
                continue;
            };
            let retry = abort_at.is_none()
                && ((res > 0 && slot.done + (res as u32) < bs)
                    || res == -libc::EAGAIN
                    || res == -libc::EINTR);
            if retry {
                if res > 0 {
                    // Short transfer: submit the remainder, keeping the original issue time.
                    slot.done += res as u32;
                }
                let e = entry(&params, slot, index, bs);
                match push(&mut ring, &e) {
                    Ok(()) => continue,
                    Err(err) => {
                        free.push(index);
                        errors += 1;
                        first_error.get_or_insert(format!("io_uring resubmit: {err}"));
                        stopping = true;
                        continue;
                    }
                }
            }
            free.push(index);
            job.progress.completed.fetch_add(1, Ordering::Relaxed);
            if job.write {
                // Fresh data for the buffer's next write, stamped here (after this completion's
                // time was taken, before the next issue time) so it is never part of a latency.
                stamp(slot.buf.as_mut_slice(), offsets.rng());
            }
            if res > 0 && slot.done + res as u32 >= bs {
                ios += 1;
                bytes += u64::from(bs);
                hist.saturating_record(
                    now.saturating_duration_since(slot.issued).as_nanos() as u64
                );
                last_completion = Some(now);
            } else if abort_at.is_some() && (res == -libc::ECANCELED || res >= 0) {
                // Cancelled by us, or a partial transfer cut short by the abort: not counted.
            } else {
                errors += 1;
                last_completion = Some(now);
                let what = if res < 0 {
                    io::Error::from_raw_os_error(-res).to_string()
                } else {
                    format!("short {op}: end of the target after {} bytes", slot.done)
                };
                first_error.get_or_insert(format!("{op} at offset {}: {what}", slot.offset));
                stopping = true;
            }
        }
        if reaped_any && !stopping {
            now = Instant::now();
        }
        if free.len() < depth && abort_at.is_some_and(|t| now >= t + DRAIN_GRACE) {
            leaked = true;
            break;
        }
    }

    let inflight = depth - free.len();
    if leaked && inflight > 0 {
        tracing::error!(
            inflight,
            "io_uring: I/O still in flight after cancellation; leaking the ring and its buffers"
        );
        first_error.get_or_insert(format!(
            "{inflight} I/Os still in flight after cancellation"
        ));
        std::mem::forget(slots);
        std::mem::forget(ring);
    } else {
        // Every completion has been reaped: the kernel no longer touches the buffers.
        drop(ring);
        drop(slots);
    }
    let end = last_completion.unwrap_or(now);
    Ok(Measurement {
        engine: EngineKind::IoUring,
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
