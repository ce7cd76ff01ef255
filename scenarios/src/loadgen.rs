//! Load: N runs of a deployed flow at a fixed rate or a fixed concurrency, with throughput, the
//! latency of each run and of each node as percentiles (an HDR histogram), failures and DLQ
//! entries. The engine drives anything that can trigger a run and wait for it ([`LoadTarget`]):
//! an emulator in the process (the `load` step) or a running `up` through its control API
//! (`triggers-lab load`).

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::Value;
use triggers_emulator::control::ControlClient;
use triggers_emulator::recorder::{Run, RunStatus};
use triggers_emulator::{Emulator, EmulatorError};

/// How runs are started.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// At most this many runs in flight; the next starts when one settles.
    Concurrency(usize),
    /// This many runs started per second, however many are in flight (up to
    /// [`MAX_IN_FLIGHT`]: beyond it a start waits, and the report says the rate was not kept).
    Rate(f64),
}

/// The most runs in flight at once, whatever the pace.
pub const MAX_IN_FLIGHT: usize = 1024;
/// The most runs one load may start.
pub const MAX_RUNS: u64 = 1_000_000;
/// How long after the last settlement DLQ entries are still counted.
const DLQ_GRACE: Duration = Duration::from_millis(200);
/// Failed runs described in a report (the rest are counted).
const MAX_NAMED_FAILURES: usize = 10;

/// What to send: one payload for every run with `{{i}}` replaced by the run's number (from 0),
/// or payloads taken in turn from a list.
#[derive(Debug, Clone)]
pub enum Payloads {
    /// A template: a string that is exactly `"{{i}}"` becomes the number; `{{i}}` inside a
    /// longer string is replaced by its digits.
    Template(Value),
    /// Taken in turn (run `i` gets `list[i % len]`).
    List(Vec<Value>),
}

impl Payloads {
    /// Run `i`'s payload.
    #[must_use]
    pub fn payload(&self, i: u64) -> Value {
        match self {
            Payloads::Template(t) => fill(t, i),
            Payloads::List(list) if list.is_empty() => Value::Object(Default::default()),
            Payloads::List(list) => list[(i % list.len() as u64) as usize].clone(),
        }
    }

    /// Payloads from a file: a JSON array, or JSON lines (one payload per line).
    ///
    /// # Errors
    /// The line and column of what is not JSON.
    pub fn from_text(text: &str) -> Result<Payloads, String> {
        if text.trim_start().starts_with('[') {
            return serde_json::from_str::<Vec<Value>>(text)
                .map(Payloads::List)
                .map_err(|e| format!("line {}, column {}: {e}", e.line(), e.column()));
        }
        let mut list = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value = serde_json::from_str(line)
                .map_err(|e| format!("line {}, column {}: {e}", n + 1, e.column()))?;
            list.push(value);
        }
        if list.is_empty() {
            return Err("no payload in it (a JSON array, or one JSON value per line)".into());
        }
        Ok(Payloads::List(list))
    }
}

fn fill(template: &Value, i: u64) -> Value {
    match template {
        Value::String(s) if s == "{{i}}" => Value::from(i),
        Value::String(s) if s.contains("{{i}}") => {
            Value::String(s.replace("{{i}}", &i.to_string()))
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| fill(v, i)).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), fill(v, i))).collect())
        }
        other => other.clone(),
    }
}

/// One load.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The flow (deployed).
    pub flow: String,
    /// How many runs.
    pub runs: u64,
    /// How they are started.
    pub pace: Pace,
    /// What each is sent.
    pub payloads: Payloads,
    /// How long each run may take to settle before it counts as timed out.
    pub run_timeout: Duration,
}

/// Something runs can be started on and waited for.
pub trait LoadTarget {
    /// `Err` saying why when `flow` is not deployed (checked once, before any run starts).
    fn deployed(&self, flow: &str) -> impl Future<Output = Result<(), String>>;
    /// Starts a run of `flow`; its id.
    fn trigger(&self, flow: &str, payload: &Value) -> impl Future<Output = Result<String, String>>;
    /// The run once settled, or `Err` with the run as it stands after `timeout` (or why it
    /// cannot be read).
    fn settled(
        &self,
        run_id: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<Run, Result<Run, String>>>;
    /// The run as it stands.
    fn current(&self, run_id: &str) -> impl Future<Output = Result<Run, String>>;
    /// Messages the emulator has missed so far (dropped for a slow subscription, plus
    /// connections lost), `None` when it cannot be asked.
    fn missed(&self) -> impl Future<Output = Option<u64>>;
}

impl LoadTarget for Emulator {
    async fn deployed(&self, flow: &str) -> Result<(), String> {
        if self.flows().contains_key(flow) {
            Ok(())
        } else {
            Err(EmulatorError::UnknownFlow(flow.to_owned()).to_string())
        }
    }

    async fn trigger(&self, flow: &str, payload: &Value) -> Result<String, String> {
        Emulator::trigger(self, flow, payload)
            .await
            .map(|r| r.0)
            .map_err(|e| e.to_string())
    }

    async fn settled(&self, run_id: &str, timeout: Duration) -> Result<Run, Result<Run, String>> {
        match self
            .with_wait_timeout(timeout)
            .wait_run_settled(run_id)
            .await
        {
            Ok(run) => Ok(run),
            Err(e) => Err(self.run(run_id).ok_or_else(|| e.to_string())),
        }
    }

    async fn current(&self, run_id: &str) -> Result<Run, String> {
        self.run(run_id)
            .ok_or_else(|| format!("no run {run_id} (evicted beyond max_runs?)"))
    }

    async fn missed(&self) -> Option<u64> {
        Some(self.dropped_messages() + self.connection_losses())
    }
}

impl LoadTarget for ControlClient {
    async fn deployed(&self, flow: &str) -> Result<(), String> {
        self.flow(flow).await.map(drop).map_err(|e| e.to_string())
    }

    async fn trigger(&self, flow: &str, payload: &Value) -> Result<String, String> {
        ControlClient::trigger(self, flow, payload)
            .await
            .map_err(|e| e.to_string())
    }

    async fn settled(&self, run_id: &str, timeout: Duration) -> Result<Run, Result<Run, String>> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut pause = Duration::from_millis(5);
        loop {
            let run = self.run(run_id).await.map_err(|e| Err(e.to_string()))?;
            if run.status.is_settled() {
                return Ok(run);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Ok(run));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    async fn current(&self, run_id: &str) -> Result<Run, String> {
        self.run(run_id).await.map_err(|e| e.to_string())
    }

    async fn missed(&self) -> Option<u64> {
        ControlClient::missed(self).await.ok()
    }
}

/// Percentiles of one histogram, in microseconds.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Latency {
    /// How many values.
    pub count: u64,
    /// The median.
    pub p50_us: u64,
    /// The 90th percentile.
    pub p90_us: u64,
    /// The 99th percentile.
    pub p99_us: u64,
    /// The 99.9th percentile.
    pub p999_us: u64,
    /// The largest.
    pub max_us: u64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            count: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

/// Per node: how often it finished, how often it failed, and when it finished, counted from
/// its run's start (so a node after two hops shows both hops).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct NodeLoad {
    /// Finished executions (succeeded, skipped or failed).
    pub finished: u64,
    /// Failed executions.
    pub failed: u64,
    /// Retried attempts (`retrying` events).
    pub retried: u64,
    /// From the run's start to the node's finish.
    pub reached: Latency,
}

/// A run that did not succeed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LoadFailure {
    /// The run's number in the load (from 0).
    pub index: u64,
    /// Its id, once it had one.
    pub run_id: String,
    /// What happened.
    pub reason: String,
}

/// What a load did.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LoadReport {
    /// The flow.
    pub flow: String,
    /// Runs asked for.
    pub runs: u64,
    /// `concurrency N` or `rate R/s`.
    pub pace: String,
    /// Runs that succeeded.
    pub succeeded: u64,
    /// Runs that failed.
    pub failed: u64,
    /// Runs not settled within the run timeout.
    pub timed_out: u64,
    /// Runs that could not be started.
    pub not_started: u64,
    /// DLQ entries of the load's runs.
    pub dlq_entries: u64,
    /// Failed or unsettled runs that could no longer be read when the DLQ entries were counted
    /// at the end (evicted beyond the emulator's `max_runs`): for them `dlq_entries` counts what
    /// they had when they settled, so it is a floor, and no `max_dlq` verdict rests on it.
    pub dlq_unread: u64,
    /// From the first start to the last settlement, in milliseconds.
    pub elapsed_ms: u64,
    /// Settled runs per second.
    pub throughput: f64,
    /// With a rate: how many starts came late because [`MAX_IN_FLIGHT`] runs were in flight.
    pub late_starts: u64,
    /// From the trigger to the settlement, per run.
    pub run_latency: Latency,
    /// Per node.
    pub nodes: BTreeMap<String, NodeLoad>,
    /// The nodes in the order they first finished (the table's order: the flow's, roughly).
    #[serde(skip)]
    pub node_order: Vec<String>,
    /// The first failures (up to 10), then counted.
    pub failures: Vec<LoadFailure>,
    /// Messages the emulator missed while the load ran (dropped for a slow subscription, or
    /// lost with its connection): above 0 the figures rest on partial data and are no verdict.
    /// `None` when the emulator could not be asked.
    pub emulator_missed: Option<u64>,
}

impl LoadReport {
    /// Every run settled and succeeded.
    #[must_use]
    pub fn all_succeeded(&self) -> bool {
        self.succeeded == self.runs
    }

    /// The report as a table: a summary line, then latencies.
    #[must_use]
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let mut out = format!(
            "load {}: {} runs ({}) in {:.2} s, {:.1} runs/s: {} succeeded, {} failed, {} timed out, {} not started; {} DLQ entries\n",
            self.flow,
            self.runs,
            self.pace,
            self.elapsed_ms as f64 / 1000.0,
            self.throughput,
            self.succeeded,
            self.failed,
            self.timed_out,
            self.not_started,
            if self.dlq_unread > 0 {
                format!("at least {}", self.dlq_entries)
            } else {
                self.dlq_entries.to_string()
            }
        );
        if self.dlq_unread > 0 {
            let _ = writeln!(
                out,
                "MISSED: {} failed run(s) were evicted beyond the emulator's max_runs before their DLQ entries were counted: the DLQ count is a floor",
                self.dlq_unread
            );
        }
        match self.emulator_missed {
            Some(0) => {}
            Some(n) => {
                let _ = writeln!(
                    out,
                    "MISSED: the emulator missed {n} message(s) while the load ran: these figures rest on partial data"
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "MISSED?: the emulator could not say whether it missed messages while the load ran"
                );
            }
        }
        if self.late_starts > 0 {
            let _ = writeln!(
                out,
                "the rate was not kept: {} starts waited for one of {MAX_IN_FLIGHT} runs in flight to settle",
                self.late_starts
            );
        }
        let width = self
            .nodes
            .keys()
            .map(|n| n.len() + 5)
            .max()
            .unwrap_or(0)
            .max(22);
        let _ = writeln!(
            out,
            "{:<width$} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "latency", "count", "p50", "p90", "p99", "p99.9", "max"
        );
        let mut row = |name: &str, l: &Latency, extra: String| {
            let _ = writeln!(
                out,
                "{name:<width$} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}{extra}",
                l.count,
                ms(l.p50_us),
                ms(l.p90_us),
                ms(l.p99_us),
                ms(l.p999_us),
                ms(l.max_us)
            );
        };
        row("run (trigger→settled)", &self.run_latency, String::new());
        for (node, n) in self
            .node_order
            .iter()
            .filter_map(|id| self.nodes.get(id).map(|n| (id, n)))
        {
            let mut extra = String::new();
            if n.failed > 0 {
                extra.push_str(&format!("  {} failed", n.failed));
            }
            if n.retried > 0 {
                extra.push_str(&format!("  {} retried", n.retried));
            }
            row(&format!("node {node}"), &n.reached, extra);
        }
        for f in &self.failures {
            let _ = writeln!(out, "run #{} {}: {}", f.index, f.run_id, f.reason);
        }
        let named = self.failures.len() as u64;
        let unsuccessful = self.runs - self.succeeded;
        if unsuccessful > named {
            let _ = writeln!(
                out,
                "and {} more runs that did not succeed",
                unsuccessful - named
            );
        }
        out
    }
}

fn ms(us: u64) -> String {
    if us >= 10_000 {
        format!("{} ms", us / 1000)
    } else {
        format!("{:.2} ms", us as f64 / 1000.0)
    }
}

/// What of `expect` a report does not meet (empty: all of it), beyond every run settling in
/// time and being started.
#[must_use]
pub fn unmet(report: &LoadReport, expect: &crate::model::LoadExpect) -> Vec<String> {
    let mut broken = Vec::new();
    match report.emulator_missed {
        Some(0) => {}
        Some(n) => broken.push(format!(
            "the emulator missed {n} message(s) while the load ran (a slow subscription, or its \
             connection lost): the figures rest on partial data and are no verdict"
        )),
        None => broken.push(
            "the emulator could not say whether it missed messages while the load ran: the \
             figures are no verdict"
                .to_owned(),
        ),
    }
    if report.timed_out > 0 {
        broken.push(format!("{} runs did not settle in time", report.timed_out));
    }
    if report.not_started > 0 {
        broken.push(format!("{} runs could not be started", report.not_started));
    }
    if report.failed > expect.max_failed {
        broken.push(format!(
            "{} runs failed, at most {} may (the step's expect.max_failed, the command's --max-failed)",
            report.failed, expect.max_failed
        ));
    }
    if let Some(max_dlq) = expect.max_dlq {
        if report.dlq_entries > max_dlq {
            broken.push(format!(
                "{}{} DLQ entries (expect.max_dlq: {max_dlq})",
                if report.dlq_unread > 0 {
                    "at least "
                } else {
                    ""
                },
                report.dlq_entries
            ));
        } else if report.dlq_unread > 0 {
            broken.push(format!(
                "{} failed run(s) could no longer be read when the DLQ entries were counted \
                 (evicted beyond the emulator's max_runs): {} DLQ entries is a floor, no verdict \
                 on expect.max_dlq: {max_dlq}; raise max_runs above the load's runs (a scenario's \
                 emulator.max_runs, `up --max-runs`)",
                report.dlq_unread, report.dlq_entries
            ));
        }
    }
    if let Some(bound) = expect.p99_below {
        let p99 = Duration::from_micros(report.run_latency.p99_us);
        if p99 >= bound.0 {
            broken.push(format!(
                "the runs' p99 latency is {}, not below {bound} (expect.p99_below, --p99-below)",
                ms(report.run_latency.p99_us)
            ));
        }
    }
    if let Some(min) = expect.min_throughput
        && report.throughput < min
    {
        broken.push(format!(
            "{:.1} runs/s, below {min} (expect.min_throughput)",
            report.throughput
        ));
    }
    broken
}

/// `runs` runs at `pace` checked: the pace's text (`concurrency 4`, `rate 50/s`), or what is out
/// of range, named by its key (`runs: 0 is out of range (1 to 1000000)`).
///
/// # Errors
/// No run or more than [`MAX_RUNS`]; a concurrency of 0 or above [`MAX_IN_FLIGHT`]; a rate that
/// is not above 0 and at most 1 000 000 runs per second.
pub fn check(runs: u64, pace: Pace) -> Result<String, String> {
    if runs == 0 || runs > MAX_RUNS {
        return Err(format!("runs: {runs} is out of range (1 to {MAX_RUNS})"));
    }
    match pace {
        Pace::Concurrency(n) if n == 0 || n > MAX_IN_FLIGHT => Err(format!(
            "concurrency: {n} is out of range (1 to {MAX_IN_FLIGHT})"
        )),
        Pace::Rate(r) if !(r.is_finite() && r > 0.0 && r <= 1_000_000.0) => Err(format!(
            "rate: {r} runs/s is out of range (above 0, at most 1000000)"
        )),
        Pace::Concurrency(n) => Ok(format!("concurrency {n}")),
        Pace::Rate(r) => Ok(format!("rate {r}/s")),
    }
}

impl Pace {
    /// The pace a `rate` or a `concurrency` asks for (a step's keys, the command's flags): the
    /// rate when given, else the concurrency (default 4).
    #[must_use]
    pub fn of(rate: Option<f64>, concurrency: Option<usize>) -> Pace {
        match rate {
            Some(r) => Pace::Rate(r),
            None => {
                Pace::Concurrency(concurrency.unwrap_or(crate::model::DEFAULT_LOAD_CONCURRENCY))
            }
        }
    }
}

/// Progress, called as runs settle: (settled, asked for).
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// Runs the load.
///
/// # Errors
/// When the configuration is out of range (no run, a pace of 0): nothing was started.
pub async fn run_load<T: LoadTarget>(
    target: &T,
    config: &LoadConfig,
    progress: Progress<'_>,
) -> Result<LoadReport, String> {
    let pace_text = check(config.runs, config.pace)?;
    // Not a million "not started" lines for a flow that is not there.
    target.deployed(&config.flow).await?;
    let mut tally = Tally::new(LoadReport::empty(config, pace_text));
    let missed_before = target.missed().await;
    let limit = match config.pace {
        Pace::Concurrency(n) => n,
        Pace::Rate(_) => MAX_IN_FLIGHT,
    };
    let start = Instant::now();
    let one = |i: u64| {
        let payload = config.payloads.payload(i);
        async move {
            let begun = Instant::now();
            let run_id = match target.trigger(&config.flow, &payload).await {
                Ok(id) => id,
                Err(e) => return (i, String::new(), begun, Err(Err(e))),
            };
            let settled = target.settled(&run_id, config.run_timeout).await;
            (i, run_id, begun, settled)
        }
    };
    let mut in_flight = FuturesUnordered::new();
    let mut next = 0u64;
    let mut settled = 0u64;
    let mut counted_late = None;
    while settled < config.runs {
        // Start what the pace allows.
        while next < config.runs && in_flight.len() < limit {
            if let Pace::Rate(r) = config.pace {
                let due = start + Duration::from_secs_f64(next as f64 / r);
                if due > Instant::now() {
                    if in_flight.is_empty() {
                        tokio::time::sleep_until(due.into()).await;
                    } else {
                        break;
                    }
                }
            }
            in_flight.push(one(next));
            next += 1;
        }
        if in_flight.is_empty() {
            continue;
        }
        let finished = match config.pace {
            Pace::Rate(r) if next < config.runs => {
                let due = start + Duration::from_secs_f64(next as f64 / r);
                if in_flight.len() < limit {
                    // Whichever comes first: a settlement, or the next start.
                    match tokio::time::timeout_at(due.into(), in_flight.next()).await {
                        Ok(f) => f,
                        Err(_) => continue,
                    }
                } else {
                    if due <= Instant::now() && counted_late != Some(next) {
                        tally.report.late_starts += 1;
                        counted_late = Some(next);
                    }
                    in_flight.next().await
                }
            }
            _ => in_flight.next().await,
        };
        let Some((index, run_id, begun, outcome)) = finished else {
            continue;
        };
        settled += 1;
        progress(settled, config.runs);
        tally.add(index, &run_id, begun, outcome, config.run_timeout);
    }
    let mut report = tally.finish(start.elapsed(), target).await;
    report.emulator_missed = match (missed_before, target.missed().await) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    Ok(report)
}

impl LoadReport {
    /// The report of a load none of whose runs has settled yet.
    fn empty(config: &LoadConfig, pace: String) -> Self {
        LoadReport {
            flow: config.flow.clone(),
            runs: config.runs,
            pace,
            succeeded: 0,
            failed: 0,
            timed_out: 0,
            not_started: 0,
            dlq_entries: 0,
            dlq_unread: 0,
            elapsed_ms: 0,
            throughput: 0.0,
            late_starts: 0,
            run_latency: Latency::default(),
            nodes: BTreeMap::new(),
            node_order: Vec::new(),
            failures: Vec::new(),
            emulator_missed: None,
        }
    }
}

/// What the runs of a load settled so far add up to.
struct Tally {
    report: LoadReport,
    run_hist: Histogram<u64>,
    node_hists: BTreeMap<String, (NodeLoad, Histogram<u64>)>,
    /// Failed runs, with the DLQ entries each had when it settled: their entries may land just
    /// after the failed event settles them, so they are read again at the end.
    unsuccessful: Vec<(String, usize)>,
}

fn histogram() -> Histogram<u64> {
    Histogram::<u64>::new(3).expect("3 significant figures is valid")
}

impl Tally {
    fn new(report: LoadReport) -> Self {
        Tally {
            report,
            run_hist: histogram(),
            node_hists: BTreeMap::new(),
            unsuccessful: Vec::new(),
        }
    }

    /// Run `index` (`run_id`, started at `begun`) is done: settled, not settled in time, not
    /// started, or not readable.
    fn add(
        &mut self,
        index: u64,
        run_id: &str,
        begun: Instant,
        outcome: Result<Run, Result<Run, String>>,
        run_timeout: Duration,
    ) {
        let report = &mut self.report;
        let run = match outcome {
            Ok(run) => {
                let _ = self.run_hist.record(micros(begun.elapsed()));
                if run.status == RunStatus::Succeeded {
                    report.succeeded += 1;
                } else {
                    report.failed += 1;
                    failure(report, index, run_id, failed_reason(&run));
                    self.unsuccessful.push((run_id.to_owned(), run.dlq.len()));
                }
                run
            }
            Err(Ok(run)) => {
                report.timed_out += 1;
                failure(
                    report,
                    index,
                    run_id,
                    format!(
                        "not settled within {:?} (it is {:?}; pending: {})",
                        run_timeout,
                        run.status,
                        run.pending.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                );
                self.unsuccessful.push((run_id.to_owned(), run.dlq.len()));
                run
            }
            Err(Err(e)) => {
                if run_id.is_empty() {
                    report.not_started += 1;
                    failure(report, index, "", format!("not started: {e}"));
                } else {
                    report.timed_out += 1;
                    failure(report, index, run_id, format!("cannot be read: {e}"));
                }
                return;
            }
        };
        self.add_nodes(&run);
    }

    /// Each node's finishes, retries and failures, and when the run reached it.
    fn add_nodes(&mut self, run: &Run) {
        for entry in &run.timeline {
            if entry.service == "engine" {
                continue;
            }
            let (stats, hist) = self
                .node_hists
                .entry(entry.node_id.clone())
                .or_insert_with(|| {
                    self.report.node_order.push(entry.node_id.clone());
                    (NodeLoad::default(), histogram())
                });
            match entry.status.as_str() {
                "retrying" => stats.retried += 1,
                status => {
                    stats.finished += 1;
                    if status == "failed" {
                        stats.failed += 1;
                    }
                    let reached = entry.finished_at.unix_nanos() - run.started_at.unix_nanos();
                    let _ = hist.record((reached.max(0) / 1000) as u64);
                }
            }
        }
    }

    /// The report, once every run is done, `elapsed` after the first started: throughput,
    /// latencies, and the failed runs' DLQ entries read again.
    async fn finish<T: LoadTarget>(self, elapsed: Duration, target: &T) -> LoadReport {
        let mut report = self.report;
        report.elapsed_ms = elapsed.as_millis() as u64;
        let ran = report.succeeded + report.failed;
        report.throughput = if elapsed.is_zero() {
            0.0
        } else {
            ran as f64 / elapsed.as_secs_f64()
        };
        report.run_latency = Latency::of(&self.run_hist);
        report.nodes = self
            .node_hists
            .into_iter()
            .map(|(node, (mut stats, hist))| {
                stats.reached = Latency::of(&hist);
                (node, stats)
            })
            .collect();
        // Read again: a DLQ entry is written after the failed event that settled its run.
        tokio::time::sleep(DLQ_GRACE).await;
        for (run_id, at_settlement) in &self.unsuccessful {
            match target.current(run_id).await {
                Ok(run) => report.dlq_entries += run.dlq.len().max(*at_settlement) as u64,
                Err(_) => {
                    report.dlq_entries += *at_settlement as u64;
                    report.dlq_unread += 1;
                }
            }
        }
        report
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn failure(report: &mut LoadReport, index: u64, run_id: &str, reason: String) {
    if report.failures.len() < MAX_NAMED_FAILURES {
        report.failures.push(LoadFailure {
            index,
            run_id: run_id.to_owned(),
            reason,
        });
    }
}

fn failed_reason(run: &Run) -> String {
    match run
        .timeline
        .iter()
        .rev()
        .find(|e| e.status == "failed" || e.status == "dead_lettered")
    {
        Some(e) if e.error.is_empty() => format!("failed at {} ({})", e.node_id, e.status),
        Some(e) => format!("failed at {} ({}): {}", e.node_id, e.status, e.error),
        None => "failed".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn templates_number_each_run() {
        let t = Payloads::Template(json!({"n": "{{i}}", "id": "order-{{i}}", "fixed": [1, "x"]}));
        assert_eq!(
            t.payload(7),
            json!({"n": 7, "id": "order-7", "fixed": [1, "x"]})
        );
    }

    #[test]
    fn payload_files_are_arrays_or_lines_and_errors_say_where() {
        let list = Payloads::from_text("{\"a\":1}\n\n{\"a\":2}\n").unwrap();
        assert_eq!(list.payload(0), json!({"a": 1}));
        assert_eq!(list.payload(3), json!({"a": 2}));
        let array = Payloads::from_text("[1, 2, 3]").unwrap();
        assert_eq!(array.payload(4), json!(2));
        let err = Payloads::from_text("{\"a\":1}\n{\"a\":}\n").unwrap_err();
        assert!(err.starts_with("line 2, column 6"), "{err}");
        assert!(Payloads::from_text("\n").is_err());
    }

    /// A verdict on partial data is not a verdict: a load during which the emulator missed
    /// messages fails, whatever its runs did, and so does one whose emulator could not say.
    #[test]
    fn a_load_whose_emulator_missed_messages_is_no_verdict() {
        let expect = crate::model::LoadExpect::default();
        let mut report = LoadReport {
            runs: 3,
            succeeded: 3,
            emulator_missed: Some(0),
            ..LoadReport::default()
        };
        assert_eq!(unmet(&report, &expect), Vec::<String>::new());
        assert!(!report.table().contains("MISSED"));
        report.emulator_missed = Some(4);
        let broken = unmet(&report, &expect);
        assert_eq!(broken.len(), 1, "{broken:?}");
        assert!(
            broken[0].starts_with("the emulator missed 4 message(s)"),
            "{broken:?}"
        );
        assert!(
            report
                .table()
                .contains("MISSED: the emulator missed 4 message(s)")
        );
        report.emulator_missed = None;
        assert!(unmet(&report, &expect)[0].contains("could not say"));
    }

    /// DLQ entries counted only as far as the runs could still be read are a floor: over the
    /// bound it is a failure either way, under it no verdict.
    #[test]
    fn a_dlq_count_with_unread_runs_is_a_floor() {
        let expect = crate::model::LoadExpect {
            max_failed: 10,
            max_dlq: Some(5),
            ..Default::default()
        };
        let mut report = LoadReport {
            runs: 10,
            failed: 10,
            dlq_entries: 4,
            emulator_missed: Some(0),
            ..LoadReport::default()
        };
        assert_eq!(unmet(&report, &expect), Vec::<String>::new());
        report.dlq_unread = 2;
        let broken = unmet(&report, &expect);
        assert!(
            broken.len() == 1 && broken[0].contains("4 DLQ entries is a floor"),
            "{broken:?}"
        );
        assert!(report.table().contains("at least 4 DLQ entries"));
        assert!(
            report
                .table()
                .contains("MISSED: 2 failed run(s) were evicted")
        );
        report.dlq_entries = 6;
        assert_eq!(
            unmet(&report, &expect),
            vec!["at least 6 DLQ entries (expect.max_dlq: 5)".to_owned()]
        );
        let no_bound = crate::model::LoadExpect {
            max_failed: 10,
            ..Default::default()
        };
        assert_eq!(unmet(&report, &no_bound), Vec::<String>::new());
    }

    #[test]
    fn percentiles_come_from_the_histogram() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in 1..=1000 {
            h.record(v).unwrap();
        }
        let l = Latency::of(&h);
        assert_eq!(l.count, 1000);
        assert_eq!(l.p50_us, 500);
        assert_eq!(l.p99_us, 990);
        assert_eq!(l.max_us, 1000);
    }
}
