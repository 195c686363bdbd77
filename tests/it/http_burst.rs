//! A burst of well-behaved clients up to `--web.max-connections`: N keep-alive connections
//! opened at once, each asking for `/metrics` again and again for a few seconds, beside the
//! test's own scraper on fresh connections (counted among the N), on a plain listener and on a
//! TLS + basic auth one (a long test, `LONG`: every `cargo test` bursts the plain one). Not one
//! error: every connection is admitted and none is closed for another within the limit.

use crate::common;

use common::Agent;
use common::http_conn::{Target, read_response, request, tls_agent_verified};
use std::io::Write;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

/// The agent's default `--web.max-connections`.
const LIMIT: usize = 128;
/// How long each client asks.
const BURST_FOR: Duration = Duration::from_secs(3);

/// What the burst's clients got.
#[derive(Default)]
struct Tally {
    answers: usize,
    errors: Vec<String>,
}

/// `clients` keep-alive clients opened at once, asking for the metrics with `auth` for
/// [`BURST_FOR`], and a scraper on a fresh connection meanwhile (so `clients + 1` connections at
/// most); fails on any error or answer other than 200.
fn burst(target: &Target, auth: Option<&str>, clients: usize) {
    let tally = Arc::new(Mutex::new(Tally::default()));
    let start = Arc::new(Barrier::new(clients + 1));
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (target, tally, start) = (target.clone(), tally.clone(), start.clone());
            let ask = request("/metrics", auth, false);
            std::thread::spawn(move || {
                start.wait();
                let began = Instant::now();
                let mut answers = 0;
                let outcome = (|| {
                    let mut s = target.connect()?;
                    while began.elapsed() < BURST_FOR {
                        s.write_all(&ask)?;
                        match read_response(&mut *s)? {
                            200 => answers += 1,
                            other => return Err(std::io::Error::other(format!("status {other}"))),
                        }
                    }
                    Ok(())
                })();
                let mut tally = tally.lock().unwrap();
                tally.answers += answers;
                if let Err(err) = outcome {
                    tally
                        .errors
                        .push(format!("client {i}, after {answers} answers: {err}"));
                }
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    let mut scrapes = 0;
    while began.elapsed() < BURST_FOR {
        let status = target.connect().and_then(|mut s| {
            s.write_all(&request("/metrics", auth, true))?;
            read_response(&mut *s)
        });
        match status {
            Ok(200) => scrapes += 1,
            other => tally
                .lock()
                .unwrap()
                .errors
                .push(format!("scraper, after {scrapes} answers: {other:?}")),
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    let tally = tally.lock().unwrap();
    eprintln!(
        "{clients} clients + the scraper: {} answers, {scrapes} scrapes, {} errors",
        tally.answers,
        tally.errors.len()
    );
    assert!(
        tally.errors.is_empty(),
        "{} errors: {:?}",
        tally.errors.len(),
        tally.errors
    );
    assert!(scrapes > 0, "the scraper got no answer");
}

fn a_burst_up_to_the_limit_on_a_plain_listener_gets_no_error() {
    // Not a timing test, but the burst's threads load the machine, and a client starved for
    // long between two requests would be one idle beyond its grace.
    let _machine = common::exclusive();
    let agent = Agent::start(&[]);
    let target = Target::plain(agent.addr);
    for clients in [LIMIT / 2 - 1, LIMIT - 1] {
        burst(&target, None, clients);
    }
}

fn a_burst_up_to_the_limit_on_a_tls_and_basic_auth_listener_gets_no_error() {
    let _machine = common::exclusive();
    let dir = tempfile::tempdir().unwrap();
    let (_agent, target, good) = tls_agent_verified(dir.path());
    for clients in [LIMIT / 2 - 1, LIMIT - 1] {
        burst(&target, Some(&good), clients);
    }
}

crate::tests! {
    a_burst_up_to_the_limit_on_a_plain_listener_gets_no_error,
    a_burst_up_to_the_limit_on_a_tls_and_basic_auth_listener_gets_no_error: [LONG],
}
