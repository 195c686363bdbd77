//! Waiting for a condition, never for a fixed time: [`poll`] is the one loop, with its interval
//! ([`poll_async`] the same loop for a test on a tokio runtime); [`wait_for`] fails the test when a
//! condition does not come to hold in time, [`always`] when one stops holding within a period.

use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The interval of [`wait_for`]: short, for conditions that are cheap to check.
pub const INTERVAL: Duration = Duration::from_millis(20);

/// The one loop: calls `probe` until it returns `Ok`, for at most `timeout`, and `pause`s between
/// calls: that value, or the last `Err` (what the probe saw) once `timeout` has passed.
async fn poll_with<T, E>(
    timeout: Duration,
    mut probe: impl FnMut() -> Result<T, E>,
    mut pause: impl AsyncFnMut(),
) -> Result<T, E> {
    let deadline = Instant::now() + timeout;
    loop {
        match probe() {
            Ok(value) => return Ok(value),
            Err(seen) if Instant::now() >= deadline => return Err(seen),
            Err(_) => pause().await,
        }
    }
}

/// Calls `probe` every `every` until it returns `Ok`, for at most `timeout`: that value, or the
/// last `Err` (what the probe saw, for the failure message) once `timeout` has passed. `probe`
/// is called at least once.
pub fn poll<T, E>(
    timeout: Duration,
    every: Duration,
    probe: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    // The pause sleeps this thread and never waits on anything else: the loop runs to its end
    // in one poll of its future.
    let looped = std::pin::pin!(poll_with(timeout, probe, async || {
        std::thread::sleep(every);
    }));
    match looped.poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(outcome) => outcome,
        Poll::Pending => unreachable!("a pause that sleeps the thread never waits"),
    }
}

/// [`poll`] for a test on a tokio runtime: it sleeps without holding its worker thread.
pub async fn poll_async<T, E>(
    timeout: Duration,
    every: Duration,
    probe: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    poll_with(timeout, probe, async || tokio::time::sleep(every).await).await
}

/// Checks `cond` every `every` until it holds; fails the test with `what` after `timeout`.
pub fn wait_for_every(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut cond: impl FnMut() -> bool,
) {
    if poll(timeout, every, || if cond() { Ok(()) } else { Err(()) }).is_err() {
        panic!("timed out after {timeout:?} waiting for {what}");
    }
}

/// [`wait_for`] for a test on a tokio runtime ([`poll_async`]), checking every `every`.
pub async fn wait_for_async(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut cond: impl FnMut() -> bool,
) {
    let seen = poll_async(timeout, every, || if cond() { Ok(()) } else { Err(()) }).await;
    assert!(
        seen.is_ok(),
        "timed out after {timeout:?} waiting for {what}"
    );
}

/// [`wait_for_every`] at the [`INTERVAL`].
pub fn wait_for(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    wait_for_every(what, timeout, INTERVAL, cond);
}

/// Checks every `every` for `period` that `check` holds; fails the test with what `check`
/// says (`Err`) the first time it does not.
pub fn always(period: Duration, every: Duration, mut check: impl FnMut() -> Result<(), String>) {
    // Inverted: the poll ends early (`Ok`) only when the check fails.
    let broken = poll(period, every, || match check() {
        Ok(()) => Err(()),
        Err(what) => Ok(what),
    });
    if let Ok(what) = broken {
        panic!("{what}");
    }
}
