//! The step kinds. Each owns its logic in one module: the keys it takes (its spec, part of the
//! file format in [`crate::model`]), what is checked when the file is read, what it does when it
//! runs, and its label in progress and reports. [`Step::kind`] is the one place that dispatches
//! on the variant; adding a kind is a module here and a variant of [`Step`].
//!
//! A step's run returns a short detail for the report (a run id, a version) or a
//! [`StepFailure`] that says which kind of failure it is: what was expected and what arrived, a
//! step that cannot be carried out as written, an environment that failed, a time limit.

use std::collections::BTreeSet;

use futures::future::LocalBoxFuture;

use crate::model::{ServiceSpec, Short, Step};
use crate::runner::Lab;

mod broadcast;
mod calls;
mod clock;
mod count;
mod deploy;
mod dlq;
mod events;
mod fuzz;
mod http;
mod load;
mod nats;
mod outcome;
mod publish;
mod registration;
mod service;
mod trigger;
mod violation;
mod wait;

pub use broadcast::ExpectBroadcastStep;
pub use calls::ExpectCallsStep;
pub use clock::{AdvanceStep, SleepStep};
pub use deploy::DeployStep;
pub use dlq::ExpectDlqStep;
pub use events::{EventOrder, EventSpec, ExpectEventsStep};
pub use fuzz::{DEFAULT_FUZZ_RUNS, FuzzStep, MAX_FUZZ_RUNS};
pub use http::ExpectHttpStep;
pub use load::{DEFAULT_LOAD_CONCURRENCY, DEFAULT_LOAD_RUNS, LoadExpect, LoadStep};
pub use nats::{KillNatsNodeStep, NodeRef, RestartNatsNodeStep, RestartNatsStep, StopNatsNodeStep};
pub(crate) use outcome::{StepFailure, StepOutcome};
pub use publish::PublishStep;
pub use registration::{ExpectRegistrationStep, RegisterStep};
pub use service::{ExpectHeartbeatStep, ExpectServiceStep, StopServiceStep};
pub use trigger::TriggerStep;
pub use violation::ExpectViolationStep;
pub use wait::{WaitIdleStep, WaitNodeStep, WaitRunStep, WaitSettledStep};

/// What a step kind owns.
pub(crate) trait StepKind {
    /// The step in a few words, for progress and reports: `trigger flow-lab as r1`.
    fn label(&self) -> String;

    /// What the parser cannot check: names that must exist, keys that exclude each other... The
    /// message is reported at the step's line and column.
    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String>;

    /// Does what the step says, within its time limit.
    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome>;

    /// Whether it restarts, stops or kills a server: then the scenario gets a server of its own,
    /// and a lost connection is the scenario's to check, not a failure of the run.
    fn disturbs_the_server(&self) -> bool {
        false
    }

    /// The (run name, node id) pairs it names, checked against the run's flow when the file is
    /// read.
    fn nodes_named(&self) -> Vec<(&str, &str)> {
        Vec::new()
    }

    /// The run it names with `as:`, and that run's flow.
    fn run_named(&self) -> Option<(&str, &str)> {
        None
    }

    /// Files it reads when it runs, relative to the scenario's folder.
    fn files_named(&self) -> Vec<&str> {
        Vec::new()
    }
}

impl Step {
    /// The step's kind: the one dispatch on the variant.
    pub(crate) fn kind(&self) -> &dyn StepKind {
        match self {
            Step::Deploy(Short(s)) => s,
            Step::Trigger(s) => s,
            Step::Advance(s) => s,
            Step::Sleep(s) => s,
            Step::WaitNode(s) => s,
            Step::WaitSettled(Short(s)) => s,
            Step::WaitIdle(Short(s)) => s,
            Step::ExpectEvents(s) => s,
            Step::ExpectDlq(s) => s,
            Step::ExpectRegistration(s) => s,
            Step::Register(s) => s,
            Step::ExpectHeartbeat(s) => s,
            Step::ExpectService(s) => s,
            Step::ExpectBroadcast(Short(s)) => s,
            Step::ExpectCalls(s) => s,
            Step::ExpectHttp(s) => s,
            Step::ExpectViolation(Short(s)) => s,
            Step::Publish(s) => s,
            Step::RestartNats(s) => s,
            Step::StopNatsNode(s) => s,
            Step::KillNatsNode(s) => s,
            Step::RestartNatsNode(s) => s,
            Step::StopService(s) => s,
            Step::Fuzz(s) => s,
            Step::Load(s) => s,
        }
    }
}

/// Runs one step. (Boxed, to keep the scenario's future small.)
pub(crate) fn run<'a>(lab: &'a mut Lab<'_>, step: &'a Step) -> LocalBoxFuture<'a, StepOutcome> {
    step.kind().run(lab)
}

/// What a step's check may ask of the rest of the file, and what the steps before it named.
pub(crate) struct CheckCx<'a> {
    /// The flows' ids.
    pub(crate) flows: &'a BTreeSet<&'a str>,
    /// The services that could be read.
    pub(crate) services: &'a [ServiceSpec],
    /// The HTTP stubs' names (with the names of what could not be read).
    pub(crate) stubs: &'a BTreeSet<String>,
    /// Servers of the scenario's `nats:` (1 unless a cluster).
    pub(crate) nats_nodes: usize,
    /// What the pieces left out of the check (they could not be read) name: the services,
    /// flows, stubs and runs that the rest uses are not missing.
    pub(crate) elided: &'a BTreeSet<String>,
    /// The runs named so far (`as:`).
    pub(crate) runs: &'a mut BTreeSet<String>,
    /// Services whose stream leader a step took down: what `restart_nats_node {leader_of}`
    /// can bring back.
    pub(crate) downed: &'a mut BTreeSet<String>,
}

impl CheckCx<'_> {
    /// `id` must be a flow of the file.
    pub(crate) fn flow(&self, id: &str) -> Result<(), String> {
        if self.flows.contains(id) || self.elided.contains(id) {
            return Ok(());
        }
        Err(format!(
            "no flow {id:?} in `flows`{} (there are {:?})",
            mean(id, self.flows.iter().copied()),
            self.flows.iter().collect::<Vec<_>>()
        ))
    }

    /// `name` must be a run an earlier trigger named.
    pub(crate) fn run(&self, name: &str) -> Result<(), String> {
        if self.runs.contains(name) {
            return Ok(());
        }
        Err(format!(
            "no run named {name:?}{}: name one with `as:` on an earlier trigger (named so far: {:?})",
            mean(name, self.runs.iter().map(String::as_str)),
            self.runs.iter().collect::<Vec<_>>()
        ))
    }

    /// A status, when given, must be one of `allowed`.
    pub(crate) fn status(status: Option<&String>, allowed: &[&str]) -> Result<(), String> {
        match status {
            Some(s) if !allowed.contains(&s.as_str()) => {
                Err(format!("status {s:?} is not one of {}", allowed.join(", ")))
            }
            _ => Ok(()),
        }
    }

    /// A step's service must be one of the file's `services`.
    pub(crate) fn declared(&self, name: &str, step: &str) -> Result<(), String> {
        if self.services.iter().any(|s| s.name == name) {
            return Ok(());
        }
        Err(format!(
            "{step}: no service {name:?} in `services`{}",
            mean(name, self.service_names())
        ))
    }

    /// The services' names, with those of services that could not be read.
    pub(crate) fn service_names(&self) -> impl Iterator<Item = &str> {
        self.services
            .iter()
            .map(|s| s.name.as_str())
            .chain(self.elided.iter().map(String::as_str))
    }

    /// The scripted service `name`, if the file has one.
    pub(crate) fn scripted(&self, name: &str) -> Option<&ServiceSpec> {
        self.services
            .iter()
            .find(|s| s.name == name && !s.is_external())
    }
}

/// ` (did you mean "x"?)` when one of `names` is close to `word`, else nothing.
pub(crate) fn mean<'a>(word: &str, names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    crate::flowfile::did_you_mean(word, &names)
        .map(|n| format!(" (did you mean {n:?}?)"))
        .unwrap_or_default()
}

/// ` <status>` for a status given, nothing otherwise: the tail of a waiting step's label.
fn status_tail(status: Option<&String>) -> String {
    status.map(|s| format!(" {s}")).unwrap_or_default()
}
