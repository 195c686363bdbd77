//! What the deploy artefacts' tests need from the machine (the renderers and checkers of
//! `.ci/run`), as [`Need`]s for the modules' `crate::tests!` lists, and `kubectl kustomize`.

use crate::common::{self, require, skip::Need};

/// kubectl, for `kubectl kustomize` ([`kustomize`]).
pub const KUBECTL: Need = Need::tool("kubectl", "kubectl (kustomize)");
/// jsonnet, for the mixin (the tests also check that it is the pinned version).
pub const JSONNET: Need = Need::tool(
    "jsonnet",
    "jsonnet (Debian package jsonnet; .ci/run installs it)",
);
/// kubernetes-validate, for the Kubernetes schema.
pub const KUBERNETES_VALIDATE: Need = Need::tool(
    "kubernetes-validate",
    "kubernetes-validate (PyPI; .ci/run installs it)",
);
/// dpkg and dpkg-deb, to install and unpack the .deb.
pub const DPKG: Need = Need::tool("dpkg", "dpkg (Debian)");
/// rpm, to read the .rpm.
pub const RPM: Need = Need::tool("rpm", "rpm (Debian package rpm; .ci/run installs it)");
/// systemd-analyze, to verify the installed unit.
pub const SYSTEMD_ANALYZE: Need = Need::tool(
    "systemd-analyze",
    "systemd-analyze (Debian package systemd; .ci/run installs it)",
);
/// Grafana's dashboard schema (the Python package grafana-foundation-sdk).
pub const GRAFANA_SDK: Need =
    Need::check("grafana-foundation-sdk (PyPI; .ci/run installs it)", || {
        python_imports("grafana_foundation_sdk")
    });

/// Whether python3 imports `module`.
fn python_imports(module: &str) -> bool {
    common::which("python3").is_some_and(|py| {
        std::process::Command::new(py)
            .args(["-c", &format!("import {module}")])
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The documents `kubectl kustomize DIR` renders; None (a failure under
/// `DISKPROBE_TEST_STRICT=1`) without kubectl.
pub fn kustomize(dir: &std::path::Path) -> Option<Vec<serde_yaml_ng::Value>> {
    let Some(kubectl) = common::which("kubectl") else {
        require(false, "kubectl (kustomize)");
        return None;
    };
    let out = std::process::Command::new(kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    Some(
        serde_yaml_ng::Deserializer::from_str(&text)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect(),
    )
}
