//! Windows in runs, for real: a target that fails every run counts its errors in
//! `diskprobe_probe_recent_runs` up to the window's 10 runs and no further, beside a target that
//! succeeds, with all three `result` series present from the start; a reload that changes the
//! failing target's interval restarts its counters but keeps its window.

use crate::common;

use common::{Agent, Metrics, runs, wait_until};
use std::time::Duration;

/// `diskprobe_probe_recent_runs` of `target` with `result`, if exported.
fn recent(m: &Metrics, target: &str, result: &str) -> Option<f64> {
    m.iter()
        .find(|(k, _)| {
            k.starts_with("diskprobe_probe_recent_runs{")
                && k.contains(&format!("target=\"{target}\""))
                && k.contains(&format!("result=\"{result}\""))
        })
        .map(|(_, v)| *v)
}

fn io_error_runs(m: &Metrics, target: &str) -> Option<f64> {
    m.iter()
        .find(|(k, _)| {
            k.starts_with("diskprobe_probe_recent_io_error_runs{")
                && k.contains(&format!("target=\"{target}\""))
        })
        .map(|(_, v)| *v)
}

fn config(dir: &std::path::Path, interval: &str) -> String {
    format!(
        "[defaults]\nruntime = \"50ms\"\ntimeout = \"1s\"\njitter = 0.0\nmax_duty_cycle = 0.5\n\
         profiles = [\"randread-4k-qd1\"]\nskip_busy_above = {{}}\nyield_to_other_io = false\n\
         [[targets]]\nname = \"broken\"\npath = \"{}\"\ninterval = \"{interval}\"\n\
         [[targets]]\nname = \"fine\"\npath = \"{}\"\nsize = \"4MiB\"\ninterval = \"1s\"\n",
        dir.join("missing/probe.dat").display(),
        dir.join("probe.dat").display(),
    )
}

fn a_failing_target_counts_its_last_ten_runs_and_keeps_them_across_a_reload() {
    let _guard = common::shared();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join("config.toml");
    // The probe file's directory does not exist: every run of "broken" fails to open it.
    std::fs::write(&path, config(dir.path(), "1s")).unwrap();
    let agent = Agent::start(&[&format!("--config.file={}", path.display())]);
    let m = wait_until(
        &agent,
        Duration::from_secs(10),
        "the targets' series",
        |m| recent(m, "broken", "error").is_some() && recent(m, "fine", "success").is_some(),
    );
    for target in ["broken", "fine"] {
        for result in ["success", "error", "timeout"] {
            assert!(recent(&m, target, result).is_some(), "{target} {result}");
        }
        assert!(recent(&m, target, "skipped").is_none(), "no skipped window");
    }
    let m = wait_until(&agent, Duration::from_secs(20), "three failed runs", |m| {
        recent(m, "broken", "error") >= Some(3.0)
    });
    // The window counts exactly the runs there were (fewer than 10 so far).
    let counted = runs(&m, "broken", "error");
    assert!(counted <= 10.0, "{counted}");
    assert_eq!(recent(&m, "broken", "error"), Some(counted));
    assert_eq!(recent(&m, "broken", "success"), Some(0.0));
    assert_eq!(
        io_error_runs(&m, "broken"),
        Some(0.0),
        "the open failed, no I/O"
    );

    let m = wait_until(&agent, Duration::from_secs(30), "twelve failed runs", |m| {
        runs(m, "broken", "error") >= 12.0
    });
    assert_eq!(
        recent(&m, "broken", "error"),
        Some(10.0),
        "the last 10 only"
    );
    assert_eq!(recent(&m, "broken", "timeout"), Some(0.0));
    let fine = recent(&m, "fine", "success").unwrap();
    assert!((1.0..=10.0).contains(&fine), "{fine}");
    assert_eq!(recent(&m, "fine", "error"), Some(0.0));

    // Another interval: the target's counters start again, its window does not.
    std::fs::write(&path, config(dir.path(), "2s")).unwrap();
    agent.signal("HUP");
    let m = wait_until(&agent, Duration::from_secs(10), "the reload", |m| {
        m.get("diskprobe_target_interval_seconds{target=\"broken\"}") == Some(&2.0)
    });
    assert!(runs(&m, "broken", "error") < 12.0, "counters restarted");
    assert_eq!(recent(&m, "broken", "error"), Some(10.0), "window kept");
}

crate::tests! {
    a_failing_target_counts_its_last_ten_runs_and_keeps_them_across_a_reload,
}
