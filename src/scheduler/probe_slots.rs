//! The global probe slots: at most `max_concurrent_probes` runs issue I/O at once across all
//! targets. A reload that lowers the limit retires free slots at once and held ones as their runs
//! give them back.

use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// The slots, and how many held ones are still to be retired.
pub(super) struct GlobalSlots {
    semaphore: Arc<Semaphore>,
    /// Permits still to be retired: a reload that lowers `max_concurrent_probes` retires the free
    /// permits at once and these as the runs holding them end. Held while permits are retired or
    /// given back, so that none is given back in between.
    owed: Mutex<usize>,
}

impl GlobalSlots {
    pub(super) fn new(n: usize) -> GlobalSlots {
        GlobalSlots {
            semaphore: Arc::new(Semaphore::new(n)),
            owed: Mutex::new(0),
        }
    }

    /// Changes the number of slots from `from` to `to`.
    pub(super) fn resize(&self, from: usize, to: usize) {
        let mut owed = self.owed.lock().unwrap_or_else(|e| e.into_inner());
        if to > from {
            // Slots still owed are simply not retired any more; the rest are new.
            let kept = (*owed).min(to - from);
            *owed -= kept;
            self.semaphore.add_permits(to - from - kept);
        } else if to < from {
            let retired = self.semaphore.forget_permits(from - to);
            *owed += from - to - retired;
        }
    }

    /// A slot, or `None` when the target is stopped first.
    pub(super) async fn acquire(&self, stop: &CancellationToken) -> Option<GlobalSlot<'_>> {
        tokio::select! {
            p = self.semaphore.clone().acquire_owned() => p.ok().map(|permit| self.slot(permit)),
            () = stop.cancelled() => None,
        }
    }

    fn slot(&self, permit: OwnedSemaphorePermit) -> GlobalSlot<'_> {
        GlobalSlot {
            permit: Some(permit),
            slots: self,
        }
    }
}

/// A global probe slot, retired instead of given back when a reload lowered the limit while it
/// was held.
pub(super) struct GlobalSlot<'a> {
    permit: Option<OwnedSemaphorePermit>,
    slots: &'a GlobalSlots,
}

impl Drop for GlobalSlot<'_> {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            let mut owed = self.slots.owed.lock().unwrap_or_else(|e| e.into_inner());
            if *owed > 0 {
                *owed -= 1;
                permit.forget();
            } else {
                drop(permit);
            }
        }
    }
}

#[cfg(test)]
impl GlobalSlots {
    /// A slot if one is free now.
    pub(super) fn try_slot(&self) -> Option<GlobalSlot<'_>> {
        let permit = self.semaphore.clone().try_acquire_owned().ok()?;
        Some(self.slot(permit))
    }

    /// Slots free now.
    pub(super) fn available(&self) -> usize {
        self.semaphore.available_permits()
    }
}
