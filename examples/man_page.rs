//! Writes the man pages of `diskprobe_exporter`, rendered from its command-line definitions
//! (`src/cli.rs`) with clap_mangen: `diskprobe_exporter.1` for the agent's flags and
//! `diskprobe_exporter-probe.1` for the one-shot `probe` command, into the directory given:
//! `cargo run --locked --example man_page -- <dir>`. `packaging/build` runs it and puts the pages,
//! compressed, into the .deb and .rpm packages.

use clap::CommandFactory;
use diskprobe_exporter::cli::Cli;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: man_page <directory>");
        return ExitCode::from(2);
    };
    // clap's own `help` subcommand gets no page.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Building gives each subcommand its usage name (`diskprobe_exporter probe`).
    cmd.build();
    let mut pages = vec![(cmd.get_name().to_owned(), cmd.clone())];
    for sub in cmd.get_subcommands() {
        // `diskprobe_exporter probe` gets the page `diskprobe_exporter-probe`, the name the
        // agent's page refers to it by.
        let name = format!("{}-{}", cmd.get_name(), sub.get_name());
        pages.push((name.clone(), sub.clone().display_name(name)));
    }
    let source = format!("{} {}", cmd.get_name(), env!("CARGO_PKG_VERSION"));
    for (name, page) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        let written = clap_mangen::Man::new(page)
            .source(source.clone())
            .render(&mut out)
            .and_then(|()| std::fs::write(&path, out));
        if let Err(err) = written {
            eprintln!("{}: {err}", path.display());
            return ExitCode::FAILURE;
        }
        println!("{}", path.display());
    }
    ExitCode::SUCCESS
}
