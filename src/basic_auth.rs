//! Basic authentication (`basic_auth_users` of `--web.config.file`) that a flood of wrong or
//! unknown credentials cannot turn against the scraper. bcrypt is deliberately slow (at cost 10
//! about 50–100 ms of one core), so what it may cost is bounded:
//!
//! - A hash's cost is at most [`MAX_BCRYPT_COST`]; a higher one is refused at load.
//! - Credentials that verified are remembered ([`Credentials::check_cached`]), keyed by a keyed
//!   hash of the user, the password and the user's bcrypt hash (no password is kept): a returning
//!   client never waits for bcrypt, whatever else arrives. Wrong passwords are remembered the same
//!   way, so that sending one again costs nothing.
//! - An unknown user costs no bcrypt work: it is refused after a pause as long as a verification
//!   at the lowest configured cost takes (measured), so that timing does not tell which users
//!   exist.
//! - Everything else is verified by one thread ([`verify_off_thread`]), away from the runtime
//!   and from scrapes, fed by a queue of at most [`BCRYPT_QUEUE`] waiting checks with at most one
//!   per client (its address; IPv6 by /64). The thread takes first the clients that have had the
//!   fewest wrong passwords; a newcomer that has had fewer than a waiting client takes that
//!   one's place in a full queue (which is answered 503); otherwise it is answered 503 itself.
//!
//! So a correct first login from a client that has not sent wrong passwords waits for at most
//! the verification in progress and those of other such clients that came before it: under a
//! flood from other addresses that have, two verifications (at cost 10, well under a second).
//! Clients behind one address (a NAT, a proxy) share its record.

use base64::Engine as _;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The highest bcrypt cost accepted: a verification at 14 takes about a second of one core on
/// current hardware (each step doubles it); exporter-toolkit's users rarely go beyond 12.
pub const MAX_BCRYPT_COST: u32 = 14;

/// Credential checks waiting for the bcrypt thread at most (one per client).
pub const BCRYPT_QUEUE: usize = 8;

/// Verified and refused credentials remembered at most (each set); beyond, the set starts over.
const REMEMBERED: usize = 4096;

/// Clients whose wrong passwords are counted at most; beyond, those with one are forgotten,
/// then all.
const CLIENTS: usize = 4096;

/// Result of checking a request's credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// No authentication configured, or the credentials are right.
    Allowed,
    /// Missing or wrong credentials.
    Denied,
}

/// A `user:password` pair that only bcrypt can decide: pass it to [`Credentials::verify`] or
/// [`verify_off_thread`].
#[derive(Debug)]
pub struct Unverified {
    user: String,
    password: String,
    key: u128,
}

/// What can be said of a request's credentials without bcrypt.
#[derive(Debug)]
pub enum Precheck {
    /// Decided: no authentication configured, a missing or malformed header, credentials
    /// remembered as right or wrong.
    Decided(Auth),
    /// A user that is not configured: deny after this pause (no bcrypt work).
    UnknownUser(Duration),
    /// For bcrypt.
    Unverified(Unverified),
}

/// The configured users and what was learnt of credentials.
#[derive(Debug, Default)]
pub struct Credentials {
    users: BTreeMap<String, String>,
    verified: Mutex<HashSet<u128>>,
    refused: Mutex<HashSet<u128>>,
}

/// The cost of a bcrypt hash (`$2y$10$...`: the second field), when it is one bcrypt accepts
/// (4 to 31).
pub(crate) fn bcrypt_cost(hash: &str) -> Option<u32> {
    let cost = hash.split('$').nth(2)?.parse::<u32>().ok()?;
    (4..=31).contains(&cost).then_some(cost)
}

/// The base64 credentials of an `Authorization` header value of the Basic scheme: the scheme's
/// name in any case (RFC 7617 after RFC 7235: `basic` is `Basic`), then spaces, then the token.
fn basic_credentials(authorization: &str) -> Option<&str> {
    let (scheme, credentials) = authorization.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("basic")
        .then(|| credentials.trim_start_matches(' '))
}

/// The keyed hash of a user's credentials and bcrypt hash: 128 bits of SipHash under keys
/// drawn at start, so that what is remembered neither holds a password nor can be matched by
/// chosen input.
fn credential_key(user: &str, password: &str, hash: &str) -> u128 {
    static KEYS: OnceLock<[std::collections::hash_map::RandomState; 2]> = OnceLock::new();
    let keys = KEYS.get_or_init(Default::default);
    let half = |k: &std::collections::hash_map::RandomState| k.hash_one((user, password, hash));
    (u128::from(half(&keys[0])) << 64) | u128::from(half(&keys[1]))
}

/// Nanoseconds one bcrypt step (cost 4) took in the last verification; the pause of an
/// unknown user follows from it. Starts at 1 ms, about what current hardware takes.
static STEP_NANOS: AtomicU64 = AtomicU64::new(1_000_000);

fn remember(set: &Mutex<HashSet<u128>>, key: u128) {
    let mut set = set.lock().unwrap_or_else(|e| e.into_inner());
    if set.len() >= REMEMBERED {
        set.clear();
    }
    set.insert(key);
}

impl Credentials {
    /// `users` (name → bcrypt hash), already validated.
    pub(crate) fn new(users: BTreeMap<String, String>) -> Credentials {
        Credentials {
            users,
            ..Credentials::default()
        }
    }

    /// Whether basic authentication is required.
    pub(crate) fn required(&self) -> bool {
        !self.users.is_empty()
    }

    /// The configured user names.
    pub(crate) fn users(&self) -> impl Iterator<Item = &String> {
        self.users.keys()
    }

    /// Takes over what `previous` learnt: the keys include each user's hash, so credentials of
    /// a user whose hash changed (or who is gone) never match again.
    pub(crate) fn keep_learnt(&self, previous: &Credentials) {
        for (mine, theirs) in [
            (&self.verified, &previous.verified),
            (&self.refused, &previous.refused),
        ] {
            let theirs = theirs.lock().unwrap_or_else(|e| e.into_inner()).clone();
            mine.lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(theirs);
        }
    }

    /// Checks an `Authorization` header value as far as it can without bcrypt: cheap enough
    /// for the runtime's worker.
    pub(crate) fn check_cached(&self, authorization: Option<&str>) -> Precheck {
        if self.users.is_empty() {
            return Precheck::Decided(Auth::Allowed);
        }
        let denied = Precheck::Decided(Auth::Denied);
        let Some(encoded) = authorization.and_then(basic_credentials) else {
            return denied;
        };
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return denied;
        };
        let Ok(pair) = String::from_utf8(decoded) else {
            return denied;
        };
        let Some((user, password)) = pair.split_once(':') else {
            return denied;
        };
        let Some(hash) = self.users.get(user) else {
            return Precheck::UnknownUser(self.unknown_user_pause());
        };
        let key = credential_key(user, password, hash);
        let has = |set: &Mutex<HashSet<u128>>| {
            set.lock().unwrap_or_else(|e| e.into_inner()).contains(&key)
        };
        if has(&self.verified) {
            return Precheck::Decided(Auth::Allowed);
        }
        if has(&self.refused) {
            return Precheck::Decided(Auth::Denied);
        }
        Precheck::Unverified(Unverified {
            user: user.to_owned(),
            password: password.to_owned(),
            key,
        })
    }

    /// How long a verification at the lowest configured cost takes, as last measured.
    fn unknown_user_pause(&self) -> Duration {
        let cost = self
            .users
            .values()
            .filter_map(|h| bcrypt_cost(h))
            .min()
            .unwrap_or(4);
        let steps = 1u64 << (cost.saturating_sub(4)).min(MAX_BCRYPT_COST);
        Duration::from_nanos(STEP_NANOS.load(Ordering::Relaxed).saturating_mul(steps))
    }

    /// Verifies a pair with bcrypt (deliberately slow) and remembers the answer.
    pub(crate) fn verify(&self, pair: Unverified) -> Auth {
        let Some(hash) = self.users.get(&pair.user) else {
            return Auth::Denied;
        };
        let started = Instant::now();
        let right = bcrypt::verify(&pair.password, hash).unwrap_or(false);
        if let Some(cost) = bcrypt_cost(hash) {
            let steps = 1u64 << cost.saturating_sub(4).min(MAX_BCRYPT_COST);
            let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            STEP_NANOS.store(nanos / steps, Ordering::Relaxed);
        }
        if right {
            remember(&self.verified, pair.key);
            Auth::Allowed
        } else {
            remember(&self.refused, pair.key);
            Auth::Denied
        }
    }
}

/// Who a check is for: a client's address (IPv6 by its /64, as one host gets a /64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Client {
    /// An IPv4 address (also one mapped into IPv6).
    V4(u32),
    /// The /64 prefix of an IPv6 address.
    V6(u64),
}

impl Client {
    /// The client at `addr`.
    pub(crate) fn of(addr: IpAddr) -> Client {
        match addr {
            IpAddr::V4(v4) => Client::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Client::V4(u32::from(v4)),
                None => Client::V6((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// A check waiting for the bcrypt thread.
struct Waiting {
    client: Client,
    /// The client's wrong passwords when it came.
    failures: u32,
    /// Arrival order.
    seq: u64,
    credentials: Arc<Credentials>,
    pair: Unverified,
    answer: tokio::sync::oneshot::Sender<Auth>,
}

/// The checks waiting, and each client's wrong passwords.
#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    failures: HashMap<Client, u32>,
    seq: u64,
}

impl Queue {
    /// Queues `w` when there is room for it (see the module's doc); a check it displaces is
    /// dropped, which answers it 503. Gives `w` back when it is refused.
    fn offer(&mut self, w: Waiting) -> Result<(), Waiting> {
        if self.waiting.iter().any(|o| o.client == w.client) {
            return Err(w);
        }
        if self.waiting.len() >= BCRYPT_QUEUE {
            let worst = self
                .waiting
                .iter()
                .enumerate()
                .max_by_key(|(_, o)| (o.failures, o.seq))
                .map(|(i, o)| (i, o.failures));
            match worst {
                Some((i, failures)) if failures > w.failures => {
                    self.waiting.swap_remove(i);
                }
                _ => return Err(w),
            }
        }
        self.waiting.push(w);
        Ok(())
    }

    /// The next check: the client with the fewest wrong passwords, first come among equals.
    fn next(&mut self) -> Option<Waiting> {
        let i = self
            .waiting
            .iter()
            .enumerate()
            .min_by_key(|(_, w)| (w.failures, w.seq))?
            .0;
        Some(self.waiting.remove(i))
    }

    fn record(&mut self, client: Client, auth: Auth) {
        if auth == Auth::Allowed {
            self.failures.remove(&client);
            return;
        }
        if self.failures.len() >= CLIENTS {
            self.failures.retain(|_, n| *n > 1);
            if self.failures.len() >= CLIENTS {
                self.failures.clear();
            }
        }
        let n = self.failures.entry(client).or_default();
        *n = n.saturating_add(1);
    }
}

/// The queue and the thread that empties it.
struct Verifier {
    queue: Mutex<Queue>,
    ready: Condvar,
}

impl Verifier {
    fn run(&self) {
        loop {
            let w = {
                let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if let Some(w) = q.next() {
                        break w;
                    }
                    q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
                }
            };
            // The client may have gone while the check waited.
            if w.answer.is_closed() {
                continue;
            }
            // A panic must not leave every later login without a checker.
            let auth = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                w.credentials.verify(w.pair)
            }))
            .unwrap_or(Auth::Denied);
            self.queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .record(w.client, auth);
            let _ = w.answer.send(auth);
        }
    }
}

/// Verifies `pair` for `client` on the one thread that does bcrypt (started on first use), away
/// from the runtime's blocking pool that scrapes use. `None` when the queue has no room for it
/// (answer 503); the receiver ends without an answer when a client with fewer wrong passwords
/// took its place (answer 503 too).
pub(crate) fn verify_off_thread(
    credentials: Arc<Credentials>,
    pair: Unverified,
    client: IpAddr,
) -> Option<tokio::sync::oneshot::Receiver<Auth>> {
    static VERIFIER: OnceLock<Option<Arc<Verifier>>> = OnceLock::new();
    let verifier = VERIFIER.get_or_init(|| {
        let verifier = Arc::new(Verifier {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
        });
        let runner = verifier.clone();
        std::thread::Builder::new()
            .name("diskprobe-bcrypt".to_owned())
            .spawn(move || runner.run())
            .map_err(|err| tracing::error!(%err, "cannot start the bcrypt thread"))
            .ok()
            .map(|_| verifier)
    });
    let verifier = verifier.as_ref()?;
    let client = Client::of(client);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let mut q = verifier.queue.lock().unwrap_or_else(|e| e.into_inner());
    q.seq += 1;
    let waiting = Waiting {
        client,
        failures: q.failures.get(&client).copied().unwrap_or(0),
        seq: q.seq,
        credentials,
        pair,
        answer: tx,
    };
    q.offer(waiting).ok()?;
    drop(q);
    verifier.ready.notify_one();
    Some(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pair: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        )
    }

    fn credentials(hash: &str) -> Credentials {
        Credentials::new([("prom".to_owned(), hash.to_owned())].into())
    }

    #[test]
    fn verified_and_refused_credentials_are_remembered_and_unknown_users_cost_nothing() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let c = credentials(&hash);
        let Precheck::Unverified(pair) = c.check_cached(Some(&header("prom:s3cret"))) else {
            panic!("a new pair is for bcrypt");
        };
        assert_eq!(c.verify(pair), Auth::Allowed);
        assert!(matches!(
            c.check_cached(Some(&header("prom:s3cret"))),
            Precheck::Decided(Auth::Allowed)
        ));
        let Precheck::Unverified(pair) = c.check_cached(Some(&header("prom:wrong"))) else {
            panic!("a new pair is for bcrypt");
        };
        assert_eq!(c.verify(pair), Auth::Denied);
        assert!(matches!(
            c.check_cached(Some(&header("prom:wrong"))),
            Precheck::Decided(Auth::Denied)
        ));
        assert!(matches!(
            c.check_cached(Some(&header("nobody:x"))),
            Precheck::UnknownUser(_)
        ));
        // The scheme's name is case-insensitive (RFC 7617, RFC 7235), and spaces may follow it.
        for scheme in ["basic", "BASIC", "bAsIc"] {
            let spelt = header("prom:s3cret").replacen("Basic", scheme, 1);
            assert!(
                matches!(
                    c.check_cached(Some(&spelt)),
                    Precheck::Decided(Auth::Allowed)
                ),
                "{spelt}"
            );
        }
        let spaced = header("prom:s3cret").replacen("Basic ", "Basic   ", 1);
        assert!(matches!(
            c.check_cached(Some(&spaced)),
            Precheck::Decided(Auth::Allowed)
        ));
        for malformed in [
            None,
            Some("Bearer x"),
            Some("Basic !!"),
            Some("Basic"),
            Some("Basicx cHJvbTpzM2NyZXQ="),
            Some(&*header("nocolon")),
        ] {
            assert!(matches!(
                c.check_cached(malformed),
                Precheck::Decided(Auth::Denied)
            ));
        }
        // A reload keeps what was learnt for an unchanged hash only.
        let same = credentials(&hash);
        same.keep_learnt(&c);
        assert!(matches!(
            same.check_cached(Some(&header("prom:s3cret"))),
            Precheck::Decided(Auth::Allowed)
        ));
        let changed = credentials(&bcrypt::hash("s3cret", 4).unwrap());
        changed.keep_learnt(&c);
        assert!(matches!(
            changed.check_cached(Some(&header("prom:s3cret"))),
            Precheck::Unverified(_)
        ));
    }

    #[test]
    fn the_queue_holds_one_check_per_client_and_prefers_clients_without_wrong_passwords() {
        let c = Arc::new(credentials("$2y$04$x"));
        let mut q = Queue::default();
        let waiting = |q: &mut Queue, client: u32| {
            q.seq += 1;
            let client = Client::V4(client);
            let (tx, rx) = tokio::sync::oneshot::channel();
            let w = Waiting {
                client,
                failures: q.failures.get(&client).copied().unwrap_or(0),
                seq: q.seq,
                credentials: c.clone(),
                pair: Unverified {
                    user: "prom".into(),
                    password: "x".into(),
                    key: 0,
                },
                answer: tx,
            };
            (w, rx)
        };
        for client in 1..=BCRYPT_QUEUE as u32 {
            q.record(Client::V4(client), Auth::Denied);
            let (w, _) = waiting(&mut q, client);
            assert!(q.offer(w).is_ok());
        }
        // One per client; a full queue of clients with wrong passwords makes room for one
        // without, which goes first.
        let (again, _) = waiting(&mut q, 1);
        assert!(q.offer(again).is_err());
        let (fresh, _) = waiting(&mut q, 100);
        assert!(q.offer(fresh).is_ok());
        assert_eq!(q.waiting.len(), BCRYPT_QUEUE);
        assert_eq!(q.next().unwrap().client, Client::V4(100));
        assert_eq!(q.next().unwrap().client, Client::V4(1));
        // A newcomer no better than those waiting is refused when the queue is full.
        let mut q = Queue::default();
        for client in 200..200 + BCRYPT_QUEUE as u32 {
            let (w, _) = waiting(&mut q, client);
            assert!(q.offer(w).is_ok());
        }
        let (late, _) = waiting(&mut q, 300);
        assert!(q.offer(late).is_err());
        assert_eq!(
            Client::of("2001:db8::1".parse().unwrap()),
            Client::of("2001:db8::2".parse().unwrap())
        );
        assert_ne!(
            Client::of("127.0.0.1".parse().unwrap()),
            Client::of("127.0.0.2".parse().unwrap())
        );
    }
}
