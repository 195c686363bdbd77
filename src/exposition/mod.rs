//! Metric families and their encoding for scrapes.
//!
//! Collectors build [`MetricFamily`] values (the data model of the `prometheus` crate) fresh on
//! every scrape with [`FamilyBuilder`]; this module encodes them as the Prometheus text format
//! 0.0.4 (with the `prometheus` crate's encoder) or as OpenMetrics 1.0 ([`openmetrics`]) depending
//! on what the scraper accepts. Nothing outside this module knows about wire formats, so another
//! encoding (native histograms) can be added here without touching collectors.

pub mod openmetrics;

use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::{Encoder, TextEncoder};

/// A wire format for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`.
    Text,
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
}

impl Format {
    /// Picks the format from an HTTP `Accept` header, as Prometheus negotiates it.
    pub fn negotiate(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text,
        }
    }

    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Encodes `families` in `format`.
pub fn encode(families: &[MetricFamily], format: Format) -> Vec<u8> {
    match format {
        Format::Text => {
            let mut out = Vec::with_capacity(64 * 1024);
            // Writing into a Vec cannot fail; the encoder only errors on I/O or on families
            // without metrics, which FamilyBuilder::build never returns.
            if let Err(err) = TextEncoder::new().encode(families, &mut out) {
                tracing::error!(%err, "encoding metrics failed");
            }
            out
        }
        Format::OpenMetrics => openmetrics::encode(families).into_bytes(),
    }
}

/// Builds one metric family of const samples.
#[derive(Debug)]
pub struct FamilyBuilder {
    family: MetricFamily,
    metrics: Vec<Metric>,
}

impl FamilyBuilder {
    fn new(name: &str, help: &str, kind: MetricType) -> Self {
        let mut family = MetricFamily::default();
        family.set_name(name.to_owned());
        family.set_help(help.to_owned());
        family.set_field_type(kind);
        FamilyBuilder {
            family,
            metrics: Vec::new(),
        }
    }

    /// A counter family.
    pub fn counter(name: &str, help: &str) -> Self {
        Self::new(name, help, MetricType::COUNTER)
    }

    /// A gauge family.
    pub fn gauge(name: &str, help: &str) -> Self {
        Self::new(name, help, MetricType::GAUGE)
    }

    /// Adds a sample with the given labels.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: f64) -> &mut Self {
        let mut metric = Metric::default();
        metric.set_label(label_pairs(labels));
        match self.family.get_field_type() {
            MetricType::COUNTER => {
                let mut c = Counter::default();
                c.set_value(value);
                metric.set_counter(c);
            }
            _ => {
                let mut g = Gauge::default();
                g.set_value(value);
                metric.set_gauge(g);
            }
        }
        self.metrics.push(metric);
        self
    }

    /// Adds a pre-built metric (histograms, summaries).
    pub fn metric(&mut self, metric: Metric) -> &mut Self {
        self.metrics.push(metric);
        self
    }

    /// Whether no sample was added.
    pub fn is_empty(&self) -> bool {
        self.metrics.is_empty()
    }

    /// Appends the family to `out` unless it has no samples (an empty family is not valid
    /// exposition).
    pub fn finish_into(mut self, out: &mut Vec<MetricFamily>) {
        if !self.metrics.is_empty() {
            self.family.set_metric(self.metrics);
            out.push(self.family);
        }
    }
}

/// Converts `(name, value)` pairs into label pairs.
pub fn label_pairs(labels: &[(&str, &str)]) -> Vec<LabelPair> {
    labels
        .iter()
        .map(|(name, value)| {
            let mut pair = LabelPair::default();
            pair.set_name((*name).to_owned());
            pair.set_value((*value).to_owned());
            pair
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiates_like_prometheus() {
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Text);
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prom)), Format::OpenMetrics);
    }

    #[test]
    fn empty_families_are_dropped() {
        let mut out = Vec::new();
        FamilyBuilder::gauge("a", "b").finish_into(&mut out);
        assert!(out.is_empty());
        let mut g = FamilyBuilder::gauge("a", "b");
        g.sample(&[("x", "y")], 1.0);
        g.finish_into(&mut out);
        let text = String::from_utf8(encode(&out, Format::Text)).unwrap();
        assert_eq!(text, "# HELP a b\n# TYPE a gauge\na{x=\"y\"} 1\n");
    }
}
