//! End to end with a real Prometheus (Debian's prometheus 2.42) scraping the agent, which probes a
//! loop device from inside a cgroup v1 blkio group:
//! - every query of every Grafana dashboard panel (and every dashboard variable) returns data;
//! - throttling the loop device makes the bundled DiskprobeLatencyRegression alert fire, and lifting
//!   the throttle resolves it.
//!
//! The rules are loaded from deploy/prometheus/rules.yml with their windows shortened by this
//! substitution: `[30m]` → `[15s]`, `[5m]` → `[15s]`, `[7d]` → `[10m]`, every `for:` → `5s`.

mod common;
#[path = "common/loopdev.rs"]
mod loopdev;

use common::{Agent, http_request, require, which};
use loopdev::{BlkioGroup, LoopDev};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Prometheus {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The bundled rules with windows shortened for a test that lasts minutes, not days.
fn shortened_rules() -> String {
    let rules = std::fs::read_to_string(common::repo_root().join("deploy/prometheus/rules.yml"))
        .expect("read rules.yml");
    let rules = rules
        .replace("[30m]", "[15s]")
        .replace("[5m]", "[15s]")
        .replace("[7d]", "[10m]");
    rules
        .lines()
        .map(|l| match l.find("for: ") {
            Some(i) => format!("{}for: 5s", &l[..i]),
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn start_prometheus(dir: &Path, agent: SocketAddr) -> Prometheus {
    std::fs::write(dir.join("rules.yml"), shortened_rules()).unwrap();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yml]\n\
             scrape_configs:\n  - job_name: diskprobe\n    static_configs:\n      - targets: [\"{agent}\"]\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let child = Command::new(which("prometheus").expect("checked by caller"))
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let p = Prometheus { child, addr };
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get_json(addr, "/-/ready").is_none() && std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "prometheus did not start");
        std::thread::sleep(Duration::from_millis(200));
    }
    p
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn http_get_json(addr: SocketAddr, path: &str) -> Option<Value> {
    std::net::TcpStream::connect(addr).ok()?;
    let r = http_request(addr, "GET", path, &[]);
    serde_json::from_str(&r.body).ok()
}

/// Instant query; returns the result vector (empty on error).
fn query(prom: SocketAddr, q: &str) -> Vec<Value> {
    http_get_json(prom, &format!("/api/v1/query?query={}", encode(q)))
        .and_then(|v| v["data"]["result"].as_array().cloned())
        .unwrap_or_default()
}

fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Every panel query and variable query of a dashboard, variables substituted.
fn dashboard_queries(file: &str, vars: &[(&str, String)]) -> Vec<(String, String)> {
    let path = common::repo_root().join("grafana").join(file);
    let d: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let substitute = |e: &str| {
        let mut e = e
            .replace("$__rate_interval", "15s")
            .replace("$__interval", "5s");
        for (k, v) in vars {
            e = e.replace(&format!("${k}"), v);
        }
        e
    };
    let mut out = Vec::new();
    fn panels(v: &Value, out: &mut Vec<Value>) {
        for p in v.as_array().into_iter().flatten() {
            out.push(p.clone());
            panels(&p["panels"], out);
        }
    }
    let mut all = Vec::new();
    panels(&d["panels"], &mut all);
    for p in &all {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = t["expr"].as_str() {
                out.push((format!("{file}: panel {:?}", p["title"]), substitute(expr)));
            }
        }
    }
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        let Some(def) = v["definition"].as_str() else {
            continue;
        };
        // label_values(SELECTOR, LABEL) has data when `count by (LABEL) (SELECTOR)` has.
        let inner = def
            .strip_prefix("label_values(")
            .and_then(|s| s.strip_suffix(')'))
            .expect("label_values query");
        let (selector, label) = inner.rsplit_once(',').unwrap();
        out.push((
            format!("{file}: variable {:?}", v["name"]),
            substitute(&format!(
                "count by ({}) ({})",
                label.trim(),
                selector.trim()
            )),
        ));
    }
    out
}

fn alert_state(prom: SocketAddr, name: &str) -> Option<String> {
    let v = http_get_json(prom, "/api/v1/alerts")?;
    v["data"]["alerts"]
        .as_array()?
        .iter()
        .find(|a| a["labels"]["alertname"] == name && a["labels"]["target"] == "e2e")
        .and_then(|a| a["state"].as_str().map(str::to_owned))
}

#[test]
fn dashboards_have_data_and_the_latency_alert_fires_and_resolves() {
    let ready = require(loopdev::loop_available(), "root and losetup (loop devices)")
        && require(loopdev::blkio_available(), "cgroup v1 blkio")
        && require(
            which("prometheus").is_some(),
            "prometheus (Debian package prometheus)",
        );
    if !ready {
        return;
    }
    let dev = LoopDev::tmpfs(64 << 20);
    let group = BlkioGroup::new();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[diskstats]\ndevice_include = \"^{}$\"\n[defaults]\ninterval = \"1s\"\nruntime = \"300ms\"\n\
             jitter = 0.0\nmax_duty_cycle = 0.5\n[[targets]]\nname = \"e2e\"\npath = \"{}\"\n\
             profiles = [\"randread-4k-qd1\"]\n",
            dev.name,
            dev.path.display()
        ),
    )
    .unwrap();
    let cfg_arg = format!("--config.file={}", config.display());
    let agent = Agent::start_command(group.command(&common::binary(), &[&cfg_arg]));
    let prom = start_prometheus(dir.path(), agent.addr);

    // Normal operation long enough for a baseline of fast runs.
    wait_for(
        "probe results in Prometheus",
        Duration::from_secs(60),
        || !query(prom.addr, "diskprobe_probe_success{target=\"e2e\"} == 1").is_empty(),
    );
    std::thread::sleep(Duration::from_secs(40));

    let vars = [
        ("job", "diskprobe".to_owned()),
        ("instance", agent.addr.to_string()),
        ("target", "e2e".to_owned()),
        ("device", dev.name.clone()),
    ];
    let mut empty = Vec::new();
    let mut checked = 0;
    for file in ["diskprobe-overview.json", "diskprobe-target.json"] {
        for (what, q) in dashboard_queries(file, &vars) {
            checked += 1;
            if query(prom.addr, &q).is_empty() {
                empty.push(format!("{what}: {q}"));
            }
        }
    }
    assert!(checked >= 25, "only {checked} queries found");
    assert!(
        empty.is_empty(),
        "queries without data:\n{}",
        empty.join("\n")
    );
    assert_eq!(alert_state(prom.addr, "DiskprobeLatencyRegression"), None);
    let baseline = query(
        prom.addr,
        "diskprobe:io_latency_seconds:p99_30m:baseline{target=\"e2e\"}",
    );
    assert!(!baseline.is_empty(), "no baseline recorded");

    // Throttle: 100 reads/s at QD1 = 10 ms per I/O, far above the baseline and the 5 ms floor.
    group.throttle_read_iops(&dev, 100);
    wait_for(
        "DiskprobeLatencyRegression to fire",
        Duration::from_secs(90),
        || alert_state(prom.addr, "DiskprobeLatencyRegression").as_deref() == Some("firing"),
    );
    // Lift the throttle ("0" removes the rule) and the alert resolves.
    group.throttle_read_iops(&dev, 0);
    wait_for(
        "DiskprobeLatencyRegression to resolve",
        Duration::from_secs(90),
        || alert_state(prom.addr, "DiskprobeLatencyRegression").is_none(),
    );
    drop(prom);
    drop(agent);
}
