//! Device include/exclude filter, shared by every collector that reports per-device series.
//!
//! Mirrors node_exporter's `--collector.diskstats.device-exclude` / `device-include`: at most one
//! of the two is set; with neither, [`DEFAULT_EXCLUDE`] applies.

use regex::Regex;

/// node_exporter's default: partitions and virtual devices whose counters duplicate others'.
pub(crate) const DEFAULT_EXCLUDE: &str = r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$";

/// Decides which device names are reported.
#[derive(Debug, Clone)]
pub enum DeviceFilter {
    /// Report devices whose name does not match.
    Exclude(Regex),
    /// Report only devices whose name matches.
    Include(Regex),
}

impl DeviceFilter {
    /// The filter used when the configuration sets none.
    pub(crate) fn default_exclude() -> Self {
        // The pattern is a compile-time constant covered by the tests below.
        DeviceFilter::Exclude(Regex::new(DEFAULT_EXCLUDE).expect("default exclude compiles"))
    }

    /// Whether the device `name` is reported.
    pub(crate) fn accepts(&self, name: &str) -> bool {
        match self {
            DeviceFilter::Exclude(re) => !re.is_match(name),
            DeviceFilter::Include(re) => re.is_match(name),
        }
    }

    /// The pattern, for logs and the landing page.
    pub fn describe(&self) -> String {
        match self {
            DeviceFilter::Exclude(re) => format!("exclude {}", re.as_str()),
            DeviceFilter::Include(re) => format!("include {}", re.as_str()),
        }
    }
}

impl Default for DeviceFilter {
    fn default() -> Self {
        Self::default_exclude()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_exclude_matches_node_exporter() {
        let f = DeviceFilter::default();
        for excluded in [
            "ram0",
            "zram1",
            "loop7",
            "fd0",
            "sda1",
            "vdb12",
            "xvda1",
            "nvme0n1p3",
        ] {
            assert!(!f.accepts(excluded), "{excluded} should be excluded");
        }
        for kept in [
            "sda",
            "vda",
            "nvme0n1",
            "dm-0",
            "md127",
            "mmcblk0",
            "mmcblk0p1",
            "sr0",
        ] {
            assert!(f.accepts(kept), "{kept} should be kept");
        }
    }

    #[test]
    fn include_keeps_only_matches() {
        let f = DeviceFilter::Include(Regex::new("^loop").unwrap());
        assert!(f.accepts("loop0"));
        assert!(!f.accepts("sda"));
    }
}
