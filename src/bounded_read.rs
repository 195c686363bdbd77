//! Reading the files a user can replace (the configuration, the web configuration, its TLS
//! certificates and key, the state directory's lost targets) so that what is found in their
//! place cannot hold or exhaust the agent: each is opened with `O_NONBLOCK` (a FIFO opens at
//! once instead of waiting for a writer), checked with `fstat` on the open descriptor to be a
//! regular file (a FIFO, a device such as `/dev/zero`, a socket or a directory is refused), and
//! read up to a limit the caller names (a larger file is refused before it is read, and one that
//! grows while it is read is refused at the limit). The limits are documented in
//! docs/configuration.md.
//!
//! Refusals are [`BoundedReadError`]s that name the file; the callers log them (once) and go on
//! with what they had.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Whether the last component of the path may be a symbolic link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Links {
    /// Follow it (configurations and certificates: Kubernetes mounts ConfigMaps and Secrets
    /// through links).
    Follow,
    /// Refuse it (`O_NOFOLLOW`): files the agent wrote itself.
    Refuse,
}

/// A file that was not read.
#[derive(Debug, thiserror::Error)]
pub enum BoundedReadError {
    /// It could not be opened (`NotFound` among others; see [`BoundedReadError::is_not_found`]).
    #[error("{path}: cannot open: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is not a regular file.
    #[error("{path}: is a {kind}, not a regular file; refused")]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// It is larger than the limit.
    #[error("{path}: is larger than {limit} bytes ({size} or more); refused")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size as far as it was seen.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Reading it failed.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is not UTF-8 text.
    #[error("{path}: is not UTF-8 text")]
    NotText {
        /// The file.
        path: PathBuf,
    },
}

impl BoundedReadError {
    /// The file.
    pub(crate) fn path(&self) -> &Path {
        match self {
            BoundedReadError::Open { path, .. }
            | BoundedReadError::NotRegular { path, .. }
            | BoundedReadError::TooLarge { path, .. }
            | BoundedReadError::Read { path, .. }
            | BoundedReadError::NotText { path } => path,
        }
    }

    /// What is wrong, without the file's name: for a message that names the file already.
    pub(crate) fn problem(&self) -> String {
        let text = self.to_string();
        let named = format!("{}: ", self.path().display());
        text.strip_prefix(&named).map(str::to_owned).unwrap_or(text)
    }

    /// Whether the file does not exist.
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, BoundedReadError::Open { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// The contents of `path`, at most `limit` bytes.
pub(crate) fn read(path: &Path, limit: u64, links: Links) -> Result<Vec<u8>, BoundedReadError> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if links == Links::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|source| BoundedReadError::Open {
            path: path.to_owned(),
            source,
        })?;
    read_open(file, path, limit)
}

/// [`read`] as text.
pub(crate) fn read_to_string(
    path: &Path,
    limit: u64,
    links: Links,
) -> Result<String, BoundedReadError> {
    text(read(path, limit, links)?, path)
}

/// `bytes` as text; the error names `path`.
pub(crate) fn text(bytes: Vec<u8>, path: &Path) -> Result<String, BoundedReadError> {
    String::from_utf8(bytes).map_err(|_| BoundedReadError::NotText {
        path: path.to_owned(),
    })
}

/// The contents of `file`, opened (without blocking) from `path`: refused unless a regular file
/// of at most `limit` bytes.
pub(crate) fn read_open(file: File, path: &Path, limit: u64) -> Result<Vec<u8>, BoundedReadError> {
    let meta = file.metadata().map_err(|source| BoundedReadError::Read {
        path: path.to_owned(),
        source,
    })?;
    let kind = meta.file_type();
    if !kind.is_file() {
        return Err(BoundedReadError::NotRegular {
            path: path.to_owned(),
            kind: kind_name(&kind),
        });
    }
    let too_large = |size| BoundedReadError::TooLarge {
        path: path.to_owned(),
        size,
        limit,
    };
    if meta.len() > limit {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // One byte more than the limit tells a file that grew past it since the fstat.
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| BoundedReadError::Read {
            path: path.to_owned(),
            source,
        })?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// What a file that is not a regular one is, for messages ("directory", "FIFO", ...).
pub(crate) fn kind_name(kind: &std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "directory"
    } else if kind.is_fifo() {
        "FIFO"
    } else if kind.is_char_device() {
        "character device"
    } else if kind.is_block_device() {
        "block device"
    } else if kind.is_socket() {
        "socket"
    } else if kind.is_symlink() {
        "symbolic link"
    } else {
        "special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_within_the_limit_are_read_and_others_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "12345").unwrap();
        assert_eq!(read(&file, 5, Links::Follow).unwrap(), b"12345");
        assert!(matches!(
            read(&file, 4, Links::Follow),
            Err(BoundedReadError::TooLarge { size: 5, .. })
        ));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read(&link, 5, Links::Follow).unwrap(), b"12345");
        assert!(matches!(
            read(&link, 5, Links::Refuse),
            Err(BoundedReadError::Open { .. })
        ));
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let err = read(&zero, 5, Links::Follow).unwrap_err();
        assert!(err.to_string().contains("character device"), "{err}");
        assert_eq!(
            err.problem(),
            "is a character device, not a regular file; refused"
        );
        assert!(matches!(
            read(dir.path(), 5, Links::Follow),
            Err(BoundedReadError::NotRegular {
                kind: "directory",
                ..
            })
        ));
        assert!(
            read(&dir.path().join("none"), 5, Links::Follow)
                .unwrap_err()
                .is_not_found()
        );
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert!(matches!(
            read_to_string(&file, 5, Links::Follow),
            Err(BoundedReadError::NotText { .. })
        ));
    }
}
