//! The monitoring mixin (`deploy/mixin`) and the files rendered from it: the committed
//! `deploy/prometheus/rules.yml`, `deploy/kubernetes/prometheusrule.yaml` and `grafana/*.json`
//! are what jsonnet (Debian's 0.18, the one `.ci/run` installs) renders from the mixin, compared
//! parsed (YAML and JSON values, not text).

mod common;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The jsonnet the committed files are rendered with (Debian bookworm's package).
const JSONNET_VERSION: &str = "v0.18.0";

/// Whether the pinned jsonnet is here (a missing one fails under `DISKPROBE_TEST_STRICT=1`).
fn jsonnet_ready() -> bool {
    let version = common::which("jsonnet").and_then(|j| {
        let out = Command::new(j).arg("--version").output().ok()?;
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    });
    if let Some(v) = &version {
        assert!(
            v.contains(JSONNET_VERSION),
            "jsonnet {v:?} is not the pinned {JSONNET_VERSION} (.ci/run installs it)"
        );
    }
    common::require(
        version.is_some(),
        "jsonnet (Debian package jsonnet; .ci/run installs it)",
    )
}

/// The files `deploy/mixin/render.jsonnet` renders with `config` (jsonnet code overriding
/// `_config`), by repository path: their content as a value.
fn render(config: &str) -> BTreeMap<String, Value> {
    let out = Command::new("jsonnet")
        .arg("--tla-code")
        .arg(format!("config={config}"))
        .arg(common::repo_root().join("deploy/mixin/render.jsonnet"))
        .output()
        .expect("run jsonnet");
    assert!(
        out.status.success(),
        "jsonnet: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("render.jsonnet gives an object")
}

/// A committed file's content as a value: YAML or JSON by its extension.
fn parse(path: &str, text: &str) -> Value {
    if Path::new(path).extension().is_some_and(|e| e == "json") {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{path}: {e}"))
    } else {
        serde_yaml_ng::from_str(text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }
}

/// Where two values first differ (a JSON pointer and both sides), if they do.
fn first_difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let at = format!("{at}/{k}");
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => first_difference(u, v, &at),
                    (u, v) => Some(format!("{at}: {u:?} against {v:?}")),
                }
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (u, v))| first_difference(u, v, &format!("{at}/{i}"))),
        _ if a == b => None,
        _ => Some(format!("{at}: {a} against {b}")),
    }
}

#[test]
fn the_committed_rules_and_dashboards_are_the_rendered_mixin() {
    if !jsonnet_ready() {
        return;
    }
    let rendered = render("{}");
    let root = common::repo_root();
    let mut stale = Vec::new();
    for (path, value) in &rendered {
        let committed = std::fs::read_to_string(root.join(path))
            .unwrap_or_else(|e| panic!("{path}: {e} (run deploy/mixin/render)"));
        if let Some(d) = first_difference(value, &parse(path, &committed), "") {
            stale.push(format!("{path}: rendered {d}"));
        }
    }
    assert!(
        stale.is_empty(),
        "the committed files differ from the mixin; run deploy/mixin/render:\n{}",
        stale.join("\n")
    );
    // Every dashboard in grafana/ comes from the mixin.
    for entry in std::fs::read_dir(root.join("grafana")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".json") {
            assert!(
                rendered.contains_key(&format!("grafana/{name}")),
                "grafana/{name} is not rendered from the mixin"
            );
        }
    }
    assert!(rendered.len() >= 4, "{:?}", rendered.keys());
}

/// The comparison sees what it must: a changed threshold, a dropped panel.
#[test]
fn the_comparison_finds_a_changed_value() {
    let a: Value = serde_json::json!({"groups": [{"rules": [{"expr": "x > 2.5"}]}]});
    let b: Value = serde_json::json!({"groups": [{"rules": [{"expr": "x > 3"}]}]});
    assert_eq!(
        first_difference(&a, &b, "").as_deref(),
        Some("/groups/0/rules/0/expr: \"x > 2.5\" against \"x > 3\"")
    );
    let c: Value = serde_json::json!({"panels": [1, 2]});
    let d: Value = serde_json::json!({"panels": [1]});
    assert!(first_difference(&c, &d, "").is_some());
    assert!(first_difference(&c, &c, "").is_none());
}
