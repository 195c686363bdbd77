//! The metric model collectors build on every scrape: [`Family`] (name, HELP, type, samples),
//! [`Sample`], [`Value`] (a number, or a histogram with classic and native buckets) and shared
//! label sets ([`Labels`]). The encoders read it; nothing here knows a wire format.

use std::borrow::Cow;
use std::sync::Arc;

/// The type of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Monotonic counter (name ends in `_total`).
    Counter,
    /// Gauge.
    Gauge,
    /// Histogram with cumulative buckets.
    Histogram,
}

/// One label: a static name and a shared value.
pub(crate) type Label = (&'static str, Arc<str>);

/// A label set shared by every sample of one device, target or profile.
pub(crate) type Labels = Arc<[Label]>;

/// Builds a shared label set.
pub fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, Arc::from(*v))).collect()
}

/// The value of one sample.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Counter or gauge value.
    Number(f64),
    /// Histogram: `(upper bound, cumulative count)` per classic bucket (the `+Inf` bucket is
    /// implied by `count`), sum and count of observations, and native buckets when it has them
    /// (only the protobuf format carries those).
    Histogram {
        /// Cumulative classic buckets in increasing bound order.
        buckets: Vec<(f64, u64)>,
        /// Sum of observations.
        sum: f64,
        /// Number of observations.
        count: u64,
        /// Native (exponential) buckets.
        native: Option<NativeBuckets>,
    },
}

/// The native buckets of a histogram, in Prometheus' model: bucket `i` holds observations in
/// `(2^((i-1)·2^-schema), 2^(i·2^-schema)]`, and the zero bucket those in
/// `[-zero_threshold, zero_threshold]`.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeBuckets {
    /// Resolution: each power of two is divided into `2^schema` buckets (-4..=8).
    pub schema: i32,
    /// Width of the zero bucket; above zero, so that a histogram without observations is still
    /// recognised as native.
    pub zero_threshold: f64,
    /// Observations in the zero bucket.
    pub zero_count: u64,
    /// `(index, count)` of positive buckets with observations (absolute counts, not cumulative),
    /// in increasing index order.
    pub positive: Vec<(i32, u64)>,
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
    pub kind: MetricKind,
    /// Samples; a family without samples is not encoded.
    pub samples: Vec<Sample>,
}

impl Family {
    fn new(name: &'static str, help: &'static str, kind: MetricKind) -> Self {
        Family {
            name: Cow::Borrowed(name),
            help: Cow::Borrowed(help),
            kind,
            samples: Vec::new(),
        }
    }

    /// Reserves room for `n` more samples.
    pub(crate) fn reserve(&mut self, n: usize) -> &mut Self {
        self.samples.reserve(n);
        self
    }

    /// A counter family.
    pub fn counter(name: &'static str, help: &'static str) -> Self {
        Self::new(name, help, MetricKind::Counter)
    }

    /// A gauge family.
    pub(crate) fn gauge(name: &'static str, help: &'static str) -> Self {
        Self::new(name, help, MetricKind::Gauge)
    }

    /// A histogram family.
    pub fn histogram(name: &'static str, help: &'static str) -> Self {
        Self::new(name, help, MetricKind::Histogram)
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
