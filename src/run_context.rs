//! What the machine did while a probe run went on, read just before and just after it: the
//! host's CPU pressure (`/proc/pressure/cpu`, the `some` line's `total`: time in which at least
//! one runnable task waited for a CPU) and the block layer's own time for the run's direction on
//! the disks under the target (`/sys/block/DISK/stat`: reads or writes completed and the time
//! they spent in the block layer, other processes' I/O on those disks included). With the run's
//! own CPU wait ([`crate::probe::measurement::CpuWait`]) they tell a busy CPU from a slow disk:
//! a starved run's probe latency rises while the device's time per I/O does not.

use crate::blockdev::counters::{DiskReader, DiskSample};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the machine did over one run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunContext {
    /// Share of the run's wall time in which some task on the host waited for a CPU (0..=1);
    /// `None` without `/proc/pressure/cpu` (a kernel without PSI, or `psi=0`).
    pub host_cpu_pressure: Option<f64>,
    /// The block layer's I/Os and time in the run's direction on the disks under the target;
    /// `None` for a target with no block device or when its counters could not be read.
    pub device: Option<DeviceTime>,
}

/// I/Os the block layer completed in one direction over a run, and the time they spent in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceTime {
    /// Reads (or writes) completed.
    pub ios: u64,
    /// Their time in the block layer, from the kernel's millisecond counters (the kernel adds
    /// nanoseconds and prints their sum in milliseconds, so the difference is within 1 ms).
    pub time: Duration,
}

impl DeviceTime {
    /// The block layer's mean time per I/O; `None` when none completed.
    pub fn per_io(&self) -> Option<Duration> {
        (self.ios > 0).then(|| self.time / u32::try_from(self.ios).unwrap_or(u32::MAX))
    }
}

/// The readings taken before a run, to be completed after it ([`Before::after`]).
pub(crate) struct Before {
    pressure_file: PathBuf,
    pressure: Option<(Duration, Instant)>,
    disk: Option<(DiskReader, bool, DiskSample)>,
}

/// Reads the host's CPU pressure under `procfs` and, when `disk` is given, the counters of the
/// disks it reads in the direction of the run (`write`), just before a run.
pub(crate) fn before(procfs: &Path, disk: Option<DiskReader>, write: bool) -> Before {
    let pressure_file = procfs.join("pressure/cpu");
    let pressure = read_pressure(&pressure_file).map(|t| (t, Instant::now()));
    let disk = disk.and_then(|d| {
        let sample = d.sample().ok()?;
        Some((d, write, sample))
    });
    Before {
        pressure_file,
        pressure,
        disk,
    }
}

impl Before {
    /// Reads them again after the run: what the machine did in between.
    pub(crate) fn after(self) -> RunContext {
        let host_cpu_pressure = self.pressure.and_then(|(before, at)| {
            let after = read_pressure(&self.pressure_file)?;
            let wall = at.elapsed().as_secs_f64();
            (wall > 0.0).then(|| (after.saturating_sub(before).as_secs_f64() / wall).min(1.0))
        });
        let device = self.disk.and_then(|(reader, write, before)| {
            let after = reader.sample().ok()?;
            Some(device_time(&before, &after, write))
        });
        RunContext {
            host_cpu_pressure,
            device,
        }
    }
}

/// The block layer's reads (or writes) and their time between two samples.
fn device_time(before: &DiskSample, after: &DiskSample, write: bool) -> DeviceTime {
    let (a, b) = (&before.stats, &after.stats);
    let (ios, ms) = if write {
        (
            b.writes_completed.saturating_sub(a.writes_completed),
            b.write_time_ms.saturating_sub(a.write_time_ms),
        )
    } else {
        (
            b.reads_completed.saturating_sub(a.reads_completed),
            b.read_time_ms.saturating_sub(a.read_time_ms),
        )
    };
    DeviceTime {
        ios,
        time: Duration::from_millis(ms),
    }
}

/// The `some` line's `total` (microseconds) of a pressure file.
fn read_pressure(path: &Path) -> Option<Duration> {
    parse_pressure(&std::fs::read_to_string(path).ok()?)
}

/// Parses `some avg10=… avg60=… avg300=… total=N` (N in microseconds) from a pressure file.
fn parse_pressure(text: &str) -> Option<Duration> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    let total = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?;
    Some(Duration::from_micros(total.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_some_line_of_a_pressure_file() {
        let text = "some avg10=1.50 avg60=0.20 avg300=0.05 total=123456789\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(
            parse_pressure(text),
            Some(Duration::from_micros(123_456_789))
        );
        assert_eq!(parse_pressure("full avg10=0.00 total=5\n"), None);
        assert_eq!(parse_pressure("some avg10=0.00\n"), None);
        assert_eq!(parse_pressure(""), None);
    }

    #[test]
    fn the_device_time_is_the_runs_direction() {
        let sample = |reads: u64, read_ms: u64, writes: u64, write_ms: u64| DiskSample {
            at: Instant::now(),
            stats: crate::blockdev::counters::parse_stat(&format!(
                "{reads} 0 0 {read_ms} {writes} 0 0 {write_ms} 0 0 0"
            ))
            .unwrap(),
            in_flight: [0, 0],
        };
        let (a, b) = (sample(100, 40, 7, 9), sample(1100, 190, 8, 59));
        let reads = device_time(&a, &b, false);
        assert_eq!(reads.ios, 1000);
        assert_eq!(reads.per_io(), Some(Duration::from_micros(150)));
        let writes = device_time(&a, &b, true);
        assert_eq!(writes.ios, 1);
        assert_eq!(writes.per_io(), Some(Duration::from_millis(50)));
        assert_eq!(device_time(&b, &b, false).per_io(), None);
    }

    #[test]
    fn the_host_pressure_is_a_share_of_the_wall_time() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("pressure")).unwrap();
        let file = dir.path().join("pressure/cpu");
        std::fs::write(&file, "some avg10=0.00 avg60=0.00 avg300=0.00 total=1000\n").unwrap();
        let began = before(dir.path(), None, false);
        std::thread::sleep(Duration::from_millis(100));
        // 40 ms of pressure in at least 100 ms of wall time: at most 0.4.
        std::fs::write(
            &file,
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=41000\n",
        )
        .unwrap();
        let seen = began.after();
        let share = seen.host_cpu_pressure.unwrap();
        assert!(share > 0.2 && share <= 0.4, "{share}");
        assert_eq!(seen.device, None);
        // No pressure file: not known.
        let none = before(&dir.path().join("missing"), None, false).after();
        assert_eq!(none.host_cpu_pressure, None);
    }
}
