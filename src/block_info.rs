//! Static facts about a block device, read from sysfs (`<sysfs>/dev/block/MAJ:MIN/...`).
//!
//! Looking a device up by its major and minor number works for whole disks and partitions alike
//! and sidesteps names containing `/`. Every file is optional: virtual devices have no model,
//! partitions have no `queue/`, and a missing file simply yields an empty value.

use std::fs;
use std::path::{Path, PathBuf};

/// What `diskprobe_disk_info` reports about a device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockInfo {
    /// `device/model`, trimmed.
    pub model: String,
    /// `device/serial`, trimmed.
    pub serial: String,
    /// `wwid` or `device/wwid`, trimmed.
    pub wwn: String,
    /// `device/rev` (SCSI/ATA) or `device/firmware_rev` (NVMe), trimmed.
    pub revision: String,
    /// `queue/rotational` (`0` or `1`), empty when absent.
    pub rotational: String,
    /// `queue/logical_block_size`, empty when absent.
    pub logical_block_size: String,
    /// `dm/name` for device-mapper devices.
    pub dm_name: String,
    /// For partitions, the kernel name of the parent disk.
    pub parent: String,
}

/// The sysfs directory of the device `major:minor` under `sysfs_root`.
pub fn device_dir(sysfs_root: &Path, major: u32, minor: u32) -> PathBuf {
    sysfs_root.join(format!("dev/block/{major}:{minor}"))
}

/// Where a device sits in sysfs, and the kernel names that follow from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// `<sysfs>/dev/block/MAJ:MIN`.
    pub dir: PathBuf,
    /// The directory holding `device/` and `queue/`: the device's own, or its disk's for a
    /// partition (whose directory sits inside its disk's).
    pub disk_dir: PathBuf,
    /// Kernel name as in `/proc/diskstats`, when sysfs knows the device.
    pub name: Option<String>,
    /// For a partition, the kernel name of its disk.
    pub parent: Option<String>,
}

/// Locates `major:minor` under `sysfs_root`. Sysfs writes the `/` of names like `cciss/c0d0` as
/// `!`; the names returned use `/`, as `/proc/diskstats` does.
pub fn locate(sysfs_root: &Path, major: u32, minor: u32) -> Location {
    let dir = device_dir(sysfs_root, major, minor);
    let real = fs::canonicalize(&dir).ok();
    let kernel_name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().replace('!', "/"));
    let name = real.as_deref().and_then(kernel_name);
    let disk = if dir.join("partition").exists() {
        real.as_deref().and_then(Path::parent)
    } else {
        None
    };
    Location {
        disk_dir: disk.map_or_else(|| dir.clone(), Path::to_path_buf),
        parent: disk.and_then(kernel_name),
        name,
        dir,
    }
}

/// Reads what sysfs knows about `major:minor`. Never fails: absent files give empty strings.
pub fn read(sysfs_root: &Path, major: u32, minor: u32) -> BlockInfo {
    let Location {
        dir,
        disk_dir,
        parent,
        ..
    } = locate(sysfs_root, major, minor);
    let parent = parent.unwrap_or_default();
    let first = |candidates: &[&Path]| -> String {
        candidates
            .iter()
            .find_map(|p| fs::read_to_string(p).ok())
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    BlockInfo {
        model: first(&[&disk_dir.join("device/model")]),
        serial: first(&[&disk_dir.join("device/serial")]),
        wwn: first(&[&disk_dir.join("wwid"), &disk_dir.join("device/wwid")]),
        revision: first(&[
            &disk_dir.join("device/rev"),
            &disk_dir.join("device/firmware_rev"),
        ]),
        rotational: first(&[&disk_dir.join("queue/rotational")]),
        logical_block_size: first(&[&disk_dir.join("queue/logical_block_size")]),
        dm_name: first(&[&dir.join("dm/name")]),
        parent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_slashes_come_back_from_sysfs_bangs() {
        let tmp = tempfile::tempdir().unwrap();
        let disk = tmp.path().join("devices/pci0/cciss0/block/cciss!c0d0");
        fs::create_dir_all(disk.join("cciss!c0d0p1")).unwrap();
        fs::write(disk.join("cciss!c0d0p1/partition"), "1\n").unwrap();
        let links = tmp.path().join("dev/block");
        fs::create_dir_all(&links).unwrap();
        std::os::unix::fs::symlink(&disk, links.join("104:0")).unwrap();
        std::os::unix::fs::symlink(disk.join("cciss!c0d0p1"), links.join("104:1")).unwrap();
        assert_eq!(
            locate(tmp.path(), 104, 0).name.as_deref(),
            Some("cciss/c0d0")
        );
        let part = locate(tmp.path(), 104, 1);
        assert_eq!(part.name.as_deref(), Some("cciss/c0d0p1"));
        assert_eq!(part.parent.as_deref(), Some("cciss/c0d0"));
    }

    #[test]
    fn missing_device_gives_empty_info() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(read(tmp.path(), 8, 0), BlockInfo::default());
    }

    #[test]
    fn reads_disk_and_partition() {
        let tmp = tempfile::tempdir().unwrap();
        let disk = tmp.path().join("devices/pci0/block/sda");
        fs::create_dir_all(disk.join("device")).unwrap();
        fs::create_dir_all(disk.join("queue")).unwrap();
        fs::create_dir_all(disk.join("sda1")).unwrap();
        fs::write(disk.join("device/model"), "QEMU HARDDISK   \n").unwrap();
        fs::write(disk.join("queue/rotational"), "1\n").unwrap();
        fs::write(disk.join("queue/logical_block_size"), "512\n").unwrap();
        fs::write(disk.join("sda1/partition"), "1\n").unwrap();
        let links = tmp.path().join("dev/block");
        fs::create_dir_all(&links).unwrap();
        std::os::unix::fs::symlink(&disk, links.join("8:0")).unwrap();
        std::os::unix::fs::symlink(disk.join("sda1"), links.join("8:1")).unwrap();

        let info = read(tmp.path(), 8, 0);
        assert_eq!(info.model, "QEMU HARDDISK");
        assert_eq!(info.rotational, "1");
        assert_eq!(info.parent, "");
        let located = locate(tmp.path(), 8, 1);
        assert_eq!(located.name.as_deref(), Some("sda1"));
        assert_eq!(located.parent.as_deref(), Some("sda"));
        let part = read(tmp.path(), 8, 1);
        assert_eq!(part.model, "QEMU HARDDISK");
        assert_eq!(part.logical_block_size, "512");
        assert_eq!(part.parent, "sda");
    }
}
