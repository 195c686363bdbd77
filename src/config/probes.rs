//! Validation of the probing part of the configuration: `[defaults]`, `[scheduler]`,
//! `[[targets]]` and `[profiles.NAME]`, into [`TargetSpec`]s the scheduler can run as they are.
//!
//! The probe keys (`profiles`, `interval`, `runtime`, `timeout`, `size`, `engine`, `jitter`,
//! `max_duty_cycle`, `skip_busy_above`, `busy_window`, `yield_to_other_io`, `cohort`, and the
//! limits of the disk, `iops_limit` and `throughput_limit`) are one [`ProbeSettings`], shared by a
//! `[[targets]]` entry's [`TargetSpec`] and a `[[discover]]` rule's
//! [`super::DiscoverRule`]: `Defaults` merges `[defaults]` over the built-in values once, and
//! `Defaults::settings` merges each table's keys over that and resolves its profiles. A new
//! probe key is a line in `raw::with_probe_keys!`, a field of [`ProbeSettings`] and a line in
//! `ProbeSettings::overridden`.
//!
//! Everything that cannot work is rejected here with the location of the offending value: an
//! unknown profile, a write profile on a target without `allow_writes` ([`Writes`]), a schedule
//! whose probing time exceeds the duty-cycle budget, durations and sizes that do not parse.

use super::limits::{self, DiskLimits};
use super::name_template::{self, NameTemplate};
use super::raw::{RawBusyLimits, RawConfig, RawProbeKeys, RawProfile, RawTarget};
use super::spanned::{SpannedError, invalid, printable};
use crate::probe::engine::EngineChoice;
use crate::probe::fio;
use crate::probe::profile::{Durability, MAX_RATE_IOPS, OpenSync, Profile, Rw, SyncEvery};
use crate::units;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// Default time between the starts of a target's probe cycles.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);
/// Default runtime of each profile run: the built-in profiles' runtime.
pub const DEFAULT_RUNTIME: Duration = crate::probe::profile::BUILTIN_RUNTIME;
/// Default hard limit of each profile run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default jitter, as a fraction of the interval.
pub const DEFAULT_JITTER: f64 = 0.1;
/// Default duty-cycle budget: probes may keep a device busy 1% of the time.
pub const DEFAULT_MAX_DUTY_CYCLE: f64 = 0.01;
/// Default window over which the disk's load is measured before a capacity profile's run.
pub const DEFAULT_BUSY_WINDOW: Duration = Duration::from_secs(1);
/// Profiles of a target that lists none (and of `[defaults] profiles` when unset): the gentle
/// read probe, QD1 latency at a capped rate.
pub const DEFAULT_PROFILES: &[&str] = &["randread-4k-qd1-gentle"];
/// Added to [`DEFAULT_PROFILES`] on a target with `allow_writes = true`: the gentle write probe.
pub const DEFAULT_WRITE_PROFILES: &[&str] = &["randwrite-4k-qd1-gentle"];
/// Default `skip_busy_above`: a capacity run is skipped when, over the busy window, other
/// processes completed more than 10 I/Os per second on the disk, or kept more than 0.1 I/Os in
/// flight on average. Both count I/Os, not time: utilisation (the share of time with any I/O in
/// flight) reaches 100% on an NVMe drive at a fraction of its capacity, and says nothing about how
/// close a cloud disk is to its IOPS cap. A 1-second capacity run on a disk doing 10 I/Os a
/// second would meet another process's I/O almost surely, and stop early anyway.
pub const DEFAULT_SKIP_BUSY_ABOVE: BusyLimits = BusyLimits {
    iops: Some(10.0),
    in_flight: Some(0.1),
    utilisation: None,
};

/// When a disk counts as busy: above any of the limits that are set, measured on the whole disk
/// over the busy window before a capacity profile's run. None set: never busy.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BusyLimits {
    /// I/Os per second completed by other processes (reads, writes, discards and flushes).
    pub iops: Option<f64>,
    /// Mean number of other processes' I/Os in flight (the rate of the weighted I/O time).
    pub in_flight: Option<f64>,
    /// Share of the time with any I/O in flight, 0..1 (the rate of the I/O time).
    pub utilisation: Option<f64>,
}

impl BusyLimits {
    /// Whether no limit is set (busy skip is off).
    pub fn is_off(&self) -> bool {
        self.iops.is_none() && self.in_flight.is_none() && self.utilisation.is_none()
    }
}

/// Which writes a target's profiles may make: `allow_writes` and `allow_device_writes`, the
/// second a further opt-in on top of the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Writes {
    /// Read profiles only (neither key set).
    #[default]
    Forbidden,
    /// Write profiles may write the target's probe file (`allow_writes = true`).
    ProbeFile,
    /// Write profiles may also write a block device (`allow_device_writes = true` as well).
    Device,
}

impl Writes {
    /// Whether write profiles are allowed at all.
    pub fn allowed(self) -> bool {
        self != Writes::Forbidden
    }

    /// Whether write profiles may write a block device.
    pub fn to_device(self) -> bool {
        self == Writes::Device
    }
}

/// How a target is probed, and what its disk is sold to do: the probe keys of a `[[targets]]`
/// entry or a `[[discover]]` rule, validated, merged over `[defaults]` and the built-in values,
/// with its profiles resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeSettings {
    /// Profiles run in this order every cycle, with runtimes resolved.
    pub profiles: Vec<Profile>,
    /// Probe file size / device region length. `None`: the target module's default size for
    /// files ([`crate::probe::target::DEFAULT_FILE_SIZE`]), the rest of the device for block
    /// devices.
    pub size: Option<u64>,
    /// Bytes a probe file's fill must leave free on its filesystem (`min_free`), beside the
    /// 10% reserve: the larger of the two must stay free ([`crate::probe::target::space`]).
    pub min_free: u64,
    /// Time between the starts of cycles.
    pub interval: Duration,
    /// Runtime of the profiles that set none (already filled into [`Self::profiles`]).
    pub runtime: Duration,
    /// Hard limit per run.
    pub timeout: Duration,
    /// Engine choice.
    pub engine: EngineChoice,
    /// Fraction of the interval by which each cycle start is shifted at random (±).
    pub jitter: f64,
    /// Largest fraction of wall time probes may occupy the device.
    pub max_duty_cycle: f64,
    /// Capacity profiles' runs are skipped when the disk is busier than this.
    pub skip_busy_above: BusyLimits,
    /// How long the disk's load is measured before a capacity profile's run.
    pub busy_window: Duration,
    /// Capacity profiles' runs stop early when another process's I/O shows up on the disk.
    pub yield_to_other_io: bool,
    /// Which writes the profiles may make.
    pub writes: Writes,
    /// The disks this target's should perform like: the `cohort` label of
    /// `diskprobe_target_info` (empty when unset).
    pub cohort: String,
    /// The IOPS and throughput the disk under the target is sold with (`iops_limit`,
    /// `throughput_limit`): exported for the headroom rules, never enforced.
    pub limits: DiskLimits,
}

impl Default for ProbeSettings {
    /// The built-in values, under `[defaults]`; no profiles yet.
    fn default() -> Self {
        ProbeSettings {
            profiles: Vec::new(),
            size: None,
            min_free: 0,
            interval: DEFAULT_INTERVAL,
            runtime: DEFAULT_RUNTIME,
            timeout: DEFAULT_TIMEOUT,
            engine: EngineChoice::default(),
            jitter: DEFAULT_JITTER,
            max_duty_cycle: DEFAULT_MAX_DUTY_CYCLE,
            skip_busy_above: DEFAULT_SKIP_BUSY_ABOVE,
            busy_window: DEFAULT_BUSY_WINDOW,
            yield_to_other_io: true,
            writes: Writes::Forbidden,
            cohort: String::new(),
            limits: DiskLimits::default(),
        }
    }
}

impl ProbeSettings {
    /// Time one cycle is expected to keep the device busy: the sum of the profiles' runtimes (or
    /// timeouts, for profiles bounded only by an I/O count).
    pub fn busy_per_cycle(&self) -> Duration {
        self.profiles
            .iter()
            .map(|p| p.runtime.unwrap_or(self.timeout).min(self.timeout))
            .sum()
    }

    /// These settings with the keys a table sets (validated; `prefix` names the table in
    /// messages) in place of their values. Profiles and writes are left as they are: they are
    /// resolved per table ([`Defaults::settings`]).
    fn overridden(&self, prefix: &str, keys: &RawProbeKeys<'_>) -> Result<Self, SpannedError> {
        let key = |k: &str| format!("{prefix}.{k}");
        Ok(ProbeSettings {
            profiles: self.profiles.clone(),
            size: or(keys.size, self.size, |v| size(&key("size"), v).map(Some))?,
            min_free: or(keys.min_free, self.min_free, |v| size(&key("min_free"), v))?,
            interval: or(keys.interval, self.interval, |v| {
                duration(&key("interval"), v)
            })?,
            runtime: or(keys.runtime, self.runtime, |v| duration(&key("runtime"), v))?,
            timeout: or(keys.timeout, self.timeout, |v| duration(&key("timeout"), v))?,
            engine: or(keys.engine, self.engine, |v| engine(&key("engine"), v))?,
            jitter: or(keys.jitter, self.jitter, |v| jitter(&key("jitter"), v))?,
            max_duty_cycle: or(keys.max_duty_cycle, self.max_duty_cycle, |v| {
                fraction(&key("max_duty_cycle"), v, MIN_DUTY_CYCLE, 1.0)
            })?,
            skip_busy_above: or(keys.skip_busy_above, self.skip_busy_above, |v| {
                busy_limits(&key("skip_busy_above"), v)
            })?,
            busy_window: or(keys.busy_window, self.busy_window, |v| {
                duration(&key("busy_window"), v)
            })?,
            yield_to_other_io: keys
                .yield_to_other_io
                .map_or(self.yield_to_other_io, |b| *b.get_ref()),
            writes: self.writes,
            cohort: or(keys.cohort, self.cohort.clone(), |v| {
                cohort(&key("cohort"), v)
            })?,
            limits: DiskLimits {
                iops: or(keys.iops_limit, self.limits.iops, |v| {
                    limits::iops(&key("iops_limit"), v).map(Some)
                })?,
                bytes_per_second: or(keys.throughput_limit, self.limits.bytes_per_second, |v| {
                    limits::throughput(&key("throughput_limit"), v).map(Some)
                })?,
            },
        })
    }
}

/// A target, validated and with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetSpec {
    /// The `target` label.
    pub name: String,
    /// File or block device.
    pub path: PathBuf,
    /// First byte of the region (block devices).
    pub offset: u64,
    /// The id of the `[[discover]]` rule that found the target; `None` for a `[[targets]]` entry.
    pub rule: Option<String>,
    /// How it is probed.
    pub settings: ProbeSettings,
}

/// `[scheduler]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Probe runs allowed at the same time across all devices.
    pub max_concurrent_probes: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_concurrent_probes: 1,
        }
    }
}

fn duration(key: &str, v: &Spanned<String>) -> Result<Duration, SpannedError> {
    let d = units::parse_duration(v.get_ref()).map_err(|e| invalid(v, format!("{key}: {e}")))?;
    if d.is_zero() {
        return Err(invalid(v, format!("{key}: expected a duration above zero")));
    }
    Ok(d)
}

fn size(key: &str, v: &Spanned<String>) -> Result<u64, SpannedError> {
    units::parse_size(v.get_ref()).map_err(|e| invalid(v, format!("{key}: {e}")))
}

/// The smallest `max_duty_cycle` above zero that is accepted (1 s of probing in 11.6 days); a
/// smaller one is a mistake, and the interval it implies would not fit the clock.
const MIN_DUTY_CYCLE: f64 = 1e-6;

fn fraction(key: &str, v: &Spanned<f64>, min: f64, max: f64) -> Result<f64, SpannedError> {
    let x = *v.get_ref();
    if x.is_finite() && x > min && x <= max {
        Ok(x)
    } else {
        Err(invalid(
            v,
            format!("{key}: expected a number above {min} and at most {max}, found {x}"),
        ))
    }
}

/// Validates `skip_busy_above`: limits are finite and not negative, utilisation at most 1.
fn busy_limits(key: &str, v: &Spanned<RawBusyLimits>) -> Result<BusyLimits, SpannedError> {
    let raw = v.get_ref();
    let check = |name: &str, x: Option<f64>, max: f64| match x {
        Some(x) if !(x.is_finite() && (0.0..=max).contains(&x)) => Err(invalid(
            v,
            format!("{key}.{name}: expected a number from 0 to {max}, found {x}"),
        )),
        _ => Ok(x),
    };
    Ok(BusyLimits {
        iops: check("iops", raw.iops, 1e9)?,
        in_flight: check("in_flight", raw.in_flight, 1e6)?,
        utilisation: check("utilisation", raw.utilisation, 1.0)?,
    })
}

pub use super::name_template::MAX_COHORT_LEN;

/// A `cohort`: empty (none), or up to [`MAX_COHORT_LEN`] ASCII letters, digits and `_ . : -`, so
/// that the label value reads the same in every query, legend and annotation; or a template of
/// those with placeholders of the disk's facts (`{model}`, `{cloud}`, ... as in names; rendered
/// for the device under the target, see [`name_template::cohort`]) and, in `[[discover]]` rules,
/// their regex's capture groups (checked against the regex where the rule is read).
fn cohort(key: &str, v: &Spanned<String>) -> Result<String, SpannedError> {
    let text = v.get_ref();
    let expected = || {
        format!(
            "{key}: expected up to {MAX_COHORT_LEN} ASCII letters, digits, '_', '.', ':' or '-', and placeholders of the disk's facts such as {{model}} (\"\" for none), found {text:?}"
        )
    };
    let template = NameTemplate::parse(text).map_err(|m| invalid(v, format!("{key}: {m}")))?;
    let literal_ok = template
        .literals()
        .all(|t| t.chars().all(name_template::cohort_char));
    if text.len() > MAX_COHORT_LEN || !literal_ok {
        return Err(invalid(v, expected()));
    }
    if template.max_group() > 0 && !key.starts_with("discover") {
        return Err(invalid(
            v,
            format!(
                "{key}: capture groups (${}) exist only in [[discover]] rules",
                template.max_group()
            ),
        ));
    }
    Ok(text.clone())
}

fn engine(key: &str, v: &Spanned<String>) -> Result<EngineChoice, SpannedError> {
    match v.get_ref().as_str() {
        "auto" => Ok(EngineChoice::Auto),
        "io_uring" => Ok(EngineChoice::IoUring),
        "psync" => Ok(EngineChoice::Psync),
        other => Err(invalid(
            v,
            format!("{key}: expected \"auto\", \"io_uring\" or \"psync\", found {other:?}"),
        )),
    }
}

fn positive(key: &str, v: &Spanned<i64>, max: i64) -> Result<u64, SpannedError> {
    let x = *v.get_ref();
    if x >= 1 && x <= max {
        Ok(x as u64)
    } else {
        Err(invalid(
            v,
            format!("{key}: expected a whole number from 1 to {max}, found {x}"),
        ))
    }
}

/// Custom profiles by name; `runtime` stays `None` unless the profile sets one.
pub(super) fn custom_profiles(
    raw: &BTreeMap<Spanned<String>, Spanned<RawProfile>>,
) -> Result<BTreeMap<String, Profile>, SpannedError> {
    let mut out = BTreeMap::new();
    for (name, table) in raw {
        let key = format!("profiles.{}", name.get_ref());
        if Profile::builtin(name.get_ref()).is_some() {
            return Err(invalid(
                name,
                format!(
                    "{key}: {:?} is a built-in profile; choose another name",
                    name.get_ref()
                ),
            ));
        }
        printable("profiles", name)?;
        if name.get_ref().is_empty() {
            return Err(invalid(name, "profiles: a profile needs a name".to_owned()));
        }
        let p = table.get_ref();
        let mut profile = match &p.fio {
            Some(fio_text) => fio_profile(&key, p, fio_text)?,
            None => explicit_profile(&key, table)?,
        };
        profile.name = name.get_ref().clone();
        out.insert(name.get_ref().clone(), profile);
    }
    Ok(out)
}

/// A `[profiles.NAME]` given as a fio option string; `key` is `profiles.NAME`.
fn fio_profile(
    key: &str,
    p: &RawProfile,
    fio_text: &Spanned<String>,
) -> Result<Profile, SpannedError> {
    let explicit = [
        p.rw.as_ref().map(|s| s.span()),
        p.bs.as_ref().map(|s| s.span()),
        p.iodepth.as_ref().map(|s| s.span()),
        p.runtime.as_ref().map(|s| s.span()),
        p.number_ios.as_ref().map(|s| s.span()),
        p.rate_iops.as_ref().map(|s| s.span()),
        p.fsync.as_ref().map(|s| s.span()),
        p.fdatasync.as_ref().map(|s| s.span()),
        p.sync.as_ref().map(|s| s.span()),
        p.direct.as_ref().map(|s| s.span()),
    ];
    if let Some(span) = explicit.into_iter().flatten().next() {
        return Err(SpannedError {
            span,
            message: format!(
                "{key}: set either fio or the explicit keys (rw, bs, iodepth, runtime, number_ios, rate_iops, fsync, fdatasync, sync, direct), not both"
            ),
        });
    }
    let profile =
        fio::parse(fio_text.get_ref()).map_err(|e| invalid(fio_text, format!("{key}.fio: {e}")))?;
    if profile.size.is_some() {
        return Err(invalid(
            fio_text,
            format!("{key}.fio: -size belongs to the target (size = ...), not to a profile"),
        ));
    }
    Ok(profile)
}

/// A `[profiles.NAME]` given as explicit keys; `key` is `profiles.NAME`.
fn explicit_profile(key: &str, table: &Spanned<RawProfile>) -> Result<Profile, SpannedError> {
    let p = table.get_ref();
    let rw = p.rw.as_ref().ok_or_else(|| {
        invalid(
            table,
            format!(
                "{key}: expected rw = \"randread\" | \"randwrite\" | \"read\" | \"write\" (or a fio string)"
            ),
        )
    })?;
    let rw_value = Rw::parse(rw.get_ref()).ok_or_else(|| {
        invalid(
            rw,
            format!(
                "{key}.rw: expected \"randread\", \"randwrite\", \"read\" or \"write\", found {:?}",
                rw.get_ref()
            ),
        )
    })?;
    let durability = durability(key, p)?;
    let bs = match &p.bs {
        Some(b) => size(&format!("{key}.bs"), b)?,
        None => 4096,
    };
    let unit = if durability.direct { 512 } else { 1 };
    if bs == 0 || bs % unit != 0 || bs > 64 << 20 {
        let at = p.bs.as_ref().map(|b| b.span()).unwrap_or(table.span());
        let expected = if durability.direct {
            "a multiple of 512 bytes up to 64MiB (O_DIRECT; direct = false for buffered writes of any size)"
        } else {
            "1 byte to 64MiB"
        };
        return Err(SpannedError {
            span: at,
            message: format!("{key}.bs: expected {expected}, found {bs}"),
        });
    }
    let profile = Profile {
        name: String::new(),
        rw: rw_value,
        block_size: bs,
        iodepth: match &p.iodepth {
            Some(q) => positive(&format!("{key}.iodepth"), q, 4096)? as u32,
            None => 1,
        },
        runtime: p
            .runtime
            .as_ref()
            .map(|r| duration(&format!("{key}.runtime"), r))
            .transpose()?,
        number_ios: p
            .number_ios
            .as_ref()
            .map(|n| positive(&format!("{key}.number_ios"), n, i64::MAX))
            .transpose()?,
        rate_iops: p
            .rate_iops
            .as_ref()
            .map(|r| {
                positive(&format!("{key}.rate_iops"), r, i64::from(MAX_RATE_IOPS)).map(|v| v as u32)
            })
            .transpose()?,
        size: None,
        durability,
    };
    profile.check_durability().map_err(|e| {
        let span = match e.key() {
            "fsync" => p.fsync.as_ref().map(|v| v.span()),
            "fdatasync" => p.fdatasync.as_ref().map(|v| v.span()),
            "sync" => p.sync.as_ref().map(|v| v.span()),
            "direct" => p.direct.as_ref().map(|v| v.span()),
            _ => p.iodepth.as_ref().map(|v| v.span()),
        };
        SpannedError {
            span: span.unwrap_or(table.span()),
            message: format!("{key}.{}: {e}", e.key()),
        }
    })?;
    Ok(profile)
}

/// `fsync`, `fdatasync`, `sync` and `direct` of a `[profiles.NAME]` table (fio's meanings).
fn durability(key: &str, p: &RawProfile) -> Result<Durability, SpannedError> {
    let every = |name: &str, v: &Option<Spanned<i64>>| -> Result<Option<u32>, SpannedError> {
        let Some(v) = v else { return Ok(None) };
        let n = *v.get_ref();
        match u32::try_from(n) {
            Ok(0) => Ok(None),
            Ok(n) => Ok(Some(n)),
            Err(_) => Err(invalid(
                v,
                format!(
                    "{key}.{name}: expected a whole number of writes between two syncs from 0 (none) to {}, found {n}",
                    u32::MAX
                ),
            )),
        }
    };
    let sync_every =
        SyncEvery::from_options(every("fsync", &p.fsync)?, every("fdatasync", &p.fdatasync)?)
            .map_err(|err| SpannedError {
                span: p.fdatasync.as_ref().map(|v| v.span()).unwrap_or_default(),
                message: format!("{key}.fdatasync: {err}"),
            })?;
    let open_sync = match &p.sync {
        None => None,
        Some(v) => match v.get_ref().as_str() {
            "dsync" => Some(OpenSync::Dsync),
            "sync" => Some(OpenSync::Sync),
            "none" => None,
            other => {
                return Err(invalid(
                    v,
                    format!(
                        "{key}.sync: expected \"dsync\" (O_DSYNC), \"sync\" (O_SYNC) or \"none\", found {other:?}"
                    ),
                ));
            }
        },
    };
    Ok(Durability {
        direct: p.direct.as_ref().is_none_or(|d| *d.get_ref()),
        sync_every,
        open_sync,
        fresh_space: false,
    })
}

/// Validates `[defaults]`, `[scheduler]`, `[profiles]` and `[[targets]]`.
pub(super) fn validate(
    raw: &RawConfig,
) -> Result<(Vec<TargetSpec>, SchedulerConfig), SpannedError> {
    let defaults = Defaults::from_raw(raw)?;
    let scheduler = SchedulerConfig {
        max_concurrent_probes: match &raw.scheduler.max_concurrent_probes {
            Some(n) => positive("scheduler.max_concurrent_probes", n, 1024)? as usize,
            None => 1,
        },
    };
    let mut targets: Vec<TargetSpec> = Vec::new();
    for (i, t) in raw.targets.iter().enumerate() {
        let spec = target(&format!("targets[{i}]"), t, &defaults)?;
        if targets.iter().any(|other| other.name == spec.name) {
            return Err(invalid(
                &t.get_ref().name,
                format!(
                    "targets[{i}].name: {:?} is used by another target; names must be unique",
                    spec.name
                ),
            ));
        }
        targets.push(spec);
    }
    Ok((targets, scheduler))
}

/// What every table inherits: `[defaults]` merged over the built-in values (once), its profile
/// names, and the custom profiles a table may name.
pub(super) struct Defaults<'a> {
    settings: ProbeSettings,
    pub(super) profiles: Option<&'a Spanned<Vec<Spanned<String>>>>,
    customs: BTreeMap<String, Profile>,
}

/// A table whose probe settings [`Defaults::settings`] resolves: a `[[targets]]` entry or a
/// `[[discover]]` rule.
pub(super) struct ProbeTable<'a> {
    /// Names the table in messages: `targets[0]`, `discover[1]`.
    pub(super) prefix: &'a str,
    /// Its probe keys.
    pub(super) keys: RawProbeKeys<'a>,
    /// The writes it allows.
    pub(super) writes: Writes,
    /// The whole table: where errors about profiles it does not list point.
    pub(super) span: Range<usize>,
    /// Where an error about its inherited interval points (the target's name, or the rule).
    pub(super) anchor: Range<usize>,
    /// The path it probes (a `[[targets]]` entry's; a rule's targets are found later): write
    /// profiles need [`Writes::Device`] where it is a block device now, one that is neither
    /// mounted nor held. It is stat'ed only when a check needs it, once ([`PathStat`]).
    pub(super) path: Option<&'a PathStat>,
}

impl<'a> Defaults<'a> {
    pub(super) fn from_raw(raw: &'a RawConfig) -> Result<Self, SpannedError> {
        let customs = custom_profiles(&raw.profiles)?;
        let d = &raw.defaults;
        Ok(Defaults {
            settings: ProbeSettings::default().overridden("defaults", &d.probe_keys())?,
            profiles: d.profiles.as_ref(),
            customs,
        })
    }

    /// A table's probe settings: its keys over these defaults, its profiles resolved and checked
    /// against its writes, timeout and duty-cycle budget.
    pub(super) fn settings(&self, table: &ProbeTable<'_>) -> Result<ProbeSettings, SpannedError> {
        let mut settings = self.settings.overridden(table.prefix, &table.keys)?;
        settings.writes = table.writes;
        settings.profiles = self.profiles(table, &settings)?;
        duty_cycle_check(table, &settings)?;
        Ok(settings)
    }

    /// The profile names a table lists (or inherits), each with where it is written.
    fn names(&self, table: &ProbeTable<'_>) -> Result<Vec<(String, Range<usize>)>, SpannedError> {
        let key = format!("{}.profiles", table.prefix);
        let Some(list) = table.keys.profiles.or(self.profiles) else {
            let writes: &[&str] = if table.writes.allowed() {
                DEFAULT_WRITE_PROFILES
            } else {
                &[]
            };
            return Ok(DEFAULT_PROFILES
                .iter()
                .chain(writes)
                .map(|n| ((*n).to_owned(), table.span.clone()))
                .collect());
        };
        if list.get_ref().is_empty() {
            return Err(invalid(
                list,
                format!("{key}: expected at least one profile"),
            ));
        }
        Ok(list
            .get_ref()
            .iter()
            .map(|n| (n.get_ref().clone(), n.span()))
            .collect())
    }

    /// The profile named `name`: a custom one, or a built-in that takes the target's runtime.
    pub(super) fn profile(&self, name: &str) -> Option<Profile> {
        self.customs.get(name).cloned().or_else(|| {
            Profile::builtin(name).map(|mut b| {
                b.runtime = None;
                b
            })
        })
    }

    /// The table's profiles, resolved, with the target's runtime filled in and checked against
    /// its writes and timeout.
    fn profiles(
        &self,
        table: &ProbeTable<'_>,
        settings: &ProbeSettings,
    ) -> Result<Vec<Profile>, SpannedError> {
        let key = format!("{}.profiles", table.prefix);
        let mut profiles: Vec<Profile> = Vec::new();
        for (pname, span) in self.names(table)? {
            let fail = |message: String| SpannedError {
                span: span.clone(),
                message,
            };
            let Some(mut p) = self.profile(&pname) else {
                let mut known: Vec<String> =
                    Profile::builtins().into_iter().map(|p| p.name).collect();
                known.extend(self.customs.keys().cloned());
                return Err(fail(format!(
                    "{key}: unknown profile {pname:?}; expected one of: {}",
                    known.join(", ")
                )));
            };
            if profiles.iter().any(|q| q.name == p.name) {
                return Err(fail(format!("{key}: profile {pname:?} is listed twice")));
            }
            if p.rw.is_write() && !settings.writes.allowed() {
                return Err(fail(format!(
                    "{key}: profile {pname:?} writes; set allow_writes = true on this target to allow writes to its probe file (block devices also need allow_device_writes = true)"
                )));
            }
            let device = table
                .path
                .filter(|_| p.rw.is_write())
                .and_then(PathStat::block_device);
            if let Some((device, rdev)) = device {
                device_write_check(&key, span.clone(), &p, device, rdev, settings.writes)?;
            }
            if p.runtime.is_none() && p.number_ios.is_none() {
                p.runtime = Some(settings.runtime);
            }
            if p.runtime.is_some_and(|rt| rt >= settings.timeout) {
                let at = table.keys.timeout.map_or(span, Spanned::span);
                return Err(SpannedError {
                    span: at,
                    message: format!(
                        "{}.timeout: timeout {} must be longer than the runtime {} of profile {pname:?}",
                        table.prefix,
                        humantime::format_duration(settings.timeout),
                        humantime::format_duration(p.runtime.unwrap_or_default())
                    ),
                });
            }
            profiles.push(p);
        }
        Ok(profiles)
    }
}

/// A table's settings whose profiles would keep the device busier than its duty-cycle budget
/// are an error, which says the shortest interval that fits.
fn duty_cycle_check(table: &ProbeTable<'_>, settings: &ProbeSettings) -> Result<(), SpannedError> {
    let busy = settings.busy_per_cycle().as_secs_f64();
    let share = busy / settings.interval.as_secs_f64();
    if share <= settings.max_duty_cycle {
        return Ok(());
    }
    let min_interval = Duration::from_secs_f64(busy / settings.max_duty_cycle).as_secs() + 1;
    Err(SpannedError {
        span: table
            .keys
            .interval
            .map_or(table.anchor.clone(), Spanned::span),
        message: format!(
            "{}.interval: profiles {:?} run for {} every {} ({:.2}% of the time), above max_duty_cycle {}%; set interval to at least {}, shorten runtime or raise max_duty_cycle",
            table.prefix,
            settings
                .profiles
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>(),
            humantime::format_duration(settings.busy_per_cycle()),
            humantime::format_duration(settings.interval),
            share * 100.0,
            settings.max_duty_cycle * 100.0,
            humantime::format_duration(Duration::from_secs(min_interval)),
        ),
    })
}

/// A key's validated value, or `inherited` where the table leaves it out.
fn or<T, U>(
    v: Option<&T>,
    inherited: U,
    f: impl FnOnce(&T) -> Result<U, SpannedError>,
) -> Result<U, SpannedError> {
    v.map_or(Ok(inherited), f)
}

fn jitter(key: &str, v: &Spanned<f64>) -> Result<f64, SpannedError> {
    let x = *v.get_ref();
    if (0.0..=0.5).contains(&x) {
        Ok(x)
    } else {
        Err(invalid(
            v,
            format!("{key}: expected a fraction from 0 to 0.5, found {x}"),
        ))
    }
}

/// A `[[targets]]` path, stat'ed (following symlinks) the first time a check asks, on a thread
/// given up after [`SPACE_CHECK_WAIT`]; later checks reuse the answer.
pub(super) struct PathStat {
    path: PathBuf,
    /// `None` inside: the filesystem did not answer in time.
    meta: std::sync::OnceLock<Option<std::io::Result<std::fs::Metadata>>>,
}

impl PathStat {
    fn new(path: &Path) -> PathStat {
        PathStat {
            path: path.to_owned(),
            meta: std::sync::OnceLock::new(),
        }
    }

    /// The path's metadata: `Ok(None)` when it does not exist (or cannot be stat'ed), `Err(())`
    /// when its filesystem did not answer in time.
    fn meta(&self) -> Result<Option<&std::fs::Metadata>, ()> {
        let answer = self.meta.get_or_init(|| {
            let owned = self.path.clone();
            with_deadline(move || std::fs::metadata(owned))
        });
        match answer {
            None => Err(()),
            Some(Ok(meta)) => Ok(Some(meta)),
            Some(Err(_)) => Ok(None),
        }
    }

    /// The path and its device number when it is a block device now.
    fn block_device(&self) -> Option<(&Path, u64)> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let meta = self.meta().ok()??;
        meta.file_type()
            .is_block_device()
            .then(|| (self.path.as_path(), meta.rdev()))
    }
}

/// A write profile on a block device: needs [`Writes::Device`], space of its own to preallocate
/// is a probe file's only, and the device (device number `rdev`) may be neither mounted nor held,
/// nor have a partition that is: a run would refuse it, so loading and `--config.check` do. The
/// agent's own mount table and sysfs (`/proc/self/mountinfo`, `/sys`) are asked: the paths of a
/// configuration are those the agent sees.
fn device_write_check(
    key: &str,
    span: Range<usize>,
    p: &Profile,
    path: &Path,
    rdev: u64,
    writes: Writes,
) -> Result<(), SpannedError> {
    let name = &p.name;
    let in_use = || {
        crate::probe::target::block::mounted_or_held(
            path,
            rdev,
            Path::new("/proc"),
            Path::new("/sys"),
        )
    };
    let message = if !writes.to_device() {
        format!(
            "{key}: profile {name:?} writes and {} is a block device; set allow_device_writes = true to let probes write to it (only while it is unmounted and unused)",
            path.display()
        )
    } else if p.durability.fresh_space {
        format!(
            "{key}: profile {name:?} writes into space it preallocates in a probe file, and {} is a block device (write-4k-qd1-fdatasync syncs on a device)",
            path.display()
        )
    } else if let Some(reason) = in_use() {
        format!(
            "{key}: profile {name:?} writes and {}: {reason}; write probes need a device that is neither mounted nor in use",
            path.display()
        )
    } else {
        return Ok(());
    };
    Err(SpannedError { span, message })
}

/// How long loading the configuration waits for the filesystem of a probe file to answer the
/// space check: a hung filesystem (an NFS server gone, a stuck FUSE daemon) must not stall a
/// start, a reload or `--config.check`; its fill is checked again when it runs.
const SPACE_CHECK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// `f` on a thread of its own, given up after [`SPACE_CHECK_WAIT`] (`None`; the thread is left to
/// a system call that a hung filesystem does not answer).
fn with_deadline<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("config-stat".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .ok()?;
    rx.recv_timeout(SPACE_CHECK_WAIT).ok()
}

/// A target with write profiles writes to a regular file (its probe file, made where the path does
/// not exist yet) or to a block device (opted in, checked in [`Defaults::profiles`]): a path that
/// exists as anything else (a directory, `/dev/null`, a FIFO, a socket) is an error at its `path`.
fn kind_check(
    prefix: &str,
    r: &RawTarget,
    stat: &PathStat,
    settings: &ProbeSettings,
) -> Result<(), SpannedError> {
    use std::os::unix::fs::FileTypeExt;
    let Some(writer) = settings.profiles.iter().find(|p| p.rw.is_write()) else {
        return Ok(());
    };
    let path = &stat.path;
    let Ok(Some(meta)) = stat.meta() else {
        return Ok(()); // absent (made by the fill), or a filesystem that does not answer
    };
    let kind = meta.file_type();
    let what = if kind.is_file() || kind.is_block_device() {
        return Ok(());
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(invalid(
        &r.path,
        format!(
            "{prefix}.path: profile {:?} writes and {} is {what}; write probes need a regular file (the probe file) or a block device with allow_device_writes = true",
            writer.name,
            path.display()
        ),
    ))
}

/// A probe file's size must fit its filesystem with the reserve (the larger of 10% and
/// `min_free`, [`crate::probe::target::space`]), checked where the path (or its directory)
/// exists: a size beyond the filesystem, or one whose fill would leave less than the reserve free,
/// is an error at the target's `size` (or `min_free`, or its name, where they are inherited). Only
/// sizes that are set are checked: the default size is checked before each fill. The check runs
/// [`with_deadline`].
fn space_check(
    prefix: &str,
    r: &RawTarget,
    stat: &PathStat,
    settings: &ProbeSettings,
) -> Result<(), SpannedError> {
    let Some(size) = settings.size else {
        return Ok(());
    };
    if r.offset.is_some() {
        return Ok(());
    }
    let path = &stat.path;
    let min_free = settings.min_free;
    let known = match stat.meta() {
        Ok(meta) => meta.cloned(),
        Err(()) => {
            tracing::warn!(path = %path.display(), "{prefix}.size: the filesystem did not answer the space check within {SPACE_CHECK_WAIT:?}; it is checked again before the fill");
            return Ok(());
        }
    };
    let owned = path.clone();
    let Some(answer) = with_deadline(move || {
        crate::probe::target::space::check_known(&owned, known.as_ref(), size, min_free)
    }) else {
        tracing::warn!(path = %path.display(), "{prefix}.size: the filesystem did not answer the space check within {SPACE_CHECK_WAIT:?}; it is checked again before the fill");
        return Ok(());
    };
    match answer {
        Ok(Err(problem)) => {
            // A reserve set by min_free is what failed where min_free is above the 10%.
            let by_min_free = matches!(problem, crate::probe::target::space::SpaceProblem::Reserve { reserve, .. } if reserve == min_free && min_free > 0);
            let (key, span) = match (&r.size, &r.min_free) {
                (_, Some(m)) if by_min_free => ("min_free", m.span()),
                (Some(s), _) => ("size", s.span()),
                (None, _) => ("size", r.name.span()),
            };
            Err(SpannedError {
                span,
                message: format!("{prefix}.{key}: {problem}"),
            })
        }
        // A path whose directory does not exist yet is checked before its fill.
        Ok(Ok(())) | Err(_) => Ok(()),
    }
}

/// `allow_writes` and `allow_device_writes` of a `[[targets]]` entry.
fn target_writes(prefix: &str, r: &RawTarget) -> Result<Writes, SpannedError> {
    let set = |b: &Option<Spanned<bool>>| b.as_ref().is_some_and(|b| *b.get_ref());
    match (set(&r.allow_writes), &r.allow_device_writes) {
        (false, Some(device)) if *device.get_ref() => Err(invalid(
            device,
            format!(
                "{prefix}.allow_device_writes: also needs allow_writes = true (device writes are a further opt-in on top of it)"
            ),
        )),
        (true, device) if set(device) => Ok(Writes::Device),
        (true, _) => Ok(Writes::ProbeFile),
        (false, _) => Ok(Writes::Forbidden),
    }
}

/// Validates one `[[targets]]` entry; `prefix` names it in messages (`targets[0]`).
fn target(
    prefix: &str,
    t: &Spanned<RawTarget>,
    defaults: &Defaults<'_>,
) -> Result<TargetSpec, SpannedError> {
    let r = t.get_ref();
    printable(&format!("{prefix}.name"), &r.name)?;
    let name = r.name.get_ref().trim().to_owned();
    if name.is_empty() {
        return Err(invalid(
            &r.name,
            format!("{prefix}.name: expected a non-empty name"),
        ));
    }
    let path = PathBuf::from(r.path.get_ref());
    if !path.is_absolute() {
        return Err(invalid(
            &r.path,
            format!(
                "{prefix}.path: expected an absolute path, found {:?}",
                r.path.get_ref()
            ),
        ));
    }
    let stat = PathStat::new(&path);
    let settings = defaults.settings(&ProbeTable {
        prefix,
        keys: r.probe_keys(),
        writes: target_writes(prefix, r)?,
        span: t.span(),
        anchor: r.name.span(),
        path: Some(&stat),
    })?;
    kind_check(prefix, r, &stat, &settings)?;
    space_check(prefix, r, &stat, &settings)?;
    Ok(TargetSpec {
        offset: or(r.offset.as_ref(), 0, |v| {
            size(&format!("{prefix}.offset"), v)
        })?,
        name,
        path,
        rule: None,
        settings,
    })
}
