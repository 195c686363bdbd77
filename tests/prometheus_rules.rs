//! The bundled alerting and recording rules pass `promtool check rules`, and their unit tests
//! (`deploy/prometheus/rules_test.yml`, each alert firing and not firing) pass `promtool test rules`.

mod common;

use std::process::Command;

fn promtool(args: &[&str]) -> (bool, String) {
    let dir = common::repo_root().join("deploy/prometheus");
    let out = Command::new(common::which("promtool").expect("checked by caller"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn rules_are_valid_and_unit_tested() {
    if !common::require(
        common::which("promtool").is_some(),
        "promtool (Debian package prometheus)",
    ) {
        return;
    }
    let (ok, out) = promtool(&["check", "rules", "rules.yml"]);
    assert!(ok && out.contains("SUCCESS"), "{out}");
    let (ok, out) = promtool(&["test", "rules", "rules_test.yml"]);
    assert!(ok && out.contains("SUCCESS"), "{out}");

    // Every alert has a unit test and a runbook section.
    let rules =
        std::fs::read_to_string(common::repo_root().join("deploy/prometheus/rules.yml")).unwrap();
    let tests =
        std::fs::read_to_string(common::repo_root().join("deploy/prometheus/rules_test.yml"))
            .unwrap();
    let runbook = std::fs::read_to_string(common::repo_root().join("docs/runbook.md")).unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 8, "{alerts:?}");
    for alert in alerts {
        assert!(
            tests.contains(&format!("alertname: {alert}")),
            "no unit test for {alert}"
        );
        assert!(
            runbook.contains(&format!("## {alert}")),
            "no runbook section for {alert}"
        );
    }
}
