//! `triggers-lab fuzz`: the scenarios' `fuzz` step (`triggers_scenarios::fuzz`) against a service
//! registered with a running `up`, driven through the control API; the action's results are read
//! on the services' side of the server, as a service would.

use std::time::Duration;

use clap::Args;
use triggers_emulator::control::ControlClient;
use triggers_scenarios::fuzz::{FuzzConfig, FuzzProgress, FuzzReport, fuzz_target};

use crate::exit::{CliError, Result};
use crate::lab_cmd::{ControlArgs, resolve};
use crate::out::outln;

/// Options of `triggers-lab fuzz`.
#[derive(Debug, Args)]
pub(crate) struct FuzzArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// The service (as registered with `up`; `triggers-lab services` lists them).
    #[arg(long, value_name = "NAME")]
    service: String,
    /// Its action.
    #[arg(long, value_name = "NAME")]
    action: String,
    /// How many inputs to try.
    #[arg(long, value_name = "N", default_value_t = 100)]
    runs: u32,
    /// The seed: the same seed sends the same inputs, so it reproduces a failure. Default: a
    /// random one (printed).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Also send one input in four that breaks the input schema: each must be dead-lettered as
    /// `invalid_input`.
    #[arg(long)]
    invalid: bool,
    /// How long one run may take to settle.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::parse_duration)]
    run_timeout: Duration,
    /// Print the verdict as JSON (`runs`, `invalid_runs`, `seed`, `failure`) on standard output.
    #[arg(long)]
    json: bool,
}

/// `--run-timeout`'s default, as its flag says it (`10s`).
const DEFAULT_RUN_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) async fn fuzz(args: FuzzArgs) -> Result<()> {
    let target = resolve(&args.control)?;
    let control = ControlClient::connect_with(&target.url, &target.access).await?;
    // Where the services are: the output that captures the results is published there, and the
    // control account (when `up` has one) cannot see it.
    let services_side = triggers_sdk::transport::connect(&target.url)
        .await
        .map_err(|e| {
            CliError::env(format!(
                "cannot connect to {} as a service would: {e}",
                target.url
            ))
        })?;
    let registered = control.services().await?;
    let Some(service) = registered.get(&args.service) else {
        return Err(CliError::usage(format!(
            "no service {:?} is registered with `up` at {} (registered: {}); start it with TRIGGERS_NATS_URL={}",
            args.service,
            target.url,
            if registered.is_empty() {
                "none".to_owned()
            } else {
                registered.keys().cloned().collect::<Vec<_>>().join(", ")
            },
            target.url
        )));
    };
    if !service
        .manifest
        .actions
        .iter()
        .any(|a| a.name == args.action)
    {
        return Err(CliError::usage(format!(
            "{} has no action {:?} (it has: {})",
            args.service,
            args.action,
            service
                .manifest
                .actions
                .iter()
                .map(|a| a.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    // No seed given: one from the clock, printed, so that a failure can still be reproduced.
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            % 1_000_000
    });
    let config = FuzzConfig {
        service: args.service.clone(),
        action: args.action.clone(),
        runs: args.runs,
        seed,
        invalid: args.invalid,
        run_timeout: args.run_timeout,
        shrink_time: triggers_scenarios::fuzz::SHRINK_TIME,
    };
    eprintln!(
        "fuzzing {}.{}: {}, seed {seed}{}",
        args.service,
        args.action,
        crate::out::count(args.runs, "input"),
        if args.invalid {
            ", one in four breaking the schema"
        } else {
            ""
        }
    );
    let terminal = crate::out::redraw_stderr();
    let mut shrunk = 0u32;
    let mut on_progress = |p: FuzzProgress| match p {
        FuzzProgress::Passed { run, runs } => {
            let done = run + 1;
            if terminal {
                eprint!("\r\x1b[2K{done}/{runs} inputs passed");
            } else if done % 25 == 0 || done == runs {
                eprintln!("{done}/{runs} inputs passed");
            }
        }
        FuzzProgress::Failed { run, reason } => {
            if terminal {
                eprint!("\r\x1b[2K");
            }
            eprintln!(
                "input {} failed: {}; shrinking it",
                run + 1,
                reason.lines().next().unwrap_or_default()
            );
        }
        FuzzProgress::Shrunk { input } => {
            // One line a step would bury the verdict: a terminal sees the latest, a log the count.
            shrunk += 1;
            if terminal {
                let text = input.to_string();
                let cut: String = text.chars().take(100).collect();
                eprint!("\r\x1b[2K  shrinking, step {shrunk}: still fails on {cut}");
            }
        }
    };
    let report = fuzz_target(&control, &services_side, &config, &mut on_progress)
        .await
        .map_err(|e| CliError::failed(format!("the fuzz campaign could not run: {e}")))?;
    if terminal {
        eprint!("\r\x1b[2K");
    }
    if shrunk > 0 {
        eprintln!("shrunk in {}", crate::out::count(shrunk as u64, "step"));
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        outln!("{}", verdict(&report, &args));
    }
    match &report.failure {
        None => Ok(()),
        Some(_) => Err(CliError::verdict(format!(
            "{}.{} fails on {} (seed {})",
            args.service,
            args.action,
            report
                .failure
                .as_ref()
                .map(|f| f.minimal.to_string())
                .unwrap_or_default(),
            report.seed
        ))),
    }
}

/// The verdict: PASS or FAIL, the minimal failing input, and the command that reproduces it.
fn verdict(report: &FuzzReport, args: &FuzzArgs) -> String {
    // Against the same `up`: without its --instance (or --nats) the command would find
    // another, or none.
    let again = format!(
        "triggers-lab fuzz --service {} --action {} --runs {} --seed {}{}{}{}",
        args.service,
        args.action,
        args.runs,
        report.seed,
        if args.invalid { " --invalid" } else { "" },
        if args.run_timeout == DEFAULT_RUN_TIMEOUT {
            String::new()
        } else {
            format!(" --run-timeout {}ms", args.run_timeout.as_millis())
        },
        args.control.as_flags()
    );
    match &report.failure {
        None => format!(
            "PASS {}.{}: {}",
            args.service,
            args.action,
            report.describe()
        ),
        Some(f) => format!(
            "FAIL {}.{}: input {} of {}\n  minimal failing input: {}\n  reason: {}\n  found as: {}\n  reproduce: {again}",
            args.service,
            args.action,
            f.run + 1,
            args.runs,
            f.minimal,
            f.reason,
            f.original,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        fuzz: FuzzArgs,
    }

    /// The `reproduce:` line runs against the same `up`: it keeps --instance (it dropped it,
    /// and so found another `up`, or none).
    #[test]
    fn reproduce_keeps_the_instance_and_the_run_timeout() {
        let args = Cli::parse_from([
            "fuzz",
            "--service",
            "shop",
            "--action",
            "charge",
            "--instance",
            "ci",
            "--run-timeout",
            "30s",
        ])
        .fuzz;
        let report = FuzzReport {
            runs: 100,
            invalid_runs: 0,
            seed: 7,
            failure: Some(triggers_scenarios::fuzz::FuzzFailure {
                original: serde_json::json!({"n": 5}),
                minimal: serde_json::json!({"n": 0}),
                reason: "failed".into(),
                run: 3,
                shrinking_stopped: None,
            }),
        };
        let text = verdict(&report, &args);
        assert!(
            text.contains(
                "reproduce: triggers-lab fuzz --service shop --action charge --runs 100 --seed 7 --run-timeout 30000ms --instance ci"
            ),
            "{text}"
        );
    }
}
