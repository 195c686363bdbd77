//! A bounded flood on 127.0.0.1 (a few hundred sockets for a few seconds) while a well-behaved
//! scraper asks for `/metrics` on a fresh connection every 100 ms: idle connections that
//! reconnect as soon as they are closed, slow readers, clients that pipeline requests and never
//! read, and clients without credentials, all at once; on a plain listener and on a TLS + basic
//! auth listener (where the idle ones never start their handshake and the others get 401). Every
//! one of the scraper's answers must be a 200 within a second. Beside it, what waits beyond the
//! default limit (128): 300 idle sockets opened at once, or 130 clients pipelining requests,
//! leave a scrape answered within 2 s. The flood on the TLS + basic auth listener is a long test
//! (`LONG`): every `cargo test` floods the plain one, and checks TLS and basic auth under a flood
//! of wrong passwords (`web_tls`, `hostile_inputs`).

use crate::common;

use common::Agent;
use common::http_conn::{Target, basic, read_response, request, tls_agent_verified};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Idle sockets (reconnected when closed), slow readers, pipeliners, clients without credentials.
/// The clients that complete TLS handshakes are few: each handshake costs the agent CPU (a
/// millisecond or more in a debug build, on its one worker thread), and a flood of handshakes is
/// a flood of CPU work, which slots cannot keep from the scraper.
const IDLE: usize = 160;
const SLOW: usize = 8;
const PIPELINING: usize = 8;
const UNAUTHENTICATED: usize = 8;
/// Pause of a flood client before it connects again (a TLS handshake costs CPU on both sides).
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);
/// How long the scraper scrapes under the flood.
const FLOOD_FOR: Duration = Duration::from_secs(6);

/// A TLS connection that only ever writes: it sends its records and never reads the server's
/// (a rustls stream reads whenever it writes, and would take the answers in).
struct TlsWriteOnly {
    conn: rustls::ClientConnection,
    sock: TcpStream,
}

impl Write for TlsWriteOnly {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.conn.writer().write(buf)?;
        self.flush()?;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        while self.conn.wants_write() {
            self.conn.write_tls(&mut self.sock)?;
        }
        Ok(())
    }
}

/// A connection for a client that writes and never reads (on TLS, after the handshake).
trait WriteOnly {
    fn connect_write_only(&self) -> std::io::Result<Box<dyn Write + Send>>;
}

impl WriteOnly for Target {
    fn connect_write_only(&self) -> std::io::Result<Box<dyn Write + Send>> {
        Ok(match self.open()? {
            (tcp, None) => Box::new(tcp),
            (sock, Some(conn)) => Box::new(TlsWriteOnly { conn, sock }),
        })
    }
}

/// Writes `burst` on `s` again and again until `stop` (calling `wrote` after each whole burst;
/// a write that times out is tried again): whether the agent dropped the connection.
fn pipeline(s: &mut dyn Write, burst: &[u8], stop: &AtomicBool, mut wrote: impl FnMut()) -> bool {
    while !stop.load(Ordering::Relaxed) {
        match s.write_all(burst) {
            Ok(()) => wrote(),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

/// What the flood did, to show that it pressed on the limit.
#[derive(Default)]
struct Pressure {
    /// Idle sockets the agent closed (and that were opened again).
    idle_closed: AtomicUsize,
    /// Pipelining connections the agent dropped.
    pipeliners_dropped: AtomicUsize,
    /// Answers the clients without credentials got.
    unauthenticated_answers: AtomicUsize,
}

/// Starts the flood on `target` until `stop`; the threads to join.
fn flood(
    target: &Target,
    stop: &Arc<AtomicBool>,
    pressure: &Arc<Pressure>,
) -> Vec<std::thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    // Idle: plain TCP connections that send nothing (on TLS, not even a ClientHello), checked
    // every 100 ms and opened again when the agent has closed them. (Reconnecting faster churns
    // through the ephemeral ports within seconds, and a scraper's connection to a port the
    // agent's side still holds in TIME_WAIT is delayed by a SYN retransmit: a test artefact.)
    {
        let (addr, stop, pressure) = (target.addr, stop.clone(), pressure.clone());
        threads.push(std::thread::spawn(move || {
            let open = || {
                let s = TcpStream::connect(addr).ok()?;
                s.set_nonblocking(true).ok()?;
                Some(s)
            };
            let mut idle: Vec<Option<TcpStream>> = (0..IDLE).map(|_| open()).collect();
            while !stop.load(Ordering::Relaxed) {
                for slot in &mut idle {
                    let closed = match slot {
                        None => true,
                        Some(s) => !matches!(s.read(&mut [0u8; 64]),
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
                    };
                    if closed {
                        if slot.is_some() {
                            pressure.idle_closed.fetch_add(1, Ordering::Relaxed);
                        }
                        *slot = open();
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }));
    }
    // Slow readers: ask for the metrics and take one byte of the answer every 200 ms.
    for _ in 0..SLOW {
        let (target, stop) = (target.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(RECONNECT_PAUSE);
                let Ok(mut s) = target.connect() else {
                    continue;
                };
                if s.write_all(&request("/metrics", None, false)).is_err() {
                    continue;
                }
                while !stop.load(Ordering::Relaxed) {
                    match s.read(&mut [0u8; 1]) {
                        Ok(1) => std::thread::sleep(Duration::from_millis(200)),
                        _ => break,
                    }
                }
            }
        }));
    }
    // Pipeliners: write requests as fast as the connection takes them, never read.
    for _ in 0..PIPELINING {
        let (target, stop, pressure) = (target.clone(), stop.clone(), pressure.clone());
        threads.push(std::thread::spawn(move || {
            let burst = request("/metrics", None, false).repeat(32);
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(RECONNECT_PAUSE);
                let Ok(mut s) = target.connect_write_only() else {
                    continue;
                };
                if pipeline(&mut *s, &burst, &stop, || {}) {
                    pressure.pipeliners_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // Clients without (or with wrong) credentials, asking again on the same connection.
    for i in 0..UNAUTHENTICATED {
        let (target, stop, pressure) = (target.clone(), stop.clone(), pressure.clone());
        threads.push(std::thread::spawn(move || {
            let wrong = basic(&format!("prom:wrong{i}"));
            let auth = (i % 2 == 0).then_some(wrong.as_str());
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(RECONNECT_PAUSE);
                let Ok(mut s) = target.connect() else {
                    continue;
                };
                while !stop.load(Ordering::Relaxed) {
                    if s.write_all(&request("/metrics", auth, false)).is_err()
                        || read_response(&mut *s).is_err()
                    {
                        break;
                    }
                    pressure
                        .unauthenticated_answers
                        .fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }));
    }
    threads
}

/// Floods `target` while scraping it with `auth`; fails unless every scrape is a 200 within 1 s.
fn scrape_under_flood(target: &Target, auth: Option<&str>) {
    let stop = Arc::new(AtomicBool::new(false));
    let pressure = Arc::new(Pressure::default());
    let threads = flood(target, &stop, &pressure);
    // Let the flood take the slots (not an assertion: the counts below show that it did).
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let mut answers = Vec::new();
    while started.elapsed() < FLOOD_FOR {
        let asked = Instant::now();
        let status = target.connect().and_then(|mut s| {
            s.write_all(&request("/metrics", auth, true))?;
            read_response(&mut *s)
        });
        answers.push((status.map_err(|e| e.to_string()), asked.elapsed()));
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let bad: Vec<_> = answers
        .iter()
        .filter(|(status, took)| *status != Ok(200) || *took >= Duration::from_secs(1))
        .collect();
    let idle_closed = pressure.idle_closed.load(Ordering::Relaxed);
    let unauthenticated = pressure.unauthenticated_answers.load(Ordering::Relaxed);
    eprintln!(
        "{} scrapes, slowest {:?}; idle sockets closed by the agent: {idle_closed}, pipeliners dropped: {}, answers to clients without credentials: {unauthenticated}",
        answers.len(),
        answers.iter().map(|(_, t)| *t).max().unwrap_or_default(),
        pressure.pipeliners_dropped.load(Ordering::Relaxed),
    );
    assert!(
        bad.is_empty(),
        "{} of {} scrapes failed or took 1 s or more: {bad:?}",
        bad.len(),
        answers.len()
    );
    // The flood pressed on the limit: the agent had to close idle sockets to make room.
    assert!(idle_closed > 0, "the flood never filled the slots");
    assert!(
        unauthenticated > 0,
        "the clients without credentials got no answer"
    );
}

fn a_flood_on_a_plain_listener_does_not_stop_the_scrapes() {
    let _machine = common::exclusive();
    let agent = Agent::start(&[]);
    let target = Target::plain(agent.addr);
    scrape_under_flood(&target, None);
    assert_eq!(agent.get("/-/healthy").0, 200);
}

fn a_flood_on_a_tls_and_basic_auth_listener_does_not_stop_the_scrapes() {
    let _machine = common::exclusive();
    let dir = tempfile::tempdir().unwrap();
    let (_agent, target, good) = tls_agent_verified(dir.path());
    scrape_under_flood(&target, Some(&good));
}

/// Idle sockets opened at once, and pipelining clients, beyond the default limit (128).
const IDLE_BEYOND: usize = 300;
const PIPELINING_BEYOND: usize = 130;
/// How long a scrape may take behind them: the backlog ahead of it, admitted as held connections
/// have had their grace.
const BEYOND_WITHIN: Duration = Duration::from_secs(2);

/// One scrape on a fresh connection: its status (or error) and how long it took.
fn scrape_once(target: &Target) -> (Result<u16, String>, Duration) {
    let asked = Instant::now();
    let status = target.connect().and_then(|mut s| {
        s.write_all(&request("/metrics", None, true))?;
        read_response(&mut *s)
    });
    (status.map_err(|e| e.to_string()), asked.elapsed())
}

fn idle_sockets_beyond_the_limit_leave_a_scrape_answered_within_2_s() {
    let _machine = common::exclusive();
    let agent = Agent::start(&[]);
    let mut idle: Vec<TcpStream> = (0..IDLE_BEYOND)
        .map(|_| TcpStream::connect(agent.addr).unwrap())
        .collect();
    let (status, took) = scrape_once(&Target::plain(agent.addr));
    eprintln!("{IDLE_BEYOND} idle sockets: scrape {status:?} in {took:?}");
    assert_eq!(status, Ok(200));
    assert!(took < BEYOND_WITHIN, "answered after {took:?}");
    // The scraper came after every idle socket in the backlog: each of those beyond the limit,
    // and the scraper, took the slot of one that had had its grace.
    let must_close = IDLE_BEYOND + 1 - 128;
    for s in &idle {
        s.set_nonblocking(true).unwrap();
    }
    let mut closed = vec![false; IDLE_BEYOND];
    let seen = common::wait::poll(Duration::from_secs(5), common::wait::INTERVAL, || {
        for (s, closed) in idle.iter_mut().zip(&mut closed) {
            *closed |= !matches!(s.read(&mut [0u8; 1]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        }
        let n = closed.iter().filter(|c| **c).count();
        if n >= must_close { Ok(n) } else { Err(n) }
    });
    assert!(
        seen.is_ok(),
        "{seen:?} idle sockets closed, {must_close} expected"
    );
}

fn pipelining_clients_beyond_the_limit_leave_scrapes_answered_within_2_s() {
    let _machine = common::exclusive();
    let agent = Agent::start(&[]);
    let target = Target::plain(agent.addr);
    let stop = Arc::new(AtomicBool::new(false));
    let (writing, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    // Each writes requests as fast as its connection takes them and never reads; when the agent
    // drops it, it connects again at once.
    let threads: Vec<_> = (0..PIPELINING_BEYOND)
        .map(|_| {
            let (target, stop) = (target.clone(), stop.clone());
            let (writing, dropped) = (writing.clone(), dropped.clone());
            std::thread::spawn(move || {
                let burst = request("/metrics", None, false).repeat(32);
                let mut first = true;
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = target.connect_write_only() else {
                        continue;
                    };
                    let wrote = || {
                        if std::mem::take(&mut first) {
                            writing.fetch_add(1, Ordering::Relaxed);
                        }
                    };
                    if pipeline(&mut *s, &burst, &stop, wrote) {
                        dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    common::wait_for(
        "every pipelining client writing",
        Duration::from_secs(20),
        || writing.load(Ordering::Relaxed) == PIPELINING_BEYOND,
    );
    let answers: Vec<_> = (0..10).map(|_| scrape_once(&target)).collect();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    eprintln!(
        "{PIPELINING_BEYOND} pipelining clients ({} dropped by the agent): scrapes {answers:?}",
        dropped.load(Ordering::Relaxed)
    );
    let bad: Vec<_> = answers
        .iter()
        .filter(|(status, took)| *status != Ok(200) || *took >= BEYOND_WITHIN)
        .collect();
    assert!(bad.is_empty(), "failed or took 2 s or more: {bad:?}");
}

crate::tests! {
    a_flood_on_a_plain_listener_does_not_stop_the_scrapes,
    a_flood_on_a_tls_and_basic_auth_listener_does_not_stop_the_scrapes: [LONG],
    idle_sockets_beyond_the_limit_leave_a_scrape_answered_within_2_s,
    pipelining_clients_beyond_the_limit_leave_scrapes_answered_within_2_s,
}
