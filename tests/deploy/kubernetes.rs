//! The Kubernetes variants as `kubectl kustomize` renders them (`deploy/kubernetes`, the default;
//! `deploy/kubernetes-servicemonitor`, `deploy/kubernetes-kube-prometheus-stack`,
//! `deploy/kubernetes-discovery`), checked as a platform team's admission would check them, with
//! no cluster to admit them:
//! - the core kinds pass Kubernetes' schema (`kubernetes-validate --strict`), and the monitors and
//!   the rule pass the schemas of prometheus-operator's CRDs, pinned in
//!   `tests/fixtures/prometheus-operator/` (`check.py`: unknown fields are errors);
//! - the Pod Security Standards, encoded here control by control (`baseline`: host namespaces,
//!   privileged, capabilities, hostPath, hostPort, AppArmor, SELinux, /proc mount type, seccomp,
//!   sysctls, HostProcess; `restricted`: volume types, privilege escalation, non-root, seccomp,
//!   capabilities), give each DaemonSet's pod a level, and its namespace's
//!   `pod-security.kubernetes.io/*` labels say that level: `restricted` for the default,
//!   `privileged` for discovery;
//! - monitors set `job` and `instance` and drop `pod`, `container` and `endpoint`; the
//!   kube-prometheus-stack variant labels the monitors and the rule with `release`, and nothing
//!   else.

use crate::common;
use crate::tools::{self, KUBECTL, KUBERNETES_VALIDATE};

use serde_yaml_ng::Value;
use std::io::Write;
use std::process::{Command, Stdio};

const VARIANTS: [&str; 4] = [
    "kubernetes",
    "kubernetes-servicemonitor",
    "kubernetes-kube-prometheus-stack",
    "kubernetes-discovery",
];

/// The documents `kubectl kustomize deploy/<variant>` renders.
fn render(variant: &str) -> Option<Vec<Value>> {
    tools::kustomize(&common::repo_root().join("deploy").join(variant))
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let mut it = docs.iter().filter(|d| d["kind"] == kind);
    let found = it.next().unwrap_or_else(|| panic!("no {kind}"));
    assert!(it.next().is_none(), "more than one {kind}");
    found
}

fn is_operator_kind(doc: &Value) -> bool {
    doc["apiVersion"]
        .as_str()
        .is_some_and(|v| v.starts_with("monitoring.coreos.com/"))
}

/// Runs `program args` with `input` on standard input: success, and what it printed.
fn run_with_input(program: &str, args: &[&str], input: &str) -> (bool, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn check_crds(docs: &[Value]) -> (bool, String) {
    let input: String = docs
        .iter()
        .map(|d| format!("---\n{}", serde_yaml_ng::to_string(d).unwrap()))
        .collect();
    let script = common::repo_root().join("tests/fixtures/prometheus-operator/check.py");
    run_with_input("python3", &[script.to_str().unwrap()], &input)
}

fn every_variant_passes_the_kubernetes_schema_and_the_operators_crds() {
    let Some(validate) = common::which("kubernetes-validate") else {
        common::require(false, "kubernetes-validate (PyPI; .ci/run installs it)");
        return;
    };
    let crd_checker = Command::new("python3")
        .args(["-c", "import jsonschema, yaml"])
        .status()
        .is_ok_and(|s| s.success());
    if !common::require(crd_checker, "python3 with jsonschema and PyYAML (.ci/run)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for variant in VARIANTS {
        let Some(docs) = render(variant) else { return };
        let (operator, core): (Vec<Value>, Vec<Value>) =
            docs.into_iter().partition(is_operator_kind);
        let file = dir.path().join(format!("{variant}.yaml"));
        let text: String = core
            .iter()
            .map(|d| format!("---\n{}", serde_yaml_ng::to_string(d).unwrap()))
            .collect();
        std::fs::write(&file, text).unwrap();
        let out = Command::new(&validate)
            .args(["--strict", "--kubernetes-version", "1.30.0"])
            .arg(&file)
            .output()
            .expect("run kubernetes-validate");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{variant}: {text}");
        assert_eq!(text.matches(" passed ").count(), core.len(), "{text}");
        assert!(core.len() >= 4, "{variant}: {core:?}");

        let (ok, text) = check_crds(&operator);
        assert!(ok, "{variant}: {text}");
        assert_eq!(text.matches("ok ").count(), operator.len(), "{text}");
        assert_eq!(operator.len(), 2, "{variant}: one monitor and the rule");
    }
}

/// The CRD check fails on what the API server would refuse: an unknown field, a wrong type.
fn the_crd_check_refuses_unknown_fields_and_wrong_types() {
    let ready = Command::new("python3")
        .args(["-c", "import jsonschema, yaml"])
        .status()
        .is_ok_and(|s| s.success());
    if !common::require(ready, "python3 with jsonschema and PyYAML (.ci/run)") {
        return;
    }
    let monitor: Value = serde_yaml_ng::from_str(
        "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata: {name: x}\n\
         spec:\n  selector: {}\n  podMetricsEndpoints:\n    - port: metrics\n      \
         relabelings: [{action: labeldrop, regex: pod}]\n",
    )
    .unwrap();
    let (ok, text) = check_crds(std::slice::from_ref(&monitor));
    assert!(ok, "{text}");
    let mut typo = monitor.clone();
    typo["spec"]["podMetricEndpoints"] = typo["spec"]["podMetricsEndpoints"].clone();
    let mut wrong = monitor.clone();
    wrong["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["action"] = "dropit".into();
    let mut unknown = monitor;
    unknown["kind"] = "PodMonitors".into();
    for (doc, expected) in [
        (typo, "'podMetricEndpoints' was unexpected"),
        (wrong, "'dropit' is not one of"),
        (unknown, "no pinned CRD serves"),
    ] {
        let (ok, text) = check_crds(&[doc]);
        assert!(!ok && text.contains(expected), "{expected:?} not in {text}");
    }
}

/// A Pod Security level (Kubernetes' Pod Security Standards).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// Capabilities `baseline` lets a container add (the container runtimes' default set).
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];
/// The sysctls `baseline` allows (the safe set, namespaced and isolated).
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
/// SELinux types `baseline` allows (besides none).
const SELINUX_TYPES: &[&str] = &[
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];
/// Volume types `restricted` allows.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// What keeps a pod (its template's metadata and spec) from `level`: one line per control it
/// fails. `baseline` and `restricted` as the Pod Security Standards define them.
fn violations(metadata: &Value, pod: &Value, level: Level) -> Vec<String> {
    let mut out = Vec::new();
    if level == Level::Privileged {
        return out;
    }
    let containers: Vec<(String, &Value)> = ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|list| pod[*list].as_sequence().into_iter().flatten())
        .map(|c| (c["name"].as_str().unwrap_or("?").to_owned(), c))
        .collect();
    let pod_sc = &pod["securityContext"];
    let set = |v: &Value| !v.is_null() && v != &Value::Bool(false);
    let str_of = |v: &Value| v.as_str().unwrap_or("").to_owned();

    // baseline
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        if set(&pod[field]) {
            out.push(format!("host namespaces: {field}"));
        }
    }
    if set(&pod_sc["windowsOptions"]["hostProcess"]) {
        out.push("HostProcess: pod".into());
    }
    for v in pod["volumes"].as_sequence().into_iter().flatten() {
        if !v["hostPath"].is_null() {
            out.push(format!("hostPath volumes: {}", str_of(&v["name"])));
        }
    }
    for (name, value) in pod_sc["sysctls"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|s| (str_of(&s["name"]), s))
    {
        if !SAFE_SYSCTLS.contains(&name.as_str()) {
            out.push(format!("sysctls: {name} ({value:?})"));
        }
    }
    for (key, value) in metadata["annotations"].as_mapping().into_iter().flatten() {
        let key = str_of(key);
        let value = str_of(value);
        if key.starts_with("container.apparmor.security.beta.kubernetes.io/")
            && value != "runtime/default"
            && !value.starts_with("localhost/")
        {
            out.push(format!("AppArmor: {key}={value}"));
        }
        if (key == "seccomp.security.alpha.kubernetes.io/pod"
            || key.starts_with("container.seccomp.security.alpha.kubernetes.io/"))
            && value == "unconfined"
        {
            out.push(format!("seccomp: {key}={value}"));
        }
    }
    let contexts: Vec<(String, &Value)> = std::iter::once(("pod".to_owned(), pod_sc))
        .chain(
            containers
                .iter()
                .map(|(n, c)| (format!("container {n}"), &c["securityContext"])),
        )
        .collect();
    for (who, sc) in &contexts {
        let apparmor = str_of(&sc["appArmorProfile"]["type"]);
        if !["", "RuntimeDefault", "Localhost"].contains(&apparmor.as_str()) {
            out.push(format!("AppArmor: {who} {apparmor}"));
        }
        let selinux = &sc["seLinuxOptions"];
        let t = str_of(&selinux["type"]);
        if !t.is_empty() && !SELINUX_TYPES.contains(&t.as_str()) {
            out.push(format!("SELinux: {who} type {t}"));
        }
        for field in ["user", "role"] {
            if !str_of(&selinux[field]).is_empty() {
                out.push(format!("SELinux: {who} {field}"));
            }
        }
        if str_of(&sc["seccompProfile"]["type"]) == "Unconfined" {
            out.push(format!("seccomp: {who} Unconfined"));
        }
    }
    for (name, c) in &containers {
        let sc = &c["securityContext"];
        if set(&sc["privileged"]) {
            out.push(format!("privileged: {name}"));
        }
        if set(&sc["windowsOptions"]["hostProcess"]) {
            out.push(format!("HostProcess: {name}"));
        }
        for cap in sc["capabilities"]["add"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            if !BASELINE_CAPABILITIES.contains(&str_of(cap).as_str()) {
                out.push(format!("capabilities: {name} adds {}", str_of(cap)));
            }
        }
        for port in c["ports"].as_sequence().into_iter().flatten() {
            if port["hostPort"].as_u64().unwrap_or(0) != 0 {
                out.push(format!("hostPorts: {name} {:?}", port["hostPort"]));
            }
        }
        if !["", "Default"].contains(&str_of(&sc["procMount"]).as_str()) {
            out.push(format!("/proc mount type: {name}"));
        }
    }
    if level == Level::Baseline {
        return out;
    }

    // restricted
    for v in pod["volumes"].as_sequence().into_iter().flatten() {
        for key in v.as_mapping().unwrap().keys().map(str_of) {
            if key != "name" && !RESTRICTED_VOLUMES.contains(&key.as_str()) {
                out.push(format!("volume types: {} is {key}", str_of(&v["name"])));
            }
        }
    }
    let pod_non_root = pod_sc["runAsNonRoot"] == Value::Bool(true);
    let seccomp_ok = |sc: &Value| {
        ["RuntimeDefault", "Localhost"].contains(&str_of(&sc["seccompProfile"]["type"]).as_str())
    };
    if pod_sc["runAsUser"] == 0 {
        out.push("running as non-root user: pod runAsUser 0".into());
    }
    for (name, c) in &containers {
        let sc = &c["securityContext"];
        if sc["allowPrivilegeEscalation"] != Value::Bool(false) {
            out.push(format!("privilege escalation: {name}"));
        }
        let non_root = match &sc["runAsNonRoot"] {
            Value::Bool(b) => *b,
            _ => pod_non_root,
        };
        if !non_root {
            out.push(format!("running as non-root: {name}"));
        }
        if sc["runAsUser"] == 0 {
            out.push(format!("running as non-root user: {name} runAsUser 0"));
        }
        // Its own profile, or none and the pod's.
        let own_or_pods = seccomp_ok(sc) || (sc["seccompProfile"].is_null() && seccomp_ok(pod_sc));
        if !own_or_pods {
            out.push(format!(
                "seccomp: {name} neither RuntimeDefault nor Localhost"
            ));
        }
        let drops_all = sc["capabilities"]["drop"]
            .as_sequence()
            .is_some_and(|d| d.iter().any(|c| c == "ALL"));
        if !drops_all {
            out.push(format!("capabilities: {name} does not drop ALL"));
        }
        for cap in sc["capabilities"]["add"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            if cap != "NET_BIND_SERVICE" {
                out.push(format!("capabilities: {name} adds {}", str_of(cap)));
            }
        }
    }
    out
}

/// The most restrictive level a pod passes.
fn level_of(metadata: &Value, pod: &Value) -> Level {
    [Level::Restricted, Level::Baseline]
        .into_iter()
        .find(|l| violations(metadata, pod, *l).is_empty())
        .unwrap_or(Level::Privileged)
}

/// The DaemonSet's pod template (metadata, spec) and the namespace's Pod Security labels.
fn pod_and_namespace(docs: &[Value]) -> (&Value, &Value, &Value) {
    let template = &find(docs, "DaemonSet")["spec"]["template"];
    let ns = find(docs, "Namespace");
    assert_eq!(
        find(docs, "DaemonSet")["metadata"]["namespace"],
        ns["metadata"]["name"]
    );
    (
        &template["metadata"],
        &template["spec"],
        &ns["metadata"]["labels"],
    )
}

fn assert_namespace_says(labels: &Value, level: Level, variant: &str) {
    for mode in ["enforce", "audit", "warn"] {
        assert_eq!(
            labels[format!("pod-security.kubernetes.io/{mode}").as_str()],
            Value::from(level.name()),
            "{variant}: namespace label {mode}"
        );
    }
}

fn the_default_pod_passes_restricted_and_its_namespace_enforces_it() {
    for variant in [
        "kubernetes",
        "kubernetes-servicemonitor",
        "kubernetes-kube-prometheus-stack",
    ] {
        let Some(docs) = render(variant) else { return };
        let (metadata, pod, labels) = pod_and_namespace(&docs);
        assert_eq!(
            violations(metadata, pod, Level::Restricted),
            Vec::<String>::new(),
            "{variant}"
        );
        assert_eq!(level_of(metadata, pod), Level::Restricted);
        assert_namespace_says(labels, Level::Restricted, variant);
        // The agent reads the container's own /proc and /sys: no --path.procfs or --path.sysfs.
        let args = pod["containers"][0]["args"].as_sequence().unwrap();
        assert!(
            !args
                .iter()
                .any(|a| a.as_str().unwrap().starts_with("--path.")),
            "{args:?}"
        );
    }
}

fn the_discovery_pod_is_privileged_for_its_stated_reasons_and_its_namespace_says_so() {
    let Some(docs) = render("kubernetes-discovery") else {
        return;
    };
    let (metadata, pod, labels) = pod_and_namespace(&docs);
    let found = violations(metadata, pod, Level::Baseline);
    assert_eq!(
        found,
        [
            "hostPath volumes: dev",
            "hostPath volumes: proc",
            "hostPath volumes: sys",
            "privileged: diskprobe-exporter",
        ],
        "what keeps the discovery pod from baseline is what namespace-patch.yaml states"
    );
    assert_eq!(level_of(metadata, pod), Level::Privileged);
    assert_namespace_says(labels, Level::Privileged, "kubernetes-discovery");
}

/// Each control fails the pod that breaks it, at the level that has it.
fn the_pod_security_checks_find_each_violation() {
    let base: Value = serde_yaml_ng::from_str(
        "securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}\n\
         containers:\n  - name: c\n    ports: [{containerPort: 80}]\n    \
         securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}\n\
         volumes: [{name: v, emptyDir: {}}]\n",
    )
    .unwrap();
    let meta = Value::Null;
    assert_eq!(level_of(&meta, &base), Level::Restricted);
    let cases: &[(&str, &str, Level)] = &[
        (
            "hostNetwork: true",
            "host namespaces: hostNetwork",
            Level::Baseline,
        ),
        ("hostPID: true", "host namespaces: hostPID", Level::Baseline),
        ("hostIPC: true", "host namespaces: hostIPC", Level::Baseline),
        (
            "volumes: [{name: h, hostPath: {path: /}}]",
            "hostPath volumes: h",
            Level::Baseline,
        ),
        (
            "securityContext: {sysctls: [{name: kernel.msgmax, value: '1'}]}",
            "sysctls: kernel.msgmax",
            Level::Baseline,
        ),
        (
            "securityContext: {seccompProfile: {type: Unconfined}}",
            "seccomp: pod Unconfined",
            Level::Baseline,
        ),
        (
            "securityContext: {seLinuxOptions: {type: spc_t}}",
            "SELinux: pod type spc_t",
            Level::Baseline,
        ),
        (
            "securityContext: {seLinuxOptions: {user: system_u}}",
            "SELinux: pod user",
            Level::Baseline,
        ),
        (
            "securityContext: {appArmorProfile: {type: Unconfined}}",
            "AppArmor: pod Unconfined",
            Level::Baseline,
        ),
        (
            "securityContext: {windowsOptions: {hostProcess: true}}",
            "HostProcess: pod",
            Level::Baseline,
        ),
        (
            "containers: [{name: c, securityContext: {privileged: true}}]",
            "privileged: c",
            Level::Baseline,
        ),
        (
            "containers: [{name: c, securityContext: {capabilities: {add: [SYS_ADMIN]}}}]",
            "capabilities: c adds SYS_ADMIN",
            Level::Baseline,
        ),
        (
            "containers: [{name: c, ports: [{containerPort: 80, hostPort: 80}]}]",
            "hostPorts: c",
            Level::Baseline,
        ),
        (
            "containers: [{name: c, securityContext: {procMount: Unmasked}}]",
            "/proc mount type: c",
            Level::Baseline,
        ),
        (
            "initContainers: [{name: i, securityContext: {privileged: true}}]",
            "privileged: i",
            Level::Baseline,
        ),
        (
            "volumes: [{name: n, nfs: {server: s, path: /}}]",
            "volume types: n is nfs",
            Level::Restricted,
        ),
        (
            "containers: [{name: c, securityContext: {capabilities: {drop: [ALL]}}}]",
            "privilege escalation: c",
            Level::Restricted,
        ),
        (
            "containers: [{name: c, securityContext: {allowPrivilegeEscalation: false}}]",
            "capabilities: c does not drop ALL",
            Level::Restricted,
        ),
        (
            "containers: [{name: c, securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL], add: [CHOWN]}}}]",
            "capabilities: c adds CHOWN",
            Level::Restricted,
        ),
        (
            "securityContext: {runAsNonRoot: false, seccompProfile: {type: RuntimeDefault}}",
            "running as non-root: c",
            Level::Restricted,
        ),
        (
            "securityContext: {runAsNonRoot: true, runAsUser: 0, seccompProfile: {type: RuntimeDefault}}",
            "running as non-root user: pod runAsUser 0",
            Level::Restricted,
        ),
        (
            "securityContext: {runAsNonRoot: true}",
            "seccomp: c neither RuntimeDefault nor Localhost",
            Level::Restricted,
        ),
    ];
    for (change, expected, fails) in cases {
        let change: Value = serde_yaml_ng::from_str(change).unwrap();
        let mut pod = base.clone();
        for (k, v) in change.as_mapping().unwrap() {
            pod[k.as_str().unwrap()] = v.clone();
        }
        let found = violations(&meta, &pod, *fails);
        assert!(
            found.iter().any(|f| f.starts_with(expected)),
            "{change:?}: {expected:?} not in {found:?}"
        );
        if *fails == Level::Restricted {
            assert!(
                violations(&meta, &pod, Level::Baseline).is_empty(),
                "{change:?} passes baseline"
            );
            assert_eq!(level_of(&meta, &pod), Level::Baseline);
        } else {
            assert_eq!(level_of(&meta, &pod), Level::Privileged);
        }
    }
    let annotated: Value = serde_yaml_ng::from_str(
        "annotations: {container.apparmor.security.beta.kubernetes.io/c: unconfined}",
    )
    .unwrap();
    assert_eq!(
        violations(&annotated, &base, Level::Baseline),
        ["AppArmor: container.apparmor.security.beta.kubernetes.io/c=unconfined"]
    );
}

/// The monitor's relabelings: job, instance from the node name, pod/container/endpoint dropped.
fn assert_relabels(monitor: &Value, endpoints: &str, variant: &str) {
    let relabelings = monitor["spec"][endpoints][0]["relabelings"]
        .as_sequence()
        .unwrap_or_else(|| panic!("{variant}: no relabelings"));
    let has = |action: &str, f: &dyn Fn(&Value) -> bool| {
        relabelings.iter().any(|r| r["action"] == action && f(r))
    };
    assert!(
        has("replace", &|r| r["targetLabel"] == "job"
            && r["replacement"] == "diskprobe"),
        "{variant}: job"
    );
    assert!(
        has("replace", &|r| r["targetLabel"] == "instance"
            && r["sourceLabels"][0] == "__meta_kubernetes_pod_node_name"),
        "{variant}: instance"
    );
    let dropped = relabelings
        .iter()
        .filter(|r| r["action"] == "labeldrop")
        .map(|r| regex::Regex::new(&format!("^(?:{})$", r["regex"].as_str().unwrap())).unwrap())
        .collect::<Vec<_>>();
    for label in ["pod", "container", "endpoint"] {
        assert!(
            dropped.iter().any(|re| re.is_match(label)),
            "{variant}: {label} kept"
        );
    }
    for label in [
        "job",
        "instance",
        "namespace",
        "target",
        "device",
        "profile",
    ] {
        assert!(
            !dropped.iter().any(|re| re.is_match(label)),
            "{variant}: {label} dropped"
        );
    }
}

fn one_monitor_per_variant_sets_job_and_instance_and_drops_pod_labels() {
    for (variant, kind, endpoints) in [
        ("kubernetes", "PodMonitor", "podMetricsEndpoints"),
        ("kubernetes-discovery", "PodMonitor", "podMetricsEndpoints"),
        (
            "kubernetes-kube-prometheus-stack",
            "PodMonitor",
            "podMetricsEndpoints",
        ),
        ("kubernetes-servicemonitor", "ServiceMonitor", "endpoints"),
    ] {
        let Some(docs) = render(variant) else { return };
        let monitors: Vec<&Value> = docs
            .iter()
            .filter(|d| d["kind"] == "PodMonitor" || d["kind"] == "ServiceMonitor")
            .collect();
        assert_eq!(monitors.len(), 1, "{variant}: one monitor (never both)");
        assert_eq!(monitors[0]["kind"], kind, "{variant}");
        assert_relabels(monitors[0], endpoints, variant);
        if kind == "ServiceMonitor" {
            // Beyond 1,000 pods the Endpoints object is truncated.
            assert_eq!(monitors[0]["spec"]["serviceDiscoveryRole"], "EndpointSlice");
            find(&docs, "Service");
        }
        // The monitor selects the DaemonSet's pods.
        let pod_labels = &find(&docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"];
        for (k, v) in monitors[0]["spec"]["selector"]["matchLabels"]
            .as_mapping()
            .unwrap()
        {
            assert_eq!(
                &pod_labels[k.as_str().unwrap()],
                v,
                "{variant}: selector {k:?}"
            );
        }
    }
}

fn the_kube_prometheus_stack_variant_labels_monitors_and_rules_with_release() {
    let Some(docs) = render("kubernetes-kube-prometheus-stack") else {
        return;
    };
    let Some(plain) = render("kubernetes") else {
        return;
    };
    assert_eq!(docs.len(), plain.len());
    for (doc, before) in docs.iter().zip(&plain) {
        let release = &doc["metadata"]["labels"]["release"];
        if is_operator_kind(doc) {
            assert_eq!(release, "kube-prometheus-stack", "{:?}", doc["kind"]);
            let mut without = doc.clone();
            without["metadata"]["labels"]
                .as_mapping_mut()
                .unwrap()
                .remove("release");
            assert_eq!(&without, before, "only the label changes");
        } else {
            assert!(release.is_null(), "{:?} labelled", doc["kind"]);
            assert_eq!(doc, before);
        }
    }
}

/// What the base DaemonSet relies on instead of host paths: in new mount, PID and network
/// namespaces with a procfs and a sysfs of their own (as a container runtime mounts them) and the
/// probe file in a bind-mounted directory (as an emptyDir is), the agent finds the same device
/// under its probe file as outside them, and `/proc/diskstats` lists the same devices.
fn the_containers_own_proc_and_sys_show_the_nodes_disks() {
    let ready = common::require(common::is_root(), "root (namespaces, mounts)")
        && common::require(common::which("unshare").is_some(), "unshare (util-linux)");
    if !ready {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (state, mnt) = (dir.path().join("state"), dir.path().join("mnt"));
    std::fs::create_dir(&state).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let probe = |file: &std::path::Path| {
        format!(
            "{} probe --target {} --profile randread-4k-qd1-gentle --runtime 100ms --size 8MiB \
             --format json",
            common::binary().display(),
            file.display()
        )
    };
    let devices = |diskstats: &str| -> Vec<String> {
        let mut d: Vec<String> = diskstats
            .lines()
            .filter_map(|l| l.split_whitespace().nth(2).map(str::to_owned))
            .collect();
        d.sort();
        d
    };
    let device = |json: &str| -> String {
        let runs: serde_json::Value = serde_json::from_str(json).expect("probe JSON");
        assert_eq!(runs[0]["error"], serde_json::Value::Null, "{json}");
        runs[0]["device"].as_str().unwrap_or("").to_owned()
    };
    // Outside: the node's view.
    let out = Command::new("sh")
        .args(["-c", &probe(&state.join("probe.dat"))])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let node_device = device(&String::from_utf8_lossy(&out.stdout));
    assert!(
        !node_device.is_empty(),
        "no device under {}",
        state.display()
    );
    // Other tests attach and detach loop devices meanwhile: the node's view is read before and
    // after, and the namespaces' must hold every device of both and none of neither.
    let node_before = devices(&std::fs::read_to_string("/proc/diskstats").unwrap());

    // Inside: fresh procfs (PID 1 is the shell) and sysfs (only the new namespace's loopback).
    let script = format!(
        "set -e; mount -t sysfs sysfs /sys; mount --bind {state} {mnt}; \
         test \"$(cat /proc/1/comm)\" = sh; test \"$(ls /sys/class/net)\" = lo; \
         {probe}; echo ---; cat /proc/diskstats",
        state = state.display(),
        mnt = mnt.display(),
        probe = probe(&mnt.join("probe.dat")),
    );
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--pid",
            "--net",
            "--fork",
            "--mount-proc",
            "sh",
            "-c",
        ])
        .arg(&script)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (json, diskstats) = text
        .split_once("---\n")
        .expect("probe output, then diskstats");
    assert_eq!(device(json), node_device, "the device under the probe file");
    let node_after = devices(&std::fs::read_to_string("/proc/diskstats").unwrap());
    let inside = devices(diskstats);
    let stable: Vec<&String> = node_before
        .iter()
        .filter(|d| node_after.contains(d))
        .collect();
    assert!(!stable.is_empty(), "no device stayed on the node");
    for d in &stable {
        assert!(
            inside.contains(d),
            "{d} missing from /proc/diskstats in the namespaces: {inside:?}"
        );
    }
    for d in &inside {
        assert!(
            node_before.contains(d) || node_after.contains(d),
            "{d} in the namespaces but never on the node: before {node_before:?}, after {node_after:?}"
        );
    }
}

crate::tests! {
    every_variant_passes_the_kubernetes_schema_and_the_operators_crds: [KUBECTL, KUBERNETES_VALIDATE],
    the_crd_check_refuses_unknown_fields_and_wrong_types,
    the_default_pod_passes_restricted_and_its_namespace_enforces_it: [KUBECTL],
    the_discovery_pod_is_privileged_for_its_stated_reasons_and_its_namespace_says_so: [KUBECTL],
    the_pod_security_checks_find_each_violation,
    one_monitor_per_variant_sets_job_and_instance_and_drops_pod_labels: [KUBECTL],
    the_kube_prometheus_stack_variant_labels_monitors_and_rules_with_release: [KUBECTL],
    the_containers_own_proc_and_sys_show_the_nodes_disks,
}
