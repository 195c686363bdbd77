//! The bundled alerting and recording rules pass `promtool check rules`, and the scenario suite
//! (`deploy/prometheus/scenarios/generate.py`: series generated from a model of what the agent
//! exports, every alert checked at every checkpoint of every scenario) passes `promtool test
//! rules`. Every alert fires in at least one scenario and has a runbook section, and the scenario
//! table in docs/runbook.md is the one the generator prints.

use crate::common;

use std::path::Path;
use std::process::Command;

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn generator() -> std::path::PathBuf {
    common::repo_root().join("deploy/prometheus/scenarios/generate.py")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(common::repo_root().join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Alert names in rules.yml, in order.
fn alerts(rules: &str) -> Vec<String> {
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(rules).expect("rules.yml");
    let groups = rules["groups"].as_sequence().expect("groups");
    groups
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules"))
        .filter_map(|r| r["alert"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn rules_pass_promtool_and_every_scenario() {
    // promtool evaluates the whole scenario suite.
    let _guard = common::shared();
    let ready = common::require(
        common::which("promtool").is_some(),
        "promtool (Debian package prometheus)",
    ) && common::require(common::which("python3").is_some(), "python3");
    if !ready {
        return;
    }
    let promtool = common::which("promtool").expect("checked above");
    let rules = common::repo_root().join("deploy/prometheus/rules.yml");
    let (ok, out) = run(Command::new(&promtool).args(["check", "rules"]).arg(&rules));
    assert!(ok && out.contains("SUCCESS"), "{out}");

    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("scenarios.json");
    let (ok, out) = run(Command::new("python3").arg(generator()).arg(&suite));
    assert!(ok, "generate.py failed:\n{out}");
    let (ok, out) = run(Command::new(&promtool).args(["test", "rules"]).arg(&suite));
    assert!(ok && out.contains("SUCCESS"), "promtool test rules:\n{out}");

    // The suite checks every alert, and each one fires somewhere.
    let text = std::fs::read_to_string(&suite).unwrap();
    let suite: serde_json::Value = serde_json::from_str(&text).unwrap();
    let groups = suite["tests"].as_array().expect("tests");
    for alert in alerts(&std::fs::read_to_string(&rules).unwrap()) {
        let fires = groups.iter().any(|g| {
            g["alert_rule_test"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| {
                    t["alertname"] == alert.as_str()
                        && t["exp_alerts"].as_array().is_some_and(|a| !a.is_empty())
                })
        });
        assert!(fires, "no scenario in which {alert} fires");
    }
}

/// Every alert has its section in docs/runbook.md and is named in the README. The shipped rules
/// carry no `runbook_url` (where the runbook is served is the mixin's `runbookURLBase`;
/// tests/mixin.rs renders the URLs from it), so no URL points at a host that does not exist.
#[test]
fn every_alert_has_a_runbook_section_and_no_placeholder_url() {
    let rules = read("deploy/prometheus/rules.yml");
    let runbook = read("docs/runbook.md");
    let readme = read("README.md");
    let names = alerts(&rules);
    assert!(names.len() >= 10, "{names:?}");
    for alert in &names {
        assert!(
            runbook.contains(&format!("\n## {alert}\n")),
            "no runbook section for {alert}"
        );
        assert!(
            readme.contains(alert.as_str()),
            "README does not name {alert}"
        );
    }
    assert!(
        !rules.contains("runbook_url"),
        "a runbook_url without runbookURLBase"
    );
    assert!(
        !rules.contains("runbook: "),
        "use runbook_url, the convention"
    );
}

#[test]
fn the_runbook_scenario_table_is_the_generated_one() {
    if !common::require(common::which("python3").is_some(), "python3") {
        return;
    }
    let (ok, table) = run(Command::new("python3").arg(generator()).arg("--table"));
    assert!(ok, "{table}");
    let runbook = read("docs/runbook.md");
    assert!(
        runbook.contains(table.trim()),
        "docs/runbook.md: the scenario table differs from `python3 {} --table`:\n{table}",
        Path::new("deploy/prometheus/scenarios/generate.py").display()
    );
}
