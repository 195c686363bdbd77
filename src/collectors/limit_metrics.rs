//! `diskprobe_disk_limit_iops`, `diskprobe_disk_limit_bytes_per_second`,
//! `diskprobe_target_disk_info`, `diskprobe_node_limit_iops`,
//! `diskprobe_node_limit_bytes_per_second` and `diskprobe_node_limit_device_info`: the limits disks
//! are sold with, as configured, and what the headroom rules need beside diskstats to count how
//! much of them is in use.
//!
//! A limit is a whole disk's: a target on a partition or on a device-mapper or RAID volume gives
//! its limits to the disks under it ([`crate::blockdev`]'s one rule, found when the target was last
//! looked at: [`crate::series::TargetInfo::disks`]), each labelled with its kernel name
//! (`device`, as in `diskprobe_disk_*`), serial number and WWN. When several targets give one disk
//! a limit, the smallest counts. `diskprobe_target_disk_info` says which disks each target's probe
//! I/O lands on, so that rules can subtract the probes' own I/O (`diskprobe_ios_total`, per
//! target) from the disk's diskstats; `diskprobe_node_limit_device_info` says which disks a
//! node-level `[limits]` ceiling covers (a regex in the configuration, which PromQL could not
//! apply to a metric).
//!
//! Targets come from the [`SeriesStore`] (their configuration and the device their last stat
//! found), read on every scrape; what sysfs says about a device is kept for [`SYSFS_TTL`].

use super::{CollectError, Collector};
use crate::blockdev::{self, BlockDevice};
use crate::config::{DiskLimits, NodeLimits};
use crate::exposition::{Family, labels};
use crate::series::SeriesStore;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How long what sysfs says about a disk (its serial and WWN) is
/// reused before it is read again.
pub(crate) const SYSFS_TTL: Duration = Duration::from_secs(60);

/// The `source` label of limits from the configuration.
const CONFIG: &str = "config";

/// What sysfs said, and until when it is believed.
#[derive(Default)]
struct SysfsCache {
    /// Disk name → what sysfs says about it.
    identity: HashMap<String, (Instant, BlockDevice)>,
}

impl SysfsCache {
    fn identify(&mut self, sysfs: &std::path::Path, name: &str, now: Instant) -> BlockDevice {
        match self.identity.get(name) {
            Some((until, disk)) if now < *until => disk.clone(),
            _ => {
                let disk = blockdev::by_name(sysfs, name).unwrap_or_else(|| BlockDevice {
                    kname: name.to_owned(),
                    ..BlockDevice::default()
                });
                self.identity
                    .insert(name.to_owned(), (now + SYSFS_TTL, disk.clone()));
                disk
            }
        }
    }

    /// Forgets what went stale (devices that left keep no entry for long).
    fn evict(&mut self, now: Instant) {
        self.identity.retain(|_, (until, _)| now < *until);
    }
}

/// Publishes the limits of disks and of the node.
pub struct LimitsCollector {
    results: Arc<SeriesStore>,
    sysfs: PathBuf,
    node: RwLock<Option<Arc<NodeLimits>>>,
    cache: Mutex<SysfsCache>,
}

impl LimitsCollector {
    /// A collector for the targets in `results` and the node ceiling `node`, reading sysfs under
    /// `sysfs_root`.
    pub fn new(results: Arc<SeriesStore>, sysfs_root: PathBuf, node: Option<NodeLimits>) -> Self {
        LimitsCollector {
            results,
            sysfs: sysfs_root,
            node: RwLock::new(node.map(Arc::new)),
            cache: Mutex::new(SysfsCache::default()),
        }
    }

    /// Replaces the node ceiling (configuration reload).
    pub(crate) fn set_node_limits(&self, node: Option<NodeLimits>) {
        *self.node.write().unwrap_or_else(|e| e.into_inner()) = node.map(Arc::new);
    }

    fn node_limits(&self) -> Option<Arc<NodeLimits>> {
        self.node.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The node-level ceiling (`[limits]`) and the disks it covers.
    fn node_families(&self, cache: &mut SysfsCache, now: Instant) -> [Family; 3] {
        let mut node_iops = Family::gauge(
            "diskprobe_node_limit_iops",
            "I/Os per second the disks of diskprobe_node_limit_device_info may do together ([limits] iops_limit; source config): a VM's ceiling across its disks.",
        );
        let mut node_bytes = Family::gauge(
            "diskprobe_node_limit_bytes_per_second",
            "Bytes per second the disks of diskprobe_node_limit_device_info may move together ([limits] throughput_limit; source config).",
        );
        let mut node_devices = Family::gauge(
            "diskprobe_node_limit_device_info",
            "1 per whole disk that the node-level [limits] ceiling covers (its kernel name matches [limits] devices).",
        );
        if let Some(node) = self.node_limits() {
            let source = labels(&[("source", CONFIG)]);
            if let Some(iops) = node.limits.iops {
                node_iops.push(&source, iops as f64);
            }
            if let Some(bytes) = node.limits.bytes_per_second {
                node_bytes.push(&source, bytes as f64);
            }
            for name in blockdev::disk_names(&self.sysfs) {
                if node.devices.is_match(&name) {
                    let disk = cache.identify(&self.sysfs, &name, now);
                    push_disk(&mut node_devices, &disk, &[], 1.0);
                }
            }
        }
        [node_iops, node_bytes, node_devices]
    }
}

/// The smaller of two optional limits (either when the other is absent).
fn smaller(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Pushes `disk`'s labels and `value` (with `extra` labels after them) into `family`.
fn push_disk(family: &mut Family, disk: &BlockDevice, extra: &[(&'static str, &str)], value: f64) {
    let mut pairs = vec![
        ("device", disk.kname.as_str()),
        ("serial", disk.serial.as_str()),
        ("wwn", disk.wwn.as_str()),
    ];
    pairs.extend_from_slice(extra);
    family.push(&labels(&pairs), value);
}

impl Collector for LimitsCollector {
    fn name(&self) -> &'static str {
        "limits"
    }

    fn collect(&self, out: &mut Vec<Family>) -> Result<(), CollectError> {
        let mut disk_iops = Family::gauge(
            "diskprobe_disk_limit_iops",
            "I/Os per second the disk is sold with (its cap; reads and writes together), from iops_limit of the targets on it (source config); device, serial and wwn name the whole disk.",
        );
        let mut disk_bytes = Family::gauge(
            "diskprobe_disk_limit_bytes_per_second",
            "Bytes per second the disk is sold with (read and written together), from throughput_limit of the targets on it (source config); device, serial and wwn name the whole disk.",
        );
        let mut target_disk = Family::gauge(
            "diskprobe_target_disk_info",
            "1 per target and whole disk its probe I/O lands on (the target's disk, a partition's disk, each disk under a device-mapper or RAID volume): the disk whose diskstats and limits the target's I/O counts against; device, serial, wwn and volume_id as in diskprobe_disk_info.",
        );
        // Copied out of the store so that sysfs is read without holding its lock.
        let targets: Vec<(String, Vec<String>, DiskLimits)> = self.results.read(|targets| {
            targets
                .iter()
                .filter_map(|(name, t)| {
                    let disks = t.info.as_ref()?.disks();
                    (!disks.is_empty())
                        .then(|| (name.clone(), disks.to_vec(), t.spec.settings.limits))
                })
                .collect()
        });
        let now = Instant::now();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.evict(now);
        let mut limited: BTreeMap<String, (BlockDevice, DiskLimits)> = BTreeMap::new();
        for (target, disks, limits) in &targets {
            for name in disks {
                let disk = cache.identify(&self.sysfs, name, now);
                let volume = disk.cloud.volume_id.as_str();
                push_disk(
                    &mut target_disk,
                    &disk,
                    &[("volume_id", volume), ("target", target)],
                    1.0,
                );
                if !limits.is_empty() {
                    let (_, l) = limited
                        .entry(name.clone())
                        .or_insert_with(|| (disk, DiskLimits::default()));
                    l.iops = smaller(l.iops, limits.iops);
                    l.bytes_per_second = smaller(l.bytes_per_second, limits.bytes_per_second);
                }
            }
        }
        for (disk, l) in limited.values() {
            if let Some(iops) = l.iops {
                push_disk(&mut disk_iops, disk, &[("source", CONFIG)], iops as f64);
            }
            if let Some(bytes) = l.bytes_per_second {
                push_disk(&mut disk_bytes, disk, &[("source", CONFIG)], bytes as f64);
            }
        }
        let [node_iops, node_bytes, node_devices] = self.node_families(&mut cache, now);
        drop(cache);
        for family in [
            disk_iops,
            disk_bytes,
            target_disk,
            node_iops,
            node_bytes,
            node_devices,
        ] {
            family.finish_into(out);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::exposition::{Format, encode};
    use crate::series::TargetInfo;
    use std::path::Path;

    /// The exposition of a collector over `blockdev::sysfs::tests::tree()` for configuration
    /// `toml`, whose targets are found at the devices `at` (target name, device), as a stat finds
    /// them.
    fn scrape(toml: &str, at: &[(&str, &str)]) -> String {
        let tree = crate::blockdev::sysfs::tests::tree();
        let config = Config::from_toml(toml, Path::new("t.toml")).unwrap();
        let store = Arc::new(SeriesStore::new());
        let specs: Vec<_> = config.targets.iter().cloned().map(Arc::new).collect();
        store.set_targets(&specs);
        for (name, device) in at {
            let spec = specs.iter().find(|s| s.name == *name).unwrap();
            store.set_info(
                spec,
                TargetInfo {
                    device: blockdev::by_name(tree.path(), device),
                    ..TargetInfo::default()
                },
            );
        }
        let c = LimitsCollector::new(store, tree.path().to_owned(), config.node_limits);
        let mut out = Vec::new();
        c.collect(&mut out).unwrap();
        String::from_utf8(encode(&out, Format::Text)).unwrap()
    }

    fn samples(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn a_limit_is_the_whole_disks_and_the_smallest_declared_counts() {
        let text = scrape(
            "[[targets]]\nname = \"part\"\npath = \"/dev/sda1\"\niops_limit = 5000\n\
             [[targets]]\nname = \"vol\"\npath = \"/dev/dm-0\"\niops_limit = 3000\nthroughput_limit = \"125MB/s\"\n\
             [[targets]]\nname = \"plain\"\npath = \"/srv/x\"\n\
             [[targets]]\nname = \"tmp\"\npath = \"/dev/shm/x\"\niops_limit = 7\n",
            &[
                ("part", "sda1"),
                ("vol", "dm-0"),
                ("plain", "vdb"),
                ("tmp", ""),
            ],
        );
        assert_eq!(
            samples(&text),
            [
                r#"diskprobe_disk_limit_iops{device="sda",serial="S1",wwn="W1",source="config"} 3000"#,
                r#"diskprobe_disk_limit_iops{device="vdb",serial="V2",wwn="",source="config"} 3000"#,
                r#"diskprobe_disk_limit_bytes_per_second{device="sda",serial="S1",wwn="W1",source="config"} 125000000"#,
                r#"diskprobe_disk_limit_bytes_per_second{device="vdb",serial="V2",wwn="",source="config"} 125000000"#,
                r#"diskprobe_target_disk_info{device="sda",serial="S1",wwn="W1",volume_id="",target="part"} 1"#,
                r#"diskprobe_target_disk_info{device="vdb",serial="V2",wwn="",volume_id="V2",target="plain"} 1"#,
                r#"diskprobe_target_disk_info{device="sda",serial="S1",wwn="W1",volume_id="",target="vol"} 1"#,
                r#"diskprobe_target_disk_info{device="vdb",serial="V2",wwn="",volume_id="V2",target="vol"} 1"#,
            ],
            "{text}"
        );
    }

    #[test]
    fn a_node_ceiling_lists_the_disks_it_covers() {
        let text = scrape(
            "[limits]\ndevices = \"^(sd|vd)[a-z]$\"\nthroughput_limit = \"192MiB/s\"\n",
            &[],
        );
        assert_eq!(
            samples(&text),
            [
                r#"diskprobe_node_limit_bytes_per_second{source="config"} 201326592"#,
                r#"diskprobe_node_limit_device_info{device="sda",serial="S1",wwn="W1"} 1"#,
                r#"diskprobe_node_limit_device_info{device="vdb",serial="V2",wwn=""} 1"#,
            ],
            "{text}"
        );
        // Nothing configured, nothing probed: no series at all.
        assert_eq!(scrape("", &[]), "");
    }

    #[test]
    fn a_reload_replaces_the_node_ceiling() {
        let tree = crate::blockdev::sysfs::tests::tree();
        let c = LimitsCollector::new(Arc::new(SeriesStore::new()), tree.path().to_owned(), None);
        let count = |c: &LimitsCollector| {
            let mut out = Vec::new();
            c.collect(&mut out).unwrap();
            out.iter().map(|f| f.samples.len()).sum::<usize>()
        };
        assert_eq!(count(&c), 0);
        let config = Config::from_toml(
            "[limits]\ndevices = \"^sda$\"\niops_limit = 100\n",
            Path::new("t.toml"),
        )
        .unwrap();
        c.set_node_limits(config.node_limits);
        assert_eq!(count(&c), 2);
        c.set_node_limits(None);
        assert_eq!(count(&c), 0);
    }
}
