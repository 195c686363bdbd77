//! Setting up a durability profile's run: the descriptor it writes through (the target reopened
//! with `O_DSYNC`/`O_SYNC`, or without `O_DIRECT`, when the profile asks for it) and, for
//! `etcd-wal`, the space it writes into (preallocated beyond the probe file's region, one
//! sequential pass that ends the run when it is full, given back when the run returns).
//!
//! The sync calls themselves are issued by the engines (`pwrite` then `fdatasync`/`fsync` in a
//! psync worker; `IORING_OP_FSYNC` after the write's completion in the io_uring engine).

use crate::probe::error::ProbeError;
use crate::probe::io_target::OpenTarget;
use crate::probe::io_target::fresh_space::FreshSpace;
use crate::probe::io_target::reopen::reopen;
use crate::probe::profile::Profile;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// What a durability profile's run writes through and into; the fresh space is given back when
/// this is dropped.
pub(crate) struct DurabilitySetup {
    fd: Option<Arc<OwnedFd>>,
    space: Option<FreshSpace>,
}

impl DurabilitySetup {
    /// Reopens the target and preallocates `bytes` of fresh space when `profile` asks for them;
    /// nothing for other profiles. (A block device has no space of its own: `Job::new` refuses
    /// fresh space there first.)
    pub(super) fn prepare(
        target: &OpenTarget,
        profile: &Profile,
        bytes: u64,
    ) -> Result<DurabilitySetup, ProbeError> {
        let d = profile.durability;
        let mut durable = DurabilitySetup {
            fd: None,
            space: None,
        };
        if !profile.rw.is_write() {
            return Ok(durable);
        }
        if !d.direct || d.open_sync.is_some() {
            let file = reopen(target, d.direct, d.open_sync)?;
            durable.fd = Some(Arc::new(OwnedFd::from(file)));
        }
        if d.fresh_space {
            durable.space = Some(FreshSpace::preallocate(target, bytes)?);
        }
        Ok(durable)
    }

    /// The descriptor the run writes through, when it is not the target's own.
    pub(super) fn fd(&self) -> Option<Arc<OwnedFd>> {
        self.fd.clone()
    }

    /// Where the fresh space starts, when the run writes into fresh space.
    pub(super) fn fresh_space_start(&self) -> Option<u64> {
        self.space.as_ref().map(|s| s.start)
    }
}
