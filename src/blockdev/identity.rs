//! What makes a block device the disk it is ([`DiskIdentity`]), so that a write target can be
//! pinned to the disk it was allowed on and refused once its path names another
//! ([`DiskIdentity::same_disk`]).
//!
//! Within one boot (the kernel's `boot_id`) the disk sequence number says it: the kernel numbers
//! every disk it attaches, a loop device at every attach, and never hands a number out twice
//! (`diskseq`, Linux 5.15; read from the open descriptor, so that the device checked is the one
//! written). Across boots it is the serial, WWN or cloud volume id, and for a loop device the
//! device and inode of its backing file (or the number of its backing device) with the part of
//! it the device covers. A partition is also its first sector and size.

use super::BlockDevice;
use super::stack::LoopBacking;
use super::sysfs;
use std::fmt;
use std::path::Path;

/// What makes a block device the disk it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct DiskIdentity {
    /// Kernel name when it was read.
    pub(crate) kname: String,
    /// Major number then.
    pub(crate) major: u32,
    /// Minor number then.
    pub(crate) minor: u32,
    /// The boot it was read in (`/proc/sys/kernel/random/boot_id`; empty when unreadable).
    pub(crate) boot_id: String,
    /// The disk sequence number (a partition's disk's), where the kernel has one.
    pub(crate) diskseq: Option<u64>,
    /// Size in 512-byte sectors.
    pub(crate) sectors: u64,
    /// A partition's first sector on its disk.
    pub(crate) start: Option<u64>,
    /// Serial number (a partition's disk's).
    pub(crate) serial: String,
    /// World Wide Name.
    pub(crate) wwn: String,
    /// What the cloud calls the volume.
    pub(crate) volume_id: String,
    /// A loop device's (or a loop device's partition's) backing.
    pub(crate) backing: Option<LoopBacking>,
}

/// Why a device is not the pinned disk, or cannot be told to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// Something that makes it the disk differs.
    Differs(String),
    /// A new boot, and nothing that survives one (serial, WWN, volume id, backing file) was
    /// recorded.
    Unverifiable,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Differs(what) => f.write_str(what),
            Mismatch::Unverifiable => f.write_str(
                "the machine booted since, and the disk has no serial, WWN, volume id or backing file to tell it by",
            ),
        }
    }
}

impl DiskIdentity {
    /// The identity of `device` as sysfs, `procfs` and the descriptor's `diskseq` (`None` where
    /// the kernel has none) say, with a loop device's `backing`.
    pub(crate) fn read(
        procfs: &Path,
        sysfs: &Path,
        device: &BlockDevice,
        diskseq: Option<u64>,
        backing: Option<LoopBacking>,
    ) -> DiskIdentity {
        let (sysfs_seq, start) = sysfs::sequence_and_start(sysfs, device.major, device.minor);
        DiskIdentity {
            kname: device.kname.clone(),
            major: device.major,
            minor: device.minor,
            boot_id: boot_id(procfs),
            diskseq: diskseq.or(sysfs_seq),
            sectors: device.sectors,
            start,
            serial: device.serial.clone(),
            wwn: device.wwn.clone(),
            volume_id: device.cloud.volume_id.clone(),
            backing,
        }
    }

    /// What `[retired] disks` names it by to let a write target go to another disk at its
    /// path: its serial, WWN or volume id; else its backing (`backing-file-MAJ:MIN:INODE`,
    /// `backing-device-MAJ:MIN`, with `+OFFSET` where it starts inside); else
    /// `diskseq-N`; else its kernel name.
    pub(crate) fn id(&self) -> String {
        for id in [&self.serial, &self.wwn, &self.volume_id] {
            if !id.is_empty() {
                return id.clone();
            }
        }
        if let Some(b) = &self.backing {
            let base = match b.backing {
                super::stack::Backing::File {
                    dev_major,
                    dev_minor,
                    inode,
                } => format!("backing-file-{dev_major}:{dev_minor}:{inode}"),
                super::stack::Backing::Device { major, minor } => {
                    format!("backing-device-{major}:{minor}")
                }
            };
            return match b.offset {
                0 => base,
                offset => format!("{base}+{offset}"),
            };
        }
        match self.diskseq {
            Some(seq) => format!("diskseq-{seq}"),
            None => self.kname.clone(),
        }
    }

    /// Whether `now` is the disk `self` was pinned to. `Ok(true)` when it is and the pin should
    /// be renewed with `now` (a new boot: its disk sequence number is that boot's).
    pub(crate) fn same_disk(&self, now: &DiskIdentity) -> Result<bool, Mismatch> {
        let differs = |what: &str, was: &dyn fmt::Display, is: &dyn fmt::Display| {
            Err(Mismatch::Differs(format!("{what} was {was}, is {is}")))
        };
        for (what, was, is) in [
            ("serial", &self.serial, &now.serial),
            ("WWN", &self.wwn, &now.wwn),
            ("volume id", &self.volume_id, &now.volume_id),
        ] {
            if !was.is_empty() && was != is {
                return differs(what, &quoted(was), &quoted(is));
            }
        }
        if self.backing.is_some() && self.backing != now.backing {
            return differs("backing", &backing(&self.backing), &backing(&now.backing));
        }
        if self.start.is_some() && (self.start, self.sectors) != (now.start, now.sectors) {
            return differs(
                "the partition",
                &extent(self.start, self.sectors),
                &extent(now.start, now.sectors),
            );
        }
        let same_boot = !self.boot_id.is_empty() && self.boot_id == now.boot_id;
        let stable = !(self.serial.is_empty()
            && self.wwn.is_empty()
            && self.volume_id.is_empty()
            && self.backing.is_none());
        match (self.diskseq, now.diskseq) {
            (Some(was), Some(is)) if same_boot => {
                if was == is {
                    Ok(false)
                } else {
                    differs("diskseq", &was, &is)
                }
            }
            _ if !same_boot && stable => Ok(true),
            _ if !same_boot => Err(Mismatch::Unverifiable),
            // The same boot without disk sequence numbers (before Linux 5.15): what identifies
            // it across boots, or else its number and size.
            _ if stable => Ok(false),
            _ if (self.major, self.minor, self.sectors) == (now.major, now.minor, now.sectors) => {
                Ok(false)
            }
            _ => differs(
                "the device",
                &format!("{}:{} of {} sectors", self.major, self.minor, self.sectors),
                &format!("{}:{} of {} sectors", now.major, now.minor, now.sectors),
            ),
        }
    }
}

impl fmt::Display for DiskIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}:{}", self.kname, self.major, self.minor)?;
        if let Some(seq) = self.diskseq {
            write!(f, ", diskseq {seq}")?;
        }
        for (what, v) in [
            ("serial", &self.serial),
            ("WWN", &self.wwn),
            ("volume id", &self.volume_id),
        ] {
            if !v.is_empty() {
                write!(f, ", {what} {v:?}")?;
            }
        }
        if self.backing.is_some() {
            write!(f, ", backing {}", backing(&self.backing))?;
        }
        if self.start.is_some() {
            write!(f, ", partition {}", extent(self.start, self.sectors))?;
        }
        let boot: String = self.boot_id.chars().take(8).collect();
        write!(f, ", boot {boot})")
    }
}

/// A backing as a message names it.
fn backing(b: &Option<LoopBacking>) -> String {
    match b {
        None => "none".to_owned(),
        Some(b) if b.offset == 0 && b.sizelimit == 0 => b.backing.to_string(),
        Some(b) => format!(
            "{} from byte {} ({} bytes)",
            b.backing,
            b.offset,
            match b.sizelimit {
                0 => "to its end".to_owned(),
                n => n.to_string(),
            }
        ),
    }
}

/// A partition's extent as a message names it.
fn extent(start: Option<u64>, sectors: u64) -> String {
    match start {
        Some(s) => format!("sectors {s}..{}", s + sectors),
        None => format!("a whole disk of {sectors} sectors"),
    }
}

/// `v` in quotes, or `none` when empty.
fn quoted(v: &str) -> String {
    if v.is_empty() {
        "none".to_owned()
    } else {
        format!("{v:?}")
    }
}

/// This boot's id (`<procfs>/sys/kernel/random/boot_id`), or `""`.
pub(crate) fn boot_id(procfs: &Path) -> String {
    std::fs::read_to_string(procfs.join("sys/kernel/random/boot_id"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::stack::Backing;
    use super::*;

    fn loop_disk(seq: u64, inode: u64) -> DiskIdentity {
        DiskIdentity {
            kname: "loop7".into(),
            major: 7,
            minor: 7,
            boot_id: "b1".into(),
            diskseq: Some(seq),
            sectors: 2048,
            backing: Some(LoopBacking {
                backing: Backing::File {
                    dev_major: 254,
                    dev_minor: 1,
                    inode,
                },
                offset: 0,
                sizelimit: 0,
            }),
            ..DiskIdentity::default()
        }
    }

    fn bare(seq: Option<u64>, boot: &str) -> DiskIdentity {
        DiskIdentity {
            kname: "vdb".into(),
            major: 254,
            minor: 16,
            boot_id: boot.into(),
            diskseq: seq,
            sectors: 4096,
            ..DiskIdentity::default()
        }
    }

    #[test]
    fn a_loop_device_attached_again_is_another_disk() {
        let pinned = loop_disk(883, 12);
        assert_eq!(pinned.same_disk(&loop_disk(883, 12)), Ok(false));
        // Another image at the same node: both the backing and the sequence number differ.
        let err = pinned.same_disk(&loop_disk(885, 13)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "backing was file 254:1:12, is file 254:1:13"
        );
        // The same image attached again: a new sequence number within the boot.
        let err = pinned.same_disk(&loop_disk(885, 12)).unwrap_err();
        assert_eq!(err.to_string(), "diskseq was 883, is 885");
        // After a reboot, the same image at the same place: the same disk, pin renewed.
        let mut rebooted = loop_disk(4, 12);
        rebooted.boot_id = "b2".into();
        assert_eq!(pinned.same_disk(&rebooted), Ok(true));
        assert_eq!(pinned.id(), "backing-file-254:1:12");
    }

    #[test]
    fn disks_are_told_by_serial_and_wwn_across_boots() {
        let mut pinned = bare(Some(10), "b1");
        pinned.serial = "S1".into();
        let mut other = bare(Some(3), "b2");
        other.serial = "S2".into();
        assert_eq!(
            pinned.same_disk(&other).unwrap_err().to_string(),
            "serial was \"S1\", is \"S2\""
        );
        other.serial = "S1".into();
        assert_eq!(pinned.same_disk(&other), Ok(true));
        assert_eq!(pinned.id(), "S1");
        // Nothing that survives a boot: refused after one, told by diskseq within it.
        let plain = bare(Some(10), "b1");
        assert_eq!(
            plain.same_disk(&bare(Some(3), "b2")),
            Err(Mismatch::Unverifiable)
        );
        assert_eq!(plain.same_disk(&bare(Some(10), "b1")), Ok(false));
        assert!(plain.same_disk(&bare(Some(11), "b1")).is_err());
        assert_eq!(plain.id(), "diskseq-10");
        // Before Linux 5.15 (no diskseq), within a boot: its number and size.
        let old = bare(None, "b1");
        assert_eq!(old.same_disk(&bare(None, "b1")), Ok(false));
        let mut bigger = bare(None, "b1");
        bigger.sectors = 8192;
        assert!(old.same_disk(&bigger).is_err());
    }

    #[test]
    fn a_partition_is_its_extent_too() {
        let mut pinned = bare(Some(10), "b1");
        pinned.start = Some(2048);
        let mut moved = pinned.clone();
        moved.start = Some(4096);
        assert_eq!(
            pinned.same_disk(&moved).unwrap_err().to_string(),
            "the partition was sectors 2048..6144, is sectors 4096..8192"
        );
        assert_eq!(
            pinned.to_string(),
            "vdb (254:16, diskseq 10, partition sectors 2048..6144, boot b1)"
        );
    }
}
