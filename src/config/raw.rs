//! The configuration file as written: serde structs that mirror the TOML one to one.
//!
//! Unknown keys are rejected (`deny_unknown_fields`); values that need checking beyond their TOML
//! type keep their source span ([`Spanned`]) so that [`super::validate`] can point at them.

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;
use toml::Spanned;

/// The whole file. Every section is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `[web]`.
    #[serde(default)]
    pub web: RawWeb,
    /// `[diskstats]`.
    #[serde(default)]
    pub diskstats: RawDiskstats,
    /// `[defaults]`.
    #[serde(default)]
    pub defaults: RawDefaults,
    /// `[scheduler]`.
    #[serde(default)]
    pub scheduler: RawScheduler,
    /// `[[targets]]`.
    #[serde(default)]
    pub targets: Vec<Spanned<RawTarget>>,
    /// `[profiles.NAME]`.
    #[serde(default)]
    pub profiles: BTreeMap<Spanned<String>, Spanned<RawProfile>>,
    /// `[[discover]]`.
    #[serde(default)]
    pub discover: Vec<Spanned<RawDiscover>>,
    /// `[histograms]`.
    #[serde(default)]
    pub histograms: RawHistograms,
}

/// `[histograms]`: how latency histograms are bucketed.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHistograms {
    /// `"coarse"`, `"fine"` or a list of upper bounds in seconds.
    pub classic_buckets: Option<Spanned<toml::Value>>,
}

/// `[web]`: where and how `/metrics` is served.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWeb {
    /// `listen_address = ":9957"`.
    pub listen_address: Option<Spanned<String>>,
    /// `telemetry_path = "/metrics"`.
    pub telemetry_path: Option<Spanned<String>>,
}

/// `[diskstats]`: which devices the diskstats collector reports.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDiskstats {
    /// Regex of device names to report (exclusive with `device_exclude`).
    pub device_include: Option<Spanned<String>>,
    /// Regex of device names not to report.
    pub device_exclude: Option<Spanned<String>>,
}

/// `[defaults]`: what every target inherits unless it overrides it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDefaults {
    /// Time between the starts of a target's probe cycles.
    pub interval: Option<Spanned<String>>,
    /// Runtime of each profile run.
    pub runtime: Option<Spanned<String>>,
    /// Hard limit of each profile run.
    pub timeout: Option<Spanned<String>>,
    /// Probe file size / device region length.
    pub size: Option<Spanned<String>>,
    /// `auto`, `io_uring` or `psync`.
    pub engine: Option<Spanned<String>>,
    /// Profiles of targets that list none.
    pub profiles: Option<Spanned<Vec<Spanned<String>>>>,
    /// Fraction of the interval by which cycle starts are randomly shifted.
    pub jitter: Option<Spanned<f64>>,
    /// Largest fraction of wall time probes may occupy a device.
    pub max_duty_cycle: Option<Spanned<f64>>,
    /// Skip a capacity profile's run when the disk is busier than this.
    pub skip_busy_above: Option<Spanned<RawBusyLimits>>,
    /// How long the disk's load is measured before a capacity profile's run.
    pub busy_window: Option<Spanned<String>>,
    /// Capacity profiles' runs stop early when another process's I/O shows up on the disk.
    pub yield_to_other_io: Option<Spanned<bool>>,
}

/// `[scheduler]`: limits across all targets.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScheduler {
    /// Probe runs allowed at the same time across all devices.
    pub max_concurrent_probes: Option<Spanned<i64>>,
}

/// One `[[targets]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTarget {
    /// The `target` label.
    pub name: Spanned<String>,
    /// File or block device.
    pub path: Spanned<String>,
    /// Probe file size / device region length.
    pub size: Option<Spanned<String>>,
    /// Block devices: first byte of the probe region.
    pub offset: Option<Spanned<String>>,
    /// Profile names.
    pub profiles: Option<Spanned<Vec<Spanned<String>>>>,
    /// Overrides `[defaults]`.
    pub interval: Option<Spanned<String>>,
    /// Overrides `[defaults]`.
    pub runtime: Option<Spanned<String>>,
    /// Overrides `[defaults]`.
    pub timeout: Option<Spanned<String>>,
    /// Overrides `[defaults]`.
    pub engine: Option<Spanned<String>>,
    /// Overrides `[defaults]`.
    pub jitter: Option<Spanned<f64>>,
    /// Overrides `[defaults]`.
    pub max_duty_cycle: Option<Spanned<f64>>,
    /// Overrides `[defaults]`.
    pub skip_busy_above: Option<Spanned<RawBusyLimits>>,
    /// Overrides `[defaults]`.
    pub busy_window: Option<Spanned<String>>,
    /// Overrides `[defaults]`.
    pub yield_to_other_io: Option<Spanned<bool>>,
    /// Write profiles are allowed on this target's probe file.
    pub allow_writes: Option<Spanned<bool>>,
    /// Write profiles are allowed on this block device (also needs `allow_writes`).
    pub allow_device_writes: Option<Spanned<bool>>,
}

/// One `[profiles.NAME]` table: explicit keys or a fio option string.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    /// fio-style options, e.g. `-rw=randread -bs=4k -iodepth=16`.
    pub fio: Option<Spanned<String>>,
    /// `randread`, `randwrite`, `read` or `write`.
    pub rw: Option<Spanned<String>>,
    /// Block size, e.g. `4k`.
    pub bs: Option<Spanned<String>>,
    /// I/Os in flight.
    pub iodepth: Option<Spanned<i64>>,
    /// Runtime of a run (else the target's).
    pub runtime: Option<Spanned<String>>,
    /// Stop after this many I/Os.
    pub number_ios: Option<Spanned<i64>>,
    /// Cap on I/Os per second.
    pub rate_iops: Option<Spanned<i64>>,
    /// `fsync` after every N writes (fio's `fsync=N`; 0: none).
    pub fsync: Option<Spanned<i64>>,
    /// `fdatasync` after every N writes (fio's `fdatasync=N`; 0: none).
    pub fdatasync: Option<Spanned<i64>>,
    /// `dsync` (O_DSYNC), `sync` (O_SYNC) or `none` (fio's `sync=`).
    pub sync: Option<Spanned<String>>,
    /// `false`: buffered writes through the page cache (fio's `direct=0`).
    pub direct: Option<Spanned<bool>>,
}

/// One `[[discover]]` rule: which block devices or mounts become targets, and the settings those
/// targets get (the same keys as `[[targets]]`, inheriting `[defaults]`). The probe keys are
/// repeated from [`RawTarget`] rather than shared: serde's `flatten` does not work with
/// `deny_unknown_fields`, and unknown keys must stay errors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDiscover {
    /// The `rule` label (default: the rule's index).
    pub id: Option<Spanned<String>>,
    /// `block` or `mount`.
    pub kind: Spanned<String>,
    /// Block rules: regex of kernel names to probe (exclusive with `device_exclude`).
    pub device_include: Option<Spanned<String>>,
    /// Block rules: regex of kernel names not to probe.
    pub device_exclude: Option<Spanned<String>>,
    /// Block rules: partitions are candidates too.
    pub include_partitions: Option<Spanned<bool>>,
    /// Block rules: devices with holders (RAID, multipath, device-mapper members) are candidates.
    pub include_held: Option<Spanned<bool>>,
    /// Mount rules: regex of mountpoints (its capture groups are `$1`.. in `name`).
    pub mountpoint_include: Option<Spanned<String>>,
    /// Mount rules: regex of filesystem types.
    pub fstype_include: Option<Spanned<String>>,
    /// Mount rules: probe this file inside each mount instead of the device under it.
    pub file: Option<Spanned<String>>,
    /// Mount rules with `file`: write profiles are allowed on the probe file.
    pub allow_writes: Option<Spanned<bool>>,
    /// The `target` label of each target found: `$1`.., `{kname}`, `{serial}`, `{wwn}`.
    pub name: Option<Spanned<String>>,
    /// Time between rescans.
    pub rescan: Option<Spanned<String>>,
    /// Most targets the rule may find; the rest (by name) are dropped.
    pub max_targets: Option<Spanned<i64>>,
    /// Probe file size / device region length.
    pub size: Option<Spanned<String>>,
    /// Profile names.
    pub profiles: Option<Spanned<Vec<Spanned<String>>>>,
    /// Overrides `[defaults]`.
    pub interval: Option<Spanned<String>>,
    /// Overrides `[defaults]`.
    pub runtime: Option<Spanned<String>>,
    /// Overrides `[defaults]`.
    pub timeout: Option<Spanned<String>>,
    /// Overrides `[defaults]`.
    pub engine: Option<Spanned<String>>,
    /// Overrides `[defaults]`.
    pub jitter: Option<Spanned<f64>>,
    /// Overrides `[defaults]`.
    pub max_duty_cycle: Option<Spanned<f64>>,
    /// Overrides `[defaults]`.
    pub skip_busy_above: Option<Spanned<RawBusyLimits>>,
    /// Overrides `[defaults]`.
    pub busy_window: Option<Spanned<String>>,
    /// Overrides `[defaults]`.
    pub yield_to_other_io: Option<Spanned<bool>>,
}

/// `skip_busy_above`: a table of limits (`{ iops = 10, in_flight = 0.1 }`, any of `iops`,
/// `in_flight`, `utilisation`; `{}` for none), or a bare number, read as `{ utilisation = N }` (the
/// key's earlier form).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RawBusyLimits {
    /// I/Os per second completed by other processes.
    pub iops: Option<f64>,
    /// Mean number of other processes' I/Os in flight.
    pub in_flight: Option<f64>,
    /// Fraction of the time the disk had I/O in flight.
    pub utilisation: Option<f64>,
}

const BUSY_KEYS: &[&str] = &["iops", "in_flight", "utilisation"];

impl<'de> Deserialize<'de> for RawBusyLimits {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LimitsVisitor;

        impl<'de> Visitor<'de> for LimitsVisitor {
            type Value = RawBusyLimits;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a table such as { iops = 10, in_flight = 0.1 }, or a utilisation fraction",
                )
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawBusyLimits, E> {
                Ok(RawBusyLimits {
                    utilisation: Some(v),
                    ..RawBusyLimits::default()
                })
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawBusyLimits, E> {
                self.visit_f64(v as f64)
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawBusyLimits, E> {
                self.visit_f64(v as f64)
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawBusyLimits, A::Error> {
                let mut limits = RawBusyLimits::default();
                while let Some(key) = map.next_key::<String>()? {
                    let slot = match key.as_str() {
                        "iops" => &mut limits.iops,
                        "in_flight" => &mut limits.in_flight,
                        "utilisation" => &mut limits.utilisation,
                        other => return Err(de::Error::unknown_field(other, BUSY_KEYS)),
                    };
                    if slot.is_some() {
                        return Err(de::Error::custom(format!("duplicate key `{key}`")));
                    }
                    *slot = Some(map.next_value::<f64>()?);
                }
                Ok(limits)
            }
        }

        deserializer.deserialize_any(LimitsVisitor)
    }
}
