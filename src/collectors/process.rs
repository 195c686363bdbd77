//! `process_*` metrics of the agent itself (CPU, memory, file descriptors, threads, start time),
//! from the `prometheus` crate's process collector reading `/proc/self`, converted to our model.

use super::{CollectError, Collector};
use crate::exposition::{Family, MetricKind, Sample, Value};
use prometheus::core::Collector as _;
use prometheus::process_collector::ProcessCollector;
use prometheus::proto::MetricType;
use std::borrow::Cow;

/// Reports the standard `process_*` metrics.
pub struct ProcessMetrics {
    inner: ProcessCollector,
}

impl ProcessMetrics {
    /// A collector for the current process.
    pub fn new() -> Self {
        ProcessMetrics {
            inner: ProcessCollector::for_self(),
        }
    }
}

impl Default for ProcessMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Collector for ProcessMetrics {
    fn name(&self) -> &'static str {
        "process"
    }

    fn collect(&self, out: &mut Vec<Family>) -> Result<(), CollectError> {
        let no_labels: crate::exposition::Labels = std::sync::Arc::new([]);
        for mf in self.inner.collect() {
            let (kind, values): (MetricKind, Vec<f64>) = match mf.get_field_type() {
                MetricType::COUNTER => (
                    MetricKind::Counter,
                    mf.get_metric()
                        .iter()
                        .map(|m| m.get_counter().get_value())
                        .collect(),
                ),
                MetricType::GAUGE => (
                    MetricKind::Gauge,
                    mf.get_metric()
                        .iter()
                        .map(|m| m.get_gauge().get_value())
                        .collect(),
                ),
                // The process collector only produces counters and gauges (without labels).
                _ => continue,
            };
            out.push(Family {
                name: Cow::Owned(mf.name().to_owned()),
                help: Cow::Owned(mf.help().to_owned()),
                kind,
                samples: values
                    .into_iter()
                    .map(|v| Sample {
                        labels: no_labels.clone(),
                        value: Value::Number(v),
                    })
                    .collect(),
            });
        }
        Ok(())
    }
}
