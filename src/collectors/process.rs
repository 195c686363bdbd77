//! `process_*` metrics of the agent itself (CPU, memory, file descriptors, threads, start time),
//! from the `prometheus` crate's process collector reading `/proc/self`.

use super::{CollectError, Collector};
use prometheus::core::Collector as _;
use prometheus::process_collector::ProcessCollector;
use prometheus::proto::MetricFamily;

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

    fn collect(&self, out: &mut Vec<MetricFamily>) -> Result<(), CollectError> {
        out.extend(self.inner.collect());
        Ok(())
    }
}
