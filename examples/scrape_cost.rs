//! Measures the CPU cost of one scrape's parts (diskstats collection, process metrics, encoding in
//! each format, gzip) on a procfs fixture:
//! `cargo run --release --example scrape_cost -- <procfs-dir> [iterations]`.

use diskprobe_exporter::collectors::Collector;
use diskprobe_exporter::collectors::disk_metrics::DiskstatsCollector;
use diskprobe_exporter::collectors::process::ProcessMetrics;
use diskprobe_exporter::device_filter::DeviceFilter;
use diskprobe_exporter::exposition::{self, ContentCoding, Format, Negotiated};
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let procfs = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "tests/fixtures/proc-6.1".into()),
    );
    let n: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let disk = DiskstatsCollector::new(procfs, "/nonexistent".into(), DeviceFilter::default());
    let process = ProcessMetrics::new();
    let mut out = Vec::new();
    let t = Instant::now();
    for _ in 0..n {
        out.clear();
        let _ = disk.collect(&mut out);
    }
    println!("diskstats collect: {:?}/scrape", t.elapsed() / n);
    let t = Instant::now();
    let mut p = Vec::new();
    for _ in 0..n {
        p.clear();
        let _ = process.collect(&mut p);
    }
    println!("process collect:   {:?}/scrape", t.elapsed() / n);
    out.extend(p);
    for format in [Format::Text, Format::OpenMetrics, Format::Protobuf] {
        for coding in [ContentCoding::Identity, ContentCoding::Gzip] {
            let t = Instant::now();
            let mut len = 0;
            for _ in 0..n {
                len = exposition::encode_for(&out, Negotiated { format, coding })
                    .0
                    .len();
            }
            println!(
                "encode {format:?} {coding:?}: {:?}/scrape ({len} bytes)",
                t.elapsed() / n
            );
        }
    }
}
