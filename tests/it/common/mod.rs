//! The harness the integration tests share (`tests/it`, and `tests/deploy` for the deploy
//! artefacts):
//! - [`registry`]: the list of tests ([`crate::tests!`]) and the runner;
//! - [`skip`]: prerequisites ([`skip::Need`], [`require`]): a test missing one is reported as
//!   ignored with the reason, and fails under `DISKPROBE_TEST_STRICT=1` (set by `.ci/run`);
//! - here: locating the binary and tools; the machine lock ([`exclusive`],
//!   [`shared`]); the agent as a child process ([`Agent`]), its metrics ([`scrape`],
//!   [`wait_until`]) and HTTP ([`http_request`]); the one-shot probe's JSON runs ([`one_shot`]);
//!   golden files ([`check_golden`]); waiting for a condition ([`wait_for`]);
//! - [`loopdev`]: loop devices, filesystems on them, blkio throttles ([`loopdev::ready`]);
//! - [`fuse`]: a FUSE filesystem served by the test, to hang or slow I/O for real;
//! - [`prometheus`]: a real Prometheus scraping an agent;
//! - [`process`]: what /proc says of one process (threads, io_uring instances, status).

use std::path::PathBuf;

pub mod fuse;
pub mod loopdev;
pub mod process;
pub mod prometheus;
pub mod registry;
pub mod skip;

/// The binary under test, built by cargo for the integration tests; `DISKPROBE_TEST_BINARY`
/// names another (e.g. a build of an earlier commit, to see a new test fail on it).
pub fn binary() -> PathBuf {
    std::env::var_os("DISKPROBE_TEST_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_diskprobe_exporter")))
}

pub use skip::require;

/// Full path of an executable on PATH (or in /usr/sbin, /sbin, which a user's PATH may lack), if
/// any: a PATH without a tool is how to see what a machine without it runs and skips.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    // Read the effective uid from /proc rather than calling into libc.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A running agent process, killed when dropped.
pub struct Agent {
    /// The child process.
    pub child: std::process::Child,
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    /// Everything it logged so far (stderr), appended by a reader thread.
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
    _scratch: Option<tempfile::TempDir>,
}

impl Agent {
    /// Starts the binary with `args` plus `--web.listen-address=127.0.0.1:0` and waits until it
    /// logs the address it listens on.
    ///
    /// Without `--config.file` or `--state.dir` in `args`, an empty configuration file is passed
    /// (diskstats only), so that tests never run the embedded default against the machine's own
    /// state directory; without `--state.dir`, a scratch directory of the agent's own is its
    /// state directory (block discovery rules keep their lost targets there).
    pub fn start(args: &[&str]) -> Agent {
        let mut cmd = std::process::Command::new(binary());
        cmd.args(args);
        let has = |flag: &str| args.iter().any(|a| a.starts_with(flag));
        let dir = tempfile::tempdir().expect("tempdir");
        if !has("--config.file") && !has("--state.dir") {
            let empty = dir.path().join("empty.toml");
            std::fs::write(&empty, "").expect("write empty config");
            cmd.arg(format!("--config.file={}", empty.display()));
        }
        if !has("--state.dir") {
            cmd.arg(format!(
                "--state.dir={}",
                dir.path().join("state").display()
            ));
        }
        let mut agent = Agent::start_command(cmd);
        agent._scratch = Some(dir);
        agent
    }

    /// Like [`Agent::start`], for a prepared command that runs the binary (for example inside a
    /// cgroup); `--web.listen-address=127.0.0.1:0` is appended.
    pub fn start_command(mut cmd: std::process::Command) -> Agent {
        use std::io::BufRead;
        let mut child = cmd
            .arg("--web.listen-address=127.0.0.1:0")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start diskprobe_exporter");
        let stderr = child.stderr.take().expect("stderr piped");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains("message=listening") {
                    let addr = line
                        .split_whitespace()
                        .find_map(|kv| kv.strip_prefix("address="))
                        .and_then(|a| a.parse::<std::net::SocketAddr>().ok());
                    let _ = tx.send(addr);
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let addr = match rx.recv_timeout(std::time::Duration::from_secs(20)) {
            Ok(Some(addr)) => addr,
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "agent did not report its address ({other:?}); log:\n{}",
                    log.lock().unwrap()
                );
            }
        };
        Agent {
            child,
            addr,
            log,
            _scratch: None,
        }
    }

    /// The agent's process ID (what [`process`] asks /proc about).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// GET `path` and return the status and body.
    pub fn get(&self, path: &str) -> (u16, String) {
        let resp = http_request(self.addr, "GET", path, &[]);
        (resp.status, resp.body)
    }

    /// Sends `signal` (e.g. `"HUP"`) to the agent with kill(1).
    pub fn signal(&self, signal: &str) {
        signal_process(&self.child, signal);
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: std::time::Duration) -> Option<std::process::ExitStatus> {
        wait_exit(&mut self.child, timeout)
    }

    /// Polls the log until it contains `needle`, up to `timeout`.
    pub fn wait_log(&self, needle: &str, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if self.log.lock().unwrap().contains(needle) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        false
    }

    /// [`Agent::wait_log`], failing the test with the whole log when `needle` does not appear.
    pub fn expect_log(&self, needle: &str, timeout: std::time::Duration) {
        assert!(
            self.wait_log(needle, timeout),
            "no {needle:?} in the log within {timeout:?}:\n{}",
            self.log.lock().unwrap()
        );
    }

    /// Sends SIGTERM and fails the test unless the agent exits with status 0 within 5 s.
    pub fn terminate(&mut self) {
        self.signal("TERM");
        let exit = self
            .wait_exit(std::time::Duration::from_secs(5))
            .expect("exit within 5 s of SIGTERM");
        assert_eq!(exit.code(), Some(0));
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `cond` every 20 ms until it holds; fails the test with `what` after `timeout`.
pub fn wait_for(what: &str, timeout: std::time::Duration, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Length of the file at `path`, 0 while it does not exist.
pub fn file_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Sends `signal` (e.g. `"INT"`) to `child` with kill(1).
pub fn signal_process(child: &std::process::Child, signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .expect("run kill");
    assert!(status.success());
}

/// Waits up to `timeout` for `child` to exit.
pub fn wait_exit(
    child: &mut std::process::Child,
    timeout: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    None
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header lines, lower-cased names.
    pub headers: Vec<(String, String)>,
    /// Body as text.
    pub body: String,
}

impl Response {
    /// The first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one HTTP/1.1 request over plain TCP (`Connection: close`) and reads the whole response.
pub fn http_request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    parse_response(&exchange(addr, method, path, headers))
}

/// Like [`http_request`], with the body as bytes (compressed or binary; `Content-Length` bodies
/// only). The returned [`Response`] has the status and headers, and an empty `body`.
pub fn http_request_bytes(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (Response, Vec<u8>) {
    let raw = exchange(addr, method, path, headers);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(raw.len(), |i| i + 4);
    (parse_response(&raw[..split]), raw[split..].to_vec())
}

fn exchange(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).expect("send request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read response");
    raw
}

/// Parses a raw HTTP/1.1 response with a Content-Length body.
pub fn parse_response(raw: &[u8]) -> Response {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Response {
        status,
        headers,
        body,
    }
}

/// Decodes a chunked transfer-encoded body.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].strip_prefix("\r\n").unwrap_or(&after[size..]);
    }
    out
}

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
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let m = scrape(agent);
        if cond(&m) {
            return m;
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "timed out waiting for {what}; log:\n{}\nruns:\n{}",
                agent.log.lock().unwrap(),
                m.iter()
                    .filter(|(k, _)| k.starts_with("diskprobe_probe_runs_total"))
                    .map(|(k, v)| format!("{k} {v}\n"))
                    .collect::<String>()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The machine, as the tests of this binary share it. Tests run side by side in the threads of
/// one process (`RUST_TEST_THREADS`, set in `.cargo/config.toml`), and on 2 cores what one of
/// them does can show in what another measures:
/// - a test whose assertions are about time or rate, with a tolerance that other tests' load
///   could break, holds [`exclusive`]: probes against blkio caps (IOPS within 2%, a mean latency
///   within 5%), a gentle profile's rate cap, a device made slower by a known delay, scrape
///   latency and a schedule kept while devices hang;
/// - a test that loads the machine (probes running back to back or at queue depth, fio, a
///   browser, Prometheus, promtool over the scenario suite) holds [`shared`]: any number of
///   those run together, never beside an exclusive one;
/// - a test that neither measures time nor loads the machine holds neither: configuration,
///   fixtures and golden files, an idle agent's HTTP and signals, and checks that keep one core
///   busy for a second or two (a schema validator, node_exporter on fixtures, promtool over one
///   exposition).
///
/// std's lock on Linux prefers writers: once an exclusive test waits, no further shared one
/// starts, and the exclusive tests run one after the other before the shared ones go on.
static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Holds the machine for a test that measures time or rates (see [`MACHINE`]).
pub fn exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    MACHINE.write().unwrap_or_else(|e| e.into_inner())
}

/// Holds the machine for a test that loads it, beside other such tests (see [`MACHINE`]).
pub fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(|e| e.into_inner())
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

/// Compares `actual` with `tests/golden/NAME`, or writes it there under `UPDATE_GOLDEN=1`; on a
/// difference, fails with the first differing lines and the command (`cargo test --test it
/// MODULE::`) that regenerates the file.
pub fn check_golden(name: &str, actual: &str, module: &str) {
    let path = repo_root().join("tests/golden").join(name);
    if std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    if expected != actual {
        let diff: Vec<String> = expected
            .lines()
            .zip(actual.lines())
            .enumerate()
            .filter(|(_, (e, a))| e != a)
            .take(10)
            .map(|(i, (e, a))| format!("line {}:\n  golden: {e}\n  actual: {a}", i + 1))
            .collect();
        panic!(
            "{} differs from the output ({} vs {} lines); first differences:\n{}\n\
             If the change is intended, run UPDATE_GOLDEN=1 cargo test --test it {module}::",
            path.display(),
            expected.lines().count(),
            actual.lines().count(),
            diff.join("\n")
        );
    }
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

/// The runs a successful one-shot `probe --format json` printed; fails the test with its output
/// when the probe failed or printed something else.
pub fn one_shot_runs(out: &std::process::Output) -> Vec<serde_json::Value> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "probe failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    match serde_json::from_str(&stdout).expect("JSON output") {
        serde_json::Value::Array(runs) => runs,
        other => panic!("not an array of runs: {other}"),
    }
}

/// Writes the agent configuration `text` to `DIR/config.toml` (readable by all, for an agent run
/// as another user) and returns the flag that names it, `--config.file=DIR/config.toml`.
pub fn config_flag(dir: &std::path::Path, text: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    format!("--config.file={}", path.display())
}

/// The arguments of the one-shot `probe ARGS --format json`.
pub fn one_shot_args<'a>(args: &[&'a str]) -> Vec<&'a str> {
    std::iter::once("probe")
        .chain(args.iter().copied())
        .chain(["--format", "json"])
        .collect()
}

/// Runs the binary's one-shot `probe ARGS --format json` to its end and returns the runs it
/// printed ([`one_shot_runs`]).
pub fn one_shot(args: &[&str]) -> Vec<serde_json::Value> {
    let out = std::process::Command::new(binary())
        .args(one_shot_args(args))
        .output()
        .expect("run the one-shot probe");
    one_shot_runs(&out)
}

/// The one run of [`one_shot`]: fails the test when the probe printed another number of runs.
pub fn one_shot_run(args: &[&str]) -> serde_json::Value {
    let mut runs = one_shot(args);
    assert_eq!(runs.len(), 1, "probe {args:?}: {runs:?}");
    runs.remove(0)
}

/// Every file under `dir` (relative path → content), directories as empty entries.
pub fn tree(dir: &std::path::Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(dir).unwrap().to_owned();
            if path.is_dir() {
                out.insert(rel, Vec::new());
                stack.push(path);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// A self-signed certificate for 127.0.0.1 and localhost in `dir`: `server.crt`, `server.key`.
pub fn write_tls_files(dir: &std::path::Path) {
    let cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("generate certificate");
    std::fs::write(dir.join("server.crt"), cert.cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), cert.key_pair.serialize_pem()).unwrap();
}

/// Debian's python3 with its seccomp bindings (`python3-seccomp`), if installed.
pub fn python_seccomp() -> Option<&'static std::path::Path> {
    let python = std::path::Path::new("/usr/bin/python3");
    let found = python.exists()
        && std::process::Command::new(python)
            .args(["-c", "import seccomp"])
            .status()
            .is_ok_and(|s| s.success());
    found.then_some(python)
}

/// A command that runs the binary under a seccomp filter failing `syscall` with `errno` (a name
/// of Python's `errno` module, e.g. `EPERM`): a python3 wrapper written to `dir` loads the filter
/// and then executes the binary. Arguments added to the command go to the binary.
pub fn binary_without_syscall(
    python: &std::path::Path,
    dir: &std::path::Path,
    syscall: &str,
    errno: &str,
) -> std::process::Command {
    let wrapper = dir.join(format!("without_{syscall}.py"));
    std::fs::write(
        &wrapper,
        format!(
            "import errno, os, sys, seccomp\n\
             f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)\n\
             f.add_rule(seccomp.ERRNO(errno.{errno}), '{syscall}')\n\
             f.load()\n\
             os.execv(sys.argv[1], sys.argv[1:])\n"
        ),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(python);
    cmd.arg(wrapper).arg(binary());
    cmd
}
