//! `expect_registration` and `register`: a registration the emulator received (accepted or
//! refused, with the result events its manifest declares), and one sent by hand.

use std::collections::BTreeMap;

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;
use serde_json::Value;
use triggers_emulator::recorder::RecordKind;
use triggers_sdk::wire::{Manifest, RegisterReply, ResultEvent, subject};

use super::{CheckCx, StepFailure, StepKind, StepOutcome};
use crate::describe;
use crate::model::Dur;
use crate::runner::Lab;

/// `expect_registration`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectRegistrationStep {
    /// The service.
    pub service: String,
    /// Accepted (default true) or refused.
    #[serde(default = "yes")]
    pub accepted: bool,
    /// Text the refusal contains.
    #[serde(default)]
    pub error_contains: Option<String>,
    /// The fields of each action's `result_event` in the registered manifest:
    /// `{action: [field, ...]}` (`[]`: the action declares none).
    #[serde(default)]
    pub result_event: Option<BTreeMap<String, Vec<String>>>,
    /// This step's time limit.
    #[serde(default)]
    pub timeout: Option<Dur>,
}

fn yes() -> bool {
    true
}

/// `register`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterStep {
    /// The manifest. Without `manifest_hash`, the right hash is sealed in.
    pub manifest: Value,
    /// The reply's error must contain this; without it, the registration must be accepted.
    #[serde(default)]
    pub expect_error: Option<String>,
    /// This step's time limit.
    #[serde(default)]
    pub timeout: Option<Dur>,
}

impl StepKind for ExpectRegistrationStep {
    fn label(&self) -> String {
        format!(
            "expect_registration {} {}",
            self.service,
            if self.accepted { "accepted" } else { "refused" }
        )
    }

    fn check(&self, _: &mut CheckCx<'_>) -> Result<(), String> {
        Ok(())
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        expect_registration(lab, self).boxed_local()
    }
}

impl StepKind for RegisterStep {
    fn label(&self) -> String {
        format!(
            "register {}",
            self.manifest
                .get("service")
                .and_then(|s| s.as_str())
                .unwrap_or("?")
        )
    }

    fn check(&self, _: &mut CheckCx<'_>) -> Result<(), String> {
        let manifest: Result<Manifest, _> = serde_path_to_error::deserialize(&self.manifest);
        match manifest {
            Ok(_) => Ok(()),
            Err(e) => Err(format!(
                "`manifest` is not a manifest: {}{}",
                e.inner(),
                crate::load::at_path(&e.path().to_string())
            )),
        }
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        register(lab, self).boxed_local()
    }
}

async fn expect_registration(lab: &Lab<'_>, r: &ExpectRegistrationStep) -> StepOutcome {
    let mut w = lab.waiter(r.timeout);
    let what = format!(
        "a registration of {:?} {}{}",
        r.service,
        if r.accepted { "accepted" } else { "refused" },
        r.error_contains
            .as_ref()
            .map(|t| format!(" with an error containing {t:?}"))
            .unwrap_or_default()
    );
    loop {
        let (records, _) = lab.em().records();
        let found = records.iter().any(|rec| match &rec.kind {
            RecordKind::Registration {
                service,
                accepted,
                error,
                ..
            } => {
                *service == r.service
                    && *accepted == r.accepted
                    && r.error_contains
                        .as_ref()
                        .is_none_or(|t| error.as_deref().unwrap_or_default().contains(t.as_str()))
            }
            _ => false,
        });
        if found {
            break;
        }
        if !w.next().await {
            return Err(w.timeout(what, describe::registrations(lab.em())));
        }
    }
    let Some(fields) = &r.result_event else {
        return Ok(if r.accepted { "accepted" } else { "refused" }.into());
    };
    let services = lab.em().services();
    let Some(state) = services.get(&r.service) else {
        return Err(StepFailure::unmet(format!(
            "expected the manifest of {:?}; it is not registered",
            r.service
        )));
    };
    // The emulator keeps no catalog values parsed: its kept bytes have them.
    let manifest = state.manifest.full().map_err(|e| {
        StepFailure::unmet(format!("cannot read {:?}'s manifest: {e}", r.service)).caused_by(e)
    })?;
    let mut problems = Vec::new();
    for (action, want) in fields {
        let Some(a) = manifest.actions.iter().find(|a| a.name == *action) else {
            problems.push(format!(
                "the manifest has no action {action:?} (it has {:?})",
                manifest
                    .actions
                    .iter()
                    .map(|a| a.name.as_str())
                    .collect::<Vec<_>>()
            ));
            continue;
        };
        let got: Vec<String> = match &a.result_event {
            None => Vec::new(),
            Some(map) => match ResultEvent::from_map(map) {
                Ok(ev) => ev.fields.into_iter().map(|f| f.name).collect(),
                Err(e) => {
                    problems.push(format!("action {action:?}: its result_event: {e}"));
                    continue;
                }
            },
        };
        let mut want_sorted = want.clone();
        want_sorted.sort();
        let mut got_sorted = got.clone();
        got_sorted.sort();
        if want_sorted != got_sorted {
            problems.push(format!(
                "action {action:?}: expected result_event fields {want:?}, the manifest declares {got:?} ({})",
                a.result_event
                    .as_ref()
                    .map(|m| Value::Object(m.clone()).to_string())
                    .unwrap_or_else(|| "no result_event".into())
            ));
        }
    }
    if problems.is_empty() {
        Ok("accepted; result_event as expected".into())
    } else {
        Err(StepFailure::unmet(problems.join("\n")))
    }
}

async fn register(lab: &Lab<'_>, r: &RegisterStep) -> StepOutcome {
    let value = lab.subst(&r.manifest)?;
    let mut manifest: Manifest = serde_json::from_value(value.clone())
        .map_err(|e| StepFailure::invalid(format!("not a manifest: {e}")).caused_by(e))?;
    if value.get("manifest_hash").is_none() {
        manifest
            .seal()
            .map_err(|e| StepFailure::invalid(e.to_string()).caused_by(e))?;
    }
    let bytes = manifest
        .to_json()
        .map_err(|e| StepFailure::invalid(e.to_string()).caused_by(e))?;
    let limit = r.timeout.map_or(lab.scenario.step_timeout, |d| d.0);
    let reply = tokio::time::timeout(
        limit,
        lab.hand.request(subject::MANIFEST_REGISTER, bytes.into()),
    )
    .await
    .map_err(|_| StepFailure::timeout(format!("no reply to the registration within {limit:?}")))?
    .map_err(|e| {
        StepFailure::environment(format!("the registration request failed: {e}")).caused_by(e)
    })?;
    let reply = RegisterReply::from_json(&reply.payload).map_err(|e| {
        StepFailure::unmet(format!("the reply is not a register reply: {e}")).caused_by(e)
    })?;
    match (&r.expect_error, reply.error.is_empty()) {
        (None, true) => Ok("accepted".into()),
        (None, false) => Err(StepFailure::unmet(format!(
            "expected the registration of {:?} to be accepted; it was refused: {}",
            manifest.service, reply.error
        ))),
        (Some(t), true) => Err(StepFailure::unmet(format!(
            "expected the registration of {:?} to be refused with an error containing {t:?}; it was accepted",
            manifest.service
        ))),
        (Some(t), false) if reply.error.contains(t.as_str()) => {
            Ok(format!("refused: {}", reply.error))
        }
        (Some(t), false) => Err(StepFailure::unmet(format!(
            "expected the registration of {:?} to be refused with an error containing {t:?}; it was refused with: {}",
            manifest.service, reply.error
        ))),
    }
}
