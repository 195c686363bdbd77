//! The discovery DaemonSet (`deploy/kubernetes-discovery`, an overlay of `deploy/kubernetes`):
//! its configuration loads and only reads, and what `kubectl kustomize` renders from it is what
//! docs/deployment.md states: privileged, read-only host `/proc`, `/sys` and `/dev` and no other host
//! path (no kubelet volume directory), no RBAC and no service account token, existing flags.

use crate::common;
use crate::tools::{self, KUBECTL};

use diskprobe_exporter::config::Config;
use diskprobe_exporter::config::discover::RuleSource;
use diskprobe_exporter::probe::profile::ProbeClass;
use serde_yaml_ng::Value;
use std::path::PathBuf;
use std::process::Command;

fn overlay() -> PathBuf {
    common::repo_root().join("deploy/kubernetes-discovery")
}

fn the_discovery_config_finds_disks_and_csi_volumes_read_only() {
    let config = Config::load(&overlay().join("config.toml")).expect("config.toml is valid");
    assert!(config.targets.is_empty(), "only discovered targets");
    let kinds: Vec<(&str, &str)> = config
        .discover
        .iter()
        .map(|r| (r.id.as_str(), r.source.kind()))
        .collect();
    assert_eq!(kinds, [("disks", "block"), ("pvcs", "mount")]);
    // The privileged variant (root, CAP_SYS_ADMIN) reads EC2's NVMe statistics.
    assert!(config.cloud_stats.enabled, "[cloud_stats] enabled");
    for rule in &config.discover {
        assert!(rule.settings.profiles.iter().all(|p| !p.rw.is_write()));
        assert!(
            rule.settings
                .profiles
                .iter()
                .all(|p| p.class() == ProbeClass::Gentle),
            "gentle profiles only"
        );
        if let RuleSource::Mount(m) = &rule.source {
            assert!(
                m.file.is_none(),
                "no file probes: nothing written in volumes"
            );
            assert!(
                m.mountpoint
                    .is_match("/var/lib/kubelet/pods/0a1b/volumes/kubernetes.io~csi/pvc-42/mount")
            );
            assert!(
                !m.mountpoint
                    .is_match("/var/lib/kubelet/pods/0a1b/volumes/kubernetes.io~secret/token")
            );
        }
    }
}

fn the_discovery_daemonset_is_privileged_reads_only_host_proc_sys_dev_and_needs_no_api() {
    let Some(docs) = tools::kustomize(&overlay()) else {
        return;
    };
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    for rbac in [
        "ServiceAccount",
        "Role",
        "ClusterRole",
        "RoleBinding",
        "ClusterRoleBinding",
    ] {
        assert!(!kinds.contains(&rbac), "{rbac}: the agent needs no API");
    }
    let find = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind}"))
    };

    let pod = &find("DaemonSet")["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], Value::Bool(false));
    assert!(pod["hostNetwork"].is_null() && pod["hostPID"].is_null());
    assert_eq!(pod["securityContext"]["runAsUser"], Value::from(0));
    let container = &pod["containers"][0];
    assert_eq!(
        container["securityContext"]["privileged"],
        Value::Bool(true),
        "the variant is privileged, and says so"
    );
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
            ("dev".into(), "/dev".into()),
            ("proc".into(), "/proc".into()),
            ("sys".into(), "/sys".into()),
        ],
        "no kubelet volume directory: volume contents stay out of reach"
    );
    let mounts = container["volumeMounts"].as_sequence().unwrap();
    for (name, _) in &host_paths {
        let mount = mounts
            .iter()
            .find(|m| m["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} is not mounted"));
        assert_eq!(mount["readOnly"], Value::Bool(true), "{name} read-only");
        assert!(mount["mountPropagation"].is_null());
    }
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for arg in [
        "--path.procfs=/host/proc",
        "--path.sysfs=/host/sys",
        "--path.devfs=/host/dev",
    ] {
        assert!(args.contains(&arg), "{arg} in {args:?}");
    }
    let help = Command::new(common::binary())
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for arg in &args {
        let flag = arg.split('=').next().unwrap();
        assert!(help.contains(flag), "unknown flag {flag}");
    }

    // The ConfigMap carries config.toml as it is.
    let toml = find("ConfigMap")["data"]["config.toml"].as_str().unwrap();
    assert_eq!(
        toml,
        std::fs::read_to_string(overlay().join("config.toml")).unwrap()
    );
}

crate::tests! {
    the_discovery_config_finds_disks_and_csi_volumes_read_only,
    the_discovery_daemonset_is_privileged_reads_only_host_proc_sys_dev_and_needs_no_api: [KUBECTL],
}
