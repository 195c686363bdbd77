//! The scheduler in process, against a probe file: what it counts when runs are cut short.

mod common;

use diskprobe_exporter::config::Config;
use diskprobe_exporter::scheduler::{Roots, Scheduler};
use diskprobe_exporter::series::SeriesStore;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Whether a thread of this process is called `name`.
fn thread_named(name: &str) -> bool {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks.filter_map(Result::ok).any(|t| {
                std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name)
            })
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cancelled_by_shutdown_is_not_counted() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let text = format!(
        "[[targets]]\nname = \"t\"\npath = \"{}\"\nsize = \"4MiB\"\ninterval = \"1h\"\n\
         runtime = \"10s\"\ntimeout = \"20s\"\nprofiles = [\"randread-4k-qd1\"]\n",
        dir.path().join("probe.dat").display()
    );
    let config = Config::from_toml(&text, Path::new("test.toml")).unwrap();
    let store = Arc::new(SeriesStore::new());
    let roots = Roots {
        procfs: "/proc".into(),
        sysfs: "/sys".into(),
    };
    let mut scheduler = Scheduler::new(store.clone(), roots, &config.scheduler);
    scheduler.apply(&config.targets, &config.scheduler).await;
    // The run is under way once its engine thread exists.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !thread_named("diskprobe-uring") && !thread_named("diskprobe-psync-0") {
        assert!(Instant::now() < deadline, "the run did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    scheduler.shutdown(Duration::from_secs(4)).await;
    let (runs, last) = store.read(|t| {
        let s = &t["t"].profiles[0].1;
        (s.runs, s.last.clone())
    });
    assert_eq!(runs, [0; 4], "success, error, timeout, skipped");
    assert!(last.is_none(), "{last:?}");
}
