//! The scheduler in process, against a probe file: what it counts when runs are cut short.
//!
//! Both tests hold [`common::shared`] across their awaits: the guard orders them against the
//! other tests of the binary (threads of their own), and no task of the test's runtime takes it.

use crate::common;
use crate::common::wait::{INTERVAL, wait_for_async};
use diskprobe_exporter::config::Config;
use diskprobe_exporter::host::Roots;
use diskprobe_exporter::scheduler::Scheduler;
use diskprobe_exporter::series::SeriesStore;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A scheduler on the machine's /proc and /sys running the targets of configuration `text`, and
/// its series store.
async fn start(text: &str) -> (Scheduler, Arc<SeriesStore>) {
    let config = Config::from_toml(text, Path::new("test.toml")).unwrap();
    let store = Arc::new(SeriesStore::new());
    let roots = Roots {
        procfs: "/proc".into(),
        sysfs: "/sys".into(),
        devfs: "/dev".into(),
    };
    let mut scheduler = Scheduler::new(store.clone(), roots, &config.scheduler);
    scheduler.apply(&config.targets, &config.scheduler).await;
    (scheduler, store)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn a_run_cancelled_by_shutdown_is_not_counted() {
    let _guard = common::shared();
    // Capacity profiles on the machine's shared disk: without busy skip and yield, which could
    // put the run off while other processes use the disk (not what this test is about).
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let probe_file = dir.path().join("probe.dat");
    let text = format!(
        "[[targets]]\nname = \"t\"\npath = \"{}\"\nsize = \"4MiB\"\ninterval = \"1h\"\n\
         runtime = \"10s\"\ntimeout = \"20s\"\nprofiles = [\"randread-4k-qd1\"]\n\
         skip_busy_above = {{}}\nyield_to_other_io = false\n",
        probe_file.display()
    );
    let (scheduler, store) = start(&text).await;
    // The run is under way once an engine runs on its probe file (other tests of this process
    // run engines too, never on this file).
    wait_for_async(
        "the run to start",
        Duration::from_secs(30),
        INTERVAL,
        || common::process::engine_runs_on(std::process::id(), &probe_file),
    )
    .await;
    scheduler.shutdown(Duration::from_secs(4)).await;
    let (runs, last) = store.read(|t| {
        let s = &t["t"].profiles[0].1;
        (s.runs, s.last.clone())
    });
    assert_eq!(runs, [0; 4], "success, error, timeout, skipped");
    assert!(last.is_none(), "{last:?}");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn cycles_of_two_targets_on_one_device_both_complete() {
    let _guard = common::shared();
    // One global slot, given back while each run drains, and two targets on one device with
    // several profiles each: a cycle must never wait for the device while holding a slot that
    // the cycle holding the device needs for its next run.
    // Busy skip and yield are off: the capacity runs on the machine's shared disk must complete.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    // A short interval puts both first cycles within 0.5 s of each other, so that they overlap.
    let mut text = String::from(
        "[defaults]\ninterval = \"1s\"\nruntime = \"100ms\"\nsize = \"4MiB\"\nmax_duty_cycle = 1.0\n\
         profiles = [\"randread-4k-qd1\", \"randread-4k-qd32\", \"read-1m-qd16\"]\n\
         skip_busy_above = {}\nyield_to_other_io = false\n",
    );
    for name in ["a", "b"] {
        text.push_str(&format!(
            "[[targets]]\nname = \"{name}\"\npath = \"{}\"\n",
            dir.path().join(format!("{name}.dat")).display()
        ));
    }
    let (scheduler, store) = start(&text).await;
    let done = || {
        store.read(|t| {
            ["a", "b"]
                .iter()
                .all(|name| t[*name].profiles.iter().all(|(_, s)| s.runs[0] >= 3))
        })
    };
    let every = Duration::from_millis(50);
    wait_for_async(
        "the cycles to complete",
        Duration::from_secs(30),
        every,
        done,
    )
    .await;
    scheduler.shutdown(Duration::from_secs(4)).await;
}

crate::tests! {
    a_run_cancelled_by_shutdown_is_not_counted,
    cycles_of_two_targets_on_one_device_both_complete,
}
