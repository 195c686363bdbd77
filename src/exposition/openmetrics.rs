//! OpenMetrics 1.0 text encoding of [`MetricFamily`] values.
//!
//! The `prometheus` crate only writes the 0.0.4 text format; Prometheus asks for OpenMetrics
//! first. The differences that matter here: a counter family is named without its `_total`
//! suffix in `# TYPE`/`# HELP` while its samples keep it, `untyped` is spelled `unknown`, HELP
//! escapes double quotes, and the exposition ends with `# EOF`.

use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};
use std::fmt::Write;

/// Encodes `families` as an OpenMetrics text exposition.
pub fn encode(families: &[MetricFamily]) -> String {
    let mut out = String::with_capacity(64 * 1024);
    for family in families {
        let name = family.name();
        let kind = family.get_field_type();
        let base = match kind {
            MetricType::COUNTER => name.strip_suffix("_total").unwrap_or(name),
            _ => name,
        };
        let type_name = match kind {
            MetricType::COUNTER => "counter",
            MetricType::GAUGE => "gauge",
            MetricType::SUMMARY => "summary",
            MetricType::HISTOGRAM => "histogram",
            MetricType::UNTYPED => "unknown",
        };
        let _ = writeln!(out, "# TYPE {base} {type_name}");
        if !family.help().is_empty() {
            let _ = writeln!(out, "# HELP {base} {}", escape(family.help()));
        }
        for metric in family.get_metric() {
            let labels = metric.get_label();
            match kind {
                MetricType::COUNTER => sample(
                    &mut out,
                    &format!("{base}_total"),
                    labels,
                    None,
                    metric.get_counter().get_value(),
                ),
                MetricType::GAUGE => {
                    sample(&mut out, base, labels, None, metric.get_gauge().get_value())
                }
                #[allow(deprecated)] // untyped is a protobuf leftover we never produce
                MetricType::UNTYPED => sample(
                    &mut out,
                    base,
                    labels,
                    None,
                    metric.get_untyped().get_value(),
                ),
                MetricType::SUMMARY => summary(&mut out, base, metric),
                MetricType::HISTOGRAM => histogram(&mut out, base, metric),
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

fn summary(out: &mut String, base: &str, metric: &Metric) {
    let s = metric.get_summary();
    let labels = metric.get_label();
    for q in s.get_quantile() {
        let quantile = format_value(q.quantile());
        sample(out, base, labels, Some(("quantile", &quantile)), q.value());
    }
    sample(out, &format!("{base}_sum"), labels, None, s.sample_sum());
    sample(
        out,
        &format!("{base}_count"),
        labels,
        None,
        s.sample_count() as f64,
    );
}

fn histogram(out: &mut String, base: &str, metric: &Metric) {
    let h = metric.get_histogram();
    let labels = metric.get_label();
    let bucket_name = format!("{base}_bucket");
    let mut saw_inf = false;
    for b in h.get_bucket() {
        let bound = b.upper_bound();
        saw_inf |= bound.is_infinite();
        let le = format_value(bound);
        sample(
            out,
            &bucket_name,
            labels,
            Some(("le", &le)),
            b.cumulative_count() as f64,
        );
    }
    if !saw_inf {
        sample(
            out,
            &bucket_name,
            labels,
            Some(("le", "+Inf")),
            h.get_sample_count() as f64,
        );
    }
    sample(
        out,
        &format!("{base}_sum"),
        labels,
        None,
        h.get_sample_sum(),
    );
    sample(
        out,
        &format!("{base}_count"),
        labels,
        None,
        h.get_sample_count() as f64,
    );
}

fn sample(
    out: &mut String,
    name: &str,
    labels: &[LabelPair],
    extra: Option<(&str, &str)>,
    value: f64,
) {
    out.push_str(name);
    if !labels.is_empty() || extra.is_some() {
        out.push('{');
        let mut first = true;
        let pairs = labels
            .iter()
            .map(|l| (l.name(), l.value()))
            .chain(extra.into_iter());
        for (k, v) in pairs {
            if !first {
                out.push(',');
            }
            first = false;
            let _ = write!(out, "{k}=\"{}\"", escape(v));
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(&format_value(value));
    out.push('\n');
}

/// Formats a sample value: `+Inf`, `-Inf`, `NaN`, or the shortest decimal that round-trips.
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v == f64::INFINITY {
        "+Inf".to_owned()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_owned()
    } else {
        v.to_string()
    }
}

fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(['\\', '"', '\n']) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut e = String::with_capacity(s.len() + 4);
    for c in s.chars() {
        match c {
            '\\' => e.push_str("\\\\"),
            '"' => e.push_str("\\\""),
            '\n' => e.push_str("\\n"),
            c => e.push(c),
        }
    }
    std::borrow::Cow::Owned(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::FamilyBuilder;

    #[test]
    fn counters_lose_total_in_metadata_only() {
        let mut out = Vec::new();
        let mut c = FamilyBuilder::counter("x_reads_total", "Reads \"done\".");
        c.sample(&[("device", "a\"b")], 3.0);
        c.finish_into(&mut out);
        let mut g = FamilyBuilder::gauge("x_up", "Up.");
        g.sample(&[], f64::INFINITY);
        g.finish_into(&mut out);
        assert_eq!(
            encode(&out),
            "# TYPE x_reads counter\n# HELP x_reads Reads \\\"done\\\".\n\
             x_reads_total{device=\"a\\\"b\"} 3\n\
             # TYPE x_up gauge\n# HELP x_up Up.\nx_up +Inf\n# EOF\n"
        );
    }
}
