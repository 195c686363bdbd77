//! The long-running agent: wires configuration, discovery, the scheduler, collectors and the
//! HTTP server together and handles signals (SIGTERM/SIGINT: graceful shutdown; SIGHUP: atomic
//! configuration reload).
//!
//! The scheduler runs the configured targets and those the discovery task found; this loop is
//! the one place that hands it both, after a reload and after every rescan that changed what was
//! found.

use crate::collectors::Registry;
use crate::collectors::cloud_stats::CloudStatsCollector;
use crate::collectors::discovery::DiscoveryCollector;
use crate::collectors::diskstats::DiskstatsCollector;
use crate::collectors::exporter::{CertExpiry, ExporterCollector, ReloadStatus};
use crate::collectors::limits::LimitsCollector;
use crate::collectors::probes::ProbesCollector;
use crate::collectors::process::ProcessMetrics;
use crate::collectors::sandbox::SandboxCollector;
use crate::config::{Config, ListenAddress, TargetSpec};
use crate::discovery::matching::with_configured;
use crate::discovery::{self, Discovery, Plan};
use crate::sandbox::{self as confinement, Sandbox};
use crate::scheduler::Scheduler;
use crate::series::SeriesStore;
use crate::server::{self, App};
use crate::settings::Settings;
use crate::web_config::WebConfig;
use futures_util::StreamExt;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// How long a shutdown waits for the probe tasks to stop (their runs are cancelled and drain
/// their I/O) while in-flight scrapes finish.
pub const PROBE_STOP_PATIENCE: Duration = Duration::from_secs(4);

/// Exit code for an invalid configuration (`--config.check` and startup).
pub const EXIT_CONFIG: u8 = 2;

/// Confines the agent ([`crate::sandbox::confine`]) for `settings`. Call from `main` before any
/// thread starts. The embedded default's state directory is made first: the ruleset is attached
/// to directories that exist.
pub fn sandbox(settings: &Settings) -> Result<Arc<Sandbox>, confinement::RequiredError> {
    if settings.config_file.is_none() && settings.sandbox != confinement::Mode::Off {
        // Errors are reported by `run`, which prepares it again.
        let _ = settings
            .state_dir()
            .map(|dir| crate::state_dir::prepare(dir, &settings.roots.procfs));
    }
    confinement::confine(&settings.sandbox_inputs(), &settings.config)
}

/// Connections the kernel may hold for the agent to accept (capped by `net.core.somaxconn`).
/// std's (and so tokio's `TcpListener::bind`) 128 overflowed under a burst of reconnecting
/// clients, and the kernel dropped a scraper's SYN: its connection waited a 1 s retransmit.
pub const LISTEN_BACKLOG: u32 = 1024;

/// Binds `address` with [`LISTEN_BACKLOG`]; an empty host binds every interface (IPv6 and IPv4
/// where available).
pub async fn bind(address: &ListenAddress) -> std::io::Result<TcpListener> {
    if address.host.is_empty() {
        match listen(std::net::SocketAddr::from((
            std::net::Ipv6Addr::UNSPECIFIED,
            address.port,
        ))) {
            Ok(l) => Ok(l),
            Err(_) => listen(std::net::SocketAddr::from((
                std::net::Ipv4Addr::UNSPECIFIED,
                address.port,
            ))),
        }
    } else {
        let mut last = None;
        for addr in tokio::net::lookup_host((address.host.as_str(), address.port)).await? {
            match listen(addr) {
                Ok(l) => return Ok(l),
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the host resolves to no address",
            )
        }))
    }
}

/// A listener on `addr` (`SO_REUSEADDR`, as std's) with [`LISTEN_BACKLOG`].
fn listen(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv6() {
        tokio::net::TcpSocket::new_v6()?
    } else {
        tokio::net::TcpSocket::new_v4()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The collectors every scrape runs, registered in exposition order; the diskstats one is also
/// returned, for reloads of its device filter.
fn collectors(
    settings: &Settings,
    config: &Config,
    series: &Arc<SeriesStore>,
    discovered: Arc<discovery::Status>,
    reload: &Arc<ReloadStatus>,
    sandbox: &Arc<Sandbox>,
) -> (Registry, Reloaded) {
    let reloaded = Reloaded {
        diskstats: Arc::new(
            DiskstatsCollector::new(
                settings.roots.procfs.clone(),
                settings.roots.sysfs.clone(),
                config.diskstats.filter.clone(),
            )
            .with_probe_targets(series.clone())
            .with_devfs(settings.devfs.clone()),
        ),
        limits: Arc::new(LimitsCollector::new(
            series.clone(),
            settings.roots.sysfs.clone(),
            config.node_limits.clone(),
        )),
        cloud_stats: Arc::new(CloudStatsCollector::new(
            settings.roots.sysfs.clone(),
            match &settings.cloud_stats_pages {
                Some(dir) => crate::cloud_stats::Pages::Files { dir: dir.clone() },
                None => crate::cloud_stats::Pages::Devices {
                    devfs: settings.devfs.clone(),
                },
            },
            config.cloud_stats,
        )),
        cert: Arc::new(CertExpiry::default()),
    };
    let mut registry = Registry::new();
    registry.register(reloaded.diskstats.clone());
    registry.register(Arc::new(ProbesCollector::new(series.clone())));
    registry.register(Arc::new(DiscoveryCollector::new(discovered)));
    registry.register(reloaded.limits.clone());
    registry.register(reloaded.cloud_stats.clone());
    registry.register(Arc::new(ExporterCollector::new(
        reload.clone(),
        reloaded.cert.clone(),
    )));
    registry.register(Arc::new(ProcessMetrics::new()));
    registry.register(Arc::new(SandboxCollector::new(sandbox.clone())));
    (registry, reloaded)
}

/// The collectors whose settings a configuration reload changes.
struct Reloaded {
    /// Its device filter.
    diskstats: Arc<DiskstatsCollector>,
    /// The node's ceiling (`[limits]`).
    limits: Arc<LimitsCollector>,
    /// Whether it runs (`[cloud_stats]`).
    cloud_stats: Arc<CloudStatsCollector>,
    /// When the served TLS certificate expires (`--web.config.file`).
    cert: Arc<CertExpiry>,
}

/// SIGHUP's reload of `--web.config.file`, when there is one: a file that does not load keeps
/// the previous configuration and counts as a failed reload.
/// A file it names outside the directories the sandbox allowed at start is refused with the
/// sandbox's reason, which says to restart.
fn reload_web_config(
    path: Option<&std::path::Path>,
    app: &App,
    reload: &ReloadStatus,
    cert: &CertExpiry,
    sandbox: &Sandbox,
) {
    let Some(path) = path else {
        return;
    };
    match WebConfig::load(path) {
        Ok(web) => {
            cert.set(web.cert_not_after);
            app.set_web(web);
            tracing::info!("web configuration reloaded");
        }
        Err(err) => {
            reload.record_failure();
            let err = match sandbox.admits_reads("web configuration", &err.files) {
                Ok(()) => err.to_string(),
                Err(refused) => refused.to_string(),
            };
            tracing::error!(err = %err, "web configuration reload failed; keeping the previous one");
        }
    }
}

/// Runs the agent until SIGTERM or SIGINT, confined by `sandbox`. Returns an error for startup
/// failures.
pub async fn run(mut settings: Settings, sandbox: Arc<Sandbox>) -> anyhow::Result<()> {
    // Register signals first: SIGHUP's default action would otherwise kill us.
    let mut signals = signal_hook_tokio::Signals::new([SIGHUP, SIGTERM, SIGINT])?;
    let address = settings
        .listen_address
        .clone()
        .map_err(anyhow::Error::msg)?;

    if settings.config_file.is_none() {
        let dir = crate::state_dir::prepare(settings.state_dir()?, &settings.roots.procfs)?;
        tracing::info!(state_dir = %dir.display(), "no --config.file: running the embedded default (diskstats and a scratch-file probe)");
    }
    let lost_targets_file = settings.lost_targets_file().map(std::path::Path::to_owned);
    // The configurations move into the parts that run them; `settings` keeps the flags.
    let config = std::mem::take(&mut settings.config);
    let web = std::mem::take(&mut settings.web);
    let reload = Arc::new(ReloadStatus::loaded_now());
    let series = Arc::new(SeriesStore::new());
    series.set_histogram_layout(&config.histograms.classic_buckets);
    let mut scheduler = Scheduler::new(series.clone(), settings.roots.clone(), &config.scheduler);
    scheduler.apply(&config.targets, &config.scheduler).await;
    let discovered = Arc::new(discovery::Status::default());
    let mut discovery = Discovery::start(
        settings.roots.clone(),
        settings.devfs.clone(),
        Plan::new(&config),
        discovered.clone(),
        lost_targets_file,
    );
    let (registry, reloaded) =
        collectors(&settings, &config, &series, discovered, &reload, &sandbox);
    reloaded.cert.set(web.cert_not_after);

    let listener = bind(&address)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {address}: {e}"))?;
    let local = listener.local_addr()?;
    tracing::info!(address = %local, telemetry_path = %settings.telemetry_path, tls = web.tls.is_some(), basic_auth = web.requires_auth(), "listening");

    let app = Arc::new(App {
        scrapes: server::scrapes(Arc::new(registry)),
        telemetry_path: settings.telemetry_path.clone(),
        max_connections: settings.max_connections,
        series,
        web: std::sync::RwLock::new(Arc::new(web)),
    });
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(server::run(listener, app.clone(), async {
        let _ = stop_rx.await;
    }));

    let mut current = config;
    loop {
        let signal = tokio::select! {
            signal = signals.next() => signal,
            found = discovery.changed() => {
                scheduler
                    .apply(&with_configured(&current.targets, &found), &current.scheduler)
                    .await;
                continue;
            }
        };
        let Some(signal) = signal else { break };
        match signal {
            SIGHUP => {
                current = reload_config(
                    &settings.config_file,
                    current,
                    &reloaded.diskstats,
                    &app.series,
                    &mut scheduler,
                    &discovery,
                    &reload,
                    &sandbox,
                )
                .await;
                // The configuration in force, new or kept: its node ceiling.
                reloaded.limits.set_node_limits(current.node_limits.clone());
                reloaded.cloud_stats.set_settings(current.cloud_stats);
                reload_web_config(
                    settings.web_config_file.as_deref(),
                    &app,
                    &reload,
                    &reloaded.cert,
                    &sandbox,
                );
            }
            _ => {
                tracing::info!(signal, "shutting down");
                break;
            }
        }
    }
    signals.handle().close();
    discovery.stop();
    // Stop probes (in-flight I/O is cancelled and drained) while in-flight scrapes finish.
    let _ = stop_tx.send(());
    let (_, server) = tokio::join!(scheduler.shutdown(PROBE_STOP_PATIENCE), server);
    if let Err(err) = server {
        tracing::error!(%err, "server task failed");
    }
    tracing::info!("stopped");
    Ok(())
}

/// Re-reads the configuration file; applies it only when it is valid as a whole and the sandbox
/// allows what it needs.
// One argument per part a reload touches; grouping them would only move the list.
#[allow(clippy::too_many_arguments)]
async fn reload_config(
    path: &Option<PathBuf>,
    current: Config,
    diskstats: &DiskstatsCollector,
    series: &SeriesStore,
    scheduler: &mut Scheduler,
    discovery: &Discovery,
    status: &ReloadStatus,
    sandbox: &Sandbox,
) -> Config {
    let Some(path) = path else {
        tracing::info!("SIGHUP: no --config.file, the embedded default stays in force");
        status.record_success();
        return current;
    };
    // What the running sandbox does not allow cannot be granted any more.
    let loaded = match Config::load(path) {
        Ok(new) => sandbox
            .admits(&new)
            .await
            .map(|()| new)
            .map_err(anyhow::Error::from),
        Err(err) => Err(err.into()),
    };
    match loaded {
        Ok(mut new) => {
            if new.web != current.web {
                tracing::warn!(
                    "[web] changes take effect only after a restart; keeping the current listener"
                );
            }
            // What stays current is the [web] section in use, so that every later reload that
            // still differs from it warns again, and one that reverts the change does not.
            new.web = current.web;
            diskstats.set_filter(new.diskstats.filter.clone());
            if new.histograms != current.histograms {
                tracing::info!(
                    "[histograms] changed: probe counters and histograms start again from zero"
                );
            }
            series.set_histogram_layout(&new.histograms.classic_buckets);
            // Targets found by the old rules stay until the new rules' first rescan, which starts
            // now; those whose names a configured target now uses are stopped at once.
            let found: Arc<Vec<TargetSpec>> = discovery.current();
            scheduler
                .apply(&with_configured(&new.targets, &found), &new.scheduler)
                .await;
            discovery.set_plan(Plan::new(&new));
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
