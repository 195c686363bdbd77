//! Targets lost by block rules: a disk that disappears while a `kind = "block"` rule probes it
//! leaves `/metrics` with all its series at the next rescan, and with them every alert that
//! could name it. So the rule remembers it: [`LostTracker`] compares what each rescan finds with
//! what the rule probed before, and a target that is no longer found *because its device is gone*
//! (no device of that kernel name, serial and WWN, or it is empty now: a detached loop device, a
//! drive without media) becomes a [`LostTarget`], published as
//! `diskprobe_discovered_target_lost_timestamp_seconds` with the disk's identity.
//!
//! An entry stays for the rule's `lost_retention` (zero: none are kept), is dropped when the rule
//! finds a target of the same name again (the same disk, where names follow the disk), when
//! `[retired] disks` names the target or the disk's serial, WWN or volume id (no entry is made
//! for such a disk either: [`Retired`]), and with the rule when a reload removes it or makes it
//! a mount rule. Mount rules never lose targets: a
//! volume that moves with its pod is normal. Entries are kept in the state directory
//! ([`super::lost_file`]), so that an agent restarted after the disk vanished still names it.
//!
//! What the file gives back is not trusted ([`admit`], at every expiry): one entry per target
//! (the latest), at most the rule's `max_targets` (the latest), names that pass the name check,
//! fields of at most [`target_name::MAX_NAME_BYTES`] printable bytes, and no time in the future
//! (taken as now); what is dropped or changed is logged.

use super::lost_file;
pub(crate) use super::lost_file::LostTarget;
use super::matching::Scan;
use crate::blockdev::BlockDevice;
use crate::config::Retired;
use crate::config::TargetSpec;
use crate::config::discover::{DiscoverRule, RuleSource};
use crate::config::target_name;
use crate::state_dir::StateDir;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

/// The devices under the targets one rule probes, by target name.
type Probing = BTreeMap<String, BlockDevice>;

/// The rule's block-rule retention: `None` for mount rules and a zero `lost_retention`.
fn retention(rule: &DiscoverRule) -> Option<Duration> {
    match &rule.source {
        RuleSource::Block(b) if !b.lost_retention.is_zero() => Some(b.lost_retention),
        _ => None,
    }
}

/// Whether `before`'s device is still in `scan`: a non-empty device of the same kernel name,
/// serial and WWN.
fn still_there(before: &BlockDevice, scan: &Scan) -> bool {
    scan.devices.iter().any(|d| {
        d.kname == before.kname && d.sectors > 0 && d.serial == before.serial && d.wwn == before.wwn
    })
}

/// What [`LostTracker::after_rescan`] is given: the rules, which of them were rescanned, the
/// targets published for all of them, and the scan.
pub struct Rescan<'a> {
    /// The rules, in file order.
    pub rules: &'a [DiscoverRule],
    /// Indices of the rules this rescan scanned.
    pub ready: &'a [usize],
    /// The targets published for every rule (a target's `rule` says which).
    pub targets: &'a [TargetSpec],
    /// What the rescan read.
    pub scan: &'a Scan,
    /// Now, in Unix seconds.
    pub now: f64,
}

/// The lost targets of every rule, what each block rule probed at its last rescan, and the file
/// they are kept in.
#[derive(Debug, Default)]
pub struct LostTracker {
    lost: Vec<LostTarget>,
    probing: BTreeMap<String, Probing>,
    /// The state directory, opened once, that keeps them.
    dir: Option<StateDir>,
    /// The last save failed (logged once until one succeeds).
    save_failed: bool,
    /// `[retired] disks`: never lost.
    retired: Retired,
}

/// Whether `retired` names the target of `l` or its disk.
fn is_retired(retired: &Retired, l: &LostTarget) -> bool {
    retired.names(&l.target, [&l.serial, &l.wwn, &l.volume_id])
}

impl LostTracker {
    /// A tracker keeping its entries in `file` (none: in memory only), starting from what the
    /// file holds (checked against the rules at the first [`LostTracker::expire`]).
    pub fn load(file: Option<PathBuf>) -> LostTracker {
        let Some(path) = file else {
            return LostTracker::default();
        };
        let dir = path.parent().map(StateDir::open);
        let dir = match dir {
            Some(Ok(dir)) if path.file_name() == Some(lost_file::FILE_NAME.as_ref()) => dir,
            Some(Err(err)) => {
                tracing::warn!(file = %path.display(), %err, "discovery: cannot open the state directory; lost targets are kept in memory only");
                return LostTracker::default();
            }
            _ => {
                tracing::warn!(file = %path.display(), "discovery: not a lost targets file in a directory; lost targets are kept in memory only");
                return LostTracker::default();
            }
        };
        let lost = lost_file::load(&dir).unwrap_or_else(|err| {
            tracing::warn!(%err, "discovery: cannot read the lost targets; starting without them");
            Vec::new()
        });
        LostTracker {
            lost,
            dir: Some(dir),
            ..LostTracker::default()
        }
    }

    /// Sets the disks that are gone for good (`[retired] disks`): the next
    /// [`LostTracker::expire`] drops their entries, and no rescan makes new ones.
    pub(crate) fn set_retired(&mut self, retired: &Retired) {
        self.retired = retired.clone();
    }

    /// The lost targets, oldest first.
    pub fn entries(&self) -> &[LostTarget] {
        &self.lost
    }

    /// Drops the entries of rules that are gone, are mount rules or keep none, those past their
    /// rule's retention at `now` and those of retired disks; saves when that changed anything.
    pub(crate) fn expire(&mut self, rules: &[DiscoverRule], now: f64) {
        let before = std::mem::take(&mut self.lost);
        let count = before.len();
        let (admitted, notes) = admit(before, rules, now);
        for note in &notes {
            tracing::warn!("discovery: lost targets: {note}");
        }
        self.lost = admitted;
        let before = if notes.is_empty() { count } else { usize::MAX };
        for l in self.lost.iter().filter(|l| is_retired(&self.retired, l)) {
            tracing::info!(rule = %l.rule, target = %l.target, device = %l.device, serial = %l.serial, "discovery: a lost disk is retired ([retired] disks): no longer reported lost");
        }
        let retired = &self.retired;
        self.lost.retain(|l| !is_retired(retired, l));
        self.lost.retain(|l| {
            rules
                .iter()
                .filter(|r| r.id == l.rule)
                .find_map(retention)
                .is_some_and(|keep| l.since() + keep.as_secs_f64() > now)
        });
        self.probing
            .retain(|id, _| rules.iter().any(|r| &r.id == id && retention(r).is_some()));
        if self.lost.len() != before {
            self.save();
        }
    }

    /// After a rescan: for every rescanned block rule, the targets it probed before whose
    /// device is gone become lost, those it finds now stop being lost, and what it probes now is
    /// remembered. Saves when the entries changed.
    pub fn after_rescan(&mut self, r: &Rescan<'_>) {
        let mut changed = false;
        for rule in r.ready.iter().map(|&i| &r.rules[i]) {
            if retention(rule).is_none() {
                continue;
            }
            let now: BTreeSet<&str> = r
                .targets
                .iter()
                .filter(|t| t.rule.as_deref() == Some(rule.id.as_str()))
                .map(|t| t.name.as_str())
                .collect();
            let before = self.probing.remove(&rule.id).unwrap_or_default();
            for (name, device) in &before {
                if now.contains(name.as_str()) || still_there(device, r.scan) {
                    continue;
                }
                self.lost
                    .retain(|l| !(l.rule == rule.id && &l.target == name));
                let lost = LostTarget {
                    rule: rule.id.clone(),
                    target: name.clone(),
                    device: device.kname.clone(),
                    model: device.model.clone(),
                    serial: device.serial.clone(),
                    wwn: device.wwn.clone(),
                    volume_id: device.cloud.volume_id.clone(),
                    since_ms: (r.now * 1000.0).round() as u64,
                };
                if is_retired(&self.retired, &lost) {
                    tracing::info!(rule = %rule.id, target = %name, device = %device.kname, "discovery: a retired disk ([retired] disks) is gone, as planned: not reported lost");
                } else {
                    self.lost.push(lost);
                }
                changed = true;
            }
            let found_again = self.lost.len();
            self.lost
                .retain(|l| !(l.rule == rule.id && now.contains(l.target.as_str())));
            changed |= self.lost.len() != found_again;
            self.probing
                .insert(rule.id.clone(), probing(&rule.id, r.targets, r.scan));
        }
        if changed {
            self.save();
        }
    }

    fn save(&mut self) {
        let Some(dir) = &self.dir else { return };
        match lost_file::save(dir, &self.lost) {
            Ok(()) => self.save_failed = false,
            Err(err) if !self.save_failed => {
                self.save_failed = true;
                tracing::warn!(%err, "discovery: cannot save the lost targets; they are kept in memory only");
            }
            Err(_) => {}
        }
    }
}

/// `lost` within what the rules can have lost, at `now` (Unix seconds): entries whose name or
/// fields the name check refuses are dropped; one per rule and target (the latest); at most the
/// rule's `max_targets` per rule (the latest); a time in the future is taken as now. Entries of
/// rules that are not in `rules` are left for the retention check. Returns the entries, oldest
/// first, and a note on each kind of change.
pub fn admit(
    lost: Vec<LostTarget>,
    rules: &[DiscoverRule],
    now: f64,
) -> (Vec<LostTarget>, Vec<String>) {
    let now_ms = (now * 1000.0).max(0.0) as u64;
    let mut notes = Vec::new();
    let count = lost.len();
    let mut lost: Vec<LostTarget> = lost.into_iter().filter(well_formed).collect();
    if lost.len() < count {
        notes.push(format!(
            "{} entries with a name or field the name check refuses dropped",
            count - lost.len()
        ));
    }
    let future = lost.iter().filter(|l| l.since_ms > now_ms).count();
    if future > 0 {
        notes.push(format!(
            "{future} entries lost in the future taken as lost now"
        ));
        for l in lost.iter_mut().filter(|l| l.since_ms > now_ms) {
            l.since_ms = now_ms;
        }
    }
    // Oldest first; decided from the latest back, so that the latest of each target and the
    // latest max_targets of each rule are the ones kept.
    lost.sort_by_key(|l| l.since_ms);
    let mut seen = BTreeSet::new();
    let mut per_rule: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut duplicates, mut excess) = (0, 0);
    let mut keep = vec![false; lost.len()];
    for (i, l) in lost.iter().enumerate().rev() {
        if !seen.insert((l.rule.as_str(), l.target.as_str())) {
            duplicates += 1;
            continue;
        }
        if let Some(rule) = rules.iter().find(|r| r.id == l.rule) {
            let n = per_rule.entry(l.rule.as_str()).or_default();
            *n += 1;
            if *n > rule.max_targets {
                excess += 1;
                continue;
            }
        }
        keep[i] = true;
    }
    let mut keep = keep.into_iter();
    lost.retain(|_| keep.next().unwrap_or(false));
    if duplicates > 0 {
        notes.push(format!(
            "{duplicates} duplicate entries dropped (one per target is kept, the latest)"
        ));
    }
    if excess > 0 {
        notes.push(format!(
            "{excess} entries beyond their rule max_targets dropped (the latest are kept)"
        ));
    }
    (lost, notes)
}

/// Whether an entry's target name passes the name check and its other fields are printable and
/// no longer than a name may be.
fn well_formed(l: &LostTarget) -> bool {
    let field = |f: &str| f.is_empty() || target_name::check(f).is_ok();
    target_name::check(&l.target).is_ok()
        && [
            &l.rule,
            &l.device,
            &l.model,
            &l.serial,
            &l.wwn,
            &l.volume_id,
        ]
        .iter()
        .all(|f| field(f))
}

/// The devices under the targets of rule `id` in `targets`: a block rule's target is the device
/// node `<dev_dir>/<kname>`.
fn probing(id: &str, targets: &[TargetSpec], scan: &Scan) -> Probing {
    targets
        .iter()
        .filter(|t| t.rule.as_deref() == Some(id))
        .filter_map(|t| {
            let kname = t.path.strip_prefix(&scan.dev_dir).ok()?.to_str()?;
            let device = scan.devices.iter().find(|d| d.kname == kname)?;
            Some((t.name.clone(), device.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::discovery::matching::{assemble, find};
    use std::path::Path;

    fn disk(kname: &str, serial: &str, sectors: u64) -> BlockDevice {
        BlockDevice {
            kname: kname.into(),
            major: 8,
            minor: kname.bytes().map(u32::from).sum(),
            sectors,
            serial: serial.into(),
            model: "M".into(),
            ..BlockDevice::default()
        }
    }

    fn scan(devices: Vec<BlockDevice>) -> Scan {
        Scan {
            dev_dir: PathBuf::from("/dev"),
            devices,
            mounts: Vec::new(),
            sources: BTreeMap::new(),
        }
    }

    fn rules(extra: &str) -> Vec<DiscoverRule> {
        Config::from_toml(
            &format!(
                "[[discover]]\nid = \"disks\"\nkind = \"block\"\ndevice_include = \"^sd\"\n\
                 name = \"disk-{{serial|kname}}\"\n{extra}\
                 [[discover]]\nid = \"pvcs\"\nkind = \"mount\"\nmountpoint_include = \"^/mnt/(.*)$\"\nname = \"pv-$1\"\n"
            ),
            Path::new("t.toml"),
        )
        .unwrap()
        .discover
    }

    /// One rescan of every rule over `devices` at `now`.
    fn rescan(t: &mut LostTracker, rules: &[DiscoverRule], devices: Vec<BlockDevice>, now: f64) {
        let s = scan(devices);
        let found: Vec<_> = rules.iter().map(|r| Some(find(r, &s, &[]))).collect();
        let (targets, _, _) = assemble(rules, &found, &BTreeSet::new());
        t.after_rescan(&Rescan {
            rules,
            ready: &(0..rules.len()).collect::<Vec<_>>(),
            targets: &targets,
            scan: &s,
            now,
        });
        t.expire(rules, now);
    }

    fn lost(t: &LostTracker) -> Vec<(&str, &str, &str, f64)> {
        t.entries()
            .iter()
            .map(|l| {
                (
                    l.target.as_str(),
                    l.device.as_str(),
                    l.serial.as_str(),
                    l.since(),
                )
            })
            .collect()
    }

    #[test]
    fn a_vanished_disk_is_lost_until_found_again_or_retention_ends() {
        let rules = rules("lost_retention = \"1h\"\n");
        let mut t = LostTracker::default();
        rescan(
            &mut t,
            &rules,
            vec![disk("sda", "A", 8), disk("sdb", "B", 8)],
            0.0,
        );
        assert!(t.entries().is_empty());
        // sdb is gone: lost, with what it was.
        rescan(&mut t, &rules, vec![disk("sda", "A", 8)], 10.0);
        assert_eq!(lost(&t), [("disk-B", "sdb", "B", 10.0)]);
        // Still gone at the next rescan: the entry keeps its time.
        rescan(&mut t, &rules, vec![disk("sda", "A", 8)], 20.0);
        assert_eq!(lost(&t), [("disk-B", "sdb", "B", 10.0)]);
        // Back under another kernel name: found again, no longer lost.
        rescan(
            &mut t,
            &rules,
            vec![disk("sda", "A", 8), disk("sdc", "B", 8)],
            30.0,
        );
        assert!(t.entries().is_empty());
        // sda empties (media gone, a detached loop device): lost; an hour later, expired.
        rescan(
            &mut t,
            &rules,
            vec![disk("sda", "A", 0), disk("sdc", "B", 8)],
            40.0,
        );
        assert_eq!(lost(&t), [("disk-A", "sda", "A", 40.0)]);
        rescan(&mut t, &rules, vec![disk("sdc", "B", 8)], 3639.0);
        assert_eq!(t.entries().len(), 1);
        rescan(&mut t, &rules, vec![disk("sdc", "B", 8)], 3640.0);
        assert!(t.entries().is_empty());
    }

    #[test]
    fn a_target_no_longer_found_while_its_disk_is_there_is_not_lost() {
        let rules = rules("");
        let mut t = LostTracker::default();
        rescan(&mut t, &rules, vec![disk("sda", "A", 8)], 0.0);
        // Another disk took sda's kernel name: the first one is gone.
        rescan(&mut t, &rules, vec![disk("sda", "Z", 8)], 1.0);
        assert_eq!(lost(&t), [("disk-A", "sda", "A", 1.0)]);
        // A reload narrows the rule: sdb is not matched any more, but it is still there.
        let mut t = LostTracker::default();
        rescan(&mut t, &rules, vec![disk("sdb", "B", 8)], 0.0);
        let narrowed = Config::from_toml(
            "[[discover]]\nid = \"disks\"\nkind = \"block\"\ndevice_include = \"^sda$\"\n",
            Path::new("t.toml"),
        )
        .unwrap()
        .discover;
        rescan(&mut t, &narrowed, vec![disk("sdb", "B", 8)], 1.0);
        assert!(t.entries().is_empty());
    }

    #[test]
    fn a_retired_disk_is_dropped_and_never_lost_again_while_listed() {
        let rules = rules("");
        let mut t = LostTracker::default();
        rescan(
            &mut t,
            &rules,
            vec![disk("sda", "A", 8), disk("sdb", "B", 8)],
            0.0,
        );
        rescan(&mut t, &rules, vec![], 1.0);
        assert_eq!(lost(&t).len(), 2);
        // Retired by serial, and by target name: the next expiry drops both, and saves.
        t.set_retired(&Retired::of(["B", "disk-A"]));
        t.expire(&rules, 2.0);
        assert!(t.entries().is_empty(), "{:?}", lost(&t));
        // Back, then gone again while listed: not lost; a disk not listed still is.
        rescan(
            &mut t,
            &rules,
            vec![
                disk("sda", "A", 8),
                disk("sdb", "B", 8),
                disk("sdc", "C", 8),
            ],
            3.0,
        );
        rescan(&mut t, &rules, vec![], 4.0);
        assert_eq!(lost(&t), [("disk-C", "sdc", "C", 4.0)]);
        // Taken off the list, a disk that goes is lost again.
        t.set_retired(&Retired::default());
        rescan(&mut t, &rules, vec![disk("sdb", "B", 8)], 5.0);
        rescan(&mut t, &rules, vec![], 6.0);
        assert_eq!(lost(&t).len(), 2);
    }

    #[test]
    fn no_retention_mount_rules_and_removed_rules_keep_nothing() {
        let off = rules("lost_retention = \"0s\"\n");
        let mut t = LostTracker::default();
        rescan(&mut t, &off, vec![disk("sda", "A", 8)], 0.0);
        rescan(&mut t, &off, vec![], 1.0);
        assert!(t.entries().is_empty(), "0s keeps none");
        let on = rules("");
        rescan(&mut t, &on, vec![disk("sda", "A", 8)], 2.0);
        rescan(&mut t, &on, vec![], 3.0);
        assert_eq!(t.entries().len(), 1);
        // A reload without the rule drops its entries.
        t.expire(&on[1..], 4.0);
        assert!(t.entries().is_empty());
    }

    #[test]
    fn entries_read_back_are_one_per_target_within_max_targets_and_not_in_the_future() {
        let rules = rules("max_targets = 2\n");
        let entry = |target: &str, since_ms: u64| LostTarget {
            rule: "disks".into(),
            target: target.into(),
            device: "sdb".into(),
            model: String::new(),
            serial: String::new(),
            wwn: String::new(),
            volume_id: String::new(),
            since_ms,
        };
        let (kept, notes) = admit(
            vec![
                entry("a", 1_000),
                entry("b", 2_000),
                entry("a", 3_000),
                entry("c", 4_000),
                entry("d\ne", 4_500),
                entry("f", 99_000_000),
            ],
            &rules,
            5.0,
        );
        let kept: Vec<_> = kept
            .iter()
            .map(|l| (l.target.as_str(), l.since_ms))
            .collect();
        // d\ne is refused by the name check; f is taken as lost now; the latest "a" is the one
        // kept, then only the latest two of the rule.
        assert_eq!(kept, [("c", 4_000), ("f", 5_000)]);
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert!(
            notes
                .iter()
                .any(|n| n.contains("1 duplicate entries dropped")),
            "{notes:?}"
        );
        assert!(
            notes
                .iter()
                .any(|n| n.contains("2 entries beyond their rule max_targets")),
            "{notes:?}"
        );
        // What is admitted is admitted again without a note.
        let (again, notes) = admit(vec![entry("c", 4_000), entry("f", 5_000)], &rules, 6.0);
        assert_eq!(again.len(), 2);
        assert!(notes.is_empty());
    }

    #[test]
    fn entries_are_kept_in_the_state_file_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(lost_file::FILE_NAME);
        let rules = rules("");
        let mut t = LostTracker::load(Some(file.clone()));
        rescan(&mut t, &rules, vec![disk("sda", "A", 8)], 0.0);
        rescan(&mut t, &rules, vec![], 5.0);
        let restarted = LostTracker::load(Some(file.clone()));
        assert_eq!(restarted.entries(), t.entries());
        assert_eq!(lost(&restarted), [("disk-A", "sda", "A", 5.0)]);
        // A restarted agent whose rule finds the disk again forgets it, in the file too.
        let mut t = restarted;
        rescan(&mut t, &rules, vec![disk("sdq", "A", 8)], 6.0);
        assert!(LostTracker::load(Some(file)).entries().is_empty());
    }
}
