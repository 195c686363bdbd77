//! FUSE filesystems served by the tests themselves, unmounted on drop: a hung one (its server
//! answers the kernel's INIT and then nothing) and a slow one (one file whose reads are answered
//! after a delay the test sets). `/dev/fuse` is mounted by hand and the protocol spoken directly.
#![allow(dead_code)]

use std::ffi::CStr;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Opens `/dev/fuse` and mounts a FUSE filesystem called `name` on `dir` (with `flags`), served
/// through the returned file.
fn mount_fuse(dir: &Path, name: &CStr, flags: libc::c_ulong) -> std::fs::File {
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
            name.as_ptr(),
            target.as_ptr(),
            c"fuse".as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    assert_eq!(rc, 0, "mount fuse: {}", std::io::Error::last_os_error());
    fuse
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().unwrap())
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().unwrap())
}

/// A reply to request `unique`: out_header (len, error, unique), then `payload`.
fn reply(unique: u64, error: i32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + payload.len());
    out.extend_from_slice(&((16 + payload.len()) as u32).to_le_bytes());
    out.extend_from_slice(&error.to_le_bytes());
    out.extend_from_slice(&unique.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The opcode of the first request, FUSE_INIT.
const INIT: u32 = 26;

/// The reply to FUSE_INIT (the request is in_header, 40 bytes: len, opcode, unique,
/// ...; then init_in: major, minor, max_readahead, ...): an init_out of 64 bytes with the protocol
/// version, no features and 4 KiB writes.
fn init_reply(request: &[u8]) -> Vec<u8> {
    assert!(request.len() >= 56, "short FUSE_INIT request");
    assert_eq!(u32_at(request, 4), INIT, "the first request is FUSE_INIT");
    let (minor, readahead) = (u32_at(request, 44), u32_at(request, 48));
    let mut init = Vec::with_capacity(64);
    for v in [7, minor, readahead, 0] {
        init.extend_from_slice(&u32::to_le_bytes(v));
    }
    init.extend_from_slice(&16u16.to_le_bytes()); // max_background
    init.extend_from_slice(&12u16.to_le_bytes()); // congestion_threshold
    init.extend_from_slice(&4096u32.to_le_bytes()); // max_write
    init.extend_from_slice(&1u32.to_le_bytes()); // time_gran
    init.resize(64, 0);
    reply(u64_at(request, 8), 0, &init)
}

/// A FUSE filesystem whose server answers the kernel's INIT and then nothing: a lookup in it (the
/// stat of any path below the mountpoint) waits until the filesystem is dropped, which unmounts it
/// and closes `/dev/fuse` (the connection aborts and waiters get ENOTCONN). A hung NFS server
/// looks the same to a client. While it is mounted, anything on the machine that stats every
/// mountpoint (`df`) waits too, for as long as the test keeps it.
pub struct HungFuse {
    dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
    fuse: Option<std::fs::File>,
}

impl HungFuse {
    /// Mounts it on a new directory under /var/tmp.
    pub fn mount() -> HungFuse {
        let temp = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut hung = HungFuse::mount_at(temp.path());
        hung._temp = Some(temp);
        hung
    }

    /// Mounts it on `dir`, an empty directory the test created.
    pub fn mount_at(dir: &Path) -> HungFuse {
        let fuse = mount_fuse(dir, c"diskprobe-hung", libc::MS_NOSUID | libc::MS_NODEV);
        // From here on, a failed handshake still unmounts (Drop).
        let mut hung = HungFuse {
            dir: dir.to_owned(),
            _temp: None,
            fuse: Some(fuse),
        };
        let fuse = hung.fuse.as_mut().unwrap();
        let mut buf = vec![0u8; (1 << 20) + 4096];
        let n = fuse.read(&mut buf).expect("read FUSE_INIT");
        fuse.write_all(&init_reply(&buf[..n]))
            .expect("answer FUSE_INIT");
        hung
    }

    /// The mountpoint.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Closes `/dev/fuse` and leaves the filesystem mounted: every waiting and later request fails
    /// with ENOTCONN, as on a FUSE mount whose server died.
    pub fn abort(&mut self) {
        drop(self.fuse.take());
    }
}

impl Drop for HungFuse {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        drop(self.fuse.take());
    }
}

/// The slow filesystem's one file, read-only: `size` bytes of random data held in memory, whose
/// every read is answered after a delay the test sets (and may change at any time). A loop device
/// over it is a block device whose per-I/O latency is known and adjustable, which a blkio
/// throttle cannot give (a throttle spaces I/Os out; it does not make each one slower). The file
/// is opened with `FOPEN_DIRECT_IO`, so the page cache never answers for the server: every read
/// of the loop device reaches it. Requests other than those a loop device over one file needs
/// are answered `ENOSYS`.
pub const FILE: &str = "disk.img";

const LOOKUP: u32 = 1;
const FORGET: u32 = 2;
const GETATTR: u32 = 3;
const OPEN: u32 = 14;
const READ: u32 = 15;
const RELEASE: u32 = 18;
const FLUSH: u32 = 25;
const INTERRUPT: u32 = 36;
const BATCH_FORGET: u32 = 42;
/// `fuse_open_out.open_flags`: bypass the page cache.
const FOPEN_DIRECT_IO: u32 = 1;
const ROOT: u64 = 1;
const NODE: u64 = 2;

/// The slow filesystem (see [`FILE`]), served by a thread of the test; unmounted (lazily) when
/// dropped, which ends the server thread.
pub struct SlowFuse {
    dir: tempfile::TempDir,
    delay_us: Arc<AtomicU64>,
    reads: Arc<AtomicU64>,
    server: Option<std::thread::JoinHandle<()>>,
}

impl SlowFuse {
    /// Mounts a filesystem serving `size` bytes of random data as [`FILE`], reads delayed by
    /// `delay`.
    pub fn mount(size: usize, delay: Duration) -> SlowFuse {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut fuse = mount_fuse(
            dir.path(),
            c"diskprobe-slow",
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_RDONLY,
        );
        let mut content = vec![0u8; size];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut r| r.read_exact(&mut content))
            .expect("random content");
        let delay_us = Arc::new(AtomicU64::new(delay.as_micros() as u64));
        let reads = Arc::new(AtomicU64::new(0));
        let (d, n) = (delay_us.clone(), reads.clone());
        let server = std::thread::Builder::new()
            .name("slow-fuse".to_owned())
            .spawn(move || serve(&mut fuse, &content, &d, &n))
            .expect("start the FUSE server");
        SlowFuse {
            dir,
            delay_us,
            reads,
            server: Some(server),
        }
    }

    /// The served file.
    pub fn file(&self) -> PathBuf {
        self.dir.path().join(FILE)
    }

    /// The mountpoint.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Changes the delay of every later read.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_us
            .store(delay.as_micros() as u64, Ordering::Relaxed);
    }

    /// Reads answered so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

impl Drop for SlowFuse {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
        // The connection ends once nothing holds the file open (drop a loop device over it
        // first); the server's next read of /dev/fuse then fails and its thread returns. It is
        // not waited for, so that a test that failed with the file still open does not hang.
        drop(self.server.take());
    }
}

/// `fuse_attr` (88 bytes) of the root directory or of the file.
fn attr(node: u64, size: u64) -> Vec<u8> {
    let mut a = Vec::with_capacity(88);
    let (mode, nlink, size) = if node == ROOT {
        (0o040755u32, 2u32, 0u64)
    } else {
        (0o100444, 1, size)
    };
    for v in [node, size, size.div_ceil(512), 0, 0, 0] {
        a.extend_from_slice(&v.to_le_bytes());
    }
    for v in [0u32, 0, 0, mode, nlink, 0, 0, 0, 4096, 0] {
        a.extend_from_slice(&v.to_le_bytes());
    }
    a
}

/// Answers requests until the connection ends.
fn serve(fuse: &mut std::fs::File, content: &[u8], delay_us: &AtomicU64, reads: &AtomicU64) {
    let mut buf = vec![0u8; (1 << 20) + 4096];
    let size = content.len() as u64;
    loop {
        let n = match fuse.read(&mut buf) {
            Ok(n) => n,
            Err(err) if err.raw_os_error() == Some(libc::EINTR) => continue,
            // ENODEV once unmounted.
            Err(_) => return,
        };
        if n < 40 {
            continue;
        }
        let req = &buf[..n];
        let (opcode, unique, node) = (u32_at(req, 4), u64_at(req, 8), u64_at(req, 16));
        let body = &req[40..];
        let reply = |error: i32, payload: &[u8]| reply(unique, error, payload);
        let out = match opcode {
            INIT => init_reply(req),
            LOOKUP => {
                let name = body.split(|b| *b == 0).next().unwrap_or_default();
                if node == ROOT && name == FILE.as_bytes() {
                    // entry_out: node, generation, entry and attribute validity (1 h), attr.
                    let mut entry = Vec::with_capacity(128);
                    for v in [NODE, 0, 3600, 3600] {
                        entry.extend_from_slice(&u64::to_le_bytes(v));
                    }
                    entry.extend_from_slice(&[0u8; 8]);
                    entry.extend_from_slice(&attr(NODE, size));
                    reply(0, &entry)
                } else {
                    reply(-libc::ENOENT, &[])
                }
            }
            GETATTR => {
                let mut out = Vec::with_capacity(104);
                out.extend_from_slice(&3600u64.to_le_bytes());
                out.extend_from_slice(&[0u8; 8]);
                out.extend_from_slice(&attr(node, size));
                reply(0, &out)
            }
            OPEN => {
                let mut open = Vec::with_capacity(16);
                open.extend_from_slice(&0u64.to_le_bytes());
                open.extend_from_slice(&FOPEN_DIRECT_IO.to_le_bytes());
                open.extend_from_slice(&0u32.to_le_bytes());
                reply(0, &open)
            }
            READ => {
                let (offset, len) = (u64_at(body, 8), u64::from(u32_at(body, 16)));
                let start = offset.min(size) as usize;
                let end = offset.saturating_add(len).min(size) as usize;
                std::thread::sleep(Duration::from_micros(delay_us.load(Ordering::Relaxed)));
                reads.fetch_add(1, Ordering::Relaxed);
                reply(0, &content[start..end])
            }
            FLUSH | RELEASE => reply(0, &[]),
            FORGET | BATCH_FORGET | INTERRUPT => continue,
            _ => reply(-libc::ENOSYS, &[]),
        };
        if fuse.write_all(&out).is_err() {
            return;
        }
    }
}
