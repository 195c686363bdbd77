//! The bundled Grafana dashboards as the end-to-end tests read them: each panel's queries (and
//! each variable's, and each annotation's) with Grafana's variables filled in, and the scenario
//! each panel shows data in ([`PANELS`]): the list the tests hold every panel to.

use serde_json::Value;

/// What a panel needs to show data: the target and setting the end-to-end tests give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// A target probed steadily long enough for its baselines (prometheus_e2e's `e2e`).
    Probe,
    /// A durability profile that syncs (etcd-wal).
    Sync,
    /// A disk with a declared limit, a node ceiling and capacity runs.
    Limited,
    /// A member of a cohort of five.
    Peer,
    /// A disk that EC2's statistics describe (cloud_stats.rs, over fixture pages).
    Cloud,
}

/// Every panel of the two dashboards, by file and title, and the scenario it shows data in. A
/// panel missing here, or listed here and gone, fails the tests that read the list.
pub const PANELS: &[(&str, &str, Scenario)] = {
    use Scenario::*;
    const O: &str = "diskprobe-overview.json";
    const T: &str = "diskprobe-target.json";
    &[
        (O, "Targets", Probe),
        (O, "Failing profiles", Probe),
        (O, "Agents down", Probe),
        (O, "Alerts firing", Probe),
        (O, "Worst latency against baseline (now)", Probe),
        (O, "Highest failure share (last hour)", Probe),
        (O, "Top 10: p99 against baseline", Probe),
        (O, "Fleet p99 of recent runs, by profile", Probe),
        (O, "Bottom 10: IOPS against baseline", Probe),
        (O, "Bottom 10: throughput against baseline", Probe),
        (O, "Slowest syncs (last run)", Sync),
        (O, "Slowest disks against their peers (last 12h)", Peer),
        (O, "Top 10: p99 against peers", Peer),
        (O, "Cohorts against their best day", Peer),
        (O, "Disks closest to their limits (now)", Limited),
        (O, "Throttled disks", Limited),
        (O, "Disks near a limit", Limited),
        (O, "Volumes most over their limits (cloud, now)", Cloud),
        (O, "Volumes throttled (cloud)", Cloud),
        (
            T,
            "DiskprobeLatencyRegression: p99 against its baseline",
            Probe,
        ),
        (T, "DiskprobeIOPSDrop: IOPS against its baseline", Probe),
        (
            T,
            "DiskprobeThroughputDrop: throughput against its baseline",
            Probe,
        ),
        (T, "DiskprobeSlowerThanPeers: ratio to its peers", Peer),
        (T, "DiskprobeSlowerThanPeers: peer score", Peer),
        (
            T,
            "DiskprobeFarSlowerThanPeers: ratio to its peers, 30m",
            Peer,
        ),
        (
            T,
            "DiskprobeNearLimit and DiskprobeThrottled: share of the limits in use",
            Limited,
        ),
        (T, "Latency heatmap: $profile", Probe),
        (T, "Latency percentiles (last run, exact)", Probe),
        (T, "p99 of recent runs and its baseline", Probe),
        (T, "Latency p50 / p99 (histogram)", Probe),
        (T, "IOPS per profile (last run)", Probe),
        (T, "Throughput per profile (last run)", Probe),
        (T, "IOPS while probing", Probe),
        (T, "Runs by result", Probe),
        (T, "Run duration (last run)", Probe),
        (T, "Profiles", Probe),
        (T, "Target", Probe),
        (T, "p99 against its cohort", Peer),
        (T, "Ratio to its peers", Peer),
        (T, "Workload against its peers", Peer),
        (T, "Sync latency percentiles (last run, exact)", Sync),
        (T, "Write and sync p99 (histogram)", Sync),
        (T, "Syncs per second while probing", Sync),
        (T, "Device IOPS", Probe),
        (T, "Device throughput", Probe),
        (T, "Device queue size", Probe),
        (T, "Device await", Probe),
        (T, "Device utilisation", Probe),
        (T, "Share of the disk limits in use", Limited),
        (T, "Gentle probe p99 against its throttled level", Limited),
        (T, "Limits of the disks", Limited),
        (T, "Throttled", Limited),
        (T, "Cloud latency against the probes'", Cloud),
        (T, "Share of the time over a limit (cloud)", Cloud),
        (T, "Cloud statistics read", Cloud),
    ]
};

/// The dashboards the list covers.
pub const FILES: [&str; 2] = ["diskprobe-overview.json", "diskprobe-target.json"];

/// The queries of one panel, dashboard variable or annotation.
pub struct PanelQueries {
    /// Dashboard file.
    pub file: &'static str,
    /// Panel title, `variable NAME` or `annotation NAME`.
    pub title: String,
    /// Whether it is a heatmap.
    pub heatmap: bool,
    /// Each query, and whether Grafana sends it as a range query.
    pub queries: Vec<(String, bool)>,
    /// The fields (labels) its table rows' links read (`${__data.fields.NAME}`).
    pub link_fields: Vec<String>,
    /// The column the links are on (a row without it has no link), or `None` for whole rows.
    pub link_on: Option<String>,
}

impl PanelQueries {
    /// What is wrong with the rows of `result` (a query's) for the links of this panel: a row
    /// that has a link (all rows, or those with the link's column) without a field the link
    /// reads.
    pub fn link_problems(&self, result: &[Value]) -> Vec<String> {
        let mut problems = Vec::new();
        for r in result {
            let labels = &r["metric"];
            if self
                .link_on
                .as_ref()
                .is_some_and(|on| labels.get(on).is_none())
            {
                continue;
            }
            for field in &self.link_fields {
                if labels.get(field).is_none() {
                    problems.push(format!(
                        "a row without the label {field} its link reads: {labels}"
                    ));
                }
            }
        }
        problems
    }

    /// The scenario of this panel in [`PANELS`]; variables and annotations are
    /// [`Scenario::Probe`]'s; `None` for a panel not listed.
    pub fn scenario(&self) -> Option<Scenario> {
        if self.title.starts_with("variable ") || self.title.starts_with("annotation ") {
            return Some(Scenario::Probe);
        }
        PANELS
            .iter()
            .find(|(f, t, _)| *f == self.file && *t == self.title)
            .map(|(_, _, s)| *s)
    }
}

/// One dashboard of `grafana/`, parsed.
pub fn dashboard(file: &str) -> Value {
    let path = super::repo_root().join("grafana").join(file);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("dashboard JSON")
}

/// Every panel of a dashboard, those inside rows included.
pub fn panels(d: &Value) -> Vec<&Value> {
    fn walk<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
        for p in v.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&d["panels"], &mut out);
    out
}

/// The links of a panel's rows: the column a link is on (an override's; `None`: the whole row)
/// and its URL.
pub fn links(panel: &Value) -> Vec<(Option<&str>, &str)> {
    fn urls(links: &Value) -> Vec<&str> {
        links
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l["url"].as_str())
            .collect()
    }
    let mut out: Vec<(Option<&str>, &str)> = urls(&panel["fieldConfig"]["defaults"]["links"])
        .into_iter()
        .map(|u| (None, u))
        .collect();
    for o in panel["fieldConfig"]["overrides"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for p in o["properties"].as_array().into_iter().flatten() {
            if p["id"] == "links" {
                let on = o["matcher"]["options"].as_str();
                out.extend(urls(&p["value"]).into_iter().map(|u| (on, u)));
            }
        }
    }
    out
}

/// The queries of each panel of `file` (panels with none are left out), of each variable and of
/// each annotation, with the dashboard's variables `vars` and Grafana's intervals substituted as
/// Grafana sends them for the last minute at a 15 s step.
pub fn panel_queries(file: &'static str, vars: &[(&str, String)]) -> Vec<PanelQueries> {
    let d = dashboard(file);
    let mut vars: Vec<(&str, String)> = vars.to_vec();
    vars.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
    let substitute = |e: &str| {
        let mut e = e
            .replace("$__rate_interval", "15s")
            .replace("$__interval", "15s")
            .replace("$__range", "1m");
        for (k, v) in &vars {
            e = e.replace(&format!("${k}"), v);
        }
        e
    };
    let field = regex::Regex::new(r"\$\{__data\.fields\.([a-z_]+)\}").unwrap();
    let mut out = Vec::new();
    for p in panels(&d) {
        let queries: Vec<(String, bool)> = p["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let instant = t["instant"] == true && t["range"] != true;
                Some((substitute(t["expr"].as_str()?), !instant))
            })
            .collect();
        let links = links(p);
        let link_on = links.first().and_then(|(on, _)| on.map(str::to_owned));
        let link_fields = links
            .iter()
            .flat_map(|(_, u)| field.captures_iter(u).map(|c| c[1].to_owned()))
            .collect();
        if !queries.is_empty() {
            out.push(PanelQueries {
                file,
                title: p["title"].as_str().unwrap_or("").to_owned(),
                heatmap: p["type"] == "heatmap",
                queries,
                link_fields,
                link_on,
            });
        }
    }
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        let Some(def) = v["query"]["query"].as_str() else {
            continue;
        };
        // label_values(SELECTOR, LABEL) has data when `count by (LABEL) (SELECTOR)` has.
        let inner = def
            .strip_prefix("label_values(")
            .and_then(|s| s.strip_suffix(')'))
            .expect("label_values query");
        let (selector, label) = inner.rsplit_once(',').unwrap();
        out.push(PanelQueries {
            file,
            title: format!("variable {}", v["name"].as_str().unwrap_or("")),
            heatmap: false,
            queries: vec![(
                substitute(&format!(
                    "count by ({}) ({})",
                    label.trim(),
                    selector.trim()
                )),
                false,
            )],
            link_fields: Vec::new(),
            link_on: None,
        });
    }
    out
}

/// The annotations of `file`: name and query (a range query), variables substituted as
/// [`panel_queries`] does.
pub fn annotation_queries(file: &str, vars: &[(&str, String)]) -> Vec<(String, String)> {
    let d = dashboard(file);
    d["annotations"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let mut e = a["expr"].as_str().unwrap_or("").to_owned();
            for (k, v) in vars {
                e = e.replace(&format!("${k}"), v);
            }
            (a["name"].as_str().unwrap_or("").to_owned(), e)
        })
        .collect()
}

/// What is wrong with [`PANELS`] against the dashboards: panels not listed, entries without a
/// panel.
pub fn list_problems() -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen = Vec::new();
    for file in FILES {
        for p in panel_queries(file, &[]) {
            if p.title.starts_with("variable ") {
                continue;
            }
            if p.scenario().is_none() {
                problems.push(format!(
                    "{file}: panel {:?} has no scenario in common/dashboards.rs PANELS",
                    p.title
                ));
            }
            seen.push((file, p.title));
        }
    }
    for (f, t, _) in PANELS {
        if !seen.iter().any(|(sf, st)| sf == f && st == t) {
            problems.push(format!("PANELS lists {f}: {t:?}, which has no panel"));
        }
    }
    problems
}
