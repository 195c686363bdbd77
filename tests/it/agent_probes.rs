//! The long-running agent probing real things: loop devices the test creates and a file target,
//! with sub-second intervals. Checks what an operator relies on: probes succeed, the latency
//! histogram counts every I/O, `device` labels match diskstats (also for a file on btrfs, whose
//! files have an anonymous device number), busy devices are skipped, the
//! duty-cycle budget holds, reloads add and remove targets, and the embedded default works from a
//! clean directory.

use crate::common;
use crate::common::loopdev;

use common::{Agent, Metrics, scrape, shared, sum, wait_until};
use loopdev::{LoopDev, Mount, mkfs};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn probes_loop_devices_and_a_file_with_consistent_metrics() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    let a = LoopDev::tmpfs(64 << 20);
    let b = LoopDev::tmpfs(64 << 20);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let file = dir.path().join("probe.dat");
    let config = common::config_flag(
        dir.path(),
        &format!(
            r#"
[diskstats]
device_exclude = "^$"
[defaults]
interval = "600ms"
runtime = "100ms"
timeout = "5s"
max_duty_cycle = 0.5
jitter = 0.1
[scheduler]
max_concurrent_probes = 2
[[targets]]
name = "loop-a"
path = "{}"
profiles = ["randread-4k-qd1", "randread-4k-qd32"]
[[targets]]
name = "loop-b"
path = "{}"
profiles = ["read-1m-qd16"]
[[targets]]
name = "file"
path = "{}"
size = "32MiB"
allow_writes = true
profiles = ["randread-4k-qd1-gentle", "randwrite-4k-qd1-gentle"]
"#,
            a.path.display(),
            b.path.display(),
            file.display()
        ),
    );
    let agent = Agent::start(&[&config]);
    let m = wait_until(
        &agent,
        Duration::from_secs(60),
        "two successful runs of every profile",
        |m| {
            let runs: Vec<f64> = m
                .iter()
                .filter(|(k, _)| {
                    k.starts_with("diskprobe_probe_runs_total{") && k.contains("result=\"success\"")
                })
                .map(|(_, v)| *v)
                .collect();
            runs.len() == 5 && runs.iter().all(|v| *v >= 2.0)
        },
    );
    assert_eq!(
        sum(&m, "diskprobe_probe_runs_total", &["result=\"error\""]),
        0.0
    );
    assert_eq!(
        sum(&m, "diskprobe_probe_runs_total", &["result=\"timeout\""]),
        0.0
    );
    for target in ["loop-a", "loop-b", "file"] {
        let t = format!("target=\"{target}\"");
        let ios = sum(&m, "diskprobe_ios_total", &[&t]);
        let count = sum(&m, "diskprobe_io_latency_seconds_count", &[&t]);
        let inf = sum(
            &m,
            "diskprobe_io_latency_seconds_bucket",
            &[&t, "le=\"+Inf\""],
        );
        assert!(ios > 0.0, "{target}: no I/O");
        assert_eq!(count, ios, "{target}: histogram count vs ios_total");
        assert_eq!(inf, ios, "{target}: +Inf bucket vs ios_total");
        assert!(sum(&m, "diskprobe_probe_busy_seconds_total", &[&t]) > 0.0);
    }
    // device labels are the kernel names, equal to diskstats' device label.
    let device_of = |target: &str| -> String {
        let key = m
            .keys()
            .find(|k| {
                k.starts_with("diskprobe_target_info{")
                    && k.contains(&format!("target=\"{target}\""))
            })
            .unwrap_or_else(|| panic!("no target_info for {target}"));
        key.split("device=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_owned()
    };
    assert_eq!(device_of("loop-a"), a.name);
    assert_eq!(device_of("loop-b"), b.name);
    let file_device = device_of("file");
    assert!(!file_device.is_empty());
    for dev in [&a.name, &b.name, &file_device] {
        assert!(
            m.contains_key(&format!(
                "diskprobe_disk_reads_completed_total{{device=\"{dev}\"}}"
            )),
            "diskstats has no device {dev}"
        );
    }
    assert!(m.keys().any(|k| k.starts_with(
        "diskprobe_probe_iops{target=\"loop-a\",profile=\"randread-4k-qd32\",device=\""
    )));
    assert!(m.keys().any(|k| k.contains("stat=\"p99\"")));
    assert_eq!(
        m.get("diskprobe_scrape_collector_success{collector=\"probes\"}"),
        Some(&1.0)
    );
    assert!(
        m.keys()
            .any(|k| k.starts_with("diskprobe_engine_info{engine="))
    );
}

fn a_file_on_btrfs_is_labelled_with_the_disk_under_it() {
    let btrfs = common::which("mkfs.btrfs").is_some()
        && std::fs::read_to_string("/proc/filesystems").is_ok_and(|f| f.contains("\tbtrfs\n"));
    if !loopdev::ready()
        || !common::require(btrfs, "mkfs.btrfs (btrfs-progs) and btrfs in the kernel")
    {
        return;
    }
    let _guard = shared();
    // btrfs gives its files an anonymous st_dev (major 0); the device is the mount's source.
    let disk = LoopDev::tmpfs(256 << 20);
    mkfs(&disk, "btrfs");
    let fs = Mount::new(&[disk.path.to_str().unwrap()]);
    let dir = tempfile::tempdir().unwrap();
    let config = common::config_flag(
        dir.path(),
        &format!(
            "[defaults]\ninterval = \"500ms\"\nruntime = \"100ms\"\nmax_duty_cycle = 1.0\n\
             profiles = [\"randread-4k-qd1\"]\n\
             [[targets]]\nname = \"btrfs\"\npath = \"{}\"\nsize = \"16MiB\"\nskip_busy_above = 0.99\n",
            fs.path().join("probe.dat").display()
        ),
    );
    let agent = Agent::start(&[&config]);
    let m = wait_until(&agent, Duration::from_secs(20), "a successful run", |m| {
        common::runs(m, "btrfs", "success") >= 2.0
    });
    let device = format!("device=\"{}\"", disk.name);
    assert!(
        m.keys()
            .any(|k| k.starts_with("diskprobe_target_info{") && k.contains(&device)),
        "target_info does not name {}",
        disk.name
    );
    assert!(
        m.keys()
            .any(|k| k.starts_with("diskprobe_probe_iops{target=\"btrfs\"") && k.contains(&device)),
        "probe series do not name {}",
        disk.name
    );
    // The probed loop device is shown in diskstats although loop devices are excluded by default.
    assert!(m.contains_key(&format!(
        "diskprobe_disk_reads_completed_total{{device=\"{}\"}}",
        disk.name
    )));
    drop(agent);
}

/// Series of `target` that carry a `device` label (every family but the configuration's: the
/// interval and the profiles), name and labels as written.
fn series_of<'a>(m: &'a Metrics, target: &str) -> std::collections::BTreeSet<&'a str> {
    let t = format!("target=\"{target}\"");
    m.keys()
        .filter(|k| {
            k.contains(&t)
                && !k.starts_with("diskprobe_target_interval_seconds")
                && !k.starts_with("diskprobe_profile_info")
        })
        .map(String::as_str)
        .collect()
}

fn series_carry_their_final_labels_from_the_first_scrape() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    // A target on a loop device (device="loopN") and one on tmpfs (no block device: device="").
    // Their first runs take over 2 s, so the first scrape comes before any run has ended.
    let dev = LoopDev::tmpfs(32 << 20);
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = common::config_flag(
        dir.path(),
        &format!(
            "[defaults]\ninterval = \"1h\"\nruntime = \"2s\"\nprofiles = [\"randread-4k-qd1\"]\n\
             [scheduler]\nmax_concurrent_probes = 2\n\
             [[targets]]\nname = \"loop\"\npath = \"{}\"\n\
             [[targets]]\nname = \"memory\"\npath = \"{}\"\nsize = \"4MiB\"\n",
            dev.path.display(),
            shm.path().join("probe.dat").display()
        ),
    );
    let agent = Agent::start(&[&config]);
    let first = scrape(&agent);
    let device = format!("device=\"{}\"", dev.name);
    let counters = [
        "diskprobe_probe_runs_total",
        "diskprobe_ios_total",
        "diskprobe_io_bytes_total",
        "diskprobe_io_errors_total",
        "diskprobe_probe_busy_seconds_total",
        "diskprobe_io_latency_seconds_count",
        "diskprobe_probe_stuck_ios",
        "diskprobe_target_info",
    ];
    for (target, label) in [("loop", device.as_str()), ("memory", "device=\"\"")] {
        let before = series_of(&first, target);
        assert_eq!(
            sum(
                &first,
                "diskprobe_probe_runs_total",
                &[&format!("target=\"{target}\"")]
            ),
            0.0,
            "the first scrape came after a run"
        );
        for result in ["success", "error", "timeout", "skipped"] {
            assert!(
                first.contains_key(&format!(
                    "diskprobe_probe_runs_total{{target=\"{target}\",profile=\"randread-4k-qd1\",{label},result=\"{result}\"}}"
                )),
                "{target}: no result=\"{result}\" series in the first scrape"
            );
        }
        assert!(
            before.iter().all(|k| k.contains(label)),
            "{target}: a series without {label}: {before:?}"
        );
        for family in counters {
            assert!(
                before.iter().any(|k| k.split('{').next() == Some(family)),
                "{target}: no {family} before the first run"
            );
        }
    }
    let after = wait_until(&agent, Duration::from_secs(30), "the first runs", |m| {
        common::runs(m, "loop", "success") >= 1.0 && common::runs(m, "memory", "success") >= 1.0
    });
    for (target, label) in [("loop", device.as_str()), ("memory", "device=\"\"")] {
        let (before, now) = (series_of(&first, target), series_of(&after, target));
        // The runs add the last-run gauges; every series the first scrape had goes on as it was.
        assert!(
            before.is_subset(&now),
            "{target}: series changed: {:?}",
            before.difference(&now).collect::<Vec<_>>()
        );
        assert!(now.iter().all(|k| k.contains(label)), "{target}: {now:?}");
    }
}

fn busy_devices_are_skipped_under_a_concurrent_fio_load() {
    // Busy skip alone: fio's QD1 reads (tens of thousands per second here) are far above the
    // limit of 100 I/Os per second from others, whatever its utilisation; yield is off, so that
    // a run fio starts beside does not end as a skip of another kind.
    if !loopdev::ready() || !common::require(common::which("fio").is_some(), "fio") {
        return;
    }
    let _guard = shared();
    let dev = LoopDev::tmpfs(64 << 20);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let config = common::config_flag(
        dir.path(),
        &format!(
            r#"
[[targets]]
name = "busy"
path = "{}"
profiles = ["randread-4k-qd1"]
interval = "700ms"
runtime = "100ms"
max_duty_cycle = 0.5
skip_busy_above = {{ iops = 100 }}
busy_window = "200ms"
yield_to_other_io = false
"#,
            dev.path.display()
        ),
    );
    let agent = Agent::start(&[&config]);
    let success = "diskprobe_probe_runs_total";
    wait_until(
        &agent,
        Duration::from_secs(30),
        "an idle-device success",
        |m| sum(m, success, &["result=\"success\""]) >= 1.0,
    );
    let before = sum(&scrape(&agent), success, &["result=\"skipped\""]);
    assert_eq!(before, 0.0, "nothing else uses the device yet");
    let mut fio = Command::new(common::which("fio").unwrap())
        .args([
            "--name=load",
            "--rw=randread",
            "--bs=4k",
            "--iodepth=4",
            "--ioengine=psync",
            "--direct=1",
            "--time_based",
            "--runtime=20",
            // The job in a thread, so that the kill below stops it (a forked job outlives it).
            "--thread",
        ])
        .arg(format!("--filename={}", dev.path.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start fio");
    let m = wait_until(&agent, Duration::from_secs(15), "a busy skip", |m| {
        sum(m, success, &["result=\"skipped\""]) >= 2.0
    });
    let _ = fio.kill();
    let _ = fio.wait();
    assert_eq!(sum(&m, success, &["result=\"error\""]), 0.0);
    assert!(
        agent.log.lock().unwrap().contains("device busy"),
        "the skip is logged with its reason"
    );
}

fn duty_cycle_budget_holds_for_two_targets_on_one_device() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    let dev = LoopDev::tmpfs(64 << 20);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    // Each target (one on each half of the device) alone uses 25% of the device; together they
    // would need 50%, twice the budget.
    // (The default, gentle, profile: a capacity profile would wait for the device's load to be
    // measured before each run. The psync engine: io_uring's pause before the first I/O holds
    // the device's lock for 250 ms more per run, and the turns of the two targets would then
    // leave little more than the budget's time for probing.)
    let config = common::config_flag(
        dir.path(),
        &format!(
            r#"
[defaults]
interval = "400ms"
runtime = "100ms"
max_duty_cycle = 0.25
engine = "psync"
jitter = 0.0
[scheduler]
max_concurrent_probes = 2
[[targets]]
name = "one"
path = "{0}"
size = "32MiB"
[[targets]]
name = "two"
path = "{0}"
offset = "32MiB"
"#,
            dev.path.display()
        ),
    );
    let start = Instant::now();
    let agent = Agent::start(&[&config]);
    // 20 runs are 2 s of probing at the 25% budget: about 8 s, long enough that the bucket's
    // initial capacity and one overrun are small beside the budget.
    let skipped = |m: &Metrics| sum(m, "diskprobe_probe_runs_total", &["result=\"skipped\""]);
    let ok = |m: &Metrics| sum(m, "diskprobe_probe_runs_total", &["result=\"success\""]);
    // The longest run's charge: what a target's busy seconds grew by between two scrapes (100 ms
    // apart; a target's runs start an interval, 400 ms, apart: one run, or more when a scrape
    // was late, which only makes the bound looser).
    let longest = std::cell::Cell::new(0.0f64);
    let before = std::cell::RefCell::new(std::collections::BTreeMap::<String, f64>::new());
    let m = wait_until(
        &agent,
        Duration::from_secs(30),
        "20 runs and a refusal by the budget",
        |m| {
            let mut before = before.borrow_mut();
            for (k, v) in m {
                if k.starts_with("diskprobe_probe_busy_seconds_total{")
                    && let Some(was) = before.insert(k.clone(), *v)
                {
                    longest.set(longest.get().max(v - was));
                }
            }
            ok(m) >= 20.0 && skipped(m) >= 1.0
        },
    );
    let longest = longest.get();
    let wall = start.elapsed().as_secs_f64();
    let busy = sum(&m, "diskprobe_probe_busy_seconds_total", &[]);
    let (skipped, ok) = (skipped(&m), ok(&m));
    eprintln!(
        "wall {wall:.2}s busy {busy:.2}s ({:.1}%), {ok} runs, {skipped} skipped, longest run {longest:.3}s",
        100.0 * busy / wall
    );
    assert!(skipped > 0.0, "the budget must refuse some runs");
    assert!(ok > 0.0);
    // A run starts only while the bucket is not in debt and is charged when it ends: the budget
    // (25% of wall time) plus the bucket's initial capacity (two runtimes: 0.2 s) plus one run,
    // the longest (on a loaded machine a 100 ms run can take longer), and no more.
    assert!(
        busy <= 0.25 * wall + 0.2 + longest,
        "busy {busy:.2}s over {wall:.2}s exceeds the budget (longest run {longest:.3}s)"
    );
}

fn reload_adds_and_removes_targets() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    let a = LoopDev::tmpfs(32 << 20);
    let b = LoopDev::tmpfs(32 << 20);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let cfg = |name: &str, dev: &LoopDev| {
        format!(
            "[defaults]\ninterval = \"500ms\"\nruntime = \"50ms\"\nmax_duty_cycle = 0.5\nprofiles = [\"randread-4k-qd1\"]\n[[targets]]\nname = \"{name}\"\npath = \"{}\"\n",
            dev.path.display()
        )
    };
    let config = common::config_flag(dir.path(), &cfg("first", &a));
    let agent = Agent::start(&[&config]);
    let has = |m: &Metrics, t: &str| m.keys().any(|k| k.contains(&format!("target=\"{t}\"")));
    let first_runs = |m: &Metrics| {
        sum(
            m,
            "diskprobe_probe_runs_total",
            &["target=\"first\"", "result=\"success\""],
        )
    };
    wait_until(
        &agent,
        Duration::from_secs(30),
        "first target probed three times",
        |m| first_runs(m) >= 3.0,
    );

    // Same config again: the target keeps its counters. A restarted target would be back to at
    // most one run right after the reload (its interval is 500 ms), below the three kept.
    let kept = first_runs(&scrape(&agent));
    agent.signal("HUP");
    assert!(agent.wait_log("configuration reloaded", Duration::from_secs(10)));
    assert!(
        first_runs(&scrape(&agent)) >= kept,
        "an unchanged target keeps its series"
    );

    common::config_flag(dir.path(), &cfg("second", &b));
    agent.signal("HUP");
    let m = wait_until(
        &agent,
        Duration::from_secs(30),
        "second target probed",
        |m| {
            sum(
                m,
                "diskprobe_probe_runs_total",
                &["target=\"second\"", "result=\"success\""],
            ) >= 1.0
        },
    );
    assert!(!has(&m, "first"), "series of a removed target disappear");
    // The default filter excludes loop devices, but the device under a target is always
    // reported, so probe results join with its diskstats; the removed target's device is not.
    assert!(
        m.contains_key(&format!(
            "diskprobe_disk_reads_completed_total{{device=\"{}\"}}",
            b.name
        )),
        "device under a target is in diskstats"
    );
    assert!(
        !m.contains_key(&format!(
            "diskprobe_disk_reads_completed_total{{device=\"{}\"}}",
            a.name
        )),
        "other loop devices stay filtered"
    );
    assert_eq!(m.get("diskprobe_config_last_reload_successful"), Some(&1.0));
}

fn embedded_default_probes_a_scratch_file_from_a_clean_directory() {
    let _guard = shared();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let state = dir.path().join("state");
    let agent = Agent::start(&[&format!("--state.dir={}", state.display())]);
    let m = wait_until(
        &agent,
        Duration::from_secs(90),
        "a successful probe of the scratch file",
        |m| {
            sum(
                m,
                "diskprobe_probe_runs_total",
                &["target=\"scratch\"", "result=\"success\""],
            ) >= 2.0
        },
    );
    assert!(state.join("probe.dat").is_file());
    for profile in ["randread-4k-qd1-gentle", "randwrite-4k-qd1-gentle"] {
        let p = format!("profile=\"{profile}\"");
        assert_eq!(sum(&m, "diskprobe_probe_success", &[&p]), 1.0, "{profile}");
        assert!(sum(&m, "diskprobe_probe_iops", &[&p]) > 0.0, "{profile}");
    }
}

fn a_target_that_probably_measures_a_cache_is_flagged() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    // A loop device without direct I/O reads its backing file through the page cache: its probes
    // measure memory. One with direct I/O reaches the file's disk.
    let buffered = LoopDev::tmpfs(16 << 20);
    let direct = LoopDev::disk(16 << 20);
    let dio = |d: &LoopDev| std::fs::read_to_string(format!("/sys/block/{}/loop/dio", d.name));
    assert_eq!(dio(&buffered).unwrap().trim(), "0");
    if !common::require(
        dio(&direct).is_ok_and(|v| v.trim() == "1"),
        "a loop device with direct I/O on /var/tmp",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = common::config_flag(
        dir.path(),
        &format!(
            "[defaults]\ninterval = \"1h\"\nprofiles = [\"randread-4k-qd1\"]\n\
             [[targets]]\nname = \"buffered\"\npath = \"{}\"\n\
             [[targets]]\nname = \"direct\"\npath = \"{}\"\n",
            buffered.path.display(),
            direct.path.display()
        ),
    );
    let agent = Agent::start(&[&config]);
    let m = scrape(&agent);
    let info = |target: &str| -> String {
        m.keys()
            .find(|k| {
                k.starts_with("diskprobe_target_info{")
                    && k.contains(&format!("target=\"{target}\""))
            })
            .unwrap_or_else(|| panic!("no target_info for {target}"))
            .clone()
    };
    assert!(
        info("buffered").contains("cache=\"page_cache\""),
        "{}",
        info("buffered")
    );
    assert!(info("direct").contains("cache=\"\""), "{}", info("direct"));
    agent.expect_log("a loop device without direct I/O", Duration::from_secs(5));
    let log = agent.log.lock().unwrap().clone();
    assert_eq!(
        log.matches("without direct I/O").count(),
        1,
        "one warning, for the buffered target:\n{log}"
    );
}

crate::tests! {
    probes_loop_devices_and_a_file_with_consistent_metrics: [LOOP],
    a_file_on_btrfs_is_labelled_with_the_disk_under_it: [LOOP, BTRFS],
    series_carry_their_final_labels_from_the_first_scrape: [LOOP],
    busy_devices_are_skipped_under_a_concurrent_fio_load: [LOOP, FIO],
    duty_cycle_budget_holds_for_two_targets_on_one_device: [LOOP],
    reload_adds_and_removes_targets: [LOOP],
    embedded_default_probes_a_scratch_file_from_a_clean_directory,
    a_target_that_probably_measures_a_cache_is_flagged: [LOOP],
}
