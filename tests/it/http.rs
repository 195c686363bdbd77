//! HTTP behaviour over real loopback TCP: routes, methods, content types, HEAD, header limits.

use crate::common;

use common::{Agent, http_request};
use diskprobe_exporter::server;
use std::io::{Read, Write};
use std::time::Duration;

fn routes_methods_and_content_types() {
    let agent = Agent::start(&["--web.telemetry-path=/probe-metrics"]);
    let r = http_request(agent.addr, "GET", "/probe-metrics", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(r.body.contains("diskprobe_build_info{"));
    assert!(r.body.contains("process_resident_memory_bytes "));

    let landing = http_request(agent.addr, "GET", "/", &[]);
    assert_eq!(landing.status, 200);
    assert!(landing.body.contains("href=\"/probe-metrics\""));
    assert!(landing.body.contains("href=\"/-/healthy\""));

    assert_eq!(
        http_request(agent.addr, "GET", "/-/healthy", &[]).status,
        200
    );
    assert_eq!(http_request(agent.addr, "GET", "/-/ready", &[]).status, 200);
    assert_eq!(http_request(agent.addr, "GET", "/metrics", &[]).status, 404);
    assert_eq!(http_request(agent.addr, "GET", "/nope", &[]).status, 404);

    for method in ["POST", "PUT", "DELETE", "OPTIONS"] {
        let r = http_request(agent.addr, method, "/probe-metrics", &[]);
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"));
    }
    let head = http_request(agent.addr, "HEAD", "/probe-metrics", &[]);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    let len: usize = head.header("content-length").unwrap().parse().unwrap();
    assert!(len > 1000, "HEAD reports the length of the GET body");
}

fn oversized_headers_get_431_and_junk_gets_400() {
    let agent = Agent::start(&[]);
    let big = "x".repeat(64 * 1024);
    let r = http_request(agent.addr, "GET", "/metrics", &[("X-Big", &big)]);
    assert_eq!(r.status, 431);
    // At most 100 header lines (Host and Connection are two of them).
    let names: Vec<String> = (0..99).map(|i| format!("X-H{i}")).collect();
    let many: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
    let r = http_request(agent.addr, "GET", "/-/healthy", &many[..98]);
    assert_eq!(r.status, 200, "100 header lines");
    let r = http_request(agent.addr, "GET", "/-/healthy", &many);
    assert_eq!(r.status, 431, "101 header lines");

    let mut s = std::net::TcpStream::connect(agent.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"\x16\x03\x01 this is not http\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let r = common::parse_response(&raw);
    assert_eq!(r.status, 400);
    // The server is still fine afterwards.
    assert_eq!(agent.get("/-/healthy").0, 200);
}

fn slow_clients_are_cut_off_after_the_header_timeout() {
    let agent = Agent::start(&[]);
    let mut slow = std::net::TcpStream::connect(agent.addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .unwrap(); // never finishes
    let started = std::time::Instant::now();
    // Others are served meanwhile.
    assert_eq!(agent.get("/-/healthy").0, 200);
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(9) && waited < Duration::from_secs(20),
        "the server closed the slow connection after {waited:?} (header timeout is 10 s)"
    );
    let text = String::from_utf8_lossy(&rest);
    assert!(
        text.is_empty() || text.starts_with("HTTP/1.1 408"),
        "{text}"
    );
}

fn an_answer_nobody_reads_is_dropped_and_an_idle_connection_gives_way_after_its_grace() {
    let agent = Agent::start(&["--web.max-connections=8"]);
    // A client that pipelines requests and never reads the answers: once the socket buffers are
    // full, the server's write stalls, and the connection is dropped within a few seconds.
    let mut greedy = std::net::TcpStream::connect(agent.addr).unwrap();
    greedy
        .set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let started = std::time::Instant::now();
    let request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(64);
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(30) {
        match greedy.write_all(&request) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
        // A scraper is answered meanwhile, within a second.
        let asked = std::time::Instant::now();
        assert_eq!(agent.get("/metrics").0, 200);
        assert!(
            asked.elapsed() < Duration::from_secs(1),
            "{:?}",
            asked.elapsed()
        );
    }
    assert!(closed, "the connection that reads nothing was not dropped");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "dropped after {:?}",
        started.elapsed()
    );
    // Within the limit no connection is closed for another: eight idle connections are all
    // held. A scraper's connection beyond them waits in the backlog until the oldest idle one
    // has had its grace to speak; that one alone is closed (never before its grace), and the
    // scraper is answered.
    let opened = std::time::Instant::now();
    let mut idle: Vec<_> = (0..8)
        .map(|_| std::net::TcpStream::connect(agent.addr).unwrap())
        .collect();
    let asked = std::time::Instant::now();
    assert_eq!(agent.get("/metrics").0, 200);
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "answered after {:?}",
        asked.elapsed()
    );
    let mut buf = [0u8; 16];
    idle[0]
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let n = idle[0].read(&mut buf).unwrap_or(usize::MAX);
    assert_eq!(
        n, 0,
        "the oldest idle connection was not closed without an answer"
    );
    assert!(
        opened.elapsed() >= server::connection_slots::GRACE,
        "an idle connection was closed {:?} after it was opened, before its grace",
        opened.elapsed()
    );
    for s in &mut idle[1..] {
        s.set_nonblocking(true).unwrap();
        let err = s.read(&mut buf).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "still open");
    }
    drop(idle);
}

crate::tests! {
    routes_methods_and_content_types,
    oversized_headers_get_431_and_junk_gets_400,
    slow_clients_are_cut_off_after_the_header_timeout,
    an_answer_nobody_reads_is_dropped_and_an_idle_connection_gives_way_after_its_grace,
}
