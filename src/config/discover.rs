//! Validation of `[[discover]]` rules into [`DiscoverRule`]s: which block devices or mounts
//! become targets, how each is named, and the settings every target found gets.
//!
//! A rule's probe settings are those of a `[[targets]]` entry (inheriting `[defaults]`) and are
//! checked the same way, once, for the rule (`defaults::Defaults::settings`). On top of that: block
//! rules are read-only by construction (a write profile is an error); a mount rule probes the
//! device under each mount, read-only, unless it sets `file`; keys of the other kind are errors;
//! at most one of `device_include` and `device_exclude`; a name template may only use capture
//! groups its regex has; `lost_retention` is a duration (`"0s"`: lost targets are not kept).

use super::defaults::{Defaults, ProbeTable};
use super::name_template::NameTemplate;
use super::probe_settings::{ProbeSettings, Writes};
use super::raw::{RawConfig, RawDiscover};
use super::spanned::{SpannedError, invalid, printable, regex};
use super::targets::TargetSpec;
use crate::device_filter::DeviceFilter;
use regex::Regex;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// Default time between rescans.
pub(crate) const DEFAULT_RESCAN: Duration = Duration::from_secs(30);
/// Shortest time between rescans.
pub(crate) const MIN_RESCAN: Duration = Duration::from_secs(1);
/// Default most targets one rule may find.
pub(crate) const DEFAULT_MAX_TARGETS: usize = 64;
/// Largest `max_targets` accepted.
pub(crate) const MAX_MAX_TARGETS: i64 = 4096;
/// Whole disks a block rule without `device_include`/`device_exclude` probes: NVMe namespaces,
/// SCSI/SATA, virtio, Xen and IDE disks, MMC cards.
pub(crate) const DEFAULT_BLOCK_INCLUDE: &str =
    r"^(?:nvme\d+n\d+|sd[a-z]+|vd[a-z]+|xvd[a-z]+|hd[a-z]+|mmcblk\d+)$";
/// Default time a block rule reports a target whose device disappeared as lost.
pub(crate) const DEFAULT_LOST_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Name of every target a rule finds, unless it sets `name`.
pub(crate) const DEFAULT_NAME: &str = "{kname}";

/// A validated `[[discover]]` rule.
#[derive(Debug, Clone)]
pub struct DiscoverRule {
    /// The `rule` label: the `id` key, or the rule's index.
    pub id: String,
    /// What the rule looks at, and what it keeps.
    pub source: RuleSource,
    /// The `target` label of each target found.
    pub name: NameTemplate,
    /// Time between rescans.
    pub rescan: Duration,
    /// Most targets the rule may find; beyond it, the first by name are kept.
    pub max_targets: usize,
    /// How every target found is probed.
    pub settings: ProbeSettings,
}

impl DiscoverRule {
    /// The target this rule makes of a match named `name` at `path`.
    pub(crate) fn target(&self, name: String, path: PathBuf) -> TargetSpec {
        TargetSpec {
            name,
            path,
            offset: 0,
            rule: Some(self.id.clone()),
            settings: self.settings.clone(),
            mounted_at: None,
        }
    }
}

/// Where a rule looks, and which of what it finds it keeps.
#[derive(Debug, Clone)]
pub enum RuleSource {
    /// `kind = "block"`: devices of `/sys/block`.
    Block(BlockSource),
    /// `kind = "mount"`: mounted filesystems of mountinfo.
    Mount(MountSource),
}

impl RuleSource {
    /// `block` or `mount`.
    pub fn kind(&self) -> &'static str {
        match self {
            RuleSource::Block(_) => "block",
            RuleSource::Mount(_) => "mount",
        }
    }
}

/// What a block rule keeps.
#[derive(Debug, Clone)]
pub struct BlockSource {
    /// Kernel names to probe.
    pub devices: DeviceFilter,
    /// Partitions are candidates too (by default only whole devices are).
    pub partitions: bool,
    /// Devices with holders (RAID, multipath, device-mapper members) are candidates too.
    pub held: bool,
    /// Disks a mount rule of the configuration probes are left out (so each volume is probed
    /// once, under the mount rule's name).
    pub skip_claimed: bool,
    /// How long a target whose device disappeared while the rule probed it is reported lost
    /// (`diskprobe_discovered_target_lost_timestamp_seconds`); zero: never.
    pub lost_retention: Duration,
}

/// What a mount rule keeps, and what it probes.
#[derive(Debug, Clone)]
pub struct MountSource {
    /// Mountpoints to probe; its capture groups are `$1`.. in the name.
    pub mountpoint: Regex,
    /// Filesystem types to probe (any when `None`).
    pub fstype: Option<Regex>,
    /// A probe file inside each mount (relative to the mountpoint) instead of the device under it.
    pub file: Option<PathBuf>,
}

/// Validates every `[[discover]]` rule.
pub(super) fn validate(raw: &RawConfig) -> Result<Vec<DiscoverRule>, SpannedError> {
    if raw.discover.is_empty() {
        return Ok(Vec::new());
    }
    let defaults = Defaults::from_raw(raw)?;
    let mut rules: Vec<DiscoverRule> = Vec::new();
    for (i, table) in raw.discover.iter().enumerate() {
        let rule = rule(i, table, &defaults)?;
        if rules.iter().any(|r| r.id == rule.id) {
            let at = table
                .get_ref()
                .id
                .as_ref()
                .map(|s| s.span())
                .unwrap_or(table.span());
            return Err(SpannedError {
                span: at,
                message: format!(
                    "discover[{i}].id: {:?} is used by another rule; ids must be unique",
                    rule.id
                ),
            });
        }
        rules.push(rule);
    }
    Ok(rules)
}

/// The rule's `id` (`key`), or its index.
fn rule_id(i: usize, r: &RawDiscover, key: &str) -> Result<String, SpannedError> {
    match &r.id {
        Some(id) => {
            printable(key, id)?;
            let text = id.get_ref().trim();
            if text.is_empty() {
                return Err(invalid(id, format!("{key}: expected a non-empty id")));
            }
            Ok(text.to_owned())
        }
        None => Ok(i.to_string()),
    }
}

/// A `cohort` template (`key`) refers to no capture group beyond those the rule's regex has.
fn cohort_groups(r: &RawDiscover, key: &str, groups: Groups) -> Result<(), SpannedError> {
    if let Some(c) = r.probe_keys().cohort {
        let used = NameTemplate::parse(c.get_ref()).map_or(0, |t| t.max_group());
        if used > groups.1 {
            return Err(invalid(
                c,
                format!(
                    "{key}: ${used} refers to capture group {used}, but {} has {}",
                    groups.0, groups.1
                ),
            ));
        }
    }
    Ok(())
}

fn rule(
    i: usize,
    table: &Spanned<RawDiscover>,
    defaults: &Defaults<'_>,
) -> Result<DiscoverRule, SpannedError> {
    let r = table.get_ref();
    let prefix = format!("discover[{i}]");
    let key = |k: &str| format!("{prefix}.{k}");
    let id = rule_id(i, r, &key("id"))?;
    let (source, groups) = match r.kind.get_ref().as_str() {
        "block" => {
            no_keys_of(&prefix, "mount", &mount_keys(r))?;
            block_source(&prefix, r)?
        }
        "mount" => {
            no_keys_of(&prefix, "block", &block_keys(r))?;
            mount_source(&prefix, r)?
        }
        other => {
            return Err(invalid(
                &r.kind,
                format!(
                    "{}: expected \"block\" or \"mount\", found {other:?}",
                    key("kind")
                ),
            ));
        }
    };
    cohort_groups(r, &key("cohort"), groups)?;
    let name = match &r.name {
        Some(text) => {
            printable(&key("name"), text)?;
            name_template(&key("name"), text, groups)?
        }
        None => NameTemplate::parse(DEFAULT_NAME).expect("the default name parses"),
    };
    read_only(&prefix, r, &source, defaults)?;
    let rescan = r
        .rescan
        .as_ref()
        .map_or(Ok(DEFAULT_RESCAN), |v| rescan(&key("rescan"), v))?;
    let max_targets = r
        .max_targets
        .as_ref()
        .map_or(Ok(DEFAULT_MAX_TARGETS), |v| {
            max_targets(&key("max_targets"), v)
        })?;
    // A mount rule may only set allow_writes with file (mount_source checks).
    let writes = match &r.allow_writes {
        Some(allow) if *allow.get_ref() => Writes::ProbeFile,
        _ => Writes::Forbidden,
    };
    let settings = defaults.settings(&ProbeTable {
        prefix: &prefix,
        keys: r.probe_keys(),
        writes,
        span: table.span(),
        anchor: table.span(),
        path: None,
    })?;
    Ok(DiscoverRule {
        id,
        source,
        name,
        rescan,
        max_targets,
        settings,
    })
}

/// A `rescan` key: a duration of at least [`MIN_RESCAN`].
fn rescan(key: &str, v: &Spanned<String>) -> Result<Duration, SpannedError> {
    let d =
        crate::units::parse_duration(v.get_ref()).map_err(|e| invalid(v, format!("{key}: {e}")))?;
    if d < MIN_RESCAN {
        return Err(invalid(
            v,
            format!(
                "{key}: expected at least {}, found {}",
                humantime::format_duration(MIN_RESCAN),
                humantime::format_duration(d)
            ),
        ));
    }
    Ok(d)
}

/// A `max_targets` key: from 1 to [`MAX_MAX_TARGETS`].
fn max_targets(key: &str, v: &Spanned<i64>) -> Result<usize, SpannedError> {
    let n = *v.get_ref();
    if !(1..=MAX_MAX_TARGETS).contains(&n) {
        return Err(invalid(
            v,
            format!("{key}: expected a whole number from 1 to {MAX_MAX_TARGETS}, found {n}"),
        ));
    }
    Ok(n as usize)
}

/// The keys only block rules have, with where they are set.
fn block_keys(r: &RawDiscover) -> [(&'static str, Option<Range<usize>>); 6] {
    [
        (
            "device_include",
            r.device_include.as_ref().map(Spanned::span),
        ),
        (
            "device_exclude",
            r.device_exclude.as_ref().map(Spanned::span),
        ),
        (
            "include_partitions",
            r.include_partitions.as_ref().map(Spanned::span),
        ),
        ("include_held", r.include_held.as_ref().map(Spanned::span)),
        ("skip_claimed", r.skip_claimed.as_ref().map(Spanned::span)),
        (
            "lost_retention",
            r.lost_retention.as_ref().map(Spanned::span),
        ),
    ]
}

/// The keys only mount rules have, with where they are set.
fn mount_keys(r: &RawDiscover) -> [(&'static str, Option<Range<usize>>); 4] {
    [
        (
            "mountpoint_include",
            r.mountpoint_include.as_ref().map(Spanned::span),
        ),
        (
            "fstype_include",
            r.fstype_include.as_ref().map(Spanned::span),
        ),
        ("file", r.file.as_ref().map(Spanned::span)),
        ("allow_writes", r.allow_writes.as_ref().map(Spanned::span)),
    ]
}

/// Keys of the other kind are mistakes, not something to ignore.
fn no_keys_of(
    prefix: &str,
    other: &str,
    keys: &[(&str, Option<Range<usize>>)],
) -> Result<(), SpannedError> {
    match keys
        .iter()
        .find_map(|(k, span)| span.clone().map(|s| (k, s)))
    {
        Some((k, span)) => Err(SpannedError {
            span,
            message: format!("{prefix}.{k}: applies to kind = {other:?} rules only"),
        }),
        None => Ok(()),
    }
}

/// The regex whose capture groups a name template may use, and how many it has.
type Groups = (&'static str, usize);

fn block_source(prefix: &str, r: &RawDiscover) -> Result<(RuleSource, Groups), SpannedError> {
    let devices = match (&r.device_include, &r.device_exclude) {
        (Some(include), Some(_)) => {
            return Err(invalid(
                include,
                format!(
                    "{prefix}: device_include and device_exclude are mutually exclusive; set one"
                ),
            ));
        }
        (Some(include), None) => {
            DeviceFilter::Include(regex(&format!("{prefix}.device_include"), include)?)
        }
        (None, Some(exclude)) => {
            DeviceFilter::Exclude(regex(&format!("{prefix}.device_exclude"), exclude)?)
        }
        (None, None) => DeviceFilter::Include(
            Regex::new(DEFAULT_BLOCK_INCLUDE).expect("the default block include compiles"),
        ),
    };
    // The default include has no capture groups; an exclude matches what it leaves out.
    let groups = match &devices {
        DeviceFilter::Include(re) => re.captures_len() - 1,
        DeviceFilter::Exclude(_) => 0,
    };
    let lost_retention = match &r.lost_retention {
        Some(v) => crate::units::parse_duration(v.get_ref())
            .map_err(|e| invalid(v, format!("{prefix}.lost_retention: {e}")))?,
        None => DEFAULT_LOST_RETENTION,
    };
    let source = RuleSource::Block(BlockSource {
        devices,
        partitions: r.include_partitions.as_ref().is_some_and(|b| *b.get_ref()),
        held: r.include_held.as_ref().is_some_and(|b| *b.get_ref()),
        skip_claimed: r.skip_claimed.as_ref().is_some_and(|b| *b.get_ref()),
        lost_retention,
    });
    Ok((source, ("device_include", groups)))
}

fn mount_source(prefix: &str, r: &RawDiscover) -> Result<(RuleSource, Groups), SpannedError> {
    let key = |k: &str| format!("{prefix}.{k}");
    let Some(mountpoint) = &r.mountpoint_include else {
        return Err(invalid(
            &r.kind,
            format!(
                "{prefix}: kind = \"mount\" needs mountpoint_include (a regular expression of mountpoints)"
            ),
        ));
    };
    let mountpoint = regex(&key("mountpoint_include"), mountpoint)?;
    let fstype = r
        .fstype_include
        .as_ref()
        .map(|f| regex(&key("fstype_include"), f))
        .transpose()?;
    let file = r
        .file
        .as_ref()
        .map(|f| probe_file(&key("file"), f))
        .transpose()?;
    if let (Some(allow), None) = (&r.allow_writes, &file) {
        return Err(invalid(
            allow,
            format!(
                "{}: write profiles only ever write a probe file; set file too",
                key("allow_writes")
            ),
        ));
    }
    let groups = mountpoint.captures_len() - 1;
    let source = RuleSource::Mount(MountSource {
        mountpoint,
        fstype,
        file,
    });
    Ok((source, ("mountpoint_include", groups)))
}

/// A `name` key: a template that uses only the capture groups its rule's regex has.
fn name_template(
    key: &str,
    text: &Spanned<String>,
    (regex_key, available): Groups,
) -> Result<NameTemplate, SpannedError> {
    let template =
        NameTemplate::parse(text.get_ref()).map_err(|m| invalid(text, format!("{key}: {m}")))?;
    let used = template.max_group();
    if used > available {
        return Err(invalid(
            text,
            format!(
                "{key}: ${used} refers to capture group {used}, but {regex_key} has {available}"
            ),
        ));
    }
    if template.is_empty() {
        return Err(invalid(text, format!("{key}: expected a non-empty name")));
    }
    Ok(template)
}

/// A `file` key: a path relative to the mountpoint that stays inside the mount.
fn probe_file(key: &str, v: &Spanned<String>) -> Result<PathBuf, SpannedError> {
    let path = Path::new(v.get_ref());
    let inside =
        !v.get_ref().is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)));
    if inside {
        Ok(path.to_owned())
    } else {
        Err(invalid(
            v,
            format!(
                "{key}: expected a path relative to the mountpoint, without .. (e.g. \"diskprobe.dat\"), found {:?}",
                v.get_ref()
            ),
        ))
    }
}

/// Block rules, and mount rules without `file`, probe devices read-only: a write profile in them
/// is an error, located at the profile's name; so it is in a mount rule with `file` that does not
/// set `allow_writes = true`.
fn read_only(
    prefix: &str,
    r: &RawDiscover,
    source: &RuleSource,
    defaults: &Defaults<'_>,
) -> Result<(), SpannedError> {
    let why = match source {
        RuleSource::Block(_) => {
            "block rules are read-only (list the device under [[targets]] to write to it)"
        }
        RuleSource::Mount(MountSource { file: None, .. }) => {
            "a mount rule without file probes the device under each mount, read-only (set file and allow_writes = true to write a probe file inside each mount)"
        }
        RuleSource::Mount(_) if r.allow_writes.as_ref().is_some_and(|b| *b.get_ref()) => {
            return Ok(());
        }
        RuleSource::Mount(_) => {
            "set allow_writes = true in this rule to allow writes to the probe file in each mount"
        }
    };
    let Some(list) = r.profiles.as_ref().or(defaults.profiles) else {
        return Ok(()); // the default profiles read
    };
    for name in list.get_ref() {
        let writes = defaults
            .profile(name.get_ref())
            .is_some_and(|p| p.rw.is_write());
        if writes {
            return Err(invalid(
                name,
                format!(
                    "{prefix}.profiles: profile {:?} writes; {why}",
                    name.get_ref()
                ),
            ));
        }
    }
    Ok(())
}
