//! The Grafana dashboards (and the runbook dashboard, text panels only) pass Grafana's own
//! schema (grafana-foundation-sdk for Grafana 11.6, through `grafana/check_schema.py`) and our lints for what a schema cannot see:
//! - heatmaps: one per profile (repeated by `$profile`), every query `format: heatmap`, no
//!   client-side bucketing;
//! - tables: instant queries only;
//! - windows: a range over probe counters or histograms (which change once per run) is at least
//!   two default probe intervals (10 minutes), through the panel's minimum interval or a literal;
//! - histograms: a panel that reads the classic buckets also reads the native histogram, so it
//!   works whether Prometheus keeps the classic buckets, only the native histogram, or both;
//! - the fleet overview: range queries read recording rules only (raw per-target series only in
//!   instant queries), and time series of per-pair values are bounded by topk/bottomk or
//!   aggregated.
//!
//! `tests/prometheus_e2e.rs` runs every query against a real Prometheus that keeps the classic
//! buckets and one that keeps only the native histogram.

use crate::common;
use crate::tools::GRAFANA_SDK;

use regex::Regex;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

const DASHBOARDS: [&str; 2] = ["diskprobe-overview.json", "diskprobe-target.json"];
/// Two probe intervals at the default interval (5 minutes).
const MIN_WINDOW: Duration = Duration::from_secs(600);
/// Series that change once per probe run: counters and histograms.
const PER_RUN_COUNTERS: &[&str] = &[
    "diskprobe_io_latency_seconds",
    "diskprobe_io_latency_seconds_bucket",
    "diskprobe_io_latency_seconds_count",
    "diskprobe_io_latency_seconds_sum",
    "diskprobe_ios_total",
    "diskprobe_io_bytes_total",
    "diskprobe_io_errors_total",
    "diskprobe_probe_runs_total",
    "diskprobe_probe_busy_seconds_total",
    "diskprobe_sync_latency_seconds",
    "diskprobe_sync_latency_seconds_bucket",
    "diskprobe_sync_latency_seconds_count",
    "diskprobe_sync_latency_seconds_sum",
    "diskprobe_syncs_total",
];
/// The latency histograms: a panel that reads one's classic buckets also reads its native form.
const HISTOGRAMS: &[&str] = &[
    "diskprobe_io_latency_seconds",
    "diskprobe_sync_latency_seconds",
];

fn dashboard(file: &str) -> Value {
    let path = common::repo_root().join("grafana").join(file);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("dashboard JSON")
}

fn panels(d: &Value) -> Vec<&Value> {
    fn walk<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
        for p in v.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&d["panels"], &mut out);
    out
}

fn targets(panel: &Value) -> impl Iterator<Item = &Value> {
    panel["targets"].as_array().into_iter().flatten()
}

/// Metric names an expression selects (`name{` or `name[` or a bare name before `)`).
fn metric_names(expr: &str) -> Vec<String> {
    let re = Regex::new(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[{\[]").unwrap();
    re.captures_iter(expr)
        .map(|c| c[1].to_owned())
        .filter(|n| n != "by" && n != "without" && n != "on" && n != "ignoring")
        .collect()
}

/// Range selectors of an expression: the text between `[` and `]`.
fn ranges(expr: &str) -> Vec<String> {
    let re = Regex::new(r"\[([^\]]+)\]").unwrap();
    re.captures_iter(expr).map(|c| c[1].to_owned()).collect()
}

/// The shortest value a panel's minimum interval can take: a literal, or every option of the
/// custom variable it names.
fn min_interval(d: &Value, panel: &Value) -> Option<Duration> {
    let interval = panel["interval"].as_str()?;
    let Some(var) = interval.strip_prefix('$') else {
        return humantime::parse_duration(interval).ok();
    };
    let v = d["templating"]["list"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == var)?;
    v["options"]
        .as_array()?
        .iter()
        .map(|o| humantime::parse_duration(o["value"].as_str().unwrap_or("")).ok())
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .min()
}

fn dashboards_pass_grafanas_schema() {
    let sdk = common::which("python3").is_some_and(|py| {
        Command::new(py)
            .args(["-c", "import grafana_foundation_sdk"])
            .status()
            .is_ok_and(|s| s.success())
    });
    if !common::require(sdk, "grafana-foundation-sdk (PyPI; .ci/run installs it)") {
        return;
    }
    let out = Command::new("python3")
        .arg(common::repo_root().join("grafana/check_schema.py"))
        .args(
            DASHBOARDS
                .iter()
                .chain(&["diskprobe-runbook.json"])
                .map(|f| common::repo_root().join("grafana").join(f)),
        )
        .output()
        .expect("run check_schema.py");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn dashboards_pass_our_lints() {
    let problems: Vec<String> = DASHBOARDS
        .iter()
        .flat_map(|file| lint(file, &dashboard(file)))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// What is wrong with dashboard `d` (the fleet overview when `file` is its file name).
fn lint(file: &str, d: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    {
        let overview = file == "diskprobe-overview.json";
        let mut heatmaps = 0;
        for panel in panels(d) {
            let title = format!("{file}: {:?}", panel["title"].as_str().unwrap_or(""));
            let mut problem = |what: String| problems.push(format!("{title}: {what}"));
            let kind = panel["type"].as_str().unwrap_or("");
            if kind == "heatmap" {
                heatmaps += 1;
                if panel["options"]["calculate"] != Value::Bool(false) {
                    problem(
                        "heatmap buckets must come from the histogram (calculate: false)".into(),
                    );
                }
                if panel["repeat"] != "profile" {
                    problem("one heatmap per profile: repeat by $profile".into());
                }
            }
            let exprs: Vec<&str> = targets(panel).filter_map(|t| t["expr"].as_str()).collect();
            if kind != "row" && exprs.is_empty() {
                problem("no query".into());
            }
            for t in targets(panel) {
                let expr = t["expr"].as_str().unwrap_or("");
                if kind == "heatmap" {
                    if t["format"] != "heatmap" {
                        problem(format!("heatmap query without format: heatmap: {expr}"));
                    }
                    if !expr.contains("profile=~\"$profile\"") {
                        problem(format!("heatmap query not of one profile: {expr}"));
                    }
                }
                if kind == "table" && (t["instant"] != true || t["range"] != false) {
                    problem(format!("table with a range query: {expr}"));
                }
                let names = metric_names(expr);
                let reads_counters = names.iter().any(|n| PER_RUN_COUNTERS.contains(&n.as_str()));
                for range in ranges(expr) {
                    let long_enough = match range.as_str() {
                        "$__interval" | "$__rate_interval" => {
                            min_interval(d, panel).is_some_and(|m| m >= MIN_WINDOW)
                        }
                        literal => {
                            humantime::parse_duration(literal).is_ok_and(|w| w >= MIN_WINDOW)
                        }
                    };
                    if reads_counters && !long_enough {
                        problem(format!(
                            "window [{range}] over per-run counters may hold no run: {expr}"
                        ));
                    }
                }
                if overview && t["range"] == true {
                    let raw: Vec<&String> = names
                        .iter()
                        // Recording rules have a colon (`diskprobe_cohort:...` too).
                        .filter(|n| n.starts_with("diskprobe_") && !n.contains(':'))
                        .collect();
                    if !raw.is_empty() {
                        problem(format!(
                            "fleet range query over raw series {raw:?} (use recording rules): {expr}"
                        ));
                    }
                    let bounded = ["topk(", "bottomk(", "quantile", "max by", "count(", "sum("]
                        .iter()
                        .any(|f| expr.starts_with(f) || expr.contains(&format!(" {f}")));
                    if !bounded {
                        problem(format!(
                            "fleet range query not bounded by topk/bottomk: {expr}"
                        ));
                    }
                }
            }
            for histogram in HISTOGRAMS {
                let classic = exprs
                    .iter()
                    .any(|e| e.contains(&format!("{histogram}_bucket")));
                let native = exprs
                    .iter()
                    .any(|e| metric_names(e).iter().any(|n| n == histogram));
                if classic && !native {
                    problem(format!(
                        "reads the classic buckets of {histogram} but not the native histogram"
                    ));
                }
            }
        }
        if !overview && heatmaps == 0 {
            problems.push(format!("{file}: no latency heatmap"));
        }
    }
    problems
}

/// The lints catch what they are for: the mistakes of the dashboards before them.
fn the_lints_catch_the_old_mistakes() {
    let target = serde_json::json!({"panels": [
        {"type": "heatmap", "title": "all profiles, cumulative", "options": {"calculate": false},
         "targets": [{"expr": "sum by (le) (increase(diskprobe_io_latency_seconds_bucket{job=~\"$job\"}[$__rate_interval]))", "range": true}]},
        {"type": "table", "title": "range table",
         "targets": [{"expr": "diskprobe_target_info", "range": true, "instant": false}]},
        {"type": "timeseries", "title": "short window", "interval": "1m",
         "targets": [{"expr": "sum by (result) (increase(diskprobe_probe_runs_total[$__rate_interval]))"}]},
        {"type": "timeseries", "title": "classic only", "interval": "10m",
         "targets": [{"expr": "histogram_quantile(0.99, sum by (le) (rate(diskprobe_io_latency_seconds_bucket[$__rate_interval])))"}]},
        {"type": "timeseries", "title": "sync, classic only", "interval": "10m",
         "targets": [{"expr": "histogram_quantile(0.99, sum by (le) (rate(diskprobe_sync_latency_seconds_bucket[$__rate_interval]))) or histogram_quantile(0.99, rate(diskprobe_io_latency_seconds[10m]))"}]},
        {"type": "timeseries", "title": "syncs, short window", "interval": "1m",
         "targets": [{"expr": "rate(diskprobe_syncs_total[$__rate_interval])"}]},
    ]});
    let found = lint("diskprobe-target.json", &target).join("\n");
    for expected in [
        "one heatmap per profile",
        "heatmap query without format: heatmap",
        "heatmap query not of one profile",
        "window [$__rate_interval] over per-run counters may hold no run",
        "table with a range query",
        "\"classic only\": reads the classic buckets of diskprobe_io_latency_seconds but not the native histogram",
        "\"sync, classic only\": reads the classic buckets of diskprobe_sync_latency_seconds but not the native histogram",
        "\"syncs, short window\": window [$__rate_interval] over per-run counters may hold no run",
    ] {
        assert!(found.contains(expected), "{expected:?} not in:\n{found}");
    }
    let overview = serde_json::json!({"panels": [
        {"type": "timeseries", "title": "p99 of every pair", "interval": "10m",
         "targets": [{"expr": "diskprobe_probe_latency_seconds{stat=\"p99\"}", "range": true}]},
    ]});
    let found = lint("diskprobe-overview.json", &overview).join("\n");
    assert!(
        found.contains("fleet range query over raw series"),
        "{found}"
    );
    assert!(found.contains("not bounded by topk/bottomk"), "{found}");
    let d = serde_json::json!({"templating": {"list": [{"name": "w", "options": [{"value": "5m"}, {"value": "10m"}]}]}});
    assert_eq!(
        min_interval(&d, &serde_json::json!({"interval": "$w"})),
        Some(Duration::from_secs(300))
    );
}

crate::tests! {
    dashboards_pass_grafanas_schema: [GRAFANA_SDK],
    dashboards_pass_our_lints,
    the_lints_catch_the_old_mistakes,
}
