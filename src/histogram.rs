//! Latency histograms as the agent exports them: classic buckets with a configurable layout and
//! Prometheus native buckets, both filled from the HdrHistogram of each probe run.
//!
//! A [`LatencyHistogram`] is cumulative since it was created. Every run's HdrHistogram (3
//! significant digits, so each of its buckets is at most 0.1% wide) is added bucket by bucket:
//! each HdrHistogram bucket goes whole, at its midpoint, into one classic bucket and one native
//! bucket, so that the count is exactly the number of I/Os recorded and the sum is the same for
//! both kinds of bucket.
//!
//! - **Classic buckets** ([`ClassicBuckets`]): upper bounds in seconds, `coarse` by default (1-2-5
//!   steps from 10 µs to 50 s, about one per doubling), `fine` (four per doubling) or a list.
//!   Each bound is one series per target and profile, so the layout is the series budget.
//! - **Native buckets**: Prometheus' exponential buckets at schema [`NATIVE_SCHEMA`] (16 per
//!   doubling, each bound 2^(1/16) ≈ 1.044 times the previous one) with a zero bucket up to
//!   [`NATIVE_ZERO_THRESHOLD`]. Only buckets that have observations are kept, as `(index, count)`
//!   pairs in index order: a run spread over a few doublings keeps a few dozen pairs, not a dense
//!   array over the whole range.
//!
//! How the buckets travel on the wire (text, OpenMetrics, protobuf spans and deltas) is the
//! exposition module's business; [`LatencyHistogram::to_value`] hands it both kinds.

use crate::exposition::{NativeBuckets, Value};
use hdrhistogram::Histogram;
use std::sync::{Arc, LazyLock};

/// Resolution of the native buckets: each power of two is divided into 2^4 = 16 buckets, so a
/// bucket is 4.4% wide (Prometheus accepts -4..=8; 4 keeps quantile estimates within 5%).
pub(crate) const NATIVE_SCHEMA: i32 = 4;

/// Width of the native zero bucket, in seconds: 2^-30 s ≈ 0.93 ns, below the 1 ns resolution of
/// the run's HdrHistogram, so it holds only latencies recorded as 0. Above zero, so that a
/// histogram without observations (before the first run) is still recognised as native.
pub(crate) const NATIVE_ZERO_THRESHOLD: f64 = 1.0 / (1u64 << 30) as f64;

/// Upper bounds of the classic buckets, in seconds: strictly increasing, finite and above zero.
/// Cheap to clone; histograms with the same layout share one allocation.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassicBuckets(Arc<[f64]>);

/// Why a list of bucket bounds was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BucketsError {
    /// The list is empty.
    #[error("expected at least one bucket bound")]
    Empty,
    /// A bound is zero, negative, infinite or NaN.
    #[error(
        "bucket bound {value} (number {position}) is not a finite number of seconds above zero"
    )]
    NotPositive {
        /// 1-based position in the list.
        position: usize,
        /// The bound.
        value: f64,
    },
    /// A bound is not above the one before it.
    #[error("bucket bound {value} (number {position}) is not above the one before it")]
    NotIncreasing {
        /// 1-based position in the list.
        position: usize,
        /// The bound.
        value: f64,
    },
}

impl ClassicBuckets {
    /// The default: 1-2-5 steps from 10 µs to 50 s (21 bounds, about one per doubling), the
    /// range a disk's latency spans from a fast NVMe read to an I/O that hits the hard timeout.
    pub fn coarse() -> Self {
        static COARSE: LazyLock<ClassicBuckets> = LazyLock::new(|| {
            let mut bounds = Vec::new();
            for exponent in -5..=1 {
                for mantissa in [1.0, 2.0, 5.0] {
                    // "1e-5" parsed, not 1.0 * 10^-5 multiplied: the shortest decimal, exactly.
                    let text = format!("{mantissa}e{exponent}");
                    bounds.push(text.parse::<f64>().unwrap_or_else(|_| unreachable!()));
                }
            }
            ClassicBuckets(bounds.into())
        });
        COARSE.clone()
    }

    /// Four buckets per doubling from 10 µs to 60 s (92 bounds), rounded to three significant
    /// digits: the layout before the series budget, for those who want it.
    pub fn fine() -> Self {
        static FINE: LazyLock<ClassicBuckets> = LazyLock::new(|| {
            let mut bounds = Vec::new();
            for k in 0.. {
                let bound = 10e-6 * 2f64.powf(f64::from(k) / 4.0);
                if bound >= 60.0 {
                    break;
                }
                bounds.push(round3(bound));
            }
            bounds.push(60.0);
            ClassicBuckets(bounds.into())
        });
        FINE.clone()
    }

    /// A layout from an explicit list of upper bounds in seconds.
    pub fn new(bounds: Vec<f64>) -> Result<Self, BucketsError> {
        if bounds.is_empty() {
            return Err(BucketsError::Empty);
        }
        for (i, &value) in bounds.iter().enumerate() {
            let position = i + 1;
            if !(value.is_finite() && value > 0.0) {
                return Err(BucketsError::NotPositive { position, value });
            }
            if i > 0 && value <= bounds[i - 1] {
                return Err(BucketsError::NotIncreasing { position, value });
            }
        }
        Ok(ClassicBuckets(bounds.into()))
    }

    /// The upper bounds (the `+Inf` bucket is implied).
    pub fn bounds(&self) -> &[f64] {
        &self.0
    }
}

impl Default for ClassicBuckets {
    fn default() -> Self {
        Self::coarse()
    }
}

fn round3(x: f64) -> f64 {
    let digits = 2 - x.log10().floor() as i32;
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

/// A latency histogram with classic and native buckets, cumulative since creation.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyHistogram {
    layout: ClassicBuckets,
    /// Observations per classic bucket (not cumulative), plus one for above the last bound.
    classic: Box<[u64]>,
    /// `(index, count)` of the native buckets with observations, in increasing index order.
    native: Vec<(i32, u64)>,
    /// Observations at or below [`NATIVE_ZERO_THRESHOLD`].
    zero_count: u64,
    count: u64,
    sum: f64,
}

impl LatencyHistogram {
    /// An empty histogram with the classic buckets of `layout`.
    pub(crate) fn new(layout: &ClassicBuckets) -> Self {
        LatencyHistogram {
            layout: layout.clone(),
            classic: vec![0; layout.bounds().len() + 1].into(),
            native: Vec::new(),
            zero_count: 0,
            count: 0,
            sum: 0.0,
        }
    }

    /// Adds every latency of a run, recorded in nanoseconds.
    pub(crate) fn record(&mut self, latency_ns: &Histogram<u64>) {
        let bounds = self.layout.bounds();
        let mut run: Vec<(i32, u64)> = Vec::new();
        for v in latency_ns.iter_recorded() {
            let n = v.count_at_value();
            let seconds = latency_ns.median_equivalent(v.value_iterated_to()) as f64 / 1e9;
            self.count += n;
            self.sum += seconds * n as f64;
            self.classic[bounds.partition_point(|b| *b < seconds)] += n;
            if seconds <= NATIVE_ZERO_THRESHOLD {
                self.zero_count += n;
                continue;
            }
            // Values arrive in increasing order, so their indexes do too.
            let index = native_index(seconds);
            match run.last_mut() {
                Some((last, c)) if *last == index => *c += n,
                _ => run.push((index, n)),
            }
        }
        if !run.is_empty() {
            self.native = merge(&self.native, &run);
        }
    }

    #[cfg(test)]
    /// Number of observations.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    #[cfg(test)]
    /// Sum of observations in seconds.
    pub(crate) fn sum(&self) -> f64 {
        self.sum
    }

    #[cfg(test)]
    /// The classic layout.
    pub(crate) fn layout(&self) -> &ClassicBuckets {
        &self.layout
    }

    /// `(upper bound, cumulative count)` of every classic bucket but `+Inf`.
    pub(crate) fn classic_cumulative(&self) -> Vec<(f64, u64)> {
        let mut cumulative = 0;
        self.layout
            .bounds()
            .iter()
            .zip(&self.classic[..])
            .map(|(bound, n)| {
                cumulative += n;
                (*bound, cumulative)
            })
            .collect()
    }

    #[cfg(test)]
    /// `(index, count)` of the native buckets with observations, in increasing index order;
    /// bucket `i` holds latencies in `(2^((i-1)/16), 2^(i/16)]` seconds.
    pub(crate) fn native_buckets(&self) -> &[(i32, u64)] {
        &self.native
    }

    #[cfg(test)]
    /// Observations in the native zero bucket.
    pub(crate) fn zero_count(&self) -> u64 {
        self.zero_count
    }

    /// The histogram as one exposition sample value, classic and native buckets together.
    pub(crate) fn to_value(&self) -> Value {
        Value::Histogram {
            buckets: self.classic_cumulative(),
            sum: self.sum,
            count: self.count,
            native: Some(NativeBuckets {
                schema: NATIVE_SCHEMA,
                zero_threshold: NATIVE_ZERO_THRESHOLD,
                zero_count: self.zero_count,
                positive: self.native.clone(),
            }),
        }
    }
}

impl Default for LatencyHistogram {
    /// Empty, with the default ([`ClassicBuckets::coarse`]) layout.
    fn default() -> Self {
        Self::new(&ClassicBuckets::default())
    }
}

/// The lower halves of the native bounds within one power of two, `2^(j/16) / 2` for `j` in
/// `0..16`: the mantissas (in `[0.5, 1)`) at which a bucket ends.
static MANTISSA_BOUNDS: LazyLock<[f64; 1 << NATIVE_SCHEMA]> = LazyLock::new(|| {
    std::array::from_fn(|j| (j as f64 / f64::from(1 << NATIVE_SCHEMA)).exp2() / 2.0)
});

/// The native bucket holding `seconds` (finite, above zero): the `i` with
/// `2^((i-1)/16) < seconds <= 2^(i/16)`. Computed from the float's mantissa and exponent, as
/// Prometheus' client libraries do, so that values on a bound land in the same bucket.
pub(crate) fn native_index(seconds: f64) -> i32 {
    let (mantissa, exponent) = frexp(seconds);
    let within = MANTISSA_BOUNDS.partition_point(|b| *b < mantissa) as i32;
    within + (exponent - 1) * (1 << NATIVE_SCHEMA)
}

/// `x = mantissa × 2^exponent` with the mantissa in `[0.5, 1)`, for finite `x > 0`.
fn frexp(x: f64) -> (f64, i32) {
    const EXPONENT_MASK: u64 = 0x7ff << 52;
    let bits = x.to_bits();
    let biased = ((bits & EXPONENT_MASK) >> 52) as i32;
    if biased == 0 {
        // Subnormal: scale into the normal range first.
        let (m, e) = frexp(x * (1u64 << 54) as f64);
        return (m, e - 54);
    }
    let mantissa = f64::from_bits((bits & !EXPONENT_MASK) | (1022 << 52));
    (mantissa, biased - 1022)
}

/// The sum of two sparse bucket lists, both in increasing index order.
fn merge(a: &[(i32, u64)], b: &[(i32, u64)]) -> Vec<(i32, u64)> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (ka, ca) = a[i];
        let (kb, cb) = b[j];
        if ka < kb {
            out.push((ka, ca));
            i += 1;
        } else if kb < ka {
            out.push((kb, cb));
            j += 1;
        } else {
            out.push((ka, ca + cb));
            i += 1;
            j += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::measurement::new_latency_histogram;

    #[test]
    fn layouts() {
        let coarse = ClassicBuckets::coarse();
        let b = coarse.bounds();
        assert_eq!(b.len(), 21);
        assert_eq!((b[0], b[1], b[2], b[3]), (1e-5, 2e-5, 5e-5, 1e-4));
        assert_eq!(b[9], 0.01);
        assert_eq!(*b.last().unwrap(), 50.0);
        let fine = ClassicBuckets::fine();
        let f = fine.bounds();
        assert_eq!((f[0], f[4], f[40]), (1e-5, 2e-5, 0.0102));
        assert_eq!((f.len(), *f.last().unwrap()), (92, 60.0));
        for layout in [coarse, fine] {
            assert!(layout.bounds().windows(2).all(|w| w[0] < w[1]));
            assert_eq!(ClassicBuckets::new(layout.bounds().to_vec()), Ok(layout));
        }
        assert_eq!(ClassicBuckets::new(vec![]), Err(BucketsError::Empty));
        assert_eq!(
            ClassicBuckets::new(vec![0.001, 0.001]),
            Err(BucketsError::NotIncreasing {
                position: 2,
                value: 0.001
            })
        );
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                ClassicBuckets::new(vec![bad]),
                Err(BucketsError::NotPositive { position: 1, .. })
            ));
        }
    }

    #[test]
    fn native_indexes_follow_prometheus_bounds() {
        // Bucket i is (2^((i-1)/16), 2^(i/16)]: a bound belongs to the bucket it ends.
        assert_eq!(native_index(1.0), 0);
        assert_eq!(native_index(1.0001), 1);
        assert_eq!(native_index(0.5), -16);
        assert_eq!(native_index(2.0), 16);
        assert_eq!(native_index(0.75), -6); // (0.7385, 0.7711]
        for i in -480..=200 {
            let upper = (f64::from(i) / 16.0).exp2();
            let lower = (f64::from(i - 1) / 16.0).exp2();
            assert_eq!(native_index(upper * (1.0 - 1e-12)), i, "{i}");
            assert_eq!(native_index(lower * (1.0 + 1e-12)), i, "{i}");
        }
        // 2^-1024 (subnormal) ends bucket -1024 × 16.
        assert_eq!(native_index(f64::MIN_POSITIVE / 4.0), -1024 * 16);
        const { assert!(NATIVE_ZERO_THRESHOLD < 1e-9 && NATIVE_ZERO_THRESHOLD > 0.0) };
    }

    #[test]
    fn a_run_converts_exactly_into_both_kinds_of_bucket() {
        let mut run = new_latency_histogram();
        for ns in [0, 15_000, 15_000, 15_010, 100_000, 1_900_000, 7_000_000_000] {
            run.record(ns).unwrap();
        }
        let mut h = LatencyHistogram::new(&ClassicBuckets::coarse());
        h.record(&run);
        assert_eq!(h.count(), 7);
        assert_eq!(h.zero_count(), 1);
        let native_total: u64 = h.native_buckets().iter().map(|(_, c)| c).sum();
        assert_eq!(native_total + h.zero_count(), h.count());
        assert!(h.native_buckets().windows(2).all(|w| w[0].0 < w[1].0));
        // 15.00 µs and 15.01 µs share a native bucket; the others each have their own.
        assert_eq!(h.native_buckets().len(), 4);
        assert_eq!(h.native_buckets()[0], (native_index(15e-6), 3));
        let expected_sum = 2.0 * 15e-6 + 15.01e-6 + 100e-6 + 1.9e-3 + 7.0;
        assert!(
            (h.sum() - expected_sum).abs() < 1e-3 * expected_sum,
            "{}",
            h.sum()
        );
        let classic = h.classic_cumulative();
        let at = |le: f64| classic.iter().find(|(b, _)| *b == le).unwrap().1;
        assert_eq!(at(1e-5), 1);
        assert_eq!(at(2e-5), 4);
        // 100 µs is in le="0.0001": bounds are inclusive (and the midpoint of its HdrHistogram
        // bucket is 100 µs itself; one whose midpoint were above would go up, by at most 0.1%).
        assert_eq!(at(1e-4), 5);
        assert_eq!(at(2e-3), 6);
        assert_eq!(at(5.0), 6);
        assert_eq!(at(10.0), 7);

        // A second run adds to both; buckets keep their order and merge.
        let mut second = new_latency_histogram();
        second.record(15_000).unwrap();
        second.record(1_000).unwrap();
        h.record(&second);
        assert_eq!(h.count(), 9);
        assert_eq!(h.native_buckets()[0], (native_index(1e-6), 1));
        assert_eq!(h.native_buckets()[1], (native_index(15e-6), 4));
        assert_eq!(h.classic_cumulative().last().unwrap().1, 9);

        let Value::Histogram {
            buckets,
            sum,
            count,
            native: Some(native),
        } = h.to_value()
        else {
            panic!("not a histogram with native buckets");
        };
        assert_eq!((buckets.len(), count, sum), (21, 9, h.sum()));
        assert_eq!(native.schema, 4);
        assert_eq!(native.positive, h.native_buckets());
    }

    #[test]
    fn empty_histograms_stay_empty() {
        let mut h = LatencyHistogram::new(&ClassicBuckets::fine());
        h.record(&new_latency_histogram());
        assert_eq!((h.count(), h.sum(), h.native_buckets().len()), (0, 0.0, 0));
        assert!(h.classic_cumulative().iter().all(|(_, c)| *c == 0));
        assert_eq!(h.classic_cumulative().len(), 92);
    }
}
