//! Faults the agent must survive, each reproduced for real: a device that vanishes and returns, a
//! device stalled by a 1-IOPS blkio throttle beside one that never completes I/O (a loop device
//! over a file on a FUSE filesystem that stops answering reads), a probe file whose fill stalls (writes throttled to 1
//! byte/s), SIGINT during a one-shot fill and a reload during a fill, a target on a hung (FUSE)
//! filesystem, io_uring blocked by a seccomp filter, ENOSPC while creating the probe file, EACCES
//! on a device, a filesystem without O_DIRECT, a mounted device offered for writes, and SIGTERM in
//! the middle of a write probe. The stalled and hung devices beside a healthy one hold the machine
//! for half a minute: a long test (`LONG`), of which the hung filesystem and the vanished device
//! check the short forms in every `cargo test`.

use crate::common;
use crate::common::fuse;
use crate::common::loopdev;

use common::wait::poll;
use common::{
    Agent, Metrics, exclusive, process, runs, samples, scrape, scrape_timed, shared, wait_until,
    which,
};
use diskprobe_exporter::probe::engine;
use fuse::{FuseFs, Mode};
use loopdev::{BlkioGroup, LoopDev, Mount, mkfs};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

/// A directory everyone can read (for tests that run the agent as an unprivileged user).
fn open_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn a_vanished_device_fails_its_runs_and_recovers_when_it_returns() {
    if !loopdev::ready() {
        return;
    }
    // Exclusive: a loop device another test attaches meanwhile would take the detached one's
    // number, and the vanished target would probe it.
    let _guard = common::exclusive();
    let a = LoopDev::tmpfs(32 << 20);
    let b = LoopDev::tmpfs(32 << 20);
    let dir = open_tempdir();
    let arg = common::config_flag(
        dir.path(),
        &format!(
            "[defaults]\ninterval = \"400ms\"\nruntime = \"100ms\"\nmax_duty_cycle = 0.5\nprofiles = [\"randread-4k-qd1\"]\n\
             [scheduler]\nmax_concurrent_probes = 2\n\
             [[targets]]\nname = \"vanishing\"\npath = \"{}\"\n[[targets]]\nname = \"steady\"\npath = \"{}\"\n",
            a.path.display(),
            b.path.display()
        ),
    );
    let agent = Agent::start(&[&arg]);
    wait_until(
        &agent,
        Duration::from_secs(30),
        "both targets probed",
        |m| runs(m, "vanishing", "success") >= 1.0 && runs(m, "steady", "success") >= 1.0,
    );
    // Detach while the agent keeps probing. The kernel defers the detach of an open loop device
    // until it is closed, so a run in flight finishes; every run after it finds no device.
    let status = Command::new("losetup")
        .arg("-d")
        .arg(&a.path)
        .status()
        .unwrap();
    assert!(status.success());
    let m = scrape(&agent);
    let steady_before = runs(&m, "steady", "success");
    let m = wait_until(
        &agent,
        Duration::from_secs(30),
        "errors on the vanished device",
        |m| runs(m, "vanishing", "error") >= 2.0,
    );
    assert!(
        runs(&m, "steady", "success") > steady_before,
        "the other target goes on"
    );
    // Each failed run says the device is empty, not that it is smaller than one byte.
    agent.expect_log(
        &format!(
            "{}: the block device is empty (0 bytes: a loop device detached from its file",
            a.path.display()
        ),
        Duration::from_secs(5),
    );
    assert_eq!(
        m.get(&format!(
            "diskprobe_probe_success{{target=\"vanishing\",profile=\"randread-4k-qd1\",device=\"{}\"}}",
            a.name
        )),
        Some(&0.0)
    );
    // The device returns (same node, same backing file): the target recovers.
    let ok_before = runs(&m, "vanishing", "success");
    let status = Command::new("losetup")
        .arg(&a.path)
        .arg(&a.backing)
        .status()
        .unwrap();
    assert!(status.success(), "re-attach {}", a.path.display());
    wait_until(&agent, Duration::from_secs(30), "recovery", |m| {
        runs(m, "vanishing", "success") > ok_before
    });
    assert_eq!(agent.get("/-/healthy").0, 200);
}

/// `diskprobe_probe_{name}` of `target` (one profile per target here).
fn gauge(m: &Metrics, name: &str, target: &str) -> f64 {
    common::sum(m, name, &[&format!("target=\"{target}\"")])
}

/// Lifts a group's read cap on a device when dropped.
struct LiftReadCap<'a>(&'a BlkioGroup, &'a LoopDev);

impl Drop for LiftReadCap<'_> {
    fn drop(&mut self) {
        let _ = self.0.set_throttle("read_iops_device", self.1, 0);
    }
}

fn dead_devices_keep_one_ring_each_and_other_devices_keep_their_schedule() {
    if !loopdev::blkio_ready() || !fuse::ready() {
        return;
    }
    // Scrape latency and the healthy target's schedule are measured.
    let _guard = exclusive();
    // A device stalled at 1 IOPS (a run of 16 I/Os takes 16 s to drain, eight times its
    // timeout), one that never completes (a loop device over a file on a FUSE filesystem whose
    // server stops answering reads), and a healthy one probed every second.
    let stalled = LoopDev::tmpfs(32 << 20);
    let group = BlkioGroup::new();
    group.throttle_read_iops(&stalled, 1);
    let fs = FuseFs::mount(32 << 20);
    let hung = LoopDev::over_file(&fs.file(), &["--read-only"]);
    let healthy = LoopDev::tmpfs(16 << 20);
    fs.set_mode(Mode::HangReads);
    // The dead targets' runs hold the probe slot until this timeout.
    let timeout_s = 2.0;
    let dir = open_tempdir();
    let arg = common::config_flag(
        dir.path(),
        &format!(
            "[defaults]\ninterval = \"1s\"\nruntime = \"200ms\"\ntimeout = \"{timeout_s}s\"\njitter = 0.0\nmax_duty_cycle = 1.0\n\
             [profiles.qd16]\nfio = \"-rw=randread -bs=4k -iodepth=16\"\n\
             [[targets]]\nname = \"stalled\"\npath = \"{}\"\nprofiles = [\"qd16\"]\n\
             [[targets]]\nname = \"hung\"\npath = \"{}\"\nprofiles = [\"qd16\"]\n\
             [[targets]]\nname = \"healthy\"\npath = \"{}\"\nprofiles = [\"randread-4k-qd1\"]\nruntime = \"100ms\"\n",
            stalled.path.display(),
            hung.path.display(),
            healthy.path.display()
        ),
    );
    let mut agent = Agent::start_command(group.command(&common::binary(), &[&arg]));
    let pid = agent.pid();
    // Dropped before the agent, so that a failing test still lets the stuck I/O end (the agent
    // cannot exit while the kernel holds its I/O) and the loop device be detached.
    let _aborted = fs.abort_on_drop();
    let _lifted = LiftReadCap(&group, &stalled);
    let m = wait_until(
        &agent,
        Duration::from_secs(30),
        "both dead devices stuck",
        |m| {
            gauge(m, "diskprobe_probe_stuck_ios", "stalled") > 0.0
                && gauge(m, "diskprobe_probe_stuck_ios", "hung") > 0.0
        },
    );
    let rss_before = process::status(pid, "VmRSS:");
    let healthy_before = runs(&m, "healthy", "success");
    let timeouts_before = runs(&m, "stalled", "timeout") + runs(&m, "hung", "timeout");
    let (mut rings, mut scrape_times) = (0, Vec::new());
    // The threads that would pile up if runs on dead devices were not abandoned once: the
    // engine threads (one per device: a dead device's keeps its stuck ring, the healthy
    // target's runs) and each dead target's probe threads, the most seen at once.
    let (mut engine_threads, mut stuck_probe_threads) = (0, 0);
    let (mut stalled_stuck_max, mut stalled_cleared) = (0.0f64, false);
    let started = Instant::now();
    // The stalled device's first run drains and its second one times out in this window.
    while started.elapsed() < Duration::from_secs(30) {
        rings = rings.max(process::io_uring_fds(pid));
        engine_threads = engine_threads.max(process::threads_named(pid, "diskprobe-uring").len());
        stuck_probe_threads = stuck_probe_threads.max(
            ["probe-stalled", "probe-hung"]
                .map(|name| process::threads_named(pid, name).len())
                .into_iter()
                .max()
                .unwrap_or(0),
        );
        let t = Instant::now();
        let (code, body) = agent.get("/metrics");
        scrape_times.push(t.elapsed());
        assert_eq!(code, 200);
        let m: Metrics = samples(&body).into_iter().collect();
        let stalled_stuck = gauge(&m, "diskprobe_probe_stuck_ios", "stalled");
        stalled_stuck_max = stalled_stuck_max.max(stalled_stuck);
        stalled_cleared |= stalled_stuck == 0.0;
        std::thread::sleep(Duration::from_millis(250));
    }
    let elapsed = started.elapsed();
    let m = scrape(&agent);
    let rss_after = process::status(pid, "VmRSS:");
    let healthy_runs = runs(&m, "healthy", "success") - healthy_before;
    scrape_times.sort();
    let p90 = scrape_times[scrape_times.len() * 9 / 10];
    eprintln!(
        "over {elapsed:?}: at most {rings} io_uring instances, {engine_threads} engine threads, \
         {stuck_probe_threads} probe threads of a dead target; \
         RSS {rss_before} -> {rss_after} KiB; healthy runs {healthy_runs}; stalled: {} timeouts, {} skipped, \
         up to {stalled_stuck_max} stuck; hung: {} timeouts, {} stuck for {:.0} s; /metrics p90 {p90:?}; \
         healthy: {} skipped, {} failed, last run {:.2} s",
        runs(&m, "stalled", "timeout"),
        runs(&m, "stalled", "skipped"),
        runs(&m, "hung", "timeout"),
        gauge(&m, "diskprobe_probe_stuck_ios", "hung"),
        gauge(&m, "diskprobe_probe_stuck_io_age_seconds", "hung"),
        runs(&m, "healthy", "skipped"),
        runs(&m, "healthy", "error"),
        gauge(&m, "diskprobe_probe_duration_seconds", "healthy"),
    );
    // One ring per device at most: the abandoned ones of the dead devices and the healthy
    // target's own.
    assert!(rings <= 3, "{rings} io_uring instances for 3 devices");
    // Nothing accumulates: at every look, one engine thread per device at most, and one probe
    // thread per dead target (the process's total moves with the healthy target's runs and the
    // scheduler's stat threads, which come and go every second).
    assert!(
        engine_threads <= 3,
        "{engine_threads} io_uring engine threads at once for 3 devices"
    );
    assert!(
        stuck_probe_threads <= 1,
        "{stuck_probe_threads} probe threads at once for one dead target"
    );
    assert!(
        rss_after < rss_before + 4 * 1024,
        "memory grows: {rss_before} -> {rss_after} KiB"
    );
    // The dead devices never hold the global probe slot (one, the default) while they drain: the
    // healthy target, due every second, keeps its schedule but for the time their runs hold the
    // slot until they time out (the engine's pause before the first I/O, then the timeout).
    // Its own runs take 0.35 s (that pause included) and share the slot with the dead targets'
    // cycles: 22-23 runs of ~28 seen. A stalled run that held the slot while it drains (16 s)
    // would leave it about half.
    let expected = elapsed.as_secs_f64();
    let timeouts = runs(&m, "stalled", "timeout") + runs(&m, "hung", "timeout") - timeouts_before;
    let held = timeouts * (timeout_s + engine::SETTLE.as_secs_f64());
    assert!(
        healthy_runs >= 0.7 * (expected - held),
        "the healthy target completed {healthy_runs} of ~{:.0} runs ({timeouts} dead runs held the slot for {held:.1} s of {expected:.0} s)",
        expected - held
    );
    // The hung device: one abandoned run, then skips, its stuck I/O visible and ageing.
    assert_eq!(runs(&m, "hung", "timeout"), 1.0, "one abandoned run");
    assert!(runs(&m, "hung", "skipped") >= 0.8 * expected);
    assert_eq!(gauge(&m, "diskprobe_probe_stuck_ios", "hung"), 16.0);
    assert!(gauge(&m, "diskprobe_probe_stuck_io_age_seconds", "hung") >= expected);
    // The stalled device: its I/O drains at 1 IOPS, and only then does its next run start.
    assert!(stalled_stuck_max <= 16.0 && stalled_cleared);
    assert!(runs(&m, "stalled", "timeout") >= 2.0);
    assert!(runs(&m, "stalled", "skipped") >= 10.0);
    assert!(p90 < Duration::from_millis(50), "/metrics p90 {p90:?}");
    // When the FUSE server dies, the hung I/O fails: its ring is reaped and freed, and later
    // runs fail visibly instead of being skipped.
    fs.abort();
    wait_until(
        &agent,
        Duration::from_secs(20),
        "the hung I/O reaped",
        |m| gauge(m, "diskprobe_probe_stuck_ios", "hung") == 0.0 && runs(m, "hung", "error") >= 1.0,
    );
    group.throttle_read_iops(&stalled, 0);
    wait_until(
        &agent,
        Duration::from_secs(20),
        "the stalled I/O reaped",
        |m| gauge(m, "diskprobe_probe_stuck_ios", "stalled") == 0.0,
    );
    agent.terminate();
}

/// A child process killed (and reaped) when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Lifts a group's write cap on a device when dropped.
struct LiftWriteCap<'a>(&'a BlkioGroup, &'a LoopDev);

impl Drop for LiftWriteCap<'_> {
    fn drop(&mut self) {
        let _ = self.0.set_throttle("write_bps_device", self.1, 0);
    }
}

/// ext4 on a tmpfs-backed loop device of `size` bytes, mounted, and a blkio group whose writes to
/// it are capped at `bps` bytes per second.
fn throttled_ext4(size: u64, bps: u64) -> (LoopDev, Mount, BlkioGroup) {
    let disk = LoopDev::tmpfs(size);
    mkfs(&disk, "ext4");
    let fs = Mount::new(&[disk.path.to_str().unwrap()]);
    let group = BlkioGroup::new();
    group.throttle_write_bps(&disk, bps);
    (disk, fs, group)
}

fn a_probe_file_fill_that_stalls_is_abandoned_and_other_targets_go_on() {
    if !loopdev::blkio_ready() {
        return;
    }
    let _guard = shared();
    // The probe file lives on ext4 on a loop device whose writes the agent's blkio group may not
    // make at all (1 byte/s): its O_DIRECT fill stalls in the kernel on the first chunk.
    let (disk, fs, group) = throttled_ext4(64 << 20, 1);
    let other = LoopDev::tmpfs(16 << 20);
    let dir = open_tempdir();
    let probe_file = fs.path().join("probe.dat");
    let arg = common::config_flag(
        dir.path(),
        &format!(
            "[defaults]\ninterval = \"1s\"\nruntime = \"100ms\"\ntimeout = \"300ms\"\njitter = 0.0\n\
             max_duty_cycle = 1.0\nprofiles = [\"randread-4k-qd1\"]\n\
             [[targets]]\nname = \"stalled\"\npath = \"{}\"\nsize = \"8MiB\"\nmax_duty_cycle = 0.2\n\
             profiles = [\"randread-4k-qd1\", \"randread-4k-qd32\"]\n\
             [[targets]]\nname = \"healthy\"\npath = \"{}\"\n",
            probe_file.display(),
            other.path.display()
        ),
    );
    let mut agent = Agent::start_command(group.command(&common::binary(), &[&arg]));
    // Dropped before the agent: if an assertion fails, the stuck write is let through so that the
    // agent can be killed and the filesystem unmounted.
    let _lift = LiftWriteCap(&group, &disk);
    // One probe at a time (the default): while the fill hangs, nothing else runs. After the run's
    // timeout plus the scheduler's grace (6.35 s) without a chunk written, the run is abandoned.
    let abandoned = Instant::now();
    wait_until(
        &agent,
        Duration::from_secs(45),
        "the stalled open abandoned",
        |m| runs(m, "stalled", "timeout") >= 1.0,
    );
    eprintln!("abandoned after {:?}", abandoned.elapsed());
    agent.expect_log(
        "opening the target made no progress",
        Duration::from_secs(1),
    );
    // The global probe slot is free again: the other target runs, and the stalled one is skipped
    // while its thread is still stuck.
    let m = scrape(&agent);
    let before = runs(&m, "healthy", "success");
    wait_until(
        &agent,
        Duration::from_secs(20),
        "healthy runs and stalled skips",
        |m| runs(m, "healthy", "success") >= before + 3.0 && runs(m, "stalled", "skipped") >= 1.0,
    );
    let m = scrape(&agent);
    assert_eq!(runs(&m, "stalled", "success"), 0.0);
    // The second profile of the abandoned cycle, and both in later cycles, are skipped: no
    // second thread is sent to the stuck file.
    assert_eq!(
        runs(&m, "stalled", "timeout"),
        1.0,
        "one abandoned run, not one per profile or cycle"
    );
    // Lifting the cap lets the fill finish; the thread returns and later runs of the target work
    // (an abandoned run must not leave the target cancelled).
    group.throttle_write_bps(&disk, 0);
    wait_until(
        &agent,
        Duration::from_secs(30),
        "the stalled target recovered",
        |m| runs(m, "stalled", "success") >= 1.0,
    );
    assert_eq!(std::fs::metadata(&probe_file).unwrap().len(), 8 << 20);
    // The stalled open never reached the engine, so none of its 16 s was charged to the device's
    // duty-cycle budget (0.2 s per second, 0.4 s at most): no run was refused for the budget.
    assert!(
        !agent.log.lock().unwrap().contains("duty-cycle budget"),
        "{}",
        agent.log.lock().unwrap()
    );
    agent.terminate();
}

fn a_target_on_a_hung_filesystem_does_not_stall_the_agent() {
    if !loopdev::ready() || !fuse::ready() {
        return;
    }
    let _guard = shared();
    let other = LoopDev::tmpfs(16 << 20);
    let dir = open_tempdir();
    let hung = FuseFs::hung();
    let arg = common::config_flag(
        dir.path(),
        &format!(
            "[defaults]\ninterval = \"1s\"\nruntime = \"100ms\"\ntimeout = \"300ms\"\njitter = 0.0\n\
             max_duty_cycle = 1.0\nprofiles = [\"randread-4k-qd1-gentle\"]\n\
             [[targets]]\nname = \"hung\"\npath = \"{}/probe.dat\"\nsize = \"1MiB\"\n\
             [[targets]]\nname = \"healthy\"\npath = \"{}\"\n",
            hung.path().display(),
            other.path.display()
        ),
    );
    let mut agent = Agent::start(&[&arg]);
    // The stat of the hung target's path never returns. Scrapes and the other target go on; the
    // hung target's cycle is given up after 5 s, and its later cycles are skipped while the stat
    // is stuck: watched, scraping every 100 ms, until five of them were.
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut healthy_runs = 0.0;
    let watched = poll(Duration::from_secs(30), Duration::from_millis(100), || {
        let m = scrape_timed(&agent, &mut slowest);
        healthy_runs = runs(&m, "healthy", "success");
        let given_up = runs(&m, "hung", "timeout") >= 1.0 && runs(&m, "hung", "skipped") >= 5.0;
        if given_up { Ok(()) } else { Err(()) }
    });
    assert!(
        watched.is_ok(),
        "the hung target was not given up and skipped:\n{}",
        agent.log.lock().unwrap()
    );
    let m = scrape(&agent);
    let elapsed = started.elapsed();
    eprintln!(
        "after {elapsed:?}: healthy {healthy_runs} successes, hung {} timeouts / {} skipped; slowest scrape {slowest:?}",
        runs(&m, "hung", "timeout"),
        runs(&m, "hung", "skipped")
    );
    assert!(
        slowest < Duration::from_secs(1),
        "a scrape took {slowest:?}"
    );
    assert!(
        healthy_runs >= 5.0,
        "{healthy_runs} healthy runs in {elapsed:?}"
    );
    assert_eq!(runs(&m, "hung", "timeout"), 1.0, "one abandoned cycle");
    assert!(runs(&m, "hung", "skipped") >= 1.0);
    assert_eq!(runs(&m, "hung", "success") + runs(&m, "hung", "error"), 0.0);
    agent.expect_log(
        "did not return within 5s (hung filesystem?)",
        Duration::from_secs(1),
    );
    // When the server dies the stuck stat fails (ENOTCONN) and returns; the target's later runs
    // end in errors, not in more skips.
    hung.abort();
    wait_until(
        &agent,
        Duration::from_secs(10),
        "errors after the server died",
        |m| runs(m, "hung", "error") >= 1.0,
    );
    agent.terminate();
}

fn sigint_stops_a_one_shot_probe_file_fill() {
    if !loopdev::blkio_ready() {
        return;
    }
    let _guard = shared();
    // A 64 MiB fill at 1 MiB/s would take a minute; SIGINT once it is under way must end it at
    // once.
    let (disk, fs, group) = throttled_ext4(128 << 20, 1 << 20);
    let probe_file = fs.path().join("probe.dat");
    let target = probe_file.to_str().unwrap();
    let mut child = KillOnDrop(
        group
            .command(
                &common::binary(),
                &[
                    "probe",
                    "--target",
                    target,
                    "--size",
                    "64MiB",
                    "--runtime",
                    "1s",
                ],
            )
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start the one-shot probe"),
    );
    // Dropped before the child: its writes are let through, so that it can be killed.
    let _lift = LiftWriteCap(&group, &disk);
    let child = &mut child.0;
    common::wait_for("the fill's first MiB", Duration::from_secs(20), || {
        common::file_len(&probe_file) >= 1 << 20
    });
    let sent = Instant::now();
    common::signal_process(child, "INT");
    let exit = common::wait_exit(child, Duration::from_secs(10))
        .expect("the fill did not stop within 10 s of SIGINT");
    let stopped_after = sent.elapsed();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    // A stopped fill of a file it created removes the file.
    assert!(
        !probe_file.exists(),
        "the partly filled probe file was left behind"
    );
    eprintln!("stopped {stopped_after:?} after SIGINT");
    assert!(!exit.success(), "a stopped fill is a failed run");
    assert!(stderr.contains("stopped"), "{stderr}");
    assert!(
        stopped_after < Duration::from_secs(3),
        "SIGINT took {stopped_after:?} to stop the fill"
    );
}

fn a_reload_during_a_fill_records_nothing_in_the_changed_target() {
    if !loopdev::blkio_ready() {
        return;
    }
    let _guard = shared();
    // The probe file's fill runs at 1 MiB/s; a reload that changes the target cancels it.
    let (disk, fs, group) = throttled_ext4(64 << 20, 1 << 20);
    let dir = open_tempdir();
    let probe_file = fs.path().join("probe.dat");
    let text = |interval: &str| {
        format!(
            "[defaults]\nruntime = \"100ms\"\njitter = 0.0\nmax_duty_cycle = 1.0\n\
             [[targets]]\nname = \"t\"\npath = \"{}\"\nsize = \"16MiB\"\ninterval = \"{interval}\"\n\
             profiles = [\"randread-4k-qd1\"]\n",
            probe_file.display()
        )
    };
    let arg = common::config_flag(dir.path(), &text("2s"));
    let agent = Agent::start_command(group.command(&common::binary(), &[&arg]));
    let _lift = LiftWriteCap(&group, &disk);
    agent.expect_log("creating the probe file", Duration::from_secs(10));
    common::wait_for("the fill's first MiB", Duration::from_secs(20), || {
        common::file_len(&probe_file) >= 1 << 20
    });
    common::config_flag(dir.path(), &text("3s"));
    agent.signal("HUP");
    agent.expect_log(
        "stopping probes of removed or changed target",
        Duration::from_secs(5),
    );
    // The cancelled fill stops at its next chunk (a second at most), and the run ends as
    // cancelled. Its failure belongs to the target as it was, not to the series the reload
    // started afresh.
    agent.expect_log("probe run cancelled", Duration::from_secs(5));
    let m = scrape(&agent);
    assert_eq!(
        runs(&m, "t", "error"),
        0.0,
        "the cancelled run was recorded"
    );
    group.throttle_write_bps(&disk, 0);
    // The new task finishes the fill (at the 16 MiB the mark names) and probes.
    wait_until(&agent, Duration::from_secs(20), "a successful run", |m| {
        runs(m, "t", "success") >= 1.0
    });
    let m = scrape(&agent);
    assert_eq!(runs(&m, "t", "error"), 0.0);
    assert_eq!(std::fs::metadata(&probe_file).unwrap().len(), 16 << 20);
}

fn io_uring_blocked_by_seccomp_falls_back_to_psync() {
    let python = common::python_seccomp();
    if !common::require(python.is_some(), "python3-seccomp (Debian package)") {
        return;
    }
    let _guard = shared();
    let dir = open_tempdir();
    let arg = common::config_flag(
        dir.path(),
        &format!(
            "[[targets]]\nname = \"seccomp\"\npath = \"{}\"\nsize = \"16MiB\"\ninterval = \"1s\"\nruntime = \"100ms\"\nmax_duty_cycle = 0.5\n",
            dir.path().join("probe.dat").display()
        ),
    );
    let mut cmd = common::binary_without_syscall(
        python.expect("checked above"),
        dir.path(),
        "io_uring_setup",
        "EPERM",
    );
    cmd.arg(&arg);
    let agent = Agent::start_command(cmd);
    let m = wait_until(
        &agent,
        Duration::from_secs(60),
        "successful psync runs",
        |m| runs(m, "seccomp", "success") >= 2.0,
    );
    assert_eq!(m.get("diskprobe_engine_info{engine=\"psync\"}"), Some(&1.0));
    assert!(!m.contains_key("diskprobe_engine_info{engine=\"io_uring\"}"));
    let log = agent.log.lock().unwrap().clone();
    assert!(log.contains("io_uring cannot be set up"), "{log}");
    assert_eq!(
        log.matches("io_uring cannot be set up").count(),
        1,
        "reason logged once"
    );
}

fn enospc_eacces_and_no_o_direct_are_clear_per_target_errors() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    // No space: a 16 MiB ext4 on a loop device cannot hold the default 256 MiB probe file. (A
    // size set in the file is also reported at load, as a warning: tests/it/machine_state.rs.)
    // The fill is refused before it writes anything.
    let small = LoopDev::tmpfs(16 << 20);
    mkfs(&small, "ext4");
    let full = Mount::new(&[small.path.to_str().unwrap()]);
    // No O_DIRECT: ramfs refuses it.
    let ramfs = Mount::new(&["-t", "ramfs", "ramfs"]);
    let dir = open_tempdir();
    let arg = common::config_flag(
        dir.path(),
        &format!(
            "[defaults]\ninterval = \"1s\"\nruntime = \"100ms\"\nmax_duty_cycle = 0.5\nprofiles = [\"randread-4k-qd1-gentle\"]\n\
             [scheduler]\nmax_concurrent_probes = 3\n\
             [[targets]]\nname = \"full\"\npath = \"{}/probe.dat\"\n\
             [[targets]]\nname = \"ramfs\"\npath = \"{}/probe.dat\"\nsize = \"1MiB\"\n\
             [[targets]]\nname = \"fine\"\npath = \"{}/probe.dat\"\nsize = \"16MiB\"\n",
            full.path().display(),
            ramfs.path().display(),
            dir.path().display()
        ),
    );
    let agent = Agent::start(&[&arg]);
    wait_until(
        &agent,
        Duration::from_secs(60),
        "errors and successes",
        |m| {
            runs(m, "full", "error") >= 1.0
                && runs(m, "ramfs", "error") >= 1.0
                && runs(m, "fine", "success") >= 2.0
        },
    );
    let log = agent.log.lock().unwrap().clone();
    assert!(
        log.contains("is beyond the size of its filesystem"),
        "the lack of space is named:\n{log}"
    );
    assert!(
        !full.path().join("probe.dat").exists(),
        "a refused fill leaves nothing behind"
    );
    assert!(
        log.contains("O_DIRECT is not supported"),
        "no O_DIRECT is named:\n{log}"
    );
    let page = agent.get("/").1;
    assert!(
        page.contains("is beyond the size of its filesystem")
            && page.contains("O_DIRECT is not supported")
    );
    drop(agent);

    // EACCES: an unprivileged agent cannot open a root-owned device node.
    let dev = LoopDev::tmpfs(16 << 20);
    let arg = common::config_flag(
        dir.path(),
        &format!(
            "[[targets]]\nname = \"denied\"\npath = \"{}\"\ninterval = \"1s\"\nruntime = \"100ms\"\nmax_duty_cycle = 0.5\n",
            dev.path.display()
        ),
    );
    let Some(setpriv) = which("setpriv") else {
        common::require(false, "setpriv (util-linux)");
        return;
    };
    let mut cmd = Command::new(setpriv);
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(common::binary())
        .arg(&arg);
    let agent = Agent::start_command(cmd);
    wait_until(&agent, Duration::from_secs(30), "EACCES errors", |m| {
        runs(m, "denied", "error") >= 2.0
    });
    let log = agent.log.lock().unwrap().clone();
    assert!(log.contains("Permission denied"), "{log}");
    assert_eq!(agent.get("/-/healthy").0, 200);
}

fn sha(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

fn mounted_devices_are_refused_and_sigterm_mid_write_changes_nothing_outside_the_region() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    // A mounted ext4 loop device is refused for writes, visibly: by every run (reason refused;
    // also a device mounted after the load: probe_loop::write_safety_refuses_mounted_or_held_devices),
    // and at load as a warning: the machine's state does not stop the agent, whose other target
    // writes its region meanwhile.
    let mounted = LoopDev::tmpfs(32 << 20);
    mkfs(&mounted, "ext4");
    let _mount = Mount::new(&[mounted.path.to_str().unwrap()]);
    let dev = LoopDev::tmpfs(64 << 20);
    let before = dev.content();
    let (lo, hi) = (16usize << 20, 32usize << 20);
    let dir = open_tempdir();
    let mounted_target = format!(
        "[[targets]]\nname = \"mounted\"\npath = \"{}\"\nallow_writes = true\nallow_device_writes = true\n\
         profiles = [\"randwrite-4k-qd1\"]\ninterval = \"1s\"\nruntime = \"100ms\"\nmax_duty_cycle = 0.5\n",
        mounted.path.display()
    );
    let region_target = format!(
        "[[targets]]\nname = \"region\"\npath = \"{}\"\nallow_writes = true\nallow_device_writes = true\n\
         offset = \"16MiB\"\nsize = \"16MiB\"\nprofiles = [\"randwrite-4k-qd32\"]\nruntime = \"8s\"\ntimeout = \"20s\"\n\
         interval = \"1m\"\nmax_duty_cycle = 0.5\n[scheduler]\nmax_concurrent_probes = 2\n",
        dev.path.display()
    );
    let arg = common::config_flag(dir.path(), &format!("{mounted_target}{region_target}"));
    let start = dev.stats().writes;
    let mut agent = Agent::start(&[&arg]);
    agent.expect_log("is mounted", Duration::from_secs(5));
    // The mounted target's runs are refused (it starts first: targets start in name order).
    wait_until(&agent, Duration::from_secs(30), "a refused run", |m| {
        runs(m, "mounted", "error") >= 1.0
            && common::sum(
                m,
                "diskprobe_probe_last_error_timestamp_seconds",
                &["target=\"mounted\"", "reason=\"refused\""],
            ) > 0.0
    });

    // The region target is writing now (8 s run); SIGTERM in the middle.
    common::wait_for("the write probe to start", Duration::from_secs(30), || {
        dev.stats().writes >= start + 100
    });
    let t = Instant::now();
    agent.terminate();
    eprintln!("exited {:?} after SIGTERM", t.elapsed());
    let after = dev.content();
    assert_eq!(before.len(), after.len());
    assert_eq!(
        sha(&before[..lo]),
        sha(&after[..lo]),
        "bytes before the region changed"
    );
    assert_eq!(
        sha(&before[hi..]),
        sha(&after[hi..]),
        "bytes after the region changed"
    );
    assert_ne!(
        sha(&before[lo..hi]),
        sha(&after[lo..hi]),
        "the region was written"
    );
    let changed_outside = before[..lo]
        .iter()
        .zip(&after[..lo])
        .chain(before[hi..].iter().zip(&after[hi..]))
        .filter(|(a, b)| a != b)
        .count();
    eprintln!("bytes changed outside the region: {changed_outside}");
    assert_eq!(changed_outside, 0);
}

fn symlinked_probe_files_are_refused_and_the_other_file_is_untouched() {
    let _guard = shared();
    let dir = open_tempdir();
    // Someone else's file, and a probe path that points at it.
    let victim = dir.path().join("precious.db");
    let content: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(&victim, &content).unwrap();
    let link = dir.path().join("probe.dat");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let arg = common::config_flag(
        dir.path(),
        &format!(
            "[[targets]]\nname = \"link\"\npath = \"{}\"\nsize = \"8MiB\"\nallow_writes = true\n\
             profiles = [\"randread-4k-qd1-gentle\", \"randwrite-4k-qd1-gentle\"]\ninterval = \"1s\"\nruntime = \"100ms\"\nmax_duty_cycle = 0.5\n",
            link.display()
        ),
    );
    let agent = Agent::start(&[&arg]);
    let m = wait_until(&agent, Duration::from_secs(30), "refusals", |m| {
        runs(m, "link", "error") >= 4.0
    });
    assert_eq!(runs(&m, "link", "success"), 0.0);
    assert!(agent.log.lock().unwrap().contains("is a symbolic link"));
    drop(agent);
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        content,
        "the linked file changed"
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

fn symlinks_to_block_devices_are_followed() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    let dev = LoopDev::tmpfs(16 << 20);
    let dir = open_tempdir();
    let link = dir.path().join("by-id-style");
    std::os::unix::fs::symlink(&dev.path, &link).unwrap();
    let run = common::one_shot_run(&[
        "--target",
        link.to_str().unwrap(),
        "--profile",
        "randread-4k-qd1",
        "--runtime",
        "200ms",
    ]);
    assert_eq!(run["device"], dev.name.as_str(), "{run}");
}

fn reads_interrupted_by_a_cancellation_are_not_io_errors() {
    if !fuse::ready() {
        return;
    }
    let _guard = shared();
    // A file on a FUSE filesystem whose server leaves reads waiting, and fails a waiting read with
    // EINTR when the kernel passes on an interrupt (as FUSE daemons do). The io_uring engine's
    // thread waits in the read itself (FUSE direct I/O is issued inline), so SIGINT delivered to
    // that thread both cancels the run and interrupts the read.
    let fs = FuseFs::mount(16 << 20);
    fs.set_mode(Mode::HangReads);
    fs.fail_interrupted_reads();
    let mut child = KillOnDrop(
        Command::new(common::binary())
            .args(["probe", "--engine", "io_uring", "--format", "json"])
            .args(["--runtime", "5s", "--timeout", "30s", "--target"])
            .arg(fs.file())
            .args(["--fio", "-rw=randread -bs=4k -iodepth=1"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Dropped first if the test fails: the hung read ends, and the child can be reaped.
    let _aborted = fs.abort_on_drop();
    let pid = child.0.id();
    let (timeout, every) = (Duration::from_secs(20), Duration::from_millis(50));
    let engine_thread = common::wait::poll(timeout, every, || {
        let engine = process::threads_named(pid, "diskprobe-uring");
        match engine.first() {
            Some(task) if fs.reads() >= 1 => Ok(*task),
            _ => Err(()),
        }
    })
    .expect("the probe never read");
    // SAFETY: tgkill with the child's pid and one of its thread ids.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, pid as i32, engine_thread, libc::SIGINT) };
    assert_eq!(rc, 0);
    let exit = common::wait_exit(&mut child.0, Duration::from_secs(10));
    let mut stdout = String::new();
    if exit.is_some() {
        child
            .0
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
    }
    assert!(
        exit.is_some(),
        "the cancelled probe did not end: it retried the interrupted read"
    );
    let runs: serde_json::Value = serde_json::from_str(&stdout).expect("JSON output");
    let run = &runs[0];
    eprintln!("{} reads reached the server; {run}", fs.reads());
    assert_eq!(run["error"], "cancelled", "{run}");
    assert_eq!(
        run["io_errors"], 0,
        "the interrupted read counted as an error: {run}"
    );
}

crate::tests! {
    a_vanished_device_fails_its_runs_and_recovers_when_it_returns: [LOOP],
    dead_devices_keep_one_ring_each_and_other_devices_keep_their_schedule: [LONG, LOOP, BLKIO, ROOT, FUSE],
    a_probe_file_fill_that_stalls_is_abandoned_and_other_targets_go_on: [LOOP, BLKIO],
    a_target_on_a_hung_filesystem_does_not_stall_the_agent: [LOOP, ROOT, FUSE],
    sigint_stops_a_one_shot_probe_file_fill: [LOOP, BLKIO],
    a_reload_during_a_fill_records_nothing_in_the_changed_target: [LOOP, BLKIO],
    io_uring_blocked_by_seccomp_falls_back_to_psync,
    enospc_eacces_and_no_o_direct_are_clear_per_target_errors: [LOOP],
    mounted_devices_are_refused_and_sigterm_mid_write_changes_nothing_outside_the_region: [LOOP],
    symlinked_probe_files_are_refused_and_the_other_file_is_untouched,
    symlinks_to_block_devices_are_followed: [LOOP],
    reads_interrupted_by_a_cancellation_are_not_io_errors: [ROOT, FUSE],
}
