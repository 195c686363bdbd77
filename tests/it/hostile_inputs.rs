//! What the agent reads cannot be turned against its host (issue 58): a link planted where the
//! state file's temporary copy goes is not followed; a FIFO, a `/dev/zero` link or a huge file
//! as the state file, and a FIFO as the configuration at a reload, neither block start-up or
//! SIGTERM nor grow the agent; `/dev/zero` as the configuration, the web configuration or its
//! client CA is refused in one message; the state file's entries are bounded (one per target, a rule's
//! `max_targets`, nothing in the future); a bcrypt cost above the maximum is refused; a flood of
//! wrong and unknown credentials from other addresses does not hold up a correct first login;
//! a telemetry path no request can have is refused with the flag named.

use crate::common::{self, Agent};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The agent's address-space limit: a read that grew without bound ends in an allocation
/// failure under it instead of taking the host's memory.
const ADDRESS_SPACE: &str = "--as=2147483648";

/// The most the agent may hold in memory (peak RSS, `VmHWM`) after reading a hostile state file.
const RSS_LIMIT_KIB: u64 = 50 * 1024;

/// A temporary directory on a disk-backed filesystem, readable by all.
fn workspace() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("diskprobe-hostile-")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// A block rule that matches no device and keeps lost targets for an hour, at most
/// `max_targets`; the state directory `DIR/state`. Returns the flags.
fn block_rule_agent_args(dir: &Path, max_targets: u32) -> Vec<String> {
    let config = common::config_flag(
        dir,
        &format!(
            "[[discover]]\nid = \"disks\"\nkind = \"block\"\n\
             device_include = \"^diskprobe-no-such-device$\"\nrescan = \"1s\"\n\
             lost_retention = \"1h\"\nmax_targets = {max_targets}\n"
        ),
    );
    std::fs::create_dir_all(dir.join("state")).unwrap();
    vec![
        config,
        format!("--state.dir={}", dir.join("state").display()),
        "--sandbox.landlock=off".to_owned(),
    ]
}

/// One lost-targets entry of rule `disks`.
fn entry(target: &str, since_ms: u64) -> String {
    format!(
        "{{\"rule\": \"disks\", \"target\": \"{target}\", \"device\": \"loop99\", \"model\": \"\", \
         \"serial\": \"\", \"wwn\": \"\", \"volume_id\": \"\", \"since_ms\": {since_ms}}}"
    )
}

fn lost_file(entries: &[String]) -> String {
    format!("{{\"version\": 1, \"lost\": [{}]}}", entries.join(", "))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Starts the agent with `args` under [`ADDRESS_SPACE`] and checks that it answers /metrics
/// within 5 s of its start.
fn start_bounded(args: &[String]) -> Agent {
    let mut cmd = Command::new(common::which("prlimit").expect("prlimit"));
    cmd.arg(ADDRESS_SPACE)
        .arg("--")
        .arg(common::binary())
        .args(args);
    let started = Instant::now();
    let agent = Agent::start_command(cmd);
    let (status, _) = agent.get("/metrics");
    let took = started.elapsed();
    assert_eq!(status, 200);
    assert!(
        took < Duration::from_secs(5),
        "/metrics answered after {took:?}"
    );
    agent
}

/// Sends SIGTERM and checks that the agent exits within 5 s.
fn terminate_within_5_s(agent: &mut Agent) {
    let sent = Instant::now();
    agent.terminate();
    eprintln!("exited {:?} after SIGTERM", sent.elapsed());
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
}

fn a_link_where_the_temporary_state_file_goes_is_not_followed() {
    let ws = workspace();
    let outside = ws.path().join("outside.txt");
    std::fs::write(&outside, "precious\n").unwrap();
    let args = block_rule_agent_args(ws.path(), 64);
    let state = ws.path().join("state");
    // An entry lost in 1970, past its retention: the agent drops it and saves at start.
    std::fs::write(
        state.join("lost_targets.json"),
        lost_file(&[entry("old", 1_000)]),
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, state.join(".lost_targets.json.tmp")).unwrap();
    let mut agent = start_bounded(&args);
    common::wait_for("the state file saved", Duration::from_secs(10), || {
        std::fs::read_to_string(state.join("lost_targets.json"))
            .is_ok_and(|t| !t.contains("\"old\""))
    });
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "precious\n");
    let saved = std::fs::symlink_metadata(state.join("lost_targets.json")).unwrap();
    assert!(
        saved.file_type().is_file(),
        "the state file is a file of its own"
    );
    assert!(
        !state.join(".lost_targets.json.tmp").exists(),
        "no temporary file (nor link) left"
    );
    terminate_within_5_s(&mut agent);
}

fn a_fifo_as_the_state_file_blocks_neither_start_up_nor_sigterm() {
    let ws = workspace();
    let args = block_rule_agent_args(ws.path(), 64);
    mkfifo(&ws.path().join("state/lost_targets.json"));
    let mut agent = start_bounded(&args);
    agent.expect_log("is a FIFO, not a regular file", Duration::from_secs(5));
    terminate_within_5_s(&mut agent);
}

fn a_fifo_as_the_configuration_at_a_reload_blocks_neither_scrapes_nor_sigterm() {
    let ws = workspace();
    let args = block_rule_agent_args(ws.path(), 64);
    let mut agent = start_bounded(&args);
    let config = ws.path().join("config.toml");
    std::fs::remove_file(&config).unwrap();
    mkfifo(&config);
    agent.signal("HUP");
    agent.expect_log(
        "configuration reload failed; keeping the previous configuration",
        Duration::from_secs(5),
    );
    assert!(agent.log.lock().unwrap().contains("is a FIFO"));
    let started = Instant::now();
    assert_eq!(agent.get("/metrics").0, 200);
    assert!(started.elapsed() < Duration::from_secs(5));
    let m = common::scrape(&agent);
    assert_eq!(
        m.get("diskprobe_config_last_reload_successful").copied(),
        Some(0.0)
    );
    terminate_within_5_s(&mut agent);
}

/// The agent's peak RSS, in KiB.
fn peak_rss_kib(agent: &Agent) -> u64 {
    common::process::status(agent.pid(), "VmHWM:")
}

fn a_dev_zero_link_and_a_200_mb_state_file_are_refused_within_50_mb() {
    for (what, make) in [
        (
            "a /dev/zero link",
            (|p: &Path| std::os::unix::fs::symlink("/dev/zero", p).unwrap()) as fn(&Path),
        ),
        ("a 200 MB file", |p: &Path| {
            // Sparse: 200 MB of NUL bytes (UTF-8, not JSON), no disk space used.
            std::fs::File::create(p)
                .unwrap()
                .set_len(200 << 20)
                .unwrap();
        }),
    ] {
        let ws = workspace();
        let args = block_rule_agent_args(ws.path(), 64);
        make(&ws.path().join("state/lost_targets.json"));
        let mut agent = start_bounded(&args);
        agent.expect_log(
            "cannot read the lost targets; starting without them",
            Duration::from_secs(5),
        );
        let rss = peak_rss_kib(&agent);
        eprintln!("{what}: peak RSS {rss} KiB");
        assert!(rss < RSS_LIMIT_KIB, "{what}: peak RSS {rss} KiB");
        terminate_within_5_s(&mut agent);
    }
}

/// `/dev/zero` (through a link) as the configuration, as the web configuration and as its client
/// CA is refused by `--config.check` and by a start, exit 2, and the refusal is said once (with
/// the file named once in it).
fn a_dev_zero_configuration_is_refused_in_one_message() {
    let ws = workspace();
    let zero = ws.path().join("zero");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let empty = ws.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let web = ws.path().join("web.yml");
    common::write_tls_files(ws.path());
    let (cert, key) = (ws.path().join("server.crt"), ws.path().join("server.key"));
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\n  client_ca_file: {}\n  client_auth_type: RequireAndVerifyClientCert\n",
            cert.display(),
            key.display(),
            zero.display()
        ),
    )
    .unwrap();
    let refusal = "is a character device, not a regular file; refused";
    for flags in [
        vec![format!("--config.file={}", zero.display())],
        vec![
            format!("--config.file={}", empty.display()),
            format!("--web.config.file={}", zero.display()),
        ],
        vec![
            format!("--config.file={}", empty.display()),
            format!("--web.config.file={}", web.display()),
        ],
    ] {
        for extra in ["--config.check", "--web.listen-address=127.0.0.1:0"] {
            let mut child = Command::new(common::binary())
                .args(&flags)
                .arg(extra)
                .arg(format!("--state.dir={}", ws.path().join("state").display()))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            // An agent that accepted the file would run on: stopped after 10 s.
            let exit = common::wait_exit(&mut child, Duration::from_secs(10));
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                exit.and_then(|e| e.code()),
                Some(2),
                "{flags:?} {extra}: {stderr}"
            );
            assert_eq!(
                stderr.matches(refusal).count(),
                1,
                "{flags:?} {extra}: said once: {stderr}"
            );
            assert_eq!(
                stderr.matches(&*zero.display().to_string()).count(),
                1,
                "{flags:?} {extra}: the file named once: {stderr}"
            );
        }
    }
}

fn duplicate_excess_and_future_entries_are_dropped_with_a_log_line() {
    let ws = workspace();
    let args = block_rule_agent_args(ws.path(), 2);
    let now = now_ms();
    std::fs::write(
        ws.path().join("state/lost_targets.json"),
        lost_file(&[
            entry("a", now - 50_000),
            entry("a", now - 40_000),
            entry("b", now - 30_000),
            entry("c", now - 20_000),
            entry("d", now + 3_600_000),
        ]),
    )
    .unwrap();
    let mut agent = start_bounded(&args);
    agent.expect_log("1 duplicate entries dropped", Duration::from_secs(5));
    agent.expect_log(
        "2 entries beyond their rule max_targets dropped",
        Duration::from_secs(5),
    );
    agent.expect_log(
        "1 entries lost in the future taken as lost now",
        Duration::from_secs(5),
    );
    let m = common::scrape(&agent);
    let lost: Vec<(&String, &f64)> = m
        .iter()
        .filter(|(k, _)| k.starts_with("diskprobe_discovered_target_lost_timestamp_seconds{"))
        .collect();
    assert_eq!(lost.len(), 2, "{lost:?}");
    let named = |t: &str| {
        lost.iter()
            .find(|(k, _)| k.contains(&format!("target=\"{t}\"")))
            .map(|(_, v)| **v)
    };
    // The latest two: d (taken as lost now) and c.
    assert_eq!(named("c"), Some((now - 20_000) as f64 / 1000.0));
    let d = named("d").expect("d kept");
    assert!(d <= now_ms() as f64 / 1000.0, "d lost in the future: {d}");
    terminate_within_5_s(&mut agent);
}

fn a_bcrypt_cost_above_the_maximum_is_refused_by_config_check() {
    let ws = workspace();
    let web = ws.path().join("web.yml");
    std::fs::write(
        &web,
        "basic_auth_users:\n  prom: $2y$15$abcdefghijklmnopqrstuuabcdefghijklmnopqrstuvwxyz01234\n",
    )
    .unwrap();
    let empty = ws.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let out = Command::new(common::binary())
        .arg(format!("--config.file={}", empty.display()))
        .arg(format!("--web.config.file={}", web.display()))
        .arg("--config.check")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("basic_auth_users.prom: bcrypt cost 15 is above the maximum, 14"),
        "{stderr}"
    );
}

/// GET /metrics from the source address `from` with `authorization`; the status, or `None`
/// when the exchange failed.
fn get_from(from: std::net::IpAddr, to: std::net::SocketAddr, authorization: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    socket
        .bind(&std::net::SocketAddr::new(from, 0).into())
        .ok()?;
    socket
        .connect_timeout(&to.into(), Duration::from_secs(5))
        .ok()?;
    let mut stream: std::net::TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .ok()?;
    let req = format!(
        "GET /metrics HTTP/1.1\r\nHost: {to}\r\nAuthorization: {authorization}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(req.as_bytes()).ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    Some(common::parse_response(&raw).status)
}

fn basic(pair: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

fn a_correct_first_login_is_answered_within_1_s_during_a_flood_of_wrong_credentials() {
    let _machine = common::exclusive();
    let ws = workspace();
    // Cost 10, as `htpasswd -nBC 10` makes.
    let hash = bcrypt::hash("s3cret", 10).unwrap();
    let web = ws.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prom: {hash}\n")).unwrap();
    let agent = Agent::start(&[&format!("--web.config.file={}", web.display())]);
    let addr = agent.addr;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(10);
    // Four addresses send wrong passwords of the known user, two unknown users, each a new pair
    // every time, one request after another, until the test ends (10 s at most).
    let flood: Vec<_> = (2..8u8)
        .map(|i| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let from = std::net::IpAddr::from([127, 0, 0, i]);
                let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline
                {
                    n += 1;
                    let pair = if i < 6 {
                        format!("prom:wrong-{i}-{n}")
                    } else {
                        format!("nobody{i}-{n}:x")
                    };
                    let status = get_from(from, addr, &basic(&pair)).unwrap_or(0);
                    *statuses.entry(status).or_default() += 1;
                }
                (from, statuses)
            })
        })
        .collect();
    // Let the flood fill the queue and its clients collect wrong passwords.
    std::thread::sleep(Duration::from_secs(3));
    let started = Instant::now();
    let status = get_from([127, 0, 0, 1].into(), addr, &basic("prom:s3cret"));
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answers: Vec<_> = flood.into_iter().map(|t| t.join().unwrap()).collect();
    eprintln!("first login: {status:?} after {took:?}; flood answers: {answers:?}");
    assert_eq!(status, Some(200), "flood: {answers:?}");
    assert!(took < Duration::from_secs(1), "answered after {took:?}");
    // The flood was one: wrong passwords were verified and refused meanwhile.
    let refused: u32 = answers.iter().filter_map(|(_, s)| s.get(&401)).sum();
    assert!(refused >= 10, "{answers:?}");
}

fn a_telemetry_path_no_request_can_have_exits_2_naming_the_flag() {
    let ws = workspace();
    let empty = ws.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    for extra in [&[][..], &["--config.check"][..]] {
        let mut child = Command::new(common::binary())
            .arg(format!("--config.file={}", empty.display()))
            .arg("--web.telemetry-path=/metrics?x")
            .arg("--web.listen-address=127.0.0.1:0")
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // An agent that accepted the path would run on: stopped after 10 s.
        let exit = common::wait_exit(&mut child, Duration::from_secs(10));
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(exit.and_then(|e| e.code()), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains("--web.telemetry-path"), "{stderr}");
        assert!(
            stderr.contains("can never match a request's path"),
            "{stderr}"
        );
    }
}

crate::tests! {
    a_link_where_the_temporary_state_file_goes_is_not_followed: [PRLIMIT],
    a_fifo_as_the_state_file_blocks_neither_start_up_nor_sigterm: [PRLIMIT],
    a_fifo_as_the_configuration_at_a_reload_blocks_neither_scrapes_nor_sigterm: [PRLIMIT],
    a_dev_zero_link_and_a_200_mb_state_file_are_refused_within_50_mb: [PRLIMIT],
    duplicate_excess_and_future_entries_are_dropped_with_a_log_line: [PRLIMIT],
    a_dev_zero_configuration_is_refused_in_one_message,
    a_bcrypt_cost_above_the_maximum_is_refused_by_config_check,
    a_correct_first_login_is_answered_within_1_s_during_a_flood_of_wrong_credentials,
    a_telemetry_path_no_request_can_have_exits_2_naming_the_flag,
}
