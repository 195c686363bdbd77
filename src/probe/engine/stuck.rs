//! The I/Os of a run that the kernel still holds after the run has returned.
//!
//! An engine waits for cancelled I/O for at most [`super::DRAIN_GRACE`]; what a hung device has not
//! completed by then stays with the engine's leftovers (the io_uring engine's thread keeps reaping
//! its ring; psync threads stay in their system calls), which free the buffers once the kernel has
//! let go of them. The run returns a [`StuckIos`] shared with those leftovers: the scheduler keeps
//! it per device (no new run starts on a device whose earlier run still has I/O in the kernel), and
//! the metrics show how many I/Os are stuck and since when.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Per queue slot of a run, the issue time of the I/O the kernel holds in it, if any.
#[derive(Debug)]
pub struct StuckIos {
    base: Instant,
    /// Nanoseconds after `base` plus one, or 0 for a slot the kernel does not hold.
    slots: Box<[AtomicU64]>,
}

impl StuckIos {
    /// Room for `depth` slots, none held.
    pub(crate) fn new(base: Instant, depth: usize) -> StuckIos {
        StuckIos {
            base,
            slots: (0..depth).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Records that the kernel holds an I/O issued at `issued` in `slot` (`None`: no longer).
    pub(crate) fn set(&self, slot: usize, issued: Option<Instant>) {
        let value = issued.map_or(0, |at| {
            let ns = at.saturating_duration_since(self.base).as_nanos();
            u64::try_from(ns).unwrap_or(u64::MAX - 1) + 1
        });
        if let Some(s) = self.slots.get(slot) {
            s.store(value, Ordering::Relaxed);
        }
    }

    /// I/Os the kernel still holds.
    pub fn count(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) != 0)
            .count()
    }

    /// Whether the kernel has let go of every I/O.
    pub fn is_clear(&self) -> bool {
        self.count() == 0
    }

    /// When the oldest I/O the kernel still holds was issued.
    pub fn oldest(&self) -> Option<Instant> {
        self.slots
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&v| v != 0)
            .min()
            .map(|v| self.base + Duration::from_nanos(v - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_oldest_follow_the_slots() {
        let base = Instant::now();
        let stuck = StuckIos::new(base, 4);
        assert!(stuck.is_clear());
        assert_eq!(stuck.oldest(), None);
        stuck.set(2, Some(base + Duration::from_millis(5)));
        stuck.set(0, Some(base));
        stuck.set(9, Some(base)); // no such slot: ignored
        assert_eq!(stuck.count(), 2);
        assert_eq!(stuck.oldest(), Some(base));
        stuck.set(0, None);
        assert_eq!(stuck.oldest(), Some(base + Duration::from_millis(5)));
        stuck.set(2, None);
        assert!(stuck.is_clear());
    }
}
