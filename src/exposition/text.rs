//! Text encodings of [`Family`] values: Prometheus text format 0.0.4 and OpenMetrics 1.0.
//! Neither carries native histogram buckets: a histogram is written with its classic buckets.
//!
//! The two differ in little: in OpenMetrics a counter family is named without its `_total`
//! suffix in `# TYPE`/`# HELP` while its samples keep it, HELP escapes double quotes, the
//! exposition ends with `# EOF`, and `# TYPE` comes before `# HELP` by convention.

use super::family::{Family, Label, MetricKind, Value};
use super::negotiate::Format;
use std::fmt::Write;

/// Encodes `families` in `format`.
pub(super) fn encode(families: &[Family], format: Format) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let om = format == Format::OpenMetrics;
    for family in families {
        if family.samples.is_empty() {
            continue;
        }
        let name: &str = &family.name;
        let base = match (om, family.kind) {
            (true, MetricKind::Counter) => name.strip_suffix("_total").unwrap_or(name),
            _ => name,
        };
        header(&mut out, om, base, family);
        let sample_name = match (om, family.kind) {
            (true, MetricKind::Counter) if base.len() == name.len() => {
                std::borrow::Cow::Owned(format!("{name}_total"))
            }
            _ => std::borrow::Cow::Borrowed(name),
        };
        // The `le` values of the family's histograms, formatted once: its samples share bounds.
        let mut bounds: Vec<(u64, String)> = Vec::new();
        for s in &family.samples {
            match &s.value {
                Value::Number(v) => line(&mut out, &sample_name, "", &s.labels, None, *v),
                Value::Histogram {
                    buckets,
                    sum,
                    count,
                    ..
                } => {
                    let same = bounds.len() == buckets.len()
                        && bounds
                            .iter()
                            .zip(buckets)
                            .all(|((bits, _), (le, _))| *bits == le.to_bits());
                    if !same {
                        bounds.clear();
                        bounds.extend(buckets.iter().map(|(le, _)| {
                            let mut text = String::new();
                            write_value(&mut text, *le);
                            (le.to_bits(), text)
                        }));
                    }
                    for ((_, bound), (_, cumulative)) in bounds.iter().zip(buckets) {
                        let extra = Some(("le", bound.as_str()));
                        line(
                            &mut out,
                            name,
                            "_bucket",
                            &s.labels,
                            extra,
                            *cumulative as f64,
                        );
                    }
                    let inf = Some(("le", "+Inf"));
                    line(&mut out, name, "_bucket", &s.labels, inf, *count as f64);
                    line(&mut out, name, "_sum", &s.labels, None, *sum);
                    line(&mut out, name, "_count", &s.labels, None, *count as f64);
                }
            }
        }
    }
    if om {
        out.push_str("# EOF\n");
    }
    out
}

/// The family's `# TYPE` and `# HELP` lines, named `base`.
fn header(out: &mut String, om: bool, base: &str, family: &Family) {
    let type_name = match family.kind {
        MetricKind::Counter => "counter",
        MetricKind::Gauge => "gauge",
        MetricKind::Histogram => "histogram",
    };
    if om {
        let _ = writeln!(out, "# TYPE {base} {type_name}");
        out.push_str("# HELP ");
        out.push_str(base);
        out.push(' ');
        escape_into(out, &family.help, true);
        out.push('\n');
    } else {
        out.push_str("# HELP ");
        out.push_str(base);
        out.push(' ');
        escape_into(out, &family.help, false);
        out.push('\n');
        let _ = writeln!(out, "# TYPE {base} {type_name}");
    }
}

fn line(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &[Label],
    extra: Option<(&str, &str)>,
    value: f64,
) {
    out.push_str(name);
    out.push_str(suffix);
    if !labels.is_empty() || extra.is_some() {
        out.push('{');
        let mut first = true;
        let all = labels.iter().map(|(k, v)| (*k, &**v)).chain(extra);
        for (k, v) in all {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(k);
            out.push_str("=\"");
            escape_into(out, v, true);
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    write_value(out, value);
    out.push('\n');
}

/// Writes a sample value: `+Inf`, `-Inf`, `NaN`, or the shortest decimal that round-trips
/// (`1.8446744073709552e19` for large values, as Go's exporters print them).
fn write_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else if v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 {
        // Integral and exactly representable (below 2^53): print it as an integer, the common
        // case for counters, and much cheaper than float formatting.
        out.push_str(itoa::Buffer::new().format(v as i64));
    } else {
        out.push_str(zmij::Buffer::new().format_finite(v));
    }
}

/// Escapes `\` and newline (and `"` when `quotes`), as both formats require in label values and
/// OpenMetrics also in HELP.
fn escape_into(out: &mut String, s: &str, quotes: bool) {
    if !s.contains(['\\', '"', '\n']) {
        out.push_str(s);
        return;
    }
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' if quotes => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::labels;

    fn sample_families() -> Vec<Family> {
        let mut out = Vec::new();
        let mut c = Family::counter("x_reads_total", "Reads \"done\"\\.");
        c.push(&labels(&[("device", "a\"b\\c\nd")]), 3.0);
        c.finish_into(&mut out);
        let mut g = Family::gauge("x_up", "Up.");
        g.push(&labels(&[]), f64::INFINITY);
        g.push(&labels(&[("k", "v")]), f64::NAN);
        g.finish_into(&mut out);
        let mut h = Family::histogram("x_latency_seconds", "Latency.");
        h.push_value(
            &labels(&[("t", "a")]),
            Value::Histogram {
                buckets: vec![(0.001, 2), (0.01, 5)],
                sum: 0.02,
                count: 6,
                native: None,
            },
        );
        h.finish_into(&mut out);
        out
    }

    #[test]
    fn text_format() {
        assert_eq!(
            encode(&sample_families(), Format::Text),
            "# HELP x_reads_total Reads \"done\"\\\\.\n# TYPE x_reads_total counter\n\
             x_reads_total{device=\"a\\\"b\\\\c\\nd\"} 3\n\
             # HELP x_up Up.\n# TYPE x_up gauge\nx_up +Inf\nx_up{k=\"v\"} NaN\n\
             # HELP x_latency_seconds Latency.\n# TYPE x_latency_seconds histogram\n\
             x_latency_seconds_bucket{t=\"a\",le=\"0.001\"} 2\n\
             x_latency_seconds_bucket{t=\"a\",le=\"0.01\"} 5\n\
             x_latency_seconds_bucket{t=\"a\",le=\"+Inf\"} 6\n\
             x_latency_seconds_sum{t=\"a\"} 0.02\nx_latency_seconds_count{t=\"a\"} 6\n"
        );
    }

    #[test]
    fn histograms_with_shared_and_different_bounds() {
        let mut h = Family::histogram("x_seconds", "X.");
        for (t, buckets) in [
            ("a", vec![(0.5, 1), (1.0, 2)]),
            ("b", vec![(0.5, 3), (1.0, 4)]),
            ("c", vec![(0.25, 5)]),
        ] {
            h.push_value(
                &labels(&[("t", t)]),
                Value::Histogram {
                    buckets,
                    sum: 1.0,
                    count: 9,
                    native: None,
                },
            );
        }
        let mut out = Vec::new();
        h.finish_into(&mut out);
        let text = encode(&out, Format::Text);
        let buckets: Vec<&str> = text.lines().filter(|l| l.contains("_bucket")).collect();
        assert_eq!(
            buckets,
            [
                "x_seconds_bucket{t=\"a\",le=\"0.5\"} 1",
                "x_seconds_bucket{t=\"a\",le=\"1\"} 2",
                "x_seconds_bucket{t=\"a\",le=\"+Inf\"} 9",
                "x_seconds_bucket{t=\"b\",le=\"0.5\"} 3",
                "x_seconds_bucket{t=\"b\",le=\"1\"} 4",
                "x_seconds_bucket{t=\"b\",le=\"+Inf\"} 9",
                "x_seconds_bucket{t=\"c\",le=\"0.25\"} 5",
                "x_seconds_bucket{t=\"c\",le=\"+Inf\"} 9",
            ]
        );
    }

    #[test]
    fn openmetrics_format() {
        let om = encode(&sample_families(), Format::OpenMetrics);
        assert!(om.starts_with(
            "# TYPE x_reads counter\n# HELP x_reads Reads \\\"done\\\"\\\\.\n\
             x_reads_total{device=\"a\\\"b\\\\c\\nd\"} 3\n# TYPE x_up gauge\n"
        ));
        assert!(om.ends_with("x_latency_seconds_count{t=\"a\"} 6\n# EOF\n"));
    }
}
