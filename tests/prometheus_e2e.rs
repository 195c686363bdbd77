//! End to end with a real Prometheus (Debian's prometheus 2.42) scraping the agent, which probes a
//! loop device from inside a cgroup v1 blkio group that caps its reads throughout (an unthrottled
//! loop device's latency swings 2x from run to run; a capped one is steady enough for a baseline):
//! - every query of every Grafana dashboard panel (and every dashboard variable) returns data;
//! - one run at a ten times lower cap between normal runs does not make the bundled
//!   DiskprobeLatencyRegression alert fire; the lower cap kept in place does, and restoring the
//!   cap resolves it.
//!
//! The rules are loaded from deploy/prometheus/rules.yml with their windows shortened by
//! [`shortened_rules`]: runs every second stand for runs every 5 minutes.

mod common;
#[path = "common/loopdev.rs"]
mod loopdev;
#[path = "common/prometheus.rs"]
mod prometheus;

use common::{Agent, require, which};
use loopdev::{BlkioGroup, LoopDev};
use prometheus::{Prometheus, urlencode, wait_for};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The bundled rules with windows shortened for a test that lasts minutes, not days: the current
/// window `[30m]` (at least 5 runs) becomes 20 s (about 20 runs at one a second), the hourly
/// window `[1h]` 20 s and the hourly group's `interval: 1h` 5 s, the baseline `[7d]` 10 min, its
/// read `[2h]` 20 s, the minimum history `offset 1d` 30 s, `[5m]` 15 s, every `for:` 5 s.
fn shortened_rules() -> String {
    let rules = std::fs::read_to_string(common::repo_root().join("deploy/prometheus/rules.yml"))
        .expect("read rules.yml");
    let mut rules = rules;
    for (from, to) in [
        ("[30m]", "[20s]"),
        ("[1h]", "[20s]"),
        ("interval: 1h", "interval: 5s"),
        ("[7d]", "[10m]"),
        ("[2h]", "[20s]"),
        ("offset 1d", "offset 30s"),
        ("[5m]", "[15s]"),
    ] {
        assert!(rules.contains(from), "rules.yml no longer has {from}");
        rules = rules.replace(from, to);
    }
    rules
        .lines()
        .map(|l| match l.find("for: ") {
            Some(i) => format!("{}for: 5s", &l[..i]),
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Instant query: whether Prometheus accepted it, and its result vector.
fn query_checked(prom: &Prometheus, q: &str) -> (bool, Vec<Value>) {
    let v = prom.get_json(&format!("/api/v1/query?query={}", urlencode(q)));
    let ok = v.as_ref().is_some_and(|v| v["status"] == "success");
    let result = v
        .and_then(|v| v["data"]["result"].as_array().cloned())
        .unwrap_or_default();
    (ok, result)
}

/// The queries of each panel (panels with none are left out) and of each variable, with the
/// dashboard's variables and Grafana's intervals substituted: `(what, [query, ...])`. A panel has
/// data when one of its queries has (a heatmap reads the native histogram or, where there is
/// none, the classic buckets).
fn dashboard_queries(file: &str, vars: &[(&str, String)]) -> Vec<(String, Vec<String>)> {
    let path = common::repo_root().join("grafana").join(file);
    let d: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut vars: Vec<(&str, String)> = vars.to_vec();
    vars.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
    let substitute = |e: &str| {
        let mut e = e
            .replace("$__rate_interval", "15s")
            .replace("$__interval", "15s");
        for (k, v) in &vars {
            e = e.replace(&format!("${k}"), v);
        }
        e
    };
    let mut out = Vec::new();
    fn panels(v: &Value, out: &mut Vec<Value>) {
        for p in v.as_array().into_iter().flatten() {
            out.push(p.clone());
            panels(&p["panels"], out);
        }
    }
    let mut all = Vec::new();
    panels(&d["panels"], &mut all);
    for p in &all {
        let exprs: Vec<String> = p["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["expr"].as_str())
            .map(substitute)
            .collect();
        if !exprs.is_empty() {
            out.push((format!("{file}: panel {:?}", p["title"]), exprs));
        }
    }
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        let Some(def) = v["query"]["query"].as_str() else {
            continue;
        };
        // label_values(SELECTOR, LABEL) has data when `count by (LABEL) (SELECTOR)` has.
        let inner = def
            .strip_prefix("label_values(")
            .and_then(|s| s.strip_suffix(')'))
            .expect("label_values query");
        let (selector, label) = inner.rsplit_once(',').unwrap();
        out.push((
            format!("{file}: variable {:?}", v["name"]),
            vec![substitute(&format!(
                "count by ({}) ({})",
                label.trim(),
                selector.trim()
            ))],
        ));
    }
    out
}

fn alert_state(prom: &Prometheus, name: &str) -> Option<String> {
    let v = prom.get_json("/api/v1/alerts")?;
    v["data"]["alerts"]
        .as_array()?
        .iter()
        .find(|a| a["labels"]["alertname"] == name && a["labels"]["target"] == "e2e")
        .and_then(|a| a["state"].as_str().map(str::to_owned))
}

/// Finished runs of the agent's target so far (any result but skipped).
fn finished_runs(agent: &Agent) -> f64 {
    let m = common::scrape(agent);
    ["success", "error", "timeout"]
        .iter()
        .map(|r| common::runs(&m, "e2e", r))
        .sum()
}

/// Waits until the agent has finished `n` more runs than `from`; returns the new count.
fn wait_runs(agent: &Agent, from: f64, n: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = finished_runs(agent);
        if now >= from + n {
            return now;
        }
        assert!(Instant::now() < deadline, "runs stopped at {now}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Normal read cap of the loop device and the lower one. cgroup v1 throttling lets reads through in
/// bursts and holds the rest until a later 100 ms slice, so a run's p99 is the longest hold: at
/// 20 reads/s a 300 ms run's 7 reads always include one held ~100 ms (p99 steady at 100-110 ms,
/// where a higher cap gives p99s anywhere between 0.05 and 100 ms); at 2 reads/s its one read is
/// held ~500 ms.
const NORMAL_IOPS: u32 = 20;
const LOW_IOPS: u32 = 2;

#[test]
fn dashboards_have_data_and_the_latency_alert_fires_only_when_the_slowdown_lasts() {
    let ready = require(loopdev::loop_available(), "root and losetup (loop devices)")
        && require(loopdev::blkio_available(), "cgroup v1 blkio")
        && require(
            which("prometheus").is_some(),
            "prometheus (Debian package prometheus)",
        );
    if !ready {
        return;
    }
    let dev = LoopDev::tmpfs(64 << 20);
    let group = BlkioGroup::new();
    group.throttle_read_iops(&dev, NORMAL_IOPS);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[diskstats]\ndevice_include = \"^{}$\"\n[defaults]\ninterval = \"1s\"\nruntime = \"300ms\"\n\
             jitter = 0.0\nmax_duty_cycle = 0.9\n[[targets]]\nname = \"e2e\"\npath = \"{}\"\n\
             profiles = [\"randread-4k-qd1\"]\n",
            dev.name,
            dev.path.display()
        ),
    )
    .unwrap();
    let cfg_arg = format!("--config.file={}", config.display());
    let agent = Agent::start_command(group.command(&common::binary(), &[&cfg_arg]));
    let prom = Prometheus::start_with_rules(dir.path(), agent.addr, Some(&shortened_rules()), &[]);

    // Normal operation until the baseline exists (30 s of history, recorded every 5 s).
    wait_for(
        "a latency baseline in Prometheus",
        Duration::from_secs(120),
        || {
            !prom
                .query(
                    "diskprobe:probe_latency_p99:baseline_7d{target=\"e2e\"}",
                    None,
                )
                .is_empty()
        },
    );

    let vars = [
        ("job", "diskprobe".to_owned()),
        ("instance", agent.addr.to_string()),
        ("target", "e2e".to_owned()),
        ("profile", "randread-4k-qd1".to_owned()),
        ("device", dev.name.clone()),
    ];
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in ["diskprobe-overview.json", "diskprobe-target.json"] {
        for (what, queries) in dashboard_queries(file, &vars) {
            checked += 1;
            let mut data = false;
            for q in &queries {
                let (ok, result) = query_checked(&prom, q);
                if !ok {
                    problems.push(format!("{what}: rejected: {q}"));
                }
                data |= !result.is_empty();
            }
            if !data {
                problems.push(format!("{what}: no data from {queries:?}"));
            }
        }
    }
    assert!(checked >= 25, "only {checked} panels and variables found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(alert_state(&prom, "DiskprobeLatencyRegression"), None);

    // One run at the lower cap between normal ones: lowered right after a run ends, restored
    // right after the next one ends (a run that straddles a change is partly slow: at most two
    // slow runs among the ~20 of the current window).
    let runs = wait_runs(&agent, finished_runs(&agent), 1.0);
    group.throttle_read_iops(&dev, LOW_IOPS);
    wait_runs(&agent, runs, 1.0);
    group.throttle_read_iops(&dev, NORMAL_IOPS);
    // Longer than the current window plus `for:`, with margin: never even pending.
    let until = Instant::now() + Duration::from_secs(25);
    while Instant::now() < until {
        let state = alert_state(&prom, "DiskprobeLatencyRegression");
        assert!(
            state.is_none(),
            "one slow run made the alert {state:?}: median p99 {:?}, baseline {:?}",
            prom.query("diskprobe:probe_latency_p99:median_30m", None)
                .first()
                .map(|v| v["value"][1].clone()),
            prom.query("diskprobe:probe_latency_p99:baseline_7d", None)
                .first()
                .map(|v| v["value"][1].clone()),
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // The lower cap stays: the alert fires.
    group.throttle_read_iops(&dev, LOW_IOPS);
    wait_for(
        "DiskprobeLatencyRegression to fire",
        Duration::from_secs(90),
        || alert_state(&prom, "DiskprobeLatencyRegression").as_deref() == Some("firing"),
    );
    // The normal cap again, and the alert resolves.
    group.throttle_read_iops(&dev, NORMAL_IOPS);
    wait_for(
        "DiskprobeLatencyRegression to resolve",
        Duration::from_secs(90),
        || alert_state(&prom, "DiskprobeLatencyRegression").is_none(),
    );
    drop(prom);
    drop(agent);
}
