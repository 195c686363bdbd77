//! The tests of the bundled alerting and recording rules, in a binary of their own: the rules'
//! static checks (joins, stages, windows) and the generated scenario suites on each rule engine
//! (promtool 2.42 and 3.5, vmalert-tool and VictoriaMetrics' replay). A change to the rules, the
//! mixin's rules or the scenario generator (`deploy/prometheus/scenarios`) needs `cargo test
//! --test rules` and no other binary; a change to the Rust code needs none of these (`cargo
//! test --test it` and the unit tests), except where it changes what the agent exports, which
//! `exposition_facts` sees (the facts the generator models, `deploy/prometheus/scenarios/
//! exposition.json`).
//!
//! The harness is the integration tests' (`tests/it/common`), with the same runner: each module
//! lists its tests with [`crate::tests!`] and what they need; a missing prerequisite makes a test
//! ignored with the reason, and a failure under `DISKPROBE_TEST_STRICT=1`. The suites on more
//! engines, seeds and phases are long tests (`LONG`: `DISKPROBE_LONG_TESTS=1`, or strict mode,
//! as `.ci/run` sets). To add a test file: put it here as `tests/rules/NAME.rs` ending with its
//! `crate::tests!` list, and add `mod NAME;` and `NAME::tests(),` below. A scenario is not a test
//! file: it is a function of `deploy/prometheus/scenarios` (see `expect.py`).

// Part of the harness serves only the agent's tests (tests/it).
#[allow(dead_code, unused_imports)]
#[path = "../it/common/mod.rs"]
mod common;

mod exposition_facts;
mod prometheus_rules;
mod replay;
mod rule_joins;
mod rule_stages;
mod rule_windows;
mod scenario_generator;

fn main() {
    common::registry::run(
        [
            // The runner starts tests in this order: the suites first (minutes of CPU time), so
            // that they overlap the rest.
            prometheus_rules::tests(),
            exposition_facts::tests(),
            rule_joins::tests(),
            rule_stages::tests(),
            rule_windows::tests(),
            scenario_generator::tests(),
        ]
        .into_iter()
        .flatten()
        .collect(),
    );
}
