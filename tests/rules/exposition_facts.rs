//! The facts of the agent's exposition that the scenario generator models
//! (`deploy/prometheus/scenarios/exposition.json`, read by `facts.py`) are what the agent
//! exports: this test gathers them from the agent and fails when the committed file differs
//! (`UPDATE_GENERATED=1 cargo test --test rules exposition_facts::`, or `.ci/regenerate`,
//! rewrites it).
//!
//! - Every family the agent exports, its type and its label names (sorted), and its unit as its
//!   name says it: the real binary's `/metrics` in two runs, one probing a file on this machine's
//!   disk with the two kinds of built-in probe (a gentle read, etcd's fdatasync writes), with disk
//!   and node limits, a mount rule and a block rule that lost a disk (from its state file), and
//!   one over the EBS fixtures of `tests/fixtures/cloud_stats` with `[cloud_stats]`; and the
//!   probes collector of the library over runs of every kind (for the families only some runs
//!   have: a skipped run's, the syncs' of the last runs).
//! - The classic latency buckets of the default layout, as the real binary writes them in `le`.
//! - How many runs `diskprobe_probe_recent_runs` counts, and how many syncing runs
//!   `diskprobe_probe_recent_sync_latency_seconds` takes the least of: runs recorded one by one
//!   into the library's store until the count stops growing, and until the gauge appears (and
//!   then the least of that many).
//! - Every built-in profile's settings, as `diskprobe_profile_info` labels them.
//!
//! The generator reads nothing else about the exposition; a series it writes that is not here
//! (a family, a label, a bucket) fails it (`scenario_generator` checks that it follows a changed
//! fact).

use crate::common;

use common::Agent;
use diskprobe_exporter::collectors::Collector;
use diskprobe_exporter::collectors::probe_metrics::ProbesCollector;
use diskprobe_exporter::config::Config;
use diskprobe_exporter::exposition::{self, Format};
use diskprobe_exporter::probe::io_target::TargetKind;
use diskprobe_exporter::probe::measurement::{EngineKind, new_latency_histogram};
use diskprobe_exporter::probe::measurement::{ErrorReason, Measurement, SkipReason, Syncs};
use diskprobe_exporter::probe::profile::Profile;
use diskprobe_exporter::series::{RunCost, RunOutcome, SeriesStore, TargetInfo};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The committed facts, relative to the repository.
pub(crate) const FACTS: &str = "deploy/prometheus/scenarios/exposition.json";

/// One series of a text exposition: its name and labels (in order).
struct Series {
    name: String,
    labels: Vec<(String, String)>,
}

/// The series of a text exposition (format 0.0.4) and each family's type.
fn parse(text: &str) -> (Vec<Series>, BTreeMap<String, String>) {
    let mut series = Vec::new();
    let mut types = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
            types.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).expect("a sample line");
        let name = line[..name_end].to_owned();
        let mut labels = Vec::new();
        if line[name_end..].starts_with('{') {
            let mut rest = &line[name_end + 1..];
            while !rest.starts_with('}') {
                let (label, after) = rest.split_once("=\"").expect("label=\"");
                let mut value = String::new();
                let mut chars = after.char_indices();
                let end = loop {
                    match chars.next().expect("a closed label value") {
                        (_, '\\') => value.push(chars.next().expect("an escape").1),
                        (i, '"') => break i,
                        (_, c) => value.push(c),
                    }
                };
                labels.push((label.trim_start_matches(',').to_owned(), value));
                rest = after[end + 1..].trim_start_matches(',');
            }
        }
        series.push(Series { name, labels });
    }
    (series, types)
}

/// The family of series `name` (a histogram's `_bucket`, `_count` and `_sum` are the
/// histogram's) in `types`.
fn family_of<'a>(name: &'a str, types: &BTreeMap<String, String>) -> &'a str {
    for suffix in ["_bucket", "_count", "_sum"] {
        if let Some(base) = name.strip_suffix(suffix)
            && types.get(base).is_some_and(|t| t == "histogram")
        {
            return base;
        }
    }
    name
}

/// The unit a family's name states (Prometheus' naming: the base unit before `_total` or at the
/// end), empty when it states none.
fn unit(family: &str) -> &'static str {
    let name = family.strip_suffix("_total").unwrap_or(family);
    ["bytes_per_second", "seconds", "bytes", "ratio"]
        .into_iter()
        .find(|u| name.ends_with(&format!("_{u}")))
        .unwrap_or("")
}

/// Families of an exposition: name → type, unit and label names (sorted; a histogram's without
/// `le`). Fails when two series of a family have different label names.
fn families(text: &str) -> BTreeMap<String, Value> {
    let (series, types) = parse(text);
    let mut out: BTreeMap<String, Value> = BTreeMap::new();
    for s in &series {
        let family = family_of(&s.name, &types);
        let mut names: Vec<&str> = s
            .labels
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !(*k == "le" && s.name.ends_with("_bucket")))
            .collect();
        names.sort_unstable();
        let kind = types.get(family).map_or("untyped", String::as_str);
        let facts = json!({"type": kind, "unit": unit(family), "labels": names});
        if let Some(seen) = out.get(family) {
            assert_eq!(seen, &facts, "{family}: two series with different labels");
        } else {
            out.insert(family.to_owned(), facts);
        }
    }
    out
}

/// Adds `more` to `all`, failing where a family's facts differ.
fn merge(all: &mut BTreeMap<String, Value>, more: BTreeMap<String, Value>, what: &str) {
    for (name, facts) in more {
        if let Some(seen) = all.get(&name) {
            assert_eq!(seen, &facts, "{name}: {what} exports it otherwise");
        } else {
            all.insert(name, facts);
        }
    }
}

/// The `le` values of the first series of histogram `family`, `+Inf` left out.
fn buckets(text: &str, family: &str) -> Vec<String> {
    let (series, _) = parse(text);
    let bucket = format!("{family}_bucket");
    let first = series
        .iter()
        .find(|s| s.name == bucket)
        .unwrap_or_else(|| panic!("no {bucket} in\n{text}"));
    let others: Vec<(String, String)> = first
        .labels
        .iter()
        .filter(|(k, _)| k != "le")
        .cloned()
        .collect();
    series
        .iter()
        .filter(|s| {
            s.name == bucket && s.labels.iter().filter(|(k, _)| k != "le").eq(others.iter())
        })
        .filter_map(|s| s.labels.iter().find(|(k, _)| k == "le"))
        .map(|(_, v)| v.clone())
        .filter(|v| v != "+Inf")
        .collect()
}

/// The real binary's exposition while it probes a file on this machine's disk with a gentle
/// read profile and etcd's WAL job, with disk and node limits, a mount rule, and a block rule
/// whose lost disk its state file names; once every one of those shows.
fn probing_agent() -> String {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let lost_since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
        - 60_000;
    std::fs::write(
        state.join("lost_targets.json"),
        json!({"version": 1, "lost": [{
            "rule": "disks", "target": "disk-FACTS", "device": "sdz", "model": "M",
            "serial": "FACTS", "wwn": "", "volume_id": "", "since_ms": lost_since as u64,
        }]})
        .to_string(),
    )
    .unwrap();
    let config = common::config_flag(
        dir.path(),
        &format!(
            "[diskstats]\ndevice_exclude = \"^$\"\n\
             [defaults]\ninterval = \"1s\"\nruntime = \"100ms\"\nmax_duty_cycle = 0.5\n\
             [limits]\ndevices = \".\"\niops_limit = 12800\nthroughput_limit = \"290MB/s\"\n\
             [[targets]]\nname = \"facts\"\npath = \"{}\"\nsize = \"16MiB\"\nallow_writes = true\n\
             profiles = [\"randread-4k-qd1-gentle\", \"etcd-wal\"]\n\
             iops_limit = 3000\nthroughput_limit = \"125MiB/s\"\n\
             [[discover]]\nid = \"disks\"\nkind = \"block\"\ndevice_include = \"^diskprobe-facts-none$\"\n\
             [[discover]]\nid = \"volumes\"\nkind = \"mount\"\nmountpoint_include = \"^/nonexistent-diskprobe-facts$\"\n",
            dir.path().join("probe.dat").display()
        ),
    );
    let agent = Agent::start(&[&config, &format!("--state.dir={}", state.display())]);
    let wanted = [
        "diskprobe_probe_success{target=\"facts\",profile=\"randread-4k-qd1-gentle\"",
        "diskprobe_probe_success{target=\"facts\",profile=\"etcd-wal\"",
        "diskprobe_sync_latency_seconds_bucket{",
        "diskprobe_discovered_target_lost_timestamp_seconds{",
        "diskprobe_discovered_targets{",
        "diskprobe_target_disk_info{",
        "diskprobe_disk_limit_iops{",
        "diskprobe_node_limit_device_info{",
    ];
    common::wait::poll(Duration::from_secs(60), Duration::from_millis(100), || {
        let (_, body) = agent.get("/metrics");
        if wanted.iter().all(|w| body.contains(w)) {
            Ok(body)
        } else {
            Err(())
        }
    })
    .unwrap_or_else(|()| {
        let (_, body) = agent.get("/metrics");
        panic!(
            "the agent never exported all of {wanted:?}:\n{body}\n{}",
            agent.log.lock().unwrap()
        )
    })
}

/// The real binary's exposition over the EBS fixtures with `[cloud_stats]`.
fn cloud_agent() -> String {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = common::repo_root().join("tests/fixtures/cloud_stats");
    let tree = fixtures.join("tree");
    let agent = Agent::start(&[
        &format!("--path.sysfs={}", tree.join("sys").display()),
        &format!("--path.procfs={}", tree.join("proc").display()),
        &format!(
            "--path.cloud-stats-pages={}",
            fixtures.join("pages").display()
        ),
        &common::config_flag(
            tmp.path(),
            "[cloud_stats]\nenabled = true\nsize_histograms = true\n",
        ),
    ]);
    common::wait::poll(Duration::from_secs(20), Duration::from_millis(100), || {
        let (_, body) = agent.get("/metrics");
        if body.contains("diskprobe_cloud_limit_exceeded_seconds_total{") {
            Ok(body)
        } else {
            Err(())
        }
    })
    .unwrap_or_else(|()| panic!("no cloud statistics:\n{}", agent.log.lock().unwrap()))
}

/// A target of every built-in profile in a store of the library's, and the text its probes
/// collector exports.
struct Store {
    store: Arc<SeriesStore>,
    spec: Arc<diskprobe_exporter::config::TargetSpec>,
}

impl Store {
    fn new() -> Store {
        let names: Vec<String> = Profile::builtins()
            .into_iter()
            .map(|p| format!("\"{}\"", p.name))
            .collect();
        let config = Config::from_toml(
            &format!(
                "[[targets]]\nname = \"t\"\npath = \"/srv/probe.dat\"\nallow_writes = true\ninterval = \"1h\"\n\
                 profiles = [{}]\n",
                names.join(", ")
            ),
            Path::new("facts.toml"),
        )
        .unwrap();
        let spec = Arc::new(config.targets.into_iter().next().unwrap());
        let store = Arc::new(SeriesStore::new());
        store.set_targets(std::slice::from_ref(&spec));
        // The scheduler labels every target before its series are exported.
        store.set_info(
            &spec,
            TargetInfo {
                path: "/srv/probe.dat".into(),
                kind: Some(TargetKind::File),
                fstype: "ext4".into(),
                ..TargetInfo::default()
            },
        );
        Store { store, spec }
    }

    fn record(&self, profile: &str, outcome: &RunOutcome) {
        self.store.record(&self.spec, profile, outcome);
    }

    fn text(&self) -> String {
        let mut out = Vec::new();
        ProbesCollector::new(self.store.clone())
            .collect(&mut out)
            .unwrap();
        String::from_utf8(exposition::encode(&out, Format::Text)).unwrap()
    }

    /// The value of the series of `name` whose labels include `labels` (`k="v"` pairs).
    fn value(&self, name: &str, labels: &[&str]) -> Option<f64> {
        self.text()
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|p| l.contains(p)))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
    }
}

/// A run of etcd-wal whose every sync took `sync_ms` milliseconds.
fn syncing_run(sync_ms: u64) -> RunOutcome {
    let (mut writes, mut syncs) = (new_latency_histogram(), new_latency_histogram());
    for _ in 0..100 {
        writes.record(10_000).unwrap();
        syncs.record(sync_ms * 1_000_000).unwrap();
    }
    RunOutcome::Ran {
        context: Default::default(),
        result: Box::new(Measurement {
            engine: EngineKind::Psync,
            ios: 100,
            bytes: 100 * 2300,
            elapsed: Duration::from_millis(100),
            latency_ns: writes,
            syncs: Some(Syncs {
                count: 100,
                latency_ns: syncs,
            }),
            ..Measurement::empty(EngineKind::Psync)
        }),
        duration: Duration::from_millis(110),
        cost: RunCost::default(),
        yielded_to: None,
    }
}

/// How many runs `diskprobe_probe_recent_runs` counts: failed runs recorded one by one until the
/// count of errors stops growing.
fn recent_runs() -> u64 {
    let s = Store::new();
    let failed = RunOutcome::Failed {
        error: "open: permission denied".into(),
        duration: Duration::from_millis(1),
        why: ErrorReason::Refused,
    };
    let errors = || {
        s.value(
            "diskprobe_probe_recent_runs",
            &["profile=\"randread-4k-qd1\"", "result=\"error\""],
        )
        .unwrap()
    };
    let mut last = errors();
    for _ in 0..1000 {
        s.record("randread-4k-qd1", &failed);
        let now = errors();
        if now == last {
            return now as u64;
        }
        last = now;
    }
    panic!("diskprobe_probe_recent_runs grew over 1000 runs");
}

/// How many syncing runs `diskprobe_probe_recent_sync_latency_seconds` takes the least of: the
/// gauge appears once that many have run; after more runs, each slower than the one before, it
/// is the least of the last that many.
fn recent_sync_runs() -> u64 {
    let s = Store::new();
    let p99 = || {
        s.value(
            "diskprobe_probe_recent_sync_latency_seconds",
            &["profile=\"etcd-wal\"", "stat=\"p99\""],
        )
    };
    let mut runs = 0;
    while p99().is_none() {
        assert!(runs < 1000, "no recent sync latency after 1000 runs");
        runs += 1;
        s.record("etcd-wal", &syncing_run(runs));
    }
    let window = runs;
    for _ in 0..window + 2 {
        runs += 1;
        s.record("etcd-wal", &syncing_run(runs));
    }
    // Run k's syncs took k ms: the least of the last `window` runs is the first of them's.
    let least_ms = p99().unwrap() * 1000.0;
    let expected = (runs - window + 1) as f64;
    assert!(
        (least_ms - expected).abs() < 0.01 * expected,
        "the least sync p99 of the last {window} runs is {least_ms} ms after {runs} runs, not {expected}"
    );
    window
}

/// The library's probes collector over every kind of run: a success, a failure, a skip, and the
/// syncs of etcd-wal's last runs (the families a scrape shows only after such runs); every
/// built-in profile's `diskprobe_profile_info`.
fn probes_of_every_run() -> String {
    let s = Store::new();
    s.record(
        "randread-4k-qd1",
        &RunOutcome::Skipped {
            reason: "budget".into(),
            why: SkipReason::Budget,
        },
    );
    s.record(
        "randread-4k-qd1",
        &RunOutcome::Failed {
            error: "open: permission denied".into(),
            duration: Duration::from_millis(1),
            why: ErrorReason::Refused,
        },
    );
    for ms in 1..=8 {
        s.record("etcd-wal", &syncing_run(ms));
    }
    s.text()
}

/// Every built-in profile's `diskprobe_profile_info` labels but the target and the profile:
/// numbers as numbers.
fn profiles(text: &str) -> BTreeMap<String, Value> {
    let (series, _) = parse(text);
    series
        .iter()
        .filter(|s| s.name == "diskprobe_profile_info")
        .map(|s| {
            let profile = s.labels.iter().find(|(k, _)| k == "profile").unwrap();
            let settings: serde_json::Map<String, Value> = s
                .labels
                .iter()
                .filter(|(k, _)| k != "target" && k != "profile")
                .map(|(k, v)| {
                    let value = v.parse::<u64>().map_or_else(|_| json!(v), |n| json!(n));
                    (k.clone(), value)
                })
                .collect();
            (profile.1.clone(), Value::Object(settings))
        })
        .collect()
}

/// The facts, gathered from the agent.
pub(crate) fn gather() -> Value {
    let probing = probing_agent();
    let cloud = cloud_agent();
    let library = probes_of_every_run();
    let mut all = BTreeMap::new();
    merge(&mut all, families(&probing), "the probing agent");
    merge(
        &mut all,
        families(&cloud),
        "the agent over the EBS fixtures",
    );
    merge(
        &mut all,
        families(&library),
        "the library's probes collector",
    );
    let every_profile = profiles(&library);
    assert_eq!(every_profile.len(), Profile::builtins().len());
    json!({
        "about": "What diskprobe_exporter exports, for the scenario generator (facts.py). Written by tests/rules/exposition_facts.rs: UPDATE_GENERATED=1 cargo test --test rules exposition_facts:: (or .ci/regenerate); do not edit.",
        "latency_buckets": buckets(&probing, "diskprobe_io_latency_seconds"),
        "sync_latency_buckets": buckets(&probing, "diskprobe_sync_latency_seconds"),
        "recent_runs": recent_runs(),
        "recent_sync_runs": recent_sync_runs(),
        "profiles": every_profile,
        "families": all,
    })
}

/// `value` as the committed file holds it.
pub(crate) fn to_text(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap() + "\n"
}

/// The committed facts are the agent's.
fn the_generators_facts_are_the_agents_exposition() {
    let _guard = common::shared();
    let text = to_text(&gather());
    let path = common::repo_root().join(FACTS);
    if std::env::var("UPDATE_GENERATED").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != text {
        let diff: Vec<String> = committed
            .lines()
            .zip(text.lines())
            .filter(|(c, t)| c != t)
            .take(10)
            .map(|(c, t)| format!("  committed: {c}\n  exported:  {t}"))
            .collect();
        panic!(
            "{FACTS} is not what the agent exports; run UPDATE_GENERATED=1 cargo test --test \
             rules exposition_facts:: (or .ci/regenerate) and review the diff:\n{}",
            diff.join("\n")
        );
    }
}

crate::tests! {
    the_generators_facts_are_the_agents_exposition,
}
