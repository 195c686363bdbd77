//! Command-line flags, named as Prometheus exporters name them (`--web.listen-address`, ...).

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Continuous direct-I/O disk probes and /proc/diskstats, exported for Prometheus.
#[derive(Debug, Parser)]
#[command(name = "diskprobe_exporter", version, about, long_about = None)]
pub struct Cli {
    /// Configuration file (TOML). Without it the embedded default configuration runs.
    #[arg(long = "config.file", value_name = "PATH")]
    pub config_file: Option<PathBuf>,

    /// Validate the configuration and exit: 0 when valid, 2 when not. What the machine's state
    /// says against a target (a full filesystem, a device in use) is printed as a warning: exit 1
    /// (valid, but the machine refuses those targets now).
    #[arg(long = "config.check")]
    pub config_check: bool,

    /// Address to listen on, host:port (":9957" = every interface). Overrides [web] listen_address.
    #[arg(long = "web.listen-address", value_name = "ADDRESS")]
    pub listen_address: Option<String>,

    /// Path under which to expose metrics. Overrides [web] telemetry_path. [default: /metrics]
    #[arg(long = "web.telemetry-path", value_name = "PATH", value_parser = crate::config::check_telemetry_path)]
    pub telemetry_path: Option<String>,

    /// Web configuration (TLS, basic auth) in the Prometheus exporter-toolkit YAML format.
    #[arg(long = "web.config.file", value_name = "PATH")]
    pub web_config_file: Option<PathBuf>,

    /// Maximum number of simultaneous HTTP connections; more wait in the listen backlog until one ends or one that had the time to speak (or has been idle that long) is closed for them.
    #[arg(long = "web.max-connections", default_value_t = 128, value_name = "N")]
    pub max_connections: usize,

    /// procfs mountpoint.
    #[arg(long = "path.procfs", default_value = "/proc", value_name = "PATH")]
    pub procfs: PathBuf,

    /// sysfs mountpoint.
    #[arg(long = "path.sysfs", default_value = "/sys", value_name = "PATH")]
    pub sysfs: PathBuf,

    /// Device node directory: block devices found by [[discover]] rules are probed at
    /// PATH/<kernel name> (a container mounts the host's /dev elsewhere, e.g. /host/dev).
    #[arg(long = "path.devfs", default_value = "/dev", value_name = "PATH")]
    pub devfs: PathBuf,

    /// Read each device's NVMe log page 0xD0 ([cloud_stats]) from PATH/<kernel name> instead of
    /// asking the device: for fixtures and tests, as the other --path flags point at fixture
    /// trees.
    #[arg(long = "path.cloud-stats-pages", value_name = "PATH")]
    pub cloud_stats_pages: Option<PathBuf>,

    /// Directory for the embedded default's scratch probe file (used without --config.file) and
    /// the targets `[[discover]]` block rules lost (lost_targets.json). [default:
    /// $STATE_DIRECTORY, /var/lib/diskprobe_exporter as root, else
    /// $XDG_STATE_HOME/diskprobe_exporter or ~/.local/state/diskprobe_exporter]
    #[arg(long = "state.dir", value_name = "PATH")]
    pub state_dir: Option<PathBuf>,

    /// Self-confinement with Landlock: auto confines where the kernel offers it and runs
    /// unconfined (with a log line) where it does not; required exits unless the whole ruleset
    /// is enforced; off does not confine.
    #[arg(long = "sandbox.landlock", value_enum, default_value_t = crate::sandbox::Mode::Auto, value_name = "MODE")]
    pub sandbox: crate::sandbox::Mode,

    /// Only log messages with the given severity or above.
    #[arg(long = "log.level", value_enum, default_value_t = LogLevel::Info)]
    pub log_level: LogLevel,

    /// Output format of log messages.
    #[arg(long = "log.format", value_enum, default_value_t = LogFormat::Logfmt)]
    pub log_format: LogFormat,

    /// One-shot commands; without one, the agent runs.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run probes once on a target, print the results and exit.
    Probe(crate::probe::oneshot::ProbeArgs),
}

/// `--log.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Everything, including per-line parser notes.
    Debug,
    /// Normal operation.
    Info,
    /// Only problems.
    Warn,
    /// Only failures.
    Error,
}

/// `--log.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// `ts=... level=info msg=...`, like Prometheus' Go exporters.
    Logfmt,
    /// One JSON object per line.
    Json,
}
