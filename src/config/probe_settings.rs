//! The probe keys of a table, validated: `profiles`, `interval`, `runtime`, `timeout`, `size`,
//! `min_free`, `engine`, `jitter`, `max_duty_cycle`, `skip_busy_above`, `busy_window`,
//! `yield_to_other_io`, `starved_above`, `cohort`, and the limits of the disk, `iops_limit` and
//! `throughput_limit`, are one [`ProbeSettings`], shared by a `[[targets]]` entry's
//! [`super::TargetSpec`] and a `[[discover]]` rule's [`super::DiscoverRule`]. Here are their
//! built-in values and the checks of each key; [`super::defaults`] merges `[defaults]` over the
//! built-in values once and each table's keys over that ([`ProbeSettings::overridden`]), and
//! resolves the table's profiles. A new probe key is a line in `raw::with_probe_keys!`, a field
//! of [`ProbeSettings`] and a line in [`ProbeSettings::overridden`].

use super::limits::{self, DiskLimits};
use super::name_template::{self, MAX_COHORT_LEN, NameTemplate};
use super::raw::{RawBusyLimits, RawProbeKeys};
use super::spanned::{SpannedError, invalid};
use crate::probe::engine::EngineChoice;
use crate::probe::profile::Profile;
use crate::units;
use std::time::Duration;
use toml::Spanned;

/// Default time between the starts of a target's probe cycles.
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);
/// Default runtime of each profile run: the built-in profiles' runtime.
pub(crate) const DEFAULT_RUNTIME: Duration = crate::probe::profile::BUILTIN_RUNTIME;
/// Default hard limit of each profile run.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default jitter, as a fraction of the interval.
pub(crate) const DEFAULT_JITTER: f64 = 0.1;
/// Default duty-cycle budget: probes may keep a device busy 1% of the time.
pub(crate) const DEFAULT_MAX_DUTY_CYCLE: f64 = 0.01;
/// Default window over which the disk's load is measured before a capacity profile's run.
pub(crate) const DEFAULT_BUSY_WINDOW: Duration = Duration::from_secs(1);
/// Profiles of a target that lists none (and of `[defaults] profiles` when unset): the gentle
/// read probe, QD1 latency at a capped rate.
pub(crate) const DEFAULT_PROFILES: &[&str] = &["randread-4k-qd1-gentle"];
/// Added to [`DEFAULT_PROFILES`] on a target with `allow_writes = true`: the gentle write probe.
pub(crate) const DEFAULT_WRITE_PROFILES: &[&str] = &["randwrite-4k-qd1-gentle"];
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
    pub(crate) fn allowed(self) -> bool {
        self != Writes::Forbidden
    }

    /// Whether write profiles may write a block device.
    pub(crate) fn to_device(self) -> bool {
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
    /// files (`DEFAULT_FILE_SIZE` of `src/probe/io_target/opened.rs`), the rest of the device
    /// for block devices.
    pub size: Option<u64>,
    /// Bytes a probe file's fill must leave free on its filesystem (`min_free`), beside the
    /// 10% reserve: the larger of the two must stay free ([`crate::probe::io_target::space`]).
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
    /// A run whose I/O threads waited for a CPU longer than this share of its I/O time
    /// ([`crate::probe::measurement::CpuWait::share`]) is marked starved
    /// (`diskprobe_probe_starved`) and kept out of the disk's verdicts.
    pub starved_above: f64,
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
            starved_above: crate::probe::measurement::DEFAULT_STARVED_ABOVE,
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
    /// resolved per table ([`super::defaults::Defaults::settings`]).
    pub(super) fn overridden(
        &self,
        prefix: &str,
        keys: &RawProbeKeys<'_>,
    ) -> Result<Self, SpannedError> {
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
            starved_above: or(keys.starved_above, self.starved_above, |v| {
                fraction(&key("starved_above"), v, 0.0, 1.0)
            })?,
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

fn duration(key: &str, v: &Spanned<String>) -> Result<Duration, SpannedError> {
    let d = units::parse_duration(v.get_ref()).map_err(|e| invalid(v, format!("{key}: {e}")))?;
    if d.is_zero() {
        return Err(invalid(v, format!("{key}: expected a duration above zero")));
    }
    Ok(d)
}

pub(super) fn size(key: &str, v: &Spanned<String>) -> Result<u64, SpannedError> {
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

pub(super) fn positive(key: &str, v: &Spanned<i64>, max: i64) -> Result<u64, SpannedError> {
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

/// A key's validated value, or `inherited` where the table leaves it out.
pub(super) fn or<T, U>(
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
