//! What the Landlock ruleset allows, derived from the flags and the configuration: the paths the
//! agent uses ([`Wanted`]), the rights each needs once the filesystem has said what it is
//! ([`NeededRights`]), the rules granted at start ([`GrantedRules`]), and whether a path is covered
//! by them, which is how a reload is checked against the ruleset the running process can no
//! longer widen.
//!
//! Landlock grants a right on a file when a rule with that right is attached to the file or to
//! any directory above it. A rule is attached to an inode, not to a name, so coverage compares
//! the device and inode of a path and of every directory above it with those of the rules.
//!
//! Asking the filesystem can block for ever (a hung NFS or FUSE mount), so every path is looked
//! at on a thread of its own, waited for at most [`PATIENCE`] ([`find_all`]); what [`NeededRights`]
//! carries is all that is used afterwards.

use crate::config::Config;
use crate::config::discover::RuleSource;
use landlock::{AccessFs, BitFlags, PathFd, make_bitflags};
use std::fmt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a path may take to answer (as the scheduler's stat of a target).
pub(crate) const PATIENCE: Duration = Duration::from_secs(5);

/// Reading trees of files (procfs, sysfs): open files for reading, list directories.
pub(crate) const READ_TREE: BitFlags<AccessFs> = make_bitflags!(AccessFs::{ReadFile | ReadDir});
/// The device directory: read device nodes and list them, and the block-device ioctls every
/// probe uses (`BLKGETSIZE64`, `BLKSSZGET`, ...) on the nodes it opens there for reading.
pub(crate) const DEVFS: BitFlags<AccessFs> =
    make_bitflags!(AccessFs::{ReadFile | ReadDir | IoctlDev});
/// Configuration, web configuration and TLS files: reading only.
pub(crate) const READ_FILES: BitFlags<AccessFs> = make_bitflags!(AccessFs::{ReadFile});
/// A probe file's directory: create the file, write and truncate it, and remove it again (a
/// probe file created for a size its direct I/O cannot write is removed at once).
pub(crate) const PROBE_DIR: BitFlags<AccessFs> =
    make_bitflags!(AccessFs::{ReadFile | WriteFile | MakeReg | RemoveFile | Truncate});
/// The state directory: files created, replaced by a rename, removed; the directory opened to
/// sync it after a rename.
pub(crate) const STATE_DIR: BitFlags<AccessFs> =
    make_bitflags!(AccessFs::{ReadFile | ReadDir | WriteFile | MakeReg | RemoveFile | Truncate});
/// A block device probed read-only: read it, and the block-device ioctls.
pub(crate) const DEVICE_READ: BitFlags<AccessFs> = make_bitflags!(AccessFs::{ReadFile | IoctlDev});
/// A block device opted in for writes: read and write it, and the block-device ioctls.
pub(crate) const DEVICE_WRITE: BitFlags<AccessFs> =
    make_bitflags!(AccessFs::{ReadFile | WriteFile | IoctlDev});

/// A path the agent uses, before the filesystem has said what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wanted {
    /// The path, absolute.
    pub path: PathBuf,
    /// What it is used for.
    pub usage: Usage,
    /// What uses it, for logs and errors (`target "data"`).
    pub what: String,
}

/// What a [`Wanted`] path is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Usage {
    /// These rights on the path itself.
    Rights(BitFlags<AccessFs>),
    /// A target: a block device (written when `device_writes`), or else a probe file, which
    /// needs [`PROBE_DIR`] on its directory.
    Target {
        /// Opted in for device writes, with a write profile.
        device_writes: bool,
    },
}

/// What the filesystem said of a [`Wanted`] path: the rights needed where.
#[derive(Debug)]
pub(crate) struct NeededRights {
    /// The directory (or device node) the rights are needed on.
    pub path: PathBuf,
    /// The rights.
    pub access: BitFlags<AccessFs>,
    /// Why, for logs and errors (`target "data": probe file directory`).
    pub what: String,
    /// Device and inode of `path` (or of the directory it would be created in) and of every
    /// directory above it, nearest first.
    pub ids: Vec<(u64, u64)>,
    /// Whether `path` is a directory.
    pub is_dir: bool,
    /// `path` opened with `O_PATH` (only when asked for).
    pub fd: Option<PathFd>,
}

impl Wanted {
    /// Asks the filesystem (this may block: see [`find_all`]); opens the path with `O_PATH`
    /// when `open`.
    pub(crate) fn find(&self, open: bool) -> Result<NeededRights, String> {
        let (path, access, what) = match self.usage {
            Usage::Rights(access) => (self.path.clone(), access, self.what.clone()),
            Usage::Target { device_writes } => {
                let block =
                    std::fs::metadata(&self.path).is_ok_and(|m| m.file_type().is_block_device());
                match (block, device_writes) {
                    (true, true) => (
                        self.path.clone(),
                        DEVICE_WRITE,
                        format!("{}: block device opted in for writes", self.what),
                    ),
                    (true, false) => (
                        self.path.clone(),
                        DEVICE_READ,
                        format!("{}: block device", self.what),
                    ),
                    // A device node that is gone (its disk left the kernel) is not a probe file
                    // to create: only what reads it when it returns.
                    (false, _)
                        if std::fs::symlink_metadata(&self.path).is_err()
                            && crate::state_dir::on_devtmpfs(
                                Path::new("/proc"),
                                &parent_dir(&self.path),
                            ) =>
                    {
                        (
                            parent_dir(&self.path),
                            DEVICE_READ,
                            format!("{}: directory of a block device that is gone", self.what),
                        )
                    }
                    (false, _) => (
                        parent_dir(&self.path),
                        PROBE_DIR,
                        format!("{}: probe file directory", self.what),
                    ),
                }
            }
        };
        let cannot = |e: std::io::Error| format!("{what}: {}: {e}", path.display());
        let ids = identities(&path).map_err(cannot)?;
        let is_dir = std::fs::metadata(&path).is_ok_and(|m| m.is_dir());
        let fd = match open {
            true => Some(PathFd::new(&path).map_err(|e| format!("{what}: {e}"))?),
            false => None,
        };
        Ok(NeededRights {
            path,
            access,
            what,
            ids,
            is_dir,
            fd,
        })
    }
}

/// Device and inode of `path` (or, when it does not exist, of the nearest directory above it
/// that does), through symbolic links, and of every directory above that.
fn identities(path: &Path) -> std::io::Result<Vec<(u64, u64)>> {
    let absolute = std::path::absolute(path)?;
    let real = absolute
        .ancestors()
        .find_map(|p| std::fs::canonicalize(p).ok())
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
    real.ancestors()
        .map(|p| std::fs::metadata(p).map(|m| (m.dev(), m.ino())))
        .collect()
}

/// [`Wanted::find`] for each of `wanted`, each on a thread of its own, in at most [`PATIENCE`]
/// altogether. A path that has not answered by then gets an error; its thread is left to
/// finish on its own, and the second value says how many were.
pub(crate) fn find_all(
    wanted: &[Wanted],
    open: bool,
) -> (Vec<Result<NeededRights, String>>, usize) {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut handles: Vec<Option<std::thread::JoinHandle<()>>> = Vec::new();
    let mut results: Vec<Option<Result<NeededRights, String>>> = Vec::new();
    for (i, w) in wanted.iter().enumerate() {
        let (tx, w) = (tx.clone(), w.clone());
        let spawned = std::thread::Builder::new()
            .name("sandbox-stat".to_owned())
            .spawn(move || {
                let _ = tx.send((i, w.find(open)));
            });
        match spawned {
            Ok(handle) => {
                handles.push(Some(handle));
                results.push(None);
            }
            Err(e) => {
                handles.push(None);
                results.push(Some(Err(format!("cannot start a thread: {e}"))));
            }
        }
    }
    drop(tx);
    let deadline = Instant::now() + PATIENCE;
    while results.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok((i, found)) = rx.recv_timeout(left) else {
            break;
        };
        results[i] = Some(found);
        // Joined, so that no thread that answered is still there when the ruleset is applied.
        if let Some(handle) = handles[i].take() {
            let _ = handle.join();
        }
    }
    let stuck = results.iter().filter(|r| r.is_none()).count();
    let results = results
        .into_iter()
        .zip(wanted)
        .map(|(r, w)| {
            r.unwrap_or_else(|| {
                Err(format!(
                    "{}: {} did not answer within {PATIENCE:?} (hung filesystem?)",
                    w.what,
                    w.path.display()
                ))
            })
        })
        .collect();
    (results, stuck)
}

/// A rule of the ruleset: a path and the rights granted on it and beneath it.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    /// The path as given (absolute).
    pub path: PathBuf,
    /// The rights.
    pub access: BitFlags<AccessFs>,
    /// Why it is there.
    pub what: String,
    /// Device and inode of what `path` named when the rule was made.
    id: (u64, u64),
}

/// The rules granted at start.
#[derive(Debug, Default)]
pub(crate) struct GrantedRules {
    rules: Vec<Rule>,
}

impl GrantedRules {
    /// The rules, in the order they were added.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter()
    }

    /// Adds a rule for `found` unless the rules already cover it; returns whether it did.
    pub(crate) fn add(&mut self, found: &NeededRights) -> bool {
        if self.covers(found) {
            return false;
        }
        // Rules on files may only carry the rights of files; a directory keeps them all.
        let access = if found.is_dir {
            found.access
        } else {
            found.access & AccessFs::from_file(landlock::ABI::V7)
        };
        self.rules.push(Rule {
            path: found.path.clone(),
            access,
            what: found.what.clone(),
            id: found.ids.first().copied().unwrap_or_default(),
        });
        true
    }

    /// Whether the rules grant what `found` needs. Rights accumulate down the tree, as in
    /// Landlock: the union of the rules on the path and on every directory above it.
    pub(crate) fn covers(&self, found: &NeededRights) -> bool {
        let granted = found
            .ids
            .iter()
            .flat_map(|id| self.rules.iter().filter(move |r| r.id == *id))
            .fold(BitFlags::<AccessFs>::EMPTY, |all, r| all | r.access);
        granted.contains(found.access)
    }
}

/// The parent directory of `path`, absolute (`path` itself when it has none).
pub(crate) fn parent_dir(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    match absolute.parent() {
        Some(parent) => parent.to_owned(),
        None => absolute,
    }
}

/// `access` as the kernel's names of the rights (`read_file,ioctl_dev`).
pub(crate) struct AccessNames(pub BitFlags<AccessFs>);

impl fmt::Display for AccessNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self
            .0
            .iter()
            .map(|right| match right {
                AccessFs::Execute => "execute",
                AccessFs::WriteFile => "write_file",
                AccessFs::ReadFile => "read_file",
                AccessFs::ReadDir => "read_dir",
                AccessFs::RemoveDir => "remove_dir",
                AccessFs::RemoveFile => "remove_file",
                AccessFs::MakeChar => "make_char",
                AccessFs::MakeDir => "make_dir",
                AccessFs::MakeReg => "make_reg",
                AccessFs::MakeSock => "make_sock",
                AccessFs::MakeFifo => "make_fifo",
                AccessFs::MakeBlock => "make_block",
                AccessFs::MakeSym => "make_sym",
                AccessFs::Refer => "refer",
                AccessFs::Truncate => "truncate",
                AccessFs::IoctlDev => "ioctl_dev",
                _ => "other",
            })
            .collect();
        f.write_str(&names.join(","))
    }
}

/// The paths the configuration's targets and `[[discover]]` rules use: each target (a block
/// device, or a probe file that is created, filled and written in its directory, whatever its
/// profiles), and the directory every mountpoint of a mount rule with `file` lies in. Also
/// returns notes on what cannot be allowed (a mount rule whose mountpoints have no literal
/// directory prefix). Asks nothing of the filesystem.
pub(crate) fn wanted(config: &Config) -> (Vec<Wanted>, Vec<String>) {
    let mut wanted = Vec::new();
    let mut notes = Vec::new();
    for target in &config.targets {
        let writes = target.settings.profiles.iter().any(|p| p.rw.is_write());
        wanted.push(Wanted {
            path: std::path::absolute(&target.path).unwrap_or_else(|_| target.path.clone()),
            usage: Usage::Target {
                device_writes: writes && target.settings.writes.to_device(),
            },
            what: format!("target {:?}", target.name),
        });
    }
    for rule in &config.discover {
        let RuleSource::Mount(mount) = &rule.source else {
            continue;
        };
        if mount.file.is_none() {
            continue;
        }
        match mountpoint_dir(mount.mountpoint.as_str()) {
            Some(dir) => wanted.push(Wanted {
                path: dir,
                usage: Usage::Rights(PROBE_DIR),
                what: format!("[[discover]] rule {:?}: directory of its mountpoints", rule.id),
            }),
            None => notes.push(format!(
                "[[discover]] rule {:?}: mountpoint_include {:?} names no directory its mountpoints lie in (anchor it with ^ and start it with one, e.g. ^/mnt/disks/); the sandbox allows it no probe files, which fail with EACCES",
                rule.id,
                mount.mountpoint.as_str()
            )),
        }
    }
    (wanted, notes)
}

/// The deepest directory, other than `/`, that every mountpoint `pattern` matches lies in: the
/// part of its literal prefixes up to their last `/`. `None` when the pattern is not anchored at
/// the start or has no such prefix.
pub(crate) fn mountpoint_dir(pattern: &str) -> Option<PathBuf> {
    use regex_syntax::hir::Look;
    use regex_syntax::hir::literal::{ExtractKind, Extractor};
    let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
    if !hir.properties().look_set_prefix().contains(Look::Start) {
        return None;
    }
    let seq = Extractor::new().kind(ExtractKind::Prefix).extract(&hir);
    let mut common: Option<PathBuf> = None;
    for literal in seq.literals()? {
        let text = std::str::from_utf8(literal.as_bytes()).ok()?;
        let dir = PathBuf::from(&text[..=text.rfind('/')?]);
        if !dir.is_absolute() {
            return None;
        }
        common = Some(match common {
            None => dir,
            Some(c) => c
                .components()
                .zip(dir.components())
                .take_while(|(a, b)| a == b)
                .map(|(a, _)| a)
                .collect(),
        });
    }
    common.filter(|d| d.parent().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountpoint_dirs_come_from_anchored_literal_prefixes() {
        let kubelet = r"^/var/lib/kubelet/pods/[^/]+/volumes/kubernetes\.io~csi/([^/]+)/mount$";
        assert_eq!(
            mountpoint_dir(kubelet),
            Some(PathBuf::from("/var/lib/kubelet/pods"))
        );
        assert_eq!(mountpoint_dir("^/mnt/data$"), Some(PathBuf::from("/mnt")));
        assert_eq!(
            mountpoint_dir("^/srv/disks/(a|b)"),
            Some(PathBuf::from("/srv/disks"))
        );
        assert_eq!(mountpoint_dir("^(/data|/srv)/x"), None, "only / is common");
        assert_eq!(mountpoint_dir("/mnt/(.*)"), None, "not anchored");
        assert_eq!(mountpoint_dir("^/(.*)$"), None);
        assert_eq!(mountpoint_dir("^.*"), None);
    }

    fn find(path: &Path, usage: Usage) -> NeededRights {
        let wanted = Wanted {
            path: path.to_owned(),
            usage,
            what: "test".into(),
        };
        let (mut found, stuck) = find_all(&[wanted], false);
        assert_eq!(stuck, 0);
        found.remove(0).unwrap()
    }

    #[test]
    fn rules_cover_by_inode_down_the_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let allowed = tmp.path().join("allowed");
        let other = tmp.path().join("other");
        std::fs::create_dir_all(allowed.join("sub")).unwrap();
        std::fs::create_dir(&other).unwrap();
        let target = Usage::Target {
            device_writes: false,
        };
        let mut rules = GrantedRules::default();
        let first = find(&allowed.join("probe.dat"), target);
        assert_eq!((first.path.as_path(), first.access), (&*allowed, PROBE_DIR));
        assert!(rules.add(&first));
        assert!(!rules.add(&first), "covered: no second rule");
        assert!(rules.covers(&find(&allowed.join("sub/probe.dat"), target)));
        assert!(rules.covers(&find(&allowed.join("missing/dir/probe.dat"), target)));
        assert!(!rules.covers(&find(&other.join("probe.dat"), target)));
        assert!(!rules.covers(&find(tmp.path(), Usage::Rights(READ_FILES))));
        assert!(
            !rules.covers(&find(&allowed, Usage::Rights(DEVFS))),
            "ioctl_dev is not granted"
        );
        // Through a symbolic link, what counts is where it leads.
        std::os::unix::fs::symlink(&allowed, other.join("link")).unwrap();
        assert!(rules.covers(&find(&other.join("link/probe.dat"), target)));
        // A rule is attached to the directory, not to its name: one made anew at the same path
        // (while the old one still exists, so it cannot reuse its inode) is not covered, as
        // Landlock would refuse it.
        std::fs::rename(&allowed, tmp.path().join("moved")).unwrap();
        std::fs::create_dir(&allowed).unwrap();
        assert!(!rules.covers(&find(&allowed.join("probe.dat"), target)));
    }

    #[test]
    fn block_devices_need_their_node_and_missing_paths_say_so() {
        let dev = Path::new("/dev/null");
        // Not a block device: a target there would be a probe file in /dev.
        let found = find(
            dev,
            Usage::Target {
                device_writes: true,
            },
        );
        assert_eq!(
            (found.path.as_path(), found.access),
            (Path::new("/dev"), PROBE_DIR)
        );
        // Nothing there, in /dev (devtmpfs): the node of a disk that is gone, never a probe
        // file to create; what reads it when it returns.
        let gone = Path::new("/dev/diskprobe-test-no-such-node");
        assert!(!gone.exists());
        let found = find(
            gone,
            Usage::Target {
                device_writes: true,
            },
        );
        if crate::state_dir::on_devtmpfs(Path::new("/proc"), Path::new("/dev")) {
            assert_eq!(
                (found.path.as_path(), found.access),
                (Path::new("/dev"), DEVICE_READ)
            );
        }
        let wanted = Wanted {
            path: PathBuf::from("/nonexistent-diskprobe/dir"),
            usage: Usage::Rights(READ_FILES),
            what: "test".into(),
        };
        // The nearest directory that exists answers for a path that does not.
        assert!(wanted.find(false).is_ok());
        let err = wanted.find(true).unwrap_err();
        assert!(err.contains("nonexistent-diskprobe"), "{err}");
    }

    #[test]
    fn access_names_are_the_kernels() {
        assert_eq!(
            AccessNames(DEVICE_WRITE).to_string(),
            "write_file,read_file,ioctl_dev"
        );
    }
}
