//! `--web.config.file`: TLS and basic authentication in the Prometheus exporter-toolkit format.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt          # relative paths are relative to this file
//!   key_file: server.key
//!   min_version: TLS12             # TLS12 (default) or TLS13
//!   max_version: TLS13
//!   client_auth_type: RequireAndVerifyClientCert   # or NoClientCert (default)
//!   client_ca_file: clients-ca.crt
//! http_server_config:
//!   headers:
//!     X-Frame-Options: deny
//! basic_auth_users:
//!   prometheus: $2y$10$...         # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\n')
//! ```
//!
//! Keys of the toolkit format that this server does not implement (`cipher_suites`,
//! `curve_preferences`, `prefer_server_cipher_suites`, `http2: true`, other client auth types) are
//! rejected with a message saying so, rather than silently ignored.
//!
//! Loading warns (it does not refuse) when the certificate has expired or expires within
//! [`CERT_EXPIRY_WARNING`], and when the key file is readable or writable by every user.

pub use crate::basic_auth::{Auth, BCRYPT_QUEUE, MAX_BCRYPT_COST, Precheck};
use crate::basic_auth::{Credentials, bcrypt_cost};
use crate::bounded_read::{self, Links};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A web configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct WebConfigError {
    path: PathBuf,
    message: String,
    /// The files the configuration names, as far as it was read (the sandbox explains a file it
    /// cannot read because it lies outside the directories allowed at start).
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebConfig {
    tls_server_config: Option<RawTls>,
    http_server_config: Option<RawHttp>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_file: Option<String>,
    key_file: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<serde_yaml_ng::Value>,
    curve_preferences: Option<serde_yaml_ng::Value>,
    prefer_server_cipher_suites: Option<serde_yaml_ng::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// The largest web configuration file read; a larger one is refused.
pub(crate) const MAX_WEB_CONFIG_BYTES: u64 = 1 << 20;
/// The largest certificate, key or client CA file read; a larger one is refused.
pub(crate) const MAX_TLS_FILE_BYTES: u64 = 1 << 20;

/// Certificates that expire within this time (or have expired) are warned about at load.
pub(crate) const CERT_EXPIRY_WARNING: std::time::Duration =
    std::time::Duration::from_secs(7 * 24 * 3600);

/// A validated web configuration.
#[derive(Default)]
pub struct WebSecurity {
    /// TLS, when configured.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// When the served certificate (the first in `cert_file`) expires, in Unix seconds; `None`
    /// without TLS.
    pub cert_not_after: Option<i64>,
    /// Extra response headers.
    pub headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
    /// The files it names (certificate, key, client CA), resolved: the sandbox lets the agent
    /// read their directories.
    pub files: Vec<PathBuf>,
    /// `basic_auth_users` and what was learnt of credentials ([`crate::basic_auth`]).
    pub credentials: Arc<Credentials>,
}

impl std::fmt::Debug for WebSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSecurity")
            .field("tls", &self.tls.is_some())
            .field("users", &self.credentials.users().collect::<Vec<_>>())
            .finish()
    }
}

impl WebSecurity {
    /// Reads and validates the file.
    pub fn load(path: &Path) -> Result<WebSecurity, WebConfigError> {
        let err = |message: String| WebConfigError {
            path: path.to_owned(),
            message,
            files: Vec::new(),
        };
        let text = bounded_read::read_to_string(path, MAX_WEB_CONFIG_BYTES, Links::Follow)
            .map_err(|e| err(format!("cannot read: {}", e.problem())))?;
        let raw: RawWebConfig = if text.trim().is_empty() {
            RawWebConfig::default()
        } else {
            serde_yaml_ng::from_str(&text).map_err(|e| err(e.to_string()))?
        };
        let base = path.parent().unwrap_or(Path::new("."));
        let mut files = Vec::new();
        let tls = raw
            .tls_server_config
            .map(|t| tls_acceptor(t, base, &mut files))
            .transpose()
            .map_err(|message| WebConfigError {
                files: files.clone(),
                ..err(message)
            })?;
        let (tls, cert_not_after) = tls.unzip();
        let cert_not_after = cert_not_after.flatten();
        let mut headers = Vec::new();
        if let Some(http) = raw.http_server_config {
            if http.http2 == Some(true) {
                return Err(err(
                    "http_server_config.http2: only HTTP/1.1 is served; remove the key or set it to false".to_owned(),
                ));
            }
            for (k, v) in http.headers.unwrap_or_default() {
                let name = hyper::header::HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                    err(format!(
                        "http_server_config.headers: invalid header name {k:?}"
                    ))
                })?;
                let value = hyper::header::HeaderValue::from_str(&v).map_err(|_| {
                    err(format!(
                        "http_server_config.headers.{k}: invalid value {v:?}"
                    ))
                })?;
                headers.push((name, value));
            }
        }
        let users = raw.basic_auth_users.unwrap_or_default();
        for (user, hash) in &users {
            if user.contains(':') {
                return Err(err(format!(
                    "basic_auth_users: user name {user:?} contains ':'"
                )));
            }
            if !(hash.starts_with("$2a$") || hash.starts_with("$2b$") || hash.starts_with("$2y$")) {
                return Err(err(format!(
                    "basic_auth_users.{user}: expected a bcrypt hash ($2y$...), not a plain password"
                )));
            }
            match bcrypt_cost(hash) {
                None => {
                    return Err(err(format!(
                        "basic_auth_users.{user}: the bcrypt hash's cost (after $2y$) must be 04 to {MAX_BCRYPT_COST}"
                    )));
                }
                Some(cost) if cost > MAX_BCRYPT_COST => {
                    return Err(err(format!(
                        "basic_auth_users.{user}: bcrypt cost {cost} is above the maximum, {MAX_BCRYPT_COST} (each verification would take seconds of CPU; htpasswd -nBC 10 makes one of cost 10)"
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(WebSecurity {
            tls,
            cert_not_after,
            headers,
            files,
            credentials: Arc::new(Credentials::new(users)),
        })
    }

    /// Takes over what `previous` learnt of credentials ([`Credentials::keep_learnt`]): a
    /// reload that leaves a user's hash as it was does not make its scraper's credentials wait
    /// for bcrypt again (behind a flood of wrong passwords, they might be turned away).
    pub(crate) fn keep_verified(&self, previous: &WebSecurity) {
        self.credentials.keep_learnt(&previous.credentials);
    }

    /// Whether basic authentication is required.
    pub(crate) fn requires_auth(&self) -> bool {
        self.credentials.required()
    }

    /// Checks an `Authorization` header value as far as it can without bcrypt
    /// ([`Credentials::check_cached`]).
    pub(crate) fn check_cached(&self, authorization: Option<&str>) -> Precheck {
        self.credentials.check_cached(authorization)
    }

    /// Checks an `Authorization` header value, running bcrypt for a pair not seen before (the
    /// server splits this into [`WebSecurity::check_cached`] and
    /// [`crate::basic_auth::verify_off_thread`]; unknown users are denied without the pause).
    pub fn check(&self, authorization: Option<&str>) -> Auth {
        match self.check_cached(authorization) {
            Precheck::Decided(auth) => auth,
            Precheck::UnknownUser(_) => Auth::Denied,
            Precheck::Unverified(pair) => self.credentials.verify(pair),
        }
    }
}

/// The verifier of client certificates signed by the CAs in `ca` (PEM).
fn client_verifier(
    ca: &Path,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, String> {
    let failed = |e: &dyn std::fmt::Display| {
        format!("tls_server_config.client_ca_file {}: {e}", ca.display())
    };
    let mut roots = rustls::RootCertStore::empty();
    let pem = bounded_read::read(ca, MAX_TLS_FILE_BYTES, Links::Follow)
        .map_err(|e| failed(&e.problem()))?;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| failed(&e))?;
        roots.add(cert).map_err(|e| failed(&e))?;
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| format!("tls_server_config.client_ca_file: {e}"))
}

/// When the DER certificate `cert` expires (Unix seconds), when it parses.
fn not_after(cert: &CertificateDer<'_>) -> Option<i64> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    Some(parsed.validity().not_after.timestamp())
}

/// Warns about a certificate that has expired or expires within [`CERT_EXPIRY_WARNING`] (rustls
/// serves it all the same; the clients refuse it), and returns when it expires.
fn check_expiry(cert_file: &Path, cert: &CertificateDer<'_>) -> Option<i64> {
    let Some(expiry) = not_after(cert) else {
        tracing::warn!(cert_file = %cert_file.display(), "tls_server_config.cert_file: cannot read the certificate's expiry date");
        return None;
    };
    let now = crate::host::unix_now();
    #[allow(clippy::cast_precision_loss)] // Unix seconds fit a f64 exactly
    let left = expiry as f64 - now;
    let at = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(expiry.max(0).unsigned_abs()),
    );
    if left <= 0.0 {
        tracing::warn!(cert_file = %cert_file.display(), not_after = %at, "tls_server_config.cert_file: the certificate has expired; clients will refuse it");
    } else if left < CERT_EXPIRY_WARNING.as_secs_f64() {
        tracing::warn!(cert_file = %cert_file.display(), not_after = %at, "tls_server_config.cert_file: the certificate expires in less than 7 days");
    }
    Some(expiry)
}

/// Warns about a key file that every user of the host may read (or write): its mode has the
/// "others" read or write bit. Group bits are not warned about: a key shared with the service's
/// user through a group (Debian's `ssl-cert`, mode 0640) is the usual way to hand it over.
fn check_key_mode(key_file: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(key_file) else {
        return;
    };
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o006 != 0 {
        tracing::warn!(key_file = %key_file.display(), mode = %format!("{mode:04o}"), "tls_server_config.key_file: the private key is readable or writable by every user of the host; chmod o-rw it");
    }
}

/// The TLS versions `t` allows (`min_version` to `max_version`, TLS 1.2 and 1.3 by default).
fn protocol_versions(t: &RawTls) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    let version = |v: &Option<String>, default: u8| -> Result<u8, String> {
        match v.as_deref() {
            None => Ok(default),
            Some("TLS12") => Ok(12),
            Some("TLS13") => Ok(13),
            Some(other) => Err(format!(
                "tls_server_config: TLS version {other:?} is not supported; use TLS12 or TLS13"
            )),
        }
    };
    let (min, max) = (version(&t.min_version, 12)?, version(&t.max_version, 13)?);
    if min > max {
        return Err("tls_server_config: min_version is above max_version".to_owned());
    }
    Ok(
        [(12, &rustls::version::TLS12), (13, &rustls::version::TLS13)]
            .into_iter()
            .filter(|(v, _)| (min..=max).contains(v))
            .map(|(_, p)| p)
            .collect(),
    )
}

/// The acceptor for `t`, whose relative paths are relative to `base`, and when its certificate
/// expires; the files it reads are added to `files`.
fn tls_acceptor(
    t: RawTls,
    base: &Path,
    files: &mut Vec<PathBuf>,
) -> Result<(tokio_rustls::TlsAcceptor, Option<i64>), String> {
    for (key, set) in [
        ("cipher_suites", t.cipher_suites.is_some()),
        ("curve_preferences", t.curve_preferences.is_some()),
        (
            "prefer_server_cipher_suites",
            t.prefer_server_cipher_suites.is_some(),
        ),
    ] {
        if set {
            return Err(format!(
                "tls_server_config.{key} is not supported (rustls chooses safe suites and curves); remove it"
            ));
        }
    }
    let mut resolve = |p: &str| {
        let p = Path::new(p);
        let p = if p.is_absolute() {
            p.to_owned()
        } else {
            base.join(p)
        };
        files.push(p.clone());
        p
    };
    let cert_file = resolve(
        t.cert_file
            .as_deref()
            .ok_or("tls_server_config.cert_file is required")?,
    );
    let key_file = resolve(
        t.key_file
            .as_deref()
            .ok_or("tls_server_config.key_file is required")?,
    );
    let cert_pem = bounded_read::read(&cert_file, MAX_TLS_FILE_BYTES, Links::Follow)
        .map_err(|e| format!("tls_server_config.cert_file {e}"))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls_server_config.cert_file {}: {e}", cert_file.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "tls_server_config.cert_file {}: no certificate",
            cert_file.display()
        ));
    }
    let key_pem = bounded_read::read(&key_file, MAX_TLS_FILE_BYTES, Links::Follow)
        .map_err(|e| format!("tls_server_config.key_file {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("tls_server_config.key_file {}: {e}", key_file.display()))?;
    let expiry = check_expiry(&cert_file, &certs[0]);
    check_key_mode(&key_file);
    let versions = protocol_versions(&t)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls_server_config: {e}"))?;
    let builder = match t.client_auth_type.as_deref().unwrap_or("NoClientCert") {
        "NoClientCert" => builder.with_no_client_auth(),
        "RequireAndVerifyClientCert" => {
            let ca = resolve(t.client_ca_file.as_deref().ok_or(
                "tls_server_config.client_ca_file is required with RequireAndVerifyClientCert",
            )?);
            builder.with_client_cert_verifier(client_verifier(&ca, provider)?)
        }
        other => {
            return Err(format!(
                "tls_server_config.client_auth_type {other:?} is not supported; use NoClientCert or RequireAndVerifyClientCert"
            ));
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("tls_server_config: certificate and key do not match: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((tokio_rustls::TlsAcceptor::from(Arc::new(config)), expiry))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<WebSecurity, String> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("web.yml");
        std::fs::write(&p, text).unwrap();
        WebSecurity::load(&p).map_err(|e| e.to_string())
    }

    #[test]
    fn basic_auth_checks_bcrypt_and_caches() {
        use base64::Engine as _;
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let c = load(&format!("basic_auth_users:\n  prom: {hash}\n")).unwrap();
        let header = |pair: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
        };
        assert_eq!(c.check(None), Auth::Denied);
        assert_eq!(c.check(Some(&header("prom:wrong"))), Auth::Denied);
        assert_eq!(c.check(Some(&header("other:s3cret"))), Auth::Denied);
        assert_eq!(c.check(Some(&header("prom:s3cret"))), Auth::Allowed);
        assert_eq!(c.check(Some(&header("prom:s3cret"))), Auth::Allowed);
        assert_eq!(c.check(Some("Bearer x")), Auth::Denied);
        // Decided without bcrypt: a verified pair and a malformed header; a new pair is not
        // (more in crate::basic_auth).
        assert!(matches!(
            c.check_cached(Some(&header("prom:s3cret"))),
            Precheck::Decided(Auth::Allowed)
        ));
        assert!(matches!(
            c.check_cached(Some(&header("prom:new"))),
            Precheck::Unverified(_)
        ));
        // A reload that keeps the user's hash keeps its verified pairs.
        let same = load(&format!("basic_auth_users:\n  prom: {hash}\n")).unwrap();
        same.keep_verified(&c);
        assert!(matches!(
            same.check_cached(Some(&header("prom:s3cret"))),
            Precheck::Decided(Auth::Allowed)
        ));
    }

    #[test]
    fn rejects_what_it_does_not_implement() {
        assert!(
            load("basic_auth_users:\n  a: plain\n")
                .unwrap_err()
                .contains("bcrypt")
        );
        assert!(
            load("basic_auth_users:\n  a: $2y$99$abcdefghijklmnopqrstuuabcdefghijklmnopqrstuvwxyz01234\n")
                .unwrap_err()
                .contains("04 to 14")
        );
        assert!(
            load("basic_auth_users:\n  a: $2y$15$abcdefghijklmnopqrstuuabcdefghijklmnopqrstuvwxyz01234\n")
                .unwrap_err()
                .contains("bcrypt cost 15 is above the maximum, 14")
        );
        assert!(
            load("tls_server_config:\n  cipher_suites: [x]\n")
                .unwrap_err()
                .contains("not supported")
        );
        assert!(
            load("http_server_config:\n  http2: true\n")
                .unwrap_err()
                .contains("HTTP/1.1")
        );
        assert!(
            load("tls_server_confg: {}\n")
                .unwrap_err()
                .contains("unknown field")
        );
        assert!(
            load(
                "tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n"
            )
            .unwrap_err()
            .contains("/nonexistent.crt")
        );
        assert!(load("").unwrap().tls.is_none());
    }
}
