//! What a write to a block device reaches: its footprint. The device itself, what its bytes live
//! on (a partition's whole disk, the device or file a loop device is backed by, the members of a
//! device-mapper or md volume, and what those live on in turn), and every other view of those
//! bytes (partitions, loop devices over them or over the same backing file, volumes built on
//! them). The write-safety rules ([`crate::probe::io_target::block`]) refuse a write while any
//! of these is mounted, swapped on, held or claimed.
//!
//! Sysfs says how devices are stacked ([`super::sysfs::links`]). What a loop device is backed by
//! comes from the kernel ([`DevfsLoops`]: `LOOP_GET_STATUS64` on its node under `--path.devfs`,
//! which names the backing file by device and inode whatever its path, also once it is deleted),
//! or where the node cannot be opened from a stat of the path sysfs names. A loop device whose
//! backing cannot be told could be over anything: the footprint lists it
//! ([`Footprint::unknown_loops`]) and the rules refuse.
//!
//! Device-mapper tables and md layouts are not read: a member counts whole, so a write to one
//! logical volume is refused while another volume on the same physical volume is in use.

use super::sysfs::{self, DevNode};
use crate::probe::sys;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// The most devices a footprint may have; more means a loop in what sysfs says, and the walk
/// gives up (the write is refused).
pub(crate) const MAX_LAYERS: usize = 256;

/// How a device of a footprint relates to the device written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The device written.
    Target,
    /// A partition of a device of the footprint.
    Partition,
    /// The whole disk of a partition of the footprint (its other partitions hold other bytes
    /// and are not part of it).
    WholeDisk,
    /// A member of a device-mapper or md volume of the footprint.
    Member,
    /// The block device a loop device of the footprint is backed by.
    Backing,
    /// Another loop device over the file a loop device of the footprint is backed by.
    SameFile,
    /// A loop device over a device of the footprint.
    LoopOver,
}

impl Role {
    /// Whether the write-safety rules claim the device for the run (an exclusive open held
    /// until it ends, so that nothing mounts it meanwhile): the devices nothing else of the
    /// footprint claims. Not the target (its own exclusive open claims it and its partitions),
    /// its partitions (a claimed partition would make that open fail), a partition's whole disk
    /// (the kernel refuses it to others while a partition is claimed) nor a volume's members
    /// (the volume claims them).
    pub(crate) fn claimed_for_the_run(self) -> bool {
        matches!(self, Role::Backing | Role::SameFile | Role::LoopOver)
    }
}

/// One device of a footprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layer {
    /// The device.
    pub(crate) node: DevNode,
    /// How it relates to the device written.
    pub(crate) role: Role,
    /// The kernel name of the device of the footprint it was reached from (empty for the
    /// target).
    pub(crate) via: String,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let DevNode {
            major,
            minor,
            kname,
        } = &self.node;
        let via = &self.via;
        match self.role {
            Role::Target => write!(f, "the device {kname} ({major}:{minor})"),
            Role::Partition => write!(f, "{kname} ({major}:{minor}), a partition of {via},"),
            Role::WholeDisk => {
                write!(
                    f,
                    "{kname} ({major}:{minor}), the whole disk of partition {via},"
                )
            }
            Role::Member => write!(f, "{kname} ({major}:{minor}), a member of {via},"),
            Role::Backing => write!(f, "{kname} ({major}:{minor}), which {via} is backed by,"),
            Role::SameFile => write!(
                f,
                "{kname} ({major}:{minor}), a loop device over the same file as {via},"
            ),
            Role::LoopOver => write!(f, "{kname} ({major}:{minor}), a loop device over {via},"),
        }
    }
}

/// What a loop device reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Backing {
    /// A file, by the device and inode of its filesystem.
    File {
        /// Major number of the filesystem's device.
        dev_major: u32,
        /// Minor number.
        dev_minor: u32,
        /// Inode.
        inode: u64,
    },
    /// A block device.
    Device {
        /// Major number.
        major: u32,
        /// Minor number.
        minor: u32,
    },
}

impl fmt::Display for Backing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backing::File {
                dev_major,
                dev_minor,
                inode,
            } => write!(f, "file {dev_major}:{dev_minor}:{inode}"),
            Backing::Device { major, minor } => write!(f, "device {major}:{minor}"),
        }
    }
}

/// A loop device's backing, and which part of it the device covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub(crate) struct LoopBacking {
    /// What it reads and writes.
    pub(crate) backing: Backing,
    /// Where the device starts in it, in bytes.
    pub(crate) offset: u64,
    /// How many bytes of it the device covers (0: up to its end).
    pub(crate) sizelimit: u64,
}

impl LoopBacking {
    /// From what `LOOP_GET_STATUS64` says: a backing block device by its number, a file by its
    /// filesystem's device and its inode (the kernel encodes device numbers in its own 32-bit
    /// format).
    pub(crate) fn from_status(status: &sys::LoopStatus) -> LoopBacking {
        let backing = if status.rdevice != 0 {
            let (major, minor) = kernel_dev(status.rdevice);
            Backing::Device { major, minor }
        } else {
            let (dev_major, dev_minor) = kernel_dev(status.device);
            Backing::File {
                dev_major,
                dev_minor,
                inode: status.inode,
            }
        };
        LoopBacking {
            backing,
            offset: status.offset,
            sizelimit: status.sizelimit,
        }
    }
}

/// `(major, minor)` of a device number in the kernel's 32-bit encoding (`new_encode_dev`).
fn kernel_dev(dev: u64) -> (u32, u32) {
    let major = ((dev & 0xf_ff00) >> 8) as u32;
    let minor = ((dev & 0xff) | ((dev >> 12) & 0xf_ff00)) as u32;
    (major, minor)
}

/// Tells what a bound loop device is backed by.
pub(crate) trait LoopReader {
    /// The backing of `node`, whose `loop/backing_file` says `file`; why not, when it cannot be
    /// told.
    fn backing(&self, node: &DevNode, file: &str) -> Result<LoopBacking, String>;
}

/// [`LoopReader`] of the machine: `LOOP_GET_STATUS64` on the node `<devfs>/<kernel name>`
/// (opened read-only, checked to be that device), else a stat of the path sysfs names.
pub(crate) struct DevfsLoops<'a> {
    /// `--path.devfs`.
    pub(crate) devfs: &'a Path,
}

impl LoopReader for DevfsLoops<'_> {
    fn backing(&self, node: &DevNode, file: &str) -> Result<LoopBacking, String> {
        let path = self.devfs.join(&node.kname);
        let from_node = open_node(&path, node, false)
            .and_then(|f| sys::loop_status(&f))
            .map(|s| LoopBacking::from_status(&s));
        let node_err = match from_node {
            Ok(backing) => return Ok(backing),
            Err(err) => err,
        };
        // The path sysfs names is the one the file had when it was bound: it may have moved or
        // be deleted (" (deleted)"), or lie in another mount namespace.
        match fs::metadata(file) {
            Ok(meta) => {
                let backing = if meta.file_type().is_block_device() {
                    Backing::Device {
                        major: libc::major(meta.rdev()),
                        minor: libc::minor(meta.rdev()),
                    }
                } else {
                    Backing::File {
                        dev_major: libc::major(meta.dev()),
                        dev_minor: libc::minor(meta.dev()),
                        inode: meta.ino(),
                    }
                };
                // Only the backing itself is known this way, not where the device starts in it.
                Ok(LoopBacking {
                    backing,
                    offset: 0,
                    sizelimit: 0,
                })
            }
            Err(err) => Err(format!(
                "{}: {node_err}; its backing file {file:?}: {err}",
                path.display()
            )),
        }
    }
}

/// Opens the node `path` of `node` read-only (non-blocking, and exclusively when `exclusive`),
/// and checks that it is that device.
pub(crate) fn open_node(path: &Path, node: &DevNode, exclusive: bool) -> io::Result<File> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if exclusive {
        flags |= libc::O_EXCL;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)?;
    let meta = file.metadata()?;
    let rdev = meta.rdev();
    if !meta.file_type().is_block_device()
        || (libc::major(rdev), libc::minor(rdev)) != node.number()
    {
        return Err(io::Error::other(format!(
            "{} is not the device {}:{}",
            path.display(),
            node.major,
            node.minor
        )));
    }
    Ok(file)
}

/// What a write to a block device reaches ([`footprint`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Footprint {
    /// The devices, the target first, then in the order they were reached.
    pub(crate) layers: Vec<Layer>,
    /// Holders of a layer (by its index) that are not part of the footprint: volumes built on
    /// its bytes.
    pub(crate) foreign_holders: Vec<(usize, DevNode)>,
    /// Bound loop devices whose backing cannot be told, and why: any of them could be over a
    /// device of the footprint.
    pub(crate) unknown_loops: Vec<(DevNode, String)>,
}

impl Footprint {
    /// The devices of the footprint by number and role, sorted: what a second walk is compared
    /// with to see whether the stack changed in between.
    pub(crate) fn shape(&self) -> Vec<((u32, u32), String)> {
        let mut shape: Vec<_> = self
            .layers
            .iter()
            .map(|l| (l.node.number(), format!("{:?}", l.role)))
            .collect();
        shape.sort();
        shape
    }
}

/// The footprint of a write to device `major:minor` (see the module documentation), from
/// `sysfs` and what `loops` says of every bound loop device. An error when sysfs cannot be read
/// where the walk needs it, or the footprint has more than [`MAX_LAYERS`] devices.
pub(crate) fn footprint(
    sysfs: &Path,
    major: u32,
    minor: u32,
    loops: &dyn LoopReader,
) -> io::Result<Footprint> {
    let mut unknown_loops = Vec::new();
    let mut backings: Vec<(DevNode, LoopBacking)> = Vec::new();
    for (node, file) in sysfs::bound_loops(sysfs)? {
        match loops.backing(&node, &file) {
            Ok(b) => backings.push((node, b)),
            Err(why) => unknown_loops.push((node, why)),
        }
    }
    let mut walk = Walk {
        sysfs,
        backings: &backings,
        layers: Vec::new(),
        index: HashMap::new(),
        holders: Vec::new(),
        queue: VecDeque::from([((major, minor), Role::Target, String::new())]),
    };
    while let Some((number, role, via)) = walk.queue.pop_front() {
        walk.visit(number, role, via)?;
    }
    let Walk {
        layers,
        index,
        holders,
        ..
    } = walk;
    let mut foreign_holders: Vec<(usize, DevNode)> = holders
        .into_iter()
        .flat_map(|(i, hs)| hs.into_iter().map(move |h| (i, h)))
        .filter(|(_, h)| !index.contains_key(&h.number()))
        .collect();
    foreign_holders.sort();
    foreign_holders.dedup();
    Ok(Footprint {
        layers,
        foreign_holders,
        unknown_loops,
    })
}

/// The state of one [`footprint`] walk (breadth first, so that each device keeps the role of
/// the shortest way to it).
struct Walk<'a> {
    sysfs: &'a Path,
    backings: &'a [(DevNode, LoopBacking)],
    layers: Vec<Layer>,
    /// Index in `layers` of each device reached.
    index: HashMap<(u32, u32), usize>,
    /// Each layer's holders (by layer index).
    holders: Vec<(usize, Vec<DevNode>)>,
    queue: VecDeque<((u32, u32), Role, String)>,
}

impl Walk<'_> {
    fn visit(&mut self, number: (u32, u32), role: Role, via: String) -> io::Result<()> {
        let at = match self.index.get(&number) {
            // A whole disk reached again in a role whose partitions all count (a loop device
            // over it, say) is walked again, in that role.
            Some(&i) if self.layers[i].role == Role::WholeDisk && role != Role::WholeDisk => {
                self.layers[i].role = role;
                self.layers[i].via = via;
                i
            }
            Some(_) => return Ok(()),
            None => {
                if self.layers.len() >= MAX_LAYERS {
                    return Err(io::Error::other(format!(
                        "more than {MAX_LAYERS} devices over and under the target (a loop in sysfs?)"
                    )));
                }
                let links = sysfs::links(self.sysfs, number.0, number.1)?;
                self.index.insert(number, self.layers.len());
                self.holders
                    .push((self.layers.len(), links.holders.clone()));
                self.layers.push(Layer {
                    node: links.node.clone(),
                    role,
                    via,
                });
                self.follow(&links, role);
                return Ok(());
            }
        };
        let links = sysfs::links(self.sysfs, number.0, number.1)?;
        let role = self.layers[at].role;
        self.follow(&links, role);
        Ok(())
    }

    /// Queues what lies under the device of `links` and what else shows its bytes.
    fn follow(&mut self, links: &sysfs::Stacking, role: Role) {
        let me = links.node.kname.clone();
        let mut next = Vec::new();
        if let Some(whole) = &links.whole {
            next.push((whole.number(), Role::WholeDisk));
        }
        next.extend(links.slaves.iter().map(|s| (s.number(), Role::Member)));
        let own = self
            .backings
            .iter()
            .find(|(n, _)| n.number() == links.node.number())
            .map(|(_, b)| b.backing);
        match own {
            Some(Backing::Device { major, minor }) => next.push(((major, minor), Role::Backing)),
            Some(file @ Backing::File { .. }) => next.extend(
                self.backings
                    .iter()
                    .filter(|(n, b)| b.backing == file && n.number() != links.node.number())
                    .map(|(n, _)| (n.number(), Role::SameFile)),
            ),
            None => {}
        }
        if role != Role::WholeDisk {
            next.extend(
                links
                    .partitions
                    .iter()
                    .map(|p| (p.number(), Role::Partition)),
            );
        }
        let (major, minor) = links.node.number();
        next.extend(
            self.backings
                .iter()
                .filter(|(_, b)| b.backing == Backing::Device { major, minor })
                .map(|(n, _)| (n.number(), Role::LoopOver)),
        );
        for (number, role) in next {
            self.queue.push_back((number, role, me.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    /// Loop backings from a table, by kernel name; a name missing from it cannot be told.
    struct LoopTable(BTreeMap<&'static str, LoopBacking>);

    impl LoopReader for LoopTable {
        fn backing(&self, node: &DevNode, _file: &str) -> Result<LoopBacking, String> {
            self.0
                .get(node.kname.as_str())
                .copied()
                .ok_or_else(|| "not in the table".to_owned())
        }
    }

    fn none() -> LoopTable {
        LoopTable(BTreeMap::new())
    }

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/blockdev")
            .join(name)
            .join("sys")
    }

    fn roles(fp: &Footprint) -> Vec<(String, Role)> {
        fp.layers
            .iter()
            .map(|l| (l.node.kname.clone(), l.role))
            .collect()
    }

    #[test]
    fn kernel_device_numbers_decode() {
        assert_eq!(kernel_dev(0x0801), (8, 1));
        assert_eq!(kernel_dev(0xfe01), (254, 1));
        // Minors above 255 keep their high bits 12 places up.
        assert_eq!(kernel_dev(0x10_0307), (3, 0x107));
        assert_eq!(kernel_dev(0x11_0312), (259, 0x112));
    }

    #[test]
    fn a_device_mapper_volume_reaches_its_members() {
        let sys = fixture("dm-two-disks");
        let fp = footprint(&sys, 253, 0, &none()).unwrap();
        assert_eq!(
            roles(&fp),
            [
                ("dm-0".to_owned(), Role::Target),
                ("vdb".to_owned(), Role::Member),
                ("vdc".to_owned(), Role::Member),
            ]
        );
        // Each member's holder is the volume written: none foreign.
        assert!(fp.foreign_holders.is_empty(), "{:?}", fp.foreign_holders);
        assert_eq!(fp.layers[1].to_string(), "vdb (254:16), a member of dm-0,");
        // A member written directly is held by the volume.
        let member = footprint(&sys, 254, 16, &none()).unwrap();
        assert_eq!(
            member.foreign_holders,
            [(
                0,
                DevNode {
                    major: 253,
                    minor: 0,
                    kname: "dm-0".into()
                }
            )]
        );
    }

    #[test]
    fn an_md_array_reaches_its_member_partitions_and_their_disks_only() {
        let sys = fixture("md-raid");
        let fp = footprint(&sys, 9, 127, &none()).unwrap();
        assert_eq!(
            roles(&fp),
            [
                ("md127".to_owned(), Role::Target),
                ("sdb1".to_owned(), Role::Member),
                ("sdc1".to_owned(), Role::Member),
                ("sdb".to_owned(), Role::WholeDisk),
                ("sdc".to_owned(), Role::WholeDisk),
            ]
        );
        assert!(fp.foreign_holders.is_empty());
        assert_eq!(
            fp.layers[3].to_string(),
            "sdb (8:16), the whole disk of partition sdb1,"
        );
        // A member partition written directly: held by the array; its disk is part of it.
        let part = footprint(&sys, 8, 17, &none()).unwrap();
        assert_eq!(
            roles(&part),
            [
                ("sdb1".to_owned(), Role::Target),
                ("sdb".to_owned(), Role::WholeDisk)
            ]
        );
        assert_eq!(part.foreign_holders.len(), 1);
        assert_eq!(part.foreign_holders[0].1.kname, "md127");
        // The whole disk written: its partition is part of it, and held.
        let disk = footprint(&sys, 8, 16, &none()).unwrap();
        assert_eq!(
            roles(&disk),
            [
                ("sdb".to_owned(), Role::Target),
                ("sdb1".to_owned(), Role::Partition)
            ]
        );
        assert_eq!(disk.foreign_holders[0].0, 1);
    }

    /// A sysfs tree of loop devices `loopN` (`7:N`), each bound to the file or device given.
    fn loops(bound: &[(u32, &str)]) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let sys = tmp.path();
        for (n, file) in bound {
            let d = sys.join(format!("devices/virtual/block/loop{n}"));
            fs::create_dir_all(d.join("loop")).unwrap();
            fs::create_dir_all(d.join("holders")).unwrap();
            fs::write(d.join("dev"), format!("7:{n}\n")).unwrap();
            fs::write(d.join("loop/backing_file"), format!("{file}\n")).unwrap();
            for link in ["block", "class/block", "dev/block"] {
                fs::create_dir_all(sys.join(link)).unwrap();
                let name = if link == "dev/block" {
                    format!("7:{n}")
                } else {
                    format!("loop{n}")
                };
                std::os::unix::fs::symlink(&d, sys.join(link).join(name)).unwrap();
            }
        }
        tmp
    }

    #[test]
    fn loop_devices_reach_their_backing_and_every_other_view_of_it() {
        // loop0 over a file; loop1 over the same file; loop2 over /dev/loop0; loop3 over its
        // own file; loop4 over /dev/loop3.
        let tmp = loops(&[
            (0, "/img/a"),
            (1, "/img/a"),
            (2, "/dev/loop0"),
            (3, "/img/b"),
            (4, "/dev/loop3"),
        ]);
        let sys = tmp.path();
        let file = |inode| LoopBacking {
            backing: Backing::File {
                dev_major: 8,
                dev_minor: 1,
                inode,
            },
            offset: 0,
            sizelimit: 0,
        };
        let device = |minor| LoopBacking {
            backing: Backing::Device { major: 7, minor },
            offset: 0,
            sizelimit: 0,
        };
        let table = LoopTable(BTreeMap::from([
            ("loop0", file(11)),
            ("loop1", file(11)),
            ("loop2", device(0)),
            ("loop3", file(12)),
            ("loop4", device(3)),
        ]));
        // Written: loop4, over loop3. Its backing, nothing else.
        let fp = footprint(sys, 7, 4, &table).unwrap();
        assert_eq!(
            roles(&fp),
            [
                ("loop4".to_owned(), Role::Target),
                ("loop3".to_owned(), Role::Backing)
            ]
        );
        assert_eq!(
            fp.layers[1].to_string(),
            "loop3 (7:3), which loop4 is backed by,"
        );
        // Written: loop1. loop0 shows the same file, and loop2 shows loop0.
        let fp = footprint(sys, 7, 1, &table).unwrap();
        assert_eq!(
            roles(&fp),
            [
                ("loop1".to_owned(), Role::Target),
                ("loop0".to_owned(), Role::SameFile),
                ("loop2".to_owned(), Role::LoopOver),
            ]
        );
        // Written: loop3, under loop4.
        let fp = footprint(sys, 7, 3, &table).unwrap();
        assert_eq!(
            roles(&fp),
            [
                ("loop3".to_owned(), Role::Target),
                ("loop4".to_owned(), Role::LoopOver)
            ]
        );
        assert_eq!(
            fp.layers[1].to_string(),
            "loop4 (7:4), a loop device over loop3,"
        );
        // A loop device whose backing cannot be told is listed: it could be over the target.
        let partial = LoopTable(BTreeMap::from([("loop3", file(12))]));
        let fp = footprint(sys, 7, 3, &partial).unwrap();
        assert_eq!(fp.unknown_loops.len(), 4);
        assert!(
            fp.layers.len() == 1,
            "nothing known over loop3: {:?}",
            roles(&fp)
        );
        // A shape compares walks.
        assert_ne!(
            footprint(sys, 7, 3, &table).unwrap().shape(),
            footprint(sys, 7, 3, &partial).unwrap().shape()
        );
    }

    #[test]
    fn unreadable_sysfs_is_an_error_not_an_empty_footprint() {
        let empty = tempfile::tempdir().unwrap();
        assert!(footprint(empty.path(), 7, 0, &none()).is_err());
        let sys = fixture("dm-two-disks");
        // A device sysfs does not know.
        assert!(footprint(&sys, 8, 99, &none()).is_err());
    }
}
