//! `triggers-lab`: the one binary of triggers-lab. Thin: each subcommand delegates to a crate.

// Printing never panics in this binary. std's `print!` family panics when the write fails, and a
// write fails when the terminal is gone (a SIGHUP: the window closed, the SSH session dropped) or
// the reader of a pipe went away; a panic there would cut short the clean stop that writes the
// reports. These shadow std's macros for every module below (declared after them): standard
// output goes through `out::write_stdout` as `outln!` does (a closed pipe silences the rest), and
// standard error drops what it cannot write.
macro_rules! println {
    ($($arg:tt)*) => { $crate::out::outln!($($arg)*) };
}
#[allow(unused_macros)] // kept so that a `print!` added later does not panic either
macro_rules! print {
    ($($arg:tt)*) => { $crate::out::out!($($arg)*) };
}
macro_rules! eprintln {
    () => {{ use std::io::Write as _; let _ = writeln!(std::io::stderr()); }};
    ($($arg:tt)*) => {{ use std::io::Write as _; let _ = writeln!(std::io::stderr(), $($arg)*); }};
}
macro_rules! eprint {
    ($($arg:tt)*) => {{ use std::io::Write as _; let _ = write!(std::io::stderr(), $($arg)*); }};
}

mod conform_cmd;
mod control_cmd;
mod detach;
mod discovery;
mod doctor;
mod exit;
mod files;
mod from_record_cmd;
mod fuzz_cmd;
mod help;
mod init_cmd;
mod lab_cmd;
mod load_cmd;
mod manifest_cmd;
mod nats_choice;
mod out;
mod replay_cmd;
mod report_cmd;
mod run_cmd;
mod signals;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The emulator and `load` allocate per message on several threads, where glibc's malloc spent a
/// quarter of the machine's time (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Transparent huge pages off for this process. mimalloc asks the kernel for them, and the
/// emulator's records grow its heap message by message: the kernel then zeroes 2 MiB at a fault
/// instead of 4 KiB, and zeroes it again after mimalloc gives freed memory back. With them off the
/// emulator's side of the throughput bench gains about a sixth (docs/benchmarks.md). Best effort:
/// a kernel without the setting leaves things as they were.
fn huge_pages_off() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

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
        #[arg(conflicts_with = "raw")]
        payload: Option<String>,
        /// Send these bytes as the payload exactly, JSON or not: a poison message, to see the
        /// service dead-letter it (`invalid_json`).
        #[arg(long, value_name = "TEXT")]
        raw: Option<String>,
        /// Wait for the run to settle and print its timeline; exit 1 if it failed.
        #[arg(long)]
        wait: bool,
        /// With --wait: how long to wait for the run to settle before giving up (exit 1, naming
        /// the nodes still pending).
        #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
        wait_timeout: std::time::Duration,
    },
    /// Watch live flows in the terminal: a running `up` (and drive it), or any NATS server
    /// (read-only).
    Watch {
        #[command(flatten)]
        control: lab_cmd::ControlArgs,
    },
    /// Scenarios made from other things: `scenario from-record FILE` writes one from a recording.
    #[command(subcommand)]
    Scenario(from_record_cmd::ScenarioCommand),
    /// Run scenario files (or folders of them), each on its own nats-server and emulator.
    Run(run_cmd::RunArgs),
    /// Reports of `run`: `report merge` joins the JSON reports of a sharded run into one.
    #[command(subcommand)]
    Report(report_cmd::ReportCommand),
    /// Judge a service (any language) against the flow protocol: `conform -- COMMAND...`.
    Conform(conform_cmd::ConformArgs),
    /// What this machine offers for a nats-server, what will be chosen and why; exit 3 when
    /// nothing works. `--prepare` fetches the pinned binary and builds the Docker image first.
    Doctor(doctor::DoctorArgs),
    /// Run the shipped flow-lab scenarios, step by step: the first thing to try.
    Demo(run_cmd::DemoArgs),
    /// Write a first scenario and flow (that pass as written) into a folder beside a service.
    Init(init_cmd::InitArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    ///
    /// e.g. `triggers-lab completions bash > ~/.local/share/bash-completion/completions/triggers-lab`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Running `up`s, and what each holds.
    Status {
        #[command(flatten)]
        json: control_cmd::JsonArg,
    },
    /// Stop a running `up` (one started with --detach, or in another terminal).
    Down {
        /// Which one, by name (`up --instance NAME`; `default` for `up --detach`).
        #[arg(long, value_name = "NAME", value_parser = crate::discovery::instance_name)]
        instance: Option<String>,
        /// Every running `up`.
        #[arg(long)]
        all: bool,
    },
    /// The runs of a running `up`: `runs list`, `runs show ID`, `runs cancel ID`.
    Runs {
        #[command(flatten)]
        control: lab_cmd::ControlArgs,
        #[command(subcommand)]
        command: control_cmd::RunsCommand,
    },
    /// The DLQ entries of a running `up`: `dlq list [--run ID]`, `dlq show MSG_ID`.
    Dlq {
        #[command(flatten)]
        control: lab_cmd::ControlArgs,
        #[command(subcommand)]
        command: control_cmd::DlqCommand,
    },
    /// The flows deployed on a running `up`.
    Flows {
        #[command(flatten)]
        control: lab_cmd::ControlArgs,
        #[command(flatten)]
        json: control_cmd::JsonArg,
    },
    /// The services registered with a running `up`.
    Services {
        #[command(flatten)]
        control: lab_cmd::ControlArgs,
        #[command(flatten)]
        json: control_cmd::JsonArg,
    },
    /// Drive a flow deployed on a running `up` with many runs (a fixed concurrency or rate) and
    /// report throughput and latency percentiles, per run and per node.
    Load(load_cmd::LoadArgs),
    /// Fuzz an action of a service registered with a running `up`: inputs from its input
    /// schema, each judged; the first failure is shrunk to a minimal input, with the seed that
    /// reproduces it.
    Fuzz(fuzz_cmd::FuzzArgs),
    /// Re-drive a recording (`up --record FILE`) against a running `up`: deploy its flows, start
    /// its runs and advance its clock again, and compare run by run (status, node events, DLQ
    /// entries, new violations); exit 1 when any differs.
    Replay(replay_cmd::ReplayArgs),
    /// Move a running `up`'s virtual clock forward (e.g. 30s, 5m, 1h30m, 1d); due timers fire.
    Advance {
        #[command(flatten)]
        control: lab_cmd::ControlArgs,
        /// How far: 250ms, 30s, 5m, 1h30m, 1d, or a number of seconds; at most 100 years.
        #[arg(value_parser = parse_duration)]
        duration: std::time::Duration,
    },
}

/// A duration on the command line, read as scenario files read them (`250ms`, `30s`, `5m`,
/// `5 mins`, `1h30m`, `1d`, or a number of seconds); a malformed or out-of-range one is a usage
/// error: clap says which argument and exits with code 2.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    triggers_scenarios::model::Dur::parse(text).map(|d| d.0)
}

/// What the SDK runtime, the emulator and the harness log goes to stderr when `RUST_LOG` asks
/// for it (e.g. `RUST_LOG=triggers_sdk=debug`); nothing is logged otherwise.
fn logging() {
    let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG") else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn main() -> ExitCode {
    huge_pages_off();
    let cli = {
        use clap::{CommandFactory as _, FromArgMatches as _};
        let matches = help::with_examples_and_exit_codes(Cli::command()).get_matches();
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    };
    logging();
    // The commands that start services: every descendant of a service, `setsid` or not, stays
    // below this process, where stopping the service finds and kills it (scenarios'
    // external.rs), rather than going to init.
    if matches!(
        cli.command,
        Command::Run(_) | Command::Demo(_) | Command::Conform(_) | Command::Up(_)
    ) {
        natsbox::watchdog::become_child_subreaper();
    }
    exit::report(dispatch(cli.command))
}

/// Runs the command: those that need no async runtime here, the others on one.
fn dispatch(command: Command) -> exit::Result<()> {
    match command {
        Command::Manifest(cmd) => manifest_cmd::run(cmd),
        Command::Scenario(cmd) => from_record_cmd::run(cmd),
        Command::Run(args) => run_cmd::run(args),
        Command::Report(cmd) => report_cmd::run(cmd),
        Command::Demo(args) => run_cmd::demo(args),
        Command::Conform(args) => conform_cmd::run(args),
        Command::Doctor(args) => doctor::run(args),
        Command::Init(args) => init_cmd::init(args),
        Command::Completions { shell } => {
            completions(shell);
            Ok(())
        }
        Command::Up(args) if args.detach => detach::detach(args.instance.as_deref()),
        other => {
            let runtime = exit::runtime()?;
            runtime.block_on(async move {
                // Long-running commands stop cleanly on SIGINT/SIGTERM; the short ones keep the
                // default (nothing of theirs outlives them).
                let signals = matches!(other, Command::Up(_) | Command::Watch { .. })
                    .then(signals::Signals::listen);
                let result = dispatch_async(other, signals.clone()).await;
                // A signal's code wins; the error, if any, is still said.
                match (result, signals.and_then(|s| s.received())) {
                    (result, None) => result,
                    (Ok(()), Some(sig)) => Err(exit::CliError::said(exit::Kind::Interrupted(sig))),
                    (Err(e), Some(sig)) => Err(e.interrupted(sig)),
                }
            })
        }
    }
}

/// The commands that run on the async runtime.
async fn dispatch_async(command: Command, signals: Option<signals::Signals>) -> exit::Result<()> {
    match command {
        Command::Up(args) => lab_cmd::up(args, signals).await,
        Command::Deploy { control, file } => lab_cmd::deploy(control, file).await,
        Command::Trigger {
            control,
            flow,
            payload,
            raw,
            wait,
            wait_timeout,
        } => {
            let payload = match raw {
                Some(raw) => lab_cmd::Payload::Raw(raw),
                None => lab_cmd::Payload::Json(payload),
            };
            lab_cmd::trigger(control, flow, payload, wait.then_some(wait_timeout)).await
        }
        Command::Load(args) => load_cmd::load(args).await,
        Command::Replay(args) => replay_cmd::replay(args).await,
        Command::Fuzz(args) => fuzz_cmd::fuzz(args).await,
        Command::Advance { control, duration } => lab_cmd::advance(control, duration).await,
        Command::Watch { control } => lab_cmd::watch(control, signals).await,
        Command::Status { json } => control_cmd::status(json).await,
        Command::Down { instance, all } => control_cmd::down(instance, all).await,
        Command::Runs { control, command } => control_cmd::runs(control, command).await,
        Command::Dlq { control, command } => control_cmd::dlq(control, command).await,
        Command::Flows { control, json } => control_cmd::flows(control, json).await,
        Command::Services { control, json } => control_cmd::services(control, json).await,
        Command::Manifest(_)
        | Command::Scenario(_)
        | Command::Run(_)
        | Command::Report(_)
        | Command::Demo(_)
        | Command::Init(_)
        | Command::Completions { .. }
        | Command::Conform(_)
        | Command::Doctor(_) => unreachable!("dispatched without the runtime"),
    }
}

/// `triggers-lab completions SHELL`: the script on standard output.
fn completions(shell: clap_complete::Shell) {
    let mut script = Vec::new();
    clap_complete::generate(
        shell,
        &mut <Cli as clap::CommandFactory>::command(),
        "triggers-lab",
        &mut script,
    );
    let mut script = String::from_utf8_lossy(&script).into_owned();
    if shell == clap_complete::Shell::Bash {
        // clap_complete names the case labels of a hyphenated binary's subcommands
        // `triggers__subcmd__lab__subcmd__run` but computes `triggers__lab__subcmd__run`,
        // so no flag ever completed: the labels are made to match what it computes.
        script = script.replace("triggers__subcmd__lab__subcmd__", "triggers__lab__subcmd__");
    }
    out::write_stdout(&script);
}

#[cfg(test)]
mod help_tests {
    use clap::CommandFactory as _;

    /// Every command, nested ones too, ends its `--help` with examples and the exit codes.
    #[test]
    fn every_help_has_examples_and_ends_with_the_exit_codes() {
        fn walk(cmd: &mut clap::Command, path: &str, seen: &mut Vec<String>) {
            let help = cmd.render_help().to_string();
            assert!(
                help.contains("Examples:\n  triggers-lab"),
                "`{path} --help` has no examples:\n{help}"
            );
            let last = help.trim_end().lines().last().unwrap_or("").to_owned();
            assert!(
                help.contains("Exit codes (the same for every command")
                    && (last.contains("130") || last.contains("docs/conform.md")),
                "`{path} --help` does not end with the exit codes:\n{help}"
            );
            seen.push(path.to_owned());
            let names: Vec<String> = cmd
                .get_subcommands()
                .map(|s| s.get_name().to_owned())
                .filter(|n| n != "help")
                .collect();
            for name in names {
                let sub_path = format!("{path} {name}").trim().to_owned();
                let sub = cmd.find_subcommand_mut(&name).expect("a subcommand");
                walk(sub, &sub_path, seen);
            }
        }
        let mut cmd = crate::help::with_examples_and_exit_codes(crate::Cli::command());
        cmd.build();
        let mut seen = Vec::new();
        walk(&mut cmd, "", &mut seen);
        assert!(seen.len() > 25, "{seen:?}");
        // No examples for a command that is not there.
        for path in crate::help::example_paths() {
            assert!(
                seen.iter().any(|s| s == path),
                "examples of no command: {path:?}"
            );
        }
    }
}
