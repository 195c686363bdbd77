//! Self-confinement with Landlock: the agent restricts its own file and network access so that
//! write safety does not rest on its code alone.
//!
//! `main` applies one ruleset before any thread starts ([`confine`]): below Landlock ABI 8 a
//! ruleset binds only the calling thread and the threads it creates afterwards, so every thread
//! of the agent (the runtime's, the probes') inherits it. The ruleset handles every filesystem
//! right of ABI 7, TCP bind and connect, and the abstract-socket and signal scopes; it allows:
//! - reading (files and directory listings) under `--path.procfs`, `/proc` (the process
//!   metrics), `--path.sysfs` and `--path.cloud-stats-pages`; under `--path.devfs` also the
//!   block-device ioctls, among them the NVMe admin command of `[cloud_stats]` on the nodes
//!   `<devfs>/<kernel name>` it opens read-only;
//! - reading files in the directories of `--config.file`, `--web.config.file` and the TLS files
//!   it names (directories, so that files replaced by a rename, as Kubernetes updates a
//!   ConfigMap, are read again on reload); the name-service files (`/etc/hosts`, ...) when the
//!   listen address is a host name;
//! - creating, writing, truncating and removing regular files in each probe file's directory
//!   (the state directory for the embedded default) and in the directory under which a mount
//!   rule with `file` finds its mountpoints;
//! - reading, writing and the ioctls on block devices opted in for writes (the device node);
//! - binding TCP to the listen port only (port 0: an ephemeral port), and no TCP connect.
//!
//! A ruleset survives `execve` and can only be narrowed, so a reload that needs a path outside
//! these is refused ([`Sandbox::admits`]) with an error that says to restart. Where the kernel
//! has no Landlock, or refuses it, the agent runs unconfined and says so (log and
//! `diskprobe_sandbox_info`); `--sandbox.landlock=off` turns it off, `required` makes a missing
//! or partial confinement fatal. The first probe thread checks that the confinement holds there
//! ([`check`]).
//!
//! - [`rules`]: what needs which rights, the rules granted, and whether a path is covered.
//! - [`check`]: the check on a probe thread.

pub(crate) mod check;
pub(crate) mod rules;

use crate::config::{Config, ListenAddress};
use check::{Check, Outcome};
use landlock::{
    ABI, Access, AccessFs, AccessNet, LandlockStatus, NetPort, PathBeneath, PathFd,
    RestrictionStatus, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetError, RulesetStatus,
    Scope,
};
use rules::{AccessNames, GrantedRules, NeededRights, Rule, Usage, Wanted};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The Landlock ABI whose rights the ruleset handles: every filesystem right up to `ioctl_dev`
/// (ABI 5), TCP (ABI 4) and scopes (ABI 6); ABI 7 adds only logging flags. A kernel that offers
/// less enforces what it knows ([`Enforcement::Partial`]).
pub(crate) const TARGET_ABI: ABI = ABI::V7;

/// `--sandbox.landlock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Confine where the kernel offers Landlock; run unconfined (and say so) where it does not.
    Auto,
    /// Exit unless the whole ruleset is enforced.
    Required,
    /// Do not confine.
    Off,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Auto => "auto",
            Mode::Required => "required",
            Mode::Off => "off",
        })
    }
}

/// How much of the ruleset the kernel enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Enforcement {
    /// All of it.
    Full,
    /// The rights the kernel's ABI knows.
    Partial,
    /// None: the agent runs unconfined.
    No,
}

impl fmt::Display for Enforcement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Enforcement::Full => "full",
            Enforcement::Partial => "partial",
            Enforcement::No => "no",
        })
    }
}

/// What the agent needs to know to build its ruleset, gathered by [`crate::agent::sandbox`].
#[derive(Debug)]
pub(crate) struct Inputs<'a> {
    /// `--sandbox.landlock`.
    pub mode: Mode,
    /// `--path.procfs`.
    pub procfs: &'a Path,
    /// `--path.sysfs`.
    pub sysfs: &'a Path,
    /// `--path.devfs`.
    pub devfs: &'a Path,
    /// `--path.cloud-stats-pages`: fixture pages, read instead of the devices.
    pub cloud_stats_pages: Option<&'a Path>,
    /// `--config.file`, or none for the embedded default.
    pub config_file: Option<&'a Path>,
    /// `--web.config.file`.
    pub web_config_file: Option<&'a Path>,
    /// The files the web configuration names (certificates, keys, client CAs).
    pub web_files: &'a [PathBuf],
    /// The address the agent will listen on (none when it is invalid: the agent then stops).
    pub listen: Option<&'a ListenAddress>,
    /// The state directory, when the agent keeps state there (the lost targets of block rules):
    /// files are created, replaced and removed in it.
    pub state_dir: Option<&'a Path>,
}

/// The confinement applied at start, checked on reloads and reported by the sandbox collector.
#[derive(Debug)]
pub struct Sandbox {
    mode: Mode,
    /// The Landlock ABI the kernel offers (0: none); `None` when not asked (`off`).
    abi: Option<i32>,
    enforced: Enforcement,
    rules: GrantedRules,
    /// The paths the configuration at start used, allowed or not (reloads are not refused for
    /// them: those that could not be allowed were logged then).
    start_wanted: Vec<Wanted>,
    check: Check,
}

/// The confinement could not be had where `--sandbox.landlock=required` asks for it.
#[derive(Debug, thiserror::Error)]
#[error("--sandbox.landlock=required: {0}")]
pub struct RequiredError(String);

/// Why a reload is refused: it needs access the running ruleset does not grant, or a path it
/// names did not say what it is.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    /// Outside the ruleset.
    #[error(
        "{what}: {} is outside what the sandbox allowed at start (it needs {} there, and a confined process can only narrow its access); restart the agent to apply this configuration (or run it with --sandbox.landlock=off)",
        path.display(),
        AccessNames(*access)
    )]
    Outside {
        /// What needs the access.
        what: String,
        /// Where.
        path: PathBuf,
        /// The rights.
        access: landlock::BitFlags<AccessFs>,
    },
    /// Not known to be inside it.
    #[error(
        "{0}; cannot tell whether the sandbox allows it: restart the agent to apply this configuration (or run it with --sandbox.landlock=off)"
    )]
    Unknown(String),
}

/// The sandbox of this process once it is in force, for the check on probe threads
/// ([`check_on_this_thread`]): confinement is a property of the process, and the probe threads
/// are started deep inside the scheduler.
static IN_FORCE: OnceLock<Arc<Sandbox>> = OnceLock::new();

/// Whether a Landlock ruleset confines this process.
pub(crate) fn confined() -> bool {
    IN_FORCE.get().is_some()
}

/// Runs the check ([`check`]) on the calling thread the first time any thread calls this while a
/// ruleset is in force; otherwise does nothing. Probe threads call it before they open a target.
pub(crate) fn check_on_this_thread() {
    if let Some(sandbox) = IN_FORCE.get() {
        sandbox.check.run_once();
    }
}

impl Sandbox {
    /// An agent that runs unconfined.
    fn unconfined(mode: Mode, abi: Option<i32>) -> Sandbox {
        Sandbox {
            mode,
            abi,
            enforced: Enforcement::No,
            rules: GrantedRules::default(),
            start_wanted: Vec::new(),
            check: Check::not_run(),
        }
    }

    /// `--sandbox.landlock`.
    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// The Landlock ABI the kernel offers (0: none); `None` when it was not asked.
    pub(crate) fn landlock_abi(&self) -> Option<i32> {
        self.abi
    }

    /// How much of the ruleset is enforced.
    pub(crate) fn enforced(&self) -> Enforcement {
        self.enforced
    }

    /// What the check on a probe thread found so far.
    pub(crate) fn check(&self) -> Outcome {
        self.check.outcome()
    }

    /// Whether the running ruleset allows what `config` needs; always when nothing is enforced.
    /// Paths the configuration at start used are not looked at again; the others are, each on a
    /// thread of its own, for at most [`rules::PATIENCE`].
    pub(crate) async fn admits(&self, config: &Config) -> Result<(), Refused> {
        if self.enforced == Enforcement::No {
            return Ok(());
        }
        let (wanted, notes) = rules::wanted(config);
        for note in notes {
            tracing::warn!("sandbox: {note}");
        }
        let new: Vec<Wanted> = wanted
            .into_iter()
            .filter(|w| !self.start_wanted.contains(w))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("sandbox-reload".to_owned())
            .spawn(move || {
                let _ = tx.send(rules::find_all(&new, false).0);
            });
        let found = match spawned {
            Ok(_) => rx.await.unwrap_or_default(),
            Err(e) => vec![Err(format!("cannot start a thread: {e}"))],
        };
        for found in found {
            let found = found.map_err(Refused::Unknown)?;
            if !self.rules.covers(&found) {
                return Err(Refused::Outside {
                    what: found.what,
                    path: found.path,
                    access: found.access,
                });
            }
        }
        Ok(())
    }

    /// Whether the ruleset lets `what` read `files` (which it just tried to read, so their
    /// filesystems answer): a file in a directory not allowed at start is refused.
    pub(crate) fn admits_reads(&self, what: &str, files: &[PathBuf]) -> Result<(), Refused> {
        if self.enforced == Enforcement::No {
            return Ok(());
        }
        for file in files {
            let file = std::path::absolute(file).unwrap_or_else(|_| file.clone());
            let wanted = Wanted {
                path: rules::parent_dir(&file),
                usage: Usage::Rights(rules::READ_FILES),
                what: format!("{what}: directory of {}", file.display()),
            };
            let found = wanted.find(false).map_err(Refused::Unknown)?;
            if !self.rules.covers(&found) {
                return Err(Refused::Outside {
                    what: found.what,
                    path: found.path,
                    access: found.access,
                });
            }
        }
        Ok(())
    }
}

/// What the kernel made of the ruleset: its Landlock ABI (0: none), how much of the ruleset it
/// enforces and, for when it enforces none, why.
fn enforcement(applied: &Result<RestrictionStatus, RulesetError>) -> (i32, Enforcement, String) {
    match applied {
        Ok(status) => {
            let abi = match status.landlock {
                LandlockStatus::Available {
                    effective_abi,
                    kernel_abi,
                } => kernel_abi.unwrap_or(effective_abi as i32),
                LandlockStatus::NotEnabled | LandlockStatus::NotImplemented => 0,
            };
            let enforced = match status.ruleset {
                RulesetStatus::FullyEnforced => Enforcement::Full,
                RulesetStatus::PartiallyEnforced => Enforcement::Partial,
                _ => Enforcement::No,
            };
            let why = match status.landlock {
                // The crate maps every error of the version query but EOPNOTSUPP here: ENOSYS
                // from a kernel without Landlock, or whatever a seccomp filter answers.
                LandlockStatus::NotImplemented => {
                    "Landlock is not available (a kernel without it, or a seccomp filter that refuses it)"
                }
                LandlockStatus::NotEnabled => {
                    "Landlock is not enabled in this kernel (EOPNOTSUPP; see lsm= at boot)"
                }
                LandlockStatus::Available { .. } => "the kernel enforces none of the ruleset",
            };
            (abi, enforced, why.to_owned())
        }
        Err(err) => (
            0,
            Enforcement::No,
            format!("the ruleset was refused: {err}"),
        ),
    }
}

/// Applies the ruleset for `config` to this process (call before any thread starts), logs what
/// it applied, and returns what to report. Errs only when `required` cannot be met.
pub(crate) fn confine(inputs: &Inputs<'_>, config: &Config) -> Result<Arc<Sandbox>, RequiredError> {
    if inputs.mode == Mode::Off {
        tracing::info!(
            mode = %inputs.mode,
            "sandbox: off (--sandbox.landlock=off); running unconfined"
        );
        return Ok(Arc::new(Sandbox::unconfined(inputs.mode, None)));
    }
    let (rules, fds, start_wanted, stuck) = plan(inputs, config);
    let threads = std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count());
    if threads > 1 {
        tracing::warn!(
            threads,
            stuck,
            "sandbox: other threads run (those left waiting for a path); below Landlock ABI 8 they stay unconfined"
        );
    }
    let port = inputs.listen.map(|a| a.port);
    let applied = apply(fds, port);
    let (abi, enforced, why) = enforcement(&applied);
    if enforced == Enforcement::No {
        tracing::warn!(mode = %inputs.mode, landlock_abi = abi, enforced = %enforced, "sandbox: {why}; running unconfined");
        if inputs.mode == Mode::Required {
            return Err(RequiredError(why));
        }
        return Ok(Arc::new(Sandbox::unconfined(inputs.mode, Some(abi))));
    }
    tracing::info!(
        mode = %inputs.mode,
        landlock_abi = abi,
        enforced = %enforced,
        bind_tcp = port.map_or_else(|| "none".to_owned(), |p| p.to_string()),
        connect_tcp = "none",
        "sandbox: Landlock ruleset applied; everything else is denied"
    );
    for rule in rules.iter() {
        tracing::info!(path = %rule.path.display(), access = %AccessNames(rule.access), why = %rule.what, "sandbox: allowed");
    }
    if inputs.mode == Mode::Required && enforced != Enforcement::Full {
        return Err(RequiredError(format!(
            "the kernel (Landlock ABI {abi}) enforces only part of the ruleset (ABI {})",
            TARGET_ABI as i32
        )));
    }
    if inputs.mode == Mode::Required && threads > 1 {
        return Err(RequiredError(format!(
            "{} threads run unconfined",
            threads - 1
        )));
    }
    let check = Check::new(check_dirs(&rules));
    let sandbox = Arc::new(Sandbox {
        mode: inputs.mode,
        abi: Some(abi),
        enforced,
        rules,
        start_wanted,
        check,
    });
    let _ = IN_FORCE.set(sandbox.clone());
    Ok(sandbox)
}

/// The rules for `inputs` and `config` with their paths opened (`O_PATH`), the paths the
/// configuration uses, and how many threads were left waiting for a path that did not answer.
fn plan(
    inputs: &Inputs<'_>,
    config: &Config,
) -> (GrantedRules, Vec<(PathFd, Rule)>, Vec<Wanted>, usize) {
    let fixed = |path: &Path, access, what: &str| Wanted {
        path: std::path::absolute(path).unwrap_or_else(|_| path.to_owned()),
        usage: Usage::Rights(access),
        what: what.to_owned(),
    };
    let mut wanted = vec![
        fixed(inputs.procfs, rules::READ_TREE, "--path.procfs"),
        fixed(Path::new("/proc"), rules::READ_TREE, "process metrics"),
        fixed(inputs.sysfs, rules::READ_TREE, "--path.sysfs"),
        fixed(inputs.devfs, rules::DEVFS, "--path.devfs"),
    ];
    if let Some(dir) = inputs.cloud_stats_pages {
        wanted.push(fixed(dir, rules::READ_TREE, "--path.cloud-stats-pages"));
    }
    if let Some(dir) = inputs.state_dir {
        wanted.push(fixed(dir, rules::STATE_DIR, "state directory"));
    }
    let files = [
        (inputs.config_file, "--config.file"),
        (inputs.web_config_file, "--web.config.file"),
    ]
    .into_iter()
    .filter_map(|(file, what)| Some((file?.to_owned(), what)))
    .chain(inputs.web_files.iter().map(|f| (f.clone(), "TLS file")));
    for (file, what) in files {
        // The directory as named, and the one the file really is in (through links); these
        // files were just read, so their filesystems answer.
        let mut dirs = vec![rules::parent_dir(&file)];
        if let Ok(real) = std::fs::canonicalize(&file) {
            dirs.push(rules::parent_dir(&real));
        }
        dirs.dedup();
        let what = format!("directory of the {what}");
        wanted.extend(dirs.iter().map(|dir| fixed(dir, rules::READ_FILES, &what)));
    }
    let named_host = inputs
        .listen
        .is_some_and(|a| !a.host.is_empty() && a.host.parse::<std::net::IpAddr>().is_err());
    if named_host {
        for file in NAME_SERVICE_FILES.iter().filter(|f| Path::new(f).exists()) {
            wanted.push(fixed(
                Path::new(file),
                rules::READ_FILES,
                "resolving the listen address",
            ));
        }
    }
    let (from_config, notes) = rules::wanted(config);
    for note in notes {
        tracing::warn!("sandbox: {note}");
    }
    wanted.extend(from_config.iter().cloned());
    let (found, stuck) = rules::find_all(&wanted, true);
    let mut rules = GrantedRules::default();
    let mut fds = Vec::new();
    for found in found {
        match found {
            Ok(found) => add(&mut rules, &mut fds, found),
            Err(note) => tracing::warn!("sandbox: no rule: {note}"),
        }
    }
    (rules, fds, from_config, stuck)
}

/// Adds `found` to `rules` unless they cover it already, keeping its `O_PATH` descriptor.
fn add(rules: &mut GrantedRules, fds: &mut Vec<(PathFd, Rule)>, found: NeededRights) {
    if rules.add(&found)
        && let (Some(fd), Some(rule)) = (found.fd, rules.iter().last())
    {
        fds.push((fd, rule.clone()));
    }
}

/// Files glibc reads to resolve a host name.
const NAME_SERVICE_FILES: [&str; 5] = [
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
];

/// Where the check tries to write: beside each directory the rules let it write in (its parent),
/// then the configuration's directories and the temporary directory; only directories that lie
/// under no rule with `write_file` (by name: the filesystem is asked on the probe thread).
fn check_dirs(rules: &GrantedRules) -> Vec<PathBuf> {
    let writable: Vec<&Path> = rules
        .iter()
        .filter(|r| r.access.contains(AccessFs::WriteFile))
        .map(|r| r.path.as_path())
        .collect();
    let beside = writable
        .iter()
        .filter_map(|p| p.parent().map(Path::to_owned));
    let readable = rules
        .iter()
        .filter(|r| r.access == rules::READ_FILES)
        .map(|r| r.path.clone());
    let mut dirs: Vec<PathBuf> = Vec::new();
    for dir in beside.chain(readable).chain([std::env::temp_dir()]) {
        if !dirs.contains(&dir) && !writable.iter().any(|w| dir.starts_with(w)) {
            dirs.push(dir);
        }
    }
    dirs
}

/// Builds the ruleset from the opened paths and restricts this thread (and the threads it
/// starts later) with it. Asks nothing of the filesystem: the rules name open descriptors.
fn apply(fds: Vec<(PathFd, Rule)>, port: Option<u16>) -> Result<RestrictionStatus, RulesetError> {
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(TARGET_ABI))?
        .handle_access(AccessNet::from_all(TARGET_ABI))?
        .scope(Scope::from_all(TARGET_ABI))?
        .create()?;
    for (fd, rule) in fds {
        ruleset = ruleset.add_rule(PathBeneath::new(fd, rule.access))?;
    }
    if let Some(port) = port {
        ruleset = ruleset.add_rule(NetPort::new(port, AccessNet::BindTcp))?;
    }
    ruleset.restrict_self()
}
