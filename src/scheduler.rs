//! The probe scheduler: runs each target's profiles in sequence every interval, with jitter, and
//! reports every run to [`SeriesStore`].
//!
//! Rules, in the order a cycle applies them:
//! - Each target has its own task; its first cycle starts within a few seconds of start-up (or of
//!   the reload or rescan that added it), then every `interval` (each start shifted at random by
//!   up to ±`jitter` × interval around a fixed grid, so starts do not drift and targets do not
//!   synchronise). Targets added together start one after another in name order, spread over
//!   [`FIRST_CYCLE_MAX_DELAY`] each (at most half their interval): many volumes found at once do
//!   not all start probing at once.
//! - At most `max_concurrent_probes` runs issue I/O at once across all targets (default 1), and
//!   at most one cycle runs per physical device (partitions count as their disk). A run gives its
//!   global slot back as soon as it stops issuing and only waits for its I/O, so that a slow or
//!   hung device does not hold up the others.
//! - A run that returns while the kernel still holds some of its I/O (a hung device: the engine
//!   waits for cancelled I/O for [`engine::DRAIN_GRACE`]) leaves it with the engine, which frees
//!   the buffers only once the kernel has completed it; until then no run starts on that device
//!   (its runs count as `skipped`), so a dead device holds one run's ring, buffers and threads.
//! - Duty-cycle budget per device: a token bucket refilled at `max_duty_cycle` seconds per second
//!   (capacity two cycles' worth); a run only starts when the bucket is not in debt, and its
//!   engine time is charged to it. Runs refused by the budget count as `result="skipped"`.
//! - Busy skip: before each run of a capacity profile (uncapped: it takes all the device gives)
//!   the whole disk's load is measured over `busy_window` ([`crate::contention::Load`]: other
//!   processes' IOPS, mean in-flight I/Os, utilisation); above `skip_busy_above` the run is
//!   skipped. Gentle (rate-capped) profiles run whatever the load: latency under load is what they
//!   are for.
//! - Yield: while any run goes on, a watcher compares the disk's counters with the run's own
//!   ([`crate::contention::Watch`]); a capacity run (with `yield_to_other_io`) stops issuing at
//!   the first sight of another process's I/O and counts as skipped, with what was seen as the
//!   reason. The time every run shared the disk with others is recorded as its cost. Runs of
//!   profiles that make their writes durable are not watched: their own flushes and journal
//!   writes look like another process's I/O. Durability profiles are not busy-skipped either.
//! - Probes run on a thread of their own, never on a tokio worker; so does the stat of the
//!   target path that finds its device, which a cycle waits for at most [`STAT_PATIENCE`] (5 s, as
//!   node_exporter's `--collector.filesystem.mount-timeout`) before recording a timeout. The
//!   engine enforces the run's hard timeout and drains in-flight I/O for at most
//!   [`engine::DRAIN_GRACE`]; if a run has not returned [`GRACE`] after its timeout, or opening
//!   the target (which may fill a probe file) has made no progress for that long, the scheduler
//!   records a timeout and does not start that target again (not for another profile, nor
//!   after a reload) until the thread returns; a thread given up on during the open does not
//!   start its probe afterwards, and its fill stops at the next chunk.

use crate::config::{SchedulerConfig, TargetSpec};
use crate::contention::{DiskReader, Load, OwnIo, Watch, WatchReport};
use crate::probe::engine::{self, DrainingHook, RunOptions, StuckIos};
use crate::probe::profile::{ProbeClass, Profile};
use crate::probe::target::{self, DeviceId, TargetFacts, TargetOptions};
use crate::series::{RunCost, RunOutcome, RunStatus, SeriesStore, TargetInfo};
use rand::Rng;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

/// Extra time, beyond a run's timeout, before the scheduler gives up waiting for it: longer than
/// an engine may settle before its first I/O and drain cancelled I/O after its last.
pub const GRACE: Duration = engine::DRAIN_GRACE
    .saturating_add(engine::SETTLE)
    .saturating_add(engine::CANCEL_POLL)
    .saturating_add(Duration::from_secs(5));
/// How long a cycle waits for the stat of its target's path before giving up on the cycle.
pub const STAT_PATIENCE: Duration = Duration::from_secs(5);
/// How long [`Scheduler::apply`] waits for the stats that label new targets' series; a target on
/// a filesystem that does not answer by then is exported without a device.
pub const LABEL_PATIENCE: Duration = Duration::from_secs(1);
/// Longest delay before a target's first cycle, per target added at the same time.
pub const FIRST_CYCLE_MAX_DELAY: Duration = Duration::from_secs(3);

/// Delay before the first cycle of the `k`-th (from 0) of `n` targets added together, `r` in
/// 0..1 at random: each has a slot of its own in a window of `n` × [`FIRST_CYCLE_MAX_DELAY`], at
/// most half of `interval`, and starts somewhere in it.
pub fn first_cycle_delay(k: usize, n: usize, interval: Duration, r: f64) -> Duration {
    let n = n.max(1) as f64;
    let window = FIRST_CYCLE_MAX_DELAY.mul_f64(n).min(interval / 2);
    window.div_f64(n).mul_f64(k as f64 + r.clamp(0.0, 1.0))
}

/// Paths the scheduler needs.
#[derive(Debug, Clone)]
pub struct Roots {
    /// procfs mountpoint.
    pub procfs: PathBuf,
    /// sysfs mountpoint.
    pub sysfs: PathBuf,
}

/// Per-device duty-cycle accounting.
#[derive(Debug)]
struct Budget {
    tokens: f64,
    last: Instant,
}

impl Budget {
    fn refill(&mut self, now: Instant, rate: f64, capacity: f64) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * rate).min(capacity);
        self.last = now;
    }
}

struct Shared {
    results: Arc<SeriesStore>,
    roots: Roots,
    global: Arc<Semaphore>,
    /// Permits of `global` still to be retired: a reload that lowers `max_concurrent_probes`
    /// retires the free permits at once and these as the runs holding them end. Held while
    /// permits are retired or given back, so that none is given back in between.
    owed: Mutex<usize>,
    /// One lock per physical device, created on first use.
    devices: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Budget>>>>>,
    /// Per target name, its probe and stat threads that have not returned yet; kept across
    /// reloads, so that a changed target does not start beside its predecessor's stuck thread.
    threads: Mutex<HashMap<String, Arc<AtomicUsize>>>,
    /// Per physical device (as `devices`), the I/Os of a run that returned while the kernel still
    /// held some of them; no run starts on the device until they have completed, so that at most
    /// one abandoned run (ring, buffers, threads) exists per device.
    stuck: Mutex<HashMap<String, Arc<StuckIos>>>,
}

impl Shared {
    fn device_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<Option<Budget>>> {
        let mut map = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key.to_owned()).or_default().clone()
    }

    /// The stuck I/Os of an earlier run on device `key`, while the kernel still holds any.
    fn stuck_on(&self, key: &str) -> Option<Arc<StuckIos>> {
        let mut map = self.stuck.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, s| !s.is_clear());
        map.get(key).cloned()
    }

    /// Records what a run on device `key` left in the kernel.
    fn set_stuck(&self, key: &str, stuck: Arc<StuckIos>) {
        let mut map = self.stuck.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(key.to_owned(), stuck);
    }

    fn threads_of(&self, target: &str) -> Arc<AtomicUsize> {
        let mut map = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(target.to_owned()).or_default().clone()
    }

    /// Forgets the thread counts that no task and no thread holds any more, so that the map
    /// does not grow with every name discovery has ever found.
    fn forget_unheld_threads(&self) {
        let mut map = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, count| Arc::strong_count(count) > 1);
    }

    /// Changes the number of global probe slots from `from` to `to`.
    fn resize_global(&self, from: usize, to: usize) {
        let mut owed = self.owed.lock().unwrap_or_else(|e| e.into_inner());
        if to > from {
            // Slots still owed are simply not retired any more; the rest are new.
            let kept = (*owed).min(to - from);
            *owed -= kept;
            self.global.add_permits(to - from - kept);
        } else if to < from {
            let retired = self.global.forget_permits(from - to);
            *owed += from - to - retired;
        }
    }
}

/// A global probe slot, retired instead of given back when a reload lowered the limit while it
/// was held.
struct GlobalSlot<'a> {
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    shared: &'a Shared,
}

impl Drop for GlobalSlot<'_> {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            let mut owed = self.shared.owed.lock().unwrap_or_else(|e| e.into_inner());
            if *owed > 0 {
                *owed -= 1;
                permit.forget();
            } else {
                drop(permit);
            }
        }
    }
}

/// A thread counted in its target's `threads` until this is dropped: when the thread returns,
/// panics, or could not be started (the closure that owns it is then dropped unrun).
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(threads: &Arc<AtomicUsize>) -> Counted {
        threads.fetch_add(1, Ordering::SeqCst);
        Counted(threads.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

struct TargetTask {
    /// Shared with the target's series in [`SeriesStore`] (see [`SeriesStore::record`]).
    spec: Arc<TargetSpec>,
    stop: watch::Sender<bool>,
    cancel: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

/// Owns one task per configured target.
pub struct Scheduler {
    shared: Arc<Shared>,
    max_concurrent: usize,
    tasks: HashMap<String, TargetTask>,
}

impl Scheduler {
    /// A scheduler with no targets yet; call [`Scheduler::apply`]. Must be called inside a tokio
    /// runtime.
    pub fn new(results: Arc<SeriesStore>, roots: Roots, config: &SchedulerConfig) -> Self {
        Scheduler {
            shared: Arc::new(Shared {
                results,
                roots,
                global: Arc::new(Semaphore::new(config.max_concurrent_probes)),
                owed: Mutex::new(0),
                devices: Mutex::new(HashMap::new()),
                threads: Mutex::new(HashMap::new()),
                stuck: Mutex::new(HashMap::new()),
            }),
            max_concurrent: config.max_concurrent_probes,
            tasks: HashMap::new(),
        }
    }

    /// Makes the running tasks match `targets`: removed and changed targets are stopped (their
    /// in-flight run is cancelled), new and changed ones started, unchanged ones left alone.
    /// Returns once every new target's path has been looked at (its series then carry their
    /// final `device` label), or after [`LABEL_PATIENCE`] for a path whose stat hangs.
    pub async fn apply(&mut self, targets: &[TargetSpec], config: &SchedulerConfig) {
        let wanted = config.max_concurrent_probes;
        self.shared.resize_global(self.max_concurrent, wanted);
        self.max_concurrent = wanted;

        let keep: Vec<String> = self
            .tasks
            .iter()
            .filter(|(name, t)| targets.iter().any(|s| &s.name == *name && *s == *t.spec))
            .map(|(name, _)| name.clone())
            .collect();
        let stale: Vec<String> = self
            .tasks
            .keys()
            .filter(|n| !keep.contains(n))
            .cloned()
            .collect();
        for name in stale {
            if let Some(task) = self.tasks.remove(&name) {
                tracing::info!(target = %name, "stopping probes of removed or changed target");
                task.cancel.store(true, Ordering::SeqCst);
                let _ = task.stop.send(true);
            }
        }
        // Kept targets go on with their allocation, new and changed ones get a new one: what a
        // task records is told apart from what its predecessors of the same name still return.
        let specs: Vec<Arc<TargetSpec>> = targets
            .iter()
            .map(|s| match self.tasks.get(&s.name) {
                Some(task) => task.spec.clone(),
                None => Arc::new(s.clone()),
            })
            .collect();
        self.shared.results.set_targets(&specs);
        let mut added: Vec<&Arc<TargetSpec>> = specs
            .iter()
            .filter(|s| !self.tasks.contains_key(&s.name))
            .collect();
        added.sort_by(|a, b| a.name.cmp(&b.name));
        let n = added.len();
        let mut labelled = Vec::new();
        for (k, spec) in added.into_iter().enumerate() {
            let first = first_cycle_delay(k, n, spec.interval, rand::rng().random::<f64>());
            let (stop, stop_rx) = watch::channel(false);
            let cancel = Arc::new(AtomicBool::new(false));
            let (label_tx, label_rx) = tokio::sync::oneshot::channel();
            labelled.push(label_rx);
            let handle = tokio::spawn(run_target(
                spec.clone(),
                self.shared.clone(),
                stop_rx,
                cancel.clone(),
                self.shared.threads_of(&spec.name),
                first,
                label_tx,
            ));
            tracing::info!(
                target = %spec.name,
                path = %spec.path.display(),
                interval = %humantime::format_duration(spec.interval),
                profiles = %spec.profiles.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(","),
                capacity_profiles = %spec.profiles.iter().filter(|p| p.class() == ProbeClass::Capacity)
                    .map(|p| p.name.as_str()).collect::<Vec<_>>().join(","),
                "scheduling probes"
            );
            self.tasks.insert(
                spec.name.clone(),
                TargetTask {
                    spec: spec.clone(),
                    stop,
                    cancel,
                    handle,
                },
            );
        }
        self.shared.forget_unheld_threads();
        let deadline = tokio::time::Instant::now() + LABEL_PATIENCE;
        for label in labelled {
            let _ = tokio::time::timeout_at(deadline, label).await;
        }
    }

    /// Stops every target: in-flight runs are cancelled (the engines stop within 100 ms and
    /// drain their I/O) and their tasks awaited, for at most `deadline`.
    pub async fn shutdown(self, deadline: Duration) {
        for task in self.tasks.values() {
            task.cancel.store(true, Ordering::SeqCst);
            let _ = task.stop.send(true);
        }
        let all = async {
            for task in self.tasks.into_values() {
                let _ = task.handle.await;
            }
        };
        if tokio::time::timeout(deadline, all).await.is_err() {
            tracing::warn!("probe tasks did not stop within {deadline:?}");
        }
    }
}

/// [`target::facts`] of the target's path on a thread of its own, counted in `threads` until it
/// returns: a stat on a hung filesystem (NFS, FUSE) must not block the runtime, whose single
/// worker also accepts scrapes. `Ok(None)` when the path cannot be read (the open will say why);
/// an error when the thread cannot start or has not answered within [`STAT_PATIENCE`].
async fn stat_target(
    spec: &TargetSpec,
    roots: &Roots,
    threads: &Arc<AtomicUsize>,
) -> Result<Option<TargetFacts>, StatFailure> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (path, roots) = (spec.path.clone(), roots.clone());
    let started = Instant::now();
    let counted = Counted::new(threads);
    let spawned = std::thread::Builder::new()
        .name(format!("stat-{}", spec.name))
        .spawn(move || {
            let facts = target::facts(&path, &roots.procfs, &roots.sysfs).ok();
            // Counted out before the scheduler hears of the answer, which may start a run.
            drop(counted);
            let _ = tx.send(facts);
        });
    let failed = |error: String| StatFailure {
        error,
        timed_out: false,
        waited: started.elapsed(),
    };
    if let Err(err) = spawned {
        return Err(failed(format!(
            "cannot start a thread to stat the target: {err}"
        )));
    }
    match tokio::time::timeout(STAT_PATIENCE, rx).await {
        Ok(Ok(facts)) => Ok(facts),
        Ok(Err(_)) => Err(failed("the stat thread ended without a result".to_owned())),
        Err(_) => Err(StatFailure {
            error: format!(
                "stat of {} did not return within {STAT_PATIENCE:?} (hung filesystem?)",
                spec.path.display()
            ),
            timed_out: true,
            waited: started.elapsed(),
        }),
    }
}

/// [`stat_target`], and what it found recorded as the target's info (its series' labels). A
/// target whose path cannot be looked at gets an info without a device, unless one is known.
async fn stat_and_label(
    spec: &Arc<TargetSpec>,
    shared: &Shared,
    threads: &Arc<AtomicUsize>,
) -> Result<Option<TargetFacts>, StatFailure> {
    let stat = stat_target(spec, &shared.roots, threads).await;
    let path = spec.path.display().to_string();
    match &stat {
        Ok(Some(facts)) => {
            let news = shared.results.set_info(spec, target_info(path, facts));
            if let Some(warning) = facts.warning(&spec.path).filter(|_| news) {
                tracing::warn!(target = %spec.name, "{warning}");
            }
        }
        _ => shared.results.set_info_if_unknown(
            spec,
            TargetInfo {
                path,
                ..TargetInfo::default()
            },
        ),
    }
    stat
}

/// The labels of `diskprobe_target_info` for a target at `path`.
fn target_info(path: String, facts: &TargetFacts) -> TargetInfo {
    let device = facts.device.as_ref();
    TargetInfo {
        path,
        device: device.map(|d| d.name.clone()).unwrap_or_default(),
        parent: device.and_then(|d| d.parent.clone()).unwrap_or_default(),
        kind: facts.kind.as_str().to_owned(),
        fstype: facts.fstype.clone(),
        cache: facts
            .cache
            .map(|c| c.as_str().to_owned())
            .unwrap_or_default(),
    }
}

/// Why [`stat_target`] has no answer.
struct StatFailure {
    error: String,
    /// The stat did not return in time (a timeout), rather than failing to start (an error).
    timed_out: bool,
    /// How long the stat was waited for.
    waited: Duration,
}

fn lock_key(spec: &TargetSpec, device: Option<&DeviceId>) -> String {
    match device {
        Some(d) => d.parent.clone().unwrap_or_else(|| d.name.clone()),
        None => format!("path:{}", spec.path.display()),
    }
}

async fn run_target(
    spec: Arc<TargetSpec>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    cancel: Arc<AtomicBool>,
    threads: Arc<AtomicUsize>,
    first: Duration,
    labelled: tokio::sync::oneshot::Sender<()>,
) {
    let mut grid = Instant::now() + first;
    let mut next = grid;
    // The first cycle's stat, made at once: it labels the target's series before the first
    // scrape that shows them (Scheduler::apply waits for it).
    let mut first_stat = Some(stat_and_label(&spec, &shared, &threads).await);
    let _ = labelled.send(());
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next.into()) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        run_cycle(
            &spec,
            &shared,
            &mut stop,
            &cancel,
            &threads,
            first_stat.take(),
        )
        .await;
        if *stop.borrow() {
            return;
        }
        grid += spec.interval;
        let now = Instant::now();
        if grid < now {
            // The cycle overran a whole interval: restart the grid from now.
            grid = now;
        }
        let shift =
            spec.interval.as_secs_f64() * spec.jitter * rand::rng().random_range(-1.0..=1.0);
        next = if shift >= 0.0 {
            grid + Duration::from_secs_f64(shift)
        } else {
            grid.checked_sub(Duration::from_secs_f64(-shift))
                .unwrap_or(grid)
        }
        .max(now);
    }
}

async fn run_cycle(
    spec: &Arc<TargetSpec>,
    shared: &Arc<Shared>,
    stop: &mut watch::Receiver<bool>,
    cancel: &Arc<AtomicBool>,
    threads: &Arc<AtomicUsize>,
    stat: Option<Result<Option<TargetFacts>, StatFailure>>,
) {
    // Records the same outcome for every profile of the cycle.
    let record_all = |outcome: &dyn Fn() -> RunOutcome| {
        for p in &spec.profiles {
            shared.results.record(spec, &p.name, outcome());
        }
    };
    let still_in_flight = || RunOutcome::Skipped {
        reason: "previous run still in flight".to_owned(),
    };
    let stat = match stat {
        Some(stat) => stat,
        None if threads.load(Ordering::SeqCst) > 0 => {
            tracing::warn!(target = %spec.name, "an earlier run or stat of the target has not returned; skipping this cycle");
            record_all(&still_in_flight);
            return;
        }
        None => stat_and_label(spec, shared, threads).await,
    };
    let device = match stat {
        Ok(facts) => facts.and_then(|f| f.device),
        Err(StatFailure {
            error,
            timed_out,
            waited: duration,
        }) => {
            tracing::error!(target = %spec.name, "{error}; abandoning this cycle");
            record_all(&|| {
                let error = error.clone();
                if timed_out {
                    RunOutcome::Abandoned { error, duration }
                } else {
                    RunOutcome::Failed { error, duration }
                }
            });
            return;
        }
    };
    let key = lock_key(spec, device.as_ref());
    if let Some(stuck) = shared.stuck_on(&key) {
        record_all(&|| held_by_kernel(&stuck, &key));
        return;
    }
    // The device first, then a global slot for each run: a run gives its slot back while it only
    // drains its I/O, and the cycle takes one again for its next run; taking them in the other
    // order, a cycle holding a slot could wait for this device while this cycle waits for a slot.
    let lock = shared.device_lock(&key);
    let mut budget = tokio::select! {
        g = lock.lock() => g,
        _ = stop.changed() => return,
    };
    let mut slot = None;
    let capacity = (2.0 * spec.busy_per_cycle().as_secs_f64())
        .max(2.0 * spec.max_duty_cycle * spec.interval.as_secs_f64());
    let budget = budget.get_or_insert_with(|| Budget {
        tokens: capacity,
        last: Instant::now(),
    });
    for profile in &spec.profiles {
        if *stop.borrow() {
            return;
        }
        budget.refill(Instant::now(), spec.max_duty_cycle, capacity);
        if budget.tokens < 0.0 {
            tracing::info!(target = %spec.name, profile = %profile.name, device = %key,
                "skipping run: the device's duty-cycle budget is used up");
            shared.results.record(
                spec,
                &profile.name,
                RunOutcome::Skipped {
                    reason: format!("duty-cycle budget of {key} used up"),
                },
            );
            continue;
        }
        let busy_check = profile.class() == ProbeClass::Capacity && !spec.skip_busy_above.is_off();
        if let (true, Some(dev)) = (busy_check, device.as_ref()) {
            let disk = dev.parent.as_deref().unwrap_or(&dev.name);
            let load = disk_load(&shared.roots.sysfs, disk, spec.busy_window, stop).await;
            if let Some(why) = load.and_then(|l| l.above(&spec.skip_busy_above)) {
                tracing::info!(target = %spec.name, profile = %profile.name, device = %disk,
                    load = %why, "skipping run: device busy");
                shared.results.record(
                    spec,
                    &profile.name,
                    RunOutcome::Skipped {
                        reason: format!("{disk} is busy: {why}"),
                    },
                );
                continue;
            }
            // The wait above ends early when the target is stopped: no run then.
            if *stop.borrow() {
                return;
            }
        }
        if threads.load(Ordering::SeqCst) > 0 {
            // An earlier profile's run was abandoned and its thread still holds the target.
            shared
                .results
                .record(spec, &profile.name, still_in_flight());
            continue;
        }
        if let Some(stuck) = shared.stuck_on(&key) {
            shared
                .results
                .record(spec, &profile.name, held_by_kernel(&stuck, &key));
            continue;
        }
        if slot.is_none() {
            slot = acquire_slot(shared, stop).await;
            if slot.is_none() {
                return;
            }
        }
        let (outcome, busy) =
            run_on_thread(spec, profile, shared, cancel, threads, &mut slot).await;
        if cancel.load(Ordering::SeqCst) {
            // Cancelled by a shutdown or a reload: not a result of the target, not counted.
            tracing::info!(target = %spec.name, profile = %profile.name, "probe run cancelled");
            return;
        }
        if let RunOutcome::Ran { result, .. } | RunOutcome::Yielded { result, .. } = &outcome
            && let Some(stuck) = &result.stuck
        {
            tracing::warn!(target = %spec.name, profile = %profile.name, device = %key, ios = stuck.count(),
                "the kernel still holds I/O of the run; no run starts on the device until it completes");
            shared.set_stuck(&key, Arc::clone(stuck));
        }
        budget.tokens -= busy.as_secs_f64();
        let yielded = matches!(outcome, RunOutcome::Yielded { .. });
        let (result, error) = shared.results.record(spec, &profile.name, outcome);
        if yielded && result == RunStatus::Skipped {
            tracing::info!(
                target = %spec.name,
                profile = %profile.name,
                reason = error.as_deref().unwrap_or_default(),
                "capacity run stopped early"
            );
        } else if result != RunStatus::Success {
            tracing::warn!(
                target = %spec.name,
                profile = %profile.name,
                result = result.as_str(),
                error = error.as_deref().unwrap_or("no I/O completed"),
                "probe run did not succeed"
            );
        }
    }
}

/// A global probe slot, or `None` when the target is stopped first.
async fn acquire_slot<'a>(
    shared: &'a Arc<Shared>,
    stop: &mut watch::Receiver<bool>,
) -> Option<GlobalSlot<'a>> {
    tokio::select! {
        p = shared.global.clone().acquire_owned() => p.ok().map(|p| GlobalSlot { permit: Some(p), shared }),
        _ = stop.changed() => None,
    }
}

/// The skip recorded while the kernel still holds I/O of an earlier run on device `key`.
fn held_by_kernel(stuck: &StuckIos, key: &str) -> RunOutcome {
    let age = stuck.oldest().map_or(Duration::ZERO, |at| at.elapsed());
    RunOutcome::Skipped {
        reason: format!(
            "{} I/Os of an earlier run are still held by the kernel on {key} (the oldest for {:.0?})",
            stuck.count(),
            age
        ),
    }
}

/// The load of `disk` over `window` (no probe runs on it meanwhile: the caller holds its lock);
/// `None` when its counters cannot be read or the target is stopped.
async fn disk_load(
    sysfs: &Path,
    disk: &str,
    window: Duration,
    stop: &mut watch::Receiver<bool>,
) -> Option<Load> {
    let reader = DiskReader::new(sysfs, disk);
    let before = reader.sample().ok()?;
    tokio::select! {
        () = tokio::time::sleep(window) => {}
        _ = stop.changed() => return None,
    }
    Load::between(&before, &reader.sample().ok()?)
}

enum FromThread {
    /// Another chunk of the probe file was written.
    Filled,
    /// The target is open: the engine takes over.
    Opened,
    /// The run stopped issuing I/O and only waits for what is in flight.
    Draining,
    Done(RunOutcome, Duration),
}

/// Runs one profile on a dedicated thread. Returns the outcome and the engine time to charge.
/// The global probe `slot` is given back (set to `None`) as soon as the run stops issuing I/O:
/// one that only waits for its I/O (a slow or hung device) does not hold up other devices.
///
/// Opening may create and fill the probe file, which takes as long as the device needs, so it is
/// not bounded by the run's timeout; but an open that makes no progress (no chunk of a fill
/// written) for the run's timeout plus [`GRACE`] is given up on like a run that does not return,
/// so that a hung filesystem does not hold the global probe slot for ever.
async fn run_on_thread(
    spec: &Arc<TargetSpec>,
    profile: &Profile,
    shared: &Arc<Shared>,
    cancel: &Arc<AtomicBool>,
    threads: &Arc<AtomicUsize>,
    slot: &mut Option<GlobalSlot<'_>>,
) -> (RunOutcome, Duration) {
    let started = Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let job_spec = spec.clone();
    let job_profile = profile.clone();
    let roots = shared.roots.clone();
    let job_cancel = cancel.clone();
    let counted = Counted::new(threads);
    let spawned = std::thread::Builder::new()
        .name(format!("probe-{}", spec.name))
        .spawn(move || {
            let done = probe_thread(&job_spec, &job_profile, &roots, job_cancel, &tx);
            // Counted out before the scheduler hears of the end, which may start the next run.
            drop(counted);
            if let Some((outcome, busy)) = done {
                let _ = tx.send(FromThread::Done(outcome, busy));
            }
        });
    if let Err(err) = spawned {
        let error = format!("cannot start a probe thread: {err}");
        return (
            RunOutcome::Failed {
                error,
                duration: started.elapsed(),
            },
            Duration::ZERO,
        );
    }
    let patience = spec.timeout + GRACE;
    let mut opened: Option<Instant> = None;
    let mut deadline = tokio::time::Instant::now() + patience;
    loop {
        let Ok(msg) = tokio::time::timeout_at(deadline, rx.recv()).await else {
            // The target's cancel flag is left alone: it is never reset, and later runs would
            // start cancelled. The thread counts itself out of `threads` when it returns, and
            // does not start the engine once this receiver is gone.
            // Only the time since the engine was handed the target is charged to the budget.
            let (error, charged) = match opened {
                Some(at) => (
                    format!("the probe did not return within its timeout plus {GRACE:?}"),
                    at.elapsed(),
                ),
                None => (
                    format!("opening the target made no progress for {patience:?}"),
                    Duration::ZERO,
                ),
            };
            tracing::error!(target = %spec.name, profile = %profile.name, "{error}; abandoning the run");
            return (
                RunOutcome::Abandoned {
                    error,
                    duration: started.elapsed(),
                },
                charged,
            );
        };
        match msg {
            Some(FromThread::Filled) => deadline = tokio::time::Instant::now() + patience,
            Some(FromThread::Opened) => {
                opened = Some(Instant::now());
                deadline = tokio::time::Instant::now() + patience;
            }
            Some(FromThread::Draining) => *slot = None,
            Some(FromThread::Done(outcome, busy)) => return (outcome, busy),
            None => {
                return (
                    RunOutcome::Failed {
                        error: "the probe thread ended without a result".to_owned(),
                        duration: started.elapsed(),
                    },
                    Duration::ZERO,
                );
            }
        }
    }
}

/// Opens the target and runs the profile, reporting progress on `tx`. Returns the outcome and
/// the engine time to charge, or `None` when the scheduler gave up on the run during the open.
fn probe_thread(
    spec: &TargetSpec,
    profile: &Profile,
    roots: &Roots,
    cancel: Arc<AtomicBool>,
    tx: &tokio::sync::mpsc::UnboundedSender<FromThread>,
) -> Option<(RunOutcome, Duration)> {
    crate::sandbox::check_on_this_thread();
    let started = Instant::now();
    let fail = |error: String| {
        Some((
            RunOutcome::Failed {
                error,
                duration: started.elapsed(),
            },
            Duration::ZERO,
        ))
    };
    let options = TargetOptions {
        size: spec.size,
        offset: spec.offset,
        write: profile.rw.is_write(),
        device_writes: spec.allow_device_writes,
        procfs: roots.procfs.clone(),
        sysfs: roots.sysfs.clone(),
    };
    // A fill goes on while the scheduler still waits for this run and it is not cancelled.
    let filled = || tx.send(FromThread::Filled).is_ok() && !cancel.load(Ordering::Relaxed);
    let opened = match target::open_reporting(&spec.path, &options, &filled) {
        Ok(t) => t,
        Err(err) => return fail(err.to_string()),
    };
    let _ = tx.send(FromThread::Opened);
    if tx.is_closed() {
        // The scheduler gave up on this run while the target was being opened: the probe would
        // run outside its limits (global slot, device lock, budget).
        return None;
    }
    let draining = tx.clone();
    let opts = RunOptions {
        engine: spec.engine,
        timeout: spec.timeout,
        cancel,
        // Configured profiles always carry a runtime (config::probes fills in the default).
        default_runtime: crate::config::probes::DEFAULT_RUNTIME,
        on_draining: Some(DrainingHook::new(move || {
            let _ = draining.send(FromThread::Draining);
        })),
        // A fresh progress and yield flag for this run, watched below.
        ..RunOptions::default()
    };
    let run = || engine::run(&opened, profile, &opts);
    // The own flushes of a run that makes its writes durable (rate-capped or not), and the
    // journal writes its syncs cause, cannot be told from another process's I/O: it is not
    // watched (nor charged a cost).
    let watched = !profile.makes_durable();
    let (ran, report) = match &opened.device {
        Some(device) if watched => {
            watch_of(spec, profile, roots, device).around(&opts.progress, &opts.yield_now, run)
        }
        _ => (run(), WatchReport::default()),
    };
    let cost = RunCost {
        contended: report.contended,
        others_in_flight_seconds: report.others_in_flight_seconds,
    };
    match ran {
        Ok(result) => {
            let busy = result.elapsed;
            let outcome = if result.yielded {
                RunOutcome::Yielded {
                    result: Box::new(result),
                    cost,
                    reason: report
                        .yielded_for
                        .unwrap_or_else(|| "asked to yield".to_owned()),
                }
            } else {
                RunOutcome::Ran {
                    result: Box::new(result),
                    duration: started.elapsed(),
                    cost,
                }
            };
            Some((outcome, busy))
        }
        Err(err) => fail(err.to_string()),
    }
}

/// How a run of `profile` is watched on the disk under `device` (see [`crate::contention`]).
fn watch_of(spec: &TargetSpec, profile: &Profile, roots: &Roots, device: &DeviceId) -> Watch {
    let disk_name = device.parent.clone().unwrap_or_else(|| device.name.clone());
    let disk = DiskReader::new(&roots.sysfs, &disk_name);
    Watch {
        own: OwnIo {
            block_size: profile.block_size,
            write: profile.rw.is_write(),
            requests_per_io: disk.requests_per_io(profile.block_size),
        },
        disk,
        disk_name,
        yield_on_others: spec.yield_to_other_io && profile.class() == ProbeClass::Capacity,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_is_the_figure_the_docs_give() {
        // docs/probes.md (Targets) and the README state how long a stalled open or run is
        // waited for.
        let stated = format!("timeout plus {} s", GRACE.as_secs_f64());
        for (file, text) in [
            ("docs/probes.md", include_str!("../docs/probes.md")),
            ("README.md", include_str!("../README.md")),
        ] {
            assert!(text.contains(&stated), "{file} does not say {stated:?}");
        }
    }

    #[test]
    fn first_cycles_of_targets_added_together_get_a_slot_each() {
        let secs = |d: Duration| d.as_secs_f64();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        let interval = Duration::from_secs(300);
        // One target: within 3 s, as always.
        assert!(close(secs(first_cycle_delay(0, 1, interval, 1.0)), 3.0));
        // Twelve disks found at once: a 3 s slot each, one after another, over 36 s.
        for k in 0..12 {
            let earliest = secs(first_cycle_delay(k, 12, interval, 0.0));
            let latest = secs(first_cycle_delay(k, 12, interval, 1.0));
            assert!(close(earliest, 3.0 * k as f64), "{k}: {earliest}");
            assert!(close(latest, 3.0 * (k + 1) as f64), "{k}: {latest}");
        }
        // Two hundred: spread over half the interval, not 600 s.
        assert!(close(
            secs(first_cycle_delay(199, 200, interval, 1.0)),
            150.0
        ));
        assert!(close(
            secs(first_cycle_delay(100, 200, interval, 0.0)),
            75.0
        ));
        // A short interval bounds a single target's delay too.
        let short = Duration::from_secs(1);
        assert!(close(secs(first_cycle_delay(0, 1, short, 1.0)), 0.5));
    }

    #[tokio::test]
    async fn lowering_the_probe_limit_retires_slots_held_by_running_probes() {
        let config = |max_concurrent_probes| SchedulerConfig {
            max_concurrent_probes,
        };
        let roots = Roots {
            procfs: "/proc".into(),
            sysfs: "/sys".into(),
        };
        let mut scheduler = Scheduler::new(Arc::new(SeriesStore::new()), roots, &config(4));
        let shared = scheduler.shared.clone();
        let take = || {
            let permit = shared.global.clone().try_acquire_owned().ok()?;
            Some(GlobalSlot {
                permit: Some(permit),
                shared: &shared,
            })
        };
        let held: Vec<_> = (0..3).map(|_| take().unwrap()).collect();
        // 4 → 1 with three slots in use: the free one goes now, two when their runs end.
        scheduler.apply(&[], &config(1)).await;
        assert_eq!(shared.global.available_permits(), 0);
        drop(held);
        assert_eq!(shared.global.available_permits(), 1, "the limit is 1");
        let one = take().unwrap();
        assert!(take().is_none());
        // 1 → 3 while one is held, then back to 2: owed slots are cancelled before new ones.
        scheduler.apply(&[], &config(3)).await;
        assert_eq!(shared.global.available_permits(), 2);
        scheduler.apply(&[], &config(2)).await;
        drop(one);
        assert_eq!(shared.global.available_permits(), 2);
        let held: Vec<_> = (0..3).map(|_| take()).collect();
        assert_eq!(held.iter().filter(|s| s.is_some()).count(), 2);
    }
}
