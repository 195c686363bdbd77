//! Probe files as the running agent treats them (docs/probes.md, "The mark"; docs/deployment.md,
//! Safety): only files the agent made are ever rewritten, and a probe file is made only on the
//! filesystem it was meant for.
//!
//! - A file whose `user.diskprobe_exporter` attribute holds a value the agent never writes keeps
//!   every byte (and its size and attribute) under a read-only target.
//! - A probe file the agent made is reused, not refilled, across a restart, and across the
//!   upgrade of a mark an earlier version wrote (reused as it is by a read-only target, bound to
//!   the file by one that may write it).
//! - A mount rule's volume unmounted between rescans: its runs are skipped
//!   (`reason="wrong_filesystem"`) and no probe file appears in the bare mountpoint.
//! - A configured target restarted while its data filesystem is unmounted: skipped the same,
//!   nothing made in the bare directory, its labels kept.
//! - A target that declares its `mountpoint` makes no file before a filesystem is mounted there,
//!   and is probed once one is (after a restart where Landlock confines the agent, which says
//!   so: its rules name the directories as they were at start).
//!
//! Files live in directories of the test's own under /var/tmp (the root filesystem: O_DIRECT
//! and user extended attributes).

use crate::common;
use crate::common::loopdev;

use common::{Agent, Metrics, runs, wait_until};
use loopdev::{LoopDev, Mount, mkfs};
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

/// 100 ms runs every second, without busy skip or yield.
const DEFAULTS: &str = "[defaults]\ninterval = \"1s\"\nruntime = \"100ms\"\ntimeout = \"300ms\"\n\
                        jitter = 0.0\nmax_duty_cycle = 0.5\nskip_busy_above = {}\n\
                        yield_to_other_io = false\n";

const ATTRIBUTE: &std::ffi::CStr = c"user.diskprobe_exporter";

/// A directory of the test's own under /var/tmp: its files, configuration and state.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("diskprobe-probe-files-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// The agent's flags for `config` (after [`DEFAULTS`]), its state in the workspace.
fn flags(ws: &Path, config: &str) -> [String; 2] {
    [
        common::config_flag(ws, &format!("{DEFAULTS}{config}")),
        format!("--state.dir={}", ws.join("state").display()),
    ]
}

fn start(flags: &[String; 2]) -> Agent {
    Agent::start(&[&flags[0], &flags[1]])
}

/// The value of the owner attribute of `path`, if any.
fn mark(path: &Path) -> Option<Vec<u8>> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut buf = [0u8; 256];
    // SAFETY: `c` and the attribute name are NUL-terminated; `buf` is writable for its length.
    let n = unsafe {
        libc::getxattr(
            c.as_ptr(),
            ATTRIBUTE.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 0).then(|| buf[..n as usize].to_vec())
}

/// Sets the owner attribute of `path` to `value`.
fn set_mark(path: &Path, value: &[u8]) {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` and the attribute name are NUL-terminated; `value` is readable for its length.
    let rc = unsafe {
        libc::setxattr(
            c.as_ptr(),
            ATTRIBUTE.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(rc, 0, "setxattr {}", path.display());
}

fn hash(path: &Path) -> (u64, u64) {
    let bytes = std::fs::read(path).unwrap();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    (bytes.len() as u64, h.finish())
}

fn a_file_with_a_foreign_mark_keeps_every_byte_under_a_read_only_target() {
    let _guard = common::shared();
    let ws = workspace();
    let file = ws.path().join("data.bin");
    let mut random = std::fs::File::open("/dev/urandom").unwrap().take(8 << 20);
    let mut out = std::fs::File::create(&file).unwrap();
    std::io::copy(&mut random, &mut out).unwrap();
    drop(out);
    // A value of the attribute the agent never writes (a copy, a backup, another tool).
    set_mark(&file, b"x");
    let before = hash(&file);
    let flags = flags(
        ws.path(),
        &format!(
            "[[targets]]\nname = \"data\"\npath = \"{}\"\nprofiles = [\"randread-4k-qd1\"]\n",
            file.display()
        ),
    );
    let agent = start(&flags);
    wait_until(&agent, Duration::from_secs(30), "two runs", |m| {
        runs(m, "data", "success") + runs(m, "data", "error") >= 2.0
    });
    drop(agent);
    assert_eq!(hash(&file), before, "the file changed");
    assert_eq!(mark(&file).as_deref(), Some(&b"x"[..]));
}

fn a_probe_file_is_reused_across_a_restart_and_an_upgrade_of_its_mark() {
    let _guard = common::shared();
    let ws = workspace();
    let file = ws.path().join("probe.dat");
    let target = |profiles: &str, writes: bool| {
        format!(
            "[[targets]]\nname = \"data\"\npath = \"{}\"\nsize = \"4MiB\"\nprofiles = [{profiles}]\n{}",
            file.display(),
            if writes { "allow_writes = true\n" } else { "" }
        )
    };
    let reader = flags(ws.path(), &target("\"randread-4k-qd1\"", false));
    let run_once = |flags: &[String; 2]| {
        let agent = start(flags);
        wait_until(&agent, Duration::from_secs(30), "a run", |m| {
            runs(m, "data", "success") >= 1.0
        });
        agent
    };
    // Made: filled with random data, and marked as the agent's, bound to the file.
    drop(run_once(&reader));
    let made = hash(&file);
    assert_eq!(made.0, 4 << 20);
    let bound = mark(&file).unwrap();
    assert!(
        bound.starts_with(b"diskprobe_exporter v2 complete size=4194304 ino="),
        "{}",
        String::from_utf8_lossy(&bound)
    );
    // Restarted: the same file, not refilled.
    let agent = run_once(&reader);
    assert!(!agent.wait_log("refilling", Duration::ZERO));
    drop(agent);
    assert_eq!(hash(&file), made, "refilled at a restart");
    assert_eq!(mark(&file), Some(bound));

    // As an earlier version left it: its mark then. A reader reuses it as it is.
    set_mark(&file, b"probe-file v1 size=4194304");
    drop(run_once(&reader));
    assert_eq!(hash(&file), made, "refilled by a reader");
    assert_eq!(
        mark(&file).as_deref(),
        Some(&b"probe-file v1 size=4194304"[..])
    );
    // A target that may write it binds the mark to the file, and does not refill it.
    let writer = flags(
        ws.path(),
        &target("\"randread-4k-qd1\", \"randwrite-4k-qd1\"", true),
    );
    let agent = run_once(&writer);
    agent.expect_log("its mark is bound to it", Duration::from_secs(5));
    assert!(!agent.wait_log("refilling", Duration::ZERO));
    drop(agent);
    let rebound = mark(&file).unwrap();
    assert!(
        rebound.starts_with(b"diskprobe_exporter v2 complete size=4194304 ino="),
        "{}",
        String::from_utf8_lossy(&rebound)
    );
}

/// Runs of `target` that were tried (succeeded, failed or skipped).
fn tried(m: &Metrics, target: &str) -> f64 {
    ["success", "error", "skipped"]
        .iter()
        .map(|r| runs(m, target, r))
        .sum()
}

/// Whether `target`'s runs were skipped for a path on another filesystem than its own.
fn skipped_elsewhere(m: &Metrics, target: &str) -> bool {
    common::sum(
        m,
        "diskprobe_probe_last_skip_timestamp_seconds",
        &[
            &format!("target=\"{target}\""),
            "reason=\"wrong_filesystem\"",
        ],
    ) > 0.0
}

/// The entries of directory `dir`.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Unmounts `mount` (dropping it), retrying while a run holds a file open there.
fn unmount(mount: Mount) {
    let dir = mount.path().to_owned();
    drop(mount);
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .contains(&format!(" {} ", dir.display()));
    assert!(!mounted, "{} is still mounted", dir.display());
}

fn a_mount_rules_volume_unmounted_between_rescans_gets_no_probe_file_in_its_mountpoint() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    let ws = workspace();
    let dev = LoopDev::tmpfs(32 << 20);
    mkfs(&dev, "ext4");
    let mountpoint = ws.path().join("vol-alpha");
    let volume = Mount::at(&[dev.path.to_str().unwrap()], &mountpoint);
    // Rescans an hour apart: every run until then takes the volume to be where it was found.
    // A TOML literal string: the regex as it is.
    let pattern = format!(
        "^{}/vol-(\\w+)$",
        regex::escape(&ws.path().display().to_string())
    );
    let flags = flags(
        ws.path(),
        &format!(
            "[[discover]]\nid = \"files\"\nkind = \"mount\"\nmountpoint_include = '{pattern}'\n\
             fstype_include = \"^ext4$\"\nname = \"pv-$1\"\nfile = \"diskprobe.dat\"\nsize = \"4MiB\"\n\
             rescan = \"1h\"\nprofiles = [\"randread-4k-qd1\"]\n"
        ),
    );
    let agent = start(&flags);
    wait_until(
        &agent,
        Duration::from_secs(30),
        "a run in the volume",
        |m| runs(m, "pv-alpha", "success") >= 1.0,
    );
    assert!(entries(&mountpoint).contains(&"diskprobe.dat".to_owned()));

    unmount(volume);
    assert!(entries(&mountpoint).is_empty(), "a bare mountpoint");
    let start = tried(&common::scrape(&agent), "pv-alpha");
    let m = wait_until(&agent, Duration::from_secs(30), "three runs", |m| {
        tried(m, "pv-alpha") >= start + 3.0
    });
    assert!(
        entries(&mountpoint).is_empty(),
        "a probe file was made in the bare mountpoint: {:?}",
        entries(&mountpoint)
    );
    assert!(skipped_elsewhere(&m, "pv-alpha"), "{m:?}");
    agent.expect_log(
        "no probe file is made or opened there: it is on",
        Duration::from_secs(5),
    );
    drop(agent);
}

fn a_configured_target_restarted_with_its_filesystem_unmounted_makes_no_file() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    let ws = workspace();
    let dev = LoopDev::tmpfs(32 << 20);
    mkfs(&dev, "ext4");
    let data = ws.path().join("data");
    let volume = Mount::at(&[dev.path.to_str().unwrap()], &data);
    let flags = flags(
        ws.path(),
        &format!(
            "[[targets]]\nname = \"data\"\npath = \"{}\"\nsize = \"4MiB\"\nprofiles = [\"randread-4k-qd1\"]\n",
            data.join("probe.dat").display(),
        ),
    );
    let agent = start(&flags);
    let m = wait_until(
        &agent,
        Duration::from_secs(30),
        "a run on the filesystem",
        |m| runs(m, "data", "success") >= 1.0,
    );
    let info = |m: &Metrics| {
        m.keys()
            .find(|k| k.starts_with("diskprobe_target_info{target=\"data\""))
            .cloned()
    };
    let labels = info(&m).unwrap();
    assert!(
        labels.contains(&format!("device=\"{}\"", dev.name)),
        "{labels}"
    );
    drop(agent);

    // Restarted while its filesystem is unmounted.
    unmount(volume);
    let agent = start(&flags);
    let m = wait_until(&agent, Duration::from_secs(30), "three runs", |m| {
        tried(m, "data") >= 3.0
    });
    assert!(
        entries(&data).is_empty(),
        "a probe file was made on the root filesystem: {:?}",
        entries(&data)
    );
    assert!(skipped_elsewhere(&m, "data"), "{m:?}");
    assert_eq!(info(&m), Some(labels), "the labels of its own filesystem");
    drop(agent);
}

fn a_target_that_declares_its_mountpoint_makes_no_file_before_its_filesystem_is_there() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    let ws = workspace();
    let dir = ws.path().join("declared");
    std::fs::create_dir(&dir).unwrap();
    let flags = flags(
        ws.path(),
        &format!(
            "[[targets]]\nname = \"declared\"\npath = \"{}\"\nsize = \"4MiB\"\nprofiles = [\"randread-4k-qd1\"]\n\
             mountpoint = \"{}\"\n",
            dir.join("probe.dat").display(),
            dir.display()
        ),
    );
    // Nothing mounted there yet (a volume mounted after the agent starts).
    let agent = start(&flags);
    let m = wait_until(&agent, Duration::from_secs(30), "two runs", |m| {
        tried(m, "declared") >= 2.0
    });
    assert!(skipped_elsewhere(&m, "declared"), "{m:?}");
    assert!(entries(&dir).is_empty(), "{:?}", entries(&dir));
    // Mounted: probed there, once the agent may create files there. Confined by Landlock, it
    // may only in the directories it started with, and a filesystem mounted since hides that
    // one: it says so, and a restart lets it.
    let dev = LoopDev::tmpfs(32 << 20);
    mkfs(&dev, "ext4");
    let volume = Mount::at(&[dev.path.to_str().unwrap()], &dir);
    let agent = if common::sum(&m, "diskprobe_sandbox_info", &["enforced=\"full\""]) == 1.0 {
        agent.expect_log(
            "Landlock sandbox: its directory is not one the agent may create files in",
            Duration::from_secs(30),
        );
        drop(agent);
        start(&flags)
    } else {
        agent
    };
    wait_until(&agent, Duration::from_secs(30), "a run on it", |m| {
        runs(m, "declared", "success") >= 1.0
    });
    assert!(entries(&dir).contains(&"probe.dat".to_owned()));
    drop(agent);
    unmount(volume);
    assert!(entries(&dir).is_empty(), "nothing under the mount");
}

crate::tests! {
    a_file_with_a_foreign_mark_keeps_every_byte_under_a_read_only_target,
    a_probe_file_is_reused_across_a_restart_and_an_upgrade_of_its_mark,
    a_mount_rules_volume_unmounted_between_rescans_gets_no_probe_file_in_its_mountpoint: [LOOP],
    a_configured_target_restarted_with_its_filesystem_unmounted_makes_no_file: [LOOP],
    a_target_that_declares_its_mountpoint_makes_no_file_before_its_filesystem_is_there: [LOOP],
}
