//! The configuration file as written: serde structs that mirror the TOML one to one.
//!
//! Unknown keys are rejected (`deny_unknown_fields`); values that need checking beyond their TOML
//! type keep their source span ([`Spanned`]) so that [`super::validate`] can point at them.

use serde::Deserialize;
use toml::Spanned;

/// The whole file. Every section is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `[web]`.
    #[serde(default)]
    pub web: RawWeb,
    /// `[diskstats]`.
    #[serde(default)]
    pub diskstats: RawDiskstats,
}

/// `[web]`: where and how `/metrics` is served.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWeb {
    /// `listen_address = ":9957"`.
    pub listen_address: Option<Spanned<String>>,
    /// `telemetry_path = "/metrics"`.
    pub telemetry_path: Option<Spanned<String>>,
}

/// `[diskstats]`: which devices the diskstats collector reports.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDiskstats {
    /// Regex of device names to report (exclusive with `device_exclude`).
    pub device_include: Option<Spanned<String>>,
    /// Regex of device names not to report.
    pub device_exclude: Option<Spanned<String>>,
}
