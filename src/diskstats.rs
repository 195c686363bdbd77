//! Pure parser for `/proc/diskstats`.
//!
//! The kernel has printed three layouts over the years (see
//! `Documentation/admin-guide/iostats.rst`): 14 fields (up to 4.17), 18 fields (4.18 added
//! discards) and 20 fields (5.5 added flushes). Each line starts with major, minor and the device
//! name, followed by the counters. This module only turns text into [`DiskStats`] records; reading
//! the file, filtering devices and encoding metrics live elsewhere.
//!
//! Lines with fewer than 14 fields or with a field that is not an unsigned integer are skipped and
//! reported as [`SkippedLine`]s so a single odd line never fails a whole scrape. Fields beyond the
//! twentieth are ignored, so a future kernel that appends counters keeps working.

/// Counters of one block device, as the kernel reports them.
///
/// Times are in milliseconds and sizes in 512-byte sectors, exactly as in the file; conversion to
/// base units happens when metrics are encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskStats {
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// Kernel device name (may contain `/`, e.g. `cciss/c0d0`).
    pub name: String,
    /// Reads completed successfully.
    pub reads_completed: u64,
    /// Reads merged.
    pub reads_merged: u64,
    /// Sectors read.
    pub sectors_read: u64,
    /// Milliseconds spent reading.
    pub read_time_ms: u64,
    /// Writes completed.
    pub writes_completed: u64,
    /// Writes merged.
    pub writes_merged: u64,
    /// Sectors written.
    pub sectors_written: u64,
    /// Milliseconds spent writing.
    pub write_time_ms: u64,
    /// I/Os currently in progress.
    pub io_in_progress: u64,
    /// Milliseconds spent doing I/Os.
    pub io_time_ms: u64,
    /// Weighted milliseconds spent doing I/Os.
    pub io_weighted_time_ms: u64,
    /// Discard counters (kernel 4.18 and later).
    pub discards: Option<DiscardStats>,
    /// Flush counters (kernel 5.5 and later).
    pub flushes: Option<FlushStats>,
}

/// Discard counters, fields 15 to 18 of a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscardStats {
    /// Discards completed successfully.
    pub completed: u64,
    /// Discards merged.
    pub merged: u64,
    /// Sectors discarded.
    pub sectors: u64,
    /// Milliseconds spent discarding.
    pub time_ms: u64,
}

/// Flush counters, fields 19 and 20 of a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushStats {
    /// Flush requests completed successfully.
    pub completed: u64,
    /// Milliseconds spent flushing.
    pub time_ms: u64,
}

/// A line that was not understood, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedLine {
    /// 1-based line number in the input.
    pub line: usize,
    /// Why the line was skipped.
    pub reason: String,
}

/// The result of parsing a whole file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Devices in file order.
    pub devices: Vec<DiskStats>,
    /// Lines that were skipped (blank lines are not reported).
    pub skipped: Vec<SkippedLine>,
}

/// Number of fields in the oldest layout: major, minor, name and 11 counters.
const MIN_FIELDS: usize = 14;
/// Number of fields in the newest layout (kernel 5.5+).
const MAX_FIELDS: usize = 20;

/// Parses the whole content of a diskstats file.
pub fn parse(text: &str) -> Parsed {
    let mut parsed = Parsed::default();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(line) {
            Ok(stats) => parsed.devices.push(stats),
            Err(reason) => parsed.skipped.push(SkippedLine {
                line: index + 1,
                reason,
            }),
        }
    }
    parsed
}

/// Parses one non-blank line.
pub(crate) fn parse_line(line: &str) -> Result<DiskStats, String> {
    // Only the first 20 fields matter; count the rest without storing them.
    let mut fields = [""; MAX_FIELDS];
    let mut count = 0;
    for field in line.split_ascii_whitespace() {
        if count < MAX_FIELDS {
            fields[count] = field;
        }
        count += 1;
    }
    if count < MIN_FIELDS {
        return Err(format!(
            "expected at least {MIN_FIELDS} fields, found {count}"
        ));
    }
    let len = count.min(MAX_FIELDS);
    let number = |i: usize| -> Result<u64, String> {
        fields[i].parse::<u64>().map_err(|_| {
            format!(
                "field {} ({:?}) is not an unsigned integer",
                i + 1,
                fields[i]
            )
        })
    };
    let small = |i: usize| -> Result<u32, String> {
        fields[i]
            .parse::<u32>()
            .map_err(|_| format!("field {} ({:?}) is not a device number", i + 1, fields[i]))
    };
    let discards = if len >= 18 {
        Some(DiscardStats {
            completed: number(14)?,
            merged: number(15)?,
            sectors: number(16)?,
            time_ms: number(17)?,
        })
    } else {
        None
    };
    let flushes = if len >= MAX_FIELDS {
        Some(FlushStats {
            completed: number(18)?,
            time_ms: number(19)?,
        })
    } else {
        None
    };
    Ok(DiskStats {
        major: small(0)?,
        minor: small(1)?,
        name: fields[2].to_owned(),
        reads_completed: number(3)?,
        reads_merged: number(4)?,
        sectors_read: number(5)?,
        read_time_ms: number(6)?,
        writes_completed: number(7)?,
        writes_merged: number(8)?,
        sectors_written: number(9)?,
        write_time_ms: number(10)?,
        io_in_progress: number(11)?,
        io_time_ms: number(12)?,
        io_weighted_time_ms: number(13)?,
        discards,
        flushes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_kernel_layouts() {
        let text = "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11\n\
                    \x20  8      16 sdb 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n\
                    \x20259       0 nvme0n1 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n";
        let parsed = parse(text);
        assert!(parsed.skipped.is_empty(), "{:?}", parsed.skipped);
        let [old, mid, new] = parsed.devices.as_slice() else {
            panic!("expected three devices, got {:?}", parsed.devices)
        };
        assert_eq!(old.discards, None);
        assert_eq!(old.flushes, None);
        assert_eq!(old.io_weighted_time_ms, 11);
        assert_eq!(
            mid.discards,
            Some(DiscardStats {
                completed: 12,
                merged: 13,
                sectors: 14,
                time_ms: 15
            })
        );
        assert_eq!(mid.flushes, None);
        assert_eq!(
            new.flushes,
            Some(FlushStats {
                completed: 16,
                time_ms: 17
            })
        );
        assert_eq!(
            (new.major, new.minor, new.name.as_str()),
            (259, 0, "nvme0n1")
        );
    }

    #[test]
    fn skips_short_and_garbage_lines_but_keeps_the_rest() {
        let text = "\n  8 0 sda 1 2 3\n8 1 sda1 1 2 3 4 5 6 7 8 9 10 x\n\t8\t2\tsda2\t1 2 3 4 5 6 7 8 9 10 11\n";
        let parsed = parse(text);
        assert_eq!(parsed.devices.len(), 1);
        assert_eq!(parsed.devices[0].name, "sda2");
        assert_eq!(parsed.skipped.len(), 2);
        assert_eq!(parsed.skipped[0].line, 2);
        assert!(parsed.skipped[0].reason.contains("at least 14 fields"));
        assert_eq!(parsed.skipped[1].line, 3);
        assert!(parsed.skipped[1].reason.contains("field 14"));
    }

    #[test]
    fn keeps_u64_counters_and_slashes_and_ignores_extra_fields() {
        let max = u64::MAX;
        let text = format!("104 0 cciss/c0d0 {max} 0 {max} 0 0 0 0 0 0 0 0 0 0 0 0 0 99 100 101\n");
        let parsed = parse(&text);
        assert_eq!(parsed.devices[0].name, "cciss/c0d0");
        assert_eq!(parsed.devices[0].reads_completed, u64::MAX);
        assert_eq!(parsed.devices[0].flushes.map(|f| f.time_ms), Some(99));
    }

    #[test]
    fn rejects_negative_and_overflowing_numbers() {
        assert!(parse_line("8 0 sda -1 0 0 0 0 0 0 0 0 0 0").is_err());
        assert!(parse_line("8 0 sda 18446744073709551616 0 0 0 0 0 0 0 0 0 0").is_err());
        assert!(parse_line("x 0 sda 0 0 0 0 0 0 0 0 0 0 0").is_err());
    }
}
