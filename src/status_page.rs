//! The landing page at `/`: each target's last series (IOPS, throughput, p50/p99, success,
//! engine, error) and a small server-rendered SVG chart of recent p50/p99 latency per target and
//! profile, so a person can glance at the agent without Grafana. No scripts, no external assets.

use crate::probe::measurement::RunStatus;
use crate::series::{HistoryPoint, SeriesStore, TargetSeries};
use std::collections::VecDeque;
use std::fmt::Write;

/// Renders the page.
pub(crate) fn render(series: &SeriesStore, telemetry_path: &str) -> String {
    let version = crate::collectors::exporter::VERSION;
    let mut html = String::with_capacity(16 * 1024);
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"30\"><title>diskprobe_exporter</title>\n<style>\n\
         body{{font-family:sans-serif;margin:1.5em;color:#222}}\n\
         table{{border-collapse:collapse;margin:.5em 0 1.5em}}\n\
         th,td{{border:1px solid #ccc;padding:.3em .6em;text-align:right;vertical-align:middle}}\n\
         th{{background:#f3f3f3}} td.l,th.l{{text-align:left}}\n\
         .ok{{color:#1a7f37;font-weight:bold}} .bad{{color:#c62828;font-weight:bold}} .muted{{color:#777}}\n\
         </style></head>\n<body><h1>diskprobe_exporter</h1>\n\
         <p>Continuous direct-I/O disk probes and /proc/diskstats for Prometheus. Version {version}. \
         <a href=\"{path}\">Metrics</a> · <a href=\"/-/healthy\">Health</a> · \
         <a href=\"/-/ready\">Readiness</a></p>\n",
        path = escape(telemetry_path)
    );
    series.read(|targets| {
        if targets.is_empty() {
            html.push_str("<p class=\"muted\">No probe targets are configured: only diskstats are exported.</p>\n");
        }
        for (name, target) in targets {
            target_section(&mut html, name, target);
        }
    });
    html.push_str("</body></html>\n");
    html
}

/// What the section's heading says of the target: path, device, kind, filesystem, cache, interval.
fn target_facts(t: &TargetSeries) -> Vec<String> {
    let path = t.spec.path.display().to_string();
    let info = t.info.clone().unwrap_or_else(|| crate::series::TargetInfo {
        path,
        ..Default::default()
    });
    let device = match info.device_name() {
        "" => "no block device".to_owned(),
        name => name.to_owned(),
    };
    let mut facts = vec![escape(&info.path), escape(&device)];
    if let Some(kind) = info.kind {
        facts.push(escape(kind.as_str()));
    }
    if !info.fstype.is_empty() {
        facts.push(escape(&info.fstype));
    }
    if let Some(cache) = info.cache {
        facts.push(format!(
            "probably measures {}, not a disk",
            escape(cache.as_str())
        ));
    }
    facts.push(format!(
        "every {}",
        humantime::format_duration(t.spec.settings.interval)
    ));
    facts
}

fn target_section(html: &mut String, name: &str, t: &TargetSeries) {
    let facts = target_facts(t);
    let _ = write!(
        html,
        "<h2>{}</h2>\n<p>{}</p>\n<table>\n<tr><th class=\"l\">profile</th><th class=\"l\">last run</th>\
         <th>engine</th><th>IOPS</th><th>throughput</th><th>p50</th><th>p99</th><th>runs ok / error / timeout / skipped</th>\
         <th>recent latency (p50, p99)</th></tr>\n",
        escape(name),
        facts.join(" · "),
    );
    for (profile, s) in &t.profiles {
        let (status, engine, iops, bw, p50, p99) = match &s.last {
            None => (
                "<span class=\"muted\">not run yet</span>".to_owned(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ),
            Some(last) => {
                let status = if last.result == RunStatus::Success {
                    "<span class=\"ok\">success</span>".to_owned()
                } else {
                    format!(
                        "<span class=\"bad\">{}</span><br><span class=\"muted\">{}</span>",
                        last.result.as_str(),
                        escape(last.error.as_deref().unwrap_or(""))
                    )
                };
                match last.engine {
                    // The engine ran: show what it measured.
                    Some(engine) => (
                        status,
                        engine.as_str().to_owned(),
                        format!("{:.0}", last.iops),
                        format_bytes(last.throughput),
                        format_seconds(last.latency.p50),
                        format_seconds(last.latency.p99),
                    ),
                    None => (
                        status,
                        String::new(),
                        String::new(),
                        String::new(),
                        String::new(),
                        String::new(),
                    ),
                }
            }
        };
        let _ = writeln!(
            html,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{status}</td><td>{engine}</td><td>{iops}</td>\
             <td>{bw}</td><td>{p50}</td><td>{p99}</td><td>{} / {} / {} / {}</td><td>{}</td></tr>",
            escape(profile),
            s.runs[0],
            s.runs[1],
            s.runs[2],
            s.runs[3],
            chart(&s.history),
        );
    }
    html.push_str("</table>\n");
}

/// A 240×60 SVG of p50 (blue) and p99 (orange) latency over recent runs, log scale, with failed
/// runs marked red on the baseline.
pub(crate) fn chart(points: &VecDeque<HistoryPoint>) -> String {
    const W: f64 = 240.0;
    const H: f64 = 60.0;
    if points.is_empty() {
        return "<span class=\"muted\">no runs yet</span>".to_owned();
    }
    let values = points
        .iter()
        .flat_map(|p| [p.p50, p.p99])
        .filter(|v| *v > 0.0);
    let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let measured = lo <= hi;
    let (lo, hi) = if measured { (lo, hi) } else { (1e-6, 1e-3) };
    let (llo, lhi) = (lo.log10() - 0.1, hi.log10() + 0.1);
    let x = |i: usize| {
        if points.len() == 1 {
            W / 2.0
        } else {
            4.0 + (W - 8.0) * i as f64 / (points.len() - 1) as f64
        }
    };
    let y = |v: f64| {
        let v = v.max(lo);
        H - 12.0 - (H - 16.0) * (v.log10() - llo) / (lhi - llo)
    };
    let line = |pick: fn(&HistoryPoint) -> f64| -> String {
        points
            .iter()
            .enumerate()
            .filter(|(_, p)| pick(p) > 0.0)
            .map(|(i, p)| format!("{:.1},{:.1}", x(i), y(pick(p))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" \
         role=\"img\" aria-label=\"recent latency\"><rect width=\"{W}\" height=\"{H}\" fill=\"#fafafa\" stroke=\"#ddd\"/>\
         <polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"{}\"/>\
         <polyline fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"1.5\" points=\"{}\"/>",
        line(|p| p.p50),
        line(|p| p.p99)
    );
    for (i, p) in points.iter().enumerate() {
        if !p.success {
            let _ = write!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"#c62828\"/>",
                x(i),
                H - 4.0
            );
        }
    }
    let label = if measured {
        format!("{} … {}", format_seconds(lo), format_seconds(hi))
    } else {
        "no latency measured (runs failed)".to_owned()
    };
    let _ = write!(
        svg,
        "<text x=\"4\" y=\"10\" font-size=\"9\" fill=\"#555\">{label}</text></svg>"
    );
    svg
}

fn format_seconds(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}

fn format_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B/s", "KiB/s", "MiB/s", "GiB/s", "TiB/s"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1} {}", UNITS[i])
}

/// Escapes text for HTML element content and attribute values.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn chart_draws_both_lines_and_failures() {
        let pts: VecDeque<HistoryPoint> = (0..10)
            .map(|i| HistoryPoint {
                timestamp: f64::from(i),
                p50: 1e-4,
                p99: 1e-3 * f64::from(i + 1),
                success: i != 3,
            })
            .collect();
        let svg = chart(&pts);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 1);
        assert!(svg.contains("100 µs … 10.00 ms"), "{svg}");
        assert!(chart(&VecDeque::new()).contains("no runs yet"));
    }

    #[test]
    fn empty_page_says_no_targets() {
        let page = render(&SeriesStore::new(), "/metrics");
        assert!(page.contains("No probe targets are configured"));
        assert!(page.contains("href=\"/metrics\""));
    }
}
