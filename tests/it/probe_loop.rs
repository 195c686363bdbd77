//! Probe engines on loop devices the tests create: reported counts against the kernel's
//! diskstats, bytes, clear errors, write safety (checksums outside the region), timeouts and
//! cancellation.

use crate::common;
use crate::common::loopdev;

use common::wait::{poll, wait_for_every};
use diskprobe_exporter::probe::engine::{self, EngineChoice, RunOptions};
use diskprobe_exporter::probe::io_target::{self, OpenTarget, TargetOptions};
use diskprobe_exporter::probe::measurement::{Ending, EngineKind};
use diskprobe_exporter::probe::profile::Profile;
use diskprobe_exporter::probe::{ProbeError, fio};
use loopdev::LoopDev;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const ENGINES: [(EngineChoice, EngineKind); 2] = [
    (EngineChoice::IoUring, EngineKind::IoUring),
    (EngineChoice::Psync, EngineKind::Psync),
];

fn open(
    path: &Path,
    write: bool,
    offset: u64,
    size: Option<u64>,
) -> Result<OpenTarget, ProbeError> {
    Ok(io_target::open(
        path,
        &TargetOptions {
            size,
            offset,
            write,
            rewrite: write,
            // These tests write to loop devices they created.
            device_writes: write,
            min_free: 0,
            procfs: "/proc".into(),
            sysfs: "/sys".into(),
            devfs: "/dev".into(),
            pinned: None,
            confined: false,
            filesystem: Default::default(),
        },
    )?)
}

fn opts(engine: EngineChoice) -> RunOptions {
    RunOptions {
        engine,
        ..RunOptions::default()
    }
}

fn profile(options: &str) -> Profile {
    fio::parse(options).expect("valid fio options")
}

fn assert_within(what: &str, got: u64, want: u64, tolerance: f64) {
    let diff = (got as f64 - want as f64).abs();
    assert!(
        diff <= want as f64 * tolerance,
        "{what}: got {got}, expected {want} ±{:.1}%",
        tolerance * 100.0
    );
}

/// The writes' or reads' bios the device got between two snapshots of its counters. The block
/// layer merges adjacent bios (sequential I/O), so they are the completed requests plus the
/// merges, as in fio's "Disk stats": one per I/O the probe issued, unless the I/O was split.
fn bios(before: &loopdev::Stats, after: &loopdev::Stats, write: bool) -> u64 {
    if write {
        after.writes + after.write_merges - before.writes - before.write_merges
    } else {
        after.reads + after.read_merges - before.reads - before.read_merges
    }
}

/// Runs read and write profiles on `dev` with both engines and checks the kernel's counts.
/// Each run is a number of I/Os, not a time: how many I/Os fit in a time on a loop device
/// depends on the CPU the probe's thread and the loop device's worker get, and with the two
/// cores shared by every test a QD1 run of 700 ms has completed a single I/O (what the probe
/// measures includes the wait for its thread to be scheduled: `bench/cpu_starved_probe.sh`).
fn counts_match_diskstats(dev: &LoopDev, ios: u64) {
    let reader = open(&dev.path, false, 0, None).expect("open read-only");
    assert_eq!(
        reader.device.as_ref().map(|d| d.kname.as_str()),
        Some(dev.name.as_str())
    );
    let writer = open(&dev.path, true, 0, None).expect("open for writes");
    for (choice, kind) in ENGINES {
        for (options, target) in [
            (
                format!("-rw=randread -bs=4k -iodepth=32 -number_ios={ios}"),
                &reader,
            ),
            (
                format!("-rw=randread -bs=4k -iodepth=1 -number_ios={ios}"),
                &reader,
            ),
            (
                format!("-rw=randwrite -bs=4k -iodepth=16 -number_ios={ios}"),
                &writer,
            ),
            (
                format!("-rw=read -bs=64k -iodepth=8 -number_ios={ios}"),
                &reader,
            ),
        ] {
            let p = profile(&options);
            let before = dev.stats();
            let r = engine::run(target, &p, &opts(choice)).expect("probe runs");
            let after = dev.stats();
            eprintln!(
                "{kind:?} {options}: ios={} iops={:.0} reads+{} writes+{}",
                r.ios,
                r.iops(),
                after.reads - before.reads,
                after.writes - before.writes
            );
            assert_eq!(r.engine, kind);
            assert!(r.is_success(), "{options}: {:?}", r.first_error);
            assert_eq!(r.ios, ios, "{options}: I/Os");
            assert_eq!(r.bytes, r.ios * p.block_size, "bytes = ios × block size");
            assert_eq!(r.latency_ns.len(), r.ios, "one latency sample per I/O");
            let count = bios(&before, &after, p.rw.is_write());
            let sectors = if p.rw.is_write() {
                after.write_sectors - before.write_sectors
            } else {
                after.read_sectors - before.read_sectors
            };
            assert_within(
                &format!("{kind:?} {options}: diskstats I/Os"),
                count,
                r.ios,
                0.01,
            );
            assert_within(
                &format!("{kind:?} {options}: diskstats bytes"),
                sectors * 512,
                r.bytes,
                0.01,
            );
        }
    }
}

fn counts_match_diskstats_on_a_tmpfs_backed_loop_device() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    let dev = LoopDev::tmpfs(256 << 20);
    counts_match_diskstats(&dev, 2000);
}

fn counts_match_diskstats_on_a_disk_backed_loop_device() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    let dev = LoopDev::disk(128 << 20);
    counts_match_diskstats(&dev, 1000);
}

/// Whether transparent huge pages can be had by `madvise` (`always` or `madvise`, not `never`).
fn huge_pages_available() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|mode| !mode.contains("[never]"))
}

/// A 1 MiB I/O reaches the device as one request: its buffer lies in huge pages, not in 256 base
/// pages that the loop device (at most 128 segments of 64 KiB) would split into two requests of
/// 512 KiB. Both engines, reads at QD4 and QD1 and writes at QD2; every bio the engine submitted
/// is a completed request or a merge, so a split doubles the count.
fn one_mib_ios_reach_the_device_whole() {
    if !loopdev::ready() || !common::skip::require(huge_pages_available(), "transparent huge pages")
    {
        return;
    }
    let _guard = common::shared();
    let dev = LoopDev::tmpfs(256 << 20);
    let reader = open(&dev.path, false, 0, None).expect("open read-only");
    let writer = open(&dev.path, true, 0, None).expect("open for writes");
    for (choice, kind) in ENGINES {
        for (options, target) in [
            ("-rw=read -bs=1M -iodepth=4 -runtime=300ms", &reader),
            ("-rw=randread -bs=1M -iodepth=1 -runtime=300ms", &reader),
            ("-rw=write -bs=1M -iodepth=2 -runtime=300ms", &writer),
        ] {
            let p = profile(options);
            let before = dev.stats();
            let r = engine::run(target, &p, &opts(choice)).expect("probe runs");
            let after = dev.stats();
            assert_eq!(r.engine, kind);
            assert!(r.is_success(), "{options}: {:?}", r.first_error);
            assert!(r.ios > 20, "{kind:?} {options}: only {} I/Os", r.ios);
            let bios = bios(&before, &after, p.rw.is_write());
            eprintln!("{kind:?} {options}: {} I/Os, {bios} bios", r.ios);
            assert_within(&format!("{kind:?} {options}: bios"), bios, r.ios, 0.01);
        }
    }
}

fn writes_change_nothing_outside_the_region() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    let dev = LoopDev::tmpfs(64 << 20);
    let (start, len) = (16u64 << 20, 8u64 << 20);
    let before = dev.content();
    let target = open(&dev.path, true, start, Some(len)).expect("open region for writes");
    for (choice, _) in ENGINES {
        for options in [
            "-rw=randwrite -bs=4k -iodepth=32 -runtime=300ms",
            "-rw=write -bs=1M -iodepth=4 -runtime=300ms",
            "-rw=randwrite -bs=64k -iodepth=1 -number_ios=200",
        ] {
            let r = engine::run(&target, &profile(options), &opts(choice)).expect("probe runs");
            assert!(r.is_success(), "{options}: {:?}", r.first_error);
        }
    }
    drop(target);
    let after = dev.content();
    let (s, e) = (start as usize, (start + len) as usize);
    assert!(before[..s] == after[..s], "bytes before the region changed");
    assert!(before[e..] == after[e..], "bytes after the region changed");
    assert!(before[s..e] != after[s..e], "the region was written");
    // Fresh random data: no written 4k block is all zeros.
    assert!(after[s..e].chunks(4096).all(|b| b.iter().any(|&x| x != 0)));
}

fn write_probes_use_fresh_data_each_time() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    let dev = LoopDev::tmpfs(8 << 20);
    let target = open(&dev.path, true, 0, Some(4096)).expect("open one block");
    let p = profile("-rw=write -bs=4k -iodepth=1 -number_ios=1");
    let mut seen = Vec::new();
    for _ in 0..3 {
        let r = engine::run(&target, &p, &opts(EngineChoice::IoUring)).expect("probe runs");
        assert_eq!(r.ios, 1);
        seen.push(std::fs::read(&dev.backing).expect("read backing")[..4096].to_vec());
    }
    assert_ne!(seen[0], seen[1]);
    assert_ne!(seen[1], seen[2]);
}

fn alignment_and_short_device_errors_are_clear() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    let dev = LoopDev::tmpfs_sector(4 << 20, 4096);
    let t = open(&dev.path, false, 0, None).expect("open");
    assert_eq!(t.offset_align, 4096);
    let err = engine::run(
        &t,
        &profile("-rw=randread -bs=512 -runtime=1"),
        &opts(EngineChoice::Auto),
    )
    .expect_err("512-byte I/O on a 4k-sector device");
    let msg = err.to_string();
    assert!(
        msg.contains("block size 512") && msg.contains("alignment 4096"),
        "{msg}"
    );

    let err = engine::run(
        &t,
        &profile("-rw=read -bs=8M -runtime=1"),
        &opts(EngineChoice::Auto),
    )
    .expect_err("block larger than the device");
    assert!(err.to_string().contains("smaller than one block"), "{err}");

    let err = open(&dev.path, false, 0, Some(8 << 20)).expect_err("region beyond the end");
    let msg = err.to_string();
    assert!(
        msg.contains("target is 4194304 bytes") && msg.contains("8388608"),
        "{msg}"
    );

    let err = open(&dev.path, false, 1000, Some(4096)).expect_err("unaligned region offset");
    assert!(err.to_string().contains("region offset 1000"), "{err}");

    let err = engine::run(
        &t,
        &profile("-rw=randwrite -bs=4k -runtime=1"),
        &opts(EngineChoice::Auto),
    )
    .expect_err("write on a read-only open");
    assert!(err.to_string().contains("read-only"), "{err}");
}

fn write_safety_refuses_mounted_or_held_devices() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    let dev = LoopDev::tmpfs(4 << 20);
    let root = tempfile::tempdir().expect("tempdir");
    // A procfs whose mountinfo says the device is mounted.
    let procfs = root.path().join("proc");
    std::fs::create_dir_all(procfs.join("self")).unwrap();
    std::fs::write(
        procfs.join("self/mountinfo"),
        format!(
            "40 1 {} / /mnt rw - ext4 {} rw\n",
            dev.majmin(),
            dev.path.display()
        ),
    )
    .unwrap();
    let opts_with = |procfs: &Path, sysfs: &Path| TargetOptions {
        size: None,
        offset: 0,
        write: true,
        rewrite: true,
        device_writes: true,
        min_free: 0,
        procfs: procfs.to_owned(),
        sysfs: sysfs.to_owned(),
        devfs: "/dev".into(),
        pinned: None,
        confined: false,
        filesystem: Default::default(),
    };
    // Without the separate device opt-in, writes to a block device are refused before any check.
    let no_opt_in = TargetOptions {
        device_writes: false,
        ..opts_with(Path::new("/proc"), Path::new("/sys"))
    };
    let err = io_target::open(&dev.path, &no_opt_in).expect_err("device writes need their opt-in");
    assert!(err.to_string().contains("their own opt-in"), "{err}");
    let err =
        io_target::open(&dev.path, &opts_with(&procfs, Path::new("/sys"))).expect_err("mounted");
    assert!(err.to_string().contains("is mounted"), "{err}");
    // Reads are still fine.
    let read = TargetOptions {
        write: false,
        ..opts_with(&procfs, Path::new("/sys"))
    };
    io_target::open(&dev.path, &read).expect("read probes may run on a mounted device");

    // A sysfs where the device has a holder: a device-mapper volume over it.
    let sysfs = root.path().join("sys");
    let device_dir = sysfs.join(format!("devices/virtual/block/{}", dev.name));
    let dm = sysfs.join("devices/virtual/block/dm-0");
    std::fs::create_dir_all(device_dir.join("holders")).unwrap();
    std::fs::create_dir_all(&dm).unwrap();
    std::fs::write(device_dir.join("dev"), format!("{}\n", dev.majmin())).unwrap();
    std::fs::write(dm.join("dev"), "253:0\n").unwrap();
    std::os::unix::fs::symlink(&dm, device_dir.join("holders/dm-0")).unwrap();
    std::fs::create_dir_all(sysfs.join("dev/block")).unwrap();
    std::fs::create_dir_all(sysfs.join("block")).unwrap();
    std::os::unix::fs::symlink(&device_dir, sysfs.join("dev/block").join(dev.majmin())).unwrap();
    let err = io_target::open(&dev.path, &opts_with(Path::new("/proc"), &sysfs)).expect_err("held");
    assert!(err.to_string().contains("is held by dm-0"), "{err}");

    // A device someone else holds exclusively: O_EXCL fails.
    let first = io_target::open(&dev.path, &opts_with(Path::new("/proc"), Path::new("/sys")))
        .expect("first exclusive open");
    let err = io_target::open(&dev.path, &opts_with(Path::new("/proc"), Path::new("/sys")))
        .expect_err("second exclusive open");
    assert!(err.to_string().contains("in use"), "{err}");
    drop(first);
}

fn cancellation_and_timeout_stop_a_run_promptly() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    let dev = LoopDev::tmpfs(64 << 20);
    let target = open(&dev.path, false, 0, None).expect("open");
    let p = profile("-rw=randread -bs=4k -iodepth=32 -runtime=30s");
    for (choice, kind) in ENGINES {
        let cancel = Arc::new(AtomicBool::new(false));
        let o = RunOptions {
            engine: choice,
            cancel: Arc::clone(&cancel),
            ..RunOptions::default()
        };
        let progress = Arc::clone(&o.progress);
        let setter = std::thread::spawn(move || {
            // Cancel once the run is under way (or has failed to get going: then the asserts
            // below say how).
            let under_way = || progress.completed.load(Ordering::Relaxed) >= 100;
            let every = Duration::from_millis(5);
            let _ = poll(Duration::from_secs(10), every, || {
                if under_way() { Ok(()) } else { Err(()) }
            });
            cancel.store(true, Ordering::Relaxed);
        });
        let t0 = Instant::now();
        let r = engine::run(&target, &p, &o).expect("probe runs");
        setter.join().unwrap();
        assert_eq!(r.engine, kind);
        assert!(r.ending == Ending::Cancelled, "{kind:?}: {r:?}");
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "{kind:?}: took {:?}",
            t0.elapsed()
        );
        assert!(r.ios > 0);

        let o = RunOptions {
            engine: choice,
            timeout: Duration::from_millis(400),
            ..RunOptions::default()
        };
        let t0 = Instant::now();
        let r = engine::run(&target, &p, &o).expect("probe runs");
        assert!(r.ending == Ending::TimedOut, "{kind:?}: {r:?}");
        assert!(!r.is_success());
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "{kind:?}: took {:?}",
            t0.elapsed()
        );
    }
}

fn number_ios_stops_exactly() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    let dev = LoopDev::tmpfs(16 << 20);
    let target = open(&dev.path, false, 0, None).expect("open");
    for (choice, _) in ENGINES {
        let before = dev.stats();
        let r = engine::run(
            &target,
            &profile("-rw=randread -bs=4k -iodepth=8 -number_ios=5000"),
            &opts(choice),
        )
        .expect("probe runs");
        let after = dev.stats();
        assert_eq!(r.ios, 5000);
        assert_eq!(
            after.reads + after.read_merges - before.reads - before.read_merges,
            5000
        );
    }
}

fn a_yield_request_stops_issuing_drains_and_reports_progress() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    let dev = LoopDev::tmpfs(64 << 20);
    let target = open(&dev.path, false, 0, None).expect("open");
    let p = profile("-rw=randread -bs=4k -iodepth=16 -runtime=30s");
    for (choice, kind) in ENGINES {
        let drained = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let hook_count = Arc::clone(&drained);
        let o = RunOptions {
            engine: choice,
            on_draining: Some(engine::DrainingHook::new(move || {
                hook_count.fetch_add(1, Ordering::SeqCst);
            })),
            ..RunOptions::default()
        };
        let (yield_now, progress) = (Arc::clone(&o.yield_now), Arc::clone(&o.progress));
        let watcher = std::thread::spawn(move || {
            // Yield once the run is under way.
            let every = Duration::from_millis(5);
            wait_for_every(
                "the run to be under way",
                Duration::from_secs(30),
                every,
                || progress.completed.load(Ordering::Relaxed) >= 100,
            );
            yield_now.store(true, Ordering::Relaxed);
        });
        let t0 = Instant::now();
        let r = engine::run(&target, &p, &o).expect("probe runs");
        watcher.join().unwrap();
        assert_eq!(r.engine, kind);
        assert!(r.ending == Ending::Yielded, "{kind:?}: {r:?}");
        assert!(r.is_success(), "{kind:?}: {r:?}");
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "{kind:?}: {:?}",
            t0.elapsed()
        );
        assert_eq!(
            drained.load(Ordering::SeqCst),
            1,
            "{kind:?}: the hook runs once"
        );
        let (submitted, completed) = (
            o.progress.submitted.load(Ordering::Relaxed),
            o.progress.completed.load(Ordering::Relaxed),
        );
        assert_eq!(
            submitted, completed,
            "{kind:?}: everything in flight drained"
        );
        assert_eq!(completed, r.ios, "{kind:?}");
    }
}

fn exclusive_opens_are_released_when_an_io_uring_run_ends() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    let dev = LoopDev::tmpfs(32 << 20);
    let (start, len) = (8u64 << 20, 8u64 << 20);
    let before = dev.content();
    // As the scheduler runs a cycle: each profile opens the device (O_EXCL for writes), runs on
    // io_uring and drops the target before the next profile opens it.
    for options in [
        "-rw=randwrite -bs=4k -iodepth=1 -number_ios=50",
        "-rw=randwrite -bs=4k -iodepth=32 -number_ios=200",
        "-rw=write -bs=1M -iodepth=4 -number_ios=8",
        "-rw=randwrite -bs=64k -iodepth=16 -number_ios=64",
    ] {
        let target = open(&dev.path, true, start, Some(len))
            .unwrap_or_else(|e| panic!("{options}: open after the previous run: {e}"));
        let r = engine::run(&target, &profile(options), &opts(EngineChoice::IoUring))
            .expect("probe runs");
        assert!(r.is_success(), "{options}: {:?}", r.first_error);
        assert_eq!(r.engine, EngineKind::IoUring, "{options}");
        drop(target);
    }
    let after = dev.content();
    let (s, e) = (start as usize, (start + len) as usize);
    assert!(before[..s] == after[..s], "bytes before the region changed");
    assert!(before[e..] == after[e..], "bytes after the region changed");
}

crate::tests! {
    counts_match_diskstats_on_a_tmpfs_backed_loop_device: [LOOP],
    counts_match_diskstats_on_a_disk_backed_loop_device: [LOOP],
    one_mib_ios_reach_the_device_whole: [LOOP],
    writes_change_nothing_outside_the_region: [LOOP],
    write_probes_use_fresh_data_each_time: [LOOP],
    alignment_and_short_device_errors_are_clear: [LOOP],
    write_safety_refuses_mounted_or_held_devices: [LOOP],
    cancellation_and_timeout_stop_a_run_promptly: [LOOP],
    number_ios_stops_exactly: [LOOP],
    a_yield_request_stops_issuing_drains_and_reports_progress: [LOOP],
    exclusive_opens_are_released_when_an_io_uring_run_ends: [LOOP],
}
