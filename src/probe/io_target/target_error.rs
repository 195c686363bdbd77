//! Why a target cannot be probed ([`TargetError`]) or written ([`Refusal`]). Messages name the
//! path and what is wrong.

use super::mark::OWNER_XATTR;
use crate::blockdev::identity::{DiskIdentity, Mismatch};
use crate::probe::buffer::BufferError;
use std::io;
use std::path::PathBuf;

/// Why a target cannot be probed. Messages name the path and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A region offset was given for a file target; probe files are probed from their start.
    #[error(
        "{path}: offset {offset} applies to block devices only; a probe file is probed from its start (set size instead)"
    )]
    OffsetOnFile {
        /// The target.
        path: PathBuf,
        /// The offset given.
        offset: u64,
    },
    /// The path is a symbolic link to something other than a block device.
    #[error(
        "{path}: is a symbolic link; probe files must be regular files at the configured path (symbolic links are only followed to block devices)"
    )]
    Symlink {
        /// The target.
        path: PathBuf,
    },
    /// An operating-system call failed.
    #[error("{path}: {what}: {source}")]
    Io {
        /// The target.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The filesystem or device refuses O_DIRECT.
    #[error("{path}: O_DIRECT is not supported here (filesystem {fstype}); probes need direct I/O")]
    NoDirectIo {
        /// The target.
        path: PathBuf,
        /// The filesystem type, when known.
        fstype: String,
    },
    /// Not a regular file or block device.
    #[error("{path}: not a regular file or block device")]
    Kind {
        /// The target.
        path: PathBuf,
    },
    /// Fresh space asked of a target that has none of its own: only a probe file opened for
    /// writing has.
    #[error(
        "{path}: preallocate space for the run: only a probe file opened for writing has space of its own"
    )]
    NoSpaceOfItsOwn {
        /// The target.
        path: PathBuf,
    },
    /// A block device of 0 bytes: a loop device detached from its file, removed media.
    #[error(
        "{path}: the block device is empty (0 bytes: a loop device detached from its file, or removed media)"
    )]
    EmptyDevice {
        /// The target.
        path: PathBuf,
    },
    /// The target is smaller than what was asked for.
    #[error("{path}: target is {available} bytes, smaller than the {wanted} bytes requested")]
    TooSmall {
        /// The target.
        path: PathBuf,
        /// Bytes available from the region start.
        available: u64,
        /// Bytes requested.
        wanted: u64,
    },
    /// Writing was refused by a safety rule.
    #[error("{path}: refusing to write: {reason}")]
    WriteRefused {
        /// The target.
        path: PathBuf,
        /// Which rule.
        reason: Refusal,
    },
    /// The path named another device than the one checked a moment before (a `/dev/disk/by-*`
    /// link moved in between).
    #[error("{path}: the path names another device than the one checked a moment before")]
    DeviceChanged {
        /// The target.
        path: PathBuf,
    },
    /// Another file was put at the path between the ownership check and the open.
    #[error("{path}: the file was replaced between the ownership check and the open")]
    Replaced {
        /// The target.
        path: PathBuf,
    },
    /// Another process holds the probe file's lock: it fills or writes it (another agent with
    /// another state directory, configured on the same file).
    #[error(
        "{path}: the probe file is in use by another process that fills or writes it (another agent configured on the same file?)"
    )]
    FileInUse {
        /// The target.
        path: PathBuf,
    },
    /// Another file was put at the path while the probe file was being filled.
    #[error("{path}: the file was replaced while it was being filled")]
    ReplacedDuringFill {
        /// The target.
        path: PathBuf,
    },
    /// No block device at a path for which a region offset is set (no probe file is created in
    /// its place).
    #[error("{path}: no such block device (with an offset set, no probe file is created)")]
    NoSuchDevice {
        /// The target.
        path: PathBuf,
    },
    /// The probe file would be on another filesystem than the one the target is meant for (its
    /// volume unmounted, another filesystem mounted there): it is neither made nor opened.
    #[error("{path}: no probe file is made or opened there: {why}")]
    WrongFilesystem {
        /// The target.
        path: PathBuf,
        /// What filesystem it is on, and which it should be on.
        why: String,
    },
    /// Nothing at a path whose directory is on devtmpfs (`/dev`): a device node that is gone (its
    /// disk left the kernel), in whose place no probe file is created.
    #[error(
        "{path}: no such device (its directory is on devtmpfs: a device node that is gone, not a probe file to create)"
    )]
    GoneDeviceNode {
        /// The target.
        path: PathBuf,
    },
    /// The probe file does not fit its filesystem with the reserve, or its last fill ran out of
    /// space (what it wrote was removed).
    #[error("{path}: not filled: {problem}")]
    NoSpace {
        /// The target.
        path: PathBuf,
        /// Why.
        problem: super::space::SpaceProblem,
    },
    /// The agent's probe file is incomplete or has another size than configured, and the target
    /// may not write it (no write profile, or writes not allowed): it is not refilled.
    #[error(
        "{path}: the probe file is incomplete or of another size, and a target without writes allowed never refills it (allow writes, set its size, or remove the file to have it made again)"
    )]
    NotRefilled {
        /// The target.
        path: PathBuf,
    },
    /// The fill of a probe file was stopped (cancelled, or given up on) before it finished; the
    /// next open finishes it.
    #[error("{path}: the fill of the probe file was stopped before it finished")]
    FillStopped {
        /// The target.
        path: PathBuf,
    },
    /// The buffer of a probe-file fill could not be made.
    #[error("{path}: cannot make the fill buffer: {source}")]
    FillBuffer {
        /// The target.
        path: PathBuf,
        /// Why.
        #[source]
        source: BufferError,
    },
    /// The agent's Landlock ruleset refused what a target needs (EACCES while it is confined).
    #[error("{path}: {what}: refused by the agent's Landlock sandbox: {why}")]
    Sandboxed {
        /// The target.
        path: PathBuf,
        /// What was refused.
        what: &'static str,
        /// What that means, and what to do.
        why: &'static str,
    },
    /// Size, offset or block size violate the direct-I/O alignment.
    #[error("{path}: {what} {value} is not a multiple of the direct-I/O alignment {align}")]
    Alignment {
        /// The target.
        path: PathBuf,
        /// Which quantity.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The alignment required.
        align: u64,
    },
}

impl TargetError {
    /// This error as the Landlock sandbox explains it, when the agent is `confined` and it is
    /// EACCES from creating a probe file or opening a device for writing; itself otherwise.
    pub(crate) fn in_sandbox(self, confined: bool) -> TargetError {
        let TargetError::Io { path, what, source } = self else {
            return self;
        };
        let why = match what {
            _ if !confined || source.raw_os_error() != Some(libc::EACCES) => None,
            CREATE => Some(
                "its directory is not one the agent may create files in: its rules name the directories of the probe files as they were when it started (a filesystem mounted or unmounted there since makes it another directory) and the directories of the mount rules' mountpoints; restart the agent once the directory is what it should be",
            ),
            WRITE_OPEN => Some(
                "the agent may write only to the device nodes its targets named when it started, and this node was made since (a disk replaced, or attached again); restart the agent",
            ),
            _ => None,
        };
        match why {
            Some(why) => TargetError::Sandboxed { path, what, why },
            None => TargetError::Io { path, what, source },
        }
    }
}

/// What [`TargetError::Io`] names the creation of a probe file.
pub(crate) const CREATE: &str = "create the probe file";
/// What [`TargetError::Io`] names the open of a block device for writing.
pub(crate) const WRITE_OPEN: &str = "open for writing with O_DIRECT";

/// Which write-safety rule refused a write probe.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// Writes to a block device were not opted into.
    #[error(
        "writes to a block device need their own opt-in (allow_device_writes = true; --allow-writes in one-shot mode)"
    )]
    NoDeviceOptIn,
    /// Someone else has claimed the device (the `O_EXCL` open failed with EBUSY).
    #[error(
        "the device is in use: its exclusive open failed with EBUSY (mounted, also in another mount namespace, a swap area, a btrfs or md member, another program's exclusive open; for a partition, also its whole disk mounted)"
    )]
    InUse,
    /// The mount table could not be read, so the device cannot be known to be unmounted.
    #[error("cannot read {mountinfo} to check for mounts: {source}")]
    MountsUnknown {
        /// `<procfs>/self/mountinfo`.
        mountinfo: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// `/proc/swaps` could not be read, so no device can be known not to be a swap area.
    #[error("cannot read {swaps} to check for swap areas: {source}")]
    SwapsUnknown {
        /// `<procfs>/swaps`.
        swaps: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Sysfs could not be read, so what lies over and under the device cannot be known.
    #[error(
        "cannot read {sysfs} to follow the devices over and under the target (partitions, holders, members, loop devices): {source}"
    )]
    HoldersUnknown {
        /// The sysfs root.
        sysfs: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A loop device's backing could not be told: it could be over a device the write reaches.
    #[error(
        "cannot tell what loop device {device} is backed by ({why}); it could be over the target"
    )]
    LoopUnknown {
        /// Its kernel name.
        device: String,
        /// Why.
        why: String,
    },
    /// A device the write reaches is mounted.
    #[error("{layer} is mounted")]
    Mounted {
        /// Which, and how it relates to the target ([`crate::blockdev::stack::Layer`]).
        layer: String,
    },
    /// A device the write reaches is a swap area in use.
    #[error("{layer} is a swap area in use")]
    Swap {
        /// Which, and how it relates to the target.
        layer: String,
    },
    /// A device the write reaches has a holder outside what the write reaches (device-mapper,
    /// md, ...).
    #[error("{layer} is held by {holder} (device-mapper, md, ...)")]
    Held {
        /// Which, and how it relates to the target.
        layer: String,
        /// The holder's kernel name.
        holder: String,
    },
    /// Another view of the bytes the write reaches is claimed by someone else.
    #[error(
        "{layer} is in use: its exclusive open failed with EBUSY (mounted, also in another mount namespace, a swap area, a btrfs or md member, another program's exclusive open)"
    )]
    Claimed {
        /// Which, and how it relates to the target.
        layer: String,
    },
    /// Another view of the bytes the write reaches could not be claimed for the run.
    #[error("cannot claim {layer} for the run ({node}): {source}")]
    ClaimFailed {
        /// Which, and how it relates to the target.
        layer: String,
        /// Its device node.
        node: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The devices over and under the target changed while they were being claimed.
    #[error(
        "the devices over and under the target changed while the write-safety check ran (a loop device set up or detached); the next run checks again"
    )]
    StackChanged,
    /// The device at the path is not the disk the target was pinned to.
    #[error(
        "not the disk the target was allowed on: {why}; pinned to {pinned}, found {found}; if the disk was replaced on purpose, add {:?} to [retired] disks and reload",
        pinned.id()
    )]
    NotThePinnedDisk {
        /// The disk the target was pinned to.
        pinned: Box<DiskIdentity>,
        /// The disk at its path now.
        found: Box<DiskIdentity>,
        /// What differs.
        why: Mismatch,
    },
    /// A write probe on a file this agent did not create.
    #[error(
        "the file is not a probe file diskprobe_exporter made ({why}: see the {OWNER_XATTR} attribute in docs/probes.md); write probes only use probe files they made"
    )]
    ForeignFile {
        /// Why it is not (no mark, a mark the agent does not write, a mark of another file).
        why: String,
    },
}

impl Refusal {
    /// The `reason` label of `diskprobe_target_write_refused`.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Refusal::NoDeviceOptIn => "no_opt_in",
            Refusal::InUse | Refusal::Claimed { .. } => "in_use",
            Refusal::Mounted { .. } => "mounted",
            Refusal::Swap { .. } => "swap",
            Refusal::Held { .. } => "held",
            Refusal::NotThePinnedDisk { .. } => "not_the_pinned_disk",
            Refusal::ForeignFile { .. } => "foreign_file",
            Refusal::MountsUnknown { .. }
            | Refusal::SwapsUnknown { .. }
            | Refusal::HoldersUnknown { .. }
            | Refusal::LoopUnknown { .. }
            | Refusal::ClaimFailed { .. }
            | Refusal::StackChanged => "cannot_check",
        }
    }
}
