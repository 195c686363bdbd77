//! Waiting for a condition, never for a fixed time: [`poll`] is the one loop, with its interval;
//! [`wait_for`] fails the test when a condition does not come to hold in time.

use std::time::{Duration, Instant};

/// The interval of [`wait_for`]: short, for conditions that are cheap to check.
pub const INTERVAL: Duration = Duration::from_millis(20);

/// Calls `probe` every `every` until it returns `Ok`, for at most `timeout`: that value, or the
/// last `Err` (what the probe saw, for the failure message) once `timeout` has passed. `probe`
/// is called at least once.
pub fn poll<T, E>(
    timeout: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let deadline = Instant::now() + timeout;
    loop {
        match probe() {
            Ok(value) => return Ok(value),
            Err(seen) if Instant::now() >= deadline => return Err(seen),
            Err(_) => std::thread::sleep(every),
        }
    }
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

/// [`wait_for_every`] at the [`INTERVAL`].
pub fn wait_for(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    wait_for_every(what, timeout, INTERVAL, cond);
}
