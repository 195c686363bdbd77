//! What the scheduler logs: targets scheduled and stopped, cycles and runs skipped or given up
//! on, and every run that did not succeed (with the same reason the metrics and the status page
//! give).

use super::devices::DeviceKey;
use super::gates::Skip;
use crate::config::TargetSpec;
use crate::probe::measurement::RunStatus;
use crate::probe::profile::{ProbeClass, Profile};
use crate::series::RunOutcome;

/// Names of `profiles`, comma-separated.
fn names<'a>(profiles: impl Iterator<Item = &'a Profile>) -> String {
    profiles
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// A target's task started.
pub(super) fn scheduling(spec: &TargetSpec) {
    let profiles = &spec.settings.profiles;
    tracing::info!(
        target = %spec.name,
        path = %spec.path.display(),
        interval = %humantime::format_duration(spec.settings.interval),
        profiles = %names(profiles.iter()),
        capacity_profiles = %names(profiles.iter().filter(|p| p.class() == ProbeClass::Capacity)),
        "scheduling probes"
    );
}

/// A target's task stopped by a reload.
pub(super) fn stopping(name: &str) {
    tracing::info!(target = %name, "stopping probes of removed or changed target");
}

/// A whole cycle skipped: an earlier run or stat of the target is still out.
pub(super) fn cycle_skipped(spec: &TargetSpec) {
    tracing::warn!(target = %spec.name, "an earlier run or stat of the target has not returned; skipping this cycle");
}

/// A whole cycle given up on: the stat of the target's path failed.
pub(super) fn cycle_abandoned(spec: &TargetSpec, error: &str) {
    tracing::error!(target = %spec.name, "{error}; abandoning this cycle");
}

/// A run refused by a gate; the budget and busy skips are logged, the others show in the
/// metrics only.
pub(super) fn skipped(spec: &TargetSpec, profile: &Profile, skip: &Skip) {
    match skip {
        Skip::BudgetUsedUp { device } => {
            tracing::info!(target = %spec.name, profile = %profile.name, device = %device,
                "skipping run: the device's duty-cycle budget is used up");
        }
        Skip::Busy { disk, load } => {
            tracing::info!(target = %spec.name, profile = %profile.name, device = %disk,
                load = %load, "skipping run: device busy");
        }
        Skip::StillInFlight | Skip::HeldByKernel { .. } => {}
    }
}

/// A run given up on: it did not return, or its open made no progress.
pub(super) fn abandoned(spec: &TargetSpec, profile: &Profile, error: &str) {
    tracing::error!(target = %spec.name, profile = %profile.name, "{error}; abandoning the run");
}

/// A run cancelled by a shutdown or a reload.
pub(super) fn cancelled(spec: &TargetSpec, profile: &Profile) {
    tracing::info!(target = %spec.name, profile = %profile.name, "probe run cancelled");
}

/// A run returned with `ios` of its I/Os still in the kernel.
pub(super) fn stuck(spec: &TargetSpec, profile: &Profile, device: &DeviceKey, ios: usize) {
    tracing::warn!(target = %spec.name, profile = %profile.name, device = %device, ios,
        "the kernel still holds I/O of the run; no run starts on the device until it completes");
}

/// How a run that started ended, unless it succeeded.
pub(super) fn outcome(spec: &TargetSpec, profile: &Profile, outcome: &RunOutcome) {
    match outcome.status() {
        RunStatus::Success => {}
        // A run that started is skipped only when it yielded.
        RunStatus::Skipped => tracing::info!(
            target = %spec.name,
            profile = %profile.name,
            reason = outcome.reason().unwrap_or_default(),
            "capacity run stopped early"
        ),
        result => tracing::warn!(
            target = %spec.name,
            profile = %profile.name,
            result = result.as_str(),
            error = outcome.reason().as_deref().unwrap_or("no I/O completed"),
            "probe run did not succeed"
        ),
    }
}
