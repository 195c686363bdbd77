//! `/metrics` over real HTTP in every format it negotiates: gzip when accepted, protobuf with
//! native and classic buckets when preferred, a configured classic layout, and an answer that
//! decodes for any `Accept`/`Accept-Encoding` header, however malformed (431 only for oversized
//! request heads).

use crate::common;

use common::{Agent, decode_protobuf, http_request_bytes, samples};
use std::io::{Read, Write};
use std::time::Duration;

const PROTOBUF: &str =
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited";

fn gunzip(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .read_to_end(&mut out)
        .expect("a gzip stream");
    out
}

/// Sample names of a text exposition, sorted and deduplicated.
fn names(text: &str) -> Vec<String> {
    let mut n: Vec<String> = samples(text)
        .into_iter()
        .map(|(k, _)| k.split('{').next().unwrap().to_owned())
        .collect();
    n.dedup();
    n
}

fn gzip_when_accepted_identity_otherwise() {
    let agent = Agent::start(&[]);
    let (plain, body) = http_request_bytes(agent.addr, "GET", "/metrics", &[]);
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(plain.header("vary"), Some("Accept, Accept-Encoding"));
    let text = String::from_utf8(body).unwrap();

    for accept_encoding in ["gzip", "gzip, deflate, br", "br;q=1, gzip;q=0.5", "*"] {
        let (resp, body) = http_request_bytes(
            agent.addr,
            "GET",
            "/metrics",
            &[("Accept-Encoding", accept_encoding)],
        );
        assert_eq!(resp.status, 200, "{accept_encoding}");
        assert_eq!(resp.header("content-encoding"), Some("gzip"));
        assert_eq!(
            resp.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        let len: usize = resp.header("content-length").unwrap().parse().unwrap();
        assert_eq!(len, body.len());
        let unzipped = String::from_utf8(gunzip(&body)).unwrap();
        assert_eq!(names(&unzipped), names(&text));
        assert!(
            body.len() * 3 < unzipped.len(),
            "{} vs {}",
            body.len(),
            unzipped.len()
        );
    }
    for refused in ["gzip;q=0", "br", "identity", "gzip;q=0.5, identity"] {
        let (resp, body) = http_request_bytes(
            agent.addr,
            "GET",
            "/metrics",
            &[("Accept-Encoding", refused)],
        );
        assert_eq!(resp.header("content-encoding"), None, "{refused}");
        assert!(
            String::from_utf8(body)
                .unwrap()
                .contains("# TYPE diskprobe_build_info gauge")
        );
    }
    // HEAD tells the compressed length.
    let (head, body) = http_request_bytes(
        agent.addr,
        "HEAD",
        "/metrics",
        &[("Accept-Encoding", "gzip")],
    );
    assert_eq!(head.header("content-encoding"), Some("gzip"));
    assert!(body.is_empty());
    let len: usize = head.header("content-length").unwrap().parse().unwrap();
    assert!(len > 100 && len * 3 < text.len(), "{len}");
}

fn protobuf_carries_native_and_classic_buckets_of_the_configured_layout() {
    let _guard = common::shared();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let config = common::config_flag(
        dir.path(),
        &format!(
            "[histograms]\nclassic_buckets = [0.00005, 0.0001, 0.001, 0.01]\n\
             [defaults]\ninterval = \"1h\"\nruntime = \"200ms\"\nsize = \"16MiB\"\nmax_duty_cycle = 0.5\n\
             skip_busy_above = {{}}\nyield_to_other_io = false\n\
             [[targets]]\nname = \"f\"\npath = \"{}\"\nprofiles = [\"randread-4k-qd1\"]\n",
            dir.path().join("probe.dat").display()
        ),
    );
    let agent = Agent::start(&[&config]);
    let m = common::wait_until(&agent, Duration::from_secs(60), "a probe run", |m| {
        common::runs(m, "f", "success") >= 1.0
    });
    let ios = common::sum(&m, "diskprobe_ios_total", &["target=\"f\""]);
    assert!(ios > 0.0);

    // The text format: the configured bounds, then +Inf.
    let (_, body) = agent.get("/metrics");
    let les: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("diskprobe_io_latency_seconds_bucket{target=\"f\""))
        .map(|l| l.split(",le=\"").nth(1).unwrap().split('"').next().unwrap())
        .collect();
    assert_eq!(les, ["0.00005", "0.0001", "0.001", "0.01", "+Inf"]);

    for accept_encoding in [None, Some("gzip")] {
        let mut headers = vec![("Accept", PROTOBUF)];
        headers.extend(accept_encoding.map(|e| ("Accept-Encoding", e)));
        let (resp, body) = http_request_bytes(agent.addr, "GET", "/metrics", &headers);
        assert_eq!(resp.status, 200);
        assert_eq!(
            resp.header("content-type"),
            Some(
                "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
            )
        );
        assert_eq!(resp.header("content-encoding"), accept_encoding);
        let body = if accept_encoding.is_some() {
            gunzip(&body)
        } else {
            body
        };
        let families = decode_protobuf(&body);
        // The same families as the text format (counters keep _total).
        let mut proto_names: Vec<&str> = families.iter().map(|f| f.name()).collect();
        proto_names.sort();
        let text = common::http_request(agent.addr, "GET", "/metrics", &[]);
        let mut text_names = body_families(&text);
        text_names.sort();
        assert_eq!(proto_names, text_names);

        let h = families
            .iter()
            .find(|f| f.name() == "diskprobe_io_latency_seconds")
            .and_then(|f| f.metric.first())
            .and_then(|m| m.histogram.clone())
            .unwrap();
        assert_eq!(h.sample_count() as f64, ios);
        let bounds: Vec<f64> = h.bucket.iter().map(|b| b.upper_bound()).collect();
        assert_eq!(bounds, [0.00005, 0.0001, 0.001, 0.01]);
        assert_eq!(h.schema(), 4);
        assert!(h.zero_threshold() > 0.0);
        assert!(!h.positive_span.is_empty());
        let native: i64 = h
            .positive_delta
            .iter()
            .scan(0i64, |c, d| {
                *c += d;
                Some(*c)
            })
            .sum();
        assert_eq!(native as u64 + h.zero_count(), h.sample_count());
        assert!(h.sample_sum() > 0.0);
    }
}

fn body_families(resp: &common::Response) -> Vec<&str> {
    resp.body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

/// Sends a request whose head is `head` (without the final blank line) as raw bytes.
fn raw_request(addr: std::net::SocketAddr, head: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head).unwrap();
    s.write_all(b"\r\n").unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(raw.len(), |i| i + 4);
    let resp = common::parse_response(&raw[..split]);
    (resp.status, resp.headers, raw[split..].to_vec())
}

fn hostile_accept_headers_get_a_valid_answer() {
    let agent = Agent::start(&[]);
    let long_list = "a/b;q=0.001,".repeat(1200);
    let many_params = format!("text/plain{}", ";x=y".repeat(2500));
    let values: Vec<Vec<u8>> = [
        &b""[..],
        b" ",
        b",,,,",
        b";;;;",
        b"*/*;q=0",
        b"text/plain;q=0, */*;q=0",
        b"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=1e999",
        b"application/vnd.google.protobuf;proto=\"io.prometheus.client.MetricFamily\";encoding=\"delimited",
        b"text/plain;q=NaN, application/openmetrics-text;q=-1",
        b"\"\"\"\\\\\\\"",
        b"text/plain;version=",
        b"/;=;q=",
        b"\x80\xff\xfe text/plain",
        b"\x01\x02\x7f",
        b"gzip;q=0.5;q=0.9, x-gzip;q=, *;q=1.0000, identity;q=0.0001",
        long_list.as_bytes(),
        many_params.as_bytes(),
    ]
    .iter()
    .map(|v| v.to_vec())
    .collect();
    for value in &values {
        for header in ["Accept", "Accept-Encoding"] {
            let mut head =
                format!("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{header}: ")
                    .into_bytes();
            head.extend_from_slice(value);
            head.extend_from_slice(b"\r\n");
            let (status, headers, body) = raw_request(agent.addr, &head);
            let shown = String::from_utf8_lossy(value);
            let shown = &shown[..shown.len().min(80)];
            // hyper itself refuses header values with control characters (400); everything it
            // lets through is answered.
            if status == 400 {
                assert!(
                    value.iter().any(|b| *b < 0x20 && *b != b'\t'),
                    "{header}: {shown:?}"
                );
                continue;
            }
            assert_eq!(status, 200, "{header}: {shown:?}");
            let get = |name: &str| {
                headers
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.as_str())
            };
            let body = match get("content-encoding") {
                Some("gzip") => gunzip(&body),
                None => body,
                Some(other) => panic!("{header}: {shown:?}: content-encoding {other}"),
            };
            match get("content-type").unwrap_or_default() {
                "text/plain; version=0.0.4; charset=utf-8" => {
                    assert!(
                        String::from_utf8(body)
                            .unwrap()
                            .contains("# TYPE diskprobe_build_info gauge")
                    )
                }
                "application/openmetrics-text; version=1.0.0; charset=utf-8" => {
                    assert!(String::from_utf8(body).unwrap().ends_with("# EOF\n"))
                }
                t if t.starts_with("application/vnd.google.protobuf") => {
                    assert!(
                        decode_protobuf(&body)
                            .iter()
                            .any(|f| f.name() == "diskprobe_build_info")
                    )
                }
                other => panic!("{header}: {shown:?}: content-type {other}"),
            }
        }
    }
    // A header beyond the documented limit: 431, and the agent carries on.
    let huge = "text/plain;q=0.5,".repeat(1200);
    let r = common::http_request(agent.addr, "GET", "/metrics", &[("Accept", &huge)]);
    assert_eq!(r.status, 431);
    assert_eq!(agent.get("/-/healthy").0, 200);
}

/// Requests that arrive together share a scrape only with requests for the same format and
/// compression: under concurrent load in four formats every answer is complete and in the format
/// its request negotiated.
fn concurrent_scrapes_in_mixed_formats_each_get_their_own_format() {
    let agent = Agent::start(&[]);
    let addr = agent.addr;
    let kinds: [(&str, &str, &str, Option<&str>); 4] = [
        (
            "*/*",
            "identity",
            "text/plain; version=0.0.4; charset=utf-8",
            None,
        ),
        (
            "*/*",
            "gzip",
            "text/plain; version=0.0.4; charset=utf-8",
            Some("gzip"),
        ),
        (
            PROTOBUF,
            "identity",
            "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited",
            None,
        ),
        (
            "application/openmetrics-text; version=1.0.0",
            "gzip",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Some("gzip"),
        ),
    ];
    let start = std::sync::Arc::new(std::sync::Barrier::new(kinds.len() * 4));
    let threads: Vec<_> = (0..kinds.len() * 4)
        .map(|i| {
            let (accept, encoding, content_type, coding) = kinds[i % kinds.len()];
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                for _ in 0..10 {
                    let (resp, body) = http_request_bytes(
                        addr,
                        "GET",
                        "/metrics",
                        &[("Accept", accept), ("Accept-Encoding", encoding)],
                    );
                    assert_eq!(resp.status, 200);
                    assert_eq!(resp.header("content-type"), Some(content_type), "{accept}");
                    assert_eq!(
                        resp.header("content-encoding"),
                        coding,
                        "{accept} {encoding}"
                    );
                    let body = if coding.is_some() {
                        gunzip(&body)
                    } else {
                        body
                    };
                    if accept == PROTOBUF {
                        let families = decode_protobuf(&body);
                        assert!(families.iter().any(|f| f.name() == "diskprobe_build_info"));
                    } else {
                        let text = String::from_utf8(body).unwrap();
                        assert!(text.contains("diskprobe_build_info{"), "{accept}");
                        assert_eq!(text.ends_with("# EOF\n"), accept.contains("openmetrics"));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a scraping thread failed");
    }
}

crate::tests! {
    gzip_when_accepted_identity_otherwise,
    protobuf_carries_native_and_classic_buckets_of_the_configured_layout,
    hostile_accept_headers_get_a_valid_answer,
    concurrent_scrapes_in_mixed_formats_each_get_their_own_format,
}
