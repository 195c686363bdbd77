//! Probe profiles: what one probe run does (direction and pattern, block size, queue depth, how
//! long, how fast), the built-in set that covers the classic six fio jobs, and the gentle
//! built-ins that sample latency at a capped rate.
//!
//! Every profile is one of two [`ProbeClass`]es. A rate-capped profile is *gentle*: it issues a
//! fixed number of I/Os per second whatever the device could take, so it measures latency without
//! loading the device. An uncapped profile is a *capacity* probe: it issues I/O as fast as the
//! device answers and so takes, while it runs, everything the device (or its IOPS cap) gives,
//! including what the workload beside it needed. That holds at QD1 too on a capped disk.

use std::fmt;
use std::time::Duration;

/// Access pattern and direction, named as fio's `rw=` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rw {
    /// Uniformly random reads (`randread`).
    RandRead,
    /// Uniformly random writes (`randwrite`).
    RandWrite,
    /// Sequential reads that wrap at the end of the region (`read`).
    Read,
    /// Sequential writes that wrap at the end of the region (`write`).
    Write,
}

impl Rw {
    /// fio's name for this pattern.
    pub fn as_str(self) -> &'static str {
        match self {
            Rw::RandRead => "randread",
            Rw::RandWrite => "randwrite",
            Rw::Read => "read",
            Rw::Write => "write",
        }
    }

    /// Parses fio's name (`randread`, `randwrite`, `read`, `write`).
    pub fn parse(text: &str) -> Option<Rw> {
        match text {
            "randread" => Some(Rw::RandRead),
            "randwrite" => Some(Rw::RandWrite),
            "read" => Some(Rw::Read),
            "write" => Some(Rw::Write),
            _ => None,
        }
    }

    /// Whether the pattern writes.
    pub fn is_write(self) -> bool {
        matches!(self, Rw::RandWrite | Rw::Write)
    }

    /// Whether offsets are random (otherwise sequential).
    pub fn is_random(self) -> bool {
        matches!(self, Rw::RandRead | Rw::RandWrite)
    }
}

impl fmt::Display for Rw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One probe: what to do and for how long. A run ends at `runtime` or after `number_ios` I/Os,
/// whichever comes first; at least one of the two must be set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Name, the `profile` label.
    pub name: String,
    /// Access pattern and direction.
    pub rw: Rw,
    /// Bytes per I/O.
    pub block_size: u64,
    /// I/Os kept in flight.
    pub iodepth: u32,
    /// How long a run lasts.
    pub runtime: Option<Duration>,
    /// Stop after this many I/Os.
    pub number_ios: Option<u64>,
    /// Cap on the issue rate in I/Os per second (latency is then measured from each I/O's intended
    /// issue time).
    pub rate_iops: Option<u32>,
    /// Region size in bytes (file targets: the probe file size), when the profile sets one.
    pub size: Option<u64>,
}

/// Runtime of the built-in profiles.
pub const BUILTIN_RUNTIME: Duration = Duration::from_secs(1);

/// Highest rate cap accepted, in IOPS (above any device; a cap's issue interval is whole
/// nanoseconds, which stay above zero up to 10⁹).
pub const MAX_RATE_IOPS: u32 = 10_000_000;

/// Issue rate of the gentle built-ins, in I/Os per second: a 1 s run gives 200 latency samples
/// (thousands an hour in the cumulative histogram at a 5-minute interval) and takes 200 IOPS from
/// the device while it runs, a small share of a cloud disk's cap (3,000 on an EBS gp3 volume by
/// default). At QD1 the rate holds as long as an I/O takes less than 5 ms; on a slower device
/// the run falls behind, and latency measured from each I/O's intended issue time shows it.
pub const GENTLE_RATE_IOPS: u32 = 200;

/// Suffix of the gentle built-ins' names.
pub const GENTLE_SUFFIX: &str = "-gentle";

/// The built-in profiles: `(name, rw, block size, iodepth, rate cap)`. The uncapped ones mirror fio
/// jobs (their meaning is fio's, so a one-shot run compares with fio); the rate-capped ones are
/// the gentle latency probes.
const BUILTINS: &[(&str, Rw, u64, u32, Option<u32>)] = &[
    ("randread-4k-qd1", Rw::RandRead, 4096, 1, None),
    ("randread-4k-qd32", Rw::RandRead, 4096, 32, None),
    ("randread-4k-qd128", Rw::RandRead, 4096, 128, None),
    ("read-1m-qd16", Rw::Read, 1 << 20, 16, None),
    ("read-1m-qd64", Rw::Read, 1 << 20, 64, None),
    ("randwrite-4k-qd1", Rw::RandWrite, 4096, 1, None),
    ("randwrite-4k-qd32", Rw::RandWrite, 4096, 32, None),
    ("randwrite-4k-qd128", Rw::RandWrite, 4096, 128, None),
    ("write-1m-qd16", Rw::Write, 1 << 20, 16, None),
    ("write-1m-qd64", Rw::Write, 1 << 20, 64, None),
    (
        "randread-4k-qd1-gentle",
        Rw::RandRead,
        4096,
        1,
        Some(GENTLE_RATE_IOPS),
    ),
    (
        "randwrite-4k-qd1-gentle",
        Rw::RandWrite,
        4096,
        1,
        Some(GENTLE_RATE_IOPS),
    ),
];

/// What a profile costs the device it probes (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeClass {
    /// Rate-capped: takes a fixed number of IOPS, whatever the device's load. Runs whether or not
    /// the device is busy (latency under load is what it is for).
    Gentle,
    /// Uncapped: takes all the device gives while it runs. In the agent it is skipped when the
    /// device is busy and stops early when another process's I/O shows up.
    Capacity,
}

impl ProbeClass {
    /// `gentle` or `capacity`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeClass::Gentle => "gentle",
            ProbeClass::Capacity => "capacity",
        }
    }
}

/// Names of the read-only built-ins that run when no profile is chosen, in order: latency at QD1,
/// IOPS at QD32, throughput at QD16.
pub const DEFAULT_READ_PROFILES: &[&str] = &["randread-4k-qd1", "randread-4k-qd32", "read-1m-qd16"];

impl Profile {
    /// Every built-in profile, each with a [`BUILTIN_RUNTIME`] runtime. The uncapped ones cover
    /// the seed's six fio jobs (4k random read and write at QD128, 1M sequential read and write at
    /// QD64, 4k random read and write at QD1) plus lighter QD32/QD16 variants; the two gentle
    /// ones read and write 4k at QD1 capped at [`GENTLE_RATE_IOPS`].
    pub fn builtins() -> Vec<Profile> {
        BUILTINS
            .iter()
            .map(|&(name, rw, block_size, iodepth, rate_iops)| Profile {
                name: name.to_owned(),
                rw,
                block_size,
                iodepth,
                runtime: Some(BUILTIN_RUNTIME),
                number_ios: None,
                rate_iops,
                size: None,
            })
            .collect()
    }

    /// Gentle when rate-capped, a capacity probe otherwise.
    pub fn class(&self) -> ProbeClass {
        if self.rate_iops.is_some() {
            ProbeClass::Gentle
        } else {
            ProbeClass::Capacity
        }
    }

    /// The built-in profile called `name`.
    pub fn builtin(name: &str) -> Option<Profile> {
        Profile::builtins().into_iter().find(|p| p.name == name)
    }

    /// The canonical `<rw>-<bs>-qd<N>` name of a profile with these parameters.
    pub fn canonical_name(rw: Rw, block_size: u64, iodepth: u32) -> String {
        format!("{rw}-{}-qd{iodepth}", format_block_size(block_size))
    }
}

/// `4096` → `4k`, `1048576` → `1m`, other values as bytes.
pub fn format_block_size(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{}m", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{}k", bytes >> 10)
    } else {
        bytes.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_follow_the_pattern() {
        for p in Profile::builtins() {
            let canonical = Profile::canonical_name(p.rw, p.block_size, p.iodepth);
            match p.class() {
                ProbeClass::Capacity => assert_eq!(p.name, canonical),
                ProbeClass::Gentle => assert_eq!(p.name, format!("{canonical}{GENTLE_SUFFIX}")),
            }
            assert!(p.runtime.is_some());
        }
        for name in DEFAULT_READ_PROFILES {
            let p = Profile::builtin(name).expect(name);
            assert!(!p.rw.is_write());
        }
    }

    #[test]
    fn builtins_cover_the_six_seed_jobs() {
        for (rw, bs, qd) in [
            (Rw::RandWrite, 4096, 128),
            (Rw::RandRead, 4096, 128),
            (Rw::Write, 1 << 20, 64),
            (Rw::Read, 1 << 20, 64),
            (Rw::RandWrite, 4096, 1),
            (Rw::RandRead, 4096, 1),
        ] {
            let name = Profile::canonical_name(rw, bs, qd);
            let p = Profile::builtin(&name).expect(&name);
            // fio's meaning: no rate cap.
            assert_eq!(p.class(), ProbeClass::Capacity, "{name}");
        }
    }

    #[test]
    fn gentle_builtins_read_and_write_4k_at_qd1_at_the_capped_rate() {
        for (name, rw) in [
            ("randread-4k-qd1-gentle", Rw::RandRead),
            ("randwrite-4k-qd1-gentle", Rw::RandWrite),
        ] {
            let p = Profile::builtin(name).expect(name);
            assert_eq!((p.rw, p.block_size, p.iodepth), (rw, 4096, 1));
            assert_eq!(p.rate_iops, Some(GENTLE_RATE_IOPS));
            assert_eq!(p.class(), ProbeClass::Gentle);
        }
    }
}
