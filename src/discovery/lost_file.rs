//! The file in the state directory that keeps the lost targets of block rules across restarts
//! (`lost_targets.json`): JSON, `{"version": 1, "lost": [...]}`, replaced atomically (written to a
//! temporary file beside it, synced, renamed over it, and the directory synced), so that a crash
//! leaves the old file or the new one, never half of one.

use serde::{Deserialize, Serialize};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

/// A target a block rule was probing whose device disappeared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LostTarget {
    /// The rule's id.
    pub rule: String,
    /// The target's name.
    pub target: String,
    /// The device's kernel name when it was last seen.
    pub device: String,
    /// Its model, serial and WWN when it was last seen (empty when sysfs had none).
    pub model: String,
    /// Serial number.
    pub serial: String,
    /// World Wide Name.
    pub wwn: String,
    /// What the cloud called the volume (`volume_id` of `diskprobe_disk_info`); absent from
    /// files written before it was kept.
    #[serde(default)]
    pub volume_id: String,
    /// When a rescan found it missing, in whole Unix milliseconds (so that the state file
    /// gives back the very value the agent exported before a restart).
    pub since_ms: u64,
}

impl LostTarget {
    /// When a rescan found it missing (Unix seconds).
    pub fn since(&self) -> f64 {
        self.since_ms as f64 / 1000.0
    }
}

/// The file's name in the state directory.
pub const FILE_NAME: &str = "lost_targets.json";

/// The format this agent writes and reads.
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Contents {
    version: u32,
    lost: Vec<LostTarget>,
}

/// The entries in `path`; none when it does not exist. An error for a file that cannot be read
/// or is not this format.
pub fn load(path: &Path) -> io::Result<Vec<LostTarget>> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let contents: Contents =
        serde_json::from_str(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    if contents.version != VERSION {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("version {} (this agent reads {VERSION})", contents.version),
        ));
    }
    Ok(contents.lost)
}

/// Replaces `path` with `lost`, atomically.
pub fn save(path: &Path, lost: &[LostTarget]) -> io::Result<()> {
    let contents = Contents {
        version: VERSION,
        lost: lost.to_vec(),
    };
    let text = serde_json::to_vec_pretty(&contents).map_err(io::Error::other)?;
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("the lost targets' file has no directory"))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let temporary = dir.join(format!(".{name}.tmp"));
    let mut file = File::create(&temporary)?;
    file.write_all(&text)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&temporary, path)?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(target: &str) -> LostTarget {
        LostTarget {
            rule: "disks".into(),
            target: target.into(),
            device: "sdb".into(),
            model: "WDC WD40EFRX".into(),
            serial: "WD-1".into(),
            wwn: "naa.5001".into(),
            volume_id: String::new(),
            since_ms: 1_700_000_000_500,
        }
    }

    #[test]
    fn saves_replace_the_file_and_load_reads_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        assert!(load(&path).unwrap().is_empty(), "no file: no entries");
        save(&path, &[entry("a"), entry("b")]).unwrap();
        assert_eq!(load(&path).unwrap(), [entry("a"), entry("b")]);
        save(&path, &[entry("c")]).unwrap();
        assert_eq!(load(&path).unwrap(), [entry("c")]);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [FILE_NAME], "no temporary file left behind");
    }

    #[test]
    fn a_file_of_another_format_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        fs::write(&path, "{\"version\": 2, \"lost\": []}").unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("version 2"));
        fs::write(&path, "not json").unwrap();
        assert_eq!(load(&path).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
