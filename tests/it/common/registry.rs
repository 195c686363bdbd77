//! The list of tests and the runner. The test binaries have `harness = false` (Cargo.toml): each
//! module lists its tests with [`crate::tests!`], `main` gathers the lists and runs them with
//! libtest-mimic, which takes the same arguments as cargo's own harness (a filter such as
//! `faults::`, `--exact`, `--test-threads N`, `--list`, `--ignored`) and prints the same summary.
//!
//! A test whose prerequisite is missing ([`crate::common::skip`]) is reported as `ignored` with
//! the reason, so the summary line counts it; under `DISKPROBE_TEST_STRICT=1` it fails.
//!
//! The runner times each test (and the part of it spent waiting for the machine lock,
//! [`crate::common::machine`]) and prints the slowest after the summary; with
//! `DISKPROBE_TEST_TIMES=FILE` it writes every test's start, duration and lock wait to FILE.

use crate::common::skip::{self, Need};
use libtest_mimic::{Completion, Failed, Trial};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

/// How many of the slowest tests the runner prints after the summary.
const SLOWEST: usize = 15;

/// When the run began, the origin of the start times in [`Timing`].
static START: LazyLock<Instant> = LazyLock::new(Instant::now);

/// What the runner measured of one test.
struct Timing {
    name: String,
    started: Duration,
    took: Duration,
    lock_wait: Duration,
}

/// The tests that have finished (passed, failed or skipped), as they finished.
static TIMINGS: Mutex<Vec<Timing>> = Mutex::new(Vec::new());

/// Records a test's time when dropped, so that a test that panics is counted too.
struct Timer {
    name: String,
    started: Instant,
}

impl Drop for Timer {
    fn drop(&mut self) {
        let timing = Timing {
            name: std::mem::take(&mut self.name),
            started: self.started.duration_since(*START),
            took: self.started.elapsed(),
            lock_wait: crate::common::machine::take_lock_wait(),
        };
        TIMINGS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(timing);
    }
}

/// One test: its name (`module::function`, as cargo's harness names it), what it needs, and
/// its body.
pub fn trial(name: String, needs: &'static [Need], body: fn()) -> Trial {
    Trial::ignorable_test(name.clone(), move || {
        crate::common::machine::take_lock_wait();
        let _timer = Timer {
            name: name.clone(),
            started: Instant::now(),
        };
        if let Some(what) = skip::missing(needs) {
            if skip::strict() {
                return Err(Failed::from(format!(
                    "DISKPROBE_TEST_STRICT=1 but {what} is not available"
                )));
            }
            return Ok(Completion::ignored_with(format!("{what} is not available")));
        }
        skip::take_skips();
        body();
        let skipped = skip::take_skips();
        if skipped.is_empty() {
            Ok(Completion::Completed)
        } else {
            Ok(Completion::ignored_with(skipped.join("; ")))
        }
    })
}

/// Runs `tests` as cargo's harness would, with the arguments of this process, and exits.
/// The thread count is `--test-threads`, else `RUST_TEST_THREADS` (set in `.cargo/config.toml`),
/// else the number of cores. After the summary it names the slowest tests ([`SLOWEST`]).
pub fn run(tests: Vec<Trial>) -> ! {
    let mut args = libtest_mimic::Arguments::from_args();
    if args.test_threads.is_none() {
        args.test_threads = std::env::var("RUST_TEST_THREADS")
            .ok()
            .and_then(|n| n.parse().ok());
    }
    LazyLock::force(&START);
    let conclusion = libtest_mimic::run(&args, tests);
    report_times();
    conclusion.exit()
}

/// Prints the slowest tests of the run (when more than one ran), and writes every test's times
/// to `DISKPROBE_TEST_TIMES` when that names a file.
fn report_times() {
    let mut timings = std::mem::take(&mut *TIMINGS.lock().unwrap_or_else(|e| e.into_inner()));
    timings.sort_by_key(|t| std::cmp::Reverse(t.took));
    if let Some(path) = std::env::var_os("DISKPROBE_TEST_TIMES") {
        let mut text = String::from("test\tstarted_s\ttook_s\tlock_wait_s\n");
        for t in &timings {
            text += &format!(
                "{}\t{:.1}\t{:.1}\t{:.1}\n",
                t.name,
                t.started.as_secs_f64(),
                t.took.as_secs_f64(),
                t.lock_wait.as_secs_f64()
            );
        }
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("DISKPROBE_TEST_TIMES: cannot write {}: {e}", path.display());
        }
    }
    if timings.len() < 2 {
        return;
    }
    println!("slowest tests (wall time, of it waiting for the machine lock; started at):");
    for t in timings.iter().take(SLOWEST) {
        println!(
            "{:>7.1} s  lock {:>5.1} s  at {:>5.0} s  {}",
            t.took.as_secs_f64(),
            t.lock_wait.as_secs_f64(),
            t.started.as_secs_f64(),
            t.name
        );
    }
    println!();
}

/// The tests of one module, as `pub fn tests() -> Vec<libtest_mimic::Trial>`: each a function
/// of the module (`fn NAME()`, no `#[test]`), optionally with what it needs from the machine,
/// checked before it runs: constants of [`crate::common::skip`] such as `LOOP` and `FIO`, or
/// a [`crate::common::skip::Need`] of the module's own:
///
/// ```ignore
/// crate::tests! {
///     reads_the_fixtures,
///     probes_a_loop_device: [LOOP],
///     throttles_it: [LOOP, BLKIO],
/// }
/// ```
#[macro_export]
macro_rules! tests {
    ($($name:ident $(: [$($need:path),* $(,)?])?),* $(,)?) => {
        /// This module's tests, for the runner (`main`).
        pub fn tests() -> Vec<libtest_mimic::Trial> {
            let module = module_path!()
                .split_once("::")
                .map_or(module_path!(), |(_, rest)| rest);
            #[allow(unused_imports)]
            use $crate::common::skip::*;
            vec![$(
                $crate::common::registry::trial(
                    format!("{module}::{}", stringify!($name)),
                    &[$($($need),*)?],
                    $name,
                )
            ),*]
        }
    };
}

/// Fails when a file of the integration tests marks a function `#[test]` (or `#[tokio::test]`):
/// without cargo's harness such a function is not compiled at all, so it would never run; it
/// belongs in its module's [`crate::tests!`] list instead.
pub fn no_test_attributes() {
    let root = crate::common::repo_root().join("tests");
    let mut found = Vec::new();
    for dir in ["it", "it/common", "deploy", "rules"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (i, line) in text.lines().enumerate() {
                let line = line.trim_start();
                if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
                    found.push(format!("{}:{}", path.display(), i + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "#[test] does not run here (harness = false): list these in crate::tests! instead:\n{}",
        found.join("\n")
    );
}
