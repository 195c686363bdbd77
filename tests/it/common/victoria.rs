//! A real VictoriaMetrics with a real vmalert for end-to-end tests ([`Victoria`]): a single-node
//! `victoria-metrics` on a free loopback port, its data in the test's temporary directory,
//! scraping the agent every second itself (`-promscrape.config`, job `diskprobe`, as the
//! Prometheus of [`crate::common::prometheus`] does), and a `vmalert` evaluating a rule file
//! every second against it (`-datasource.url`), writing the recordings and the alerts' `ALERTS`
//! and `ALERTS_FOR_STATE` series back to it (`-remoteWrite.url`) and reading them on a restart
//! (`-remoteRead.url`), notifying no one (`-notifier.blackhole`); both killed when dropped. The
//! binaries are Debian's (unstable suite, `victoria-metrics` 1.145.0+ds1-2), which
//! `tests/install-engines.sh` unpacks into the engines directory
//! ([`Engine::VictoriaMetrics`]); [`ready`] says whether they are there and prints the version (a
//! missing binary skips the test with the reason; strict: fails). A test queries
//! it through [`RuleServer`] like a Prometheus: the query API is VictoriaMetrics' (MetricsQL,
//! Prometheus-compatible), the rules and alerts APIs vmalert's.
//!
//! The delays, their defaults, and what the test sets:
//! - VictoriaMetrics `-search.latencyOffset` (default 30s): a query about a moment less than this
//!   before now is answered with the data of this long ago (an instant query is moved back, a
//!   range query's last points repeat an earlier one), since samples may still be arriving.
//!   vmalert `-rule.evalDelay` (default 30s, "normally equal to -search.latencyOffset") evaluates
//!   every rule that far in the past, so that it reads complete data. Here both are
//!   [`EVAL_DELAY`], 5 s: the scraper is VictoriaMetrics itself, on loopback, and it makes what
//!   it ingests searchable within about 4 s (it turns buffered rows into searchable parts every
//!   2 s, `pendingRowsFlushInterval` of its `lib/storage`, which no flag sets; measured here:
//!   at most 4.1 s), where 30 s would stretch every step of a test of shortened windows by 30 s.
//! - VictoriaMetrics `-search.disableCache` (default: off, responses are cached): the response
//!   cache serves what is older than `-search.cacheTimestampOffset` (5m) from earlier answers;
//!   off here, so that every answer is computed from the samples (the shortened rules'
//!   subqueries reach back 10 minutes).
//! - vmalert `-remoteWrite.flushInterval` (default 2s): 200ms here, so that results are stored
//!   sooner.
//! - vmalert `-evaluationInterval` (default 1m): 1s, as the Prometheus tests'
//!   `evaluation_interval`; groups with their own `interval` keep it (the shortened rules'). Its
//!   `-datasource.queryStep` (default 5m: how far back an instant query may find a sample, as
//!   Prometheus' lookback delta) is kept.
//!
//! So the results of every rule evaluation about a moment are searchable [`LAG`] after it:
//! `-rule.evalDelay`, up to a second of alignment (vmalert truncates the evaluation time to the
//! group's interval), the remote write flush, and VictoriaMetrics' 4 s, with margin. A query
//! without a time asks about that long ago ([`RuleServer::view_time`]).
//!
//! What differs from a Prometheus and matters to a test: vmalert's `ALERTS` and
//! `ALERTS_FOR_STATE` carry an `alertgroup` label (the group's name; `-disableAlertgroupLabel`
//! is not set); VictoriaMetrics keeps no native histograms, so the agent's histograms are
//! classic buckets only, as in a Prometheus of [`crate::common::prometheus::Histograms::Classic`];
//! and the query language is MetricsQL (no `histogram_count` or `histogram_sum`, for one).

use crate::common::engines::Engine;
use crate::common::http_request;
use crate::common::rule_server::RuleServer;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// vmalert's `-rule.evalDelay` and VictoriaMetrics' `-search.latencyOffset` (both 30 s by
/// default): see the module's doc.
pub const EVAL_DELAY: Duration = Duration::from_secs(5);

/// vmalert's `-remoteWrite.flushInterval` (2 s by default).
const FLUSH_INTERVAL: &str = "200ms";

/// How long after a moment every scrape and every rule evaluation about it are searchable, 12 s:
/// [`EVAL_DELAY`] (5 s), a second of alignment, the flush (0.2 s), VictoriaMetrics' 4 s until
/// searchable, and a margin of 1.8 s.
pub const LAG: Duration = Duration::from_secs(12);

/// The binary `name` (`victoria-metrics`, `vmalert`), if installed.
fn binary(name: &str) -> Option<PathBuf> {
    Engine::VictoriaMetrics.tool(name)
}

/// Whether `victoria-metrics` and `vmalert` are installed (and `vmalert-tool`, which
/// [`Engine::require`] asks for); otherwise the test is skipped with the reason (strict: fails).
/// Prints the version with the caller's file, so that a test's output says what it ran on.
#[track_caller]
pub fn ready() -> bool {
    crate::common::prometheus::engine_ready(Engine::VictoriaMetrics)
        && crate::common::require(
            binary("victoria-metrics").is_some(),
            Engine::VictoriaMetrics.what(),
        )
}

/// A running VictoriaMetrics and vmalert.
pub struct Victoria {
    vmalert: Child,
    victoria: Child,
    /// Where VictoriaMetrics' HTTP API listens (queries, remote write, its own /metrics).
    pub addr: SocketAddr,
    /// Where vmalert's HTTP API listens (rules, alerts, its own /metrics).
    pub vmalert_addr: SocketAddr,
}

impl Drop for Victoria {
    fn drop(&mut self) {
        for child in [&mut self.vmalert, &mut self.victoria] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A free port on the loopback interface.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until `addr` answers `GET /health` with 200, failing the test with the end of `log`
/// if `child` exits first.
fn wait_healthy(what: &str, child: &mut Child, addr: SocketAddr, log: &Path) {
    let healthy = || {
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!("{what} exited ({status}):\n{}", tail.join("\n"));
        }
        std::net::TcpStream::connect(addr).is_ok()
            && http_request(addr, "GET", "/health", &[]).status == 200
    };
    let (timeout, every) = (Duration::from_secs(30), Duration::from_millis(200));
    crate::common::wait::wait_for_every(&format!("{what} to start"), timeout, every, healthy);
}

impl Victoria {
    /// Starts VictoriaMetrics with its scrape configuration, data and log
    /// (`victoria-metrics.log`) in `dir`, scraping `agent` every second as job `diskprobe`, and
    /// vmalert evaluating the rule file `rules` (its text, written to `dir/rules.yml`) every
    /// second (log `vmalert.log`), and waits until both answer.
    pub fn start(dir: &Path, agent: SocketAddr, rules: &str) -> Victoria {
        std::fs::write(
            dir.join("scrape.yml"),
            format!(
                "global:\n  scrape_interval: 1s\n\
                 scrape_configs:\n  - job_name: diskprobe\n    static_configs:\n      - targets: [\"{agent}\"]\n"
            ),
        )
        .unwrap();
        std::fs::write(dir.join("rules.yml"), rules).unwrap();
        let delay = format!("{}s", EVAL_DELAY.as_secs());
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = dir.join("victoria-metrics.log");
        let mut victoria = Command::new(binary("victoria-metrics").expect("checked by ready()"))
            .arg(format!("-httpListenAddr={addr}"))
            .arg(format!(
                "-storageDataPath={}",
                dir.join("vm-data").display()
            ))
            .arg(format!(
                "-promscrape.config={}",
                dir.join("scrape.yml").display()
            ))
            .arg(format!("-search.latencyOffset={delay}"))
            .arg("-search.disableCache")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start victoria-metrics");
        wait_healthy("victoria-metrics", &mut victoria, addr, &log);
        let vmalert_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = dir.join("vmalert.log");
        let url = format!("http://{addr}");
        let vmalert = Command::new(binary("vmalert").expect("checked by ready()"))
            .arg(format!("-rule={}", dir.join("rules.yml").display()))
            .arg(format!("-datasource.url={url}"))
            .arg(format!("-remoteWrite.url={url}"))
            .arg(format!("-remoteRead.url={url}"))
            .arg("-evaluationInterval=1s")
            .arg(format!("-rule.evalDelay={delay}"))
            .arg(format!("-remoteWrite.flushInterval={FLUSH_INTERVAL}"))
            .arg("-notifier.blackhole")
            .arg(format!("-httpListenAddr={vmalert_addr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn();
        let mut v = Victoria {
            vmalert: vmalert.expect("start vmalert"),
            victoria,
            addr,
            vmalert_addr,
        };
        wait_healthy("vmalert", &mut v.vmalert, vmalert_addr, &log);
        v
    }
}

/// GET `path` from `addr` as JSON; `None` when it does not answer or not in JSON.
fn get(addr: SocketAddr, path: &str) -> Option<Value> {
    std::net::TcpStream::connect(addr).ok()?;
    serde_json::from_str(&http_request(addr, "GET", path, &[]).body).ok()
}

/// vmalert's counters of failures: per rule, failed evaluations; and results it failed to write
/// or dropped.
const FAILURE_COUNTERS: [&str; 4] = [
    "vmalert_alerting_rules_errors_total",
    "vmalert_recording_rules_errors_total",
    "vmalert_remotewrite_errors_total",
    "vmalert_remotewrite_dropped_rows_total",
];

impl RuleServer for Victoria {
    fn name(&self) -> String {
        format!("VictoriaMetrics {}", Engine::VictoriaMetrics.version())
    }

    fn get_json(&self, path: &str) -> Option<Value> {
        get(self.addr, path)
    }

    fn rules_get_json(&self, path: &str) -> Option<Value> {
        get(self.vmalert_addr, path)
    }

    /// vmalert's failed evaluations per rule, and its failed or dropped writes of results
    /// ([`FAILURE_COUNTERS`]).
    fn counted_failures(&self) -> Vec<String> {
        let metrics = http_request(self.vmalert_addr, "GET", "/metrics", &[]);
        assert_eq!(metrics.status, 200, "vmalert's own /metrics");
        metrics
            .body
            .lines()
            .filter(|line| {
                FAILURE_COUNTERS.iter().any(|name| {
                    line.strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with(['{', ' ']))
                })
            })
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                (value.parse::<f64>().expect("a number") != 0.0)
                    .then(|| format!("{value} failures: {series}"))
            })
            .collect()
    }

    fn lag(&self) -> Duration {
        LAG
    }
}
