//! The binary's one-shot `probe ... --format json` and the runs it prints ([`one_shot`]).

use crate::common::binary;

/// The runs a successful one-shot `probe --format json` printed; fails the test with its output
/// when the probe failed or printed something else.
pub fn one_shot_runs(out: &std::process::Output) -> Vec<serde_json::Value> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "probe failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    match serde_json::from_str(&stdout).expect("JSON output") {
        serde_json::Value::Array(runs) => runs,
        other => panic!("not an array of runs: {other}"),
    }
}

/// The arguments of the one-shot `probe ARGS --format json`.
pub fn one_shot_args<'a>(args: &[&'a str]) -> Vec<&'a str> {
    std::iter::once("probe")
        .chain(args.iter().copied())
        .chain(["--format", "json"])
        .collect()
}

/// Runs the binary's one-shot `probe ARGS --format json` to its end and returns the runs it
/// printed ([`one_shot_runs`]).
pub fn one_shot(args: &[&str]) -> Vec<serde_json::Value> {
    let out = std::process::Command::new(binary())
        .args(one_shot_args(args))
        .output()
        .expect("run the one-shot probe");
    one_shot_runs(&out)
}

/// The one run of [`one_shot`]: fails the test when the probe printed another number of runs.
pub fn one_shot_run(args: &[&str]) -> serde_json::Value {
    let mut runs = one_shot(args);
    assert_eq!(runs.len(), 1, "probe {args:?}: {runs:?}");
    runs.remove(0)
}

/// Whether the timings of the one-shot run `r` can be checked: true when its I/O threads waited
/// for a CPU no longer than the default `starved_above` share of the run (a quiet enough
/// machine). Otherwise the machine, not the engine, decided its timings: the run must then be
/// marked starved (checked here), and the caller skips its timing checks, saying so.
#[allow(dead_code)]
pub fn timings_checkable(r: &serde_json::Value, what: &str) -> bool {
    let limit = diskprobe_exporter::probe::measurement::DEFAULT_STARVED_ABOVE;
    let share = r["cpu_wait_share"]
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: the run says no cpu_wait_share: {r}"));
    if share <= limit {
        assert_eq!(r["starved"], false, "{what}: {r}");
        return true;
    }
    assert_eq!(
        r["starved"], true,
        "{what}: its threads waited {share:.3} of its I/O time for a CPU, above {limit}, and the run is not marked starved: {r}"
    );
    eprintln!(
        "{what}: STARVED: its threads waited {:.1}% of its I/O time for a CPU (above {:.0}%); the run is marked starved and its timings are not checked",
        share * 100.0,
        limit * 100.0
    );
    false
}
