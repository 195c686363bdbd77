//! The one reader of block devices in sysfs: `<sysfs>/block` (whole devices), `<sysfs>/class/block`
//! (every device by kernel name) and `<sysfs>/dev/block/MAJ:MIN` (every device by number), all
//! under a root passed in (`--path.sysfs`).
//!
//! Reading is separate from parsing: the `parse_*` functions turn one file's text into a value,
//! and [`super::cloud`] turns the facts into a cloud identity.

use super::cloud::{self, Facts, Transport};
use super::{BlockDevice, Kind, kname, sysfs_name};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// How deep volumes may stack (a partition on a dm volume on a RAID on partitions ...) before the
/// walk stops: deeper means a loop in what sysfs says.
const MAX_DEPTH: usize = 8;

/// `MAJ:MIN` from a `dev` file.
pub(crate) fn parse_dev(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.trim().split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// Sectors from a `size` file; anything unreadable counts as empty.
pub(crate) fn parse_size(text: &str) -> u64 {
    text.trim().parse().unwrap_or(0)
}

/// `<sysfs>/block`, which [`all`] lists.
pub(crate) fn block_root(sysfs: &Path) -> PathBuf {
    sysfs.join("block")
}

/// `<sysfs>/dev/block/MAJ:MIN`.
fn dev_dir(sysfs: &Path, major: u32, minor: u32) -> PathBuf {
    sysfs.join(format!("dev/block/{major}:{minor}"))
}

/// A file's text, trimmed; `""` when it cannot be read.
fn text(path: &Path) -> String {
    fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// The first of `names` under `dir` that can be read, trimmed; `""` when none.
fn first(dir: &Path, names: &[&str]) -> String {
    names
        .iter()
        .find_map(|n| fs::read_to_string(dir.join(n)).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// The device `major:minor`, when `<sysfs>/dev/block` knows it.
pub fn by_dev(sysfs: &Path, major: u32, minor: u32) -> Option<BlockDevice> {
    let real = fs::canonicalize(dev_dir(sysfs, major, minor)).ok()?;
    let name = kname(&real.file_name()?.to_string_lossy());
    read_dir(sysfs, &real, name, Some((major, minor)))
}

/// The device with kernel name `name` (a disk or a partition), when sysfs knows it.
pub fn by_name(sysfs: &Path, name: &str) -> Option<BlockDevice> {
    let dir = locate(sysfs, name)?;
    read_dir(sysfs, &dir, name.to_owned(), None)
}

/// The real directory of the device named `name`: `<sysfs>/class/block/<name>`, else
/// `<sysfs>/block/<name>`, else a partition directory inside a disk of `<sysfs>/block`.
fn locate(sysfs: &Path, name: &str) -> Option<PathBuf> {
    let entry = sysfs_name(name);
    for dir in [sysfs.join("class/block"), sysfs.join("block")] {
        if let Ok(real) = fs::canonicalize(dir.join(&entry)) {
            return Some(real);
        }
    }
    fs::read_dir(sysfs.join("block"))
        .ok()?
        .flatten()
        .map(|disk| disk.path().join(&entry))
        .find(|p| p.join("partition").exists())
        .and_then(|p| fs::canonicalize(p).ok())
}

/// Every device under `<sysfs>/block` and, below each, its partitions, sorted by kernel name.
/// An error only when `<sysfs>/block` cannot be listed; a device whose `dev` cannot be read is
/// left out.
pub(crate) fn all(sysfs: &Path) -> io::Result<Vec<BlockDevice>> {
    let mut devices = Vec::new();
    for entry in fs::read_dir(sysfs.join("block"))? {
        let Ok(entry) = entry else { continue };
        let dir = fs::canonicalize(entry.path()).unwrap_or_else(|_| entry.path());
        let Some(disk) = read_dir(
            sysfs,
            &dir,
            kname(&entry.file_name().to_string_lossy()),
            None,
        ) else {
            continue;
        };
        for sub in partition_dirs(&dir) {
            let name = sub.file_name().map(|n| kname(&n.to_string_lossy()));
            devices.extend(name.and_then(|n| read_dir(sysfs, &sub, n, None)));
        }
        devices.push(disk);
    }
    devices.sort_by(|a, b| a.kname.cmp(&b.kname));
    Ok(devices)
}

/// The partition directories inside a disk's directory.
fn partition_dirs(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.join("partition").exists())
                .collect()
        })
        .unwrap_or_default()
}

/// The kernel names of the whole devices in `<sysfs>/block`, sorted; empty when it cannot be
/// read.
pub(crate) fn disk_names(sysfs: &Path) -> Vec<String> {
    entry_names(&sysfs.join("block"))
}

/// The kernel names of the entries of directory `dir`, sorted; empty when it cannot be read.
fn entry_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| kname(&e.file_name().to_string_lossy()))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The directory of whole disk `disk` under `<sysfs>/block`, whose `stat`, `inflight` and
/// `queue/` [`super::counters`] reads.
pub(crate) fn disk_dir(sysfs: &Path, disk: &str) -> PathBuf {
    sysfs.join("block").join(sysfs_name(disk))
}

/// The kernel names of the whole disks under `device` (a disk, a partition, a dm or md volume),
/// sorted and without duplicates: the device itself when it is a plain disk or sysfs does not know
/// it.
pub fn disks_under(sysfs: &Path, device: &str) -> Vec<String> {
    let mut out = Vec::new();
    walk(sysfs, device, locate(sysfs, device), 0, &mut out);
    out.sort();
    out.dedup();
    out
}

fn walk(sysfs: &Path, name: &str, dir: Option<PathBuf>, depth: usize, out: &mut Vec<String>) {
    let Some(dir) = dir else {
        out.push(name.to_owned());
        return;
    };
    let (disk, disk_dir) = match partition_parent(&dir) {
        Some(parent) => parent,
        None => (name.to_owned(), dir),
    };
    let under = entry_names(&disk_dir.join("slaves"));
    if under.is_empty() || depth >= MAX_DEPTH {
        out.push(disk);
        return;
    }
    for slave in under {
        let dir = locate(sysfs, &slave);
        walk(sysfs, &slave, dir, depth + 1, out);
    }
}

/// For a partition's real directory, its disk's kernel name and directory.
fn partition_parent(dir: &Path) -> Option<(String, PathBuf)> {
    if !dir.join("partition").exists() {
        return None;
    }
    let parent = dir.parent()?;
    Some((
        kname(&parent.file_name()?.to_string_lossy()),
        parent.to_owned(),
    ))
}

/// The device whose real sysfs directory is `dir`. `dev` is read from the directory unless given.
fn read_dir(
    sysfs: &Path,
    dir: &Path,
    name: String,
    dev: Option<(u32, u32)>,
) -> Option<BlockDevice> {
    let (major, minor) = match dev {
        Some(dev) => dev,
        None => parse_dev(&fs::read_to_string(dir.join("dev")).ok()?)?,
    };
    let parent = partition_parent(dir);
    let disk_dir = parent.as_ref().map_or(dir, |(_, d)| d.as_path());
    let kind = kind_of(dir, disk_dir, &name, parent.is_some());
    let mut disks = Vec::new();
    walk(sysfs, &name, Some(dir.to_owned()), 0, &mut disks);
    disks.sort();
    disks.dedup();
    let serial = first(disk_dir, &["device/serial", "serial"]);
    let model = text(&disk_dir.join("device/model"));
    let vendor = text(&disk_dir.join("device/vendor"));
    let cloud = identify(sysfs, disk_dir, &vendor, &model, &serial);
    Some(BlockDevice {
        kname: name,
        major,
        minor,
        kind: Some(kind),
        disks,
        holders: fs::read_dir(dir.join("holders")).map_or(0, |d| d.count()),
        sectors: fs::read_to_string(dir.join("size")).map_or(0, |s| parse_size(&s)),
        wwn: first(disk_dir, &["wwid", "device/wwid"]),
        firmware_rev: first(disk_dir, &["device/rev", "device/firmware_rev"]),
        rotational: match text(&disk_dir.join("queue/rotational")).as_str() {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        },
        logical_block_size: text(&disk_dir.join("queue/logical_block_size"))
            .parse()
            .ok(),
        dm_name: text(&dir.join("dm/name")),
        nsid: nsid_of(disk_dir),
        parent: parent.map(|(p, _)| p),
        serial,
        model,
        vendor,
        cloud,
    })
}

/// What kind of device the directory `dir` (whose disk's directory is `disk_dir`) holds.
fn kind_of(dir: &Path, disk_dir: &Path, name: &str, partition: bool) -> Kind {
    let digits_after = |prefix: &str| {
        name.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    if partition {
        Kind::Partition
    } else if dir.join("dm").is_dir() || digits_after("dm-") {
        Kind::DeviceMapper
    } else if dir.join("md").is_dir() || digits_after("md") {
        Kind::Md
    } else if disk_dir.join("loop").is_dir() || digits_after("loop") {
        Kind::Loop
    } else if digits_after("zram") || digits_after("ram") {
        Kind::Memory
    } else {
        Kind::Disk
    }
}

/// What the cloud calls the whole disk whose directory is `disk_dir`.
fn identify(
    sysfs: &Path,
    disk_dir: &Path,
    vendor: &str,
    model: &str,
    serial: &str,
) -> super::CloudId {
    let device = fs::canonicalize(disk_dir.join("device")).ok();
    let leaf = device
        .as_deref()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let scsi_address = cloud::parse_scsi_address(&leaf);
    let transport = if scsi_address.is_some() {
        Transport::Scsi
    } else if leaf.starts_with("nvme") || disk_dir.join("nsid").exists() {
        Transport::Nvme
    } else if leaf.starts_with("virtio") {
        Transport::Virtio
    } else {
        Transport::Other
    };
    let controller_id = device.as_deref().and_then(|d| controller_id(sysfs, d));
    let vpd = (transport == Transport::Scsi)
        .then(|| fs::read(disk_dir.join("device/vpd_pg80")).ok())
        .flatten()
        .and_then(|page| cloud::parse_vpd_pg80(&page));
    let nsid = nsid_of(disk_dir);
    cloud::identify(&Facts {
        transport,
        vendor,
        model,
        serial,
        scsi_address,
        controller_id: controller_id.as_deref(),
        nsid,
        vpd_serial: vpd.as_deref(),
    })
}

/// An NVMe namespace's id, from `nsid` in its disk's directory.
fn nsid_of(disk_dir: &Path) -> Option<u32> {
    text(&disk_dir.join("nsid")).parse().ok()
}

/// The `device_id` of the nearest ancestor of `device` (inside `sysfs`) that has one: a VMBus
/// device's, on Azure.
fn controller_id(sysfs: &Path, device: &Path) -> Option<String> {
    let root = fs::canonicalize(sysfs).ok()?;
    device
        .ancestors()
        .take_while(|d| d.starts_with(&root) && *d != root)
        .find_map(|d| fs::read_to_string(d.join("device_id")).ok())
        .map(|s| s.trim().to_owned())
}

/// A block device by number, with its kernel name: a node of the stack [`super::stack`] walks.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct DevNode {
    /// Major number.
    pub(crate) major: u32,
    /// Minor number.
    pub(crate) minor: u32,
    /// Kernel name.
    pub(crate) kname: String,
}

impl DevNode {
    /// `MAJ:MIN`.
    pub(crate) fn number(&self) -> (u32, u32) {
        (self.major, self.minor)
    }
}

/// How device `major:minor` is stacked, as sysfs says: what its bytes live on (the whole disk
/// of a partition, the members of a device-mapper or md volume, the backing file of a loop
/// device) and what is built on it (its partitions, its holders).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stacking {
    /// The device itself.
    pub(crate) node: DevNode,
    /// For a partition, its whole disk.
    pub(crate) whole: Option<DevNode>,
    /// Its partitions.
    pub(crate) partitions: Vec<DevNode>,
    /// The devices under a device-mapper or md volume (`slaves/`).
    pub(crate) slaves: Vec<DevNode>,
    /// The volumes built on it (`holders/`: device-mapper, md, bcache).
    pub(crate) holders: Vec<DevNode>,
}

/// [`Stacking`] of device `major:minor`; an error when its directory, or the `dev` of a partition,
/// member or holder cannot be read, or `holders/` or `slaves/` cannot be listed (nothing is
/// taken for absent that might be there). Where `holders/` or `slaves/` is not there, nothing
/// can be listed in it (a partition has no `slaves/`).
pub(crate) fn links(sysfs: &Path, major: u32, minor: u32) -> io::Result<Stacking> {
    let dir = fs::canonicalize(dev_dir(sysfs, major, minor))?;
    let name = |d: &Path| {
        d.file_name()
            .map(|n| kname(&n.to_string_lossy()))
            .ok_or_else(|| io::Error::other(format!("{}: no name", d.display())))
    };
    let node_of = |d: &Path| -> io::Result<DevNode> {
        let (major, minor) = parse_dev(&fs::read_to_string(d.join("dev"))?).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, format!("{}/dev", d.display()))
        })?;
        Ok(DevNode {
            major,
            minor,
            kname: name(d)?,
        })
    };
    let listed = |sub: &str| -> io::Result<Vec<DevNode>> {
        let entries = match fs::read_dir(dir.join(sub)) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(err),
        };
        let mut nodes = Vec::new();
        for entry in entries {
            nodes.push(node_of(&fs::canonicalize(entry?.path())?)?);
        }
        nodes.sort();
        Ok(nodes)
    };
    let whole = match partition_parent(&dir) {
        Some((_, parent)) => Some(node_of(&parent)?),
        None => None,
    };
    let mut partitions = Vec::new();
    for sub in partition_dirs(&dir) {
        partitions.push(node_of(&sub)?);
    }
    partitions.sort();
    Ok(Stacking {
        node: DevNode {
            major,
            minor,
            kname: name(&dir)?,
        },
        slaves: listed("slaves")?,
        holders: listed("holders")?,
        whole,
        partitions,
    })
}

/// The loop devices in `<sysfs>/block` bound to a file or device (their `loop/backing_file`
/// exists), with it as sysfs names it; an error when `<sysfs>/block` or the `dev` of one of
/// them cannot be read.
pub(crate) fn bound_loops(sysfs: &Path) -> io::Result<Vec<(DevNode, String)>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(sysfs.join("block"))? {
        let dir = entry?.path();
        let Ok(file) = fs::read_to_string(dir.join("loop/backing_file")) else {
            continue;
        };
        let (major, minor) = parse_dev(&fs::read_to_string(dir.join("dev"))?).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, format!("{}/dev", dir.display()))
        })?;
        let name = dir
            .file_name()
            .map(|n| kname(&n.to_string_lossy()))
            .unwrap_or_default();
        found.push((
            DevNode {
                major,
                minor,
                kname: name,
            },
            file.trim_end_matches('\n').to_owned(),
        ));
    }
    found.sort();
    Ok(found)
}

/// The disk sequence number of device `major:minor` (its disk's, for a partition: `diskseq`,
/// Linux 5.15), and for a partition its first sector (`start`).
pub(crate) fn sequence_and_start(
    sysfs: &Path,
    major: u32,
    minor: u32,
) -> (Option<u64>, Option<u64>) {
    let dir = dev_dir(sysfs, major, minor);
    let real = fs::canonicalize(&dir).unwrap_or(dir);
    let (disk, start) = match partition_parent(&real) {
        Some((_, disk)) => (disk, text(&real.join("start")).parse().ok()),
        None => (real, None),
    };
    (text(&disk.join("diskseq")).parse().ok(), start)
}

/// Whether device `major:minor` (or the disk of a partition) is a loop device without direct I/O
/// (its `loop/dio` is 0).
pub(crate) fn loop_without_direct_io(sysfs: &Path, major: u32, minor: u32) -> bool {
    let dir = dev_dir(sysfs, major, minor);
    let real = fs::canonicalize(&dir).unwrap_or(dir);
    let disk = partition_parent(&real).map_or(real, |(_, d)| d);
    text(&disk.join("loop/dio")) == "0"
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
        let dev = |path: &str, number: &str| {
            let d = root.join("devices").join(path);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("dev"), format!("{number}\n")).unwrap();
            d
        };
        let sda = dev("pci0/block/sda", "8:0");
        fs::create_dir_all(sda.join("device")).unwrap();
        fs::write(sda.join("device/serial"), "S1\n").unwrap();
        fs::write(sda.join("device/wwid"), "W1\n").unwrap();
        for (i, p) in ["sda1", "sda2"].iter().enumerate() {
            fs::create_dir_all(sda.join(p)).unwrap();
            fs::write(sda.join(p).join("partition"), "1\n").unwrap();
            fs::write(sda.join(p).join("dev"), format!("8:{}\n", i + 1)).unwrap();
        }
        let virtio = root.join("devices/pci0/virtio1");
        let vdb = dev("pci0/virtio1/block/vdb", "254:16");
        symlink(&virtio, vdb.join("device")).unwrap();
        fs::write(vdb.join("serial"), "V2\n").unwrap();
        let md0 = dev("virtual/block/md0", "9:0");
        let dm0 = dev("virtual/block/dm-0", "253:0");
        let dm1 = dev("virtual/block/dm-1", "253:1");
        let dm9 = dev("virtual/block/dm-9", "253:9");
        let cciss = dev("pci0/cciss0/block/cciss!c0d0", "104:0");
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
    fn parses_dev_and_size() {
        assert_eq!(parse_dev("259:0\n"), Some((259, 0)));
        assert_eq!(parse_dev("259"), None);
        assert_eq!(parse_dev("a:b"), None);
        assert_eq!(parse_size("2097152\n"), 2_097_152);
        assert_eq!(parse_size("junk"), 0);
    }

    #[test]
    fn partitions_and_volumes_count_as_the_disks_under_them() {
        let t = tree();
        let under = |d: &str| disks_under(t.path(), d);
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
        // A device read by name or by number carries the same rule's answer.
        assert_eq!(by_name(t.path(), "dm-0").unwrap().disks, ["sda", "vdb"]);
        let dm0 = by_name(t.path(), "dm-0").unwrap();
        assert_eq!((dm0.kind, dm0.major), (Some(Kind::DeviceMapper), 253));
        assert_eq!(by_name(t.path(), "md0").unwrap().kind, Some(Kind::Md));
    }

    #[test]
    fn disks_are_identified_as_discovery_names_them() {
        let t = tree();
        let sda = by_name(t.path(), "sda").unwrap();
        assert_eq!((sda.serial.as_str(), sda.wwn.as_str()), ("S1", "W1"));
        let vdb = by_name(t.path(), "vdb").unwrap();
        assert_eq!(vdb.serial, "V2");
        assert_eq!(
            vdb.cloud.volume_id, "V2",
            "a virtio serial names the volume"
        );
        assert_eq!(by_name(t.path(), "md0").unwrap().serial, "");
        let part = by_name(t.path(), "sda1").unwrap();
        assert_eq!(part.parent.as_deref(), Some("sda"));
        assert_eq!(
            (part.serial.as_str(), part.kind),
            ("S1", Some(Kind::Partition))
        );
        assert_eq!(
            disk_names(t.path()),
            ["cciss/c0d0", "dm-0", "dm-1", "dm-9", "md0", "sda", "vdb"]
        );
        assert!(disk_names(&t.path().join("missing")).is_empty());
        let listed: Vec<String> = all(t.path())
            .unwrap()
            .into_iter()
            .map(|d| d.kname)
            .collect();
        assert!(listed.contains(&"sda2".to_owned()) && listed.contains(&"cciss/c0d0".to_owned()));
    }

    #[test]
    fn devices_by_number_follow_dev_block_links() {
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
        symlink(&disk, links.join("8:0")).unwrap();
        symlink(disk.join("sda1"), links.join("8:1")).unwrap();
        let sda = by_dev(tmp.path(), 8, 0).unwrap();
        assert_eq!(
            (sda.model.as_str(), sda.rotational),
            ("QEMU HARDDISK", Some(true))
        );
        assert_eq!(sda.parent, None);
        let part = by_dev(tmp.path(), 8, 1).unwrap();
        assert_eq!(
            (part.kname.as_str(), part.parent.as_deref()),
            ("sda1", Some("sda"))
        );
        assert_eq!(
            (part.model.as_str(), part.logical_block_size),
            ("QEMU HARDDISK", Some(512))
        );
        assert_eq!(part.disks, ["sda"]);
        assert_eq!(by_dev(tmp.path(), 8, 9), None);
        // Names with a slash come back from sysfs's `!`.
        let cciss = tmp.path().join("devices/pci0/cciss0/block/cciss!c0d0");
        fs::create_dir_all(cciss.join("cciss!c0d0p1")).unwrap();
        fs::write(cciss.join("cciss!c0d0p1/partition"), "1\n").unwrap();
        symlink(&cciss, links.join("104:0")).unwrap();
        symlink(cciss.join("cciss!c0d0p1"), links.join("104:1")).unwrap();
        assert_eq!(by_dev(tmp.path(), 104, 0).unwrap().kname, "cciss/c0d0");
        let p = by_dev(tmp.path(), 104, 1).unwrap();
        assert_eq!(
            (p.kname.as_str(), p.parent.as_deref()),
            ("cciss/c0d0p1", Some("cciss/c0d0"))
        );
    }
}
