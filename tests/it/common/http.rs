//! A small HTTP/1.1 client over plain TCP ([`http_request`]): one request per connection, the
//! whole response read and parsed (chunked bodies decoded).

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header lines, lower-cased names.
    pub headers: Vec<(String, String)>,
    /// Body as text.
    pub body: String,
}

impl Response {
    /// The first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one HTTP/1.1 request over plain TCP (`Connection: close`) and reads the whole response.
pub fn http_request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    parse_response(&exchange(addr, method, path, headers, &[], READ_TIMEOUT))
}

/// A POST of `body` (sent with its `Content-Length`) to `path` (the rules' replay on
/// VictoriaMetrics, tests/rules/replay.rs; the agent's tests post nothing).
#[allow(dead_code)]
pub fn http_post(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    // A remote write of a fleet week into a VictoriaMetrics that shares two cores with three
    // others may take longer than a scrape: a slow answer is not the failure under test.
    parse_response(&exchange(addr, "POST", path, headers, body, POST_TIMEOUT))
}

/// Like [`http_request`], with the body as bytes (compressed or binary; `Content-Length` bodies
/// only). The returned [`Response`] has the status and headers, and an empty `body`.
pub fn http_request_bytes(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (Response, Vec<u8>) {
    let raw = exchange(addr, method, path, headers, &[], READ_TIMEOUT);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(raw.len(), |i| i + 4);
    (parse_response(&raw[..split]), raw[split..].to_vec())
}

/// How long a request waits for its answer.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
/// How long a [`http_post`] waits for its answer.
#[allow(dead_code)]
const POST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

fn exchange(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: std::time::Duration,
) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(timeout)).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).expect("send request");
    stream.write_all(body).expect("send body");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read response");
    raw
}

/// Parses a raw HTTP/1.1 response with a Content-Length body.
pub fn parse_response(raw: &[u8]) -> Response {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Response {
        status,
        headers,
        body,
    }
}

/// Decodes a chunked transfer-encoded body.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].strip_prefix("\r\n").unwrap_or(&after[size..]);
    }
    out
}
