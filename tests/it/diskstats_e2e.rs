//! End-to-end diskstats: the real binary against fixture /proc and /sys trees.
//!
//! - Golden files: the exposition for each fixture is diffed against `tests/golden/` (text; for
//!   one fixture also OpenMetrics and protobuf, the latter as decoded messages). Regenerate them
//!   with `UPDATE_GOLDEN=1 cargo test --test it diskstats_e2e::` and review the diff.
//! - `promtool check metrics` must report nothing for the live exposition.
//! - node_exporter 1.5.0 (Debian's `prometheus-node-exporter`) run on the same fixture must report
//!   the same values for every `node_disk_*` series.

use crate::common;

use common::{Agent, check_golden, http_request, require, samples, which};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn fixtures() -> PathBuf {
    common::repo_root().join("tests/fixtures")
}

/// A config file reporting every device (no exclude), in a temp dir.
fn include_all_config(dir: &Path) -> PathBuf {
    let path = dir.join("all.toml");
    std::fs::write(&path, "[diskstats]\ndevice_exclude = \"^$\"\n").unwrap();
    path
}

fn start(procfs: &str, config: Option<&Path>) -> Agent {
    let procfs = fixtures().join(procfs);
    let sysfs = fixtures().join("sys");
    let mut args = vec![
        format!("--path.procfs={}", procfs.display()),
        format!("--path.sysfs={}", sysfs.display()),
    ];
    if let Some(c) = config {
        args.push(format!("--config.file={}", c.display()));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Agent::start(&args)
}

/// Drops lines whose values change from run to run (process metrics, timings, build info) or
/// with the kernel (the sandbox's Landlock ABI and state).
fn stable(exposition: &str) -> String {
    exposition
        .lines()
        .filter(|l| {
            !(l.starts_with("process_")
                || l.starts_with("# HELP process_")
                || l.starts_with("# TYPE process_")
                || l.starts_with("diskprobe_scrape_collector_duration_seconds{")
                || l.starts_with("diskprobe_build_info{")
                || l.starts_with("diskprobe_sandbox_info{")
                || l.starts_with("diskprobe_config_last_reload_success_timestamp_seconds "))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

fn golden_outputs_for_every_kernel_era() {
    let tmp = tempfile::tempdir().unwrap();
    let all = include_all_config(tmp.path());
    let cases: [(&str, Option<&Path>, &str); 5] = [
        ("proc-6.1", None, "proc-6.1.default.txt"),
        ("proc-6.1", Some(&all), "proc-6.1.all.txt"),
        ("proc-4.19", Some(&all), "proc-4.19.all.txt"),
        ("proc-4.4", Some(&all), "proc-4.4.all.txt"),
        ("proc-odd", Some(&all), "proc-odd.all.txt"),
    ];
    for (procfs, config, golden) in cases {
        let agent = start(procfs, config);
        let (status, body) = agent.get("/metrics");
        assert_eq!(status, 200, "{procfs}");
        common::promtool_check_metrics(&body);
        check_golden(golden, &stable(&body), "diskstats_e2e");
    }
}

fn openmetrics_golden_when_asked_for() {
    let agent = start("proc-6.1", None);
    let resp = http_request(
        agent.addr,
        "GET",
        "/metrics",
        &[(
            "Accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        )],
    );
    assert_eq!(resp.status, 200);
    assert_eq!(
        resp.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(resp.body.ends_with("# EOF\n"));
    check_golden(
        "proc-6.1.default.openmetrics.txt",
        &stable(&resp.body),
        "diskstats_e2e",
    );
}

fn protobuf_golden_when_asked_for() {
    let agent = start("proc-6.1", None);
    let (resp, body) = common::http_request_bytes(
        agent.addr,
        "GET",
        "/metrics",
        &[
            (
                "Accept",
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,text/plain;q=0.5",
            ),
            ("Accept-Encoding", "gzip"),
        ],
    );
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("content-encoding"), Some("gzip"));
    let mut decoded = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&body[..]), &mut decoded).unwrap();
    let mut families = common::decode_protobuf(&decoded);
    // The same families as the text golden file keeps, with the same values.
    families.retain(|f| {
        !(f.name().starts_with("process_")
            || f.name() == "diskprobe_build_info"
            || f.name() == "diskprobe_sandbox_info"
            || f.name() == "diskprobe_config_last_reload_success_timestamp_seconds")
    });
    for f in &mut families {
        if f.name() == "diskprobe_scrape_collector_duration_seconds" {
            for m in &mut f.metric {
                m.gauge = None;
            }
        }
    }
    check_golden(
        "proc-6.1.default.protobuf.txt",
        &common::protobuf_dump(&families),
        "diskstats_e2e",
    );
}

fn odd_lines_are_skipped_not_fatal() {
    let tmp = tempfile::tempdir().unwrap();
    let all = include_all_config(tmp.path());
    let agent = start("proc-odd", Some(&all));
    let (_, body) = agent.get("/metrics");
    let s: BTreeMap<String, f64> = samples(&body).into_iter().collect();
    assert_eq!(
        s.get("diskprobe_scrape_collector_success{collector=\"diskstats\"}"),
        Some(&1.0)
    );
    // sde has 16 fields: the 14 of the oldest layout are read, the rest ignored.
    for kept in ["sda", "sdb", "nvme0n1", "sde"] {
        let key = format!("diskprobe_disk_reads_completed_total{{device=\"{kept}\"}}");
        assert_eq!(s.get(&key), Some(&1.0), "{kept} should be reported");
    }
    for skipped in ["sda1", "sdc", "sdd"] {
        assert!(
            !body.contains(&format!("device=\"{skipped}\"")),
            "{skipped} should be skipped"
        );
    }
}

fn missing_diskstats_fails_only_that_collector() {
    let tmp = tempfile::tempdir().unwrap();
    let procfs = format!("--path.procfs={}", tmp.path().display());
    let agent = Agent::start(&[&procfs]);
    let (status, body) = agent.get("/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("diskprobe_scrape_collector_success{collector=\"diskstats\"} 0"));
    assert!(body.contains("diskprobe_scrape_collector_success{collector=\"exporter\"} 1"));
    assert!(!body.contains("diskprobe_disk_"));
}

/// Starts node_exporter on a fixture and returns its exposition.
fn node_exporter_scrape(procfs: &Path, udev: &Path) -> String {
    let node = which("prometheus-node-exporter")
        .or_else(|| which("node_exporter"))
        .expect("checked by caller");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(node)
        .arg(format!("--path.procfs={}", procfs.display()))
        .arg(format!("--path.sysfs={}", fixtures().join("sys").display()))
        .arg(format!("--path.udev.data={}", udev.display()))
        .args([
            "--collector.disable-defaults",
            "--collector.diskstats",
            "--collector.diskstats.device-exclude=^$",
        ])
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start node_exporter");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (timeout, every) = (Duration::from_secs(20), Duration::from_millis(50));
    common::wait::wait_for_every("node_exporter to start", timeout, every, || {
        std::net::TcpStream::connect(addr).is_ok()
    });
    let body = http_request(addr, "GET", "/metrics", &[]).body;
    let _ = child.kill();
    let _ = child.wait();
    body
}

fn values_equal_node_exporters() {
    let node_available =
        which("prometheus-node-exporter").is_some() || which("node_exporter").is_some();
    if !require(
        node_available,
        "node_exporter (Debian package prometheus-node-exporter)",
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let all = include_all_config(tmp.path());
    for procfs in ["proc-6.1", "proc-4.19", "proc-4.4"] {
        let theirs = node_exporter_scrape(&fixtures().join(procfs), tmp.path());
        let agent = start(procfs, Some(&all));
        let (_, ours) = agent.get("/metrics");
        let ours: BTreeMap<String, f64> = samples(&ours)
            .into_iter()
            .filter(|(k, _)| {
                k.starts_with("diskprobe_disk_") && !k.starts_with("diskprobe_disk_info")
            })
            .collect();
        let mut expected = BTreeMap::new();
        let mut info_devices = 0;
        for (series, value) in samples(&theirs) {
            let Some(rest) = series.strip_prefix("node_disk_") else {
                continue;
            };
            if rest.starts_with("info{") {
                info_devices += 1;
                continue;
            }
            let (name, value) = match rest.strip_prefix("discarded_sectors_total") {
                Some(labels) => (
                    format!("diskprobe_disk_discarded_bytes_total{labels}"),
                    value * 512.0,
                ),
                None => (format!("diskprobe_disk_{rest}"), value),
            };
            expected.insert(name, value);
        }
        assert!(
            expected.len() > 50,
            "{procfs}: node_exporter reported too little:\n{theirs}"
        );
        for (series, value) in &expected {
            assert_eq!(ours.get(series), Some(value), "{procfs}: {series}");
        }
        let extra: Vec<_> = ours.keys().filter(|k| !expected.contains_key(*k)).collect();
        assert!(
            extra.is_empty(),
            "{procfs}: series node_exporter does not have: {extra:?}"
        );
        let (_, body) = agent.get("/metrics");
        assert_eq!(
            body.lines()
                .filter(|l| l.starts_with("diskprobe_disk_info{"))
                .count(),
            info_devices,
            "{procfs}: one info series per device"
        );
    }
}

crate::tests! {
    golden_outputs_for_every_kernel_era: [PROMTOOL],
    openmetrics_golden_when_asked_for,
    protobuf_golden_when_asked_for,
    odd_lines_are_skipped_not_fatal,
    missing_diskstats_fails_only_that_collector,
    values_equal_node_exporters,
}
