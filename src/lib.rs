//! diskprobe_exporter: a Prometheus exporter that continuously probes disks with short direct-I/O
//! runs and publishes `/proc/diskstats` beside the results.
//!
//! # Layout
//! Data flows one way: configuration (and the targets discovery finds) → scheduler → engine →
//! results → collectors → exposition → HTTP.
//!
//! - [`cli`]: command-line flags (Prometheus exporter names).
//! - [`bounded_read`]: files a user can replace (configurations, certificates, the state file),
//!   opened without blocking, refused unless regular files, read within a size limit.
//! - [`host`]: where procfs and sysfs are mounted, how long a look at a path may take, and the
//!   wall clock in Unix seconds: what the scheduler, discovery and the collectors share of the
//!   host.
//! - [`settings`]: the flags, the configuration file and the web configuration, resolved once
//!   into what the agent runs with.
//! - [`config`]: TOML configuration, raw (serde) → validated, with located errors (and located
//!   findings about the machine's state, which never stop the agent); one target per file.
//! - [`contention`]: other processes' I/O on a probed disk (busy skip before a run, yield and
//!   the cost of probing during one), computed from the counters [`blockdev::counters`] reads.
//! - [`run_context`]: what the machine did over a probe run (the host's CPU pressure, the block
//!   layer's own time per I/O), read around it.
//! - [`diskstats`]: pure `/proc/diskstats` parser.
//! - [`mountinfo`]: pure `/proc/PID/mountinfo` parser (discovery's mounts, a target's backing
//!   device, the write-safety check).
//! - [`swaps`]: pure `/proc/swaps` parser (the write-safety check).
//! - [`device_filter`]: device include/exclude regexes.
//! - [`discovery`]: `[[discover]]` rules: block devices and mounts found by rescans become targets;
//!   the targets a block rule loses (their disk gone) stay reported for a while.
//! - [`blockdev`]: the one model of a block device (kind, parent, the disks under it, serial,
//!   WWN, model, what the cloud calls it), the one reader of block devices in sysfs, and a whole
//!   disk's counters and queue limits.
//! - [`nvme_admin`]: NVMe admin commands (Identify, Get Log Page) through the kernel's ioctl.
//! - [`cloud_stats`]: EC2's NVMe performance statistics of EBS and instance-store devices (log
//!   page 0xD0): which devices have them, its layout (a pure parser), reading it, and why not.
//! - [`coalesce`]: requests that arrive while a scrape runs share the next one.
//! - [`collectors`]: one collector per source (diskstats, probes, discovery, limits, cloud
//!   statistics, exporter state, process), run per scrape.
//! - [`exposition`]: metric families and their wire formats (text, OpenMetrics, protobuf with
//!   native histograms), negotiated per scrape, gzip-compressed when accepted.
//! - [`histogram`]: latency histograms with classic buckets (configurable layout) and sparse
//!   native buckets, filled from each run's HdrHistogram.
//! - [`server`]: hyper HTTP server and routes.
//! - [`web_config`]: `--web.config.file` (TLS, basic auth), in the exporter-toolkit format.
//! - [`basic_auth`]: basic authentication's bcrypt checks, bounded per client and overall.
//! - [`agent`]: the daemon: startup, signals, reload, shutdown.
//! - [`logging`]: tracing setup (logfmt or JSON); an error with its causes, each said once.
//! - [`probe`]: direct-I/O probes (engine, profiles, targets) and the one-shot `probe` command.
//! - [`scheduler`]: runs each target's profiles every interval (jitter, one probe per device,
//!   concurrency limit, duty-cycle budget, busy skip, hard timeouts) on dedicated threads; in
//!   parts: tasks, cycles, admission gates (a typed skip reason), global slots, per-device state,
//!   the probe thread, logging.
//! - [`sandbox`]: self-confinement with Landlock, applied in `main` before any thread starts;
//!   reloads that need more are refused.
//! - [`series`]: the store of per-target, per-profile series (last run, cumulative counters and
//!   histogram, the outcomes of the last runs), written by the scheduler, read by the probes
//!   collector and the status page.
//! - [`state_dir`]: where the embedded default keeps its scratch probe file (and block discovery
//!   rules their lost targets), locked by one agent at a time.
//! - [`status_page`]: the landing page with each target's last results and SVG latency charts.
//! - [`units`]: sizes (`4k`, `1MiB`, `1G`, binary as in fio) and durations (`500ms`, `1m`).
//!
//! # One probe run, from the configuration to `/metrics`
//! 1. [`config::Config::from_toml`] validates a `[[targets]]` entry into a [`config::TargetSpec`]:
//!    its name, path and [`config::probe_settings::ProbeSettings`] (profiles resolved, `[defaults]` merged,
//!    [`config::Writes`]). A `[[discover]]` rule ([`config::DiscoverRule`]) holds the same
//!    settings, and [`discovery`] turns what its rescans find into more `TargetSpec`s.
//! 2. [`agent`] hands them to [`scheduler::Scheduler::apply`], which starts a task per target.
//!    Every interval the task's cycle stats the path to find the device under it, takes the
//!    device's lock and, for each profile, asks the admission gates (budget, busy, runs still out,
//!    I/O still in the kernel; a refusal is a [`scheduler::gates::Skip`]), takes a global slot and runs
//!    the profile on a probe thread.
//! 3. The probe thread opens the target ([`probe::io_target::open`]: O_DIRECT, preflight, write
//!    safety) and calls [`probe::engine::run`], which checks the profile against the target (a
//!    `Job`) and runs it on io_uring or psync, returning a [`probe::measurement::Measurement`]:
//!    counts, HdrHistograms, and how the run ended ([`probe::measurement::Ending`]).
//! 4. The scheduler wraps it in a [`series::RunOutcome`] and records it in the
//!    [`series::SeriesStore`]; [`series::RunOutcome::status`] is its `result` label, read by the
//!    store and the scheduler's log alike.
//! 5. A scrape ([`server`], shared by [`coalesce`]) runs every collector: the probes collector
//!    ([`collectors::probe_metrics`]) turns the store into [`exposition::Family`] values, one
//!    table row per metric family, and [`exposition::encode_for`] writes them in the format the
//!    scraper asked for.
#![deny(missing_docs)]
// Functions a reader can take in at once (clippy.toml: at most 80 lines); choices are types,
// not rows of booleans.
#![warn(clippy::too_many_lines, clippy::fn_params_excessive_bools)]
// Every `unsafe` block says why it is sound (docs/development.md).
#![deny(clippy::undocumented_unsafe_blocks)]
// `pub` only where the binary, the tests, the examples or the fuzz targets need it.
#![warn(unreachable_pub)]
// The library is the binary's inside: its documentation (`cargo doc --document-private-items`)
// links to crate-private items.
#![allow(rustdoc::private_intra_doc_links)]

pub mod agent;
mod basic_auth;
pub mod blockdev;
mod bounded_read;
pub mod cli;
mod cloud_stats;
mod coalesce;
pub mod collectors;
pub mod config;
mod contention;
pub mod device_filter;
pub mod discovery;
pub mod diskstats;
pub mod exposition;
pub mod histogram;
pub mod host;
pub mod logging;
pub mod mountinfo;
mod nvme_admin;
pub mod probe;
pub mod run_context;
mod sandbox;
pub mod scheduler;
pub mod series;
pub mod server;
pub mod settings;
mod state_dir;
mod status_page;
mod swaps;
pub mod units;
pub mod web_config;
