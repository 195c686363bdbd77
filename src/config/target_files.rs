//! One owner per file: each `[[targets]]` entry owns the file its path names, and a second entry
//! on the same one is refused at load, whatever their sizes, naming both: two targets on one probe
//! file would each refill it to its own size in turn. "The same" is the same path, or one file
//! under two paths (a hard link, a symbolic link, a bind mount), as the filesystem says at load
//! ([`FileIdentity`]). A block device is the same device under any node; targets on one device
//! may share it only with regions (`offset`, `size`) that do not overlap.
//!
//! Where each configured target's file lies ([`TargetFile`]) also goes to discovery: a target a
//! `[[discover]]` rule finds at the same file or device is left to the configured one
//! (`crate::discovery::matching`).

use super::path_stat::with_deadline;
use std::ffi::OsString;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

/// What makes two target paths the same file, from the filesystem at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileIdentity {
    /// A block device (links followed), by its device number: the same disk under any node.
    Device {
        /// `st_rdev`.
        rdev: u64,
    },
    /// Anything else that exists (links followed), by its inode.
    Inode {
        /// `st_dev`.
        dev: u64,
        /// `st_ino`.
        ino: u64,
    },
    /// A path that does not exist yet (a probe file to be made), by its directory's inode and
    /// its name.
    Entry {
        /// The directory's `st_dev`.
        dev: u64,
        /// The directory's `st_ino`.
        ino: u64,
        /// The file's name.
        name: OsString,
    },
    /// A path whose directory does not exist either, or whose filesystem did not answer in time:
    /// the path itself, its `.` and `..` worked out.
    Path(PathBuf),
}

/// A configured target's file, as loading found it: what discovery compares its findings with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetFile {
    /// The target's name.
    pub(crate) name: String,
    /// Its path with the links of the part that exists resolved (the rest appended as written):
    /// where the mount table places it.
    pub(crate) resolved: PathBuf,
    /// The device number of a block device target.
    pub(crate) rdev: Option<u64>,
    /// What makes another path the same file.
    pub(crate) identity: FileIdentity,
}

impl TargetFile {
    /// Looks at `path` (absolute) on a thread given up after the load's stat patience
    /// ([`with_deadline`]): a hung filesystem makes it [`FileIdentity::Path`].
    pub(crate) fn look(name: &str, path: &Path) -> TargetFile {
        let owned = path.to_owned();
        let (identity, resolved) = with_deadline(move || (identity(&owned), resolved(&owned)))
            .unwrap_or_else(|| (FileIdentity::Path(lexical(path)), lexical(path)));
        let rdev = match identity {
            FileIdentity::Device { rdev } => Some(rdev),
            _ => None,
        };
        TargetFile {
            name: name.to_owned(),
            resolved,
            rdev,
            identity,
        }
    }

    /// How `path` and `other_path`, found to be one file with this identity, are so, in words.
    pub(crate) fn sameness(&self, path: &Path, other_path: &Path) -> String {
        match &self.identity {
            _ if path == other_path => "the same path".to_owned(),
            FileIdentity::Device { .. } => format!(
                "{} and {} are one block device",
                path.display(),
                other_path.display()
            ),
            _ => format!(
                "{} and {} are one file (a link, or a bind mount)",
                path.display(),
                other_path.display()
            ),
        }
    }
}

/// `path` with `.` and `..` worked out, without asking the filesystem (where the filesystem
/// cannot say).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The [`FileIdentity`] of `path` now: what the kernel resolves it to (`..` after a link included).
fn identity(path: &Path) -> FileIdentity {
    match std::fs::metadata(path) {
        Ok(meta) if meta.file_type().is_block_device() => {
            FileIdentity::Device { rdev: meta.rdev() }
        }
        Ok(meta) => FileIdentity::Inode {
            dev: meta.dev(),
            ino: meta.ino(),
        },
        Err(_) => {
            let dir = path.parent().and_then(|d| std::fs::metadata(d).ok());
            match (dir, path.file_name()) {
                (Some(dir), Some(name)) if dir.is_dir() => FileIdentity::Entry {
                    dev: dir.dev(),
                    ino: dir.ino(),
                    name: name.to_owned(),
                },
                _ => FileIdentity::Path(lexical(path)),
            }
        }
    }
}

/// `path` with its nearest existing ancestor resolved through links, the rest appended (its
/// `.` and `..` worked out where they are in that rest).
fn resolved(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return lexical(&rest.iter().rev().fold(real, |p, name| p.join(name)));
        }
        match (existing.parent(), existing.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last.as_os_str().to_owned());
                existing = parent;
            }
            _ => return lexical(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_file_under_two_paths_is_one_identity() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::write(dir.join("a.dat"), b"x").unwrap();
        std::fs::hard_link(dir.join("a.dat"), dir.join("hard.dat")).unwrap();
        std::os::unix::fs::symlink(dir.join("a.dat"), dir.join("soft.dat")).unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::os::unix::fs::symlink(dir.join("sub"), dir.join("linked")).unwrap();
        let id = |p: &str| TargetFile::look("t", &dir.join(p)).identity;
        assert_eq!(id("a.dat"), id("hard.dat"));
        assert_eq!(id("a.dat"), id("soft.dat"));
        assert_eq!(id("a.dat"), id("sub/../a.dat"));
        // `..` after a link to a directory is the link's target's parent, as the kernel has it.
        std::fs::create_dir_all(dir.join("deep/er")).unwrap();
        std::fs::write(dir.join("deep/x.dat"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.join("deep/er"), dir.join("shortcut")).unwrap();
        assert_eq!(id("shortcut/../x.dat"), id("deep/x.dat"));
        assert_ne!(id("shortcut/../x.dat"), id("x.dat"));
        assert_ne!(id("a.dat"), id("b.dat"));
        // Files yet to be made: by their directory and name.
        assert_eq!(id("sub/new.dat"), id("linked/new.dat"));
        assert_ne!(id("sub/new.dat"), id("sub/other.dat"));
        assert!(matches!(id("sub/new.dat"), FileIdentity::Entry { .. }));
        // Nothing of it exists: the path itself.
        assert_eq!(id("none/x/new.dat"), id("none/y/../x/new.dat"));
        assert!(matches!(id("none/x/new.dat"), FileIdentity::Path(_)));
        let linked = TargetFile::look("t", &dir.join("linked/new.dat"));
        assert_eq!(
            linked.resolved,
            std::fs::canonicalize(dir).unwrap().join("sub/new.dat")
        );
        assert_eq!(linked.rdev, None);
    }
}
