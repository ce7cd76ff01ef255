//! `wait_node`, `wait_settled` and `wait_idle`: wait until a node of a run has finished, or the
//! run has settled, or nothing of it is pending, with a status.

use std::ops::{Deref, DerefMut};

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;
use tokio::time::Instant;
use triggers_emulator::recorder::TimelineEntry;

use super::{CheckCx, StepFailure, StepKind, StepOutcome, status_tail};
use crate::model::Dur;
use crate::runner::{IDLE_GRACE, Lab};

/// `wait_node`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitNodeStep {
    /// The run's name (its `as:`).
    pub run: String,
    /// The node.
    pub node: String,
    /// The status it must finish with: `succeeded` (default), `failed`, `skipped` or `any`.
    #[serde(default)]
    pub status: Option<String>,
    /// This step's time limit.
    #[serde(default)]
    pub timeout: Option<Dur>,
}

/// `wait_settled` and `wait_idle`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitRunStep {
    /// The run's name.
    pub run: String,
    /// The status it must have: `succeeded`, `failed`, `waiting` or `any` (default `succeeded`
    /// for `wait_settled`, `any` for `wait_idle`).
    #[serde(default)]
    pub status: Option<String>,
    /// This step's time limit.
    #[serde(default)]
    pub timeout: Option<Dur>,
}

impl From<String> for WaitRunStep {
    fn from(run: String) -> Self {
        WaitRunStep {
            run,
            status: None,
            timeout: None,
        }
    }
}

/// `wait_settled`: a [`WaitRunStep`] whose status defaults to `succeeded`.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct WaitSettledStep(pub WaitRunStep);

/// `wait_idle`: a [`WaitRunStep`] whose status defaults to `any`.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct WaitIdleStep(pub WaitRunStep);

impl From<String> for WaitSettledStep {
    fn from(run: String) -> Self {
        WaitSettledStep(run.into())
    }
}

impl From<String> for WaitIdleStep {
    fn from(run: String) -> Self {
        WaitIdleStep(run.into())
    }
}

impl Deref for WaitSettledStep {
    type Target = WaitRunStep;
    fn deref(&self) -> &WaitRunStep {
        &self.0
    }
}

impl DerefMut for WaitSettledStep {
    fn deref_mut(&mut self) -> &mut WaitRunStep {
        &mut self.0
    }
}

impl Deref for WaitIdleStep {
    type Target = WaitRunStep;
    fn deref(&self) -> &WaitRunStep {
        &self.0
    }
}

impl DerefMut for WaitIdleStep {
    fn deref_mut(&mut self) -> &mut WaitRunStep {
        &mut self.0
    }
}

impl StepKind for WaitNodeStep {
    fn label(&self) -> String {
        format!(
            "wait_node {} {}{}",
            self.run,
            self.node,
            status_tail(self.status.as_ref())
        )
    }

    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
        cx.run(&self.run)?;
        CheckCx::status(
            self.status.as_ref(),
            &["succeeded", "failed", "skipped", "any"],
        )
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        wait_node(lab, self).boxed_local()
    }

    fn nodes_named(&self) -> Vec<(&str, &str)> {
        vec![(self.run.as_str(), self.node.as_str())]
    }
}

impl StepKind for WaitSettledStep {
    fn label(&self) -> String {
        format!(
            "wait_settled {}{}",
            self.run,
            status_tail(self.status.as_ref())
        )
    }

    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
        cx.run(&self.run)?;
        CheckCx::status(self.status.as_ref(), &["succeeded", "failed", "any"])
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        wait_run(lab, self, true).boxed_local()
    }
}

impl StepKind for WaitIdleStep {
    fn label(&self) -> String {
        format!(
            "wait_idle {}{}",
            self.run,
            status_tail(self.status.as_ref())
        )
    }

    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
        cx.run(&self.run)?;
        CheckCx::status(
            self.status.as_ref(),
            &["succeeded", "failed", "waiting", "any"],
        )
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        wait_run(lab, self, false).boxed_local()
    }
}

async fn wait_node(lab: &Lab<'_>, wn: &WaitNodeStep) -> StepOutcome {
    let id = lab.run_id(&wn.run)?;
    let want = wn.status.as_deref().unwrap_or("succeeded");
    let mut w = lab.waiter(wn.timeout);
    let mut idle_since: Option<Instant> = None;
    loop {
        if let Some(run) = lab.em().run(&id) {
            let finished: Vec<&TimelineEntry> = run
                .node_entries(&wn.node)
                .filter(|e| matches!(e.status.as_str(), "succeeded" | "failed" | "skipped"))
                .collect();
            if let Some(e) = finished.first() {
                return if want == "any" || e.status == want {
                    Ok(e.status.clone())
                } else {
                    Err(StepFailure::unmet(format!(
                        "expected node {} of run {} to finish {want}; it finished {}{}\n{}",
                        wn.node,
                        wn.run,
                        e.status,
                        if e.error.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", e.error)
                        },
                        lab.account_run(&id)
                    )))
                };
            }
            if run.status.is_settled() {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= IDLE_GRACE {
                    return Err(StepFailure::unmet(format!(
                        "expected node {} of run {} to finish {want}; the run settled without it\n{}",
                        wn.node,
                        wn.run,
                        lab.account_run(&id)
                    )));
                }
            }
        }
        if !w.next().await {
            return Err(w.timeout(
                format!("node {} of run {} to finish {want}", wn.node, wn.run),
                lab.account_run(&id),
            ));
        }
    }
}

async fn wait_run(lab: &Lab<'_>, wr: &WaitRunStep, settled: bool) -> StepOutcome {
    let id = lab.run_id(&wr.run)?;
    let want = wr
        .status
        .as_deref()
        .unwrap_or(if settled { "succeeded" } else { "any" });
    let what = if settled {
        format!("run {} to settle ({want})", wr.run)
    } else {
        format!("run {} to be idle ({want})", wr.run)
    };
    let mut w = lab.waiter(wr.timeout);
    loop {
        if let Some(run) = lab.em().run(&id) {
            let done = if settled {
                run.status.is_settled()
            } else {
                run.pending.is_empty()
            };
            if done {
                let got = run.status.as_str();
                return if want == "any" || got == want {
                    let path: Vec<String> = run
                        .timeline
                        .iter()
                        .map(|e| format!("{} {}", e.node_id, e.status))
                        .collect();
                    Ok(format!("{got}: {}", path.join(", ")))
                } else {
                    Err(StepFailure::unmet(format!(
                        "expected run {} to be {want}; it is {got}\n{}",
                        wr.run,
                        lab.account_run(&id)
                    )))
                };
            }
        }
        if !w.next().await {
            return Err(w.timeout(what, lab.account_run(&id)));
        }
    }
}
