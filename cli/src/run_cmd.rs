//! `triggers-lab run` and `triggers-lab demo`: scenario files through `triggers-scenarios`, with a
//! progress line, results as they come, reports, and the exit code CI reads (0 all passed, 1 one
//! failed, 2 a file is malformed or nothing matched, 130/143 stopped by SIGINT/SIGTERM).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use triggers_emulator::{Backend, NatsConfig};
use triggers_scenarios::report::seconds;
use triggers_scenarios::{Event, Filter, Interrupt, Outcome, RunOptions, SuiteReport, WatchFn};

use crate::lab_cmd::BackendArg;
use crate::signals::Signals;

/// Options of `triggers-lab run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Scenario files, or folders to search (recursively) for *.yaml and *.yml.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    common: CommonArgs,
    /// Only scenarios whose name or file matches (a regular expression, or else a substring).
    #[arg(long, value_name = "PATTERN")]
    filter: Option<String>,
    /// Write a JUnit XML report to FILE.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Write a JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Open the terminal UI on each scenario's emulator while it runs (with -j 1); quit it (q)
    /// to go on.
    #[arg(long)]
    tui: bool,
}

/// Options `run` and `demo` share.
#[derive(Debug, Args)]
pub(crate) struct CommonArgs {
    /// Scenarios run at once, each on its own nats-server.
    #[arg(short = 'j', long = "jobs", value_name = "N", default_value_t = 1, value_parser = parse_jobs)]
    jobs: usize,
    /// Each scenario's time limit, overriding its file's `timeout` (e.g. 90s, 5m; at most 100
    /// years).
    #[arg(long, value_name = "DURATION", value_parser = crate::parse_duration)]
    timeout: Option<Duration>,
    /// How each scenario gets its nats-server.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendArg,
    /// Print every step as it ends, with what it did.
    #[arg(short, long)]
    verbose: bool,
}

/// `-j`: at least one scenario at a time.
fn parse_jobs(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err("0 scenarios at a time would run none: give 1 or more".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{text:?} is not a whole number: {e}")),
    }
}

/// Options of `triggers-lab demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    #[command(flatten)]
    common: CommonArgs,
}

/// Where the shipped flow-lab scenarios are: `scenarios/flow-lab` under the current folder (a
/// clone's root), else beside the source this binary was built from.
fn shipped_scenarios() -> PathBuf {
    let here = PathBuf::from("scenarios/flow-lab");
    if here.is_dir() {
        return here;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/flow-lab")
}

pub(crate) fn run(args: RunArgs) -> ExitCode {
    if args.tui && args.common.jobs > 1 {
        eprintln!(
            "error: --tui watches one scenario at a time: use it with -j 1 (it was -j {})",
            args.common.jobs
        );
        return ExitCode::from(2);
    }
    let filter = args.filter.as_deref().map(Filter::new);
    execute(
        &args.paths,
        &args.common,
        filter,
        args.junit.as_deref(),
        args.json.as_deref(),
        args.tui,
        false,
    )
}

pub(crate) fn demo(args: DemoArgs) -> ExitCode {
    let dir = shipped_scenarios();
    println!(
        "triggers-lab demo: the flow-lab scenarios in {}",
        dir.display()
    );
    println!(
        "Each one starts a nats-server and an orchestrator emulator of its own, starts the services it\n\
         declares (in-process on the Rust SDK, or as commands), then deploys, triggers and checks\n\
         flows step by step. The same files run in CI with `triggers-lab run scenarios/flow-lab`.\n"
    );
    let code = execute(&[dir], &args.common, None, None, None, false, true);
    println!(
        "\nNext: read a scenario (scenarios/flow-lab/*.yaml), write your own (docs/scenarios.md),\n\
         and run them with `triggers-lab run PATH`."
    );
    code
}

/// What the progress line knows.
#[derive(Default)]
struct Progress {
    total: usize,
    done: usize,
    /// Running scenarios: index -> (name, step label).
    running: BTreeMap<usize, (String, String)>,
    tty: bool,
    verbose: bool,
    quiet: bool,
    line_shown: bool,
}

impl Progress {
    fn clear(&mut self) {
        if self.line_shown {
            eprint!("\r\x1b[2K");
            self.line_shown = false;
        }
    }

    fn show(&mut self) {
        if !self.tty || self.quiet || self.running.is_empty() {
            return;
        }
        let running: Vec<String> = self
            .running
            .values()
            .map(|(name, step)| {
                if step.is_empty() {
                    format!("{name} (starting)")
                } else {
                    format!("{name} ({step})")
                }
            })
            .collect();
        let mut line = format!(
            "[{}/{}] running {}",
            self.done + 1,
            self.total,
            running.join(", ")
        );
        let width = 150;
        if line.chars().count() > width {
            line = line.chars().take(width - 1).collect::<String>() + "…";
        }
        eprint!("\r\x1b[2K{line}");
        let _ = std::io::stderr().flush();
        self.line_shown = true;
    }

    fn on(&mut self, event: Event) {
        match event {
            Event::ScenarioStarted {
                index,
                name,
                total,
                description,
            } => {
                self.total = total;
                self.running.insert(index, (name.clone(), String::new()));
                if self.verbose {
                    self.clear();
                    println!("\n[{}/{total}] {name}", index + 1);
                    for line in wrap(description.trim(), 96) {
                        println!("  {line}");
                    }
                } else if !self.tty && !self.quiet {
                    println!("[{}/{total}] {name}", index + 1);
                }
            }
            Event::StepStarted {
                index,
                step,
                steps,
                label,
                ..
            } => {
                if let Some(r) = self.running.get_mut(&index) {
                    r.1 = format!("step {step}/{steps}: {label}");
                }
            }
            Event::StepFinished { step, steps, .. } => {
                if self.verbose {
                    self.clear();
                    let mark = match step.outcome {
                        Outcome::Passed => "ok  ",
                        Outcome::Failed => "FAIL",
                        Outcome::Skipped => "skip",
                        Outcome::Interrupted => "INTR",
                        Outcome::NotRun => "-   ",
                    };
                    let detail = step.detail.lines().next().unwrap_or_default();
                    println!(
                        "  {mark} {}/{steps} {} ({}){}",
                        step.index,
                        step.label,
                        seconds(step.duration),
                        if detail.is_empty() || step.outcome == Outcome::Failed {
                            String::new()
                        } else {
                            format!(": {detail}")
                        }
                    );
                }
            }
            Event::ScenarioFinished { index, report, .. } => {
                self.running.remove(&index);
                self.done += 1;
                self.clear();
                if !self.quiet {
                    println!("{}", report.summary_line());
                    print!("{}", report.failure_text());
                    let _ = std::io::stdout().flush();
                }
            }
        }
        self.show();
    }
}

/// Words of `text` in lines of at most `width` characters.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(l) if l.len() + 1 + word.len() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_owned()),
        }
    }
    lines
}

fn execute(
    paths: &[PathBuf],
    common: &CommonArgs,
    filter: Option<Filter>,
    junit: Option<&Path>,
    json: Option<&Path>,
    tui: bool,
    verbose: bool,
) -> ExitCode {
    let timeout = common.timeout;
    let scenarios = match triggers_scenarios::load_all(paths) {
        Ok(s) => s,
        Err(errors) => {
            for e in &errors {
                eprintln!("{e}");
            }
            eprintln!(
                "error: {} scenario file(s) could not be read; nothing was run",
                errors.len()
            );
            return ExitCode::from(2);
        }
    };
    let found = scenarios.len();
    let scenarios: Vec<_> = scenarios
        .into_iter()
        .filter(|s| filter.as_ref().is_none_or(|f| f.matches(s)))
        .collect();
    if scenarios.is_empty() {
        eprintln!(
            "error: no scenario to run ({found} found{})",
            if filter.is_some() {
                ", none matches --filter"
            } else {
                ""
            }
        );
        return ExitCode::from(2);
    }
    let progress = Arc::new(Mutex::new(Progress {
        tty: std::io::stderr().is_terminal(),
        verbose: verbose || common.verbose,
        quiet: tui,
        ..Default::default()
    }));
    let on_event = {
        let progress = progress.clone();
        Arc::new(move |e: Event| {
            progress.lock().unwrap_or_else(|p| p.into_inner()).on(e);
        })
    };
    let watch: Option<WatchFn> = tui.then(|| {
        let w: WatchFn = Arc::new(|emulator| {
            Box::pin(async move {
                if let Err(e) = triggers_tui::run_in_process(emulator).await {
                    eprintln!("the terminal UI stopped: {e}");
                }
            })
        });
        w
    });
    let options = RunOptions {
        nats: NatsConfig {
            backend: match common.backend {
                BackendArg::Auto => Backend::Auto,
                BackendArg::Docker => Backend::Docker,
                BackendArg::Binary => Backend::Binary,
            },
            ..Default::default()
        },
        timeout,
        on_event: Some(on_event),
        watch,
        interrupt: Interrupt::new(),
    };
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
    let (report, signal) = runtime.block_on(async {
        // The first signal interrupts the run: steps stop, services and servers are stopped as
        // at a scenario's end, and the reports are still written.
        let signals = Signals::listen();
        let waiting = signals.clone();
        let interrupt = options.interrupt.clone();
        let forward = tokio::spawn(async move {
            interrupt.request(waiting.recv().await.name());
        });
        let report = triggers_scenarios::run_suite(scenarios, common.jobs, &options).await;
        forward.abort();
        (report, signals.received())
    });
    // Services and servers are stopped; give the runtime's leftovers a moment, not forever.
    runtime.shutdown_timeout(Duration::from_secs(2));
    let mut code = if report.failed() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    };
    for (path, text) in [
        (junit, junit.map(|_| report.to_junit())),
        (json, json.map(|_| report.to_json())),
    ] {
        let (Some(path), Some(text)) = (path, text) else {
            continue;
        };
        let written = text.map_err(|e| e.to_string()).and_then(|t| {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
            }
            std::fs::write(path, t).map_err(|e| e.to_string())
        });
        match written {
            Ok(()) => println!("report: {}", path.display()),
            Err(e) => {
                eprintln!("error: cannot write {}: {e}", path.display());
                code = ExitCode::FAILURE;
            }
        }
    }
    print_summary(&report, tui);
    match signal {
        Some(sig) => sig.exit_code(),
        None => code,
    }
}

fn print_summary(report: &SuiteReport, tui: bool) {
    if tui {
        // The UI had the terminal: the results were not printed as they came.
        for s in &report.scenarios {
            println!("{}", s.summary_line());
            print!("{}", s.failure_text());
        }
    }
    println!();
    let failed: Vec<&str> = report
        .scenarios
        .iter()
        .filter(|s| s.outcome == Outcome::Failed)
        .map(|s| s.name.as_str())
        .collect();
    if !failed.is_empty() {
        println!("failed: {}", failed.join(", "));
    }
    if let Some(why) = &report.interrupted {
        let stopped: Vec<&str> = report
            .scenarios
            .iter()
            .filter(|s| s.outcome == Outcome::Interrupted)
            .map(|s| s.name.as_str())
            .collect();
        println!(
            "interrupted by {why}{}; {} scenario(s) not run",
            if stopped.is_empty() {
                String::new()
            } else {
                format!(" during {}", stopped.join(", "))
            },
            report.count(Outcome::NotRun)
        );
    }
    println!(
        "ran {} scenario(s) in {} with -j {}",
        report.scenarios.len(),
        seconds(report.duration),
        report.jobs
    );
    // Last, alone on its line: the form CI logs are read for.
    println!("scenarios: {}", report.counts());
}
