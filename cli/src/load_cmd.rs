//! `triggers-lab load FLOW`: many runs of a flow deployed on a running `up`, at a fixed
//! concurrency or rate, with throughput and latency percentiles (the engine of the `load` step,
//! driven through the control API).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use triggers_scenarios::loadgen::{self, LoadConfig, Pace, Payloads};
use triggers_scenarios::model::{Dur, LoadExpect};

use crate::exit::{CliError, Result};
use crate::lab_cmd::{ControlArgs, control};
use crate::out::{fit, outln, terminal_width};
use crate::{files, parse_duration};

/// `load`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct LoadArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// The flow id (deployed on `up`).
    flow: String,
    /// How many runs.
    #[arg(long, default_value_t = triggers_scenarios::model::DEFAULT_LOAD_RUNS)]
    runs: u64,
    /// At most this many runs in flight [default: 4].
    #[arg(long, conflicts_with = "rate")]
    concurrency: Option<usize>,
    /// Runs started per second, however many are in flight (instead of --concurrency).
    #[arg(long)]
    rate: Option<f64>,
    /// Every run's payload: JSON text, or @FILE (JSON or YAML); `{{i}}` in it becomes the
    /// run's number. Default `{}`.
    #[arg(long, conflicts_with = "payloads")]
    payload: Option<String>,
    /// A file of payloads taken in turn: a JSON array, or one JSON value per line.
    #[arg(long, value_name = "FILE")]
    payloads: Option<PathBuf>,
    /// How long each run may take to settle before it counts as timed out.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    run_timeout: Duration,
    /// Runs that may fail before the load fails (exit 1).
    #[arg(long, default_value_t = 0)]
    max_failed: u64,
    /// Fail (exit 1) unless the runs' p99 latency is below this.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    p99_below: Option<Duration>,
    /// Print the report as JSON on standard output instead of the table.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn load(args: LoadArgs) -> Result<()> {
    let payloads = match (&args.payload, &args.payloads) {
        (_, Some(file)) => {
            let text = triggers_scenarios::read_text_file(file)
                .map_err(|e| CliError::usage(format!("--payloads: {e}")))?;
            Payloads::from_text(&text)
                .map_err(|e| CliError::usage(format!("--payloads: {}, {e}", file.display())))?
        }
        (Some(p), None) if p.starts_with('@') => {
            Payloads::Template(files::read::<Value>(std::path::Path::new(&p[1..]))?)
        }
        (Some(p), None) => Payloads::Template(serde_json::from_str(p).map_err(|e| {
            CliError::usage(format!(
                "the payload {p:?} is not JSON ({e}); write JSON, or @FILE to read one"
            ))
        })?),
        (None, None) => Payloads::Template(Value::Object(Default::default())),
    };
    let pace = Pace::of(args.rate, args.concurrency);
    // Before looking for `up`: a bad flag is the user's to fix first.
    loadgen::check(args.runs, pace).map_err(|e| CliError::usage(format!("--{e}")))?;
    let client = control(&args.control).await?;
    let config = LoadConfig {
        flow: args.flow.clone(),
        runs: args.runs,
        pace,
        payloads,
        run_timeout: args.run_timeout,
    };
    let live = crate::out::redraw_stderr();
    let width = terminal_width();
    let mut last_shown = 0;
    let mut progress = |settled: u64, total: u64| {
        // A live line on a terminal; elsewhere a line per tenth, so CI logs show it moving.
        if live {
            let line = fit(
                &format!("load {}: {settled}/{total} runs settled", args.flow),
                width,
            );
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K{line}");
            let _ = err.flush();
        } else if settled * 10 / total > last_shown || settled == total {
            last_shown = settled * 10 / total;
            eprintln!("load {}: {settled}/{total} runs settled", args.flow);
        }
    };
    let report = loadgen::run_load(&client, &config, &mut progress)
        .await
        .map_err(CliError::usage)?;
    if live {
        eprint!("\r\x1b[2K");
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::out::out!("{}", report.table());
    }
    let expect = LoadExpect {
        max_failed: args.max_failed,
        max_dlq: None,
        p99_below: args.p99_below.map(Dur),
        min_throughput: None,
    };
    let broken = loadgen::unmet(&report, &expect);
    if broken.is_empty() {
        Ok(())
    } else {
        Err(CliError::verdict(format!(
            "load {}: {}",
            args.flow,
            broken.join("; ")
        )))
    }
}
