//! The tests of the deploy artefacts, in a binary of their own: the mixin and what it renders
//! (rules, dashboards, the runbook), the Kubernetes variants, the .deb and .rpm packages and the
//! other deployment files. They need jsonnet, kubectl, kubernetes-validate,
//! grafana-foundation-sdk, rpm and the packages `packaging/build` makes, which a change to the
//! Rust code does not: `cargo test --test it` runs the agent's tests without them, `cargo test
//! --test deploy` these, `cargo test --test rules` the rules' own checks and scenario suites, and
//! `cargo test --locked` all of them.
//!
//! The harness is the integration tests' (`tests/it/common`), with the same runner: each module
//! lists its tests with [`crate::tests!`] and what they need; a missing prerequisite makes a test
//! ignored with the reason, and a failure under `DISKPROBE_TEST_STRICT=1`. To add a test file:
//! put it here as `tests/deploy/NAME.rs` ending with its `crate::tests!` list, and add `mod NAME;`
//! and `NAME::tests(),` below.

// Part of the harness serves only the agent's tests (tests/it).
#[allow(dead_code, unused_imports)]
#[path = "../it/common/mod.rs"]
mod common;

mod dashboards;
mod deploy_discovery;
mod deploy_files;
mod kubernetes;
mod mixin;
mod packages;
mod tools;

fn main() {
    common::registry::run(
        [
            dashboards::tests(),
            deploy_discovery::tests(),
            deploy_files::tests(),
            kubernetes::tests(),
            mixin::tests(),
            packages::tests(),
        ]
        .into_iter()
        .flatten()
        .collect(),
    );
}
