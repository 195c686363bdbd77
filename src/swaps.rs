//! Pure parser of `/proc/swaps` (proc(5)): the swap areas in use, each by the path `swapon` was
//! given and whether it is a block device (`partition`) or a file.
//!
//! A line is `FILENAME TYPE SIZE USED PRIORITY` after a header; the kernel escapes space, tab,
//! newline and backslash in the file name as octal (`\040`), unescaped here. Lines without a
//! type the kernel writes are skipped.

/// One swap area in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SwapArea {
    /// The path it was enabled by (a deleted file ends in ` (deleted)`).
    pub(crate) path: String,
    /// A block device (`partition`, whatever kind of device), rather than a file.
    pub(crate) device: bool,
}

/// Parses a `/proc/swaps` text.
pub(crate) fn parse(text: &str) -> Vec<SwapArea> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let path = fields.next()?;
            let device = match fields.next()? {
                "partition" => true,
                "file" => false,
                _ => return None,
            };
            Some(SwapArea {
                path: crate::mountinfo::unescape(path),
                device,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areas_are_read_and_names_unescaped() {
        let text = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                    /dev/loop0                              partition\t65532\t\t0\t\t-2\n\
                    /swap\\040file                           file\t\t1048572\t\t0\t\t-3\n\
                    /dev/dm-1                               partition\t8388604\t\t0\t\t-4\n\
                    junk\n";
        assert_eq!(
            parse(text),
            [
                SwapArea {
                    path: "/dev/loop0".into(),
                    device: true
                },
                SwapArea {
                    path: "/swap file".into(),
                    device: false
                },
                SwapArea {
                    path: "/dev/dm-1".into(),
                    device: true
                },
            ]
        );
        assert!(parse("").is_empty());
    }
}
