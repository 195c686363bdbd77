//! Per set of physical disks (a partition counts as its disk, a device-mapper or RAID volume as
//! the disks under it: [`BlockDevice::disks`]; a target without a block device as its path), one
//! [`DeviceState`]: the lock a cycle holds (at most one cycle per device), the
//! duty-cycle budget under it, and the I/Os of an earlier run the kernel still holds.

use crate::blockdev::BlockDevice;
use crate::config::TargetSpec;
use crate::probe::measurement::StuckIos;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Which device a target's runs count against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeviceKey {
    /// The whole disks a target's I/O lands on ([`BlockDevice::disks`]: a partition's disk, every
    /// disk under a device-mapper or RAID volume), by kernel name, sorted.
    Disks(Vec<String>),
    /// A target with no block device under it (tmpfs, overlayfs, ...), by path.
    Path(PathBuf),
}

impl DeviceKey {
    /// The key of `spec`'s target, whose path is on `device`.
    pub fn of(spec: &TargetSpec, device: Option<&BlockDevice>) -> DeviceKey {
        match device {
            Some(d) if !d.disks.is_empty() => DeviceKey::Disks(d.disks.clone()),
            Some(d) => DeviceKey::Disks(vec![d.disk_name().to_owned()]),
            None => DeviceKey::Path(spec.path.clone()),
        }
    }
}

impl fmt::Display for DeviceKey {
    /// The disks' names joined by `+`, or `path:` and the path.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceKey::Disks(names) => f.write_str(&names.join("+")),
            DeviceKey::Path(path) => write!(f, "path:{}", path.display()),
        }
    }
}

/// Duty-cycle accounting of a device: a token bucket refilled at `max_duty_cycle` seconds per
/// second, charged each run's engine time.
#[derive(Debug)]
pub(crate) struct Budget {
    /// Seconds of probing left (negative: in debt).
    pub tokens: f64,
    last: Instant,
}

impl Budget {
    /// A full bucket of `capacity` seconds.
    pub(crate) fn full(capacity: f64) -> Budget {
        Budget {
            tokens: capacity,
            last: Instant::now(),
        }
    }

    /// Adds what `rate` seconds per second gave since the last refill, up to `capacity`.
    pub(crate) fn refill(&mut self, now: Instant, rate: f64, capacity: f64) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * rate).min(capacity);
        self.last = now;
    }
}

/// The state of one device.
#[derive(Debug, Default)]
pub(crate) struct DeviceState {
    /// Held by a cycle for its whole length; the budget lives under it (made by the first cycle,
    /// two of its cycles' worth).
    pub lock: tokio::sync::Mutex<Option<Budget>>,
    /// The I/Os of a run that returned while the kernel still held some of them; no run starts on
    /// the device until they have completed, so that at most one abandoned run (ring, buffers,
    /// threads) exists per device.
    stuck: Mutex<Option<Arc<StuckIos>>>,
}

impl DeviceState {
    /// The stuck I/Os of an earlier run, while the kernel still holds any.
    pub(crate) fn stuck(&self) -> Option<Arc<StuckIos>> {
        let mut stuck = self.stuck.lock().unwrap_or_else(|e| e.into_inner());
        if stuck.as_ref().is_some_and(|s| s.is_clear()) {
            *stuck = None;
        }
        stuck.clone()
    }

    /// Records what a run left in the kernel.
    pub(crate) fn set_stuck(&self, ios: Arc<StuckIos>) {
        *self.stuck.lock().unwrap_or_else(|e| e.into_inner()) = Some(ios);
    }
}

/// Every device's state, created on first use.
#[derive(Debug, Default)]
pub(crate) struct Devices(Mutex<HashMap<DeviceKey, Arc<DeviceState>>>);

impl Devices {
    /// The state of `key`.
    pub(crate) fn get(&self, key: &DeviceKey) -> Arc<DeviceState> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key.clone()).or_default().clone()
    }
}
