//! `triggers-lab`: the one binary of triggers-lab. Thin: each subcommand delegates to a crate.

mod manifest_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Build, test and watch services of the triggers platform without the real orchestrator.
#[derive(Debug, Parser)]
#[command(name = "triggers-lab", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Hash, canonicalise and check service manifests (the wire contract's manifest hash).
    #[command(subcommand)]
    Manifest(manifest_cmd::ManifestCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Manifest(cmd) => manifest_cmd::run(cmd),
    }
}
