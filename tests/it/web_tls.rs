//! `--web.config.file`: TLS with a self-signed certificate and basic auth with bcrypt hashes,
//! checked with curl over loopback: the scrape works over TLS with the right password, 401
//! without or with a wrong one, plain HTTP is not served, and min_version is enforced; a flood
//! of wrong passwords does not hold up scrapes with verified credentials, nor does a reload during
//! one (the verified credentials are kept when their hash did not change); the scheme's name
//! (`basic`, `BASIC`) is case-insensitive.

use crate::common;

use common::{Agent, which};
use std::process::Command;

fn curl(args: &[&str]) -> (String, String) {
    let out = Command::new(which("curl").expect("checked by caller"))
        .args(["-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "20"])
        .args(args)
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().to_owned(), body.to_owned())
}

fn tls_and_basic_auth() {
    if !common::require(which("curl").is_some(), "curl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    common::write_tls_files(dir.path());
    let hash = bcrypt::hash("s3cret pass", 6).unwrap();
    // Relative paths are resolved against the web config file's directory.
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS13\n\
             http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n\
             basic_auth_users:\n  prometheus: {hash}\n"
        ),
    )
    .unwrap();
    let agent = Agent::start(&[&format!("--web.config.file={}", web.display())]);
    let url = format!("https://{}/metrics", agent.addr);
    let ca = dir.path().join("server.crt");
    let ca = ca.to_str().unwrap();

    let (code, body) = curl(&["--cacert", ca, "-u", "prometheus:s3cret pass", &url]);
    assert_eq!(code, "200", "{body}");
    assert!(body.contains("diskprobe_build_info{"));
    // Cached verification answers the second scrape the same way.
    assert_eq!(
        curl(&["--cacert", ca, "-u", "prometheus:s3cret pass", &url]).0,
        "200"
    );

    let (code, _) = curl(&["--cacert", ca, &url]);
    assert_eq!(code, "401", "no credentials");
    assert_eq!(
        curl(&["--cacert", ca, "-u", "prometheus:wrong", &url]).0,
        "401"
    );
    assert_eq!(
        curl(&["--cacert", ca, "-u", "nobody:s3cret pass", &url]).0,
        "401"
    );
    assert_eq!(
        curl(&[
            "--cacert",
            ca,
            "-u",
            "prometheus:s3cret pass",
            &format!("https://{}/", agent.addr)
        ])
        .0,
        "200",
        "the landing page is behind the same auth"
    );

    // Headers from http_server_config are added.
    let out = Command::new("curl")
        .args([
            "-s",
            "-D",
            "-",
            "-o",
            "/dev/null",
            "--cacert",
            ca,
            "-u",
            "prometheus:s3cret pass",
            &url,
        ])
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(head.contains("x-content-type-options: nosniff"), "{head}");

    // TLS 1.2 is refused under min_version TLS13; plain HTTP gets no HTTP answer.
    let (code, _) = curl(&[
        "--cacert",
        ca,
        "--tlsv1.2",
        "--tls-max",
        "1.2",
        "-u",
        "prometheus:s3cret pass",
        &url,
    ]);
    assert_eq!(code, "000", "TLS 1.2 handshake must fail");
    let (code, _) = curl(&[&format!("http://{}/metrics", agent.addr)]);
    assert_ne!(code, "200");
}

fn bad_web_configs_are_refused_at_startup_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    for (text, expected) in [
        (
            "basic_auth_users:\n  prometheus: plaintext\n",
            "expected a bcrypt hash",
        ),
        (
            "tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n",
            "missing.crt",
        ),
        ("tls_server_confg: {}\n", "unknown field `tls_server_confg`"),
    ] {
        let web = dir.path().join("web.yml");
        std::fs::write(&web, text).unwrap();
        let out = Command::new(common::binary())
            .args([
                "--config.check",
                &format!("--web.config.file={}", web.display()),
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(expected) && stderr.contains("web.yml"),
            "{text}: {stderr}"
        );
    }
}

fn a_flood_of_wrong_passwords_does_not_hold_up_verified_scrapes() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    // Cost 10 (the documented one): each wrong password keeps the bcrypt thread busy for a
    // noticeable time.
    let hash = bcrypt::hash("s3cret", 10).unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prom: {hash}\n")).unwrap();
    let agent = Agent::start(&[&format!("--web.config.file={}", web.display())]);
    let basic = |pair: &str| {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        )
    };
    let good = basic("prom:s3cret");
    let addr = agent.addr;
    let scrape =
        |auth: &str| common::http_request(addr, "GET", "/metrics", &[("Authorization", auth)]);
    assert_eq!(scrape(&good).status, 200, "first check, then cached");
    // The 16 clients start together, so that they all arrive while the first check runs.
    let start = std::sync::Arc::new(std::sync::Barrier::new(16));
    let (answered, statuses) = std::sync::mpsc::channel();
    let flood: Vec<_> = (0..16)
        .map(|i| {
            let auth = basic(&format!("prom:wrong{i}"));
            let start = start.clone();
            let answered = answered.clone();
            std::thread::spawn(move || {
                start.wait();
                let resp =
                    common::http_request(addr, "GET", "/metrics", &[("Authorization", &auth)]);
                let _ = answered.send(resp.status);
                (resp.status, std::time::Instant::now())
            })
        })
        .collect();
    drop(answered);
    // The bcrypt thread is busy and its queue full once the clients beyond them are turned away
    // (at once, with 503); the asserts below say what happened when that never comes.
    let full = 16 - 1 - diskprobe_exporter::web_config::BCRYPT_QUEUE;
    let mut refused = 0;
    while refused < full {
        match statuses.recv_timeout(std::time::Duration::from_secs(20)) {
            Ok(503) => refused += 1,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let resp = scrape(&good);
    let scraped = std::time::Instant::now();
    assert_eq!(resp.status, 200);
    let answers: Vec<_> = flood.into_iter().map(|t| t.join().unwrap()).collect();
    let denied: Vec<_> = answers.iter().filter(|(s, _)| *s == 401).collect();
    let turned_away = answers.iter().filter(|(s, _)| *s == 503).count();
    assert_eq!(denied.len() + turned_away, 16, "{answers:?}");
    assert!(
        turned_away >= 16 - 1 - diskprobe_exporter::web_config::BCRYPT_QUEUE,
        "at most the queue and the check in progress wait: {answers:?}"
    );
    // The verified scrape was answered while wrong passwords were still being checked.
    let last_denied = denied.iter().map(|(_, at)| *at).max().unwrap();
    assert!(scraped < last_denied, "the scrape waited behind bcrypt");
}

/// The scheme's name in an `Authorization` header is case-insensitive (RFC 7617 after RFC 7235):
/// `basic` and `BASIC` authenticate as `Basic` does, a wrong password stays 401 in any case.
fn the_basic_schemes_name_is_case_insensitive() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prom: {hash}\n")).unwrap();
    let agent = Agent::start(&[&format!("--web.config.file={}", web.display())]);
    let encoded = |pair: &str| base64::engine::general_purpose::STANDARD.encode(pair);
    let status = |auth: &str| {
        common::http_request(agent.addr, "GET", "/metrics", &[("Authorization", auth)]).status
    };
    for scheme in ["basic", "BASIC", "Basic"] {
        assert_eq!(
            status(&format!("{scheme} {}", encoded("prom:s3cret"))),
            200,
            "{scheme}"
        );
        assert_eq!(
            status(&format!("{scheme} {}", encoded("prom:wrong"))),
            401,
            "{scheme}"
        );
    }
}

fn a_reload_during_a_flood_of_wrong_passwords_keeps_the_verified_credentials() {
    use base64::Engine as _;
    let _machine = common::exclusive();
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 10).unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prom: {hash}\n")).unwrap();
    let agent = Agent::start(&[&format!("--web.config.file={}", web.display())]);
    let basic = |pair: &str| {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        )
    };
    let good = basic("prom:s3cret");
    let addr = agent.addr;
    assert_eq!(
        common::http_request(addr, "GET", "/metrics", &[("Authorization", &good)]).status,
        200,
        "verified once, before the flood"
    );
    // Eight clients send wrong passwords, one after another, for as long as the test runs: the
    // bcrypt thread is always busy and its queue full.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood: Vec<_> = (0..8)
        .map(|i| {
            let auth = basic(&format!("prom:wrong{i}"));
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut answers = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let r =
                        common::http_request(addr, "GET", "/metrics", &[("Authorization", &auth)]);
                    assert!(matches!(r.status, 401 | 503), "{}", r.status);
                    answers += 1;
                }
                answers
            })
        })
        .collect();
    agent.signal("HUP");
    agent.expect_log(
        "web configuration reloaded",
        std::time::Duration::from_secs(10),
    );
    let mut answers = Vec::new();
    for _ in 0..10 {
        let asked = std::time::Instant::now();
        let r = common::http_request(addr, "GET", "/metrics", &[("Authorization", &good)]);
        answers.push((r.status, asked.elapsed()));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flooded: usize = flood.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(flooded > 8, "the flood got {flooded} answers");
    assert!(
        answers
            .iter()
            .all(|(status, took)| *status == 200 && *took < std::time::Duration::from_secs(1)),
        "after the reload: {answers:?}"
    );
}

/// A self-signed certificate for 127.0.0.1 valid until `not_after` (Unix seconds), and its key,
/// written to `dir` as `server.crt` and `server.key` (the key with `mode`).
fn write_cert_until(dir: &std::path::Path, not_after: i64, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2019, 1, 1);
    params.not_after = time::OffsetDateTime::from_unix_timestamp(not_after).unwrap();
    let cert = params.self_signed(&key).unwrap();
    std::fs::write(dir.join("server.crt"), cert.pem()).unwrap();
    let key_file = dir.join("server.key");
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The value of the certificate expiry gauge in a scrape over TLS (not verifying the
/// certificate: it may have expired).
fn cert_expiry_gauge(agent: &Agent) -> Option<f64> {
    let (code, body) = curl(&["-k", &format!("https://{}/metrics", agent.addr)]);
    assert_eq!(code, "200", "{body}");
    body.lines()
        .find_map(|l| l.strip_prefix("diskprobe_web_tls_cert_expiry_timestamp_seconds "))
        .map(|v| v.trim().parse().unwrap())
}

fn expired_and_expiring_certificates_and_keys_readable_by_all_are_warned_about() {
    if !common::require(which("curl").is_some(), "curl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    )
    .unwrap();
    let flag = format!("--web.config.file={}", web.display());
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap();
    let check = || {
        let out = Command::new(common::binary())
            .args(["--config.check", &flag])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // A certificate valid for a year and a key only its owner and group may read: no warning.
    write_cert_until(dir.path(), now + 365 * 86400, 0o640);
    let quiet = check();
    assert!(
        !quiet.contains("tls_server_config"),
        "nothing to warn about: {quiet}"
    );
    // Expired, and a key every user may read: warned about by --config.check and at start; the
    // certificate is still served, and the gauge says when it expired.
    let expired = 1_600_000_000; // 2020-09-13
    write_cert_until(dir.path(), expired, 0o644);
    let warned = check();
    assert!(warned.contains("the certificate has expired"), "{warned}");
    assert!(
        warned.contains("readable or writable by every user"),
        "{warned}"
    );
    let agent = Agent::start(&[&flag]);
    agent.expect_log(
        "the certificate has expired",
        std::time::Duration::from_secs(5),
    );
    agent.expect_log(
        "readable or writable by every user",
        std::time::Duration::from_secs(5),
    );
    #[allow(clippy::cast_precision_loss)]
    let expected = expired as f64;
    assert_eq!(cert_expiry_gauge(&agent), Some(expected));
    // Expiring in 3 days, reloaded: the warning and the new expiry.
    let soon = now + 3 * 86400;
    write_cert_until(dir.path(), soon, 0o600);
    agent.signal("HUP");
    agent.expect_log(
        "the certificate expires in less than 7 days",
        std::time::Duration::from_secs(10),
    );
    agent.expect_log(
        "web configuration reloaded",
        std::time::Duration::from_secs(10),
    );
    #[allow(clippy::cast_precision_loss)]
    let expected = soon as f64;
    assert_eq!(cert_expiry_gauge(&agent), Some(expected));
}

crate::tests! {
    tls_and_basic_auth: [CURL],
    bad_web_configs_are_refused_at_startup_with_exit_2,
    a_flood_of_wrong_passwords_does_not_hold_up_verified_scrapes,
    a_reload_during_a_flood_of_wrong_passwords_keeps_the_verified_credentials,
    the_basic_schemes_name_is_case_insensitive,
    expired_and_expiring_certificates_and_keys_readable_by_all_are_warned_about: [CURL],
}
