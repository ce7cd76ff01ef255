//! `trigger`: start a run of a deployed flow, with a JSON payload or exact bytes, under a name
//! later steps call it by.

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;
use serde_json::Value;
use triggers_emulator::TriggerOptions;
use triggers_sdk::wire::json;

use super::{CheckCx, StepFailure, StepKind, StepOutcome};
use crate::runner::Lab;

/// `trigger`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerStep {
    /// The flow id.
    pub flow: String,
    /// The payload, as JSON (default `{}`).
    #[serde(default)]
    pub payload: Option<Value>,
    /// Exact payload bytes instead (need not be JSON: a poison message).
    #[serde(default)]
    pub raw: Option<String>,
    /// The service-in to start at (default the flow's first entry point).
    #[serde(default)]
    pub entry: Option<String>,
    /// The run id (default a new one).
    #[serde(default)]
    pub run_id: Option<String>,
    /// The name later steps call the run by.
    #[serde(default, rename = "as")]
    pub name: Option<String>,
}

impl StepKind for TriggerStep {
    fn label(&self) -> String {
        let mut s = format!("trigger {}", self.flow);
        if self.raw.is_some() {
            s.push_str(" (raw bytes)");
        }
        if let Some(n) = &self.name {
            s.push_str(&format!(" as {n}"));
        }
        s
    }

    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
        // The run's name first: a trigger with a problem still names its run, and the steps
        // that use it are not wrong as well.
        if let Some(name) = &self.name
            && !cx.runs.insert(name.clone())
        {
            return Err(format!("a second run named {name:?}"));
        }
        cx.flow(&self.flow)?;
        if self.payload.is_some() && self.raw.is_some() {
            return Err("give `payload` (JSON) or `raw` (bytes), not both".into());
        }
        Ok(())
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        trigger(lab, self).boxed_local()
    }

    fn run_named(&self) -> Option<(&str, &str)> {
        self.name.as_deref().map(|name| (name, self.flow.as_str()))
    }
}

async fn trigger(lab: &mut Lab<'_>, t: &TriggerStep) -> StepOutcome {
    let bytes = match (&t.raw, &t.payload) {
        (Some(raw), _) => lab.subst_str(raw)?.into_bytes(),
        (None, Some(p)) => {
            let p = lab.subst(p)?;
            json::to_vec(&json::GoAny(&p))
                .map_err(|e| StepFailure::invalid(e.to_string()).caused_by(e))?
        }
        (None, None) => b"{}".to_vec(),
    };
    let run = lab
        .em()
        .trigger_bytes(
            &t.flow,
            bytes,
            TriggerOptions {
                entry: t.entry.clone(),
                run_id: t.run_id.clone(),
            },
        )
        .await
        .map_err(|e| StepFailure::emulator(format!("cannot trigger {}: {e}", t.flow), e))?;
    if let Some(name) = &t.name {
        lab.runs.insert(name.clone(), run.0.clone());
    }
    Ok(run.0)
}
