//! The series budget of a fleet: with the default classic buckets, an agent probing 8 targets ×
//! 6 profiles exposes at most 3,000 series in the text format and at most 48 KB per gzipped
//! scrape. The series per target and profile and per target are those that docs/metrics.md
//! states (its "Series count" table), so that a fleet's total computed from the docs is right.
//!
//! The real binary probes 8 files of its own on the machine's disk, one run of each profile;
//! the machine's own devices are exported as diskstats beside them.

use crate::common;

use common::{Agent, http_request_bytes, runs, wait_until};
use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

const PROFILES: [&str; 6] = [
    "randread-4k-qd1",
    "randread-4k-qd32",
    "read-1m-qd16",
    "randwrite-4k-qd1",
    "randwrite-4k-qd32",
    "write-1m-qd16",
];

/// The number in the row `| {what} | N |` of docs/metrics.md.
fn documented(what: &str) -> usize {
    let docs = std::fs::read_to_string(common::repo_root().join("docs/metrics.md")).unwrap();
    let row = format!("| {what} | ");
    docs.lines()
        .find_map(|l| l.strip_prefix(&row))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("docs/metrics.md has no row \"{row}N ...\""))
}

fn eight_targets_by_six_profiles_fit_the_budget() {
    let _guard = common::shared();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let config = dir.path().join("config.toml");
    // The six are capacity profiles, run once an hour: without busy skip and yield, so that a
    // busy moment of the machine's shared disk does not put a run off past the test.
    let mut text = format!(
        "[defaults]\ninterval = \"1h\"\nruntime = \"100ms\"\nsize = \"4MiB\"\nmax_duty_cycle = 0.5\n\
         profiles = {PROFILES:?}\nskip_busy_above = {{}}\nyield_to_other_io = false\n"
    );
    for i in 1..=8 {
        text.push_str(&format!(
            "[[targets]]\nname = \"t{i}\"\npath = \"{}\"\nallow_writes = true\n",
            dir.path().join(format!("t{i}.dat")).display()
        ));
    }
    std::fs::write(&config, text).unwrap();
    let agent = Agent::start(&[&format!("--config.file={}", config.display())]);
    wait_until(
        &agent,
        Duration::from_secs(180),
        "one run of every profile",
        |m| {
            (1..=8).all(|i| {
                let t = format!("t{i}");
                runs(m, &t, "success") + runs(m, &t, "error") + runs(m, &t, "timeout") >= 6.0
            })
        },
    );

    let (_, body) = agent.get("/metrics");
    let series: Vec<&str> = body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    let (resp, gzipped) = http_request_bytes(
        agent.addr,
        "GET",
        "/metrics",
        &[("Accept-Encoding", "gzip")],
    );
    assert_eq!(resp.header("content-encoding"), Some("gzip"));
    let mut unzipped = String::new();
    flate2::read::GzDecoder::new(&gzipped[..])
        .read_to_string(&mut unzipped)
        .unwrap();
    eprintln!(
        "8 targets × 6 profiles: {} series, {} bytes of text, {} bytes gzipped",
        series.len(),
        unzipped.len(),
        gzipped.len()
    );
    assert!(series.len() <= 3000, "{} series", series.len());
    assert!(gzipped.len() <= 48_000, "{} bytes gzipped", gzipped.len());

    // Where the series come from.
    let label = |line: &str, name: &str| {
        line.split(&format!("{name}=\""))
            .nth(1)
            .and_then(|v| v.split('"').next())
            .map(str::to_owned)
    };
    let mut per_pair: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut per_target: BTreeMap<String, usize> = BTreeMap::new();
    let mut per_device: BTreeMap<String, usize> = BTreeMap::new();
    let mut rest = 0;
    for line in &series {
        // `,target=` or `{target=`: not `otarget=` inside another label's name.
        let target = label(line, "{target").or_else(|| label(line, ",target"));
        match (target, label(line, "profile")) {
            (Some(t), Some(p)) => *per_pair.entry((t, p)).or_default() += 1,
            (Some(t), None) => *per_target.entry(t).or_default() += 1,
            _ if line.starts_with("diskprobe_disk_") => {
                *per_device
                    .entry(label(line, "device").unwrap())
                    .or_default() += 1
            }
            _ => rest += 1,
        }
    }
    assert_eq!(per_pair.len(), 48);
    assert_eq!(per_target.len(), 8);
    let pair = *per_pair.values().next().unwrap();
    assert!(per_pair.values().all(|n| *n == pair), "{per_pair:?}");
    let target = *per_target.values().next().unwrap();
    assert!(per_target.values().all(|n| *n == target), "{per_target:?}");
    eprintln!(
        "per target and profile {pair}, per target {target}, per device {per_device:?}, the rest {rest}"
    );
    assert_eq!(pair, documented("target and profile"));
    assert_eq!(target, documented("target"));
    let most_per_device = documented("device, at most");
    assert!(
        per_device.values().all(|n| *n <= most_per_device),
        "{per_device:?}"
    );
    let process = documented("agent, at most");
    assert!(rest <= process, "{rest} series outside targets and devices");
}

crate::tests! {
    eight_targets_by_six_profiles_fit_the_budget,
}
