//! The harness the integration tests share (`tests/it`, and `tests/deploy` for the deploy
//! artefacts), a file per concern; what most tests use is re-exported here (`common::Agent`):
//! - [`registry`]: the list of tests ([`crate::tests!`]) and the runner;
//! - [`skip`]: prerequisites ([`skip::Need`], [`require`]): a test missing one is reported as
//!   ignored with the reason, and fails under `DISKPROBE_TEST_STRICT=1` (set by `.ci/run`);
//! - [`machine`]: the machine lock ([`exclusive`], [`shared`]);
//! - [`agent`]: the agent as a child process ([`Agent`]), its configuration file;
//! - [`http`]: a small HTTP/1.1 client ([`http_request`]); [`http_conn`]: connections that stay
//!   open, plain or TLS, for bursts and floods;
//! - [`exposition`]: the agent's metrics ([`scrape`], [`wait_until`]), protobuf dumps, promtool;
//! - [`one_shot`]: the one-shot probe's JSON runs ([`one_shot`]);
//! - [`golden`]: golden files ([`check_golden`]);
//! - [`wait`]: waiting for a condition ([`wait_for`]);
//! - [`tls`], [`seccomp`]: certificates, and the binary with a system call blocked;
//! - [`loopdev`]: loop devices, filesystems on them, blkio throttles ([`loopdev::ready`]);
//! - [`fuse`]: a FUSE filesystem served by the test, to hang or slow I/O for real;
//! - [`dashboards`]: the bundled dashboards' queries, and the scenario each panel shows data in;
//! - [`engines`]: the rule engines (Prometheus 2.42 from Debian 12, Prometheus 3.5 LTS from
//!   `tests/install-engines.sh`) and where their binaries are;
//! - [`prometheus`]: a real Prometheus scraping an agent; [`victoria`]: a real VictoriaMetrics
//!   scraping an agent and a real vmalert; [`rule_server`]: what a test asks of either;
//! - [`process`]: what /proc says of one process (threads, io_uring instances, status);
//! - here: locating the binary, the repository and tools.

use std::path::PathBuf;

pub mod agent;
pub mod dashboards;
pub mod engines;
pub mod exposition;
pub mod fuse;
pub mod golden;
pub mod http;
pub mod http_conn;
pub mod loopdev;
pub mod machine;
pub mod one_shot;
pub mod process;
pub mod prometheus;
pub mod registry;
pub mod rule_server;
pub mod seccomp;
pub mod skip;
pub mod tls;
pub mod victoria;
pub mod wait;

/// The binary under test, built by cargo for the integration tests; `DISKPROBE_TEST_BINARY`
/// names another (e.g. a build of an earlier commit, to see a new test fail on it).
pub fn binary() -> PathBuf {
    std::env::var_os("DISKPROBE_TEST_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_diskprobe_exporter")))
}

pub use agent::{Agent, config_flag, signal_process, wait_exit};
pub use exposition::{
    Metrics, decode_protobuf, promtool_check_metrics, protobuf_dump, runs, samples, scrape,
    scrape_timed, sum, wait_until,
};
pub use golden::check_golden;
pub use http::{Response, http_request, http_request_bytes, parse_response};
pub use machine::{exclusive, shared};
pub use one_shot::{one_shot, one_shot_args, one_shot_run, one_shot_runs};
pub use seccomp::{binary_without_syscall, python_seccomp};
pub use skip::require;
pub use tls::write_tls_files;
pub use wait::wait_for;

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

/// Length of the file at `path`, 0 while it does not exist.
pub fn file_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
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
