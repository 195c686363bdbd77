//! Probe files: created at the requested size and filled with random data before they are ever
//! read, marked as ours with the extended attribute [`OWNER_XATTR`] bound to the file
//! ([`super::mark`]), reused across restarts while intact, written to only when they carry that
//! mark (or were created by this process), and refilled only by a target that may write them.

use super::direct::{DirectOpen, check_aligned, fstat, open_direct, set_direct};
use super::facts::TargetKind;
use super::facts::{cache_of, dio_alignment, file_device, parent_dir, statfs_type};
use super::filesystem;
use super::mark::{self, Binding, Fill, Mark, OWNER_XATTR, Owner};
use super::opened::{DEFAULT_FILE_SIZE, OpenTarget, TargetOptions};
use super::space;
use super::target_error::{Refusal, TargetError};
use crate::probe::buffer::AlignedBuf;
use crate::probe::sys;
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

fn get_xattr(file: &File) -> Option<Vec<u8>> {
    sys::get_xattr(file, OWNER_XATTR)
}

fn set_xattr(file: &File, value: &[u8]) -> io::Result<()> {
    sys::set_xattr(file, OWNER_XATTR, value)
}

/// Marks `file` as the agent's probe file of `size` bytes, filled as far as `fill` says, bound
/// to it.
fn set_mark(file: &File, fill: Fill, size: u64) -> io::Result<()> {
    set_xattr(file, &Mark::new(fill, size, Binding::of(file)?).render())
}

/// The probe file at `path` opened for writes with O_DIRECT, and checked to be the file `checked`
/// describes (not swapped in between).
fn open_checked_for_writes(
    path: &Path,
    checked: &fs::Metadata,
    fstype: &str,
) -> Result<File, TargetError> {
    let file = open_direct(
        path,
        DirectOpen::File {
            write: true,
            fstype,
        },
    )?;
    same_file(path, checked, &file)?;
    lock_for_writes(path, &file)?;
    Ok(file)
}

/// How long a probe file's lock is waited for: a run that just ended may hold it a moment longer
/// (the kernel drops an io_uring instance's file references in the background).
const LOCK_RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Locks the probe file open as `file` for a fill or a write run (`flock`, exclusive, held until
/// the descriptor is closed): another process that fills or writes it, such as another agent with
/// another state directory configured on the same file, is refused rather than rewriting it in
/// turn.
fn lock_for_writes(path: &Path, file: &File) -> Result<(), TargetError> {
    let started = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < LOCK_RELEASE_WAIT => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(TargetError::FileInUse {
                    path: path.to_owned(),
                });
            }
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(TargetError::Io {
                    path: path.to_owned(),
                    what: "lock the probe file",
                    source,
                });
            }
        }
    }
}

/// Fails unless `file` is the file `checked` describes (device and inode).
fn same_file(path: &Path, checked: &fs::Metadata, file: &File) -> Result<(), TargetError> {
    let meta = fstat(path, file)?;
    if (meta.dev(), meta.ino()) != (checked.dev(), checked.ino()) {
        return Err(TargetError::Replaced {
            path: path.to_owned(),
        });
    }
    Ok(())
}

/// Fails unless the file behind `file` carries the agent's mark of a probe file filled to
/// `size`, bound to it: the one just filled through its path, not another put in its place.
fn check_filled(path: &Path, file: &File, size: u64) -> Result<(), TargetError> {
    match mark::owner(get_xattr(file).as_deref(), file) {
        Owner::Agent(m)
            if m.fill == Fill::Complete && m.size == size && m.binding != Binding::Legacy =>
        {
            Ok(())
        }
        _ => Err(TargetError::ReplacedDuringFill {
            path: path.to_owned(),
        }),
    }
}

/// Bytes written per system call while filling a probe file; progress is reported after each.
const FILL_CHUNK: usize = 1 << 20;

/// Creates (`existing` is `None`) or refills the probe file at `size` bytes of random data and
/// returns whether it carries our mark, with the filled file's metadata (to check that a later
/// open finds the same file). A refill only proceeds on the file `existing` describes (the one
/// whose mark was checked), not on another put at the path since. The data is written with
/// O_DIRECT: a fill neither floods the page cache nor leaves the whole file dirty for one final
/// `fsync`. O_DIRECT support and the size's alignment are checked before the file is truncated;
/// a file created here that fails them is removed again, and so is one that does not fit its
/// filesystem with the reserve ([`space`]). `progress` is called after every chunk and stops the
/// fill when it returns `false`: a file this call created is then removed (a target removed
/// mid-fill leaves nothing behind); a refilled one keeps a mark naming `size`, at which the next
/// open finishes it. A fill that runs out of space removes the file and backs off.
fn fill_probe_file(
    path: &Path,
    size: u64,
    min_free: u64,
    existing: Option<&fs::Metadata>,
    fstype: &str,
    progress: &dyn Fn() -> bool,
) -> Result<(bool, fs::Metadata), TargetError> {
    let io_err = |what: &'static str| {
        move |source: io::Error| TargetError::Io {
            path: path.to_owned(),
            what,
            source,
        }
    };
    // The mark of a fill in progress names the size being filled, so that a fill that was
    // stopped is finished at that size (not at the size it had reached).
    let mark_filling = |file: &File| match set_mark(file, Fill::Filling, size) {
        Ok(()) => true,
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "cannot mark the probe file as ours (no user xattrs); write probes will refuse it after a restart");
            false
        }
    };
    // One descriptor does everything: the fill never reopens the path. A new file is marked at
    // once; an existing one (already ours) only once the checks below have passed.
    let (file, marked_at_creation) = match existing {
        None => {
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
                .map_err(io_err(super::target_error::CREATE))?;
            lock_for_writes(path, &file)?;
            // Ours from the start: a fill that fails below leaves a file marked as unfinished.
            let marked = mark_filling(&file);
            (file, Some(marked))
        }
        Some(checked) => (open_checked_for_writes(path, checked, fstype)?, None),
    };
    // A new file gets O_DIRECT here; an existing one was opened with it.
    let preflight = || {
        if marked_at_creation.is_some() {
            set_direct(path, &file, fstype)?;
        }
        let (mem_align, offset_align) = dio_alignment(&file).unwrap_or((512, 512));
        check_aligned(path, "file size", size, offset_align)?;
        Ok(mem_align)
    };
    // Removes the file (if the path still names it): what a fill that failed wrote.
    let remove = || {
        if let (Ok(created), Ok(now)) = (file.metadata(), fs::symlink_metadata(path))
            && (now.dev(), now.ino()) == (created.dev(), created.ino())
        {
            let _ = fs::remove_file(path);
        }
    };
    let mem_align = match preflight().and_then(|m| room_for(path, size, min_free).map(|r| (m, r))) {
        Ok(ready) => ready,
        Err(err) => {
            if marked_at_creation.is_some() {
                // Nothing was written: remove the empty file this call created, so that the
                // mistake leaves nothing behind.
                remove();
            }
            return Err(err);
        }
    };
    let (mem_align, reserve) = mem_align;
    let marked = marked_at_creation.unwrap_or_else(|| mark_filling(&file));
    file.set_len(0).map_err(io_err("truncate the probe file"))?;
    match write_fill(path, &file, size, mem_align, progress) {
        Ok(()) => {}
        Err((err, written)) => {
            let out_of_space = matches!(&err, TargetError::Io { source, .. }
                if matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)));
            if out_of_space {
                // Everything written goes (a refill's file too: it is ours, and incomplete),
                // and the same fill waits until the space it lacked is back.
                remove();
                // What is free once it is gone, and the part of the file that did not fit:
                // what statvfs said was free at the start was not all there to be taken.
                let now = sys::fs_space(parent_dir(path)).map_or(0, |(_, free)| free);
                let wanted = now + (size - written) + reserve;
                space::BACKOFF.record(path, size, wanted);
                tracing::warn!(path = %path.display(), size, written, "the probe file's fill ran out of space; removed what it wrote, not trying again until the size changes or the space is back");
            } else if marked_at_creation.is_some() {
                // A fill this call started leaves nothing behind (a target removed while it was
                // being filled, a stop, an I/O error).
                remove();
            }
            return Err(err);
        }
    }
    file.sync_all().map_err(io_err("sync the probe file"))?;
    if marked {
        set_mark(&file, Fill::Complete, size).map_err(io_err("mark the probe file"))?;
    }
    Ok((marked, fstat(path, &file)?))
}

/// Fails unless a fill of the probe file at `path` to `size` bytes fits its filesystem with the
/// reserve ([`space`]: the larger of 10% and `min_free`) and no earlier fill at that size ran out
/// of the space that is free now. Returns the reserve in bytes.
fn room_for(path: &Path, size: u64, min_free: u64) -> Result<u64, TargetError> {
    let no_space = |problem| TargetError::NoSpace {
        path: path.to_owned(),
        problem,
    };
    let statvfs = |source| TargetError::Io {
        path: path.to_owned(),
        what: "statvfs",
        source,
    };
    space::check(path, size, min_free)
        .map_err(statvfs)?
        .map_err(no_space)?;
    let (fs_size, available) = sys::fs_space(path).map_err(statvfs)?;
    space::BACKOFF
        .admits(path, size, available)
        .map_err(no_space)?;
    Ok(space::reserve(fs_size, min_free))
}

/// Writes `size` bytes of random data into `file` from its start, [`FILL_CHUNK`] at a time, with
/// `progress` asked after each; on an error, how far it got.
fn write_fill(
    path: &Path,
    file: &File,
    size: u64,
    mem_align: u64,
    progress: &dyn Fn() -> bool,
) -> Result<(), (TargetError, u64)> {
    let mut rng = SmallRng::from_os_rng();
    let mut buf = AlignedBuf::new(FILL_CHUNK, mem_align as usize, &mut rng).map_err(|source| {
        let err = TargetError::FillBuffer {
            path: path.to_owned(),
            source,
        };
        (err, 0)
    })?;
    let mut offset = 0;
    while offset < size {
        let n = (size - offset).min(FILL_CHUNK as u64) as usize;
        let chunk = &mut buf.as_mut_slice()[..n];
        rng.fill_bytes(chunk);
        file.write_all_at(chunk, offset).map_err(|source| {
            let err = TargetError::Io {
                path: path.to_owned(),
                what: "fill the probe file",
                source,
            };
            (err, offset)
        })?;
        offset += n as u64;
        if !progress() {
            let err = TargetError::FillStopped {
                path: path.to_owned(),
            };
            return Err((err, offset));
        }
    }
    Ok(())
}

/// Opens the probe file at `path` (stat'ed as `meta`, `None` when it does not exist): creates and
/// fills it, refills it when it is ours but incomplete, or probes a foreign file read-only.
pub(super) fn open_file(
    path: &Path,
    meta: Option<fs::Metadata>,
    opts: &TargetOptions,
    progress: &dyn Fn() -> bool,
) -> Result<OpenTarget, TargetError> {
    if opts.offset != 0 {
        if meta.is_none() {
            // An offset means a block device was meant: no probe file is created in its place.
            return Err(TargetError::NoSuchDevice {
                path: path.to_owned(),
            });
        }
        return Err(TargetError::OffsetOnFile {
            path: path.to_owned(),
            offset: opts.offset,
        });
    }
    let dir = parent_dir(path);
    if meta.is_none() && crate::state_dir::on_devtmpfs(&opts.procfs, dir) {
        return Err(TargetError::GoneDeviceNode {
            path: path.to_owned(),
        });
    }
    // The filesystem the file is (or would be) on must be the one the target is meant for,
    // before anything is made or opened there.
    let filesystem = filesystem::checked(path, &opts.procfs, &opts.filesystem)?;
    let fstype =
        statfs_type(if meta.is_some() { path } else { dir }).map_err(|source| TargetError::Io {
            path: path.to_owned(),
            what: "statfs",
            source,
        })?;
    let ready = match meta {
        None => create(path, opts, &fstype, progress)?,
        Some(_) => open_existing(path, opts, &fstype, progress)?,
    };
    let (mem_align, offset_align) = dio_alignment(&ready.file).unwrap_or((512, 512));
    if ready.size == 0 {
        return Err(TargetError::TooSmall {
            path: path.to_owned(),
            available: 0,
            wanted: 1,
        });
    }
    check_aligned(path, "file size", ready.size, offset_align)?;
    // Files on a filesystem without a block device (tmpfs, overlayfs) have none.
    let device = file_device(&opts.procfs, &opts.sysfs, path, ready.dev);
    let cache = cache_of(&opts.sysfs, &fstype, device.as_ref());
    let mut warnings = Vec::new();
    if fstype == "overlay" {
        warnings.push(format!(
            "{} is on {fstype}: probes measure the container layer, not a disk",
            path.display()
        ));
    }
    if let Some(c) = cache {
        warnings.push(c.warning(path, &fstype, device.as_ref()));
    }
    Ok(OpenTarget {
        path: path.to_owned(),
        file: ready.file,
        kind: TargetKind::File,
        region_offset: 0,
        region_len: ready.size,
        offset_align,
        mem_align,
        device,
        fstype,
        cache,
        warnings,
        writable: opts.write,
        filled: ready.filled,
        identity: None,
        filesystem,
        _claims: Vec::new(),
    })
}

/// Binds the mark of an intact probe file an earlier version made (of `size` bytes) to it.
fn bind_legacy_mark(path: &Path, file: &File, size: u64) {
    match set_mark(file, Fill::Complete, size) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "a probe file an earlier version made: its mark is bound to it")
        }
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "cannot bind the mark of a probe file an earlier version made")
        }
    }
}

/// A probe file opened for probing.
struct Ready {
    /// The descriptor to probe.
    file: File,
    /// The size of its region.
    size: u64,
    /// Its device number.
    dev: u64,
    /// Whether this open created or refilled it.
    filled: bool,
}

/// Creates the probe file at `path` and fills it.
fn create(
    path: &Path,
    opts: &TargetOptions,
    fstype: &str,
    progress: &dyn Fn() -> bool,
) -> Result<Ready, TargetError> {
    let size = opts.size.unwrap_or(DEFAULT_FILE_SIZE);
    tracing::info!(path = %path.display(), size, "creating the probe file and filling it with random data");
    let (marked, created) = fill_probe_file(path, size, opts.min_free, None, fstype, progress)?;
    // A read probe gets a read-only descriptor of the file just filled, as it would for one found
    // at start-up.
    let file = open_direct(
        path,
        DirectOpen::File {
            write: opts.write,
            fstype,
        },
    )?;
    same_file(path, &created, &file)?;
    if opts.write {
        lock_for_writes(path, &file)?;
    }
    if marked {
        check_filled(path, &file, size)?;
    }
    Ok(Ready {
        file,
        size,
        dev: created.dev(),
        filled: true,
    })
}

/// Opens the existing file at `path`: ours is refilled unless intact (by a target that may
/// write it: [`TargetOptions::rewrite`]); a foreign one is only read, whole or as far as the
/// configured size.
fn open_existing(
    path: &Path,
    opts: &TargetOptions,
    fstype: &str,
    progress: &dyn Fn() -> bool,
) -> Result<Ready, TargetError> {
    // The owner mark is read through a descriptor of the file that will be probed, opened
    // read-only (opening someone else's file for writing is not harmless: it breaks their
    // leases); a write descriptor is opened only once the file is known to be ours, and must be
    // the same file.
    let probe = open_direct(
        path,
        DirectOpen::File {
            write: false,
            fstype,
        },
    )?;
    let meta = fstat(path, &probe)?;
    let owner = mark::owner(get_xattr(&probe).as_deref(), &probe);
    // Without a configured size, a probe file keeps the size its mark names (that of a finished
    // fill, or of one that was stopped); a foreign file is probed whole.
    let wanted = opts.size.unwrap_or(match &owner {
        Owner::Agent(m) => m.size,
        Owner::Foreign(_) => meta.len(),
    });
    let mut filled = false;
    let mut unbound = false;
    match owner {
        Owner::Agent(m) => {
            // A file longer than its region holds space a durability run preallocated and
            // did not give back (the agent stopped during the run): intact all the same, and
            // truncated back below when opened for writing.
            let intact = m.fill == Fill::Complete
                && m.size == wanted
                && meta.len() >= wanted
                && meta.blocks().saturating_mul(512) >= meta.len();
            // A fill the agent started on a file it made (a bound `filling` mark) is finished
            // as its creation would have been; anything else is refilled only by a target that
            // may write the file.
            let unfinished = m.fill == Fill::Filling && m.binding != Binding::Legacy;
            if !intact && !opts.rewrite && !unfinished {
                return Err(TargetError::NotRefilled {
                    path: path.to_owned(),
                });
            }
            if !intact {
                tracing::info!(path = %path.display(), size = wanted, "probe file is incomplete or has another size; refilling it with random data");
                fill_probe_file(path, wanted, opts.min_free, Some(&meta), fstype, progress)?;
                filled = true;
            }
            unbound = m.binding == Binding::Legacy;
        }
        Owner::Foreign(why) if opts.write => {
            return Err(TargetError::WriteRefused {
                path: path.to_owned(),
                reason: Refusal::ForeignFile { why },
            });
        }
        Owner::Foreign(_) if wanted > meta.len() => {
            return Err(TargetError::TooSmall {
                path: path.to_owned(),
                available: meta.len(),
                wanted,
            });
        }
        Owner::Foreign(_) => {}
    }
    let file = if opts.write {
        let file = open_checked_for_writes(path, &meta, fstype)?;
        if !filled && meta.len() > wanted {
            tracing::info!(path = %path.display(), size = wanted, beyond = meta.len() - wanted, "probe file holds space beyond its region that a run did not give back; truncating it");
            file.set_len(wanted).map_err(|source| TargetError::Io {
                path: path.to_owned(),
                what: "truncate the probe file to its region",
                source,
            })?;
        }
        file
    } else {
        probe
    };
    if filled {
        check_filled(path, &file, wanted)?;
    } else if unbound && opts.rewrite {
        bind_legacy_mark(path, &file, wanted);
    }
    Ok(Ready {
        file,
        size: wanted,
        dev: meta.dev(),
        filled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::io_target::tests::{file_opts, no_direct_io_here};
    use crate::probe::io_target::{open, open_reporting};

    #[test]
    fn creates_fills_and_reuses_a_probe_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.dat");
        let opts = TargetOptions {
            rewrite: true,
            ..file_opts(Some(1 << 20))
        };
        let chunks = std::cell::Cell::new(0);
        let count = || {
            chunks.set(chunks.get() + 1);
            true
        };
        let t = match open_reporting(&path, &opts, &count) {
            Ok(t) => t,
            Err(TargetError::NoDirectIo { .. }) => return no_direct_io_here(),
            Err(err) => panic!("{err}"),
        };
        assert!(t.filled);
        assert_eq!(chunks.get(), 1, "progress after each chunk of the fill");
        assert_eq!(t.region_len, 1 << 20);
        let data = fs::read(&path).unwrap();
        assert_eq!(data.len(), 1 << 20);
        assert!(data.chunks(512).all(|c| c.iter().any(|&b| b != 0)));
        drop(t);
        let t = open(&path, &opts).unwrap();
        assert!(!t.filled, "an intact probe file is reused");
        let opts2 = TargetOptions {
            size: Some(2 << 20),
            ..opts.clone()
        };
        // A target that may not write the file never refills it.
        let read_only = TargetOptions {
            rewrite: false,
            ..opts2.clone()
        };
        let err = open(&path, &read_only).unwrap_err();
        assert!(matches!(err, TargetError::NotRefilled { .. }), "{err}");
        assert_eq!(fs::metadata(&path).unwrap().len(), 1 << 20);
        let t = open_reporting(&path, &opts2, &count).unwrap();
        assert!(t.filled, "a size change refills");
        assert_eq!(chunks.get(), 3);
        assert_eq!(fs::metadata(&path).unwrap().len(), 2 << 20);
        // A size the file's direct I/O cannot write is refused before any data is written.
        let odd = dir.path().join("odd.dat");
        let opts3 = TargetOptions {
            size: Some((1 << 20) + 100),
            ..opts.clone()
        };
        let err = open_reporting(&odd, &opts3, &|| panic!("no chunk may be written")).unwrap_err();
        assert!(matches!(err, TargetError::Alignment { .. }), "{err}");
        assert!(!odd.exists(), "the empty file created for it is removed");
    }

    #[test]
    fn a_stopped_fill_is_finished_at_the_size_it_was_filling() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.dat");
        let opts = TargetOptions {
            rewrite: true,
            ..file_opts(Some(3 << 20))
        };
        // A fill of a file it created that is stopped (the target removed mid-fill) leaves
        // nothing behind.
        match open_reporting(&path, &opts, &|| false) {
            Err(TargetError::NoDirectIo { .. }) => return no_direct_io_here(),
            Err(TargetError::FillStopped { .. }) => {}
            other => panic!("the fill did not stop: {:?}", other.map(|_| ())),
        }
        assert!(!path.exists(), "the partly filled file is removed");
        // A refill that is stopped keeps the file, marked with the size it was filling.
        drop(open(&path, &file_opts(Some(1 << 20))).unwrap());
        match open_reporting(&path, &opts, &|| false) {
            Err(TargetError::FillStopped { .. }) => {}
            other => panic!("the refill did not stop: {:?}", other.map(|_| ())),
        }
        assert_eq!(fs::metadata(&path).unwrap().len(), 1 << 20);
        // Opened again without a size (the embedded default, a one-shot run without --size):
        // the fill is finished at the size it was started with, not at the 1 MiB it reached;
        // also by a target that may not write (a fill the agent started on a file it made).
        let unsized_opts = TargetOptions {
            size: None,
            rewrite: false,
            ..opts
        };
        let t = open(&path, &unsized_opts).unwrap();
        assert!(t.filled);
        assert_eq!(t.region_len, 3 << 20);
        assert_eq!(fs::metadata(&path).unwrap().len(), 3 << 20);
        drop(t);
        assert!(!open(&path, &unsized_opts).unwrap().filled, "then reused");
    }

    #[test]
    fn a_refill_only_touches_the_checked_file_and_stops_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let fstype = statfs_type(dir.path()).unwrap();
        let (ours, other) = (dir.path().join("ours.dat"), dir.path().join("other.dat"));
        let created = match fill_probe_file(&ours, 1 << 20, 0, None, &fstype, &|| true) {
            Err(TargetError::NoDirectIo { .. }) => return no_direct_io_here(),
            other => other.unwrap().1,
        };
        match fill_probe_file(&ours, 2 << 20, 0, Some(&created), &fstype, &|| false) {
            Err(TargetError::FillStopped { .. }) => {}
            other => panic!("the fill did not stop: {:?}", other.map(|_| ())),
        }
        assert_eq!(
            fs::metadata(&ours).unwrap().len(),
            1 << 20,
            "one chunk, then stop"
        );
        // The path now holds another file than the one whose mark was checked: left alone.
        fs::write(&other, b"not ours").unwrap();
        let mark = get_xattr(&File::open(&ours).unwrap());
        let checked = fs::metadata(&other).unwrap();
        let err =
            fill_probe_file(&ours, 1 << 20, 0, Some(&checked), &fstype, &|| true).unwrap_err();
        assert!(err.to_string().contains("replaced"), "{err}");
        assert_eq!(fs::metadata(&ours).unwrap().len(), 1 << 20);
        assert_eq!(get_xattr(&File::open(&ours).unwrap()), mark);
    }

    #[test]
    fn a_file_swapped_in_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        fs::write(&a, b"a").unwrap();
        fs::write(&b, b"b").unwrap();
        let fa = File::open(&a).unwrap();
        let checked = fa.metadata().unwrap();
        same_file(&a, &checked, &File::open(&a).unwrap()).unwrap();
        let err = same_file(&a, &checked, &File::open(&b).unwrap()).unwrap_err();
        assert!(err.to_string().contains("replaced"), "{err}");
        // A file without the mark of a finished fill is not taken for the one just filled.
        let err = check_filled(&a, &fa, 1).unwrap_err();
        assert!(err.to_string().contains("replaced"), "{err}");
    }

    #[test]
    fn an_offset_on_a_file_target_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.dat");
        let opts = TargetOptions {
            offset: 4096,
            ..file_opts(Some(1 << 20))
        };
        let err = open(&path, &opts).unwrap_err();
        assert!(err.to_string().contains("no such block device"), "{err}");
        assert!(!path.exists(), "nothing is created");
        fs::write(&path, vec![1u8; 8192]).unwrap();
        let err = open(&path, &opts).unwrap_err();
        assert!(matches!(err, TargetError::OffsetOnFile { .. }), "{err}");
    }

    #[test]
    fn no_probe_file_is_created_where_a_device_node_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = fs::canonicalize(dir.path()).unwrap().join("dev");
        fs::create_dir(&nodes).unwrap();
        let procfs = dir.path().join("proc");
        fs::create_dir_all(procfs.join("self")).unwrap();
        // The directory is where the mount table has devtmpfs (as /dev, where a disk's node
        // leaves with it).
        fs::write(
            procfs.join("self/mountinfo"),
            format!(
                "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n24 1 0:6 / {} rw - devtmpfs devtmpfs rw\n",
                nodes.display()
            ),
        )
        .unwrap();
        let path = nodes.join("sdb");
        let opts = TargetOptions {
            procfs,
            ..file_opts(Some(1 << 20))
        };
        let err = open(&path, &opts).unwrap_err();
        assert!(matches!(err, TargetError::GoneDeviceNode { .. }), "{err}");
        assert!(!path.exists(), "nothing is created");
        // Elsewhere a missing file is a probe file to create.
        let created = dir.path().join("probe.dat");
        open(&created, &opts).unwrap();
        assert!(created.exists());
    }

    /// A file whose mark is not one the agent writes, or one written on another file, is
    /// foreign: never truncated, refilled or written, whatever the target; a mark an earlier
    /// version wrote is the agent's, reused as it is and bound to the file by a target that may
    /// write it.
    #[test]
    fn only_files_the_agent_made_are_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let writer = TargetOptions {
            write: true,
            rewrite: true,
            ..file_opts(Some(1 << 20))
        };
        let reader = file_opts(Some(1 << 20));
        let made = dir.path().join("made.dat");
        match open(&made, &writer) {
            Err(TargetError::NoDirectIo { .. }) => return no_direct_io_here(),
            other => drop(other.unwrap()),
        }
        // A stray value of the attribute (another tool, a hand-made test): foreign.
        let stray = dir.path().join("stray.dat");
        fs::write(&stray, vec![7u8; 8 << 20]).unwrap();
        set_xattr(&File::open(&stray).unwrap(), b"x").unwrap();
        for opts in [&reader, &writer] {
            let result = open(&stray, opts);
            if opts.write {
                let err = result.unwrap_err();
                assert!(
                    err.to_string().contains("is not one the agent writes"),
                    "{err}"
                );
            } else {
                assert!(!result.unwrap().filled, "read as it is");
            }
            assert_eq!(fs::read(&stray).unwrap(), vec![7u8; 8 << 20]);
        }
        // A copy of the agent's file with its attributes: its mark names another file.
        let copy = dir.path().join("copy.dat");
        fs::copy(&made, &copy).unwrap();
        let value = get_xattr(&File::open(&made).unwrap()).unwrap();
        set_xattr(&File::open(&copy).unwrap(), &value).unwrap();
        let before = fs::read(&copy).unwrap();
        let err = open(&copy, &writer).unwrap_err();
        assert!(err.to_string().contains("another file"), "{err}");
        let bigger = TargetOptions {
            size: Some(2 << 20),
            ..reader.clone()
        };
        assert!(matches!(
            open(&copy, &bigger).unwrap_err(),
            TargetError::TooSmall { .. }
        ));
        assert_eq!(fs::read(&copy).unwrap(), before, "the copy is untouched");
        // The file as an earlier version left it: reused, not refilled; bound by a writer.
        let legacy = dir.path().join("legacy.dat");
        fs::copy(&made, &legacy).unwrap();
        set_xattr(&File::open(&legacy).unwrap(), b"probe-file v1 size=1048576").unwrap();
        let data = fs::read(&legacy).unwrap();
        assert!(!open(&legacy, &reader).unwrap().filled);
        assert_eq!(
            get_xattr(&File::open(&legacy).unwrap()).unwrap(),
            b"probe-file v1 size=1048576",
            "a reader leaves the mark as it is"
        );
        assert!(!open(&legacy, &writer).unwrap().filled, "reused");
        let bound = get_xattr(&File::open(&legacy).unwrap()).unwrap();
        assert!(bound.starts_with(b"diskprobe_exporter v2 complete size=1048576 ino="));
        assert!(matches!(
            mark::owner(Some(&bound), &File::open(&legacy).unwrap()),
            Owner::Agent(_)
        ));
        assert!(!open(&legacy, &writer).unwrap().filled, "and reused again");
        // Reads and writes of the same data: nothing refilled it.
        let after = fs::read(&legacy).unwrap();
        assert_eq!(after.len(), data.len());
    }

    #[test]
    fn a_probe_file_another_process_writes_is_refused() {
        let Some((dir, held)) = crate::probe::io_target::tests::writable() else {
            return;
        };
        let opts = TargetOptions {
            write: true,
            rewrite: true,
            ..file_opts(Some(1 << 20))
        };
        // Another open file description holds the lock (as another agent would).
        let err = open(&dir.path().join("probe.dat"), &opts).unwrap_err();
        assert!(matches!(err, TargetError::FileInUse { .. }), "{err}");
        drop(held);
        open(&dir.path().join("probe.dat"), &opts).unwrap();
    }

    #[test]
    fn foreign_files_are_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("foreign.dat");
        fs::write(&path, vec![1u8; 8192]).unwrap();
        let opts = TargetOptions {
            write: true,
            ..file_opts(None)
        };
        let err = open(&path, &opts).unwrap_err();
        assert!(matches!(err, TargetError::WriteRefused { .. }), "{err}");
        assert_eq!(fs::read(&path).unwrap(), vec![1u8; 8192]);
    }
}
