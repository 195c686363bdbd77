//! Setting up a durability profile's run: the descriptor it writes through (the target reopened
//! with `O_DSYNC`/`O_SYNC`, or without `O_DIRECT`, when the profile asks for it) and, for
//! `etcd-wal`, the space it writes into (preallocated beyond the probe file's region, one
//! sequential pass that ends the run when it is full, given back when the run returns).
//!
//! The sync calls themselves are issued by the engines (`pwrite` then `fdatasync`/`fsync` in a
//! psync worker; `IORING_OP_FSYNC` after the write's completion in the io_uring engine).

use crate::probe::ProbeError;
use crate::probe::engine::{Job, ProfileError};
use crate::probe::profile::Profile;
use crate::probe::target::durable::{FreshSpace, reopen};
use crate::probe::target::{OpenTarget, TargetKind};
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// What a durability profile's run holds until it returns: the fresh space is given back when
/// this is dropped.
pub(super) struct Durable {
    _space: Option<FreshSpace>,
}

/// Points `job` at the descriptor and the region a durability profile's run uses; nothing to do
/// for other profiles.
pub(super) fn prepare(
    target: &OpenTarget,
    profile: &Profile,
    job: &mut Job,
) -> Result<Durable, ProbeError> {
    let d = profile.durability;
    if !profile.rw.is_write() {
        return Ok(Durable { _space: None });
    }
    if !d.direct || d.open_sync.is_some() {
        let file = Arc::new(reopen(target, d.direct, d.open_sync)?);
        job.fd = file.as_raw_fd();
        job.file = Some(file);
    }
    if !d.fresh_space {
        return Ok(Durable { _space: None });
    }
    if target.kind == TargetKind::BlockDevice {
        return Err(ProfileError::FreshSpaceOnDevice {
            profile: profile.name.clone(),
            path: target.path.clone(),
        }
        .into());
    }
    // As much space as the region (the target's size), written once from its start.
    let space = FreshSpace::preallocate(target, job.blocks * job.block_size)?;
    job.region_offset = space.start;
    job.number_ios = Some(job.number_ios.map_or(job.blocks, |n| n.min(job.blocks)));
    Ok(Durable {
        _space: Some(space),
    })
}
