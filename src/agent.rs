//! The long-running agent: wires configuration, collectors and the HTTP server together and
//! handles signals (SIGTERM/SIGINT: graceful shutdown; SIGHUP: atomic configuration reload).

use crate::cli::Cli;
use crate::collectors::Registry;
use crate::collectors::diskstats::DiskstatsCollector;
use crate::collectors::exporter::{ExporterCollector, ReloadStatus};
use crate::collectors::process::ProcessMetrics;
use crate::config::{self, Config, ListenAddress};
use crate::server::{self, App};
use futures_util::StreamExt;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Exit code for an invalid configuration (`--config.check` and startup).
pub const EXIT_CONFIG: u8 = 2;

/// Loads the configuration named by the flags, or the embedded default.
pub fn load_config(cli: &Cli) -> Result<Config, config::ConfigError> {
    match &cli.config_file {
        Some(path) => Config::load(path),
        None => Ok(Config::embedded_default()),
    }
}

/// The address to listen on: flag, then config, then the default.
pub fn listen_address(cli: &Cli, config: &Config) -> Result<ListenAddress, String> {
    match &cli.listen_address {
        Some(flag) => ListenAddress::parse(flag).map_err(|e| format!("--web.listen-address: {e}")),
        None => Ok(config.web.listen_address.clone().unwrap_or_else(|| {
            ListenAddress::parse(config::DEFAULT_LISTEN_ADDRESS).expect("default parses")
        })),
    }
}

/// Binds `address`; an empty host binds every interface (IPv6 and IPv4 where available).
pub async fn bind(address: &ListenAddress) -> std::io::Result<TcpListener> {
    if address.host.is_empty() {
        match TcpListener::bind(("::", address.port)).await {
            Ok(l) => Ok(l),
            Err(_) => TcpListener::bind(("0.0.0.0", address.port)).await,
        }
    } else {
        TcpListener::bind((address.host.as_str(), address.port)).await
    }
}

/// Runs the agent until SIGTERM or SIGINT. Returns an error for startup failures.
pub async fn run(cli: Cli, config: Config) -> anyhow::Result<()> {
    // Register signals first: SIGHUP's default action would otherwise kill us.
    let mut signals = signal_hook_tokio::Signals::new([SIGHUP, SIGTERM, SIGINT])?;
    let address = listen_address(&cli, &config).map_err(anyhow::Error::msg)?;
    let telemetry_path = cli
        .telemetry_path
        .clone()
        .or_else(|| config.web.telemetry_path.clone())
        .unwrap_or_else(|| config::DEFAULT_TELEMETRY_PATH.to_owned());

    let reload = Arc::new(ReloadStatus::loaded_now());
    let diskstats = Arc::new(DiskstatsCollector::new(
        cli.procfs.clone(),
        cli.sysfs.clone(),
        config.diskstats.filter.clone(),
    ));
    let mut registry = Registry::new();
    registry.register(diskstats.clone());
    registry.register(Arc::new(ExporterCollector::new(reload.clone())));
    registry.register(Arc::new(ProcessMetrics::new()));

    let listener = bind(&address)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {address}: {e}"))?;
    let local = listener.local_addr()?;
    tracing::info!(address = %local, telemetry_path = %telemetry_path, "listening");

    let app = Arc::new(App {
        registry,
        telemetry_path,
        max_connections: cli.max_connections,
    });
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(server::run(listener, app, async {
        let _ = stop_rx.await;
    }));

    let mut current = config;
    while let Some(signal) = signals.next().await {
        match signal {
            SIGHUP => {
                current = reload_config(&cli.config_file, current, &diskstats, &reload);
            }
            _ => {
                tracing::info!(signal, "shutting down");
                break;
            }
        }
    }
    signals.handle().close();
    let _ = stop_tx.send(());
    let _ = server.await;
    tracing::info!("stopped");
    Ok(())
}

/// Re-reads the configuration file; applies it only when it is valid as a whole.
fn reload_config(
    path: &Option<PathBuf>,
    current: Config,
    diskstats: &DiskstatsCollector,
    status: &ReloadStatus,
) -> Config {
    let Some(path) = path else {
        tracing::info!("SIGHUP: no --config.file, the embedded default stays in force");
        status.record_success();
        return current;
    };
    match Config::load(path) {
        Ok(new) => {
            if new.web != current.web {
                tracing::warn!(
                    "[web] changes take effect only after a restart; keeping the current listener"
                );
            }
            diskstats.set_filter(new.diskstats.filter.clone());
            status.record_success();
            tracing::info!(file = %path.display(), "configuration reloaded");
            new
        }
        Err(err) => {
            status.record_failure();
            tracing::error!(%err, "configuration reload failed; keeping the previous configuration");
            current
        }
    }
}
