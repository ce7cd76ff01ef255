//! `triggers-lab`: the one binary of triggers-lab. Thin: each subcommand delegates to a crate.

mod conform_cmd;
mod discovery;
mod doctor;
mod files;
mod lab_cmd;
mod manifest_cmd;
mod run_cmd;
mod signals;

use std::path::PathBuf;
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
    /// Start a nats-server and the orchestrator emulator; run until Ctrl-C.
    Up(lab_cmd::UpArgs),
    /// Deploy a flow (JSON or YAML) to a running `up`.
    Deploy {
        #[command(flatten)]
        control: lab_cmd::ControlArgs,
        /// The flow file, or `-` for standard input.
        file: PathBuf,
    },
    /// Start a run of a deployed flow on a running `up`; prints the run id.
    Trigger {
        #[command(flatten)]
        control: lab_cmd::ControlArgs,
        /// The flow id.
        flow: String,
        /// The payload: JSON text, or @FILE (JSON or YAML). Default `{}`.
        payload: Option<String>,
        /// Wait for the run to settle and print its timeline.
        #[arg(long)]
        wait: bool,
    },
    /// Watch live flows in the terminal: a running `up` (and drive it), or any NATS server
    /// (read-only).
    Watch {
        #[command(flatten)]
        control: lab_cmd::ControlArgs,
    },
    /// Run scenario files (or folders of them), each on its own nats-server and emulator.
    Run(run_cmd::RunArgs),
    /// Judge a service (any language) against the flow protocol: `conform -- COMMAND...`.
    Conform(conform_cmd::ConformArgs),
    /// What this machine offers for a nats-server, what will be chosen and why; exit 3 when
    /// nothing works. `--prepare` fetches the pinned binary and builds the Docker image first.
    Doctor(doctor::DoctorArgs),
    /// Run the shipped flow-lab scenarios, step by step: the first thing to try.
    Demo(run_cmd::DemoArgs),
    /// Move a running `up`'s virtual clock forward (e.g. 30s, 5m, 1h30m, 1d); due timers fire.
    Advance {
        #[command(flatten)]
        control: lab_cmd::ControlArgs,
        /// How far: 250ms, 30s, 5m, 1h30m, 1d, or a number of seconds; at most 100 years.
        #[arg(value_parser = parse_duration)]
        duration: std::time::Duration,
    },
}

/// A duration on the command line, as scenario files write them (a malformed or out-of-range
/// one is a usage error: clap says which argument and exits with code 2).
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    triggers_scenarios::model::Dur::parse(text).map(|d| d.0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Manifest(cmd) => manifest_cmd::run(cmd),
        Command::Run(args) => run_cmd::run(args),
        Command::Demo(args) => run_cmd::demo(args),
        Command::Conform(args) => conform_cmd::run(args),
        Command::Doctor(args) => doctor::run(args),
        other => {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let (result, signal) = runtime.block_on(async move {
                // Long-running commands stop cleanly on SIGINT/SIGTERM; the short ones keep the
                // default (nothing of theirs outlives them).
                let signals = matches!(other, Command::Up(_) | Command::Watch { .. })
                    .then(signals::Signals::listen);
                let result = match other {
                    Command::Up(args) => lab_cmd::up(args, signals.clone()).await,
                    Command::Deploy { control, file } => lab_cmd::deploy(control, file).await,
                    Command::Trigger {
                        control,
                        flow,
                        payload,
                        wait,
                    } => lab_cmd::trigger(control, flow, payload, wait).await,
                    Command::Advance { control, duration } => {
                        lab_cmd::advance(control, duration).await
                    }
                    Command::Watch { control } => lab_cmd::watch(control, signals.clone()).await,
                    Command::Manifest(_)
                    | Command::Run(_)
                    | Command::Demo(_)
                    | Command::Conform(_)
                    | Command::Doctor(_) => {
                        unreachable!("handled above")
                    }
                };
                (result, signals.and_then(|s| s.received()))
            });
            match (result, signal) {
                (Ok(()), None) => ExitCode::SUCCESS,
                (Ok(()), Some(sig)) => sig.exit_code(),
                (Err(e), sig) => {
                    eprintln!("error: {e:#}");
                    // A signal's code wins; a file that cannot be read or is out of range is
                    // bad input, as for `run`.
                    match sig {
                        Some(sig) => sig.exit_code(),
                        None if e.downcast_ref::<files::FileError>().is_some() => ExitCode::from(2),
                        None => ExitCode::FAILURE,
                    }
                }
            }
        }
    }
}
