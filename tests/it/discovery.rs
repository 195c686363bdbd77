//! Discovery for real: the agent running with `[[discover]]` rules while the test attaches loop
//! devices, mounts filesystems on them and a hung FUSE filesystem, and takes them away again.
//!
//! Every rule here matches only what its own test created: block rules name loop devices the test
//! creates at numbers of its choosing (far from those `losetup --find` hands out to other tests),
//! mount rules match mountpoints under a directory of the test's own.

use crate::common;
use crate::common::fuse;
use crate::common::loopdev;

use common::wait::poll;
use common::{Agent, Metrics, runs, scrape_timed, shared, tree, wait_until};
use fuse::HungFuse;
use loopdev::{LoopDev, Mount, free_loop_numbers, mkfs};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Probe settings shared by every test: 100 ms read runs every second, without busy skip or yield
/// (these tests are about discovery, on devices nothing else uses), rescans every second.
const DEFAULTS: &str = "[defaults]\ninterval = \"1s\"\nruntime = \"100ms\"\ntimeout = \"300ms\"\n\
                        jitter = 0.0\nmax_duty_cycle = 0.5\nprofiles = [\"randread-4k-qd1\"]\n\
                        skip_busy_above = {}\nyield_to_other_io = false\n";

/// A directory of the test's own under /var/tmp, readable by all, holding its configuration and
/// its mountpoints.
struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    fn new() -> Workspace {
        let dir = tempfile::Builder::new()
            .prefix("diskprobe-discovery-")
            .tempdir_in("/var/tmp")
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Workspace { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A regex matching `<workspace>/<prefix>(\w+)` exactly, escaped for a TOML string.
    fn mountpoints(&self, prefix: &str) -> String {
        let re = format!(
            "^{}/{prefix}(\\w+)$",
            regex::escape(&self.path().display().to_string())
        );
        re.replace('\\', "\\\\")
    }

    /// Writes the configuration and returns its `--config.file` flag.
    fn config(&self, text: &str) -> String {
        let path = self.path().join("config.toml");
        std::fs::write(&path, format!("{DEFAULTS}{text}")).unwrap();
        format!("--config.file={}", path.display())
    }
}

/// Whether any series of the scrape is about `target`, other than the one that reports it lost.
fn has_target(m: &Metrics, target: &str) -> bool {
    let label = format!("target=\"{target}\"");
    m.keys().any(|k| {
        k.contains(&label) && !k.starts_with("diskprobe_discovered_target_lost_timestamp_seconds{")
    })
}

/// The `diskprobe_target_info` series of `target`.
fn target_info(m: &Metrics, target: &str) -> String {
    let label = format!("target=\"{target}\"");
    m.keys()
        .find(|k| k.starts_with("diskprobe_target_info{") && k.contains(&label))
        .unwrap_or_else(|| panic!("no diskprobe_target_info for {target}: {m:?}"))
        .clone()
}

fn gauge(m: &Metrics, name: &str, rule: &str) -> Option<f64> {
    m.get(&format!("{name}{{rule=\"{rule}\"}}")).copied()
}

/// Writes and content of the device: what a read-only probe must leave as they are.
fn untouched_state(dev: &LoopDev) -> (u64, Vec<u8>) {
    (dev.stats().writes, dev.content())
}

/// A read-only bind mount of /dev in the workspace (checked read-only before it is used: the
/// workspace is removed recursively after the test).
fn read_only_dev(ws: &Workspace) -> Mount {
    let mount = Mount::at(&["--bind", "-o", "ro", "/dev"], &ws.path().join("host-dev"));
    let c = std::ffi::CString::new(mount.path().as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` a live, writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    assert_eq!(rc, 0, "statvfs {}", mount.path().display());
    assert_ne!(
        st.f_flag & libc::ST_RDONLY,
        0,
        "the bind mount of /dev is not read-only"
    );
    mount
}

fn a_disk_attached_after_start_up_is_probed_read_only_and_leaves_when_detached() {
    if !loopdev::ready() {
        return;
    }
    // Exclusive: once detached, its number must not go to another test's loop device.
    let _guard = common::exclusive();
    let ws = Workspace::new();
    let n = free_loop_numbers(1);
    let arg = ws.config(&format!(
        "[[discover]]\nid = \"disks\"\nkind = \"block\"\ndevice_include = \"^loop{n}$\"\n\
         name = \"disk-{{kname}}\"\nrescan = \"1s\"\n"
    ));
    // As in the discovery DaemonSet: the host's /dev, read-only, elsewhere (--path.devfs).
    let host_dev = read_only_dev(&ws);
    let agent = Agent::start(&[&arg, &format!("--path.devfs={}", host_dev.path().display())]);
    let target = format!("disk-loop{n}");
    let m = wait_until(&agent, Duration::from_secs(10), "the first rescan", |m| {
        gauge(m, "diskprobe_discovered_targets", "disks").is_some()
    });
    assert_eq!(
        gauge(&m, "diskprobe_discovered_targets", "disks"),
        Some(0.0)
    );
    assert!(!has_target(&m, &target));

    let mut dev = LoopDev::tmpfs_at(n, 16 << 20);
    let before = untouched_state(&dev);
    let attached = Instant::now();
    wait_until(
        &agent,
        Duration::from_secs(30),
        "a probe of the new disk",
        |m| runs(m, &target, "success") >= 1.0,
    );
    eprintln!(
        "first successful probe {:?} after attaching",
        attached.elapsed()
    );
    // Rescans that find it again leave its series and schedule alone: the counters only grow.
    let last = std::cell::Cell::new(0.0);
    let m = wait_until(
        &agent,
        Duration::from_secs(30),
        "three rescans later",
        |m| {
            let now = runs(m, &target, "success");
            let before = last.replace(now);
            assert!(
                now >= before,
                "the counters of {target} were reset: {before} -> {now}"
            );
            now >= 4.0
        },
    );
    assert_eq!(
        target_info(&m, &target),
        format!(
            "diskprobe_target_info{{target=\"{target}\",path=\"{}/loop{n}\",device=\"loop{n}\",parent=\"\",kind=\"block_device\",fstype=\"\",cache=\"page_cache\",rule=\"disks\",cohort=\"\"}}",
            host_dev.path().display()
        )
    );
    assert_eq!(
        gauge(&m, "diskprobe_discovered_targets", "disks"),
        Some(1.0)
    );
    assert_eq!(untouched_state(&dev), before, "a block rule only reads");

    dev.detach();
    let m = wait_until(&agent, Duration::from_secs(30), "the series gone", |m| {
        !has_target(m, &target)
    });
    assert_eq!(
        gauge(&m, "diskprobe_discovered_targets", "disks"),
        Some(0.0)
    );
    // Its disk gone, the block rule reports it lost instead.
    let lost = lost_series(&m);
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(
        lost[0].0.contains(&format!("target=\"{target}\"")),
        "{lost:?}"
    );
    assert_eq!(agent.get("/-/healthy").0, 200);
}

fn an_ext4_mounted_after_start_up_is_probed_through_its_device_once_under_the_mounts_name() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    let ws = Workspace::new();
    let arg = ws.config(&format!(
        "[[discover]]\nid = \"volumes\"\nkind = \"mount\"\nmountpoint_include = \"{}\"\n\
         fstype_include = \"^ext4$\"\nname = \"pv-$1\"\nrescan = \"1s\"\n",
        ws.mountpoints("vol-")
    ));
    let dev = LoopDev::tmpfs(32 << 20);
    mkfs(&dev, "ext4");
    let agent = Agent::start(&[&arg]);
    wait_until(&agent, Duration::from_secs(10), "the first rescan", |m| {
        gauge(m, "diskprobe_discovered_targets", "volumes") == Some(0.0)
    });
    // Read-only mounts, so that nothing but the agent could write to the device. The second
    // mount of the same filesystem is the same volume (two pods sharing a PVC).
    let device = dev.path.to_str().unwrap();
    let alpha = Mount::at(&["-o", "ro", device], &ws.path().join("vol-alpha"));
    let beta = Mount::at(&["-o", "ro", device], &ws.path().join("vol-beta"));
    let before = untouched_state(&dev);
    let m = wait_until(
        &agent,
        Duration::from_secs(30),
        "probes of the volume",
        |m| runs(m, "pv-alpha", "success") >= 3.0,
    );
    assert!(!has_target(&m, "pv-beta"), "one volume, one target");
    assert_eq!(
        gauge(&m, "diskprobe_discovered_targets", "volumes"),
        Some(1.0)
    );
    assert_eq!(
        target_info(&m, "pv-alpha"),
        format!(
            "diskprobe_target_info{{target=\"pv-alpha\",path=\"/dev/{0}\",device=\"{0}\",parent=\"\",kind=\"block_device\",fstype=\"\",cache=\"page_cache\",rule=\"volumes\",cohort=\"\"}}",
            dev.name
        )
    );
    assert!(
        m.contains_key(&format!(
            "diskprobe_probe_success{{target=\"pv-alpha\",profile=\"randread-4k-qd1\",device=\"{}\"}}",
            dev.name
        )),
        "the probe is labelled with the device, joinable with diskstats"
    );
    assert_eq!(untouched_state(&dev), before, "the device is only read");
    agent.expect_log(
        &format!(
            "vol-beta is the same volume as {}/vol-alpha; probed once",
            ws.path().display()
        ),
        Duration::from_secs(1),
    );
    // Unmounting the first mount names the volume after the second; unmounting both removes it.
    drop(alpha);
    wait_until(&agent, Duration::from_secs(30), "the volume renamed", |m| {
        !has_target(m, "pv-alpha") && runs(m, "pv-beta", "success") >= 1.0
    });
    drop(beta);
    let m = wait_until(&agent, Duration::from_secs(30), "the volume gone", |m| {
        !has_target(m, "pv-beta")
    });
    assert_eq!(
        gauge(&m, "diskprobe_discovered_targets", "volumes"),
        Some(0.0)
    );
    assert_eq!(
        lost_series(&m),
        Vec::<(String, f64)>::new(),
        "a mount rule never reports a volume lost"
    );
}

fn a_disk_that_a_mount_rule_probes_is_left_out_of_a_block_rule_with_skip_claimed() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    let ws = Workspace::new();
    let dev = LoopDev::tmpfs(32 << 20);
    mkfs(&dev, "ext4");
    let disk = format!("disk-{}", dev.name);
    let arg = ws.config(&format!(
        "[[discover]]\nid = \"disks\"\nkind = \"block\"\ndevice_include = \"^{}$\"\n\
         name = \"disk-{{kname}}\"\nskip_claimed = true\nrescan = \"1s\"\n\
         [[discover]]\nid = \"volumes\"\nkind = \"mount\"\nmountpoint_include = \"{}\"\n\
         fstype_include = \"^ext4$\"\nname = \"pv-$1\"\nrescan = \"1s\"\n",
        dev.name,
        ws.mountpoints("vol-")
    ));
    let agent = Agent::start(&[&arg]);
    // Unmounted, the disk is the block rule's.
    wait_until(&agent, Duration::from_secs(30), "probes of the disk", |m| {
        runs(m, &disk, "success") >= 1.0
    });
    let device = dev.path.to_str().unwrap();
    let alpha = Mount::at(&["-o", "ro", device], &ws.path().join("vol-alpha"));
    // Mounted where the mount rule looks, it is the volume's only, and not lost to the block rule.
    let m = wait_until(
        &agent,
        Duration::from_secs(30),
        "the volume, not the disk",
        |m| runs(m, "pv-alpha", "success") >= 1.0 && !has_target(m, &disk),
    );
    assert_eq!(
        gauge(&m, "diskprobe_discovered_targets", "disks"),
        Some(0.0)
    );
    assert_eq!(
        gauge(&m, "diskprobe_discovered_targets", "volumes"),
        Some(1.0)
    );
    assert_eq!(
        lost_series(&m),
        Vec::<(String, f64)>::new(),
        "a claimed disk is not lost"
    );
    agent.expect_log(
        &format!(
            "rule disks: /dev/{} is probed by mount rule volumes (as pv-alpha); not probed by this rule (skip_claimed)",
            dev.name
        ),
        Duration::from_secs(1),
    );
    // Unmounted again, the block rule takes it back.
    drop(alpha);
    wait_until(&agent, Duration::from_secs(30), "the disk again", |m| {
        !has_target(m, "pv-alpha") && has_target(m, &disk)
    });
}

/// Every `diskprobe_discovered_target_lost_timestamp_seconds` series, with its value.
fn lost_series(m: &Metrics) -> Vec<(String, f64)> {
    m.iter()
        .filter(|(k, _)| k.starts_with("diskprobe_discovered_target_lost_timestamp_seconds{"))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn a_disk_detached_while_a_block_rule_probes_it_is_reported_lost_across_a_restart() {
    if !loopdev::ready() {
        return;
    }
    // Exclusive: a loop device another test attaches meanwhile could take the detached one's
    // number, and with it the lost disk's name.
    let _guard = common::exclusive();
    let ws = Workspace::new();
    let n = free_loop_numbers(1);
    // A loop device has neither WWN nor serial: the fallback names it after its kernel name.
    let arg = ws.config(&format!(
        "[[discover]]\nid = \"disks\"\nkind = \"block\"\ndevice_include = \"^loop{n}$\"\n\
         name = \"disk-{{wwn|serial|kname}}\"\ncohort = \"loops\"\nrescan = \"1s\"\n\
         lost_retention = \"1h\"\n"
    ));
    let state = ws.path().join("state");
    let state_arg = format!("--state.dir={}", state.display());
    let host_dev = read_only_dev(&ws);
    let devfs = format!("--path.devfs={}", host_dev.path().display());
    let mut agent = Agent::start(&[&arg, &state_arg, &devfs]);
    let target = format!("disk-loop{n}");
    let mut dev = LoopDev::tmpfs_at(n, 16 << 20);
    let m = wait_until(
        &agent,
        Duration::from_secs(30),
        "a probe of the disk",
        |m| runs(m, &target, "success") >= 1.0,
    );
    assert!(target_info(&m, &target).ends_with(",rule=\"disks\",cohort=\"loops\"}"));
    assert_eq!(
        gauge(&m, "diskprobe_discovered_targets_unnamed", "disks"),
        Some(0.0)
    );
    assert!(lost_series(&m).is_empty(), "{:?}", lost_series(&m));

    let detached = unix_now();
    dev.detach();
    // The rescan records it lost, then the scheduler drops its targets: wait for both.
    let m = wait_until(&agent, Duration::from_secs(30), "the disk lost", |m| {
        !lost_series(m).is_empty() && !has_target(m, &target)
    });
    let lost = lost_series(&m);
    let series = format!(
        "diskprobe_discovered_target_lost_timestamp_seconds{{rule=\"disks\",target=\"{target}\",device=\"loop{n}\",model=\"\",serial=\"\",wwn=\"\",volume_id=\"\"}}"
    );
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].0, series);
    let since = lost[0].1;
    assert!(
        since >= detached.floor() && since <= unix_now(),
        "lost at {since}, detached at {detached}"
    );
    let file = std::fs::read_to_string(state.join("lost_targets.json")).unwrap();
    assert!(
        file.contains(&format!("\"target\": \"{target}\"")),
        "{file}"
    );

    // Restarted, the agent names it again from its first scrape on, with the same time.
    agent.terminate();
    let agent = Agent::start(&[&arg, &state_arg, &devfs]);
    let m = common::scrape(&agent);
    assert_eq!(lost_series(&m), [(series.clone(), since)]);
    let m = wait_until(&agent, Duration::from_secs(10), "a rescan", |m| {
        gauge(m, "diskprobe_discovered_targets", "disks").is_some()
    });
    assert_eq!(lost_series(&m), [(series, since)], "still gone: still lost");

    // The same disk back (the same name): found again, no longer lost, in the file too.
    let _back = LoopDev::tmpfs_at(n, 16 << 20);
    let m = wait_until(
        &agent,
        Duration::from_secs(30),
        "the disk found again",
        |m| lost_series(m).is_empty(),
    );
    assert_eq!(
        gauge(&m, "diskprobe_discovered_targets", "disks"),
        Some(1.0)
    );
    let file = std::fs::read_to_string(state.join("lost_targets.json")).unwrap();
    assert!(!file.contains(&target), "{file}");
}

/// The owner mark of a probe file, if any.
fn owner_mark(path: &Path) -> Option<String> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut buf = [0u8; 128];
    // SAFETY: `c` and the attribute name are NUL-terminated; `buf` is writable for its length.
    let n = unsafe {
        libc::getxattr(
            c.as_ptr(),
            c"user.diskprobe_exporter".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 0).then(|| String::from_utf8_lossy(&buf[..n as usize]).into_owned())
}

fn with_file_set_a_probe_file_is_created_in_the_volume_and_nothing_else_changes() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    let ws = Workspace::new();
    let dev = LoopDev::tmpfs(64 << 20);
    mkfs(&dev, "ext4");
    // The users' data, written before the volume is mounted where the rule looks.
    {
        let setup = Mount::new(&[dev.path.to_str().unwrap()]);
        std::fs::create_dir(setup.path().join("data")).unwrap();
        std::fs::write(setup.path().join("data/a.bin"), &dev.content()[..1 << 20]).unwrap();
        std::fs::write(setup.path().join("notes.txt"), "users' data\n").unwrap();
    }
    let arg = ws.config(&format!(
        "[[discover]]\nid = \"files\"\nkind = \"mount\"\nmountpoint_include = \"{}\"\n\
         fstype_include = \"^ext4$\"\nname = \"pv-$1\"\nfile = \"diskprobe.dat\"\nsize = \"4MiB\"\n\
         rescan = \"1s\"\n",
        ws.mountpoints("vol-")
    ));
    let mut agent = Agent::start(&[&arg]);
    let volume = Mount::at(&[dev.path.to_str().unwrap()], &ws.path().join("vol-gamma"));
    let before = tree(volume.path());
    let m = wait_until(&agent, Duration::from_secs(30), "probes of the file", |m| {
        runs(m, "pv-gamma", "success") >= 2.0
    });
    let probe_file = volume.path().join("diskprobe.dat");
    assert_eq!(
        target_info(&m, "pv-gamma"),
        format!(
            "diskprobe_target_info{{target=\"pv-gamma\",path=\"{}\",device=\"{}\",parent=\"\",kind=\"file\",fstype=\"ext4\",cache=\"page_cache\",rule=\"files\",cohort=\"\"}}",
            probe_file.display(),
            dev.name
        )
    );
    agent.terminate();
    let mut after = tree(volume.path());
    let created = after
        .remove(Path::new("diskprobe.dat"))
        .expect("the probe file");
    assert_eq!(created.len(), 4 << 20);
    let mark = owner_mark(&probe_file).unwrap_or_default();
    assert!(
        mark.starts_with("diskprobe_exporter v2 complete size=4194304 ino="),
        "{mark}"
    );
    assert_eq!(after, before, "everything else in the volume is as it was");
}

fn a_hung_mount_costs_its_target_one_timeout_and_delays_neither_scrapes_nor_rescans() {
    if !loopdev::ready() || !fuse::ready() {
        return;
    }
    let _guard = shared();
    let ws = Workspace::new();
    let arg = ws.config(&format!(
        "[[discover]]\nid = \"files\"\nkind = \"mount\"\nmountpoint_include = \"{0}\"\n\
         fstype_include = \"^(ext4|fuse)$\"\nname = \"m-$1\"\nfile = \"probe.dat\"\nsize = \"1MiB\"\n\
         rescan = \"1s\"\n\
         [[discover]]\nid = \"devices\"\nkind = \"mount\"\nmountpoint_include = \"{0}\"\n\
         name = \"dev-$1\"\nrescan = \"1s\"\n",
        ws.mountpoints("m-")
    ));
    let ok_dev = LoopDev::tmpfs(32 << 20);
    mkfs(&ok_dev, "ext4");
    let _ok = Mount::at(&[ok_dev.path.to_str().unwrap()], &ws.path().join("m-ok"));
    std::fs::create_dir(ws.path().join("m-hung")).unwrap();
    let mut hung = HungFuse::mount_at(&ws.path().join("m-hung"));
    let late_dev = LoopDev::tmpfs(32 << 20);
    mkfs(&late_dev, "ext4");
    let mut late = None;

    let agent = Agent::start(&[&arg]);
    // The stat of m-hung/probe.dat never returns. Scrapes, the other volume's probes and rescans
    // go on: a volume mounted meanwhile is found and probed. Watched, scraping every 100 ms,
    // until the hung target's cycle was given up and five later ones skipped, and the others
    // probed.
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut m = Metrics::new();
    let seen = |m: &Metrics| {
        runs(m, "m-late", "success") >= 1.0
            && runs(m, "m-hung", "timeout") >= 1.0
            && runs(m, "m-hung", "skipped") >= 5.0
            && runs(m, "m-ok", "success") >= 5.0
            && runs(m, "dev-ok", "success") >= 1.0
    };
    let watched = poll(Duration::from_secs(40), Duration::from_millis(100), || {
        m = scrape_timed(&agent, &mut slowest);
        if late.is_none() && runs(&m, "m-hung", "timeout") >= 1.0 {
            late = Some(Mount::at(
                &[late_dev.path.to_str().unwrap()],
                &ws.path().join("m-late"),
            ));
        }
        if seen(&m) { Ok(()) } else { Err(()) }
    });
    assert!(
        watched.is_ok(),
        "m-hung not given up and skipped, or another volume not probed:\n{}",
        agent.log.lock().unwrap()
    );
    eprintln!(
        "after {:?}: m-ok {} successes, m-hung {} timeouts / {} skipped, m-late {} successes; slowest scrape {slowest:?}",
        started.elapsed(),
        runs(&m, "m-ok", "success"),
        runs(&m, "m-hung", "timeout"),
        runs(&m, "m-hung", "skipped"),
        runs(&m, "m-late", "success"),
    );
    assert!(
        slowest < Duration::from_secs(1),
        "a scrape took {slowest:?}"
    );
    assert!(runs(&m, "m-ok", "success") >= 5.0);
    assert_eq!(runs(&m, "m-hung", "timeout"), 1.0, "one abandoned cycle");
    assert!(runs(&m, "m-hung", "skipped") >= 1.0);
    assert_eq!(
        runs(&m, "m-hung", "success") + runs(&m, "m-hung", "error"),
        0.0
    );
    // The rule without file probes the ext4 volumes' devices and leaves the FUSE mount alone.
    assert!(runs(&m, "dev-ok", "success") >= 1.0);
    assert!(!has_target(&m, "dev-hung"));
    agent.expect_log(
        &format!(
            "rule devices: {}/m-hung (fuse) has no block device; not probed",
            ws.path().display()
        ),
        Duration::from_secs(1),
    );
    assert_eq!(
        agent
            .log
            .lock()
            .unwrap()
            .matches("m-hung (fuse) has no block device")
            .count(),
        1,
        "said once, not at every rescan"
    );
    // When the FUSE server dies, the stuck stat returns and the target's runs end in errors.
    hung.abort();
    wait_until(
        &agent,
        Duration::from_secs(15),
        "errors after the server died",
        |m| runs(m, "m-hung", "error") >= 1.0,
    );
    drop(late);
}

fn a_rule_matching_more_than_max_targets_probes_the_first_by_name_and_says_so() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    let ws = Workspace::new();
    let n = free_loop_numbers(3);
    let devs: Vec<LoopDev> = (n..n + 3).map(|i| LoopDev::tmpfs_at(i, 8 << 20)).collect();
    let before: Vec<_> = devs.iter().map(untouched_state).collect();
    let rule = |max: u32| {
        format!(
            "[[discover]]\nid = \"capped\"\nkind = \"block\"\ndevice_include = \"^loop({n}|{}|{})$\"\n\
             max_targets = {max}\nrescan = \"1s\"\n",
            n + 1,
            n + 2
        )
    };
    let arg = ws.config(&rule(2));
    let agent = Agent::start(&[&arg]);
    let (first, second, third) = (
        format!("loop{n}"),
        format!("loop{}", n + 1),
        format!("loop{}", n + 2),
    );
    let m = wait_until(
        &agent,
        Duration::from_secs(30),
        "the first two probed",
        |m| runs(m, &first, "success") >= 2.0 && runs(m, &second, "success") >= 2.0,
    );
    assert!(!has_target(&m, &third), "the third is over the limit");
    assert_eq!(
        gauge(&m, "diskprobe_discovered_targets", "capped"),
        Some(2.0)
    );
    assert_eq!(
        gauge(&m, "diskprobe_discovered_targets_dropped", "capped"),
        Some(1.0)
    );
    agent.expect_log(
        &format!(
            "rule capped: 3 matches, above max_targets 2; probing the first 2 by name, not 1 more ({third})"
        ),
        Duration::from_secs(1),
    );
    common::promtool_check_metrics(&agent.get("/metrics").1);

    // A reload that raises the limit adds the third; the two kept go on with their series.
    let kept = runs(&m, &first, "success");
    std::fs::write(
        ws.path().join("config.toml"),
        format!("{DEFAULTS}{}", rule(3)),
    )
    .unwrap();
    agent.signal("HUP");
    let m = wait_until(&agent, Duration::from_secs(30), "the third probed", |m| {
        runs(m, &third, "success") >= 1.0
    });
    assert!(
        runs(&m, &first, "success") >= kept,
        "kept targets keep their counters"
    );
    assert_eq!(
        gauge(&m, "diskprobe_discovered_targets", "capped"),
        Some(3.0)
    );
    assert_eq!(
        gauge(&m, "diskprobe_discovered_targets_dropped", "capped"),
        Some(0.0)
    );
    // A reload without the rule stops its targets and its series leave.
    std::fs::write(ws.path().join("config.toml"), DEFAULTS).unwrap();
    agent.signal("HUP");
    let m = wait_until(&agent, Duration::from_secs(30), "all gone", |m| {
        [&first, &second, &third].iter().all(|t| !has_target(m, t))
    });
    assert_eq!(gauge(&m, "diskprobe_discovered_targets", "capped"), None);
    let after: Vec<_> = devs.iter().map(untouched_state).collect();
    assert!(after == before, "a block rule only reads");
}

crate::tests! {
    a_disk_attached_after_start_up_is_probed_read_only_and_leaves_when_detached: [LOOP],
    an_ext4_mounted_after_start_up_is_probed_through_its_device_once_under_the_mounts_name: [LOOP],
    a_disk_that_a_mount_rule_probes_is_left_out_of_a_block_rule_with_skip_claimed: [LOOP],
    a_disk_detached_while_a_block_rule_probes_it_is_reported_lost_across_a_restart: [LOOP],
    with_file_set_a_probe_file_is_created_in_the_volume_and_nothing_else_changes: [LOOP],
    a_hung_mount_costs_its_target_one_timeout_and_delays_neither_scrapes_nor_rescans: [LOOP, ROOT, FUSE],
    a_rule_matching_more_than_max_targets_probes_the_first_by_name_and_says_so: [LOOP, PROMTOOL],
}
