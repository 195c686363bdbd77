//! The layout of EC2's NVMe performance statistics, log page 0xD0: a pure parser over the
//! page's bytes ([`parse`]), separate from reading it and from encoding metrics.
//!
//! The layout is nvme-cli's (`plugins/amzn/amzn-nvme.c`, `struct amzn_latency_log_page`),
//! all fields little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic: `0x3C23B510` EBS, `0xEC2C0D7E` instance store |
//! | 4 | 4 | version (1: an instance-store page has the per-size block) |
//! | 8 | 6 × 8 | read ops, write ops, read bytes, write bytes, read time, write time (µs) |
//! | 56 | 4 × 8 | time over the volume's IOPS, the volume's throughput, the instance's IOPS, the instance's throughput (µs) |
//! | 88 | 8 | queue length (now) |
//! | 96 | 416 | reserved |
//! | 512 | 1544 | read latency histogram: u64 bin count, 64 × {u64 lower, u64 upper, u32 count, u32 reserved} (µs) |
//! | 2056 | 1544 | write latency histogram |
//! | 3600 | 4 | number of per-size histograms (instance store) |
//! | 3604 | 8 × 4 | their I/O sizes' upper bounds, bytes (each range starts above the previous) |
//! | 3636 | 460 | reserved (EBS: the page ends at 4096) |
//! | 4096 | 8 × 512 | instance store, version 1: per size, read then write counts, 32 × u64 each, in the write histogram's bins |
//!
//! Where other readers disagree: the EBS CSI driver reads magic and version as one u64 (so any
//! version but 0 is "invalid magic" there) and a bin's count as a u64 (the same bytes while the
//! reserved word is 0); the CloudWatch agent lays the instance-store page out differently (bin
//! bounds once at offset 136, five read/write pairs after them, in 4096 bytes). This parser
//! follows nvme-cli.

use std::fmt;

/// The page's log identifier.
pub(crate) const LOG_ID: u8 = 0xD0;
/// An EBS volume's page.
pub(crate) const MAGIC_EBS: u32 = 0x3C23_B510;
/// An instance-store device's page.
pub(crate) const MAGIC_INSTANCE_STORE: u32 = 0xEC2C_0D7E;
/// The versions this parser knows (1: an instance-store page carries the per-size block).
pub(crate) const KNOWN_VERSIONS: [u32; 2] = [0, 1];
/// The version with the instance-store per-size block.
pub(crate) const VERSION_BY_SIZE: u32 = 1;
/// The length of an EBS page, and of the first part of an instance-store page.
pub(crate) const BASE_LEN: usize = 4096;
/// The length of an instance-store page with its per-size block.
pub(crate) const INSTANCE_STORE_LEN: usize = 8192;
/// Bins a latency histogram may have.
pub(crate) const MAX_BINS: usize = 64;
/// Per-size histograms an instance-store page may have.
pub(crate) const MAX_SIZE_HISTOGRAMS: usize = 8;
/// Bins of each per-size histogram (the counts' arrays).
pub(crate) const SIZE_BINS: usize = 32;

const READ_HISTOGRAM: usize = 512;
const WRITE_HISTOGRAM: usize = 2056;
const HISTOGRAM_LEN: usize = 8 + MAX_BINS * 24;
const NUM_SIZE_HISTOGRAMS: usize = 3600;
const SIZE_BOUNDS: usize = 3604;
const SIZE_BLOCK_LEN: usize = 2 * SIZE_BINS * 8;
const _: () = assert!(WRITE_HISTOGRAM + HISTOGRAM_LEN <= NUM_SIZE_HISTOGRAMS);
const _: () = assert!(BASE_LEN + MAX_SIZE_HISTOGRAMS * SIZE_BLOCK_LEN == INSTANCE_STORE_LEN);

/// Which kind of device wrote the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Source {
    /// An EBS volume.
    Ebs,
    /// An instance-store NVMe device.
    InstanceStore,
}

impl Source {
    /// `ebs` or `instance_store`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Source::Ebs => "ebs",
            Source::InstanceStore => "instance_store",
        }
    }

    /// How many bytes to ask the device for.
    pub(crate) fn page_len(self) -> usize {
        match self {
            Source::Ebs => BASE_LEN,
            Source::InstanceStore => INSTANCE_STORE_LEN,
        }
    }
}

/// One bin of a latency histogram: I/Os that took more than `lower_us` and up to `upper_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bin {
    /// Lower bound, µs.
    pub lower_us: u64,
    /// Upper bound, µs.
    pub upper_us: u64,
    /// I/Os in this bin (not cumulative).
    pub count: u64,
}

/// A latency histogram as the page has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PageHistogram {
    /// Bins in increasing order of bounds.
    pub bins: Vec<Bin>,
}

impl PageHistogram {
    /// I/Os in every bin.
    pub(crate) fn count(&self) -> u64 {
        self.bins
            .iter()
            .map(|b| b.count)
            .fold(0, u64::saturating_add)
    }

    /// Cumulative classic buckets: `(upper bound in seconds, I/Os up to it)`.
    pub(crate) fn cumulative_seconds(&self) -> Vec<(f64, u64)> {
        let mut total = 0u64;
        self.bins
            .iter()
            .map(|b| {
                total = total.saturating_add(b.count);
                (b.upper_us as f64 / 1e6, total)
            })
            .collect()
    }
}

/// An instance-store page's read and write histograms of one range of I/O sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SizeHistograms {
    /// The range's upper bound in bytes (`u32::MAX`: no bound); it starts above the previous
    /// range's (0 for the first).
    pub up_to_bytes: u32,
    /// Reads of this size range.
    pub read: PageHistogram,
    /// Writes of this size range.
    pub write: PageHistogram,
}

/// A parsed page. Counters are cumulative since the device was attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogPage {
    /// Who wrote it.
    pub source: Source,
    /// Its version.
    pub version: u32,
    /// Reads completed.
    pub read_ops: u64,
    /// Writes completed.
    pub write_ops: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Time of all completed reads, µs.
    pub read_time_us: u64,
    /// Time of all completed writes, µs.
    pub write_time_us: u64,
    /// Time the demand exceeded the volume's provisioned IOPS, µs (EBS only).
    pub volume_exceeded_iops_us: u64,
    /// Time the demand exceeded the volume's provisioned throughput, µs (EBS only).
    pub volume_exceeded_throughput_us: u64,
    /// Time the demand exceeded the instance's IOPS limit (EBS, or instance store), µs.
    pub instance_exceeded_iops_us: u64,
    /// Time the demand exceeded the instance's throughput limit, µs.
    pub instance_exceeded_throughput_us: u64,
    /// I/Os waiting now.
    pub queue_length: u64,
    /// Read latencies.
    pub read_latency: PageHistogram,
    /// Write latencies.
    pub write_latency: PageHistogram,
    /// Instance store, version 1: histograms per I/O size range.
    pub by_size: Vec<SizeHistograms>,
}

/// Why a page could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PageError {
    /// Fewer bytes than the layout needs.
    Short {
        /// Bytes there are.
        len: usize,
        /// Bytes needed.
        needed: usize,
    },
    /// The page starts with no magic this parser knows.
    UnknownMagic(u32),
    /// A version this parser does not know.
    UnknownVersion(u32),
    /// A field holds what the layout does not allow (more bins than fit, bounds out of order).
    Malformed(String),
}

impl PageError {
    /// The `reason` label: `short_page`, `unknown_magic`, `unknown_version`, `malformed_page`.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            PageError::Short { .. } => "short_page",
            PageError::UnknownMagic(_) => "unknown_magic",
            PageError::UnknownVersion(_) => "unknown_version",
            PageError::Malformed(_) => "malformed_page",
        }
    }
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageError::Short { len, needed } => {
                write!(
                    f,
                    "log page 0xD0 has {len} bytes, the layout needs {needed}"
                )
            }
            PageError::UnknownMagic(m) => write!(
                f,
                "log page 0xD0 starts with magic {m:#010x}, neither EBS's {MAGIC_EBS:#010x} nor instance store's {MAGIC_INSTANCE_STORE:#010x}"
            ),
            PageError::UnknownVersion(v) => write!(
                f,
                "log page 0xD0 has version {v}; known: {KNOWN_VERSIONS:?}"
            ),
            PageError::Malformed(what) => write!(f, "log page 0xD0: {what}"),
        }
    }
}

impl std::error::Error for PageError {}

fn u32_at(page: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&page[at..at + 4]);
    u32::from_le_bytes(b)
}

fn u64_at(page: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&page[at..at + 8]);
    u64::from_le_bytes(b)
}

/// The histogram at `at` (the caller has checked the page is long enough).
fn histogram(page: &[u8], at: usize, name: &str) -> Result<PageHistogram, PageError> {
    let n = u64_at(page, at);
    let n = usize::try_from(n)
        .ok()
        .filter(|&n| n <= MAX_BINS)
        .ok_or_else(|| {
            PageError::Malformed(format!(
                "{name} histogram has {n} bins, at most {MAX_BINS} fit"
            ))
        })?;
    let bins: Vec<Bin> = (0..n)
        .map(|i| {
            let b = at + 8 + i * 24;
            Bin {
                lower_us: u64_at(page, b),
                upper_us: u64_at(page, b + 8),
                count: u64::from(u32_at(page, b + 16)),
            }
        })
        .collect();
    for (i, pair) in bins.windows(2).enumerate() {
        if pair[1].upper_us <= pair[0].upper_us {
            return Err(PageError::Malformed(format!(
                "{name} histogram's bin {} ends at {} µs, not above bin {i}'s {} µs",
                i + 1,
                pair[1].upper_us,
                pair[0].upper_us
            )));
        }
    }
    if let Some(b) = bins.iter().find(|b| b.lower_us > b.upper_us) {
        return Err(PageError::Malformed(format!(
            "{name} histogram has a bin from {} µs down to {} µs",
            b.lower_us, b.upper_us
        )));
    }
    Ok(PageHistogram { bins })
}

/// The per-size block of an instance-store page of version 1 (the caller has checked the page
/// holds it), in the bins of `bounds` (the write histogram's, as nvme-cli reads them).
fn by_size(page: &[u8], bounds: &PageHistogram) -> Result<Vec<SizeHistograms>, PageError> {
    let n = u32_at(page, NUM_SIZE_HISTOGRAMS) as usize;
    if n > MAX_SIZE_HISTOGRAMS {
        return Err(PageError::Malformed(format!(
            "{n} per-size histograms, at most {MAX_SIZE_HISTOGRAMS} fit"
        )));
    }
    let bins = &bounds.bins[..bounds.bins.len().min(SIZE_BINS)];
    let counts = |at: usize| PageHistogram {
        bins: bins
            .iter()
            .enumerate()
            .map(|(i, b)| Bin {
                count: u64_at(page, at + i * 8),
                ..*b
            })
            .collect(),
    };
    let mut previous = 0u32;
    (0..n)
        .map(|i| {
            let up_to_bytes = u32_at(page, SIZE_BOUNDS + i * 4);
            if i > 0 && up_to_bytes <= previous {
                return Err(PageError::Malformed(format!(
                    "I/O size range {i} ends at {up_to_bytes} bytes, not above {previous}"
                )));
            }
            previous = up_to_bytes;
            let block = BASE_LEN + i * SIZE_BLOCK_LEN;
            Ok(SizeHistograms {
                up_to_bytes,
                read: counts(block),
                write: counts(block + SIZE_BINS * 8),
            })
        })
        .collect()
}

/// Parses a page read from a device (or a fixture file).
pub(crate) fn parse(page: &[u8]) -> Result<LogPage, PageError> {
    if page.len() < 8 {
        return Err(PageError::Short {
            len: page.len(),
            needed: BASE_LEN,
        });
    }
    let source = match u32_at(page, 0) {
        MAGIC_EBS => Source::Ebs,
        MAGIC_INSTANCE_STORE => Source::InstanceStore,
        other => return Err(PageError::UnknownMagic(other)),
    };
    let version = u32_at(page, 4);
    if !KNOWN_VERSIONS.contains(&version) {
        return Err(PageError::UnknownVersion(version));
    }
    let with_sizes = source == Source::InstanceStore && version == VERSION_BY_SIZE;
    let needed = if with_sizes {
        INSTANCE_STORE_LEN
    } else {
        BASE_LEN
    };
    if page.len() < needed {
        return Err(PageError::Short {
            len: page.len(),
            needed,
        });
    }
    let read_latency = histogram(page, READ_HISTOGRAM, "read")?;
    let write_latency = histogram(page, WRITE_HISTOGRAM, "write")?;
    let by_size = if with_sizes {
        by_size(page, &write_latency)?
    } else {
        Vec::new()
    };
    Ok(LogPage {
        source,
        version,
        read_ops: u64_at(page, 8),
        write_ops: u64_at(page, 16),
        read_bytes: u64_at(page, 24),
        write_bytes: u64_at(page, 32),
        read_time_us: u64_at(page, 40),
        write_time_us: u64_at(page, 48),
        volume_exceeded_iops_us: u64_at(page, 56),
        volume_exceeded_throughput_us: u64_at(page, 64),
        instance_exceeded_iops_us: u64_at(page, 72),
        instance_exceeded_throughput_us: u64_at(page, 80),
        queue_length: u64_at(page, 88),
        read_latency,
        write_latency,
        by_size,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A page as the layout says, written field by field (independently of the parser's
    /// offsets: each write below names its offset from nvme-cli's struct).
    pub(crate) fn page(magic: u32, version: u32, len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len.max(BASE_LEN)];
        p[0..4].copy_from_slice(&magic.to_le_bytes());
        p[4..8].copy_from_slice(&version.to_le_bytes());
        for (i, v) in [
            10u64, 20, 4096, 8192, 1_500_000, 2_500_000, 3_000_000, 0, 250_000, 0, 7,
        ]
        .into_iter()
        .enumerate()
        {
            p[8 + i * 8..16 + i * 8].copy_from_slice(&v.to_le_bytes());
        }
        for (at, counts) in [(512usize, [4u32, 6, 0]), (2056, [1, 2, 17])] {
            p[at..at + 8].copy_from_slice(&3u64.to_le_bytes());
            for (i, (lo, hi)) in [(0u64, 100u64), (100, 1000), (1000, 10_000)]
                .into_iter()
                .enumerate()
            {
                let b = at + 8 + i * 24;
                p[b..b + 8].copy_from_slice(&lo.to_le_bytes());
                p[b + 8..b + 16].copy_from_slice(&hi.to_le_bytes());
                p[b + 16..b + 20].copy_from_slice(&counts[i].to_le_bytes());
            }
        }
        p.truncate(len);
        p
    }

    #[test]
    fn an_ebs_page_gives_its_counters_and_histograms() {
        let p = parse(&page(MAGIC_EBS, 0, BASE_LEN)).unwrap();
        assert_eq!(p.source, Source::Ebs);
        assert_eq!(
            (p.read_ops, p.write_ops, p.read_bytes, p.write_bytes),
            (10, 20, 4096, 8192)
        );
        assert_eq!((p.read_time_us, p.write_time_us), (1_500_000, 2_500_000));
        assert_eq!(p.volume_exceeded_iops_us, 3_000_000);
        assert_eq!(p.instance_exceeded_iops_us, 250_000);
        assert_eq!(p.queue_length, 7);
        assert_eq!(p.read_latency.count(), 10);
        assert_eq!(
            p.write_latency.cumulative_seconds(),
            [(0.0001, 1), (0.001, 3), (0.01, 20)]
        );
        assert!(p.by_size.is_empty());
    }

    #[test]
    fn broken_pages_say_what_is_wrong() {
        assert_eq!(
            parse(&page(MAGIC_EBS, 0, 1000)),
            Err(PageError::Short {
                len: 1000,
                needed: BASE_LEN
            })
        );
        assert_eq!(parse(&[1, 2]).unwrap_err().reason(), "short_page");
        assert_eq!(
            parse(&page(0xDEAD_BEEF, 0, BASE_LEN)),
            Err(PageError::UnknownMagic(0xDEAD_BEEF))
        );
        assert_eq!(
            parse(&page(MAGIC_EBS, 7, BASE_LEN)),
            Err(PageError::UnknownVersion(7))
        );
        // Version 1 of instance store needs the per-size block.
        assert_eq!(
            parse(&page(MAGIC_INSTANCE_STORE, 1, BASE_LEN))
                .unwrap_err()
                .reason(),
            "short_page"
        );
        let mut p = page(MAGIC_EBS, 0, BASE_LEN);
        p[512..520].copy_from_slice(&65u64.to_le_bytes());
        assert_eq!(parse(&p).unwrap_err().reason(), "malformed_page");
        let mut p = page(MAGIC_EBS, 0, BASE_LEN);
        // Bin 2's upper bound below bin 1's.
        p[512 + 8 + 2 * 24 + 8..512 + 8 + 2 * 24 + 16].copy_from_slice(&50u64.to_le_bytes());
        assert!(
            parse(&p).unwrap_err().to_string().contains("not above"),
            "{:?}",
            parse(&p)
        );
    }

    #[test]
    fn an_instance_store_page_has_histograms_per_size() {
        let mut p = page(MAGIC_INSTANCE_STORE, 1, INSTANCE_STORE_LEN);
        p[3600..3604].copy_from_slice(&2u32.to_le_bytes());
        p[3604..3608].copy_from_slice(&4096u32.to_le_bytes());
        p[3608..3612].copy_from_slice(&u32::MAX.to_le_bytes());
        // Size range 1, writes, bin 2: 5 I/Os.
        let at = 4096 + 512 + 256 + 2 * 8;
        p[at..at + 8].copy_from_slice(&5u64.to_le_bytes());
        let parsed = parse(&p).unwrap();
        assert_eq!(parsed.by_size.len(), 2);
        assert_eq!(parsed.by_size[0].up_to_bytes, 4096);
        assert_eq!(parsed.by_size[1].up_to_bytes, u32::MAX);
        assert_eq!(parsed.by_size[1].write.count(), 5);
        assert_eq!(parsed.by_size[1].write.bins[2].upper_us, 10_000);
        assert_eq!(parsed.by_size[0].read.count(), 0);
        p[3600..3604].copy_from_slice(&9u32.to_le_bytes());
        assert_eq!(parse(&p).unwrap_err().reason(), "malformed_page");
        // Version 0: the first 4096 bytes only.
        let v0 = parse(&page(MAGIC_INSTANCE_STORE, 0, BASE_LEN)).unwrap();
        assert_eq!(v0.source, Source::InstanceStore);
        assert!(v0.by_size.is_empty());
    }
}
