//! `[profiles.NAME]` tables: custom profiles given as explicit keys (`rw`, `bs`, `iodepth`,
//! `runtime`, `number_ios`, `rate_iops` and the durability keys `fsync`, `fdatasync`, `sync`,
//! `direct`) or as a fio option string ([`crate::probe::fio`]). Both roads parse their values and
//! end in [`Profile::new`], the one constructor, which holds them to the same limits and checks
//! the durability settings once; errors point at the key at fault.

use super::probe_settings::size;
use super::raw::RawProfile;
use super::spanned::{SpannedError, invalid, printable};
use crate::probe::fio;
use crate::probe::profile::{
    Durability, InvalidProfile, OpenSync, Profile, ProfileFields, ProfileLimit, Rw, SyncEvery,
};
use crate::units;
use std::collections::BTreeMap;
use std::ops::Range;
use toml::Spanned;

/// Custom profiles by name; `runtime` stays `None` unless the profile sets one.
pub(super) fn custom_profiles(
    raw: &BTreeMap<Spanned<String>, Spanned<RawProfile>>,
) -> Result<BTreeMap<String, Profile>, SpannedError> {
    let mut out = BTreeMap::new();
    for (name, table) in raw {
        let key = format!("profiles.{}", name.get_ref());
        if Profile::builtin(name.get_ref()).is_some() {
            return Err(invalid(
                name,
                format!(
                    "{key}: {:?} is a built-in profile; choose another name",
                    name.get_ref()
                ),
            ));
        }
        printable("profiles", name)?;
        if name.get_ref().is_empty() {
            return Err(invalid(name, "profiles: a profile needs a name".to_owned()));
        }
        let p = table.get_ref();
        let mut profile = match &p.fio {
            Some(fio_text) => fio_profile(&key, p, fio_text)?,
            None => explicit_profile(&key, table)?,
        };
        profile.name = name.get_ref().clone();
        out.insert(name.get_ref().clone(), profile);
    }
    Ok(out)
}

/// A `[profiles.NAME]` given as a fio option string; `key` is `profiles.NAME`.
fn fio_profile(
    key: &str,
    p: &RawProfile,
    fio_text: &Spanned<String>,
) -> Result<Profile, SpannedError> {
    let explicit = [
        p.rw.as_ref().map(|s| s.span()),
        p.bs.as_ref().map(|s| s.span()),
        p.iodepth.as_ref().map(|s| s.span()),
        p.runtime.as_ref().map(|s| s.span()),
        p.number_ios.as_ref().map(|s| s.span()),
        p.rate_iops.as_ref().map(|s| s.span()),
        p.fsync.as_ref().map(|s| s.span()),
        p.fdatasync.as_ref().map(|s| s.span()),
        p.sync.as_ref().map(|s| s.span()),
        p.direct.as_ref().map(|s| s.span()),
    ];
    if let Some(span) = explicit.into_iter().flatten().next() {
        return Err(SpannedError {
            span,
            message: format!(
                "{key}: set either fio or the explicit keys (rw, bs, iodepth, runtime, number_ios, rate_iops, fsync, fdatasync, sync, direct), not both"
            ),
        });
    }
    let profile =
        fio::parse(fio_text.get_ref()).map_err(|e| invalid(fio_text, format!("{key}.fio: {e}")))?;
    if profile.size.is_some() {
        return Err(invalid(
            fio_text,
            format!("{key}.fio: -size belongs to the target (size = ...), not to a profile"),
        ));
    }
    Ok(profile)
}

/// A `[profiles.NAME]` given as explicit keys; `key` is `profiles.NAME`. The keys are parsed here
/// and checked by [`Profile::new`], as a fio string's options are.
fn explicit_profile(key: &str, table: &Spanned<RawProfile>) -> Result<Profile, SpannedError> {
    let p = table.get_ref();
    let rw = p.rw.as_ref().ok_or_else(|| {
        invalid(
            table,
            format!(
                "{key}: expected rw = \"randread\" | \"randwrite\" | \"read\" | \"write\" (or a fio string)"
            ),
        )
    })?;
    let rw_value = Rw::parse(rw.get_ref()).ok_or_else(|| {
        invalid(
            rw,
            format!(
                "{key}.rw: expected \"randread\", \"randwrite\", \"read\" or \"write\", found {:?}",
                rw.get_ref()
            ),
        )
    })?;
    let refused = |e: InvalidProfile| SpannedError {
        span: key_span(p, e.key()).unwrap_or(table.span()),
        message: format!("{key}.{}: {e}", e.key()),
    };
    // A TOML integer below zero is outside the limit as one above it is.
    let count = |limit: ProfileLimit, v: &Option<Spanned<i64>>| {
        v.as_ref()
            .map(|v| u64::try_from(*v.get_ref()).map_err(|_| refused(limit.refuse(v.get_ref()))))
            .transpose()
    };
    let fields = ProfileFields {
        name: String::new(),
        rw: rw_value,
        durability: durability(key, p)?,
        block_size: match &p.bs {
            Some(b) => size(&format!("{key}.bs"), b)?,
            None => 4096,
        },
        iodepth: count(ProfileLimit::Iodepth, &p.iodepth)?.unwrap_or(1),
        runtime: p
            .runtime
            .as_ref()
            .map(|r| {
                units::parse_duration(r.get_ref())
                    .map_err(|e| invalid(r, format!("{key}.runtime: {e}")))
            })
            .transpose()?,
        number_ios: count(ProfileLimit::NumberIos, &p.number_ios)?,
        rate_iops: count(ProfileLimit::RateIops, &p.rate_iops)?,
        size: None,
    };
    Profile::new(fields).map_err(refused)
}

/// Where the value of `key` ([`InvalidProfile::key`]) is written in a `[profiles.NAME]` table.
fn key_span(p: &RawProfile, key: &str) -> Option<Range<usize>> {
    match key {
        "bs" => p.bs.as_ref().map(Spanned::span),
        "runtime" => p.runtime.as_ref().map(Spanned::span),
        "sync" => p.sync.as_ref().map(Spanned::span),
        "direct" => p.direct.as_ref().map(Spanned::span),
        "iodepth" => p.iodepth.as_ref().map(Spanned::span),
        "number_ios" => p.number_ios.as_ref().map(Spanned::span),
        "rate_iops" => p.rate_iops.as_ref().map(Spanned::span),
        "fsync" => p.fsync.as_ref().map(Spanned::span),
        "fdatasync" => p.fdatasync.as_ref().map(Spanned::span),
        _ => None,
    }
}

/// `fsync`, `fdatasync`, `sync` and `direct` of a `[profiles.NAME]` table (fio's meanings).
fn durability(key: &str, p: &RawProfile) -> Result<Durability, SpannedError> {
    let every = |name: &str, v: &Option<Spanned<i64>>| -> Result<Option<u32>, SpannedError> {
        let Some(v) = v else { return Ok(None) };
        let n = *v.get_ref();
        match u32::try_from(n) {
            Ok(0) => Ok(None),
            Ok(n) => Ok(Some(n)),
            Err(_) => Err(invalid(
                v,
                format!(
                    "{key}.{name}: expected a whole number of writes between two syncs from 0 (none) to {}, found {n}",
                    u32::MAX
                ),
            )),
        }
    };
    let sync_every =
        SyncEvery::from_options(every("fsync", &p.fsync)?, every("fdatasync", &p.fdatasync)?)
            .map_err(|err| SpannedError {
                span: p.fdatasync.as_ref().map(|v| v.span()).unwrap_or_default(),
                message: format!("{key}.fdatasync: {err}"),
            })?;
    let open_sync = match &p.sync {
        None => None,
        Some(v) => match v.get_ref().as_str() {
            "dsync" => Some(OpenSync::Dsync),
            "sync" => Some(OpenSync::Sync),
            "none" => None,
            other => {
                return Err(invalid(
                    v,
                    format!(
                        "{key}.sync: expected \"dsync\" (O_DSYNC), \"sync\" (O_SYNC) or \"none\", found {other:?}"
                    ),
                ));
            }
        },
    };
    Ok(Durability {
        direct: p.direct.as_ref().is_none_or(|d| *d.get_ref()),
        sync_every,
        open_sync,
        fresh_space: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::fio::FioError;
    use crate::probe::profile::{DIRECT_IO_MULTIPLE, DurabilityError, MAX_BLOCK_SIZE, MAX_IODEPTH};

    /// `[profiles.p]` with `keys` (TOML lines): the profile, or the error's message.
    fn from_keys(keys: &str) -> Result<Profile, String> {
        let raw: super::super::raw::RawConfig =
            toml::from_str(&format!("[profiles.p]\n{keys}\n")).expect("TOML");
        custom_profiles(&raw.profiles)
            .map(|mut profiles| profiles.remove("p").expect("the profile"))
            .map_err(|e| e.message)
    }

    /// A fio string, parsed, after checking that `[profiles.p] fio = ...` says the same.
    fn from_fio(options: &str) -> Result<Profile, FioError> {
        let parsed = fio::parse(options);
        match (&parsed, from_keys(&format!("fio = {options:?}"))) {
            (Ok(p), Ok(q)) => assert_eq!(
                p.fields(),
                ProfileFields {
                    name: p.name.clone(),
                    ..q.fields()
                }
            ),
            (Err(e), Err(message)) => assert_eq!(message, format!("profiles.p.fio: {e}")),
            (p, q) => panic!("{options}: {p:?} from fio, {q:?} in a table"),
        }
        parsed
    }

    #[test]
    fn block_size_at_the_limit_is_taken_from_keys_and_fio_strings() {
        let keys = from_keys("rw = \"randread\"\nbs = \"64M\"").unwrap();
        let fio = from_fio("-rw=randread -bs=64M").unwrap();
        assert_eq!(
            (keys.block_size, fio.block_size),
            (MAX_BLOCK_SIZE, MAX_BLOCK_SIZE)
        );
        let buffered = "rw = \"write\"\nbs = \"64M\"\ndirect = false\nfdatasync = 1";
        let keys = from_keys(buffered).unwrap();
        let fio = from_fio("-rw=write -bs=64M -direct=0 -fdatasync=1").unwrap();
        assert_eq!(
            (keys.block_size, fio.block_size),
            (MAX_BLOCK_SIZE, MAX_BLOCK_SIZE)
        );
    }

    #[test]
    fn block_size_just_over_the_limit_is_refused_alike_from_keys_and_fio_strings() {
        let limit = ProfileLimit::BlockSize { direct: true };
        let over = MAX_BLOCK_SIZE + DIRECT_IO_MULTIPLE;
        assert_eq!(
            from_keys(&format!("rw = \"randread\"\nbs = \"{over}\"")),
            Err(format!("profiles.p.bs: {}", limit.refuse(over)))
        );
        let fio = from_fio(&format!("-rw=randread -bs={over}")).unwrap_err();
        assert_eq!(
            fio,
            FioError::Limit {
                limit,
                written: over.to_string()
            }
        );
        // The same limit in each syntax's words.
        assert_eq!(
            fio.to_string(),
            format!(
                "fio option bs={over}: expected {}",
                limit.expected("-direct=0")
            )
        );
        assert!(limit.expected("").contains("up to 64MiB"), "{limit:?}");

        let limit = ProfileLimit::BlockSize { direct: false };
        let over = MAX_BLOCK_SIZE + 1;
        assert_eq!(
            from_keys(&format!(
                "rw = \"write\"\nbs = \"{over}\"\ndirect = false\nfdatasync = 1"
            )),
            Err(format!("profiles.p.bs: {}", limit.refuse(over)))
        );
        assert_eq!(
            from_fio(&format!("-rw=write -bs={over} -direct=0 -fdatasync=1")),
            Err(FioError::Limit {
                limit,
                written: over.to_string()
            })
        );
    }

    #[test]
    fn iodepth_is_held_to_one_limit_from_keys_and_fio_strings() {
        let at = MAX_IODEPTH;
        let keys = from_keys(&format!("rw = \"randread\"\niodepth = {at}")).unwrap();
        let fio = from_fio(&format!("-rw=randread -bs=4k -iodepth={at}")).unwrap();
        assert_eq!((keys.iodepth, fio.iodepth), (at, at));
        let over = at + 1;
        assert_eq!(
            from_keys(&format!("rw = \"randread\"\niodepth = {over}")),
            Err(format!(
                "profiles.p.iodepth: {}",
                ProfileLimit::Iodepth.refuse(over)
            ))
        );
        assert_eq!(
            from_fio(&format!("-rw=randread -bs=4k -iodepth={over}")),
            Err(FioError::Limit {
                limit: ProfileLimit::Iodepth,
                written: over.to_string()
            })
        );
    }

    #[test]
    fn durability_is_refused_alike_from_keys_and_fio_strings() {
        let deep = DurabilityError::SyncDepth { iodepth: 4 };
        assert_eq!(
            from_keys("rw = \"write\"\niodepth = 4\nfdatasync = 1"),
            Err(format!("profiles.p.iodepth: {deep}"))
        );
        assert_eq!(
            from_fio("-rw=write -bs=4k -iodepth=4 -fdatasync=1"),
            Err(FioError::Durability(deep))
        );
        let on_read = DurabilityError::OnRead {
            key: "fdatasync",
            rw: Rw::RandRead,
        };
        assert_eq!(
            from_keys("rw = \"randread\"\nfdatasync = 1"),
            Err(format!("profiles.p.fdatasync: {on_read}"))
        );
        assert_eq!(
            from_fio("-rw=randread -bs=4k -fdatasync=1"),
            Err(FioError::Durability(on_read))
        );
    }
}
