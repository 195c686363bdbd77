//! Landlock self-confinement (`src/sandbox/`), seen from outside the agent:
//! - confined, as root: a read-only loop device (io_uring) and a probe file (psync) are probed and
//!   scraped over TLS; the first probe thread's attempt to create a file beside the allowed
//!   directories gets EACCES, is logged and exported, and leaves nothing in that directory; a
//!   reload adding a target inside the allowed directories works; reloads needing a directory or
//!   device writes outside them, or TLS files moved to a directory outside them, are refused with
//!   an error that says to restart, and the running configuration (and certificate) stays;
//! - unconfined: with `landlock_create_ruleset` failing with ENOSYS (a seccomp filter), the agent
//!   runs as without Landlock and says so, `--sandbox.landlock=required` refuses to start, and
//!   `--sandbox.landlock=off` reports itself off.

use crate::common;
use crate::common::loopdev;

use common::{Agent, Metrics, which};
use loopdev::LoopDev;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The Landlock ABI the kernel offers (0: none), as `landlock_create_ruleset(NULL, 0,
/// LANDLOCK_CREATE_RULESET_VERSION)` answers.
fn landlock_abi() -> i64 {
    // SAFETY: the version query takes no pointer the kernel reads (NULL attributes, size 0).
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    abi.max(0)
}

/// A workspace on a disk-backed filesystem (probe files need O_DIRECT).
fn workspace() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sandbox-test")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// The names in `dir`.
fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// One scrape over TLS (curl, trusting the test's certificate).
fn scrape_tls(agent: &Agent, ca: &Path) -> Metrics {
    let out = Command::new(which("curl").expect("checked by caller"))
        .args(["-sS", "--fail", "--max-time", "20", "--cacert"])
        .arg(ca)
        .arg(format!("https://{}/metrics", agent.addr))
        .output()
        .expect("run curl");
    assert!(
        out.status.success(),
        "scrape over TLS failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    common::samples(&String::from_utf8_lossy(&out.stdout))
        .into_iter()
        .collect()
}

/// Scrapes over TLS every 100 ms until `cond` holds; fails with the log after `timeout`.
fn wait_tls(agent: &Agent, ca: &Path, what: &str, cond: impl Fn(&Metrics) -> bool) -> Metrics {
    let (timeout, every) = (Duration::from_secs(60), Duration::from_millis(100));
    common::wait::poll(timeout, every, || {
        let m = scrape_tls(agent, ca);
        if cond(&m) { Ok(m) } else { Err(()) }
    })
    .unwrap_or_else(|()| {
        panic!(
            "timed out waiting for {what}; log:\n{}",
            agent.log.lock().unwrap()
        )
    })
}

fn sandbox_info(m: &Metrics) -> Vec<&String> {
    m.keys()
        .filter(|k| k.starts_with("diskprobe_sandbox_info{"))
        .collect()
}

fn target(name: &str, path: &Path, extra: &str) -> String {
    format!(
        "[[targets]]\nname = \"{name}\"\npath = \"{}\"\n{extra}\n",
        path.display()
    )
}

const DEFAULTS: &str = "[defaults]\ninterval = \"1s\"\nruntime = \"100ms\"\nmax_duty_cycle = 0.5\n";

fn confined_agent_probes_and_refuses_reloads_outside_its_ruleset() {
    if !common::require(loopdev::loop_available(), "root and losetup (loop devices)")
        || !common::require(which("curl").is_some(), "curl")
        || !common::require(
            landlock_abi() >= 6,
            "Landlock ABI 6 or later (kernel 6.12+)",
        )
    {
        return;
    }
    let _guard = common::shared();
    let ws = workspace();
    let probes = ws.path().join("probes");
    let elsewhere = ws.path().join("elsewhere");
    std::fs::create_dir(&probes).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    common::write_tls_files(ws.path());
    let web = ws.path().join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    )
    .unwrap();
    let ca = ws.path().join("server.crt");
    let disk = LoopDev::tmpfs(16 << 20);
    let disk_before = disk.content();
    let file = probes.join("file.dat");
    let base = format!(
        "{DEFAULTS}{}{}",
        target(
            "disk",
            &disk.path,
            "engine = \"io_uring\"\nprofiles = [\"randread-4k-qd1\"]"
        ),
        target(
            "file",
            &file,
            "engine = \"psync\"\nsize = \"16MiB\"\nallow_writes = true\nprofiles = [\"randread-4k-qd1\", \"randwrite-4k-qd1\", \"etcd-wal\"]"
        ),
    );
    let config = ws.path().join("config.toml");
    std::fs::write(&config, &base).unwrap();
    // The state directory (granted for the targets' last devices) beside the probe directory:
    // the check tries beside the first directory it may write in.
    let state = ws.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let before = names(ws.path());

    let agent = Agent::start(&[
        &format!("--config.file={}", config.display()),
        &format!("--web.config.file={}", web.display()),
        &format!("--state.dir={}", state.display()),
    ]);
    let m = wait_tls(&agent, &ca, "runs of both targets on both engines", |m| {
        common::runs(m, "disk", "success") >= 1.0 && common::runs(m, "file", "success") >= 3.0
    });
    for engine in ["io_uring", "psync"] {
        assert_eq!(
            m.get(&format!("diskprobe_engine_info{{engine=\"{engine}\"}}")),
            Some(&1.0),
            "{engine}"
        );
    }
    for name in ["disk", "file"] {
        assert_eq!(common::runs(&m, name, "error"), 0.0, "{name}");
    }
    let info = format!(
        "diskprobe_sandbox_info{{mode=\"auto\",landlock_abi=\"{}\",enforced=\"full\",check=\"denied\"}}",
        landlock_abi()
    );
    assert_eq!(
        m.get(&info),
        Some(&1.0),
        "{:?}\n{}",
        sandbox_info(&m),
        agent.log.lock().unwrap()
    );
    // The check ran on a probe thread, beside the probe file's directory.
    let log = agent.log.lock().unwrap().clone();
    let verified = log
        .lines()
        .find(|l| l.contains("sandbox verified"))
        .unwrap_or_else(|| panic!("no check in the log:\n{log}"));
    assert!(verified.contains("thread=probe-"), "{verified}");
    assert!(
        verified.contains(&format!("dir={}", ws.path().display())),
        "{verified}"
    );
    assert!(log.contains(&format!(
        "message=\"sandbox: allowed\" path={} access=write_file,read_file,remove_file,make_reg,truncate",
        probes.display()
    )));
    // Nothing was created beside it, and the probe directory holds only the probe file.
    assert_eq!(names(ws.path()), before);
    assert_eq!(names(&probes), BTreeSet::from(["file.dat".to_owned()]));

    // A reload adding a probe file in the allowed directory works.
    let inside = format!(
        "{base}{}",
        target("inside", &probes.join("inside.dat"), "size = \"16MiB\"")
    );
    std::fs::write(&config, &inside).unwrap();
    agent.signal("HUP");
    agent.expect_log("configuration reloaded", Duration::from_secs(10));
    let m = wait_tls(&agent, &ca, "runs of the reloaded target", |m| {
        common::runs(m, "inside", "success") >= 1.0
    });
    assert_eq!(m.get("diskprobe_config_last_reload_successful"), Some(&1.0));

    // One that needs another directory is refused, with the reason and what to do.
    std::fs::write(
        &config,
        format!(
            "{inside}{}",
            target(
                "outside",
                &elsewhere.join("outside.dat"),
                "size = \"16MiB\""
            )
        ),
    )
    .unwrap();
    agent.signal("HUP");
    agent.expect_log(
        &format!(
            "target \\\"outside\\\": probe file directory: {} is outside what the sandbox allowed at start",
            elsewhere.display()
        ),
        Duration::from_secs(10),
    );
    // So is one that opts the read-only device in for writes.
    let device_writes = base.replace(
        "engine = \"io_uring\"\nprofiles = [\"randread-4k-qd1\"]",
        "engine = \"io_uring\"\nallow_writes = true\nallow_device_writes = true\nprofiles = [\"randwrite-4k-qd1\"]",
    );
    assert_ne!(device_writes, base);
    std::fs::write(&config, device_writes).unwrap();
    agent.signal("HUP");
    agent.expect_log(
        &format!(
            "target \\\"disk\\\": block device opted in for writes: {} is outside what the sandbox allowed at start (it needs write_file,read_file,ioctl_dev there",
            disk.path.display()
        ),
        Duration::from_secs(10),
    );
    // And a web configuration whose certificate moved to a new directory: the listener keeps
    // the certificate it has (the scrapes below still verify against it).
    std::fs::write(&config, &inside).unwrap();
    // (Not under the workspace: the rule on the directory of the first certificate covers every
    // directory below it.)
    let moved = workspace();
    let tls = moved.path();
    common::write_tls_files(tls);
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\n",
            tls.join("server.crt").display(),
            tls.join("server.key").display()
        ),
    )
    .unwrap();
    agent.signal("HUP");
    agent.expect_log(
        &format!(
            "web configuration: directory of {}: {} is outside what the sandbox allowed at start (it needs read_file there",
            tls.join("server.crt").display(),
            tls.display()
        ),
        Duration::from_secs(10),
    );
    let log = agent.log.lock().unwrap().clone();
    assert_eq!(
        log.matches("restart the agent to apply this configuration")
            .count(),
        3,
        "{log}"
    );
    // The configuration in force goes on: its targets keep running, the refused one never ran.
    let inside_runs = common::runs(&scrape_tls(&agent, &ca), "inside", "success");
    let m = wait_tls(&agent, &ca, "more runs after the refusals", |m| {
        common::runs(m, "inside", "success") > inside_runs
    });
    assert_eq!(m.get("diskprobe_config_last_reload_successful"), Some(&0.0));
    assert!(!m.keys().any(|k| k.contains("target=\"outside\"")));
    assert!(names(&elsewhere).is_empty());
    assert_eq!(names(ws.path()), before);
    drop(agent);
    assert!(
        disk.content() == disk_before,
        "a read-only target is only read"
    );
}

/// The binary under a seccomp filter that fails `landlock_create_ruleset` with ENOSYS, as a
/// kernel without Landlock does.
fn without_landlock(dir: &Path, python: &Path) -> Command {
    common::binary_without_syscall(python, dir, "landlock_create_ruleset", "ENOSYS")
}

fn where_landlock_is_refused_the_agent_runs_unconfined_and_says_so() {
    let Some(python) = common::python_seccomp() else {
        common::require(false, "python3-seccomp (Debian package)");
        return;
    };
    let _guard = common::shared();
    let ws = workspace();
    let probes: PathBuf = ws.path().join("probes");
    let elsewhere = ws.path().join("elsewhere");
    std::fs::create_dir(&probes).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    let base = format!(
        "{DEFAULTS}{}",
        target("file", &probes.join("file.dat"), "size = \"16MiB\"")
    );
    let config = ws.path().join("config.toml");
    std::fs::write(&config, &base).unwrap();
    let config_arg = format!("--config.file={}", config.display());

    // A state directory of the test's own: as root the default is the machine's
    // /var/lib/diskprobe_exporter.
    let state_arg = format!("--state.dir={}", ws.path().join("state").display());
    let mut cmd = without_landlock(ws.path(), python);
    cmd.args([&config_arg, &state_arg]);
    let agent = Agent::start_command(cmd);
    let m = common::wait_until(&agent, Duration::from_secs(60), "a probe run", |m| {
        common::runs(m, "file", "success") >= 1.0
    });
    assert_eq!(
        sandbox_info(&m),
        ["diskprobe_sandbox_info{mode=\"auto\",landlock_abi=\"0\",enforced=\"no\",check=\"none\"}"]
    );
    agent.expect_log(
        "sandbox: Landlock is not available (a kernel without it, or a seccomp filter that refuses it); running unconfined",
        Duration::from_secs(1),
    );
    // Unconfined, a reload may name any directory, as without a sandbox.
    std::fs::write(
        &config,
        format!(
            "{base}{}",
            target("elsewhere", &elsewhere.join("e.dat"), "size = \"16MiB\"")
        ),
    )
    .unwrap();
    agent.signal("HUP");
    let m = common::wait_until(
        &agent,
        Duration::from_secs(60),
        "a run of the reloaded target",
        |m| common::runs(m, "elsewhere", "success") >= 1.0,
    );
    assert_eq!(m.get("diskprobe_config_last_reload_successful"), Some(&1.0));
    drop(agent);

    // --sandbox.landlock=required does not start without it.
    let mut cmd = without_landlock(ws.path(), python);
    let out = cmd
        .args([&config_arg, &state_arg, "--sandbox.landlock=required"])
        .arg("--web.listen-address=127.0.0.1:0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--sandbox.landlock=required: Landlock is not available"),
        "{stderr}"
    );
    assert!(!stderr.contains("message=listening"), "{stderr}");

    // --sandbox.landlock=off asks nothing of the kernel.
    let agent = Agent::start(&["--sandbox.landlock=off"]);
    let m = common::scrape(&agent);
    assert_eq!(
        sandbox_info(&m),
        ["diskprobe_sandbox_info{mode=\"off\",landlock_abi=\"\",enforced=\"no\",check=\"none\"}"]
    );
}

crate::tests! {
    confined_agent_probes_and_refuses_reloads_outside_its_ruleset: [CURL],
    where_landlock_is_refused_the_agent_runs_unconfined_and_says_so,
}
