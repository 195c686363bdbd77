//! TLS files for the agent's web configuration ([`write_tls_files`]).

/// A self-signed certificate for 127.0.0.1 and localhost in `dir`: `server.crt`, `server.key`.
pub fn write_tls_files(dir: &std::path::Path) {
    let cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("generate certificate");
    std::fs::write(dir.join("server.crt"), cert.cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), cert.key_pair.serialize_pem()).unwrap();
}
