//! `diskprobe_probe_*` (the windows of the last runs, `diskprobe_probe_recent_*`, among them),
//! `diskprobe_io_*`, the sync series of profiles that sync (`diskprobe_probe_sync_latency_seconds`,
//! `diskprobe_probe_recent_sync_latency_seconds`, `diskprobe_syncs_total`,
//! `diskprobe_sync_latency_seconds`), `diskprobe_target_info` (with the target's `cohort`),
//! `diskprobe_profile_info` and `diskprobe_engine_info`: the results of probe runs, read from
//! [`SeriesStore`] on every scrape.
//!
//! Every per-run and cumulative series carries `target`, `profile` and `device` (the kernel name
//! of the block device under the target, as in `diskprobe_disk_*`), so PromQL can join probe
//! results with diskstats. A target removed by a reload disappears with all its series.
//!
//! The families are one table, `FAMILIES`, in exposition order: a row names a family and says
//! where its samples come from (`SampleSource`); adding a metric is adding a row.

use super::{CollectError, Collector};
use crate::config::name_template;
use crate::exposition::{Family, Labels, MetricKind, Value, labels};
use crate::probe::measurement::{ErrorReason, LatencySummary, RunStatus, SkipReason};
use crate::series::recent::FINISHED;
use crate::series::{LastRun, ProfileSeries, SeriesStore, TargetInfo, TargetSeries};
use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

/// `result` label values in [`RunStatus::ALL`] order, shared by every scrape.
static RESULT_VALUES: LazyLock<[Arc<str>; 4]> =
    LazyLock::new(|| RunStatus::ALL.map(|r| Arc::from(r.as_str())));

/// `result` label values of finished runs in [`FINISHED`] order.
static FINISHED_VALUES: LazyLock<[Arc<str>; 3]> =
    LazyLock::new(|| FINISHED.map(|r| Arc::from(r.as_str())));

/// `reason` label values in [`SkipReason::ALL`] order.
static REASON_VALUES: LazyLock<[Arc<str>; SkipReason::ALL.len()]> =
    LazyLock::new(|| SkipReason::ALL.map(|r| Arc::from(r.as_str())));

/// `reason` label values in [`ErrorReason::ALL`] order.
static ERROR_REASON_VALUES: LazyLock<[Arc<str>; ErrorReason::ALL.len()]> =
    LazyLock::new(|| ErrorReason::ALL.map(|r| Arc::from(r.as_str())));

/// `stat` label values in [`LatencySummary::stats`] order, shared by every scrape.
static STAT_VALUES: LazyLock<[Arc<str>; 8]> = LazyLock::new(|| {
    LatencySummary::default()
        .stats()
        .map(|(stat, _)| Arc::from(stat))
});

/// Where the samples of a family come from.
enum SampleSource {
    /// One per target whose device is known: pushed by the function.
    Target(fn(&str, &TargetSeries, &TargetInfo, &mut Family)),
    /// One per profile of each target, labelled `target`, `profile` and `device`; `None`: none.
    Series(fn(&ProfileSeries) -> Option<Value>),
    /// The profile's runs by result: one per `result` label value.
    Runs,
    /// The profile's last finished runs by result: one per finished `result` (no `skipped`).
    RecentRuns,
    /// When the profile's runs were last skipped: one per `reason` that has happened.
    LastSkips,
    /// When the profile's runs last failed: one per `reason` that has happened.
    LastErrors,
    /// The profile's last run, once there is one; `None`: none.
    LastRun(fn(&LastRun) -> Option<f64>),
    /// A statistic per `stat` label of a latency summary of the profile's last run.
    LastRunStats(fn(&LastRun) -> Option<&LatencySummary>),
    /// A statistic per `stat` label of a latency summary of the profile's series; `None`: none.
    SeriesStats(fn(&ProfileSeries) -> Option<LatencySummary>),
    /// One per engine that ran a last run, labelled `engine`.
    Engines,
}

/// One metric family: its name, HELP, type and where its samples come from.
struct Row {
    name: &'static str,
    help: &'static str,
    kind: MetricKind,
    source: SampleSource,
}

const fn row(
    name: &'static str,
    help: &'static str,
    kind: MetricKind,
    source: SampleSource,
) -> Row {
    Row {
        name,
        help,
        kind,
        source,
    }
}

fn number(x: f64) -> Option<Value> {
    Some(Value::Number(x))
}

/// A last run that did I/O: it has an engine, rates and latencies.
fn did_io(last: &LastRun) -> bool {
    last.engine.is_some()
}

/// Every family of the collector, in exposition order.
const FAMILIES: &[Row] = &[
    row(
        "diskprobe_probe_success",
        "Whether the last run of the profile on the target succeeded (1) or not (0).",
        MetricKind::Gauge,
        SampleSource::LastRun(|l| Some(f64::from(u8::from(l.result == RunStatus::Success)))),
    ),
    row(
        "diskprobe_probe_last_run_timestamp_seconds",
        "When the last run of the profile on the target ended, in Unix seconds.",
        MetricKind::Gauge,
        SampleSource::LastRun(|l| Some(l.timestamp)),
    ),
    row(
        "diskprobe_probe_duration_seconds",
        "Wall time of the last run, including opening the target.",
        MetricKind::Gauge,
        SampleSource::LastRun(|l| Some(l.duration)),
    ),
    row(
        "diskprobe_probe_iops",
        "I/Os per second of the last run (completed I/Os divided by the run's elapsed time, as fio computes it).",
        MetricKind::Gauge,
        SampleSource::LastRun(|l| did_io(l).then_some(l.iops)),
    ),
    row(
        "diskprobe_probe_throughput_bytes_per_second",
        "Bytes per second of the last run.",
        MetricKind::Gauge,
        SampleSource::LastRun(|l| did_io(l).then_some(l.throughput)),
    ),
    row(
        "diskprobe_probe_latency_seconds",
        "Exact per-I/O latency statistics of the last run (from its HdrHistogram): stat is min, mean, p50, p90, p99, p99.9, p99.99 or max.",
        MetricKind::Gauge,
        SampleSource::LastRunStats(|l| did_io(l).then_some(&l.latency)),
    ),
    row(
        "diskprobe_probe_runs_total",
        "Probe runs by result: success, error, timeout or skipped (busy device, duty-cycle budget, run still in flight).",
        MetricKind::Counter,
        SampleSource::Runs,
    ),
    row(
        "diskprobe_probe_recent_runs",
        "Outcomes of the last 10 finished runs of the profile on the target since the agent started, by result: success, error or timeout (skipped and cancelled runs are not counted, nor those made while the device under a configured target is gone).",
        MetricKind::Gauge,
        SampleSource::RecentRuns,
    ),
    row(
        "diskprobe_probe_last_skip_timestamp_seconds",
        "When a run of the profile on the target was last skipped since the agent started, by reason: in_flight (an earlier run or stat had not returned), budget (duty-cycle budget used up), busy (other processes kept the disk busy), held_by_kernel (I/Os of an earlier run still held: a hung device), yielded (a capacity run stopped early for other processes' I/O) or wrong_filesystem (the probe file would be on another filesystem than its own: its volume unmounted).",
        MetricKind::Gauge,
        SampleSource::LastSkips,
    ),
    row(
        "diskprobe_probe_last_error_timestamp_seconds",
        "When a run of the profile on the target last failed (result error) since the agent started, by reason: no_space (the probe file does not fit its filesystem with the reserve, or its fill ran out of space), missing (the path, its directory or its device is not there: a missing mount, a vanished device), refused (a write-safety rule), unsupported (the target cannot be probed as configured: no direct I/O, alignment, size), io (the run's I/O or a system call on the target failed) or other.",
        MetricKind::Gauge,
        SampleSource::LastErrors,
    ),
    row(
        "diskprobe_probe_recent_io_error_runs",
        "How many of the last 10 finished runs of the profile on the target saw at least one failed I/O.",
        MetricKind::Gauge,
        SampleSource::Series(|s| number(s.recent.io_error_runs() as f64)),
    ),
    row(
        "diskprobe_ios_total",
        "I/Os completed by probes since the agent started.",
        MetricKind::Counter,
        SampleSource::Series(|s| number(s.ios as f64)),
    ),
    row(
        "diskprobe_io_bytes_total",
        "Bytes transferred by probes since the agent started.",
        MetricKind::Counter,
        SampleSource::Series(|s| number(s.bytes as f64)),
    ),
    row(
        "diskprobe_io_errors_total",
        "Probe I/Os that failed since the agent started.",
        MetricKind::Counter,
        SampleSource::Series(|s| number(s.io_errors as f64)),
    ),
    row(
        "diskprobe_probe_busy_seconds_total",
        "Seconds the engine spent issuing probe I/O; increase(diskprobe_ios_total) / increase(this) is the IOPS while probing.",
        MetricKind::Counter,
        SampleSource::Series(|s| number(s.busy_seconds)),
    ),
    row(
        "diskprobe_probe_contended_seconds_total",
        "Seconds of probe runs during which other processes' I/O was seen on the disk (completed or in flight, from /sys/block, the probe's own subtracted): how long the probes competed with the workload.",
        MetricKind::Counter,
        SampleSource::Series(|s| number(s.contended_seconds)),
    ),
    row(
        "diskprobe_probe_others_in_flight_seconds_total",
        "Other processes' I/Os in flight on the disk while the probes ran, integrated over time (I/O-seconds, a lower bound): the workload's I/O exposed to the probes.",
        MetricKind::Counter,
        SampleSource::Series(|s| number(s.others_in_flight_seconds)),
    ),
    row(
        "diskprobe_probe_cpu_wait_ratio",
        "Share of the last run's I/O time in which its I/O threads waited for a CPU (run-queue wait from /proc/thread-self/schedstat: for a rate-capped run, the wait while I/O was in flight over the sum of its I/Os' latencies; for an uncapped run, the wait per thread over the run): a probe latency that rises with it is the CPU's, not the disk's.",
        MetricKind::Gauge,
        SampleSource::LastRun(|l| l.seen.cpu_wait),
    ),
    row(
        "diskprobe_probe_starved",
        "Whether the last run was starved of CPU (1): its I/O threads waited for a CPU longer than the target's starved_above share of its I/O time (diskprobe_probe_cpu_wait_ratio). Its latency says more about the CPU than the disk; the bundled rules leave it out of the disk's verdicts.",
        MetricKind::Gauge,
        SampleSource::LastRun(|l| l.seen.starved.map(|s| f64::from(u8::from(s)))),
    ),
    row(
        "diskprobe_probe_host_cpu_pressure_ratio",
        "Share of the last run's wall time in which some task on the host waited for a CPU (/proc/pressure/cpu, some); absent without PSI.",
        MetricKind::Gauge,
        SampleSource::LastRun(|l| l.seen.host_cpu_pressure),
    ),
    row(
        "diskprobe_probe_device_latency_seconds",
        "The block layer's own mean time per I/O over the last run, in the run's direction (reads or writes) on the disks under the target (/sys/block/DISK/stat): other processes' I/O on those disks is in it. Beside diskprobe_probe_latency_seconds it tells a probe that waited from a device that did.",
        MetricKind::Gauge,
        SampleSource::LastRun(|l| l.seen.device_latency),
    ),
    row(
        "diskprobe_probe_cpu_wait_seconds_total",
        "Seconds the probe runs' I/O threads waited for a CPU since the agent started (run-queue wait, added up over the threads).",
        MetricKind::Counter,
        SampleSource::Series(|s| number(s.cpu_wait_seconds)),
    ),
    row(
        "diskprobe_probe_starved_runs_total",
        "Probe runs marked starved (diskprobe_probe_starved) since the agent started; they count in diskprobe_probe_runs_total by their result as well.",
        MetricKind::Counter,
        SampleSource::Series(|s| number(s.starved_runs as f64)),
    ),
    row(
        "diskprobe_probe_stuck_ios",
        "I/Os of the last run that the kernel still holds after the run gave up on them (a hung device); no run starts on the device until they complete.",
        MetricKind::Gauge,
        SampleSource::Series(|s| number(s.stuck.count() as f64)),
    ),
    row(
        "diskprobe_probe_stuck_io_age_seconds",
        "How long ago the oldest of the stuck I/Os was issued; 0 when none is stuck.",
        MetricKind::Gauge,
        SampleSource::Series(|s| number(s.stuck.oldest_age().as_secs_f64())),
    ),
    row(
        "diskprobe_io_latency_seconds",
        "Per-I/O latency of probe I/Os since the agent started (completion minus submission, as fio's lat; for a rate-capped I/O the device held back, minus its intended issue time).",
        MetricKind::Histogram,
        SampleSource::Series(|s| Some(s.latency.to_value())),
    ),
    row(
        "diskprobe_probe_sync_latency_seconds",
        "Profiles with fsync or fdatasync: exact per-sync latency statistics of the last run (from its HdrHistogram), recorded apart from its writes; stat as for diskprobe_probe_latency_seconds.",
        MetricKind::Gauge,
        SampleSource::LastRunStats(|l| did_io(l).then_some(l.sync_latency.as_ref()).flatten()),
    ),
    row(
        "diskprobe_probe_recent_sync_latency_seconds",
        "Profiles with fsync or fdatasync: the least of each per-sync latency statistic over the last 3 runs that completed syncs (above a threshold only when each of those runs was); absent before the third; stat as for diskprobe_probe_sync_latency_seconds.",
        MetricKind::Gauge,
        SampleSource::SeriesStats(|s| s.syncs.as_ref().and(s.recent.sync_floor())),
    ),
    row(
        "diskprobe_syncs_total",
        "Profiles with fsync or fdatasync: syncs completed by probes since the agent started.",
        MetricKind::Counter,
        SampleSource::Series(|s| s.syncs.as_ref().and_then(|y| number(y.count as f64))),
    ),
    row(
        "diskprobe_sync_latency_seconds",
        "Profiles with fsync or fdatasync: per-sync latency (submission of the fsync or fdatasync to its completion) since the agent started.",
        MetricKind::Histogram,
        SampleSource::Series(|s| s.syncs.as_ref().map(|y| y.latency.to_value())),
    ),
    row(
        "diskprobe_target_info",
        "Where each target lives (a configured target whose device is gone keeps its last one until it is back or retired), what its probes probably measure instead of a disk (cache: memory, page_cache, zfs_arc, or empty), the discovery rule that found it and its configured cohort (empty when none); the value is always 1.",
        MetricKind::Gauge,
        SampleSource::Target(target_info),
    ),
    row(
        "diskprobe_target_write_refused",
        "1 per target whose last write run was refused by a write-safety rule, by reason: not_the_pinned_disk (the path names another disk than the one the target was pinned to), mounted, swap, held, in_use (a device the write reaches is mounted, a swap area, held by a volume outside it, or claimed by another opener), cannot_check (what lies over or under the target cannot be read), no_opt_in, foreign_file; absent while writes are allowed.",
        MetricKind::Gauge,
        SampleSource::Target(|name, target, _, family| {
            if let Some(reason) = target.write_refused {
                family.push(&labels(&[("target", name), ("reason", reason)]), 1.0);
            }
        }),
    ),
    row(
        "diskprobe_target_interval_seconds",
        "Configured time between the starts of the target's probe cycles.",
        MetricKind::Gauge,
        SampleSource::Target(|name, target, _, family| {
            let interval = target.spec.settings.interval.as_secs_f64();
            family.push(&labels(&[("target", name)]), interval);
        }),
    ),
    row(
        "diskprobe_profile_info",
        "What each profile of each target does (rw, block_size in bytes, iodepth, rate_iops with 0 for no cap), so that rules can tell latency, IOPS and throughput profiles apart; the value is always 1.",
        MetricKind::Gauge,
        SampleSource::Target(profile_info),
    ),
    row(
        "diskprobe_engine_info",
        "The I/O engines that ran the last probe runs (io_uring, or psync when io_uring cannot be set up); the value is always 1.",
        MetricKind::Gauge,
        SampleSource::Engines,
    ),
];

fn target_info(name: &str, target: &TargetSeries, info: &TargetInfo, family: &mut Family) {
    let rule = target.spec.rule.as_deref().unwrap_or("");
    family.push(
        &labels(&[
            ("target", name),
            ("path", &info.path),
            ("device", info.device_name()),
            ("parent", info.parent_name()),
            ("kind", info.kind_label()),
            ("fstype", &info.fstype),
            ("cache", info.cache_label()),
            ("rule", rule),
            (
                "cohort",
                &name_template::cohort(&target.spec.settings.cohort, info.device.as_ref()),
            ),
        ]),
        1.0,
    );
}

fn profile_info(name: &str, target: &TargetSeries, _: &TargetInfo, family: &mut Family) {
    for p in &target.spec.settings.profiles {
        family.push(
            &labels(&[
                ("target", name),
                ("profile", &p.name),
                ("rw", p.rw.as_str()),
                ("block_size", &p.block_size.to_string()),
                ("iodepth", &p.iodepth.to_string()),
                ("rate_iops", &p.rate_iops.unwrap_or(0).to_string()),
            ]),
            1.0,
        );
    }
}

/// `l` with one more label.
fn with(l: &Labels, name: &'static str, value: &Arc<str>) -> Labels {
    l.iter().cloned().chain([(name, value.clone())]).collect()
}

impl Row {
    fn family(&self) -> Family {
        match self.kind {
            MetricKind::Counter => Family::counter(self.name, self.help),
            MetricKind::Gauge => Family::gauge(self.name, self.help),
            MetricKind::Histogram => Family::histogram(self.name, self.help),
        }
    }

    /// Pushes the samples of one profile's series `s`, whose labels are `l`.
    fn push_series(&self, family: &mut Family, l: &Labels, s: &ProfileSeries) {
        match &self.source {
            SampleSource::Series(value) => {
                if let Some(v) = value(s) {
                    family.push_value(l, v);
                }
            }
            SampleSource::Runs => {
                for (value, count) in RESULT_VALUES.iter().zip(s.runs) {
                    family.push(&with(l, "result", value), count as f64);
                }
            }
            SampleSource::LastRun(value) => {
                if let Some(v) = s.last.as_ref().and_then(value) {
                    family.push(l, v);
                }
            }
            SampleSource::LastSkips => {
                for (value, at) in REASON_VALUES.iter().zip(s.last_skips) {
                    if let Some(at) = at {
                        family.push(&with(l, "reason", value), at);
                    }
                }
            }
            SampleSource::LastErrors => {
                for (value, at) in ERROR_REASON_VALUES.iter().zip(s.last_errors) {
                    if let Some(at) = at {
                        family.push(&with(l, "reason", value), at);
                    }
                }
            }
            SampleSource::RecentRuns => {
                for (value, status) in FINISHED_VALUES.iter().zip(FINISHED) {
                    family.push(&with(l, "result", value), s.recent.count(status) as f64);
                }
            }
            SampleSource::LastRunStats(summary) => {
                push_stats(family, l, s.last.as_ref().and_then(summary).copied());
            }
            SampleSource::SeriesStats(summary) => push_stats(family, l, summary(s)),
            SampleSource::Target(_) | SampleSource::Engines => {}
        }
    }
}

/// Pushes one sample per `stat` label of `summary`, when there is one.
fn push_stats(family: &mut Family, l: &Labels, summary: Option<LatencySummary>) {
    let stats = summary.as_ref().map(LatencySummary::stats);
    for (value, (_, seconds)) in STAT_VALUES.iter().zip(stats.into_iter().flatten()) {
        family.push(&with(l, "stat", value), seconds);
    }
}

/// Publishes probe results.
pub struct ProbesCollector {
    series: Arc<SeriesStore>,
}

impl ProbesCollector {
    /// A collector reading `series`.
    pub fn new(series: Arc<SeriesStore>) -> Self {
        ProbesCollector { series }
    }
}

impl Collector for ProbesCollector {
    fn name(&self) -> &'static str {
        "probes"
    }

    fn collect(&self, out: &mut Vec<Family>) -> Result<(), CollectError> {
        let mut families: Vec<Family> = FAMILIES.iter().map(Row::family).collect();
        let mut engines = BTreeSet::new();
        self.series.read(|targets| {
            for (name, target) in targets {
                // Exported once the target's device is known (see TargetSeries::info).
                let Some(info) = &target.info else { continue };
                for (row, family) in FAMILIES.iter().zip(&mut families) {
                    if let SampleSource::Target(push) = row.source {
                        push(name, target, info, family);
                    }
                }
                for (profile, s) in &target.profiles {
                    let l = labels(&[
                        ("target", name),
                        ("profile", profile),
                        ("device", info.device_name()),
                    ]);
                    for (row, family) in FAMILIES.iter().zip(&mut families) {
                        row.push_series(family, &l, s);
                    }
                    engines.extend(s.last.as_ref().and_then(|l| l.engine).map(|e| e.as_str()));
                }
            }
        });
        for (row, mut family) in FAMILIES.iter().zip(families) {
            if let SampleSource::Engines = row.source {
                for engine in &engines {
                    family.push(&labels(&[("engine", engine)]), 1.0);
                }
            }
            family.finish_into(out);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::recent::{RECENT_RUNS, RECENT_SYNC_RUNS};

    #[test]
    fn every_family_is_namespaced_unique_and_typed_by_its_name() {
        let mut names: Vec<&str> = FAMILIES.iter().map(|r| r.name).collect();
        assert!(names.iter().all(|n| n.starts_with("diskprobe_")));
        for r in FAMILIES {
            assert_eq!(
                r.kind == MetricKind::Counter,
                r.name.ends_with("_total"),
                "{}",
                r.name
            );
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FAMILIES.len());
    }

    #[test]
    fn the_recent_families_say_their_window() {
        let help = |name: &str| FAMILIES.iter().find(|r| r.name == name).unwrap().help;
        for name in [
            "diskprobe_probe_recent_runs",
            "diskprobe_probe_recent_io_error_runs",
        ] {
            assert!(
                help(name).contains(&format!("last {RECENT_RUNS} finished runs")),
                "{name}"
            );
        }
        assert!(
            help("diskprobe_probe_recent_sync_latency_seconds").contains(&format!(
                "last {RECENT_SYNC_RUNS} runs that completed syncs"
            ))
        );
    }
}
