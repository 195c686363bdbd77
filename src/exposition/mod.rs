//! Our metric model and its encodings for scrapes.
//!
//! Collectors build [`Family`] values fresh on every scrape; [`encode`] writes them in the wire
//! format the scraper prefers ([`Negotiated`], from its `Accept` and `Accept-Encoding` headers):
//! the Prometheus text format 0.0.4, OpenMetrics 1.0, or the protobuf format
//! (`io.prometheus.client.MetricFamily`, length-delimited), the only one that carries native
//! histograms; gzip-compressed when the scraper accepts it. The model is deliberately small and
//! cheap to build: label names are static strings and a label set is an `Arc<[Label]>` that every
//! sample of a device or target shares, so a scrape of hundreds of devices allocates per device,
//! not per sample. Nothing outside this module knows about wire formats: collectors, the
//! scheduler and the engine see only [`Family`] and [`Value`].

mod negotiate;
mod protobuf;
mod text;

pub use negotiate::{ContentCoding, Format, Negotiated};
pub use protobuf::proto;

use std::borrow::Cow;
use std::sync::Arc;

/// Encodes `families` in `format` (uncompressed).
pub fn encode(families: &[Family], format: Format) -> Vec<u8> {
    match format {
        Format::Text | Format::OpenMetrics => text::encode(families, format).into_bytes(),
        Format::Protobuf => protobuf::encode(families),
    }
}

/// Encodes `families` as the scraper asked: the body and how it is compressed (gzip falls back to
/// identity should compression fail).
pub fn encode_for(families: &[Family], negotiated: Negotiated) -> (Vec<u8>, ContentCoding) {
    let body = encode(families, negotiated.format);
    match negotiated.coding {
        ContentCoding::Identity => (body, ContentCoding::Identity),
        ContentCoding::Gzip => match gzip(&body) {
            Ok(compressed) => (compressed, ContentCoding::Gzip),
            Err(err) => {
                tracing::warn!(%err, "gzip failed; answering uncompressed");
                (body, ContentCoding::Identity)
            }
        },
    }
}

/// gzip at the fastest level: a scrape's text compresses about tenfold even so, and the CPU a
/// scrape costs matters more on a fleet than the last few per cent of size. Each thread keeps its
/// compressor (about 300 KB of zlib state) and resets it for every body: allocating and freeing
/// that much per scrape scattered the heap of the thread that scrapes (its RSS grew by megabytes
/// under load).
fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    use flate2::{Compress, Compression, FlushCompress, Status};
    use std::cell::RefCell;
    thread_local! {
        static COMPRESSOR: RefCell<Option<Compress>> = const { RefCell::new(None) };
    }
    COMPRESSOR.with_borrow_mut(|slot| {
        let z = slot.get_or_insert_with(|| Compress::new_gzip(Compression::fast(), 15));
        z.reset();
        let mut out = Vec::with_capacity(body.len() / 4 + 64);
        loop {
            let consumed = usize::try_from(z.total_in()).unwrap_or(usize::MAX);
            let input = body.get(consumed..).unwrap_or_default();
            // `out` always has room here (reserved below), so a call must make progress.
            let before = (z.total_in(), z.total_out());
            let result = match z.compress_vec(input, &mut out, FlushCompress::Finish) {
                Ok(Status::StreamEnd) => return Ok(out),
                Ok(_) if before == (z.total_in(), z.total_out()) => Err(std::io::Error::other(
                    "the compressor made no progress with room to write",
                )),
                Ok(_) => Ok(()),
                Err(err) => Err(std::io::Error::other(err)),
            };
            if let Err(err) = result {
                // Do not keep a stream in an unknown state for the next body.
                *slot = None;
                return Err(err);
            }
            out.reserve(out.capacity().max(4096));
        }
    })
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

    #[test]
    fn the_reused_compressor_gives_each_body_a_whole_gzip_stream() {
        use std::io::Read;
        // Bodies of different sizes in turn, on one thread: each must decode alone to itself
        // (nothing left over from the body before, a fresh header and trailer).
        let big: Vec<u8> = (0..300_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for body in [
            &b"a{x=\"y\"} 1\n"[..],
            &big,
            b"",
            &big[..70_000],
            b"# EOF\n",
        ] {
            let compressed = gzip(body).unwrap();
            let mut decoder = flate2::read::GzDecoder::new(&compressed[..]);
            let mut decoded = Vec::new();
            decoder.read_to_end(&mut decoded).unwrap();
            assert_eq!(decoded, body);
            let mut rest = Vec::new();
            decoder.into_inner().read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty(), "one gzip member per body");
        }
    }
}
