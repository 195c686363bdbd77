//! `diskprobe_cloud_*`: what EC2 says about its NVMe disks (log page 0xD0 of EBS volumes and
//! instance-store devices, [`crate::cloud_stats`]), beside the probes, when `[cloud_stats]`
//! enables it.
//!
//! Every series carries `device` (the kernel name, as `diskprobe_disk_*`), `serial` and
//! `volume_id` (EBS `vol-…`; empty for instance store, which `serial` identifies): rules join
//! them with the probes' series by `serial` or `volume_id`, never by `device`.
//!
//! A device's page is read at most once per [`MIN_INTERVAL`] (AWS's advice) and once per
//! scrape; scrapes within that interval get the last reading again. The list of devices comes
//! from sysfs and is kept for [`DEVICES_TTL`]. A device whose page cannot be had exports
//! `diskprobe_cloud_stats_success` 0 and `diskprobe_cloud_stats_failure_info` with the reason,
//! and is logged once per reason, never per scrape; the scrape itself never fails.

use super::{CollectError, Collector};
use crate::blockdev::{self, BlockDevice};
use crate::cloud_stats::{Failure, LogPage, Pages, Source, page::PageHistogram};
use crate::config::CloudStatsConfig;
use crate::exposition::{Family, Labels, Value, labels};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

/// A device's page is read at most this often.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// How long the list of EBS and instance-store devices is kept before sysfs is read again.
pub(crate) const DEVICES_TTL: Duration = Duration::from_secs(60);

/// The last reading of one device.
struct Reading {
    at: Instant,
    result: Result<LogPage, Failure>,
}

#[derive(Default)]
struct State {
    /// The devices that have pages, and when the list was made.
    devices: Option<(Instant, Vec<(BlockDevice, Source)>)>,
    /// Kernel name → last reading.
    readings: HashMap<String, Reading>,
    /// (kernel name, reason) already logged.
    logged: HashSet<(String, &'static str)>,
}

/// Reads and exports the pages of the machine's EBS and instance-store devices.
pub(crate) struct CloudStatsCollector {
    sysfs: PathBuf,
    pages: Pages,
    settings: RwLock<CloudStatsConfig>,
    state: Mutex<State>,
}

impl CloudStatsCollector {
    /// A collector finding devices under `sysfs` and reading their pages from `pages`.
    pub(crate) fn new(sysfs: PathBuf, pages: Pages, settings: CloudStatsConfig) -> Self {
        CloudStatsCollector {
            sysfs,
            pages,
            settings: RwLock::new(settings),
            state: Mutex::new(State::default()),
        }
    }

    /// Replaces the settings (configuration reload).
    pub(crate) fn set_settings(&self, settings: CloudStatsConfig) {
        *self.settings.write().unwrap_or_else(|e| e.into_inner()) = settings;
    }

    fn settings(&self) -> CloudStatsConfig {
        *self.settings.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The devices with pages, from sysfs when the list is older than [`DEVICES_TTL`].
    fn devices(&self, state: &mut State, now: Instant) -> Vec<(BlockDevice, Source)> {
        if let Some((at, list)) = &state.devices
            && now.duration_since(*at) < DEVICES_TTL
        {
            return list.clone();
        }
        let list: Vec<(BlockDevice, Source)> = match blockdev::all(&self.sysfs) {
            Ok(all) => all
                .into_iter()
                .filter_map(|d| crate::cloud_stats::source_of(&d).map(|s| (d, s)))
                .collect(),
            Err(err) => {
                tracing::debug!(sysfs = %self.sysfs.display(), %err, "no block devices for cloud statistics");
                Vec::new()
            }
        };
        state.devices = Some((now, list.clone()));
        list
    }
}

/// The metric families of one scrape.
struct Families {
    success: Family,
    failure: Family,
    info: Family,
    reads: Family,
    writes: Family,
    read_bytes: Family,
    written_bytes: Family,
    read_time: Family,
    write_time: Family,
    exceeded: Family,
    queue: Family,
    latency: Family,
    by_size: Family,
}

impl Families {
    fn new() -> Self {
        Families {
            success: Family::gauge(
                "diskprobe_cloud_stats_success",
                "1 when the last read of the device's EC2 NVMe performance statistics (log page 0xD0) succeeded, else 0 (diskprobe_cloud_stats_failure_info says why); per EBS volume and instance-store device.",
            ),
            failure: Family::gauge(
                "diskprobe_cloud_stats_failure_info",
                "1 per device whose log page 0xD0 could not be had, with the reason: no_cap_sys_admin, capget_failed, open_failed, wrong_device, eacces, eperm, einval, enotty, nvme_status, ioctl_failed, short_page, unknown_magic, unknown_version, malformed_page.",
            ),
            info: Family::gauge(
                "diskprobe_cloud_stats_info",
                "1 per device whose log page 0xD0 was read: source (ebs, instance_store) and the page's version.",
            ),
            reads: Family::counter(
                "diskprobe_cloud_reads_completed_total",
                "Reads the cloud completed for the device, as its log page 0xD0 counts them.",
            ),
            writes: Family::counter(
                "diskprobe_cloud_writes_completed_total",
                "Writes the cloud completed for the device (log page 0xD0).",
            ),
            read_bytes: Family::counter(
                "diskprobe_cloud_read_bytes_total",
                "Bytes the cloud read for the device (log page 0xD0).",
            ),
            written_bytes: Family::counter(
                "diskprobe_cloud_written_bytes_total",
                "Bytes the cloud wrote for the device (log page 0xD0).",
            ),
            read_time: Family::counter(
                "diskprobe_cloud_read_time_seconds_total",
                "Seconds spent by all reads the cloud completed for the device (log page 0xD0).",
            ),
            write_time: Family::counter(
                "diskprobe_cloud_write_time_seconds_total",
                "Seconds spent by all writes the cloud completed for the device (log page 0xD0).",
            ),
            exceeded: Family::counter(
                "diskprobe_cloud_limit_exceeded_seconds_total",
                "Seconds the demand on the device exceeded a limit (log page 0xD0): scope volume (the EBS volume's provisioned IOPS or throughput) or instance (the EC2 instance's EBS, or instance-store, limit); limit iops or throughput.",
            ),
            queue: Family::gauge(
                "diskprobe_cloud_queue_length",
                "I/Os waiting on the device now, as the cloud counts them (log page 0xD0).",
            ),
            latency: Family::histogram(
                "diskprobe_cloud_io_latency_seconds",
                "Latency of the device's I/Os as the cloud measures them (log page 0xD0's histograms, its bounds in seconds), op read or write; _sum is the page's total read or write time.",
            ),
            by_size: Family::histogram(
                "diskprobe_cloud_io_latency_by_size_seconds",
                "Instance store's I/O latency per range of I/O sizes (log page 0xD0, [cloud_stats] size_histograms): io_size_le is the range's upper bound in bytes (+Inf: none), each range starts above the previous; _sum is 0 (the page has none).",
            ),
        }
    }

    fn finish_into(self, out: &mut Vec<Family>) {
        for f in [
            self.success,
            self.failure,
            self.info,
            self.reads,
            self.writes,
            self.read_bytes,
            self.written_bytes,
            self.read_time,
            self.write_time,
            self.exceeded,
            self.queue,
            self.latency,
            self.by_size,
        ] {
            f.finish_into(out);
        }
    }

    /// The series of one device's page.
    fn push_page(&mut self, id: &[(&'static str, &str)], page: &LogPage, by_size: bool) {
        let base = labels(id);
        let version = page.version.to_string();
        self.info.push(
            &with(
                id,
                &[("source", page.source.as_str()), ("version", &version)],
            ),
            1.0,
        );
        self.reads.push(&base, page.read_ops as f64);
        self.writes.push(&base, page.write_ops as f64);
        self.read_bytes.push(&base, page.read_bytes as f64);
        self.written_bytes.push(&base, page.write_bytes as f64);
        self.read_time.push(&base, seconds(page.read_time_us));
        self.write_time.push(&base, seconds(page.write_time_us));
        let mut limits = vec![
            ("instance", "iops", page.instance_exceeded_iops_us),
            (
                "instance",
                "throughput",
                page.instance_exceeded_throughput_us,
            ),
        ];
        if page.source == Source::Ebs {
            limits.splice(
                0..0,
                [
                    ("volume", "iops", page.volume_exceeded_iops_us),
                    ("volume", "throughput", page.volume_exceeded_throughput_us),
                ],
            );
        }
        for (scope, limit, us) in limits {
            self.exceeded.push(
                &with(id, &[("scope", scope), ("limit", limit)]),
                seconds(us),
            );
        }
        self.queue.push(&base, page.queue_length as f64);
        for (op, h, total_us) in [
            ("read", &page.read_latency, page.read_time_us),
            ("write", &page.write_latency, page.write_time_us),
        ] {
            self.latency
                .push_value(&with(id, &[("op", op)]), histogram(h, seconds(total_us)));
        }
        if by_size {
            for range in &page.by_size {
                let le = match range.up_to_bytes {
                    u32::MAX => "+Inf".to_owned(),
                    n => n.to_string(),
                };
                for (op, h) in [("read", &range.read), ("write", &range.write)] {
                    self.by_size.push_value(
                        &with(id, &[("op", op), ("io_size_le", &le)]),
                        histogram(h, 0.0),
                    );
                }
            }
        }
    }
}

fn seconds(us: u64) -> f64 {
    us as f64 / 1e6
}

fn with(id: &[(&'static str, &str)], extra: &[(&'static str, &str)]) -> Labels {
    let mut pairs = id.to_vec();
    pairs.extend_from_slice(extra);
    labels(&pairs)
}

fn histogram(h: &PageHistogram, sum: f64) -> Value {
    Value::Histogram {
        buckets: h.cumulative_seconds(),
        sum,
        count: h.count(),
        native: None,
    }
}

impl Collector for CloudStatsCollector {
    fn name(&self) -> &'static str {
        "cloud_stats"
    }

    fn collect(&self, out: &mut Vec<Family>) -> Result<(), CollectError> {
        let settings = self.settings();
        if !settings.enabled {
            return Ok(());
        }
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let devices = self.devices(&mut state, now);
        let present: HashSet<&str> = devices.iter().map(|(d, _)| d.kname.as_str()).collect();
        state.readings.retain(|k, _| present.contains(k.as_str()));
        state.logged.retain(|(k, _)| present.contains(k.as_str()));
        let mut families = Families::new();
        for (device, source) in &devices {
            let fresh = state
                .readings
                .get(&device.kname)
                .is_some_and(|r| now.duration_since(r.at) < MIN_INTERVAL);
            if !fresh {
                let result = self.pages.read_page(device, *source);
                if let Err(failure) = &result
                    && state.logged.insert((device.kname.clone(), failure.reason))
                {
                    tracing::warn!(device = %device.kname, volume_id = %device.cloud.volume_id, reason = failure.reason, err = %failure.detail, "no cloud statistics for the device (logged once per reason)");
                }
                state
                    .readings
                    .insert(device.kname.clone(), Reading { at: now, result });
            }
            let id = [
                ("device", device.kname.as_str()),
                ("serial", device.serial.as_str()),
                ("volume_id", device.cloud.volume_id.as_str()),
            ];
            match &state.readings[&device.kname].result {
                Ok(page) => {
                    families.success.push(&labels(&id), 1.0);
                    families.push_page(&id, page, settings.size_histograms);
                }
                Err(failure) => {
                    families.success.push(&labels(&id), 0.0);
                    families
                        .failure
                        .push(&with(&id, &[("reason", failure.reason)]), 1.0);
                }
            }
        }
        drop(state);
        families.finish_into(out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud_stats::page::{self, tests::page as make_page};
    use crate::exposition::{Format, encode};

    /// The aws-ebs fixture tree (nvme1n1, an EBS volume; nvme1n1p1 its partition).
    fn ebs_tree() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/blockdev/aws-ebs/sys")
    }

    fn scrape(c: &CloudStatsCollector) -> String {
        let mut out = Vec::new();
        c.collect(&mut out).unwrap();
        String::from_utf8(encode(&out, Format::Text)).unwrap()
    }

    fn enabled() -> CloudStatsConfig {
        CloudStatsConfig {
            enabled: true,
            size_histograms: false,
        }
    }

    #[test]
    fn a_page_becomes_series_in_base_units_and_is_read_once_a_second() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("nvme1n1"),
            make_page(page::MAGIC_EBS, 0, 4096),
        )
        .unwrap();
        let c = CloudStatsCollector::new(
            ebs_tree(),
            Pages::Files {
                dir: dir.path().to_owned(),
            },
            enabled(),
        );
        let text = scrape(&c);
        let id =
            r#"device="nvme1n1",serial="vol0123456789abcdef0",volume_id="vol-0123456789abcdef0""#;
        for line in [
            format!("diskprobe_cloud_stats_success{{{id}}} 1"),
            format!("diskprobe_cloud_read_time_seconds_total{{{id}}} 1.5"),
            format!(
                r#"diskprobe_cloud_limit_exceeded_seconds_total{{{id},scope="volume",limit="iops"}} 3"#
            ),
            format!(
                r#"diskprobe_cloud_limit_exceeded_seconds_total{{{id},scope="instance",limit="iops"}} 0.25"#
            ),
            format!(r#"diskprobe_cloud_io_latency_seconds_bucket{{{id},op="write",le="0.001"}} 3"#),
            format!(r#"diskprobe_cloud_io_latency_seconds_sum{{{id},op="write"}} 2.5"#),
            format!("diskprobe_cloud_queue_length{{{id}}} 7"),
        ] {
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
        // The partition has no series of its own.
        assert!(!text.contains("nvme1n1p1"), "{text}");
        // Within a second the page is not read again: a broken file changes nothing yet.
        std::fs::write(dir.path().join("nvme1n1"), b"short").unwrap();
        assert_eq!(scrape(&c), text);
        // Disabled: nothing at all.
        c.set_settings(CloudStatsConfig::default());
        assert_eq!(scrape(&c), "");
    }

    #[test]
    fn a_failure_is_a_reason_and_not_a_failed_scrape() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("nvme1n1"), make_page(0x1234, 0, 4096)).unwrap();
        let c = CloudStatsCollector::new(
            ebs_tree(),
            Pages::Files {
                dir: dir.path().to_owned(),
            },
            enabled(),
        );
        let text = scrape(&c);
        assert!(text.contains(r#"diskprobe_cloud_stats_failure_info{device="nvme1n1",serial="vol0123456789abcdef0",volume_id="vol-0123456789abcdef0",reason="unknown_magic"} 1"#), "{text}");
        assert!(text.contains("diskprobe_cloud_stats_success{device=\"nvme1n1\",serial=\"vol0123456789abcdef0\",volume_id=\"vol-0123456789abcdef0\"} 0"), "{text}");
        assert!(
            !text.contains("diskprobe_cloud_reads_completed_total"),
            "{text}"
        );
        let state = c.state.lock().unwrap();
        assert!(
            state
                .logged
                .contains(&("nvme1n1".to_owned(), "unknown_magic"))
        );
    }
}
