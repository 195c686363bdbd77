//! What every table inherits, and how a table's probe settings are resolved over it:
//! [`Defaults`] merges `[defaults]` over the built-in values once and holds the custom profiles;
//! [`Defaults::settings`] merges a [`ProbeTable`]'s keys (a `[[targets]]` entry or a
//! `[[discover]]` rule) over that and resolves its profiles, checked against its writes
//! ([`Writes`]), its timeout and its duty-cycle budget; [`Defaults::device_findings`] says what
//! the machine's state says against writes to a block device (something a write would reach is
//! mounted, a swap area in use or held: [`crate::blockdev::stack`]).

use super::path_stat::PathStat;
use super::probe_settings::{DEFAULT_PROFILES, DEFAULT_WRITE_PROFILES, ProbeSettings, Writes};
use super::profiles::custom_profiles;
use super::raw::{RawConfig, RawProbeKeys};
use super::spanned::{SpannedError, invalid};
use crate::probe::profile::Profile;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;
use toml::Spanned;

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
    /// profiles need [`Writes::Device`] where it is a block device now (one that is neither
    /// mounted nor held, or the machine's state is reported: [`Defaults::device_findings`]). It
    /// is stat'ed only when a check needs it, once ([`PathStat`]).
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
            if let Some((device, _)) = device {
                device_write_check(&key, span.clone(), &p, device, settings.writes)?;
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

    /// What the machine's state says now against a table's write profiles on a block device
    /// (`settings`, resolved for `table`): one per write profile while the device (device number
    /// `rdev`), or a partition of it, is mounted or held. A finding, not an error: the target
    /// loads and its runs are refused while it is so. The agent's own mount table and sysfs
    /// (`/proc/self/mountinfo`, `/sys`) are asked: the paths of a configuration are those the
    /// agent sees.
    pub(super) fn device_findings(
        &self,
        table: &ProbeTable<'_>,
        settings: &ProbeSettings,
    ) -> Result<Vec<SpannedError>, SpannedError> {
        let Some((path, rdev)) = table.path.and_then(PathStat::block_device) else {
            return Ok(Vec::new());
        };
        if !settings.profiles.iter().any(|p| p.rw.is_write()) || !settings.writes.to_device() {
            return Ok(Vec::new());
        }
        let Some(reason) = crate::probe::io_target::block::in_use(
            path,
            rdev,
            Path::new("/proc"),
            Path::new("/sys"),
            Path::new("/dev"),
        ) else {
            return Ok(Vec::new());
        };
        let key = format!("{}.profiles", table.prefix);
        Ok(self
            .names(table)?
            .into_iter()
            .zip(&settings.profiles)
            .filter(|(_, p)| p.rw.is_write())
            .map(|((name, span), _)| SpannedError {
                span,
                message: format!(
                    "{key}: profile {name:?} writes and {}: {reason}; write probes need a device that is neither mounted nor in use",
                    path.display()
                ),
            })
            .collect())
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

/// A write profile on a block device: needs [`Writes::Device`], and space of its own to
/// preallocate is a probe file's only. (Whether the device is mounted or held is the machine's
/// state: [`Defaults::device_findings`].)
fn device_write_check(
    key: &str,
    span: Range<usize>,
    p: &Profile,
    path: &Path,
    writes: Writes,
) -> Result<(), SpannedError> {
    let name = &p.name;
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
    } else {
        return Ok(());
    };
    Err(SpannedError { span, message })
}
