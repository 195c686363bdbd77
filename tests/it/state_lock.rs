//! One agent per state directory: the agent that uses a state directory holds its lock for as
//! long as it runs; a second agent on the same directory (with a configuration or the embedded
//! default) exits non-zero at once, naming the first by its pid, and changes nothing there;
//! `--config.check` takes no lock; once the first has stopped, the directory is free again.

use crate::common::{self, Agent};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

/// Every entry under `dir` (the directory itself included): its content (none for a directory)
/// and modification time.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>, SystemTime)> {
    let mut out = vec![(
        PathBuf::from("."),
        None,
        std::fs::metadata(dir).unwrap().modified().unwrap(),
    )];
    for (path, content) in common::tree(dir) {
        let meta = std::fs::symlink_metadata(dir.join(&path)).unwrap();
        let content = (!meta.is_dir()).then_some(content);
        out.push((path, content, meta.modified().unwrap()));
    }
    out
}

/// Runs the binary with `args` on a free port, for at most 10 s; returns its exit code (`None`:
/// still running after 10 s, then killed) and its stderr.
fn run(args: &[String]) -> (Option<i32>, String) {
    let mut child = Command::new(common::binary())
        .args(args)
        .arg("--web.listen-address=127.0.0.1:0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let exit = common::wait_exit(&mut child, Duration::from_secs(10));
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    (
        exit.and_then(|e| e.code()),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn a_second_agent_on_a_state_directory_refuses_to_start_and_writes_nothing() {
    // On a disk: the embedded default refuses a state directory on tmpfs.
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let state = tmp.path().join("state");
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let config = common::config_flag(
        tmp.path(),
        &format!(
            "[defaults]\ninterval = \"1h\"\nprofiles = [\"randread-4k-qd1-gentle\"]\n\
             [[targets]]\nname = \"file\"\npath = \"{}\"\nsize = \"4MiB\"\n",
            data.join("probe.dat").display()
        ),
    );
    let state_flag = format!("--state.dir={}", state.display());
    let mut first = Agent::start(&[&config, &state_flag, "--sandbox.landlock=off"]);
    // What the first agent keeps there is written before it listens (the first stat of its
    // target); nothing else writes there while the second agents run.
    let before = snapshot(&state);
    let pid = format!("pid {}", first.pid());
    for (what, args) in [
        ("a configuration", vec![config.clone(), state_flag.clone()]),
        ("the embedded default", vec![state_flag.clone()]),
    ] {
        let (code, stderr) = run(&args);
        assert!(
            code.is_some_and(|c| c != 0),
            "{what}: a second agent must exit non-zero at once, not {code:?}: {stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "state directory {} is in use by another agent ({pid}",
                state.display()
            )),
            "{what}: the first agent is named: {stderr}"
        );
        assert_eq!(snapshot(&state), before, "{what}: nothing changed");
    }
    let lock = state.join("agent.lock");
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap().trim(),
        first.pid().to_string(),
        "the lock file names the agent that holds it"
    );
    // The check takes no lock.
    let (code, stderr) = run(&[
        config.clone(),
        state_flag.clone(),
        "--config.check".to_owned(),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(snapshot(&state), before);
    // The first agent runs on; once it has stopped the directory is free again.
    assert_eq!(first.get("/metrics").0, 200);
    first.terminate();
    let second = Agent::start(&[&config, &state_flag, "--sandbox.landlock=off"]);
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap().trim(),
        second.pid().to_string()
    );
}

crate::tests! {
    a_second_agent_on_a_state_directory_refuses_to_start_and_writes_nothing,
}
