//! The state directory: where the embedded default configuration keeps its scratch probe file,
//! block `[[discover]]` rules the targets they lost (`crate::discovery::lost_file`), and
//! configured targets their last devices (`crate::scheduler::target_devices`). Also which
//! filesystem a directory is on, from a mount table ([`fstype_of`], [`on_devtmpfs`]).
//!
//! Chosen in this order: `--state.dir`; `$STATE_DIRECTORY` (set by systemd's `StateDirectory=`);
//! `/var/lib/diskprobe_exporter` when running as root; otherwise `$XDG_STATE_HOME/diskprobe_exporter`
//! or `~/.local/state/diskprobe_exporter`, so that no root is needed. The directory must be on a
//! real filesystem: tmpfs and ramfs are refused, because a direct-I/O probe there would measure
//! memory, not a disk.
//!
//! One agent uses a state directory at a time: it holds the directory's [`StateLock`] (an
//! exclusive `flock` on [`LOCK_FILE`], which names its process id) for as long as it runs, and a
//! second agent on the same directory finds it held and refuses to start, writing nothing.
//!
//! Files the agent keeps there go through a [`StateDir`]: the directory opened once, its files
//! opened relative to it, never through a symbolic link, new files created only where no file
//! of that name is (so that a link or file planted in the directory is neither followed nor
//! reused), and read without blocking and within a limit ([`crate::bounded_read`]).

use crate::bounded_read::{self, BoundedReadError};
use rustix::fs::{AtFlags, Mode, OFlags};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Filesystems whose "disk" is memory.
pub(crate) const MEMORY_FILESYSTEMS: &[&str] = &["tmpfs", "ramfs"];

/// Why the state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    /// It could not be created.
    #[error("cannot create state directory {path}: {source}")]
    Create {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is in memory.
    #[error(
        "state directory {path} is on {fstype}, which is memory: probes there would not measure a disk; choose a directory on a disk-backed filesystem with --state.dir"
    )]
    MemoryFilesystem {
        /// The directory.
        path: PathBuf,
        /// The filesystem type.
        fstype: String,
    },
    /// No default could be derived.
    #[error("no state directory: pass --state.dir (HOME is not set)")]
    NoDefault,
    /// Another agent holds its lock.
    #[error(
        "state directory {path} is in use by another agent ({holder}, holding {LOCK_FILE} there); one agent per state directory: give each its own --state.dir"
    )]
    InUse {
        /// The directory.
        path: PathBuf,
        /// Who holds it: `pid N` where the lock file says, or what is known.
        holder: String,
    },
    /// Its lock file could not be made or locked.
    #[error("cannot lock state directory {path} ({LOCK_FILE}): {source}")]
    Lock {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The lock file in the state directory: locked (`flock`, exclusive) by the agent that uses the
/// directory for as long as it runs, with its process id written in it.
pub(crate) const LOCK_FILE: &str = "agent.lock";

/// The most of the lock file read to name the agent that holds it.
const LOCK_FILE_BYTES: u64 = 64;

/// The state directory's lock, held until dropped (the kernel releases it when the process ends,
/// however it ends).
#[derive(Debug)]
pub(crate) struct StateLock {
    _file: std::fs::File,
}

impl StateLock {
    /// Locks the state directory `dir` (made already) for this process: its [`LOCK_FILE`] is
    /// opened (created where missing; never through a symbolic link, refused unless a regular
    /// file), locked without waiting and, once locked, made to hold this process's id. Where
    /// another process holds the lock, nothing is written: the error names it by the pid the
    /// file holds.
    pub(crate) fn take(dir: &Path) -> Result<StateLock, StateDirError> {
        let failed = |source: std::io::Error| StateDirError::Lock {
            path: dir.to_owned(),
            source,
        };
        let state = StateDir::open(dir).map_err(failed)?;
        let open = |access: OFlags| {
            rustix::fs::openat(
                &state.dir,
                LOCK_FILE,
                access | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
        };
        // A lock file another user made, which this one may only read, still tells who holds it.
        let (fd, writable) = match open(OFlags::RDWR) {
            Err(rustix::io::Errno::ACCESS) => (open(OFlags::RDONLY), false),
            other => (other, true),
        };
        let mut file = std::fs::File::from(fd.map_err(|e| failed(e.into()))?);
        let meta = file.metadata().map_err(failed)?;
        if !meta.is_file() {
            return Err(failed(std::io::Error::other(format!(
                "{} is a {}, not a regular file",
                LOCK_FILE,
                bounded_read::kind_name(&meta.file_type())
            ))));
        }
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StateDirError::InUse {
                    path: dir.to_owned(),
                    holder: holder(&mut file),
                });
            }
            Err(std::fs::TryLockError::Error(err)) => return Err(failed(err)),
        }
        if !writable {
            return Err(failed(std::io::Error::from(
                std::io::ErrorKind::PermissionDenied,
            )));
        }
        file.set_len(0)
            .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
            .map_err(failed)?;
        Ok(StateLock { _file: file })
    }
}

/// Who holds a lock file, by the process id written in it.
fn holder(file: &mut std::fs::File) -> String {
    use std::io::Read;
    let mut text = String::new();
    let read = Read::by_ref(file)
        .take(LOCK_FILE_BYTES)
        .read_to_string(&mut text);
    match read.ok().and_then(|_| text.trim().parse::<u32>().ok()) {
        Some(pid) => format!("pid {pid}"),
        None => "its pid not written yet".to_owned(),
    }
}

/// The state directory, opened once: the files the agent keeps there are opened relative to it.
#[derive(Debug)]
pub(crate) struct StateDir {
    dir: OwnedFd,
    path: PathBuf,
}

impl StateDir {
    /// Opens the directory at `path` (which may itself be reached through links an operator
    /// made).
    pub(crate) fn open(path: &Path) -> std::io::Result<StateDir> {
        let dir = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(StateDir {
            dir,
            path: path.to_owned(),
        })
    }

    /// The directory's path, for messages.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The contents of the file `name`, at most `limit` bytes: refused when it is a symbolic
    /// link or not a regular file (a FIFO opens without waiting, and is refused).
    pub(crate) fn read(&self, name: &str, limit: u64) -> Result<Vec<u8>, BoundedReadError> {
        let path = self.path.join(name);
        let file = rustix::fs::openat(
            &self.dir,
            name,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| BoundedReadError::Open {
            path: path.clone(),
            source: e.into(),
        })?;
        bounded_read::read_open(std::fs::File::from(file), &path, limit)
    }

    /// Replaces the file `name` with `bytes`, atomically: written to a new file `.NAME.tmp`
    /// (created with `O_EXCL | O_NOFOLLOW`, mode 0600; whatever had that name, a link included,
    /// is removed first, never followed), synced, renamed over `name` and the directory synced,
    /// so that a crash leaves the old file or the new one, never half of one.
    pub(crate) fn replace(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let temporary = format!(".{name}.tmp");
        let create = || {
            rustix::fs::openat(
                &self.dir,
                temporary.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::RUSR | Mode::WUSR,
            )
        };
        let fd = match create() {
            Err(rustix::io::Errno::EXIST) => {
                // Left by a crash, or planted: removed (a link itself, not what it points at).
                rustix::fs::unlinkat(&self.dir, temporary.as_str(), AtFlags::empty())?;
                create()?
            }
            other => other?,
        };
        let mut file = std::fs::File::from(fd);
        let written = file.write_all(bytes).and_then(|()| file.sync_all());
        drop(file);
        if let Err(err) = written {
            let _ = rustix::fs::unlinkat(&self.dir, temporary.as_str(), AtFlags::empty());
            return Err(err);
        }
        rustix::fs::renameat(&self.dir, temporary.as_str(), &self.dir, name)?;
        rustix::fs::fsync(&self.dir)?;
        Ok(())
    }
}

/// The state directory to use when `--state.dir` is not given.
pub(crate) fn default_dir() -> Result<PathBuf, StateDirError> {
    if let Some(dir) = std::env::var_os("STATE_DIRECTORY").filter(|d| !d.is_empty()) {
        // systemd may pass several, colon-separated; the first is ours.
        let first = dir
            .to_string_lossy()
            .split(':')
            .next()
            .unwrap_or("")
            .to_owned();
        return Ok(PathBuf::from(first));
    }
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if root {
        return Ok(PathBuf::from("/var/lib/diskprobe_exporter"));
    }
    if let Some(xdg) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(xdg).join("diskprobe_exporter"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".local/state/diskprobe_exporter"))
        .ok_or(StateDirError::NoDefault)
}

/// Creates `dir` if needed and checks that it is not in memory ([`check_on_disk`]).
pub(crate) fn prepare(dir: &Path, procfs: &Path) -> Result<PathBuf, StateDirError> {
    std::fs::create_dir_all(dir).map_err(|source| StateDirError::Create {
        path: dir.to_owned(),
        source,
    })?;
    let dir = std::fs::canonicalize(dir).map_err(|source| StateDirError::Create {
        path: dir.to_owned(),
        source,
    })?;
    check_on_disk(&dir, procfs)?;
    Ok(dir)
}

/// Refuses `dir`, which need not exist yet, when it is (or, made, would be) on a filesystem
/// that is memory, by `<procfs>/self/mountinfo` (a mount table that cannot be read refuses
/// nothing). Reads only: what does not exist of `dir` is taken to be made under its nearest
/// ancestor that does, resolved through links.
pub(crate) fn check_on_disk(dir: &Path, procfs: &Path) -> Result<(), StateDirError> {
    let Ok(mountinfo) = std::fs::read_to_string(procfs.join("self/mountinfo")) else {
        return Ok(());
    };
    let dir = resolved(dir);
    match fstype_of(&mountinfo, &dir) {
        Some(fstype) if MEMORY_FILESYSTEMS.contains(&fstype.as_str()) => {
            Err(StateDirError::MemoryFilesystem { path: dir, fstype })
        }
        _ => Ok(()),
    }
}

/// `dir` as [`std::fs::canonicalize`] would give it once made: its nearest existing ancestor
/// resolved, the rest appended (as it is where that cannot be worked out).
fn resolved(dir: &Path) -> PathBuf {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned());
    let mut existing = dir.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(real, |path, name| path.join(name));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return dir,
        }
    }
}

/// Whether the directory `dir` is on devtmpfs, by the agent's mount table
/// (`<procfs>/self/mountinfo`; statfs cannot tell devtmpfs from tmpfs): where the kernel keeps
/// device nodes, so that a missing path there is a device node that is gone (its disk left the
/// kernel), never a probe file to create.
pub(crate) fn on_devtmpfs(procfs: &Path, dir: &Path) -> bool {
    let Ok(mountinfo) = std::fs::read_to_string(procfs.join("self/mountinfo")) else {
        return false;
    };
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    fstype_of(&mountinfo, &dir).as_deref() == Some("devtmpfs")
}

/// The filesystem type of the mount that contains `path` (the longest mount point that is a
/// prefix of it), from a mountinfo text.
pub(crate) fn fstype_of(mountinfo: &str, path: &Path) -> Option<String> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let mount_point = unescape(fields.get(4)?);
            let sep = fields.iter().position(|f| *f == "-")?;
            let fstype = fields.get(sep + 1)?;
            path.starts_with(&mount_point)
                .then(|| (mount_point.as_os_str().len(), (*fstype).to_owned()))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, fstype)| fstype)
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> PathBuf {
    PathBuf::from(
        s.replace("\\040", " ")
            .replace("\\011", "\t")
            .replace("\\012", "\n")
            .replace("\\134", "\\"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 22 0:25 / /dev/shm rw - tmpfs tmpfs rw
31 22 0:26 / /var/lib/my\\040dir rw - xfs /dev/sdb rw
";

    #[test]
    fn replace_neither_follows_nor_reuses_what_is_in_the_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, "precious").unwrap();
        let state = tmp.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let dir = StateDir::open(&state).unwrap();
        // A link where the temporary file goes, and one where the file goes.
        std::os::unix::fs::symlink(&outside, state.join(".f.json.tmp")).unwrap();
        std::os::unix::fs::symlink(&outside, state.join("g.json")).unwrap();
        dir.replace("f.json", b"one").unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"precious");
        assert_eq!(dir.read("f.json", 10).unwrap(), b"one");
        // Read refuses a link, and writes replace it rather than follow it.
        assert!(matches!(
            dir.read("g.json", 10),
            Err(BoundedReadError::Open { .. })
        ));
        dir.replace("g.json", b"two").unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"precious");
        assert_eq!(dir.read("g.json", 10).unwrap(), b"two");
        assert!(matches!(
            dir.read("g.json", 2),
            Err(BoundedReadError::TooLarge { .. })
        ));
        let mut names: Vec<_> = std::fs::read_dir(&state)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["f.json", "g.json"], "no temporary file left behind");
    }

    #[test]
    fn one_lock_holder_at_a_time_and_the_second_writes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let first = StateLock::take(tmp.path()).unwrap();
        let lock_file = tmp.path().join(LOCK_FILE);
        let written = std::fs::read_to_string(&lock_file).unwrap();
        assert_eq!(written, format!("{}\n", std::process::id()));
        let before = std::fs::metadata(&lock_file).unwrap().modified().unwrap();
        match StateLock::take(tmp.path()) {
            Err(StateDirError::InUse { path, holder }) => {
                assert_eq!(path, tmp.path());
                assert_eq!(holder, format!("pid {}", std::process::id()));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read_to_string(&lock_file).unwrap(), written);
        assert_eq!(
            std::fs::metadata(&lock_file).unwrap().modified().unwrap(),
            before
        );
        drop(first);
        let _again = StateLock::take(tmp.path()).unwrap();
        // A link in the lock file's place is neither followed nor replaced.
        let other = tempfile::tempdir().unwrap();
        let outside = other.path().join("outside");
        std::fs::write(&outside, "precious").unwrap();
        std::os::unix::fs::symlink(&outside, other.path().join(LOCK_FILE)).unwrap();
        assert!(matches!(
            StateLock::take(other.path()),
            Err(StateDirError::Lock { .. })
        ));
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "precious");
    }

    #[test]
    fn longest_mount_prefix_wins() {
        assert_eq!(
            fstype_of(MOUNTINFO, Path::new("/var/lib/x")).as_deref(),
            Some("ext4")
        );
        assert_eq!(
            fstype_of(MOUNTINFO, Path::new("/dev/shm/a")).as_deref(),
            Some("tmpfs")
        );
        assert_eq!(
            fstype_of(MOUNTINFO, Path::new("/var/lib/my dir/p")).as_deref(),
            Some("xfs")
        );
    }

    #[test]
    fn memory_filesystems_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let procfs = tmp.path().join("proc");
        std::fs::create_dir_all(procfs.join("self")).unwrap();
        let dir = tmp.path().join("state");
        let mountinfo = "1 0 0:1 / / rw - tmpfs tmpfs rw\n";
        std::fs::write(procfs.join("self/mountinfo"), mountinfo).unwrap();
        assert!(matches!(
            prepare(&dir, &procfs),
            Err(StateDirError::MemoryFilesystem { .. })
        ));
        std::fs::write(
            procfs.join("self/mountinfo"),
            "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n",
        )
        .unwrap();
        assert_eq!(
            prepare(&dir, &procfs).unwrap(),
            std::fs::canonicalize(&dir).unwrap()
        );
    }

    #[test]
    fn a_directory_yet_to_be_made_is_checked_where_it_would_be_made_and_not_made() {
        let tmp = tempfile::tempdir().unwrap();
        let procfs = tmp.path().join("proc");
        std::fs::create_dir_all(procfs.join("self")).unwrap();
        let real = std::fs::canonicalize(tmp.path()).unwrap();
        let memory = real.join("memory");
        std::fs::create_dir(&memory).unwrap();
        std::os::unix::fs::symlink(&memory, tmp.path().join("link")).unwrap();
        std::fs::write(
            procfs.join("self/mountinfo"),
            format!(
                "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n2 1 0:2 / {} rw - tmpfs tmpfs rw\n",
                memory.display()
            ),
        )
        .unwrap();
        let through_link = tmp.path().join("link/a/b");
        match check_on_disk(&through_link, &procfs) {
            Err(StateDirError::MemoryFilesystem { path, fstype }) => {
                assert_eq!(path, memory.join("a/b"));
                assert_eq!(fstype, "tmpfs");
            }
            other => panic!("{other:?}"),
        }
        assert!(!memory.join("a").exists(), "made nothing");
        assert!(check_on_disk(&tmp.path().join("disk/a"), &procfs).is_ok());
        assert!(!tmp.path().join("disk").exists(), "made nothing");
    }
}
