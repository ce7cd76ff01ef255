//! `expect_heartbeat`, `expect_service` and `stop_service`: what the emulator knows of a
//! service (its heartbeats, its replicas), and stopping one gracefully.

use std::ops::{Deref, DerefMut};

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;
use triggers_emulator::recorder::RecordKind;

use super::{CheckCx, StepFailure, StepKind, StepOutcome, mean};
use crate::describe;
use crate::model::Dur;
use crate::runner::{DEFAULT_SETTLE, Lab};

/// `expect_heartbeat`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectHeartbeatStep {
    /// The service.
    pub service: String,
    /// The heartbeat's `shutting_down` (default: either).
    #[serde(default)]
    pub shutting_down: Option<bool>,
    /// This step's time limit.
    #[serde(default)]
    pub timeout: Option<Dur>,
}

/// `expect_service`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectServiceStep {
    /// The service.
    pub service: String,
    /// Replicas seen (distinct `started_at` in its heartbeats).
    #[serde(default)]
    pub replicas: Option<usize>,
    /// This step's time limit.
    #[serde(default)]
    pub timeout: Option<Dur>,
}

/// `stop_service`: the service to stop.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct StopServiceStep(pub String);

impl Deref for StopServiceStep {
    type Target = String;
    fn deref(&self) -> &String {
        &self.0
    }
}

impl DerefMut for StopServiceStep {
    fn deref_mut(&mut self) -> &mut String {
        &mut self.0
    }
}

// Only the services of the file heartbeat and have replicas: another name (a typo) would wait
// its whole timeout for nothing.
impl StepKind for ExpectHeartbeatStep {
    fn label(&self) -> String {
        format!(
            "expect_heartbeat {}{}",
            self.service,
            match self.shutting_down {
                Some(true) => " shutting_down",
                _ => "",
            }
        )
    }

    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
        if cx.elided.contains(&self.service) {
            return Ok(());
        }
        cx.declared(&self.service, "expect_heartbeat")
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        expect_heartbeat(lab, self).boxed_local()
    }
}

impl StepKind for ExpectServiceStep {
    fn label(&self) -> String {
        format!("expect_service {}", self.service)
    }

    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
        if cx.elided.contains(&self.service) {
            return Ok(());
        }
        cx.declared(&self.service, "expect_service")
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        expect_service(lab, self).boxed_local()
    }
}

impl StepKind for StopServiceStep {
    fn label(&self) -> String {
        format!("stop_service {}", self.0)
    }

    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
        let name = &self.0;
        if cx.services.iter().any(|s| s.name == *name) || cx.elided.contains(name) {
            return Ok(());
        }
        Err(format!(
            "no service {name:?} in `services`{}",
            mean(name, cx.service_names())
        ))
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        stop_service(lab, &self.0).boxed_local()
    }
}

async fn expect_heartbeat(lab: &Lab<'_>, h: &ExpectHeartbeatStep) -> StepOutcome {
    let mut w = lab.waiter(h.timeout);
    loop {
        let (records, _) = lab.em().records();
        let found = records.iter().rev().find_map(|r| match &r.kind {
            RecordKind::Heartbeat { heartbeat }
                if heartbeat.service == h.service
                    && h.shutting_down.is_none_or(|s| s == heartbeat.shutting_down) =>
            {
                Some(heartbeat.clone())
            }
            _ => None,
        });
        if let Some(hb) = found {
            return Ok(format!("heartbeat at {}", hb.now));
        }
        if !w.next().await {
            return Err(w.timeout(
                format!(
                    "a heartbeat from {:?}{}",
                    h.service,
                    match h.shutting_down {
                        Some(s) => format!(" with shutting_down={s}"),
                        None => String::new(),
                    }
                ),
                describe::heartbeats(lab.em()),
            ));
        }
    }
}

async fn expect_service(lab: &Lab<'_>, s: &ExpectServiceStep) -> StepOutcome {
    let mut w = lab.waiter(s.timeout);
    let replicas = || {
        lab.em()
            .services()
            .get(&s.service)
            .map(|st| st.replicas.len())
    };
    loop {
        match (replicas(), s.replicas) {
            (Some(_), None) => return Ok("registered".into()),
            (Some(n), Some(want)) if n >= want => {
                tokio::time::sleep(DEFAULT_SETTLE).await;
                let n = replicas().unwrap_or_default();
                return if n == want {
                    Ok(format!("{n} replica(s)"))
                } else {
                    Err(StepFailure::unmet(format!(
                        "expected {want} replica(s) of {:?}, the emulator saw {n}; {}",
                        s.service,
                        describe::heartbeats(lab.em())
                    )))
                };
            }
            _ => {}
        }
        if !w.next().await {
            return Err(w.timeout(
                format!(
                    "service {:?}{}",
                    s.service,
                    s.replicas
                        .map(|n| format!(" with {n} replica(s) heartbeating"))
                        .unwrap_or_else(|| " to register".into())
                ),
                format!(
                    "{}\n{}",
                    describe::registrations(lab.em()),
                    describe::heartbeats(lab.em())
                ),
            ));
        }
    }
}

async fn stop_service(lab: &mut Lab<'_>, name: &str) -> StepOutcome {
    if let Some(s) = lab.scripted.remove(name) {
        s.stop().await;
        Ok("stopped".into())
    } else if let Some(mut e) = lab.external.remove(name) {
        e.stop()
            .await
            .map(|()| "stopped".into())
            .map_err(StepFailure::environment)
    } else {
        Err(StepFailure::invalid(format!(
            "service {name:?} is not running (stopped already?)"
        )))
    }
}
