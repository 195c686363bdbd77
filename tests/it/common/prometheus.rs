//! A real Prometheus server for end-to-end tests, of either engine ([`Engine`]: Debian's 2.42 or
//! Prometheus 3.5 LTS): started on a free loopback port with its data in a test's temporary
//! directory, scraping the agent every second, keeping the agent's histograms as a
//! [`Histograms`] setup says, killed when dropped. [`engine_ready`] says whether a test can run
//! on an engine and prints which one it runs on. A test queries it, and lists the rules that
//! failed to evaluate ([`RuleServer::rule_problems`]), through [`RuleServer`], as it does a
//! VictoriaMetrics ([`crate::common::victoria`]).
//!
//! What differs between the engines and matters to a test: Prometheus 3 writes a classic bucket's
//! `le` as a float (`"1.0"`, `"1e-05"`, where 2.42 keeps the exposition's `"1"`, `"0.00001"`),
//! and its range selectors leave out a sample sitting on the range's left edge (2.42 includes
//! it). A test that holds on both compares `le` values as numbers and never places a sample on a
//! window's edge.

use crate::common::engines::{Engine, PROMETHEUS_ENGINES};
use crate::common::http_request;
use crate::common::rule_server::RuleServer;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running Prometheus.
pub struct Prometheus {
    child: Child,
    /// Where its HTTP API listens.
    pub addr: SocketAddr,
    engine: Engine,
    histograms: Histograms,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a Prometheus scrapes and keeps the agent's histograms: its flags and the scrape job's
/// options, which [`Prometheus::start`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Histograms {
    /// The text formats: the classic `_bucket`, `_sum` and `_count` series only.
    Classic,
    /// `--enable-feature=native-histograms`: protobuf scrapes; a histogram with native buckets
    /// (`diskprobe_io_latency_seconds`) is kept as its native part only (2.42 always; 3.5's
    /// `always_scrape_classic_histograms` is false by default), one with classic buckets only
    /// (`diskprobe_cloud_io_latency_seconds`) as classic series.
    Native,
    /// Prometheus 3 only: [`Histograms::Native`] with `convert_classic_histograms_to_nhcb: true`
    /// and `always_scrape_classic_histograms: false`: a histogram with classic buckets only
    /// arrives as a native histogram with custom buckets (NHCB), and no classic series is kept.
    Nhcb,
}

impl Histograms {
    /// Its command-line flags.
    fn flags(self) -> &'static [&'static str] {
        match self {
            Histograms::Classic => &[],
            Histograms::Native | Histograms::Nhcb => &["--enable-feature=native-histograms"],
        }
    }

    /// Its options in the scrape job (YAML lines at the job's indentation).
    fn scrape_options(self) -> &'static str {
        match self {
            Histograms::Classic | Histograms::Native => "",
            Histograms::Nhcb => {
                "    convert_classic_histograms_to_nhcb: true\n    always_scrape_classic_histograms: false\n"
            }
        }
    }
}

/// Whether `engine`'s `prometheus` (and `promtool`) are installed: otherwise the test is skipped
/// with the reason (strict: fails). Prints the engine and its version with the caller's file, so
/// that a test's output says which one it ran on.
#[track_caller]
pub fn engine_ready(engine: Engine) -> bool {
    let caller = std::panic::Location::caller().file();
    if !engine.require() {
        return false;
    }
    eprintln!("{caller}: runs on {} {}", engine.name(), engine.version());
    true
}

impl Prometheus {
    /// Starts `engine`'s Prometheus with its configuration, data and log (`prometheus.log`) in
    /// `dir`, scraping `agent` every second as job `diskprobe` and keeping histograms as
    /// `histograms` says, and waits until its API answers.
    pub fn start(
        engine: Engine,
        dir: &Path,
        agent: SocketAddr,
        histograms: Histograms,
    ) -> Prometheus {
        Self::start_with_rules(engine, dir, agent, None, histograms)
    }

    /// [`Prometheus::start`], evaluating the rule file `rules` (its text) every second.
    pub fn start_with_rules(
        engine: Engine,
        dir: &Path,
        agent: SocketAddr,
        rules: Option<&str>,
        histograms: Histograms,
    ) -> Prometheus {
        assert!(
            engine != Engine::Prometheus2 || histograms != Histograms::Nhcb,
            "Prometheus 2.42 cannot convert classic histograms to NHCB"
        );
        let rule_files = match rules {
            Some(text) => {
                std::fs::write(dir.join("rules.yml"), text).unwrap();
                "rule_files: [rules.yml]\n"
            }
            None => "",
        };
        std::fs::write(
            dir.join("prometheus.yml"),
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n{rule_files}\
                 scrape_configs:\n  - job_name: diskprobe\n{}    static_configs:\n      - targets: [\"{agent}\"]\n",
                histograms.scrape_options()
            ),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(engine.prometheus().expect("checked by the caller"))
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(histograms.flags())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let p = Prometheus {
            child,
            addr,
            engine,
            histograms,
        };
        let ready = || {
            std::net::TcpStream::connect(addr).is_ok()
                && http_request(addr, "GET", "/-/ready", &[]).status == 200
        };
        let (timeout, every) = (Duration::from_secs(30), Duration::from_millis(200));
        crate::common::wait::wait_for_every("prometheus to start", timeout, every, ready);
        p
    }

    /// GET `path` from the API as JSON; `None` when it does not answer or not in JSON.
    fn get(&self, path: &str) -> Option<Value> {
        std::net::TcpStream::connect(self.addr).ok()?;
        let r = http_request(self.addr, "GET", path, &[]);
        serde_json::from_str(&r.body).ok()
    }
}

impl RuleServer for Prometheus {
    fn name(&self) -> String {
        format!("{} {:?}", self.engine.name(), self.histograms)
    }

    fn get_json(&self, path: &str) -> Option<Value> {
        self.get(path)
    }

    fn rules_get_json(&self, path: &str) -> Option<Value> {
        self.get(path)
    }

    /// Every failed evaluation counted since it started
    /// (`prometheus_rule_evaluation_failures_total`, per group).
    fn counted_failures(&self) -> Vec<String> {
        let metrics = http_request(self.addr, "GET", "/metrics", &[]);
        assert_eq!(metrics.status, 200, "Prometheus' own /metrics");
        let mut problems = Vec::new();
        for line in metrics.body.lines() {
            if let Some(rest) = line.strip_prefix("prometheus_rule_evaluation_failures_total{") {
                let (labels, value) = rest.rsplit_once(' ').expect("a sample");
                if value.parse::<f64>().expect("a number") != 0.0 {
                    problems.push(format!("{value} failed evaluations: {{{labels}"));
                }
            }
        }
        problems
    }

    /// None: a rule's results are in the TSDB when its evaluation ends, and a scrape's when it
    /// ends.
    fn lag(&self) -> Duration {
        Duration::ZERO
    }

    /// The samples Prometheus reads to evaluate `query` now (`stats=all`'s
    /// `totalQueryableSamples`).
    fn samples_read(&self, query: &str) -> Option<f64> {
        self.get(&format!(
            "/api/v1/query?query={}&stats=all",
            urlencode(query)
        ))?["data"]["stats"]["samples"]["totalQueryableSamples"]
            .as_f64()
    }
}

/// Percent-encodes a query for a URL.
pub fn urlencode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Waits up to `timeout` for `cond`, polling every 500 ms; fails the test with `what`.
pub fn wait_for(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    crate::common::wait::wait_for_every(what, timeout, Duration::from_millis(500), cond);
}

/// The bundled rules (deploy/prometheus/rules.yml) with each `(from, to)` replaced (every `from`
/// must occur) and every `for:` and `keep_firing_for:` made 5 s: windows shortened for a test
/// that lasts minutes, not days.
pub fn shortened_rules(replacements: &[(&str, &str)]) -> String {
    let mut rules =
        std::fs::read_to_string(crate::common::repo_root().join("deploy/prometheus/rules.yml"))
            .expect("read rules.yml");
    for (from, to) in replacements {
        assert!(rules.contains(from), "rules.yml no longer has {from}");
        rules = rules.replace(from, to);
    }
    rules
        .lines()
        .map(|l| match l.find("for: ") {
            Some(i) => format!("{}for: 5s", &l[..i]),
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Fails when a module of `tests/it` starts a real Prometheus ([`Prometheus::start`],
/// [`Prometheus::start_with_rules`]) but does not name every engine of [`PROMETHEUS_ENGINES`]
/// (`Engine::Prometheus2`, `Engine::Prometheus3`): every end-to-end test with a real server
/// runs on each of them.
pub fn every_module_with_a_real_prometheus_names_every_engine() {
    let dir = crate::common::repo_root().join("tests/it");
    let mut modules = 0;
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if !text.contains("Prometheus::start") {
            continue;
        }
        modules += 1;
        for engine in PROMETHEUS_ENGINES {
            if !text.contains(&format!("Engine::{engine:?}")) {
                missing.push(format!("{} does not run on {engine:?}", path.display()));
            }
        }
    }
    assert!(modules >= 4, "only {modules} modules start a Prometheus");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
