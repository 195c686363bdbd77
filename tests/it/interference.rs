//! The cost of observation, on real devices: a gentle profile's rate cap holds; a gentle probe
//! still reports a device that became ×4 slower per I/O (a loop device over a FUSE file whose
//! reads the test delays); a capacity run stops early when another process starts reading the
//! device, and is skipped while the whole disk (not only the probed partition) is busy.

use crate::common;
use crate::common::fuse;
use crate::common::loopdev;

use common::wait::wait_for_every;
use common::{Agent, Metrics, exclusive, runs, scrape, shared, sum, wait_until};
use diskprobe_exporter::probe::engine::{self, EngineChoice, RunOptions};
use diskprobe_exporter::probe::fio;
use diskprobe_exporter::probe::io_target::{self, TargetOptions};
use diskprobe_exporter::probe::measurement::Ending;
use fuse::FuseFs;
use loopdev::LoopDev;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const ENGINES: [&str; 2] = ["io_uring", "psync"];

/// One-shot run of `profile` on `dev` with `engine`, as JSON.
fn one_shot(dev: &Path, profile: &str, runtime: &str, engine: &str) -> serde_json::Value {
    common::one_shot_run(&[
        "--target",
        dev.to_str().unwrap(),
        "--profile",
        profile,
        "--runtime",
        runtime,
        "--engine",
        engine,
    ])
}

fn a_gentle_probes_rate_cap_holds_on_a_fast_device() {
    if !loopdev::ready() {
        return;
    }
    // The rate is measured within 2%.
    let _guard = exclusive();
    // A tmpfs-backed loop device answers QD1 reads tens of thousands of times a second; the
    // gentle profile takes 200 of them.
    let dev = LoopDev::tmpfs(64 << 20);
    for engine in ENGINES {
        let before = dev.stats().reads;
        let r = one_shot(&dev.path, "randread-4k-qd1-gentle", "3s", engine);
        let reads = dev.stats().reads - before;
        let (iops, ios) = (r["iops"].as_f64().unwrap(), r["ios"].as_u64().unwrap());
        eprintln!("{engine}: {iops:.1} IOPS, {ios} I/Os, {reads} reads seen by the device");
        assert_eq!(r["engine"], engine);
        assert!(
            (iops - 200.0).abs() <= 4.0,
            "{engine}: {iops} IOPS, cap 200 ±2%"
        );
        assert!(ios.abs_diff(600) <= 12, "{engine}: {ios} I/Os in 3 s");
        assert_eq!(
            reads, ios,
            "{engine}: the device saw other reads than the probe's"
        );
    }
}

fn a_gentle_probe_reports_a_device_four_times_slower() {
    if !loopdev::ready() || !fuse::ready() {
        return;
    }
    // Latencies of about a millisecond are compared.
    let _guard = exclusive();
    let fuse = FuseFs::mount(16 << 20);
    fuse.set_read_delay(Duration::from_micros(800));
    // Dropped before the filesystem: the loop device holds its file open.
    let dev = LoopDev::read_only_over(&fuse.file());
    // A gentle probe at 100 I/Os per second: 10 ms between I/Os, so that a read four times
    // slower still ends before the next one is due even where a base read costs 2 ms (the
    // built-in's 5 ms left no room for that on a loaded machine).
    const RATE: f64 = 100.0;
    // The device's own mean read latency (from its diskstats) and the probe's p50 over a run.
    let measure = |engine: &str| -> (f64, f64) {
        let before = dev.stats();
        let r = common::one_shot_run(&[
            "--target",
            dev.path.to_str().unwrap(),
            "--fio",
            "-rw=randread -bs=4k -iodepth=1 -rate_iops=100",
            "--runtime",
            "3s",
            "--engine",
            engine,
        ]);
        let after = dev.stats();
        let reads = (after.reads - before.reads) as f64;
        let device_ms = (after.read_time_ms - before.read_time_ms) as f64 / reads;
        let p50_ms = r["latency_seconds"]["p50"].as_f64().unwrap() * 1e3;
        assert!(
            (r["iops"].as_f64().unwrap() - RATE).abs() <= RATE * 0.02,
            "{engine}: the rate cap holds below 10 ms per I/O (the device took {device_ms:.3} ms per read): {r}"
        );
        // The run's own figure of the device's time per read is the kernel's (read from the same
        // counters a moment apart; their millisecond total is within 1 ms at each end) ...
        let reported_ms = r["device_latency_seconds"].as_f64().unwrap() * 1e3;
        assert!(
            (reported_ms - device_ms).abs() <= 0.02 * device_ms + 2.0 / reads,
            "{engine}: the run says the device took {reported_ms:.3} ms per read, its diskstats {device_ms:.3}"
        );
        // ... and a slow device is not a starved CPU: the run's threads did not wait for one
        // (the machine is held by this test alone; a starved run says so and is not a result).
        let share = r["cpu_wait_share"].as_f64().unwrap();
        eprintln!(
            "{engine}: device {device_ms:.3} ms per read (the run says {reported_ms:.3}), probe p50 {p50_ms:.3} ms, CPU wait {:.1}% of the I/O time, starved {}",
            share * 100.0,
            r["starved"]
        );
        assert!(
            common::one_shot::timings_checkable(&r, engine) || !common::skip::strict(),
            "{engine}: starved of CPU while the test held the machine"
        );
        (device_ms, p50_ms)
    };
    for engine in ENGINES {
        // Each read takes the server's delay plus the kernel's and the server's own overhead:
        // the slow delay is chosen so that the device's mean latency becomes four times its
        // base one, as the kernel counts it. Both stay below the 10 ms between the probe's
        // I/Os, so that it keeps its rate and measures each I/O on its own.
        let base = Duration::from_micros(800);
        fuse.set_read_delay(base);
        let (device_base, probe_base) = measure(engine);
        let slow = base + Duration::from_secs_f64(3.0 * device_base / 1e3);
        fuse.set_read_delay(slow);
        let (device_slow, probe_slow) = measure(engine);
        eprintln!(
            "{engine}: delays {base:?} -> {slow:?}; device {device_base:.3} -> {device_slow:.3} ms per read (x{:.2}), probe p50 {probe_base:.3} -> {probe_slow:.3} ms (x{:.2})",
            device_slow / device_base,
            probe_slow / probe_base
        );
        // The device did become about 4 times slower per I/O...
        assert!(
            device_slow / device_base >= 3.6,
            "{engine}: the device only became x{:.2} slower",
            device_slow / device_base
        );
        // ... and the gentle probe reports it.
        assert!(
            probe_slow / probe_base >= 3.5,
            "{engine}: p50 {probe_base:.3} -> {probe_slow:.3} ms is x{:.2}, not x3.5 or more",
            probe_slow / probe_base
        );
    }
    assert!(fuse.reads() > 0);
}

fn an_engine_asked_to_yield_stops_issuing_and_drains() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    let dev = LoopDev::tmpfs(64 << 20);
    let target = io_target::open(
        &dev.path,
        &TargetOptions {
            size: None,
            offset: 0,
            write: false,
            rewrite: false,
            device_writes: false,
            min_free: 0,
            procfs: "/proc".into(),
            sysfs: "/sys".into(),
            devfs: "/dev".into(),
            pinned: None,
            confined: false,
            filesystem: Default::default(),
        },
    )
    .expect("open");
    let profile = fio::parse("-rw=randread -bs=4k -iodepth=32 -runtime=30s").unwrap();
    for (engine, choice) in [
        ("io_uring", EngineChoice::IoUring),
        ("psync", EngineChoice::Psync),
    ] {
        let opts = RunOptions {
            engine: choice,
            ..RunOptions::default()
        };
        let yield_now = Arc::clone(&opts.yield_now);
        let progress = Arc::clone(&opts.progress);
        let setter = std::thread::spawn(move || {
            // Ask once the run is under way.
            let every = Duration::from_millis(5);
            wait_for_every(
                "the run to be under way",
                Duration::from_secs(30),
                every,
                || progress.completed.load(Ordering::Relaxed) >= 1000,
            );
            yield_now.store(true, Ordering::Relaxed);
        });
        let t0 = Instant::now();
        let r = engine::run(&target, &profile, &opts).expect("the probe runs");
        setter.join().unwrap();
        eprintln!("{engine}: {} I/Os in {:?}", r.ios, t0.elapsed());
        assert!(r.ending == Ending::Yielded, "{engine}: {r:?}");
        assert!(r.errors == 0 && r.ios >= 1000, "{engine}: {r:?}");
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{engine}: it went on"
        );
        // Drained: everything submitted completed, and counted.
        let submitted = opts.progress.submitted.load(Ordering::Relaxed);
        assert_eq!(submitted, opts.progress.completed.load(Ordering::Relaxed));
        assert_eq!(submitted, r.ios, "{engine}");
    }
}

/// Another process's reads, from the agent's point of view: a thread of the test reading `dev`
/// with O_DIRECT, 4 KiB at a time, from start to end and again, until dropped.
struct Reader {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Reader {
    fn start(dev: &Path) -> Reader {
        use std::os::unix::fs::{FileExt, OpenOptionsExt};
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(dev)
            .expect("open the device with O_DIRECT");
        let size = block_device_size(dev);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            // A 4 KiB-aligned window of a larger buffer: O_DIRECT needs aligned memory.
            let mut buf = vec![0u8; 8192];
            let skip = buf.as_ptr().align_offset(4096);
            let block = &mut buf[skip..skip + 4096];
            let mut reads = 0u64;
            let mut offset = 0u64;
            while !flag.load(Ordering::Relaxed) {
                file.read_exact_at(block, offset).expect("read the device");
                reads += 1;
                offset = (offset + 4096) % size;
            }
            reads
        });
        Reader {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let reads = thread.join().unwrap_or(0);
            eprintln!("the other reader did {reads} reads");
        }
    }
}

/// Size of a block device in bytes, from sysfs (its metadata says 0).
fn block_device_size(dev: &Path) -> u64 {
    let name = dev.file_name().unwrap().to_string_lossy().into_owned();
    let sectors = std::fs::read_to_string(format!("/sys/class/block/{name}/size"))
        .expect("sysfs size")
        .trim()
        .parse::<u64>()
        .expect("a number of sectors");
    sectors * 512
}

fn labelled(m: &Metrics, name: &str, target: &str) -> f64 {
    sum(m, name, &[&format!("target=\"{target}\"")])
}

fn a_capacity_run_stops_early_when_another_process_starts_reading_the_device() {
    if !loopdev::ready() {
        return;
    }
    // How soon the run stops, and the time it shared the device, are measured.
    let _guard = exclusive();
    let dev = LoopDev::tmpfs(64 << 20);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    // Runs of 5 s, one right after the other (1 s busy window in between).
    let arg = common::config_flag(
        dir.path(),
        &format!(
            "[[targets]]\nname = \"cap\"\npath = \"{}\"\nprofiles = [\"randread-4k-qd32\"]\n\
             interval = \"6s\"\nruntime = \"5s\"\ntimeout = \"10s\"\njitter = 0.0\nmax_duty_cycle = 1.0\n",
            dev.path.display()
        ),
    );
    let agent = Agent::start(&[&arg]);
    // On the idle device a capacity run goes to its end: no false alarm from its own I/O.
    let m = wait_until(&agent, Duration::from_secs(30), "a full run", |m| {
        runs(m, "cap", "success") >= 1.0
    });
    assert_eq!(runs(&m, "cap", "skipped"), 0.0);
    let busy_full = labelled(&m, "diskprobe_probe_busy_seconds_total", "cap");
    assert!(
        busy_full >= 4.9,
        "a full run lasts its 5 s runtime: {busy_full}"
    );
    assert_eq!(
        labelled(&m, "diskprobe_probe_contended_seconds_total", "cap"),
        0.0
    );
    // The next run: once it is under way, another process starts reading the device.
    let mut last = dev.stats().reads;
    common::wait_for("the second run to start", Duration::from_secs(20), || {
        let now = dev.stats().reads;
        let started = now - last > 200;
        last = now;
        started
    });
    let reader = Reader::start(&dev.path);
    let m = wait_until(&agent, Duration::from_secs(10), "the run to yield", |m| {
        runs(m, "cap", "skipped") >= 1.0
    });
    drop(reader);
    assert_eq!(
        runs(&m, "cap", "success"),
        1.0,
        "the second run did not end as a success"
    );
    agent.expect_log("capacity run stopped early", Duration::from_secs(1));
    agent.expect_log(
        &format!("I/O on {} after", dev.name),
        Duration::from_secs(1),
    );
    // It stopped soon after the reader started, far short of its 5 s runtime.
    let yielded_run = labelled(&m, "diskprobe_probe_busy_seconds_total", "cap") - busy_full;
    eprintln!("the yielded run lasted {yielded_run:.3} s");
    assert!(yielded_run < 2.5, "the run went on for {yielded_run} s");
    // Its I/O is counted, and its cost: the time it shared the device.
    assert_eq!(
        labelled(&m, "diskprobe_ios_total", "cap"),
        labelled(&m, "diskprobe_io_latency_seconds_count", "cap")
    );
    let contended = labelled(&m, "diskprobe_probe_contended_seconds_total", "cap");
    assert!(
        contended > 0.0 && contended < 0.5,
        "contended {contended} s"
    );
    // The last-run gauges still show the full run.
    assert!(labelled(&m, "diskprobe_probe_duration_seconds", "cap") >= 5.0);
}

/// Writes a DOS partition table with Linux partitions of `(first sector, sectors)` to `dev` (a
/// test's own loop device).
fn write_partition_table(dev: &Path, parts: &[(u32, u32)]) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(dev)
        .expect("open the loop device");
    std::io::Write::write_all(&mut f, &loopdev::dos_partition_table(parts))
        .expect("write the partition table");
    f.sync_all().expect("sync");
}

fn capacity_runs_are_skipped_while_another_partition_of_the_disk_is_busy() {
    if !loopdev::ready() || !common::require(common::which("partx").is_some(), "partx (util-linux)")
    {
        return;
    }
    let _guard = shared();
    // Two partitions; the probe's target is the first, the other process reads the second.
    let dev = LoopDev::tmpfs_partitionable(64 << 20);
    write_partition_table(&dev.path, &[(2048, 30 << 11), (32 << 11, 30 << 11)]);
    let status = Command::new("partx")
        .args(["--add"])
        .arg(&dev.path)
        .status()
        .expect("run partx");
    assert!(status.success());
    let part = |n: u32| Path::new("/dev").join(format!("{}p{n}", dev.name));
    common::wait::wait_for_every(
        "the partitions to appear",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || part(1).exists() && part(2).exists(),
    );
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let arg = common::config_flag(
        dir.path(),
        &format!(
            "[[targets]]\nname = \"p1\"\npath = \"{}\"\nprofiles = [\"randread-4k-qd1\"]\n\
             interval = \"700ms\"\nruntime = \"100ms\"\nbusy_window = \"200ms\"\nmax_duty_cycle = 0.5\n",
            part(1).display()
        ),
    );
    let agent = Agent::start(&[&arg]);
    wait_until(
        &agent,
        Duration::from_secs(30),
        "an idle-disk success",
        |m| runs(m, "p1", "success") >= 1.0,
    );
    let reader = Reader::start(&part(2));
    let m = wait_until(&agent, Duration::from_secs(15), "busy skips", |m| {
        runs(m, "p1", "skipped") >= 2.0
    });
    drop(reader);
    assert_eq!(runs(&m, "p1", "error"), 0.0);
    let log = agent.log.lock().unwrap().clone();
    assert!(
        log.contains(&format!(
            "device busy\" target=p1 profile=randread-4k-qd1 device={} ",
            dev.name
        )) && log.contains("I/Os per second from other processes"),
        "the skip names the whole disk and its load:\n{log}"
    );
    drop(agent);
    let _ = Command::new("partx")
        .arg("--delete")
        .arg(&dev.path)
        .status();
    // A gentle profile runs whatever the load: skipping it would hide latency under load.
    let arg = common::config_flag(
        dir.path(),
        &format!(
            "[[targets]]\nname = \"gentle\"\npath = \"{}\"\n\
             interval = \"700ms\"\nruntime = \"100ms\"\nbusy_window = \"200ms\"\nmax_duty_cycle = 0.5\n",
            dev.path.display()
        ),
    );
    let reader = Reader::start(&dev.path);
    let agent = Agent::start(&[&arg]);
    let m = wait_until(&agent, Duration::from_secs(20), "gentle runs", |m| {
        runs(m, "gentle", "success") >= 3.0
    });
    drop(reader);
    assert_eq!(runs(&m, "gentle", "skipped"), 0.0);
    assert!(
        labelled(&m, "diskprobe_probe_contended_seconds_total", "gentle") > 0.0,
        "the time shared with the reader is its cost"
    );
    let _ = scrape(&agent);
}

crate::tests! {
    a_gentle_probes_rate_cap_holds_on_a_fast_device: [LOOP],
    a_gentle_probe_reports_a_device_four_times_slower: [LOOP, ROOT, FUSE],
    an_engine_asked_to_yield_stops_issuing_and_drains: [LOOP],
    a_capacity_run_stops_early_when_another_process_starts_reading_the_device: [LOOP],
    capacity_runs_are_skipped_while_another_partition_of_the_disk_is_busy: [LOOP, PARTX],
}
