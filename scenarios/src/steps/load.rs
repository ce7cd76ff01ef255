//! `load`: many runs of a deployed flow at a concurrency or a rate, with throughput and latency
//! percentiles, judged against `expect` (the work is `crate::loadgen`'s).

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;
use serde_json::Value;

use super::{CheckCx, StepFailure, StepKind, StepOutcome};
use crate::loadgen::{LoadConfig, Pace, Payloads};
use crate::model::Dur;
use crate::runner::Lab;

/// `load`: `runs` runs of a deployed flow, at a fixed `concurrency` (default 4) or `rate` (runs
/// per second), each sent `payload` (with `{{i}}` replaced by the run's number) or the payloads of
/// `payloads_file` in turn; reports throughput and latency percentiles (per run and per node) and
/// fails unless every run settled in time and `expect` holds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadStep {
    /// The flow id (deployed by an earlier step).
    pub flow: String,
    /// How many runs (default 100).
    #[serde(default)]
    pub runs: Option<u64>,
    /// At most this many runs in flight (default 4).
    #[serde(default)]
    pub concurrency: Option<usize>,
    /// Runs started per second (instead of `concurrency`).
    #[serde(default)]
    pub rate: Option<f64>,
    /// The payload of every run (default `{}`).
    #[serde(default)]
    pub payload: Option<Value>,
    /// A file of payloads (a JSON array, or one JSON value per line), relative to the scenario.
    #[serde(default)]
    pub payloads_file: Option<String>,
    /// How long each run may take to settle (default: the scenario's `step_timeout`).
    #[serde(default)]
    pub run_timeout: Option<Dur>,
    /// What must hold beyond every run settling in time.
    #[serde(default)]
    pub expect: LoadExpect,
}

/// `load`'s `expect`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadExpect {
    /// Runs that may fail (default 0).
    #[serde(default)]
    pub max_failed: u64,
    /// DLQ entries the failed runs may write (default: no bound of its own; failed runs are
    /// bounded by `max_failed`).
    #[serde(default)]
    pub max_dlq: Option<u64>,
    /// The runs' p99 latency (trigger to settled) must be below this. In CI, a generous ceiling.
    #[serde(default)]
    pub p99_below: Option<Dur>,
    /// Settled runs per second at least.
    #[serde(default)]
    pub min_throughput: Option<f64>,
}

/// Runs a `load` step makes when it does not say.
pub const DEFAULT_LOAD_RUNS: u64 = 100;

/// Runs a `load` step keeps in flight when it names neither `concurrency` nor `rate`.
pub const DEFAULT_LOAD_CONCURRENCY: usize = 4;

impl StepKind for LoadStep {
    fn label(&self) -> String {
        format!(
            "load {} ({} runs, {})",
            self.flow,
            self.runs.unwrap_or(DEFAULT_LOAD_RUNS),
            match (self.rate, self.concurrency) {
                (Some(r), _) => format!("rate {r}/s"),
                (None, c) => format!("concurrency {}", c.unwrap_or(DEFAULT_LOAD_CONCURRENCY)),
            }
        )
    }

    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
        if !cx.flows.contains(self.flow.as_str()) {
            return Err(format!("no flow {:?} in `flows`", self.flow));
        }
        if self.rate.is_some() && self.concurrency.is_some() {
            return Err(
                "give `rate` (runs started per second) or `concurrency` (runs in flight), not both"
                    .into(),
            );
        }
        if self.payload.is_some() && self.payloads_file.is_some() {
            return Err("give `payload` or `payloads_file`, not both".into());
        }
        crate::loadgen::check(
            self.runs.unwrap_or(DEFAULT_LOAD_RUNS),
            Pace::of(self.rate, self.concurrency),
        )
        .map(|_| ())
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        load(lab, self).boxed_local()
    }

    fn files_named(&self) -> Vec<&str> {
        self.payloads_file.iter().map(String::as_str).collect()
    }
}

async fn load(lab: &Lab<'_>, l: &LoadStep) -> StepOutcome {
    let payloads = match (&l.payload, &l.payloads_file) {
        (_, Some(file)) => {
            let path = lab.scenario.base_dir.join(file);
            let text = crate::input::read_text_file(&path)
                .map_err(|e| StepFailure::invalid(format!("payloads_file: {e}")))?;
            Payloads::from_text(&text).map_err(|e| {
                StepFailure::invalid(format!("payloads_file: {}, {e}", path.display()))
            })?
        }
        (Some(p), None) => Payloads::Template(p.clone()),
        (None, None) => Payloads::Template(serde_json::json!({})),
    };
    let config = LoadConfig {
        flow: l.flow.clone(),
        runs: l.runs.unwrap_or(DEFAULT_LOAD_RUNS),
        pace: Pace::of(l.rate, l.concurrency),
        payloads,
        run_timeout: l.run_timeout.map_or(lab.scenario.step_timeout, |d| d.0),
    };
    // The load could not do its work: the flow is not deployed, or runs could not be started.
    let report = crate::loadgen::run_load(lab.em(), &config, &mut |_, _| {})
        .await
        .map_err(StepFailure::unmet)?;
    let table = report.table();
    let broken = crate::loadgen::unmet(&report, &l.expect);
    if broken.is_empty() {
        Ok(table)
    } else {
        Err(StepFailure::unmet(format!(
            "{}\n{table}",
            broken.join("; ")
        )))
    }
}
