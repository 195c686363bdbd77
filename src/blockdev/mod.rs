//! Block devices: one type for what the kernel says a block device is ([`BlockDevice`]), the one
//! reader of `<sysfs>/block`, `<sysfs>/class/block` and `<sysfs>/dev/block` ([`sysfs`]), the one
//! rule for the whole disks a device's I/O lands on ([`BlockDevice::disks`], [`disks_under`]),
//! the one mapping between kernel names and sysfs names ([`kname`], [`sysfs_name`]), a whole
//! disk's counters and queue limits ([`counters`]: `stat`, `inflight`, `queue/max_sectors_kb`,
//! `queue/max_segments`), and what a cloud calls a disk ([`cloud`]: from sysfs, and from the
//! vendor-specific areas of NVMe identify data), what a write to a device reaches beneath and
//! beside it ([`stack`]), and what makes a device the disk it is ([`identity`]).
//!
//! Every other module asks this one: discovery (what rules match and name targets by), the
//! diskstats collector (`diskprobe_disk_info`), target facts (the device under a path), the
//! scheduler (the device lock, the busy check, the contention watch) and the limits collector
//! (`diskprobe_target_disk_info`, the disks a limit counts against).
//!
//! Every path is under a root that is passed in (`--path.sysfs`). Every attribute but `dev` is
//! optional: what cannot be read counts as absent.

pub(crate) mod cloud;
pub mod counters;
pub mod identity;
pub(crate) mod stack;
pub(crate) mod sysfs;

use std::path::Path;

pub(crate) use cloud::{Cloud, CloudId};
pub(crate) use sysfs::{all, disk_names};
pub use sysfs::{by_dev, by_name, disks_under};

/// What kind of block device it is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A whole disk (SCSI, NVMe namespace, virtio-blk, ...).
    Disk,
    /// A partition of a disk (or of a volume).
    Partition,
    /// A device-mapper volume (`dm-N`: LVM, LUKS, multipath).
    DeviceMapper,
    /// An MD (software RAID) array.
    Md,
    /// A loop device.
    Loop,
    /// A memory-backed device (zram, ram disk).
    Memory,
}

/// One block device, as sysfs describes it. A partition carries its disk's identifiers (serial,
/// WWN, model, vendor, firmware revision, cloud identity) and queue attributes.
/// Serialized where the agent keeps a configured target's last device
/// ([`crate::scheduler::target_devices`]); fields missing from what is read are empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct BlockDevice {
    /// Kernel name as in `/proc/diskstats` (`sdb`, `nvme0n1p2`, `cciss/c0d0`).
    pub kname: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// What kind of device it is.
    pub kind: Option<Kind>,
    /// For a partition, the kernel name of its disk.
    pub parent: Option<String>,
    /// The whole disks this device's I/O lands on: itself for a disk, its disk for a partition,
    /// every disk under a device-mapper or MD volume (its `slaves/`, through partitions), sorted.
    pub disks: Vec<String>,
    /// Devices built on this one (RAID, multipath, device-mapper), from `holders/`.
    pub holders: usize,
    /// Size in 512-byte sectors (0 for an empty device).
    pub sectors: u64,
    /// Serial number: `device/serial`, or `serial` (virtio-blk), trimmed.
    pub serial: String,
    /// World Wide Name: `wwid` or `device/wwid`, trimmed, as the kernel reports it.
    pub wwn: String,
    /// `device/model`, trimmed.
    pub model: String,
    /// `device/vendor`, trimmed (SCSI and ATA).
    pub vendor: String,
    /// `device/rev` (SCSI, ATA) or `device/firmware_rev` (NVMe), trimmed.
    pub firmware_rev: String,
    /// `queue/rotational`.
    pub rotational: Option<bool>,
    /// `queue/logical_block_size` in bytes.
    pub logical_block_size: Option<u64>,
    /// `dm/name` of a device-mapper volume.
    pub dm_name: String,
    /// An NVMe namespace's id (`nsid`; a partition has its disk's).
    pub nsid: Option<u32>,
    /// What the cloud calls the disk, where the kernel shows it.
    pub cloud: CloudId,
}

impl BlockDevice {
    /// The whole disk of a partition, else the device itself.
    pub(crate) fn disk_name(&self) -> &str {
        self.parent.as_deref().unwrap_or(&self.kname)
    }

    /// `queue/rotational` as the kernel writes it (`0`, `1`), or `""`.
    pub(crate) fn rotational_label(&self) -> &'static str {
        match self.rotational {
            Some(true) => "1",
            Some(false) => "0",
            None => "",
        }
    }

    /// `queue/logical_block_size` as written, or `""`.
    pub(crate) fn logical_block_size_label(&self) -> String {
        self.logical_block_size
            .map(|b| b.to_string())
            .unwrap_or_default()
    }
}

/// Completes what the cloud calls `device` from NVMe identify data where sysfs does not say it: a
/// GCP NVMe disk's device name (Identify Namespace, through the disk's node under `devfs`).
/// Without `CAP_SYS_ADMIN`, or where the node cannot be opened, nothing changes.
pub(crate) fn complete_from_nvme(device: &mut BlockDevice, devfs: &Path) {
    let wanted = device.cloud.cloud == Cloud::Gcp && device.cloud.volume_id.is_empty();
    let Some(nsid) = device.nsid.filter(|_| wanted) else {
        return;
    };
    let node = devfs.join(device.disk_name());
    let read = || -> Result<Option<String>, crate::nvme_admin::AdminError> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&node)?;
        let mut id_ns = vec![0u8; crate::nvme_admin::IDENTIFY_LEN];
        let cmd = crate::nvme_admin::AdminCommand::identify_namespace(nsid);
        crate::nvme_admin::admin(&file, &cmd, &mut id_ns)?;
        Ok(cloud::gcp_device_name(&id_ns))
    };
    match read() {
        Ok(Some(name)) => device.cloud.volume_id = name,
        Ok(None) => {}
        Err(err) => tracing::debug!(node = %node.display(), %err, "no NVMe identify data"),
    }
}

/// The kernel name of a sysfs directory entry: sysfs writes the `/` of names like `cciss/c0d0`
/// as `!`.
pub(crate) fn kname(sysfs_name: &str) -> String {
    sysfs_name.replace('!', "/")
}

/// The sysfs directory entry of kernel name `kname` (`/` written as `!`).
pub(crate) fn sysfs_name(kname: &str) -> String {
    kname.replace('/', "!")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No code outside this module reads block devices from sysfs: every path under
    /// `<sysfs>/block`, `class/block` or `dev/block` is made here, and every file name read
    /// under a disk's directory for its counters and queue limits is named here (tests that
    /// build fixture trees are not code that reads them, and are left out).
    #[test]
    fn no_other_module_reads_block_devices_from_sysfs() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let patterns = [
            "\"dev/block",
            "\"class/block",
            "join(\"block\")",
            "\"block/",
            "replace('!'",
            "replace('/', \"!\")",
            "\"inflight",
            "\"queue/",
            "\"loop/",
            "max_sectors_kb",
            "max_segments",
        ];
        let mut stack = vec![src.clone()];
        let mut offenders = Vec::new();
        let mut files = 0;
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    if path != src.join("blockdev") {
                        stack.push(path);
                    }
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                files += 1;
                let text = std::fs::read_to_string(&path).unwrap();
                let code = text.split("#[cfg(test)]").next().unwrap_or("");
                for (n, line) in code.lines().enumerate() {
                    let line = line.split("//").next().unwrap_or("");
                    if patterns.iter().any(|p| line.contains(p)) {
                        offenders.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            files > 50,
            "only {files} source files found under {}",
            src.display()
        );
        assert!(
            offenders.is_empty(),
            "sysfs block paths outside blockdev:\n{}",
            offenders.join("\n")
        );
    }

    #[test]
    fn names_map_both_ways() {
        assert_eq!(kname("cciss!c0d0p1"), "cciss/c0d0p1");
        assert_eq!(sysfs_name("cciss/c0d0"), "cciss!c0d0");
        assert_eq!(kname(&sysfs_name("sda")), "sda");
    }
}
