//! The scenario generator (`deploy/prometheus/scenarios/generate.py`) as a tool: its command
//! line (usage on `--help`, exit 2 on a wrong argument, nothing written either way), the suites
//! following a changed fact of the exposition (`--facts`: other buckets, another recent-run
//! count, another built-in profile, a family or a label the agent no longer exports), and no
//! exposition fact written into the Python (every one comes from `exposition.json`,
//! `exposition_facts`).

use crate::common;
use crate::exposition_facts::FACTS;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scenarios_dir() -> PathBuf {
    common::repo_root().join("deploy/prometheus/scenarios")
}

/// Runs generate.py with `args` in `cwd`.
fn generate(cwd: &Path, args: &[&str]) -> Output {
    Command::new("python3")
        .current_dir(cwd)
        .arg(scenarios_dir().join("generate.py"))
        .args(args)
        .output()
        .expect("run python3")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Files in `dir`.
fn files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn help_prints_usage_and_a_wrong_argument_exits_2() {
    if !common::require(common::which("python3").is_some(), "python3") {
        return;
    }
    let cwd = tempfile::tempdir().unwrap();
    for args in [&["--help"][..], &["one-target", "--help"], &["fleet", "-h"]] {
        let out = generate(cwd.path(), args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with("usage: generate.py"),
            "{args:?}: {}",
            text(&out)
        );
    }
    for args in [
        &[][..],
        &["--bogus"],
        &["one-target"],
        &["fleet", "seven", "out.json"],
        &["chaos", "1"],
        &["--engine", "prometheus9", "one-target", "out.json"],
        &["one-target", "out.json", "extra"],
    ] {
        let out = generate(cwd.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("usage: generate.py"),
            "{args:?}: {}",
            text(&out)
        );
    }
    assert!(
        files(cwd.path()).is_empty(),
        "the generator wrote {:?}",
        files(cwd.path())
    );
}

/// The largest value of a series in promtool's notation (`v`, `v+dxN`, `v-dxN`, `_xN`,
/// `stale`).
fn max_value(values: &str) -> f64 {
    values
        .split_whitespace()
        .filter(|t| !t.starts_with('_') && *t != "stale")
        .map(|t| {
            let Some((start, step)) = t.split_once('x').map(|(head, n)| {
                let n: f64 = n.parse().unwrap();
                let (base, inc) = match head.rfind(['+', '-']).filter(|&i| i > 0) {
                    Some(i) if !head[..i].ends_with('e') => {
                        (&head[..i], head[i..].parse::<f64>().unwrap())
                    }
                    _ => (head, 0.0),
                };
                (base.parse::<f64>().unwrap(), inc * n)
            }) else {
                return t.parse::<f64>().unwrap();
            };
            start.max(start + step)
        })
        .fold(f64::MIN, f64::max)
}

/// Every input series of a suite: (series text, values).
fn input_series(suite: &Value) -> Vec<(String, String)> {
    suite["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["input_series"].as_array().unwrap())
        .map(|s| {
            (
                s["series"].as_str().unwrap().to_owned(),
                s["values"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The value of label `name` in a series' text.
fn label<'a>(series: &'a str, name: &str) -> Option<&'a str> {
    let start = series.find(&format!("{name}=\""))? + name.len() + 2;
    Some(&series[start..start + series[start..].find('"')?])
}

/// Generates the suites of `args` with the facts `facts` (written beside them); their input
/// series, the text of their expected annotations, or what the generator said when it failed.
fn suites_with(facts: &Value, args: &[&[&str]]) -> Result<(Vec<(String, String)>, String), String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("facts.json");
    std::fs::write(&path, facts.to_string()).unwrap();
    let mut series = Vec::new();
    let mut annotations = String::new();
    for (i, a) in args.iter().enumerate() {
        let out_file = dir.path().join(format!("suite-{i}.json"));
        let mut full = vec!["--facts", path.to_str().unwrap()];
        full.extend_from_slice(a);
        full.push(out_file.to_str().unwrap());
        let out = generate(dir.path(), &full);
        if !out.status.success() {
            return Err(text(&out));
        }
        let suite: Value =
            serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).expect("a suite");
        series.extend(input_series(&suite));
        annotations += &suite["tests"].to_string();
    }
    Ok((series, annotations))
}

/// A one-target suite of a few short scenarios (failing runs, slow syncs, a hung device), the
/// exact fleet and a chaos suite: every model of the generator.
const SUITES: &[&[&str]] = &[
    &[
        "one-target",
        "--only",
        "half-failing",
        "--only",
        "etcd-slow-syncs",
        "--only",
        "hung-device",
        "--only",
        "rate-capped",
    ],
    &["fleet", "exact"],
    &["chaos", "1"],
];

fn committed_facts() -> Value {
    serde_json::from_str(&std::fs::read_to_string(common::repo_root().join(FACTS)).unwrap())
        .expect("the committed facts")
}

/// Each `le` of the probes' latency buckets in `series`.
fn latency_le(series: &[(String, String)]) -> std::collections::BTreeSet<String> {
    series
        .iter()
        .filter(|(s, _)| s.starts_with("diskprobe_io_latency_seconds_bucket{"))
        .filter_map(|(s, _)| label(s, "le").map(str::to_owned))
        .collect()
}

/// The most any `diskprobe_probe_recent_runs{result="success"}` series reaches.
fn most_recent_successes(series: &[(String, String)]) -> f64 {
    series
        .iter()
        .filter(|(s, _)| {
            s.starts_with("diskprobe_probe_recent_runs{") && label(s, "result") == Some("success")
        })
        .map(|(_, v)| max_value(v))
        .fold(0.0, f64::max)
}

fn the_suites_follow_a_changed_fact_of_the_exposition() {
    if !common::require(common::which("python3").is_some(), "python3") {
        return;
    }
    let facts = committed_facts();
    let (series, annotations) = suites_with(&facts, &SUITES[..1]).unwrap_or_else(|e| panic!("{e}"));
    let mut expected: std::collections::BTreeSet<String> = facts["latency_buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap().to_owned())
        .collect();
    expected.insert("+Inf".to_owned());
    assert_eq!(latency_le(&series), expected);
    let recent = facts["recent_runs"].as_f64().unwrap();
    assert_eq!(most_recent_successes(&series), recent);
    assert!(annotations.contains(&format!("of the last {recent} runs of profile")));

    // Other buckets, another recent-run count and sync window, another built-in profile.
    let mut changed = facts.clone();
    changed["latency_buckets"] = json!(["0.0001", "0.001", "0.01", "0.1", "1"]);
    changed["sync_latency_buckets"] = changed["latency_buckets"].clone();
    changed["recent_runs"] = json!(7);
    changed["recent_sync_runs"] = json!(4);
    changed["profiles"]["etcd-wal"]["block_size"] = json!(4096);
    changed["profiles"]["randread-4k-qd1-gentle"]["rate_iops"] = json!(150);
    let (series, annotations) = suites_with(&changed, SUITES).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        latency_le(&series),
        ["0.0001", "0.001", "0.01", "0.1", "1", "+Inf"]
            .map(str::to_owned)
            .into()
    );
    assert_eq!(most_recent_successes(&series), 7.0);
    assert!(
        annotations.contains("of the last 7 runs of profile"),
        "DiskprobeProbeFailing's expected annotation does not follow the count"
    );
    assert!(
        annotations.contains("in each of its last 4 runs"),
        "DiskprobeSyncLatencyHigh's expected annotation does not follow the sync window"
    );
    let info = |profile: &str, key: &str| -> Vec<String> {
        series
            .iter()
            .filter(|(s, _)| {
                s.starts_with("diskprobe_profile_info{") && label(s, "profile") == Some(profile)
            })
            .filter_map(|(s, _)| label(s, key).map(str::to_owned))
            .collect()
    };
    assert!(!info("etcd-wal", "block_size").is_empty());
    assert!(info("etcd-wal", "block_size").iter().all(|b| b == "4096"));
    assert!(!info("randread-4k-qd1-gentle", "rate_iops").is_empty());
    assert!(
        info("randread-4k-qd1-gentle", "rate_iops")
            .iter()
            .all(|r| r == "150")
    );

    // A family the agent no longer exports, and a label it no longer puts on one: the generator
    // fails naming it.
    let mut gone = facts.clone();
    gone["families"]
        .as_object_mut()
        .unwrap()
        .remove("diskprobe_probe_stuck_ios");
    let err = suites_with(&gone, &[SUITES[0]]).expect_err("a family the agent does not export");
    assert!(
        err.contains("diskprobe_probe_stuck_ios: the agent exports no such family"),
        "{err}"
    );
    let mut unlabelled = facts.clone();
    let labels = unlabelled["families"]["diskprobe_target_info"]["labels"]
        .as_array_mut()
        .unwrap();
    labels.retain(|l| l != "fstype");
    let err = suites_with(&unlabelled, &[SUITES[0]]).expect_err("a label the agent does not put");
    assert!(
        err.contains("diskprobe_target_info: the agent puts no label fstype"),
        "{err}"
    );
}

/// No fact of the exposition is written into the generator: no bucket bounds, no recent-run
/// count, no built-in profile's settings (they come from exposition.json through facts.py); and
/// every module says what it is in a docstring.
fn the_generator_holds_no_exposition_fact() {
    let forbidden = [
        ("BUCKETS =", "a bucket list (facts.get().latency_le)"),
        ("2**k", "a doubling bucket layout"),
        (
            "RECENT_RUNS =",
            "a recent-run count (facts.get().recent_runs)",
        ),
        (
            "RECENT_SYNC_RUNS =",
            "a sync window (facts.get().recent_sync_runs)",
        ),
        ("<= 10:", "a recent-run count"),
        ("min(n, 10)", "a recent-run count"),
        ("last 10 runs", "a recent-run count"),
        ("last 3 runs", "a sync window"),
        ("maxlen=10", "a recent-run count"),
        ("rate_iops=200", "a built-in's rate cap"),
        ("rate_iops=\"200\"", "a built-in's rate cap"),
        ("RATE = 200", "a built-in's rate cap"),
        ("2300, 1", "etcd-wal's block size"),
    ];
    let mut found = Vec::new();
    let mut modules = 0;
    for name in files(&scenarios_dir()) {
        if !name.ends_with(".py") {
            continue;
        }
        modules += 1;
        let text = std::fs::read_to_string(scenarios_dir().join(&name)).unwrap();
        let body = text
            .strip_prefix("#!/usr/bin/env python3\n")
            .unwrap_or(&text);
        if !body.starts_with("\"\"\"") {
            found.push(format!("{name}: no module docstring"));
        }
        for (i, line) in text.lines().enumerate() {
            for (needle, what) in &forbidden {
                if line.contains(needle) {
                    found.push(format!("{name}:{}: {what}: {}", i + 1, line.trim()));
                }
            }
        }
    }
    assert!(modules >= 8, "{modules} modules");
    assert!(found.is_empty(), "{}", found.join("\n"));
}

crate::tests! {
    help_prints_usage_and_a_wrong_argument_exits_2,
    the_suites_follow_a_changed_fact_of_the_exposition,
    the_generator_holds_no_exposition_fact,
}
