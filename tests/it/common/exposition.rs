//! The agent's metrics: text exposition parsed into samples ([`scrape`], [`wait_until`]),
//! protobuf decoded and dumped as text ([`protobuf_dump`]), `promtool check metrics`.

use crate::common::wait::poll;
use crate::common::{Agent, require, which};

/// Parses Prometheus text exposition into `(series, value)` pairs, where `series` is the sample
/// line up to the value (name and labels as written).
pub fn samples(exposition: &str) -> Vec<(String, f64)> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let value = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().ok()?,
            };
            Some((series.to_owned(), value))
        })
        .collect()
}

/// Samples of one scrape, by series (name and labels as written).
pub type Metrics = std::collections::BTreeMap<String, f64>;

/// Scrapes `/metrics` (which must answer 200) into [`Metrics`].
pub fn scrape(agent: &Agent) -> Metrics {
    let (status, body) = agent.get("/metrics");
    assert_eq!(status, 200);
    samples(&body).into_iter().collect()
}

/// [`scrape`], keeping in `slowest` the longest a scrape has taken.
pub fn scrape_timed(agent: &Agent, slowest: &mut std::time::Duration) -> Metrics {
    let asked = std::time::Instant::now();
    let m = scrape(agent);
    *slowest = (*slowest).max(asked.elapsed());
    m
}

/// Sum of every series of `name` whose labels contain all of `with`.
pub fn sum(m: &Metrics, name: &str, with: &[&str]) -> f64 {
    m.iter()
        .filter(|(k, _)| k.split('{').next() == Some(name) && with.iter().all(|w| k.contains(w)))
        .map(|(_, v)| v)
        .sum()
}

/// `diskprobe_probe_runs_total` of `target` with `result`, summed over profiles.
pub fn runs(m: &Metrics, target: &str, result: &str) -> f64 {
    sum(
        m,
        "diskprobe_probe_runs_total",
        &[
            &format!("target=\"{target}\""),
            &format!("result=\"{result}\""),
        ],
    )
}

/// Scrapes every 100 ms until `cond` holds; panics after `timeout` with the agent's log and run
/// counters.
pub fn wait_until(
    agent: &Agent,
    timeout: std::time::Duration,
    what: &str,
    cond: impl Fn(&Metrics) -> bool,
) -> Metrics {
    let every = std::time::Duration::from_millis(100);
    poll(timeout, every, || {
        let m = scrape(agent);
        if cond(&m) { Ok(m) } else { Err(m) }
    })
    .unwrap_or_else(|m| {
        panic!(
            "timed out waiting for {what}; log:\n{}\nruns:\n{}",
            agent.log.lock().unwrap(),
            m.iter()
                .filter(|(k, _)| k.starts_with("diskprobe_probe_runs_total"))
                .map(|(k, v)| format!("{k} {v}\n"))
                .collect::<String>()
        )
    })
}

/// `promtool check metrics` over `exposition` must succeed and report nothing. Skips (or fails
/// under strict mode) without promtool.
pub fn promtool_check_metrics(exposition: &str) {
    use std::io::Write;
    let Some(promtool) = which("promtool") else {
        require(false, "promtool (Debian package prometheus)");
        return;
    };
    let mut child = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .expect("stdin piped")
        .write_all(exposition.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("wait for promtool");
    let findings = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && findings.trim().is_empty(),
        "promtool check metrics reported:\n{findings}"
    );
}

/// Decodes a protobuf exposition (length-delimited `MetricFamily` messages).
pub fn decode_protobuf(
    mut body: &[u8],
) -> Vec<diskprobe_exporter::exposition::proto::MetricFamily> {
    use prost::Message;
    let mut out = Vec::new();
    while !body.is_empty() {
        out.push(
            diskprobe_exporter::exposition::proto::MetricFamily::decode_length_delimited(&mut body)
                .expect("a length-delimited MetricFamily"),
        );
    }
    out
}

/// A protobuf exposition as text for golden files, one line per family and per metric, every
/// field that is set shown with its exact value:
/// `# NAME TYPE "HELP"`, then `{labels} counter|gauge VALUE` or
/// `{labels} histogram count=N sum=S buckets=[le:cumulative ...] schema=.. zero_threshold=..
/// zero_count=.. spans=[offset:length ...] deltas=[...]`.
pub fn protobuf_dump(families: &[diskprobe_exporter::exposition::proto::MetricFamily]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for f in families {
        let _ = writeln!(out, "# {} {:?} {:?}", f.name(), f.r#type(), f.help());
        for m in &f.metric {
            let labels: Vec<String> = m
                .label
                .iter()
                .map(|l| format!("{}={:?}", l.name(), l.value()))
                .collect();
            let _ = write!(out, "{{{}}}", labels.join(","));
            if let Some(c) = &m.counter {
                let _ = write!(out, " counter {:?}", c.value());
            }
            if let Some(g) = &m.gauge {
                let _ = write!(out, " gauge {:?}", g.value());
            }
            if let Some(h) = &m.histogram {
                let buckets: Vec<String> = h
                    .bucket
                    .iter()
                    .map(|b| format!("{:?}:{}", b.upper_bound(), b.cumulative_count()))
                    .collect();
                let _ = write!(
                    out,
                    " histogram count={} sum={:?} buckets=[{}]",
                    h.sample_count(),
                    h.sample_sum(),
                    buckets.join(" ")
                );
                if h.schema.is_some() {
                    let spans: Vec<String> = h
                        .positive_span
                        .iter()
                        .map(|s| format!("{}:{}", s.offset(), s.length()))
                        .collect();
                    let _ = write!(
                        out,
                        " schema={} zero_threshold={:?} zero_count={} spans=[{}] deltas={:?}",
                        h.schema(),
                        h.zero_threshold(),
                        h.zero_count(),
                        spans.join(" "),
                        h.positive_delta
                    );
                }
            }
            out.push('\n');
        }
    }
    out
}
