//! The mark that makes a file the agent's probe file: the extended attribute [`OWNER_XATTR`],
//! in one of the exact forms the agent writes, bound
//! to the file it was written on.
//!
//! The agent writes `diskprobe_exporter v2 STATE size=N ino=I btime=S.NNNNNNNNN`, `STATE` being
//! `filling` (a fill in progress, or stopped: the next open finishes it at `N` bytes) or
//! `complete`; where the filesystem reports no birth time, `dev=MAJ:MIN` stands for `btime`. The
//! inode and birth time are the file's own: a copy, a backup restored or a file put in its place
//! has others (the birth time cannot be set from user space), so a mark copied with the data
//! does not make another file the agent's. The device number is not part of a mark that has a
//! birth time, as it may change across boots (btrfs gives a filesystem a new one at every mount).
//!
//! Earlier versions wrote `probe-file v1 size=N` and `filling size=N`, bound to nothing: a file
//! carrying exactly one of these is taken as the agent's (a [`Binding::Legacy`] mark), and the
//! first open that may write it binds the mark to it. Any other value is not a mark: the file is
//! foreign, whatever the attribute says.

use crate::probe::sys;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;

/// Extended attribute that marks a probe file created by diskprobe_exporter.
pub(crate) const OWNER_XATTR: &str = "user.diskprobe_exporter";

/// How far a probe file's fill got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fill {
    /// Filled with random data to its size.
    Complete,
    /// A fill in progress, or stopped: the next open finishes it.
    Filling,
}

/// What ties a mark to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Binding {
    /// A mark of an earlier version, tied to no file.
    Legacy,
    /// The file's inode and birth time (seconds, nanoseconds).
    Born {
        /// Inode.
        ino: u64,
        /// Birth time.
        btime: (i64, u32),
    },
    /// The file's inode and device, where there is no birth time.
    Device {
        /// Inode.
        ino: u64,
        /// `(major, minor)` of its filesystem.
        dev: (u32, u32),
    },
}

impl Binding {
    /// What ties a mark to `file` now.
    pub(super) fn of(file: &File) -> io::Result<Binding> {
        let meta = file.metadata()?;
        Ok(match sys::birth_time(file) {
            Some(btime) => Binding::Born {
                ino: meta.ino(),
                btime,
            },
            None => Binding::Device {
                ino: meta.ino(),
                dev: (libc::major(meta.dev()), libc::minor(meta.dev())),
            },
        })
    }
}

/// A mark, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Mark {
    /// How far the fill got.
    pub(super) fill: Fill,
    /// The size it names, in bytes (never 0).
    pub(super) size: u64,
    /// What ties it to a file.
    pub(super) binding: Binding,
}

impl Mark {
    /// The mark the agent writes on the file `binding` describes.
    pub(super) fn new(fill: Fill, size: u64, binding: Binding) -> Mark {
        Mark {
            fill,
            size,
            binding,
        }
    }

    /// The attribute's value for this mark (a legacy mark in its own form, which the agent no
    /// longer writes).
    pub(super) fn render(&self) -> Vec<u8> {
        let state = match self.fill {
            Fill::Complete => "complete",
            Fill::Filling => "filling",
        };
        let tie = match self.binding {
            Binding::Legacy => {
                return match self.fill {
                    Fill::Complete => format!("probe-file v1 size={}", self.size),
                    Fill::Filling => format!("filling size={}", self.size),
                }
                .into_bytes();
            }
            Binding::Born {
                ino,
                btime: (s, ns),
            } => format!("ino={ino} btime={s}.{ns:09}"),
            Binding::Device {
                ino,
                dev: (major, minor),
            } => format!("ino={ino} dev={major}:{minor}"),
        };
        format!("diskprobe_exporter v2 {state} size={} {tie}", self.size).into_bytes()
    }

    /// The mark `value` is, when it is exactly one of the forms the agent writes or wrote.
    pub(super) fn parse(value: &[u8]) -> Option<Mark> {
        let text = std::str::from_utf8(value).ok()?;
        let size = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && !s.starts_with('0'))
                .then(|| s.parse::<u64>().ok())
                .flatten()
        };
        if let Some(n) = text.strip_prefix("probe-file v1 size=") {
            return Some(Mark::new(Fill::Complete, size(n)?, Binding::Legacy));
        }
        if let Some(n) = text.strip_prefix("filling size=") {
            return Some(Mark::new(Fill::Filling, size(n)?, Binding::Legacy));
        }
        let words: Vec<&str> = text.split(' ').collect();
        let ["diskprobe_exporter", "v2", state, size_kv, ino_kv, tie_kv] = words.as_slice() else {
            return None;
        };
        let fill = match *state {
            "complete" => Fill::Complete,
            "filling" => Fill::Filling,
            _ => return None,
        };
        let size = size(size_kv.strip_prefix("size=")?)?;
        let ino = number(ino_kv.strip_prefix("ino=")?)?;
        let binding = if let Some(t) = tie_kv.strip_prefix("btime=") {
            let (s, ns) = t.split_once('.')?;
            let ns = (ns.len() == 9).then(|| number(ns)).flatten()?;
            let s = if let Some(neg) = s.strip_prefix('-') {
                -i64::try_from(number(neg)?).ok()?
            } else {
                i64::try_from(number(s)?).ok()?
            };
            Binding::Born {
                ino,
                btime: (s, u32::try_from(ns).ok().filter(|&n| n < 1_000_000_000)?),
            }
        } else {
            let (major, minor) = tie_kv.strip_prefix("dev=")?.split_once(':')?;
            Binding::Device {
                ino,
                dev: (
                    u32::try_from(number(major)?).ok()?,
                    u32::try_from(number(minor)?).ok()?,
                ),
            }
        };
        let mark = Mark::new(fill, size, binding);
        // Exact: what the agent would write for it, byte for byte.
        (mark.render() == value).then_some(mark)
    }
}

/// Decimal digits, without a sign.
fn number(s: &str) -> Option<u64> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// Whose a file is, by its mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Owner {
    /// The agent's: a mark bound to this very file, or a legacy one.
    Agent(Mark),
    /// Not the agent's, and why (for the refusal of a write).
    Foreign(String),
}

/// Whose the file open as `file` is, by its mark `value` (`None`: it has none).
pub(super) fn owner(value: Option<&[u8]>, file: &File) -> Owner {
    let Some(value) = value else {
        return Owner::Foreign("it has no mark".to_owned());
    };
    let Some(mark) = Mark::parse(value) else {
        return Owner::Foreign(format!(
            "its mark {:?} is not one the agent writes",
            String::from_utf8_lossy(value)
        ));
    };
    if mark.binding == Binding::Legacy {
        return Owner::Agent(mark);
    }
    match Binding::of(file) {
        Ok(now) if now == mark.binding => Owner::Agent(mark),
        Ok(_) => Owner::Foreign(
            "its mark was written on another file (a copy, a restore, or a file put in its place)"
                .to_owned(),
        ),
        Err(err) => Owner::Foreign(format!("its inode cannot be read: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_forms_are_marks() {
        let born = Binding::Born {
            ino: 42,
            btime: (1_765_000_000, 5),
        };
        let m = Mark::new(Fill::Complete, 4096, born);
        assert_eq!(
            m.render(),
            b"diskprobe_exporter v2 complete size=4096 ino=42 btime=1765000000.000000005"
        );
        assert_eq!(Mark::parse(&m.render()), Some(m));
        let d = Mark::new(
            Fill::Filling,
            1 << 20,
            Binding::Device {
                ino: 7,
                dev: (259, 3),
            },
        );
        assert_eq!(
            d.render(),
            b"diskprobe_exporter v2 filling size=1048576 ino=7 dev=259:3"
        );
        assert_eq!(Mark::parse(&d.render()), Some(d));
        // Earlier versions' forms, exactly.
        assert_eq!(
            Mark::parse(b"probe-file v1 size=4194304"),
            Some(Mark::new(Fill::Complete, 4 << 20, Binding::Legacy))
        );
        assert_eq!(
            Mark::parse(b"filling size=4096"),
            Some(Mark::new(Fill::Filling, 4096, Binding::Legacy))
        );
        // Anything else is not a mark.
        for junk in [
            &b"x"[..],
            b"",
            b"probe-file v1 size=0",
            b"probe-file v1 size=4096 ",
            b"probe-file v1 size=04096",
            b"filling size=",
            b"filling size=-1",
            b"filling",
            b"diskprobe_exporter v2 complete size=4096 ino=42 btime=1765000000.5",
            b"diskprobe_exporter v2 complete size=4096 ino=42 btime=1765000000.000000005 extra",
            b"diskprobe_exporter v2 done size=4096 ino=42 dev=8:1",
            b"diskprobe_exporter v2 complete size=4096 ino=+42 dev=8:1",
            b"diskprobe_exporter v3 complete size=4096 ino=42 dev=8:1",
            b"\xff\xfe",
        ] {
            assert_eq!(
                Mark::parse(junk),
                None,
                "{:?}",
                String::from_utf8_lossy(junk)
            );
        }
    }

    #[test]
    fn a_mark_belongs_to_the_file_it_was_written_on() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"a").unwrap();
        std::fs::write(&b, b"b").unwrap();
        let fa = File::open(&a).unwrap();
        let fb = File::open(&b).unwrap();
        let mark = Mark::new(Fill::Complete, 4096, Binding::of(&fa).unwrap()).render();
        assert!(matches!(owner(Some(&mark), &fa), Owner::Agent(_)));
        // The same value on another file (a copy with its attributes): foreign.
        let Owner::Foreign(why) = owner(Some(&mark), &fb) else {
            panic!("a copied mark made the file the agent's");
        };
        assert!(why.contains("another file"), "{why}");
        assert!(matches!(owner(Some(b"x"), &fa), Owner::Foreign(_)));
        assert!(matches!(owner(None, &fa), Owner::Foreign(_)));
        // A legacy mark is the agent's wherever it is.
        assert!(matches!(
            owner(Some(b"probe-file v1 size=4096"), &fb),
            Owner::Agent(_)
        ));
    }
}
