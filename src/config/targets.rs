//! `[[targets]]` entries and `[scheduler]`, validated into [`TargetSpec`]s the scheduler can
//! run as they are: a target's name, path and writes, its probe settings over `[defaults]`
//! ([`super::defaults`]), one target per file ([`super::target_files`]), and what its path says
//! at load: a write target that is not a regular file or a block device is refused (with the
//! location of the offending value). What the machine's state says against a target (a probe
//! file whose size does not fit its filesystem with the reserve, a device to write that is
//! mounted or held) is a finding at that value, not an error: the target loads, and its runs
//! fail with the reason while the machine stays so.

use super::defaults::{Defaults, ProbeTable};
use super::path_stat::{PathStat, SPACE_CHECK_WAIT, with_deadline};
use super::probe_settings::{ProbeSettings, Writes, or, positive, size};
use super::raw::{RawConfig, RawTarget};
use super::spanned::{SpannedError, invalid};
use super::target_files::TargetFile;
use std::path::PathBuf;
use toml::Spanned;

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
    /// For a probe file, the filesystem it belongs on (a `[[targets]]` entry's `mountpoint`, or
    /// the mount a `[[discover]]` rule found it in): a run whose file would be on another is
    /// skipped, and no file is made there.
    pub mounted_at: Option<MountedAt>,
}

/// The filesystem a probe file belongs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountedAt {
    /// Its mountpoint.
    pub mountpoint: PathBuf,
    /// The device number of the mount a rule found (`None`: any filesystem mounted there).
    pub device: Option<(u32, u32)>,
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

/// Validates `[defaults]`, `[scheduler]`, `[profiles]` and `[[targets]]`; also returns where
/// each target's file is, one target per file ([`super::target_files`]). What the machine's
/// state says against the targets goes to `findings`.
pub(super) fn validate(
    raw: &RawConfig,
    findings: &mut Vec<SpannedError>,
) -> Result<(Vec<TargetSpec>, Vec<TargetFile>, SchedulerConfig), SpannedError> {
    let defaults = Defaults::from_raw(raw)?;
    let scheduler = SchedulerConfig {
        max_concurrent_probes: match &raw.scheduler.max_concurrent_probes {
            Some(n) => positive("scheduler.max_concurrent_probes", n, 1024)? as usize,
            None => 1,
        },
    };
    let mut targets: Vec<TargetSpec> = Vec::new();
    let mut files: Vec<TargetFile> = Vec::new();
    for (i, t) in raw.targets.iter().enumerate() {
        let spec = target(&format!("targets[{i}]"), t, &defaults, findings)?;
        if targets.iter().any(|other| other.name == spec.name) {
            return Err(invalid(
                &t.get_ref().name,
                format!(
                    "targets[{i}].name: {:?} is used by another target; names must be unique",
                    spec.name
                ),
            ));
        }
        let file = TargetFile::look(&spec.name, &spec.path);
        let shares = |j: usize| {
            files[j].identity == file.identity
                && (file.rdev.is_none() || regions_overlap(&targets[j], &spec))
        };
        if let Some(j) = (0..files.len()).find(|&j| shares(j)) {
            let first = &targets[j];
            return Err(invalid(
                &t.get_ref().path,
                format!(
                    "targets[{i}].path: target {:?} and target {:?} (targets[{j}]) probe one file ({}); a file belongs to one target, or each would refill it to its own size in turn: give {:?} a path of its own",
                    spec.name,
                    first.name,
                    file.sameness(&first.path, &spec.path),
                    spec.name,
                ),
            ));
        }
        targets.push(spec);
        files.push(file);
    }
    Ok((targets, files, scheduler))
}

/// Whether the regions two targets on one block device probe overlap: from `offset`, `size`
/// bytes (to the device's end where `size` is not set).
fn regions_overlap(a: &TargetSpec, b: &TargetSpec) -> bool {
    let end = |t: &TargetSpec| {
        t.settings
            .size
            .map_or(u64::MAX, |s| t.offset.saturating_add(s))
    };
    a.offset < end(b) && b.offset < end(a)
}

/// A target with write profiles writes to a regular file (its probe file, made where the path does
/// not exist yet) or to a block device (opted in, checked in `Defaults::settings`): a path that
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
    if kind.is_file() || kind.is_block_device() {
        return Ok(());
    }
    let what = format!("a {}", crate::bounded_read::kind_name(&kind));
    Err(invalid(
        &r.path,
        format!(
            "{prefix}.path: profile {:?} writes and {} is {what}; write probes need a regular file (the probe file) or a block device with allow_device_writes = true",
            writer.name,
            path.display()
        ),
    ))
}

/// Whether a probe file's size fits its filesystem with the reserve (the larger of 10% and
/// `min_free`, [`crate::probe::io_target::space`]), checked where the path (or its directory)
/// exists: a size beyond the filesystem, or one whose fill would leave less than the reserve free,
/// is a finding at the target's `size` (or `min_free`, or its name, where they are inherited):
/// the machine's state, not the configuration's (the target loads, and each fill checks again).
/// Only sizes that are set are checked: the default size is checked before each fill. The check
/// runs [`with_deadline`].
fn space_check(
    prefix: &str,
    r: &RawTarget,
    stat: &PathStat,
    settings: &ProbeSettings,
) -> Option<SpannedError> {
    let size = settings.size?;
    if r.offset.is_some() {
        return None;
    }
    let path = &stat.path;
    let min_free = settings.min_free;
    let known = match stat.meta() {
        Ok(meta) => meta.cloned(),
        Err(()) => {
            tracing::warn!(path = %path.display(), "{prefix}.size: the filesystem did not answer the space check within {SPACE_CHECK_WAIT:?}; it is checked again before the fill");
            return None;
        }
    };
    let owned = path.clone();
    let Some(answer) = with_deadline(move || {
        crate::probe::io_target::space::check_known(&owned, known.as_ref(), size, min_free)
    }) else {
        tracing::warn!(path = %path.display(), "{prefix}.size: the filesystem did not answer the space check within {SPACE_CHECK_WAIT:?}; it is checked again before the fill");
        return None;
    };
    match answer {
        Ok(Err(problem)) => {
            // A reserve set by min_free is what failed where min_free is above the 10%.
            let by_min_free = matches!(problem, crate::probe::io_target::space::SpaceProblem::Reserve { reserve, .. } if reserve == min_free && min_free > 0);
            let (key, span) = match (&r.size, &r.min_free) {
                (_, Some(m)) if by_min_free => ("min_free", m.span()),
                (Some(s), _) => ("size", s.span()),
                (None, _) => ("size", r.name.span()),
            };
            Some(SpannedError {
                span,
                message: format!("{prefix}.{key}: {problem}"),
            })
        }
        // A path whose directory does not exist yet is checked before its fill.
        Ok(Ok(())) | Err(_) => None,
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

/// Validates one `[[targets]]` entry; `prefix` names it in messages (`targets[0]`). What the
/// machine's state says against it goes to `findings`.
fn target(
    prefix: &str,
    t: &Spanned<RawTarget>,
    defaults: &Defaults<'_>,
    findings: &mut Vec<SpannedError>,
) -> Result<TargetSpec, SpannedError> {
    let r = t.get_ref();
    let name = r.name.get_ref().trim().to_owned();
    // Surrounding whitespace is trimmed, as it always was; the rest is the one name check.
    super::target_name::check(if name.is_empty() {
        r.name.get_ref()
    } else {
        &name
    })
    .map_err(|e| invalid(&r.name, format!("{prefix}.name: {e}")))?;
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
    let table = ProbeTable {
        prefix,
        keys: r.probe_keys(),
        writes: target_writes(prefix, r)?,
        span: t.span(),
        anchor: r.name.span(),
        path: Some(&stat),
    };
    let settings = defaults.settings(&table)?;
    kind_check(prefix, r, &stat, &settings)?;
    let mounted_at = mountpoint(prefix, r, &path, &stat)?;
    findings.extend(defaults.device_findings(&table, &settings)?);
    findings.extend(space_check(prefix, r, &stat, &settings));
    Ok(TargetSpec {
        offset: or(r.offset.as_ref(), 0, |v| {
            size(&format!("{prefix}.offset"), v)
        })?,
        name,
        path,
        rule: None,
        settings,
        mounted_at,
    })
}

/// `mountpoint` of a `[[targets]]` entry: an absolute path the target's path lies under, for a
/// probe file (a block device has no filesystem).
fn mountpoint(
    prefix: &str,
    r: &RawTarget,
    path: &std::path::Path,
    stat: &PathStat,
) -> Result<Option<MountedAt>, SpannedError> {
    use std::os::unix::fs::FileTypeExt;
    let Some(m) = &r.mountpoint else {
        return Ok(None);
    };
    let mountpoint = PathBuf::from(m.get_ref());
    let problem = if !mountpoint.is_absolute() {
        Some(format!(
            "expected an absolute path, found {:?}",
            m.get_ref()
        ))
    } else if !path.starts_with(&mountpoint) || path == mountpoint {
        Some(format!(
            "{} is not under {}: mountpoint names the filesystem the probe file belongs on",
            path.display(),
            mountpoint.display()
        ))
    } else if stat
        .meta()
        .is_ok_and(|m| m.is_some_and(|m| m.file_type().is_block_device()))
    {
        Some(format!(
            "{} is a block device: mountpoint applies to probe files",
            path.display()
        ))
    } else {
        None
    };
    match problem {
        Some(p) => Err(invalid(m, format!("{prefix}.mountpoint: {p}"))),
        None => Ok(Some(MountedAt {
            mountpoint,
            device: None,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_on_one_device_may_share_it_by_regions_that_do_not_overlap() {
        let spec = |keys: &str| {
            let config = crate::config::Config::from_toml(
                &format!("[[targets]]\nname = \"t\"\npath = \"/dev/x\"\n{keys}\n"),
                std::path::Path::new("t.toml"),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            config.targets[0].clone()
        };
        let halves = (spec("size = \"32MiB\""), spec("offset = \"32MiB\""));
        assert!(!regions_overlap(&halves.0, &halves.1));
        assert!(!regions_overlap(&halves.1, &halves.0));
        let whole = spec("");
        assert!(regions_overlap(&whole, &halves.1));
        assert!(regions_overlap(&whole, &whole));
        let inside = spec("offset = \"16MiB\"\nsize = \"4MiB\"");
        assert!(regions_overlap(&halves.0, &inside));
        assert!(!regions_overlap(&halves.1, &inside));
    }
}
