//! Golden files under `tests/golden` ([`check_golden`]), rewritten under `UPDATE_GOLDEN=1`.

use crate::common::repo_root;

/// Compares `actual` with `tests/golden/NAME`, or writes it there under `UPDATE_GOLDEN=1`; on a
/// difference, fails with the first differing lines and the command (`cargo test --test it
/// MODULE::`) that regenerates the file.
pub fn check_golden(name: &str, actual: &str, module: &str) {
    let path = repo_root().join("tests/golden").join(name);
    if std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    if expected != actual {
        let diff: Vec<String> = expected
            .lines()
            .zip(actual.lines())
            .enumerate()
            .filter(|(_, (e, a))| e != a)
            .take(10)
            .map(|(i, (e, a))| format!("line {}:\n  golden: {e}\n  actual: {a}", i + 1))
            .collect();
        panic!(
            "{} differs from the output ({} vs {} lines); first differences:\n{}\n\
             If the change is intended, run UPDATE_GOLDEN=1 cargo test --test it {module}::",
            path.display(),
            expected.lines().count(),
            actual.lines().count(),
            diff.join("\n")
        );
    }
}
