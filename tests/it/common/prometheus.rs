//! A real Prometheus server (Debian's `prometheus`) for end-to-end tests: started on a free
//! loopback port with its data in a test's temporary directory, scraping the agent every second,
//! killed when dropped.

use crate::common::{http_request, which};
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
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts Prometheus with its configuration and data in `dir`, scraping `agent` every second
    /// as job `diskprobe`, with `flags` added (e.g. `--enable-feature=native-histograms`), and
    /// waits until its API answers.
    pub fn start(dir: &Path, agent: SocketAddr, flags: &[&str]) -> Prometheus {
        Self::start_with_rules(dir, agent, None, flags)
    }

    /// [`Prometheus::start`], evaluating the rule file `rules` (its text) every second.
    pub fn start_with_rules(
        dir: &Path,
        agent: SocketAddr,
        rules: Option<&str>,
        flags: &[&str],
    ) -> Prometheus {
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
                 scrape_configs:\n  - job_name: diskprobe\n    static_configs:\n      - targets: [\"{agent}\"]\n"
            ),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(which("prometheus").expect("checked by the caller"))
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let p = Prometheus { child, addr };
        let ready = || {
            std::net::TcpStream::connect(addr).is_ok()
                && http_request(addr, "GET", "/-/ready", &[]).status == 200
        };
        let (timeout, every) = (Duration::from_secs(30), Duration::from_millis(200));
        crate::common::wait::wait_for_every("prometheus to start", timeout, every, ready);
        p
    }

    /// GET `path` from the API as JSON; `None` when it does not answer or not in JSON.
    pub fn get_json(&self, path: &str) -> Option<Value> {
        std::net::TcpStream::connect(self.addr).ok()?;
        let r = http_request(self.addr, "GET", path, &[]);
        serde_json::from_str(&r.body).ok()
    }

    /// The result of an instant query evaluated at `time` (Unix seconds; now if `None`): a
    /// vector's elements or a matrix's series, empty on error.
    pub fn query(&self, q: &str, time: Option<f64>) -> Vec<Value> {
        let at = time.map(|t| format!("&time={t:.3}")).unwrap_or_default();
        self.get_json(&format!("/api/v1/query?query={}{at}", urlencode(q)))
            .and_then(|v| v["data"]["result"].as_array().cloned())
            .unwrap_or_default()
    }

    /// The value of every element of an instant vector query, with its labels.
    pub fn values(&self, q: &str, time: Option<f64>) -> Vec<(Value, f64)> {
        self.query(q, time)
            .into_iter()
            .filter_map(|e| {
                let v = e["value"][1].as_str()?.parse().ok()?;
                Some((e["metric"].clone(), v))
            })
            .collect()
    }

    /// The one value of an instant vector query, or `None` when it has none (or several).
    pub fn value(&self, q: &str, time: Option<f64>) -> Option<f64> {
        match self.values(q, time).as_slice() {
            [(_, v)] => Some(*v),
            _ => None,
        }
    }

    /// The samples `(timestamp, value)` of a range-vector selector's one series, now.
    pub fn samples(&self, selector: &str) -> Vec<(f64, f64)> {
        let result = self.query(selector, None);
        let [series] = result.as_slice() else {
            return Vec::new();
        };
        series["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| Some((p[0].as_f64()?, p[1].as_str()?.parse().ok()?)))
            .collect()
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
