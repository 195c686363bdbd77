//! Headroom end to end, on real capped disks: two loop devices over files on the root
//! filesystem with direct I/O, capped by a cgroup v1 blkio group at 3,000 read IOPS each (the
//! second also at 64 MiB/s of reads, and partitioned), the agent and fio workloads inside that
//! group (they share the caps, as a cloud disk's workload and a probe do), and a real Prometheus
//! evaluating the bundled rules (deploy/prometheus/rules.yml, windows shortened by
//! [`shortened_rules`]). Target `a` is the first disk and declares `iops_limit = 3000`; target `b`
//! is the second disk's partition, declares the same and probes with the psync engine (see the
//! configuration for why). It runs on each engine ([`Engine`]), as long tests (`LONG`; `.ci/run`
//! runs them; every `cargo test` checks the headroom rules in the quick scenario suite of the
//! `rules` binary, and a real Prometheus with the agent in `prometheus_e2e`): Debian's
//! Prometheus 2.42 (text formats, classic buckets), Prometheus 3.5 LTS with native histograms,
//! protobuf scrapes and classic-only
//! histograms converted to NHCB ([`Histograms::Nhcb`]), as a Prometheus 3 user may run it, and
//! VictoriaMetrics scraping with vmalert evaluating ([`Victoria`]). The body is one function of
//! the server ([`RuleServer`]); times are taken on the server's view ([`RuleServer::view_time`]:
//! VictoriaMetrics and vmalert show a moment's scrapes and evaluations some seconds after it).
//!
//! 1. Idle: the capacity runs complete, and the median of them is each disk's measured limit
//!    (`source="probe"`): within 5% of 3,000 IOPS for 4k QD32 reads, and within 5% of the
//!    64 MiB/s cap for 1M QD16 reads; the throttling rule reads each disk (it needs the disk's
//!    calm p99 level).
//! 2. fio reads `a` at 1,000 IOPS and `b`'s partition at 2,900: each disk's consumed share (the
//!    median of its last 8 evaluations) is its own, 0.33 ± 0.03 and 0.97 ± 0.03 (the probes' own
//!    I/O subtracted, the partition's I/O counted in its disk); `DiskprobeNearLimit` fires for `b` and never for `a`; the throttling rule
//!    reads 0 for `a`.
//! 3. fio asks `b` for 6,000 IOPS at queue depth 32 (held at 3,000 by the cap) and reads `a` at
//!    2,900: the throttling rule reads 1 for `b` at every evaluation of 5 s within the phase (its
//!    gentle probe's p99 far above its calm level) and `DiskprobeThrottled` fires, and `a` at
//!    0.97 ± 0.03 fires `DiskprobeNearLimit`.
//! 4. No rule failed to evaluate, at any evaluation ([`RuleServer::rule_problems`]).
//!
//! Every figure is printed as a `figure:` line (`-- --nocapture`); `bench/headroom.sh` runs this
//! test several times and tabulates them.

use crate::common;
use crate::common::loopdev;
use crate::common::prometheus;

use common::engines::Engine;
use common::rule_server::{RuleServer, unix_now};
use common::victoria::Victoria;
use common::{Agent, require, which};
use loopdev::{BlkioGroup, LoopDev};
use prometheus::{Histograms, Prometheus, wait_for};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Both disks' read IOPS cap, and the declared `iops_limit`.
const CAP_IOPS: u32 = 3000;
/// The second disk's read bandwidth cap.
const CAP_BPS: u64 = 64 << 20;

/// The headroom rules' rate window in deploy/prometheus/rules.yml, which [`shortened_rules`]
/// makes 5 s, and the recording of the consumed share, named after it.
const RATE_WINDOW: &str = "[4m]";
const CONSUMED_SHARE: &str = "diskprobe:disk_limit_consumed:ratio_rate4m";

/// The bundled rules with windows shortened for a test of a minute: the rates' [`RATE_WINDOW`]
/// becomes 5 s (one scrape a second), the 5-minute group (completed capacity runs, calm p99) runs
/// every second with `offset 1s`, the hourly group every 2 s, its `[1h]` 20 s, `[1d]` and the
/// `[2h]` reads of the hourly recordings 10 minutes (the whole test), every `for:` 5 s.
fn shortened_rules() -> String {
    prometheus::shortened_rules(&[
        (RATE_WINDOW, "[5s]"),
        ("interval: 5m", "interval: 1s"),
        ("offset 5m", "offset 1s"),
        ("interval: 1h", "interval: 2s"),
        ("[1h]", "[20s]"),
        ("[1d]", "[10m]"),
        ("[2h]", "[10m]"),
    ])
}

/// A fio workload of 4k random reads at `iops` and queue depth `depth` in the group, until dropped
/// (killed and reaped).
struct Fio(Child);

impl Fio {
    fn start(group: &BlkioGroup, path: &Path, iops: u32, depth: u32) -> Fio {
        let fio = which("fio").expect("checked by the caller");
        let args = [
            "--name=workload".to_owned(),
            format!("--filename={}", path.display()),
            "--rw=randread".to_owned(),
            "--bs=4k".to_owned(),
            format!("--iodepth={depth}"),
            "--ioengine=libaio".to_owned(),
            "--direct=1".to_owned(),
            format!("--rate_iops={iops}"),
            "--time_based".to_owned(),
            "--runtime=600".to_owned(),
            // The job in a thread of this process, not a child process of its own: a child
            // would outlive the kill on drop and read on for the rest of the runtime.
            "--thread".to_owned(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let child = group
            .command(&fio, &args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fio");
        Fio(child)
    }
}

impl Drop for Fio {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The value of an instant query that must have exactly one sample.
fn one(prom: &dyn RuleServer, q: &str) -> f64 {
    prom.value(q, None)
        .unwrap_or_else(|| panic!("no single value for {q}: {:?}", prom.query(q, None)))
}

/// `alert`s (pending or firing) of `device` in the `ALERTS` series over the last `seconds` (of
/// the server's view), by state.
fn alert_states(prom: &dyn RuleServer, alert: &str, device: &str, seconds: f64) -> Vec<String> {
    let q = format!(
        "max by (alertstate) (max_over_time(ALERTS{{alertname=\"{alert}\",device=\"{device}\"}}[{}ms]))",
        (seconds * 1e3).ceil()
    );
    prom.query(&q, None)
        .iter()
        .filter_map(|e| e["metric"]["alertstate"].as_str().map(str::to_owned))
        .collect()
}

fn shares_alerts_throttling_and_measured_limits_on_capped_loop_devices() {
    headroom(Engine::Prometheus2, Histograms::Classic);
}

fn shares_alerts_throttling_and_measured_limits_on_capped_loop_devices_on_prometheus3() {
    headroom(Engine::Prometheus3, Histograms::Nhcb);
}

fn shares_alerts_throttling_and_measured_limits_on_capped_loop_devices_on_victoriametrics() {
    headroom(Engine::VictoriaMetrics, Histograms::Classic);
}

/// The test, on `engine`'s server keeping histograms as `histograms` says (VictoriaMetrics:
/// classic buckets only).
fn headroom(engine: Engine, histograms: Histograms) {
    let ready = loopdev::blkio_ready()
        && require(which("fio").is_some(), "fio (Debian package fio)")
        && require(which("partx").is_some(), "partx (util-linux)")
        && common::rule_server::ready(engine);
    if !ready {
        return;
    }
    // The shares (± 0.03), the measured limits (± 5%) and the throttling verdict are rates and
    // latencies under blkio caps.
    let _machine = common::exclusive();
    let started = Instant::now();
    let a = LoopDev::disk(256 << 20);
    // One partition from 1 MiB to 1 MiB before the end.
    let b = LoopDev::disk_partitioned(256 << 20, &[(2048, (256 << 11) - 4096)]);
    let b1 = b.partition(1);
    let group = BlkioGroup::new();
    for dev in [&a, &b] {
        group.throttle_read_iops(dev, CAP_IOPS);
    }
    group.throttle_read_bps(&b, CAP_BPS);

    let dir = tempfile::Builder::new()
        .prefix(&loopdev::name_prefix())
        .tempdir_in("/var/tmp")
        .unwrap();
    // Target b runs on the psync engine: under a blkio bandwidth throttle, this kernel (6.18)
    // charges an io_uring read of 1 MiB twice (fio's io_uring engine too; reads of 512 KiB and
    // less, libaio and psync are charged once), so an io_uring 1M probe reads half the cap here.
    // A cloud's cap is applied outside the guest and does not do that.
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[scheduler]\nmax_concurrent_probes = 2\n\
             [defaults]\ninterval = \"4s\"\nbusy_window = \"200ms\"\nmax_duty_cycle = 1.0\niops_limit = {CAP_IOPS}\n\
             [[targets]]\nname = \"a\"\npath = \"{}\"\nprofiles = [\"randread-4k-qd1-gentle\", \"randread-4k-qd32\"]\n\
             [[targets]]\nname = \"b\"\npath = \"{}\"\nprofiles = [\"randread-4k-qd1-gentle\", \"randread-4k-qd32\", \"read-1m-qd16\"]\nengine = \"psync\"\n",
            a.path.display(),
            b1.display()
        ),
    )
    .unwrap();
    let config_arg = format!("--config.file={}", config.display());
    let agent_started = unix_now();
    let agent = Agent::start_command(group.command(&common::binary(), &[&config_arg]));
    let rules = shortened_rules();
    let prom: Box<dyn RuleServer> = match engine {
        Engine::Prometheus2 | Engine::Prometheus3 => Box::new(Prometheus::start_with_rules(
            engine,
            dir.path(),
            agent.addr,
            Some(&rules),
            histograms,
        )),
        Engine::VictoriaMetrics => Box::new(Victoria::start(dir.path(), agent.addr, &rules)),
    };
    let prom = prom.as_ref();
    // Every wait allows for the time the server takes to show what happened.
    let within = |seconds: u64| Duration::from_secs(seconds) + prom.lag();
    // Seconds of the server's view since a moment of the wall clock.
    let since = |moment: f64| prom.view_time() - moment;
    let (da, db) = (a.name.as_str(), b.name.as_str());

    // 1. Idle: three completed runs of each capacity profile, then their median per disk.
    let completed = |metric: &str, target: &str, profile: &str| {
        prom.value(
            &format!(
                "count_over_time(diskprobe:{metric}:completed{{target=\"{target}\",profile=\"{profile}\"}}[10m])"
            ),
            None,
        )
        .unwrap_or(0.0)
    };
    wait_for(
        "three completed capacity runs of each profile",
        within(60),
        || {
            completed("probe_iops", "a", "randread-4k-qd32") >= 3.0
                && completed("probe_iops", "b", "randread-4k-qd32") >= 3.0
                && completed("probe_throughput_bytes_per_second", "b", "read-1m-qd16") >= 3.0
        },
    );
    let measured = |metric: &str, d: &str| {
        prom.value(
            &format!("diskprobe:disk_limit_{metric}:probe{{device=\"{d}\"}}"),
            None,
        )
    };
    wait_for("the measured limits", within(10), || {
        measured("iops", da).is_some()
            && measured("iops", db).is_some()
            && measured("bytes_per_second", db).is_some()
    });
    let iops_a = measured("iops", da).unwrap();
    let iops_b = measured("iops", db).unwrap();
    let measured_bps = measured("bytes_per_second", db).unwrap();
    figure("measured IOPS limit of a, 4k QD32, cap 3000", iops_a);
    figure("measured IOPS limit of b, 4k QD32, cap 3000", iops_b);
    figure(
        "measured throughput limit of b, 1M QD16, MiB/s, cap 64",
        measured_bps / (1 << 20) as f64,
    );
    for (what, got, cap) in [
        ("IOPS of a", iops_a, f64::from(CAP_IOPS)),
        ("IOPS of b", iops_b, f64::from(CAP_IOPS)),
        ("throughput of b", measured_bps, CAP_BPS as f64),
    ] {
        assert!(
            (got / cap - 1.0).abs() <= 0.05,
            "measured {what} {got:.0}, not within 5% of the cap {cap:.0}"
        );
    }

    // The throttling rule needs each disk's calm p99 level, recorded from calm runs by three
    // hourly stages (every 2 s here): it exists for both disks before the workloads start. (On
    // Prometheus 2.42 about 20 s after the agent starts; on VictoriaMetrics, where each stage
    // reads the one before some seconds late, about 80 s.)
    let throttled = |d: &str| {
        prom.value(
            &format!("diskprobe:disk_throttled:bool{{device=\"{d}\"}}"),
            None,
        )
    };
    wait_for("the throttling rule for both disks", within(120), || {
        throttled(da).is_some() && throttled(db).is_some()
    });
    figure(
        "seconds from the agent's start until the throttling rule read both disks",
        since(agent_started),
    );

    // 2. a at 1,000 IOPS, b's partition at 2,900. A share is the median of its last 8
    // evaluations: while a probe runs on a disk, the probe and fio share the disk's cap and fio
    // does less for a second (the probe's own I/O is subtracted, fio's shortfall is real), so one
    // evaluation can read a few hundredths low; the workload's share is the typical one.
    let share = |d: &str| {
        one(
            prom,
            &format!(
                "quantile_over_time(0.5, {CONSUMED_SHARE}{{device=\"{d}\",limit=\"iops\"}}[8s])"
            ),
        )
    };
    let phase = unix_now();
    let fio_a = Fio::start(&group, &a.path, 1000, 4);
    let fio_b = Fio::start(&group, &b1, 2900, 8);
    wait_for("DiskprobeNearLimit firing for b", within(60), || {
        alert_states(prom, "DiskprobeNearLimit", db, 2.0).contains(&"firing".to_owned())
    });
    figure(
        "seconds until DiskprobeNearLimit fired for b (for 5s, window 5s)",
        since(phase),
    );
    let (share_a, share_b) = (share(da), share(db));
    let seen_a = alert_states(prom, "DiskprobeNearLimit", da, since(phase) + 1.0);
    figure("consumed share of a, fio at 1000 IOPS", share_a);
    figure(
        "consumed share of b, fio at 2900 IOPS on its partition",
        share_b,
    );
    figure(
        "DiskprobeNearLimit states seen for a meanwhile",
        seen_a.len() as f64,
    );
    assert!((share_a - 1.0 / 3.0).abs() <= 0.03, "share of a {share_a}");
    assert!((share_b - 0.97).abs() <= 0.03, "share of b {share_b}");
    assert!(seen_a.is_empty(), "DiskprobeNearLimit for a: {seen_a:?}");
    // A disk at a third of its limit is not throttled, whatever its latency.
    let (throttled_a, throttled_b) = (throttled(da), throttled(db));
    figure(
        "throttling rule for a, fio at 1000 IOPS",
        throttled_a.unwrap_or(f64::NAN),
    );
    figure(
        "throttling rule for b, fio at 2900 IOPS",
        throttled_b.unwrap_or(f64::NAN),
    );
    assert_eq!(throttled_a, Some(0.0), "throttling rule for a at a third");
    drop((fio_a, fio_b));
    // Nothing of those workloads reads on (only the agent is left in the group).
    let left: Vec<u32> = group
        .pids()
        .into_iter()
        .filter(|&p| p != agent.pid())
        .collect();
    assert!(left.is_empty(), "left in the group after fio: {left:?}");

    // 3. b asked for 6,000 IOPS at QD32 (held at 3,000); a at 2,900.
    let phase = unix_now();
    let _fio_a = Fio::start(&group, &a.path, 2900, 8);
    let _fio_b = Fio::start(&group, &b1, 6000, 32);
    // At 1 in every evaluation of the last 5 s, all of them in this phase (the rule may read 1
    // already at 2,900 IOPS: the probe's own reads queue behind the workload's at the cap).
    wait_for("the throttling rule at 1 for b for 5 s", within(60), || {
        since(phase) >= 7.0
            && prom.value(
                &format!("min_over_time(diskprobe:disk_throttled:bool{{device=\"{db}\"}}[5s])"),
                None,
            ) == Some(1.0)
    });
    figure(
        "seconds until the throttling rule had read 1 for b for 5 s, 6000 IOPS asked at QD32",
        since(phase),
    );
    wait_for("DiskprobeThrottled firing for b", within(60), || {
        alert_states(prom, "DiskprobeThrottled", db, 2.0).contains(&"firing".to_owned())
    });
    figure(
        "seconds until DiskprobeThrottled fired for b (for 5s)",
        since(phase),
    );
    let gentle_p99 = "diskprobe_probe_latency_seconds{target=\"b\",profile=\"randread-4k-qd1-gentle\",stat=\"p99\"}";
    figure(
        "gentle probe p99 of b then, ms",
        one(prom, gentle_p99) * 1e3,
    );
    figure(
        "calm p99 level of b, ms",
        one(
            prom,
            "last_over_time(diskprobe:probe_latency_p99:calm_median_1d{target=\"b\"}[10m])",
        ) * 1e3,
    );
    wait_for("DiskprobeNearLimit firing for a", within(60), || {
        alert_states(prom, "DiskprobeNearLimit", da, 2.0).contains(&"firing".to_owned())
    });
    let share_a = share(da);
    figure("consumed share of a, fio at 2900 IOPS", share_a);
    assert!((share_a - 0.97).abs() <= 0.03, "share of a {share_a}");
    figure("seconds the test took", started.elapsed().as_secs_f64());
    print_rule_costs(prom);
    // 4. No rule failed to evaluate.
    let problems = prom.rule_problems();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Prints `what = value` as a `figure:` line, for `bench/headroom.sh`.
fn figure(what: &str, value: f64) {
    eprintln!("figure: {what} = {value:.3}");
}

/// Prints the samples each headroom rule reads per evaluation, as Prometheus counts them
/// (`stats=all`; VictoriaMetrics reports no such count), on this rig: 2 targets and 5 target ×
/// profile pairs on 2 disks, one scrape a second, the shortened windows.
fn print_rule_costs(prom: &dyn RuleServer) {
    for group in prom.rule_groups() {
        let name = group["name"].as_str().unwrap_or_default();
        if !name.starts_with("diskprobe.headroom") {
            continue;
        }
        for rule in group["rules"].as_array().into_iter().flatten() {
            let query = rule["query"].as_str().expect("query");
            let Some(samples) = prom.samples_read(query) else {
                return;
            };
            let limit = rule["labels"]["limit"]
                .as_str()
                .map(|l| format!("{{limit={l}}}"))
                .unwrap_or_default();
            let rule = rule["name"].as_str().unwrap_or_default();
            figure(&format!("samples read by {name} {rule}{limit}"), samples);
        }
    }
}

crate::tests! {
    shares_alerts_throttling_and_measured_limits_on_capped_loop_devices: [LONG, LOOP, BLKIO, FIO, PARTX],
    shares_alerts_throttling_and_measured_limits_on_capped_loop_devices_on_prometheus3: [LONG, LOOP, BLKIO, FIO, PARTX],
    shares_alerts_throttling_and_measured_limits_on_capped_loop_devices_on_victoriametrics: [LONG, LOOP, BLKIO, FIO, PARTX],
}
