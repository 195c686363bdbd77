//! The filesystem a probe file lives on ([`Filesystem`]), and the check that it is the one the
//! target is meant for ([`Expected`]), made before a probe file is created or opened: so that a
//! probe file is never made on another filesystem than its volume's (the bare mountpoint of an
//! unmounted volume lies on the root filesystem).
//!
//! A file's filesystem is the mount its path (or, for a file still to be made, its directory) is
//! on: found by its mount ID (`statx(STATX_MNT_ID)`) in `<procfs>/self/mountinfo`, else as the
//! mount with the longest mountpoint that holds the path. It is told apart from others by its
//! mountpoint, type, device number (within a boot) and id (`statfs` `f_fsid`, which ext4 and
//! btrfs derive from the filesystem's UUID, so that it also holds across boots).
//!
//! What a target expects: a mount rule's target, the mount the rule found it on (mountpoint and
//! device number); a configured target, the mountpoint its `mountpoint` key declares and the
//! filesystem it was first probed on (recorded by the scheduler).

use super::target_error::TargetError;
use crate::blockdev::identity::boot_id;
use crate::mountinfo;
use crate::probe::sys;
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The filesystem a file lives on.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Filesystem {
    /// Where it is mounted.
    pub mountpoint: String,
    /// Its type (`ext4`, `xfs`, ...), as the mount table names it.
    pub fstype: String,
    /// Major number of its device, as the mount table gives it.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// `statfs` `f_fsid` (0: none).
    pub fsid: u64,
    /// The boot it was seen in.
    pub boot_id: String,
}

/// Filesystem types whose `f_fsid` comes from their UUID, so that it names the filesystem
/// across boots.
const FSID_FROM_UUID: &[&str] = &["ext2", "ext3", "ext4", "btrfs"];

impl Filesystem {
    /// What `[retired] disks` names it by to let a target go to another filesystem at its
    /// mountpoint: `fsid-HEX` where it has an id, else `mountpoint:PATH`.
    pub(crate) fn id(&self) -> String {
        if self.fsid != 0 {
            format!("fsid-{:016x}", self.fsid)
        } else {
            format!("mountpoint:{}", self.mountpoint)
        }
    }
}

impl fmt::Display for Filesystem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on {} ({}:{}, {})",
            self.fstype,
            self.mountpoint,
            self.major,
            self.minor,
            self.id()
        )
    }
}

/// What filesystem a target's probe file must be on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expected {
    /// The mountpoint of its filesystem (declared, or the mount a rule found).
    pub mountpoint: Option<PathBuf>,
    /// The device number of the mount a rule found.
    pub device: Option<(u32, u32)>,
    /// The filesystem it was first probed on.
    pub recorded: Option<Filesystem>,
}

impl Expected {
    /// Whether anything is expected.
    pub(crate) fn is_empty(&self) -> bool {
        self.mountpoint.is_none() && self.device.is_none() && self.recorded.is_none()
    }

    /// Why `found` is not the filesystem expected, if it is not.
    pub(crate) fn mismatch(&self, found: &Filesystem) -> Option<String> {
        if let Some(mp) = &self.mountpoint
            && Path::new(&found.mountpoint) != mp
        {
            return Some(format!(
                "it is on {found}, not on the filesystem mounted at {} (unmounted?)",
                mp.display()
            ));
        }
        if let Some((major, minor)) = self.device
            && (found.major, found.minor) != (major, minor)
        {
            return Some(format!(
                "it is on {found}, not on the filesystem {major}:{minor} that was mounted there"
            ));
        }
        let was = self.recorded.as_ref()?;
        let same_boot = !was.boot_id.is_empty() && was.boot_id == found.boot_id;
        let differs = if was.mountpoint != found.mountpoint {
            Some("its mountpoint")
        } else if was.fstype != found.fstype {
            Some("its type")
        } else if same_boot && (was.major, was.minor) != (found.major, found.minor) {
            Some("its device")
        } else if (same_boot || FSID_FROM_UUID.contains(&was.fstype.as_str()))
            && was.fsid != found.fsid
        {
            Some("its id")
        } else {
            None
        };
        differs.map(|what| {
            format!(
                "it is on {found}, not on the filesystem it was first probed on, {was} ({what} differs); if that filesystem was replaced on purpose, add {:?} to [retired] disks and reload",
                was.id()
            )
        })
    }
}

/// The filesystem `path` is on ([`of`]), checked to be the one `expected`; `None` when it
/// cannot be told and nothing is expected.
pub(crate) fn checked(
    path: &Path,
    procfs: &Path,
    expected: &Expected,
) -> Result<Option<Filesystem>, TargetError> {
    let found = match of(path, procfs) {
        Ok(found) => found,
        Err(_) if expected.is_empty() => return Ok(None),
        Err(source) => {
            return Err(TargetError::Io {
                path: path.to_owned(),
                what: "find the filesystem it is on",
                source,
            });
        }
    };
    match expected.mismatch(&found) {
        Some(why) => Err(TargetError::WrongFilesystem {
            path: path.to_owned(),
            why,
        }),
        None => Ok(Some(found)),
    }
}

/// The filesystem `path` is on (its directory's, when it does not exist), as `procfs`'s mount
/// table says.
pub(crate) fn of(path: &Path, procfs: &Path) -> io::Result<Filesystem> {
    let at = if fs::symlink_metadata(path).is_ok() {
        path
    } else {
        super::facts::parent_dir(path)
    };
    let mountinfo = fs::read_to_string(procfs.join("self/mountinfo"))?;
    let mounts = mountinfo::parse(&mountinfo);
    let entry = match sys::mount_id(at) {
        Some(id) => mounts.iter().find(|m| m.id == id),
        None => {
            let real = fs::canonicalize(at)?;
            mounts
                .iter()
                .filter(|m| real.starts_with(&m.mountpoint))
                .max_by_key(|m| m.mountpoint.len())
        }
    }
    .ok_or_else(|| {
        io::Error::other(format!(
            "{}: its mount is not in {}",
            at.display(),
            procfs.join("self/mountinfo").display()
        ))
    })?;
    // Without a mount ID (before Linux 5.8), the mount found by its mountpoint must be the
    // file's filesystem: the same device, or a filesystem with anonymous device numbers.
    if sys::mount_id(at).is_none() {
        let dev = fs::metadata(at)?.dev();
        if entry.major != 0 && (libc::major(dev), libc::minor(dev)) != (entry.major, entry.minor) {
            return Err(io::Error::other(format!(
                "{}: cannot tell which mount it is on",
                at.display()
            )));
        }
    }
    Ok(Filesystem {
        mountpoint: entry.mountpoint.clone(),
        fstype: entry.fstype.clone(),
        major: entry.major,
        minor: entry.minor,
        fsid: sys::statfs_fsid(at).unwrap_or(0),
        boot_id: boot_id(procfs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext4(mountpoint: &str, dev: (u32, u32), fsid: u64, boot: &str) -> Filesystem {
        Filesystem {
            mountpoint: mountpoint.into(),
            fstype: "ext4".into(),
            major: dev.0,
            minor: dev.1,
            fsid,
            boot_id: boot.into(),
        }
    }

    #[test]
    fn an_unmounted_volume_is_another_filesystem() {
        let root = ext4("/", (254, 1), 0xaa, "b1");
        let data = ext4("/data", (8, 17), 0xbb, "b1");
        let declared = Expected {
            mountpoint: Some("/data".into()),
            ..Expected::default()
        };
        assert_eq!(declared.mismatch(&data), None);
        let why = declared.mismatch(&root).unwrap();
        assert!(
            why.contains("not on the filesystem mounted at /data (unmounted?)"),
            "{why}"
        );
        // A rule's mount: its mountpoint and device.
        let found = Expected {
            mountpoint: Some("/data".into()),
            device: Some((8, 17)),
            recorded: None,
        };
        assert_eq!(found.mismatch(&data), None);
        assert!(
            found
                .mismatch(&ext4("/data", (8, 33), 0xcc, "b1"))
                .is_some()
        );
    }

    #[test]
    fn the_filesystem_first_probed_is_told_by_its_id_across_boots() {
        let was = ext4("/data", (8, 17), 0xbb, "b1");
        let recorded = Expected {
            recorded: Some(was.clone()),
            ..Expected::default()
        };
        assert_eq!(recorded.mismatch(&was), None);
        // Unmounted: the directory is on the root filesystem.
        assert!(
            recorded
                .mismatch(&ext4("/", (254, 1), 0xaa, "b1"))
                .is_some()
        );
        // Another filesystem mounted there.
        let other = recorded
            .mismatch(&ext4("/data", (8, 17), 0xcc, "b2"))
            .unwrap();
        assert!(other.contains("its id differs"), "{other}");
        assert!(
            other.contains("add \"fsid-00000000000000bb\" to [retired] disks"),
            "{other}"
        );
        // The same filesystem after a reboot, on another device number: the same.
        assert_eq!(recorded.mismatch(&ext4("/data", (8, 33), 0xbb, "b2")), None);
        // XFS's id is its device number: within a boot only.
        let xfs = |dev, fsid, boot: &str| Filesystem {
            fstype: "xfs".into(),
            ..ext4("/data", dev, fsid, boot)
        };
        let recorded = Expected {
            recorded: Some(xfs((8, 17), 0x811, "b1")),
            ..Expected::default()
        };
        assert_eq!(recorded.mismatch(&xfs((8, 33), 0x821, "b2")), None);
        assert!(recorded.mismatch(&xfs((8, 33), 0x821, "b1")).is_some());
    }

    #[test]
    fn a_paths_filesystem_is_its_mount() {
        let here = std::env::current_dir().unwrap();
        let fs = of(&here, Path::new("/proc")).unwrap();
        assert!(here.starts_with(&fs.mountpoint), "{fs:?}");
        // A file still to be made: its directory's.
        let missing = of(&here.join("no-such-file"), Path::new("/proc")).unwrap();
        assert_eq!(missing, fs);
    }
}
