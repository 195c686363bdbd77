//! The agent's integration tests, in one binary (the deploy artefacts' are in `tests/deploy`, the
//! rules' in `tests/rules`):
//! `cargo test` runs them with the unit tests, `cargo test --test it` alone,
//! `cargo test --test it faults::` one module. Each module is one
//! concern; `common` is the harness they share (`common/mod.rs` says what is where).
//!
//! The tests run side by side in threads of this one process (`RUST_TEST_THREADS` in
//! `.cargo/config.toml`): most of their time is waiting (for probe runs, timeouts, rule windows),
//! and the waits overlap. What that asks of a test:
//! - Wait for the condition it needs ([`common::wait_until`] on the agent's metrics,
//!   [`common::Agent::expect_log`], [`common::wait_for`]), never for a fixed time.
//! - Hold [`common::exclusive`] when it measures time or rates, [`common::shared`] when it loads
//!   the machine (probes, fio, a browser), neither otherwise: the lock's doc says which is which.
//! - Ask /proc about its own processes ([`common::process`] by the PID of the agent it started,
//!   or of this process only for files of its own), never about names other tests share.
//! - Make only what it names as its own: temporary directories, loop devices ([`common::loopdev`]
//!   makes each at a number of its own, [`common::loopdev::free_loop_numbers`], never with
//!   `losetup --find`), mountpoints in its own directory.
//! - Give environment switches to the processes it starts (`Command::env`); never
//!   `std::env::set_var`, which every other test of the process would see.
//!
//! The binary has its own runner (`harness = false` in Cargo.toml; [`common::registry`]): a test
//! is a plain `fn NAME()` (no `#[test]`) listed in its module's [`crate::tests!`] with what it
//! needs from the machine (`probes_a_device: [LOOP, FIO]`, constants of [`common::skip`]). A test
//! whose prerequisite is missing is reported as ignored with the reason, and fails under
//! `DISKPROBE_TEST_STRICT=1`. A function left out of the list is dead code, which clippy refuses.
//!
//! To add a test: write the function and add it to the module's `crate::tests!` list. To add a
//! test file: put it here as `tests/it/NAME.rs` with a `//!` doc saying what it checks,
//! `use crate::common;` (and `use crate::common::loopdev;` and so on) for the harness, end it with
//! its `crate::tests!` list, and add `mod NAME;` and `NAME::tests(),` below. A file directly in
//! `tests/` would be a binary of its own, linking the crate again.

mod common;

mod agent_probes;
mod blockdev_fixtures;
mod cloud_stats;
mod config_errors;
mod discovery;
mod discovery_fixtures;
mod diskstats_e2e;
mod docs;
mod durability;
mod engine_agreement;
mod exposition_formats;
mod faults;
mod gone_disks;
mod headroom_e2e;
mod hostile_inputs;
mod http;
mod http_burst;
mod http_flood;
mod interference;
mod machine_state;
mod metrics_docs;
mod native_histograms_e2e;
mod probe_cli;
mod probe_files;
mod probe_loop;
mod probe_space;
mod probe_throttle;
mod probes_golden;
mod profile_info;
mod prometheus_e2e;
mod protobuf_codegen;
mod recent_runs;
mod sandbox;
mod scheduler_runs;
mod series_budget;
mod signals;
mod state_lock;
mod status_page;
mod web_tls;
mod write_safety;

fn main() {
    common::registry::run(
        [
            // The runner starts tests in this order: the longest first, so that they overlap the
            // rest (a real Prometheus's rule windows), then those that load the machine longest
            // (shared), which take the machine before the tests that hold it to themselves queue
            // for it: started last, they would run after them, alone. `cargo test --test it`
            // prints the slowest tests after its summary.
            prometheus_e2e::tests(),
            series_budget::tests(),
            sandbox::tests(),
            recent_runs::tests(),
            native_histograms_e2e::tests(),
            scheduler_runs::tests(),
            agent_probes::tests(),
            blockdev_fixtures::tests(),
            cloud_stats::tests(),
            config_errors::tests(),
            discovery::tests(),
            discovery_fixtures::tests(),
            diskstats_e2e::tests(),
            docs::tests(),
            durability::tests(),
            exposition_formats::tests(),
            faults::tests(),
            gone_disks::tests(),
            headroom_e2e::tests(),
            hostile_inputs::tests(),
            http::tests(),
            http_burst::tests(),
            http_flood::tests(),
            interference::tests(),
            machine_state::tests(),
            metrics_docs::tests(),
            probe_cli::tests(),
            probe_loop::tests(),
            probe_space::tests(),
            probe_throttle::tests(),
            probes_golden::tests(),
            profile_info::tests(),
            protobuf_codegen::tests(),
            write_safety::tests(),
            probe_files::tests(),
            engine_agreement::tests(),
            signals::tests(),
            state_lock::tests(),
            status_page::tests(),
            web_tls::tests(),
        ]
        .into_iter()
        .flatten()
        .chain([common::registry::trial(
            "registry::no_test_attributes".to_owned(),
            &[],
            common::registry::no_test_attributes,
        )])
        .collect(),
    );
}
