//! fio-style option strings (`-rw=randread -bs=4k -iodepth=32 -runtime=5s`) → [`Profile`].
//!
//! Both `-opt=value` and `--opt=value` are accepted. Only what a single job on one target means is
//! supported: `rw`, `bs`/`blocksize`, `iodepth`, `runtime`, `size`, `rate_iops`, `number_ios`,
//! `name`, `direct`, `fsync`, `fdatasync`, `sync`, `numjobs=1`, `ioengine` (`io_uring`, `libaio`,
//! `psync`, `pvsync`, `pvsync2`, `sync`; accepted for compatibility, the engine is chosen with
//! `--engine`), and the no-ops `time_based`, `group_reporting`. Anything else is an error that
//! names the option.
//!
//! Values are parsed here and checked by [`Profile::new`], the constructor a `[profiles.NAME]`
//! table's keys go through too: the same limits ([`crate::probe::profile::ProfileLimit`]) and the
//! same durability check, in fio's words ([`FioError::Limit`], [`FioError::Durability`]).
//!
//! One default differs from fio's: without `direct`, a probe uses O_DIRECT (fio's default is
//! buffered I/O). A line pasted from a guide that relies on fio's default with a block size
//! O_DIRECT cannot do (etcd's `--bs=2300`) is refused with the advice to add `-direct=0`.

use crate::probe::profile::{
    Durability, DurabilityError, InvalidProfile, MAX_BLOCK_SIZE, OpenSync, Profile, ProfileFields,
    ProfileLimit, Rw, SyncEvery,
};
use crate::units;
use std::time::Duration;

/// How a fio string asks for buffered writes, in the limits its errors state
/// ([`ProfileLimit::expected`]).
const BUFFERED: &str = "-direct=0";

/// Why a fio option string was rejected. Every variant names the option.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FioError {
    /// A word that is not `-opt=value` / `--opt=value`.
    #[error("fio option {0:?}: expected -option=value or --option=value")]
    Syntax(String),
    /// An option this probe does not know or cannot honour.
    #[error("fio option {0:?} is not supported")]
    Unsupported(String),
    /// A known option with a value that is invalid or unsupported.
    #[error("fio option {option}={value}: {reason}")]
    Value {
        /// The option.
        option: String,
        /// The value given.
        value: String,
        /// What was expected.
        reason: String,
    },
    /// An option required to form a probe is absent.
    #[error("fio options lack {0}")]
    Missing(&'static str),
    /// An option that names the file or directory fio would use: a probe's target is configured
    /// apart from its profile.
    #[error(
        "fio option {0:?}: the target is not part of a profile (set path in [[targets]], or --target in one-shot mode)"
    )]
    TargetOption(String),
    /// A value outside the limit [`Profile::new`] holds its key to, the same limit as in a
    /// `[profiles.NAME]` table's keys.
    #[error("fio option {}={written}: expected {}", limit.key(), limit.expected(BUFFERED))]
    Limit {
        /// The key and its limit.
        limit: ProfileLimit,
        /// The value as written.
        written: String,
    },
    /// A block size O_DIRECT cannot do, in a line that leaves `direct` at our default.
    #[error(
        "fio option bs={0}: O_DIRECT needs a multiple of 512 bytes; probes use O_DIRECT unless told otherwise, fio's default is buffered I/O: add -direct=0 to run this job buffered, as fio does"
    )]
    BlockSizeNeedsBuffered(u64),
    /// Durability options that do not fit the rest of the job.
    #[error("fio options: {0}")]
    Durability(#[from] DurabilityError),
}

/// Parses a fio option string into a profile. `rw` and `bs` are required; `iodepth` defaults to 1
/// (as in fio); without `runtime` and `number_ios`, the caller's default runtime applies. The name
/// defaults to the canonical `<rw>-<bs>-qd<N>`.
pub fn parse(options: &str) -> Result<Profile, FioError> {
    let mut job = FioJob::default();
    for word in options.split_whitespace() {
        let (option, value) = split_word(word)?;
        let bad = |reason: &str| FioError::Value {
            option: option.to_owned(),
            value: value.unwrap_or("").to_owned(),
            reason: reason.to_owned(),
        };
        // Boolean no-ops: our runs are always time based and always report one group.
        if matches!(option, "time_based" | "group_reporting") {
            match value {
                None | Some("1") => continue,
                Some(_) => return Err(bad("only 1 (or no value) is supported")),
            }
        }
        let value = value.ok_or_else(|| bad("a value is required"))?;
        job.set(option, value).map_err(|reason| match reason {
            Reject::Unsupported if matches!(option, "filename" | "directory") => {
                FioError::TargetOption(option.to_owned())
            }
            Reject::Unsupported => FioError::Unsupported(option.to_owned()),
            Reject::Value(reason) => bad(&reason),
        })?;
    }
    job.into_profile()
}

/// `-opt=value` / `--opt=value` → `(opt, Some(value))`; `-opt` → `(opt, None)`.
fn split_word(word: &str) -> Result<(&str, Option<&str>), FioError> {
    let body = word
        .strip_prefix("--")
        .or_else(|| word.strip_prefix('-'))
        .ok_or_else(|| FioError::Syntax(word.to_owned()))?;
    let (option, value) = match body.split_once('=') {
        Some((o, v)) => (o, Some(v)),
        None => (body, None),
    };
    if option.is_empty() {
        return Err(FioError::Syntax(word.to_owned()));
    }
    Ok((option, value))
}

/// Why [`FioJob::set`] refused an option.
enum Reject {
    /// Not an option we know.
    Unsupported,
    /// A value we cannot use, and what is expected instead.
    Value(String),
}

impl From<&str> for Reject {
    fn from(reason: &str) -> Reject {
        Reject::Value(reason.to_owned())
    }
}

/// The options of one fio job, as they are read.
struct FioJob {
    rw: Option<Rw>,
    block_size: Option<u64>,
    iodepth: u64,
    runtime: Option<Duration>,
    number_ios: Option<u64>,
    rate_iops: Option<u64>,
    size: Option<u64>,
    name: Option<String>,
    /// `direct`, when given (our default is O_DIRECT, fio's is buffered).
    direct: Option<bool>,
    /// `fsync=N` / `fdatasync=N` with N > 0.
    fsync: Option<u32>,
    fdatasync: Option<u32>,
    open_sync: Option<OpenSync>,
    /// The values of the options [`Profile::new`] holds to a limit, as written, by key.
    written: Vec<(&'static str, String)>,
}

impl Default for FioJob {
    fn default() -> FioJob {
        FioJob {
            rw: None,
            block_size: None,
            iodepth: 1,
            runtime: None,
            number_ios: None,
            rate_iops: None,
            size: None,
            name: None,
            direct: None,
            fsync: None,
            fdatasync: None,
            open_sync: None,
            written: Vec::new(),
        }
    }
}

impl FioJob {
    /// Sets `option` to `value`. Values are only parsed here: their limits are
    /// [`Profile::new`]'s.
    fn set(&mut self, option: &str, value: &str) -> Result<(), Reject> {
        // A whole number, or what the key takes.
        let number = |limit: ProfileLimit| {
            value
                .parse::<u64>()
                .map_err(|_| Reject::Value(format!("expected {}", limit.expected(BUFFERED))))
        };
        let key = match option {
            "rw" | "readwrite" => {
                self.rw = Some(Rw::parse(value).ok_or(Reject::from(
                    "supported: randread, randwrite, read, write (mixed workloads are not)",
                ))?);
                return Ok(());
            }
            "bs" | "blocksize" => {
                let bs = units::parse_size(value).map_err(|e| Reject::Value(e.to_string()))?;
                // Whether it must be a multiple of 512 depends on `direct`, which may follow.
                self.block_size = Some(bs);
                "bs"
            }
            "iodepth" => {
                self.iodepth = number(ProfileLimit::Iodepth)?;
                "iodepth"
            }
            "runtime" => {
                let d =
                    units::parse_fio_duration(value).map_err(|e| Reject::Value(e.to_string()))?;
                self.runtime = Some(d);
                "runtime"
            }
            "number_ios" => {
                self.number_ios = Some(number(ProfileLimit::NumberIos)?);
                "number_ios"
            }
            "rate_iops" => {
                self.rate_iops = Some(value.parse::<u64>().map_err(|_| {
                    Reject::Value(format!(
                        "expected {} (one value, no read,write pair)",
                        ProfileLimit::RateIops.expected(BUFFERED)
                    ))
                })?);
                "rate_iops"
            }
            "size" => {
                let s = units::parse_size(value).map_err(|e| Reject::Value(e.to_string()))?;
                self.size = Some(s);
                "size"
            }
            "name" => {
                if value.is_empty() {
                    return Err("must not be empty".into());
                }
                self.name = Some(value.to_owned());
                return Ok(());
            }
            other => return self.set_durability(other, value),
        };
        self.written.retain(|(k, _)| *k != key);
        self.written.push((key, value.to_owned()));
        Ok(())
    }

    /// Sets `option`, one of the durability options (`direct`, `fsync`, `fdatasync`, `sync`) or
    /// one fixed by the probe, to `value`.
    fn set_durability(&mut self, option: &str, value: &str) -> Result<(), Reject> {
        match option {
            "direct" => {
                self.direct = Some(match value {
                    "1" => true,
                    "0" => false,
                    _ => return Err("expected 1 (O_DIRECT) or 0 (buffered)".into()),
                });
            }
            "fsync" | "fdatasync" => {
                // fio's meaning: a sync after every N writes; 0 (fio's default) is none.
                let n = value
                    .parse::<u32>()
                    .map_err(|_| "expected a whole number of writes between two syncs (0: none)")?;
                let slot = if option == "fsync" {
                    &mut self.fsync
                } else {
                    &mut self.fdatasync
                };
                *slot = (n > 0).then_some(n);
            }
            "sync" => {
                self.open_sync = match value {
                    "none" | "0" => None,
                    "sync" | "1" => Some(OpenSync::Sync),
                    "dsync" => Some(OpenSync::Dsync),
                    _ => return Err("expected none, 0, sync, 1 or dsync".into()),
                };
            }
            other => return check_fixed(other, value),
        }
        Ok(())
    }

    /// The profile, made by [`Profile::new`]; `rw` and `bs` must have been given.
    fn into_profile(self) -> Result<Profile, FioError> {
        let rw = self.rw.ok_or(FioError::Missing("-rw="))?;
        let block_size = self.block_size.ok_or(FioError::Missing("-bs="))?;
        let durability = Durability {
            direct: self.direct.unwrap_or(true),
            sync_every: SyncEvery::from_options(self.fsync, self.fdatasync)?,
            open_sync: self.open_sync,
            fresh_space: false,
        };
        let fields = ProfileFields {
            name: self.name.clone().unwrap_or_default(),
            rw,
            block_size,
            iodepth: self.iodepth,
            runtime: self.runtime,
            number_ios: self.number_ios,
            rate_iops: self.rate_iops,
            size: self.size,
            durability,
        };
        let mut profile = Profile::new(fields).map_err(|e| self.refused(e))?;
        if self.name.is_none() {
            profile.name = default_name(&profile);
        }
        Ok(profile)
    }

    /// [`Profile::new`]'s refusal in fio's words: the value as written, and the advice to add
    /// `-direct=0` to a line that leaves `direct` at our default with a block size O_DIRECT
    /// cannot do.
    fn refused(&self, e: InvalidProfile) -> FioError {
        match e {
            InvalidProfile::Durability(e) => FioError::Durability(e),
            InvalidProfile::Limit { limit, found } => {
                if let (ProfileLimit::BlockSize { direct: true }, None, Some(bs)) =
                    (limit, self.direct, self.block_size)
                    && (1..=MAX_BLOCK_SIZE).contains(&bs)
                {
                    return FioError::BlockSizeNeedsBuffered(bs);
                }
                let written = self
                    .written
                    .iter()
                    .find(|(k, _)| *k == limit.key())
                    .map_or(found, |(_, v)| v.clone());
                FioError::Limit { limit, written }
            }
        }
    }
}

/// `<rw>-<bs>-qd<N>`, followed by what sets the durability settings apart from the default:
/// `-buffered`, `-dsync`/`-sync`, `-fsync`/`-fdatasync` (with N when syncing every N > 1 writes).
fn default_name(p: &Profile) -> String {
    let d = &p.durability;
    let mut name = Profile::canonical_name(p.rw, p.block_size, p.iodepth);
    if !d.direct {
        name.push_str("-buffered");
    }
    if let Some(open) = d.open_sync {
        name.push('-');
        name.push_str(open.as_str());
    }
    if let Some(s) = d.sync_every {
        name.push('-');
        name.push_str(s.call.as_str());
        if s.every > 1 {
            name.push_str(&s.every.to_string());
        }
    }
    name
}

/// Options accepted only at the value our probes always have (`numjobs=1`), or only for
/// compatibility (`ioengine`).
fn check_fixed(option: &str, value: &str) -> Result<(), Reject> {
    match option {
        "numjobs" if value != "1" => {
            Err("only numjobs=1 is supported: use iodepth for concurrency".into())
        }
        "ioengine"
            if !matches!(
                value,
                "io_uring" | "libaio" | "psync" | "pvsync" | "pvsync2" | "sync"
            ) =>
        {
            Err(
                "supported: io_uring, libaio, psync, pvsync, pvsync2, sync (the engine itself is chosen with --engine)"
                    .into(),
            )
        }
        "numjobs" | "ioengine" => Ok(()),
        _ => Err(Reject::Unsupported),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::profile::SyncCall;

    #[test]
    fn parses_a_full_job() {
        let p = parse(
            "-name=lat -rw=randread -bs=4k -iodepth=32 -runtime=5s -size=1G -direct=1 -ioengine=libaio -numjobs=1 -rate_iops=500 -number_ios=1000",
        )
        .unwrap();
        assert_eq!(p.name, "lat");
        assert_eq!(p.rw, Rw::RandRead);
        assert_eq!(p.block_size, 4096);
        assert_eq!(p.iodepth, 32);
        assert_eq!(p.runtime, Some(Duration::from_secs(5)));
        assert_eq!(p.size, Some(1 << 30));
        assert_eq!(p.rate_iops, Some(500));
        assert_eq!(p.number_ios, Some(1000));
    }

    #[test]
    fn double_dash_and_defaults() {
        let p = parse("--rw=write --bs=1M --runtime=2 --time_based --group_reporting").unwrap();
        assert_eq!(p.name, "write-1m-qd1");
        assert_eq!(p.rw, Rw::Write);
        assert_eq!(p.block_size, 1 << 20);
        assert_eq!(p.iodepth, 1);
        assert_eq!(p.runtime, Some(Duration::from_secs(2)));
        assert_eq!(p.size, None);
        let p = parse("  -rw=randwrite\t-blocksize=8k   -iodepth=16 ").unwrap();
        assert_eq!(p.name, "randwrite-8k-qd16");
    }

    #[test]
    fn errors_name_the_option() {
        let cases = [
            ("-rw=randread -bs=4k -direct=0", "direct"),
            ("-rw=randread -bs=4k -direct=2", "direct"),
            ("-rw=write -bs=4k -direct=0", "direct = false without fsync"),
            (
                "-rw=read -bs=4k -fdatasync=1",
                "fdatasync applies to write profiles",
            ),
            (
                "-rw=read -bs=4k -sync=dsync",
                "sync applies to write profiles",
            ),
            ("-rw=write -bs=4k -fdatasync=-1", "fdatasync"),
            ("-rw=write -bs=4k -fsync=x", "fsync"),
            ("-rw=write -bs=4k -sync=always", "sync"),
            (
                "-rw=write -bs=4k -fsync=1 -fdatasync=1",
                "fsync and fdatasync",
            ),
            ("-rw=write -bs=4k -fdatasync=1 -iodepth=4", "iodepth 4"),
            ("-rw=write -bs=2300 -direct=1 -fdatasync=1", "bs"),
            ("-rw=write -bs=4k -directory=/x", "directory"),
            ("-rw=randread -bs=4k -bs=0", "bs"),
            ("-rw=randread -bs=4k -numjobs=4", "numjobs"),
            ("-rw=randrw -bs=4k", "rw"),
            ("-rw=randread -bs=4k -filename=/dev/sda", "filename"),
            ("-rw=randread -bs=4k -verify=md5", "verify"),
            ("-rw=randread -bs=4x", "bs"),
            ("-rw=randread -bs=1000", "-direct=0"),
            ("-rw=randread -bs=4k -iodepth=0", "iodepth"),
            ("-rw=randread -bs=4k -iodepth=many", "iodepth"),
            ("-rw=randread -bs=4k -runtime=soon", "runtime"),
            ("-rw=randread -bs=4k -rate_iops=100,200", "rate_iops"),
            ("-rw=randread -bs=4k -rate_iops=4000000000", "rate_iops"),
            ("-rw=randread -bs=4k -runtime=400d", "runtime"),
            ("-rw=randread -bs=4k -ioengine=windowsaio", "ioengine"),
            (
                "-rw=randread -bs=4k -size=1k",
                "size=1k: expected at least one block of 4096",
            ),
            (
                "-rw=randread -bs=128M",
                "bs=128M: expected a multiple of 512 bytes up to 64MiB (O_DIRECT; -direct=0",
            ),
            (
                "-rw=write -bs=4G -direct=0 -fsync=1",
                "bs=4G: expected 1 byte to 64MiB",
            ),
            ("-rw=randread -bs=4k -iodepth=4097", "from 1 to 4096"),
            ("-rw=randread -bs=4k -number_ios=0", "number_ios=0"),
            (
                "-rw=randread -bs=4k -runtime=0",
                "runtime=0: expected a duration above zero",
            ),
            ("-rw=randread -bs=4k -iodepth", "iodepth"),
            ("rw=randread", "rw=randread"),
            ("-rw=randread", "-bs="),
            ("-bs=4k", "-rw="),
        ];
        for (input, option) in cases {
            let err = parse(input).expect_err(input).to_string();
            assert!(err.contains(option), "{input}: {err}");
        }
    }

    #[test]
    fn durability_options() {
        // etcd's hardware check, pasted as etcd documents it, with -direct=0 added.
        let etcd = "--rw=write --ioengine=sync --fdatasync=1 --bs=2300 --name=mytest --direct=0";
        let p = parse(etcd).unwrap();
        assert_eq!((p.rw, p.block_size, p.iodepth), (Rw::Write, 2300, 1));
        assert_eq!(
            p.durability,
            Durability {
                direct: false,
                sync_every: Some(SyncEvery {
                    call: SyncCall::Fdatasync,
                    every: 1
                }),
                open_sync: None,
                fresh_space: false,
            }
        );
        // Without -direct=0 (fio's default is buffered, ours O_DIRECT) the error says what to add.
        let err = parse("--rw=write --ioengine=sync --fdatasync=1 --bs=2300").unwrap_err();
        assert_eq!(err, FioError::BlockSizeNeedsBuffered(2300));
        assert!(err.to_string().contains("add -direct=0"), "{err}");
        // fio's target options are refused with a pointer to where the target is set.
        let err = parse(&format!("{etcd} --directory=test-data")).unwrap_err();
        assert!(err.to_string().contains("--target"), "{err}");

        let p = parse("-rw=randwrite -bs=4k -fsync=8").unwrap();
        assert_eq!(p.name, "randwrite-4k-qd1-fsync8");
        assert_eq!(
            p.durability.sync_every,
            Some(SyncEvery {
                call: SyncCall::Fsync,
                every: 8
            })
        );
        assert!(p.durability.direct);
        let p = parse("-rw=write -bs=4k -fdatasync=1 -direct=1").unwrap();
        assert_eq!(p.name, "write-4k-qd1-fdatasync");
        // fio's "no sync" values.
        let p = parse("-rw=write -bs=4k -fsync=0 -fdatasync=0 -sync=0").unwrap();
        assert_eq!(p.durability, Durability::default());
        assert_eq!(p.name, "write-4k-qd1");
        // O_DSYNC at any depth, buffered or not.
        let p = parse("-rw=write -bs=16k -iodepth=8 -sync=dsync -direct=0").unwrap();
        assert_eq!(p.durability.open_sync, Some(OpenSync::Dsync));
        assert_eq!(p.name, "write-16k-qd8-buffered-dsync");
        assert_eq!(
            parse("-rw=write -bs=4k -sync=1")
                .unwrap()
                .durability
                .open_sync,
            Some(OpenSync::Sync)
        );
    }
}
