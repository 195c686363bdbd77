//! A whole disk's counters and queue limits, read from `<sysfs>/block/DISK`: `stat` (the disk's
//! `/proc/diskstats` counters, without the other devices), `inflight` (I/Os in flight by
//! direction), `queue/max_sectors_kb` and `queue/max_segments` (how many requests the queue may
//! split one I/O into). The contention watch ([`crate::contention`]) computes other processes'
//! I/O from the samples [`DiskReader`] takes.

use crate::diskstats::{self, DiskStats};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Why the disk's counters could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The file could not be read (the disk vanished, or sysfs is not mounted there).
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file did not hold what the kernel writes there.
    #[error("{path}: unexpected content {text:?}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What it held.
        text: String,
    },
}

/// The counters of one disk at one moment.
#[derive(Debug, Clone)]
pub(crate) struct DiskSample {
    /// When they were read.
    pub at: Instant,
    /// The disk's diskstats counters.
    pub stats: DiskStats,
    /// Requests in flight: reads, then writes (discards and flushes count as writes).
    pub in_flight: [u64; 2],
}

/// Parses `/sys/block/DISK/stat`: the counters of a `/proc/diskstats` line without its major,
/// minor and name.
pub(crate) fn parse_stat(text: &str) -> Option<DiskStats> {
    diskstats::parse_line(&format!("0 0 disk {text}")).ok()
}

/// Parses `/sys/block/DISK/inflight`: reads and writes in flight.
pub(crate) fn parse_inflight(text: &str) -> Option<[u64; 2]> {
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    match (fields.next(), fields.next()) {
        (Some(Ok(reads)), Some(Ok(writes))) => Some([reads, writes]),
        _ => None,
    }
}

/// Reads the counters of the whole disks under one target, added up.
#[derive(Debug, Clone)]
pub struct DiskReader {
    dirs: Vec<PathBuf>,
}

impl DiskReader {
    /// The reader of the whole disks `disks` (kernel names such as `sda` or `cciss/c0d0`) under
    /// the sysfs mountpoint `sysfs`.
    pub fn new(sysfs: &Path, disks: &[String]) -> DiskReader {
        DiskReader {
            dirs: disks
                .iter()
                .map(|d| super::sysfs::disk_dir(sysfs, d))
                .collect(),
        }
    }

    /// The directories of the disks read.
    pub fn disk_dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    fn read(dir: &Path, name: &str) -> Result<(PathBuf, String), ReadError> {
        let path = dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok((path, text)),
            Err(source) => Err(ReadError::Io { path, source }),
        }
    }

    /// The disks' counters now, added up; an error when any disk's cannot be read (or there is
    /// no disk).
    pub(crate) fn sample(&self) -> Result<DiskSample, ReadError> {
        let mut total: Option<DiskSample> = None;
        for dir in &self.dirs {
            let s = Self::sample_one(dir)?;
            total = Some(match total {
                None => s,
                Some(t) => DiskSample {
                    at: s.at,
                    stats: add_stats(&t.stats, &s.stats),
                    in_flight: [
                        t.in_flight[0] + s.in_flight[0],
                        t.in_flight[1] + s.in_flight[1],
                    ],
                },
            });
        }
        total.ok_or_else(|| ReadError::Io {
            path: PathBuf::from("block"),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no disk to watch"),
        })
    }

    fn sample_one(dir: &Path) -> Result<DiskSample, ReadError> {
        let (stat_path, stat) = Self::read(dir, "stat")?;
        let (inflight_path, inflight) = Self::read(dir, "inflight")?;
        let at = Instant::now();
        let stats = parse_stat(&stat).ok_or(ReadError::Format {
            path: stat_path,
            text: stat,
        })?;
        let in_flight = parse_inflight(&inflight).ok_or(ReadError::Format {
            path: inflight_path,
            text: inflight,
        })?;
        Ok(DiskSample {
            at,
            stats,
            in_flight,
        })
    }

    /// The most requests one I/O of `block_size` bytes can become on this disk: the queue
    /// splits an I/O larger than `max_sectors_kb`, or with more (page-sized, at worst) segments
    /// than `max_segments`. One request per page when the limits cannot be read.
    pub(crate) fn requests_per_io(&self, block_size: u64) -> u64 {
        let pages = block_size.div_ceil(4096).max(1);
        // The smallest limit of any disk splits the most.
        let limit = |name: &str| -> Option<u64> {
            self.dirs
                .iter()
                .filter_map(|dir| {
                    let (_, text) = Self::read(dir, &format!("queue/{name}")).ok()?;
                    text.trim().parse::<u64>().ok().filter(|v| *v > 0)
                })
                .min()
        };
        match (limit("max_sectors_kb"), limit("max_segments")) {
            (Some(kb), Some(segments)) => block_size
                .div_ceil(kb * 1024)
                .max(pages.div_ceil(segments))
                .max(1),
            _ => pages,
        }
    }
}

/// The counters of two disks together: sums, but for the I/O time, the larger (time with any I/O
/// in flight on either).
fn add_stats(a: &DiskStats, b: &DiskStats) -> DiskStats {
    let discards = match (a.discards, b.discards) {
        (Some(x), Some(y)) => Some(diskstats::DiscardStats {
            completed: x.completed + y.completed,
            merged: x.merged + y.merged,
            sectors: x.sectors + y.sectors,
            time_ms: x.time_ms + y.time_ms,
        }),
        (x, y) => x.or(y),
    };
    let flushes = match (a.flushes, b.flushes) {
        (Some(x), Some(y)) => Some(diskstats::FlushStats {
            completed: x.completed + y.completed,
            time_ms: x.time_ms + y.time_ms,
        }),
        (x, y) => x.or(y),
    };
    DiskStats {
        reads_completed: a.reads_completed + b.reads_completed,
        reads_merged: a.reads_merged + b.reads_merged,
        sectors_read: a.sectors_read + b.sectors_read,
        read_time_ms: a.read_time_ms + b.read_time_ms,
        writes_completed: a.writes_completed + b.writes_completed,
        writes_merged: a.writes_merged + b.writes_merged,
        sectors_written: a.sectors_written + b.sectors_written,
        write_time_ms: a.write_time_ms + b.write_time_ms,
        io_in_progress: a.io_in_progress + b.io_in_progress,
        io_time_ms: a.io_time_ms.max(b.io_time_ms),
        io_weighted_time_ms: a.io_weighted_time_ms + b.io_weighted_time_ms,
        discards,
        flushes,
        ..a.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Fields: reads, merges, sectors, ms; writes, merges, sectors, ms; in flight, io ms,
    // weighted ms; discards, merges, sectors, ms; flushes, ms.
    const IDLE: &str = "  100 0 800 50  10 0 80 5  0 60 55  0 0 0 0  2 1\n";

    #[test]
    fn parses_sysfs_stat_and_inflight() {
        let s = parse_stat(IDLE).unwrap();
        assert_eq!((s.reads_completed, s.sectors_read), (100, 800));
        assert_eq!(s.io_weighted_time_ms, 55);
        assert_eq!(s.flushes.unwrap().completed, 2);
        // Kernels before 4.18 print 11 fields.
        assert!(
            parse_stat("1 2 3 4 5 6 7 8 9 10 11")
                .unwrap()
                .discards
                .is_none()
        );
        assert!(parse_stat("1 2 3").is_none());
        assert_eq!(parse_inflight("       3        1\n"), Some([3, 1]));
        assert_eq!(parse_inflight("3"), None);
    }

    #[test]
    fn requests_per_io_follows_the_queue_limits() {
        let dir = tempfile::tempdir().unwrap();
        let queue = dir.path().join("block/sdx/queue");
        std::fs::create_dir_all(&queue).unwrap();
        let reader = DiskReader::new(dir.path(), &["sdx".to_owned()]);
        // Unknown limits: a request per page.
        assert_eq!(reader.requests_per_io(1 << 20), 256);
        std::fs::write(queue.join("max_sectors_kb"), "1280\n").unwrap();
        std::fs::write(queue.join("max_segments"), "128\n").unwrap();
        assert_eq!(reader.requests_per_io(4096), 1);
        assert_eq!(reader.requests_per_io(1 << 20), 2);
        std::fs::write(queue.join("max_sectors_kb"), "512\n").unwrap();
        std::fs::write(queue.join("max_segments"), "1024\n").unwrap();
        assert_eq!(reader.requests_per_io(1 << 20), 2);
        assert_eq!(reader.requests_per_io(4 << 20), 8);
    }
}
