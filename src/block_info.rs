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

/// Reads what sysfs knows about `major:minor`. Never fails: absent files give empty strings.
pub fn read(sysfs_root: &Path, major: u32, minor: u32) -> BlockInfo {
    let dir = device_dir(sysfs_root, major, minor);
    let is_partition = dir.join("partition").exists();
    // A partition's directory sits inside its disk's, which holds `device/` and `queue/`.
    let disk_dir = if is_partition {
        fs::canonicalize(&dir)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| dir.clone())
    } else {
        dir.clone()
    };
    let parent = if is_partition {
        disk_dir
            .file_name()
            .map(|n| n.to_string_lossy().replace('!', "/"))
            .unwrap_or_default()
    } else {
        String::new()
    };
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
        let part = read(tmp.path(), 8, 1);
        assert_eq!(part.model, "QEMU HARDDISK");
        assert_eq!(part.logical_block_size, "512");
        assert_eq!(part.parent, "sda");
    }
}
