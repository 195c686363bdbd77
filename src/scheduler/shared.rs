//! What every target's task shares: the series store runs are recorded in, the /proc and /sys
//! roots, the global probe slots, the per-device state, and per target the threads it has not
//! got back yet.

use super::devices::Devices;
use super::probe_slots::GlobalSlots;
use super::target_devices::TargetDevices;
use crate::host::Roots;
use crate::series::SeriesStore;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What the tasks share.
pub(super) struct Shared {
    /// Where every run is recorded.
    pub(super) series: Arc<SeriesStore>,
    pub(super) roots: Roots,
    /// At most `max_concurrent_probes` runs issue I/O at once.
    pub(super) slots: GlobalSlots,
    /// One lock, budget and stuck-I/O record per physical device.
    pub(super) devices: Devices,
    /// The last device under each configured target.
    pub(super) known: Arc<TargetDevices>,
    /// Per target name, its probe and stat threads that have not returned yet; kept across
    /// reloads, so that a changed target does not start beside its predecessor's stuck thread.
    threads: Mutex<HashMap<String, Arc<AtomicUsize>>>,
}

impl Shared {
    pub(super) fn new(
        series: Arc<SeriesStore>,
        roots: Roots,
        max_concurrent: usize,
        known: Arc<TargetDevices>,
    ) -> Shared {
        Shared {
            series,
            roots,
            slots: GlobalSlots::new(max_concurrent),
            devices: Devices::default(),
            known,
            threads: Mutex::new(HashMap::new()),
        }
    }

    /// The count of `target`'s threads that have not returned.
    pub(super) fn threads_of(&self, target: &str) -> Arc<AtomicUsize> {
        let mut map = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(target.to_owned()).or_default().clone()
    }

    /// Forgets the thread counts that no task and no thread holds any more, so that the map
    /// does not grow with every name discovery has ever found.
    pub(super) fn forget_unheld_threads(&self) {
        let mut map = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, count| Arc::strong_count(count) > 1);
    }
}

/// A thread counted in its target's `threads` until this is dropped: when the thread returns,
/// panics, or could not be started (the closure that owns it is then dropped unrun).
pub(super) struct Counted(Arc<AtomicUsize>);

impl Counted {
    pub(super) fn new(threads: &Arc<AtomicUsize>) -> Counted {
        threads.fetch_add(1, Ordering::SeqCst);
        Counted(threads.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
