//! `diskprobe_disk_*`: `/proc/diskstats` counters in base units, with node_exporter's names,
//! types and values (`node_disk_*`), plus `diskprobe_disk_info` from sysfs.
//!
//! The file is read and parsed on every scrape, so vanished devices vanish. Static sysfs facts are
//! cached per `(name, major, minor)` for [`INFO_TTL`] because reading seven files per device per
//! scrape would dominate the scrape cost on machines with many devices.

use super::{CollectError, Collector};
use crate::block_info::{self, BlockInfo};
use crate::device_filter::DeviceFilter;
use crate::diskstats::{self, DiskStats};
use crate::exposition::FamilyBuilder;
use prometheus::proto::MetricFamily;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How long sysfs facts about a device are reused before being read again.
pub const INFO_TTL: Duration = Duration::from_secs(60);

/// The kernel counts sectors of 512 bytes in diskstats, whatever the device's block size.
const SECTOR_BYTES: f64 = 512.0;
/// diskstats times are milliseconds; node_exporter multiplies by this constant.
const SECONDS_PER_TICK: f64 = 0.001;

type InfoKey = (String, u32, u32);

/// Collects `/proc/diskstats`.
pub struct DiskstatsCollector {
    diskstats_path: PathBuf,
    sysfs_root: PathBuf,
    filter: RwLock<Arc<DeviceFilter>>,
    info_cache: Mutex<HashMap<InfoKey, (Instant, Arc<BlockInfo>)>>,
}

impl DiskstatsCollector {
    /// A collector reading `<procfs_root>/diskstats` and `<sysfs_root>/dev/block`.
    pub fn new(procfs_root: PathBuf, sysfs_root: PathBuf, filter: DeviceFilter) -> Self {
        DiskstatsCollector {
            diskstats_path: procfs_root.join("diskstats"),
            sysfs_root,
            filter: RwLock::new(Arc::new(filter)),
            info_cache: Mutex::new(HashMap::new()),
        }
    }

    /// Replaces the device filter (configuration reload).
    pub fn set_filter(&self, filter: DeviceFilter) {
        *self.filter.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(filter);
    }

    fn filter(&self) -> Arc<DeviceFilter> {
        self.filter
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sysfs facts for each device, from the cache where fresh; evicts devices no longer listed.
    fn infos(&self, devices: &[&DiskStats]) -> Vec<Arc<BlockInfo>> {
        let now = Instant::now();
        let mut cache = self.info_cache.lock().unwrap_or_else(|e| e.into_inner());
        let infos: Vec<_> = devices
            .iter()
            .map(|d| {
                let key = (d.name.clone(), d.major, d.minor);
                match cache.get(&key) {
                    Some((at, info)) if now.duration_since(*at) < INFO_TTL => info.clone(),
                    _ => {
                        let info = Arc::new(block_info::read(&self.sysfs_root, d.major, d.minor));
                        cache.insert(key, (now, info.clone()));
                        info
                    }
                }
            })
            .collect();
        if cache.len() > devices.len() {
            cache.retain(|(name, major, minor), _| {
                devices
                    .iter()
                    .any(|d| d.major == *major && d.minor == *minor && &d.name == name)
            });
        }
        infos
    }
}

/// Counter families: (name suffix, HELP, value extractor). `None` values are not exposed.
type Extract = fn(&DiskStats) -> Option<f64>;

const COUNTERS: &[(&str, &str, Extract)] = &[
    (
        "reads_completed_total",
        "The total number of reads completed successfully.",
        |d| Some(d.reads_completed as f64),
    ),
    (
        "reads_merged_total",
        "The total number of reads merged.",
        |d| Some(d.reads_merged as f64),
    ),
    (
        "read_bytes_total",
        "The total number of bytes read successfully.",
        |d| Some(d.sectors_read as f64 * SECTOR_BYTES),
    ),
    (
        "read_time_seconds_total",
        "The total number of seconds spent by all reads.",
        |d| Some(d.read_time_ms as f64 * SECONDS_PER_TICK),
    ),
    (
        "writes_completed_total",
        "The total number of writes completed successfully.",
        |d| Some(d.writes_completed as f64),
    ),
    ("writes_merged_total", "The number of writes merged.", |d| {
        Some(d.writes_merged as f64)
    }),
    (
        "written_bytes_total",
        "The total number of bytes written successfully.",
        |d| Some(d.sectors_written as f64 * SECTOR_BYTES),
    ),
    (
        "write_time_seconds_total",
        "This is the total number of seconds spent by all writes.",
        |d| Some(d.write_time_ms as f64 * SECONDS_PER_TICK),
    ),
    (
        "io_time_seconds_total",
        "Total seconds spent doing I/Os.",
        |d| Some(d.io_time_ms as f64 * SECONDS_PER_TICK),
    ),
    (
        "io_time_weighted_seconds_total",
        "The weighted # of seconds spent doing I/Os.",
        |d| Some(d.io_weighted_time_ms as f64 * SECONDS_PER_TICK),
    ),
    (
        "discards_completed_total",
        "The total number of discards completed successfully.",
        |d| d.discards.map(|x| x.completed as f64),
    ),
    (
        "discards_merged_total",
        "The total number of discards merged.",
        |d| d.discards.map(|x| x.merged as f64),
    ),
    (
        "discarded_bytes_total",
        "The total number of bytes discarded successfully.",
        |d| d.discards.map(|x| x.sectors as f64 * SECTOR_BYTES),
    ),
    (
        "discard_time_seconds_total",
        "This is the total number of seconds spent by all discards.",
        |d| d.discards.map(|x| x.time_ms as f64 * SECONDS_PER_TICK),
    ),
    (
        "flush_requests_total",
        "The total number of flush requests completed successfully.",
        |d| d.flushes.map(|x| x.completed as f64),
    ),
    (
        "flush_requests_time_seconds_total",
        "This is the total number of seconds spent by all flush requests.",
        |d| d.flushes.map(|x| x.time_ms as f64 * SECONDS_PER_TICK),
    ),
];

impl Collector for DiskstatsCollector {
    fn name(&self) -> &'static str {
        "diskstats"
    }

    fn collect(&self, out: &mut Vec<MetricFamily>) -> Result<(), CollectError> {
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
        let devices: Vec<&DiskStats> = parsed
            .devices
            .iter()
            .filter(|d| filter.accepts(&d.name))
            .collect();

        for (suffix, help, extract) in COUNTERS {
            let mut family = FamilyBuilder::counter(&format!("diskprobe_disk_{suffix}"), help);
            for d in &devices {
                if let Some(v) = extract(d) {
                    family.sample(&[("device", &d.name)], v);
                }
            }
            family.finish_into(out);
        }
        let mut io_now = FamilyBuilder::gauge(
            "diskprobe_disk_io_now",
            "The number of I/Os currently in progress.",
        );
        for d in &devices {
            io_now.sample(&[("device", &d.name)], d.io_in_progress as f64);
        }
        io_now.finish_into(out);

        let mut info = FamilyBuilder::gauge(
            "diskprobe_disk_info",
            "Info of the block device from /sys/dev/block/<major>:<minor>; the value is always 1.",
        );
        for (d, i) in devices.iter().zip(self.infos(&devices)) {
            let (major, minor) = (d.major.to_string(), d.minor.to_string());
            info.sample(
                &[
                    ("device", &d.name),
                    ("major", &major),
                    ("minor", &minor),
                    ("model", &i.model),
                    ("serial", &i.serial),
                    ("wwn", &i.wwn),
                    ("revision", &i.revision),
                    ("rotational", &i.rotational),
                    ("logical_block_size", &i.logical_block_size),
                    ("dm_name", &i.dm_name),
                    ("parent", &i.parent),
                ],
                1.0,
            );
        }
        info.finish_into(out);
        Ok(())
    }
}
