//! Prerequisites and skips. A test names what it needs from the machine in its module's
//! [`crate::tests!`] list ([`Need`]), and the runner checks that before running it: when something
//! is missing, the test is reported as `ignored` with the reason, and cargo's summary line counts
//! it. A check inside a test's body ([`require`], e.g. in a helper that needs promtool) does the
//! same: the test returns early and is reported as ignored with the reason once it has returned.
//! Under `DISKPROBE_TEST_STRICT=1` (set by `.ci/run`) a missing prerequisite fails the test instead.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

/// Whether skips are failures (`DISKPROBE_TEST_STRICT=1`).
pub fn strict() -> bool {
    std::env::var("DISKPROBE_TEST_STRICT").is_ok_and(|v| v == "1")
}

thread_local! {
    /// What the test running on this thread found missing ([`require`]), for [`take_skips`].
    static SKIPS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Returns `true` when `available`; otherwise records why the test is skipped (the runner then
/// reports it as ignored, with `what`) and returns `false`, or panics in strict mode.
pub fn require(available: bool, what: &str) -> bool {
    if available {
        return true;
    }
    if strict() {
        panic!("DISKPROBE_TEST_STRICT=1 but {what} is not available");
    }
    eprintln!(
        "SKIPPED: {what} is not available (set DISKPROBE_TEST_STRICT=1 to make this a failure)"
    );
    SKIPS.with(|s| s.borrow_mut().push(format!("{what} is not available")));
    false
}

/// The skips [`require`] recorded on this thread since the last call.
pub fn take_skips() -> Vec<String> {
    SKIPS.with(|s| std::mem::take(&mut *s.borrow_mut()))
}

/// Something a test needs from the machine, checked before the test runs.
#[derive(Clone, Copy)]
pub struct Need {
    /// What it is, as the skip reason names it.
    pub what: &'static str,
    check: Check,
}

#[derive(Clone, Copy)]
enum Check {
    /// A function that says whether it is there.
    Fn(fn() -> bool),
    /// An executable on PATH ([`crate::common::which`]).
    Tool(&'static str),
}

impl Need {
    /// Needs what `check` says is there.
    pub const fn check(what: &'static str, check: fn() -> bool) -> Need {
        Need {
            what,
            check: Check::Fn(check),
        }
    }

    /// Needs the executable `name` (found by [`crate::common::which`]).
    pub const fn tool(name: &'static str, what: &'static str) -> Need {
        Need {
            what,
            check: Check::Tool(name),
        }
    }

    /// Whether it is there; each need is checked once per process.
    pub fn available(&self) -> bool {
        static SEEN: Mutex<Option<HashMap<&'static str, bool>>> = Mutex::new(None);
        if let Some(&known) = SEEN
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .get(self.what)
        {
            return known;
        }
        let found = match self.check {
            Check::Fn(check) => check(),
            Check::Tool(name) => crate::common::which(name).is_some(),
        };
        SEEN.lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(self.what, found);
        found
    }
}

/// Root.
pub const ROOT: Need = Need::check("root", crate::common::is_root);
/// Loop devices: root, losetup and /dev/loop-control ([`crate::common::loopdev::ready`]).
pub const LOOP: Need = Need::check(
    "root and losetup (loop devices)",
    crate::common::loopdev::loop_available,
);
/// cgroup v1 blkio throttles ([`crate::common::loopdev::blkio_ready`]).
pub const BLKIO: Need = Need::check("cgroup v1 blkio", crate::common::loopdev::blkio_available);
/// A FUSE filesystem of the test's own: root and /dev/fuse ([`crate::common::fuse::ready`]).
pub const FUSE: Need = Need::check("/dev/fuse (FUSE in the kernel)", || {
    std::path::Path::new("/dev/fuse").exists()
});
/// fio.
pub const FIO: Need = Need::tool("fio", "fio (Debian package fio)");
/// promtool.
pub const PROMTOOL: Need = Need::tool("promtool", "promtool (Debian package prometheus)");
/// curl.
pub const CURL: Need = Need::tool("curl", "curl");
/// prlimit (an address-space limit for an agent that might otherwise take the host's memory).
pub const PRLIMIT: Need = Need::tool("prlimit", "prlimit (util-linux)");
/// partx.
pub const PARTX: Need = Need::tool("partx", "partx (util-linux)");
/// chromium, headless, for the status page's rendering.
pub const CHROMIUM: Need = Need::check("chromium (Debian package chromium)", || {
    crate::common::which("chromium").is_some() || crate::common::which("chromium-browser").is_some()
});
/// mkfs.btrfs and btrfs in the kernel.
pub const BTRFS: Need = Need::check("mkfs.btrfs (btrfs-progs) and btrfs in the kernel", || {
    crate::common::which("mkfs.btrfs").is_some()
        && std::fs::read_to_string("/proc/filesystems").is_ok_and(|f| f.contains("\tbtrfs\n"))
});

/// The long tests asked for: `DISKPROBE_LONG_TESTS=1`, or strict mode (`.ci/run`), which runs
/// everything. Tests that need it check again what a test of every `cargo test` checks, on
/// another engine (the Prometheus 3.5 and VictoriaMetrics variants of the end-to-end tests, the
/// headroom end to end on any), with more seeds or scenarios (the rule suites), in another
/// variant (a TLS listener beside the plain one), or at length (half a minute or more holding the
/// machine, or minutes of CPU time): what a newcomer's first `cargo test` leaves out to check
/// every part once, quickly.
pub const LONG: Need = Need::check(
    "DISKPROBE_LONG_TESTS=1 (a long test; DISKPROBE_TEST_STRICT=1 runs it too)",
    || strict() || std::env::var("DISKPROBE_LONG_TESTS").is_ok_and(|v| v == "1"),
);

/// The first of `needs` that is missing, as the reason a test is skipped.
pub fn missing(needs: &[Need]) -> Option<&'static str> {
    needs.iter().find(|n| !n.available()).map(|n| n.what)
}
