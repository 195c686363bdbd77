//! The machine's state never stops the agent: with one target's filesystem full at start (an ext4
//! on a loop device this test makes, mounted in its own directory, filled up), one target under
//! a mount that is missing and one on a device node that is gone, the agent starts, serves
//! diskstats and the other target's runs, and each troubled target fails its runs with its
//! reason (`diskprobe_probe_last_error_timestamp_seconds{reason}`, the log); `--config.check`
//! reports the full filesystem as a warning and exits 0; a reload keeps it so.

use crate::common::{self, Agent, loopdev, runs, sum, wait_until};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Writes a file at `path` until its filesystem is full.
fn fill_up(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
}

/// Whether `m` has a series of `name` for `target` with `reason`.
fn has(m: &common::Metrics, name: &str, target: &str, reason: &str) -> bool {
    sum(
        m,
        name,
        &[
            &format!("target=\"{target}\""),
            &format!("reason=\"{reason}\""),
        ],
    ) > 0.0
}

fn a_full_filesystem_a_missing_mount_and_a_gone_device_fail_only_their_targets() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let dev = loopdev::LoopDev::tmpfs(64 << 20);
    loopdev::mkfs(&dev, "ext4");
    let mounted = loopdev::Mount::at(&[dev.path.to_str().unwrap()], &tmp.path().join("full"));
    fill_up(&mounted.path().join("filler"));
    let full_before = common::tree(mounted.path()).into_keys().collect::<Vec<_>>();
    let fine = tmp.path().join("fine");
    std::fs::create_dir(&fine).unwrap();
    let flag = common::config_flag(
        tmp.path(),
        &format!(
            "[diskstats]\ndevice_include = \"^{}$\"\n\
             [defaults]\ninterval = \"2s\"\nruntime = \"100ms\"\nmax_duty_cycle = 0.5\n\
             profiles = [\"randread-4k-qd1-gentle\"]\n\
             [[targets]]\nname = \"full\"\npath = \"{}\"\nsize = \"16MiB\"\n\
             [[targets]]\nname = \"unmounted\"\npath = \"{}\"\nsize = \"4MiB\"\n\
             [[targets]]\nname = \"gone\"\npath = \"/dev/diskprobe-test-gone-{}\"\n\
             [[targets]]\nname = \"fine\"\npath = \"{}\"\nsize = \"4MiB\"\n",
            dev.name,
            mounted.path().join("probe.dat").display(),
            tmp.path().join("not-mounted/volume/probe.dat").display(),
            std::process::id(),
            fine.join("probe.dat").display(),
        ),
    );
    let agent = Agent::start(&[&flag]);
    let m = wait_until(
        &agent,
        Duration::from_secs(60),
        "the fine target's runs and the others' failures",
        |m| {
            runs(m, "fine", "success") >= 1.0
                && ["full", "unmounted", "gone"]
                    .iter()
                    .all(|t| runs(m, t, "error") >= 1.0)
        },
    );
    let last_error = "diskprobe_probe_last_error_timestamp_seconds";
    assert!(has(&m, last_error, "full", "no_space"), "{m:#?}");
    assert!(has(&m, last_error, "unmounted", "missing"), "{m:#?}");
    assert!(has(&m, last_error, "gone", "missing"), "{m:#?}");
    assert_eq!(
        sum(&m, last_error, &["target=\"fine\""]),
        0.0,
        "the fine target never failed"
    );
    for (target, success) in [("full", 0.0), ("fine", 1.0)] {
        assert_eq!(
            sum(
                &m,
                "diskprobe_probe_success",
                &[&format!("target=\"{target}\"")]
            ),
            success,
            "{target}"
        );
    }
    // Diskstats are served: the device under the full filesystem among them.
    assert!(
        m.keys().any(|k| k.starts_with(&format!(
            "diskprobe_disk_reads_completed_total{{device=\"{}\"",
            dev.name
        ))),
        "{m:#?}"
    );
    let log = agent.log.lock().unwrap().clone();
    assert!(
        log.contains("a target cannot run as the machine is now")
            && log.contains("targets[0].size: a probe file of 16777216 bytes"),
        "the start says why: {log}"
    );
    assert!(log.contains("not filled"), "the run says why: {log}");
    assert_eq!(
        common::tree(mounted.path()).into_keys().collect::<Vec<_>>(),
        full_before,
        "nothing made on the full filesystem"
    );
    // The check reports the full filesystem: a valid configuration the machine refuses now.
    let out = Command::new(common::binary())
        .args(["--config.check", &flag])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("warning: ")
            && stderr.contains(":11:8: targets[0].size: a probe file of 16777216 bytes"),
        "{stderr}"
    );
    // A reload of the same configuration is a successful one.
    agent.signal("HUP");
    agent.expect_log("configuration reloaded", Duration::from_secs(10));
    let m = common::scrape(&agent);
    assert_eq!(m.get("diskprobe_config_last_reload_successful"), Some(&1.0));
    drop(agent);
    drop(mounted);
}

crate::tests! {
    a_full_filesystem_a_missing_mount_and_a_gone_device_fail_only_their_targets: [LOOP],
}
