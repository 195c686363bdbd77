//! A probe run on a thread of its own, never on a tokio worker: the thread opens the target and
//! runs the engine, and tells the scheduler how far it got ([`FromThread`]: the fill of a probe
//! file goes on, the target is open, the run drains, the outcome). The scheduler gives the global
//! slot back when the run drains, and gives up on a thread that goes quiet for the run's timeout
//! plus [`GRACE`].

use super::log;
use super::probe_slots::GlobalSlot;
use super::shared::{Counted, Shared};
use super::target_devices::TargetDevices;
use crate::blockdev::BlockDevice;
use crate::blockdev::counters::DiskReader;
use crate::blockdev::identity::DiskIdentity;
use crate::config::TargetSpec;
use crate::contention::{OwnIo, Watch, WatchReport};
use crate::host::Roots;
use crate::probe::engine::{self, DrainingHook, RunOptions};
use crate::probe::error::ProbeError;
use crate::probe::io_target::filesystem::Expected;
use crate::probe::io_target::{self, OpenTarget, TargetError, TargetOptions};
use crate::probe::measurement::{ErrorReason, SkipReason};
use crate::probe::profile::{ProbeClass, Profile};
use crate::run_context;
use crate::series::{RunCost, RunOutcome, SeriesStore};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Extra time, beyond a run's timeout, before the scheduler gives up waiting for it: longer than
/// an engine may settle before its first I/O, notice the timeout and drain cancelled I/O after its
/// last, plus [`GRACE_MARGIN`].
pub(crate) const GRACE: Duration = engine::DRAIN_GRACE
    .saturating_add(engine::SETTLE)
    .saturating_add(engine::CANCEL_POLL)
    .saturating_add(GRACE_MARGIN);

/// What [`GRACE`] allows beyond the engine's own limits: room for a loaded machine to schedule
/// the probe thread and let it report, so that a run that did return is not given up on.
pub(crate) const GRACE_MARGIN: Duration = Duration::from_secs(5);

/// What a probe thread tells the scheduler.
enum FromThread {
    /// Another chunk of the probe file was written.
    Filled,
    /// The target is open: the engine takes over.
    Opened,
    /// The run stopped issuing I/O and only waits for what is in flight.
    Draining,
    /// The run ended: its outcome, and the engine time to charge.
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
pub(super) async fn run_on_thread(
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
    let job_cancel = cancel.clone();
    let opening = Opening::for_run(spec, profile, shared);
    let counted = Counted::new(threads);
    let spawned = std::thread::Builder::new()
        .name(thread_name("probe", &spec.name))
        .spawn(move || {
            let done = probe_thread(&job_spec, &job_profile, &opening, job_cancel, &tx);
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
                why: ErrorReason::Other,
            },
            Duration::ZERO,
        );
    }
    let patience = spec.settings.timeout + GRACE;
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
            log::abandoned(spec, profile, &error);
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
                        why: ErrorReason::Other,
                    },
                    Duration::ZERO,
                );
            }
        }
    }
}

/// The name of a thread working for the target `target`: `{what}-{target}` without the
/// characters a thread name cannot hold (a NUL would make the spawn panic), cut to what the
/// kernel shows (15 bytes).
pub(super) fn thread_name(what: &str, target: &str) -> String {
    let mut name: String = format!("{what}-{target}")
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    while name.len() > 15 {
        name.pop();
    }
    name
}

/// What a probe thread opens its target with, and where it records what the open found.
struct Opening {
    roots: Roots,
    /// For a configured target: where its pin and its probe file's filesystem are kept (a write
    /// run on a block device pins the device it opens; a run on a probe file records the
    /// filesystem it is on).
    known: Option<Arc<TargetDevices>>,
    /// For a write run on a block device, the disk it was pinned to, if it was.
    pinned: Option<DiskIdentity>,
    /// The filesystem its probe file must be on.
    filesystem: Expected,
    /// Where a write run records why it was refused.
    series: Arc<SeriesStore>,
}

impl Opening {
    /// How a run of `profile` on the target of `spec` opens it.
    fn for_run(spec: &TargetSpec, profile: &Profile, shared: &Shared) -> Opening {
        let known = spec.rule.is_none().then(|| shared.known.clone());
        let device_write = profile.rw.is_write() && spec.settings.writes.to_device();
        Opening {
            roots: shared.roots.clone(),
            pinned: known
                .as_ref()
                .filter(|_| device_write)
                .and_then(|k| k.pinned(spec)),
            filesystem: expected_filesystem(spec, known.as_deref()),
            known,
            series: shared.series.clone(),
        }
    }

    /// Records what an open of the target of `spec` with `options` found: that its writes are
    /// allowed, the disk its write run pinned, the filesystem its probe file is on.
    fn opened(&self, spec: &Arc<TargetSpec>, options: &TargetOptions, opened: &OpenTarget) {
        if options.write {
            self.series.set_write_refused(spec, None);
        }
        if let Some(known) = &self.known {
            if let Some(disk) = &opened.identity {
                known.pin(spec, disk);
            }
            if let Some(filesystem) = &opened.filesystem {
                known.record_filesystem(spec, filesystem);
            }
        }
    }

    /// The outcome of a run of the target of `spec` whose open failed with `err` after
    /// `duration`: skipped when its probe file would be on another filesystem (not a failure of
    /// the disk: the target is not where it should be), failed otherwise (a write refused by a
    /// safety rule recorded as such).
    fn refused(&self, spec: &Arc<TargetSpec>, err: &TargetError, duration: Duration) -> RunOutcome {
        if let TargetError::WrongFilesystem { .. } = err {
            return RunOutcome::Skipped {
                reason: err.to_string(),
                why: SkipReason::WrongFilesystem,
            };
        }
        if let TargetError::WriteRefused { reason, .. } = err {
            self.series.set_write_refused(spec, Some(reason.label()));
        }
        RunOutcome::Failed {
            error: err.to_string(),
            duration,
            why: open_failure(err),
        }
    }
}

/// Opens the target and runs the profile, reporting progress on `tx`. Returns the outcome and
/// the engine time to charge, or `None` when the scheduler gave up on the run during the open.
fn probe_thread(
    spec: &Arc<TargetSpec>,
    profile: &Profile,
    opening: &Opening,
    cancel: Arc<AtomicBool>,
    tx: &tokio::sync::mpsc::UnboundedSender<FromThread>,
) -> Option<(RunOutcome, Duration)> {
    let roots = &opening.roots;
    crate::sandbox::check_on_this_thread();
    let started = Instant::now();
    let fail = |error: String, why: ErrorReason| {
        Some((
            RunOutcome::Failed {
                error,
                duration: started.elapsed(),
                why,
            },
            Duration::ZERO,
        ))
    };
    let options = target_options(spec, profile, opening);
    // A fill goes on while the scheduler still waits for this run and it is not cancelled.
    let filled = || tx.send(FromThread::Filled).is_ok() && !cancel.load(Ordering::Relaxed);
    let opened = match io_target::open_reporting(&spec.path, &options, &filled) {
        Ok(t) => t,
        Err(err) => {
            return Some((
                opening.refused(spec, &err, started.elapsed()),
                Duration::ZERO,
            ));
        }
    };
    opening.opened(spec, &options, &opened);
    let _ = tx.send(FromThread::Opened);
    if tx.is_closed() {
        // The scheduler gave up on this run while the target was being opened: the probe would
        // run outside its limits (global slot, device lock, budget).
        return None;
    }
    let draining = tx.clone();
    let opts = RunOptions {
        engine: spec.settings.engine,
        timeout: spec.settings.timeout,
        cancel,
        // Configured profiles always carry a runtime (config::defaults fills in the default).
        default_runtime: crate::config::probe_settings::DEFAULT_RUNTIME,
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
    // The host's CPU pressure and the device's own time, read just before and after the run.
    let disk = opened
        .device
        .as_ref()
        .map(|d| DiskReader::new(&roots.sysfs, &d.disks));
    let before = run_context::before(&roots.procfs, disk, profile.rw.is_write());
    let (ran, report) = match &opened.device {
        Some(device) if watched => {
            watch_of(spec, profile, roots, device).around(&opts.progress, &opts.yield_now, run)
        }
        _ => (run(), WatchReport::default()),
    };
    let context = before.after();
    let cost = RunCost {
        contended: report.contended,
        others_in_flight_seconds: report.others_in_flight_seconds,
    };
    match ran {
        Ok(result) => {
            let busy = result.elapsed;
            let outcome = RunOutcome::Ran {
                result: Box::new(result),
                duration: started.elapsed(),
                cost,
                yielded_to: report.yielded_for,
                context,
            };
            Some((outcome, busy))
        }
        Err(err) => fail(err.to_string(), run_failure(&err)),
    }
}

/// The `reason` of a run whose target could not be opened: the machine's state (a full
/// filesystem, a missing mount or device), a safety rule, or what the target is.
fn open_failure(err: &TargetError) -> ErrorReason {
    match err {
        TargetError::NoSpace { .. } => ErrorReason::NoSpace,
        TargetError::Io { source, .. } => match source.kind() {
            std::io::ErrorKind::NotFound => ErrorReason::Missing,
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                ErrorReason::NoSpace
            }
            _ => ErrorReason::Io,
        },
        TargetError::NoSuchDevice { .. }
        | TargetError::GoneDeviceNode { .. }
        | TargetError::WrongFilesystem { .. }
        | TargetError::EmptyDevice { .. } => ErrorReason::Missing,
        TargetError::WriteRefused { .. }
        | TargetError::NotRefilled { .. }
        | TargetError::FileInUse { .. }
        | TargetError::Sandboxed { .. }
        | TargetError::Symlink { .. }
        | TargetError::DeviceChanged { .. }
        | TargetError::Replaced { .. }
        | TargetError::ReplacedDuringFill { .. } => ErrorReason::Refused,
        TargetError::OffsetOnFile { .. }
        | TargetError::NoDirectIo { .. }
        | TargetError::Kind { .. }
        | TargetError::NoSpaceOfItsOwn { .. }
        | TargetError::TooSmall { .. }
        | TargetError::Alignment { .. } => ErrorReason::Unsupported,
        TargetError::FillStopped { .. } | TargetError::FillBuffer { .. } => ErrorReason::Other,
    }
}

/// The `reason` of a run whose engine could not run it.
fn run_failure(err: &ProbeError) -> ErrorReason {
    match err {
        ProbeError::Target(err) => open_failure(err),
        ProbeError::Profile(_) => ErrorReason::Unsupported,
        _ => ErrorReason::Other,
    }
}

/// The filesystem the probe file of the target of `spec` must be on: for a configured target
/// (`known` is where its records are kept), the one it was first probed on.
pub(super) fn expected_filesystem(spec: &TargetSpec, known: Option<&TargetDevices>) -> Expected {
    Expected {
        mountpoint: spec.mounted_at.as_ref().map(|m| m.mountpoint.clone()),
        device: spec.mounted_at.as_ref().and_then(|m| m.device),
        recorded: known.and_then(|k| k.recorded_filesystem(spec)),
    }
}

/// How the run of `profile` on the target of `spec` opens it.
fn target_options(spec: &TargetSpec, profile: &Profile, opening: &Opening) -> TargetOptions {
    let roots = &opening.roots;
    TargetOptions {
        size: spec.settings.size,
        offset: spec.offset,
        write: profile.rw.is_write(),
        rewrite: spec.settings.writes.allowed()
            && spec.settings.profiles.iter().any(|p| p.rw.is_write()),
        device_writes: spec.settings.writes.to_device(),
        min_free: spec.settings.min_free,
        procfs: roots.procfs.clone(),
        sysfs: roots.sysfs.clone(),
        devfs: roots.devfs.clone(),
        pinned: opening.pinned.clone(),
        confined: crate::sandbox::confined(),
        filesystem: opening.filesystem.clone(),
    }
}

/// How a run of `profile` is watched on the disk under `device` (see [`crate::contention`]).
fn watch_of(spec: &TargetSpec, profile: &Profile, roots: &Roots, device: &BlockDevice) -> Watch {
    let disk_name = device.disks.join("+");
    let disk = DiskReader::new(&roots.sysfs, &device.disks);
    Watch {
        own: OwnIo {
            block_size: profile.block_size,
            write: profile.rw.is_write(),
            requests_per_io: disk.requests_per_io(profile.block_size),
        },
        disk,
        disk_name,
        yield_on_others: spec.settings.yield_to_other_io && profile.class() == ProbeClass::Capacity,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machines_state_is_told_from_the_rest() {
        let path = std::path::PathBuf::from("/x/probe.dat");
        let io = |kind: std::io::ErrorKind| TargetError::Io {
            path: path.clone(),
            what: "create",
            source: kind.into(),
        };
        let cases = [
            (
                TargetError::NoSpace {
                    path: path.clone(),
                    problem: io_target::space::SpaceProblem::BeyondFilesystem {
                        size: 2,
                        fs_size: 1,
                    },
                },
                ErrorReason::NoSpace,
            ),
            (io(std::io::ErrorKind::StorageFull), ErrorReason::NoSpace),
            (io(std::io::ErrorKind::NotFound), ErrorReason::Missing),
            (io(std::io::ErrorKind::PermissionDenied), ErrorReason::Io),
            (
                TargetError::GoneDeviceNode { path: path.clone() },
                ErrorReason::Missing,
            ),
            (
                TargetError::NoDirectIo {
                    path: path.clone(),
                    fstype: "tmpfs".into(),
                },
                ErrorReason::Unsupported,
            ),
        ];
        for (err, why) in cases {
            assert_eq!(open_failure(&err), why, "{err}");
        }
    }

    #[test]
    fn thread_names_hold_no_nul() {
        assert_eq!(thread_name("probe", "a\0b"), "probe-ab");
        assert_eq!(
            thread_name("stat", "écrire-très-longtemps"),
            "stat-écrire-tr"
        );
        std::thread::Builder::new()
            .name(thread_name("probe", "x\0y"))
            .spawn(|| {})
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn grace_is_the_figure_the_docs_give() {
        // docs/probes.md (Targets) and docs/deployment.md (Safety) state how long a stalled open or run is
        // waited for.
        let stated = format!("timeout plus {} s", GRACE.as_secs_f64());
        for (file, text) in [
            ("docs/probes.md", include_str!("../../docs/probes.md")),
            (
                "docs/deployment.md",
                include_str!("../../docs/deployment.md"),
            ),
        ] {
            assert!(text.contains(&stated), "{file} does not say {stated:?}");
        }
    }
}
