//! The deployment files say what docs/deployment.md says: Kubernetes YAML is hardened (non-root,
//! read-only root, no capabilities, no host path) and fit for a fleet (one monitor,
//! instance = node name, every taint tolerated, a priority class, no CPU limit, a memory limit
//! above the largest profile's buffers); the PrometheusRule carries exactly
//! deploy/prometheus/rules.yml; the example configurations load and use gentle profiles only;
//! every flag used in the unit and the DaemonSet exists; the scrape config passes promtool.
//! tests/deploy/kubernetes.rs checks the variants as `kubectl kustomize` renders them (Kubernetes'
//! schema, prometheus-operator's CRD schemas, Pod Security levels).

use crate::common;
use crate::tools::{self, KUBECTL};

use diskprobe_exporter::config::Config;
use diskprobe_exporter::probe::profile::{ProbeClass, Profile};
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

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let mut it = docs.iter().filter(|d| d["kind"] == kind);
    let found = it.next().unwrap_or_else(|| panic!("no {kind}"));
    assert!(it.next().is_none(), "more than one {kind}");
    found
}

/// Bytes of a Kubernetes memory quantity (`160Mi`, `1Gi`, `512M`).
fn quantity(q: &str) -> u64 {
    let split = q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len());
    let (n, unit) = q.split_at(split);
    let n: u64 = n.parse().expect("quantity number");
    n * match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        other => panic!("unit {other}"),
    }
}

/// The monitor's relabelings set job="diskprobe" and instance to the node name, and drop the
/// pod, container and endpoint labels.
fn assert_monitor_labels(monitor: &Value, endpoints: &str) {
    let relabelings = monitor["spec"][endpoints][0]["relabelings"]
        .as_sequence()
        .expect("relabelings");
    let sets = |target: &str, source: Option<&str>, replacement: Option<&str>| {
        relabelings.iter().any(|r| {
            r["targetLabel"] == target
                && r["action"] == "replace"
                && source.is_none_or(|s| r["sourceLabels"][0] == s)
                && replacement.is_none_or(|v| r["replacement"] == v)
        })
    };
    assert!(sets("job", None, Some("diskprobe")), "job=diskprobe");
    assert!(
        sets("instance", Some("__meta_kubernetes_pod_node_name"), None),
        "instance from the node name"
    );
    assert!(
        relabelings
            .iter()
            .any(|r| r["action"] == "labeldrop" && r["regex"] == "pod|container|endpoint"),
        "pod, container and endpoint dropped"
    );
}

/// Every target and discovery rule of a shipped configuration runs gentle profiles only: a
/// capacity profile is skipped on a busy disk (and the stale alerts fire instead of a
/// measurement) and takes a cloud disk's whole IOPS cap while it runs.
fn assert_gentle(config: &Config, source: &str) {
    let profiles = config
        .targets
        .iter()
        .flat_map(|t| &t.settings.profiles)
        .chain(config.discover.iter().flat_map(|r| &r.settings.profiles));
    let mut n = 0;
    for p in profiles {
        n += 1;
        assert_eq!(p.class(), ProbeClass::Gentle, "{source}: {}", p.name);
    }
    assert!(n > 0, "{source}: no profile");
}

fn kubernetes_manifests_are_valid_and_hardened() {
    let Some(resources) = tools::kustomize(&deploy("kubernetes")) else {
        return;
    };
    for kind in [
        "Namespace",
        "PriorityClass",
        "ConfigMap",
        "DaemonSet",
        "PodMonitor",
        "PrometheusRule",
    ] {
        find(&resources, kind);
    }
    // One monitor by default, a PodMonitor; the ServiceMonitor variant swaps it for a
    // ServiceMonitor and its Service.
    assert!(
        !resources
            .iter()
            .any(|r| r["kind"] == "ServiceMonitor" || r["kind"] == "Service")
    );
    assert_monitor_labels(find(&resources, "PodMonitor"), "podMetricsEndpoints");
    let Some(overlay) = tools::kustomize(&deploy("kubernetes-servicemonitor")) else {
        return;
    };
    assert!(!overlay.iter().any(|r| r["kind"] == "PodMonitor"));
    find(&overlay, "Service");
    assert_monitor_labels(find(&overlay, "ServiceMonitor"), "endpoints");
    assert_eq!(overlay.len(), resources.len() + 1);

    // The DaemonSet: non-root, no privileges, no host path.
    let ds = find(&resources, "DaemonSet");
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
    assert_eq!(host_paths, [], "the container's own /proc and /sys");
    let args: Vec<String> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    assert_flags_exist(&args, &help_text(), "daemonset.yaml");

    // Fit for a fleet: every taint tolerated, our priority class, no CPU limit, and a memory
    // limit above the largest built-in profile's buffers plus 64 MiB for the agent itself.
    let tolerations = pod["tolerations"].as_sequence().expect("tolerations");
    assert!(
        tolerations
            .iter()
            .any(|t| t["operator"] == "Exists" && t["key"].is_null() && t["effect"].is_null()),
        "a toleration of every taint: {tolerations:?}"
    );
    assert_eq!(
        pod["priorityClassName"],
        find(&resources, "PriorityClass")["metadata"]["name"]
    );
    let limits = &container["resources"]["limits"];
    assert!(limits["cpu"].is_null(), "no CPU limit");
    let largest = Profile::builtins()
        .iter()
        .map(|p| p.block_size * u64::from(p.iodepth))
        .max()
        .unwrap();
    let memory = quantity(limits["memory"].as_str().expect("a memory limit"));
    assert!(
        memory >= largest + (64 << 20),
        "memory limit {memory} is not above {largest} bytes of buffers plus 64 MiB"
    );

    // The ConfigMap's configuration is valid and gentle.
    let cm = find(&resources, "ConfigMap");
    let toml = cm["data"]["config.toml"].as_str().unwrap();
    let config = Config::from_toml(toml, Path::new("configmap.yaml"))
        .expect("ConfigMap config.toml is valid");
    assert_gentle(&config, "configmap.yaml");

    // The PrometheusRule is rules.yml.
    let rules: Value = yaml_docs(&deploy("prometheus/rules.yml")).remove(0);
    assert_eq!(
        find(&resources, "PrometheusRule")["spec"]["groups"],
        rules["groups"],
        "prometheusrule.yaml is out of date: deploy/mixin/render"
    );
}

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
    let config =
        Config::load(&deploy("systemd/config.toml")).expect("deploy/systemd/config.toml is valid");
    assert_gentle(&config, "systemd/config.toml");
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

/// The `[cloud_stats]` drop-in widens exactly what the NVMe admin command needs (the capability,
/// read access to NVMe namespaces) and leaves the base unit's hardening as it is.
fn the_cloud_stats_drop_in_grants_only_cap_sys_admin_and_nvme_reads() {
    let drop_in = std::fs::read_to_string(deploy("systemd/cloud-stats.conf")).unwrap();
    let keys: Vec<&str> = drop_in
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains('='))
        .collect();
    assert_eq!(
        keys,
        [
            "CapabilityBoundingSet=CAP_SYS_ADMIN",
            "AmbientCapabilities=CAP_SYS_ADMIN",
            "PrivateDevices=no",
            "DeviceAllow=block-blkext r",
            "SupplementaryGroups=disk",
        ]
    );
    assert!(drop_in.contains("[Service]\n"));
    assert!(drop_in.contains("[cloud_stats] enabled = true"));
    let unit = std::fs::read_to_string(deploy("systemd/diskprobe_exporter.service")).unwrap();
    assert!(unit.contains("CapabilityBoundingSet=\n") && unit.contains("PrivateDevices=yes"));
    assert!(
        unit.contains("cloud-stats.conf"),
        "the unit points at the drop-in"
    );
    // systemd reads the unit with the drop-in (from a unit path of the test's own).
    if let Some(analyze) = common::which("systemd-analyze") {
        let dir = tempfile::tempdir().unwrap();
        let drop_dir = dir.path().join("diskprobe_exporter.service.d");
        std::fs::create_dir(&drop_dir).unwrap();
        let unit_file = dir.path().join("diskprobe_exporter.service");
        std::fs::write(&unit_file, &unit).unwrap();
        std::fs::write(drop_dir.join("cloud-stats.conf"), &drop_in).unwrap();
        let out = Command::new(analyze)
            .args(["verify", "--man=no"])
            .arg(&unit_file)
            .env("SYSTEMD_UNIT_PATH", format!("{}:", dir.path().display()))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(
            !text.contains("Unknown key") && !text.contains("Invalid"),
            "{text}"
        );
    }
}

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

crate::tests! {
    kubernetes_manifests_are_valid_and_hardened: [KUBECTL],
    systemd_unit_and_example_configs,
    the_cloud_stats_drop_in_grants_only_cap_sys_admin_and_nvme_reads,
    scrape_config_passes_promtool: [PROMTOOL],
}
