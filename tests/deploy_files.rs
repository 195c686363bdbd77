//! The deployment files are valid and say what the README says: Kubernetes YAML parses and is
//! hardened (non-root, read-only root, no capabilities, read-only host /proc and /sys only), the
//! PrometheusRule carries exactly deploy/prometheus/rules.yml, the example configurations load,
//! every flag used in the unit and the DaemonSet exists, and the scrape config passes promtool.

mod common;

use diskprobe_exporter::config::Config;
use serde_yaml_ng::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy(path: &str) -> PathBuf {
    common::repo_root().join("deploy").join(path)
}

fn yaml_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| {
            serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect()
}

fn help_text() -> String {
    let out = Command::new(common::binary())
        .arg("--help")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_flags_exist(args: &[String], help: &str, source: &str) {
    for arg in args.iter().filter(|a| a.starts_with("--")) {
        let flag = arg.split('=').next().unwrap();
        assert!(help.contains(flag), "{source}: unknown flag {flag}");
    }
}

#[test]
fn kubernetes_manifests_are_valid_and_hardened() {
    let dir = deploy("kubernetes");
    let kustomization = &yaml_docs(&dir.join("kustomization.yaml"))[0];
    let resources: Vec<&str> = kustomization["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(resources.len() >= 6);
    let mut kinds = Vec::new();
    for r in &resources {
        for doc in yaml_docs(&dir.join(r)) {
            let kind = doc["kind"]
                .as_str()
                .unwrap_or_else(|| panic!("{r}: no kind"))
                .to_owned();
            assert!(doc["apiVersion"].as_str().is_some(), "{r}: no apiVersion");
            assert!(
                doc["metadata"]["name"].as_str().is_some(),
                "{r}: no metadata.name"
            );
            kinds.push((kind, doc));
        }
    }
    let find = |kind: &str| {
        kinds
            .iter()
            .find(|(k, _)| k == kind)
            .map(|(_, d)| d)
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    for kind in [
        "Namespace",
        "ConfigMap",
        "DaemonSet",
        "Service",
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
    ] {
        find(kind);
    }

    // The DaemonSet: non-root, no privileges, read-only host paths only.
    let ds = find("DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], Value::Bool(true));
    assert!(pod["hostNetwork"].is_null() && pod["hostPID"].is_null());
    let container = &pod["containers"][0];
    let sc = &container["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], Value::Bool(false));
    assert_eq!(sc["readOnlyRootFilesystem"], Value::Bool(true));
    assert_ne!(sc["privileged"], Value::Bool(true));
    assert_eq!(sc["capabilities"]["drop"][0], Value::from("ALL"));
    assert!(sc["capabilities"]["add"].is_null());
    let host_paths: Vec<(String, String)> = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter(|v| !v["hostPath"].is_null())
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_owned(),
                v["hostPath"]["path"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        host_paths,
        [
            ("proc".into(), "/proc".into()),
            ("sys".into(), "/sys".into())
        ]
    );
    for mount in container["volumeMounts"].as_sequence().unwrap() {
        let name = mount["name"].as_str().unwrap();
        if host_paths.iter().any(|(n, _)| n == name) {
            assert_eq!(
                mount["readOnly"],
                Value::Bool(true),
                "host path {name} must be read-only"
            );
        }
    }
    let args: Vec<String> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    assert_flags_exist(&args, &help_text(), "daemonset.yaml");

    // The ConfigMap's configuration is valid.
    let cm = find("ConfigMap");
    let toml = cm["data"]["config.toml"].as_str().unwrap();
    Config::from_toml(toml, Path::new("configmap.yaml")).expect("ConfigMap config.toml is valid");

    // The PrometheusRule is rules.yml.
    let rules: Value = yaml_docs(&deploy("prometheus/rules.yml")).remove(0);
    assert_eq!(
        find("PrometheusRule")["spec"]["groups"],
        rules["groups"],
        "prometheusrule.yaml is out of date: python3 deploy/kubernetes/gen_prometheusrule.py"
    );
}

#[test]
fn systemd_unit_and_example_configs() {
    let unit = std::fs::read_to_string(deploy("systemd/diskprobe_exporter.service")).unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let args: Vec<String> = exec.split_whitespace().skip(1).map(str::to_owned).collect();
    assert_flags_exist(&args, &help_text(), "diskprobe_exporter.service");
    for hardening in [
        "DynamicUser=yes",
        "StateDirectory=diskprobe_exporter",
        "ProtectSystem=strict",
        "CapabilityBoundingSet=\n",
        "NoNewPrivileges=yes",
        "PrivateDevices=yes",
    ] {
        assert!(unit.contains(hardening), "unit lacks {hardening:?}");
    }
    Config::load(&deploy("systemd/config.toml")).expect("deploy/systemd/config.toml is valid");
    if let Some(analyze) = common::which("systemd-analyze") {
        let out = Command::new(analyze)
            .args(["verify", "--man=no"])
            .arg(deploy("systemd/diskprobe_exporter.service"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        // Only the unit's own syntax matters here (the binary is not installed on test machines).
        assert!(
            !text.contains("Unknown key") && !text.contains("Invalid"),
            "{text}"
        );
    }
}

#[test]
fn scrape_config_passes_promtool() {
    let Some(promtool) = common::which("promtool") else {
        common::require(false, "promtool (Debian package prometheus)");
        return;
    };
    let out = Command::new(promtool)
        .args(["check", "config"])
        .arg(deploy("prometheus/scrape.yml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
