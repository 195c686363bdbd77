//! Sizes and durations as users write them in the configuration, on the command line and in
//! fio-style option strings.
//!
//! Sizes follow fio: the suffixes `k`, `M`, `G`, `T` are binary (`4k` = 4096, `1G` = 1 GiB), and so
//! are `KiB`, `MiB`, `GiB`; a bare number is bytes. Durations are humantime strings (`500ms`,
//! `1m`, `1h 30m`); [`parse_fio_duration`] also accepts a bare number of seconds, as fio does.
//! Throughputs ([`parse_throughput`], for the limits a disk is sold with) name their unit in full,
//! per second: `200MiB/s` is binary (2^20 bytes), `200MB/s` decimal (10^6 bytes), as cloud and
//! disk datasheets write them; a bare `200M/s` is refused, since fio's convention (binary) and the
//! datasheets' (decimal) disagree about it.

use std::time::Duration;

/// A size or duration that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    /// Not a size.
    #[error("invalid size {value:?}: {reason} (expected e.g. 4k, 1MiB, 1G; k/M/G are binary)")]
    Size {
        /// The text given.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
    /// Not a duration.
    #[error("invalid duration {value:?}: {reason} (expected e.g. 500ms, 5s, 1m)")]
    Duration {
        /// The text given.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
    /// Not a throughput.
    #[error(
        "invalid throughput {value:?}: {reason} (expected e.g. 200MiB/s (binary, 2^20 bytes) or 125MB/s (decimal, 10^6 bytes))"
    )]
    Throughput {
        /// The text given.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
}

/// Parses a size in bytes with fio semantics (binary multiples): `4k` = 4096, `1MiB`, `1G` = 2^30.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let trimmed = text.trim();
    parse_size::Config::new()
        .with_binary()
        .parse_size(trimmed)
        .map_err(|err| UnitError::Size {
            value: text.to_owned(),
            reason: err.to_string(),
        })
}

/// Parses a throughput in bytes per second: a number, a unit that ends in `B` (`B`, `kB`/`KB`,
/// `MB`, `GB`, `TB` decimal; `KiB`, `MiB`, `GiB`, `TiB` binary; any case) and `/s`: `200MiB/s`,
/// `125MB/s`, `1.5 GB/s`. At least one byte per second.
pub fn parse_throughput(text: &str) -> Result<u64, UnitError> {
    let fail = |reason: &str| UnitError::Throughput {
        value: text.to_owned(),
        reason: reason.to_owned(),
    };
    let size = text
        .trim()
        .strip_suffix("/s")
        .ok_or_else(|| fail("a throughput ends in /s"))?
        .trim_end();
    let unit_start = size
        .rfind(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
        .map_or(0, |i| i + 1);
    let unit = &size[unit_start..];
    if !unit.to_ascii_lowercase().ends_with('b') {
        return Err(fail(
            "name the unit in full: MiB/s (binary) or MB/s (decimal), not M/s",
        ));
    }
    let bytes = parse_size::Config::new()
        .with_decimal()
        .parse_size(size)
        .map_err(|err| fail(&err.to_string()))?;
    if bytes == 0 {
        return Err(fail("expected at least 1 byte per second"));
    }
    Ok(bytes)
}

/// Longest duration accepted anywhere (366 days, so that `1y` = 365.25 days passes): longer ones
/// are mistakes, and would overflow the clock arithmetic of the scheduler and the engines.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// Parses a duration such as `500ms`, `5s`, `1m` (humantime syntax), at most [`MAX_DURATION`].
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let d = humantime::parse_duration(text.trim()).map_err(|err| UnitError::Duration {
        value: text.to_owned(),
        reason: err.to_string(),
    })?;
    within_max_duration(text, d)
}

fn within_max_duration(text: &str, d: Duration) -> Result<Duration, UnitError> {
    if d > MAX_DURATION {
        return Err(UnitError::Duration {
            value: text.to_owned(),
            reason: "longer than 366 days".to_owned(),
        });
    }
    Ok(d)
}

/// Parses a duration as fio does: a bare number is seconds, otherwise as [`parse_duration`].
pub fn parse_fio_duration(text: &str) -> Result<Duration, UnitError> {
    let trimmed = text.trim();
    if let Ok(secs) = trimmed.parse::<u64>() {
        return within_max_duration(text, Duration::from_secs(secs));
    }
    parse_duration(trimmed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_binary_like_fio() {
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size(" 1g "), Ok(1 << 30));
    }

    #[test]
    fn bad_sizes_are_errors() {
        for bad in ["", "k", "4x", "-1", "1.5.2G", "four"] {
            let err = parse_size(bad).expect_err(bad);
            assert!(err.to_string().contains("invalid size"), "{err}");
        }
    }

    #[test]
    fn throughputs_name_their_unit() {
        assert_eq!(parse_throughput("200MiB/s"), Ok(200 << 20));
        assert_eq!(parse_throughput("125MB/s"), Ok(125_000_000));
        assert_eq!(parse_throughput("125 mb/s"), Ok(125_000_000));
        assert_eq!(parse_throughput("1.5GB/s"), Ok(1_500_000_000));
        assert_eq!(parse_throughput("1 GiB/s"), Ok(1 << 30));
        assert_eq!(parse_throughput("64KiB/s"), Ok(64 << 10));
        assert_eq!(parse_throughput("500kB/s"), Ok(500_000));
        assert_eq!(parse_throughput("4096B/s"), Ok(4096));
        assert_eq!(parse_throughput(" 10 MB/s "), Ok(10_000_000));
        for (bad, why) in [
            ("200M/s", "name the unit in full"),
            ("200/s", "name the unit in full"),
            ("200MiB", "ends in /s"),
            ("200MB/min", "ends in /s"),
            ("0MB/s", "at least 1 byte"),
            ("MB/s", "invalid throughput"),
            ("-1MB/s", "invalid throughput"),
            ("fastMB/s", "invalid throughput"),
            ("", "ends in /s"),
        ] {
            let err = parse_throughput(bad).expect_err(bad).to_string();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(err.contains("200MiB/s (binary"), "{err}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("soon").is_err());
        assert_eq!(parse_fio_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_fio_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("366d"), Ok(MAX_DURATION));
        assert!(parse_duration("1y").is_ok());
        for long in ["367d", "300000000000y"] {
            let err = parse_duration(long).unwrap_err().to_string();
            assert!(err.contains("longer than 366 days"), "{err}");
        }
        assert!(parse_fio_duration("31622401").is_err());
        assert!(parse_fio_duration("18446744073709551615").is_err());
    }
}
