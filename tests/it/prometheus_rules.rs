//! The bundled alerting and recording rules pass `promtool check rules`, and the scenario suite
//! (`deploy/prometheus/scenarios/generate.py`: series generated from a model of what the agent
//! exports, every alert checked at every checkpoint of every scenario) passes `promtool test
//! rules`. Every alert fires in at least one scenario, has a runbook section, a `runbook_url` that
//! points at it, and the scenario table in docs/runbook.md is the one the generator prints.

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
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(str::to_owned)
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

#[test]
fn every_alert_has_a_runbook_section_and_url() {
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
        let anchor = format!("/docs/runbook.md#{}\"", alert.to_lowercase());
        assert!(rules.contains(&anchor), "no runbook_url for {alert}");
    }
    assert_eq!(
        rules.matches("runbook_url: ").count(),
        names.len(),
        "one runbook_url per alert"
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
