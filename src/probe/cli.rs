//! `diskprobe_exporter probe`: run profiles once on a target and print the results.

use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Flags of the one-shot `probe` subcommand.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Block device or file to probe.
    #[arg(long)]
    pub target: PathBuf,
}

/// Runs the one-shot probe.
pub fn run(args: ProbeArgs, _procfs: &Path, _sysfs: &Path) -> ExitCode {
    eprintln!(
        "diskprobe_exporter probe: not available in this build (target {})",
        args.target.display()
    );
    ExitCode::from(1)
}
