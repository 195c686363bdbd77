//! Validation of the limits disks are sold with: `iops_limit` and `throughput_limit` of a
//! `[[targets]]` entry, a `[[discover]]` rule or `[defaults]` (a [`DiskLimits`], part of the
//! table's [`super::probe_settings::ProbeSettings`]), and the node-level `[limits]` ([`NodeLimits`]: a ceiling
//! shared by a set of disks, as a cloud VM has over all its data disks).
//!
//! `iops_limit` is a whole number of I/Os per second; `throughput_limit` a string with its unit
//! per second (`"200MiB/s"` binary, `"125MB/s"` decimal: [`crate::units::parse_throughput`]) or a
//! whole number of bytes per second.

use super::raw::RawLimits;
use super::spanned::{SpannedError, invalid, regex};
use crate::units;
use regex::Regex;
use toml::Spanned;

/// Largest `iops_limit` accepted (a billion I/Os per second is beyond any disk).
pub(crate) const MAX_IOPS_LIMIT: i64 = 1_000_000_000;

/// The IOPS and throughput a disk is sold with; `None` where not declared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskLimits {
    /// I/Os per second (reads and writes together).
    pub iops: Option<u64>,
    /// Bytes per second (read and written together).
    pub bytes_per_second: Option<u64>,
}

impl DiskLimits {
    /// Whether neither limit is declared.
    pub(crate) fn is_empty(&self) -> bool {
        self.iops.is_none() && self.bytes_per_second.is_none()
    }
}

/// `[limits]`, validated: a ceiling shared by the disks whose kernel names match `devices`.
#[derive(Debug, Clone)]
pub struct NodeLimits {
    /// Kernel names of the disks the ceiling covers (whole disks, as in `/sys/block`).
    pub devices: Regex,
    /// The ceiling (at least one of the two is set).
    pub limits: DiskLimits,
}

/// Validates `iops_limit` at `key`.
pub(super) fn iops(key: &str, v: &Spanned<i64>) -> Result<u64, SpannedError> {
    let x = *v.get_ref();
    if (1..=MAX_IOPS_LIMIT).contains(&x) {
        Ok(x as u64)
    } else {
        Err(invalid(
            v,
            format!(
                "{key}: expected a whole number of I/Os per second from 1 to {MAX_IOPS_LIMIT}, found {x}"
            ),
        ))
    }
}

/// Validates `throughput_limit` at `key`: a throughput string or a number of bytes per second.
pub(super) fn throughput(key: &str, v: &Spanned<toml::Value>) -> Result<u64, SpannedError> {
    match v.get_ref() {
        toml::Value::String(text) => {
            units::parse_throughput(text).map_err(|e| invalid(v, format!("{key}: {e}")))
        }
        toml::Value::Integer(n) if *n >= 1 => Ok(*n as u64),
        other => Err(invalid(
            v,
            format!(
                "{key}: expected a throughput such as \"200MiB/s\" (binary) or \"125MB/s\" (decimal), or a whole number of bytes per second, found {other}"
            ),
        )),
    }
}

/// Validates `[limits]`.
pub(super) fn node(raw: Option<&Spanned<RawLimits>>) -> Result<Option<NodeLimits>, SpannedError> {
    let Some(table) = raw else { return Ok(None) };
    let r = table.get_ref();
    let devices = r.devices.as_ref().ok_or_else(|| {
        invalid(
            table,
            "limits: expected devices = \"REGEX\", the kernel names of the disks the ceiling covers (e.g. \"^sd[c-z]$\")".to_owned(),
        )
    })?;
    let devices = regex("limits.devices", devices)?;
    let limits = DiskLimits {
        iops: r
            .iops_limit
            .as_ref()
            .map(|v| iops("limits.iops_limit", v))
            .transpose()?,
        bytes_per_second: r
            .throughput_limit
            .as_ref()
            .map(|v| throughput("limits.throughput_limit", v))
            .transpose()?,
    };
    if limits.is_empty() {
        return Err(invalid(
            table,
            "limits: expected iops_limit, throughput_limit or both".to_owned(),
        ));
    }
    Ok(Some(NodeLimits { devices, limits }))
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    fn load(text: &str) -> Result<Config, String> {
        Config::from_toml(text, Path::new("l.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn targets_and_rules_inherit_their_limits_from_defaults() {
        let c = load(
            "[defaults]\niops_limit = 3000\n\
             [[targets]]\nname = \"a\"\npath = \"/a\"\nthroughput_limit = \"125MB/s\"\n\
             [[targets]]\nname = \"b\"\npath = \"/b\"\niops_limit = 5000\nthroughput_limit = 209715200\n\
             [[discover]]\nkind = \"block\"\nthroughput_limit = \"200MiB/s\"\n",
        )
        .unwrap();
        let a = c.targets[0].settings.limits;
        assert_eq!(
            (a.iops, a.bytes_per_second),
            (Some(3000), Some(125_000_000))
        );
        let b = c.targets[1].settings.limits;
        assert_eq!((b.iops, b.bytes_per_second), (Some(5000), Some(200 << 20)));
        let rule = c.discover[0].settings.limits;
        assert_eq!(
            (rule.iops, rule.bytes_per_second),
            (Some(3000), Some(200 << 20))
        );
        assert!(c.node_limits.is_none());
        let none = load("[[targets]]\nname = \"a\"\npath = \"/a\"\n").unwrap();
        assert!(none.targets[0].settings.limits.is_empty());
    }

    #[test]
    fn a_node_ceiling_names_its_disks() {
        let c = load(
            "[limits]\ndevices = \"^sd[c-z]$\"\niops_limit = 12800\nthroughput_limit = \"192MiB/s\"\n",
        )
        .unwrap();
        let node = c.node_limits.unwrap();
        assert!(node.devices.is_match("sdc") && !node.devices.is_match("sda"));
        assert_eq!(node.limits.iops, Some(12800));
        assert_eq!(node.limits.bytes_per_second, Some(192 << 20));
    }

    #[test]
    fn bad_limits_are_located_errors() {
        for (text, expected) in [
            (
                "[[targets]]\nname = \"a\"\npath = \"/a\"\niops_limit = 0\n",
                "l.toml:4:14: targets[0].iops_limit: expected a whole number of I/Os per second from 1 to 1000000000, found 0",
            ),
            (
                "[[targets]]\nname = \"a\"\npath = \"/a\"\nthroughput_limit = \"200M/s\"\n",
                "l.toml:4:20: targets[0].throughput_limit: invalid throughput \"200M/s\": name the unit in full",
            ),
            (
                "[defaults]\nthroughput_limit = 1.5\n",
                "l.toml:2:20: defaults.throughput_limit: expected a throughput such as \"200MiB/s\" (binary) or \"125MB/s\" (decimal), or a whole number of bytes per second, found 1.5",
            ),
            (
                "[[discover]]\nkind = \"block\"\niops_limit = -3\n",
                "l.toml:3:14: discover[0].iops_limit: expected a whole number",
            ),
            (
                "[limits]\niops_limit = 100\n",
                "l.toml:1:1: limits: expected devices = \"REGEX\"",
            ),
            (
                "[limits]\ndevices = \"^sd\"\n",
                "l.toml:1:1: limits: expected iops_limit, throughput_limit or both",
            ),
            (
                "[limits]\ndevices = \"(\"\niops_limit = 1\n",
                "l.toml:2:11: limits.devices: expected a regular expression",
            ),
            (
                "[limits]\ndevices = \"^sd\"\nthroughput_limit = \"1GB\"\n",
                "l.toml:3:20: limits.throughput_limit: invalid throughput \"1GB\": a throughput ends in /s",
            ),
            (
                "[limits]\ndevices = \"^sd\"\nbandwidth = 1\n",
                "l.toml:3:1: limits.bandwidth: unknown field `bandwidth`",
            ),
        ] {
            let err = load(text).expect_err(text);
            assert!(
                err.starts_with(expected),
                "{text}\n got: {err}\nwant: {expected}"
            );
        }
    }
}
