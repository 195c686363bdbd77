//! Other processes' I/O on a probed disk: how busy the disk is before a capacity profile's run
//! (busy skip), and whether another process's I/O shows up while a run goes on (yield, and the
//! cost of probing exported per target).
//!
//! Everything is read on the whole disks a target's I/O lands on ([`crate::blockdev`]: a
//! partition's I/O counts in its disk, a device-mapper or RAID volume's in every disk under it, as
//! for the scheduler's device lock and budget), from the samples of their counters and requests
//! in flight that [`crate::blockdev::counters::DiskReader`] takes (`/sys/block/DISK/stat` and `inflight`),
//! added up over the disks (the I/O time: the largest, as any I/O in flight on any of them). This
//! module reads no file: it computes.
//!
//! Before a run, all the disk's I/O is other processes': the agent runs one probe per disk at a
//! time. During a run, the probe's own I/O is subtracted, using the engine's
//! [`RunProgress`]: an I/O is counted as submitted before the kernel sees it and as completed
//! after the engine took its completion. The kernel cannot have transferred more sectors for the
//! probe than `submitted × block size`, nor hold more of its requests in flight than
//! `(submitted − completed) × requests per I/O` (how many requests the disk's queue limits may
//! split one I/O into), so what exceeds those bounds is certainly another process's: no false
//! alarm, at the price of missing others' I/O up to the size of the probe's own in flight (32
//! 4k I/Os at QD32, 16 MiB at QD16 with 1M blocks). I/O in the other direction (writes during a
//! read probe), discards and flushes are never the probe's, and count at once.

use crate::blockdev::counters::{DiskReader, DiskSample};
use crate::config::BusyLimits;
use crate::diskstats::DiskStats;
use crate::probe::engine::RunProgress;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// How often a run that may yield compares the disk's counters with its own.
pub(crate) const YIELD_POLL: Duration = Duration::from_millis(10);
/// How often a run that does not yield does (for the cost counters only).
pub(crate) const COST_POLL: Duration = Duration::from_millis(100);

/// Bytes per sector in the kernel's block-layer counters.
const SECTOR: u64 = 512;

/// Completed I/Os of every kind (reads, writes, discards, flushes).
fn completed_ios(s: &DiskStats) -> u64 {
    s.reads_completed
        + s.writes_completed
        + s.discards.map_or(0, |d| d.completed)
        + s.flushes.map_or(0, |f| f.completed)
}

/// The disk's load between two samples taken while the probe did no I/O on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Load {
    /// I/Os completed per second.
    pub iops: f64,
    /// Mean number of I/Os in flight (the rate of the weighted I/O time).
    pub in_flight: f64,
    /// Share of the time with any I/O in flight (the rate of the I/O time), at most 1.
    pub utilisation: f64,
}

impl Load {
    /// The load from `before` to `after`; `None` when no time passed between them.
    pub(crate) fn between(before: &DiskSample, after: &DiskSample) -> Option<Load> {
        let ms = after.at.saturating_duration_since(before.at).as_secs_f64() * 1e3;
        if ms <= 0.0 {
            return None;
        }
        let (a, b) = (&before.stats, &after.stats);
        let delta = |x: u64, y: u64| y.saturating_sub(x) as f64;
        Some(Load {
            iops: delta(completed_ios(a), completed_ios(b)) / ms * 1e3,
            in_flight: delta(a.io_weighted_time_ms, b.io_weighted_time_ms) / ms,
            utilisation: (delta(a.io_time_ms, b.io_time_ms) / ms).min(1.0),
        })
    }

    /// The first limit this load is above, said in words; `None` when it is above none.
    pub(crate) fn above(&self, limits: &BusyLimits) -> Option<String> {
        if let Some(limit) = limits.iops.filter(|l| self.iops > *l) {
            return Some(format!(
                "{:.1} I/Os per second from other processes (limit {limit})",
                self.iops
            ));
        }
        if let Some(limit) = limits.in_flight.filter(|l| self.in_flight > *l) {
            return Some(format!(
                "{:.2} I/Os of other processes in flight on average (limit {limit})",
                self.in_flight
            ));
        }
        if let Some(limit) = limits.utilisation.filter(|l| self.utilisation > *l) {
            return Some(format!(
                "{:.0}% utilised (limit {:.0}%)",
                self.utilisation * 100.0,
                limit * 100.0
            ));
        }
        None
    }
}

/// What a probe run itself does to the disk, to tell its I/O from other processes'.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnIo {
    /// Bytes per I/O.
    pub block_size: u64,
    /// Whether the probe writes (else it reads).
    pub write: bool,
    /// The most requests one of its I/Os can become ([`DiskReader::requests_per_io`]).
    pub requests_per_io: u64,
}

/// Other processes' I/O seen during a run, up to some moment; lower bounds (see the module
/// documentation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Others {
    /// Sectors other processes transferred (or discarded) since the run's first sample.
    pub sectors: u64,
    /// Flushes since the run's first sample.
    pub flushes: u64,
    /// Their requests in flight at the moment.
    pub in_flight: u64,
}

impl Others {
    /// Others' I/O at `now`, given the run's first sample, the I/Os the run had completed just
    /// before `now` was read and those it had submitted just after.
    pub(crate) fn at(
        start: &DiskSample,
        now: &DiskSample,
        own: &OwnIo,
        completed: u64,
        submitted: u64,
    ) -> Others {
        let (a, b) = (&start.stats, &now.stats);
        let reads = b.sectors_read.saturating_sub(a.sectors_read);
        let writes = b.sectors_written.saturating_sub(a.sectors_written);
        let discards = b
            .discards
            .zip(a.discards)
            .map_or(0, |(b, a)| b.sectors.saturating_sub(a.sectors));
        let flushes = b
            .flushes
            .zip(a.flushes)
            .map_or(0, |(b, a)| b.completed.saturating_sub(a.completed));
        let own_sectors = submitted.saturating_mul(own.block_size) / SECTOR;
        let (same, other) = if own.write {
            (writes, reads)
        } else {
            (reads, writes)
        };
        let own_in_flight = submitted
            .saturating_sub(completed)
            .saturating_mul(own.requests_per_io);
        let (same_in_flight, other_in_flight) = if own.write {
            (now.in_flight[1], now.in_flight[0])
        } else {
            (now.in_flight[0], now.in_flight[1])
        };
        Others {
            sectors: same.saturating_sub(own_sectors) + other + discards,
            flushes,
            in_flight: same_in_flight.saturating_sub(own_in_flight) + other_in_flight,
        }
    }

    /// Whether any of others' I/O shows in this compared with `before` (an earlier moment of the
    /// same run): new sectors or flushes, or requests in flight now.
    pub(crate) fn new_since(&self, before: &Others) -> bool {
        self.sectors > before.sectors || self.flushes > before.flushes || self.in_flight > 0
    }

    /// Says what was seen, for the reason of a run that stopped early.
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.in_flight > 0 {
            parts.push(format!("{} of their I/Os in flight", self.in_flight));
        }
        if self.sectors > 0 {
            parts.push(format!("{} KiB transferred", self.sectors * SECTOR / 1024));
        }
        if self.flushes > 0 {
            parts.push(format!("{} flushes", self.flushes));
        }
        parts.join(", ")
    }
}

/// What watching a run found.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct WatchReport {
    /// Time of the run during which other processes' I/O was seen on the disk.
    pub contended: Duration,
    /// Integral of other processes' requests in flight over the run, in I/O-seconds.
    pub others_in_flight_seconds: f64,
    /// Set when the run was asked to yield: what was seen, and when.
    pub yielded_for: Option<String>,
}

/// How to watch a run.
#[derive(Debug, Clone)]
pub(crate) struct Watch {
    /// The disk's counters.
    pub disk: DiskReader,
    /// The disks' names (joined by `+`), for messages.
    pub disk_name: String,
    /// The run's own I/O.
    pub own: OwnIo,
    /// Ask the run to yield at the first sight of another process's I/O.
    pub yield_on_others: bool,
}

impl Watch {
    /// Runs `run` on this thread while another thread compares the disk's counters with
    /// `progress` (the run's own), every [`YIELD_POLL`] when the run may yield (setting
    /// `yield_now` at the first sight of another process's I/O), else every [`COST_POLL`].
    /// Without a first sample of the disk, or a thread to watch from, `run` runs unwatched.
    pub(crate) fn around<R>(
        &self,
        progress: &RunProgress,
        yield_now: &AtomicBool,
        run: impl FnOnce() -> R,
    ) -> (R, WatchReport) {
        let start = match self.disk.sample() {
            Ok(s) => s,
            Err(err) => {
                tracing::debug!(%err, "not watching the run for other processes' I/O");
                return (run(), WatchReport::default());
            }
        };
        let period = if self.yield_on_others {
            YIELD_POLL
        } else {
            COST_POLL
        };
        let (done_tx, done_rx) = mpsc::channel::<()>();
        std::thread::scope(|scope| {
            let watcher = std::thread::Builder::new()
                .name("diskprobe-watch".to_owned())
                .spawn_scoped(scope, move || {
                    self.watch(&start, period, &done_rx, progress, yield_now)
                });
            if let Err(err) = &watcher {
                tracing::warn!(%err, "cannot start a thread to watch the run; running unwatched");
            }
            let result = run();
            drop(done_tx);
            let report = match watcher {
                Ok(handle) => handle.join().unwrap_or_default(),
                Err(_) => WatchReport::default(),
            };
            (result, report)
        })
    }

    fn watch(
        &self,
        start: &DiskSample,
        period: Duration,
        done: &mpsc::Receiver<()>,
        progress: &RunProgress,
        yield_now: &AtomicBool,
    ) -> WatchReport {
        let mut report = WatchReport::default();
        let mut seen = Others::default();
        let mut last_at = start.at;
        loop {
            let finished = !matches!(
                done.recv_timeout(period),
                Err(mpsc::RecvTimeoutError::Timeout)
            );
            let completed = progress.completed.load(Ordering::Relaxed);
            let Ok(now) = self.disk.sample() else {
                // The disk vanished: the run will fail on its own.
                return report;
            };
            let submitted = progress.submitted.load(Ordering::Relaxed);
            let others = Others::at(start, &now, &self.own, completed, submitted);
            let dt = now.at.saturating_duration_since(last_at);
            last_at = now.at;
            report.others_in_flight_seconds += others.in_flight as f64 * dt.as_secs_f64();
            if others.new_since(&seen) {
                report.contended += dt;
                if self.yield_on_others && report.yielded_for.is_none() {
                    yield_now.store(true, Ordering::Relaxed);
                    report.yielded_for = Some(format!(
                        "another process's I/O on {} after {} ms ({})",
                        self.disk_name,
                        now.at.saturating_duration_since(start.at).as_millis(),
                        others.describe()
                    ));
                }
            }
            seen = Others {
                in_flight: 0,
                ..others
            };
            if finished {
                return report;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blockdev::counters::parse_stat;
    use std::time::Instant;

    fn sample(at: Instant, stat: &str, in_flight: [u64; 2]) -> DiskSample {
        DiskSample {
            at,
            stats: parse_stat(stat).expect("valid stat line"),
            in_flight,
        }
    }

    // Fields: reads, merges, sectors, ms; writes, merges, sectors, ms; in flight, io ms,
    // weighted ms; discards, merges, sectors, ms; flushes, ms.
    const IDLE: &str = "  100 0 800 50  10 0 80 5  0 60 55  0 0 0 0  2 1\n";

    #[test]
    fn load_counts_every_completed_io_and_the_weighted_time() {
        let t = Instant::now();
        let a = sample(t, IDLE, [0, 0]);
        // 500 ms later: 40 reads, 9 writes, 1 flush; 100 ms weighted, 250 ms busy.
        let b = sample(
            t + Duration::from_millis(500),
            "140 0 1120 70  19 0 152 9  0 310 155  0 0 0 0  3 1",
            [0, 0],
        );
        let load = Load::between(&a, &b).unwrap();
        assert!((load.iops - 100.0).abs() < 1e-9, "{load:?}");
        assert!((load.in_flight - 0.2).abs() < 1e-9);
        assert!((load.utilisation - 0.5).abs() < 1e-9);
        let limits = |iops, in_flight, utilisation| BusyLimits {
            iops,
            in_flight,
            utilisation,
        };
        assert_eq!(load.above(&limits(Some(100.0), Some(0.2), Some(0.5))), None);
        assert!(
            load.above(&limits(Some(99.0), None, None))
                .unwrap()
                .contains("100.0 I/Os per second")
        );
        assert!(
            load.above(&limits(None, Some(0.1), None))
                .unwrap()
                .contains("0.20 I/Os")
        );
        assert!(
            load.above(&limits(None, None, Some(0.4)))
                .unwrap()
                .contains("50% utilised")
        );
        assert_eq!(load.above(&BusyLimits::default()), None);
        assert_eq!(Load::between(&a, &a), None);
    }

    #[test]
    fn the_probes_own_io_is_not_others() {
        let t = Instant::now();
        let own = OwnIo {
            block_size: 4096,
            write: false,
            requests_per_io: 1,
        };
        let start = sample(t, IDLE, [0, 0]);
        // The probe submitted 10 reads (80 sectors), completed 7; the kernel finished 8 of them
        // (64 sectors) and holds 2.
        let now = sample(t, "108 0 864 50  10 0 80 5  2 60 55  0 0 0 0  2 1", [2, 0]);
        let others = Others::at(&start, &now, &own, 7, 10);
        assert_eq!(others, Others::default());
        assert!(!others.new_since(&Others::default()));
        // Another process read 4 KiB and has a read in flight: seen, whatever the masking.
        let now = sample(t, "110 0 880 50  10 0 80 5  3 60 55  0 0 0 0  2 1", [3, 0]);
        let others = Others::at(&start, &now, &own, 8, 10);
        assert_eq!(others.in_flight, 1);
        assert!(others.new_since(&Others::default()));
        // Writes, discards and flushes during a read probe are others'.
        let now = sample(t, "108 0 864 50  11 0 88 5  2 60 55  1 0 8 0  3 1", [2, 0]);
        let others = Others::at(&start, &now, &own, 7, 10);
        assert_eq!((others.sectors, others.flushes), (16, 1));
        assert!(
            others.describe().contains("8 KiB transferred"),
            "{}",
            others.describe()
        );
        // A 1 MiB probe I/O split in two requests is the probe's own.
        let big = OwnIo {
            block_size: 1 << 20,
            write: false,
            requests_per_io: 2,
        };
        let now = sample(t, "104 0 4896 50  10 0 80 5  4 60 55  0 0 0 0  2 1", [4, 0]);
        assert_eq!(Others::at(&start, &now, &big, 2, 4), Others::default());
    }

    /// A fake disk under a temporary sysfs, whose counters the test moves.
    struct FakeDisk {
        dir: tempfile::TempDir,
    }

    impl FakeDisk {
        fn new() -> FakeDisk {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join("block/sdx")).unwrap();
            let disk = FakeDisk { dir };
            disk.set(100, 800, 0);
            disk
        }

        /// Sets reads completed, sectors read and reads in flight (each file replaced at once, as
        /// the kernel's are read whole).
        fn set(&self, reads: u64, sectors: u64, in_flight: u64) {
            let block = self.dir.path().join("block/sdx");
            let write = |name: &str, text: String| {
                let tmp = block.join(format!(".{name}"));
                std::fs::write(&tmp, text).unwrap();
                std::fs::rename(&tmp, block.join(name)).unwrap();
            };
            write(
                "stat",
                format!("{reads} 0 {sectors} 50  10 0 80 5  {in_flight} 60 55  0 0 0 0  2 1\n"),
            );
            write("inflight", format!("{in_flight} 0\n"));
        }

        fn watch(&self, yield_on_others: bool) -> Watch {
            Watch {
                disk: DiskReader::new(self.dir.path(), &["sdx".to_owned()]),
                disk_name: "sdx".to_owned(),
                own: OwnIo {
                    block_size: 4096,
                    write: false,
                    requests_per_io: 1,
                },
                yield_on_others,
            }
        }
    }

    fn wait_for(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_watched_run_is_asked_to_yield_at_the_first_io_that_is_not_its_own() {
        let disk = FakeDisk::new();
        let progress = RunProgress::default();
        let yield_now = AtomicBool::new(false);
        let ((), report) = disk.watch(true).around(&progress, &yield_now, || {
            // The probe's own reads, in the order the engine and the kernel count them: 10
            // submitted, then the disk's counters (8 done, 2 in flight), then all 10 done.
            progress.submitted.store(10, Ordering::Relaxed);
            disk.set(108, 864, 2);
            disk.set(110, 880, 0);
            progress.completed.store(10, Ordering::Relaxed);
            // Several polls see only the probe's own I/O.
            std::thread::sleep(YIELD_POLL * 5);
            assert!(
                !yield_now.load(Ordering::Relaxed),
                "its own I/O made it yield"
            );
            // Another process reads 8 KiB.
            disk.set(112, 896, 0);
            wait_for("the watch did not ask the run to yield", || {
                yield_now.load(Ordering::Relaxed)
            });
        });
        let why = report.yielded_for.expect("a reason");
        assert!(
            why.starts_with("another process's I/O on sdx after "),
            "{why}"
        );
        assert!(why.ends_with("(8 KiB transferred)"), "{why}");
        assert!(report.contended > Duration::ZERO);
    }

    #[test]
    fn a_run_that_does_not_yield_is_only_charged_the_time_it_shared_the_disk() {
        let disk = FakeDisk::new();
        let progress = RunProgress::default();
        let yield_now = AtomicBool::new(false);
        let ((), report) = disk.watch(false).around(&progress, &yield_now, || {
            // Another process keeps 3 reads in flight for a while.
            disk.set(100, 800, 3);
            std::thread::sleep(COST_POLL * 3);
        });
        assert!(!yield_now.load(Ordering::Relaxed));
        assert_eq!(report.yielded_for, None);
        assert!(report.contended >= COST_POLL, "{report:?}");
        // Three in flight over (about) the contended time.
        let expected = 3.0 * report.contended.as_secs_f64();
        assert!(
            (report.others_in_flight_seconds - expected).abs() < 1e-9,
            "{report:?}"
        );
    }
}
