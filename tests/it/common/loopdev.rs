//! Loop devices, filesystems mounted on them and cgroup v1 blkio throttles created by the probe
//! tests, removed on drop.
//!
//! Every device here is backed by a file the test created (under /dev/shm or a temporary
//! directory on the root filesystem); nothing else is ever written.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A loop device over a file filled with random data, detached on drop.
pub struct LoopDev {
    /// `/dev/loopN`.
    pub path: PathBuf,
    /// `loopN`.
    pub name: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// The backing file.
    pub backing: PathBuf,
    /// Created at its own number ([`free_loop_numbers`]; every device of the tests is): the device
    /// itself is removed again when detached.
    numbered: bool,
    /// Still attached to its file.
    attached: bool,
    _dir: Option<tempfile::TempDir>,
}

/// Creates `path` with `size` random bytes from the kernel (fast even in unoptimised test builds).
fn fill(path: &Path, size: u64) {
    let mut f = fs::File::create(path).expect("create backing file");
    let mut random = fs::File::open("/dev/urandom")
        .expect("open /dev/urandom")
        .take(size);
    let copied = std::io::copy(&mut random, &mut f).expect("fill backing file");
    assert_eq!(copied, size);
    f.sync_all().expect("sync backing file");
}

/// Counters of one `/proc/diskstats` line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    /// Reads completed.
    pub reads: u64,
    /// Reads merged into other reads before they reached the driver.
    pub read_merges: u64,
    /// Sectors read.
    pub read_sectors: u64,
    /// Milliseconds spent by all reads (from their start in the device's queue to completion).
    pub read_time_ms: u64,
    /// Writes completed.
    pub writes: u64,
    /// Writes merged into other writes.
    pub write_merges: u64,
    /// Sectors written.
    pub write_sectors: u64,
    /// Flush requests completed (kernel 5.5+; 0 before).
    pub flushes: u64,
}

/// What the blkio cgroups (and the directories of [`LoopDev::disk_partitioned`]) are named after:
/// `DISKPROBE_TEST_PREFIX` (so that a run on a shared machine can name them after its branch), or
/// `diskprobe-test`.
pub fn name_prefix() -> String {
    std::env::var("DISKPROBE_TEST_PREFIX").unwrap_or_else(|_| "diskprobe-test".to_owned())
}

/// The first sector of a DOS partition table: Linux partitions of `(first sector, sectors)`.
pub fn dos_partition_table(parts: &[(u32, u32)]) -> [u8; 512] {
    let mut mbr = [0u8; 512];
    for (i, (start, sectors)) in parts.iter().enumerate() {
        let entry = &mut mbr[446 + 16 * i..446 + 16 * (i + 1)];
        // No CHS addresses (0xfe 0xff 0xff: beyond CHS), type 0x83 (Linux), LBA start and size.
        entry[1..4].copy_from_slice(&[0xfe, 0xff, 0xff]);
        entry[4] = 0x83;
        entry[5..8].copy_from_slice(&[0xfe, 0xff, 0xff]);
        entry[8..12].copy_from_slice(&start.to_le_bytes());
        entry[12..16].copy_from_slice(&sectors.to_le_bytes());
    }
    mbr[510] = 0x55;
    mbr[511] = 0xaa;
    mbr
}

/// Whether a test that makes loop devices can run: `true` when it can; otherwise the test is
/// skipped, loudly (or fails, in strict mode: see [`crate::common::require`]).
pub fn ready() -> bool {
    crate::common::require(loop_available(), "root and losetup (loop devices)")
}

/// [`ready`] for a test that also throttles its devices with cgroup v1 blkio.
pub fn blkio_ready() -> bool {
    ready() && crate::common::require(blkio_available(), "cgroup v1 blkio")
}

/// Whether loop devices can be created here.
pub fn loop_available() -> bool {
    crate::common::is_root()
        && crate::common::which("losetup").is_some()
        && Path::new("/dev/loop-control").exists()
}

/// Whether cgroup v1 blkio throttling is available.
pub fn blkio_available() -> bool {
    crate::common::is_root()
        && Path::new("/sys/fs/cgroup/blkio/blkio.throttle.read_iops_device").exists()
}

impl LoopDev {
    /// A loop device over a file on tmpfs (/dev/shm).
    pub fn tmpfs(size: u64) -> LoopDev {
        LoopDev::create(
            tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm"),
            size,
            &[],
        )
    }

    /// A loop device over a file on the root filesystem, with `--direct-io=on`.
    pub fn disk(size: u64) -> LoopDev {
        LoopDev::create(
            tempfile::tempdir_in("/var/tmp").expect("tempdir in /var/tmp"),
            size,
            &["--direct-io=on"],
        )
    }

    /// A loop device over a file on the root filesystem, with `--direct-io=on`, whose file
    /// starts with a DOS partition table of `parts` (`(first sector, sectors)`), added with
    /// `partx --add` (the kernel here does not read DOS tables itself): its partitions are
    /// `/dev/loopNpK` once [`LoopDev::partition`] has seen them.
    pub fn disk_partitioned(size: u64, parts: &[(u32, u32)]) -> LoopDev {
        let dir = tempfile::Builder::new()
            .prefix(&name_prefix())
            .tempdir_in("/var/tmp")
            .expect("tempdir in /var/tmp");
        let backing = dir.path().join("backing.img");
        fill(&backing, size);
        {
            use std::io::Write;
            let mut f = fs::OpenOptions::new()
                .write(true)
                .open(&backing)
                .expect("open backing file");
            f.write_all(&dos_partition_table(parts))
                .expect("write the partition table");
            f.sync_all().expect("sync backing file");
        }
        let mut dev = LoopDev::over_file(&backing, &["--direct-io=on", "--partscan"]);
        dev._dir = Some(dir);
        let status = Command::new("partx")
            .arg("--add")
            .arg(&dev.path)
            .status()
            .expect("run partx");
        assert!(status.success(), "partx --add {}", dev.path.display());
        dev
    }

    /// `/dev/loopNpK`, once its device node exists (up to 10 s).
    pub fn partition(&self, k: u32) -> PathBuf {
        let path = PathBuf::from(format!("/dev/{}p{k}", self.name));
        crate::common::wait_for(
            &format!("{} to appear", path.display()),
            std::time::Duration::from_secs(10),
            || path.exists(),
        );
        path
    }

    /// A tmpfs-backed loop device that may have partitions (`--partscan`).
    pub fn tmpfs_partitionable(size: u64) -> LoopDev {
        LoopDev::create(
            tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm"),
            size,
            &["--partscan"],
        )
    }

    /// A tmpfs-backed loop device with a logical sector size of `sector` bytes.
    pub fn tmpfs_sector(size: u64, sector: u32) -> LoopDev {
        let s = sector.to_string();
        LoopDev::create(
            tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm"),
            size,
            &["--sector-size", &s],
        )
    }

    /// A loop device over a file on tmpfs, at `/dev/loop<number>` (created for it; see
    /// [`free_loop_numbers`]): rules in discovery tests match it by that name, before it exists.
    pub fn tmpfs_at(number: u32, size: u64) -> LoopDev {
        let node = format!("/dev/loop{number}");
        LoopDev::create(
            tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm"),
            size,
            &[&node],
        )
    }

    fn create(dir: tempfile::TempDir, size: u64, extra: &[&str]) -> LoopDev {
        let backing = dir.path().join("backing.img");
        fill(&backing, size);
        let mut dev = LoopDev::over_file(&backing, extra);
        dev._dir = Some(dir);
        dev
    }

    /// A read-only loop device over an existing file (for example one a test's FUSE server
    /// serves), buffered (no `--direct-io`).
    pub fn read_only_over(file: &Path) -> LoopDev {
        LoopDev::over_file(file, &["-r"])
    }

    /// A loop device over an existing file the test made (e.g. one served by a test's FUSE
    /// filesystem), with `losetup` options `extra`: at the device node named in `extra`, or else
    /// at a number of its own ([`free_loop_numbers`]), never at the first free one that
    /// `losetup --find` would hand out, which may be a device another test has just detached
    /// and is about to attach again.
    pub fn over_file(backing: &Path, extra: &[&str]) -> LoopDev {
        let named = extra.iter().any(|a| a.starts_with("/dev/loop"));
        let own = (!named).then(|| format!("/dev/loop{}", free_loop_numbers(1)));
        let out = Command::new("losetup")
            .arg("--show")
            .args(own.as_slice())
            .args(extra)
            .arg(backing)
            .output()
            .expect("run losetup");
        assert!(
            out.status.success(),
            "losetup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let name = path
            .file_name()
            .expect("loop device name")
            .to_string_lossy()
            .into_owned();
        let dev = fs::read_to_string(format!("/sys/block/{name}/dev")).expect("sysfs dev");
        let (major, minor) = dev.trim().split_once(':').expect("MAJ:MIN");
        LoopDev {
            path,
            name,
            major: major.parse().expect("major"),
            minor: minor.parse().expect("minor"),
            backing: backing.to_owned(),
            numbered: true,
            attached: true,
            _dir: None,
        }
    }

    /// `losetup -d` (the kernel detaches once the last opener closes it), then, for a device
    /// created at a chosen number, removes the device as soon as it is free.
    pub fn detach(&mut self) {
        let status = Command::new("losetup")
            .arg("-d")
            .arg(&self.path)
            .status()
            .expect("run losetup -d");
        assert!(status.success(), "losetup -d {}", self.path.display());
        self.attached = false;
        if self.numbered {
            self.remove_node();
        }
    }

    /// `losetup -d`, leaving the device node in place for another file to be attached at (as
    /// `losetup -d` does outside the tests): the device that is attached there next owns it.
    pub fn detach_keeping_node(&mut self) {
        let status = Command::new("losetup")
            .arg("-d")
            .arg(&self.path)
            .status()
            .expect("run losetup -d");
        assert!(status.success(), "losetup -d {}", self.path.display());
        self.attached = false;
        self.numbered = false;
    }

    /// `LOOP_CTL_REMOVE`, retried while the device is still open (busy), for up to 20 s.
    fn remove_node(&mut self) {
        const LOOP_CTL_REMOVE: libc::c_ulong = 0x4C81;
        let Ok(control) = fs::File::open("/dev/loop-control") else {
            eprintln!(
                "warning: cannot open /dev/loop-control to remove {}",
                self.name
            );
            return;
        };
        // `Err` while busy (to retry), `Ok` once done: removed, or failed for another reason.
        let removed = crate::common::wait::poll(
            std::time::Duration::from_secs(20),
            std::time::Duration::from_millis(10),
            || {
                use std::os::fd::AsRawFd;
                // SAFETY: LOOP_CTL_REMOVE takes the device number by value; the descriptor is
                // open.
                let rc = unsafe {
                    libc::ioctl(
                        control.as_raw_fd(),
                        LOOP_CTL_REMOVE as _,
                        libc::c_long::from(self.minor),
                    )
                };
                let err = std::io::Error::last_os_error();
                match rc {
                    0 => Ok(Ok(())),
                    _ if err.raw_os_error() == Some(libc::EBUSY) => Err(err),
                    _ => Ok(Err(err)),
                }
            },
        );
        match removed {
            Ok(Ok(())) => self.numbered = false,
            Ok(Err(err)) | Err(err) => eprintln!("warning: could not remove {}: {err}", self.name),
        }
    }

    /// `MAJ:MIN`.
    pub fn majmin(&self) -> String {
        format!("{}:{}", self.major, self.minor)
    }

    /// This device's `/proc/diskstats` counters.
    pub fn stats(&self) -> Stats {
        let text = fs::read_to_string("/proc/diskstats").expect("read /proc/diskstats");
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && f[2] == self.name {
                let n = |i: usize| f[i].parse::<u64>().expect("diskstats number");
                return Stats {
                    reads: n(3),
                    read_merges: n(4),
                    read_sectors: n(5),
                    read_time_ms: n(6),
                    writes: n(7),
                    write_merges: n(8),
                    write_sectors: n(9),
                    flushes: if f.len() > 18 { n(18) } else { 0 },
                };
            }
        }
        panic!("{} not in /proc/diskstats", self.name);
    }

    /// The whole content of the device, read through the backing file.
    pub fn content(&self) -> Vec<u8> {
        fs::read(&self.backing).expect("read backing file")
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        if self.attached {
            let status = Command::new("losetup").arg("-d").arg(&self.path).status();
            if !matches!(status, Ok(s) if s.success()) {
                eprintln!("warning: could not detach {}", self.path.display());
            }
        }
        if self.numbered {
            self.remove_node();
        }
    }
}

/// The first of `count` consecutive loop device numbers that no device uses, from a range far
/// above those `losetup --find` hands out (which starts at 0), chosen by process ID so that
/// test processes running at the same time do not pick the same. Numbers are handed out once
/// per process: every loop device of the tests is made at one ([`LoopDev::over_file`]), so no
/// test is handed a device another test detached.
pub fn free_loop_numbers(count: u32) -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = 4000 + (std::process::id() % 500) * 8;
    loop {
        let first = base + NEXT.fetch_add(count, Ordering::Relaxed);
        assert!(first + count < 9000, "no free loop device numbers left");
        let free =
            (first..first + count).all(|n| !Path::new(&format!("/sys/block/loop{n}")).exists());
        if free {
            return first;
        }
    }
}

/// A cgroup v1 blkio group, removed on drop (after moving anything left in it to the root group).
pub struct BlkioGroup {
    /// The cgroup directory.
    pub dir: PathBuf,
}

static GROUPS: AtomicU32 = AtomicU32::new(0);

impl BlkioGroup {
    /// Creates a uniquely named group.
    pub fn new() -> BlkioGroup {
        let dir = PathBuf::from(format!(
            "/sys/fs/cgroup/blkio/{}-{}-{}",
            name_prefix(),
            std::process::id(),
            GROUPS.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir(&dir).expect("create blkio cgroup");
        BlkioGroup { dir }
    }

    /// Writes `"MAJ:MIN value"` to the group's `blkio.throttle.<knob>` for `dev` (0 lifts the cap
    /// and lets what is queued through).
    pub fn set_throttle(&self, knob: &str, dev: &LoopDev, value: u64) -> std::io::Result<()> {
        fs::write(
            self.dir.join(format!("blkio.throttle.{knob}")),
            format!("{} {value}", dev.majmin()),
        )
    }

    /// The processes in the group.
    pub fn pids(&self) -> Vec<u32> {
        fs::read_to_string(self.dir.join("cgroup.procs"))
            .expect("read cgroup.procs")
            .split_whitespace()
            .map(|p| p.parse().expect("a PID"))
            .collect()
    }

    /// Caps reads of `dev` at `iops` per second for the group.
    pub fn throttle_read_iops(&self, dev: &LoopDev, iops: u32) {
        self.set_throttle("read_iops_device", dev, iops.into())
            .expect("set blkio.throttle.read_iops_device");
    }

    /// Caps read bandwidth from `dev` at `bps` bytes per second for the group.
    pub fn throttle_read_bps(&self, dev: &LoopDev, bps: u64) {
        self.set_throttle("read_bps_device", dev, bps)
            .expect("set blkio.throttle.read_bps_device");
    }

    /// Caps write bandwidth to `dev` at `bps` bytes per second for the group.
    pub fn throttle_write_bps(&self, dev: &LoopDev, bps: u64) {
        self.set_throttle("write_bps_device", dev, bps)
            .expect("set blkio.throttle.write_bps_device");
    }

    /// The one-shot `probe ARGS --format json` of the binary under test, run inside the group
    /// to its end: the runs it printed ([`crate::common::one_shot_runs`]).
    pub fn one_shot(&self, args: &[&str]) -> Vec<serde_json::Value> {
        let out = self
            .command(
                &crate::common::binary(),
                &crate::common::one_shot_args(args),
            )
            .output()
            .expect("run the one-shot probe in the cgroup");
        crate::common::one_shot_runs(&out)
    }

    /// A command that runs `program args` inside the group from its first instruction.
    pub fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!(
                "echo $$ > '{}' && exec \"$0\" \"$@\"",
                self.dir.join("cgroup.procs").display()
            ))
            .arg(program)
            .args(args);
        cmd
    }
}

impl Drop for BlkioGroup {
    fn drop(&mut self) {
        if let Ok(procs) = fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.split_whitespace() {
                let _ = fs::write("/sys/fs/cgroup/blkio/cgroup.procs", pid);
            }
        }
        if let Err(err) = fs::remove_dir(&self.dir) {
            eprintln!("warning: could not remove {}: {err}", self.dir.display());
        }
    }
}

/// A filesystem mounted by a test (on a loop device it created, or a ramfs), unmounted on drop.
pub struct Mount {
    dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl Mount {
    /// `mount ARGS <new directory under /var/tmp>`.
    pub fn new(args: &[&str]) -> Mount {
        let temp = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut mount = Mount::at(args, temp.path());
        mount._temp = Some(temp);
        mount
    }

    /// `mount ARGS DIR`, on a directory the test created (created here when missing).
    pub fn at(args: &[&str], dir: &Path) -> Mount {
        fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount").args(args).arg(dir).status().unwrap();
        assert!(status.success(), "mount {args:?} {} failed", dir.display());
        Mount {
            dir: dir.to_owned(),
            _temp: None,
        }
    }

    /// A mount the test made on `dir` itself (a directory of its own), unmounted on drop.
    pub fn adopt(dir: tempfile::TempDir) -> Mount {
        Mount {
            dir: dir.path().to_owned(),
            _temp: Some(dir),
        }
    }

    /// The mountpoint.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // A test that failed may have just killed an agent whose I/O is still draining: the
        // filesystem can be busy for a moment.
        let unmounted = crate::common::wait::poll(
            std::time::Duration::from_secs(5),
            std::time::Duration::from_millis(100),
            || {
                let done = Command::new("umount")
                    .arg(&self.dir)
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if done { Ok(()) } else { Err(()) }
            },
        );
        if unmounted.is_err() {
            eprintln!("warning: could not unmount {}", self.dir.display());
        }
    }
}

/// Makes a filesystem of type `fstype` (`mkfs.<fstype>`, forced and quiet) on a test's device.
pub fn mkfs(dev: &LoopDev, fstype: &str) {
    let force = if fstype == "btrfs" { "-f" } else { "-F" };
    let status = Command::new(format!("mkfs.{fstype}"))
        .args(["-q", force])
        .arg(&dev.path)
        .status()
        .unwrap_or_else(|err| panic!("run mkfs.{fstype}: {err}"));
    assert!(status.success(), "mkfs.{fstype} failed");
}
