//! `[cloud_stats]`: EC2's NVMe performance statistics (log page 0xD0), end to end.
//!
//! - The real binary over the fixtures of tests/fixtures/cloud_stats (pages built by
//!   make_fixtures.py from the published layout: EBS, instance store with its per-size block, a
//!   truncated page, a wrong magic, an unknown version; a non-AWS NVMe disk that must not be
//!   asked), read through `--path.cloud-stats-pages`: the exposition is diffed against
//!   tests/golden/cloud_stats.txt (regenerate with `UPDATE_GOLDEN=1 cargo test --test it
//!   cloud_stats::`) and passes `promtool check metrics`; each broken page exports its reason and
//!   is logged once, however often it is scraped.
//! - Without `CAP_SYS_ADMIN` the agent runs on and says why (`no_cap_sys_admin`).
//! - The ioctl for real: a loop device posing as an EBS volume (the aws-ebs sysfs fixture with
//!   the loop device's major:minor, and a `--path.devfs` directory with a node made by `mknod`)
//!   gets the kernel's EINVAL, exported as the reason; the agent goes on. Needs root (skipped
//!   with a reason otherwise, failed under `DISKPROBE_TEST_STRICT=1`).
//!
//! No EBS volume is reachable from the machines these tests run on.

use crate::common;
use crate::common::loopdev::{self, LoopDev};

use common::{Agent, check_golden};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn fixtures() -> PathBuf {
    common::repo_root().join("tests/fixtures/cloud_stats")
}

fn config(dir: &Path, size_histograms: bool) -> String {
    common::config_flag(
        dir,
        &format!("[cloud_stats]\nenabled = true\nsize_histograms = {size_histograms}\n"),
    )
}

/// The `diskprobe_cloud_*` lines of an exposition (with their HELP and TYPE).
fn cloud_lines(exposition: &str) -> String {
    exposition
        .lines()
        .filter(|l| l.contains("diskprobe_cloud_"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// How many log lines of `agent` say `reason`.
fn logged(agent: &Agent, reason: &str) -> usize {
    let needle = format!("reason={reason}");
    agent
        .log
        .lock()
        .unwrap()
        .lines()
        .filter(|l| l.contains(&needle))
        .count()
}

/// Scrapes twice, the second time after the collector's minimum interval (so that every page
/// is read again); the second body.
fn scrape_twice(agent: &Agent) -> String {
    let (status, _) = agent.get("/metrics");
    assert_eq!(status, 200);
    let first = Instant::now();
    common::wait_for(
        "the collector's minimum interval",
        Duration::from_secs(5),
        || first.elapsed() > Duration::from_millis(1100),
    );
    let (status, body) = agent.get("/metrics");
    assert_eq!(status, 200);
    body
}

#[test]
fn golden_output_of_the_published_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = fixtures().join("tree");
    let agent = Agent::start(&[
        &format!("--path.sysfs={}", tree.join("sys").display()),
        &format!("--path.procfs={}", tree.join("proc").display()),
        &format!(
            "--path.cloud-stats-pages={}",
            fixtures().join("pages").display()
        ),
        &config(tmp.path(), true),
    ]);
    let body = scrape_twice(&agent);
    common::promtool_check_metrics(&body);
    assert!(
        body.contains(r#"diskprobe_scrape_collector_success{collector="cloud_stats"} 1"#),
        "{body}"
    );
    for (device, reason) in [
        ("nvme3n1", "short_page"),
        ("nvme4n1", "unknown_magic"),
        ("nvme5n1", "unknown_version"),
    ] {
        let head = format!(r#"diskprobe_cloud_stats_failure_info{{device="{device}","#);
        let tail = format!(r#"reason="{reason}"}} 1"#);
        assert!(
            body.lines()
                .any(|l| l.starts_with(&head) && l.ends_with(&tail)),
            "{device}: no {reason} in\n{body}"
        );
        assert_eq!(logged(&agent, reason), 1, "{}", agent.log.lock().unwrap());
    }
    // The Samsung disk is not asked (it has no page file: asking would be open_failed).
    assert!(!cloud_lines(&body).contains("nvme6n1"), "{body}");
    assert_eq!(logged(&agent, "open_failed"), 0);
    check_golden("cloud_stats.txt", &cloud_lines(&body), "cloud_stats");
    // Every family is in docs/metrics.md (metrics_docs.rs runs without [cloud_stats]).
    let docs = std::fs::read_to_string(common::repo_root().join("docs/metrics.md")).unwrap();
    let families: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE diskprobe_cloud_"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(families.len(), 13, "{families:?}");
    for f in families {
        assert!(
            docs.contains(&format!("`diskprobe_cloud_{f}`")),
            "diskprobe_cloud_{f} missing from docs/metrics.md"
        );
    }
}

#[test]
fn per_size_histograms_are_behind_their_option() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = fixtures().join("tree");
    let agent = Agent::start(&[
        &format!("--path.sysfs={}", tree.join("sys").display()),
        &format!("--path.procfs={}", tree.join("proc").display()),
        &format!(
            "--path.cloud-stats-pages={}",
            fixtures().join("pages").display()
        ),
        &config(tmp.path(), false),
    ]);
    let (status, body) = agent.get("/metrics");
    assert_eq!(status, 200);
    assert!(
        body.contains("diskprobe_cloud_io_latency_seconds_bucket"),
        "{body}"
    );
    assert!(
        !body.contains("diskprobe_cloud_io_latency_by_size_seconds"),
        "{body}"
    );
}

/// The agent's command line for the aws-ebs fixture with device nodes under `devfs`.
fn device_args(sysfs: &Path, devfs: &Path, config: &str) -> Vec<String> {
    vec![
        format!("--path.sysfs={}", sysfs.display()),
        format!("--path.devfs={}", devfs.display()),
        config.to_owned(),
    ]
}

#[test]
fn without_cap_sys_admin_the_agent_runs_on_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let sysfs = common::repo_root().join("tests/fixtures/blockdev/aws-ebs/sys");
    let devfs = tmp.path().join("dev");
    std::fs::create_dir(&devfs).unwrap();
    let args = device_args(&sysfs, &devfs, &config(tmp.path(), false));
    let agent = if common::is_root() {
        // Root drops the capability from every set, as an unprivileged unit runs.
        let Some(setpriv) = common::which("setpriv") else {
            common::require(false, "setpriv (util-linux), to drop CAP_SYS_ADMIN");
            return;
        };
        let mut cmd = std::process::Command::new(setpriv);
        cmd.args(["--inh-caps=-sys_admin", "--bounding-set=-sys_admin", "--"])
            .arg(common::binary())
            .args(&args)
            .arg(format!(
                "--state.dir={}",
                tmp.path().join("state").display()
            ));
        Agent::start_command(cmd)
    } else {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Agent::start(&args)
    };
    let body = scrape_twice(&agent);
    assert!(
        body.contains(r#"diskprobe_cloud_stats_failure_info{device="nvme1n1",serial="vol0123456789abcdef0",volume_id="vol-0123456789abcdef0",reason="no_cap_sys_admin"} 1"#),
        "{body}"
    );
    assert!(
        body.contains(r#"diskprobe_scrape_collector_success{collector="cloud_stats"} 1"#),
        "{body}"
    );
    assert_eq!(
        logged(&agent, "no_cap_sys_admin"),
        1,
        "{}",
        agent.log.lock().unwrap()
    );
}

/// Copies the aws-ebs sysfs fixture into `dir`, its EBS disk at `major:minor`.
fn ebs_tree_at(dir: &Path, major: u32, minor: u32) -> PathBuf {
    let src = common::repo_root().join("tests/fixtures/blockdev/aws-ebs/sys");
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success());
    let sysfs = dir.join("sys");
    let disk = std::fs::canonicalize(sysfs.join("block/nvme1n1")).unwrap();
    std::fs::write(disk.join("dev"), format!("{major}:{minor}\n")).unwrap();
    sysfs
}

#[test]
fn a_loop_device_posing_as_ebs_answers_einval() {
    if !loopdev::ready() {
        return;
    }
    let _lock = common::shared();
    let dev = LoopDev::tmpfs(1 << 20);
    let tmp = tempfile::tempdir().unwrap();
    let sysfs = ebs_tree_at(tmp.path(), dev.major, dev.minor);
    let devfs = tmp.path().join("dev");
    std::fs::create_dir(&devfs).unwrap();
    let node = devfs.join("nvme1n1");
    let status = std::process::Command::new("mknod")
        .arg(&node)
        .arg("b")
        .arg(dev.major.to_string())
        .arg(dev.minor.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "mknod {}", node.display());
    let args = device_args(&sysfs, &devfs, &config(tmp.path(), false));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let agent = Agent::start(&args);
    let body = scrape_twice(&agent);
    assert!(
        body.contains(r#"diskprobe_cloud_stats_failure_info{device="nvme1n1",serial="vol0123456789abcdef0",volume_id="vol-0123456789abcdef0",reason="einval"} 1"#),
        "{body}\n{}",
        agent.log.lock().unwrap()
    );
    assert!(
        body.contains(r#"diskprobe_scrape_collector_success{collector="cloud_stats"} 1"#),
        "{body}"
    );
    assert_eq!(logged(&agent, "einval"), 1, "{}", agent.log.lock().unwrap());
    // The agent goes on: it still answers, and nothing was written to the device.
    let (status, _) = agent.get("/metrics");
    assert_eq!(status, 200);
}
