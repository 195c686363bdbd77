//! Disks that go, as the running agent reports them: a configured target whose disk falls off
//! (its loop device detached and removed, so that its node leaves /dev as udev removes a disk's)
//! keeps naming that device in `diskprobe_target_info` while it is gone, across restarts, until
//! it returns; `[retired] disks`, applied at a reload, ends both a configured target's gone
//! device and a block discovery rule's lost disk, and stays applied across a restart.
//!
//! Each test makes its loop devices at numbers of its own ([`loopdev::free_loop_numbers`]) and
//! keeps its configuration and state directory in a directory of its own.

use crate::common;
use crate::common::loopdev;

use common::{Agent, Metrics, runs, wait_until};
use loopdev::{LoopDev, free_loop_numbers};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

/// 100 ms read runs every second, without busy skip or yield (nothing else uses these devices);
/// block rules rescan every second.
const DEFAULTS: &str = "[defaults]\ninterval = \"1s\"\nruntime = \"100ms\"\ntimeout = \"300ms\"\n\
                        jitter = 0.0\nmax_duty_cycle = 0.5\nprofiles = [\"randread-4k-qd1\"]\n\
                        skip_busy_above = {}\nyield_to_other_io = false\n";

/// A directory of the test's own under /var/tmp, readable by all: its configuration and state.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("diskprobe-gone-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// The `diskprobe_target_info` series of `target`, if exported.
fn target_info(m: &Metrics, target: &str) -> Option<String> {
    let label = format!("target=\"{target}\"");
    m.keys()
        .find(|k| k.starts_with("diskprobe_target_info{") && k.contains(&label))
        .cloned()
}

/// The `device` label of `target`'s `diskprobe_target_info`.
fn device_of(m: &Metrics, target: &str) -> Option<String> {
    let info = target_info(m, target)?;
    let start = info.find("device=\"")? + "device=\"".len();
    Some(info[start..].split('"').next()?.to_owned())
}

/// Every `diskprobe_discovered_target_lost_timestamp_seconds` series.
fn lost(m: &Metrics) -> Vec<String> {
    m.keys()
        .filter(|k| k.starts_with("diskprobe_discovered_target_lost_timestamp_seconds{"))
        .cloned()
        .collect()
}

/// The flags of an agent with `config` (written to the workspace) and the workspace's state
/// directory.
fn flags(ws: &Path, config: &str) -> [String; 2] {
    [
        common::config_flag(ws, &format!("{DEFAULTS}{config}")),
        format!("--state.dir={}", ws.join("state").display()),
    ]
}

fn start(flags: &[String; 2]) -> Agent {
    Agent::start(&[&flags[0], &flags[1]])
}

fn a_configured_targets_gone_disk_stays_its_device_across_restarts_until_it_returns() {
    if !loopdev::ready() {
        return;
    }
    // Exclusive: once removed, its number must not go to another test's loop device.
    let _guard = common::exclusive();
    let ws = workspace();
    let n = free_loop_numbers(1);
    let disk = format!("loop{n}");
    let flags = flags(
        ws.path(),
        &format!("[[targets]]\nname = \"data\"\npath = \"/dev/{disk}\"\n"),
    );
    let mut dev = LoopDev::tmpfs_at(n, 16 << 20);
    let mut agent = start(&flags);
    let m = wait_until(&agent, Duration::from_secs(30), "a probe run", |m| {
        runs(m, "data", "success") >= 1.0
    });
    let info = target_info(&m, "data").unwrap();
    assert!(
        info.contains(&format!("device=\"{disk}\"")) && info.contains("kind=\"block_device\""),
        "{info}"
    );

    // The disk falls off: /dev/loopN leaves with it. Its runs fail; its device stays.
    dev.detach();
    assert!(!Path::new(&format!("/dev/{disk}")).exists());
    let errors = runs(&common::scrape(&agent), "data", "error");
    let m = wait_until(&agent, Duration::from_secs(30), "failed runs", |m| {
        runs(m, "data", "error") >= errors + 2.0
    });
    assert_eq!(target_info(&m, "data"), Some(info.clone()), "while gone");
    let file = std::fs::read_to_string(ws.path().join("state/target_devices.json")).unwrap();
    assert!(file.contains(&format!("\"kname\": \"{disk}\"")), "{file}");

    // Restarted twice while it is gone: the same labels from the first scrape on, and after
    // the first cycle. Its runs fail, and are left out of its recent runs (which would page
    // DiskprobeProbeFailing beside DiskprobeTargetVanished, and after the disk is back).
    for _ in 0..2 {
        agent.terminate();
        agent = start(&flags);
        assert_eq!(
            target_info(&common::scrape(&agent), "data"),
            Some(info.clone())
        );
        let m = wait_until(&agent, Duration::from_secs(30), "failed runs", |m| {
            runs(m, "data", "error") >= 2.0
        });
        assert_eq!(
            target_info(&m, "data"),
            Some(info.clone()),
            "after a restart"
        );
        assert_eq!(recent(&m, "error"), 0.0, "the runs failed while gone");
        // Its runs fail for what happened; nothing is created in its node's place.
        agent.expect_log(
            "no such device (its directory is on devtmpfs",
            Duration::from_secs(5),
        );
        assert!(!Path::new(&format!("/dev/{disk}")).exists());
    }

    // Back: probed again, under its own device.
    let _back = LoopDev::tmpfs_at(n, 16 << 20);
    let m = wait_until(&agent, Duration::from_secs(30), "the disk back", |m| {
        runs(m, "data", "success") >= 1.0
    });
    assert_eq!(target_info(&m, "data"), Some(info));
    assert_eq!(recent(&m, "error"), 0.0);
}

/// `target`'s recent runs of `result` (`diskprobe_probe_recent_runs`).
fn recent(m: &Metrics, result: &str) -> f64 {
    common::sum(
        m,
        "diskprobe_probe_recent_runs",
        &["target=\"data\"", &format!("result=\"{result}\"")],
    )
}

fn retiring_disks_at_a_reload_ends_a_lost_disk_and_a_gone_targets_device() {
    if !loopdev::ready() {
        return;
    }
    // Exclusive: once removed, their numbers must not go to another test's loop devices.
    let _guard = common::exclusive();
    let ws = workspace();
    let n = free_loop_numbers(2);
    let (configured, discovered) = (format!("loop{n}"), format!("loop{}", n + 1));
    let config = format!(
        "[[targets]]\nname = \"data\"\npath = \"/dev/{configured}\"\n\
         [[discover]]\nid = \"disks\"\nkind = \"block\"\ndevice_include = \"^{discovered}$\"\n\
         name = \"disk-{{kname}}\"\nrescan = \"1s\"\nlost_retention = \"1h\"\n"
    );
    let flags = flags(ws.path(), &config);
    let mut devs = [
        LoopDev::tmpfs_at(n, 16 << 20),
        LoopDev::tmpfs_at(n + 1, 16 << 20),
    ];
    let mut agent = start(&flags);
    let target = format!("disk-{discovered}");
    wait_until(&agent, Duration::from_secs(30), "both probed", |m| {
        runs(m, "data", "success") >= 1.0 && runs(m, &target, "success") >= 1.0
    });
    for dev in &mut devs {
        dev.detach();
    }
    let errors = runs(&common::scrape(&agent), "data", "error");
    let m = wait_until(&agent, Duration::from_secs(30), "both gone", |m| {
        lost(m).len() == 1 && runs(m, "data", "error") >= errors + 1.0
    });
    assert_eq!(device_of(&m, "data").as_deref(), Some(configured.as_str()));

    // Retired, by target name (loop devices have no serial), at a reload: within a rescan.
    common::config_flag(
        ws.path(),
        &format!("{DEFAULTS}{config}[retired]\ndisks = [\"data\", \"{target}\"]\n"),
    );
    agent.signal("HUP");
    let m = wait_until(&agent, Duration::from_secs(10), "both retired", |m| {
        lost(m).is_empty() && device_of(m, "data").as_deref() == Some("")
    });
    assert_eq!(m.get("diskprobe_config_last_reload_successful"), Some(&1.0));
    let state = ws.path().join("state");
    for file in ["lost_targets.json", "target_devices.json"] {
        let text = std::fs::read_to_string(state.join(file)).unwrap();
        assert!(
            !text.contains(&configured) && !text.contains(&discovered),
            "{file}: {text}"
        );
    }
    // Still so after a restart, and after the first cycle and rescan.
    agent.terminate();
    let agent = start(&flags);
    let m = wait_until(
        &agent,
        Duration::from_secs(30),
        "a cycle and a rescan",
        |m| {
            runs(m, "data", "error") >= 1.0
                && m.contains_key("diskprobe_discovered_targets{rule=\"disks\"}")
        },
    );
    assert!(lost(&m).is_empty(), "{:?}", lost(&m));
    assert_eq!(device_of(&m, "data").as_deref(), Some(""));
}

crate::tests! {
    a_configured_targets_gone_disk_stays_its_device_across_restarts_until_it_returns: [LOOP],
    retiring_disks_at_a_reload_ends_a_lost_disk_and_a_gone_targets_device: [LOOP],
}
