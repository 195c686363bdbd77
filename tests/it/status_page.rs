//! The landing page, rendered by a real browser (Debian's headless Chromium): it shows each
//! target's last results and an SVG latency chart, and a screenshot of it is produced.

use crate::common;

use common::{Agent, which};
use std::process::Command;
use std::time::Duration;

fn chromium() -> Option<std::path::PathBuf> {
    which("chromium").or_else(|| which("chromium-browser"))
}

fn headless(browser: &std::path::Path, profile: &std::path::Path) -> Command {
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    cmd
}

fn status_page_renders_results_and_charts_in_chromium() {
    let Some(browser) = chromium() else {
        common::require(false, "chromium (Debian package chromium)");
        return;
    };
    // The agent probes a file, and a browser starts twice.
    let _guard = common::shared();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let config = common::config_flag(
        dir.path(),
        &format!(
            "[defaults]\ninterval = \"1s\"\nruntime = \"100ms\"\nmax_duty_cycle = 0.5\n\
             [[targets]]\nname = \"page-<test>\"\npath = \"{}\"\nsize = \"16MiB\"\nallow_writes = true\n",
            dir.path().join("probe.dat").display()
        ),
    );
    let agent = Agent::start(&[&config]);
    // Both default profiles have succeeded once.
    let (timeout, every) = (Duration::from_secs(60), Duration::from_millis(200));
    let succeeded = || agent.get("/").1.matches("class=\"ok\"").count() >= 2;
    if common::wait::poll(timeout, every, || succeeded().then_some(()).ok_or(())).is_err() {
        panic!("no successful runs:\n{}", agent.log.lock().unwrap());
    }
    // A few points for each chart.
    for profile in ["randread-4k-qd1-gentle", "randwrite-4k-qd1-gentle"] {
        let p = format!("profile=\"{profile}\"");
        common::wait_until(&agent, Duration::from_secs(60), "three runs", |m| {
            common::sum(
                m,
                "diskprobe_probe_runs_total",
                &["target=\"page-<test>\"", &p, "result=\"success\""],
            ) >= 3.0
        });
    }
    let url = format!("http://{}/", agent.addr);

    let dom = headless(&browser, &dir.path().join("profile-dom"))
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("run chromium --dump-dom");
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.contains("<h2>page-&lt;test&gt;</h2>"),
        "target name escaped and shown:\n{dom}"
    );
    assert!(dom.contains(">success<"), "{dom}");
    assert!(dom.contains("randwrite-4k-qd1-gentle"));
    assert!(
        dom.matches("<polyline").count() >= 4,
        "two lines per profile chart:\n{dom}"
    );

    let png = dir.path().join("status.png");
    let out = headless(&browser, &dir.path().join("profile-shot"))
        .arg(format!("--screenshot={}", png.display()))
        .arg(&url)
        .output()
        .expect("run chromium --screenshot");
    let bytes = std::fs::read(&png).unwrap_or_else(|e| {
        panic!(
            "no screenshot ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(
        bytes.len() > 20_000,
        "suspiciously small screenshot: {} bytes",
        bytes.len()
    );
    if let Ok(keep) = std::env::var("DISKPROBE_KEEP_SCREENSHOT") {
        std::fs::copy(&png, keep).unwrap();
    }
}

crate::tests! {
    status_page_renders_results_and_charts_in_chromium: [CHROMIUM],
}
