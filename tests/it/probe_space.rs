//! Space is checked before it is taken: a probe-file size beyond its filesystem is reported by
//! `--config.check` (a warning: the machine's state), and on a small real filesystem (a tmpfs
//! this test mounts) a fill that would not leave the reserve free (10%, or min_free where that
//! is more), or that runs out of space, leaves the filesystem as it was.

use crate::common;
use diskprobe_exporter::probe::io_target::{self, TargetError, TargetOptions};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn config_check_reports_a_size_beyond_the_filesystem() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("c.toml");
    let probe = tmp.path().join("probe.dat");
    let text = format!(
        "[[targets]]\nname = \"a\"\npath = {:?}\nsize = \"1EiB\"\n",
        probe.display().to_string()
    );
    std::fs::write(&config, text).unwrap();
    let out = Command::new(common::binary())
        .arg("--config.check")
        .arg(format!("--config.file={}", config.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The machine's state, not the configuration's: a warning, and the check exits 1 (valid,
    // but the machine refuses the target now).
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let expected = format!(
        "warning: {}:4:8: targets[0].size: size 1152921504606846976 bytes is beyond the size of its filesystem",
        config.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(!probe.exists());
}

/// A tmpfs of `mib` MiB mounted on a fresh directory, unmounted when dropped.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    fn mount(mib: u64) -> Option<SmallFs> {
        if !common::require(common::is_root(), "root (to mount a tmpfs)") {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        common::require(ok, "mount -t tmpfs").then_some(SmallFs { dir })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Names and sizes of the files in it, and its free space (`df`'s figure).
    fn state(&self) -> (Vec<(String, u64)>, u64) {
        let mut files: Vec<(String, u64)> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                (name, e.metadata().unwrap().len())
            })
            .collect();
        files.sort();
        (files, free_bytes(self.dir.path()))
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn free_bytes(dir: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().nth(1).unwrap().trim().parse().unwrap()
}

/// Writes a file of random-ish data at `path` until the filesystem is full (or `limit` bytes).
fn fill_up(path: &Path, limit: u64) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0x5au8; 64 << 10];
    let mut written = 0;
    while written < limit {
        match f.write_all(&chunk) {
            Ok(()) => written += chunk.len() as u64,
            Err(_) => break,
        }
    }
    let _ = f.sync_all();
}

fn opts(size: u64) -> TargetOptions {
    TargetOptions {
        size: Some(size),
        offset: 0,
        write: false,
        rewrite: true,
        device_writes: false,
        min_free: 0,
        procfs: PathBuf::from("/proc"),
        sysfs: PathBuf::from("/sys"),
        devfs: PathBuf::from("/dev"),
        pinned: None,
        confined: false,
        filesystem: Default::default(),
    }
}

fn a_full_filesystem_is_left_as_it_was_found() {
    let Some(fs) = SmallFs::mount(8) else { return };
    let probe = fs.path("probe.dat");
    // Beyond the filesystem: refused before anything is written.
    let before = fs.state();
    let err = io_target::open(&probe, &opts(16 << 20)).unwrap_err();
    assert!(matches!(err, TargetError::NoSpace { .. }), "{err}");
    assert_eq!(fs.state(), before);
    // A filesystem with 2 MiB free: a 2 MiB file would leave less than the 10% reserve.
    fill_up(&fs.path("filler"), 6 << 20);
    let before = fs.state();
    let err = io_target::open(&probe, &opts(2 << 20)).unwrap_err();
    assert!(
        err.to_string()
            .contains("(the larger of 10% of the filesystem and min_free)"),
        "{err}"
    );
    assert_eq!(fs.state(), before, "nothing written, nothing left behind");
    std::fs::remove_file(fs.path("filler")).unwrap();
    // A fill that another writer runs out of space: what it wrote is removed, and the same fill
    // is not tried again while the space is not back.
    let before = fs.state();
    let other = fs.path("other");
    let first_chunk = || {
        if !other.exists() {
            fill_up(&other, u64::MAX);
        }
        true
    };
    let err = match io_target::open_reporting(&probe, &opts(4 << 20), &first_chunk) {
        Err(TargetError::NoDirectIo { .. }) => {
            common::require(false, "O_DIRECT on tmpfs");
            return;
        }
        Err(err) => err,
        Ok(_) => panic!("the fill did not run out of space"),
    };
    assert!(err.to_string().contains("No space left"), "{err}");
    assert!(!probe.exists(), "what the fill wrote is removed");
    // Its space is back once the last descriptor of the removed file is closed: the fill's own is
    // closed by now, but a child that another test forks meanwhile holds a copy until it execs.
    let other_len = std::fs::metadata(&other).unwrap().len();
    let with_other = (vec![("other".to_owned(), other_len)], before.1 - other_len);
    let seen = common::wait::poll(Duration::from_secs(5), Duration::from_millis(10), || {
        let now = fs.state();
        if now == with_other { Ok(()) } else { Err(now) }
    });
    assert_eq!(seen, Ok(()), "the fill's space is back: {with_other:?}");
    let err = io_target::open_reporting(&probe, &opts(4 << 20), &|| panic!("no fill")).unwrap_err();
    assert!(matches!(err, TargetError::NoSpace { .. }), "{err}");
    assert_eq!(
        fs.state(),
        with_other,
        "the full filesystem is left as it was"
    );
    // The space comes back: the fill is tried again and succeeds.
    std::fs::remove_file(&other).unwrap();
    assert_eq!(fs.state(), before);
    let t = io_target::open(&probe, &opts(4 << 20)).unwrap();
    assert_eq!(t.region_len, 4 << 20);
}

fn a_fill_leaves_min_free_free_where_it_is_more_than_the_10_percent() {
    let Some(fs) = SmallFs::mount(8) else { return };
    let probe = fs.path("probe.dat");
    let before = fs.state();
    // min_free beyond the 10%: 1 MiB of an empty 8 MiB filesystem would leave 7 MiB, less than
    // a min_free of 7.5 MiB; with 6 MiB it is filled.
    let err = io_target::open(
        &probe,
        &TargetOptions {
            min_free: 15 << 19,
            ..opts(1 << 20)
        },
    )
    .unwrap_err();
    assert!(matches!(err, TargetError::NoSpace { .. }), "{err}");
    assert_eq!(fs.state(), before);
    let filled = io_target::open(
        &probe,
        &TargetOptions {
            min_free: 6 << 20,
            ..opts(1 << 20)
        },
    );
    assert!(filled.is_ok(), "{filled:?}");
    drop(filled);
    assert_eq!(common::file_len(&probe), 1 << 20);
}

crate::tests! {
    config_check_reports_a_size_beyond_the_filesystem,
    a_full_filesystem_is_left_as_it_was_found,
    a_fill_leaves_min_free_free_where_it_is_more_than_the_10_percent,
}
