//! `diskprobe_exporter probe`: run profiles once on a target and print the results, as a fio-like
//! table or as a JSON array (one object per profile run).

use crate::blockdev::counters::DiskReader;
use crate::probe::engine::{self, EngineChoice, RunOptions};
use crate::probe::fio;
use crate::probe::io_target::{self, OpenTarget, TargetKind, TargetOptions};
use crate::probe::measurement::{Ending, LatencySummary, Measurement};
use crate::probe::profile::{BUILTIN_RUNTIME, DEFAULT_READ_PROFILES, OpenSync, Profile, SyncCall};
use crate::run_context::{self, RunContext};
use crate::units;
use clap::{Args, ValueEnum};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Exit code for invalid arguments (unknown profile, bad fio string, writes not allowed).
const EXIT_USAGE: u8 = 2;

/// Flags of the one-shot `probe` subcommand.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Block device or file to probe. A missing file is created (at --size, default 256MiB) and
    /// filled with random data.
    #[arg(long, value_name = "PATH")]
    pub target: PathBuf,

    /// Built-in profile to run (repeatable). Without --profile and --fio, the read-only built-ins
    /// randread-4k-qd1, randread-4k-qd32 and read-1m-qd16 run.
    #[arg(long = "profile", value_name = "NAME")]
    pub profiles: Vec<String>,

    /// Custom profile as a fio option string, e.g. '-rw=randread -bs=4k -iodepth=32' (repeatable).
    /// Without -runtime or -number_ios it runs for 1s (or --runtime).
    #[arg(long = "fio", value_name = "OPTIONS", allow_hyphen_values = true)]
    pub fio: Vec<String>,

    /// Runtime of every profile (overrides the profiles' own), e.g. 5s, 500ms.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub runtime: Option<Duration>,

    /// Region size: the probe file size, or the length of the probed region of a block device.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub size: Option<u64>,

    /// Start of the probed region of a block device, in bytes (e.g. 1GiB).
    #[arg(long, value_parser = parse_size, default_value = "0", value_name = "SIZE")]
    pub offset: u64,

    /// I/O engine.
    #[arg(long, value_enum, default_value_t = EngineChoice::Auto)]
    pub engine: EngineChoice,

    /// Allow write profiles (on block devices only when unmounted and unused).
    #[arg(long)]
    pub allow_writes: bool,

    /// Hard limit per profile run.
    #[arg(long, value_parser = parse_duration, default_value = "30s", value_name = "DURATION")]
    pub timeout: Duration,

    /// A run whose I/O threads waited for a CPU longer than this share of its I/O time is marked
    /// starved.
    #[arg(long, default_value_t = crate::probe::measurement::DEFAULT_STARVED_ABOVE, value_name = "SHARE")]
    pub starved_above: f64,

    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// fio-like summary lines.
    Table,
    /// A JSON array with one object per profile run.
    Json,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    units::parse_duration(s).map_err(|e| e.to_string())
}

fn parse_size(s: &str) -> Result<u64, String> {
    units::parse_size(s).map_err(|e| e.to_string())
}

/// One profile run, as printed in JSON.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunRecord {
    /// The target path.
    pub target: String,
    /// Kernel name of the block device under the target, when known.
    pub device: Option<String>,
    /// `block_device` or `file`.
    pub kind: Option<&'static str>,
    /// Filesystem type of a file target.
    pub fstype: Option<String>,
    /// Profile name.
    pub profile: String,
    /// fio `rw=` value.
    pub rw: &'static str,
    /// Bytes per I/O.
    pub block_size: u64,
    /// I/Os in flight.
    pub iodepth: u32,
    /// Rate cap, when set.
    pub rate_iops: Option<u32>,
    /// O_DIRECT (true) or buffered writes (fio's `direct`).
    pub direct: bool,
    /// `fsync` after every N writes, when set.
    pub fsync: Option<u32>,
    /// `fdatasync` after every N writes, when set.
    pub fdatasync: Option<u32>,
    /// `dsync` (O_DSYNC) or `sync` (O_SYNC), when set.
    pub sync: Option<&'static str>,
    /// Engine that ran the I/O.
    pub engine: Option<&'static str>,
    /// Completed I/Os.
    pub ios: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// Elapsed seconds.
    pub elapsed_seconds: f64,
    /// I/Os per second.
    pub iops: f64,
    /// Bytes per second.
    pub bandwidth_bytes_per_second: f64,
    /// Per-I/O latency (for rate-capped I/Os the device held back, from their due time).
    pub latency_seconds: LatencySummary,
    /// Rate-capped profiles: per-I/O latency from submission (fio's `lat`); null otherwise.
    pub submission_latency_seconds: Option<LatencySummary>,
    /// Rate-capped profiles: I/Os the device held back past their due time; null otherwise.
    pub held_back_ios: Option<u64>,
    /// Profiles with `fsync`/`fdatasync`: syncs completed; null otherwise.
    pub syncs: Option<u64>,
    /// Profiles with `fsync`/`fdatasync`: per-sync latency (fio's `sync` section); null
    /// otherwise.
    pub sync_latency_seconds: Option<LatencySummary>,
    /// Share of the run's I/O time in which its I/O threads waited for a CPU (0..1: for a
    /// rate-capped run, their run-queue wait while I/O was in flight over the sum of its I/Os'
    /// latencies; for an uncapped one, per thread over the elapsed time); null when the kernel
    /// does not tell.
    pub cpu_wait_share: Option<f64>,
    /// Whether the run was starved of CPU: `cpu_wait_share` above `--starved-above`.
    pub starved: Option<bool>,
    /// Share of the run's wall time in which some task on the host waited for a CPU
    /// (`/proc/pressure/cpu`); null without it.
    pub host_cpu_pressure: Option<f64>,
    /// Reads (writes, for a write profile) the block layer completed on the disks under the
    /// target during the run, other processes' included; null for a target without a block
    /// device.
    pub device_ios: Option<u64>,
    /// Their mean time in the block layer (`/sys/block/DISK/stat`); null when none completed.
    pub device_latency_seconds: Option<f64>,
    /// Failed I/Os.
    pub io_errors: u64,
    /// The hard timeout ended the run.
    pub timed_out: bool,
    /// Preflight warnings (tmpfs, overlayfs).
    pub warnings: Vec<String>,
    /// Why the run failed; null on success.
    pub error: Option<String>,
}

impl RunRecord {
    fn new(target: &Path, open: Option<&OpenTarget>, profile: &Profile) -> RunRecord {
        RunRecord {
            target: target.display().to_string(),
            device: open.and_then(|t| t.device.as_ref().map(|d| d.kname.clone())),
            kind: open.map(|t| t.kind.as_str()),
            fstype: open
                .filter(|t| t.kind == TargetKind::File)
                .map(|t| t.fstype.clone()),
            profile: profile.name.clone(),
            rw: profile.rw.as_str(),
            block_size: profile.block_size,
            iodepth: profile.iodepth,
            rate_iops: profile.rate_iops,
            direct: profile.durability.direct,
            fsync: sync_every(profile, SyncCall::Fsync),
            fdatasync: sync_every(profile, SyncCall::Fdatasync),
            sync: profile.durability.open_sync.map(OpenSync::as_str),
            engine: None,
            ios: 0,
            bytes: 0,
            elapsed_seconds: 0.0,
            iops: 0.0,
            bandwidth_bytes_per_second: 0.0,
            latency_seconds: LatencySummary::default(),
            submission_latency_seconds: None,
            held_back_ios: None,
            syncs: None,
            sync_latency_seconds: None,
            cpu_wait_share: None,
            starved: None,
            host_cpu_pressure: None,
            device_ios: None,
            device_latency_seconds: None,
            io_errors: 0,
            timed_out: false,
            warnings: open.map(|t| t.warnings.clone()).unwrap_or_default(),
            error: None,
        }
    }

    fn fill(&mut self, r: &Measurement, seen: &RunContext, starved_above: f64) {
        self.cpu_wait_share = r.cpu_wait_share();
        self.starved = self.cpu_wait_share.map(|share| share > starved_above);
        self.host_cpu_pressure = seen.host_cpu_pressure;
        self.device_ios = seen.device.map(|d| d.ios);
        self.device_latency_seconds = seen
            .device
            .and_then(|d| d.per_io())
            .map(|d| d.as_secs_f64());
        self.engine = Some(r.engine.as_str());
        self.ios = r.ios;
        self.bytes = r.bytes;
        self.elapsed_seconds = r.elapsed.as_secs_f64();
        self.iops = r.iops();
        self.bandwidth_bytes_per_second = r.bandwidth();
        self.latency_seconds = r.latency_summary();
        self.submission_latency_seconds = r.submission_latency_summary();
        self.held_back_ios = r.submission_latency_ns.as_ref().map(|_| r.held_back);
        self.syncs = r.syncs.as_ref().map(|s| s.count);
        self.sync_latency_seconds = r.sync_latency_summary();
        self.io_errors = r.errors;
        self.timed_out = r.ending == Ending::TimedOut;
        self.error = r.failure();
    }
}

/// N of a profile that calls `call` after every N writes.
fn sync_every(profile: &Profile, call: SyncCall) -> Option<u32> {
    profile
        .durability
        .sync_every
        .filter(|s| s.call == call)
        .map(|s| s.every)
}

/// Resolves the profiles to run: named built-ins, fio strings, or the read-only defaults.
pub(crate) fn select_profiles(
    names: &[String],
    fio_strings: &[String],
    runtime: Option<Duration>,
) -> Result<Vec<Profile>, String> {
    let mut profiles = Vec::new();
    for name in names {
        let p = Profile::builtin(name).ok_or_else(|| {
            let known: Vec<String> = Profile::builtins().into_iter().map(|p| p.name).collect();
            format!("unknown profile {name:?}; built-ins: {}", known.join(", "))
        })?;
        profiles.push(p);
    }
    for s in fio_strings {
        profiles.push(fio::parse(s).map_err(|e| e.to_string())?);
    }
    if profiles.is_empty() {
        profiles = DEFAULT_READ_PROFILES
            .iter()
            .filter_map(|n| Profile::builtin(n))
            .collect();
    }
    if let Some(rt) = runtime {
        for p in &mut profiles {
            p.runtime = Some(rt);
        }
    }
    Ok(profiles)
}

/// The profiles `args` name, refused (with the message) when one writes without
/// `--allow-writes`.
fn checked_profiles(args: &ProbeArgs) -> Result<Vec<Profile>, String> {
    let profiles = select_profiles(&args.profiles, &args.fio, args.runtime)?;
    if let Some(p) = profiles.iter().find(|p| p.rw.is_write())
        && !args.allow_writes
    {
        return Err(format!(
            "profile {} writes to {}; pass --allow-writes to allow it",
            p.name,
            args.target.display()
        ));
    }
    Ok(profiles)
}

/// Runs `profile` once on `opened` (or records why the target did not open), reading what the
/// machine did around it under `procfs` and `sysfs`.
fn probe_once(
    path: &Path,
    opened: &Result<OpenTarget, String>,
    profile: &Profile,
    opts: &RunOptions,
    roots: (&Path, &Path),
    starved_above: f64,
) -> RunRecord {
    match opened {
        Err(err) => {
            let mut record = RunRecord::new(path, None, profile);
            record.error = Some(err.clone());
            record
        }
        Ok(t) => {
            let mut record = RunRecord::new(path, Some(t), profile);
            let (procfs, sysfs) = roots;
            let disk = t.device.as_ref().map(|d| DiskReader::new(sysfs, &d.disks));
            let before = run_context::before(procfs, disk, profile.rw.is_write());
            let ran = engine::run(t, profile, opts);
            let seen = before.after();
            match ran {
                Ok(result) => record.fill(&result, &seen, starved_above),
                Err(err) => record.error = Some(err.to_string()),
            }
            record
        }
    }
}

/// A flag that SIGTERM and SIGINT set.
fn cancel_on_signals() -> Arc<AtomicBool> {
    let cancel = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        if let Err(err) = signal_hook::flag::register(signal, Arc::clone(&cancel)) {
            tracing::warn!(%err, "cannot install a signal handler; SIGTERM will kill the probe");
        }
    }
    cancel
}

/// Runs the one-shot probe.
pub fn run(args: ProbeArgs, procfs: &Path, sysfs: &Path, devfs: &Path) -> ExitCode {
    let profiles = match checked_profiles(&args) {
        Ok(p) => p,
        Err(err) => {
            eprintln!("diskprobe_exporter probe: {err}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let cancel = cancel_on_signals();
    let size = args
        .size
        .or_else(|| profiles.iter().filter_map(|p| p.size).max());
    // The probe file may be refilled only where write profiles run (with --allow-writes).
    let rewrite = profiles.iter().any(|p| p.rw.is_write());
    let options = |write: bool| TargetOptions {
        size,
        offset: args.offset,
        write,
        rewrite,
        // One-shot mode has a single opt-in: --allow-writes (checked above) covers devices.
        device_writes: write,
        min_free: 0,
        procfs: procfs.to_owned(),
        sysfs: sysfs.to_owned(),
        devfs: devfs.to_owned(),
        // One run: nothing to pin it to.
        pinned: None,
        // One-shot mode runs unconfined.
        confined: false,
        filesystem: Default::default(),
    };
    let opts = RunOptions {
        engine: args.engine,
        timeout: args.timeout,
        cancel: Arc::clone(&cancel),
        default_runtime: args.runtime.unwrap_or(BUILTIN_RUNTIME),
        ..RunOptions::default()
    };

    // Read profiles use a read-only open; write profiles a writable one. Each is opened once.
    let mut read_target: Option<Result<OpenTarget, String>> = None;
    let mut write_target: Option<Result<OpenTarget, String>> = None;
    let mut records = Vec::new();
    let mut failed = false;
    for profile in &profiles {
        if cancel.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let slot = if profile.rw.is_write() {
            &mut write_target
        } else {
            &mut read_target
        };
        // SIGINT/SIGTERM also stop a probe-file fill, between two chunks.
        let go_on = || !cancel.load(std::sync::atomic::Ordering::Relaxed);
        let opened = slot.get_or_insert_with(|| {
            io_target::open_reporting(&args.target, &options(profile.rw.is_write()), &go_on)
                .map_err(|e| e.to_string())
        });
        let record = probe_once(
            &args.target,
            opened,
            profile,
            &opts,
            (procfs, sysfs),
            args.starved_above,
        );
        if let Some(err) = &record.error {
            failed = true;
            tracing::error!(profile = %profile.name, %err, "probe failed");
        }
        if args.format == OutputFormat::Table {
            emit(&table(&record));
        }
        records.push(record);
    }
    if args.format == OutputFormat::Json && !emit_json(&records) {
        return ExitCode::FAILURE;
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Prints the records as one JSON array; false when they cannot be encoded.
fn emit_json(records: &[RunRecord]) -> bool {
    match serde_json::to_string_pretty(records) {
        Ok(s) => {
            emit(&format!("{s}\n"));
            true
        }
        Err(err) => {
            eprintln!("diskprobe_exporter probe: cannot encode JSON: {err}");
            false
        }
    }
}

/// Writes to stdout; a closed pipe (`| head`) is not an error worth a panic.
fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

fn human(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.1}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1}k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

/// fio's two lines for a latency summary (`what`: "lat" or "sync"), in microseconds.
fn latency_lines(out: &mut String, what: &str, l: &LatencySummary) {
    let us = |s: f64| s * 1e6;
    *out += &format!(
        "    {what} (usec): min={:.0}, max={:.0}, avg={:.2}\n",
        us(l.min),
        us(l.max),
        us(l.mean)
    );
    *out += &format!(
        "    {what} percentiles (usec): 50.00th=[{:.0}], 90.00th=[{:.0}], 99.00th=[{:.0}], 99.90th=[{:.0}], 99.99th=[{:.0}]\n",
        us(l.p50),
        us(l.p90),
        us(l.p99),
        us(l.p999),
        us(l.p9999)
    );
}

/// What the run waited for a CPU and what the device took, in one line.
fn cpu_and_device_line(r: &RunRecord) -> String {
    let percent =
        |share: Option<f64>| share.map_or("-".to_owned(), |s| format!("{:.1}%", s * 100.0));
    let starved = if r.starved == Some(true) {
        " (starved)"
    } else {
        ""
    };
    let device = match (r.device_ios, r.device_latency_seconds) {
        (Some(ios), Some(lat)) => format!("ios={ios}, time per io={:.2} usec", lat * 1e6),
        (Some(ios), None) => format!("ios={ios}"),
        _ => "-".to_owned(),
    };
    format!(
        "  cpu wait={}{starved}, host cpu pressure={}; device: {device}\n",
        percent(r.cpu_wait_share),
        percent(r.host_cpu_pressure)
    )
}

/// fio-like summary of one run.
pub(crate) fn table(r: &RunRecord) -> String {
    let mut options = String::new();
    if let Some(n) = r.rate_iops {
        options += &format!(", rate_iops={n}");
    }
    if !r.direct {
        options += ", direct=0";
    }
    for (key, n) in [("fsync", r.fsync), ("fdatasync", r.fdatasync)] {
        if let Some(n) = n {
            options += &format!(", {key}={n}");
        }
    }
    if let Some(sync) = r.sync {
        options += &format!(", sync={sync}");
    }
    let mut out = format!(
        "{}: (rw={}, bs={}, iodepth={}{options}, engine={}) target={} device={}\n",
        r.profile,
        r.rw,
        r.block_size,
        r.iodepth,
        r.engine.unwrap_or("-"),
        r.target,
        r.device.as_deref().unwrap_or("-"),
    );
    for w in &r.warnings {
        out += &format!("  warning: {w}\n");
    }
    if r.engine.is_some() {
        let dir = if r.rw.contains("write") {
            "write"
        } else {
            "read"
        };
        let mib = r.bandwidth_bytes_per_second / (1 << 20) as f64;
        let mb = r.bandwidth_bytes_per_second / 1e6;
        out += &format!(
            "  {dir}: IOPS={}, BW={mib:.1}MiB/s ({mb:.1}MB/s)({:.1}MiB/{}msec)\n",
            human(r.iops),
            r.bytes as f64 / (1 << 20) as f64,
            (r.elapsed_seconds * 1e3).round()
        );
        latency_lines(&mut out, "lat", &r.latency_seconds);
        if let (Some(syncs), Some(l)) = (r.syncs, &r.sync_latency_seconds) {
            out += &format!("  fsync/fdatasync: syncs={syncs}\n");
            latency_lines(&mut out, "sync", l);
        }
        out += &format!("  ios={}, errors={}\n", r.ios, r.io_errors);
        out += &cpu_and_device_line(r);
    }
    if let Some(err) = &r.error {
        out += &format!("  error: {err}\n");
    }
    out
}
