//! `deploy`: release a flow, or expect its release to be refused with given codes.

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;
use triggers_emulator::{EmulatorError, ReleaseCode};
use triggers_sdk::flow::Flow;

use super::{CheckCx, StepFailure, StepKind, StepOutcome};
use crate::model::OneOrMany;
use crate::runner::Lab;

/// `deploy`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployStep {
    /// The flow id (of `flows`).
    pub flow: String,
    /// The release must be refused with this code (or these codes).
    #[serde(default)]
    pub expect_error: Option<OneOrMany>,
}

impl From<String> for DeployStep {
    fn from(flow: String) -> Self {
        DeployStep {
            flow,
            expect_error: None,
        }
    }
}

impl StepKind for DeployStep {
    fn label(&self) -> String {
        match &self.expect_error {
            Some(codes) => format!("deploy {} (expect {})", self.flow, codes.0.join(", ")),
            None => format!("deploy {}", self.flow),
        }
    }

    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
        cx.flow(&self.flow)?;
        let Some(codes) = &self.expect_error else {
            return Ok(());
        };
        if codes.0.is_empty() {
            return Err("`expect_error` lists no code".into());
        }
        match codes.0.iter().find(|c| ReleaseCode::parse(c).is_none()) {
            Some(c) => Err(format!(
                "{c:?} is not a release code; the codes are {}",
                ReleaseCode::ALL.map(|c| c.as_str()).join(", ")
            )),
            None => Ok(()),
        }
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        deploy(lab, self).boxed_local()
    }
}

/// The flow `id` of the scenario, its `${...}` replaced.
fn flow_of(lab: &Lab<'_>, id: &str) -> Result<Flow, StepFailure> {
    let def = lab
        .scenario
        .flows
        .iter()
        .find(|f| f.id == id)
        .ok_or_else(|| StepFailure::invalid(format!("no flow {id:?}")))?;
    let value = lab.subst(&def.value)?;
    serde_json::from_value(value).map_err(|e| {
        StepFailure::invalid(format!("flow {id:?} ({}): {e}", def.origin)).caused_by(e)
    })
}

async fn deploy(lab: &mut Lab<'_>, d: &DeployStep) -> StepOutcome {
    let flow = flow_of(lab, &d.flow)?;
    let result = lab.em().deploy(flow).await;
    let Some(codes) = &d.expect_error else {
        let dep = result
            .map_err(|e| StepFailure::emulator(format!("expected {} to deploy; {e}", d.flow), e))?;
        let detail = format!(
            "v{}, broadcast on {}",
            dep.flow.version, dep.broadcast_subject
        );
        lab.deployed.insert(d.flow.clone(), dep);
        return Ok(detail);
    };
    match result {
        Ok(dep) => {
            let detail = format!(
                "expected the release of {} to be refused with {}, but it was deployed as v{} (broadcast on {})",
                d.flow,
                codes.0.join(", "),
                dep.flow.version,
                dep.broadcast_subject
            );
            lab.deployed.insert(d.flow.clone(), dep);
            Err(StepFailure::unmet(detail))
        }
        Err(EmulatorError::Release(problems)) => {
            let found: Vec<&str> = problems.iter().map(|p| p.code.as_str()).collect();
            let missing: Vec<&str> = codes
                .0
                .iter()
                .map(String::as_str)
                .filter(|c| !found.contains(c))
                .collect();
            if missing.is_empty() {
                return Ok(format!("refused: {}", found.join(", ")));
            }
            let listing = problems
                .iter()
                .map(|p| format!("  {p}"))
                .collect::<Vec<_>>()
                .join("\n");
            Err(StepFailure::unmet(format!(
                "expected the release of {} to be refused with {}; it was refused with:\n{listing}",
                d.flow,
                missing.join(", ")
            )))
        }
        Err(e) => Err(StepFailure::emulator(
            format!(
                "expected the release of {} to be refused with {}; the deploy failed otherwise: {e}",
                d.flow,
                codes.0.join(", ")
            ),
            e,
        )),
    }
}
