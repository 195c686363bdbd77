//! The file in the state directory that keeps the lost targets of block rules across restarts
//! (`lost_targets.json`): JSON, `{"version": 1, "lost": [...]}`, replaced atomically and never
//! through a link ([`StateDir::replace`]), read without blocking, only when it is a regular file
//! (not a link) of at most [`MAX_FILE_BYTES`] ([`StateDir::read`]). [`parse`] is the pure part,
//! over bytes (fuzzed); what its entries may be (one per target, at most a rule's `max_targets`,
//! not in the future) is [`super::lost`]'s to enforce, against the rules.

use crate::bounded_read::BoundedReadError;
use crate::state_dir::StateDir;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

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
pub(crate) const FILE_NAME: &str = "lost_targets.json";

/// The largest file read: at 4,096 targets per rule (the largest `max_targets`) and about
/// 400 bytes an entry, room for two such rules; a larger file is refused, not read.
pub(crate) const MAX_FILE_BYTES: u64 = 4 << 20;

/// The format this agent writes and reads.
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Contents {
    version: u32,
    lost: Vec<LostTarget>,
}

/// Why the lost targets were not read or saved.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LostFileError {
    /// The file was refused or could not be read.
    #[error(transparent)]
    Read(#[from] BoundedReadError),
    /// It is not JSON of this format.
    #[error("{path}: not a lost targets file: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What the JSON parser said.
        source: serde_json::Error,
    },
    /// It is of another version.
    #[error("{path}: version {version} (this agent reads {VERSION})")]
    Version {
        /// The file.
        path: PathBuf,
        /// The file's version.
        version: u32,
    },
    /// It could not be written.
    #[error("{path}: cannot save: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Why bytes are not a lost targets file: the JSON parser's error, or another version.
#[derive(Debug)]
pub enum ParseError {
    /// Not JSON of this format.
    Format(serde_json::Error),
    /// Another version.
    Version(u32),
}

/// The entries of a lost targets file's `bytes` (pure: no I/O), as written.
pub fn parse(bytes: &[u8]) -> Result<Vec<LostTarget>, ParseError> {
    let contents: Contents = serde_json::from_slice(bytes).map_err(ParseError::Format)?;
    if contents.version != VERSION {
        return Err(ParseError::Version(contents.version));
    }
    Ok(contents.lost)
}

/// The entries in the state directory's file; none when it does not exist.
pub(crate) fn load(dir: &StateDir) -> Result<Vec<LostTarget>, LostFileError> {
    let bytes = match dir.read(FILE_NAME, MAX_FILE_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let path = dir.path().join(FILE_NAME);
    parse(&bytes).map_err(|e| match e {
        ParseError::Format(source) => LostFileError::Format { path, source },
        ParseError::Version(version) => LostFileError::Version { path, version },
    })
}

/// Replaces the state directory's file with `lost`, atomically.
pub(crate) fn save(dir: &StateDir, lost: &[LostTarget]) -> Result<(), LostFileError> {
    let path = || dir.path().join(FILE_NAME);
    let contents = Contents {
        version: VERSION,
        lost: lost.to_vec(),
    };
    let text = serde_json::to_vec_pretty(&contents).map_err(|source| LostFileError::Format {
        path: path(),
        source,
    })?;
    dir.replace(FILE_NAME, &text)
        .map_err(|source| LostFileError::Write {
            path: path(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

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
        let state = StateDir::open(dir.path()).unwrap();
        assert!(load(&state).unwrap().is_empty(), "no file: no entries");
        save(&state, &[entry("a"), entry("b")]).unwrap();
        assert_eq!(load(&state).unwrap(), [entry("a"), entry("b")]);
        save(&state, &[entry("c")]).unwrap();
        assert_eq!(load(&state).unwrap(), [entry("c")]);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [FILE_NAME], "no temporary file left behind");
    }

    #[test]
    fn a_file_of_another_format_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let path = dir.path().join(FILE_NAME);
        fs::write(&path, "{\"version\": 2, \"lost\": []}").unwrap();
        assert!(load(&state).unwrap_err().to_string().contains("version 2"));
        fs::write(&path, "not json").unwrap();
        assert!(matches!(load(&state), Err(LostFileError::Format { .. })));
        assert!(matches!(parse(b"[]"), Err(ParseError::Format(_))));
    }
}
