//! A FUSE filesystem served by the test itself, to make hung filesystems and hung devices for
//! real: it serves one file, `data`, and can stop answering (every request, or only reads) the
//! way a dead NFS server or a FUSE daemon stuck in I/O does. A loop device over `data` is then a
//! block device that never completes I/O, or (with a read delay) a block device whose every
//! read takes as long as the test says.
//!
//! The server is a thread speaking the FUSE protocol on `/dev/fuse` (protocol 7.x, no optional
//! features). [`FuseFs::abort`] closes `/dev/fuse`: every waiting and later request then fails
//! with ENOTCONN, as on a FUSE mount whose server died. Dropping it aborts and unmounts.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Everything.
    Serve = 0,
    /// Everything but reads of `data`, which are left waiting.
    HangReads = 1,
    /// Nothing (a lookup, a stat, anything waits).
    HangAll = 2,
}

struct State {
    mode: AtomicU8,
    /// Answer FUSE_INTERRUPT for a waiting read by failing that read with EINTR, as a FUSE
    /// daemon that honours interrupts does.
    interrupts_fail_reads: AtomicBool,
    stop: AtomicBool,
    size: u64,
    /// Reads seen so far (answered or not).
    reads: std::sync::atomic::AtomicU64,
    /// How long the server waits before answering a read, in microseconds: a loop device over
    /// `data` is then a block device with a known per-I/O latency the test can change, which a
    /// blkio throttle cannot give (a throttle spaces I/Os out; it does not make each one slower).
    read_delay_us: std::sync::atomic::AtomicU64,
}

/// A mounted FUSE filesystem with one file, `data`, of a given size (zeros).
pub struct FuseFs {
    dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
    state: Arc<State>,
    server: Mutex<Option<JoinHandle<()>>>,
}

// FUSE opcodes and constants (include/uapi/linux/fuse.h).
const LOOKUP: u32 = 1;
const FORGET: u32 = 2;
const GETATTR: u32 = 3;
const OPEN: u32 = 14;
const READ: u32 = 15;
const STATFS: u32 = 17;
const RELEASE: u32 = 18;
const FLUSH: u32 = 25;
const INIT: u32 = 26;
const ACCESS: u32 = 34;
const INTERRUPT: u32 = 36;
const BATCH_FORGET: u32 = 42;
const FOPEN_DIRECT_IO: u32 = 1;
const ROOT: u64 = 1;
const DATA: u64 = 2;

/// Whether a test that mounts a FUSE filesystem of its own can run (root and `/dev/fuse`);
/// otherwise the test is skipped, loudly (or fails, in strict mode: see
/// [`crate::common::require`]).
pub fn ready() -> bool {
    crate::common::require(crate::common::is_root(), "root")
        && crate::common::require(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse (FUSE in the kernel)",
        )
}

impl FuseFs {
    /// Mounts a filesystem serving `data` of `size` bytes, in [`Mode::Serve`], on a new
    /// directory under /var/tmp.
    pub fn mount(size: u64) -> FuseFs {
        let temp = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut fs = FuseFs::mount_at(temp.path(), size);
        fs._temp = Some(temp);
        fs
    }

    /// [`FuseFs::mount`] on `dir`, an empty directory the test created.
    pub fn mount_at(dir: &Path, size: u64) -> FuseFs {
        let fuse = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .expect("open /dev/fuse");
        let target = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        let data = std::ffi::CString::new(format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            fuse.as_raw_fd()
        ))
        .unwrap();
        // SAFETY: every pointer is a NUL-terminated string that outlives the call.
        let rc = unsafe {
            libc::mount(
                c"diskprobe-test-fuse".as_ptr(),
                target.as_ptr(),
                c"fuse".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                data.as_ptr().cast(),
            )
        };
        assert_eq!(rc, 0, "mount fuse: {}", std::io::Error::last_os_error());
        let state = Arc::new(State {
            mode: AtomicU8::new(Mode::Serve as u8),
            interrupts_fail_reads: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            size,
            reads: Default::default(),
            read_delay_us: Default::default(),
        });
        let server_state = Arc::clone(&state);
        let server = std::thread::spawn(move || serve(fuse, &server_state));
        FuseFs {
            dir: dir.to_owned(),
            _temp: None,
            state,
            server: Mutex::new(Some(server)),
        }
    }

    /// Mounts a filesystem that answers the kernel's INIT and then nothing.
    pub fn hung() -> FuseFs {
        let fs = FuseFs::mount(0);
        fs.set_mode(Mode::HangAll);
        fs
    }

    /// The mountpoint.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The served file.
    pub fn file(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Changes what the server answers from now on (requests already waiting stay waiting).
    pub fn set_mode(&self, mode: Mode) {
        self.state.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// Makes an interrupt of a waiting read fail that read with EINTR.
    pub fn fail_interrupted_reads(&self) {
        self.state
            .interrupts_fail_reads
            .store(true, Ordering::SeqCst);
    }

    /// Delays the answer to every later read by `delay` (the server answers one request at a
    /// time, so reads are served one after another).
    pub fn set_read_delay(&self, delay: Duration) {
        self.state
            .read_delay_us
            .store(delay.as_micros() as u64, Ordering::SeqCst);
    }

    /// Reads the server has received.
    pub fn reads(&self) -> u64 {
        self.state.reads.load(Ordering::SeqCst)
    }

    /// Stops the server and closes `/dev/fuse`: every waiting and later request fails with
    /// ENOTCONN. The filesystem stays mounted until dropped.
    pub fn abort(&self) {
        self.state.stop.store(true, Ordering::SeqCst);
        if let Some(server) = self.server.lock().unwrap().take() {
            let _ = server.join();
        }
    }

    /// A guard that aborts the server when dropped (before what was declared ahead of it, such
    /// as a loop device over `data` whose detach would wait for the hung I/O).
    pub fn abort_on_drop(&self) -> AbortOnDrop<'_> {
        AbortOnDrop(self)
    }
}

impl Drop for FuseFs {
    fn drop(&mut self) {
        self.abort();
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// A FUSE filesystem whose server answers the kernel's INIT and then nothing: a lookup in it (the
/// stat of any path below the mountpoint) waits until the server is aborted or the filesystem
/// dropped (the connection aborts and waiters get ENOTCONN). A hung NFS server looks the same to a
/// client. While it is mounted, anything on the machine that stats every mountpoint (`df`) waits
/// too, for as long as the test keeps it.
pub struct HungFuse(FuseFs);

impl HungFuse {
    /// Mounts it on `dir`, an empty directory the test created.
    pub fn mount_at(dir: &Path) -> HungFuse {
        let fs = FuseFs::mount_at(dir, 0);
        fs.set_mode(Mode::HangAll);
        HungFuse(fs)
    }

    /// Closes `/dev/fuse` and leaves the filesystem mounted: every waiting and later request fails
    /// with ENOTCONN, as on a FUSE mount whose server died.
    pub fn abort(&mut self) {
        self.0.abort();
    }
}

/// See [`FuseFs::abort_on_drop`].
pub struct AbortOnDrop<'a>(&'a FuseFs);

impl Drop for AbortOnDrop<'_> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().unwrap())
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().unwrap())
}

/// Writes a reply to request `unique`: `error` (a negative errno, or 0) and `body`.
fn reply(fuse: &mut File, unique: u64, error: i32, body: &[u8]) {
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(&(16 + body.len() as u32).to_le_bytes());
    out.extend_from_slice(&error.to_le_bytes());
    out.extend_from_slice(&unique.to_le_bytes());
    out.extend_from_slice(body);
    // A request interrupted meanwhile may be gone (ENOENT): nothing to do then.
    let _ = fuse.write_all(&out);
}

/// `fuse_attr` of the root directory or of `data`.
fn attr(node: u64, size: u64) -> Vec<u8> {
    let mut a = Vec::with_capacity(88);
    let (mode, size) = if node == ROOT {
        (0o40755u32, 0)
    } else {
        (0o100444u32, size)
    };
    for v in [node, size, size.div_ceil(512), 0, 0, 0] {
        a.extend_from_slice(&v.to_le_bytes());
    }
    for v in [0u32, 0, 0, mode, 1, 0, 0, 0, 4096, 0] {
        a.extend_from_slice(&v.to_le_bytes());
    }
    a
}

/// Attributes and entries are cached for an hour, so that a hung read is the only request left.
fn valid() -> [u8; 8] {
    3600u64.to_le_bytes()
}

fn serve(mut fuse: File, state: &State) {
    let mut buf = vec![0u8; (1 << 20) + 4096];
    let mut waiting_reads = HashSet::new();
    while !state.stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd: fuse.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        if unsafe { libc::poll(&mut pfd, 1, 100) } <= 0 {
            continue;
        }
        let Ok(n) = fuse.read(&mut buf) else { break };
        if n < 40 {
            continue;
        }
        let (opcode, unique, node) = (u32_at(&buf, 4), u64_at(&buf, 8), u64_at(&buf, 16));
        let body = &buf[40..n];
        if opcode == INIT {
            init(&mut fuse, unique, body);
            continue;
        }
        let mode = state.mode.load(Ordering::SeqCst);
        if opcode == INTERRUPT {
            let target = u64_at(body, 0);
            if state.interrupts_fail_reads.load(Ordering::SeqCst) && waiting_reads.remove(&target) {
                reply(&mut fuse, target, -libc::EINTR, &[]);
            }
            continue;
        }
        if mode == Mode::HangAll as u8 || matches!(opcode, FORGET | BATCH_FORGET) {
            continue;
        }
        if opcode == READ {
            state.reads.fetch_add(1, Ordering::SeqCst);
            if mode == Mode::HangReads as u8 {
                waiting_reads.insert(unique);
                continue;
            }
        }
        answer(&mut fuse, state, opcode, unique, node, body);
    }
}

fn init(fuse: &mut File, unique: u64, body: &[u8]) {
    // init_in: major, minor, max_readahead, flags. init_out (64 bytes): major, minor,
    // max_readahead, flags, max_background, congestion_threshold, max_write, time_gran, rest 0.
    let (minor, readahead) = (u32_at(body, 4), u32_at(body, 8));
    let mut out = Vec::with_capacity(64);
    for v in [7u32, minor, readahead, 0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(&12u16.to_le_bytes());
    out.extend_from_slice(&4096u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    out.resize(64, 0);
    reply(fuse, unique, 0, &out);
}

fn answer(fuse: &mut File, state: &State, opcode: u32, unique: u64, node: u64, body: &[u8]) {
    match opcode {
        LOOKUP => {
            let name = body.split(|&b| b == 0).next().unwrap_or_default();
            if node != ROOT || name != b"data" {
                return reply(fuse, unique, -libc::ENOENT, &[]);
            }
            let mut out = Vec::with_capacity(128);
            out.extend_from_slice(&DATA.to_le_bytes());
            out.extend_from_slice(&0u64.to_le_bytes());
            out.extend_from_slice(&valid());
            out.extend_from_slice(&valid());
            out.extend_from_slice(&[0u8; 8]);
            out.extend_from_slice(&attr(DATA, state.size));
            reply(fuse, unique, 0, &out);
        }
        GETATTR => {
            let mut out = Vec::with_capacity(104);
            out.extend_from_slice(&valid());
            out.extend_from_slice(&[0u8; 8]);
            out.extend_from_slice(&attr(node, state.size));
            reply(fuse, unique, 0, &out);
        }
        OPEN => {
            let mut out = vec![0u8; 16];
            out[8..12].copy_from_slice(&FOPEN_DIRECT_IO.to_le_bytes());
            reply(fuse, unique, 0, &out);
        }
        READ => {
            let delay = state.read_delay_us.load(Ordering::SeqCst);
            if delay > 0 {
                std::thread::sleep(Duration::from_micros(delay));
            }
            if state.stop.load(Ordering::SeqCst) {
                // Aborted while this read was held: a server that dies answers nothing more,
                // and the read fails with the rest.
                return;
            }
            let (offset, size) = (u64_at(body, 8), u64::from(u32_at(body, 16)));
            let len = state.size.saturating_sub(offset).min(size) as usize;
            reply(fuse, unique, 0, &vec![0u8; len]);
        }
        STATFS => {
            let mut out = Vec::with_capacity(80);
            for v in [1u64 << 20, 0, 0, 2, 0] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            for v in [4096u32, 255, 4096, 0] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.resize(80, 0);
            reply(fuse, unique, 0, &out);
        }
        FLUSH | RELEASE | ACCESS => reply(fuse, unique, 0, &[]),
        _ => reply(fuse, unique, -libc::ENOSYS, &[]),
    }
}
