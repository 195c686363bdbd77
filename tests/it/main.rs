//! The integration tests, in one binary: `cargo test --test it` (or `cargo test`) runs them all,
//! `cargo test --test it faults::` one module. Each module is one concern, named as its file;
//! `common` holds the harness they share.

mod common;

mod agent_probes;
mod config_errors;
mod dashboards;
mod deploy_discovery;
mod deploy_files;
mod discovery;
mod discovery_fixtures;
mod diskstats_e2e;
mod durability;
mod exposition_formats;
mod faults;
mod http;
mod interference;
mod metrics_docs;
mod native_histograms_e2e;
mod probe_cli;
mod probe_loop;
mod probe_throttle;
mod probes_golden;
mod profile_info;
mod prometheus_e2e;
mod prometheus_rules;
mod protobuf_codegen;
mod scheduler_runs;
mod series_budget;
mod signals;
mod status_page;
mod web_tls;
