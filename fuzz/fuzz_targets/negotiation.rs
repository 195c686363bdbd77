//! Fuzzes content negotiation and what it answers: any `Accept` and `Accept-Encoding` header (the
//! input up to its first newline, and the rest) picks a format and a compression without
//! panicking, and the body then decodes in that format (gzip stream, protobuf messages, text).
#![no_main]

use diskprobe_exporter::exposition::{
    self, ContentCoding, Family, Format, Negotiated, NativeBuckets, Value, labels, proto,
};
use libfuzzer_sys::fuzz_target;
use prost::Message;
use std::io::Read;

fn families() -> Vec<Family> {
    let mut out = Vec::new();
    let mut c = Family::counter("x_ios_total", "I/Os.");
    c.push(&labels(&[("target", "a")]), 7.0);
    c.finish_into(&mut out);
    let mut h = Family::histogram("x_latency_seconds", "Latency.");
    h.push_value(
        &labels(&[("target", "a")]),
        Value::Histogram {
            buckets: vec![(0.001, 5), (0.01, 7)],
            sum: 0.02,
            count: 7,
            native: Some(NativeBuckets {
                schema: 4,
                zero_threshold: 1e-9,
                zero_count: 0,
                positive: vec![(-160, 5), (-150, 2)],
            }),
        },
    );
    h.finish_into(&mut out);
    out
}

fuzz_target!(|data: &[u8]| {
    let (accept, accept_encoding) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    };
    let accept = std::str::from_utf8(accept).ok();
    let accept_encoding = accept_encoding.and_then(|e| std::str::from_utf8(e).ok());
    let negotiated = Negotiated::from_headers(accept, accept_encoding);
    let (body, coding) = exposition::encode_for(&families(), negotiated);
    let body = match coding {
        ContentCoding::Identity => body,
        ContentCoding::Gzip => {
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(&body[..])
                .read_to_end(&mut plain)
                .expect("a gzip stream");
            plain
        }
    };
    match negotiated.format {
        Format::Text | Format::OpenMetrics => {
            let text = String::from_utf8(body).expect("UTF-8 text");
            assert!(text.contains("x_latency_seconds_bucket{target=\"a\",le=\"+Inf\"} 7\n"));
        }
        Format::Protobuf => {
            let mut rest = &body[..];
            let mut names = Vec::new();
            while !rest.is_empty() {
                let family = proto::MetricFamily::decode_length_delimited(&mut rest)
                    .expect("a MetricFamily");
                names.push(family.name().to_owned());
            }
            assert_eq!(names, ["x_ios_total", "x_latency_seconds"]);
        }
    }
});
