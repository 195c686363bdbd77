//! The long-running agent: wires configuration, discovery, the scheduler, collectors and the
//! HTTP server together and handles signals (SIGTERM/SIGINT: graceful shutdown; SIGHUP: atomic
//! configuration reload).
//!
//! The scheduler runs the configured targets and those the discovery task found; this loop is
//! the one place that hands it both, after a reload and after every rescan that changed what was
//! found.

use crate::collectors::Registry;
use crate::collectors::cloud_metrics::CloudStatsCollector;
use crate::collectors::discovery_metrics::DiscoveryCollector;
use crate::collectors::disk_metrics::DiskstatsCollector;
use crate::collectors::exporter::{CertExpiry, ExporterCollector, ReloadStatus};
use crate::collectors::limit_metrics::LimitsCollector;
use crate::collectors::probe_metrics::ProbesCollector;
use crate::collectors::process::ProcessMetrics;
use crate::collectors::sandbox_metrics::SandboxCollector;
use crate::config::{Config, ConfigError, ListenAddress, TargetSpec};
use crate::discovery::matching::with_configured;
use crate::discovery::{self, Discovery, Plan};
use crate::sandbox::{self as confinement, Sandbox};
use crate::scheduler::Scheduler;
use crate::scheduler::target_devices::TargetDevices;
use crate::series::SeriesStore;
use crate::server::{self, App};
use crate::settings::Settings;
use crate::state_dir::{StateDirError, StateLock};
use crate::web_config::{WebConfigError, WebSecurity};
use futures_util::StreamExt;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How long a shutdown waits for the probe tasks to stop (their runs are cancelled and drain
/// their I/O) while in-flight scrapes finish.
pub const PROBE_STOP_PATIENCE: Duration = Duration::from_secs(4);

/// Exit code for an invalid configuration (`--config.check` and startup).
pub const EXIT_CONFIG: u8 = 2;

/// Exit code of `--config.check` for a valid configuration some of whose targets the machine's
/// state refuses now (a probe file that does not fit, a device to write that is in use): a start
/// runs them, and their runs fail with the reason while it holds.
pub const EXIT_FINDINGS: u8 = 1;

/// The state directory as the agent made it at start ([`prepare`]), for the files it keeps
/// there; its lock is held while this lives.
#[derive(Debug, Default)]
pub struct StateFiles {
    /// The state directory; none (the files are kept in memory only) when there is none or it
    /// could not be made.
    dir: Option<PathBuf>,
    /// Whether the configuration at start keeps files there ([`Settings::keeps_state`]): the
    /// sandbox grants the directory then.
    kept: bool,
    /// The directory's lock, where this agent uses the directory: one agent per state directory.
    _lock: Option<StateLock>,
}

impl StateFiles {
    /// Where the targets block rules lose are kept: in the state directory, when the
    /// configuration at start keeps state there.
    fn lost_targets_file(&self) -> Option<PathBuf> {
        self.kept_dir()
            .map(|dir| dir.join(discovery::lost_file::FILE_NAME))
    }

    /// The state directory, when the configuration at start keeps state there.
    fn kept_dir(&self) -> Option<&Path> {
        self.dir.as_deref().filter(|_| self.kept)
    }
}

/// The effects of a start on the file system, once, before the sandbox (its rules name
/// directories that exist) and before anything is written there: the embedded default's state
/// directory is made, checked ([`crate::state_dir::prepare`]) and locked ([`StateLock`]); an
/// error ends the start. Where the configuration keeps state, the state directory is made and
/// locked (an error is a warning: those files are kept in memory only). A directory another
/// agent holds ends the start either way ([`StateDirError::InUse`]), nothing written.
pub fn prepare(settings: &Settings) -> Result<StateFiles, StateDirError> {
    const KEPT: &str = "lost discovered targets and the last devices of configured targets are kept in memory only";
    let dir = match settings.state_dir() {
        Ok(dir) => dir,
        Err(err) if settings.config_file.is_none() => return Err(err),
        Err(err) => {
            if settings.keeps_state {
                tracing::warn!(err = %crate::logging::error_chain(&err), "no state directory: {KEPT}");
            }
            return Ok(StateFiles::default());
        }
    };
    let mut lock = None;
    if settings.config_file.is_none() {
        let prepared = crate::state_dir::prepare(dir, &settings.roots.procfs)?;
        lock = Some(StateLock::take(&prepared)?);
        tracing::info!(state_dir = %prepared.display(), "no --config.file: running the embedded default (diskstats and a scratch-file probe)");
    } else if settings.keeps_state {
        if let Err(err) = std::fs::create_dir_all(dir) {
            tracing::warn!(state_dir = %dir.display(), %err, "cannot create the state directory: {KEPT}");
            return Ok(StateFiles::default());
        }
        match StateLock::take(dir) {
            Ok(held) => lock = Some(held),
            Err(err @ StateDirError::InUse { .. }) => return Err(err),
            Err(err) => {
                tracing::warn!(err = %crate::logging::error_chain(&err), "{KEPT}");
                return Ok(StateFiles::default());
            }
        }
    }
    Ok(StateFiles {
        dir: Some(dir.to_owned()),
        kept: settings.keeps_state,
        _lock: lock,
    })
}

/// Confines the agent ([`crate::sandbox::confine`]) for `settings`, with the state directory
/// `state` made at start. Call from `main` before any thread starts.
pub fn sandbox(
    settings: &Settings,
    state: &StateFiles,
) -> Result<Arc<Sandbox>, confinement::RequiredError> {
    confinement::confine(&settings.sandbox_inputs(state.kept_dir()), &settings.config)
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
            .with_devfs(settings.roots.devfs.clone()),
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
                    devfs: settings.roots.devfs.clone(),
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
    loaded: Option<Result<WebSecurity, WebConfigError>>,
    app: &App,
    reload: &ReloadStatus,
    cert: &CertExpiry,
    sandbox: &Sandbox,
) {
    let Some(loaded) = loaded else {
        return;
    };
    match loaded {
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

/// What a reload reads: the configuration file and the web configuration (with the files it
/// names), each loaded and validated; `None` for one that is not configured.
struct ReloadFiles {
    config: Option<Result<Config, ConfigError>>,
    web: Option<Result<WebSecurity, WebConfigError>>,
}

impl ReloadFiles {
    /// Loads the files on a thread of their own, which nothing waits for: a read that blocks (a
    /// hung network mount) holds neither the signal loop nor the shutdown. The files are opened
    /// without blocking and refused unless regular files within their size limits
    /// ([`crate::bounded_read`]), so a FIFO in a configuration's place is answered at once.
    fn read(
        config: Option<PathBuf>,
        web: Option<PathBuf>,
    ) -> impl Future<Output = Option<ReloadFiles>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let load = move || ReloadFiles {
            config: config.as_deref().map(Config::load),
            web: web.as_deref().map(WebSecurity::load),
        };
        let spawned = std::thread::Builder::new()
            .name("diskprobe-reload".to_owned())
            .spawn(move || {
                let _ = tx.send(load());
            });
        if let Err(err) = &spawned {
            tracing::error!(%err, "SIGHUP: cannot start a thread to read the configuration; not reloaded");
        }
        async move { rx.await.ok() }
    }
}

/// Runs the agent for `settings` until SIGTERM or SIGINT, with the state directory made at
/// start ([`prepare`]), confined by `sandbox`. Returns an error for startup failures.
pub async fn run(
    settings: &Settings,
    state: &StateFiles,
    sandbox: Arc<Sandbox>,
) -> anyhow::Result<()> {
    // Register signals first: SIGHUP's default action would otherwise kill us.
    let mut signals = signal_hook_tokio::Signals::new([SIGHUP, SIGTERM, SIGINT])?;
    let shutdown = CancellationToken::new();
    let mut agent = Agent::start(settings, state, sandbox, &shutdown).await?;
    agent.serve(&mut signals).await;
    signals.handle().close();
    // One token stops discovery, the probes (in-flight I/O is cancelled and drained) and the
    // server (in-flight scrapes finish).
    shutdown.cancel();
    agent.stopped().await;
    tracing::info!("stopped");
    Ok(())
}

/// The running agent: what the signal loop, a reload and the shutdown touch.
pub struct Agent {
    /// `--config.file`, read again by a reload.
    config_file: Option<PathBuf>,
    /// `--web.config.file`, read again by a reload.
    web_config_file: Option<PathBuf>,
    sandbox: Arc<Sandbox>,
    /// The configuration in force.
    current: Config,
    scheduler: Scheduler,
    discovery: Discovery,
    app: Arc<App>,
    reload: Arc<ReloadStatus>,
    reloaded: Reloaded,
    server: tokio::task::JoinHandle<()>,
    local: std::net::SocketAddr,
}

impl Agent {
    /// Starts the scheduler, discovery and the server for `settings`, with the state directory
    /// made at start, all stopped by `shutdown` (then call [`Agent::stopped`]).
    pub async fn start(
        settings: &Settings,
        state: &StateFiles,
        sandbox: Arc<Sandbox>,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Agent> {
        let config = &settings.config;
        warn_machine_findings(config);
        // The last devices of configured targets, kept in the state directory where the
        // configuration at start keeps state (the sandbox grants it then).
        let known = Arc::new(TargetDevices::load(state.kept_dir()));
        known.configure(&config.targets, &config.retired);
        let reload = Arc::new(ReloadStatus::loaded_now());
        let series = Arc::new(SeriesStore::new());
        series.set_histogram_layout(&config.histograms.classic_buckets);
        let mut scheduler = Scheduler::stopped_by(
            series.clone(),
            settings.roots.clone(),
            &config.scheduler,
            known.clone(),
            shutdown,
        );
        scheduler.apply(&config.targets, &config.scheduler).await;
        let discovered = Arc::new(discovery::Status::default());
        let discovery = Discovery::start(
            settings.roots.clone(),
            settings.roots.devfs.clone(),
            Plan::new(config),
            discovered.clone(),
            state.lost_targets_file(),
            shutdown.child_token(),
        );
        let (registry, reloaded) =
            collectors(settings, config, &series, discovered, &reload, &sandbox);
        let web = settings.web.clone();
        reloaded.cert.set(web.cert_not_after);

        let address = &settings.listen_address;
        let listener = bind(address)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {address}: {e}"))?;
        let local = listener.local_addr()?;
        tracing::info!(address = %local, telemetry_path = %settings.telemetry_path, tls = web.tls.is_some(), basic_auth = web.requires_auth(), "listening");
        let app = Arc::new(App {
            scrapes: server::scrapes(Arc::new(registry)),
            telemetry_path: settings.telemetry_path.clone(),
            max_connections: settings.max_connections,
            series,
            web: std::sync::RwLock::new(web),
        });
        let server = tokio::spawn(server::run(
            listener,
            app.clone(),
            shutdown.child_token().cancelled_owned(),
        ));
        Ok(Agent {
            config_file: settings.config_file.clone(),
            web_config_file: settings.web_config_file.clone(),
            sandbox,
            current: config.clone(),
            scheduler,
            discovery,
            app,
            reload,
            reloaded,
            server,
            local,
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.local
    }

    /// Hands the scheduler what discovery finds and reloads on SIGHUP, until SIGTERM or SIGINT.
    async fn serve(&mut self, signals: &mut signal_hook_tokio::Signals) {
        loop {
            let signal = tokio::select! {
                signal = signals.next() => signal,
                found = self.discovery.changed() => {
                    let targets = with_configured(&self.current.targets, &found);
                    self.scheduler.apply(&targets, &self.current.scheduler).await;
                    continue;
                }
            };
            match signal {
                Some(SIGHUP) => {
                    let files =
                        ReloadFiles::read(self.config_file.clone(), self.web_config_file.clone());
                    tokio::pin!(files);
                    // SIGTERM while the files are read ends the agent at once.
                    let files = loop {
                        tokio::select! {
                            files = &mut files => break files,
                            signal = signals.next() => match signal {
                                Some(SIGHUP) => tracing::info!("SIGHUP: a reload is already reading the configuration"),
                                Some(signal) => {
                                    tracing::info!(signal, "shutting down (a reload was still reading the configuration)");
                                    return;
                                }
                                None => return,
                            },
                        }
                    };
                    match files {
                        Some(files) => self.reload(files).await,
                        None => self.reload.record_failure(),
                    }
                }
                Some(signal) => {
                    tracing::info!(signal, "shutting down");
                    return;
                }
                None => return,
            }
        }
    }

    /// SIGHUP: applies the configuration and the web configuration read for the reload.
    async fn reload(&mut self, files: ReloadFiles) {
        let current = std::mem::take(&mut self.current);
        self.current = reload_config(
            files.config,
            current,
            &self.reloaded.diskstats,
            &self.app.series,
            &mut self.scheduler,
            &self.discovery,
            &self.reload,
            &self.sandbox,
        )
        .await;
        // The configuration in force, new or kept: its node ceiling.
        self.reloaded
            .limits
            .set_node_limits(self.current.node_limits.clone());
        self.reloaded
            .cloud_stats
            .set_settings(self.current.cloud_stats);
        reload_web_config(
            files.web,
            &self.app,
            &self.reload,
            &self.reloaded.cert,
            &self.sandbox,
        );
    }

    /// Once the token given to [`Agent::start`] is cancelled: waits for discovery to stop, the
    /// probe tasks (for at most [`PROBE_STOP_PATIENCE`]) and the server (in-flight scrapes
    /// finish). Returns whether the probe tasks and the server stopped cleanly.
    pub async fn stopped(self) -> bool {
        let (probes, server, ()) = tokio::join!(
            self.scheduler.shutdown(PROBE_STOP_PATIENCE),
            self.server,
            self.discovery.stopped(),
        );
        if let Err(err) = &server {
            tracing::error!(%err, "server task failed");
        }
        probes && server.is_ok()
    }
}

/// Logs what the machine's state says against `config`'s targets (at start and at a reload):
/// the targets run all the same, and their runs fail with the reason while it holds.
fn warn_machine_findings(config: &Config) {
    for finding in &config.findings {
        tracing::warn!(%finding, "a target cannot run as the machine is now; it is scheduled all the same, and its runs fail with this reason while that holds");
    }
}

/// Applies the configuration read again (`None`: no `--config.file`) only when it is valid as
/// a whole and the sandbox allows what it needs.
// One argument per part a reload touches; grouping them would only move the list.
#[allow(clippy::too_many_arguments)]
async fn reload_config(
    loaded: Option<Result<Config, ConfigError>>,
    current: Config,
    diskstats: &DiskstatsCollector,
    series: &SeriesStore,
    scheduler: &mut Scheduler,
    discovery: &Discovery,
    status: &ReloadStatus,
    sandbox: &Sandbox,
) -> Config {
    let Some(loaded) = loaded else {
        tracing::info!("SIGHUP: no --config.file, the embedded default stays in force");
        status.record_success();
        return current;
    };
    // What the running sandbox does not allow cannot be granted any more.
    let loaded = match loaded {
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
            warn_machine_findings(&new);
            // Configured targets no longer configured, or whose disk is now retired, forget their
            // last devices; one whose device was gone takes what its path shows now.
            for (name, info) in scheduler
                .known_devices()
                .configure(&new.targets, &new.retired)
            {
                series.relabel(&name, info);
            }
            // Targets found by the old rules stay until the new rules' first rescan, which starts
            // now; those whose names a configured target now uses are stopped at once.
            let found: Arc<Vec<TargetSpec>> = discovery.current();
            scheduler
                .apply(&with_configured(&new.targets, &found), &new.scheduler)
                .await;
            discovery.set_plan(Plan::new(&new));
            status.record_success();
            tracing::info!("configuration reloaded");
            new
        }
        Err(err) => {
            status.record_failure();
            tracing::error!(%err, "configuration reload failed; keeping the previous configuration");
            current
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// One token stops everything [`Agent::start`] started: the server, the scheduler (a probe
    /// run in flight is cancelled) and discovery.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_token_stops_the_server_the_scheduler_and_discovery() {
        let tmp = tempfile::tempdir().unwrap();
        let probe_file = tmp.path().join("probe.dat");
        let config = tmp.path().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[web]\nlisten_address = \"127.0.0.1:0\"\n\
                 [defaults]\ninterval = \"2h\"\nruntime = \"1m\"\ntimeout = \"2m\"\n\
                 profiles = [\"randread-4k-qd1-gentle\"]\n\
                 [[targets]]\nname = \"file\"\npath = \"{}\"\nsize = \"4MiB\"\n\
                 [[discover]]\nid = \"volumes\"\nkind = \"mount\"\n\
                 mountpoint_include = \"^/nowhere$\"\nrescan = \"1s\"\n",
                probe_file.display()
            ),
        )
        .unwrap();
        let settings = Settings::from_args(&[
            "diskprobe_exporter",
            &format!("--config.file={}", config.display()),
            &format!("--state.dir={}", tmp.path().join("state").display()),
            "--sandbox.landlock=off",
        ])
        .unwrap();
        let state = prepare(&settings).unwrap();
        let sandbox = sandbox(&settings, &state).unwrap();
        let shutdown = CancellationToken::new();
        let agent = Agent::start(&settings, &state, sandbox, &shutdown)
            .await
            .unwrap();
        let addr = agent.local_addr();
        assert!(tokio::net::TcpStream::connect(addr).await.is_ok());
        // The run has started once its file is laid out (within the first-cycle delay); it
        // would go on for a minute.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !std::fs::metadata(&probe_file).is_ok_and(|m| m.len() == 4 << 20) {
            assert!(
                Instant::now() < deadline,
                "the probe run did not start: {:?}",
                std::fs::read_dir(tmp.path())
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let started = Instant::now();
        shutdown.cancel();
        let stopped = tokio::time::timeout(Duration::from_secs(5), agent.stopped()).await;
        assert_eq!(
            stopped,
            Ok(true),
            "stopped cleanly within 5 s (after {:?})",
            started.elapsed()
        );
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "the server still accepts connections"
        );
    }
}
