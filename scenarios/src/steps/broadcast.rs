//! `expect_broadcast`: every replica of the scripted services of a flow holds its deployed
//! version.

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;

use super::{CheckCx, StepFailure, StepKind, StepOutcome};
use crate::model::Dur;
use crate::runner::Lab;

/// `expect_broadcast`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectBroadcastStep {
    /// The flow id (deployed).
    pub flow: String,
    /// Only this scripted service's replicas (default: every scripted service of the flow).
    #[serde(default)]
    pub service: Option<String>,
    /// The subject it must have been broadcast on.
    #[serde(default)]
    pub subject: Option<String>,
    /// This step's time limit.
    #[serde(default)]
    pub timeout: Option<Dur>,
}

impl From<String> for ExpectBroadcastStep {
    fn from(flow: String) -> Self {
        ExpectBroadcastStep {
            flow,
            service: None,
            subject: None,
            timeout: None,
        }
    }
}

impl StepKind for ExpectBroadcastStep {
    fn label(&self) -> String {
        format!("expect_broadcast {}", self.flow)
    }

    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
        cx.flow(&self.flow)?;
        match &self.service {
            Some(s) if cx.scripted(s).is_none() => Err(format!(
                "no scripted service {s:?}: only scripted services' replicas can be asked what they hold"
            )),
            _ => Ok(()),
        }
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        expect_broadcast(lab, self).boxed_local()
    }
}

async fn expect_broadcast(lab: &Lab<'_>, b: &ExpectBroadcastStep) -> StepOutcome {
    let Some(dep) = lab.deployed.get(&b.flow) else {
        return Err(StepFailure::invalid(format!(
            "flow {:?} has not been deployed (deploy it in an earlier step)",
            b.flow
        )));
    };
    if let Some(s) = &b.subject
        && *s != dep.broadcast_subject
    {
        return Err(StepFailure::unmet(format!(
            "expected flow {} to be broadcast on {s}; it was broadcast on {}",
            b.flow, dep.broadcast_subject
        )));
    }
    let version = dep.flow.version;
    let involved = dep.flow.services();
    let services: Vec<&String> = lab
        .scripted
        .keys()
        .filter(|name| match &b.service {
            Some(s) => *s == **name,
            None => involved.contains(name.as_str()),
        })
        .collect();
    if services.is_empty() {
        return Err(StepFailure::invalid(format!(
            "no running scripted service of flow {} to ask (its services: {involved:?})",
            b.flow
        )));
    }
    let lacking = || {
        let mut out = Vec::new();
        for name in &services {
            for (i, r) in lab.scripted[*name].replicas.iter().enumerate() {
                let held = r.flows().get(&b.flow).map(|f| f.version);
                if held.is_none_or(|v| v < version) {
                    out.push(format!(
                        "replica {i} of {name} holds {}",
                        held.map(|v| format!("v{v}"))
                            .unwrap_or_else(|| "nothing of it".into())
                    ));
                }
            }
        }
        out
    };
    let mut w = lab.waiter(b.timeout);
    loop {
        let missing = lacking();
        if missing.is_empty() {
            let n: usize = services
                .iter()
                .map(|s| lab.scripted[*s].replicas.len())
                .sum();
            return Ok(format!(
                "v{version} held by {n} replica(s), broadcast on {}",
                dep.broadcast_subject
            ));
        }
        if !w.next().await {
            return Err(w.timeout(
                format!("every replica to hold flow {} v{version}", b.flow),
                missing.join("\n"),
            ));
        }
    }
}
