//! The block devices of `<sysfs>/block`, whole devices and their partitions, as
//! [`BlockDevice`] records: what discovery rules match and name targets by.
//!
//! Reading is separate from parsing: [`read`] walks the tree, the `parse_*` functions turn one
//! file's text into a value. Every file but `dev` is optional: a device without `size` counts as
//! empty, one without `serial`, `wwid` or `device/model` has none.

use std::fs;
use std::io;
use std::path::Path;

/// One block device, as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDevice {
    /// Kernel name as in `/proc/diskstats` (`sdb`, `nvme0n1p2`; sysfs's `!` read as `/`).
    pub kname: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Size in 512-byte sectors (0 for an empty device: a loop device without a file, a drive
    /// without media).
    pub sectors: u64,
    /// For a partition, the kernel name of its disk.
    pub parent: Option<String>,
    /// Devices built on this one (RAID, multipath, device-mapper), from `holders/`.
    pub holders: usize,
    /// Serial number (`device/serial`, or `serial` for virtio); a partition has its disk's.
    pub serial: String,
    /// World Wide Name (`wwid` or `device/wwid`); a partition has its disk's.
    pub wwn: String,
    /// Model (`device/model`); a partition has its disk's.
    pub model: String,
}

/// `MAJ:MIN` from a `dev` file.
pub fn parse_dev(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.trim().split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// Sectors from a `size` file; anything unreadable counts as empty.
pub fn parse_size(text: &str) -> u64 {
    text.trim().parse().unwrap_or(0)
}

/// Every device under `<sysfs>/block` and, below each, its partitions, sorted by kernel name.
/// An error only when `<sysfs>/block` cannot be listed; a device whose `dev` cannot be read is
/// left out.
pub fn read(sysfs: &Path) -> io::Result<Vec<BlockDevice>> {
    let mut devices = Vec::new();
    for entry in fs::read_dir(sysfs.join("block"))? {
        let Ok(entry) = entry else { continue };
        let dir = entry.path();
        let kname = entry.file_name().to_string_lossy().replace('!', "/");
        let Some(disk) = device(&dir, kname.clone(), None, None) else {
            continue;
        };
        if let Ok(children) = fs::read_dir(&dir) {
            for child in children.flatten() {
                let sub = child.path();
                if !sub.join("partition").exists() {
                    continue;
                }
                let name = child.file_name().to_string_lossy().replace('!', "/");
                devices.extend(device(&sub, name, Some(&kname), Some(&disk)));
            }
        }
        devices.push(disk);
    }
    devices.sort_by(|a, b| a.kname.cmp(&b.kname));
    Ok(devices)
}

/// The device whose sysfs directory is `dir`; a partition inherits `disk`'s identifiers.
fn device(
    dir: &Path,
    kname: String,
    parent: Option<&str>,
    disk: Option<&BlockDevice>,
) -> Option<BlockDevice> {
    let text = |name: &str| fs::read_to_string(dir.join(name)).ok();
    let first = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| text(n))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    let (major, minor) = parse_dev(&text("dev")?)?;
    let holders = fs::read_dir(dir.join("holders")).map_or(0, |d| d.count());
    let (serial, wwn, model) = match disk {
        Some(d) => (d.serial.clone(), d.wwn.clone(), d.model.clone()),
        None => (
            first(&["device/serial", "serial"]),
            first(&["wwid", "device/wwid"]),
            first(&["device/model"]),
        ),
    };
    Some(BlockDevice {
        kname,
        major,
        minor,
        sectors: text("size").map_or(0, |s| parse_size(&s)),
        parent: parent.map(str::to_owned),
        holders,
        serial,
        wwn,
        model,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dev_and_size() {
        assert_eq!(parse_dev("259:0\n"), Some((259, 0)));
        assert_eq!(parse_dev("259"), None);
        assert_eq!(parse_dev("a:b"), None);
        assert_eq!(parse_size("2097152\n"), 2_097_152);
        assert_eq!(parse_size("junk"), 0);
    }
}
