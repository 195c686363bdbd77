//! The whole disks under a block device, and who they are: what a disk's limits and its
//! consumption are counted against.
//!
//! A cloud disk's IOPS and throughput cap applies to the whole disk, so a partition counts as its
//! disk, and a device-mapper or RAID volume as every disk under it (its `slaves/`, through their
//! partitions, down to disks that have none). A disk is named by its kernel name as in
//! `/proc/diskstats` and identified by its serial number and World Wide Name, read as discovery
//! reads them (`device/serial`, or `serial` for virtio; `wwid` or `device/wwid`), so that a limit
//! can be told to follow the disk when kernel names swap at reboot.
//!
//! Sysfs is read under a root that is passed in (`--path.sysfs`); names with `/` (`cciss/c0d0`)
//! are `!` in sysfs paths. Every file is optional: what cannot be read counts as absent.

use std::fs;
use std::path::{Path, PathBuf};

/// How deep volumes may stack (a partition on a dm volume on a RAID on partitions ...) before the
/// walk stops: deeper means a loop in what sysfs says.
const MAX_DEPTH: usize = 8;

/// A whole disk and its identifiers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Disk {
    /// Kernel name (`sdb`, `nvme0n1`), as in `/proc/diskstats`.
    pub name: String,
    /// Serial number, or `""`.
    pub serial: String,
    /// World Wide Name, or `""`.
    pub wwn: String,
}

/// `<sysfs>/class/block/<name>`: every block device, disk or partition.
fn class_dir(sysfs: &Path, name: &str) -> PathBuf {
    sysfs.join("class/block").join(name.replace('/', "!"))
}

/// `<sysfs>/block/<name>`: a whole disk (dm and md volumes included).
fn block_dir(sysfs: &Path, name: &str) -> PathBuf {
    sysfs.join("block").join(name.replace('/', "!"))
}

/// A sysfs directory entry's kernel name.
fn kernel_name(entry: &fs::DirEntry) -> String {
    entry.file_name().to_string_lossy().replace('!', "/")
}

/// The disk of partition `name`, or `None` when `name` is not a partition.
fn partition_parent(sysfs: &Path, name: &str) -> Option<String> {
    let dir = class_dir(sysfs, name);
    if !dir.join("partition").exists() {
        return None;
    }
    let real = fs::canonicalize(&dir).ok()?;
    Some(
        real.parent()?
            .file_name()?
            .to_string_lossy()
            .replace('!', "/"),
    )
}

/// The devices directly under volume `name` (its `slaves/`), sorted; empty for a plain disk.
fn slaves(sysfs: &Path, name: &str) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(block_dir(sysfs, name).join("slaves"))
        .map(|d| d.flatten().map(|e| kernel_name(&e)).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// The kernel names of the whole disks under `device` (a disk, a partition, a dm or md volume),
/// sorted and without duplicates: the device itself when it is a plain disk or sysfs does not know
/// it.
pub fn disk_names_under(sysfs: &Path, device: &str) -> Vec<String> {
    let mut out = Vec::new();
    walk(sysfs, device, 0, &mut out);
    out.sort();
    out.dedup();
    out
}

fn walk(sysfs: &Path, device: &str, depth: usize, out: &mut Vec<String>) {
    let disk = partition_parent(sysfs, device).unwrap_or_else(|| device.to_owned());
    let under = slaves(sysfs, &disk);
    if under.is_empty() || depth >= MAX_DEPTH {
        out.push(disk);
        return;
    }
    for slave in under {
        walk(sysfs, &slave, depth + 1, out);
    }
}

/// The serial number and WWN of disk `name`.
pub fn identify(sysfs: &Path, name: &str) -> Disk {
    let dir = block_dir(sysfs, name);
    let first = |files: &[&str]| {
        files
            .iter()
            .find_map(|f| fs::read_to_string(dir.join(f)).ok())
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    Disk {
        name: name.to_owned(),
        serial: first(&["device/serial", "serial"]),
        wwn: first(&["wwid", "device/wwid"]),
    }
}

/// The kernel names of the whole disks in `<sysfs>/block`, sorted; empty when it cannot be read.
pub fn all_disk_names(sysfs: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(sysfs.join("block"))
        .map(|d| d.flatten().map(|e| kernel_name(&e)).collect())
        .unwrap_or_default();
    names.sort();
    names
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A sysfs tree: `sda` (serial S1, WWN W1) with partitions `sda1`, `sda2`; `vdb` (virtio
    /// serial V2); `md0`, a RAID over `sda2` and `vdb`; `dm-0`, a volume over `md0`; `dm-1`, over
    /// `sda1`; `cciss/c0d0`; and `dm-9`, whose slaves name each other (a loop).
    pub(crate) fn tree() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let dev = |path: &str| {
            let d = root.join("devices").join(path);
            fs::create_dir_all(&d).unwrap();
            d
        };
        let sda = dev("pci0/block/sda");
        fs::create_dir_all(sda.join("device")).unwrap();
        fs::write(sda.join("device/serial"), "S1\n").unwrap();
        fs::write(sda.join("device/wwid"), "W1\n").unwrap();
        for p in ["sda1", "sda2"] {
            fs::create_dir_all(sda.join(p)).unwrap();
            fs::write(sda.join(p).join("partition"), "1\n").unwrap();
        }
        let vdb = dev("virtio1/block/vdb");
        fs::write(vdb.join("serial"), "V2\n").unwrap();
        let md0 = dev("virtual/block/md0");
        let dm0 = dev("virtual/block/dm-0");
        let dm1 = dev("virtual/block/dm-1");
        let dm9 = dev("virtual/block/dm-9");
        let cciss = dev("pci0/cciss0/block/cciss!c0d0");
        for (dir, under) in [
            (&md0, vec!["sda2", "vdb"]),
            (&dm0, vec!["md0"]),
            (&dm1, vec!["sda1"]),
            (&dm9, vec!["dm-9"]),
        ] {
            fs::create_dir_all(dir.join("slaves")).unwrap();
            for s in under {
                fs::write(dir.join("slaves").join(s), "").unwrap();
            }
        }
        fs::create_dir_all(root.join("block")).unwrap();
        fs::create_dir_all(root.join("class/block")).unwrap();
        for (name, dir) in [
            ("sda", sda.clone()),
            ("vdb", vdb),
            ("md0", md0),
            ("dm-0", dm0),
            ("dm-1", dm1),
            ("dm-9", dm9),
            ("cciss!c0d0", cciss),
        ] {
            symlink(&dir, root.join("block").join(name)).unwrap();
            symlink(&dir, root.join("class/block").join(name)).unwrap();
        }
        for p in ["sda1", "sda2"] {
            symlink(sda.join(p), root.join("class/block").join(p)).unwrap();
        }
        tmp
    }

    #[test]
    fn partitions_and_volumes_count_as_the_disks_under_them() {
        let t = tree();
        let under = |d: &str| disk_names_under(t.path(), d);
        assert_eq!(under("sda"), ["sda"]);
        assert_eq!(under("sda1"), ["sda"]);
        assert_eq!(under("vdb"), ["vdb"]);
        assert_eq!(under("md0"), ["sda", "vdb"]);
        assert_eq!(under("dm-0"), ["sda", "vdb"]);
        assert_eq!(under("dm-1"), ["sda"]);
        assert_eq!(under("cciss/c0d0"), ["cciss/c0d0"]);
        // Unknown to sysfs: itself; a loop in sysfs ends at the depth limit.
        assert_eq!(under("nvme9n1"), ["nvme9n1"]);
        assert_eq!(under("dm-9"), ["dm-9"]);
    }

    #[test]
    fn disks_are_identified_as_discovery_names_them() {
        let t = tree();
        assert_eq!(
            identify(t.path(), "sda"),
            Disk {
                name: "sda".into(),
                serial: "S1".into(),
                wwn: "W1".into()
            }
        );
        assert_eq!(identify(t.path(), "vdb").serial, "V2");
        assert_eq!(identify(t.path(), "md0").serial, "");
        assert_eq!(
            all_disk_names(t.path()),
            ["cciss/c0d0", "dm-0", "dm-1", "dm-9", "md0", "sda", "vdb"]
        );
        assert!(all_disk_names(&t.path().join("missing")).is_empty());
    }
}
