//! Probe engines: run one [`Profile`] on an [`OpenTarget`] and measure it.
//!
//! [`run`] blocks the calling thread for the length of the run, so call it from a dedicated
//! thread (the scheduler's probe thread, `std::thread::spawn`, or `tokio::task::spawn_blocking`),
//! never from an async task. Two engines:
//!
//! - [`uring`]: one thread owns an io_uring, registered page-aligned buffers and the registered
//!   file, and keeps `iodepth` I/Os in flight.
//! - [`psync`]: `iodepth` threads each doing `pread`/`pwrite` (a true queue depth of `iodepth`),
//!   the fallback when io_uring cannot be set up (seccomp, `kernel.io_uring_disabled`, old kernels).
//!
//! Both stop issuing at the runtime, after `number_ios` I/Os or when asked to yield
//! ([`RunOptions::yield_now`]) and wait for what is in flight; on the hard timeout or the cancellation flag they stop at once (io_uring cancels in-flight I/O and
//! drains every completion before a buffer is freed) and report `timed_out` / `cancelled`.

pub mod psync;
pub mod uring;

use crate::probe::ProbeError;
use crate::probe::measurement::Measurement;
use crate::probe::profile::Profile;
use crate::probe::target::OpenTarget;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

/// Which engine to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum EngineChoice {
    /// io_uring, or psync when io_uring cannot be set up.
    #[default]
    Auto,
    /// io_uring only; fail when it cannot be set up.
    #[value(name = "io_uring")]
    IoUring,
    /// psync only.
    Psync,
}

/// The engine that ran a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// io_uring with registered buffers and file.
    IoUring,
    /// Threads doing pread/pwrite.
    Psync,
}

impl EngineKind {
    /// `io_uring` or `psync` (the `engine` label).
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::IoUring => "io_uring",
            EngineKind::Psync => "psync",
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How to run a probe.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Engine choice.
    pub engine: EngineChoice,
    /// Hard limit on the run, from its start: in-flight I/O is cancelled and the result reports
    /// `timed_out`.
    pub timeout: Duration,
    /// Set to `true` (e.g. on SIGTERM) to stop the run early; checked at least every 100 ms.
    pub cancel: Arc<AtomicBool>,
    /// Runtime for profiles that set neither a runtime nor a number of I/Os.
    pub default_runtime: Duration,
    /// I/Os submitted and completed so far, updated by the engine as the run goes on.
    pub progress: Arc<RunProgress>,
    /// Set to `true` to end the run early without cancelling: the engine stops issuing, waits for
    /// what is in flight and returns a measurement with `yielded` set.
    pub yield_now: Arc<AtomicBool>,
}

/// What a run has done so far, for whoever watches it from another thread (updated with
/// `Relaxed` stores). `submitted` counts an I/O before the kernel can see it and `completed` after
/// the engine has taken its completion, so that at any moment the I/Os the kernel holds or has
/// finished for the run number at most `submitted`, and those it has finished at least
/// `completed`.
#[derive(Debug, Default)]
pub struct RunProgress {
    /// I/Os handed to the kernel (resubmissions of short transfers not counted again).
    pub submitted: AtomicU64,
    /// I/Os whose completion the engine has taken (successful, failed or cancelled).
    pub completed: AtomicU64,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            engine: EngineChoice::Auto,
            timeout: Duration::from_secs(30),
            cancel: Arc::new(AtomicBool::new(false)),
            default_runtime: Duration::from_secs(1),
            progress: Arc::default(),
            yield_now: Arc::default(),
        }
    }
}

/// Longest an engine waits, after its hard timeout or cancellation, for in-flight I/O to complete
/// before it returns (leaking what the kernel still holds).
pub const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// How long the io_uring engine waits after setting up a run (starting its thread, creating the
/// ring, allocating and registering buffers) before the first I/O; not part of the run's elapsed
/// time.
///
/// On a 2-vCPU VM, QD1 latency on a loop device has two stable modes: the loop worker runs on the
/// submitting CPU (no idle CPU to wake per I/O), or on the other one (two cross-CPU wake-ups per
/// I/O, about half the IOPS). Which one a run falls into is decided at its first I/Os by what the
/// CPUs were just doing, and it then lasts for most of the run. Started straight after its set-up,
/// a run fell into the slow mode most of the time; after a 100 ms pause (as after fio's own
/// start-up) into the fast one: `bench/qd1_start.sh` shows it with a minimal liburing program, and
/// `docs/probes.md` has the figures. The psync engine does not wait: its QD1 results matched
/// fio's psync engine without it, and under blkio throttling a pause before its first I/O let the
/// throttle's first slice through as a burst (the 2000-IOPS throttle test caught it).
pub const SETTLE: Duration = Duration::from_millis(100);

/// Interval at which a waiting engine checks the cancellation flag.
pub(crate) const CANCEL_POLL: Duration = Duration::from_millis(100);

/// Everything an engine needs, validated.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub fd: std::os::fd::RawFd,
    pub write: bool,
    pub random: bool,
    pub region_offset: u64,
    pub blocks: u64,
    pub block_size: u64,
    pub mem_align: usize,
    pub iodepth: u32,
    pub runtime: Option<Duration>,
    pub number_ios: Option<u64>,
    pub rate_interval: Option<Duration>,
    pub timeout: Duration,
    pub progress: Arc<RunProgress>,
    pub yield_now: Arc<AtomicBool>,
}

impl Job {
    fn new(target: &OpenTarget, profile: &Profile, opts: &RunOptions) -> Result<Job, ProbeError> {
        let bs = profile.block_size;
        if bs == 0 || bs > u64::from(u32::MAX) {
            return Err(ProbeError::Profile(format!(
                "profile {}: block size {bs} is out of range",
                profile.name
            )));
        }
        if !bs.is_multiple_of(target.offset_align) {
            return Err(ProbeError::Profile(format!(
                "profile {}: block size {bs} is not a multiple of the direct-I/O alignment {} of {}",
                profile.name,
                target.offset_align,
                target.path.display()
            )));
        }
        if profile.rw.is_write() && !target.writable {
            return Err(ProbeError::Profile(format!(
                "profile {} writes, but {} was opened read-only (write probes need allow_writes / --allow-writes)",
                profile.name,
                target.path.display()
            )));
        }
        let region = match profile.size {
            Some(size) if size > target.region_len => {
                return Err(ProbeError::Profile(format!(
                    "profile {}: size {size} exceeds the target region of {} bytes",
                    profile.name, target.region_len
                )));
            }
            Some(size) => size,
            None => target.region_len,
        };
        let blocks = region / bs;
        if blocks == 0 {
            return Err(ProbeError::Profile(format!(
                "profile {}: the region of {region} bytes of {} is smaller than one block of {bs} bytes",
                profile.name,
                target.path.display()
            )));
        }
        if profile.iodepth == 0 {
            return Err(ProbeError::Profile(format!(
                "profile {}: iodepth must be at least 1",
                profile.name
            )));
        }
        let runtime = match (profile.runtime, profile.number_ios) {
            (None, None) => Some(opts.default_runtime),
            (r, _) => r,
        };
        Ok(Job {
            fd: target.fd(),
            write: profile.rw.is_write(),
            random: profile.rw.is_random(),
            region_offset: target.region_offset,
            blocks,
            block_size: bs,
            mem_align: (target.mem_align.max(4096)) as usize,
            iodepth: profile.iodepth,
            runtime,
            number_ios: profile.number_ios,
            rate_interval: profile
                .rate_iops
                .map(|r| Duration::from_nanos(1_000_000_000 / u64::from(r.max(1)))),
            timeout: opts.timeout,
            progress: Arc::clone(&opts.progress),
            yield_now: Arc::clone(&opts.yield_now),
        })
    }
}

/// Offsets of a run: uniformly random block-aligned offsets over the region (freshly seeded from
/// the OS every run), or a sequential walk that wraps at the end of the region.
#[derive(Debug)]
pub struct Offsets {
    random: bool,
    start: u64,
    blocks: u64,
    block_size: u64,
    next: u64,
    rng: SmallRng,
}

impl Offsets {
    /// Offsets over `blocks` blocks of `block_size` bytes starting at byte `start`.
    pub fn new(random: bool, start: u64, blocks: u64, block_size: u64) -> Offsets {
        Offsets {
            random,
            start,
            blocks: blocks.max(1),
            block_size,
            next: 0,
            rng: SmallRng::from_os_rng(),
        }
    }

    /// The next offset in bytes.
    #[inline]
    pub fn next_offset(&mut self) -> u64 {
        let block = if self.random {
            self.rng.random_range(0..self.blocks)
        } else {
            let b = self.next;
            self.next += 1;
            if self.next == self.blocks {
                self.next = 0;
            }
            b
        };
        self.start + block * self.block_size
    }

    /// The offset of the `k`-th I/O of the sequential walk (wrapping at the end of the region),
    /// for engines whose threads share one walk through a common counter.
    pub fn sequential(&self, k: u64) -> u64 {
        self.start + (k % self.blocks) * self.block_size
    }

    /// The run's fast random generator (also used for write data).
    pub fn rng(&mut self) -> &mut SmallRng {
        &mut self.rng
    }
}

/// Bytes between the fresh random words stamped into write buffers.
pub const STAMP_STRIDE: usize = 512;

/// Makes the data of the next write unique: stores a fresh random 64-bit word at the start of every
/// 512-byte sector of `buf` (the rest keeps the random bytes the buffer was filled with).
#[inline]
pub(crate) fn stamp(buf: &mut [u8], rng: &mut SmallRng) {
    for chunk in buf.chunks_exact_mut(STAMP_STRIDE) {
        chunk[..8].copy_from_slice(&rng.next_u64().to_ne_bytes());
    }
}

/// A buffer aligned for direct I/O, filled with random bytes.
///
/// Mapped with `mmap` rather than taken from the heap: a run's buffers (up to iodepth × block
/// size, e.g. 64 MiB for a 1M QD64 profile) go back to the system when the run ends instead of
/// staying in the allocator's arenas, so the agent's memory does not keep the largest run's size.
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its mapping exclusively (like a Box<[u8]>).
unsafe impl Send for AlignedBuf {}

/// Alignment every mapping has (Linux pages are at least 4 KiB).
const MAP_ALIGN: usize = 4096;

impl AlignedBuf {
    /// `len` random bytes aligned to `align` (a power of two, at most 4096).
    pub(crate) fn new(
        len: usize,
        align: usize,
        rng: &mut SmallRng,
    ) -> Result<AlignedBuf, ProbeError> {
        if align > MAP_ALIGN {
            return Err(ProbeError::Profile(format!(
                "direct-I/O memory alignment of {align} bytes is above the supported {MAP_ALIGN}"
            )));
        }
        let len = len.max(1);
        // SAFETY: an anonymous private mapping of len bytes at an address the kernel chooses;
        // no file descriptor or existing memory is involved.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(ProbeError::Profile(format!(
                "cannot map {len} bytes for I/O buffers: {}",
                std::io::Error::last_os_error()
            )));
        }
        let ptr = NonNull::new(raw.cast::<u8>())
            .ok_or_else(|| ProbeError::Profile(format!("cannot map {len} bytes")))?;
        let mut buf = AlignedBuf { ptr, len };
        rng.fill_bytes(buf.as_mut_slice());
        Ok(buf)
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is a live mapping of len bytes (zero-filled by the kernel, then written in
        // new()), borrowed mutably through &mut self only.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr/len is exactly the mapping made in new(), unmapped once; engines free a
        // buffer only after every I/O using it has completed (or leak it).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

static FALLBACK_WARNING: Once = Once::new();

/// Runs `profile` on `target` and returns what it measured. Blocks the calling thread for the run
/// (at most `opts.timeout` plus the time to drain cancelled I/O).
///
/// Errors are setup problems (profile does not fit the target, engine cannot start); I/O errors
/// during the run are counted in the result.
pub fn run(
    target: &OpenTarget,
    profile: &Profile,
    opts: &RunOptions,
) -> Result<Measurement, ProbeError> {
    let job = Job::new(target, profile, opts)?;
    match opts.engine {
        EngineChoice::Psync => psync::run(&job, &opts.cancel),
        EngineChoice::IoUring => uring::run(&job, &opts.cancel),
        EngineChoice::Auto => match uring::run(&job, &opts.cancel) {
            Err(ProbeError::EngineSetup { engine, source }) => {
                FALLBACK_WARNING.call_once(|| {
                    tracing::warn!(%engine, err = %source, "io_uring cannot be set up; using the psync engine (pread/pwrite threads)");
                });
                psync::run(&job, &opts.cancel)
            }
            other => other,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_offsets_are_aligned_in_region_and_spread() {
        let mut o = Offsets::new(true, 1 << 20, 256, 4096);
        let mut seen = vec![0u32; 256];
        for _ in 0..256 * 100 {
            let off = o.next_offset();
            assert!(off >= 1 << 20);
            assert!(off + 4096 <= (1 << 20) + 256 * 4096);
            assert_eq!(off % 4096, 0);
            seen[((off - (1 << 20)) / 4096) as usize] += 1;
        }
        // Uniform: each block expected 100 times; all within a generous band.
        assert!(seen.iter().all(|&n| (40..=180).contains(&n)), "{seen:?}");
    }

    #[test]
    fn sequential_offsets_walk_and_wrap() {
        let mut o = Offsets::new(false, 8192, 3, 1 << 20);
        let got: Vec<u64> = (0..7).map(|_| o.next_offset()).collect();
        let b = 1u64 << 20;
        assert_eq!(
            got,
            vec![
                8192,
                8192 + b,
                8192 + 2 * b,
                8192,
                8192 + b,
                8192 + 2 * b,
                8192
            ]
        );
        // The shared walk of the psync threads gives the same sequence by I/O number.
        let shared: Vec<u64> = (0..7).map(|k| o.sequential(k)).collect();
        assert_eq!(shared, got);
    }

    #[test]
    fn runs_are_reseeded() {
        let mut a = Offsets::new(true, 0, 1 << 30, 4096);
        let mut b = Offsets::new(true, 0, 1 << 30, 4096);
        let x: Vec<u64> = (0..8).map(|_| a.next_offset()).collect();
        let y: Vec<u64> = (0..8).map(|_| b.next_offset()).collect();
        assert_ne!(x, y);
    }

    #[test]
    fn stamps_make_writes_unique_and_nonzero() {
        let mut rng = SmallRng::from_os_rng();
        let mut buf = AlignedBuf::new(4096, 4096, &mut rng).unwrap();
        assert_eq!(buf.as_mut_ptr() as usize % 4096, 0);
        assert_eq!(buf.len(), 4096);
        let before = buf.as_mut_slice().to_vec();
        stamp(buf.as_mut_slice(), &mut rng);
        let after = buf.as_mut_slice().to_vec();
        assert_ne!(before, after);
        for (a, b) in before.chunks(512).zip(after.chunks(512)) {
            assert_ne!(a[..8], b[..8]);
            assert_eq!(a[8..], b[8..]);
        }
    }
}
