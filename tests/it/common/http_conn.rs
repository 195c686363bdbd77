//! HTTP/1.1 over connections that stay open, plain or TLS ([`Target`]), for tests that hold many
//! connections at once (bursts, floods): requests written by hand ([`request`]), answers read by
//! their `Content-Length` ([`read_response`]); and an agent on a TLS + basic auth listener
//! ([`tls_and_basic_auth`], [`tls_agent_verified`]).

use base64::Engine as _;
use rustls::pki_types::pem::PemObject as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// A byte stream to the agent, plain or TLS.
pub trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// How clients reach the agent: its address, and the TLS client configuration when it serves TLS.
#[derive(Clone)]
pub struct Target {
    /// Where the agent listens.
    pub addr: SocketAddr,
    /// TLS, trusting the agent's certificate (`None`: plain HTTP).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl Target {
    /// Plain HTTP to `addr`.
    pub fn plain(addr: SocketAddr) -> Target {
        Target { addr, tls: None }
    }

    /// A new connection (on TLS, with the handshake done, so that a failure shows here); reads
    /// wait at most 5 s, writes 1 s.
    pub fn connect(&self) -> std::io::Result<Box<dyn Stream>> {
        Ok(match self.open()? {
            (tcp, None) => Box::new(tcp),
            (sock, Some(conn)) => Box::new(rustls::StreamOwned::new(conn, sock)),
        })
    }

    /// A new TCP connection (reads wait at most 5 s, writes 1 s) and, on TLS, its client session
    /// with the handshake done.
    pub fn open(&self) -> std::io::Result<(TcpStream, Option<rustls::ClientConnection>)> {
        let mut tcp = TcpStream::connect(self.addr)?;
        tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
        tcp.set_write_timeout(Some(Duration::from_secs(1)))?;
        let Some(config) = &self.tls else {
            return Ok((tcp, None));
        };
        let name = rustls::pki_types::ServerName::IpAddress(self.addr.ip().into());
        let mut conn =
            rustls::ClientConnection::new(config.clone(), name).map_err(std::io::Error::other)?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)?;
        }
        Ok((tcp, Some(conn)))
    }
}

/// An agent on a TLS + basic auth listener ([`tls_and_basic_auth`], files in `dir`), how to
/// reach it, and the `Authorization` value of its user, whose credentials have been verified
/// once (bcrypt) and are cached: what a burst or a flood then meets is the connection slots, not
/// the first credential checks.
pub fn tls_agent_verified(dir: &std::path::Path) -> (super::Agent, Target, String) {
    let (web, tls) = tls_and_basic_auth(dir);
    let agent = super::Agent::start(&[&web]);
    let target = Target {
        addr: agent.addr,
        tls: Some(tls),
    };
    let good = basic("prom:s3cret");
    let mut s = target.connect().unwrap();
    s.write_all(&request("/metrics", Some(&good), true))
        .unwrap();
    assert_eq!(read_response(&mut *s).unwrap(), 200);
    (agent, target, good)
}

/// A GET of `path`, with an `Authorization` header when `auth` is given, and
/// `Connection: close` when `close`.
pub fn request(path: &str, auth: Option<&str>, close: bool) -> Vec<u8> {
    let mut r = format!("GET {path} HTTP/1.1\r\nHost: x\r\n");
    if let Some(auth) = auth {
        r.push_str(&format!("Authorization: {auth}\r\n"));
    }
    if close {
        r.push_str("Connection: close\r\n");
    }
    r.push_str("\r\n");
    r.into_bytes()
}

/// Reads one response with a `Content-Length` body; its status.
pub fn read_response(s: &mut dyn Stream) -> std::io::Result<u16> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = super::parse_response(&raw[..end + 4]);
            let len: usize = head
                .header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if raw.len() >= end + 4 + len {
                return Ok(head.status);
            }
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        raw.extend_from_slice(&buf[..n]);
    }
}

/// The `Authorization` value of basic auth for `user:password`.
pub fn basic(pair: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// Writes into `dir` a certificate and a web configuration with TLS and basic auth for `prom`
/// (password `s3cret`, bcrypt cost 6); the agent's flag for it, and the TLS client configuration
/// that trusts the certificate.
pub fn tls_and_basic_auth(dir: &std::path::Path) -> (String, Arc<rustls::ClientConfig>) {
    super::write_tls_files(dir);
    let hash = bcrypt::hash("s3cret", 6).unwrap();
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  prom: {hash}\n"
        ),
    )
    .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(dir.join("server.crt")).unwrap();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    (
        format!("--web.config.file={}", web.display()),
        Arc::new(config),
    )
}
