//! `triggers-lab conform -- COMMAND...`: the conformance kit (`docs/conform.md`). Exit codes: 0
//! every check passed, 1 some did not, 2 a usage error, 3 the service or a nats-server could not
//! be started, 130/143 stopped by SIGINT/SIGTERM.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use triggers_scenarios::conform::{CHECKS, CheckOutcome, CheckResult, ConformOptions, conform};

use crate::exit::{self, CliError, Kind, Result};
use crate::signals::Sig;

/// `conform`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct ConformArgs {
    /// Run only this check (repeatable); `register` always runs.
    #[arg(long = "only", value_name = "CHECK")]
    only: Vec<String>,
    /// List the checks and exit.
    #[arg(long)]
    list: bool,
    /// How long each check waits for what it expects (3s at least: a service may wait 2 s for a
    /// broadcast); extended, up to three times, while the service keeps reporting progress.
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    timeout: Duration,
    /// Warnings fail too (the `conformant` check): for an SDK that means to be byte-identical
    /// to Go.
    #[arg(long)]
    strict: bool,
    /// Write a JUnit XML report here.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Write a JSON report here (`-` for standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Show the service's own output at the end, even when every check passed.
    #[arg(short, long)]
    verbose: bool,
    /// The command that starts the conformance service, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

pub(crate) fn run(args: ConformArgs) -> Result<()> {
    if args.list {
        for (name, about) in CHECKS {
            println!("{name:22} {about}");
        }
        return Ok(());
    }
    if args.command.is_empty() {
        return Err(CliError::usage(
            "no command to judge: give it after `--`, e.g. `triggers-lab conform -- python3 service.py`",
        ));
    }
    let runtime = exit::runtime()?;
    let options = ConformOptions {
        command: args.command.clone(),
        timeout: args.timeout,
        only: args.only.clone(),
        strict: args.strict,
        ..ConformOptions::default()
    };
    eprintln!(
        "judging `{}` against docs/protocol.md ({} checks)",
        args.command.join(" "),
        CHECKS.len()
    );
    let result = runtime.block_on(async {
        let work = conform(&options, print_progress);
        tokio::pin!(work);
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut term = signal(SignalKind::terminate()).ok();
            tokio::select! {
                r = &mut work => Ok(r),
                _ = tokio::signal::ctrl_c() => Err(Sig::Int),
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => Err(Sig::Term),
            }
        }
        #[cfg(not(unix))]
        {
            tokio::select! {
                r = &mut work => Ok(r),
                _ = tokio::signal::ctrl_c() => Err(Sig::Int),
            }
        }
    });
    // Whatever was started (the service's process group, the nats-server) is gone once the
    // future is dropped; make sure before exiting.
    drop(runtime);
    let report = match result {
        Err(sig) => {
            eprintln!("stopped by a signal: nothing judged");
            return Err(CliError::said(Kind::Interrupted(sig)));
        }
        Ok(result) => result?,
    };
    let mut out = std::io::stdout().lock();
    let summary = report.table();
    let tail = summary
        .rsplit_once("\n\n")
        .map(|(_, s)| s)
        .unwrap_or(&summary);
    for w in &report.warnings {
        let _ = writeln!(out, "  warning: {w}");
    }
    let _ = write!(out, "\n{tail}");
    if (args.verbose || !report.conformant()) && !report.service_output.is_empty() {
        let _ = writeln!(
            out,
            "\nthe service's output (last lines):\n{}",
            report.service_output
        );
    }
    if let Some(path) = &args.junit {
        match report.to_junit() {
            Ok(xml) => write_file(path, &xml),
            Err(e) => eprintln!("error: cannot write the JUnit report: {e}"),
        }
    }
    if let Some(path) = &args.json {
        match report.to_json() {
            Ok(json) if path.as_os_str() == "-" => {
                let _ = writeln!(out, "{json}");
            }
            Ok(json) => write_file(path, &json),
            Err(e) => eprintln!("error: cannot write the JSON report: {e}"),
        }
    }
    if report.conformant() {
        Ok(())
    } else {
        Err(CliError::said(Kind::Failed))
    }
}

fn print_progress(result: &CheckResult) {
    let mut out = std::io::stdout().lock();
    let (mark, detail) = match &result.outcome {
        CheckOutcome::Passed => ("pass", String::new()),
        CheckOutcome::Failed { expected, arrived } => (
            "FAIL",
            format!("\n        expected: {expected}\n        arrived:  {arrived}"),
        ),
        CheckOutcome::NotApplicable { because } => ("n/a ", format!("\n        {because}")),
    };
    let strict = if result.strict_only {
        " (fails only under --strict)"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "  {mark}  {:22} {} ({} ms){strict}{detail}",
        result.name, result.about, result.millis
    );
}

fn write_file(path: &std::path::Path, text: &str) {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = triggers_scenarios::write_output(path, text.as_bytes()) {
        eprintln!("error: cannot write {}: {e}", path.display());
    }
}
