//! `diskprobe_probe_*`, `diskprobe_io_*`, the sync series of profiles that sync
//! (`diskprobe_probe_sync_latency_seconds`, `diskprobe_syncs_total`,
//! `diskprobe_sync_latency_seconds`), `diskprobe_target_info`, `diskprobe_profile_info` and
//! `diskprobe_engine_info`: the results of probe runs, read from [`SeriesStore`] on every scrape.
//!
//! Every per-run and cumulative series carries `target`, `profile` and `device` (the kernel name
//! of the block device under the target, as in `diskprobe_disk_*`), so PromQL can join probe
//! results with diskstats. A target removed by a reload disappears with all its series.

use super::{CollectError, Collector};
use crate::exposition::{Family, Labels, labels};
use crate::probe::measurement::LatencySummary;
use crate::probe::measurement::RunStatus;
use crate::series::SeriesStore;
use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

/// `result` label values in [`RunStatus::ALL`] order, shared by every scrape.
static RESULT_VALUES: LazyLock<[Arc<str>; 4]> =
    LazyLock::new(|| RunStatus::ALL.map(|r| Arc::from(r.as_str())));

/// `stat` label values in [`LatencySummary::stats`] order, shared by every scrape.
static STAT_VALUES: LazyLock<[Arc<str>; 8]> = LazyLock::new(|| {
    LatencySummary::default()
        .stats()
        .map(|(stat, _)| Arc::from(stat))
});

/// Publishes probe results.
pub struct ProbesCollector {
    results: Arc<SeriesStore>,
}

impl ProbesCollector {
    /// A collector reading `results`.
    pub fn new(results: Arc<SeriesStore>) -> Self {
        ProbesCollector { results }
    }
}

impl Collector for ProbesCollector {
    fn name(&self) -> &'static str {
        "probes"
    }

    fn collect(&self, out: &mut Vec<Family>) -> Result<(), CollectError> {
        let mut success = Family::gauge(
            "diskprobe_probe_success",
            "Whether the last run of the profile on the target succeeded (1) or not (0).",
        );
        let mut timestamp = Family::gauge(
            "diskprobe_probe_last_run_timestamp_seconds",
            "When the last run of the profile on the target ended, in Unix seconds.",
        );
        let mut duration = Family::gauge(
            "diskprobe_probe_duration_seconds",
            "Wall time of the last run, including opening the target.",
        );
        let mut iops = Family::gauge(
            "diskprobe_probe_iops",
            "I/Os per second of the last run (completed I/Os divided by the run's elapsed time, as fio computes it).",
        );
        let mut throughput = Family::gauge(
            "diskprobe_probe_throughput_bytes_per_second",
            "Bytes per second of the last run.",
        );
        let mut latency = Family::gauge(
            "diskprobe_probe_latency_seconds",
            "Exact per-I/O latency statistics of the last run (from its HdrHistogram): stat is min, mean, p50, p90, p99, p99.9, p99.99 or max.",
        );
        let mut runs = Family::counter(
            "diskprobe_probe_runs_total",
            "Probe runs by result: success, error, timeout or skipped (busy device, duty-cycle budget, run still in flight).",
        );
        let mut ios = Family::counter(
            "diskprobe_ios_total",
            "I/Os completed by probes since the agent started.",
        );
        let mut bytes = Family::counter(
            "diskprobe_io_bytes_total",
            "Bytes transferred by probes since the agent started.",
        );
        let mut io_errors = Family::counter(
            "diskprobe_io_errors_total",
            "Probe I/Os that failed since the agent started.",
        );
        let mut busy = Family::counter(
            "diskprobe_probe_busy_seconds_total",
            "Seconds the engine spent issuing probe I/O; increase(diskprobe_ios_total) / increase(this) is the IOPS while probing.",
        );
        let mut contended = Family::counter(
            "diskprobe_probe_contended_seconds_total",
            "Seconds of probe runs during which other processes' I/O was seen on the disk (completed or in flight, from /sys/block, the probe's own subtracted): how long the probes competed with the workload.",
        );
        let mut others_in_flight = Family::counter(
            "diskprobe_probe_others_in_flight_seconds_total",
            "Other processes' I/Os in flight on the disk while the probes ran, integrated over time (I/O-seconds, a lower bound): the workload's I/O exposed to the probes.",
        );
        let mut histogram = Family::histogram(
            "diskprobe_io_latency_seconds",
            "Per-I/O latency of probe I/Os since the agent started (completion minus submission, as fio's lat; for a rate-capped I/O the device held back, minus its intended issue time).",
        );
        let mut stuck_ios = Family::gauge(
            "diskprobe_probe_stuck_ios",
            "I/Os of the last run that the kernel still holds after the run gave up on them (a hung device); no run starts on the device until they complete.",
        );
        let mut stuck_age = Family::gauge(
            "diskprobe_probe_stuck_io_age_seconds",
            "How long ago the oldest of the stuck I/Os was issued; 0 when none is stuck.",
        );
        let mut sync_latency = Family::gauge(
            "diskprobe_probe_sync_latency_seconds",
            "Profiles with fsync or fdatasync: exact per-sync latency statistics of the last run (from its HdrHistogram), recorded apart from its writes; stat as for diskprobe_probe_latency_seconds.",
        );
        let mut syncs = Family::counter(
            "diskprobe_syncs_total",
            "Profiles with fsync or fdatasync: syncs completed by probes since the agent started.",
        );
        let mut sync_histogram = Family::histogram(
            "diskprobe_sync_latency_seconds",
            "Profiles with fsync or fdatasync: per-sync latency (submission of the fsync or fdatasync to its completion) since the agent started.",
        );
        let mut target_info = Family::gauge(
            "diskprobe_target_info",
            "Where each target lives, and what its probes probably measure instead of a disk (cache: memory, page_cache, zfs_arc, or empty); the value is always 1.",
        );
        let mut interval = Family::gauge(
            "diskprobe_target_interval_seconds",
            "Configured time between the starts of the target's probe cycles.",
        );
        let mut profile_info = Family::gauge(
            "diskprobe_profile_info",
            "What each profile of each target does (rw, block_size in bytes, iodepth, rate_iops with 0 for no cap), so that rules can tell latency, IOPS and throughput profiles apart; the value is always 1.",
        );
        let mut engines = BTreeSet::new();

        self.results.read(|targets| {
            for (name, target) in targets {
                // Exported once the target's device is known (see TargetSeries::info).
                let Some(info) = &target.info else { continue };
                target_info.push(
                    &labels(&[
                        ("target", name),
                        ("path", &info.path),
                        ("device", &info.device),
                        ("parent", &info.parent),
                        ("kind", &info.kind),
                        ("fstype", &info.fstype),
                        ("cache", &info.cache),
                        ("rule", target.spec.rule.as_deref().unwrap_or("")),
                    ]),
                    1.0,
                );
                interval.push(
                    &labels(&[("target", name)]),
                    target.spec.settings.interval.as_secs_f64(),
                );
                for p in &target.spec.settings.profiles {
                    profile_info.push(
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
                for (profile, s) in &target.profiles {
                    let l: Labels = labels(&[
                        ("target", name),
                        ("profile", profile),
                        ("device", &info.device),
                    ]);
                    for (value, count) in RESULT_VALUES.iter().zip(s.runs) {
                        let with_result: Labels = l
                            .iter()
                            .cloned()
                            .chain([("result", value.clone())])
                            .collect();
                        runs.push(&with_result, count as f64);
                    }
                    ios.push(&l, s.ios as f64);
                    bytes.push(&l, s.bytes as f64);
                    io_errors.push(&l, s.io_errors as f64);
                    busy.push(&l, s.busy_seconds);
                    contended.push(&l, s.contended_seconds);
                    others_in_flight.push(&l, s.others_in_flight_seconds);
                    stuck_ios.push(&l, s.stuck.count() as f64);
                    stuck_age.push(&l, s.stuck.oldest_age().as_secs_f64());
                    histogram.push_value(&l, s.latency.to_value());
                    if let Some(sync) = &s.syncs {
                        syncs.push(&l, sync.count as f64);
                        sync_histogram.push_value(&l, sync.latency.to_value());
                    }
                    let Some(last) = &s.last else { continue };
                    success.push(&l, f64::from(u8::from(last.result == RunStatus::Success)));
                    timestamp.push(&l, last.timestamp);
                    duration.push(&l, last.duration);
                    if let Some(engine) = last.engine {
                        engines.insert(engine.as_str());
                        iops.push(&l, last.iops);
                        throughput.push(&l, last.throughput);
                        for (value, (_, seconds)) in STAT_VALUES.iter().zip(last.latency.stats()) {
                            let with_stat: Labels =
                                l.iter().cloned().chain([("stat", value.clone())]).collect();
                            latency.push(&with_stat, seconds);
                        }
                        let sync_stats = last.sync_latency.iter().flat_map(|l| l.stats());
                        for (value, (_, seconds)) in STAT_VALUES.iter().zip(sync_stats) {
                            let with_stat: Labels =
                                l.iter().cloned().chain([("stat", value.clone())]).collect();
                            sync_latency.push(&with_stat, seconds);
                        }
                    }
                }
            }
        });
        let mut engine_info = Family::gauge(
            "diskprobe_engine_info",
            "The I/O engines that ran the last probe runs (io_uring, or psync when io_uring cannot be set up); the value is always 1.",
        );
        for engine in engines {
            engine_info.push(&labels(&[("engine", engine)]), 1.0);
        }
        for family in [
            success,
            timestamp,
            duration,
            iops,
            throughput,
            latency,
            runs,
            ios,
            bytes,
            io_errors,
            busy,
            contended,
            others_in_flight,
            stuck_ios,
            stuck_age,
            histogram,
            sync_latency,
            syncs,
            sync_histogram,
            target_info,
            interval,
            profile_info,
            engine_info,
        ] {
            family.finish_into(out);
        }
        Ok(())
    }
}
