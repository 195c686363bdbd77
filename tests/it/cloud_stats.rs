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
//! - A real Prometheus, with the bundled rules (`[5m]` shortened to 15 s), scraping the agent
//!   over an EBS page that grows (reads in one latency bin, half of the time over the volume's
//!   IOPS): the recorded share of time over the limit, `DiskprobeThrottled` firing with the
//!   scope that decided it and for that volume only, the cloud-side p99 in its bin, every cloud
//!   panel of the dashboards with data (their scenario in [`common::dashboards::PANELS`]) for a
//!   probe target on the volume (a loop device the fixture's sysfs names nvme1n1; needs root),
//!   no rule failing to evaluate.
//!   On Debian's Prometheus 2.42 (classic buckets) in every `cargo test`; on Prometheus 3.5 LTS
//!   as a long test (`LONG`; `.ci/run` runs it), with two servers: native histograms and
//!   protobuf scrapes, where the cloud's histogram (classic buckets only) stays classic, and the
//!   same converting it to a native histogram with custom buckets and keeping no classic series
//!   ([`Histograms::Nhcb`]): the cloud rules read it either way; and on VictoriaMetrics with
//!   vmalert (classic buckets) as a long test.
//!
//! No EBS volume is reachable from the machines these tests run on.

use crate::common;
use crate::common::loopdev::{self, LoopDev};

use common::dashboards::{self, Scenario};
use common::engines::Engine;
use common::prometheus::{Histograms, Prometheus};
use common::rule_server::RuleServer;
use common::victoria::Victoria;
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
    // Under Landlock (where the kernel has it), the ruleset's ioctl_dev on --path.devfs let the
    // command through to the kernel, which answered EINVAL, not Landlock's EACCES.
    let sandbox = body
        .lines()
        .find(|l| l.starts_with("diskprobe_sandbox_info{"))
        .unwrap_or("no diskprobe_sandbox_info");
    eprintln!("loop device posing as EBS: einval, {sandbox}");
    // The agent goes on: it still answers, and nothing was written to the device.
    let (status, _) = agent.get("/metrics");
    assert_eq!(status, 200);
}

/// Rewrites `dir/nvme1n1` (the EBS fixture page) every 200 ms until `stop`, its counters grown
/// by the time since `start`: 100 reads a second, all in the histogram's 4th bin (256-512 µs),
/// and half of the time over the volume's provisioned IOPS. Atomically (a rename), so that the
/// collector never reads half a page.
fn growing_page(dir: &Path, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    let base = std::fs::read(fixtures().join("pages/nvme1n1")).unwrap();
    let start = Instant::now();
    let add_u64 = |page: &mut [u8], at: usize, by: u64| {
        let v = u64::from_le_bytes(page[at..at + 8].try_into().unwrap()) + by;
        page[at..at + 8].copy_from_slice(&v.to_le_bytes());
    };
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let secs = start.elapsed().as_secs_f64();
        let mut page = base.clone();
        let reads = (secs * 100.0) as u64;
        add_u64(&mut page, 8, reads); // read ops
        add_u64(&mut page, 40, reads * 300); // read time, µs
        add_u64(&mut page, 56, (secs * 500_000.0) as u64); // over the volume's IOPS, µs
        let bin = 512 + 8 + 3 * 24 + 16; // read histogram, bin 3's u32 count
        let count = u32::from_le_bytes(page[bin..bin + 4].try_into().unwrap()) + reads as u32;
        page[bin..bin + 4].copy_from_slice(&count.to_le_bytes());
        let tmp = dir.join(".nvme1n1");
        std::fs::write(&tmp, &page).unwrap();
        std::fs::rename(&tmp, dir.join("nvme1n1")).unwrap();
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn a_real_prometheus_records_the_throttling_and_the_alert_says_which_limit() {
    real_prometheus(Engine::Prometheus2, &[Histograms::Classic]);
}

fn a_real_prometheus_records_the_throttling_and_the_alert_says_which_limit_on_prometheus3() {
    real_prometheus(Engine::Prometheus3, &[Histograms::Native, Histograms::Nhcb]);
}

fn a_real_prometheus_records_the_throttling_and_the_alert_says_which_limit_on_victoriametrics() {
    real_prometheus(Engine::VictoriaMetrics, &[Histograms::Classic]);
}

/// The test, with a server of `engine` per way of keeping histograms in `setups`, side by side
/// (VictoriaMetrics, with vmalert: the classic buckets).
fn real_prometheus(engine: Engine, setups: &[Histograms]) {
    if !common::rule_server::ready(engine) || !loopdev::ready() {
        return;
    }
    // vmalert's queries, one per rule, load the machine (prometheus_e2e.rs).
    let _machine = (engine == Engine::VictoriaMetrics).then(common::shared);
    let tmp = tempfile::tempdir().unwrap();
    let pages = tmp.path().join("pages");
    std::fs::create_dir(&pages).unwrap();
    for entry in std::fs::read_dir(fixtures().join("pages")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), pages.join(entry.file_name())).unwrap();
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (pages, stop) = (pages.clone(), stop.clone());
        std::thread::spawn(move || growing_page(&pages, stop))
    };
    // A probe target on the EBS volume nvme1n1: a loop device that the fixture's sysfs (a copy)
    // names nvme1n1, so that the target dashboard's cloud row has a target to show.
    let dev = LoopDev::tmpfs(8 << 20);
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixtures().join("tree"))
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(status.success());
    let tree = tmp.path().join("tree");
    std::os::unix::fs::symlink(
        "../../devices/pci0000:00/0000:00:11.0/nvme/nvme1/block/nvme1n1",
        tree.join(format!("sys/dev/block/{}:{}", dev.major, dev.minor)),
    )
    .unwrap();
    let config = common::config_flag(
        tmp.path(),
        &format!(
            "[cloud_stats]\nenabled = true\n[[targets]]\nname = \"ebs\"\npath = \"{}\"\n\
             profiles = [\"randread-4k-qd1\"]\ninterval = \"1s\"\nruntime = \"100ms\"\n\
             max_duty_cycle = 0.5\n",
            dev.path.display()
        ),
    );
    let agent = Agent::start(&[
        &format!("--path.sysfs={}", tree.join("sys").display()),
        &format!("--path.procfs={}", tree.join("proc").display()),
        &format!("--path.cloud-stats-pages={}", pages.display()),
        &config,
    ]);
    let rules = common::prometheus::shortened_rules(&[("[5m]", "[15s]")]);
    let proms: Vec<(Histograms, Box<dyn RuleServer>)> = setups
        .iter()
        .map(|&setup| {
            let home = tmp
                .path()
                .join(format!("prometheus-{setup:?}").to_lowercase());
            std::fs::create_dir(&home).unwrap();
            let prom: Box<dyn RuleServer> = match engine {
                Engine::VictoriaMetrics => Box::new(Victoria::start(&home, agent.addr, &rules)),
                _ => Box::new(Prometheus::start_with_rules(
                    engine,
                    &home,
                    agent.addr,
                    Some(&rules),
                    setup,
                )),
            };
            (setup, prom)
        })
        .collect();
    for (setup, prom) in &proms {
        check_prometheus(*setup, prom.as_ref(), &agent);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
}

/// The checks of [`real_prometheus`] on one server, which keeps histograms as `setup` says; its
/// waits allow for the time the server takes to show a moment ([`RuleServer::lag`]).
fn check_prometheus(setup: Histograms, prom: &dyn RuleServer, agent: &Agent) {
    let within = Duration::from_secs(60) + prom.lag();
    let share = r#"diskprobe:cloud_throttled:ratio_rate5m{device="nvme1n1",scope="volume"}"#;
    common::prometheus::wait_for(
        &format!("{setup:?}: the volume's share of time over its limit near 0.5"),
        within,
        || {
            prom.value(share, None)
                .is_some_and(|v| (0.35..0.65).contains(&v))
        },
    );
    // The cloud's histogram is kept as classic buckets, or with NHCB as a native histogram only.
    let classic = prom.value(
        r#"count(diskprobe_cloud_io_latency_seconds_bucket{device="nvme1n1"})"#,
        None,
    );
    let native = prom.value(
        // `count` counts native histograms in PromQL; MetricsQL has no `histogram_count`.
        r#"count(diskprobe_cloud_io_latency_seconds{device="nvme1n1"})"#,
        None,
    );
    let kept = match setup {
        Histograms::Classic | Histograms::Native => {
            classic.is_some_and(|n| n > 0.0) && native.is_none()
        }
        Histograms::Nhcb => classic.is_none() && native.is_some_and(|n| n > 0.0),
    };
    assert!(
        kept,
        "{setup:?}: classic buckets {classic:?}, native histograms {native:?}"
    );
    let instance = r#"diskprobe:cloud_throttled:ratio_rate5m{device="nvme1n1",scope="instance"}"#;
    assert_eq!(prom.value(instance, None), Some(0.0));
    common::prometheus::wait_for(
        &format!("{setup:?}: DiskprobeThrottled firing for the volume's own limit"),
        within,
        || {
            prom.value(
                r#"ALERTS{alertname="DiskprobeThrottled",alertstate="firing",device="nvme1n1",scope="volume",volume_id="vol-0123456789abcdef0"}"#,
                None,
            ) == Some(1.0)
        },
    );
    // The other volumes stay silent: the instance store reports no growth, the broken pages none.
    assert_eq!(
        prom.value(r#"count(ALERTS{alertname="DiskprobeThrottled"})"#, None),
        Some(1.0)
    );
    // The cloud-side p99 of reads: all new reads are in the 256-512 µs bin.
    let p99 = prom
        .value(
            r#"diskprobe:cloud_io_latency_seconds:p99_rate5m{device="nvme1n1",op="read"}"#,
            None,
        )
        .unwrap_or_else(|| panic!("{setup:?}: no cloud-side p99 of reads"));
    assert!((0.000256..=0.000512).contains(&p99), "{setup:?}: p99 {p99}");
    // The dashboards' cloud panels (their scenario in common/dashboards.rs): every query
    // accepted, each panel with data for the target on the volume, and its table rows with the
    // labels their links read.
    let vars = [
        ("cluster", ".*".to_owned()),
        ("instance", agent.addr.to_string()),
        ("target", "ebs".to_owned()),
        ("profile", "randread-4k-qd1".to_owned()),
        ("device", "nvme1n1".to_owned()),
    ];
    let mut cloud_panels = 0;
    for file in dashboards::FILES {
        for panel in dashboards::panel_queries(file, &vars) {
            if panel.scenario() != Some(Scenario::Cloud) {
                continue;
            }
            cloud_panels += 1;
            let what = format!("{setup:?}: {file}: {:?}", panel.title);
            let mut data = false;
            for (expr, _) in &panel.queries {
                let answer = prom
                    .get_json(&format!(
                        "/api/v1/query?query={}&time={:.3}",
                        common::prometheus::urlencode(expr),
                        prom.view_time()
                    ))
                    .unwrap();
                assert_eq!(answer["status"], "success", "{what}: {expr}: {answer}");
                let result = answer["data"]["result"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                data |= !result.is_empty();
                let problems = panel.link_problems(&result);
                assert!(
                    problems.is_empty(),
                    "{what}: {expr}: {}",
                    problems.join("\n")
                );
                // The volume under the probe target has its target (a link to follow).
                if panel.link_fields.iter().any(|f| f == "target") {
                    assert!(
                        result.iter().any(|r| r["metric"]["device"] == "nvme1n1"
                            && r["metric"]["target"] == "ebs"),
                        "{what}: no row of nvme1n1 with its target: {result:?}"
                    );
                }
            }
            assert!(data, "{what}: no data from {:?}", panel.queries);
        }
    }
    let listed = dashboards::PANELS
        .iter()
        .filter(|(_, _, s)| *s == Scenario::Cloud)
        .count();
    assert_eq!(cloud_panels, listed, "cloud panels found and listed");
    let problems = prom.rule_problems();
    assert!(problems.is_empty(), "{setup:?}: {}", problems.join("\n"));
}

crate::tests! {
    golden_output_of_the_published_layout: [PROMTOOL],
    per_size_histograms_are_behind_their_option,
    without_cap_sys_admin_the_agent_runs_on_and_says_why,
    a_loop_device_posing_as_ebs_answers_einval: [LOOP],
    a_real_prometheus_records_the_throttling_and_the_alert_says_which_limit: [LOOP],
    a_real_prometheus_records_the_throttling_and_the_alert_says_which_limit_on_prometheus3: [LONG, LOOP],
    a_real_prometheus_records_the_throttling_and_the_alert_says_which_limit_on_victoriametrics: [LONG, LOOP],
}
