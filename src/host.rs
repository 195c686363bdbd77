//! The host as the modules that read its kernel and its clock share it: where procfs and sysfs
//! are mounted ([`Roots`]: `--path.procfs`, `--path.sysfs`), how long a look at a path made on a
//! thread of its own is waited for before its filesystem counts as hung ([`STAT_PATIENCE`]: the
//! scheduler's stat of a target's path, discovery's scans), and the wall clock in Unix seconds
//! ([`unix_now`]).

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where the kernel's filesystems are mounted, as the scheduler, discovery and the collectors
/// read them.
#[derive(Debug, Clone)]
pub struct Roots {
    /// procfs mountpoint.
    pub procfs: PathBuf,
    /// sysfs mountpoint.
    pub sysfs: PathBuf,
    /// Where the device nodes are (`--path.devfs`).
    pub devfs: PathBuf,
}

/// How long a cycle waits for the stat of its target's path, and discovery for a scan, before
/// giving up (a hung filesystem).
pub(crate) const STAT_PATIENCE: Duration = Duration::from_secs(5);

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
