//! `fuzz`: an action fed inputs generated from its registered `input_schema`, each through a
//! flow of its own (the work is `crate::fuzz`'s).

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;

use super::{CheckCx, StepFailure, StepKind, StepOutcome, mean};
use crate::model::Dur;
use crate::runner::Lab;

/// `fuzz`: inputs generated from the action's registered `input_schema` (edges first), each
/// through a flow of its own; fails on a DLQ entry, a failed or stuck run, a result that does not
/// validate against `result_schema`, or a conformance error, naming a shrunk input and the seed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FuzzStep {
    /// The service (scripted or external).
    pub service: String,
    /// Its action.
    pub action: String,
    /// How many inputs (default 100).
    #[serde(default)]
    pub runs: Option<u32>,
    /// The seed (default 1): the same seed sends the same inputs.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Also send inputs that break the schema (every fourth): each must be dead-lettered as
    /// `invalid_input`.
    #[serde(default)]
    pub invalid: bool,
    /// How long each run may take to settle (default: the scenario's `step_timeout`).
    #[serde(default)]
    pub run_timeout: Option<Dur>,
}

/// Inputs a `fuzz` step sends when it does not say.
pub const DEFAULT_FUZZ_RUNS: u32 = 100;

/// The most inputs one `fuzz` step may send.
pub const MAX_FUZZ_RUNS: u32 = 100_000;

impl StepKind for FuzzStep {
    fn label(&self) -> String {
        format!(
            "fuzz {}.{} ({} inputs, seed {})",
            self.service,
            self.action,
            self.runs.unwrap_or(DEFAULT_FUZZ_RUNS),
            self.seed.unwrap_or(1)
        )
    }

    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
        if cx.elided.contains(&self.service) {
            return Ok(());
        }
        let Some(service) = cx.services.iter().find(|s| s.name == self.service) else {
            return Err(format!(
                "no service {:?} in `services`{}",
                self.service,
                mean(&self.service, cx.service_names())
            ));
        };
        if !service.is_external() && !service.actions.iter().any(|a| a.value.name == self.action) {
            return Err(format!(
                "service {:?} has no action {:?}",
                self.service, self.action
            ));
        }
        let runs = self.runs.unwrap_or(DEFAULT_FUZZ_RUNS);
        if runs == 0 || runs > MAX_FUZZ_RUNS {
            return Err(format!(
                "runs: {runs} is out of range (1 to {MAX_FUZZ_RUNS})"
            ));
        }
        Ok(())
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        fuzz(lab, self).boxed_local()
    }
}

async fn fuzz(lab: &Lab<'_>, f: &FuzzStep) -> StepOutcome {
    let config = crate::fuzz::FuzzConfig {
        service: f.service.clone(),
        action: f.action.clone(),
        runs: f.runs.unwrap_or(DEFAULT_FUZZ_RUNS),
        seed: f.seed.unwrap_or(1),
        invalid: f.invalid,
        run_timeout: f.run_timeout.map_or(lab.scenario.step_timeout, |d| d.0),
        shrink_time: crate::fuzz::SHRINK_TIME,
    };
    // The fuzzer could not do its work: the action is not there to fuzz, or a run could not
    // be started.
    let report = crate::fuzz::fuzz(lab.em(), &lab.hand, &config)
        .await
        .map_err(StepFailure::unmet)?;
    if report.failure.is_some() {
        Err(StepFailure::unmet(report.describe()))
    } else {
        Ok(report.describe())
    }
}
