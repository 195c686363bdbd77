//! End to end with a real Prometheus scraping the agent, which probes a loop device from inside a
//! cgroup v1 blkio group that caps its reads throughout (an unthrottled loop device's latency
//! swings 2x from run to run; a capped one is steady enough for a baseline). It runs on each
//! engine ([`Engine`]): Debian's Prometheus 2.42 in every `cargo test`; Prometheus 3.5 LTS
//! and VictoriaMetrics with vmalert ([`Victoria`]) as long tests (`LONG`; `.ci/run` runs them).
//! Several Prometheus servers of the engine scrape the same agent and evaluate the same rules
//! side by side, one per way of keeping histograms ([`Histograms`]): one keeps the classic
//! buckets (`diskprobe_io_latency_seconds_bucket`), one runs with
//! `--enable-feature=native-histograms` and keeps only the native histogram (2.42 drops the
//! classic part of a histogram that has native buckets, and so does 3.5 by default), and on 3.5
//! a third also converts classic-only histograms to native histograms with custom buckets and
//! keeps no classic series (`convert_classic_histograms_to_nhcb: true`,
//! `always_scrape_classic_histograms: false`); VictoriaMetrics keeps classic buckets only, as
//! the first. The body is one function of the servers ([`RuleServer`]); its waits allow for the
//! seconds VictoriaMetrics and vmalert take to show a moment ([`RuleServer::lag`]). In each
//! server:
//! - every Grafana dashboard panel has a query that returns data (a number, or a histogram with
//!   observations) in its scenario, as [`dashboards::PANELS`] lists it for every panel: the
//!   probed target (`Probe`), a second one running etcd-wal on a probe file in /dev/shm
//!   (`Sync`), a third probing another loop device with the gentle profile, capacity runs, an
//!   `iops_limit` and a node ceiling (`Limited`), or one of a cohort of five more loop devices
//!   named by the `cohort` key (`Peer`); every dashboard variable has data, and no query is
//!   rejected; the rows of a table carry the labels its links to the target dashboard read;
//! - the panels of the `Cloud` scenario (what only EC2's statistics feed) must only be
//!   accepted here: `cloud_stats.rs` gives them data, over fixture pages;
//! - each latency heatmap gets its data from its native query with native histograms and from
//!   its classic query with classic buckets, never from the other;
//! - every recording rule the dashboards read has data;
//! - the dashboards' marks of agent restarts and configuration reloads (after a SIGHUP) have
//!   data, and the firing-alert mark once DiskprobeLatencyRegression fires;
//! - one run at a ten times lower cap between normal runs does not make the bundled
//!   DiskprobeLatencyRegression alert fire; the lower cap kept in place does, and restoring the
//!   cap resolves it;
//! - every rule was evaluated, and none failed to at any evaluation
//!   ([`RuleServer::rule_problems`]).
//!
//! Beside it, `every_module_with_a_real_prometheus_names_every_engine` checks that every module
//! that starts a real Prometheus runs on each engine.
//!
//! The rules are loaded from deploy/prometheus/rules.yml with their windows shortened by
//! [`shortened_rules`]: runs every second stand for runs every 5 minutes.
//!
//! On Prometheus it holds no machine lock ([`common::shared`]): its probes are capped at 20 reads
//! a second and the durability target's take 50 ms a second, the Prometheus servers scrape and
//! evaluate once a second, and what it checks (rule windows of seconds, latencies the cap holds
//! at 100 ms or more) does not depend on the machine being quiet. Most of its minute and a half
//! is waiting for those windows, beside the other tests. On VictoriaMetrics it holds
//! [`common::shared`], as the long tests that load the machine do: vmalert sends each of the
//! 75 rules as a query of its own, most of them every second, so that the tests that measure
//! time do not run beside it.

use crate::common;
use crate::common::loopdev;
use crate::common::prometheus;

use common::dashboards::{self, PanelQueries, Scenario};
use common::engines::Engine;
use common::rule_server::RuleServer;
use common::victoria::Victoria;
use common::{Agent, require};
use loopdev::{BlkioGroup, LoopDev};
use prometheus::{
    Histograms, Prometheus, every_module_with_a_real_prometheus_names_every_engine, urlencode,
    wait_for,
};
use serde_json::Value;
use std::time::Duration;

/// The bundled rules with windows shortened for a test that lasts minutes, not days: the 5-minute
/// groups (and the headroom group's `offset 5m`) run every second and the 30-minute group every
/// 2 s, so the `[10m]` reads of their recordings become 5 s; the current window `[30m]` (at least
/// 5 runs) becomes 20 s (about 20 runs at one a second), the hourly window `[1h]` 20 s and the
/// hourly groups' `interval: 1h` 5 s, the daily median's `[1d]` 1 min and its minimum history
/// `offset 20h` 25 s, the best day `[7d:1d]` the best 10-second step of 10 min, the reads `[2h]`
/// of hourly recordings 20 s, the peer windows `[6h]` and `[12h]` 1 min and their minimum history
/// `offset 3h` 10 s, `[5m]` 15 s, every `for:` and `keep_firing_for:` 5 s; and targets probed
/// less often than every 1.5 s (not 360 s) have the 3-hour current medians, so that the targets
/// probed every 2 s (the cohort, the limited disk) show that branch of the dashboards.
fn shortened_rules() -> String {
    prometheus::shortened_rules(&[
        ("> 360)", "> 1.5)"),
        ("<= 360\n", "<= 1.5\n"),
        ("interval: 5m", "interval: 1s"),
        ("interval: 30m", "interval: 2s"),
        ("[10m]", "[5s]"),
        ("[30m]", "[20s]"),
        ("[1h]", "[20s]"),
        ("interval: 1h", "interval: 5s"),
        ("[1d]", "[1m]"),
        ("offset 20h", "offset 25s"),
        ("[7d:1d]", "[10m:10s]"),
        ("[2h]", "[20s]"),
        ("[6h]", "[1m]"),
        ("[12h]", "[1m]"),
        ("offset 3h", "offset 10s"),
        ("[5m]", "[15s]"),
        ("offset 5m", "offset 1s"),
    ])
}

/// The ways of keeping histograms a test of `engine` runs side by side: the classic buckets and
/// the native histograms on both Prometheus engines, and NHCB on Prometheus 3 (2.42 has no such
/// option); VictoriaMetrics keeps the classic buckets only.
fn setups(engine: Engine) -> &'static [Histograms] {
    match engine {
        Engine::Prometheus2 => &[Histograms::Classic, Histograms::Native],
        Engine::Prometheus3 => &[Histograms::Classic, Histograms::Native, Histograms::Nhcb],
        Engine::VictoriaMetrics => &[Histograms::Classic],
    }
}

/// Whether a Prometheus of `setup` keeps the classic buckets of the agent's latency histogram
/// (which has native buckets too; with NHCB it is kept as its native part, as with
/// [`Histograms::Native`]).
fn keeps_classic(setup: Histograms) -> bool {
    setup == Histograms::Classic
}

/// A query as Grafana sends it: instant, or a range query over the last minute with a 15 s step
/// (the substituted `$__interval`), now as the server shows it ([`RuleServer::view_time`]).
/// Returns whether the server accepted it, and its result: a vector's elements or a matrix's
/// series.
fn query_checked(prom: &dyn RuleServer, q: &str, range: bool) -> (bool, Vec<Value>) {
    let now = prom.view_time();
    let path = if range {
        format!(
            "/api/v1/query_range?query={}&start={:.3}&end={now:.3}&step=15",
            urlencode(q),
            now - 60.0
        )
    } else {
        format!("/api/v1/query?query={}&time={now:.3}", urlencode(q))
    };
    let v = prom.get_json(&path);
    let ok = v.as_ref().is_some_and(|v| v["status"] == "success");
    let result = v
        .and_then(|v| v["data"]["result"].as_array().cloned())
        .unwrap_or_default();
    (ok, result)
}

/// Whether a query result has something a panel can draw: a sample that is a number (not NaN),
/// or a native histogram with observations, in a vector or a matrix.
fn has_data(result: &[Value]) -> bool {
    let parse = |v: &Value| v.as_str().and_then(|s| s.parse::<f64>().ok());
    let number = |p: &Value| parse(&p[1]).is_some_and(f64::is_finite);
    let histogram = |p: &Value| parse(&p[1]["count"]).is_some_and(|c| c > 0.0);
    let points = |e: &Value, key: &str| e[key].as_array().cloned().unwrap_or_default();
    result.iter().any(|e| {
        number(&e["value"])
            || histogram(&e["histogram"])
            || points(e, "values").iter().any(number)
            || points(e, "histograms").iter().any(histogram)
    })
}

/// Whether a heatmap query draws from the classic buckets: one that selects them (`..._bucket`,
/// even if guarded by the native histogram's absence) does, any other draws from the native
/// histogram.
fn heatmap_query_is_classic(query: &str) -> bool {
    let classic = regex::Regex::new(r"_bucket\s*[{\[]").unwrap();
    classic.is_match(query)
}

/// What is wrong with the dashboards on a server of `setup`: panels without data in their
/// scenario ([`PANELS`]), variables without data, rejected queries, table rows without the
/// labels their links read, heatmaps drawn from the other kind of histogram, recording rules
/// without data. `scenarios` holds the dashboard variable values of each scenario this test
/// runs: a panel of another scenario ([`Scenario::Cloud`]) must only have its queries accepted.
/// Also returns how many panels and variables were checked.
fn dashboard_problems(
    prom: &dyn RuleServer,
    setup: Histograms,
    scenarios: &[(Scenario, &[(&str, String)])],
) -> (Vec<String>, usize) {
    let mut problems = dashboards::list_problems();
    let mut checked = 0;
    let mut recorded = std::collections::BTreeSet::new();
    let rule_name = regex::Regex::new(r"diskprobe(_cohort)?:[a-zA-Z0-9_:]+").unwrap();
    for file in dashboards::FILES {
        let per_scenario: Vec<(Scenario, Vec<PanelQueries>)> = scenarios
            .iter()
            .map(|(s, vars)| (*s, dashboards::panel_queries(file, vars)))
            .collect();
        for (i, panel) in per_scenario[0].1.iter().enumerate() {
            checked += 1;
            let what = format!("{}: {file}: {:?}", prom.name(), panel.title);
            let Some(scenario) = panel.scenario() else {
                continue;
            };
            let Some((_, mine)) = per_scenario.iter().find(|(s, _)| *s == scenario) else {
                // Another test's scenario: its queries are accepted here.
                for (q, range) in &panel.queries {
                    if !query_checked(prom, q, *range).0 {
                        problems.push(format!("{what}: rejected: {q}"));
                    }
                }
                continue;
            };
            let panel = &mine[i];
            let mut data = vec![false; panel.queries.len()];
            for (j, (q, range)) in panel.queries.iter().enumerate() {
                recorded.extend(rule_name.find_iter(q).map(|m| m.as_str().to_owned()));
                let (ok, result) = query_checked(prom, q, *range);
                if !ok {
                    problems.push(format!("{what}: rejected: {q}"));
                }
                data[j] = has_data(&result);
                for p in panel.link_problems(&result) {
                    problems.push(format!("{what}: {p}: {q}"));
                }
            }
            if !data.contains(&true) {
                problems.push(format!(
                    "{what}: no data in its scenario {scenario:?} from {:?}",
                    panel.queries
                ));
            }
            if panel.heatmap {
                for ((q, _), has) in panel.queries.iter().zip(&data) {
                    let classic = heatmap_query_is_classic(q);
                    let from = if classic { "classic" } else { "native" };
                    if classic == keeps_classic(setup) && !has {
                        problems.push(format!("{what}: no data from its {from} query {q}"));
                    } else if classic != keeps_classic(setup) && *has {
                        problems.push(format!("{what}: data from its {from} query {q}"));
                    }
                }
            }
        }
    }
    // The recording rules the dashboards read (cohort-level ones too): each must have data itself.
    assert!(recorded.len() >= 4, "recording rules read: {recorded:?}");
    for rule in recorded
        .iter()
        .filter(|r| !r.starts_with("diskprobe:cloud_"))
    {
        let q = format!("{rule}{{job=\"diskprobe\"}}");
        if !has_data(&query_checked(prom, &q, false).1) {
            problems.push(format!(
                "{}: recording rule {rule} has no data",
                prom.name()
            ));
        }
    }
    (problems, checked)
}

/// The annotations of both dashboards that have no data in `prom` (for the probed target's
/// variables `vars`), or whose query it rejects, of those named in `expected`.
fn annotation_problems(
    prom: &dyn RuleServer,
    vars: &[(&str, String)],
    expected: &[&str],
) -> Vec<String> {
    let mut problems = Vec::new();
    for file in dashboards::FILES {
        let marks = dashboards::annotation_queries(file, vars);
        assert_eq!(marks.len(), 3, "{file}: {marks:?}");
        for (name, q) in marks {
            let (ok, result) = query_checked(prom, &q, true);
            if !ok {
                problems.push(format!(
                    "{}: {file}: annotation {name}: rejected: {q}",
                    prom.name()
                ));
            } else if expected.contains(&name.as_str()) && !has_data(&result) {
                problems.push(format!(
                    "{}: {file}: annotation {name}: no data from {q}",
                    prom.name()
                ));
            }
        }
    }
    problems
}

/// The state of alert `name` of target `e2e`, pending or firing, if it is either.
fn alert_state(prom: &dyn RuleServer, name: &str) -> Option<String> {
    prom.alerts()
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
    let runs = || {
        let now = finished_runs(agent);
        if now >= from + n { Ok(now) } else { Err(now) }
    };
    common::wait::poll(Duration::from_secs(30), common::wait::INTERVAL, runs)
        .unwrap_or_else(|now| panic!("runs stopped at {now}"))
}

/// Normal read cap of the loop device and the lower one. cgroup v1 throttling lets reads through in
/// bursts and holds the rest until a later 100 ms slice, so a run's p99 is the longest hold: at
/// 20 reads/s a 300 ms run's 7 reads always include one held ~100 ms (p99 steady at 100-110 ms,
/// where a higher cap gives p99s anywhere between 0.05 and 100 ms); at 2 reads/s its one read is
/// held ~500 ms.
const NORMAL_IOPS: u32 = 20;
const LOW_IOPS: u32 = 2;

fn dashboards_have_data_and_the_latency_alert_fires_only_when_the_slowdown_lasts() {
    dashboards_and_the_latency_alert(Engine::Prometheus2);
}

fn dashboards_have_data_and_the_latency_alert_fires_only_when_the_slowdown_lasts_on_prometheus3() {
    dashboards_and_the_latency_alert(Engine::Prometheus3);
}

fn dashboards_have_data_and_the_latency_alert_fires_only_when_the_slowdown_lasts_on_victoriametrics()
 {
    dashboards_and_the_latency_alert(Engine::VictoriaMetrics);
}

/// The test, on `engine`'s servers.
fn dashboards_and_the_latency_alert(engine: Engine) {
    let ready = require(loopdev::loop_available(), "root and losetup (loop devices)")
        && require(loopdev::blkio_available(), "cgroup v1 blkio")
        && common::rule_server::ready(engine);
    if !ready {
        return;
    }
    // vmalert's queries, one per rule, load the machine (see the module's doc).
    let _machine = (engine == Engine::VictoriaMetrics).then(common::shared);
    let dev = LoopDev::tmpfs(64 << 20);
    // A cohort of five (the fleet rules' minimum), unthrottled, probed by the gentle profile.
    let peers: Vec<LoopDev> = (0..5).map(|_| LoopDev::tmpfs(8 << 20)).collect();
    let group = BlkioGroup::new();
    group.throttle_read_iops(&dev, NORMAL_IOPS);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    // A durability target for the dashboards' sync panels: etcd-wal on a probe file in memory
    // (its fdatasync costs nothing, and takes nothing from the machine's disk).
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    // A target with a limit for the headroom panels: the gentle probe on a loop device of its
    // own (uncapped, so it stays calm), declared at 3,000 IOPS, under a node ceiling, with short
    // capacity runs (4k QD32 and 1M QD16, 50 ms every 2 s) for the measured limits.
    let limited = LoopDev::tmpfs(16 << 20);
    let config = dir.path().join("agent.toml");
    let devices: Vec<&str> = [&dev, &limited]
        .into_iter()
        .chain(&peers)
        .map(|d| d.name.as_str())
        .collect();
    let mut text = format!(
        "[diskstats]\ndevice_include = \"^({})$\"\n[scheduler]\nmax_concurrent_probes = 3\n\
         [limits]\ndevices = \"^{}$\"\niops_limit = 6000\n\
         [defaults]\ninterval = \"1s\"\nruntime = \"300ms\"\n\
         jitter = 0.0\nmax_duty_cycle = 0.9\n[[targets]]\nname = \"e2e\"\npath = \"{}\"\n\
         profiles = [\"randread-4k-qd1\"]\n\
         [[targets]]\nname = \"e2e-sync\"\npath = \"{}\"\nsize = \"1MiB\"\nruntime = \"50ms\"\n\
         allow_writes = true\nprofiles = [\"etcd-wal\"]\n\
         [[targets]]\nname = \"e2e-limited\"\npath = \"{}\"\n\
         profiles = [\"randread-4k-qd1-gentle\", \"randread-4k-qd32\", \"read-1m-qd16\"]\n\
         iops_limit = 3000\ninterval = \"2s\"\nruntime = \"50ms\"\n",
        devices.join("|"),
        limited.name,
        dev.path.display(),
        shm.path().join("probe.dat").display(),
        limited.path.display()
    );
    for (i, peer) in peers.iter().enumerate() {
        text += &format!(
            "[[targets]]\nname = \"e2e-peer-{i}\"\npath = \"{}\"\ncohort = \"e2e-peers\"\n\
             profiles = [\"randread-4k-qd1-gentle\"]\ninterval = \"2s\"\nruntime = \"100ms\"\n",
            peer.path.display()
        );
    }
    std::fs::write(&config, text).unwrap();
    let cfg_arg = format!("--config.file={}", config.display());
    let agent = Agent::start_command(group.command(&common::binary(), &[&cfg_arg]));
    // A server per setup, scraping the same agent, with the same rules.
    let rules = shortened_rules();
    let proms: Vec<(Histograms, Box<dyn RuleServer>)> = setups(engine)
        .iter()
        .map(|&setup| {
            let home = dir.path().join(format!("{setup:?}").to_lowercase());
            std::fs::create_dir(&home).unwrap();
            let prom: Box<dyn RuleServer> = match engine {
                Engine::Prometheus2 | Engine::Prometheus3 => Box::new(
                    Prometheus::start_with_rules(engine, &home, agent.addr, Some(&rules), setup),
                ),
                Engine::VictoriaMetrics => Box::new(Victoria::start(&home, agent.addr, &rules)),
            };
            (setup, prom)
        })
        .collect();
    // Every wait allows for the time the servers take to show what happened.
    let lag = proms.iter().map(|(_, p)| p.lag()).max().unwrap_or_default();
    let within = |seconds: u64| Duration::from_secs(seconds) + lag;

    // Normal operation until the baseline exists (30 s of history, recorded every 5 s).
    for (_, prom) in &proms {
        wait_for(
            &format!("a latency baseline in {}", prom.name()),
            within(120),
            || {
                !prom
                    .query(
                        "diskprobe:probe_latency_p99:baseline_7d{target=\"e2e\"}",
                        None,
                    )
                    .is_empty()
            },
        );
        // The headroom rules' throttling verdict needs a calm level, the measured limits
        // completed capacity runs (both recorded every 5 s).
        for rule in [
            "diskprobe:disk_throttled:bool",
            "diskprobe:disk_limit_iops:probe",
            "diskprobe:disk_limit_bytes_per_second:probe",
        ] {
            wait_for(&format!("{rule} in {}", prom.name()), within(60), || {
                !prom.query(rule, None).is_empty()
            });
        }
    }
    // The cohort is scored, and has a baseline for its cohort-wide alert.
    for (_, prom) in &proms {
        for q in [
            "diskprobe:probe_latency_p99:peer_score_p80_12h{target=\"e2e-peer-0\"}",
            "diskprobe_cohort:probe_latency_p99:baseline_7d{cohort=\"e2e-peers\"}",
        ] {
            wait_for(&format!("{q} in {}", prom.name()), within(120), || {
                !prom.query(q, None).is_empty()
            });
        }
    }
    // The baselines have been there for longer than one step of the dashboards' queries (15 s,
    // at which the rankings' subqueries are aligned: a series younger than the last aligned step
    // is not ranked yet).
    for (_, prom) in &proms {
        for q in [
            "diskprobe:probe_latency_p99:baseline_7d{target=\"e2e\"} offset 20s",
            "diskprobe_cohort:probe_latency_p99:baseline_7d{cohort=\"e2e-peers\"} offset 20s",
        ] {
            wait_for(&format!("{q} in {}", prom.name()), within(60), || {
                !prom.query(q, None).is_empty()
            });
        }
    }
    // Each keeps the kind of histogram it is meant to keep, and only that (`count` counts native
    // histograms too, in PromQL, and MetricsQL has no `histogram_count`).
    for (setup, prom) in &proms {
        let classic = prom.value("count(diskprobe_io_latency_seconds_bucket)", None);
        let native = prom.value("count(diskprobe_io_latency_seconds{target=\"e2e\"})", None);
        let kept = if keeps_classic(*setup) {
            classic.is_some_and(|n| n > 0.0) && native.is_none()
        } else {
            classic.is_none() && native.is_some_and(|n| n > 0.0)
        };
        assert!(
            kept,
            "{}: classic buckets {classic:?}, native histograms {native:?}",
            prom.name()
        );
    }

    // The cluster variable at "All" (`.*`): this Prometheus has no cluster label, as a single
    // cluster's does not.
    let vars = [
        ("cluster", ".*".to_owned()),
        ("instance", agent.addr.to_string()),
        ("target", "e2e".to_owned()),
        ("profile", "randread-4k-qd1".to_owned()),
        ("device", dev.name.clone()),
    ];
    // The durability row's panels have data for the durability target.
    let sync_vars = [
        ("cluster", ".*".to_owned()),
        ("instance", agent.addr.to_string()),
        ("target", "e2e-sync".to_owned()),
        ("profile", "etcd-wal".to_owned()),
        ("device", dev.name.clone()),
    ];
    // The headroom row's panels have data for the target with a limit.
    let limited_vars = [
        ("cluster", ".*".to_owned()),
        ("instance", agent.addr.to_string()),
        ("target", "e2e-limited".to_owned()),
        ("profile", "randread-4k-qd1-gentle".to_owned()),
        ("device", limited.name.clone()),
    ];
    // The cohort row and the overview's peer panels have data for a member of the cohort.
    let peer_vars = [
        ("cluster", ".*".to_owned()),
        ("instance", agent.addr.to_string()),
        ("target", "e2e-peer-0".to_owned()),
        ("profile", "randread-4k-qd1-gentle".to_owned()),
        ("device", peers[0].name.clone()),
    ];
    // A reload (the same configuration), for the dashboards' reload marks: after the first
    // 10 s of the agent's life, which are its start's.
    agent.signal("HUP");
    agent.expect_log("configuration reloaded", Duration::from_secs(10));
    let scenarios: [(Scenario, &[(&str, String)]); 4] = [
        (Scenario::Probe, &vars),
        (Scenario::Sync, &sync_vars),
        (Scenario::Limited, &limited_vars),
        (Scenario::Peer, &peer_vars),
    ];
    let mut problems = Vec::new();
    for (setup, prom) in &proms {
        let (found, checked) = dashboard_problems(prom.as_ref(), *setup, &scenarios);
        assert!(checked >= 25, "only {checked} panels and variables found");
        problems.extend(found);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The restart and reload marks (the reload once the servers have scraped it).
    for (_, prom) in &proms {
        wait_for(
            &format!("the reload mark in {}", prom.name()),
            within(30),
            || {
                annotation_problems(
                    prom.as_ref(),
                    &vars,
                    &["Agent restarts", "Configuration reloads"],
                )
                .is_empty()
            },
        );
    }
    for (_, prom) in &proms {
        assert_eq!(
            alert_state(prom.as_ref(), "DiskprobeLatencyRegression"),
            None
        );
    }

    // One run at the lower cap between normal ones: lowered right after a run ends, restored
    // right after the next one ends (a run that straddles a change is partly slow: at most two
    // slow runs among the ~20 of the current window).
    let runs = wait_runs(&agent, finished_runs(&agent), 1.0);
    group.throttle_read_iops(&dev, LOW_IOPS);
    wait_runs(&agent, runs, 1.0);
    group.throttle_read_iops(&dev, NORMAL_IOPS);
    // Longer than the current window plus `for:`, with margin: never even pending.
    let latest =
        |prom: &dyn RuleServer, q: &str| prom.query(q, None).first().map(|v| v["value"][1].clone());
    common::wait::always(within(25), Duration::from_millis(500), || {
        for (_, prom) in &proms {
            let prom = prom.as_ref();
            let state = alert_state(prom, "DiskprobeLatencyRegression");
            if state.is_some() {
                return Err(format!(
                    "{}: one slow run made the alert {state:?}: median p99 {:?}, of the day {:?}, baseline {:?}",
                    prom.name(),
                    latest(
                        prom,
                        "diskprobe:probe_latency_p99:median_30m{target=\"e2e\"}"
                    ),
                    latest(
                        prom,
                        "diskprobe:probe_latency_p99:median_1d{target=\"e2e\"}"
                    ),
                    latest(
                        prom,
                        "diskprobe:probe_latency_p99:baseline_7d{target=\"e2e\"}"
                    ),
                ));
            }
        }
        Ok(())
    });

    // The lower cap stays: the alert fires.
    group.throttle_read_iops(&dev, LOW_IOPS);
    for (_, prom) in &proms {
        wait_for(
            &format!("DiskprobeLatencyRegression to fire in {}", prom.name()),
            within(90),
            || {
                alert_state(prom.as_ref(), "DiskprobeLatencyRegression").as_deref()
                    == Some("firing")
            },
        );
    }
    // The firing alert is marked on both dashboards. vmalert reports the alert firing at once
    // but writes its ALERTS series to VictoriaMetrics by remote write, flushed every few
    // seconds: the annotation's query may see it a moment later.
    for (_, prom) in &proms {
        let seen = common::wait::poll(within(30), Duration::from_millis(500), || {
            let problems = annotation_problems(prom.as_ref(), &vars, &["Alerts firing"]);
            if problems.is_empty() {
                Ok(())
            } else {
                Err(problems)
            }
        });
        if let Err(problems) = seen {
            panic!("{}", problems.join("\n"));
        }
    }
    // The normal cap again, and the alert resolves.
    group.throttle_read_iops(&dev, NORMAL_IOPS);
    for (_, prom) in &proms {
        wait_for(
            &format!("DiskprobeLatencyRegression to resolve in {}", prom.name()),
            within(90),
            || alert_state(prom.as_ref(), "DiskprobeLatencyRegression").is_none(),
        );
    }
    // Every rule was evaluated, and none failed to, at any evaluation of the whole test.
    let failed: Vec<String> = proms
        .iter()
        .flat_map(|(_, prom)| {
            let unevaluated = prom.unevaluated_rules().into_iter();
            let name = prom.name();
            prom.rule_problems()
                .into_iter()
                .chain(unevaluated.map(|r| format!("{r}: never evaluated")))
                .map(move |p| format!("{name}: {p}"))
        })
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    drop(proms);
    drop(agent);
    drop(peers);
}

/// Every dashboard panel has its scenario in [`dashboards::PANELS`], and every entry a panel
/// (without a server: the end-to-end tests find the same, later).
fn every_dashboard_panel_has_a_scenario() {
    let problems = dashboards::list_problems();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

crate::tests! {
    every_dashboard_panel_has_a_scenario,
    dashboards_have_data_and_the_latency_alert_fires_only_when_the_slowdown_lasts,
    dashboards_have_data_and_the_latency_alert_fires_only_when_the_slowdown_lasts_on_prometheus3: [LONG],
    dashboards_have_data_and_the_latency_alert_fires_only_when_the_slowdown_lasts_on_victoriametrics: [LONG],
    every_module_with_a_real_prometheus_names_every_engine,
}
