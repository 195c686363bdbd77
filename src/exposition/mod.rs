//! Our metric model and its encodings for scrapes.
//!
//! Collectors build [`Family`] values fresh on every scrape; [`encode`] writes them as the
//! Prometheus text format 0.0.4 or as OpenMetrics 1.0 depending on what the scraper accepts
//! ([`Format::negotiate`]). The model is deliberately small and cheap to build: label names are
//! static strings and a label set is an `Arc<[Label]>` that every sample of a device or target
//! shares, so a scrape of hundreds of devices allocates per device, not per sample. Nothing outside
//! this module knows about wire formats, so a native-histogram encoding can be added here without
//! touching collectors, the scheduler or the engine.

mod text;

use std::borrow::Cow;
use std::sync::Arc;

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
pub fn encode(families: &[Family], format: Format) -> Vec<u8> {
    text::encode(families, format).into_bytes()
}

/// The type of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic counter (name ends in `_total`).
    Counter,
    /// Gauge.
    Gauge,
    /// Histogram with cumulative buckets.
    Histogram,
}

/// One label: a static name and a shared value.
pub type Label = (&'static str, Arc<str>);

/// A label set shared by every sample of one device, target or profile.
pub type Labels = Arc<[Label]>;

/// Builds a shared label set.
pub fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, Arc::from(*v))).collect()
}

/// The value of one sample.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Counter or gauge value.
    Number(f64),
    /// Histogram: `(upper bound, cumulative count)` per bucket (the `+Inf` bucket is implied by
    /// `count`), sum and count of observations.
    Histogram {
        /// Cumulative buckets in increasing bound order.
        buckets: Vec<(f64, u64)>,
        /// Sum of observations.
        sum: f64,
        /// Number of observations.
        count: u64,
    },
}

/// One sample of a family.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Label set.
    pub labels: Labels,
    /// Value.
    pub value: Value,
}

/// A metric family: name, help, type and samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// Full metric name (counters include `_total`).
    pub name: Cow<'static, str>,
    /// HELP text.
    pub help: Cow<'static, str>,
    /// Type.
    pub kind: Kind,
    /// Samples; a family without samples is not encoded.
    pub samples: Vec<Sample>,
}

impl Family {
    fn new(name: &'static str, help: &'static str, kind: Kind) -> Self {
        Family {
            name: Cow::Borrowed(name),
            help: Cow::Borrowed(help),
            kind,
            samples: Vec::new(),
        }
    }

    /// Reserves room for `n` more samples.
    pub fn reserve(&mut self, n: usize) -> &mut Self {
        self.samples.reserve(n);
        self
    }

    /// A counter family.
    pub fn counter(name: &'static str, help: &'static str) -> Self {
        Self::new(name, help, Kind::Counter)
    }

    /// A gauge family.
    pub fn gauge(name: &'static str, help: &'static str) -> Self {
        Self::new(name, help, Kind::Gauge)
    }

    /// A histogram family.
    pub fn histogram(name: &'static str, help: &'static str) -> Self {
        Self::new(name, help, Kind::Histogram)
    }

    /// Adds a counter or gauge sample.
    pub fn push(&mut self, labels: &Labels, value: f64) -> &mut Self {
        self.samples.push(Sample {
            labels: labels.clone(),
            value: Value::Number(value),
        });
        self
    }

    /// Adds a sample with any value.
    pub fn push_value(&mut self, labels: &Labels, value: Value) -> &mut Self {
        self.samples.push(Sample {
            labels: labels.clone(),
            value,
        });
        self
    }

    /// Appends the family to `out` unless it has no samples (an empty family is not valid
    /// exposition).
    pub fn finish_into(self, out: &mut Vec<Family>) {
        if !self.samples.is_empty() {
            out.push(self);
        }
    }
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
        Family::gauge("a", "b").finish_into(&mut out);
        assert!(out.is_empty());
        let mut g = Family::gauge("a", "b");
        g.push(&labels(&[("x", "y")]), 1.0);
        g.finish_into(&mut out);
        let text = String::from_utf8(encode(&out, Format::Text)).unwrap();
        assert_eq!(text, "# HELP a b\n# TYPE a gauge\na{x=\"y\"} 1\n");
    }
}
