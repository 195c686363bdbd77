//! Settings resolved once: the command-line flags ([`Cli`]), the configuration file and the web
//! configuration become one [`Settings`] value, every flag-against-configuration precedence
//! (listen address, telemetry path, state directory) worked out here. Resolving reads files and
//! has no effect: it creates no directory, binds nothing and confines nothing, so that
//! `--config.check` resolves all a start resolves. The effects are the agent's, once at start
//! ([`crate::agent::prepare`]). Besides `main.rs` this is the only module that reads [`Cli`];
//! [`crate::agent`] wires the parts together from what a `Settings` holds.

use crate::cli::Cli;
use crate::config::discover::RuleSource;
use crate::config::{self, Config, ListenAddress};
use crate::host::Roots;
use crate::sandbox as confinement;
use crate::state_dir::StateDirError;
use crate::web_config::WebSecurity;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the agent runs with: the flags, the configuration and the web configuration, resolved;
/// plain data, not changed once resolved.
#[derive(Debug)]
pub struct Settings {
    /// `--config.file`, or none for the embedded default.
    pub config_file: Option<PathBuf>,
    /// `--config.check`: validate and exit.
    pub config_check: bool,
    /// `--web.config.file`, or none (plain HTTP, no authentication).
    pub web_config_file: Option<PathBuf>,
    /// The configuration at start (the file, or the embedded default).
    pub config: Config,
    /// The web configuration at start.
    pub web: Arc<WebSecurity>,
    /// The address to listen on: `--web.listen-address`, then `[web] listen_address`, then the
    /// default.
    pub listen_address: ListenAddress,
    /// Where metrics are served: `--web.telemetry-path`, then `[web] telemetry_path`, then the
    /// default.
    pub telemetry_path: String,
    /// `--web.max-connections`.
    pub max_connections: usize,
    /// `--path.procfs`, `--path.sysfs` and `--path.devfs`.
    pub roots: Roots,
    /// `--path.cloud-stats-pages`: fixture pages, read instead of the devices.
    pub cloud_stats_pages: Option<PathBuf>,
    /// `--sandbox.landlock`.
    pub sandbox: confinement::Mode,
    /// `--state.dir`, or the default one; none when no default can be derived
    /// ([`Settings::state_dir`] says why).
    pub state_dir: Option<PathBuf>,
    /// Whether the configuration at start keeps files in the state directory: the targets a
    /// block rule that keeps lost targets loses ([`crate::discovery::lost_file`]), and the last
    /// device under each configured target ([`crate::scheduler::target_devices`]).
    pub keeps_state: bool,
}

impl Settings {
    /// Resolves `cli`, loading the configuration it names (or the embedded default) and the
    /// web configuration. An error is a configuration that does not load, or a flag that does
    /// not parse (named).
    pub fn load(cli: Cli) -> anyhow::Result<Settings> {
        // The default's only error is that there is none, which matters only where the state
        // directory is used ([`Settings::state_dir`]).
        let state_dir = cli
            .state_dir
            .or_else(|| crate::state_dir::default_dir().ok());
        let config = match &cli.config_file {
            Some(path) => Config::load(path)?,
            None => {
                // Where its scratch file goes must be a disk (checked again when it is made).
                let dir = state_dir_of(state_dir.as_deref())?;
                crate::state_dir::check_on_disk(dir, &cli.procfs)?;
                Config::embedded_default(dir)
            }
        };
        let web = match &cli.web_config_file {
            Some(path) => WebSecurity::load(path)?,
            None => WebSecurity::default(),
        };
        let listen_address = match &cli.listen_address {
            Some(flag) => ListenAddress::parse(flag)
                .map_err(|e| anyhow::anyhow!("--web.listen-address: {e}"))?,
            None => config.web.listen_address.clone().unwrap_or_else(|| {
                ListenAddress::parse(config::DEFAULT_LISTEN_ADDRESS).expect("default parses")
            }),
        };
        let telemetry_path = cli
            .telemetry_path
            .or_else(|| config.web.telemetry_path.clone())
            .unwrap_or_else(|| config::DEFAULT_TELEMETRY_PATH.to_owned());
        Ok(Settings {
            config_file: cli.config_file,
            config_check: cli.config_check,
            web_config_file: cli.web_config_file,
            keeps_state: keeps_state(&config),
            config,
            web: Arc::new(web),
            listen_address,
            telemetry_path,
            max_connections: cli.max_connections,
            roots: Roots {
                procfs: cli.procfs,
                sysfs: cli.sysfs,
                devfs: cli.devfs,
            },
            cloud_stats_pages: cli.cloud_stats_pages,
            sandbox: cli.sandbox,
            state_dir,
        })
    }

    /// Settings from command-line arguments (the program's name first), for tests.
    #[cfg(test)]
    pub(crate) fn from_args(args: &[&str]) -> anyhow::Result<Settings> {
        use clap::Parser;
        Settings::load(Cli::try_parse_from(args)?)
    }

    /// What `--config.check` names as checked: the file, or the embedded default.
    pub fn config_source(&self) -> String {
        self.config_file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "embedded default".to_owned())
    }

    /// The state directory named by `--state.dir`, or the default one.
    pub fn state_dir(&self) -> Result<&Path, StateDirError> {
        state_dir_of(self.state_dir.as_deref())
    }

    /// What the sandbox's ruleset is built from ([`confinement::confine`]), with `state_dir`, the
    /// state directory where the agent keeps state in it (made: rules name directories that
    /// exist).
    pub(crate) fn sandbox_inputs<'a>(
        &'a self,
        state_dir: Option<&'a Path>,
    ) -> confinement::Inputs<'a> {
        confinement::Inputs {
            mode: self.sandbox,
            procfs: &self.roots.procfs,
            sysfs: &self.roots.sysfs,
            devfs: &self.roots.devfs,
            cloud_stats_pages: self.cloud_stats_pages.as_deref(),
            config_file: self.config_file.as_deref(),
            web_config_file: self.web_config_file.as_deref(),
            web_files: &self.web.files,
            listen: Some(&self.listen_address),
            state_dir,
        }
    }
}

/// `dir`, or the error that says no default could be derived.
fn state_dir_of(dir: Option<&Path>) -> Result<&Path, StateDirError> {
    dir.ok_or(StateDirError::NoDefault)
}

/// [`Settings::keeps_state`] for `config`.
fn keeps_state(config: &Config) -> bool {
    !config.targets.is_empty()
        || config
            .discover
            .iter()
            .any(|r| matches!(&r.source, RuleSource::Block(b) if !b.lost_retention.is_zero()))
}
