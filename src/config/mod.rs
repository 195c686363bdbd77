//! Configuration: TOML text → [`raw::RawConfig`] (serde) → validated [`Config`].
//!
//! Everything is checked here, once, so the rest of the agent receives typed values (compiled
//! regexes, parsed addresses) and never re-validates. Every error names the file, the line and
//! column, the key and what was expected ([`ConfigError`]). Only a configuration wrong in itself
//! is an error: what the machine's state says against a target at load (a full filesystem, a
//! device in use) is a [`MachineFinding`], located the same way, and the configuration loads.
//!
//! The probing part, by concern: [`probe_settings`] (the probe keys of a table and their
//! built-in values), `defaults` (`[defaults]`, and a table's settings resolved over it), `profiles`
//! (`[profiles.NAME]`, made by [`crate::probe::profile::Profile::new`], the constructor fio strings
//! go through too), [`targets`] (`[[targets]]` and `[scheduler]`), `path_stat` (a target's path,
//! stat'ed once at load), `target_files` (one target per file) and [`discover`] (`[[discover]]`
//! rules). [`retired`]: `[retired]`, the disks gone for good.

mod defaults;
pub mod discover;
pub(crate) mod histograms;
pub(crate) mod limits;
pub mod name_template;
mod path_stat;
pub mod probe_settings;
mod profiles;
pub(crate) mod raw;
pub(crate) mod retired;
mod spanned;
mod target_files;
pub mod target_name;
pub(crate) mod targets;

use crate::bounded_read::{self, Links};
use crate::device_filter::DeviceFilter;
pub use discover::DiscoverRule;
pub(crate) use histograms::HistogramsConfig;
pub(crate) use limits::{DiskLimits, NodeLimits};
pub use probe_settings::{BusyLimits, Writes};
pub(crate) use retired::Retired;
use spanned::{SpannedError, invalid, regex};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
pub use target_files::TargetFile;
pub(crate) use targets::SchedulerConfig;
pub use targets::{MountedAt, TargetSpec};

/// The default `--web.listen-address`.
pub(crate) const DEFAULT_LISTEN_ADDRESS: &str = ":9957";
/// Name of the scratch probe file of the embedded default, inside the state directory.
pub(crate) const EMBEDDED_PROBE_FILE: &str = "probe.dat";
/// The embedded default's TOML, with `"{probe_file}"` in place of the scratch file's path.
pub(crate) const EMBEDDED_DEFAULT: &str = include_str!("embedded_default.toml");
/// The default `--web.telemetry-path`.
pub(crate) const DEFAULT_TELEMETRY_PATH: &str = "/metrics";
/// The largest configuration file read; a larger one is refused.
pub(crate) const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// A validated configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// `[web]`.
    pub web: WebConfig,
    /// `[diskstats]`.
    pub diskstats: DiskstatsConfig,
    /// `[[targets]]` with `[defaults]` and `[profiles]` applied.
    pub targets: Vec<TargetSpec>,
    /// `[scheduler]`.
    pub scheduler: SchedulerConfig,
    /// `[[discover]]` rules, in file order.
    pub discover: Vec<DiscoverRule>,
    /// `[histograms]`.
    pub histograms: HistogramsConfig,
    /// `[limits]`: a ceiling shared by a set of disks; `None` when not configured.
    pub node_limits: Option<NodeLimits>,
    /// `[cloud_stats]`.
    pub cloud_stats: CloudStatsConfig,
    /// `[retired]`: disks gone for good.
    pub retired: Retired,
    /// Where each `[[targets]]` entry's file is, in `targets` order: a target a `[[discover]]`
    /// rule finds there is left to it.
    pub(crate) target_files: Vec<TargetFile>,
    /// What the machine's state at load says against targets: they load all the same, and their
    /// runs fail with the reason while the machine stays so.
    pub findings: Vec<MachineFinding>,
}

/// What the machine's state says against a target at load (its probe file does not fit its
/// filesystem with the reserve, a device it would write to is mounted or held): not an error of
/// the configuration, which loads; reported by `--config.check` (which still exits 0), logged
/// at start and at a reload, and the target's runs fail with the reason while it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineFinding {
    /// The configuration file.
    pub path: PathBuf,
    /// 1-based line of the value it is about.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// What the machine's state says, starting with the key.
    pub message: String,
}

impl fmt::Display for MachineFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.path.display(),
            self.line,
            self.column,
            self.message
        )
    }
}

/// Validated `[cloud_stats]`: whether EC2's NVMe performance statistics (log page 0xD0) of EBS
/// volumes and instance-store devices are read and exported (off by default: it needs
/// `CAP_SYS_ADMIN`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CloudStatsConfig {
    /// `enabled` (default false).
    pub enabled: bool,
    /// `size_histograms` (default false): instance store's latency histograms per I/O size.
    pub size_histograms: bool,
}

/// Validated `[web]`; `None` means "use the flag or the default".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebConfig {
    /// Address to listen on.
    pub listen_address: Option<ListenAddress>,
    /// Path of the metrics endpoint.
    pub telemetry_path: Option<String>,
}

/// Validated `[diskstats]`.
#[derive(Debug, Clone, Default)]
pub struct DiskstatsConfig {
    /// Which devices are reported.
    pub filter: DeviceFilter,
}

/// A `host:port` to listen on; an empty host (`:9957`) means every interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddress {
    /// Host name or IP address; empty for all interfaces.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl ListenAddress {
    /// Parses `host:port`, `:port` or `[v6]:port`.
    pub fn parse(s: &str) -> Result<ListenAddress, String> {
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| format!("expected host:port or :port, found {s:?}"))?;
        let port = port
            .parse::<u16>()
            .map_err(|_| format!("expected a port number 0-65535 after ':', found {port:?}"))?;
        let host = if let Some(inner) = host.strip_prefix('[') {
            let v6 = inner
                .strip_suffix(']')
                .filter(|h| h.parse::<std::net::Ipv6Addr>().is_ok())
                .ok_or_else(|| format!("expected an IPv6 address in brackets, found {host:?}"))?;
            v6.to_owned()
        } else if host.contains(|c: char| c == ':' || c == '[' || c == ']' || c.is_whitespace()) {
            return Err(format!(
                "expected a host name or IP address before ':port' (IPv6 in brackets), found {host:?}"
            ));
        } else {
            host.to_owned()
        };
        Ok(ListenAddress { host, port })
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A configuration that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read, or was refused ([`crate::bounded_read`]: not a regular file,
    /// larger than [`MAX_CONFIG_BYTES`]).
    #[error("cannot read configuration: {0}")]
    Read(#[from] crate::bounded_read::BoundedReadError),
    /// The file was read but is not a valid configuration.
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line of the offending key or value.
        line: usize,
        /// 1-based column (in characters).
        column: usize,
        /// What is wrong and what was expected.
        message: String,
    },
}

impl Config {
    /// The configuration used without `--config.file` ([`EMBEDDED_DEFAULT`]): diskstats, and
    /// one target probing a scratch file `probe.dat` in `state_dir` with the gentle read and
    /// write profiles.
    pub fn embedded_default(state_dir: &Path) -> Config {
        let probe_file = state_dir.join(EMBEDDED_PROBE_FILE).display().to_string();
        let text = EMBEDDED_DEFAULT.replace("\"{probe_file}\"", &format!("{probe_file:?}"));
        // The embedded text is built from constants and an absolute path; it always validates.
        Config::from_toml(&text, Path::new("<embedded default>"))
            .unwrap_or_else(|e| panic!("embedded default configuration is invalid: {e}"))
    }

    /// Reads and validates the file at `path`: a regular file (links are followed) of at most
    /// [`MAX_CONFIG_BYTES`], opened without blocking.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = bounded_read::read_to_string(path, MAX_CONFIG_BYTES, Links::Follow)?;
        Config::from_toml(&text, path)
    }

    /// Parses and validates `text`; `path` is only used in error messages.
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let located = |span: Option<Range<usize>>, message: String| {
            let (line, column) = line_column(text, span.map(|s| s.start).unwrap_or(0));
            ConfigError::Invalid {
                path: path.to_owned(),
                line,
                column,
                message,
            }
        };
        let raw: raw::RawConfig = toml::from_str(text).map_err(|e| {
            let message = e.message().trim().to_owned();
            let message = match e.span().and_then(|s| key_at(text, s.start)) {
                // "unknown field `webb`" already names a top-level key.
                Some(key) if message.contains(&format!("`{key}`")) => message,
                Some(key) => format!("{key}: {message}"),
                None => message,
            };
            located(e.span(), message)
        })?;
        let mut findings = Vec::new();
        let mut config =
            validate(raw, &mut findings).map_err(|e| located(Some(e.span), e.message))?;
        config.findings = findings
            .into_iter()
            .map(|f| {
                let (line, column) = line_column(text, f.span.start);
                MachineFinding {
                    path: path.to_owned(),
                    line,
                    column,
                    message: f.message,
                }
            })
            .collect();
        Ok(config)
    }
}

/// Validates `raw`; what the machine's state says against it goes to `findings`.
fn validate(raw: raw::RawConfig, findings: &mut Vec<SpannedError>) -> Result<Config, SpannedError> {
    let listen_address = raw
        .web
        .listen_address
        .as_ref()
        .map(|a| {
            ListenAddress::parse(a.get_ref())
                .map_err(|m| invalid(a, format!("web.listen_address: {m}")))
        })
        .transpose()?;
    let telemetry_path = raw
        .web
        .telemetry_path
        .as_ref()
        .map(|p| {
            check_telemetry_path(p.get_ref())
                .map_err(|m| invalid(p, format!("web.telemetry_path: {m}")))
        })
        .transpose()?;
    let compile =
        |key: &str, value: &toml::Spanned<String>| regex(&format!("diskstats.{key}"), value);
    let filter = match (&raw.diskstats.device_include, &raw.diskstats.device_exclude) {
        (Some(include), Some(_)) => {
            return Err(invalid(
                include,
                "diskstats: device_include and device_exclude are mutually exclusive; set one"
                    .to_owned(),
            ));
        }
        (Some(include), None) => DeviceFilter::Include(compile("device_include", include)?),
        (None, Some(exclude)) => DeviceFilter::Exclude(compile("device_exclude", exclude)?),
        (None, None) => DeviceFilter::default_exclude(),
    };
    let (targets, target_files, scheduler) = targets::validate(&raw, findings)?;
    let discover = discover::validate(&raw)?;
    let histograms = histograms::validate(&raw.histograms)?;
    let node_limits = limits::node(raw.limits.as_ref())?;
    let retired = retired::validate(&raw)?;
    Ok(Config {
        web: WebConfig {
            listen_address,
            telemetry_path,
        },
        diskstats: DiskstatsConfig { filter },
        targets,
        scheduler,
        discover,
        histograms,
        node_limits,
        cloud_stats: CloudStatsConfig {
            enabled: raw.cloud_stats.enabled.unwrap_or(false),
            size_histograms: raw.cloud_stats.size_histograms.unwrap_or(false),
        },
        retired,
        target_files,
        findings: Vec::new(),
    })
}

/// The dotted key (`web.listen_address`, `targets[0].interval`) written on the line containing
/// byte `offset`, if the line is a `key = value` line or a table header; table headers before it
/// give the prefix, with the index of an array of tables (`[[targets]]`) counted from the headers
/// of the same name before it.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset)?;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let line = text[line_start..].lines().next().unwrap_or("");
    let earlier: Vec<&str> = before[..line_start].lines().map(str::trim).collect();
    // `[[name]]` headers among `lines`: the prefix `name[i]` of the last of them being `header`.
    let indexed = |name: &str, lines: &[&str]| {
        let count = lines
            .iter()
            .filter(|l| header(l) == Some((name, true)))
            .count();
        format!("{name}[{}]", count.saturating_sub(1))
    };
    let trimmed = line.trim();
    if let Some((name, array)) = header(trimmed) {
        // A table header: the error is about the table itself (e.g. a missing key).
        if name.is_empty() {
            return None;
        }
        if !array {
            return Some(name.to_owned());
        }
        let mut lines = earlier.clone();
        lines.push(trimmed);
        return Some(indexed(name, &lines));
    }
    let key = line.split_once('=')?.0.trim();
    if key.is_empty() || key.starts_with('#') {
        return None;
    }
    let table = earlier.iter().rev().find_map(|l| header(l));
    Some(match table {
        Some((t, true)) if !t.is_empty() => format!("{}.{key}", indexed(t, &earlier)),
        Some((t, false)) if !t.is_empty() => format!("{t}.{key}"),
        _ => key.to_owned(),
    })
}

/// A table header line's name and whether it is an array of tables (`[[name]]`).
fn header(line: &str) -> Option<(&str, bool)> {
    if !line.starts_with('[') {
        return None;
    }
    let array = line.starts_with("[[");
    Some((line.trim_matches(|c| c == '[' || c == ']').trim(), array))
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    (line, before[line_start..].chars().count() + 1)
}

/// Checks a metrics path (`[web] telemetry_path`, `--web.telemetry-path`): absolute, and clear
/// of the landing page (`/`) and the `/-/` endpoints.
pub(crate) fn check_telemetry_path(path: &str) -> Result<String, String> {
    if !path.starts_with('/') || path.len() < 2 || path.starts_with("/-/") {
        return Err(format!(
            "expected an absolute URL path other than / and /-/..., found {path:?}"
        ));
    }
    // A request's path (hyper's `Uri::path`) is visible ASCII without '?' (where the query
    // starts) or '#'; a path with anything else would never be matched.
    match path
        .char_indices()
        .find(|(_, c)| !c.is_ascii_graphic() || *c == '?' || *c == '#')
    {
        Some((at, c)) => Err(format!(
            "{path:?} can never match a request's path: {c:?} at byte {at} (a path is visible ASCII without '?' or '#'; percent-encode other characters)"
        )),
        None => Ok(path.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telemetry_paths_are_paths_a_request_can_have() {
        for ok in ["/metrics", "/a/b-c_d.e~f", "/m%C3%A9trics"] {
            assert_eq!(check_telemetry_path(ok).as_deref(), Ok(ok));
        }
        for bad in [
            "metrics",
            "/",
            "/-/x",
            "/metrics?x",
            "/m#x",
            "/m etrics",
            "/métrics",
            "/m\n",
        ] {
            assert!(check_telemetry_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn line_column_counts_characters() {
        assert_eq!(line_column("a\nbé=c", 5), (2, 3));
        assert_eq!(line_column("", 0), (1, 1));
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            ListenAddress::parse(":9957").unwrap(),
            ListenAddress {
                host: String::new(),
                port: 9957
            }
        );
        assert_eq!(ListenAddress::parse("[::1]:1").unwrap().host, "::1");
        assert_eq!(
            ListenAddress::parse("127.0.0.1:0").unwrap().to_string(),
            "127.0.0.1:0"
        );
        assert!(ListenAddress::parse("9957").is_err());
        // Found by fuzz/fuzz_targets/units.rs: brackets must hold exactly an IPv6 address.
        assert!(ListenAddress::parse("[[]]:4").is_err());
        assert!(ListenAddress::parse("::1:9957").is_err());
        assert!(ListenAddress::parse("a b:1").is_err());
        assert!(ListenAddress::parse(":99999").is_err());
    }
}
