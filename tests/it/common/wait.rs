//! Waiting for a condition ([`wait_for`]), never for a fixed time.

/// Polls `cond` every 20 ms until it holds; fails the test with `what` after `timeout`.
pub fn wait_for(what: &str, timeout: std::time::Duration, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
