//! Signals against the real binary: SIGHUP reloads atomically (a bad file keeps the old
//! configuration and says where it is wrong; `[web]` changes are reported as waiting for a
//! restart), SIGTERM lets an in-flight scrape finish and exits 0.

use crate::common;

use common::{Agent, samples};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

fn metrics(agent: &Agent) -> BTreeMap<String, f64> {
    let (status, body) = agent.get("/metrics");
    assert_eq!(status, 200);
    samples(&body).into_iter().collect()
}

fn fixture(dir: &str) -> String {
    common::repo_root()
        .join("tests/fixtures")
        .join(dir)
        .display()
        .to_string()
}

const SDA1: &str = "diskprobe_disk_reads_completed_total{device=\"sda1\"}";
const OK: &str = "diskprobe_config_last_reload_successful";
const WHEN: &str = "diskprobe_config_last_reload_success_timestamp_seconds";

fn wait_for(agent: &Agent, what: &str, mut cond: impl FnMut(&BTreeMap<String, f64>) -> bool) {
    common::wait_for(what, Duration::from_secs(10), || cond(&metrics(agent)));
}

fn sighup_applies_a_good_config_and_keeps_the_old_one_on_error() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config.toml");
    std::fs::write(&config, "[diskstats]\n").unwrap();
    let agent = Agent::start(&[
        &format!("--config.file={}", config.display()),
        &format!("--path.procfs={}", fixture("proc-6.1")),
        &format!("--path.sysfs={}", fixture("sys")),
    ]);
    let first = metrics(&agent);
    assert_eq!(first.get(SDA1), None, "default exclude hides partitions");
    assert_eq!(first.get(OK), Some(&1.0));
    let loaded_at = first[WHEN];

    // Good config: partitions appear.
    std::fs::write(&config, "[diskstats]\ndevice_exclude = \"^$\"\n").unwrap();
    agent.signal("HUP");
    // The new filter serves before the reload has finished (the scheduler and discovery are
    // given the new configuration after it): its success is stamped last, so wait for that too.
    wait_for(&agent, "sda1 and the success stamp after reload", |m| {
        m.get(SDA1) == Some(&250.0) && m.get(WHEN).is_some_and(|&at| at > loaded_at)
    });
    let reloaded = metrics(&agent);
    assert_eq!(reloaded.get(OK), Some(&1.0));
    let good_at = reloaded[WHEN];

    // Bad config: reported with its location, old filter stays, status says so.
    std::fs::write(&config, "[diskstats]\ndevice_exclude = \"(\"\n").unwrap();
    agent.signal("HUP");
    wait_for(&agent, "failed reload", |m| m.get(OK) == Some(&0.0));
    let after_bad = metrics(&agent);
    assert_eq!(
        after_bad.get(SDA1),
        Some(&250.0),
        "old configuration keeps serving"
    );
    assert_eq!(after_bad[WHEN], good_at, "success timestamp unchanged");
    let location = format!("{}:2:18", config.display());
    assert!(
        agent.wait_log(&location, Duration::from_secs(5)),
        "log should name {location}:\n{}",
        agent.log.lock().unwrap()
    );

    // Fixed again: success.
    std::fs::write(&config, "[diskstats]\ndevice_include = \"^sda$\"\n").unwrap();
    agent.signal("HUP");
    wait_for(&agent, "recovery", |m| {
        m.get(OK) == Some(&1.0) && m.get(SDA1).is_none()
    });
    assert!(metrics(&agent).contains_key("diskprobe_disk_reads_completed_total{device=\"sda\"}"));
}

fn web_changes_warn_on_every_reload_until_reverted() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config.toml");
    std::fs::write(&config, "[web]\ntelemetry_path = \"/metrics\"\n").unwrap();
    let agent = Agent::start(&[&format!("--config.file={}", config.display())]);
    let warning = "take effect only after a restart";
    let reload = |text: &str, reloads: usize| {
        std::fs::write(&config, text).unwrap();
        agent.signal("HUP");
        let reloaded = || {
            let log = agent.log.lock().unwrap();
            log.matches("configuration reloaded").count() >= reloads
        };
        common::wait_for(
            &format!("reload {reloads}"),
            Duration::from_secs(10),
            reloaded,
        );
        agent.log.lock().unwrap().matches(warning).count()
    };
    let changed = "[web]\ntelemetry_path = \"/other\"\n";
    assert_eq!(reload(changed, 1), 1);
    // Still not in use: said again.
    assert_eq!(reload(changed, 2), 2);
    // Back to what the listener serves: nothing to say, and the old path still serves.
    assert_eq!(reload("[web]\ntelemetry_path = \"/metrics\"\n", 3), 2);
    assert_eq!(agent.get("/metrics").0, 200);
    assert_eq!(agent.get("/other").0, 404);
}

fn sigterm_lets_an_in_flight_scrape_finish_and_exits_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("diskstats");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let mut agent = Agent::start(&[&format!("--path.procfs={}", tmp.path().display())]);
    let addr = agent.addr;
    // The scrape blocks reading the FIFO until we write to it and close it. It has opened the
    // FIFO once a writer can open it without waiting (ENXIO while no reader has); the writer
    // stays open, so the scrape waits for the content.
    let scrape = std::thread::spawn(move || common::http_request(addr, "GET", "/metrics", &[]));
    let mut writer = None;
    common::wait_for(
        "the scrape to open the FIFO",
        Duration::from_secs(10),
        || {
            writer = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&fifo)
                .ok();
            writer.is_some()
        },
    );
    let mut writer = writer.unwrap();
    assert!(
        !scrape.is_finished(),
        "scrape should be waiting on the FIFO"
    );
    agent.signal("TERM");
    assert!(agent.wait_log("shutting down", Duration::from_secs(5)));
    let content =
        std::fs::read_to_string(Path::new(&fixture("proc-6.1")).join("diskstats")).unwrap();
    let started = Instant::now();
    // Less than PIPE_BUF: written whole into the empty pipe, without blocking.
    writer.write_all(content.as_bytes()).unwrap();
    drop(writer);
    let resp = scrape.join().unwrap();
    assert_eq!(resp.status, 200);
    assert!(
        resp.body
            .contains("diskprobe_disk_reads_completed_total{device=\"sda\"} 25354637")
    );
    let exit = agent
        .wait_exit(Duration::from_secs(5))
        .expect("exit within 5 s");
    assert_eq!(exit.code(), Some(0));
    assert!(started.elapsed() < Duration::from_secs(5));
}

fn sigint_exits_zero_promptly() {
    let mut agent = Agent::start(&[]);
    agent.signal("INT");
    let exit = agent
        .wait_exit(Duration::from_secs(5))
        .expect("exit within 5 s");
    assert_eq!(exit.code(), Some(0));
}

crate::tests! {
    sighup_applies_a_good_config_and_keeps_the_old_one_on_error,
    web_changes_warn_on_every_reload_until_reverted,
    sigterm_lets_an_in_flight_scrape_finish_and_exits_zero,
    sigint_exits_zero_promptly,
}
