//! What opening a target takes ([`TargetOptions`]) and gives ([`OpenTarget`]: the O_DIRECT
//! descriptor, the probe region, alignments, the device under it and the preflight warnings).

use super::facts::{Cache, TargetKind};
use super::filesystem::{Expected, Filesystem};
use crate::blockdev::BlockDevice;
use crate::blockdev::identity::DiskIdentity;
use std::fs::File;
use std::path::PathBuf;

/// Size of a probe file created without an explicit size.
pub(crate) const DEFAULT_FILE_SIZE: u64 = 256 << 20;

/// How to open a target.
#[derive(Debug, Clone)]
pub struct TargetOptions {
    /// Region length (files: the probe file size). Block devices default to the rest of the
    /// device after `offset`; a missing file is created at [`DEFAULT_FILE_SIZE`].
    pub size: Option<u64>,
    /// Region start in bytes (block devices; files always start at 0).
    pub offset: u64,
    /// Open for writing (write probes). Needs the safety rules to pass.
    pub write: bool,
    /// The target may write its probe file (it has a write profile, and writes are allowed):
    /// only then is an existing probe file refilled (or an earlier version's mark bound to it);
    /// a target that may not never truncates or rewrites a file, whatever its mark says (it
    /// only finishes a fill the agent started on a file it made).
    pub rewrite: bool,
    /// Writes to a block device are allowed: a separate opt-in on top of `write`, checked here
    /// so that every caller goes through the same gate.
    pub device_writes: bool,
    /// Bytes a probe file's fill must leave free beside the 10% reserve (`min_free`; 0: none).
    pub min_free: u64,
    /// Root of procfs (`/proc`).
    pub procfs: PathBuf,
    /// Root of sysfs (`/sys`).
    pub sysfs: PathBuf,
    /// Where the device nodes are (`/dev`): the nodes of loop devices asked what they are backed
    /// by, and of the devices a write to a block device claims.
    pub devfs: PathBuf,
    /// For writes to a block device, the disk the target was pinned to: a device at its path
    /// that is not that disk is refused.
    pub pinned: Option<DiskIdentity>,
    /// What filesystem a probe file must be on ([`Expected`]): a file that would be on another is
    /// neither made nor opened.
    pub filesystem: Expected,
    /// The agent is confined by Landlock: a permission refused where its rules should allow is
    /// said to be the sandbox's ([`TargetError::in_sandbox`](super::TargetError)).
    pub confined: bool,
}

/// A target opened with O_DIRECT, ready for an engine.
#[derive(Debug)]
pub struct OpenTarget {
    /// The path given.
    pub path: PathBuf,
    pub(super) file: File,
    /// Block device or file.
    pub kind: TargetKind,
    /// First byte of the probe region.
    pub region_offset: u64,
    /// Length of the probe region in bytes.
    pub region_len: u64,
    /// Required alignment of offsets and lengths for direct I/O.
    pub offset_align: u64,
    /// Required alignment of memory buffers for direct I/O.
    pub mem_align: u64,
    /// The block device holding the target, when there is one (not for tmpfs, overlayfs, ...).
    pub device: Option<BlockDevice>,
    /// Filesystem type of a file target (`ext4`, `tmpfs`, ...), or `""` for block devices.
    pub fstype: String,
    /// What the probes probably measure instead of a disk (see [`Cache`]), if anything.
    pub cache: Option<Cache>,
    /// Warnings found by the preflight checks (a cache instead of a disk, overlayfs).
    pub warnings: Vec<String>,
    /// Whether the target was opened for writing.
    pub writable: bool,
    /// Whether the probe file was created or refilled by this open.
    pub filled: bool,
    /// For a block device opened for writing, what makes it the disk it is (what a configured
    /// target is pinned to).
    pub identity: Option<DiskIdentity>,
    /// For a probe file, the filesystem it is on (what a configured target records), when the
    /// mount table says.
    pub filesystem: Option<Filesystem>,
    /// The other devices the write reaches that are claimed for the run (exclusive opens, held
    /// until the target is dropped).
    pub(super) _claims: Vec<File>,
}

impl OpenTarget {
    /// The open file.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }
}
