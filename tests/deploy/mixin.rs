//! The monitoring mixin (`deploy/mixin`) and the files rendered from it: the committed
//! `deploy/prometheus/rules.yml`, `deploy/kubernetes/prometheusrule.yaml`, `grafana/*.json` and
//! `docs/runbook.md` are what jsonnet (Debian's 0.18, the one `.ci/run` installs) renders from
//! the mixin, compared parsed (YAML and JSON values, not text; Markdown as text). Every alert
//! links its dashboard and its runbook section (whose UIDs, panels and variables exist), every
//! runbook section opens with its first action and silences for longer than its alert's
//! `keep_firing_for`, and the runbook and the design document say the thresholds of `_config`.

use crate::common;
use crate::tools::JSONNET;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

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
    render_only(config, &[""])
}

/// The files of [`render`] whose path starts with one of `prefixes`: jsonnet evaluates only
/// those (the runbook alone takes a second, everything about 12 s of CPU time). Rendered once
/// per `config` and `prefixes` in a run, as several tests read the same rendering; tests asking
/// for one being rendered wait for it.
fn render_only(config: &str, prefixes: &[&str]) -> BTreeMap<String, Value> {
    type Rendered = Arc<OnceLock<BTreeMap<String, Value>>>;
    static RENDERED: Mutex<BTreeMap<(String, Vec<String>), Rendered>> = Mutex::new(BTreeMap::new());
    let key = (
        config.to_owned(),
        prefixes.iter().map(|p| (*p).to_owned()).collect(),
    );
    let once = RENDERED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key)
        .or_default()
        .clone();
    once.get_or_init(|| render_now(config, prefixes)).clone()
}

/// [`render_only`], run now.
fn render_now(config: &str, prefixes: &[&str]) -> BTreeMap<String, Value> {
    let render = common::repo_root().join("deploy/mixin/render.jsonnet");
    let prefixes: Vec<String> = prefixes.iter().map(|p| format!("{p:?}")).collect();
    let expr = format!(
        "local files = (import {:?})({config}); \
         {{ [f]: files[f] for f in std.objectFields(files) \
            if std.length([p for p in [{}] if std.startsWith(f, p)]) > 0 }}",
        render.display().to_string(),
        prefixes.join(", ")
    );
    let out = Command::new("jsonnet")
        .arg("-e")
        .arg(expr)
        .output()
        .expect("run jsonnet");
    assert!(
        out.status.success(),
        "jsonnet: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("render.jsonnet gives an object")
}

/// A committed file's content as a value: YAML or JSON by its extension, Markdown as its text.
fn parse(path: &str, text: &str) -> Value {
    if Path::new(path).extension().is_some_and(|e| e == "json") {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{path}: {e}"))
    } else if Path::new(path).extension().is_some_and(|e| e == "md") {
        Value::String(text.to_owned())
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

/// What every query must carry, for one configuration of the mixin.
struct Expected<'a> {
    /// The job selector's matcher: label, value (an equality).
    job: (&'a str, &'a str),
    /// kube-state-metrics' job selector's matcher, for its series.
    kube_state_metrics_job: (&'a str, &'a str),
    /// The cluster label.
    cluster: &'a str,
    /// The cluster selector's matcher, if one is configured: label, value (an inequality).
    cluster_selector: Option<(&'a str, &'a str)>,
}

/// A configuration unlike the default one: another job, a cluster label of another name, a
/// cluster selector and a runbook URL base.
const OTHER: &str = r#"{
  jobSelector: 'job="storage-probe"',
  kubeStateMetricsSelector: 'job="ksm"',
  clusterLabel: 'k8s_cluster',
  clusterSelector: 'k8s_cluster!=""',
  runbookURLBase: 'https://git.test/ops/diskprobe/blob/main/docs/runbook.md',
}"#;
const OTHER_EXPECTED: Expected = Expected {
    job: ("job", "storage-probe"),
    kube_state_metrics_job: ("job", "ksm"),
    cluster: "k8s_cluster",
    cluster_selector: Some(("k8s_cluster", "")),
};
const DEFAULT_EXPECTED: Expected = Expected {
    job: ("job", "diskprobe"),
    kube_state_metrics_job: ("job", "kube-state-metrics"),
    cluster: "cluster",
    cluster_selector: None,
};

/// What the cluster variable stands for in panel queries when they are parsed: a selection of
/// two clusters, as Grafana writes a multi-value variable into a regex.
const CLUSTERS: &str = "eu-1|us-2";

/// Grafana's variables in a panel query, as Grafana substitutes them.
fn substitute(query: &str) -> String {
    let mut q = query
        .replace("$__rate_interval", "5m")
        .replace("$__interval", "5m")
        .replace("$__range", "6h")
        .replace("$cluster", CLUSTERS);
    for var in ["$instance", "$target", "$profile", "$device"] {
        q = q.replace(var, ".*");
    }
    assert!(!q.contains('$'), "a variable left in {q}");
    q
}

/// What is wrong with the selectors and groupings of one PromQL expression (`what` says where it
/// is): every vector and matrix selector has the job selector's and the cluster selector's
/// matchers (and, in a panel, the cluster variable's); every `by` and `on` keeps the cluster
/// label, no `without` or `ignoring` drops it; aggregations that keep labels say which.
fn query_problems(what: &str, expr: &str, expected: &Expected, panel: bool) -> Vec<String> {
    use promql_parser::label::MatchOp;
    use promql_parser::parser::{Expr, LabelModifier};
    let ast = match promql_parser::parser::parse(expr) {
        Ok(ast) => ast,
        Err(e) => return vec![format!("{what}: does not parse ({e}): {expr}")],
    };
    let mut problems = Vec::new();
    let mut problem = |p: String| problems.push(format!("{what}: {p} in {expr}"));
    let mut stack: Vec<&Expr> = vec![&ast];
    let mut selectors = 0;
    while let Some(e) = stack.pop() {
        let vs = match e {
            Expr::VectorSelector(vs) => Some(vs),
            Expr::MatrixSelector(ms) => Some(&ms.vs),
            _ => None,
        };
        if let Some(vs) = vs {
            selectors += 1;
            let name = vs.name.as_deref().unwrap_or("?");
            let m = &vs.matchers.matchers;
            assert!(vs.matchers.or_matchers.is_empty(), "{what}: `or` matchers");
            let has = |label: &str, ok: &dyn Fn(&MatchOp, &str) -> bool| {
                m.iter().any(|x| x.name == label && ok(&x.op, &x.value))
            };
            // kube-state-metrics' series (the StorageClass of a PersistentVolume) are another
            // job's.
            let (job, value) = if name.starts_with("kube_") {
                expected.kube_state_metrics_job
            } else {
                expected.job
            };
            if !has(job, &|op, v| matches!(op, MatchOp::Equal) && v == value) {
                problem(format!("{name} without {job}=\"{value}\""));
            }
            if let Some((label, value)) = expected.cluster_selector
                && !has(label, &|op, v| {
                    matches!(op, MatchOp::NotEqual) && v == value
                })
            {
                problem(format!("{name} without {label}!=\"{value}\""));
            }
            if panel
                && !has(expected.cluster, &|op, v| {
                    matches!(op, MatchOp::Re(_)) && v == CLUSTERS
                })
            {
                problem(format!("{name} without {}=~\"$cluster\"", expected.cluster));
            }
        }
        let keeps = |labels: &promql_parser::label::Labels| {
            labels.labels.iter().any(|l| l == expected.cluster)
        };
        match e {
            Expr::Aggregate(a) => {
                let op = a.op.to_string();
                match &a.modifier {
                    Some(LabelModifier::Include(l)) if !keeps(l) => {
                        problem(format!("{op} by ({l}) drops {}", expected.cluster))
                    }
                    Some(LabelModifier::Exclude(l)) if keeps(l) => {
                        problem(format!("{op} without ({l}) drops {}", expected.cluster))
                    }
                    // topk and bottomk keep every label; a count of everything selected is a
                    // total (the overview's stat panels).
                    None if !["topk", "bottomk", "count"].contains(&op.as_str()) => {
                        problem(format!("{op} without a grouping"))
                    }
                    _ => {}
                }
                stack.push(&a.expr);
                stack.extend(a.param.as_deref());
            }
            Expr::Binary(b) => {
                match b.modifier.as_ref().and_then(|m| m.matching.as_ref()) {
                    Some(LabelModifier::Include(l)) if !keeps(l) => {
                        problem(format!("on ({l}) without {}", expected.cluster))
                    }
                    Some(LabelModifier::Exclude(l)) if keeps(l) => {
                        problem(format!("ignoring ({l}) drops {}", expected.cluster))
                    }
                    _ => {}
                }
                stack.push(&b.lhs);
                stack.push(&b.rhs);
            }
            Expr::Paren(p) => stack.push(&p.expr),
            Expr::Unary(u) => stack.push(&u.expr),
            Expr::Subquery(s) => stack.push(&s.expr),
            Expr::Call(c) => stack.extend(c.args.args.iter().map(|a| a.as_ref())),
            _ => {}
        }
    }
    if selectors == 0 && !expr.contains("vector(") {
        problem("no selector".into());
    }
    problems
}

/// Every query of a rendering: (where, expression, whether it is a panel's).
fn queries(rendered: &BTreeMap<String, Value>) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    let rules = &rendered["deploy/prometheus/rules.yml"];
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let name = rule["alert"].as_str().or(rule["record"].as_str()).unwrap();
            out.push((
                name.to_owned(),
                rule["expr"].as_str().unwrap().to_owned(),
                false,
            ));
        }
    }
    for (path, d) in rendered.iter().filter(|(p, _)| p.starts_with("grafana/")) {
        let mut panels: Vec<&Value> = Vec::new();
        let mut todo: Vec<&Value> = d["panels"].as_array().unwrap().iter().collect();
        while let Some(p) = todo.pop() {
            todo.extend(p["panels"].as_array().into_iter().flatten());
            panels.push(p);
        }
        for p in panels {
            for t in p["targets"].as_array().into_iter().flatten() {
                let what = format!("{path}: {} {}", p["title"], t["refId"]);
                out.push((what, substitute(t["expr"].as_str().unwrap()), true));
            }
        }
        for a in d["annotations"]["list"].as_array().unwrap() {
            let what = format!("{path}: annotation {}", a["name"]);
            out.push((what, substitute(a["expr"].as_str().unwrap()), true));
        }
        for v in d["templating"]["list"].as_array().unwrap() {
            let Some(q) = v["query"]["query"].as_str() else {
                continue;
            };
            // label_values(SELECTOR, LABEL): the selector is a query of its own; the cluster
            // variable's own selector cannot match the cluster variable.
            let selector = q
                .strip_prefix("label_values(")
                .and_then(|s| s.rsplit_once(',').map(|(s, _)| s))
                .unwrap_or_else(|| panic!("{path}: variable query {q}"));
            let what = format!("{path}: variable {}", v["name"]);
            out.push((what, substitute(selector), v["name"] != "cluster"));
        }
    }
    out
}

fn every_selector_carries_the_job_and_cluster_selectors_and_every_grouping_the_cluster() {
    if !jsonnet_ready() {
        return;
    }
    for (config, expected) in [("{}", DEFAULT_EXPECTED), (OTHER, OTHER_EXPECTED)] {
        let rendered = render(config);
        let all = queries(&rendered);
        assert!(all.len() > 60, "only {} queries", all.len());
        let problems: Vec<String> = all
            .iter()
            .flat_map(|(what, expr, panel)| query_problems(what, expr, &expected, *panel))
            .collect();
        assert!(
            problems.is_empty(),
            "config {config}:\n{}",
            problems.join("\n")
        );
        // The PrometheusRule carries the same rules.
        assert_eq!(
            rendered["deploy/kubernetes/prometheusrule.yaml"]["spec"],
            rendered["deploy/prometheus/rules.yml"]
        );
    }
}

/// `$cluster` with "All": the variable offers every cluster of the job and cluster selectors,
/// several at once or "All", which is `.*` and so also matches series without the label (a
/// single cluster's Prometheus); panel queries match it with `=~`.
fn the_cluster_variable_offers_all() {
    if !jsonnet_ready() {
        return;
    }
    let rendered = render(OTHER);
    for (path, d) in rendered.iter().filter(|(p, _)| p.starts_with("grafana/")) {
        let vars = d["templating"]["list"].as_array().unwrap();
        if path == RUNBOOK_DASHBOARD {
            // No queries: its variables are the alert's labels, set by the runbook_url.
            assert!(vars.iter().all(|v| v["type"] == "textbox"), "{path}");
            continue;
        }
        let cluster = vars
            .iter()
            .find(|v| v["name"] == "cluster")
            .unwrap_or_else(|| panic!("{path}: no cluster variable"));
        assert_eq!(
            cluster["query"]["query"],
            r#"label_values(diskprobe_build_info{job="storage-probe", k8s_cluster!=""}, k8s_cluster)"#,
            "{path}"
        );
        assert_eq!(cluster["includeAll"], true, "{path}");
        assert_eq!(cluster["multi"], true, "{path}");
        assert_eq!(cluster["allValue"], ".*", "{path}");
        let all = regex::Regex::new(&format!("^(?:{})$", cluster["allValue"].as_str().unwrap()));
        assert!(all.unwrap().is_match(""), "All matches a missing label");
        // Comes before every variable that depends on it.
        let position = |name: &str| vars.iter().position(|v| v["name"] == name);
        assert!(position("cluster") < position("instance"), "{path}");
    }
}

/// The runbook dashboard's path among the rendered files.
const RUNBOOK_DASHBOARD: &str = "grafana/diskprobe-runbook.json";

/// The alert rules of rendered files.
fn alert_rules(rendered: &BTreeMap<String, Value>) -> Vec<&Value> {
    rendered["deploy/prometheus/rules.yml"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter(|r| r["alert"].is_string())
        .collect()
}

/// An alert link as the mixin renders it: the URL up to its first template action, and the
/// (label, variable) pairs of its `{{ with $labels.L }}&var-V={{ . | urlquery }}{{ end }}`s;
/// anything else in it fails.
fn link(url: &str) -> (String, Vec<(String, String)>) {
    let var = regex::Regex::new(
        r"\{\{ with \$labels\.([a-z0-9_]+) \}\}&var-([a-z_]+)=\{\{ \. \| urlquery \}\}\{\{ end \}\}",
    )
    .unwrap();
    let fixed = url.find("{{").map_or(url, |i| &url[..i]);
    let rest = &url[fixed.len()..];
    assert_eq!(var.replace_all(rest, ""), "", "{url}: more than variables");
    let vars = var
        .captures_iter(rest)
        .map(|c| (c[1].to_owned(), c[2].to_owned()))
        .collect();
    (fixed.to_owned(), vars)
}

/// The dashboard uid and the fixed query parameters of a link's fixed part after `base`.
fn dashboard_and_params(fixed: &str, base: &str) -> (String, BTreeMap<String, String>) {
    let path = fixed
        .strip_prefix(base)
        .unwrap_or_else(|| panic!("{fixed}: not under {base:?}"));
    let (path, query) = path.split_once('?').expect("query parameters");
    let uid = path.strip_prefix("/d/").expect("/d/uid");
    let params = query
        .split('&')
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("key=value");
            (k.to_owned(), v.to_owned())
        })
        .collect();
    (uid.to_owned(), params)
}

/// The `$name`s a text names, of the names in `known`.
fn variables_named<'a>(text: &str, known: &[&'a str]) -> Vec<&'a str> {
    let re = regex::Regex::new(r"\$([a-z_]+)").unwrap();
    let named: std::collections::BTreeSet<String> =
        re.captures_iter(text).map(|c| c[1].to_owned()).collect();
    known
        .iter()
        .copied()
        .filter(|k| named.contains(*k))
        .collect()
}

/// With `grafanaURL`, every alert's `dashboard_url` opens a dashboard of the mixin (its uid, its
/// panel, variables it has, each from the label of its name or the cluster label) and its
/// `runbook_url` the runbook dashboard's panel of its section, setting every variable the
/// section names. Without it, both are paths on the Grafana host; with `runbookURLBase`, the
/// runbook_url is the alert's section of the served docs/runbook.md.
fn every_alert_links_its_dashboard_and_its_runbook_section() {
    if !jsonnet_ready() {
        return;
    }
    let base = "https://grafana.test/sub";
    let rendered = render_only(
        &format!("{{grafanaURL: '{base}', clusterLabel: 'k8s_cluster'}}"),
        &["deploy/prometheus/rules.yml", "grafana/"],
    );
    let dashboards: BTreeMap<&str, &Value> = rendered
        .iter()
        .filter(|(p, _)| p.starts_with("grafana/"))
        .map(|(_, d)| (d["uid"].as_str().unwrap(), d))
        .collect();
    let variables = |d: &Value| -> Vec<String> {
        d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let panel = |d: &Value, id: &str| -> Option<Value> {
        let id: u64 = id.parse().ok()?;
        d["panels"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| std::iter::once(p).chain(p["panels"].as_array().into_iter().flatten()))
            .find(|p| p["id"] == id)
            .cloned()
    };
    let runbook_uid = rendered[RUNBOOK_DASHBOARD]["uid"].as_str().unwrap();
    let runbook_vars = variables(&rendered[RUNBOOK_DASHBOARD]);
    let runbook_known: Vec<&str> = runbook_vars.iter().map(String::as_str).collect();
    let alerts = alert_rules(&rendered);
    assert!(alerts.len() >= 17, "{}", alerts.len());
    for rule in &alerts {
        let alert = rule["alert"].as_str().unwrap();
        for (annotation, is_runbook) in [("dashboard_url", false), ("runbook_url", true)] {
            let url = rule["annotations"][annotation]
                .as_str()
                .unwrap_or_else(|| panic!("{alert}: no {annotation}"));
            let (fixed, vars) = link(url);
            let (uid, params) = dashboard_and_params(&fixed, base);
            let d = dashboards
                .get(uid.as_str())
                .unwrap_or_else(|| panic!("{alert}: {annotation} names dashboard {uid}"));
            assert_eq!(
                is_runbook,
                uid == runbook_uid,
                "{alert}: {annotation} {url}"
            );
            let names = variables(d);
            for (label, var) in &vars {
                assert!(names.contains(var), "{alert}: {uid} has no variable {var}");
                let expected = if var == "cluster" { "k8s_cluster" } else { var };
                assert_eq!(label, expected, "{alert}: var-{var} from $labels.{label}");
            }
            if let Some(id) = params.get("viewPanel") {
                let p = panel(d, id).unwrap_or_else(|| panic!("{alert}: {uid} has no panel {id}"));
                if is_runbook {
                    assert_eq!(p["title"], alert, "{alert}: runbook panel {id}");
                    let content = p["options"]["content"].as_str().unwrap();
                    assert!(content.starts_with(&format!("## {alert}\n")), "{alert}");
                    for v in variables_named(content, &runbook_known) {
                        assert!(
                            vars.iter().any(|(_, var)| var == v),
                            "{alert}: its section names ${v}, its runbook_url does not set it"
                        );
                    }
                }
            } else {
                assert!(!is_runbook, "{alert}: runbook_url without its panel");
            }
            if !is_runbook {
                assert!(
                    vars.iter().any(|(_, v)| v == "cluster"),
                    "{alert}: {annotation} leaves the cluster unset"
                );
            }
        }
    }
    // The default: the same links as paths on the Grafana host, no placeholder host.
    for rule in alert_rules(&render("{}")) {
        let alert = rule["alert"].as_str().unwrap();
        for annotation in ["dashboard_url", "runbook_url"] {
            let url = rule["annotations"][annotation].as_str().unwrap_or("");
            assert!(
                url.starts_with("/d/diskprobe-") && !url.contains("://"),
                "{alert}: {annotation} {url:?}"
            );
        }
    }
    // With runbookURLBase: the alert's section of the served runbook.
    let runbook = std::fs::read_to_string(common::repo_root().join("docs/runbook.md")).unwrap();
    for rule in alert_rules(&render(OTHER)) {
        let alert = rule["alert"].as_str().unwrap();
        let url = rule["annotations"]["runbook_url"].as_str().unwrap_or("");
        let anchor = url
            .strip_prefix("https://git.test/ops/diskprobe/blob/main/docs/runbook.md#")
            .unwrap_or_else(|| panic!("{alert}: runbook_url {url:?}"));
        // GitHub's anchor of a heading: lower case (alert names are letters only).
        assert_eq!(anchor, alert.to_lowercase());
        assert!(runbook.contains(&format!("\n## {alert}\n")), "{alert}");
    }
}

/// The section of `alert` in a runbook, from its heading to the next.
fn section<'a>(runbook: &'a str, alert: &str) -> &'a str {
    let start = runbook
        .find(&format!("\n## {alert}\n"))
        .unwrap_or_else(|| panic!("no runbook section for {alert}"))
        + 1;
    let rest = &runbook[start..];
    &rest[..rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3)]
}

/// A Prometheus duration (`1h`, `2h5m`, `1d`, `0s`) in seconds.
fn seconds(d: &str) -> u64 {
    let re = regex::Regex::new(r"([0-9]+)([smhd])").unwrap();
    assert_eq!(re.replace_all(d, ""), "", "not a duration: {d:?}");
    re.captures_iter(d)
        .map(|c| {
            c[1].parse::<u64>().unwrap()
                * match &c[2] {
                    "s" => 1,
                    "m" => 60,
                    "h" => 3600,
                    _ => 86400,
                }
        })
        .sum()
}

/// Every runbook section (docs/runbook.md against deploy/prometheus/rules.yml) says its first
/// action in its first three lines, and has an `amtool silence add` line for its alert whose
/// duration is longer than the alert's `keep_firing_for` (by the repair it names) and says so,
/// matching labels the runbook dashboard has as variables.
fn every_runbook_section_opens_with_its_first_action_and_silences_past_keep_firing_for() {
    let root = common::repo_root();
    let runbook = std::fs::read_to_string(root.join("docs/runbook.md")).unwrap();
    let rules: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(root.join("deploy/prometheus/rules.yml")).unwrap(),
    )
    .unwrap();
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(RUNBOOK_DASHBOARD)).unwrap())
            .unwrap();
    let known: Vec<String> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_owned())
        .collect();
    let amtool = regex::Regex::new(
        r#"(?m)^amtool silence add --duration=([0-9smhd]+) --comment="[^"]+" alertname=([A-Za-z]+)((?: [a-z_]+="\$[a-z_]+")+)$"#,
    )
    .unwrap();
    let mut alerts = 0;
    let mut kept = 0;
    for rule in rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
    {
        let Some(alert) = rule["alert"].as_str() else {
            continue;
        };
        alerts += 1;
        let section = section(&runbook, alert);
        assert!(
            section
                .lines()
                .skip(1)
                .take(3)
                .any(|l| l.contains("**First**: ")),
            "{alert}: no first action in its first three lines"
        );
        let silences: Vec<_> = amtool.captures_iter(section).collect();
        assert_eq!(silences.len(), 1, "{alert}: one amtool silence line");
        let s = &silences[0];
        assert_eq!(&s[2], alert, "{alert}: its silence's alertname");
        for m in s[3].split_whitespace() {
            let (label, var) = m.split_once('=').unwrap();
            assert_eq!(var, format!("\"${label}\""), "{alert}: {m}");
            assert!(
                known.iter().any(|k| k == label),
                "{alert}: no variable {label}"
            );
        }
        let keep = rule["keep_firing_for"].as_str().map_or(0, seconds);
        let duration = seconds(&s[1]);
        if keep > 0 {
            kept += 1;
            let said = format!(
                "keep_firing_for ({})",
                rule["keep_firing_for"].as_str().unwrap()
            );
            assert!(
                duration > keep && section.contains(&said),
                "{alert}: a silence of {} against keep_firing_for {keep} s, or no {said:?}",
                &s[1]
            );
        }
    }
    assert!(
        alerts >= 17 && kept >= 5,
        "{alerts} alerts, {kept} with keep_firing_for"
    );
}

/// What jsonnet prints for `expr` (jsonnet code, in which `MIXIN` is the mixin's path), as a
/// string when `string` (`-S`), else as JSON.
fn evaluate(expr: &str, string: bool) -> Vec<u8> {
    let mixin = common::repo_root().join("deploy/mixin/mixin.libsonnet");
    let out = Command::new("jsonnet")
        .args(string.then_some("-S"))
        .arg("-e")
        .arg(expr.replace("MIXIN", &mixin.display().to_string()))
        .output()
        .expect("run jsonnet");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The mixin's `_config` with `overrides` (jsonnet code), as a value.
fn config(overrides: &str) -> Value {
    let expr = format!("((import 'MIXIN') + {{ _config+:: {overrides} }})._config");
    serde_json::from_slice(&evaluate(&expr, false)).unwrap()
}

/// What docs/rules-design.md says of the thresholds: a `_config` key and a sentence with `{}`
/// where its value stands (as %g; whitespace in the document counts as one space).
const DESIGN_FIGURES: &[(&str, &str)] = &[
    ("cohortMinSize", "A cohort needs {} disks at like load"),
    ("peerMADFloor", "(the MAD is at least {};"),
    ("peerScore", "the limit is {}, [below]"),
    (
        "peerRatio",
        "the disk's median ratio is at least {} (steady",
    ),
    (
        "peerIntermittentRatio",
        "or its 80th percentile is at least {} and",
    ),
    (
        "peerIntermittentSpread",
        "and {} times its own median ratio",
    ),
    ("peerScore", "(z above {}: in a cohort"),
    (
        "peerBusyRatio",
        "over 12 hours (`diskprobe:target_disk_ios:peer_ratio_p80_12h`) of {} or more",
    ),
    ("peerFastRatio", "their median at {} or more"),
    ("peerRatio", "So `peerRatio` is {} for the median"),
    (
        "peerIntermittentRatio",
        "the 80th-percentile branch keeps {} (above",
    ),
    ("peerScore", "so `peerScore` is {}."),
    (
        "latencyRegressionRatio",
        "the median of the last runs ({}x, and",
    ),
    (
        "latencyDriftRatio",
        "the median of the last day ({}x: a drift",
    ),
    (
        "cohortMinSize",
        "Targets with a cohort of {} are left out of these alerts",
    ),
    (
        "probeFailingRuns",
        "`DiskprobeProbeFailing`: at least {} of the last 10",
    ),
    (
        "ioErrorRuns",
        "`DiskprobeIOErrors`: I/Os failed in at least {} of the last 10",
    ),
    (
        "probeStaleIntervals",
        "`DiskprobeProbeStale`: no finished run for {} of the target's",
    ),
];

/// The sentences of [`DESIGN_FIGURES`] that `doc` does not say with the values of `config`.
fn design_disagreements(doc: &str, config: &Value) -> Vec<String> {
    let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    DESIGN_FIGURES
        .iter()
        .filter_map(|(key, sentence)| {
            let v = config[*key]
                .as_f64()
                .unwrap_or_else(|| panic!("_config.{key}"));
            let said = sentence.replace("{}", &format!("{v}"));
            (!doc.contains(&said)).then(|| format!("{key}: {said:?}"))
        })
        .collect()
}

/// The runbook is rendered from `_config` (a changed threshold changes it, and the committed
/// one then differs from the rendering, which fails the first test of this file; its queries
/// select the cluster by the configured label), and
/// docs/rules-design.md states the thresholds of `_config` (tried with a copy of `_config`
/// whose `peerRatio` differs: the check finds it).
fn the_runbook_and_the_design_document_say_the_configs_thresholds() {
    if !jsonnet_ready() {
        return;
    }
    let root = common::repo_root();
    let committed = std::fs::read_to_string(root.join("docs/runbook.md")).unwrap();
    let other = render_only(
        "{peerRatio: 1.7, criticalKeepFiringFor: '2h', clusterLabel: 'k8s_cluster'}",
        &["docs/runbook.md"],
    );
    let rendered = other["docs/runbook.md"].as_str().unwrap();
    assert_ne!(
        rendered, committed,
        "a changed peerRatio leaves the runbook as it is"
    );
    // Its queries select the cluster by the configured label.
    assert!(rendered.contains("{k8s_cluster=\"$cluster\""));
    assert!(!rendered.contains("{cluster=\"$cluster\""));
    let peers = section(rendered, "DiskprobeSlowerThanPeers");
    assert!(peers.contains("at least 1.7\ntimes as slow"), "{peers}");
    assert!(
        peers.contains("its scores: typical ratio (1.7 fires)"),
        "{peers}"
    );
    assert!(
        section(rendered, "DiskprobeIOErrors").contains("--duration=4h "),
        "the silence follows keep_firing_for"
    );
    let design = std::fs::read_to_string(root.join("docs/rules-design.md")).unwrap();
    let problems = design_disagreements(&design, &config("{}"));
    assert!(
        problems.is_empty(),
        "docs/rules-design.md:\n{}",
        problems.join("\n")
    );
    let changed = design_disagreements(&design, &config("{peerRatio: 1.7}"));
    assert_eq!(changed.len(), 2, "{changed:?}");
    let changed = design_disagreements(&design, &config("{probeStaleIntervals: 4}"));
    assert_eq!(changed.len(), 1, "{changed:?}");
}

/// Every recording rule answers a question stated in one line of the mixin
/// (`rules/questions.libsonnet`; the rendering fails on a recording without one), and
/// docs/rules-design.md lists them as the mixin renders the list.
fn every_recording_states_its_question_in_the_design_document() {
    if !jsonnet_ready() {
        return;
    }
    let table =
        String::from_utf8(evaluate("(import 'MIXIN').recordingQuestionsTable", true)).unwrap();
    let records: std::collections::BTreeSet<String> = recording_names(&render("{}"));
    let listed = table.lines().filter(|l| l.starts_with("| `")).count();
    assert_eq!(listed, records.len(), "{table}");
    for r in &records {
        assert!(table.contains(&format!("| `{r}` | ")), "{r} not listed");
    }
    let design = std::fs::read_to_string(common::repo_root().join("docs/rules-design.md")).unwrap();
    assert!(
        design.contains(table.trim()),
        "docs/rules-design.md: the list of recordings differs from the mixin's:\n{table}"
    );
}

/// The names of the recording rules of rendered files.
fn recording_names(rendered: &BTreeMap<String, Value>) -> std::collections::BTreeSet<String> {
    rendered["deploy/prometheus/rules.yml"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter_map(|r| r["record"].as_str().map(str::to_owned))
        .collect()
}

/// The selector check finds what it is for: a selector without the job, a grouping without the
/// cluster, a panel query without the cluster variable.
fn the_selector_check_finds_missing_selectors_and_groupings() {
    let e = &OTHER_EXPECTED;
    let good = r#"sum by (k8s_cluster, job) (rate(x{job="storage-probe", k8s_cluster!=""}[5m]))"#;
    assert_eq!(query_problems("good", good, e, false), Vec::<String>::new());
    for (expr, found) in [
        (
            r#"rate(x{k8s_cluster!=""}[5m])"#,
            r#"x without job="storage-probe""#,
        ),
        (
            r#"up{job="storage-probe"} == 0"#,
            r#"up without k8s_cluster!="""#,
        ),
        (
            r#"sum by (job) (x{job="storage-probe", k8s_cluster!=""})"#,
            "sum by (job) drops k8s_cluster",
        ),
        (
            r#"sum without (k8s_cluster) (x{job="storage-probe", k8s_cluster!=""})"#,
            "sum without (k8s_cluster) drops k8s_cluster",
        ),
        (
            r#"quantile(0.5, x{job="storage-probe", k8s_cluster!=""})"#,
            "quantile without a grouping",
        ),
        (
            r#"a{job="storage-probe", k8s_cluster!=""} and on (job) b{job="storage-probe", k8s_cluster!=""}"#,
            "on (job) without k8s_cluster",
        ),
        (
            r#"histogram_quantile(0.5, rate(y{job="other", k8s_cluster!=""}[5m]))"#,
            r#"y without job="storage-probe""#,
        ),
    ] {
        let p = query_problems("bad", expr, e, false).join("\n");
        assert!(p.contains(found), "{expr}: {found:?} not in {p:?}");
    }
    let panel = substitute(r#"x{job="storage-probe", k8s_cluster!="", instance=~"$instance"}"#);
    let p = query_problems("panel", &panel, e, true).join("\n");
    assert!(p.contains(r#"x without k8s_cluster=~"$cluster""#), "{p}");
    let panel = substitute(r#"x{job="storage-probe", k8s_cluster!="", k8s_cluster=~"$cluster"}"#);
    assert!(query_problems("panel", &panel, e, true).is_empty());
}

/// The threshold lines of the target dashboard's "why it fired" row follow the configuration:
/// each panel draws the values of its alert's `_config` keys, changed where they are changed.
fn the_why_it_fired_row_draws_the_configs_thresholds() {
    if !jsonnet_ready() {
        return;
    }
    // Panel title's start -> the keys whose values it draws.
    let expected: [(&str, &[&str]); 7] = [
        (
            "DiskprobeLatencyRegression",
            &["latencyRegressionRatio", "latencyDriftRatio"],
        ),
        ("DiskprobeIOPSDrop", &["iopsDropRatio"]),
        ("DiskprobeThroughputDrop", &["throughputDropRatio"]),
        (
            "DiskprobeSlowerThanPeers: ratio",
            &["peerRatio", "peerIntermittentRatio"],
        ),
        ("DiskprobeSlowerThanPeers: peer score", &["peerScore"]),
        (
            "DiskprobeFarSlowerThanPeers",
            &["peerFastRatio", "peerBusyRatio"],
        ),
        ("DiskprobeNearLimit", &["headroomNearLimitShare"]),
    ];
    let lines = |rendered: &BTreeMap<String, Value>, title: &str| -> Vec<f64> {
        let d = &rendered["grafana/diskprobe-target.json"];
        let p = d["panels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["title"].as_str().unwrap_or("").starts_with(title))
            .unwrap_or_else(|| panic!("no panel {title}"));
        p["fieldConfig"]["defaults"]["thresholds"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["value"].as_f64())
            .collect()
    };
    let changed = "{latencyRegressionRatio: 3.3, latencyDriftRatio: 2.2, iopsDropRatio: 0.41, \
                   throughputDropRatio: 0.42, peerRatio: 1.7, peerIntermittentRatio: 2.1, \
                   peerScore: 2.5, peerFastRatio: 7.5, peerBusyRatio: 3.5, \
                   headroomNearLimitShare: 0.85}";
    for (overrides, what) in [("{}", "the defaults"), (changed, "changed values")] {
        let rendered = render_only(overrides, &["grafana/"]);
        let c = config(overrides);
        for (title, keys) in expected {
            let mut want: Vec<f64> = keys.iter().map(|k| c[k].as_f64().unwrap()).collect();
            want.sort_by(f64::total_cmp);
            assert_eq!(lines(&rendered, title), want, "{title} with {what}");
        }
    }
}

crate::tests! {
    the_committed_rules_and_dashboards_are_the_rendered_mixin: [JSONNET],
    the_comparison_finds_a_changed_value,
    every_selector_carries_the_job_and_cluster_selectors_and_every_grouping_the_cluster: [JSONNET],
    the_cluster_variable_offers_all: [JSONNET],
    every_alert_links_its_dashboard_and_its_runbook_section: [JSONNET],
    every_runbook_section_opens_with_its_first_action_and_silences_past_keep_firing_for,
    the_runbook_and_the_design_document_say_the_configs_thresholds: [JSONNET],
    every_recording_states_its_question_in_the_design_document: [JSONNET],
    the_why_it_fired_row_draws_the_configs_thresholds: [JSONNET],
    the_selector_check_finds_missing_selectors_and_groupings,
}
