//! Every metric family the binary exposes is documented in docs/metrics.md, and the whole
//! exposition (probe results included, and the failures of a target under a missing mount)
//! passes `promtool check metrics` with no findings.

use crate::common;

use common::Agent;
use std::time::Duration;

fn every_exposed_family_is_documented_and_promtool_clean() {
    let _guard = common::shared();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let config = common::config_flag(
        dir.path(),
        &format!(
            "[diskstats]\ndevice_exclude = \"^$\"\n[defaults]\ninterval = \"1s\"\nruntime = \"100ms\"\nmax_duty_cycle = 0.5\n\
             [limits]\ndevices = \".\"\niops_limit = 12800\nthroughput_limit = \"290MB/s\"\n\
             [[targets]]\nname = \"docs\"\npath = \"{}\"\nsize = \"16MiB\"\niops_limit = 3000\nthroughput_limit = \"125MiB/s\"\n\
             [[targets]]\nname = \"docs-unmounted\"\npath = \"{}\"\nsize = \"4MiB\"\n\
             [[discover]]\nid = \"docs\"\nkind = \"mount\"\nmountpoint_include = \"^/nonexistent-diskprobe-docs$\"\n",
            dir.path().join("probe.dat").display(),
            dir.path().join("not-mounted/probe.dat").display()
        ),
    );
    let agent = Agent::start(&[&config]);
    let (timeout, every) = (Duration::from_secs(60), Duration::from_millis(100));
    let body = common::wait::poll(timeout, every, || {
        let (_, body) = agent.get("/metrics");
        let complete = body.contains("diskprobe_probe_success{")
            && body.contains("diskprobe_engine_info{")
            && body.contains("diskprobe_discovery_last_rescan_timestamp_seconds{")
            && body.contains("diskprobe_disk_limit_bytes_per_second{")
            && body.contains("diskprobe_probe_last_error_timestamp_seconds{");
        if complete { Ok(body) } else { Err(()) }
    })
    .unwrap_or_else(|()| panic!("no probe results:\n{}", agent.log.lock().unwrap()));
    let docs = std::fs::read_to_string(common::repo_root().join("docs/metrics.md")).unwrap();
    let families: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(families.len() > 30, "{families:?}");
    let missing: Vec<&&str> = families
        .iter()
        .filter(|f| !docs.contains(&format!("`{f}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "families missing from docs/metrics.md: {missing:?}"
    );

    common::promtool_check_metrics(&body);
}

crate::tests! {
    every_exposed_family_is_documented_and_promtool_clean: [PROMTOOL],
}
