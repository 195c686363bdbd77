//! The `diskprobe_exporter` binary: parses flags and hands over to the library.

use clap::Parser;
use diskprobe_exporter::agent::{self, EXIT_CONFIG, EXIT_FINDINGS};
use diskprobe_exporter::cli::{Cli, Command};
use diskprobe_exporter::logging::error_chain;
use diskprobe_exporter::settings::Settings;
use std::process::ExitCode;

/// How long the exit waits for blocking work still running (a scrape stuck on an
/// unresponsive file) once the agent has stopped.
const BLOCKING_WORK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    diskprobe_exporter::logging::init(cli.log_level, cli.log_format);
    if let Some(Command::Probe(args)) = cli.command.take() {
        return diskprobe_exporter::probe::oneshot::run(args, &cli.procfs, &cli.sysfs, &cli.devfs);
    }
    let settings = match Settings::load(cli) {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("{}", error_chain(err.as_ref()));
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if settings.config_check {
        // What the machine's state says against targets does not make the configuration
        // invalid: a start runs them (their runs fail with the reason while it holds).
        for finding in &settings.config.findings {
            eprintln!(
                "warning: {finding} (the machine's state: the target loads, and its runs fail with this reason while it holds)"
            );
        }
        return match settings.config.findings.len() {
            0 => {
                println!("{}: configuration is valid", settings.config_source());
                ExitCode::SUCCESS
            }
            n => {
                println!(
                    "{}: configuration is valid; the machine's state refuses targets now ({n} warning(s)): exit {EXIT_FINDINGS}",
                    settings.config_source()
                );
                ExitCode::from(EXIT_FINDINGS)
            }
        };
    }
    // The start's effects on the file system, once; then, before any thread starts, the
    // sandbox: below Landlock ABI 8 a ruleset binds only the calling thread and the threads it
    // starts afterwards.
    let state = match agent::prepare(&settings) {
        Ok(state) => state,
        Err(err) => {
            tracing::error!(err = %error_chain(&err), "fatal");
            return ExitCode::FAILURE;
        }
    };
    let sandbox = match agent::sandbox(&settings, &state) {
        Ok(sandbox) => sandbox,
        Err(err) => {
            tracing::error!(%err, "cannot confine the agent");
            return ExitCode::FAILURE;
        }
    };
    // One worker serves HTTP, signals and timers; blocking work (scrapes reading /proc and /sys,
    // bcrypt) gets one thread of its own. Probes never run here: the engine has dedicated threads.
    // More threads do not make scrapes faster on small machines, but each keeps its own malloc
    // arena: with two of each the agent's RSS after heavy scraping was ~20% higher
    // (bench/agent_idle_and_scrape.sh, docs/benchmarks.md).
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(1)
        .enable_all()
        .thread_name("diskprobe-rt")
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(agent::run(&settings, &state, sandbox));
    // Do not wait for blocking work (a scrape stuck on an unresponsive file) beyond this.
    runtime.shutdown_timeout(BLOCKING_WORK_PATIENCE);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(err = %error_chain(err.as_ref()), "fatal");
            ExitCode::FAILURE
        }
    }
}
