//! The admission gates a profile's run passes before it starts, in this order: the device's
//! duty-cycle budget, busy skip (capacity profiles), no earlier run or stat of the target still
//! out, and no I/O of an earlier run still held by the kernel on the device. A run refused by a
//! gate is recorded as `skipped` with the [`Skip`]'s text as its reason.

use super::devices::{Budget, DeviceKey, DeviceState};
use crate::blockdev::BlockDevice;
use crate::blockdev::counters::DiskReader;
use crate::config::TargetSpec;
use crate::contention::Load;
use crate::probe::measurement::{SkipReason, StuckIos};
use crate::probe::profile::{ProbeClass, Profile};
use crate::series::RunOutcome;
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Why a run was not started: its `Display` is the reason the metrics' last error, the status
/// page and the log give.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Skip {
    /// An earlier run or stat of the target has not returned.
    StillInFlight,
    /// The device's duty-cycle budget is in debt.
    BudgetUsedUp {
        /// The device.
        device: DeviceKey,
    },
    /// Other processes kept the disk busier than `skip_busy_above` over the busy window.
    Busy {
        /// The whole disk.
        disk: String,
        /// Which limit its load was above, in words.
        load: String,
    },
    /// The kernel still holds I/Os of an earlier run on the device.
    HeldByKernel {
        /// The device.
        device: DeviceKey,
        /// How many.
        ios: usize,
        /// How long ago the oldest was issued.
        oldest: Duration,
    },
}

impl Skip {
    /// Why, for the `reason` label.
    pub(crate) fn why(&self) -> SkipReason {
        match self {
            Skip::StillInFlight => SkipReason::InFlight,
            Skip::BudgetUsedUp { .. } => SkipReason::Budget,
            Skip::Busy { .. } => SkipReason::Busy,
            Skip::HeldByKernel { .. } => SkipReason::HeldByKernel,
        }
    }

    /// What the store records for a run skipped for this.
    pub(crate) fn outcome(&self) -> RunOutcome {
        RunOutcome::Skipped {
            reason: self.to_string(),
            why: self.why(),
        }
    }

    /// The skip while `stuck` I/Os of an earlier run are held on `device`.
    pub(crate) fn held_by_kernel(device: &DeviceKey, stuck: &StuckIos) -> Skip {
        Skip::HeldByKernel {
            device: device.clone(),
            ios: stuck.count(),
            oldest: stuck.oldest().map_or(Duration::ZERO, |at| at.elapsed()),
        }
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::StillInFlight => f.write_str("previous run still in flight"),
            Skip::BudgetUsedUp { device } => write!(f, "duty-cycle budget of {device} used up"),
            Skip::Busy { disk, load } => write!(f, "{disk} is busy: {load}"),
            Skip::HeldByKernel {
                device,
                ios,
                oldest,
            } => write!(
                f,
                "{ios} I/Os of an earlier run are still held by the kernel on {device} (the oldest for {oldest:.0?})"
            ),
        }
    }
}

/// Whether a profile's run may start.
pub(super) enum Admission {
    /// It may.
    Run,
    /// It is skipped.
    Skip(Skip),
    /// The target was stopped while a gate waited.
    Stopped,
}

/// What the gates look at for one profile's run.
pub(super) struct Gates<'a> {
    pub(super) spec: &'a TargetSpec,
    pub(super) key: &'a DeviceKey,
    pub(super) device: Option<&'a BlockDevice>,
    pub(super) state: &'a DeviceState,
    /// The target's threads that have not returned.
    pub(super) threads: &'a AtomicUsize,
    pub(super) sysfs: &'a Path,
}

impl Gates<'_> {
    /// Runs `profile` through every gate, in order; `budget` is the device's, refilled here.
    pub(super) async fn admit(
        &self,
        profile: &Profile,
        budget: &mut Budget,
        capacity: f64,
        stop: &CancellationToken,
    ) -> Admission {
        budget.refill(Instant::now(), self.spec.settings.max_duty_cycle, capacity);
        if budget.tokens < 0.0 {
            return Admission::Skip(Skip::BudgetUsedUp {
                device: self.key.clone(),
            });
        }
        match self.busy(profile, stop).await {
            Some(Admission::Run) | None => {}
            Some(other) => return other,
        }
        if self.threads.load(Ordering::SeqCst) > 0 {
            // An earlier profile's run was abandoned and its thread still holds the target.
            return Admission::Skip(Skip::StillInFlight);
        }
        match self.state.stuck() {
            Some(stuck) => Admission::Skip(Skip::held_by_kernel(self.key, &stuck)),
            None => Admission::Run,
        }
    }

    /// Busy skip: a capacity profile's run is skipped when the disk's load over the busy window
    /// is above `skip_busy_above`. `None`: not checked (gentle profile, no limit, no device).
    async fn busy(&self, profile: &Profile, stop: &CancellationToken) -> Option<Admission> {
        let settings = &self.spec.settings;
        if profile.class() != ProbeClass::Capacity || settings.skip_busy_above.is_off() {
            return None;
        }
        let dev = self.device?;
        let load = disk_load(self.sysfs, &dev.disks, settings.busy_window, stop).await;
        if let Some(why) = load.and_then(|l| l.above(&settings.skip_busy_above)) {
            return Some(Admission::Skip(Skip::Busy {
                disk: dev.disks.join("+"),
                load: why,
            }));
        }
        // The wait above ends early when the target is stopped: no run then.
        Some(if stop.is_cancelled() {
            Admission::Stopped
        } else {
            Admission::Run
        })
    }
}

/// The load of `disks` over `window` (no probe runs on it meanwhile: the caller holds its lock);
/// `None` when its counters cannot be read or the target is stopped.
async fn disk_load(
    sysfs: &Path,
    disks: &[String],
    window: Duration,
    stop: &CancellationToken,
) -> Option<Load> {
    let reader = DiskReader::new(sysfs, disks);
    let before = reader.sample().ok()?;
    tokio::select! {
        () = tokio::time::sleep(window) => {}
        () = stop.cancelled() => return None,
    }
    Load::between(&before, &reader.sample().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_reasons_read_as_before() {
        let disk = DeviceKey::Disks(vec!["sdb".to_owned()]);
        let path = DeviceKey::Path("/mnt/x/probe.dat".into());
        assert_eq!(
            Skip::StillInFlight.to_string(),
            "previous run still in flight"
        );
        assert_eq!(
            Skip::BudgetUsedUp { device: path }.to_string(),
            "duty-cycle budget of path:/mnt/x/probe.dat used up"
        );
        let busy = Skip::Busy {
            disk: "sdb".to_owned(),
            load: "12.0 I/Os per second from other processes (limit 10)".to_owned(),
        };
        assert_eq!(
            busy.to_string(),
            "sdb is busy: 12.0 I/Os per second from other processes (limit 10)"
        );
        let held = Skip::HeldByKernel {
            device: disk,
            ios: 3,
            oldest: Duration::from_secs(42),
        };
        assert_eq!(
            held.to_string(),
            "3 I/Os of an earlier run are still held by the kernel on sdb (the oldest for 42s)"
        );
    }
}
