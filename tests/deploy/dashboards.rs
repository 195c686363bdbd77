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
//!   aggregated;
//! - rankings: a time series ranks once over the range (topk/bottomk of a `_over_time` of a
//!   subquery `@ end()`), never per step, so it draws k series at most;
//! - units: every graph panel (time series, stat, heatmap) has one; a table's value columns
//!   each have theirs (several queries: merged, one unit per query's column);
//! - links: every table opens the target dashboard with its instance and target, from the
//!   row's fields (kept by the table) or this dashboard's variables;
//! - both dashboards share the crosshair and mark firing alerts, agent restarts and reloads;
//! - the target dashboard's "why it fired" row reads only series the rules record.
//!
//! `tests/prometheus_e2e.rs` runs every query against a real Prometheus that keeps the classic
//! buckets and one that keeps only the native histogram.

use crate::common;
use crate::common::dashboards::{self, dashboard, panels};
use crate::tools::GRAFANA_SDK;

use regex::Regex;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

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
            dashboards::FILES
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

/// Grafana's variables as Grafana substitutes them, so that an expression parses.
fn substitute(expr: &str) -> String {
    let re = Regex::new(r"\$(__rate_interval|__interval|__range|[a-z_]+)").unwrap();
    re.replace_all(expr, |c: &regex::Captures| match &c[1] {
        "__range" => "6h".to_owned(),
        "__interval" | "__rate_interval" => "5m".to_owned(),
        _ => ".*".to_owned(),
    })
    .into_owned()
}

/// The topk and bottomk of `expr` that rank at every step: those not over a `_over_time` of a
/// subquery (or range) evaluated `@ end()`.
fn per_step_rankings(expr: &str) -> Vec<String> {
    use promql_parser::parser::{AtModifier, Expr};
    use promql_parser::util::{ExprVisitor, walk_expr};
    struct Rankings(Vec<String>);
    impl ExprVisitor for Rankings {
        type Error = std::convert::Infallible;
        fn pre_visit(&mut self, e: &Expr) -> Result<bool, Self::Error> {
            let at_end = |e: &Expr| match e {
                Expr::Subquery(s) => s.at == Some(AtModifier::End),
                Expr::MatrixSelector(m) => m.vs.at == Some(AtModifier::End),
                _ => false,
            };
            if let Expr::Aggregate(a) = e {
                let op = a.op.to_string();
                let once = match a.expr.as_ref() {
                    Expr::Call(c) => {
                        c.func.name.ends_with("_over_time") && c.args.args.iter().any(|x| at_end(x))
                    }
                    _ => false,
                };
                if (op == "topk" || op == "bottomk") && !once {
                    self.0.push(format!("{op} ranks at every step"));
                }
            }
            Ok(true)
        }
    }
    match promql_parser::parser::parse(&substitute(expr)) {
        Ok(ast) => {
            let mut found = Rankings(Vec::new());
            let Ok(_) = walk_expr(&mut found, &ast);
            found.0
        }
        Err(e) => vec![format!("does not parse ({e})")],
    }
}

/// The names a table's `organize` transformation hides.
fn hidden(panel: &Value) -> Vec<&str> {
    panel["transformations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["id"] == "organize")
        .flat_map(|t| {
            t["options"]["excludeByName"]
                .as_object()
                .into_iter()
                .flatten()
        })
        .filter(|(_, v)| **v == Value::Bool(true))
        .map(|(k, _)| k.as_str())
        .collect()
}

/// The unit of the field `name` of a panel: its override's, else the panel's default.
fn unit_of<'a>(panel: &'a Value, name: &str) -> Option<&'a str> {
    panel["fieldConfig"]["overrides"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["matcher"]["id"] == "byName" && o["matcher"]["options"] == name)
        .flat_map(|o| o["properties"].as_array().into_iter().flatten())
        .find(|p| p["id"] == "unit")
        .and_then(|p| p["value"].as_str())
        .or_else(|| panel["fieldConfig"]["defaults"]["unit"].as_str())
}

/// What is wrong with the units of a panel.
fn unit_problems(panel: &Value) -> Vec<String> {
    let kind = panel["type"].as_str().unwrap_or("");
    let refs: Vec<&str> = targets(panel).filter_map(|t| t["refId"].as_str()).collect();
    match kind {
        "timeseries" | "stat" if unit_of(panel, "").is_none() => vec!["no unit".into()],
        "heatmap" if panel["options"]["yAxis"]["unit"].as_str().is_none() => {
            vec!["heatmap without a unit on its y axis".into()]
        }
        "table" if refs.len() == 1 => {
            let hides_value = hidden(panel).contains(&"Value");
            if !hides_value && unit_of(panel, "Value").is_none() {
                vec!["table value without a unit".into()]
            } else {
                vec![]
            }
        }
        "table" => {
            let merged = panel["transformations"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| t["id"] == "merge");
            let mut problems = Vec::new();
            if !merged {
                problems.push(format!(
                    "{} queries in frames of their own (merge them)",
                    refs.len()
                ));
            }
            for r in refs {
                let column = format!("Value #{r}");
                if !hidden(panel).contains(&column.as_str()) && unit_of(panel, &column).is_none() {
                    problems.push(format!("column {column} without a unit"));
                }
            }
            problems
        }
        _ => vec![],
    }
}

/// What is wrong with a table's link to the target dashboard (uid `uid`).
fn link_problems(panel: &Value, uid: &str) -> Vec<String> {
    let links: Vec<(Option<&str>, &str)> = dashboards::links(panel)
        .into_iter()
        .filter(|(_, u)| u.starts_with(&format!("/d/{uid}/")))
        .collect();
    let Some((on, url)) = links.first() else {
        return vec![format!("no link to /d/{uid}/")];
    };
    let mut problems = Vec::new();
    if let Some(on) = on
        && hidden(panel).contains(on)
    {
        problems.push(format!("links on column {on}, which the table hides"));
    }
    let field = Regex::new(r"\$\{__data\.fields\.([a-z_]+)\}").unwrap();
    for c in field.captures_iter(url) {
        if hidden(panel).contains(&&c[1]) {
            problems.push(format!("links with field {} which the table hides", &c[1]));
        }
    }
    for var in ["instance", "target"] {
        let from_field = url.contains(&format!("&var-{var}=${{__data.fields.{var}}}"));
        let carried = url.contains(&format!("${{{var}:queryparam}}"));
        if !from_field && !carried {
            problems.push(format!("link without the {var}"));
        }
    }
    for part in [
        "${datasource:queryparam}",
        "${cluster:queryparam}",
        "${__url_time_range}",
    ] {
        if !url.contains(part) {
            problems.push(format!("link without {part}"));
        }
    }
    problems
}

fn dashboards_pass_our_lints() {
    let problems: Vec<String> = dashboards::FILES
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
            for p in unit_problems(panel) {
                problem(p);
            }
            if kind == "table" {
                for p in link_problems(panel, "diskprobe-target") {
                    problem(p);
                }
            }
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
                if t["range"] == true {
                    for p in per_step_rankings(expr) {
                        problem(format!("{p}: {expr}"));
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
    // The overview's rankings, units, tables and links before they were kept over the range.
    let overview = serde_json::json!({"panels": [
        {"type": "timeseries", "title": "per-step top 10", "interval": "5m",
         "fieldConfig": {"defaults": {"unit": "short"}},
         "targets": [{"refId": "A", "range": true, "expr": "topk(10, diskprobe:probe_latency_p99:median_30m{job=\"diskprobe\"} / last_over_time(diskprobe:probe_latency_p99:baseline_7d{job=\"diskprobe\"}[2h]))"}]},
        {"type": "timeseries", "title": "ranked at the end, drawn per step", "interval": "5m",
         "fieldConfig": {"defaults": {"unit": "short"}},
         "targets": [{"refId": "A", "range": true, "expr": "bottomk(10, min_over_time(diskprobe:probe_iops:median_30m[$__range]))"}]},
        {"type": "stat", "title": "a count without a unit",
         "targets": [{"refId": "A", "instant": true, "range": false, "expr": "count(up)"}]},
        {"type": "table", "title": "two frames",
         "targets": [{"refId": "A", "instant": true, "range": false, "expr": "diskprobe_disk_limit_iops"},
                     {"refId": "B", "instant": true, "range": false, "expr": "diskprobe_disk_limit_bytes_per_second"}]},
        {"type": "table", "title": "no link", "fieldConfig": {"defaults": {"unit": "s"}},
         "targets": [{"refId": "A", "instant": true, "range": false, "expr": "diskprobe_probe_sync_latency_seconds"}]},
        {"type": "table", "title": "links a hidden field", "fieldConfig": {"defaults": {"unit": "s", "links": [
            {"url": "/d/diskprobe-target/?${datasource:queryparam}&${cluster:queryparam}&var-instance=${__data.fields.instance}&var-target=${__data.fields.target}&${__url_time_range}"}]}},
         "transformations": [{"id": "organize", "options": {"excludeByName": {"target": true}}}],
         "targets": [{"refId": "A", "instant": true, "range": false, "expr": "diskprobe_probe_sync_latency_seconds"}]},
    ]});
    let found = lint("diskprobe-overview.json", &overview).join("\n");
    for expected in [
        "\"per-step top 10\": topk ranks at every step",
        "\"ranked at the end, drawn per step\": bottomk ranks at every step",
        "\"a count without a unit\": no unit",
        "\"two frames\": 2 queries in frames of their own",
        "\"two frames\": column Value #A without a unit",
        "\"no link\": no link to /d/diskprobe-target/",
        "\"links a hidden field\": links with field target which the table hides",
    ] {
        assert!(found.contains(expected), "{expected:?} not in:\n{found}");
    }
    let d = serde_json::json!({"templating": {"list": [{"name": "w", "options": [{"value": "5m"}, {"value": "10m"}]}]}});
    assert_eq!(
        min_interval(&d, &serde_json::json!({"interval": "$w"})),
        Some(Duration::from_secs(300))
    );
}

/// Both dashboards share the crosshair and mark firing alerts (from `ALERTS`), agent restarts
/// and configuration reloads (from the agent's own series), each of the selected instances.
fn both_dashboards_share_the_crosshair_and_mark_alerts_restarts_and_reloads() {
    for file in dashboards::FILES {
        let d = dashboard(file);
        assert!(
            d["graphTooltip"] == 1 || d["graphTooltip"] == 2,
            "{file}: no shared crosshair: graphTooltip {}",
            d["graphTooltip"]
        );
        let marks = d["annotations"]["list"].as_array().expect("annotations");
        for (series, what) in [
            ("ALERTS", "firing alerts"),
            ("process_start_time_seconds", "agent restarts"),
            (
                "diskprobe_config_last_reload_success_timestamp_seconds",
                "reloads",
            ),
        ] {
            let mark = marks.iter().find(|a| {
                let expr = a["expr"].as_str().unwrap_or("");
                metric_names(expr).iter().any(|n| n == series)
                    && !(series == "process_start_time_seconds" && expr.contains("reload"))
            });
            let Some(mark) = mark else {
                panic!("{file}: no annotation of {what} (from {series})");
            };
            let expr = mark["expr"].as_str().unwrap();
            assert!(mark["enable"] == true, "{file}: {what} not enabled");
            assert!(
                expr.contains("instance=~\"$instance\""),
                "{file}: {what} of every instance: {expr}"
            );
            if series == "ALERTS" {
                assert!(expr.contains("alertstate=\"firing\""), "{file}: {expr}");
            } else {
                // Placed at the moment the series says, in milliseconds.
                assert!(
                    mark["useValueForTime"] == true && expr.ends_with("* 1000"),
                    "{file}: {what}: {mark}"
                );
            }
        }
    }
}

/// The recorded names of deploy/prometheus/rules.yml.
fn recorded_names() -> Vec<String> {
    let path = common::repo_root().join("deploy/prometheus/rules.yml");
    let doc: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    doc["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .filter_map(|r| r["record"].as_str().map(str::to_owned))
        .collect()
}

/// The series a query reads other than to select with (`and on (...) NAME_info{...}`).
fn read_series(expr: &str) -> Vec<String> {
    let selecting = Regex::new(r"and on \([^)]*\) [a-z_]+_info\{[^}]*\}").unwrap();
    metric_names(&selecting.replace_all(expr, ""))
}

/// The target dashboard's "why it fired" row: a panel per alert decided on recorded series, each
/// reading only what the rules record (the agent's own info series only to select the target's
/// disks), with its threshold lines.
fn the_why_it_fired_row_reads_only_recorded_series() {
    let d = dashboard("diskprobe-target.json");
    let all = panels(&d);
    let row = all
        .iter()
        .position(|p| {
            p["type"] == "row"
                && p["title"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("Why it fired")
        })
        .expect("a \"Why it fired\" row");
    let members: Vec<&&Value> = all[row + 1..]
        .iter()
        .take_while(|p| p["type"] != "row")
        .collect();
    let recorded = recorded_names();
    let mut alerts = Vec::new();
    for p in &members {
        let title = p["title"].as_str().unwrap();
        for t in targets(p) {
            let expr = t["expr"].as_str().unwrap();
            for name in read_series(expr) {
                assert!(
                    recorded.contains(&name),
                    "{title}: reads {name}, which no rule records: {expr}"
                );
            }
        }
        let steps = p["fieldConfig"]["defaults"]["thresholds"]["steps"].as_array();
        assert!(
            steps.is_some_and(|s| s.len() >= 2)
                && p["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "line",
            "{title}: no threshold line"
        );
        alerts.extend(
            title
                .split(':')
                .next()
                .unwrap()
                .split(" and ")
                .map(str::to_owned),
        );
    }
    for alert in [
        "DiskprobeLatencyRegression",
        "DiskprobeIOPSDrop",
        "DiskprobeThroughputDrop",
        "DiskprobeSlowerThanPeers",
        "DiskprobeFarSlowerThanPeers",
        "DiskprobeNearLimit",
        "DiskprobeThrottled",
    ] {
        assert!(
            alerts.iter().any(|a| a == alert),
            "no panel for {alert}: {alerts:?}"
        );
    }
    // The check finds a raw series.
    assert_eq!(
        read_series(
            "diskprobe_probe_latency_seconds{stat=\"p99\"} and on (target) diskprobe_target_info{x=\"y\"}"
        ),
        ["diskprobe_probe_latency_seconds"]
    );
}

crate::tests! {
    dashboards_pass_grafanas_schema: [GRAFANA_SDK],
    dashboards_pass_our_lints,
    the_lints_catch_the_old_mistakes,
    both_dashboards_share_the_crosshair_and_mark_alerts_restarts_and_reloads,
    the_why_it_fired_row_reads_only_recorded_series,
}
