//! Write safety as the world changes under the agent (docs/deployment.md, Safety): a write target
//! whose bytes are also another device's is refused while that device is in use, a write target
//! whose node comes to name another disk is refused, and `--config.check` says the same.
//!
//! - A loop device over a mounted loop device, and a second loop device over a mounted loop
//!   device's image file: allowed while the lower device is unmounted, refused once it is
//!   mounted (the mount retried while a run holds it claimed), with not one byte of the mounted
//!   device changed, `diskprobe_target_write_refused{reason="mounted"}` and the layer named;
//!   `--config.check` refuses both.
//! - A loop device detached and another image attached at its node: the pinned target is not
//!   written (checksum), says why (old and new disk, the id to retire), and writes again once
//!   `[retired] disks` names the old disk at a reload.
//! - `--config.check` refuses an active swap area, and names the mounted whole disk of a
//!   partition.
//!
//! Every device is a loop device over a file the test made; filesystems are mounted read-only
//! (`ro,noload`), so that nothing but a probe could change their bytes.

use crate::common;
use crate::common::loopdev;

use common::{Agent, Metrics, runs, wait_until};
use loopdev::{LoopDev, Mount, free_loop_numbers, mkfs};
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// 100 ms write runs every second, without busy skip or yield (nothing else uses these
/// devices).
const DEFAULTS: &str = "[defaults]\ninterval = \"1s\"\nruntime = \"100ms\"\ntimeout = \"300ms\"\n\
                        jitter = 0.0\nmax_duty_cycle = 0.5\nprofiles = [\"randwrite-4k-qd1\"]\n\
                        skip_busy_above = {}\nyield_to_other_io = false\n";

/// A directory of the test's own under /var/tmp: its configuration and state.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("diskprobe-write-safety-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// `[[targets]]` entries writing to each `(name, path)` (a block device).
fn targets(list: &[(&str, &Path)]) -> String {
    list.iter()
        .map(|(name, path)| {
            format!(
                "[[targets]]\nname = \"{name}\"\npath = \"{}\"\n\
                 allow_writes = true\nallow_device_writes = true\n",
                path.display()
            )
        })
        .collect()
}

/// Writes `config` (after [`DEFAULTS`]) to the workspace and returns the agent's flags.
fn flags(ws: &Path, config: &str) -> [String; 2] {
    [
        common::config_flag(ws, &format!("{DEFAULTS}{config}")),
        format!("--state.dir={}", ws.join("state").display()),
    ]
}

/// `--config.check` of `flags`: its exit code and standard error.
fn check(flags: &[String; 2]) -> (Option<i32>, String) {
    let out = Command::new(common::binary())
        .args(flags)
        .arg("--config.check")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn hash(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// `diskprobe_target_write_refused{target, reason}`, 0 when absent.
fn refused(m: &Metrics, target: &str, reason: &str) -> f64 {
    common::sum(
        m,
        "diskprobe_target_write_refused",
        &[
            &format!("target=\"{target}\""),
            &format!("reason=\"{reason}\""),
        ],
    )
}

/// Mounts `dev` read-only without replaying its journal, retrying while a probe run holds it
/// claimed (mount fails with EBUSY then).
fn mount_read_only(dev: &LoopDev) -> Mount {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let target = dir.path().to_owned();
    common::wait_for(
        "the mount (retried while a run claims the device)",
        Duration::from_secs(10),
        || {
            Command::new("mount")
                .args(["-o", "ro,noload"])
                .arg(&dev.path)
                .arg(&target)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        },
    );
    Mount::adopt(dir)
}

fn a_loop_device_over_a_mounted_loop_device_or_its_image_is_never_written() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    // A 16 MiB filesystem on the first half of a 32 MiB device; the targets write the second
    // half only, so that the filesystem still mounts after the runs allowed while it was not.
    let lower = LoopDev::tmpfs(32 << 20);
    let status = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&lower.path)
        .arg("16M")
        .status()
        .unwrap();
    assert!(status.success(), "mkfs.ext4");
    // Dropped before `lower`: detached first.
    let over_device = LoopDev::over_file(&lower.path, &[]);
    let over_file = LoopDev::over_file(&lower.backing, &[]);
    let ws = workspace();
    let region = "offset = \"16MiB\"\nsize = \"16MiB\"\n";
    let flags = flags(
        ws.path(),
        &targets(&[
            ("over-device", &over_device.path),
            ("over-file", &over_file.path),
        ])
        .replace(
            "allow_device_writes = true\n",
            &format!("allow_device_writes = true\n{region}"),
        ),
    );
    // Unmounted: nothing else uses those bytes, and writes are allowed.
    let (code, stderr) = check(&flags);
    assert_eq!(code, Some(0), "{stderr}");
    let agent = Agent::start(&[&flags[0], &flags[1]]);
    wait_until(&agent, Duration::from_secs(30), "writes to both", |m| {
        runs(m, "over-device", "success") >= 1.0 && runs(m, "over-file", "success") >= 1.0
    });

    let mount = mount_read_only(&lower);
    let before = hash(&lower.content());
    let tried = |m: &Metrics, target: &str| runs(m, target, "success") + runs(m, target, "error");
    let m = common::scrape(&agent);
    let start = [tried(&m, "over-device"), tried(&m, "over-file")];
    let m = wait_until(&agent, Duration::from_secs(30), "three runs each", |m| {
        tried(m, "over-device") >= start[0] + 3.0 && tried(m, "over-file") >= start[1] + 3.0
    });
    // Not one byte of the mounted device changed.
    assert_eq!(hash(&lower.content()), before, "the mounted device changed");
    // The runs were refused, visibly, each naming the layer in use.
    assert_eq!(refused(&m, "over-device", "mounted"), 1.0, "{m:?}");
    assert_eq!(refused(&m, "over-file", "mounted"), 1.0);
    let layer = |role: &str| format!("{} ({}), {role}, is mounted", lower.name, lower.majmin());
    agent.expect_log(
        &layer(&format!("which {} is backed by", over_device.name)),
        Duration::from_secs(5),
    );
    agent.expect_log(
        &layer(&format!(
            "a loop device over the same file as {}",
            over_file.name
        )),
        Duration::from_secs(5),
    );
    // The configuration check says the same: a valid configuration the machine refuses now.
    let (code, stderr) = check(&flags);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&layer(&format!("which {} is backed by", over_device.name))),
        "{stderr}"
    );
    drop(agent);
    drop(mount);
}

/// What a pin refusal names a loop device's disk by: `backing-file-MAJ:MIN:INODE` of its file.
fn backing_id(dev: &LoopDev) -> String {
    let meta = std::fs::metadata(&dev.backing).unwrap();
    format!(
        "backing-file-{}:{}:{}",
        libc::major(meta.dev()),
        libc::minor(meta.dev()),
        meta.ino()
    )
}

fn a_write_target_whose_node_comes_to_name_another_image_is_not_written() {
    if !loopdev::ready() {
        return;
    }
    // Exclusive: once removed, its number must not go to another test's loop device.
    let _guard = common::exclusive();
    let ws = workspace();
    let n = free_loop_numbers(1);
    let node = format!("/dev/loop{n}");
    let config = targets(&[("data", Path::new(&node))]);
    let flags = flags(ws.path(), &config);
    let mut first = LoopDev::tmpfs_at(n, 16 << 20);
    let agent = Agent::start(&[&flags[0], &flags[1]]);
    wait_until(&agent, Duration::from_secs(30), "a write run", |m| {
        runs(m, "data", "success") >= 1.0
    });

    // Another image attached at the same node (losetup -d, then losetup /dev/loopN other.img).
    first.detach_keeping_node();
    let mut second = LoopDev::tmpfs_at(n, 16 << 20);
    let before = hash(&second.content());
    let tried = |m: &Metrics| runs(m, "data", "success") + runs(m, "data", "error");
    let start = tried(&common::scrape(&agent));
    let m = wait_until(&agent, Duration::from_secs(30), "three runs", |m| {
        tried(m) >= start + 3.0
    });
    assert_eq!(
        hash(&second.content()),
        before,
        "the other image was written"
    );
    assert_eq!(refused(&m, "data", "not_the_pinned_disk"), 1.0, "{m:?}");
    let id = backing_id(&first);
    agent.expect_log(
        "not the disk the target was allowed on: backing was file",
        Duration::from_secs(5),
    );
    agent.expect_log(&format!("pinned to loop{n} (7:"), Duration::from_secs(5));
    agent.expect_log(
        &format!("add \\\"{id}\\\" to [retired] disks"),
        Duration::from_secs(5),
    );
    let state = std::fs::read_to_string(ws.path().join("state/target_devices.json")).unwrap();
    assert!(
        state.contains("\"pins\"") && state.contains("\"diskseq\""),
        "{state}"
    );

    // Accepted on purpose: the old disk retired at a reload. The next write run pins the disk
    // there now, and writes it.
    let with_retired = |ids: &[&str]| {
        let list: Vec<String> = ids.iter().map(|i| format!("\"{i}\"")).collect();
        format!(
            "{DEFAULTS}{config}[retired]\ndisks = [{}]\n",
            list.join(", ")
        )
    };
    common::config_flag(ws.path(), &with_retired(&[&id]));
    agent.signal("HUP");
    let m = wait_until(&agent, Duration::from_secs(30), "writes again", |m| {
        refused(m, "data", "not_the_pinned_disk") == 0.0 && runs(m, "data", "success") >= 2.0
    });
    assert_eq!(m.get("diskprobe_config_last_reload_successful"), Some(&1.0));
    assert_ne!(hash(&second.content()), before, "accepted, it is written");

    // A disk replaced as the kernel replaces one (its node removed and made anew, as udev does
    // for /dev/sdX): refused for the same reason; retired at a reload, refused by the sandbox
    // (confined by Landlock, the agent writes only to the node it was started with), which says
    // so; accepted by a restart.
    let second_id = backing_id(&second);
    second.detach();
    drop(second);
    let third = LoopDev::tmpfs_at(n, 16 << 20);
    let before = hash(&third.content());
    let start = tried(&common::scrape(&agent));
    let m = wait_until(&agent, Duration::from_secs(30), "three runs", |m| {
        tried(m) >= start + 3.0
    });
    assert_eq!(
        hash(&third.content()),
        before,
        "the third image was written"
    );
    assert_eq!(refused(&m, "data", "not_the_pinned_disk"), 1.0, "{m:?}");
    common::config_flag(ws.path(), &with_retired(&[&id, &second_id]));
    agent.signal("HUP");
    if common::sum(&m, "diskprobe_sandbox_info", &["enforced=\"full\""]) == 1.0 {
        agent.expect_log(
            "Landlock sandbox: the agent may write only to the device nodes its targets named when it started",
            Duration::from_secs(30),
        );
    }
    assert_eq!(
        hash(&third.content()),
        before,
        "the third image was written"
    );
    drop(agent);
    let agent = Agent::start(&[&flags[0], &flags[1]]);
    wait_until(&agent, Duration::from_secs(30), "writes again", |m| {
        runs(m, "data", "success") >= 1.0
    });
    assert_ne!(hash(&third.content()), before, "accepted, it is written");
    drop(agent);
    drop(first);
}

/// A swap area on a test's device, turned off on drop.
struct Swap<'a>(&'a LoopDev);

impl<'a> Swap<'a> {
    fn on(dev: &'a LoopDev) -> Swap<'a> {
        for (cmd, what) in [("mkswap", "mkswap"), ("swapon", "swapon")] {
            let status = Command::new(cmd)
                .arg(&dev.path)
                .stdout(std::process::Stdio::null())
                .status()
                .unwrap_or_else(|e| panic!("run {what}: {e}"));
            assert!(status.success(), "{what} {}", dev.path.display());
        }
        Swap(dev)
    }
}

impl Drop for Swap<'_> {
    fn drop(&mut self) {
        let _ = Command::new("swapoff").arg(&self.0.path).status();
    }
}

fn config_check_refuses_an_active_swap_area_and_names_a_partitions_mounted_whole_disk() {
    if !loopdev::ready() {
        return;
    }
    let _guard = common::shared();
    let ws = workspace();
    let swap_dev = LoopDev::tmpfs(16 << 20);
    let swap = Swap::on(&swap_dev);
    let (code, stderr) = check(&flags(ws.path(), &targets(&[("swap", &swap_dev.path)])));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the device {} ({}) is a swap area in use",
            swap_dev.name,
            swap_dev.majmin()
        )),
        "{stderr}"
    );
    drop(swap);
    let (code, stderr) = check(&flags(ws.path(), &targets(&[("swap", &swap_dev.path)])));
    assert_eq!(code, Some(0), "swap off: {stderr}");

    // A partition whose whole disk holds a mounted filesystem.
    let disk = LoopDev::disk_partitioned(16 << 20, &[(2048, 8192)]);
    let part = disk.partition(1);
    mkfs(&disk, "ext4");
    let mount = mount_read_only(&disk);
    let (code, stderr) = check(&flags(ws.path(), &targets(&[("part", &part)])));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{} ({}), the whole disk of partition {}p1, is mounted",
            disk.name,
            disk.majmin(),
            disk.name
        )),
        "{stderr}"
    );
    drop(mount);
}

crate::tests! {
    a_loop_device_over_a_mounted_loop_device_or_its_image_is_never_written: [LOOP],
    a_write_target_whose_node_comes_to_name_another_image_is_not_written: [LOOP],
    config_check_refuses_an_active_swap_area_and_names_a_partitions_mounted_whole_disk: [LOOP],
}
