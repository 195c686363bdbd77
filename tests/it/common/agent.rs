//! The agent as a child process ([`Agent`]): started on a free port of 127.0.0.1, its log,
//! signals and exit; its configuration file ([`config_flag`]).

use crate::common::wait::{INTERVAL, poll};
use crate::common::{binary, http_request};

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
    /// cgroup); `--web.listen-address=127.0.0.1:0` is appended, and without `--state.dir` among
    /// its arguments a scratch state directory of its own (writable by all, for an agent run as
    /// another user): one agent per state directory, and never the machine's own.
    pub fn start_command(mut cmd: std::process::Command) -> Agent {
        use std::io::BufRead;
        use std::os::unix::fs::PermissionsExt;
        let has_state_dir = cmd
            .get_args()
            .any(|a| a.to_string_lossy().starts_with("--state.dir"));
        let scratch = (!has_state_dir).then(|| {
            let dir = tempfile::tempdir().expect("tempdir");
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777))
                .expect("a scratch directory writable by all");
            cmd.arg(format!(
                "--state.dir={}",
                dir.path().join("state").display()
            ));
            dir
        });
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
            _scratch: scratch,
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
        poll(timeout, INTERVAL, || {
            if self.log.lock().unwrap().contains(needle) {
                Ok(())
            } else {
                Err(())
            }
        })
        .is_ok()
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
    poll(timeout, INTERVAL, || match child.try_wait() {
        Ok(Some(status)) => Ok(status),
        _ => Err(()),
    })
    .ok()
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
