//! The machine lock of the tests of one binary ([`exclusive`], [`shared`]).

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The machine, as the tests of this binary share it. Tests run side by side in the threads of
/// one process (`RUST_TEST_THREADS`, set in `.cargo/config.toml`), and on 2 cores what one of
/// them does can show in what another measures:
/// - a test whose assertions are about time or rate, with a tolerance that other tests' load
///   could break, holds [`exclusive`]: probes against blkio caps (IOPS within 2%, a mean latency
///   within 5%), a gentle profile's rate cap, a device made slower by a known delay, scrape
///   latency and a schedule kept while devices hang;
/// - a test that loads the machine (probes running back to back or at queue depth, fio, a
///   browser, Prometheus) holds [`shared`]: any number of those run together, never beside an
///   exclusive one;
/// - a test that neither measures time nor loads the machine holds neither: configuration,
///   fixtures and golden files, an idle agent's HTTP and signals, and checks that keep one core
///   busy for a second or two (a schema validator, node_exporter on fixtures, promtool over one
///   exposition). The rule engines' scenario suites, minutes of CPU time, are in another binary
///   (`tests/rules`), which cargo runs after this one, not beside it.
///
/// std's lock on Linux prefers writers: once an exclusive test waits, no further shared one
/// starts, and the exclusive tests run one after the other before the shared ones go on.
static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

thread_local! {
    /// How long the test running on this thread has waited for [`MACHINE`], for the runner's
    /// times ([`take_lock_wait`]).
    static LOCK_WAIT: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

/// Holds the machine for a test that measures time or rates (see [`MACHINE`]).
pub fn exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    timed(|| MACHINE.write().unwrap_or_else(|e| e.into_inner()))
}

/// Holds the machine for a test that loads it, beside other such tests (see [`MACHINE`]).
pub fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    timed(|| MACHINE.read().unwrap_or_else(|e| e.into_inner()))
}

/// `lock()`, adding the time it takes to this thread's [`LOCK_WAIT`].
fn timed<G>(lock: impl FnOnce() -> G) -> G {
    let asked = Instant::now();
    let guard = lock();
    LOCK_WAIT.with(|w| w.set(w.get() + asked.elapsed()));
    guard
}

/// The time this thread has waited for the machine lock since the last call.
pub fn take_lock_wait() -> Duration {
    LOCK_WAIT.with(|w| w.replace(Duration::ZERO))
}
