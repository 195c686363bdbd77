//! Collectors: each produces metric families fresh on every scrape.
//!
//! One collector per file behind the [`Collector`] trait, all run by a [`Registry`] that also
//! reports `diskprobe_scrape_collector_success` and `diskprobe_scrape_collector_duration_seconds`
//! per collector, as node_exporter does. Because every scrape builds its series anew, a device or
//! target that disappears takes its series with it.
//!
//! Each file is named for the metrics it exports, apart from the module that reads their source:
//! [`disk_metrics`] (`diskprobe_disk_*`, from [`crate::diskstats`]), [`probe_metrics`] (the
//! probes' results, from [`crate::series`]), [`limit_metrics`], [`discovery_metrics`],
//! [`cloud_metrics`] (from [`crate::cloud_stats`]), [`sandbox_metrics`], [`exporter`] and
//! [`process`].

pub(crate) mod cloud_metrics;
pub(crate) mod discovery_metrics;
pub mod disk_metrics;
pub(crate) mod exporter;
pub mod limit_metrics;
pub mod probe_metrics;
pub mod process;
pub(crate) mod sandbox_metrics;

use crate::exposition::{Family, labels};
use std::sync::Arc;
use std::time::Instant;

/// Why a collector could not produce its metrics.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Any other failure, described.
    #[error("{0}")]
    Other(String),
}

/// A source of metric families.
pub trait Collector: Send + Sync {
    /// The `collector` label value.
    fn name(&self) -> &'static str;
    /// Appends this collector's families to `out`.
    fn collect(&self, out: &mut Vec<Family>) -> Result<(), CollectError>;
}

/// Runs a fixed set of collectors on every scrape.
#[derive(Clone, Default)]
pub(crate) struct Registry {
    collectors: Vec<Arc<dyn Collector>>,
}

impl Registry {
    /// An empty registry.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Adds a collector; scrapes run collectors in the order they were added.
    pub(crate) fn register(&mut self, collector: Arc<dyn Collector>) {
        self.collectors.push(collector);
    }

    /// Runs every collector and returns all families sorted by name.
    pub(crate) fn gather(&self) -> Vec<Family> {
        let mut out = Vec::with_capacity(64);
        let mut success = Family::gauge(
            "diskprobe_scrape_collector_success",
            "diskprobe_exporter: Whether a collector succeeded.",
        );
        let mut duration = Family::gauge(
            "diskprobe_scrape_collector_duration_seconds",
            "diskprobe_exporter: Duration of a collector scrape.",
        );
        let mut scratch = Vec::new();
        for collector in &self.collectors {
            let start = Instant::now();
            scratch.clear();
            let ok = match collector.collect(&mut scratch) {
                Ok(()) => {
                    out.append(&mut scratch);
                    true
                }
                Err(err) => {
                    tracing::error!(collector = collector.name(), %err, "collector failed");
                    false
                }
            };
            let labels = labels(&[("collector", collector.name())]);
            duration.push(&labels, start.elapsed().as_secs_f64());
            success.push(&labels, if ok { 1.0 } else { 0.0 });
        }
        duration.finish_into(&mut out);
        success.finish_into(&mut out);
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Failing;
    impl Collector for Failing {
        fn name(&self) -> &'static str {
            "failing"
        }
        fn collect(&self, out: &mut Vec<Family>) -> Result<(), CollectError> {
            let mut g = Family::gauge("partial", "Should not be exposed.");
            g.push(&labels(&[]), 1.0);
            g.finish_into(out);
            Err(CollectError::Other("boom".into()))
        }
    }

    #[test]
    fn failing_collector_reports_zero_and_drops_partial_output() {
        let mut r = Registry::new();
        r.register(Arc::new(Failing));
        let families = r.gather();
        let names: Vec<_> = families.iter().map(|f| &*f.name).collect();
        assert_eq!(
            names,
            [
                "diskprobe_scrape_collector_duration_seconds",
                "diskprobe_scrape_collector_success"
            ]
        );
        assert_eq!(
            families[1].samples[0].value,
            crate::exposition::Value::Number(0.0)
        );
    }
}
