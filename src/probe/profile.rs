//! Probe profiles: what one probe run does (direction and pattern, block size, queue depth, how
//! long, how fast, how writes are made durable), the built-in set that covers the classic six
//! fio jobs, the gentle built-ins that sample latency at a capped rate, and the durability
//! built-ins (`etcd-wal`, `write-4k-qd1-fdatasync`).
//!
//! Every profile is one of three [`ProbeClass`]es. A rate-capped profile is *gentle*: it issues a
//! fixed number of I/Os per second whatever the device could take, so it measures latency without
//! loading the device. An uncapped profile is a *capacity* probe: it issues I/O as fast as the
//! device answers and so takes, while it runs, everything the device (or its IOPS cap) gives,
//! including what the workload beside it needed. That holds at QD1 too on a capped disk. An
//! uncapped profile that makes its writes durable (a sync call, `O_DSYNC`/`O_SYNC`, or buffered
//! writes) is a *durability* probe: it writes at QD1 and waits for the device's cache flush, so
//! the flushes pace it.

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
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Rw::RandRead => "randread",
            Rw::RandWrite => "randwrite",
            Rw::Read => "read",
            Rw::Write => "write",
        }
    }

    /// Parses fio's name (`randread`, `randwrite`, `read`, `write`).
    pub(crate) fn parse(text: &str) -> Option<Rw> {
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
    pub(crate) fn is_random(self) -> bool {
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
///
/// Made only by [`Profile::new`], the one constructor, which checks every field against the
/// limits below ([`MAX_BLOCK_SIZE`], [`MAX_IODEPTH`], ...) and the durability settings against the
/// rest: `[profiles.NAME]` tables, fio option strings and the built-ins all go through it, so
/// the engine checks only what depends on the target. The fields are public to be read; only
/// `name` and `runtime` are set after the fact (the table's name; the target's runtime, or
/// `--runtime` in one-shot mode).
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
    /// How writes reach the disk and when they are made durable.
    pub durability: Durability,
    /// Proof that [`Profile::new`] made it.
    checked: Checked,
}

/// What only [`Profile::new`] puts into a [`Profile`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Checked;

/// A profile's fields as a `[profiles.NAME]` table or a fio option string gives them, before
/// [`Profile::new`] checks them. Counts are wider than a profile's, so that a value too large for
/// it is refused with the same message as one just over the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProfileFields {
    /// Name, the `profile` label.
    pub name: String,
    /// Access pattern and direction.
    pub rw: Rw,
    /// Bytes per I/O: [`ProfileLimit::BlockSize`].
    pub block_size: u64,
    /// I/Os kept in flight: [`ProfileLimit::Iodepth`].
    pub iodepth: u64,
    /// How long a run lasts: [`ProfileLimit::Runtime`].
    pub runtime: Option<Duration>,
    /// Stop after this many I/Os: [`ProfileLimit::NumberIos`].
    pub number_ios: Option<u64>,
    /// Cap on the issue rate in I/Os per second: [`ProfileLimit::RateIops`].
    pub rate_iops: Option<u64>,
    /// Region size in bytes: [`ProfileLimit::Size`].
    pub size: Option<u64>,
    /// How writes reach the disk and when they are made durable ([`Profile::new`] checks them
    /// against the pattern and the depth).
    pub durability: Durability,
}

/// Largest block size of a profile: 64 MiB. Each I/O of a run is one system call on one buffer,
/// and a run maps `iodepth` of them: far below what io_uring registers per buffer (1 GiB) and
/// what one `pread`/`pwrite` transfers (2 GiB less a page), and sixteen times the largest
/// built-in's 1 MiB.
pub(crate) const MAX_BLOCK_SIZE: u64 = 64 << 20;

/// What an O_DIRECT profile's block size must be a multiple of: the smallest logical block size.
/// The target's own direct-I/O alignment, which may be larger (4096 on a 4Kn disk), is checked
/// when a run starts on it.
pub(crate) const DIRECT_IO_MULTIPLE: u64 = 512;

/// Deepest queue a profile may keep (the psync engine runs a thread per I/O in flight).
pub(crate) const MAX_IODEPTH: u32 = 4096;

/// Largest `number_ios`: the largest integer a TOML file holds.
pub(crate) const MAX_NUMBER_IOS: u64 = i64::MAX as u64;

/// A profile key whose value [`Profile::new`] holds to a limit, with the name it has in a
/// `[profiles.NAME]` table and in a fio option string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileLimit {
    /// `bs`: 1 byte to [`MAX_BLOCK_SIZE`], with O_DIRECT (`direct`) a multiple of
    /// [`DIRECT_IO_MULTIPLE`].
    BlockSize {
        /// Whether the profile uses O_DIRECT.
        direct: bool,
    },
    /// `iodepth`: 1 to [`MAX_IODEPTH`].
    Iodepth,
    /// `runtime`: above zero (the longest is the duration parsers', [`crate::units::MAX_DURATION`]).
    Runtime,
    /// `number_ios`: 1 to [`MAX_NUMBER_IOS`].
    NumberIos,
    /// `rate_iops`: 1 to [`MAX_RATE_IOPS`].
    RateIops,
    /// `size` (fio strings): at least one block of `block_size` bytes.
    Size {
        /// The profile's block size.
        block_size: u64,
    },
}

impl ProfileLimit {
    /// The key's name, the same in a `[profiles.NAME]` table and a fio string.
    pub(crate) fn key(self) -> &'static str {
        match self {
            ProfileLimit::BlockSize { .. } => "bs",
            ProfileLimit::Iodepth => "iodepth",
            ProfileLimit::Runtime => "runtime",
            ProfileLimit::NumberIos => "number_ios",
            ProfileLimit::RateIops => "rate_iops",
            ProfileLimit::Size { .. } => "size",
        }
    }

    /// What the key takes, for an error's "expected ..."; `buffered` is how the profile's
    /// syntax asks for buffered writes (`direct = false`, `-direct=0`).
    pub(crate) fn expected(self, buffered: &str) -> String {
        let max_bs = format!("{}MiB", MAX_BLOCK_SIZE >> 20);
        match self {
            ProfileLimit::BlockSize { direct: true } => format!(
                "a multiple of {DIRECT_IO_MULTIPLE} bytes up to {max_bs} (O_DIRECT; {buffered} for buffered writes of any size)"
            ),
            ProfileLimit::BlockSize { direct: false } => format!("1 byte to {max_bs}"),
            ProfileLimit::Iodepth => format!("a whole number from 1 to {MAX_IODEPTH}"),
            ProfileLimit::Runtime => "a duration above zero".to_owned(),
            ProfileLimit::NumberIos => format!("a whole number from 1 to {MAX_NUMBER_IOS}"),
            ProfileLimit::RateIops => format!("a whole number from 1 to {MAX_RATE_IOPS}"),
            ProfileLimit::Size { block_size } => {
                format!("at least one block of {block_size} bytes")
            }
        }
    }

    /// The error for `found`, a value outside this limit.
    pub(crate) fn refuse(self, found: impl fmt::Display) -> InvalidProfile {
        InvalidProfile::Limit {
            limit: self,
            found: found.to_string(),
        }
    }
}

/// Why [`Profile::new`] refused a profile's fields.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InvalidProfile {
    /// A value outside its key's limit (the message spells buffered writes as the configuration
    /// does; fio strings word it their own way with [`ProfileLimit::expected`]).
    #[error("expected {}, found {found}", limit.expected("direct = false"))]
    Limit {
        /// The key and its limit.
        limit: ProfileLimit,
        /// The value given.
        found: String,
    },
    /// Durability settings that do not fit the rest of the profile.
    #[error(transparent)]
    Durability(#[from] DurabilityError),
}

impl InvalidProfile {
    /// The key at fault: [`ProfileLimit::key`], or [`DurabilityError::key`].
    pub(crate) fn key(&self) -> &'static str {
        match self {
            InvalidProfile::Limit { limit, .. } => limit.key(),
            InvalidProfile::Durability(e) => e.key(),
        }
    }
}

/// The system call that makes writes durable after the fact (fio's `fsync=N` / `fdatasync=N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncCall {
    /// `fsync`: data and all metadata.
    Fsync,
    /// `fdatasync`: data and the metadata needed to read it back (size, extents), not times.
    Fdatasync,
}

impl SyncCall {
    /// fio's option name: `fsync` or `fdatasync`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SyncCall::Fsync => "fsync",
            SyncCall::Fdatasync => "fdatasync",
        }
    }
}

/// A sync call after every `every` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SyncEvery {
    /// Which call.
    pub call: SyncCall,
    /// Writes between two calls (at least 1).
    pub every: u32,
}

impl SyncEvery {
    /// From fio's `fsync = N` and `fdatasync = N` (`None` where unset or 0): at most one of them.
    pub(crate) fn from_options(
        fsync: Option<u32>,
        fdatasync: Option<u32>,
    ) -> Result<Option<SyncEvery>, DurabilityError> {
        match (fsync, fdatasync) {
            (Some(_), Some(_)) => Err(DurabilityError::BothSyncCalls),
            (Some(every), None) => Ok(Some(SyncEvery {
                call: SyncCall::Fsync,
                every,
            })),
            (None, Some(every)) => Ok(Some(SyncEvery {
                call: SyncCall::Fdatasync,
                every,
            })),
            (None, None) => Ok(None),
        }
    }
}

/// Synchronous writes: the target opened with `O_DSYNC` or `O_SYNC` (fio's `sync=dsync` /
/// `sync=sync`), so that each write returns only once it is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpenSync {
    /// `O_DSYNC`: each write is durable as after `fdatasync`.
    Dsync,
    /// `O_SYNC`: each write is durable as after `fsync`.
    Sync,
}

impl OpenSync {
    /// fio's value: `dsync` or `sync`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OpenSync::Dsync => "dsync",
            OpenSync::Sync => "sync",
        }
    }
}

/// How a profile's writes reach the disk and when they are made durable: fio's `direct`, `sync`,
/// `fsync` and `fdatasync`. The default is what every profile without those keys does: O_DIRECT,
/// no sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Durability {
    /// O_DIRECT (the default), or buffered writes through the page cache (`direct = false`).
    pub direct: bool,
    /// A sync call after every N writes (`fsync = N`, `fdatasync = N`).
    pub sync_every: Option<SyncEvery>,
    /// `O_DSYNC` or `O_SYNC` (`sync = "dsync"`, `sync = "sync"`).
    pub open_sync: Option<OpenSync>,
    /// Each run writes into space of its own, preallocated for it (`fallocate`) beyond the
    /// probe file's pre-filled region and released when the run ends, as a database appends to
    /// a freshly preallocated log segment: each sync then also commits the conversion of the
    /// extents written. Only the `etcd-wal` built-in sets it.
    pub fresh_space: bool,
}

impl Default for Durability {
    fn default() -> Durability {
        Durability {
            direct: true,
            sync_every: None,
            open_sync: None,
            fresh_space: false,
        }
    }
}

/// Why the durability settings of a profile are refused. [`DurabilityError::key`] names the key at
/// fault, so that configuration errors can point at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurabilityError {
    /// A durability key on a profile that reads.
    #[error(
        "{key} applies to write profiles; a {rw} profile reads, and its reads stay O_DIRECT (fio ignores {key} on reads, a probe refuses it)"
    )]
    OnRead {
        /// The key.
        key: &'static str,
        /// The profile's pattern.
        rw: Rw,
    },
    /// Both `fsync` and `fdatasync`.
    #[error("fsync and fdatasync are both set; set one")]
    BothSyncCalls,
    /// A sync call with more than one write in flight.
    #[error(
        "iodepth {iodepth}: profiles with fsync or fdatasync run at iodepth 1 (a sync issued while other writes are in flight makes no defined set of them durable)"
    )]
    SyncDepth {
        /// The depth asked for.
        iodepth: u32,
    },
    /// Buffered writes that are never made durable.
    #[error(
        "direct = false without fsync, fdatasync or sync: buffered writes that are never synced stay in the page cache, and the probe would measure memory, not the disk"
    )]
    BufferedWithoutSync,
}

impl DurabilityError {
    /// The key at fault (`fsync`, `fdatasync`, `sync`, `direct` or `iodepth`).
    pub(crate) fn key(&self) -> &'static str {
        match self {
            DurabilityError::OnRead { key, .. } => key,
            DurabilityError::BothSyncCalls => "fdatasync",
            DurabilityError::SyncDepth { .. } => "iodepth",
            DurabilityError::BufferedWithoutSync => "direct",
        }
    }
}

/// Runtime of the built-in profiles.
pub(crate) const BUILTIN_RUNTIME: Duration = Duration::from_secs(1);

/// Highest rate cap accepted, in IOPS (above any device; a cap's issue interval is whole
/// nanoseconds, which stay above zero up to 10⁹).
pub(crate) const MAX_RATE_IOPS: u32 = 10_000_000;

/// Issue rate of the gentle built-ins, in I/Os per second: a 1 s run gives 200 latency samples
/// (thousands an hour in the cumulative histogram at a 5-minute interval) and takes 200 IOPS from
/// the device while it runs, a small share of a cloud disk's cap (3,000 on an EBS gp3 volume by
/// default). At QD1 the rate holds as long as an I/O takes less than 5 ms; on a slower device
/// the run falls behind, and latency measured from each I/O's intended issue time shows it.
pub(crate) const GENTLE_RATE_IOPS: u32 = 200;

#[cfg(test)]
/// Suffix of the gentle built-ins' names.
pub(crate) const GENTLE_SUFFIX: &str = "-gentle";

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
    /// Uncapped writes made durable, paced by the device's flushes. Runs whether or not the
    /// device is busy (how long a write takes to become durable under the workload's load is what
    /// it is for) and does not yield: its own flushes and the journal writes its syncs cause
    /// cannot be told from another process's I/O.
    Durability,
}

/// The durability built-ins: `(name, block size, O_DIRECT, fresh space)`, each a sequential QD1
/// write with `fdatasync` after every write.
const DURABILITY_BUILTINS: &[(&str, u64, bool, bool)] = &[
    // etcd's fio job: --rw=write --ioengine=sync --fdatasync=1 --bs=2300 (buffered), into freshly
    // preallocated space as etcd's WAL segments are.
    ("etcd-wal", 2300, false, true),
    ("write-4k-qd1-fdatasync", 4096, true, false),
];

/// Names of the read-only built-ins that run when no profile is chosen, in order: latency at QD1,
/// IOPS at QD32, throughput at QD16.
pub(crate) const DEFAULT_READ_PROFILES: &[&str] =
    &["randread-4k-qd1", "randread-4k-qd32", "read-1m-qd16"];

impl Profile {
    /// Every built-in profile, each with a [`BUILTIN_RUNTIME`] runtime. The uncapped ones cover
    /// the seed's six fio jobs (4k random read and write at QD128, 1M sequential read and write at
    /// QD64, 4k random read and write at QD1) plus lighter QD32/QD16 variants; the two gentle
    /// ones read and write 4k at QD1 capped at [`GENTLE_RATE_IOPS`]. The durability built-ins
    /// follow: `etcd-wal` (etcd's fio job) and `write-4k-qd1-fdatasync`.
    pub fn builtins() -> Vec<Profile> {
        BUILTINS
            .iter()
            .map(
                |&(name, rw, block_size, iodepth, rate_iops)| ProfileFields {
                    name: name.to_owned(),
                    rw,
                    block_size,
                    iodepth: u64::from(iodepth),
                    runtime: Some(BUILTIN_RUNTIME),
                    number_ios: None,
                    rate_iops: rate_iops.map(u64::from),
                    size: None,
                    durability: Durability::default(),
                },
            )
            .chain(Profile::durability_builtins())
            .map(|fields| {
                // Constants; `builtins_are_made_by_the_constructor` checks every one.
                Profile::new(fields)
                    .unwrap_or_else(|e| panic!("a built-in profile is invalid: {e}"))
            })
            .collect()
    }

    /// The one constructor: `fields`, checked. Each count within its [`ProfileLimit`] (in the
    /// order bs, iodepth, runtime, number_ios, rate_iops, size), then the durability settings
    /// against the pattern and the depth: they apply to writes only, sync calls run at QD1,
    /// buffered writes must be synced.
    pub(crate) fn new(fields: ProfileFields) -> Result<Profile, InvalidProfile> {
        let d = fields.durability;
        let bs = fields.block_size;
        if bs == 0 || bs > MAX_BLOCK_SIZE || (d.direct && !bs.is_multiple_of(DIRECT_IO_MULTIPLE)) {
            return Err(ProfileLimit::BlockSize { direct: d.direct }.refuse(bs));
        }
        let iodepth = u32::try_from(fields.iodepth)
            .ok()
            .filter(|q| (1..=MAX_IODEPTH).contains(q))
            .ok_or_else(|| ProfileLimit::Iodepth.refuse(fields.iodepth))?;
        if let Some(r) = fields.runtime.filter(Duration::is_zero) {
            return Err(ProfileLimit::Runtime.refuse(humantime::format_duration(r)));
        }
        if let Some(n) = fields
            .number_ios
            .filter(|n| !(1..=MAX_NUMBER_IOS).contains(n))
        {
            return Err(ProfileLimit::NumberIos.refuse(n));
        }
        let rate_iops = fields
            .rate_iops
            .map(|r| {
                u32::try_from(r)
                    .ok()
                    .filter(|r| (1..=MAX_RATE_IOPS).contains(r))
                    .ok_or_else(|| ProfileLimit::RateIops.refuse(r))
            })
            .transpose()?;
        if let Some(size) = fields.size.filter(|&s| s < bs) {
            return Err(ProfileLimit::Size { block_size: bs }.refuse(size));
        }
        let profile = Profile {
            name: fields.name,
            rw: fields.rw,
            block_size: bs,
            iodepth,
            runtime: fields.runtime,
            number_ios: fields.number_ios,
            rate_iops,
            size: fields.size,
            durability: d,
            checked: Checked,
        };
        profile.check_durability()?;
        Ok(profile)
    }

    #[cfg(test)]
    /// Its fields, as [`Profile::new`] takes them.
    pub(crate) fn fields(&self) -> ProfileFields {
        ProfileFields {
            name: self.name.clone(),
            rw: self.rw,
            block_size: self.block_size,
            iodepth: u64::from(self.iodepth),
            runtime: self.runtime,
            number_ios: self.number_ios,
            rate_iops: self.rate_iops.map(u64::from),
            size: self.size,
            durability: self.durability,
        }
    }

    /// Gentle when rate-capped; otherwise a durability probe when its writes are made durable,
    /// a capacity probe when not.
    pub fn class(&self) -> ProbeClass {
        if self.rate_iops.is_some() {
            ProbeClass::Gentle
        } else if self.makes_durable() {
            ProbeClass::Durability
        } else {
            ProbeClass::Capacity
        }
    }

    /// The durability built-ins: sequential QD1 writes, each followed by `fdatasync`.
    fn durability_builtins() -> impl Iterator<Item = ProfileFields> {
        DURABILITY_BUILTINS
            .iter()
            .map(|&(name, block_size, direct, fresh_space)| ProfileFields {
                name: name.to_owned(),
                rw: Rw::Write,
                block_size,
                iodepth: 1,
                runtime: Some(BUILTIN_RUNTIME),
                number_ios: None,
                rate_iops: None,
                size: None,
                durability: Durability {
                    direct,
                    sync_every: Some(SyncEvery {
                        call: SyncCall::Fdatasync,
                        every: 1,
                    }),
                    open_sync: None,
                    fresh_space,
                },
            })
    }

    /// Whether its writes are made durable (a sync call, `O_DSYNC`/`O_SYNC`, or buffered writes):
    /// its runs cause cache flushes and, on a filesystem, journal writes of their own, which cannot
    /// be told from another process's I/O.
    pub(crate) fn makes_durable(&self) -> bool {
        self.durability != Durability::default()
    }

    /// Whether runs issue sync calls (`fsync`/`fdatasync`), whose latency is recorded apart.
    pub fn syncs(&self) -> bool {
        self.durability.sync_every.is_some()
    }

    /// The durability settings against the rest of the profile ([`Profile::new`]'s last check):
    /// they apply to writes only, sync calls run at QD1, buffered writes must be synced.
    fn check_durability(&self) -> Result<(), DurabilityError> {
        let d = &self.durability;
        if !self.rw.is_write() {
            let key = match (d.sync_every, d.open_sync, d.direct) {
                (Some(s), _, _) => Some(s.call.as_str()),
                (None, Some(_), _) => Some("sync"),
                (None, None, false) => Some("direct"),
                (None, None, true) => None,
            };
            return match key {
                Some(key) => Err(DurabilityError::OnRead { key, rw: self.rw }),
                None => Ok(()),
            };
        }
        if d.sync_every.is_some() && self.iodepth > 1 {
            return Err(DurabilityError::SyncDepth {
                iodepth: self.iodepth,
            });
        }
        if !d.direct && d.sync_every.is_none() && d.open_sync.is_none() {
            return Err(DurabilityError::BufferedWithoutSync);
        }
        Ok(())
    }

    /// The built-in profile called `name`.
    pub(crate) fn builtin(name: &str) -> Option<Profile> {
        Profile::builtins().into_iter().find(|p| p.name == name)
    }

    /// The canonical `<rw>-<bs>-qd<N>` name of a profile with these parameters.
    pub(crate) fn canonical_name(rw: Rw, block_size: u64, iodepth: u32) -> String {
        format!("{rw}-{}-qd{iodepth}", format_block_size(block_size))
    }
}

/// `4096` → `4k`, `1048576` → `1m`, other values as bytes.
pub(crate) fn format_block_size(bytes: u64) -> String {
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
            assert!(p.runtime.is_some());
            p.check_durability().expect(&p.name);
            if p.name == "etcd-wal" {
                continue;
            }
            let canonical = Profile::canonical_name(p.rw, p.block_size, p.iodepth);
            match (p.class(), p.durability.sync_every) {
                (ProbeClass::Durability, Some(s)) => {
                    assert_eq!(p.name, format!("{canonical}-{}", s.call.as_str()));
                }
                (ProbeClass::Capacity, None) => assert_eq!(p.name, canonical),
                (ProbeClass::Gentle, None) => {
                    assert_eq!(p.name, format!("{canonical}{GENTLE_SUFFIX}"));
                }
                (class, sync) => panic!("{}: {class:?} with {sync:?}", p.name),
            }
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

    #[test]
    fn durability_builtins() {
        // etcd's fio job: --rw=write --ioengine=sync --fdatasync=1 --bs=2300, buffered.
        let etcd = Profile::builtin("etcd-wal").unwrap();
        assert_eq!(etcd.class(), ProbeClass::Durability);
        assert!(etcd.makes_durable());
        // Rate-capped, it is gentle, and still makes its writes durable (the agent does not
        // watch it for cost); an ordinary write does not.
        let capped = Profile {
            rate_iops: Some(100),
            ..etcd.clone()
        };
        assert_eq!(capped.class(), ProbeClass::Gentle);
        assert!(capped.makes_durable());
        assert!(
            !Profile::builtin("randwrite-4k-qd1-gentle")
                .unwrap()
                .makes_durable()
        );
        assert_eq!(
            (etcd.rw, etcd.block_size, etcd.iodepth),
            (Rw::Write, 2300, 1)
        );
        assert_eq!(
            etcd.durability,
            Durability {
                direct: false,
                sync_every: Some(SyncEvery {
                    call: SyncCall::Fdatasync,
                    every: 1
                }),
                open_sync: None,
                fresh_space: true,
            }
        );
        let direct = Profile::builtin("write-4k-qd1-fdatasync").unwrap();
        assert_eq!(
            (direct.rw, direct.block_size, direct.iodepth),
            (Rw::Write, 4096, 1)
        );
        assert!(direct.durability.direct && !direct.durability.fresh_space);
        assert!(etcd.syncs() && direct.syncs());
        assert!(!Profile::builtin("randwrite-4k-qd1").unwrap().syncs());
    }

    #[test]
    fn durability_rules() {
        let write = Profile::builtin("write-4k-qd1-fdatasync").unwrap();
        let on = |f: &dyn Fn(&mut Profile)| {
            let mut p = write.clone();
            f(&mut p);
            p.check_durability()
        };
        let read = |p: &mut Profile| p.rw = Rw::Read;
        assert_eq!(
            on(&read),
            Err(DurabilityError::OnRead {
                key: "fdatasync",
                rw: Rw::Read
            })
        );
        assert_eq!(
            on(&|p| p.iodepth = 2),
            Err(DurabilityError::SyncDepth { iodepth: 2 })
        );
        let buffered_unsynced = |p: &mut Profile| {
            p.durability.sync_every = None;
            p.durability.direct = false;
        };
        assert_eq!(
            on(&buffered_unsynced),
            Err(DurabilityError::BufferedWithoutSync)
        );
        assert_eq!(on(&buffered_unsynced).unwrap_err().key(), "direct");
        // O_DSYNC writes are durable one by one: buffered and deep queues are fine.
        let dsync = |p: &mut Profile| {
            buffered_unsynced(p);
            p.durability.open_sync = Some(OpenSync::Dsync);
            p.iodepth = 8;
        };
        assert_eq!(on(&dsync), Ok(()));
        assert_eq!(
            on(&|p: &mut Profile| {
                dsync(p);
                read(p);
            })
            .unwrap_err()
            .key(),
            "sync"
        );
        let plain_read = Profile::builtin("randread-4k-qd1").unwrap();
        assert_eq!(plain_read.check_durability(), Ok(()));
    }

    #[test]
    fn builtins_are_made_by_the_constructor() {
        for p in Profile::builtins() {
            assert_eq!(Profile::new(p.fields()).as_ref(), Ok(&p), "{}", p.name);
        }
    }

    /// The fields of a 4k random read at QD1, for the limit tests to change.
    fn read_4k() -> ProfileFields {
        Profile::builtin("randread-4k-qd1").unwrap().fields()
    }

    #[test]
    fn block_sizes_within_the_limit_only() {
        let with = |block_size: u64, direct: bool| {
            let mut f = ProfileFields {
                block_size,
                ..read_4k()
            };
            if !direct {
                // Buffered writes must be synced.
                f.rw = Rw::Write;
                f.durability.direct = false;
                f.durability.sync_every = SyncEvery::from_options(None, Some(1)).unwrap();
            }
            Profile::new(f).map(|p| p.block_size)
        };
        let direct = ProfileLimit::BlockSize { direct: true };
        let buffered = ProfileLimit::BlockSize { direct: false };
        assert_eq!(with(MAX_BLOCK_SIZE, true), Ok(MAX_BLOCK_SIZE));
        assert_eq!(with(MAX_BLOCK_SIZE, false), Ok(MAX_BLOCK_SIZE));
        assert_eq!(with(DIRECT_IO_MULTIPLE, true), Ok(DIRECT_IO_MULTIPLE));
        assert_eq!(with(1, false), Ok(1));
        for (bs, is_direct, limit) in [
            (MAX_BLOCK_SIZE + DIRECT_IO_MULTIPLE, true, direct),
            (MAX_BLOCK_SIZE + 1, false, buffered),
            (0, true, direct),
            (0, false, buffered),
            (2300, true, direct),
            (u64::from(u32::MAX) + 1, true, direct),
        ] {
            assert_eq!(with(bs, is_direct), Err(limit.refuse(bs)), "{bs}");
        }
        assert_eq!(
            direct.refuse(2300).to_string(),
            "expected a multiple of 512 bytes up to 64MiB (O_DIRECT; direct = false for buffered writes of any size), found 2300"
        );
        assert_eq!(
            buffered.refuse(0).to_string(),
            "expected 1 byte to 64MiB, found 0"
        );
    }

    /// A change to a profile's fields.
    type Change<'a> = dyn Fn(&mut ProfileFields) + 'a;

    #[test]
    fn counts_within_their_limits_only() {
        let new = |change: &Change<'_>| {
            let mut f = read_4k();
            change(&mut f);
            Profile::new(f)
        };
        let max_depth = u64::from(MAX_IODEPTH);
        assert_eq!(
            new(&|f| f.iodepth = max_depth).unwrap().iodepth,
            MAX_IODEPTH
        );
        let max_rate = u64::from(MAX_RATE_IOPS);
        assert_eq!(
            new(&|f| f.rate_iops = Some(max_rate)).unwrap().rate_iops,
            Some(MAX_RATE_IOPS)
        );
        let max_ios = Some(MAX_NUMBER_IOS);
        assert_eq!(
            new(&|f| f.number_ios = max_ios).unwrap().number_ios,
            max_ios
        );
        let size = Some(4096);
        assert_eq!(new(&|f| f.size = size).unwrap().size, size);
        let refused: [(&Change<'_>, InvalidProfile); 9] = [
            (&|f| f.iodepth = 0, ProfileLimit::Iodepth.refuse(0)),
            (
                &|f| f.iodepth = max_depth + 1,
                ProfileLimit::Iodepth.refuse(max_depth + 1),
            ),
            (
                &|f| f.iodepth = 1 << 32,
                ProfileLimit::Iodepth.refuse(1u64 << 32),
            ),
            (&|f| f.rate_iops = Some(0), ProfileLimit::RateIops.refuse(0)),
            (
                &|f| f.rate_iops = Some(max_rate + 1),
                ProfileLimit::RateIops.refuse(max_rate + 1),
            ),
            (
                &|f| f.number_ios = Some(0),
                ProfileLimit::NumberIos.refuse(0),
            ),
            (
                &|f| f.number_ios = Some(MAX_NUMBER_IOS + 1),
                ProfileLimit::NumberIos.refuse(MAX_NUMBER_IOS + 1),
            ),
            (
                &|f| f.runtime = Some(Duration::ZERO),
                ProfileLimit::Runtime.refuse("0s"),
            ),
            (
                &|f| f.size = Some(4095),
                ProfileLimit::Size { block_size: 4096 }.refuse(4095),
            ),
        ];
        for (change, want) in refused {
            assert_eq!(new(change), Err(want.clone()), "{want}");
        }
        assert_eq!(
            ProfileLimit::Iodepth.refuse(0).to_string(),
            "expected a whole number from 1 to 4096, found 0"
        );
    }

    #[test]
    fn the_constructor_checks_the_durability_settings() {
        let write_fdatasync = Profile::builtin("write-4k-qd1-fdatasync").unwrap().fields();
        let deep = ProfileFields {
            iodepth: 4,
            ..write_fdatasync.clone()
        };
        assert_eq!(
            Profile::new(deep),
            Err(InvalidProfile::Durability(DurabilityError::SyncDepth {
                iodepth: 4
            }))
        );
        let read = ProfileFields {
            rw: Rw::Read,
            ..write_fdatasync
        };
        let err = Profile::new(read).unwrap_err();
        assert_eq!(err.key(), "fdatasync");
        assert_eq!(
            err,
            InvalidProfile::Durability(DurabilityError::OnRead {
                key: "fdatasync",
                rw: Rw::Read
            })
        );
    }
}
