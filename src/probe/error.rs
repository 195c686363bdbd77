//! Why a probe could not run ([`ProbeError`]), and why a profile does not fit its target
//! ([`ProfileError`]). I/O errors during a run are not errors here: they are counted in the
//! [`Measurement`](crate::probe::measurement::Measurement).

use crate::probe::buffer::BufferError;
use crate::probe::io_target::TargetError;
use crate::probe::measurement::EngineKind;
use std::path::PathBuf;

/// Why a probe could not run. I/O errors during a run are not errors here: they are counted in the
/// [`Measurement`](crate::probe::measurement::Measurement).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The target could not be opened or failed a preflight or safety check.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// The profile does not fit the target (alignment, size, writes on a read-only target).
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// The run's I/O buffers could not be made.
    #[error(transparent)]
    Buffer(#[from] BufferError),
    /// The engine could not be set up (for io_uring this triggers the psync fallback in auto mode).
    #[error("cannot set up the {engine} engine: {source}")]
    EngineSetup {
        /// The engine.
        engine: EngineKind,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
    /// A rate-capped profile on a kernel whose io_uring cannot wait with a timeout argument (in
    /// auto mode the psync engine runs it instead).
    #[error("rate-capped runs on io_uring need IORING_FEAT_EXT_ARG (Linux 5.11 or later)")]
    RateCapNeedsExtArg,
    /// The psync engine could not start one thread per queue slot: it does not run at a lower
    /// depth than the profile asks for.
    #[error(
        "the psync engine started {started} of the {wanted} threads its queue depth needs: {source}"
    )]
    PsyncShortOfDepth {
        /// Threads the depth needs.
        wanted: u32,
        /// Threads that started (and were stopped again).
        started: u32,
        /// Why the next one did not.
        #[source]
        source: std::io::Error,
    },
    /// The engine's thread panicked.
    #[error("the {engine} engine's thread panicked")]
    EnginePanicked {
        /// The engine.
        engine: EngineKind,
    },
}

/// Why a profile cannot run on a target.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The block size is not a multiple of the target's direct-I/O alignment.
    #[error(
        "profile {profile}: block size {block_size} is not a multiple of the direct-I/O alignment {align} of {path}"
    )]
    Unaligned {
        /// The profile.
        profile: String,
        /// Its block size.
        block_size: u64,
        /// The alignment.
        align: u64,
        /// The target.
        path: PathBuf,
    },
    /// A write profile on a target opened read-only.
    #[error(
        "profile {profile} writes, but {path} was opened read-only (write probes need allow_writes / --allow-writes)"
    )]
    ReadOnly {
        /// The profile.
        profile: String,
        /// The target.
        path: PathBuf,
    },
    /// The profile's region is larger than the target's.
    #[error("profile {profile}: size {size} exceeds the target region of {region} bytes")]
    SizeBeyondRegion {
        /// The profile.
        profile: String,
        /// Its size.
        size: u64,
        /// The target's region.
        region: u64,
    },
    /// Not even one block fits the region.
    #[error(
        "profile {profile}: the region of {region} bytes of {path} is smaller than one block of {block_size} bytes"
    )]
    RegionBelowOneBlock {
        /// The profile.
        profile: String,
        /// The region's length.
        region: u64,
        /// The target.
        path: PathBuf,
        /// The block size.
        block_size: u64,
    },
    /// A profile that writes into space of its own (`etcd-wal`) on a block device, which has
    /// none to preallocate.
    #[error(
        "profile {profile} writes into space it preallocates in a probe file; {path} is a block device"
    )]
    FreshSpaceOnDevice {
        /// The profile.
        profile: String,
        /// The target.
        path: PathBuf,
    },
}
