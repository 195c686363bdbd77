//! Native histograms end to end: a real Prometheus with `--enable-feature=native-histograms`
//! scrapes the agent (it then asks for the protobuf format and keeps only the native part of a
//! histogram that has both), while the agent probes a file. It runs on each engine ([`Engine`]):
//! Debian's Prometheus 2.42 in every `cargo test`, and Prometheus 3.5 LTS as a long test (`LONG`;
//! `.ci/run` runs it) that also converts classic-only histograms to native histograms with custom
//! buckets and keeps no classic series ([`Histograms::Nhcb`]): the agent's latency histogram has
//! native buckets of its own, which that conversion must leave as they are (a quantile from
//! custom buckets at the coarse classic bounds would be far from the exact p99).
//!
//! - `histogram_count` of the native histogram equals `diskprobe_ios_total` at every instant;
//! - `histogram_quantile(0.99, rate(diskprobe_io_latency_seconds[W]))` over a window `W` that
//!   holds exactly one run (from the scrape before it to the scrape after it) is within 10% of
//!   that run's exact p99 (`diskprobe_probe_latency_seconds{stat="p99"}`, from its
//!   HdrHistogram): the same I/Os on both sides;
//! - a histogram without observations (a target whose runs all fail) is stored as native too;
//! - the classic buckets, which this Prometheus does not keep, are checked on `/metrics` itself,
//!   in the text and the protobuf format.

use crate::common;
use crate::common::prometheus;

use common::engines::Engine;
use common::rule_server::RuleServer;
use common::{Agent, decode_protobuf, http_request_bytes, samples};
use diskprobe_exporter::exposition::proto;
use diskprobe_exporter::histogram::ClassicBuckets;
use prometheus::{Histograms, Prometheus, wait_for};
use std::time::Duration;

const PROTOBUF: &str =
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited";

fn native_histogram_quantiles_match_the_runs_exact_percentiles() {
    native_histograms(Engine::Prometheus2, Histograms::Native);
}

fn native_histogram_quantiles_match_the_runs_exact_percentiles_on_prometheus3() {
    native_histograms(Engine::Prometheus3, Histograms::Nhcb);
}

/// The test, on `engine`'s Prometheus keeping histograms as `histograms` says (native or NHCB).
fn native_histograms(engine: Engine, histograms: Histograms) {
    let _guard = common::shared();
    if !prometheus::engine_ready(engine) {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[defaults]\ninterval = \"4s\"\nruntime = \"500ms\"\njitter = 0.0\nmax_duty_cycle = 0.5\n\
             size = \"16MiB\"\nprofiles = [\"randread-4k-qd1\"]\n\
             skip_busy_above = {{}}\nyield_to_other_io = false\n\
             [[targets]]\nname = \"e2e\"\npath = \"{}\"\n\
             [[targets]]\nname = \"never\"\npath = \"{}\"\n",
            dir.path().join("probe.dat").display(),
            // Its directory does not exist: every run fails, the histogram stays empty.
            dir.path().join("missing/probe.dat").display(),
        ),
    )
    .unwrap();
    let agent = Agent::start(&[&format!("--config.file={}", config.display())]);
    let prom = Prometheus::start(engine, dir.path(), agent.addr, histograms);

    let ran = "diskprobe_probe_runs_total{target=\"e2e\",result=\"success\"}";
    wait_for(
        "four successful runs in Prometheus",
        Duration::from_secs(90),
        || prom.value(ran, None).is_some_and(|n| n >= 4.0),
    );

    // Prometheus got the protobuf format and kept the native histograms only, also the empty one.
    let buckets = prom.query("diskprobe_io_latency_seconds_bucket", None);
    assert!(
        buckets.is_empty(),
        "classic buckets were ingested: {buckets:?}"
    );
    let never = "histogram_count(diskprobe_io_latency_seconds{target=\"never\"})";
    assert_eq!(prom.value(never, None), Some(0.0));

    // The scrapes before and after each run of the last minute: I/O counts that changed.
    let ios = prom.samples("diskprobe_ios_total{target=\"e2e\"}[1m]");
    let windows: Vec<(f64, f64)> = ios
        .windows(2)
        .filter(|w| w[1].1 > w[0].1 && w[0].1 > 0.0)
        .map(|w| (w[0].0, w[1].0))
        .collect();
    assert!(windows.len() >= 2, "runs seen in {ios:?}");
    let mut report = Vec::new();
    for (before, after) in windows {
        // At each of the two instants the native count is the I/O counter.
        for t in [before, after] {
            let count = prom.value(
                "histogram_count(diskprobe_io_latency_seconds{target=\"e2e\"})",
                Some(t),
            );
            let ios = prom.value("diskprobe_ios_total{target=\"e2e\"}", Some(t));
            assert!(
                count.is_some() && count == ios,
                "at {t}: {count:?} vs {ios:?}"
            );
        }
        // A window that holds the scrape before the run and the one after it, no earlier one
        // (they are 1 s apart).
        let window_ms = ((after - before) * 1000.0) as u64 + 500;
        let q = format!(
            "histogram_quantile(0.99, rate(diskprobe_io_latency_seconds{{target=\"e2e\"}}[{window_ms}ms]))"
        );
        let native = prom.value(&q, Some(after)).expect("a quantile");
        let exact = prom
            .value(
                "diskprobe_probe_latency_seconds{target=\"e2e\",stat=\"p99\"}",
                Some(after),
            )
            .expect("the run's p99");
        let ratio = native / exact;
        report.push(format!(
            "run before {after:.3}: native p99 {native:.6} s, exact {exact:.6} s, ratio {ratio:.4}"
        ));
        assert!(
            (ratio - 1.0).abs() <= 0.10,
            "native p99 not within 10% of the exact p99:\n{}",
            report.join("\n")
        );
    }
    eprintln!("{}", report.join("\n"));

    // The classic buckets on /metrics itself: the coarse layout, cumulative, +Inf = count = I/Os.
    let (resp, body) = http_request_bytes(agent.addr, "GET", "/metrics", &[]);
    assert_eq!(resp.status, 200);
    let text = String::from_utf8(body).unwrap();
    let s = samples(&text);
    let value = |series: &str| {
        s.iter()
            .find(|(k, _)| k == series)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no {series}"))
    };
    let labels = format!(
        "target=\"e2e\",profile=\"randread-4k-qd1\",device=\"{}\"",
        text.lines()
            .find(|l| l.starts_with("diskprobe_ios_total{target=\"e2e\""))
            .and_then(|l| l.split("device=\"").nth(1))
            .and_then(|l| l.split('"').next())
            .unwrap()
    );
    let classic: Vec<(String, f64)> = s
        .iter()
        .filter(|(k, _)| {
            k.starts_with(&format!(
                "diskprobe_io_latency_seconds_bucket{{{labels},le="
            ))
        })
        .map(|(k, v)| {
            (
                k.rsplit("le=\"")
                    .next()
                    .unwrap()
                    .trim_end_matches("\"}")
                    .to_owned(),
                *v,
            )
        })
        .collect();
    let coarse = ClassicBuckets::coarse();
    let les: Vec<f64> = classic[..classic.len() - 1]
        .iter()
        .map(|(le, _)| le.parse().unwrap())
        .collect();
    assert_eq!(les, coarse.bounds());
    assert_eq!(classic.last().unwrap().0, "+Inf");
    assert!(classic.windows(2).all(|w| w[0].1 <= w[1].1), "{classic:?}");
    let count = value(&format!("diskprobe_io_latency_seconds_count{{{labels}}}"));
    assert_eq!(classic.last().unwrap().1, count);
    assert_eq!(count, value(&format!("diskprobe_ios_total{{{labels}}}")));
    assert!(count > 0.0);

    // And in the protobuf format, beside the native buckets.
    let (resp, body) = http_request_bytes(agent.addr, "GET", "/metrics", &[("Accept", PROTOBUF)]);
    assert_eq!(resp.status, 200);
    let families = decode_protobuf(&body);
    let family = |name: &str| {
        families
            .iter()
            .find(|f| f.name() == name)
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let of_e2e = |m: &&proto::Metric| m.label.iter().any(|l| l.value() == "e2e");
    let h = family("diskprobe_io_latency_seconds")
        .metric
        .iter()
        .find(of_e2e)
        .and_then(|m| m.histogram.as_ref())
        .unwrap();
    let ios = family("diskprobe_ios_total")
        .metric
        .iter()
        .find(of_e2e)
        .and_then(|m| m.counter.as_ref())
        .unwrap()
        .value();
    assert_eq!(h.sample_count() as f64, ios);
    let bounds: Vec<f64> = h.bucket.iter().map(|b| b.upper_bound()).collect();
    assert_eq!(bounds, coarse.bounds());
    assert!(
        h.bucket
            .windows(2)
            .all(|w| w[0].cumulative_count() <= w[1].cumulative_count())
    );
    assert_eq!(h.schema(), 4);
    assert!(h.zero_threshold() > 0.0);
    let mut native = h.zero_count() as i64;
    let mut bucket = 0i64;
    for delta in &h.positive_delta {
        bucket += delta;
        assert!(bucket >= 0);
        native += bucket;
    }
    assert_eq!(native as u64, h.sample_count());
    let spanned: u32 = h.positive_span.iter().map(|s| s.length()).sum();
    assert_eq!(spanned as usize, h.positive_delta.len());
}

crate::tests! {
    native_histogram_quantiles_match_the_runs_exact_percentiles,
    native_histogram_quantiles_match_the_runs_exact_percentiles_on_prometheus3: [LONG],
}
