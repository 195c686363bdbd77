//! The store of per-target series: the results of probe runs, as the scheduler reports them and the
//! probes collector reads them.
//!
//! Per target and profile it keeps the last run (success, time, duration, IOPS, throughput, exact
//! percentiles from the run's HdrHistogram) and cumulative counters since the agent started (runs
//! by result, I/Os, bytes, busy seconds and a [`LatencyHistogram`] with classic and native
//! buckets, so that rates and quantiles can be aggregated in PromQL); for profiles that sync, the
//! syncs too (the last run's statistics, a count and a [`LatencyHistogram`] of their own); and
//! the outcomes of its last finished runs ([`recent`]).
//! Targets removed from the
//! configuration are dropped; unchanged targets keep everything across reloads, unless the
//! classic bucket layout changed (then every cumulative series starts again from zero). A target
//! whose settings a reload changed starts afresh, except for the recent runs of the profiles it
//! keeps.

pub(crate) mod recent;

use crate::blockdev::BlockDevice;
use crate::config::TargetSpec;
use crate::histogram::{ClassicBuckets, LatencyHistogram};
use crate::host::unix_now;
use crate::probe::io_target::{Cache, TargetKind};
use crate::probe::measurement::{Ending, EngineKind, ErrorReason, RunStatus, SkipReason, StuckIos};
use crate::probe::measurement::{LatencySummary, Measurement};
use crate::run_context::RunContext;
use recent::RecentRuns;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Where a target lives, from the last stat of its path. Serialized where the agent keeps a
/// configured target's last device ([`crate::scheduler::target_devices`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TargetInfo {
    /// Configured path.
    pub path: String,
    /// The block device under the target (`None` when there is none, or it is not known yet);
    /// its [`BlockDevice::disks`] are the disks the target's I/O lands on.
    pub device: Option<BlockDevice>,
    /// Block device or file (`None` until a stat said).
    pub kind: Option<TargetKind>,
    /// Filesystem type of a file target.
    pub fstype: String,
    /// What the target's probes probably measure instead of a disk.
    pub cache: Option<Cache>,
}

impl TargetInfo {
    /// Kernel name of the block device under the target, or `""`.
    pub(crate) fn device_name(&self) -> &str {
        self.device.as_ref().map_or("", |d| d.kname.as_str())
    }

    /// The disk of a partition under the target, or `""`.
    pub(crate) fn parent_name(&self) -> &str {
        self.device
            .as_ref()
            .and_then(|d| d.parent.as_deref())
            .unwrap_or("")
    }

    /// The whole disks the target's I/O lands on (none without a block device).
    pub(crate) fn disks(&self) -> &[String] {
        self.device.as_ref().map_or(&[], |d| d.disks.as_slice())
    }

    /// `block_device`, `file`, or `""`.
    pub(crate) fn kind_label(&self) -> &'static str {
        self.kind.map_or("", TargetKind::as_str)
    }

    /// `memory`, `page_cache`, `zfs_arc`, or `""`.
    pub(crate) fn cache_label(&self) -> &'static str {
        self.cache.map_or("", Cache::as_str)
    }
}

/// The last run of one profile on one target.
#[derive(Debug, Clone, PartialEq)]
pub struct LastRun {
    /// How it ended.
    pub result: RunStatus,
    /// When it ended (Unix seconds).
    pub timestamp: f64,
    /// Wall time of the run, including opening the target.
    pub duration: f64,
    /// I/Os per second (zero when the run did not happen).
    pub iops: f64,
    /// Bytes per second.
    pub throughput: f64,
    /// Per-I/O latency (all zero when the run did no I/O).
    pub latency: LatencySummary,
    /// Profiles that sync: per-sync latency of the run; `None` for other profiles and runs that
    /// did no I/O.
    pub sync_latency: Option<LatencySummary>,
    /// The engine that ran it.
    pub engine: Option<EngineKind>,
    /// What went wrong, for logs and the status page.
    pub error: Option<String>,
    /// Whether its I/O threads waited for a CPU, and what the device itself took; all unknown
    /// for a run that did no I/O.
    pub seen: RunSeen,
}

/// What a run waited for a CPU and what the device took over it (each `None` when not known).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunSeen {
    /// Share of the run's I/O time its I/O threads waited for a CPU
    /// ([`crate::probe::measurement::CpuWait::share`]).
    pub cpu_wait: Option<f64>,
    /// Whether that share was above the target's `starved_above`.
    pub starved: Option<bool>,
    /// Share of the run's wall time in which some task on the host waited for a CPU.
    pub host_cpu_pressure: Option<f64>,
    /// The block layer's mean time per I/O of the run's direction on the disks under the target
    /// over the run, in seconds (other processes' I/O included).
    pub device_latency: Option<f64>,
}

impl RunSeen {
    /// What `r` and the machine around it (`context`) say, with runs whose threads waited for a
    /// CPU more than `starved_above` of the run marked starved.
    pub(crate) fn of(r: &Measurement, context: &RunContext, starved_above: f64) -> RunSeen {
        let cpu_wait = r.cpu_wait_share();
        RunSeen {
            cpu_wait,
            starved: cpu_wait.map(|share| share > starved_above),
            host_cpu_pressure: context.host_cpu_pressure,
            device_latency: context
                .device
                .and_then(|d| d.per_io())
                .map(|d| d.as_secs_f64()),
        }
    }
}

/// How many recent runs the status page charts per target and profile.
pub(crate) const HISTORY_LEN: usize = 120;

/// One recent run, for the status page.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HistoryPoint {
    /// When it ended (Unix seconds).
    pub timestamp: f64,
    /// Median latency in seconds (0 when the run did no I/O).
    pub p50: f64,
    /// p99 latency in seconds.
    pub p99: f64,
    /// Whether it succeeded.
    pub success: bool,
}

impl LastRun {
    /// A run that did no I/O (it could not start, or never returned).
    fn without_io(result: RunStatus, timestamp: f64, duration: Duration, error: String) -> Self {
        LastRun {
            result,
            timestamp,
            duration: duration.as_secs_f64(),
            iops: 0.0,
            throughput: 0.0,
            latency: LatencySummary::default(),
            sync_latency: None,
            engine: None,
            error: Some(error),
            seen: RunSeen::default(),
        }
    }
}

/// Everything kept for one profile of one target.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileSeries {
    /// The last run that was not skipped.
    pub last: Option<LastRun>,
    /// Recent runs that were not skipped, oldest first, at most [`HISTORY_LEN`]: for the status
    /// page's charts.
    pub history: std::collections::VecDeque<HistoryPoint>,
    /// Runs by result, in [`RunStatus::ALL`] order.
    pub runs: [u64; 4],
    /// I/Os completed.
    pub ios: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// I/Os that failed.
    pub io_errors: u64,
    /// Seconds the engine spent issuing I/O.
    pub busy_seconds: f64,
    /// Per-I/O latency of every run (its count is `ios`).
    pub latency: LatencyHistogram,
    /// Seconds of runs during which other processes' I/O was seen on the disk.
    pub contended_seconds: f64,
    /// Other processes' in-flight I/Os on the disk, integrated over the runs (I/O-seconds).
    pub others_in_flight_seconds: f64,
    /// Seconds the runs' I/O threads waited for a CPU (thread-seconds).
    pub cpu_wait_seconds: f64,
    /// Runs marked starved (their I/O threads waited for a CPU more than `starved_above`).
    pub starved_runs: u64,
    /// I/Os of the last run that the kernel still holds (a hung device).
    pub stuck: Stuck,
    /// Profiles with `fsync`/`fdatasync`: their syncs; `None` for every other profile.
    pub syncs: Option<SyncSeries>,
    /// The outcomes of the last finished runs.
    pub recent: RecentRuns,
    /// When a run was last skipped, per reason in [`SkipReason::ALL`] order (Unix seconds).
    pub last_skips: [Option<f64>; SkipReason::ALL.len()],
    /// When a run last failed, per reason in [`ErrorReason::ALL`] order (Unix seconds).
    pub last_errors: [Option<f64>; ErrorReason::ALL.len()],
}

/// The I/Os of a run that the kernel still held when the run returned, shared with the engine's
/// leftovers and read live; compared by identity.
#[derive(Debug, Clone, Default)]
pub struct Stuck(pub Option<Arc<StuckIos>>);

impl PartialEq for Stuck {
    fn eq(&self, other: &Stuck) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        }
    }
}

impl Stuck {
    /// I/Os still in the kernel.
    pub(crate) fn count(&self) -> usize {
        self.0.as_ref().map_or(0, |s| s.count())
    }

    /// How long ago the oldest of them was issued (zero when there is none).
    pub(crate) fn oldest_age(&self) -> Duration {
        self.0
            .as_ref()
            .and_then(|s| s.oldest())
            .map_or(Duration::ZERO, |at| at.elapsed())
    }
}

/// The syncs of a profile that syncs, since the agent started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncSeries {
    /// Syncs completed.
    pub count: u64,
    /// Per-sync latency of every run (its count is `count`), with the same buckets as the I/O
    /// latency histogram.
    pub latency: LatencyHistogram,
}

impl ProfileSeries {
    /// Empty series whose histograms have the classic buckets of `layout`; with sync series when
    /// the profile `syncs`.
    fn new(layout: &ClassicBuckets, syncs: bool) -> Self {
        ProfileSeries {
            latency: LatencyHistogram::new(layout),
            syncs: syncs.then(|| SyncSeries {
                count: 0,
                latency: LatencyHistogram::new(layout),
            }),
            ..ProfileSeries::default()
        }
    }
}

/// One configured target.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetSeries {
    /// The configuration it was created for; a changed spec starts afresh. The same allocation as
    /// the scheduler task's that records into it: a run of an earlier task for the same name is
    /// told apart by it, even when a later reload brought the same configuration back.
    pub spec: Arc<TargetSpec>,
    /// From the last stat of its path; `None` until the first, made when the target is
    /// scheduled: until then its series are not exported, so that they appear with their final
    /// `device` label.
    pub info: Option<TargetInfo>,
    /// By profile name, in configuration order.
    pub profiles: Vec<(String, ProfileSeries)>,
    /// The device under it is gone (a configured target's last device, held): its runs are left
    /// out of the recent runs.
    pub gone: bool,
    /// Why its last write run was refused by a write-safety rule (the `reason` label of
    /// `diskprobe_target_write_refused`); `None` when it was not, or no write run has tried.
    pub write_refused: Option<&'static str>,
}

impl TargetSeries {
    /// A placeholder for `spec` without profiles.
    fn empty(spec: &Arc<TargetSpec>) -> Self {
        TargetSeries {
            spec: spec.clone(),
            info: None,
            profiles: Vec::new(),
            gone: false,
            write_refused: None,
        }
    }

    /// Takes the recent runs of `old`'s profiles that this target has too.
    fn keep_recent_runs_of(&mut self, old: TargetSeries) {
        for (name, old) in old.profiles {
            if let Some((_, s)) = self.profiles.iter_mut().find(|(p, _)| *p == name) {
                s.recent = old.recent;
            }
        }
    }
}

/// Shared store of probe results.
#[derive(Debug, Default)]
pub struct SeriesStore {
    targets: Mutex<BTreeMap<String, TargetSeries>>,
    /// Classic buckets of the latency histograms of new series.
    layout: Mutex<ClassicBuckets>,
}

/// What a run cost other processes on its disk, as [`crate::contention::Watch`] saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunCost {
    /// Time of the run during which other processes' I/O was seen on the disk.
    pub contended: Duration,
    /// Other processes' in-flight I/Os integrated over the run, in I/O-seconds.
    pub others_in_flight_seconds: f64,
}

/// What the scheduler reports about one run.
#[derive(Debug)]
pub enum RunOutcome {
    /// The engine ran; the measurement says how it ended ([`Measurement::status`]). A capacity
    /// run that stopped early because another process's I/O showed up on the disk
    /// ([`Ending::Yielded`](crate::probe::measurement::Ending::Yielded)) counts as skipped: its
    /// figures are cut short and shared with others, so the last-run gauges keep the previous
    /// run, but the I/O it did is added to the cumulative counters.
    Ran {
        /// The measurement.
        result: Box<Measurement>,
        /// Wall time including opening the target.
        duration: Duration,
        /// What it cost others.
        cost: RunCost,
        /// What the contention watch saw that made it ask the run to yield (what was seen, and
        /// when); the skip reason of a run that yielded.
        yielded_to: Option<String>,
        /// What the machine did over the run (the host's CPU pressure, the device's own time).
        context: RunContext,
    },
    /// The run could not start or failed outright (open, preflight, safety, engine setup).
    Failed {
        /// Why.
        error: String,
        /// Wall time spent.
        duration: Duration,
        /// Why, for the `reason` label.
        why: ErrorReason,
    },
    /// The run was given up on: it did not return within its timeout plus a grace period, or
    /// opening the target made no progress for that long.
    Abandoned {
        /// What did not finish, for the last run's error.
        error: String,
        /// Wall time waited.
        duration: Duration,
    },
    /// The run was not started.
    Skipped {
        /// Why, in words (busy, budget, ...).
        reason: String,
        /// Why, for the `reason` label.
        why: SkipReason,
    },
}

impl RunOutcome {
    /// The run's `result` label: what the store counts and the scheduler logs.
    pub(crate) fn status(&self) -> RunStatus {
        match self {
            RunOutcome::Ran { result, .. } => result.status(),
            RunOutcome::Failed { .. } => RunStatus::Error,
            RunOutcome::Abandoned { .. } => RunStatus::Timeout,
            RunOutcome::Skipped { .. } => RunStatus::Skipped,
        }
    }

    /// What went wrong, or why the run was skipped or yielded; `None` when it succeeded.
    pub(crate) fn reason(&self) -> Option<String> {
        match self {
            RunOutcome::Ran {
                result, yielded_to, ..
            } if result.status() == RunStatus::Skipped => Some(
                yielded_to
                    .clone()
                    .unwrap_or_else(|| "asked to yield".to_owned()),
            ),
            RunOutcome::Ran { result, .. } => result.failure(),
            RunOutcome::Failed { error, .. } | RunOutcome::Abandoned { error, .. } => {
                Some(error.clone())
            }
            RunOutcome::Skipped { reason, .. } => Some(reason.clone()),
        }
    }

    /// Why the run failed, when it did (`result="error"`): a run whose engine ran and failed
    /// failed by its I/O, unless it was cancelled.
    pub(crate) fn error_reason(&self) -> Option<ErrorReason> {
        match self {
            RunOutcome::Failed { why, .. } => Some(*why),
            RunOutcome::Ran { result, .. } if result.status() == RunStatus::Error => {
                Some(if result.ending == Ending::Cancelled {
                    ErrorReason::Other
                } else {
                    ErrorReason::Io
                })
            }
            _ => None,
        }
    }

    /// Why the run was skipped, when it was (a capacity run that yielded counts as skipped).
    pub(crate) fn skip_reason(&self) -> Option<SkipReason> {
        match self {
            RunOutcome::Skipped { why, .. } => Some(*why),
            RunOutcome::Ran { result, .. } if result.status() == RunStatus::Skipped => {
                Some(SkipReason::Yielded)
            }
            _ => None,
        }
    }

    /// What the engine measured, when it ran.
    pub(crate) fn measurement(&self) -> Option<&Measurement> {
        match self {
            RunOutcome::Ran { result, .. } => Some(result),
            _ => None,
        }
    }

    /// The last run it makes: `None` for a skip (the previous last run stays); runs whose
    /// threads waited for a CPU more than `starved_above` of the run are marked starved.
    fn last_run(&self, timestamp: f64, starved_above: f64) -> Option<LastRun> {
        let result = self.status();
        let error = self.reason();
        match self {
            _ if result == RunStatus::Skipped => None,
            RunOutcome::Ran {
                result: r,
                duration,
                context,
                ..
            } => Some(LastRun {
                seen: RunSeen::of(r, context, starved_above),
                result,
                timestamp,
                duration: duration.as_secs_f64(),
                iops: r.iops(),
                throughput: r.bandwidth(),
                latency: r.latency_summary(),
                sync_latency: r.sync_latency_summary(),
                engine: Some(r.engine),
                error,
            }),
            RunOutcome::Failed { duration, .. } | RunOutcome::Abandoned { duration, .. } => Some(
                LastRun::without_io(result, timestamp, *duration, error.unwrap_or_default()),
            ),
            RunOutcome::Skipped { .. } => None,
        }
    }
}

impl SeriesStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, TargetSeries>> {
        self.targets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the classic buckets of the latency histograms (`[histograms]`). When they change,
    /// every cumulative series (counters and histograms) starts again from zero, so that each
    /// histogram's count stays equal to `ios`; the last runs are kept.
    pub fn set_histogram_layout(&self, layout: &ClassicBuckets) {
        {
            let mut current = self.layout.lock().unwrap_or_else(|e| e.into_inner());
            if *current == *layout {
                return;
            }
            *current = layout.clone();
        }
        for target in self.lock().values_mut() {
            for (_, series) in &mut target.profiles {
                *series = ProfileSeries {
                    last: series.last.take(),
                    history: std::mem::take(&mut series.history),
                    recent: std::mem::take(&mut series.recent),
                    ..ProfileSeries::new(layout, series.syncs.is_some())
                };
            }
        }
    }

    /// Makes the store match `specs`: removed targets lose their series, new ones start with
    /// zeroed counters, unchanged ones keep everything. A changed target starts afresh too, but
    /// keeps the recent runs of the profiles it still has: they are the same disk's runs.
    pub fn set_targets(&self, specs: &[Arc<TargetSpec>]) {
        let layout = self
            .layout
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut targets = self.lock();
        let mut changed: BTreeMap<String, TargetSeries> = BTreeMap::new();
        targets.retain(|name, t| {
            let Some(spec) = specs.iter().find(|s| &s.name == name) else {
                return false;
            };
            if **spec == *t.spec {
                return true;
            }
            changed.insert(
                name.clone(),
                std::mem::replace(t, TargetSeries::empty(spec)),
            );
            false
        });
        for spec in specs {
            targets.entry(spec.name.clone()).or_insert_with(|| {
                let mut fresh = TargetSeries {
                    spec: spec.clone(),
                    info: None,
                    profiles: spec
                        .settings
                        .profiles
                        .iter()
                        .map(|p| (p.name.clone(), ProfileSeries::new(&layout, p.syncs())))
                        .collect(),
                    gone: false,
                    write_refused: None,
                };
                if let Some(old) = changed.remove(&spec.name) {
                    fresh.keep_recent_runs_of(old);
                }
                fresh
            });
        }
    }

    /// Records where the target of `spec` lives; true when that is news (the first info, or a
    /// change).
    pub fn set_info(&self, spec: &Arc<TargetSpec>, info: TargetInfo) -> bool {
        match self
            .lock()
            .get_mut(&spec.name)
            .filter(|t| Arc::ptr_eq(&t.spec, spec))
        {
            Some(t) if t.info.as_ref() != Some(&info) => {
                t.info = Some(info);
                true
            }
            _ => false,
        }
    }

    /// Says whether the device under the target of `spec` is gone (its last device held:
    /// [`crate::scheduler::target_devices`]): its runs then fail for that, and are counted by
    /// result but left out of its recent runs, which say what the disk does.
    pub(crate) fn set_gone(&self, spec: &Arc<TargetSpec>, gone: bool) {
        if let Some(t) = self
            .lock()
            .get_mut(&spec.name)
            .filter(|t| Arc::ptr_eq(&t.spec, spec))
        {
            t.gone = gone;
        }
    }

    /// Records why the last write run of the target of `spec` was refused by a write-safety rule
    /// (`None`: its target was opened for writing).
    pub(crate) fn set_write_refused(&self, spec: &Arc<TargetSpec>, reason: Option<&'static str>) {
        if let Some(t) = self
            .lock()
            .get_mut(&spec.name)
            .filter(|t| Arc::ptr_eq(&t.spec, spec))
        {
            t.write_refused = reason;
        }
    }

    /// Records `info` for the target named `name`, whatever its task (a reload that retires the
    /// disk it was held on).
    pub(crate) fn relabel(&self, name: &str, info: TargetInfo) {
        if let Some(t) = self.lock().get_mut(name) {
            t.info = Some(info);
            t.gone = false;
        }
    }

    /// Records `info` for the target of `spec` unless something is known already: for a target
    /// whose path cannot be read, so that its series (and the errors or timeouts they count) are
    /// exported all the same.
    pub(crate) fn set_info_if_unknown(&self, spec: &Arc<TargetSpec>, info: TargetInfo) {
        if let Some(t) = self
            .lock()
            .get_mut(&spec.name)
            .filter(|t| Arc::ptr_eq(&t.spec, spec) && t.info.is_none())
        {
            t.info = Some(info);
        }
    }

    /// Records one run of `profile` on the target of `spec` (the allocation given to
    /// [`SeriesStore::set_targets`]): its result ([`RunOutcome::status`]) is counted, the I/O it
    /// did added up, and unless it was skipped it becomes the last run. A run of a target that a
    /// reload has removed or changed since (its series now belong to another spec, or to none)
    /// is not recorded: the reload cancelled it, and its figures describe a target that is gone.
    pub fn record(&self, spec: &Arc<TargetSpec>, profile: &str, outcome: &RunOutcome) {
        let now = unix_now();
        let mut targets = self.lock();
        let Some((gone, series)) = targets
            .get_mut(&spec.name)
            .filter(|t| Arc::ptr_eq(&t.spec, spec))
            .and_then(|t| {
                let gone = t.gone;
                let series = t.profiles.iter_mut().find(|(p, _)| p == profile)?;
                Some((gone, &mut series.1))
            })
        else {
            return;
        };
        series.runs[outcome.status() as usize] += 1;
        if !gone {
            series
                .recent
                .record(outcome.status(), outcome.measurement());
        }
        if let RunOutcome::Ran { result, cost, .. } = outcome {
            add_io(series, result, cost);
        }
        let starved_above = spec.settings.starved_above;
        if let Some(why) = outcome.skip_reason() {
            series.last_skips[why as usize] = Some(now);
        }
        if let Some(why) = outcome.error_reason() {
            series.last_errors[why as usize] = Some(now);
        }
        if let Some(last) = outcome.last_run(now, starved_above) {
            if last.seen.starved == Some(true) {
                series.starved_runs += 1;
            }
            if series.history.len() == HISTORY_LEN {
                series.history.pop_front();
            }
            series.history.push_back(HistoryPoint {
                timestamp: last.timestamp,
                p50: last.latency.p50,
                p99: last.latency.p99,
                success: last.result == RunStatus::Success,
            });
            series.last = Some(last);
        }
    }

    /// Runs `f` over every target's series, by name, under the store's lock: scrapes read the
    /// results in place instead of copying histograms and histories every time.
    pub fn read<R>(&self, f: impl FnOnce(&BTreeMap<String, TargetSeries>) -> R) -> R {
        f(&self.lock())
    }
}

/// Adds what a run did (and cost) to the cumulative counters and histograms, and keeps the I/Os
/// the kernel still holds.
fn add_io(series: &mut ProfileSeries, r: &Measurement, cost: &RunCost) {
    series.ios += r.ios;
    series.bytes += r.bytes;
    series.io_errors += r.errors;
    series.busy_seconds += r.elapsed.as_secs_f64();
    series.contended_seconds += cost.contended.as_secs_f64();
    series.others_in_flight_seconds += cost.others_in_flight_seconds;
    series.cpu_wait_seconds += r.cpu_wait.map_or(0.0, |w| w.waited.as_secs_f64());
    series.stuck = Stuck(r.stuck.clone());
    series.latency.record(&r.latency_ns);
    if let (Some(total), Some(syncs)) = (&mut series.syncs, &r.syncs) {
        total.count += syncs.count;
        total.latency.record(&syncs.latency_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::measurement::{Ending, new_latency_histogram};

    /// A store with one target `t` at `/x` (default profiles), and its spec.
    /// A store with the one target `[[targets]]` of `toml` configures, named "t".
    fn store_with(toml: &str) -> (SeriesStore, Arc<TargetSpec>) {
        let store = SeriesStore::new();
        let config = crate::config::Config::from_toml(toml, std::path::Path::new("t.toml"));
        let spec = Arc::new(config.unwrap().targets.remove(0));
        store.set_targets(std::slice::from_ref(&spec));
        (store, spec)
    }

    fn store_with_target() -> (SeriesStore, Arc<TargetSpec>) {
        store_with("[[targets]]\nname = \"t\"\npath = \"/x\"\n")
    }

    #[test]
    fn a_failed_run_keeps_its_time_by_its_reason() {
        let (store, spec) = store_with_target();
        let profile = "randread-4k-qd1-gentle";
        store.record(
            &spec,
            profile,
            &RunOutcome::Failed {
                error: "/x: not filled: ...".into(),
                duration: Duration::from_millis(1),
                why: ErrorReason::NoSpace,
            },
        );
        let s = store.read(|t| t["t"].profiles[0].1.clone());
        assert_eq!(s.runs, [0, 1, 0, 0]);
        let at = s.last_errors[ErrorReason::NoSpace as usize].expect("a no_space failure");
        assert!((at - unix_now()).abs() < 60.0, "{at}");
        assert_eq!(s.last_errors.iter().flatten().count(), 1);
        // A run whose I/O failed fails by its I/O; one that succeeded has no reason.
        let ran = |errors: u64| RunOutcome::Ran {
            context: Default::default(),
            result: Box::new(Measurement {
                ios: 10,
                errors,
                ending: Ending::Finished,
                ..Measurement::empty(EngineKind::Psync)
            }),
            duration: Duration::from_millis(1),
            cost: RunCost::default(),
            yielded_to: None,
        };
        assert_eq!(ran(1).error_reason(), Some(ErrorReason::Io));
        assert_eq!(ran(0).error_reason(), None);
        store.record(&spec, profile, &ran(1));
        let s = store.read(|t| t["t"].profiles[0].1.clone());
        assert_eq!(s.last_errors.iter().flatten().count(), 2);
    }

    #[test]
    fn records_runs_and_histogram() {
        let (store, spec) = store_with_target();
        let mut h = new_latency_histogram();
        for _ in 0..90 {
            h.record(100_000).unwrap(); // 100 µs
        }
        for _ in 0..10 {
            h.record(2_000_000).unwrap(); // 2 ms
        }
        let result = Measurement {
            ios: 100,
            bytes: 409_600,
            elapsed: Duration::from_millis(500),
            latency_ns: h,
            ..Measurement::empty(EngineKind::IoUring)
        };
        let ran = RunOutcome::Ran {
            context: Default::default(),
            result: Box::new(result),
            duration: Duration::from_millis(510),
            cost: RunCost::default(),
            yielded_to: None,
        };
        assert_eq!((ran.status(), ran.reason()), (RunStatus::Success, None));
        store.record(&spec, "randread-4k-qd1-gentle", &ran);
        store.record(
            &spec,
            "randread-4k-qd1-gentle",
            &RunOutcome::Skipped {
                reason: "busy".into(),
                why: SkipReason::Busy,
            },
        );
        let s = store.read(|t| t["t"].profiles[0].1.clone());
        assert_eq!(s.runs, [1, 0, 0, 1]);
        // The skip's time is kept by its reason, and no other reason has one.
        let busy = s.last_skips[SkipReason::Busy as usize].expect("a busy skip");
        assert!((busy - unix_now()).abs() < 60.0, "{busy}");
        assert_eq!(s.last_skips.iter().flatten().count(), 1);
        assert_eq!(s.ios, 100);
        assert_eq!(s.latency.count(), 100);
        let sum = s.latency.sum();
        assert!((sum - (90.0 * 100e-6 + 10.0 * 2e-3)).abs() < 1e-5, "{sum}");
        let last = s.last.as_ref().unwrap();
        assert_eq!(last.iops, 200.0);
        let p50 = last.latency.p50;
        assert!((p50 - 100e-6).abs() < 1e-7, "{p50}");
        reloads_keep_and_drop_series(&store, &spec);
    }

    /// After [`records_runs_and_histogram`]: changing the target's spec drops its series (the
    /// 100 I/Os recorded), keeping it keeps them, and late runs of an old spec land nowhere.
    fn reloads_keep_and_drop_series(store: &SeriesStore, spec: &Arc<TargetSpec>) {
        // Changing the target's spec drops its series; keeping it keeps them.
        store.set_targets(std::slice::from_ref(spec));
        assert_eq!(store.read(|t| t["t"].profiles[0].1.ios), 100);
        let mut changed = (**spec).clone();
        changed.settings.interval = Duration::from_secs(600);
        store.set_targets(&[Arc::new(changed)]);
        assert_eq!(store.read(|t| t["t"].profiles[0].1.ios), 0);
        // A run of the old spec, cancelled by that reload, ends up in no series.
        store.record(
            spec,
            "randread-4k-qd1-gentle",
            &RunOutcome::Failed {
                error: "cancelled".into(),
                duration: Duration::from_millis(5),
                why: ErrorReason::Other,
            },
        );
        assert_eq!(store.read(|t| t["t"].profiles[0].1.runs), [0; 4]);
        store.set_info(
            spec,
            TargetInfo {
                path: "/old".into(),
                ..TargetInfo::default()
            },
        );
        assert_eq!(store.read(|t| t["t"].info.clone()), None);
        // A second reload brings the first configuration back: new series again, and a late run
        // of the first task still ends up in none of them.
        let back = Arc::new((**spec).clone());
        store.set_targets(std::slice::from_ref(&back));
        store.record(
            spec,
            "randread-4k-qd1-gentle",
            &RunOutcome::Skipped {
                reason: "late".into(),
                why: SkipReason::InFlight,
            },
        );
        assert_eq!(store.read(|t| t["t"].profiles[0].1.runs), [0; 4]);
        store.record(
            &back,
            "randread-4k-qd1-gentle",
            &RunOutcome::Skipped {
                reason: "busy".into(),
                why: SkipReason::Busy,
            },
        );
        assert_eq!(store.read(|t| t["t"].profiles[0].1.runs), [0, 0, 0, 1]);
        store.set_targets(&[]);
        assert!(store.read(|t| t.is_empty()));
    }

    #[test]
    fn recent_runs_survive_a_reload_that_keeps_the_target_and_the_profile() {
        let (store, spec) = store_with(
            "[[targets]]\nname = \"t\"\npath = \"/x\"\n\
             profiles = [\"randread-4k-qd1\", \"randread-4k-qd32\"]\n",
        );
        let failed = || RunOutcome::Failed {
            error: "open: EIO".into(),
            duration: Duration::from_millis(1),
            why: ErrorReason::Io,
        };
        store.record(&spec, "randread-4k-qd1", &failed());
        store.record(&spec, "randread-4k-qd32", &failed());
        let errors = |i: usize| store.read(|t| t["t"].profiles[i].1.recent.count(RunStatus::Error));
        // Another interval and one profile fewer: the counters start afresh, the window of the
        // profile it keeps does not.
        let mut changed = (*spec).clone();
        changed.settings.interval = Duration::from_secs(600);
        changed.settings.profiles.truncate(1);
        let changed = Arc::new(changed);
        store.set_targets(std::slice::from_ref(&changed));
        assert_eq!(store.read(|t| t["t"].profiles[0].1.runs), [0; 4]);
        assert_eq!(errors(0), 1);
        // The profile comes back: its window starts empty.
        store.set_targets(std::slice::from_ref(&spec));
        assert_eq!((errors(0), errors(1)), (1, 0));
        store.record(&spec, "randread-4k-qd1", &failed());
        assert_eq!(errors(0), 2);
        // A new bucket layout keeps it too; a target removed and added again starts empty.
        store.set_histogram_layout(&ClassicBuckets::fine());
        assert_eq!(errors(0), 2);
        store.set_targets(&[]);
        store.set_targets(std::slice::from_ref(&spec));
        assert_eq!(errors(0), 0);
    }

    #[test]
    fn a_new_bucket_layout_restarts_the_cumulative_series() {
        let (store, spec) = store_with_target();
        let mut h = new_latency_histogram();
        h.record(100_000).unwrap();
        let run = || RunOutcome::Ran {
            context: Default::default(),
            result: Box::new(Measurement {
                engine: EngineKind::Psync,
                ios: 1,
                bytes: 4096,
                elapsed: Duration::from_millis(1),
                errors: 0,
                first_error: None,
                latency_ns: h.clone(),
                ..Measurement::empty(EngineKind::Psync)
            }),
            duration: Duration::from_millis(2),
            cost: RunCost::default(),
            yielded_to: None,
        };
        store.record(&spec, "randread-4k-qd1-gentle", &run());
        let series = || store.read(|t| t["t"].profiles[0].1.clone());
        assert_eq!(series().latency.layout(), &ClassicBuckets::coarse());
        // The same layout again changes nothing.
        store.set_histogram_layout(&ClassicBuckets::coarse());
        assert_eq!((series().ios, series().latency.count()), (1, 1));
        // Another one: counters and histogram start from zero, the last run stays.
        store.set_histogram_layout(&ClassicBuckets::fine());
        let s = series();
        assert_eq!((s.ios, s.runs, s.latency.count()), (0, [0; 4], 0));
        assert_eq!(s.latency.layout(), &ClassicBuckets::fine());
        assert!(s.last.is_some() && s.history.len() == 1);
        store.record(&spec, "randread-4k-qd1-gentle", &run());
        assert_eq!((series().ios, series().latency.count()), (1, 1));
        // Targets added later get it too.
        store.set_targets(&[]);
        store.set_targets(std::slice::from_ref(&spec));
        assert_eq!(series().latency.layout(), &ClassicBuckets::fine());
    }

    #[test]
    fn a_run_that_yielded_is_skipped_but_its_io_counts() {
        let (store, spec) = store_with_target();
        let mut h = new_latency_histogram();
        h.record(100_000).unwrap();
        let run = |ending, yielded_to: Option<&str>| RunOutcome::Ran {
            context: Default::default(),
            result: Box::new(Measurement {
                ios: 1,
                bytes: 4096,
                elapsed: Duration::from_millis(1),
                latency_ns: h.clone(),
                ending,
                ..Measurement::empty(EngineKind::Psync)
            }),
            duration: Duration::from_millis(2),
            cost: RunCost::default(),
            yielded_to: yielded_to.map(str::to_owned),
        };
        let profile = "randread-4k-qd1-gentle";
        store.record(&spec, profile, &run(Ending::Finished, None));
        let yielded = run(Ending::Yielded, Some("sdb: 3 I/Os of others after 0.2s"));
        assert_eq!(yielded.status(), RunStatus::Skipped);
        assert_eq!(
            yielded.reason().as_deref(),
            Some("sdb: 3 I/Os of others after 0.2s")
        );
        assert_eq!(
            run(Ending::Yielded, None).reason().as_deref(),
            Some("asked to yield")
        );
        store.record(&spec, profile, &yielded);
        let s = store.read(|t| t["t"].profiles[0].1.clone());
        assert_eq!((s.runs, s.ios, s.history.len()), ([1, 0, 0, 1], 2, 1));
        assert_eq!(s.last.unwrap().result, RunStatus::Success);
        assert_eq!(yielded.skip_reason(), Some(SkipReason::Yielded));
        assert!(s.last_skips[SkipReason::Yielded as usize].is_some());
        assert_eq!(run(Ending::Finished, None).skip_reason(), None);
        // Timed out and cancelled runs are not skips.
        assert_eq!(run(Ending::TimedOut, None).status(), RunStatus::Timeout);
        assert_eq!(run(Ending::Cancelled, None).status(), RunStatus::Error);
    }

    #[test]
    fn the_syncs_of_a_profile_that_syncs_are_recorded_apart() {
        let (store, spec) = store_with(
            "[[targets]]\nname = \"t\"\npath = \"/x\"\nallow_writes = true\n\
             profiles = [\"etcd-wal\", \"randwrite-4k-qd1\"]\n",
        );
        let series = |i: usize| store.read(|t| t["t"].profiles[i].1.clone());
        // From the start, before any run: the sync series of etcd-wal only, at zero.
        let fresh = series(0).syncs.expect("etcd-wal has sync series");
        assert_eq!((fresh.count, fresh.latency.count()), (0, 0));
        assert!(series(1).syncs.is_none());
        let (mut writes, mut syncs) = (new_latency_histogram(), new_latency_histogram());
        for i in 0..50u64 {
            writes.record(5_000 + i).unwrap(); // 5 µs into the page cache
            syncs
                .record(if i == 49 { 12_000_000 } else { 400_000 })
                .unwrap();
        }
        let run = Measurement {
            engine: EngineKind::Psync,
            ios: 50,
            bytes: 50 * 2300,
            elapsed: Duration::from_millis(100),
            errors: 0,
            first_error: None,
            latency_ns: writes,
            syncs: Some(crate::probe::measurement::Syncs {
                count: 50,
                latency_ns: syncs,
            }),
            ..Measurement::empty(EngineKind::Psync)
        };
        let outcome = RunOutcome::Ran {
            context: Default::default(),
            result: Box::new(run),
            duration: Duration::from_millis(101),
            cost: RunCost::default(),
            yielded_to: None,
        };
        assert_eq!(outcome.status(), RunStatus::Success);
        store.record(&spec, "etcd-wal", &outcome);
        let s = series(0);
        let sync = s.syncs.as_ref().unwrap();
        assert_eq!((s.ios, s.latency.count()), (50, 50));
        assert_eq!((sync.count, sync.latency.count()), (50, 50));
        let expected = 49.0 * 400e-6 + 12e-3;
        assert!(
            (sync.latency.sum() - expected).abs() < 1e-5,
            "{}",
            sync.latency.sum()
        );
        let last = s.last.unwrap().sync_latency.unwrap();
        assert!((last.p50 - 400e-6).abs() < 1e-6, "{last:?}");
        assert!((last.max - 12e-3).abs() < 1e-5, "{last:?}");
        // A new bucket layout restarts the sync series too, and keeps them.
        store.set_histogram_layout(&ClassicBuckets::fine());
        let sync = series(0).syncs.unwrap();
        assert_eq!((sync.count, sync.latency.count()), (0, 0));
        assert_eq!(sync.latency.layout(), &ClassicBuckets::fine());
    }
}
