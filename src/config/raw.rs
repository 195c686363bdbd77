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
pub(crate) struct RawConfig {
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
    /// `[limits]`.
    pub limits: Option<Spanned<RawLimits>>,
    /// `[cloud_stats]`.
    #[serde(default)]
    pub cloud_stats: RawCloudStats,
    /// `[retired]`.
    #[serde(default)]
    pub retired: RawRetired,
}

/// `[retired]`: disks gone for good.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRetired {
    /// Their serials, WWNs, cloud volume ids or target names.
    pub disks: Option<Spanned<Vec<Spanned<String>>>>,
}

/// `[cloud_stats]`: EC2's NVMe performance statistics of EBS and instance-store devices.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCloudStats {
    /// Read and export them (needs `CAP_SYS_ADMIN`).
    pub enabled: Option<bool>,
    /// Also export instance store's latency histograms per I/O size.
    pub size_histograms: Option<bool>,
}

/// `[limits]`: the ceiling a machine (a cloud VM) puts on a set of its disks together.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    /// Regex of the kernel names of the disks (as in `/sys/block`) the ceiling covers.
    pub devices: Option<Spanned<String>>,
    /// I/Os per second those disks may do together.
    pub iops_limit: Option<Spanned<i64>>,
    /// Bytes per second those disks may move together: `"200MiB/s"`, `"125MB/s"` or a number.
    pub throughput_limit: Option<Spanned<toml::Value>>,
}

/// `[histograms]`: how latency histograms are bucketed.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHistograms {
    /// `"coarse"`, `"fine"` or a list of upper bounds in seconds.
    pub classic_buckets: Option<Spanned<toml::Value>>,
}

/// `[web]`: where and how `/metrics` is served.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWeb {
    /// `listen_address = ":9957"`.
    pub listen_address: Option<Spanned<String>>,
    /// `telemetry_path = "/metrics"`.
    pub telemetry_path: Option<Spanned<String>>,
}

/// `[diskstats]`: which devices the diskstats collector reports.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDiskstats {
    /// Regex of device names to report (exclusive with `device_exclude`).
    pub device_include: Option<Spanned<String>>,
    /// Regex of device names not to report.
    pub device_exclude: Option<Spanned<String>>,
}

/// The probe settings keys that `[defaults]`, `[[targets]]` and `[[discover]]` all accept, given
/// to `$table!` with the table's own tokens first. A key added here is accepted in all three
/// tables, seen by [`RawProbeKeys`], and inherited from `[defaults]` once
/// `config::probe_settings::ProbeSettings::overridden` merges it. (serde's `flatten` would share them
/// too, but it loses the spans errors point at and does not work with `deny_unknown_fields`.)
macro_rules! with_probe_keys {
    ($table:ident { $($own:tt)* }) => {
        $table! { { $($own)* }
            /// Profile names.
            profiles: Spanned<Vec<Spanned<String>>>,
            /// Probe file size / device region length.
            size: Spanned<String>,
            /// Free space a probe file's fill must leave on its filesystem, beside the 10% reserve.
            min_free: Spanned<String>,
            /// Time between the starts of a target's probe cycles.
            interval: Spanned<String>,
            /// Runtime of each profile run (of profiles that set none).
            runtime: Spanned<String>,
            /// Hard limit of each profile run.
            timeout: Spanned<String>,
            /// `auto`, `io_uring` or `psync`.
            engine: Spanned<String>,
            /// Fraction of the interval by which cycle starts are randomly shifted.
            jitter: Spanned<f64>,
            /// Largest fraction of wall time probes may occupy a device.
            max_duty_cycle: Spanned<f64>,
            /// Skip a capacity profile's run when the disk is busier than this.
            skip_busy_above: Spanned<RawBusyLimits>,
            /// How long the disk's load is measured before a capacity profile's run.
            busy_window: Spanned<String>,
            /// Capacity profiles' runs stop early when another process's I/O shows up on the disk.
            yield_to_other_io: Spanned<bool>,
            /// A run whose I/O threads waited for a CPU longer than this share of its I/O time is
            /// starved.
            starved_above: Spanned<f64>,
            /// Disks that should perform alike (the `cohort` label of `diskprobe_target_info`).
            cohort: Spanned<String>,
            /// I/Os per second the disk under the target is sold with (its cap).
            iops_limit: Spanned<i64>,
            /// Bytes per second the disk under the target is sold with: `"200MiB/s"`,
            /// `"125MB/s"` or a number.
            throughput_limit: Spanned<toml::Value>,
        }
    };
}

/// Declares a table struct with its own fields followed by the probe keys, and its
/// [`RawProbeKeys`] view.
macro_rules! probe_table {
    (
        {
            $(#[$attr:meta])*
            pub struct $name:ident { $( $(#[$own_attr:meta])* pub $own:ident: $own_ty:ty, )* }
        }
        $( $(#[$key_attr:meta])* $key:ident: $key_ty:ty, )*
    ) => {
        $(#[$attr])*
        pub(crate) struct $name {
            $( $(#[$own_attr])* pub $own: $own_ty, )*
            $( $(#[$key_attr])* pub $key: Option<$key_ty>, )*
        }

        impl $name {
            /// The probe settings keys this table sets.
            pub(crate) fn probe_keys(&self) -> RawProbeKeys<'_> {
                RawProbeKeys { $( $key: self.$key.as_ref(), )* }
            }
        }
    };
}

/// Declares [`RawProbeKeys`].
macro_rules! probe_keys_view {
    ({} $( $(#[$key_attr:meta])* $key:ident: $key_ty:ty, )*) => {
        /// The probe settings keys of one table (`[defaults]`, a `[[targets]]` entry or a
        /// `[[discover]]` rule), each `None` where the table leaves it out.
        #[derive(Debug, Clone, Copy)]
        pub(crate) struct RawProbeKeys<'a> {
            $( $(#[$key_attr])* pub $key: Option<&'a $key_ty>, )*
        }
    };
}

with_probe_keys!(probe_keys_view {});

with_probe_keys!(probe_table {
    /// `[defaults]`: the probe settings every target inherits unless it sets its own.
    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct RawDefaults {}
});

/// `[scheduler]`: limits across all targets.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawScheduler {
    /// Probe runs allowed at the same time across all devices.
    pub max_concurrent_probes: Option<Spanned<i64>>,
}

with_probe_keys!(probe_table {
    /// One `[[targets]]` entry: its own keys, then the probe keys (overriding `[defaults]`).
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct RawTarget {
        /// The `target` label.
        pub name: Spanned<String>,
        /// File or block device.
        pub path: Spanned<String>,
        /// Block devices: first byte of the probe region.
        pub offset: Option<Spanned<String>>,
        /// Write profiles are allowed on this target's probe file.
        pub allow_writes: Option<Spanned<bool>>,
        /// Write profiles are allowed on this block device (also needs `allow_writes`).
        pub allow_device_writes: Option<Spanned<bool>>,
        /// Probe files: the mountpoint of the filesystem the file belongs on.
        pub mountpoint: Option<Spanned<String>>,
    }
});

/// One `[profiles.NAME]` table: explicit keys or a fio option string.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProfile {
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

with_probe_keys!(probe_table {
    /// One `[[discover]]` rule: which block devices or mounts become targets, and the probe
    /// settings those targets get (the probe keys of `[[targets]]`, inheriting `[defaults]`).
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
        /// Block rules: leave out the disks that a mount rule of the configuration probes (the
        /// disks under the mounts it matched).
        pub skip_claimed: Option<Spanned<bool>>,
        /// Mount rules: regex of mountpoints (its capture groups are `$1`.. in `name`).
        pub mountpoint_include: Option<Spanned<String>>,
        /// Mount rules: regex of filesystem types.
        pub fstype_include: Option<Spanned<String>>,
        /// Mount rules: probe this file inside each mount instead of the device under it.
        pub file: Option<Spanned<String>>,
        /// Mount rules with `file`: write profiles are allowed on the probe file.
        pub allow_writes: Option<Spanned<bool>>,
        /// The `target` label of each target found: `$1`.., `{kname}`, `{serial}`, `{wwn}`, and
        /// `{wwn|serial|kname}` for the first of them that is not empty.
        pub name: Option<Spanned<String>>,
        /// Time between rescans.
        pub rescan: Option<Spanned<String>>,
        /// Most targets the rule may find; the rest (by name) are dropped.
        pub max_targets: Option<Spanned<i64>>,
        /// Block rules: how long a target whose device disappeared is reported lost.
        pub lost_retention: Option<Spanned<String>>,
    }
});

/// `skip_busy_above`: a table of limits (`{ iops = 10, in_flight = 0.1 }`, any of `iops`,
/// `in_flight`, `utilisation`; `{}` for none), or a bare number, read as `{ utilisation = N }` (the
/// key's earlier form).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct RawBusyLimits {
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
