//! A rule-test suite too large for vmalert-tool, run on a real VictoriaMetrics with vmalert's
//! replay ([`run_suite`]).
//!
//! vmalert-tool inserts a test group's input series in one remote-write request, and its storage
//! drops a request over `-maxInsertRequestSize` (32 MB), a flag vmalert-tool does not take: a
//! week of a fleet at 1-minute samples (about 6 million samples, over 100 MB) is several times
//! that. So such a suite runs here instead, test group by test group, on the same
//! VictoriaMetrics release:
//!
//! 1. a single-node `victoria-metrics` on a free loopback port (its data in the test group's
//!    directory, `-retentionPeriod=100y` as vmalert-tool sets, so that samples from 1970 are
//!    kept; `-search.disableCache`) receives the input series by remote write, in requests under
//!    the insert limit, `stale` as Prometheus' staleness marker, and makes them searchable
//!    (`/internal/force_flush`);
//! 2. `vmalert -replay.timeFrom=… -replay.timeTo=…` evaluates the suite's rule file from the
//!    first sample to the last evaluation time of the group, every group at the suite's
//!    `evaluation_interval` (as vmalert-tool evaluates every group at every step), writing the
//!    recordings and `ALERTS` back (`-disableAlertgroupLabel`, as the suites run vmalert-tool).
//!    Replay evaluates one rule group over the whole range before the next, in file order, so
//!    every group must read only groups above it (tests/rules/rule_stages.rs); each group is
//!    replayed by a vmalert of its own, and VictoriaMetrics flushes between them, so that the
//!    next group reads everything the previous one wrote;
//! 3. every `metricsql_expr_test` is an instant query at its `eval_time` with the parameters
//!    vmalert-tool sends (`nocache=1`, `latency_offset=1ms`), its result compared with the
//!    expected samples as vmalert-tool compares them (equal label sets, equal values); every
//!    `alert_rule_test` reads the firing `ALERTS` of the alert as of its `eval_time` (the last
//!    evaluation at or before it) and compares their labels: replay writes no annotations.
//!
//! What replay does not do as a running vmalert does: `keep_firing_for` (replay ends an alert at
//! the first evaluation its expression is empty: vmalert's `AlertingRule.execRange`), and
//! templates that query (none of the bundled rules' do). So for each alert with
//! `keep_firing_for`, [`keep_firing`] derives its states again from what replay wrote: replay
//! writes an `ALERTS` sample (pending or firing) at every evaluation at which the expression has
//! the alert's labels, which is the expression's truth; vmalert's evaluation
//! (`AlertingRule.exec`) turns that truth into states: pending from the first evaluation with
//! the labels, firing once pending for `for`, and a firing alert whose labels are gone stays
//! firing until `keep_firing_for` has passed since the first evaluation without them (back to
//! the labels meanwhile: firing on, as if never gone); a pending one without them ends. Those
//! `ALERTS` replace replay's.

use crate::common::engines::Engine;
use crate::common::http::{Response, http_post, http_request};
use crate::common::prometheus::urlencode;
use crate::common::victoria::free_port;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A series' labels, its name as `__name__`.
type Labels = BTreeMap<String, String>;

/// Prometheus' staleness marker (`value.StaleNaN`), which VictoriaMetrics keeps as such.
const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

/// The most samples in one remote-write request: at about 17 bytes a sample in the protocol
/// buffer, 20 MB, under VictoriaMetrics' default `-maxInsertRequestSize` (32 MB).
const SAMPLES_PER_REQUEST: usize = 1_200_000;

/// Prometheus' remote-write request (prometheus/prompb/remote.proto, types.proto), the fields
/// VictoriaMetrics reads.
#[derive(Clone, PartialEq, prost::Message)]
struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    timeseries: Vec<TimeSeries>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    samples: Vec<Sample>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Label {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Sample {
    #[prost(double, tag = "1")]
    value: f64,
    #[prost(int64, tag = "2")]
    timestamp: i64,
}

/// A selector of equality matchers (`name{a="b",...}`, or `{...}`) as its labels, the name as
/// `__name__`; `Err` with the text for anything else.
fn parse_labels(text: &str) -> Result<Labels, String> {
    let err = || format!("not a series: {text:?}");
    let text = text.trim();
    let (name, rest) = text.split_at(text.find('{').unwrap_or(text.len()));
    let mut labels = BTreeMap::new();
    if !name.is_empty() {
        labels.insert("__name__".to_owned(), name.to_owned());
    }
    if rest.is_empty() {
        return Ok(labels);
    }
    let inner = rest
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .ok_or_else(err)?;
    let mut chars = inner.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace() || *c == ',').is_some() {}
        if chars.peek().is_none() {
            return Ok(labels);
        }
        let key: String = std::iter::from_fn(|| chars.next_if(|c| *c != '=')).collect();
        if chars.next() != Some('=') || chars.next() != Some('"') {
            return Err(err());
        }
        let mut value = String::new();
        loop {
            match chars.next().ok_or_else(err)? {
                '"' => break,
                '\\' => match chars.next().ok_or_else(err)? {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                c => value.push(c),
            }
        }
        labels.insert(key.trim().to_owned(), value);
    }
}

/// The values of promtool's and vmalert-tool's series notation, one per step (`None`: no
/// sample): `v`, `v+dxN` and `v-dxN` (N + 1 values, v + d·i as vmalert-tool computes them),
/// `_` and `_xN` (1 and N steps without a sample), `stale` (the staleness marker).
fn expand(values: &str) -> Result<Vec<Option<f64>>, String> {
    let mut out = Vec::new();
    for item in values.split_whitespace() {
        let bad = || format!("cannot read {item:?} in {values:?}");
        match item {
            "stale" => out.push(Some(f64::from_bits(STALE_NAN))),
            "_" => out.push(None),
            _ if item.starts_with("_x") => {
                let n: usize = item[2..].parse().map_err(|_| bad())?;
                out.extend(std::iter::repeat_n(None, n));
            }
            _ => match item.split_once('x') {
                None => out.push(Some(item.parse().map_err(|_| bad())?)),
                Some((start_step, times)) => {
                    let times: u32 = times.parse().map_err(|_| bad())?;
                    // The sign that separates the start from the step: not one of an exponent
                    // or of the start itself.
                    let at = start_step
                        .char_indices()
                        .skip(1)
                        .filter(|&(i, c)| {
                            matches!(c, '+' | '-')
                                && !matches!(start_step.as_bytes()[i - 1], b'e' | b'E')
                        })
                        .map(|(i, _)| i)
                        .last()
                        .ok_or_else(bad)?;
                    let start: f64 = start_step[..at].parse().map_err(|_| bad())?;
                    let step: f64 = start_step[at..].parse().map_err(|_| bad())?;
                    out.extend((0..=times).map(|i| Some(start + step * f64::from(i))));
                }
            },
        }
    }
    Ok(out)
}

/// A duration of the suites' notation (`300s`, `5m`, `1h`, `1d`, `1w`) in seconds.
fn seconds(text: &str) -> Result<u64, String> {
    humantime::parse_duration(text)
        .map(|d| d.as_secs())
        .map_err(|e| format!("{text:?}: {e}"))
}

/// A running `victoria-metrics`, killed when dropped.
struct Victoria {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Victoria {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Victoria {
    fn start(dir: &Path) -> Result<Victoria, String> {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = dir.join("victoria-metrics.log");
        let child = Command::new(tool("victoria-metrics")?)
            .arg(format!("-httpListenAddr={addr}"))
            .arg(format!("-storageDataPath={}", dir.join("data").display()))
            .arg("-retentionPeriod=100y")
            .arg("-search.disableCache")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .map_err(|e| format!("start victoria-metrics: {e}"))?;
        let victoria = Victoria { child, addr };
        let healthy = || {
            std::net::TcpStream::connect(addr).is_ok()
                && http_request(addr, "GET", "/health", &[]).status == 200
        };
        crate::common::wait::wait_for_every(
            "victoria-metrics to start",
            Duration::from_secs(30),
            Duration::from_millis(100),
            healthy,
        );
        Ok(victoria)
    }

    /// Makes every sample received so far searchable.
    fn flush(&self) -> Result<(), String> {
        expect_ok(http_request(self.addr, "GET", "/internal/force_flush", &[]))
    }

    /// Writes `series` by remote write, in requests of at most [`SAMPLES_PER_REQUEST`].
    fn write(&self, series: Vec<TimeSeries>) -> Result<(), String> {
        let mut batch = WriteRequest::default();
        let mut samples = 0;
        let send = |batch: &mut WriteRequest| -> Result<(), String> {
            let body = snap::raw::Encoder::new()
                .compress_vec(&prost::Message::encode_to_vec(&*batch))
                .map_err(|e| e.to_string())?;
            batch.timeseries.clear();
            expect_ok(http_post(
                self.addr,
                "/api/v1/write",
                &[
                    ("Content-Encoding", "snappy"),
                    ("Content-Type", "application/x-protobuf"),
                    ("X-Prometheus-Remote-Write-Version", "0.1.0"),
                ],
                &body,
            ))
        };
        for s in series {
            samples += s.samples.len();
            batch.timeseries.push(s);
            if samples >= SAMPLES_PER_REQUEST {
                send(&mut batch)?;
                samples = 0;
            }
        }
        if !batch.timeseries.is_empty() {
            send(&mut batch)?;
        }
        Ok(())
    }

    /// An instant query at `time` (seconds) with vmalert-tool's parameters: the result's
    /// elements as (labels, value).
    fn query(&self, expr: &str, time: u64) -> Result<Vec<(Labels, f64)>, String> {
        let path = format!(
            "/api/v1/query?query={}&time={time}&nocache=1&latency_offset=1ms",
            urlencode(expr)
        );
        let response = http_request(self.addr, "GET", &path, &[]);
        let body: Value = serde_json::from_str(&response.body)
            .map_err(|e| format!("{expr:?} at {time}s: {e}: {}", response.body))?;
        let result = body["data"]["result"]
            .as_array()
            .ok_or_else(|| format!("{expr:?} at {time}s: {}", response.body))?;
        result
            .iter()
            .map(|e| {
                let labels = e["metric"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect();
                let value = e["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| format!("{expr:?} at {time}s: {e}"))?;
                Ok((labels, value))
            })
            .collect()
    }
}

fn expect_ok(response: Response) -> Result<(), String> {
    if (200..300).contains(&response.status) {
        Ok(())
    } else {
        Err(format!("HTTP {}: {}", response.status, response.body))
    }
}

fn tool(name: &str) -> Result<std::path::PathBuf, String> {
    Engine::VictoriaMetrics
        .tool(name)
        .ok_or_else(|| format!("{name} is not installed"))
}

/// The rule groups of the suite's rule files, in order.
fn rule_groups(suite: &Value) -> Result<Vec<serde_yaml_ng::Value>, String> {
    let mut groups = Vec::new();
    for file in suite["rule_files"].as_array().ok_or("no rule_files")? {
        let path = file.as_str().ok_or("a rule file is not a string")?;
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        let doc: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
        groups.extend(doc["groups"].as_sequence().ok_or("no groups")?.clone());
    }
    Ok(groups)
}

/// The suite's rule groups as one file each, every group at `every` seconds, in order: what
/// vmalert replays one after the other.
fn group_files(suite: &Value, dir: &Path, every: u64) -> Result<Vec<std::path::PathBuf>, String> {
    let mut files = Vec::new();
    for mut group in rule_groups(suite)? {
        group["interval"] = format!("{every}s").into();
        let mut one = serde_yaml_ng::Mapping::new();
        one.insert("groups".into(), vec![group].into());
        let out = dir.join(format!("group-{:02}.yml", files.len()));
        std::fs::write(&out, serde_yaml_ng::to_string(&one).unwrap()).unwrap();
        files.push(out);
    }
    Ok(files)
}

/// The alerts of the suite's rule files that have a `keep_firing_for`: name, `for` and
/// `keep_firing_for` in seconds.
fn kept_alerts(suite: &Value) -> Result<Vec<(String, u64, u64)>, String> {
    let mut kept = Vec::new();
    for rule in rule_groups(suite)?
        .iter()
        .flat_map(|g| g["rules"].as_sequence().into_iter().flatten())
    {
        let (Some(name), Some(keep)) = (rule["alert"].as_str(), rule["keep_firing_for"].as_str())
        else {
            continue;
        };
        let pending = rule["for"].as_str().map(seconds).transpose()?.unwrap_or(0);
        kept.push((name.to_owned(), pending, seconds(keep)?));
    }
    Ok(kept)
}

/// The states of one alert at each evaluation `0, step, ..., to` (seconds) as vmalert's
/// evaluation gives them (`AlertingRule.exec`), from the evaluations at which its expression
/// had its labels (`truth`, seconds): each evaluation at which it is pending or firing, and
/// whether firing.
fn states(
    truth: &std::collections::BTreeSet<u64>,
    pending_for: u64,
    keep: u64,
    step: u64,
    to: u64,
) -> Vec<(u64, bool)> {
    let mut out = Vec::new();
    // (active since, firing, kept since the first evaluation without the labels)
    let mut state: Option<(u64, bool, Option<u64>)> = None;
    let mut t = 0;
    while t <= to {
        state = match (state, truth.contains(&t)) {
            (None, true) => Some((t, false, None)),
            (Some((since, firing, _)), true) => Some((since, firing, None)),
            (Some((_, false, _)), false) | (None, false) => None,
            (Some((since, true, kept)), false) => {
                let kept = kept.unwrap_or(t);
                (t - kept < keep).then_some((since, true, Some(kept)))
            }
        };
        if let Some((since, firing, kept)) = state {
            let firing = firing || t - since >= pending_for;
            state = Some((since, firing, kept));
            out.push((t, firing));
        }
        t += step;
    }
    out
}

/// Replaces replay's `ALERTS` of the alert `name` by the states a running vmalert gives it
/// ([`states`], the module's doc).
fn keep_firing(
    victoria: &Victoria,
    name: &str,
    pending_for: u64,
    keep: u64,
    step: u64,
    to: u64,
) -> Result<(), String> {
    let selector = format!("ALERTS{{alertname={name:?}}}");
    let path = format!(
        "/api/v1/export?match[]={}&start=0&end={to}",
        urlencode(&selector)
    );
    let response = http_request(victoria.addr, "GET", &path, &[]);
    if response.status != 200 {
        return Err(format!("export {selector}: {}", response.body));
    }
    let mut truth: BTreeMap<Labels, std::collections::BTreeSet<u64>> = BTreeMap::new();
    for line in response.body.lines().filter(|l| !l.trim().is_empty()) {
        let series: Value = serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
        let mut labels: Labels = series["metric"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect();
        labels.remove("alertstate");
        let at = truth.entry(labels).or_default();
        for ms in series["timestamps"].as_array().into_iter().flatten() {
            at.insert(ms.as_u64().unwrap_or_default() / 1000);
        }
    }
    if truth.is_empty() {
        return Ok(());
    }
    let deleted = http_request(
        victoria.addr,
        "GET",
        &format!(
            "/api/v1/admin/tsdb/delete_series?match[]={}",
            urlencode(&selector)
        ),
        &[],
    );
    expect_ok(deleted)?;
    let mut series = Vec::new();
    for (labels, truth) in &truth {
        for firing in [false, true] {
            let samples: Vec<Sample> = states(truth, pending_for, keep, step, to)
                .into_iter()
                .filter(|&(_, f)| f == firing)
                .map(|(t, _)| Sample {
                    value: 1.0,
                    timestamp: (t * 1000) as i64,
                })
                .collect();
            if samples.is_empty() {
                continue;
            }
            let mut labels: Vec<Label> = labels
                .iter()
                .map(|(name, value)| Label {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect();
            labels.push(Label {
                name: "alertstate".to_owned(),
                value: if firing { "firing" } else { "pending" }.to_owned(),
            });
            series.push(TimeSeries { labels, samples });
        }
    }
    victoria.write(series)?;
    victoria.flush()
}

/// RFC 3339 of `seconds` after the epoch, as vmalert's `-replay.time*` read it.
fn rfc3339(seconds: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(seconds as i64).unwrap();
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// Replays the rule group in `file` over [`from`, `to`] seconds against `victoria`.
fn replay(victoria: &Victoria, file: &Path, from: u64, to: u64) -> Result<(), String> {
    let url = format!("http://{}", victoria.addr);
    let out = Command::new(tool("vmalert")?)
        .arg(format!("-rule={}", file.display()))
        .arg(format!("-datasource.url={url}"))
        .arg(format!("-remoteWrite.url={url}"))
        .arg(format!("-replay.timeFrom={}", rfc3339(from)))
        .arg(format!("-replay.timeTo={}", rfc3339(to)))
        // One range query per rule for the whole range (a week at 5-minute steps is 2,017
        // points; VictoriaMetrics answers up to 30,000 per series).
        .arg("-replay.maxDatapointsPerQuery=25000")
        .arg("-replay.rulesDelay=0s")
        .arg("-replay.disableProgressBar")
        .arg("-disableAlertgroupLabel")
        .arg("-notifier.blackhole")
        .arg(format!("-httpListenAddr=127.0.0.1:{}", free_port()))
        .arg("-loggerLevel=ERROR")
        .output()
        .map_err(|e| format!("vmalert: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "vmalert replay of {} failed ({}):\n{}{}",
            file.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    victoria.flush()
}

/// The suite's value as vmalert-tool reads it back (`"1e3"` and numbers alike).
fn number(v: &Value) -> f64 {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// Runs one test group of a suite on a fresh VictoriaMetrics in `dir`: the failed checks.
fn run_group(group: &Value, suite: &Value, dir: &Path) -> Result<Vec<String>, String> {
    let step = seconds(suite["evaluation_interval"].as_str().unwrap_or("1m"))?;
    let interval = seconds(group["interval"].as_str().unwrap_or("1m"))?;
    let mut series = Vec::new();
    for input in group["input_series"].as_array().ok_or("no input_series")? {
        let labels = parse_labels(input["series"].as_str().unwrap_or_default())?;
        let samples = expand(input["values"].as_str().unwrap_or_default())?
            .into_iter()
            .enumerate()
            .filter_map(|(i, v)| {
                v.map(|value| Sample {
                    value,
                    timestamp: (i as u64 * interval * 1000) as i64,
                })
            })
            .collect();
        let labels = labels
            .into_iter()
            .map(|(name, value)| Label { name, value })
            .collect();
        series.push(TimeSeries { labels, samples });
    }
    let alert_tests = group["alert_rule_test"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let expr_tests = group["metricsql_expr_test"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let eval_time = |t: &Value| seconds(t["eval_time"].as_str().unwrap_or("0s"));
    let mut last = 0;
    for t in alert_tests.iter().chain(&expr_tests) {
        last = last.max(eval_time(t)?);
    }
    let victoria = Victoria::start(dir)?;
    victoria.write(series)?;
    victoria.flush()?;
    // vmalert evaluates every `step` from the epoch; the range ends at the last check.
    let to = last.div_ceil(step).max(1) * step;
    for file in group_files(suite, dir, step)? {
        replay(&victoria, &file, 0, to)?;
    }
    for (name, pending_for, keep) in kept_alerts(suite)? {
        keep_firing(&victoria, &name, pending_for, keep, step, to)?;
    }
    let mut failures = Vec::new();
    for t in &expr_tests {
        let expr = t["expr"].as_str().unwrap_or_default();
        let at = eval_time(t)?;
        let mut want = Vec::new();
        for s in t["exp_samples"].as_array().into_iter().flatten() {
            want.push((
                parse_labels(s["labels"].as_str().unwrap_or("{}"))?,
                number(&s["value"]),
            ));
        }
        let mut got = victoria.query(expr, at)?;
        want.sort_by(|a, b| a.0.cmp(&b.0));
        got.sort_by(|a, b| a.0.cmp(&b.0));
        let equal = want.len() == got.len()
            && want
                .iter()
                .zip(&got)
                .all(|(w, g)| w.0 == g.0 && same(w.1, g.1));
        if !equal {
            failures.push(format!(
                "expr {expr:?} at {at}s:\n    expected {want:?}\n    got      {got:?}"
            ));
        }
    }
    for t in &alert_tests {
        let name = t["alertname"].as_str().unwrap_or_default();
        let at = eval_time(t)?;
        let mut want: Vec<Labels> = Vec::new();
        for a in t["exp_alerts"].as_array().into_iter().flatten() {
            let mut labels: Labels = a["exp_labels"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect();
            labels.insert("alertname".to_owned(), name.to_owned());
            want.push(labels);
        }
        let query =
            format!("last_over_time(ALERTS{{alertname={name:?}, alertstate=\"firing\"}}[{step}s])");
        let mut got: Vec<Labels> = victoria
            .query(&query, at)?
            .into_iter()
            .map(|(mut labels, _)| {
                labels.remove("alertstate");
                labels
            })
            .collect();
        want.sort();
        got.sort();
        if want != got {
            failures.push(format!(
                "alert {name} at {at}s:\n    expected {want:?}\n    got      {got:?}"
            ));
        }
    }
    Ok(failures)
}

/// Runs the suite at `path` (vmalert-tool's format, as generate.py writes it for
/// `--engine victoriametrics`) on VictoriaMetrics with vmalert's replay, each test group in a
/// directory of its own under `dir`: whether every check passed, and what failed.
pub fn run_suite(path: &Path, dir: &Path) -> (bool, String) {
    let suite: Value = match std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => return (false, format!("{}: {e}", path.display())),
    };
    let mut report = Vec::new();
    let mut ok = true;
    for (i, group) in suite["tests"].as_array().into_iter().flatten().enumerate() {
        let name = group["name"].as_str().unwrap_or("(unnamed)");
        let here = dir.join(format!("test-{i}"));
        std::fs::create_dir_all(&here).unwrap();
        let began = std::time::Instant::now();
        match run_group(group, &suite, &here) {
            Ok(failures) if failures.is_empty() => report.push(format!(
                "{name}: passed ({:.1} s)",
                began.elapsed().as_secs_f64()
            )),
            Ok(failures) => {
                ok = false;
                report.push(format!("{name}: FAILED\n{}", failures.join("\n")));
            }
            Err(e) => {
                ok = false;
                report.push(format!("{name}: FAILED: {e}"));
            }
        }
    }
    if report.is_empty() {
        return (false, format!("{}: no test groups", path.display()));
    }
    (ok, report.join("\n"))
}
