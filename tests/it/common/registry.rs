//! The list of tests and the runner. The test binaries have `harness = false` (Cargo.toml): each
//! module lists its tests with [`crate::tests!`], `main` gathers the lists and runs them with
//! libtest-mimic, which takes the same arguments as cargo's own harness (a filter such as
//! `faults::`, `--exact`, `--test-threads N`, `--list`, `--ignored`) and prints the same summary.
//!
//! A test whose prerequisite is missing ([`crate::common::skip`]) is reported as `ignored` with
//! the reason, so the summary line counts it; under `DISKPROBE_TEST_STRICT=1` it fails.

use crate::common::skip::{self, Need};
use libtest_mimic::{Completion, Failed, Trial};

/// One test: its name (`module::function`, as cargo's harness names it), what it needs, and
/// its body.
pub fn trial(name: String, needs: &'static [Need], body: fn()) -> Trial {
    Trial::ignorable_test(name, move || {
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
/// else the number of cores.
pub fn run(tests: Vec<Trial>) -> ! {
    let mut args = libtest_mimic::Arguments::from_args();
    if args.test_threads.is_none() {
        args.test_threads = std::env::var("RUST_TEST_THREADS")
            .ok()
            .and_then(|n| n.parse().ok());
    }
    libtest_mimic::run(&args, tests).exit()
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
    for dir in ["it", "it/common", "deploy"] {
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
