//! The discovery task: rescans the machine for each rule every `rescan`, and publishes the
//! targets all rules find together whenever they change.
//!
//! A scan reads `<sysfs>/block` and, when a mount rule is due, the mount table, on a thread of its
//! own that is waited for at most [`SCAN_PATIENCE`] (the scheduler's stat patience): nothing a
//! scan reads should block, but if it did, neither scrapes nor probes would wait, the rules keep
//! what they found last, and no second scan starts until the first returns. Nothing here touches a
//! mounted filesystem: mounts are known from the mount table and their devices from sysfs, so a
//! hung mount costs the target on it a stat timeout in the scheduler, and the rescan nothing.

use super::lost::{LostTarget, LostTracker, Rescan};
use super::matching::{self, Found, Scan};
use crate::config::{Config, DiscoverRule, Retired, TargetFile, TargetSpec};
use crate::host::{Roots, unix_now};
use crate::mountinfo;
use std::collections::BTreeSet;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a scan is waited for before the rescan is given up (the rules keep what they found).
pub(crate) const SCAN_PATIENCE: Duration = crate::host::STAT_PATIENCE;

/// How many dropped names a log line lists.
const LOGGED_NAMES: usize = 10;

/// Why a scan has no result.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// A directory or file every scan needs could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// What was read.
        path: PathBuf,
        /// Why it failed.
        source: io::Error,
    },
    /// The scan thread could not be started.
    #[error("cannot start a thread to rescan: {0}")]
    Thread(io::Error),
    /// The scan did not return in time.
    #[error("the rescan did not return within {0:?}")]
    Stuck(Duration),
    /// A scan given up on earlier has still not returned.
    #[error("an earlier rescan has not returned yet")]
    StillRunning,
    /// The scan thread ended without a result (it panicked).
    #[error("the rescan thread ended without a result")]
    Lost,
}

/// Reads what the rules need from the machine: the block devices, and the mount table when
/// `mounts` (with the devices named by the sources of mounts whose device number is anonymous).
///
/// The mount table is init's (`<procfs>/1/mountinfo`: the host's, also from a container that
/// mounts the host's `/proc`, as node_exporter's filesystem collector reads it), or the agent's own
/// (`<procfs>/self/mountinfo`) where init's cannot be read (no root).
pub fn scan(roots: &Roots, dev_dir: &Path, mounts: bool) -> Result<Scan, ScanError> {
    let block = crate::blockdev::sysfs::block_root(&roots.sysfs);
    let devices = crate::blockdev::all(&roots.sysfs).map_err(|source| ScanError::Read {
        path: block,
        source,
    })?;
    let mut scan = Scan {
        dev_dir: dev_dir.to_owned(),
        devices,
        mounts: Vec::new(),
        sources: Default::default(),
    };
    if mounts {
        let init = roots.procfs.join("1/mountinfo");
        let own = roots.procfs.join("self/mountinfo");
        let text = std::fs::read_to_string(&init)
            .or_else(|_| std::fs::read_to_string(&own))
            .map_err(|source| ScanError::Read { path: own, source })?;
        scan.mounts = mountinfo::parse(&text);
        for m in scan.mounts.iter().filter(|m| m.major == 0) {
            if let Some(number) = block_device_number(dev_dir, &m.source) {
                scan.sources.insert(m.source.clone(), number);
            }
        }
    }
    Ok(scan)
}

/// `MAJ:MIN` of the block device a mount source such as `/dev/sdb1` names, looked up under
/// `dev_dir` (the mount table names the host's `/dev`).
fn block_device_number(dev_dir: &Path, source: &str) -> Option<(u32, u32)> {
    let name = Path::new(source).strip_prefix("/dev").ok()?;
    if name.as_os_str().is_empty() {
        return None;
    }
    let meta = std::fs::metadata(dev_dir.join(name)).ok()?;
    meta.file_type()
        .is_block_device()
        .then(|| (libc::major(meta.rdev()), libc::minor(meta.rdev())))
}

/// Clears a flag when dropped: when the scan thread returns, or panics.
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// [`scan`] on a thread of its own, waited for at most [`SCAN_PATIENCE`]; refused while an
/// earlier one given up on (`running`) has not returned.
async fn scan_on_thread(
    roots: &Roots,
    dev_dir: &Path,
    mounts: bool,
    running: &Arc<AtomicBool>,
) -> Result<Scan, ScanError> {
    if running.swap(true, Ordering::SeqCst) {
        return Err(ScanError::StillRunning);
    }
    let guard = Running(running.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (roots, dev_dir) = (roots.clone(), dev_dir.to_owned());
    std::thread::Builder::new()
        .name("discovery".to_owned())
        .spawn(move || {
            let result = scan(&roots, &dev_dir, mounts);
            drop(guard);
            let _ = tx.send(result);
        })
        .map_err(ScanError::Thread)?;
    match tokio::time::timeout(SCAN_PATIENCE, rx).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(ScanError::Lost),
        Err(_) => Err(ScanError::Stuck(SCAN_PATIENCE)),
    }
}

/// What the discovery task works from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Plan {
    /// The rules, in file order.
    pub rules: Vec<DiscoverRule>,
    /// Names that configured targets use (discovered targets never take them).
    pub configured: BTreeSet<String>,
    /// Where configured targets' files and devices are (discovered targets never probe them).
    pub configured_files: Vec<TargetFile>,
    /// `[retired] disks`: lost targets of block rules that are gone for good.
    pub retired: Retired,
}

impl Plan {
    /// The plan for `config`.
    pub(crate) fn new(config: &Config) -> Plan {
        Plan {
            rules: config.discover.clone(),
            configured: config.targets.iter().map(|t| t.name.clone()).collect(),
            configured_files: config.target_files.clone(),
            retired: config.retired.clone(),
        }
    }
}

/// One rule's state, for `diskprobe_discovered_targets` and its companions.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RuleStatus {
    /// The rule's id (the `rule` label).
    pub id: String,
    /// Targets it contributes now.
    pub targets: usize,
    /// Matches beyond its `max_targets` at its last rescan.
    pub dropped: usize,
    /// Matches its name template named nothing at its last rescan (not probed).
    pub unnamed: usize,
    /// When its last rescan completed (Unix seconds); `None` before the first.
    pub last_rescan: Option<f64>,
}

/// The state of every rule, written by the discovery task and read by its collector.
#[derive(Debug, Default)]
pub(crate) struct Status {
    rules: Mutex<Vec<RuleStatus>>,
    lost: Mutex<Vec<LostTarget>>,
}

impl Status {
    /// Runs `f` over every rule's status, in rule order.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&[RuleStatus]) -> R) -> R {
        f(&self.rules.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Runs `f` over the targets block rules lost ([`super::lost`]), oldest first.
    pub(crate) fn read_lost<R>(&self, f: impl FnOnce(&[LostTarget]) -> R) -> R {
        f(&self.lost.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn set(&self, rules: Vec<RuleStatus>) {
        *self.rules.lock().unwrap_or_else(|e| e.into_inner()) = rules;
    }

    fn set_lost(&self, lost: &[LostTarget]) {
        let mut current = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        if *current != lost {
            *current = lost.to_vec();
        }
    }
}

/// The running discovery task.
pub(crate) struct Discovery {
    plan: watch::Sender<Arc<Plan>>,
    found: watch::Receiver<Arc<Vec<TargetSpec>>>,
    task: JoinHandle<()>,
}

impl Discovery {
    /// Starts rescanning for `plan`'s rules (at once, then each every its `rescan`), with the
    /// device nodes in `dev_dir`, until `stop` is cancelled; the targets block rules lose are
    /// kept in `lost_file` (none: in memory only). Must be called inside a tokio runtime.
    pub(crate) fn start(
        roots: Roots,
        dev_dir: PathBuf,
        plan: Plan,
        status: Arc<Status>,
        lost_file: Option<PathBuf>,
        stop: CancellationToken,
    ) -> Discovery {
        let (plan_tx, plan_rx) = watch::channel(Arc::new(plan));
        let (found_tx, found_rx) = watch::channel(Arc::new(Vec::new()));
        // What was lost before a restart is published from the first scrape on.
        let mut lost = LostTracker::load(lost_file);
        lost.set_retired(&plan_rx.borrow().retired);
        lost.expire(&plan_rx.borrow().rules, unix_now());
        status.set_lost(lost.entries());
        let rescans = run(roots, dev_dir, plan_rx, found_tx, status, lost);
        // Stopped at whatever it waits for (a scan's thread is not waited for).
        let task = tokio::spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = rescans => {}
            }
        });
        Discovery {
            plan: plan_tx,
            found: found_rx,
            task,
        }
    }

    /// Replaces the rules (after a reload): every rule is rescanned at once.
    pub(crate) fn set_plan(&self, plan: Plan) {
        self.plan.send_replace(Arc::new(plan));
    }

    /// The targets found by the last rescan.
    pub(crate) fn current(&self) -> Arc<Vec<TargetSpec>> {
        self.found.borrow().clone()
    }

    /// Waits until a rescan finds another set of targets, and returns it.
    pub(crate) async fn changed(&mut self) -> Arc<Vec<TargetSpec>> {
        if self.found.changed().await.is_err() {
            // The task has ended (it only does when stopped): nothing will change any more.
            std::future::pending::<()>().await;
        }
        self.found.borrow_and_update().clone()
    }

    /// Waits until the task has stopped (its token cancelled).
    pub(crate) async fn stopped(self) {
        let _ = self.task.await;
    }
}

/// Sentences logged at the last rescan, so that each is logged once while it holds.
#[derive(Default)]
struct Logged(BTreeSet<String>);

impl Logged {
    fn update(&mut self, notes: Vec<String>, warnings: Vec<String>) {
        let mut now = BTreeSet::new();
        for note in notes {
            if !self.0.contains(&note) {
                tracing::info!("discovery: {note}");
            }
            now.insert(note);
        }
        for warning in warnings {
            if !self.0.contains(&warning) {
                tracing::warn!("discovery: {warning}");
            }
            now.insert(warning);
        }
        self.0 = now;
    }
}

async fn run(
    roots: Roots,
    dev_dir: PathBuf,
    mut plans: watch::Receiver<Arc<Plan>>,
    found_tx: watch::Sender<Arc<Vec<TargetSpec>>>,
    status: Arc<Status>,
    lost: LostTracker,
) {
    let mut rules = Rules::new(plans.borrow_and_update().clone());
    let mut task = Task {
        roots,
        dev_dir,
        running: Arc::new(AtomicBool::new(false)),
        logged: Logged::default(),
        found_tx,
        status,
        lost,
    };
    loop {
        let now = Instant::now();
        let ready: Vec<usize> = (0..rules.plan.rules.len())
            .filter(|&i| rules.due[i] <= now)
            .collect();
        let scanned_now = task.rescan(&mut rules, &ready, now).await;
        if !ready.is_empty() || rules.refresh {
            rules.refresh = false;
            let (targets, counts, notes) =
                matching::assemble(&rules.plan.rules, &rules.found, &rules.plan.configured);
            task.track_losses(&rules, &ready, &targets, scanned_now.as_ref());
            task.publish(&rules, targets, &counts, notes);
        }
        let next = rules.due.iter().min().copied();
        tokio::select! {
            () = sleep_until(next) => {}
            changed = plans.changed() => {
                if changed.is_err() {
                    return;
                }
                rules = Rules::new(plans.borrow_and_update().clone());
                task.lost.set_retired(&rules.plan.retired);
            }
        }
    }
}

/// The rules in force and what each found, when it was scanned and is due again.
struct Rules {
    plan: Arc<Plan>,
    found: Vec<Option<Found>>,
    due: Vec<Instant>,
    scanned: Vec<Option<f64>>,
    /// Whether what is published must be worked out again although no rule is due (new rules).
    refresh: bool,
}

impl Rules {
    /// `plan`'s rules, each due at once.
    fn new(plan: Arc<Plan>) -> Rules {
        let n = plan.rules.len();
        Rules {
            plan,
            found: vec![None; n],
            due: vec![Instant::now(); n],
            scanned: vec![None; n],
            refresh: true,
        }
    }
}

/// What the discovery task keeps from one rescan to the next, besides the rules.
struct Task {
    roots: Roots,
    dev_dir: PathBuf,
    /// Whether a scan's thread is still running.
    running: Arc<AtomicBool>,
    logged: Logged,
    found_tx: watch::Sender<Arc<Vec<TargetSpec>>>,
    status: Arc<Status>,
    lost: LostTracker,
}

impl Task {
    /// Scans the machine for the `ready` rules (none: no scan) and sets what they found and
    /// when they are due again; returns the scan and its time when one was made.
    async fn rescan(
        &self,
        rules: &mut Rules,
        ready: &[usize],
        now: Instant,
    ) -> Option<(Scan, f64)> {
        if ready.is_empty() {
            return None;
        }
        let mut scanned_now = None;
        let mounts = ready
            .iter()
            .any(|&i| rules.plan.rules[i].source.kind() == "mount");
        match scan_on_thread(&self.roots, &self.dev_dir, mounts, &self.running).await {
            Ok(scan) => {
                let at = unix_now();
                for &i in ready {
                    rules.found[i] = Some(matching::find(
                        &rules.plan.rules[i],
                        &scan,
                        &rules.plan.configured_files,
                    ));
                    rules.scanned[i] = Some(at);
                }
                scanned_now = Some((scan, at));
            }
            // A scan that does not return is reported once, not at every rescan after it.
            Err(ScanError::StillRunning) => {
                tracing::debug!("discovery: {}", ScanError::StillRunning);
            }
            Err(err) => {
                tracing::error!(%err, "discovery: rescan failed; the rules keep the targets they found before");
            }
        }
        for &i in ready {
            rules.due[i] = now + rules.plan.rules[i].rescan;
        }
        scanned_now
    }

    /// Tells the lost-target tracker what a scan found (`targets`, assembled), expires what was
    /// lost too long ago and reports what stays lost.
    fn track_losses(
        &mut self,
        rules: &Rules,
        ready: &[usize],
        targets: &[TargetSpec],
        scanned_now: Option<&(Scan, f64)>,
    ) {
        if let Some((scan, at)) = scanned_now {
            self.lost.after_rescan(&Rescan {
                rules: &rules.plan.rules,
                ready,
                targets,
                scan,
                now: *at,
            });
        }
        self.lost.expire(&rules.plan.rules, unix_now());
        self.status.set_lost(self.lost.entries());
    }

    /// Logs what the rules found to say, sets their status and publishes `targets` when they
    /// changed.
    fn publish(
        &mut self,
        rules: &Rules,
        targets: Vec<TargetSpec>,
        counts: &[usize],
        mut notes: Vec<String>,
    ) {
        let mut warnings = Vec::new();
        for (rule, f) in rules.plan.rules.iter().zip(&rules.found) {
            let Some(f) = f else { continue };
            notes.extend(f.notes.iter().cloned());
            if !f.dropped.is_empty() {
                warnings.push(over_limit(rule, f));
            }
        }
        self.logged.update(notes, warnings);
        self.status.set(
            rules
                .plan
                .rules
                .iter()
                .enumerate()
                .map(|(i, rule)| RuleStatus {
                    id: rule.id.clone(),
                    targets: counts[i],
                    dropped: rules.found[i].as_ref().map_or(0, |f| f.dropped.len()),
                    unnamed: rules.found[i].as_ref().map_or(0, |f| f.unnamed),
                    last_rescan: rules.scanned[i],
                })
                .collect(),
        );
        self.found_tx.send_if_modified(|current| {
            let changed = **current != targets;
            if changed {
                *current = Arc::new(targets);
            }
            changed
        });
    }
}

/// Sleeps until `at`, or for ever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn over_limit(rule: &DiscoverRule, found: &Found) -> String {
    let mut names = found
        .dropped
        .iter()
        .take(LOGGED_NAMES)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if found.dropped.len() > LOGGED_NAMES {
        names.push_str(", ...");
    }
    format!(
        "rule {}: {} matches, above max_targets {}; probing the first {} by name, not {} more ({names})",
        rule.id,
        found.targets.len() + found.dropped.len(),
        rule.max_targets,
        found.targets.len(),
        found.dropped.len(),
    )
}
