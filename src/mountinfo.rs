//! Pure parser of `/proc/PID/mountinfo` (proc(5)): one [`MountEntry`] per mount.
//!
//! A line is `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS`.
//! Paths escape space, tab, newline and backslash as octal (`\040`); they are unescaped here.
//! Lines that do not have this shape are skipped, not guessed at.

/// One mounted filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// Mount ID.
    pub id: u64,
    /// Major number of the filesystem's device (`st_dev`; 0 for filesystems without one, and
    /// for btrfs, whose device is anonymous).
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// The directory of the filesystem that is mounted here (`/` unless a bind mount).
    pub root: String,
    /// Where it is mounted.
    pub mountpoint: String,
    /// Filesystem type (`ext4`, `fuse.sshfs`, ...).
    pub fstype: String,
    /// Mount source (`/dev/sdb1`, `server:/export`, `tmpfs`, ...); empty when none is shown.
    pub source: String,
}

/// Parses a mountinfo text, skipping malformed lines.
pub fn parse(text: &str) -> Vec<MountEntry> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<MountEntry> {
    let fields: Vec<&str> = line.split(' ').collect();
    // The optional fields end at a lone "-", which cannot come before the sixth field.
    let dash = fields.iter().skip(6).position(|f| *f == "-")? + 6;
    let (major, minor) = fields[2].split_once(':')?;
    Some(MountEntry {
        id: fields[0].parse().ok()?,
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        root: unescape(fields[3]),
        mountpoint: unescape(fields[4]),
        fstype: fields.get(dash + 1).filter(|f| !f.is_empty())?.to_string(),
        source: fields
            .get(dash + 2)
            .map(|s| unescape(s))
            .unwrap_or_default(),
    })
}

/// Undoes the kernel's octal escapes (`\040` → space); anything else is kept as written.
pub(crate) fn unescape(field: &str) -> String {
    if !field.contains('\\') {
        return field.to_owned();
    }
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match octal {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_proc5_example() {
        let m = parse(
            "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n",
        );
        assert_eq!(
            m,
            [MountEntry {
                id: 36,
                major: 98,
                minor: 0,
                root: "/mnt1".into(),
                mountpoint: "/mnt2".into(),
                fstype: "ext3".into(),
                source: "/dev/root".into(),
            }]
        );
    }

    #[test]
    fn unescapes_octal_and_keeps_other_backslashes() {
        assert_eq!(unescape(r"/mnt/a\040b\011c\134d"), "/mnt/a b\tc\\d");
        assert_eq!(unescape(r"/x\9y\04"), r"/x\9y\04");
        assert_eq!(unescape(r"\"), r"\");
    }

    #[test]
    fn skips_malformed_lines() {
        for line in [
            "",
            "garbage",
            "1 2 3:4 / /mnt rw - ", // no fstype
            "1 2 34 / /mnt rw - ext4 /dev/x rw",
            "x 2 3:4 / /mnt rw - ext4 /dev/x rw",
            "1 2 3:4 / /mnt rw shared:1 ext4 /dev/x rw", // no separator
            "1 2 3:4 / - rw ext4",                       // "-" too early to be the separator
        ] {
            assert_eq!(parse(line), [], "{line:?}");
        }
    }
}
