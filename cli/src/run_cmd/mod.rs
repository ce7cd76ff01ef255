//! `triggers-lab run` and `triggers-lab demo`: scenario files through `triggers-scenarios`, with
//! a progress line, results as they come, retries, reports, and the exit code CI reads (see
//! [`crate::exit`]).

mod demo;
mod progress;
mod select;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use clap::{Args, ValueEnum};
use triggers_scenarios::coverage::Coverage;
use triggers_scenarios::report::seconds;
use triggers_scenarios::shard::Shard;
use triggers_scenarios::{
    Event, Filter, Interrupt, Outcome, RunOptions, Scenario, ShardInfo, SuiteReport, WatchFn,
};

use crate::exit::{self, CliError, Kind};
use crate::nats_choice::{self, BackendArg};
use crate::out::{self, out, outln};
use crate::signals::Signals;
use progress::{Format, Progress};

/// Options of `triggers-lab run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Scenario files (taken whatever their name), or folders to search recursively for
    /// *.scenario.yaml (hidden files and folders skipped).
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    common: CommonArgs,
    /// Only scenarios whose name or file matches (a regular expression, or else a substring);
    /// repeatable: those that match any.
    #[arg(long, value_name = "PATTERN")]
    filter: Vec<String>,
    /// Leave out scenarios whose name or file matches (as --filter; repeatable), after --filter.
    #[arg(long, value_name = "PATTERN")]
    skip: Vec<String>,
    /// List the scenarios that would run (after --filter and --shard), and run none.
    #[arg(long)]
    list: bool,
    /// Run only shard K of N (e.g. 2/4) of the selected scenarios: the same split on every
    /// machine; `triggers-lab report merge` joins the shards' JSON reports.
    #[arg(long, value_name = "K/N", value_parser = parse_shard)]
    shard: Option<Shard>,
    /// With --shard: balance the shards by each scenario's duration in this JSON report (one
    /// `--json` wrote) instead of by count.
    #[arg(long, value_name = "REPORT.json", requires = "shard")]
    durations: Option<PathBuf>,
    /// Write a JUnit XML report to FILE (`-` for standard output).
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Write a JSON report to FILE (`-` for standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the flow coverage (JSON, `"format": 1`) of every scenario run to FILE: per flow
    /// version, the nodes that ran, the edges taken, each node's outcomes and each condition's
    /// results. A summary is printed at the end.
    #[arg(long, value_name = "FILE")]
    coverage: Option<PathBuf>,
    /// Write the flow coverage as Markdown (for CI pages) to FILE.
    #[arg(long = "coverage-md", value_name = "FILE")]
    coverage_md: Option<PathBuf>,
    /// How results are printed: `human`, or `json` (one JSON object a line on standard output,
    /// for tools).
    #[arg(long, value_enum, default_value = "human", value_name = "FORMAT")]
    message_format: MessageFormat,
    /// Open the terminal UI on each scenario's emulator while it runs (with -j 1); quit it (q)
    /// to go on.
    #[arg(long)]
    tui: bool,
    /// Run again whenever a scenario changes (or one is added), or a file a scenario names (a
    /// flow file, a payloads_file, a file in a service's command); not on the reports it
    /// writes. Ctrl-C stops.
    #[arg(long)]
    watch: bool,
}

/// `--isolation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum IsolationArg {
    Account,
    Server,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum MessageFormat {
    Human,
    Json,
}

/// Options `run` and `demo` share.
#[derive(Debug, Args)]
pub(crate) struct CommonArgs {
    /// Scenarios run at once (1 or more), on accounts of one shared nats-server unless
    /// `--isolation server`.
    #[arg(short = 'j', long = "jobs", value_name = "N", default_value_t = 1, value_parser = parse_jobs)]
    jobs: usize,
    /// Each scenario's time limit, overriding its file's `timeout` (e.g. 90s, 5m; at most 100
    /// years).
    #[arg(long, value_name = "DURATION", value_parser = crate::parse_duration)]
    timeout: Option<Duration>,
    /// How each scenario gets its nats-server.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendArg,
    /// Run every scenario on this nats-server (with JetStream) instead of one of its own each.
    /// TRIGGERS_NATS_URL is not used unless given here.
    #[arg(long, value_name = "URL")]
    nats: Option<String>,
    /// `account` (the default): each scenario gets a NATS account of its own on one nats-server
    /// the run shares; a scenario that restarts, stops or kills the server, or runs a cluster,
    /// gets a server of its own anyway. `server`: a nats-server of its own for every scenario
    /// (slower; for hunting a problem the sharing might cause).
    #[arg(long, value_enum, default_value = "account", value_name = "ISOLATION")]
    isolation: IsolationArg,
    /// Print every step as it ends, with what it did.
    #[arg(short, long)]
    verbose: bool,
    /// Stop at the first failed scenario (the ones running are interrupted, the rest not run).
    #[arg(long, overrides_with = "no_fail_fast")]
    fail_fast: bool,
    /// Run every scenario whatever fails (the default).
    #[arg(long, overrides_with = "fail_fast")]
    no_fail_fast: bool,
    /// Run a failed scenario again, up to N more times; one that then passes is reported FLAKY
    /// (and counts as passed).
    #[arg(long, value_name = "N", default_value_t = 0)]
    retries: usize,
    /// A value for `${vars.KEY}` in the scenarios (repeatable).
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = parse_var)]
    vars: Vec<(String, String)>,
}

/// `-j`: at least one scenario at a time.
fn parse_jobs(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err("0 scenarios at a time would run none: give 1 or more".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{text:?} is not a whole number: {e}")),
    }
}

/// `--shard K/N`.
fn parse_shard(text: &str) -> Result<Shard, String> {
    text.parse()
}

/// `--var KEY=VALUE`.
fn parse_var(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() && !k.contains(['{', '}', '$']) => {
            Ok((k.trim().to_owned(), v.to_owned()))
        }
        _ => Err(format!(
            "{text:?}: write KEY=VALUE (used in scenarios as ${{vars.KEY}})"
        )),
    }
}

/// Options of `triggers-lab demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    #[command(flatten)]
    common: CommonArgs,
}

/// What `execute` reports to and writes.
#[derive(Default)]
struct Outputs<'a> {
    junit: Option<&'a Path>,
    json: Option<&'a Path>,
    coverage: Option<&'a Path>,
    coverage_md: Option<&'a Path>,
    format: Option<MessageFormat>,
    tui: bool,
    verbose: bool,
    /// Steps without what they did (the demo, unless -v).
    brief: bool,
}

pub(crate) fn run(args: RunArgs) -> exit::Result<()> {
    if args.tui && args.common.jobs > 1 {
        return Err(CliError::usage(format!(
            "--tui watches one scenario at a time: use it with -j 1 (it was -j {})",
            args.common.jobs
        )));
    }
    let stdout_reports = [&args.junit, &args.json, &args.coverage, &args.coverage_md]
        .iter()
        .filter(|p| p.as_deref().is_some_and(|p| p.as_os_str() == "-"))
        .count();
    if stdout_reports > 1 || (stdout_reports == 1 && args.message_format == MessageFormat::Json) {
        return Err(CliError::usage(
            "only one of --junit -, --json -, --coverage -, --coverage-md - and --message-format json can have standard output",
        ));
    }
    // A report that could not be written would be found out only at the end, after the run; a
    // FIFO there would hold the end forever.
    for (flag, path) in [
        ("--junit", &args.junit),
        ("--json", &args.json),
        ("--coverage", &args.coverage),
        ("--coverage-md", &args.coverage_md),
    ] {
        if let Some(path) = path.as_deref().filter(|p| p.as_os_str() != "-")
            && let Err(e) = triggers_scenarios::check_output(path)
        {
            return Err(CliError::usage(format!(
                "{flag} {}: {e}; name a file (or `-` for standard output)",
                path.display()
            )));
        }
    }
    let filter: Vec<Filter> = args.filter.iter().map(|f| Filter::new(f)).collect();
    let skip: Vec<Filter> = args.skip.iter().map(|f| Filter::new(f)).collect();
    let durations = match &args.durations {
        Some(path) => match select::durations(path) {
            Ok(d) => Some(d),
            Err(e) => return Err(CliError::usage(format!("--durations: {e}"))),
        },
        None => None,
    };
    let selection = Selection {
        filter,
        skip,
        shard: args.shard,
        durations,
    };
    if args.list {
        return list(&args.paths, &selection);
    }
    let outputs = Outputs {
        junit: args.junit.as_deref(),
        json: args.json.as_deref(),
        coverage: args.coverage.as_deref(),
        coverage_md: args.coverage_md.as_deref(),
        format: Some(args.message_format),
        tui: args.tui,
        verbose: false,
        brief: false,
    };
    if !args.watch {
        return execute(&args.paths, &args.common, &selection, &outputs);
    }
    // --watch: run, then wait for a change to a scenario or a file one names, and run again.
    // What the run writes (its reports) is never watched: it changes on every run.
    let written: Vec<&Path> = [&args.junit, &args.json, &args.coverage, &args.coverage_md]
        .into_iter()
        .filter_map(|p| p.as_deref())
        .filter(|p| p.as_os_str() != "-")
        .collect();
    loop {
        let watched = Watched::new(&args.paths, &written);
        let before = watched.snapshot();
        match execute(&args.paths, &args.common, &selection, &outputs) {
            // Stopped by a signal: no more watching.
            Err(e) if matches!(e.kind(), Kind::Interrupted(_)) => return Err(e),
            // Said now: the next change runs again.
            Err(e) => e.say(),
            Ok(()) => {}
        }
        eprintln!(
            "\nwatching {} for changes (Ctrl-C stops)…",
            describe_paths(&args.paths)
        );
        if let Some(sig) = wait_for_change(&watched, &before) {
            return Err(CliError::said(Kind::Interrupted(sig)));
        }
    }
}

/// Waits until a watched file differs from `before`, or a stop signal comes: that signal.
/// The signals are listened for here too: once a run has listened, SIGINT no longer ends the
/// process by itself, so a Ctrl-C between runs would otherwise go unheard.
fn wait_for_change(
    watched: &Watched,
    before: &BTreeMap<PathBuf, Option<SystemTime>>,
) -> Option<crate::signals::Sig> {
    let runtime = match crate::exit::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            e.say();
            loop {
                std::thread::sleep(Duration::from_millis(500));
                if watched.snapshot() != *before {
                    return None;
                }
            }
        }
    };
    let sig = runtime.block_on(async {
        let signals = Signals::listen();
        loop {
            tokio::select! {
                sig = signals.recv() => return Some(sig),
                () = tokio::time::sleep(Duration::from_millis(500)) => {
                    if watched.snapshot() != *before {
                        return None;
                    }
                }
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_millis(200));
    sig
}

fn describe_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A report's canonical path, also before it is first written (its folder's, then its name).
fn canonical_output(path: &Path) -> PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) if !path.exists() => {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            triggers_scenarios::canonical(dir).join(name)
        }
        _ => triggers_scenarios::canonical(path),
    }
}

/// What `--watch` watches: the scenario files under the paths (found again at every look, so a
/// new one counts) and the files each names (flow files, `payloads_file`s, files in its
/// services' commands, as they were when the run began); never a file the run writes, nor
/// anything else beside them.
struct Watched {
    paths: Vec<PathBuf>,
    named: Vec<PathBuf>,
    /// The run's reports, by canonical path.
    written: HashSet<PathBuf>,
}

impl Watched {
    fn new(paths: &[PathBuf], written: &[&Path]) -> Self {
        let named = triggers_scenarios::discover(paths)
            .unwrap_or_default()
            .iter()
            // A scenario that does not load is watched alone: fixing it runs again.
            .filter_map(|file| triggers_scenarios::load_file(file).ok())
            .flat_map(|s| s.files_named())
            .collect();
        Watched {
            paths: paths.to_vec(),
            named,
            written: written.iter().map(|p| canonical_output(p)).collect(),
        }
    }

    /// Each watched file with its modification time (`None`: gone, or no time to be had).
    fn snapshot(&self) -> BTreeMap<PathBuf, Option<SystemTime>> {
        // A path named on the command line that is gone counts as a change too.
        let scenarios = triggers_scenarios::discover(&self.paths).unwrap_or_default();
        scenarios
            .iter()
            .chain(&self.named)
            .filter(|p| !self.written.contains(&triggers_scenarios::canonical(p)))
            .map(|p| {
                let time = std::fs::metadata(p).and_then(|m| m.modified()).ok();
                (p.clone(), time)
            })
            .collect()
    }
}

/// `--list`: the scenarios, one a line, name then file.
fn list(paths: &[PathBuf], selection: &Selection) -> exit::Result<()> {
    let (scenarios, shard) = load(paths, selection)?;
    for s in &scenarios {
        let n = s.steps.len();
        outln!(
            "{}  ({}, {n} step{})",
            s.name,
            s.file,
            if n == 1 { "" } else { "s" }
        );
    }
    match &shard {
        Some(shard) => eprintln!("{}", shard_line(shard)),
        None => eprintln!("{}", out::count(scenarios.len() as u64, "scenario")),
    }
    Ok(())
}

/// `shard 1/2: 8 of 16 scenarios`.
fn shard_line(shard: &ShardInfo) -> String {
    format!(
        "shard {}/{}: {} of {} scenarios{}",
        shard.index,
        shard.count,
        shard.positions.len(),
        shard.selected,
        if shard.positions.is_empty() {
            " (an empty shard: nothing to run)"
        } else {
            ""
        }
    )
}

/// Which of the scenarios found run: `--filter`, then `--shard` (balanced by `--durations`).
#[derive(Default)]
struct Selection {
    filter: Vec<Filter>,
    /// `--skip`: left out when any matches.
    skip: Vec<Filter>,
    shard: Option<Shard>,
    durations: Option<select::Durations>,
}

pub(crate) fn demo(args: DemoArgs) -> exit::Result<()> {
    let dir = match tempfile::Builder::new()
        .prefix("triggers-lab-demo")
        .tempdir()
    {
        Ok(d) => d,
        Err(e) => {
            return Err(CliError::env(format!(
                "cannot make a temporary folder for the demo's scenarios: {e}"
            )));
        }
    };
    let scenarios = match demo::unpack(dir.path()) {
        Ok(s) => s,
        Err(e) => {
            return Err(CliError::env(format!(
                "cannot write the demo's scenarios: {e}"
            )));
        }
    };
    outln!("triggers-lab demo: the flow-lab scenarios built into this binary");
    outln!(
        "Each one starts a nats-server and an orchestrator emulator of its own, starts the services it\n\
         declares (in-process on the Rust SDK, or as commands), then deploys, triggers and checks\n\
         flows step by step. The same files run in CI with `triggers-lab run scenarios/flow-lab`.\n"
    );
    // Step by step; -v adds what each step did.
    let outputs = Outputs {
        verbose: true,
        brief: !args.common.verbose,
        ..Default::default()
    };
    let result = execute(&[scenarios], &args.common, &Selection::default(), &outputs);
    if result
        .as_ref()
        .is_err_and(|e| e.kind() == Kind::Environment)
    {
        return result;
    }
    outln!(
        "\nNext: read a scenario (scenarios/flow-lab/*.scenario.yaml in the repository), write your\n\
         own (docs/scenarios.md, or `triggers-lab init`), and run them with `triggers-lab run PATH`."
    );
    result
}

/// Loads the scenarios and keeps the selected ones (with, for a shard, which part of the
/// selection they are), printing what is wrong with them; a usage error when nothing can run.
fn load(
    paths: &[PathBuf],
    selection: &Selection,
) -> exit::Result<(Vec<Scenario>, Option<ShardInfo>)> {
    let scenarios = match triggers_scenarios::load_all(paths) {
        Ok(s) => s,
        Err(errors) => {
            let errors = triggers_scenarios::LoadErrors(errors);
            eprintln!("{errors}");
            let files: std::collections::BTreeSet<&str> =
                errors.iter().map(|e| e.file.as_str()).collect();
            return Err(CliError::usage(format!(
                "{} in {}; nothing was run",
                out::count(errors.len() as u64, "problem"),
                out::count(files.len() as u64, "file")
            )));
        }
    };
    let found = scenarios.len();
    let scenarios: Vec<_> = scenarios
        .into_iter()
        .filter(|s| selection.filter.is_empty() || selection.filter.iter().any(|f| f.matches(s)))
        .filter(|s| !selection.skip.iter().any(|f| f.matches(s)))
        .collect();
    if scenarios.is_empty() {
        return Err(CliError::usage(format!(
            "no scenario to run ({found} found{}; folders are searched for *.scenario.yaml)",
            match (selection.filter.is_empty(), selection.skip.is_empty()) {
                (true, true) => "",
                (false, true) => ", none matches --filter",
                (true, false) => ", --skip left out all",
                (false, false) => ", none matches --filter but not --skip",
            }
        )));
    }
    Ok(match selection.shard {
        Some(shard) => {
            let (scenarios, info) =
                select::shard(paths, scenarios, shard, selection.durations.as_ref());
            (scenarios, Some(info))
        }
        None => (scenarios, None),
    })
}

fn execute(
    paths: &[PathBuf],
    common: &CommonArgs,
    selection: &Selection,
    outputs: &Outputs<'_>,
) -> exit::Result<()> {
    let (scenarios, shard) = load(paths, selection)?;
    let format = match outputs.format {
        Some(MessageFormat::Json) => Format::Json,
        _ => Format::Human,
    };
    // Standard output may carry a report or JSON messages, which must stay machine-readable.
    let machine_stdout = format == Format::Json
        || [
            outputs.junit,
            outputs.json,
            outputs.coverage,
            outputs.coverage_md,
        ]
        .iter()
        .any(|p| p.is_some_and(|p| p.as_os_str() == "-"));
    if scenarios.is_empty() {
        // An empty shard (more shards than scenarios): nothing to run, and that is no failure;
        // its reports are still written, so that `report merge` finds every shard's.
        let report = SuiteReport {
            scenarios: Vec::new(),
            duration: Duration::ZERO,
            jobs: common.jobs,
            interrupted: None,
            shard,
        };
        let coverage =
            (outputs.coverage.is_some() || outputs.coverage_md.is_some()).then(Coverage::new);
        return finish(&report, coverage.as_ref(), outputs, machine_stdout, None);
    }
    let choice = nats_choice::choose(common.backend, common.nats.as_deref(), "run");
    if let Some(note) = &choice.note {
        eprintln!("note: {note}");
    }
    eprintln!("{}", choice.said);
    let runtime = exit::runtime()?;
    // No server to be had is the machine's problem, not the scenarios': said once, before any
    // of them, with what was tried and what to do; none is run, so none is counted failed, and
    // no report is written (an empty one would read as a pass).
    if let Some(why) = runtime.block_on(choice.nothing_works()) {
        return Err(CliError::env(format!(
            "no nats-server can be had, so none of the {} scenario(s) was run:\n{why}",
            scenarios.len()
        )));
    }
    let mut progress = Progress::new(
        crate::out::redraw_stderr(),
        outputs.verbose || common.verbose,
        outputs.tui,
        common.jobs,
        format,
    );
    progress.to_stderr = machine_stdout;
    progress.details = !outputs.brief;
    if machine_stdout {
        progress.colour = false;
    }
    let progress = Arc::new(Mutex::new(progress));
    let interrupt = Interrupt::new();
    let on_event = {
        let progress = progress.clone();
        let interrupt = interrupt.clone();
        let fail_fast = common.fail_fast && !common.no_fail_fast;
        Arc::new(move |e: Event| {
            if fail_fast
                && let Event::ScenarioFinished { report, .. } = &e
                && report.outcome == Outcome::Failed
            {
                interrupt.request("--fail-fast");
            }
            progress.lock().unwrap_or_else(|p| p.into_inner()).on(e);
        })
    };
    let watch: Option<WatchFn> = outputs.tui.then(|| {
        let w: WatchFn = Arc::new(|emulator| {
            Box::pin(async move {
                if let Err(e) = triggers_tui::run_in_process(emulator).await {
                    eprintln!("the terminal UI stopped: {e}");
                }
            })
        });
        w
    });
    let mut nats = choice.config;
    nats.isolation = match common.isolation {
        // Where an account cannot be had (a URL, Docker), a server of its own as before.
        IsolationArg::Account => natsbox::Isolation::Auto,
        IsolationArg::Server => natsbox::Isolation::Server,
    };
    let options = RunOptions {
        nats,
        timeout: common.timeout,
        on_event: Some(on_event),
        watch,
        interrupt,
        vars: common.vars.iter().cloned().collect(),
        coverage: (outputs.coverage.is_some() || outputs.coverage_md.is_some())
            .then(|| Arc::new(Mutex::new(Coverage::new()))),
    };
    let (report, signal, signals) = runtime.block_on(async {
        // The first signal interrupts the run: steps stop, services and servers are stopped as
        // at a scenario's end, and the reports are still written.
        let signals = Signals::listen();
        let waiting = signals.clone();
        let interrupt = options.interrupt.clone();
        let forward = tokio::spawn(async move {
            interrupt.request(waiting.recv().await.name());
        });
        // The progress line's times move on while a step waits.
        let ticker = {
            let progress = progress.clone();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(Duration::from_secs(1));
                loop {
                    every.tick().await;
                    progress.lock().unwrap_or_else(|p| p.into_inner()).tick();
                }
            })
        };
        let mut report =
            triggers_scenarios::run_suite(scenarios.clone(), common.jobs, &options).await;
        retry_failed(
            &mut report,
            &scenarios,
            common,
            &options,
            format,
            machine_stdout,
        )
        .await;
        forward.abort();
        ticker.abort();
        (report, signals.received(), signals)
    });
    // Writing the reports can block (standard output a pipe whose reader stopped reading): a
    // signal must still end the process then. The runtime stays up meanwhile, so its workers
    // hear it: a first signal now exits at once (the run is over, only its reports are left);
    // after one during the run, the listener forces the exit on the next.
    if signal.is_none() {
        runtime.spawn(async move {
            let sig = signals.recv().await;
            eprintln!(
                "{}: exiting without finishing the reports and summary",
                sig.name()
            );
            std::process::exit(i32::from(sig.code()));
        });
    }
    let report = SuiteReport { shard, ..report };
    let coverage = options
        .coverage
        .as_ref()
        .map(|c| c.lock().unwrap_or_else(|p| p.into_inner()).clone());
    let result = finish(&report, coverage.as_ref(), outputs, machine_stdout, signal);
    // Services and servers are stopped; give the runtime's leftovers a moment, not forever.
    runtime.shutdown_timeout(Duration::from_secs(2));
    result
}

/// Writes the reports and prints the summary; a failure (said there) when a scenario failed or a
/// report could not be written, the signal when one stopped the run.
fn finish(
    report: &SuiteReport,
    coverage: Option<&Coverage>,
    outputs: &Outputs<'_>,
    machine_stdout: bool,
    signal: Option<crate::signals::Sig>,
) -> exit::Result<()> {
    let mut failed = report.failed() > 0;
    if !write_reports(report, outputs.junit, outputs.json) {
        failed = true;
    }
    if let Some(coverage) = coverage {
        for (path, text) in [
            (
                outputs.coverage,
                outputs.coverage.map(|_| coverage.to_json()),
            ),
            (
                outputs.coverage_md,
                outputs.coverage_md.map(|_| Ok(coverage.to_markdown())),
            ),
        ] {
            if let (Some(path), Some(text)) = (path, text)
                && !write_output(path, text)
            {
                failed = true;
            }
        }
    }
    // The summary goes where the results went.
    let colour = !machine_stdout && out::colour_stdout();
    let mut summary = summary(report, colour);
    if let Some(coverage) = coverage {
        // Before the scenario counts, which stay the last line.
        summary.insert_str(
            summary.rfind("\nran ").map_or(0, |i| i + 1),
            &format!("flow coverage:\n{}", coverage.summary()),
        );
    }
    if machine_stdout {
        eprint!("{summary}");
    } else {
        out!("{summary}");
    }
    match signal {
        Some(sig) => Err(CliError::said(Kind::Interrupted(sig))),
        None if failed => Err(CliError::said(Kind::Failed)),
        None => Ok(()),
    }
}

/// Writes the JUnit and JSON reports asked for (`-`: standard output), saying where; false when
/// one could not be written (the reason printed).
pub(crate) fn write_reports(
    report: &SuiteReport,
    junit: Option<&Path>,
    json: Option<&Path>,
) -> bool {
    let mut written_all = true;
    for (path, text) in [
        (junit, junit.map(|_| report.to_junit())),
        (json, json.map(|_| report.to_json())),
    ] {
        if let (Some(path), Some(text)) = (path, text) {
            written_all &= write_output(path, text);
        }
    }
    written_all
}

/// Writes one report to `path` (`-`: standard output), saying where; false when it could not be
/// written (the reason printed).
fn write_output<E: std::fmt::Display>(path: &Path, text: Result<String, E>) -> bool {
    let text = match text {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot write the report {}: {e}", path.display());
            return false;
        }
    };
    if path.as_os_str() == "-" {
        out!("{text}\n");
        return true;
    }
    let written = (|| {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        triggers_scenarios::write_output(path, text.as_bytes())
    })();
    match written {
        Ok(()) => {
            eprintln!("report: {}", path.display());
            true
        }
        Err(e) => {
            eprintln!("error: cannot write {}: {e}", path.display());
            false
        }
    }
}

/// `--retries N`: each failed scenario again, one at a time, until it passes or N retries are
/// spent. A pass replaces the failure (keeping it in `failed_attempts`: flaky).
async fn retry_failed(
    report: &mut SuiteReport,
    scenarios: &[Scenario],
    common: &CommonArgs,
    options: &RunOptions,
    format: Format,
    to_stderr: bool,
) {
    let say = |text: String| {
        if to_stderr {
            eprint!("{text}");
        } else {
            out!("{text}");
        }
    };
    if common.retries == 0 || report.interrupted.is_some() {
        return;
    }
    // Retries print their own lines: the progress of the first pass counts that pass only.
    let quiet = RunOptions {
        on_event: None,
        ..options.clone()
    };
    for (i, scenario) in scenarios.iter().enumerate() {
        let mut failures = Vec::new();
        for attempt in 1..=common.retries {
            let current = &report.scenarios[i];
            if current.outcome != Outcome::Failed || options.interrupt.reason().is_some() {
                break;
            }
            failures.extend(current.failure.clone());
            if format == Format::Human {
                say(format!(
                    "RETRY {} (attempt {} of {})\n",
                    scenario.name,
                    attempt + 1,
                    common.retries + 1
                ));
            }
            let again = triggers_scenarios::run_suite(vec![scenario.clone()], 1, &quiet).await;
            let Some(mut next) = again.scenarios.into_iter().next() else {
                break;
            };
            next.failed_attempts = failures.clone();
            if format == Format::Human {
                say(format!("{}\n{}", next.summary_line(), next.failure_text()));
            } else {
                outln!(
                    "{}",
                    serde_json::json!({"type": "scenario_retried", "index": i, "attempt": attempt + 1, "report": &next})
                );
            }
            report.scenarios[i] = next;
        }
    }
}

pub(crate) fn summary(report: &SuiteReport, colour: bool) -> String {
    let mut text = String::new();
    text.push('\n');
    let names = |keep: &dyn Fn(&triggers_scenarios::ScenarioReport) -> bool| {
        report
            .scenarios
            .iter()
            .filter(|s| keep(s))
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
    };
    let failed = names(&|s| s.outcome == Outcome::Failed);
    if !failed.is_empty() {
        text.push_str(&format!(
            "{} {}\n",
            out::paint("failed:", false, colour),
            failed.join(", ")
        ));
    }
    let flaky = names(&|s| s.flaky());
    if !flaky.is_empty() {
        text.push_str(&format!(
            "flaky (passed on a retry): {}\n",
            flaky.join(", ")
        ));
    }
    if let Some(why) = &report.interrupted {
        let stopped = names(&|s| s.outcome == Outcome::Interrupted);
        text.push_str(&format!(
            "{} by {why}{}; {} not run\n",
            if why == "--fail-fast" {
                "stopped"
            } else {
                "interrupted"
            },
            if stopped.is_empty() {
                String::new()
            } else {
                format!(" during {}", stopped.join(", "))
            },
            out::count(report.count(Outcome::NotRun) as u64, "scenario")
        ));
    }
    if let Some(shard) = &report.shard {
        text.push_str(&shard_line(shard));
        text.push('\n');
    }
    // Those --fail-fast (or a signal) left out did not run: not counted as run.
    let not_run = report.count(Outcome::NotRun);
    let ran = report.scenarios.len() - not_run;
    text.push_str(&format!(
        "ran {ran} scenario{} in {} with -j {}{}\n",
        if ran == 1 { "" } else { "s" },
        seconds(report.duration),
        report.jobs,
        if not_run > 0 {
            format!("; {not_run} not run")
        } else {
            String::new()
        }
    ));
    // Last, alone on its line: the form CI logs are read for.
    text.push_str(&format!("scenarios: {}\n", counts_line(report, colour)));
    text
}

/// `1 passed, 2 failed`, with only the count that matters in colour: the failures in red, or,
/// when there are none, the passes in green.
fn counts_line(report: &SuiteReport, colour: bool) -> String {
    let counts = report.counts();
    if !colour {
        return counts;
    }
    let passed = format!("{} passed", report.passed());
    let failed = format!("{} failed", report.failed());
    // `counts` opens with `N passed, M failed`.
    match counts.strip_prefix(&format!("{passed}, {failed}")) {
        Some(rest) if report.failed() > 0 => {
            format!("{passed}, {}{rest}", out::paint(&failed, false, true))
        }
        Some(rest) => format!("{}, {failed}{rest}", out::paint(&passed, true, true)),
        None => counts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn watch_walks_a_folder_reached_through_links_once() {
        let root = tempfile::tempdir().unwrap();
        let d = root.path().join("d");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("s.scenario.yaml"), "steps: []\n").unwrap();
        // Two ways back up at every level: 2^8 walks of the parent within the depth limit.
        std::os::unix::fs::symlink("..", d.join("a")).unwrap();
        std::os::unix::fs::symlink("..", d.join("b")).unwrap();
        let files = Watched::new(std::slice::from_ref(&d), &[]).snapshot();
        let canonical: HashSet<PathBuf> = files
            .keys()
            .map(|p| std::fs::canonicalize(p).unwrap())
            .collect();
        assert_eq!(files.len(), canonical.len(), "{:?}", files.keys());
        assert_eq!(files.len(), 1, "{:?}", files.keys());
    }

    /// `run --watch . --json report.json` re-ran forever: its own report was a change. What is
    /// watched is the scenarios and the files they name, never what the run writes.
    #[test]
    fn watch_sees_the_scenarios_and_what_they_name_not_the_reports() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("flows")).unwrap();
        std::fs::write(
            d.join("flows/order.yaml"),
            "id: order\nnodes:\n  - {id: in, type: service-in, service: shop}\n  - {id: charge, type: action, service: shop, action: charge}\nedges:\n  - {id: e1, from: in, to: charge}\n",
        )
        .unwrap();
        std::fs::write(d.join("svc.sh"), "#!/bin/sh\n").unwrap();
        std::fs::write(d.join("notes.txt"), "").unwrap();
        std::fs::write(
            d.join("order.scenario.yaml"),
            "services:\n  - {name: shop, command: [sh, svc.sh]}\nflows:\n  - file: flows/order.yaml\nsteps:\n  - deploy: order\n",
        )
        .unwrap();
        let reports = [d.join("report.json"), d.join("out/junit.xml")];
        let written: Vec<&Path> = reports.iter().map(PathBuf::as_path).collect();
        let watched = Watched::new(&[d.to_path_buf()], &written);
        let before = watched.snapshot();
        let mut names: Vec<String> = before
            .keys()
            .map(|p| p.strip_prefix(d).unwrap().display().to_string())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["flows/order.yaml", "order.scenario.yaml", "svc.sh"],
            "{before:?}"
        );

        // The run writes its reports, and something else writes beside: no change.
        std::fs::create_dir(d.join("out")).unwrap();
        for r in &reports {
            std::fs::write(r, "{}").unwrap();
        }
        std::fs::write(d.join("notes.txt"), "more").unwrap();
        assert_eq!(watched.snapshot(), before);
        // A report written again, now that it exists: still none.
        assert_eq!(
            Watched::new(&[d.to_path_buf()], &written).snapshot(),
            before
        );

        // A new scenario is a change; so is the flow file the scenario names.
        std::fs::write(d.join("new.scenario.yaml"), "steps: []\n").unwrap();
        assert_ne!(watched.snapshot(), before);
        std::fs::remove_file(d.join("new.scenario.yaml")).unwrap();
        assert_eq!(watched.snapshot(), before);
        std::fs::remove_file(d.join("flows/order.yaml")).unwrap();
        assert_ne!(watched.snapshot(), before);
    }

    fn scenario(name: &str, outcome: Outcome) -> triggers_scenarios::ScenarioReport {
        triggers_scenarios::ScenarioReport {
            name: name.into(),
            file: format!("{name}.scenario.yaml"),
            description: String::new(),
            outcome,
            duration: Duration::from_millis(10),
            nats: String::new(),
            steps: Vec::new(),
            failure: None,
            dropped_messages: 0,
            services: Vec::new(),
            failed_attempts: Vec::new(),
        }
    }

    /// After --fail-fast the scenarios left out are not counted as run; the last line colours
    /// the failures only, not "1 passed" with them.
    #[test]
    fn the_summary_counts_what_ran_and_colours_only_the_failures() {
        let report = SuiteReport {
            scenarios: vec![
                scenario("a", Outcome::Passed),
                scenario("b", Outcome::Failed),
                scenario("c", Outcome::NotRun),
                scenario("d", Outcome::NotRun),
            ],
            duration: Duration::from_secs(1),
            jobs: 1,
            interrupted: Some("--fail-fast".into()),
            shard: None,
        };
        let text = summary(&report, true);
        assert!(
            text.contains("ran 2 scenarios in 1.00s with -j 1; 2 not run\n"),
            "{text}"
        );
        let last = text.lines().last().unwrap();
        assert!(
            last.starts_with("scenarios: 1 passed, \x1b[1;31m1 failed\x1b[0m, "),
            "{last:?}"
        );
        assert!(last.ends_with("2 not run"), "{last:?}");

        let all = SuiteReport {
            scenarios: vec![scenario("a", Outcome::Passed)],
            interrupted: None,
            ..report
        };
        let text = summary(&all, true);
        assert!(text.contains("ran 1 scenario in"), "{text}");
        assert_eq!(
            text.lines().last().unwrap(),
            "scenarios: \x1b[1;32m1 passed\x1b[0m, 0 failed"
        );
        assert_eq!(
            summary(&all, false).lines().last().unwrap(),
            "scenarios: 1 passed, 0 failed"
        );
    }
}
