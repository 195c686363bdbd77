//! Helpers shared by the integration tests: locating the binary and tools, and skipping tests
//! whose prerequisites are missing — loudly, and never under `DISKPROBE_TEST_STRICT=1` (set by
//! `.ci/run`), where a missing prerequisite fails the test instead.
#![allow(dead_code)]

use std::path::PathBuf;

/// The binary under test, built by cargo for the integration tests.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_diskprobe_exporter"))
}

/// Whether skips are failures (`DISKPROBE_TEST_STRICT=1`).
pub fn strict() -> bool {
    std::env::var("DISKPROBE_TEST_STRICT").is_ok_and(|v| v == "1")
}

/// Returns `true` when `available`; otherwise prints why the test is skipped and returns
/// `false`, or panics in strict mode.
pub fn require(available: bool, what: &str) -> bool {
    if available {
        return true;
    }
    if strict() {
        panic!("DISKPROBE_TEST_STRICT=1 but {what} is not available");
    }
    eprintln!("SKIPPED: {what} is not available (set DISKPROBE_TEST_STRICT=1 to make this a failure)");
    false
}

/// Full path of an executable on PATH (or in /usr/sbin, /sbin), if any.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    // Read the effective uid from /proc rather than calling into libc.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
