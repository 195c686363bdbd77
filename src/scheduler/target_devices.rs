//! The last device seen under each configured target (`[[targets]]`), so that a target whose disk
//! is gone goes on naming it: `diskprobe_target_info` keeps that `device` (and its other labels)
//! until the disk returns or `[retired] disks` names it, and `DiskprobeTargetVanished` sees a
//! device that `/proc/diskstats` no longer has. Kept in the state directory
//! (`target_devices.json`), so that an agent restarted while the disk is still gone names it too.
//!
//! At every stat of a configured target's path ([`TargetDevices::label`], on the stat's thread)
//! the facts found are weighed against the last device: a stat that finds a device records it;
//! one that finds none (the path is gone and its directory is on devtmpfs, a file whose
//! filesystem's disk left sysfs), or no longer the block device it was, or none at all, keeps the
//! last device while sysfs has no device of its kernel name, serial and WWN (or it is empty: a
//! detached loop device, a drive without media). A stat that finds no device while the last one
//! is there forgets it (the target moved off it).
//!
//! The same file keeps the disk each configured target with device writes was pinned to
//! ([`Pin`]): what made the device at its path that disk when a write run was first allowed
//! there ([`DiskIdentity`]). A write run checks the device against it and is refused when the
//! path names another disk. A pin is dropped when its target is no longer configured at that
//! path, or when `[retired] disks` names its disk (by serial, WWN, volume id, or the id the
//! refusal gives) at start or at a reload: the next write run pins the disk found then. A pin
//! made in another boot is renewed by the first run that finds the same disk.
//!
//! It also keeps, for each configured target on a file, the filesystem its probe file was first
//! probed on ([`FsRecord`]): a run whose file would be on another (its volume unmounted, or
//! another filesystem mounted there) is skipped instead of making or opening a file there. A
//! record is dropped as a pin is; it is renewed when the same filesystem is seen in another boot.
//!
//! What the file gives back is not trusted: it is read only as a regular file (no link) of at
//! most [`MAX_FILE_BYTES`]; an entry is kept only for a target configured now, with the same path;
//! one per target (the last); its target name one the name check accepts, every other text
//! printable and at most [`MAX_TEXT`] bytes, lists of at most [`MAX_LIST`]. The file is written
//! only when a target's last device or pin changes, atomically ([`StateDir::replace`]).

use crate::blockdev;
use crate::blockdev::identity::DiskIdentity;
use crate::bounded_read::BoundedReadError;
use crate::config::{Retired, TargetSpec, target_name};
use crate::probe::io_target::TargetKind;
use crate::probe::io_target::filesystem::Filesystem;
use crate::series::TargetInfo;
use crate::state_dir::StateDir;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// The file's name in the state directory.
pub(crate) const FILE_NAME: &str = "target_devices.json";

/// The largest file read (an entry is about 1 KB; a larger file is refused, not read).
pub(crate) const MAX_FILE_BYTES: u64 = 4 << 20;

/// The longest list in an entry read back (a device's disks).
pub(crate) const MAX_LIST: usize = 64;

/// The longest text in an entry read back (a path may be longer than a name).
pub(crate) const MAX_TEXT: usize = 4096;

/// The format this agent writes and reads.
const VERSION: u32 = 1;

/// A configured target's last device: the target's info when a stat last found a device under it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LastDevice {
    /// The target's name.
    pub target: String,
    /// Its configured path then.
    pub path: String,
    /// Its info then (`device` is set).
    pub info: TargetInfo,
}

/// The disk a configured target with device writes was pinned to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Pin {
    /// The target's name.
    pub target: String,
    /// Its configured path then.
    pub path: String,
    /// What made the device there that disk.
    pub disk: DiskIdentity,
}

/// The filesystem a configured target's probe file was first probed on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FsRecord {
    /// The target's name.
    pub target: String,
    /// Its configured path then.
    pub path: String,
    /// The filesystem.
    pub filesystem: Filesystem,
}

#[derive(Serialize, Deserialize)]
struct DevicesFile {
    version: u32,
    targets: Vec<LastDevice>,
    /// Absent from files written before pins were kept.
    #[serde(default)]
    pins: Vec<Pin>,
    /// Absent from files written before filesystems were kept.
    #[serde(default)]
    filesystems: Vec<FsRecord>,
}

/// What a target devices file holds that is well formed.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct SavedDevices {
    /// The last devices.
    pub last: Vec<LastDevice>,
    /// The pins.
    pub pins: Vec<Pin>,
    /// The filesystems.
    pub filesystems: Vec<FsRecord>,
    /// How many entries were not well formed (and left out).
    pub refused: usize,
}

/// Why bytes are not a target devices file.
#[derive(Debug)]
pub(crate) enum DevicesParseError {
    /// Not JSON of this format.
    Format(serde_json::Error),
    /// Another version.
    Version(u32),
}

impl std::fmt::Display for DevicesParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DevicesParseError::Format(e) => write!(f, "not a target devices file: {e}"),
            DevicesParseError::Version(v) => write!(f, "version {v} (this agent reads {VERSION})"),
        }
    }
}

/// The entries of a target devices file's `bytes` (pure: no I/O) that are well formed
/// ([`well_formed`], [`pin_well_formed`]), and how many were not.
pub(crate) fn parse(bytes: &[u8]) -> Result<SavedDevices, DevicesParseError> {
    let contents: DevicesFile = serde_json::from_slice(bytes).map_err(DevicesParseError::Format)?;
    if contents.version != VERSION {
        return Err(DevicesParseError::Version(contents.version));
    }
    let count = contents.targets.len() + contents.pins.len() + contents.filesystems.len();
    let last: Vec<LastDevice> = contents.targets.into_iter().filter(well_formed).collect();
    let pins: Vec<Pin> = contents.pins.into_iter().filter(pin_well_formed).collect();
    let filesystems: Vec<FsRecord> = contents
        .filesystems
        .into_iter()
        .filter(|r| {
            target_name::check(&r.target).is_ok()
                && !r.filesystem.mountpoint.is_empty()
                && serde_json::to_value(r).is_ok_and(|v| texts_ok(&v))
        })
        .collect();
    let refused = count - last.len() - pins.len() - filesystems.len();
    Ok(SavedDevices {
        last,
        pins,
        filesystems,
        refused,
    })
}

/// Whether every text in `v` is printable (no control characters, nor Unicode line or
/// paragraph separators) and at most [`MAX_TEXT`] bytes, and every list at most [`MAX_LIST`]
/// long, walked generically so that a field added later is checked too.
fn texts_ok(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::String(s) => {
            s.len() <= MAX_TEXT
                && !s
                    .chars()
                    .any(|c| c.is_control() || c == '\u{2028}' || c == '\u{2029}')
        }
        serde_json::Value::Array(a) => a.len() <= MAX_LIST && a.iter().all(texts_ok),
        serde_json::Value::Object(o) => o.values().all(texts_ok),
        _ => true,
    }
}

/// Whether an entry read back can be used as labels: a target name the name check accepts, a
/// device, and every text in it printable ([`texts_ok`]).
fn well_formed(entry: &LastDevice) -> bool {
    target_name::check(&entry.target).is_ok()
        && entry.info.device.is_some()
        && entry.info.path == entry.path
        && serde_json::to_value(entry).is_ok_and(|v| texts_ok(&v))
}

/// Whether a pin read back can be used: a target name the name check accepts, a disk with a
/// kernel name, and every text in it printable ([`texts_ok`]).
fn pin_well_formed(pin: &Pin) -> bool {
    target_name::check(&pin.target).is_ok()
        && !pin.disk.kname.is_empty()
        && serde_json::to_value(pin).is_ok_and(|v| texts_ok(&v))
}

/// What the agent keeps for one configured target.
#[derive(Debug, Clone)]
struct Kept {
    last: LastDevice,
    /// While the last device is held because it is gone: what the stat finds now (`None`:
    /// nothing); `None` while it is not held.
    held: Option<Option<TargetInfo>>,
}

#[derive(Debug, Default)]
struct Remembered {
    kept: BTreeMap<String, Kept>,
    /// The pins of configured targets, by name.
    pins: BTreeMap<String, Pin>,
    /// The filesystems configured targets' probe files were first probed on, by name.
    filesystems: BTreeMap<String, FsRecord>,
    /// The configured targets now, by name: their paths.
    configured: BTreeMap<String, String>,
    retired: Retired,
    /// The last save failed (logged once until one succeeds).
    save_failed: bool,
}

/// The last devices of the configured targets, and the state directory that keeps them.
#[derive(Debug, Default)]
pub(crate) struct TargetDevices {
    state: Mutex<Remembered>,
    dir: Option<StateDir>,
}

/// The serial, WWN and cloud volume id of the device in `info`.
fn ids(info: &TargetInfo) -> [&str; 3] {
    info.device.as_ref().map_or(["", "", ""], |d| {
        [
            d.serial.as_str(),
            d.wwn.as_str(),
            d.cloud.volume_id.as_str(),
        ]
    })
}

/// Whether the device in `info` is gone from `sysfs`: no device of its kernel name, or one
/// that is empty or has another serial or WWN.
fn gone(info: &TargetInfo, sysfs: &Path) -> bool {
    let Some(last) = &info.device else {
        return false;
    };
    !blockdev::by_name(sysfs, &last.kname)
        .is_some_and(|d| d.sectors > 0 && d.serial == last.serial && d.wwn == last.wwn)
}

/// What [`TargetDevices::label`] says to record for a configured target.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Labelled {
    /// The target's info (`None`: nothing to record: no facts, no last device).
    pub info: Option<TargetInfo>,
    /// The info is the last device, held because it is gone: the target's runs fail for that,
    /// and say nothing of the disk (they leave its recent runs alone).
    pub held: bool,
}

/// What a stat makes of a target with a last device.
#[derive(Debug, PartialEq)]
enum Decision {
    /// The stat's info is the target's (and, with a device, its last device).
    Fresh,
    /// The last device stays the target's: it is gone.
    Hold,
    /// The stat's info is the target's, and the last device is forgotten (the target moved off
    /// it, which is there).
    Forget,
}

/// The pure part of [`TargetDevices::label`]: `last` the target's last device, `fresh` what the
/// stat found (`None`: nothing), `gone` whether the last device is gone (asked only when needed).
fn decide(last: &TargetInfo, fresh: Option<&TargetInfo>, gone: impl FnOnce() -> bool) -> Decision {
    match fresh {
        // A device found: the target's, unless the block device the path was is gone and the
        // path now leads elsewhere (its directory's facts).
        Some(f) if f.device.is_some() => {
            let was_block = last.kind == Some(TargetKind::BlockDevice);
            if was_block && f.kind != Some(TargetKind::BlockDevice) && gone() {
                Decision::Hold
            } else {
                Decision::Fresh
            }
        }
        Some(_) => {
            if gone() {
                Decision::Hold
            } else {
                Decision::Forget
            }
        }
        // Nothing found: the last device is the best there is.
        None => {
            if gone() {
                Decision::Hold
            } else {
                Decision::Fresh
            }
        }
    }
}

impl TargetDevices {
    /// Kept in memory only.
    pub(crate) fn in_memory() -> TargetDevices {
        TargetDevices::default()
    }

    /// Kept in the state directory `dir` (none: in memory only), starting from what its file
    /// holds (checked against the configuration at the first [`TargetDevices::configure`]).
    pub(crate) fn load(dir: Option<&Path>) -> TargetDevices {
        let Some(path) = dir else {
            return TargetDevices::in_memory();
        };
        let dir = match StateDir::open(path) {
            Ok(dir) => dir,
            Err(err) => {
                tracing::warn!(state_dir = %path.display(), %err, "cannot open the state directory: the last devices of configured targets are kept in memory only");
                return TargetDevices::in_memory();
            }
        };
        let mut kept = BTreeMap::new();
        let mut pins = BTreeMap::new();
        let mut filesystems = BTreeMap::new();
        match read(&dir) {
            Ok(contents) => {
                if contents.refused > 0 {
                    tracing::warn!(
                        file = %dir.path().join(FILE_NAME).display(),
                        refused = contents.refused,
                        "entries with a text the name check refuses, or no device, dropped"
                    );
                }
                for last in contents.last {
                    kept.insert(last.target.clone(), Kept { last, held: None });
                }
                for pin in contents.pins {
                    pins.insert(pin.target.clone(), pin);
                }
                for record in contents.filesystems {
                    filesystems.insert(record.target.clone(), record);
                }
            }
            Err(err) => {
                tracing::warn!(%err, "cannot read the last devices of configured targets; starting without them");
            }
        }
        TargetDevices {
            state: Mutex::new(Remembered {
                kept,
                pins,
                filesystems,
                ..Remembered::default()
            }),
            dir: Some(dir),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Remembered> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The configured targets now and the disks retired now (at start and at every reload):
    /// the last devices of targets no longer configured (or at another path), and of those
    /// `retired` names (by target name, or the serial, WWN or volume id of the last device), are
    /// forgotten. Returns, for each target whose gone device was held and is now retired, the
    /// info its series take instead (what its last stat found).
    pub(crate) fn configure(
        &self,
        targets: &[TargetSpec],
        retired: &Retired,
    ) -> Vec<(String, TargetInfo)> {
        let mut st = self.lock();
        st.configured = targets
            .iter()
            .filter(|t| t.rule.is_none())
            .map(|t| (t.name.clone(), t.path.display().to_string()))
            .collect();
        st.retired = retired.clone();
        let before = st.kept.len();
        let mut replaced = Vec::new();
        let Remembered {
            kept, configured, ..
        } = &mut *st;
        kept.retain(|name, k| {
            if configured.get(name) != Some(&k.last.path) {
                return false;
            }
            if !retired.names(name, ids(&k.last.info)) {
                return true;
            }
            tracing::info!(target = %name, device = %k.last.info.device_name(), "a retired disk ([retired] disks): the target no longer keeps it as its device");
            if let Some(now) = &k.held {
                let now = now.clone().unwrap_or_else(|| TargetInfo {
                    path: k.last.path.clone(),
                    ..TargetInfo::default()
                });
                replaced.push((name.clone(), now));
            }
            false
        });
        let pins_before = st.pins.len();
        let Remembered {
            pins, configured, ..
        } = &mut *st;
        pins.retain(|name, pin| {
            if configured.get(name) != Some(&pin.path) {
                return false;
            }
            let disk = &pin.disk;
            let id = disk.id();
            let named = [&disk.serial, &disk.wwn, &disk.volume_id, &id]
                .iter()
                .any(|i| retired.lists(i));
            if named {
                tracing::info!(target = %name, disk = %disk, "the disk the target was pinned to is retired ([retired] disks): its next write run pins the disk at its path then");
            }
            !named
        });
        let filesystems_before = st.filesystems.len();
        let Remembered {
            filesystems,
            configured,
            ..
        } = &mut *st;
        filesystems.retain(|name, record| {
            if configured.get(name) != Some(&record.path) {
                return false;
            }
            let named = retired.lists(&record.filesystem.id());
            if named {
                tracing::info!(target = %name, filesystem = %record.filesystem, "the filesystem the target was first probed on is retired ([retired] disks): its next run records the one at its path then");
            }
            !named
        });
        if st.kept.len() != before
            || st.pins.len() != pins_before
            || st.filesystems.len() != filesystems_before
        {
            self.save(&mut st);
        }
        replaced
    }

    /// The filesystem the configured target of `spec` was first probed on, if recorded (from
    /// memory, no I/O).
    pub(crate) fn recorded_filesystem(&self, spec: &TargetSpec) -> Option<Filesystem> {
        let st = self.lock();
        let path = spec.path.display().to_string();
        st.filesystems
            .get(&spec.name)
            .filter(|r| r.path == path && st.configured.get(&spec.name) == Some(&path))
            .map(|r| r.filesystem.clone())
    }

    /// Records `filesystem` as the one the configured target of `spec` is on, where a run just
    /// opened its probe file there (the first, or one in another boot); saves when that changed
    /// the record. Call on the probe thread: it may write the state directory.
    pub(crate) fn record_filesystem(&self, spec: &TargetSpec, filesystem: &Filesystem) {
        let mut st = self.lock();
        let path = spec.path.display().to_string();
        if st.configured.get(&spec.name) != Some(&path) {
            return;
        }
        let old = st.filesystems.get(&spec.name).map(|r| r.filesystem.clone());
        if old.as_ref() == Some(filesystem) {
            return;
        }
        if old.is_none() {
            tracing::info!(target = %spec.name, filesystem = %filesystem, "the target's probe file lives on this filesystem: runs are skipped while its path is on another");
        }
        st.filesystems.insert(
            spec.name.clone(),
            FsRecord {
                target: spec.name.clone(),
                path,
                filesystem: filesystem.clone(),
            },
        );
        self.save(&mut st);
    }

    /// The disk the configured target of `spec` was pinned to, if any (from memory, no I/O).
    pub(crate) fn pinned(&self, spec: &TargetSpec) -> Option<DiskIdentity> {
        let st = self.lock();
        let path = spec.path.display().to_string();
        st.pins
            .get(&spec.name)
            .filter(|p| p.path == path && st.configured.get(&spec.name) == Some(&path))
            .map(|p| p.disk.clone())
    }

    /// Pins the configured target of `spec` to `disk`, where a write run was just allowed (or
    /// renews the pin: a new boot); saves when that changed it. Call on the probe thread: it may
    /// write the state directory.
    pub(crate) fn pin(&self, spec: &TargetSpec, disk: &DiskIdentity) {
        let mut st = self.lock();
        let path = spec.path.display().to_string();
        // A late run of a target that a reload removed or moved pins nothing.
        if st.configured.get(&spec.name) != Some(&path) {
            return;
        }
        let old = st.pins.get(&spec.name).map(|p| p.disk.clone());
        if old.as_ref() == Some(disk) {
            return;
        }
        match &old {
            None => {
                tracing::info!(target = %spec.name, disk = %disk, "write probes pinned to the disk at the target's path: they are refused once it names another")
            }
            Some(old) => {
                tracing::info!(target = %spec.name, was = %old, now = %disk, "the target's pin renewed (the same disk, seen anew)")
            }
        }
        st.pins.insert(
            spec.name.clone(),
            Pin {
                target: spec.name.clone(),
                path,
                disk: disk.clone(),
            },
        );
        self.save(&mut st);
    }

    /// What to record for the configured target of `spec` after a stat of its path found
    /// `fresh` (`None`: nothing), with its last device weighed in (reading `sysfs` to see whether
    /// that is gone). Saves when the last device changed. Call on the stat's thread: it may read
    /// sysfs and write the state directory.
    pub(crate) fn label(
        &self,
        spec: &TargetSpec,
        fresh: Option<TargetInfo>,
        sysfs: &Path,
    ) -> Labelled {
        let mut st = self.lock();
        let path = spec.path.display().to_string();
        let label = |info, held| Labelled { info, held };
        // A late stat of a target that a reload removed or changed: nothing of it is kept.
        if st.configured.get(&spec.name) != Some(&path) {
            return label(fresh, false);
        }
        let Some(kept) = st.kept.get(&spec.name).cloned() else {
            return label(self.remember(&mut st, spec, fresh), false);
        };
        let decision = decide(&kept.last.info, fresh.as_ref(), || {
            gone(&kept.last.info, sysfs)
        });
        if kept.held.is_some() && decision != Decision::Hold {
            tracing::info!(target = %spec.name, device = %kept.last.info.device_name(), "the device under the target is back");
        }
        match decision {
            Decision::Hold => {
                if kept.held.is_none() {
                    tracing::warn!(target = %spec.name, device = %kept.last.info.device_name(), "the device under the target is gone: it stays the target's device (diskprobe_target_info) until it returns or [retired] disks names it");
                }
                if let Some(k) = st.kept.get_mut(&spec.name) {
                    k.held = Some(fresh);
                }
                label(Some(kept.last.info), true)
            }
            Decision::Forget => {
                st.kept.remove(&spec.name);
                self.save(&mut st);
                label(fresh, false)
            }
            Decision::Fresh if fresh.is_none() => {
                if let Some(k) = st.kept.get_mut(&spec.name) {
                    k.held = None;
                }
                label(Some(kept.last.info), false)
            }
            Decision::Fresh => label(self.remember(&mut st, spec, fresh), false),
        }
    }

    /// Records `fresh` as the target's last device when it has one (and no retired disk); saves
    /// when that changed it.
    fn remember(
        &self,
        st: &mut Remembered,
        spec: &TargetSpec,
        fresh: Option<TargetInfo>,
    ) -> Option<TargetInfo> {
        let Some(info) = fresh.as_ref().filter(|f| f.device.is_some()) else {
            return fresh;
        };
        if st.retired.names(&spec.name, ids(info)) {
            return fresh;
        }
        let last = LastDevice {
            target: spec.name.clone(),
            path: info.path.clone(),
            info: info.clone(),
        };
        let changed = st.kept.get(&spec.name).is_none_or(|k| k.last != last);
        st.kept.insert(spec.name.clone(), Kept { last, held: None });
        if changed {
            self.save(st);
        }
        fresh
    }

    /// The last device of the configured target of `spec` (for a stat that did not answer):
    /// from memory, no I/O.
    pub(crate) fn last(&self, spec: &TargetSpec) -> Option<TargetInfo> {
        let st = self.lock();
        let path = spec.path.display().to_string();
        st.kept
            .get(&spec.name)
            .filter(|k| k.last.path == path && st.configured.get(&spec.name) == Some(&path))
            .map(|k| k.last.info.clone())
    }

    /// Whether the target named `name` holds a last device that is gone.
    pub(crate) fn holds_gone(&self, name: &str) -> bool {
        self.lock().kept.get(name).is_some_and(|k| k.held.is_some())
    }

    fn save(&self, st: &mut Remembered) {
        let Some(dir) = &self.dir else { return };
        let contents = DevicesFile {
            version: VERSION,
            targets: st.kept.values().map(|k| k.last.clone()).collect(),
            pins: st.pins.values().cloned().collect(),
            filesystems: st.filesystems.values().cloned().collect(),
        };
        let written = serde_json::to_vec_pretty(&contents)
            .map_err(std::io::Error::other)
            .and_then(|text| dir.replace(FILE_NAME, &text));
        match written {
            Ok(()) => st.save_failed = false,
            Err(err) if !st.save_failed => {
                st.save_failed = true;
                tracing::warn!(file = %dir.path().join(FILE_NAME).display(), %err, "cannot save the last devices of configured targets; they are kept in memory only");
            }
            Err(_) => {}
        }
    }
}

/// Why the file was not read.
#[derive(Debug, thiserror::Error)]
enum DevicesReadError {
    #[error(transparent)]
    Read(#[from] BoundedReadError),
    #[error("{path}: {error}")]
    Parse {
        path: String,
        error: DevicesParseError,
    },
}

impl std::error::Error for DevicesParseError {}

/// The well-formed entries of the state directory's file (none when it does not exist), and how
/// many were not.
fn read(dir: &StateDir) -> Result<SavedDevices, DevicesReadError> {
    let bytes = match dir.read(FILE_NAME, MAX_FILE_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if e.is_not_found() => return Ok(SavedDevices::default()),
        Err(e) => return Err(e.into()),
    };
    parse(&bytes).map_err(|error| DevicesReadError::Parse {
        path: dir.path().join(FILE_NAME).display().to_string(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blockdev::BlockDevice;
    use crate::config::Config;
    use std::fs;

    fn block(kname: &str, serial: &str) -> TargetInfo {
        TargetInfo {
            path: "/dev/disk/by-id/d".into(),
            device: Some(BlockDevice {
                kname: kname.into(),
                serial: serial.into(),
                sectors: 8,
                disks: vec![kname.into()],
                ..BlockDevice::default()
            }),
            kind: Some(TargetKind::BlockDevice),
            ..TargetInfo::default()
        }
    }

    /// What the facts of a path that is gone are: its directory's, on devtmpfs (no device).
    fn devtmpfs() -> TargetInfo {
        TargetInfo {
            path: "/dev/disk/by-id/d".into(),
            kind: Some(TargetKind::File),
            fstype: "devtmpfs".into(),
            ..TargetInfo::default()
        }
    }

    fn config(extra: &str) -> Config {
        Config::from_toml(
            &format!(
                "[[targets]]\nname = \"data\"\npath = \"/dev/disk/by-id/d\"\n\
                 [[targets]]\nname = \"other\"\npath = \"/dev/disk/by-id/o\"\n{extra}"
            ),
            Path::new("t.toml"),
        )
        .unwrap()
    }

    /// A sysfs with the given disks (kernel name, serial, sectors).
    fn sysfs(disks: &[(&str, &str, u64)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (i, (kname, serial, sectors)) in disks.iter().enumerate() {
            let d = dir.path().join("block").join(kname);
            fs::create_dir_all(d.join("device")).unwrap();
            fs::write(d.join("dev"), format!("8:{}\n", i * 16)).unwrap();
            fs::write(d.join("size"), format!("{sectors}\n")).unwrap();
            fs::write(d.join("device/serial"), format!("{serial}\n")).unwrap();
        }
        dir
    }

    #[test]
    fn a_gone_device_is_held_whatever_the_stat_finds_and_a_present_one_is_not() {
        let last = block("sdb", "A");
        // Found again, or found elsewhere: the stat's.
        assert_eq!(
            decide(&last, Some(&block("sdc", "A")), || true),
            Decision::Fresh
        );
        // Gone: nothing found, the directory's facts, no device: held.
        assert_eq!(decide(&last, None, || true), Decision::Hold);
        assert_eq!(decide(&last, Some(&devtmpfs()), || true), Decision::Hold);
        let mut elsewhere = devtmpfs();
        elsewhere.device = block("vda", "R").device;
        assert_eq!(decide(&last, Some(&elsewhere), || true), Decision::Hold);
        // There: a stat that fails keeps it, one that finds no device forgets it.
        assert_eq!(decide(&last, None, || false), Decision::Fresh);
        assert_eq!(decide(&last, Some(&devtmpfs()), || false), Decision::Forget);
        assert_eq!(decide(&last, Some(&elsewhere), || false), Decision::Fresh);
    }

    #[test]
    fn sysfs_says_whether_the_last_device_is_gone() {
        let last = block("sdb", "A");
        let root = sysfs(&[("sdb", "A", 8)]);
        assert!(!gone(&last, root.path()));
        for other in [
            sysfs(&[]),
            sysfs(&[("sdb", "B", 8)]),
            sysfs(&[("sdb", "A", 0)]),
        ] {
            assert!(gone(&last, other.path()));
        }
    }

    #[test]
    fn the_last_device_is_kept_across_restarts_until_the_disk_returns_or_is_retired() {
        let state = tempfile::tempdir().unwrap();
        let cfg = config("");
        let data = &cfg.targets[0];
        let present = sysfs(&[("sdb", "A", 8)]);
        let absent = sysfs(&[]);
        let found = Labelled {
            info: Some(block("sdb", "A")),
            held: false,
        };
        let held = Labelled {
            held: true,
            ..found.clone()
        };
        let known = TargetDevices::load(Some(state.path()));
        assert!(known.configure(&cfg.targets, &cfg.retired).is_empty());
        assert_eq!(
            known.label(data, Some(block("sdb", "A")), present.path()),
            found
        );
        // The disk falls off: its node is gone, the stat finds /dev's facts. Held.
        assert_eq!(known.label(data, Some(devtmpfs()), absent.path()), held);
        assert!(known.holds_gone("data"));

        // Restarted while it is gone: the file gives it back.
        let known = TargetDevices::load(Some(state.path()));
        known.configure(&cfg.targets, &cfg.retired);
        assert_eq!(known.last(data), Some(block("sdb", "A")));
        assert_eq!(known.label(data, None, absent.path()), held);
        // Back: the stat's.
        assert_eq!(
            known.label(data, Some(block("sdb", "A")), present.path()),
            found
        );
        assert!(!known.holds_gone("data"));

        // Gone again, then retired by its serial at a reload: the series take what the stat
        // found, and nothing is kept, in the file either.
        known.label(data, Some(devtmpfs()), absent.path());
        let retired = config("[retired]\ndisks = [\"A\"]\n");
        assert_eq!(
            known.configure(&retired.targets, &retired.retired),
            [("data".to_owned(), devtmpfs())]
        );
        assert_eq!(
            known.label(data, Some(devtmpfs()), absent.path()).info,
            Some(devtmpfs())
        );
        let restarted = TargetDevices::load(Some(state.path()));
        restarted.configure(&cfg.targets, &cfg.retired);
        assert_eq!(restarted.last(data), None);
        // While listed, a retired disk found again is not kept.
        known.label(data, Some(block("sdb", "A")), present.path());
        assert_eq!(known.label(data, None, absent.path()).info, None);
    }

    #[test]
    fn targets_no_longer_configured_or_moved_are_forgotten() {
        let state = tempfile::tempdir().unwrap();
        let cfg = config("");
        let present = sysfs(&[("sdb", "A", 8)]);
        let known = TargetDevices::load(Some(state.path()));
        known.configure(&cfg.targets, &cfg.retired);
        known.label(&cfg.targets[0], Some(block("sdb", "A")), present.path());
        // A reload moves the target to another path: its last device is forgotten.
        let moved = Config::from_toml(
            "[[targets]]\nname = \"data\"\npath = \"/dev/sdz\"\n",
            Path::new("t.toml"),
        )
        .unwrap();
        known.configure(&moved.targets, &moved.retired);
        assert_eq!(known.last(&moved.targets[0]), None);
        // A late stat of the old target records nothing.
        known.label(&cfg.targets[0], Some(block("sdb", "A")), present.path());
        assert_eq!(known.last(&cfg.targets[0]), None);
        let text = fs::read_to_string(state.path().join(FILE_NAME)).unwrap();
        assert!(!text.contains("sdb"), "{text}");
    }

    #[test]
    fn what_the_file_gives_back_is_checked() {
        let good = LastDevice {
            target: "data".into(),
            path: "/dev/disk/by-id/d".into(),
            info: block("sdb", "A"),
        };
        let mut bad_serial = good.clone();
        bad_serial.info.device.as_mut().unwrap().serial = "A\u{1b}[2J".into();
        let mut no_device = good.clone();
        no_device.info.device = None;
        let mut long_list = good.clone();
        long_list.info.device.as_mut().unwrap().disks = vec!["sdb".into(); MAX_LIST + 1];
        let mut bad_name = good.clone();
        bad_name.target = " data".into();
        let mut other_path = good.clone();
        other_path.path = "/elsewhere".into();
        let text = serde_json::to_vec(&DevicesFile {
            version: VERSION,
            targets: vec![
                bad_serial,
                no_device,
                long_list,
                bad_name,
                other_path,
                good.clone(),
            ],
            pins: Vec::new(),
            filesystems: Vec::new(),
        })
        .unwrap();
        let contents = parse(&text).unwrap();
        assert_eq!((contents.last, contents.refused), (vec![good.clone()], 5));
        // A path may be longer than a name.
        let mut long_path = good;
        long_path.path = format!("/dev/disk/by-path/{}", "p".repeat(300));
        long_path.info.path = long_path.path.clone();
        let text = serde_json::to_vec(&DevicesFile {
            version: VERSION,
            targets: vec![long_path],
            pins: Vec::new(),
            filesystems: Vec::new(),
        })
        .unwrap();
        assert_eq!(parse(&text).unwrap().refused, 0);
        assert!(matches!(
            parse(b"{\"version\": 2, \"targets\": []}"),
            Err(DevicesParseError::Version(2))
        ));
        assert!(matches!(parse(b"[]"), Err(DevicesParseError::Format(_))));
        // A link in the file's place is not followed: the agent starts without entries.
        let state = tempfile::tempdir().unwrap();
        let outside = state.path().join("outside.json");
        fs::write(&outside, &text).unwrap();
        std::os::unix::fs::symlink(&outside, state.path().join(FILE_NAME)).unwrap();
        let cfg = config("");
        let known = TargetDevices::load(Some(state.path()));
        known.configure(&cfg.targets, &cfg.retired);
        assert_eq!(known.last(&cfg.targets[0]), None);
    }
}
