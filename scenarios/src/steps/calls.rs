//! `expect_calls`: calls (attempts) of a scripted action, by run and input, counted.

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;
use serde_json::Value;

use super::count::{RunsConcerned, counted_until, json_eq, run_concerned};
use super::{CheckCx, StepFailure, StepKind, StepOutcome};
use crate::describe;
use crate::model::{Dur, present};
use crate::runner::Lab;

/// `expect_calls`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectCallsStep {
    /// The scripted service.
    pub service: String,
    /// The action.
    pub action: String,
    /// Only calls of this run.
    #[serde(default)]
    pub run: Option<String>,
    /// Only calls with this input (JSON).
    #[serde(default, deserialize_with = "present")]
    pub input: Option<Value>,
    /// Exactly this many calls (attempts) match; without it, at least one.
    #[serde(default)]
    pub count: Option<usize>,
    /// How long to watch for more after the count is reached (default 250ms).
    #[serde(default)]
    pub settle: Option<Dur>,
    /// This step's time limit.
    #[serde(default)]
    pub timeout: Option<Dur>,
}

impl StepKind for ExpectCallsStep {
    fn label(&self) -> String {
        format!("expect_calls {}.{}", self.service, self.action)
    }

    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
        if cx.elided.contains(&self.service) {
            return Ok(());
        }
        let Some(service) = cx.scripted(&self.service) else {
            return Err(format!(
                "no scripted service {:?}: only scripted services' calls are seen",
                self.service
            ));
        };
        if !service.actions.iter().any(|a| a.value.name == self.action) {
            return Err(format!(
                "service {:?} has no action {:?}",
                self.service, self.action
            ));
        }
        match &self.run {
            Some(r) => cx.run(r),
            None => Ok(()),
        }
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        expect_calls(lab, self).boxed_local()
    }
}

async fn expect_calls(lab: &Lab<'_>, c: &ExpectCallsStep) -> StepOutcome {
    let run = c.run.as_deref().map(|r| lab.run_id(r)).transpose()?;
    let input = c.input.as_ref().map(|v| lab.subst(v)).transpose()?;
    let Some(service) = lab.scripted.get(&c.service) else {
        return Err(StepFailure::invalid(format!(
            "service {:?} is not running",
            c.service
        )));
    };
    let calls = service.calls.clone();
    let matching = || {
        calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|call| call.action == c.action)
            .filter(|call| run.as_ref().is_none_or(|r| call.run_id == *r))
            .filter(|call| input.as_ref().is_none_or(|i| json_eq(i, &call.input)))
            .cloned()
            .collect::<Vec<_>>()
    };
    let what = format!(
        "{} call(s) of {}.{}{}{}",
        c.count
            .map(|n| format!("exactly {n}"))
            .unwrap_or_else(|| "at least one".into()),
        c.service,
        c.action,
        c.run
            .as_ref()
            .map(|r| format!(" in run {r}"))
            .unwrap_or_default(),
        input
            .as_ref()
            .map(|i| format!(" with input {i}"))
            .unwrap_or_default()
    );
    let saw = || {
        let all = calls.lock().unwrap_or_else(|e| e.into_inner()).clone();
        describe::calls(&all, &lab.run_names())
    };
    // Calls come from runs: once the runs concerned have all settled, none can follow.
    let (run_settled, quiet) = run_concerned(lab, run.as_deref());
    let settled = || match &run {
        Some(_) => run_settled(),
        None => {
            let runs = lab.em().runs();
            !runs.is_empty() && runs.iter().all(|r| r.status.is_settled())
        }
    };
    let label = c.run.as_deref().unwrap_or_default();
    let runs = RunsConcerned {
        settled: &settled,
        quiet: run
            .is_some()
            .then_some((label, &quiet as &dyn Fn() -> bool)),
    };
    let n = counted_until(
        lab, c.timeout, c.count, c.settle, &what, matching, saw, runs,
    )
    .await?;
    Ok(format!("{n} call(s)"))
}
