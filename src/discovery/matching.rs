//! What each rule finds in one [`Scan`] of the machine: pure functions, from the devices and
//! mounts read to the [`TargetSpec`]s to probe.
//!
//! Per rule ([`find`]): candidates are the devices (block rules) or mounts (mount rules) the rule's
//! regexes match; those that are not worth probing are left out with a note saying why (empty,
//! memory-backed, held by RAID/multipath/device-mapper, a mount without a block device and no
//! `file`), or that the rule's name template names nothing (it needs a fact the device lacks, or
//! the name is empty: counted as unnamed). Two mounts of one volume are one
//! target, named after the first mountpoint in sort order; two matches named alike keep the
//! first; a match at the file or device of a configured target is that target's, not the rule's.
//! The rest are sorted by name and the first `max_targets` kept, so that the same targets
//! survive every rescan. Across rules ([`assemble`]): a name already used by a configured target
//! or an earlier rule is not used again, and a block rule with `skip_claimed` leaves out the disks
//! that a mount rule probes (a cloud volume mounted for a pod is probed once, as the mount rule's
//! target, and is not also a disk of the block rule).

use crate::blockdev::BlockDevice;
use crate::config::discover::{BlockSource, DiscoverRule, MountSource, RuleSource};
use crate::config::name_template::{NameTemplate, facts};
use crate::config::target_name;
use crate::config::{MountedAt, TargetFile, TargetSpec};
use crate::device_filter::DeviceFilter;
use crate::mountinfo::MountEntry;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What one scan of the machine read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// Where the device nodes are (`--path.devfs`): targets found by kernel name are probed at
    /// `<dev_dir>/<kname>`.
    pub dev_dir: PathBuf,
    /// Block devices and partitions, sorted by kernel name.
    pub devices: Vec<BlockDevice>,
    /// Mounted filesystems (empty when no mount rule asked).
    pub mounts: Vec<MountEntry>,
    /// `MAJ:MIN` of the block device a `/dev/...` mount source names (found under `dev_dir`), for
    /// the mounts whose own device number is anonymous (major 0: btrfs, fuseblk).
    pub sources: BTreeMap<String, (u32, u32)>,
}

impl Scan {
    fn device(&self, major: u32, minor: u32) -> Option<&BlockDevice> {
        self.devices
            .iter()
            .find(|d| d.major == major && d.minor == minor)
    }
}

/// What one rule found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Found {
    /// The targets to probe, sorted by name, at most `max_targets`.
    pub targets: Vec<TargetSpec>,
    /// The whole disks under each target, in the order of `targets` (empty where the target
    /// has no block device).
    pub disks: Vec<Vec<String>>,
    /// Names of the matches beyond `max_targets`.
    pub dropped: Vec<String>,
    /// One sentence per match that is not probed, saying why.
    pub notes: Vec<String>,
    /// Matches the name template names nothing (a fact it needs is missing, or the name is
    /// empty): not probed.
    pub unnamed: usize,
}

/// A match before names are made unique and the limit applied.
struct Candidate {
    /// The device (or, without one, the filesystem's device number): one target per key.
    key: (u32, u32),
    /// What matched (kernel name or mountpoint), for notes.
    what: String,
    /// `None` when the template names nothing (the note that says why is made already).
    name: Option<String>,
    path: PathBuf,
    /// Where its file lies, for a mount rule with `file`: the mount's device number and the
    /// file's path inside the filesystem (what a bind mount of it shares).
    file: Option<FilePlace>,
    /// The whole disks under it.
    disks: Vec<String>,
    /// Its `cohort` template with the rule regex's capture groups filled in.
    cohort: String,
    /// For a mount rule with `file`, the mount the file belongs in (its runs are skipped while
    /// the path leads elsewhere).
    mounted_at: Option<MountedAt>,
}

/// A file by the mount table: the device number of the filesystem it is on, and its path from
/// that filesystem's root.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FilePlace {
    major: u32,
    minor: u32,
    inside: PathBuf,
}

/// Where `path` (resolved) lies by `mounts`: under the mount with the longest mountpoint that
/// holds it (the last in the table of those, which is mounted over the others).
fn place_of(mounts: &[MountEntry], path: &Path) -> Option<FilePlace> {
    let (mount, rest) = mounts
        .iter()
        .filter_map(|m| Some((m, path.strip_prefix(&m.mountpoint).ok()?)))
        .rev()
        .max_by_key(|(m, _)| m.mountpoint.len())?;
    Some(FilePlace {
        major: mount.major,
        minor: mount.minor,
        inside: Path::new(&mount.root).join(rest),
    })
}

/// The configured target that owns the candidate's file or device, if one does.
fn owner<'a>(c: &Candidate, scan: &Scan, configured: &'a [TargetFile]) -> Option<&'a TargetFile> {
    configured.iter().find(|t| match &c.file {
        Some(file) => place_of(&scan.mounts, &t.resolved).as_ref() == Some(file),
        None => t
            .rdev
            .is_some_and(|rdev| (libc::major(rdev), libc::minor(rdev)) == c.key),
    })
}

/// `rule`'s cohort template with a match's capture groups filled in (its facts are the device's,
/// filled in where the target is exported).
fn cohort(rule: &DiscoverRule, groups: &[Option<&str>]) -> String {
    let template = &rule.settings.cohort;
    if !template.contains('$') {
        return template.clone();
    }
    NameTemplate::parse(template).map_or_else(
        |_| String::new(),
        |t| t.with_groups(groups).as_str().to_owned(),
    )
}

/// What `rule` finds in `scan`; a match at the file or device of a configured target
/// (`configured`) is left to it.
pub fn find(rule: &DiscoverRule, scan: &Scan, configured: &[TargetFile]) -> Found {
    let mut notes = Vec::new();
    let candidates = match &rule.source {
        RuleSource::Block(source) => block(rule, source, scan, &mut notes),
        RuleSource::Mount(source) => mount(rule, source, scan, &mut notes),
    };
    let mut keys = BTreeMap::new();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut kept = Vec::new();
    let mut unnamed = 0;
    for c in candidates {
        if let Some(owner) = owner(&c, scan, configured) {
            notes.push(format!(
                "rule {}: {} ({}) is the {} of the configured target {:?}; probed once, as {:?}",
                rule.id,
                c.what,
                c.path.display(),
                if c.file.is_some() { "file" } else { "device" },
                owner.name,
                owner.name
            ));
            continue;
        }
        if let Some(first) = keys.get(&c.key) {
            notes.push(format!(
                "rule {}: {} is the same volume as {first}; probed once, as {first}",
                rule.id, c.what
            ));
            continue;
        }
        keys.insert(c.key, c.what.clone());
        let Some(name) = c.name else {
            unnamed += 1;
            continue;
        };
        if name.is_empty() {
            notes.push(format!(
                "rule {}: the name of {} is empty (template {:?}); not probed",
                rule.id,
                c.what,
                rule.name.as_str()
            ));
            unnamed += 1;
            continue;
        }
        if let Some(first) = names.get(&name) {
            notes.push(format!(
                "rule {}: {} would be named {name:?}, as {first} already is; not probed",
                rule.id, c.what
            ));
            continue;
        }
        names.insert(name.clone(), c.what.clone());
        kept.push((name, c.path, c.disks, c.cohort, c.mounted_at));
    }
    kept.sort_by(|a, b| a.0.cmp(&b.0));
    let dropped = kept
        .split_off(kept.len().min(rule.max_targets))
        .into_iter()
        .map(|(name, ..)| name)
        .collect();
    let (targets, disks) = kept
        .into_iter()
        .map(|(name, path, disks, cohort, mounted_at)| {
            let mut target = rule.target(name, path);
            target.settings.cohort = cohort;
            target.mounted_at = mounted_at;
            (target, disks)
        })
        .unzip();
    Found {
        targets,
        disks,
        dropped,
        notes,
        unnamed,
    }
}

fn device_path(scan: &Scan, d: &BlockDevice) -> PathBuf {
    scan.dev_dir.join(&d.kname)
}

/// Memory-backed block devices: zram and the brd RAM disk.
fn memory_backed(kname: &str) -> bool {
    let digits_after = |prefix: &str| {
        kname
            .strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    digits_after("zram") || digits_after("ram")
}

fn block(
    rule: &DiscoverRule,
    source: &BlockSource,
    scan: &Scan,
    notes: &mut Vec<String>,
) -> Vec<Candidate> {
    let mut out = Vec::new();
    for d in &scan.devices {
        if d.parent.is_some() && !source.partitions {
            continue;
        }
        let groups: Vec<Option<&str>> = match &source.devices {
            DeviceFilter::Include(re) => match re.captures(&d.kname) {
                Some(c) => c.iter().map(|m| m.map(|m| m.as_str())).collect(),
                None => continue,
            },
            DeviceFilter::Exclude(re) if re.is_match(&d.kname) => continue,
            DeviceFilter::Exclude(_) => vec![Some(d.kname.as_str())],
        };
        let why_not = if d.sectors == 0 {
            Some("is empty (size 0)".to_owned())
        } else if memory_backed(&d.kname) {
            Some("is memory-backed".to_owned())
        } else if d.holders > 0 && !source.held {
            Some(
                "has holders (a RAID, multipath or device-mapper member; set include_held = true to probe it)"
                    .to_owned(),
            )
        } else {
            None
        };
        if let Some(why) = why_not {
            notes.push(format!("rule {}: {} {why}; not probed", rule.id, d.kname));
            continue;
        }
        let name = rule.name.render(&groups, facts(Some(d)));
        if let Err(unnamed) = &name {
            notes.push(format!(
                "rule {}: {} has no {{{}}} for the name {:?}; not probed",
                rule.id,
                d.kname,
                unnamed.facts(),
                rule.name.as_str()
            ));
        }
        out.push(Candidate {
            key: (d.major, d.minor),
            what: d.kname.clone(),
            name: checked(rule, &d.kname, name.ok(), notes),
            path: device_path(scan, d),
            file: None,
            mounted_at: None,
            disks: d.disks.clone(),
            cohort: cohort(rule, &groups),
        });
    }
    out
}

/// The name a rule's template gave the match `what`, when the name check
/// ([`crate::config::target_name`]) accepts it; otherwise a note says why the match is not probed.
fn checked(
    rule: &DiscoverRule,
    what: &str,
    name: Option<String>,
    notes: &mut Vec<String>,
) -> Option<String> {
    let name = name?;
    match target_name::check(&name) {
        Ok(()) => Some(name),
        Err(err) => {
            notes.push(format!(
                "rule {}: {} would be named {}: {err}; not probed",
                rule.id,
                target_name::quoted(what),
                target_name::quoted(&name),
            ));
            None
        }
    }
}

fn mount(
    rule: &DiscoverRule,
    source: &MountSource,
    scan: &Scan,
    notes: &mut Vec<String>,
) -> Vec<Candidate> {
    let mut mounts: Vec<&MountEntry> = scan.mounts.iter().collect();
    mounts.sort_by(|a, b| a.mountpoint.cmp(&b.mountpoint));
    let mut out = Vec::new();
    for m in mounts {
        let Some(captures) = source.mountpoint.captures(&m.mountpoint) else {
            continue;
        };
        if source
            .fstype
            .as_ref()
            .is_some_and(|f| !f.is_match(&m.fstype))
        {
            continue;
        }
        let number = if m.major != 0 {
            Some((m.major, m.minor))
        } else {
            scan.sources.get(&m.source).copied()
        };
        let device = number.and_then(|(major, minor)| scan.device(major, minor));
        let path = match (&source.file, device) {
            (Some(file), _) => Path::new(&m.mountpoint).join(file),
            (None, Some(d)) => device_path(scan, d),
            (None, None) => {
                notes.push(format!(
                    "rule {}: {} ({}) has no block device; not probed (set file to probe a file inside it)",
                    rule.id, m.mountpoint, m.fstype
                ));
                continue;
            }
        };
        let groups: Vec<Option<&str>> = captures.iter().map(|g| g.map(|g| g.as_str())).collect();
        let name = rule.name.render(&groups, facts(device));
        if let Err(unnamed) = &name {
            notes.push(format!(
                "rule {}: {} has no {{{}}} for the name {:?} (no block device, or sysfs does not say); not probed",
                rule.id,
                m.mountpoint,
                unnamed.facts(),
                rule.name.as_str()
            ));
        }
        out.push(Candidate {
            key: device.map_or((m.major, m.minor), |d| (d.major, d.minor)),
            what: m.mountpoint.clone(),
            name: checked(rule, &m.mountpoint, name.ok(), notes),
            file: source.file.as_ref().map(|file| FilePlace {
                major: m.major,
                minor: m.minor,
                inside: Path::new(&m.root).join(file),
            }),
            mounted_at: source.file.as_ref().map(|_| MountedAt {
                mountpoint: PathBuf::from(&m.mountpoint),
                device: Some((m.major, m.minor)),
            }),
            path,
            disks: device.map(|d| d.disks.clone()).unwrap_or_default(),
            cohort: cohort(rule, &groups),
        });
    }
    out
}

/// The whole disks the mount rules' targets land on, each with the mount rule and target that
/// probe it.
fn claimed(
    rules: &[DiscoverRule],
    found: &[Option<Found>],
    configured: &BTreeSet<String>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (rule, found) in rules.iter().zip(found) {
        let (RuleSource::Mount(_), Some(found)) = (&rule.source, found) else {
            continue;
        };
        for (t, disks) in found.targets.iter().zip(&found.disks) {
            if configured.contains(&t.name) {
                continue; // not the mount rule's: a [[targets]] entry has the name
            }
            for disk in disks {
                out.entry(disk.clone())
                    .or_insert_with(|| format!("mount rule {} (as {})", rule.id, t.name));
            }
        }
    }
    out
}

/// What every rule found, together: targets in rule order, each name used once and never one a
/// configured target has (`configured`), and no disk a mount rule probes in a block rule with
/// `skip_claimed`, with notes on the matches left out for that. Returns the targets and, per
/// rule, how many of them it contributed.
pub fn assemble(
    rules: &[DiscoverRule],
    found: &[Option<Found>],
    configured: &BTreeSet<String>,
) -> (Vec<TargetSpec>, Vec<usize>, Vec<String>) {
    let mut targets: Vec<TargetSpec> = Vec::new();
    let mut counts = Vec::with_capacity(rules.len());
    let mut notes = Vec::new();
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    let claimed = claimed(rules, found, configured);
    for (rule, found) in rules.iter().zip(found) {
        let mut count = 0;
        let skip_claimed = matches!(&rule.source, RuleSource::Block(b) if b.skip_claimed);
        let disks = found.iter().flat_map(|f| &f.disks);
        for (t, disks) in found.iter().flat_map(|f| &f.targets).zip(disks) {
            if let Some(by) = disks
                .iter()
                .find_map(|d| claimed.get(d))
                .filter(|_| skip_claimed)
            {
                notes.push(format!(
                    "rule {}: {} is probed by {by}; not probed by this rule (skip_claimed)",
                    rule.id,
                    t.path.display()
                ));
                continue;
            }
            let taken = if configured.contains(&t.name) {
                Some("a [[targets]] entry".to_owned())
            } else {
                owner.get(&t.name).map(|r| format!("rule {r}"))
            };
            if let Some(by) = taken {
                notes.push(format!(
                    "rule {}: the name {:?} is taken by {by}; {} not probed by this rule",
                    rule.id,
                    t.name,
                    t.path.display()
                ));
                continue;
            }
            owner.insert(t.name.clone(), rule.id.clone());
            targets.push(t.clone());
            count += 1;
        }
        counts.push(count);
    }
    (targets, counts, notes)
}

/// The configured targets followed by the discovered ones whose names they do not use.
pub(crate) fn with_configured(
    configured: &[TargetSpec],
    discovered: &[TargetSpec],
) -> Vec<TargetSpec> {
    let mut all = configured.to_vec();
    all.extend(
        discovered
            .iter()
            .filter(|d| configured.iter().all(|c| c.name != d.name))
            .cloned(),
    );
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn mount(id: u64, minor: u32, root: &str, mountpoint: &str) -> MountEntry {
        MountEntry {
            id,
            major: 8,
            minor,
            root: root.to_owned(),
            mountpoint: mountpoint.to_owned(),
            fstype: "ext4".to_owned(),
            source: format!("/dev/sdb{minor}"),
        }
    }

    /// A configured target's probe file found again by a mount rule, under its own mountpoint or
    /// a bind mount of it, is the configured target's; another volume's file is the rule's.
    #[test]
    fn a_configured_targets_file_is_not_found_again() {
        let config = Config::from_toml(
            "[[discover]]\nid = \"vols\"\nkind = \"mount\"\nmountpoint_include = \"^/nonexistent-66/(.*)$\"\n\
             name = \"vol-$1\"\nfile = \"probe.dat\"\nprofiles = [\"randread-4k-qd1\"]\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let scan = Scan {
            dev_dir: PathBuf::from("/dev"),
            devices: Vec::new(),
            mounts: vec![
                mount(1, 1, "/", "/nonexistent-66/a"),
                mount(2, 1, "/", "/nonexistent-66/bind"),
                mount(3, 2, "/", "/nonexistent-66/c"),
            ],
            sources: BTreeMap::new(),
        };
        let mine = TargetFile::look("mine", Path::new("/nonexistent-66/a/probe.dat"));
        let found = find(&config.discover[0], &scan, &[mine]);
        let names: Vec<&str> = found.targets.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["vol-c"]);
        assert!(
            found.notes.iter().any(|n| n
                == "rule vols: /nonexistent-66/bind (/nonexistent-66/bind/probe.dat) is the file of the configured target \"mine\"; probed once, as \"mine\""),
            "{:?}",
            found.notes
        );
        let found = find(&config.discover[0], &scan, &[]);
        assert_eq!(found.targets.len(), 2, "one volume, one target: {found:?}");
    }
}
