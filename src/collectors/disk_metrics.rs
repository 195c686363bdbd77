//! `diskprobe_disk_*`: `/proc/diskstats` counters in base units, with node_exporter's names,
//! types and values (`node_disk_*`), plus `diskprobe_disk_info` from sysfs.
//!
//! The file is read and parsed on every scrape, so vanished devices vanish. Static sysfs facts are
//! cached per `(name, major, minor)` for [`INFO_TTL`] (plus up to half of it, spread by device
//! number, so that devices first read together are not all read again in the same later scrape)
//! because reading seven files per device per scrape would dominate the scrape cost on machines
//! with many devices.

use super::{CollectError, Collector};
use crate::blockdev::{self, BlockDevice};
use crate::device_filter::DeviceFilter;
use crate::diskstats::{self, DiskStats};
use crate::exposition::{Family, Labels, labels};
use crate::series::SeriesStore;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How long sysfs facts about a device are reused before being read again, at least (see
/// [`stale_at`]).
pub(crate) const INFO_TTL: Duration = Duration::from_secs(60);

/// When sysfs facts about `major:minor` read at `at` go stale: after [`INFO_TTL`] plus up to half
/// of it, by a hash of the device number. All devices are read in the first scrape; without the
/// spread they would all be read again in one scrape per TTL.
fn stale_at(at: Instant, major: u32, minor: u32) -> Instant {
    let mut h = DefaultHasher::new();
    (major, minor).hash(&mut h);
    at + INFO_TTL + INFO_TTL.mul_f64((h.finish() % 1000) as f64 / 2000.0)
}

/// The kernel counts sectors of 512 bytes in diskstats, whatever the device's block size.
const SECTOR_BYTES: f64 = 512.0;
/// diskstats times are milliseconds; node_exporter multiplies by this constant.
const SECONDS_PER_TICK: f64 = 0.001;

/// What is cached per device number: the `device` label set and the `diskprobe_disk_info` label
/// set, for the kernel name they were built for.
struct Cached {
    name: String,
    stale_at: Instant,
    labels: DeviceLabels,
}

/// The label sets of one device (cloning copies two reference counts).
#[derive(Clone)]
struct DeviceLabels {
    device: Labels,
    info: Labels,
}

/// Collects `/proc/diskstats`.
pub struct DiskstatsCollector {
    diskstats_path: PathBuf,
    sysfs_root: PathBuf,
    filter: RwLock<Arc<DeviceFilter>>,
    /// Devices under probe targets: always reported, whatever the filter, so that probe results
    /// can be joined with their device's counters on the `device` label.
    probed: Option<Arc<SeriesStore>>,
    /// Where device nodes are, for NVMe identify data (`None`: sysfs only).
    devfs: Option<PathBuf>,
    cache: Mutex<HashMap<(u32, u32), Cached>>,
}

impl DiskstatsCollector {
    /// A collector reading `<procfs_root>/diskstats` and `<sysfs_root>/dev/block`.
    pub fn new(procfs_root: PathBuf, sysfs_root: PathBuf, filter: DeviceFilter) -> Self {
        DiskstatsCollector {
            diskstats_path: procfs_root.join("diskstats"),
            sysfs_root,
            filter: RwLock::new(Arc::new(filter)),
            probed: None,
            devfs: None,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Also reports the devices (and parent disks) under the targets in `series`, even when
    /// the filter excludes them (e.g. partitions and loop devices under the default filter).
    pub(crate) fn with_probe_targets(mut self, series: Arc<SeriesStore>) -> Self {
        self.probed = Some(series);
        self
    }

    /// Also asks NVMe disks under `devfs` what sysfs does not say of them (a GCP NVMe disk's
    /// device name: [`blockdev::complete_from_nvme`]); needs `CAP_SYS_ADMIN`, else does nothing.
    pub(crate) fn with_devfs(mut self, devfs: PathBuf) -> Self {
        self.devfs = Some(devfs);
        self
    }

    /// Replaces the device filter (configuration reload).
    pub(crate) fn set_filter(&self, filter: DeviceFilter) {
        *self.filter.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(filter);
    }

    fn filter(&self) -> Arc<DeviceFilter> {
        self.filter
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Label sets for each device, from the cache where fresh; evicts devices no longer listed.
    fn label_sets(&self, devices: &[&DiskStats]) -> Vec<DeviceLabels> {
        let now = Instant::now();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let sets: Vec<DeviceLabels> = devices
            .iter()
            .map(|d| match cache.get(&(d.major, d.minor)) {
                Some(c) if c.name == d.name && now < c.stale_at => c.labels.clone(),
                _ => {
                    let mut i =
                        blockdev::by_dev(&self.sysfs_root, d.major, d.minor).unwrap_or_default();
                    if let Some(devfs) = &self.devfs {
                        blockdev::complete_from_nvme(&mut i, devfs);
                    }
                    let labels = DeviceLabels {
                        device: labels(&[("device", &d.name)]),
                        info: info_labels(d, &i),
                    };
                    let cached = Cached {
                        name: d.name.clone(),
                        stale_at: stale_at(now, d.major, d.minor),
                        labels: labels.clone(),
                    };
                    cache.insert((d.major, d.minor), cached);
                    labels
                }
            })
            .collect();
        if cache.len() > devices.len() {
            cache.retain(|(major, minor), _| {
                devices
                    .iter()
                    .any(|d| d.major == *major && d.minor == *minor)
            });
        }
        sets
    }
}

fn info_labels(d: &DiskStats, i: &BlockDevice) -> Labels {
    let (major, minor) = (d.major.to_string(), d.minor.to_string());
    labels(&[
        ("device", &d.name),
        ("major", &major),
        ("minor", &minor),
        ("model", &i.model),
        ("serial", &i.serial),
        ("wwn", &i.wwn),
        ("revision", &i.firmware_rev),
        ("rotational", i.rotational_label()),
        ("logical_block_size", &i.logical_block_size_label()),
        ("dm_name", &i.dm_name),
        ("parent", i.parent.as_deref().unwrap_or("")),
        ("volume_id", &i.cloud.volume_id),
        ("lun", &i.cloud.lun),
        ("cloud", i.cloud.cloud.as_str()),
    ])
}

/// Counter families: (name, HELP, value extractor). `None` values are not exposed.
type Extract = fn(&DiskStats) -> Option<f64>;

const COUNTERS: &[(&str, &str, Extract)] = &[
    (
        "diskprobe_disk_reads_completed_total",
        "The total number of reads completed successfully.",
        |d| Some(d.reads_completed as f64),
    ),
    (
        "diskprobe_disk_reads_merged_total",
        "The total number of reads merged.",
        |d| Some(d.reads_merged as f64),
    ),
    (
        "diskprobe_disk_read_bytes_total",
        "The total number of bytes read successfully.",
        |d| Some(d.sectors_read as f64 * SECTOR_BYTES),
    ),
    (
        "diskprobe_disk_read_time_seconds_total",
        "The total number of seconds spent by all reads.",
        |d| Some(d.read_time_ms as f64 * SECONDS_PER_TICK),
    ),
    (
        "diskprobe_disk_writes_completed_total",
        "The total number of writes completed successfully.",
        |d| Some(d.writes_completed as f64),
    ),
    (
        "diskprobe_disk_writes_merged_total",
        "The number of writes merged.",
        |d| Some(d.writes_merged as f64),
    ),
    (
        "diskprobe_disk_written_bytes_total",
        "The total number of bytes written successfully.",
        |d| Some(d.sectors_written as f64 * SECTOR_BYTES),
    ),
    (
        "diskprobe_disk_write_time_seconds_total",
        "This is the total number of seconds spent by all writes.",
        |d| Some(d.write_time_ms as f64 * SECONDS_PER_TICK),
    ),
    (
        "diskprobe_disk_io_time_seconds_total",
        "Total seconds spent doing I/Os.",
        |d| Some(d.io_time_ms as f64 * SECONDS_PER_TICK),
    ),
    (
        "diskprobe_disk_io_time_weighted_seconds_total",
        "The weighted # of seconds spent doing I/Os.",
        |d| Some(d.io_weighted_time_ms as f64 * SECONDS_PER_TICK),
    ),
    (
        "diskprobe_disk_discards_completed_total",
        "The total number of discards completed successfully.",
        |d| d.discards.map(|x| x.completed as f64),
    ),
    (
        "diskprobe_disk_discards_merged_total",
        "The total number of discards merged.",
        |d| d.discards.map(|x| x.merged as f64),
    ),
    (
        "diskprobe_disk_discarded_bytes_total",
        "The total number of bytes discarded successfully.",
        |d| d.discards.map(|x| x.sectors as f64 * SECTOR_BYTES),
    ),
    (
        "diskprobe_disk_discard_time_seconds_total",
        "This is the total number of seconds spent by all discards.",
        |d| d.discards.map(|x| x.time_ms as f64 * SECONDS_PER_TICK),
    ),
    (
        "diskprobe_disk_flush_requests_total",
        "The total number of flush requests completed successfully.",
        |d| d.flushes.map(|x| x.completed as f64),
    ),
    (
        "diskprobe_disk_flush_requests_time_seconds_total",
        "This is the total number of seconds spent by all flush requests.",
        |d| d.flushes.map(|x| x.time_ms as f64 * SECONDS_PER_TICK),
    ),
];

impl Collector for DiskstatsCollector {
    fn name(&self) -> &'static str {
        "diskstats"
    }

    fn collect(&self, out: &mut Vec<Family>) -> Result<(), CollectError> {
        let text =
            std::fs::read_to_string(&self.diskstats_path).map_err(|source| CollectError::Read {
                path: self.diskstats_path.clone(),
                source,
            })?;
        let parsed = diskstats::parse(&text);
        for skipped in &parsed.skipped {
            tracing::debug!(
                file = %self.diskstats_path.display(),
                line = skipped.line,
                reason = %skipped.reason,
                "skipping diskstats line"
            );
        }
        let filter = self.filter();
        // Devices under probe targets are kept whatever the filter says.
        let devices: Vec<&DiskStats> = match &self.probed {
            Some(series) => series.read(|targets| {
                let probed = |name: &str| {
                    targets
                        .values()
                        .filter_map(|t| t.info.as_ref())
                        .any(|i| i.device_name() == name || i.parent_name() == name)
                };
                parsed
                    .devices
                    .iter()
                    .filter(|d| filter.accepts(&d.name) || probed(&d.name))
                    .collect()
            }),
            None => parsed
                .devices
                .iter()
                .filter(|d| filter.accepts(&d.name))
                .collect(),
        };

        // One shared label set per device, cloned (a reference count) into every family.
        let sets = self.label_sets(&devices);
        for (name, help, extract) in COUNTERS {
            let mut family = Family::counter(name, help);
            family.reserve(devices.len());
            for (d, l) in devices.iter().zip(&sets) {
                if let Some(v) = extract(d) {
                    family.push(&l.device, v);
                }
            }
            family.finish_into(out);
        }
        let mut io_now = Family::gauge(
            "diskprobe_disk_io_now",
            "The number of I/Os currently in progress.",
        );
        io_now.reserve(devices.len());
        for (d, l) in devices.iter().zip(&sets) {
            io_now.push(&l.device, d.io_in_progress as f64);
        }
        io_now.finish_into(out);

        let mut info = Family::gauge(
            "diskprobe_disk_info",
            "Info of the block device from /sys/dev/block/<major>:<minor>; the value is always 1.",
        );
        info.reserve(devices.len());
        for l in &sets {
            info.push(&l.info, 1.0);
        }
        info.finish_into(out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_facts_go_stale_spread_over_half_a_ttl() {
        let now = Instant::now();
        let ages: Vec<Duration> = (0..8u32)
            .flat_map(|major| (0..16u32).map(move |minor| (major, minor)))
            .map(|(major, minor)| stale_at(now, major, minor) - now)
            .collect();
        assert!(ages.iter().all(|a| *a >= INFO_TTL && *a < INFO_TTL * 3 / 2));
        let (min, max) = (ages.iter().min().unwrap(), ages.iter().max().unwrap());
        assert!(*max - *min > INFO_TTL / 3, "{min:?}..{max:?}");
        // Never more than a few of 128 devices in the same second.
        let mut per_second = HashMap::new();
        for a in &ages {
            *per_second.entry(a.as_secs()).or_insert(0) += 1;
        }
        assert!(per_second.values().all(|n| *n <= 12), "{per_second:?}");
    }

    #[test]
    fn every_counter_is_namespaced_and_unique() {
        let mut names: Vec<&str> = COUNTERS.iter().map(|(n, _, _)| *n).collect();
        assert!(
            names
                .iter()
                .all(|n| n.starts_with("diskprobe_disk_") && n.ends_with("_total"))
        );
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COUNTERS.len());
    }
}
