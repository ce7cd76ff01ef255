//! The control API's messages, shared by the emulator's server, the Rust client
//! ([`super::ControlClient`]) and, through the JSON Schema generated from them
//! (`docs/control-schema.json`, [`super::schema()`]), clients in other languages.
//!
//! On the wire a request's op is the last token of its subject (`triggerslab.v1.control.<op>`)
//! and its body holds the other fields. [`Request`] holds both, tagged by `op` as the schema
//! shows it: [`Request::decode`] reads one from a subject's op and a body, [`Request::into_wire`]
//! gives the op and the body to send. Each op's request type names its reply's type
//! ([`Op::Reply`]); every reply is `{"ok": true, "result": <Op::Reply>}` or an [`ErrorReply`].

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use triggers_sdk::flow::Flow;
use triggers_sdk::wire::GoTime;

use super::schema::{FlowSchema, GoTimeSchema};
use crate::clock::ClockMode;
use crate::recorder::{Cancelled, Liveness, Record, Run, RunStatus, ServiceState};
use crate::release::ReleaseProblem;

/// The ops, in the order the unknown-op error lists them.
pub const OPS: &str = "state, deploy, check_release, trigger, resend_dlq, advance, cancel, runs, \
                       run_page, run, flow, flow_list, records, violations, services, follow";

/// One control request: its op (on the wire, the subject's last token) and its fields (the body).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The state summary.
    State(StateRequest),
    /// Releases a flow.
    Deploy(DeployRequest),
    /// Checks a flow as a release would, releasing nothing.
    CheckRelease(CheckReleaseRequest),
    /// Starts a run.
    Trigger(TriggerRequest),
    /// Re-sends a DLQ entry to its service.
    ResendDlq(ResendDlqRequest),
    /// Advances the virtual clock.
    Advance(AdvanceRequest),
    /// Cancels an open run.
    Cancel(CancelRequest),
    /// Every run, whole.
    Runs(RunsRequest),
    /// A page of the runs' summaries.
    RunPage(RunPageRequest),
    /// One run (or a page of its timeline).
    Run(RunRequest),
    /// One deployed flow.
    Flow(FlowRequest),
    /// Every deployed flow at a glance.
    FlowList(FlowListRequest),
    /// Records after a sequence number.
    Records(RecordsRequest),
    /// Conformance violations.
    Violations(ViolationsRequest),
    /// Registered services with their manifests.
    Services(ServicesRequest),
    /// Asks for the records to be published for a lease.
    Follow(FollowRequest),
}

/// A request type of one op: its name on the wire and the type of its reply's `result`.
pub trait Op: Into<Request> + DeserializeOwned {
    /// The op: the last token of the request's subject.
    const OP: &'static str;
    /// What the op answers, in `{"ok": true, "result": …}`.
    type Reply: DeserializeOwned;
    /// The reply's shape in the JSON Schema: [`Op::Reply`], or a type that stands for it where
    /// that type is another crate's.
    type ReplySchema: JsonSchema;
}

macro_rules! op {
    ($request:ident, $variant:ident, $op:literal, $reply:ty) => {
        op!($request, $variant, $op, $reply, $reply);
    };
    ($request:ident, $variant:ident, $op:literal, $reply:ty, $schema:ty) => {
        impl Op for $request {
            const OP: &'static str = $op;
            type Reply = $reply;
            type ReplySchema = $schema;
        }
        impl From<$request> for Request {
            fn from(r: $request) -> Request {
                Request::$variant(r)
            }
        }
    };
}

op!(StateRequest, State, "state", StateSummary);
op!(DeployRequest, Deploy, "deploy", crate::Deployment);
op!(
    CheckReleaseRequest,
    CheckRelease,
    "check_release",
    Flow,
    FlowSchema
);
op!(TriggerRequest, Trigger, "trigger", RunStarted);
op!(ResendDlqRequest, ResendDlq, "resend_dlq", crate::Resent);
op!(AdvanceRequest, Advance, "advance", Advanced);
op!(CancelRequest, Cancel, "cancel", Cancelled);
op!(RunsRequest, Runs, "runs", Vec<Run>);
op!(RunPageRequest, RunPage, "run_page", RunPage);
op!(RunRequest, Run, "run", RunTimelinePage);
op!(FlowRequest, Flow, "flow", Flow, FlowSchema);
op!(FlowListRequest, FlowList, "flow_list", Vec<FlowSummary>);
op!(RecordsRequest, Records, "records", Vec<Record>);
op!(
    ViolationsRequest,
    Violations,
    "violations",
    Vec<ViolationReport>
);
op!(
    ServicesRequest,
    Services,
    "services",
    BTreeMap<String, ServiceState>
);
op!(FollowRequest, Follow, "follow", FollowLease);

impl Request {
    /// The request on `op`'s subject with `body`, as the server reads it: an empty body counts
    /// as `{}`; `state`, `violations` and `services` take a body they cannot read as asking for
    /// everything, `runs` and `flow_list` ignore theirs.
    ///
    /// # Errors
    /// The reply's error text: the op is unknown (the ops are listed), or the body is not the
    /// op's request (serde's reason, naming the field, with its position).
    pub fn decode(op: &str, body: &[u8]) -> Result<Request, String> {
        let body = if body.iter().all(u8::is_ascii_whitespace) {
            b"{}".as_slice()
        } else {
            body
        };
        Ok(match op {
            "state" => lenient::<StateRequest>(body),
            "deploy" => strict::<DeployRequest>(body)?,
            "check_release" => strict::<CheckReleaseRequest>(body)?,
            "trigger" => strict::<TriggerRequest>(body)?,
            "resend_dlq" => strict::<ResendDlqRequest>(body)?,
            "advance" => strict::<AdvanceRequest>(body)?,
            "cancel" => strict::<CancelRequest>(body)?,
            "runs" => RunsRequest {}.into(),
            "run_page" => strict::<RunPageRequest>(body)?,
            "run" => strict::<RunRequest>(body)?,
            "flow" => strict::<FlowRequest>(body)?,
            "flow_list" => FlowListRequest {}.into(),
            "records" => strict::<RecordsRequest>(body)?,
            "violations" => lenient::<ViolationsRequest>(body),
            "services" => lenient::<ServicesRequest>(body),
            "follow" => strict::<FollowRequest>(body)?,
            other => return Err(format!("unknown control op {other:?}; ops: {OPS}")),
        })
    }

    /// The op (the subject's last token) and the body's JSON.
    ///
    /// # Errors
    /// When a field cannot be written as JSON (it always can).
    pub fn into_wire(self) -> Result<(String, Vec<u8>), serde_json::Error> {
        let Value::Object(mut fields) = serde_json::to_value(&self)? else {
            return Err(serde::ser::Error::custom("a request is a JSON object"));
        };
        let op = match fields.remove("op") {
            Some(Value::String(op)) => op,
            _ => return Err(serde::ser::Error::custom("a request names its op")),
        };
        Ok((op, serde_json::to_vec(&fields)?))
    }

    /// The op's name.
    #[must_use]
    pub fn op(&self) -> &'static str {
        match self {
            Request::State(_) => StateRequest::OP,
            Request::Deploy(_) => DeployRequest::OP,
            Request::CheckRelease(_) => CheckReleaseRequest::OP,
            Request::Trigger(_) => TriggerRequest::OP,
            Request::ResendDlq(_) => ResendDlqRequest::OP,
            Request::Advance(_) => AdvanceRequest::OP,
            Request::Cancel(_) => CancelRequest::OP,
            Request::Runs(_) => RunsRequest::OP,
            Request::RunPage(_) => RunPageRequest::OP,
            Request::Run(_) => RunRequest::OP,
            Request::Flow(_) => FlowRequest::OP,
            Request::FlowList(_) => FlowListRequest::OP,
            Request::Records(_) => RecordsRequest::OP,
            Request::Violations(_) => ViolationsRequest::OP,
            Request::Services(_) => ServicesRequest::OP,
            Request::Follow(_) => FollowRequest::OP,
        }
    }
}

fn strict<T: Op>(body: &[u8]) -> Result<Request, String> {
    serde_json::from_slice::<T>(body)
        .map(Into::into)
        .map_err(|e| format!("bad request: {e}"))
}

/// Older clients sent any body to these ops: one that cannot be read asks for the defaults.
fn lenient<T: Op + Default>(body: &[u8]) -> Request {
    serde_json::from_slice::<T>(body).unwrap_or_default().into()
}

/// `state`: any body is taken (older clients sent anything); only a `runs_limit` it holds counts.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct StateRequest {
    /// The newest runs to hold in `runs` (1000 unless given; fewer when they
    /// would not fit in one message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_limit: Option<usize>,
}

/// `deploy`: the flow to release.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DeployRequest {
    /// The flow, as in docs/flows.md.
    #[schemars(with = "FlowSchema")]
    pub flow: Flow,
}

/// `check_release`: the flow to check.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CheckReleaseRequest {
    /// The flow, as in docs/flows.md.
    #[schemars(with = "FlowSchema")]
    pub flow: Flow,
}

/// `trigger`: the flow to start a run of, and its payload (one of `payload`, `payload_json`,
/// `payload_raw`; `payload_raw` first, then `payload_json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct TriggerRequest {
    /// The deployed flow.
    pub flow_id: String,
    /// The payload, written as Go writes it (numbers as float64). Default null.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub payload: Value,
    /// The `service-in` node to start at (default: the flow's first entry point).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    /// The payload's exact JSON text, sent byte for byte (a 64-bit integer stays exact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_json: Option<String>,
    /// Bytes sent as they are, JSON or not (a poison message replayed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_raw: Option<String>,
}

/// `resend_dlq`: the DLQ entry to re-send.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ResendDlqRequest {
    /// The entry's `Nats-Msg-Id`.
    pub msg_id: String,
}

/// `cancel`: the run to cancel.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CancelRequest {
    /// The run id.
    pub run_id: String,
}

/// `advance`: how far to move the virtual clock.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AdvanceRequest {
    /// Milliseconds (the clock stops at the end of year 9999).
    pub duration_ms: u64,
}

/// `runs`: no fields (any body is ignored).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct RunsRequest {}

/// `run_page`: where the page starts and how long it is at most.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunPageRequest {
    /// The place after which the page starts: 0 (the oldest), or the last page's `next`.
    #[serde(default)]
    pub after: u64,
    /// The most runs on the page (1000, also the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// `run`: the run, and with either timeline key, which page of its timeline.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct RunRequest {
    /// The run id.
    pub run_id: String,
    /// The first timeline entry to send (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline_from: Option<usize>,
    /// The most timeline entries to send (default: all that fit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline_limit: Option<usize>,
}

/// `flow`: the deployed flow to read.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FlowRequest {
    /// The flow's id.
    pub flow_id: String,
}

/// `flow_list`: no fields (any body is ignored).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct FlowListRequest {}

/// `records`: the records after `since`, at most `limit`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RecordsRequest {
    /// The last sequence number the client has (default 0).
    #[serde(default)]
    pub since: u64,
    /// The most records to send (default 1000; fewer when they would not fit).
    #[serde(default = "default_records_limit")]
    pub limit: usize,
}

fn default_records_limit() -> usize {
    1000
}

/// `violations`: a page of them (a body that cannot be read asks for all).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ViolationsRequest {
    /// How many the client has: the page starts after them (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<usize>,
    /// The most to send; without it, all of them or an error saying to page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// `services`: a page of them by name (a body that cannot be read asks for all).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ServicesRequest {
    /// The last name the client has: the page starts after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// The most to send; without it, all of them or an error saying to page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// `follow`: how long the records are published unless renewed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FollowRequest {
    /// Milliseconds (default 10 000, at most 3 600 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
}

/// A refused request's reply: `{"ok": false, "error": …}`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ErrorReply {
    /// Always false.
    #[schemars(schema_with = "super::schema::always_false")]
    pub ok: bool,
    /// What is wrong.
    pub error: ErrorBody,
}

/// A refused request's `error`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ErrorBody {
    /// What is wrong and what to do, in words.
    Message(String),
    /// A refused release (`deploy`, `check_release`), with its problems.
    Release(ReleaseRefusal),
}

impl ErrorBody {
    /// The error's text.
    #[must_use]
    pub fn message(&self) -> &str {
        match self {
            ErrorBody::Message(m) => m,
            ErrorBody::Release(r) => &r.message,
        }
    }
}

impl From<String> for ErrorBody {
    fn from(message: String) -> Self {
        ErrorBody::Message(message)
    }
}

/// Why a release was refused.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReleaseRefusal {
    /// `release refused: ` and the problems in words.
    pub message: String,
    /// Every problem, with its stable code.
    pub problems: Vec<ReleaseProblem>,
}

/// A service in the state summary.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ServiceSummary {
    /// The name.
    pub name: String,
    /// `service_version`.
    pub version: String,
    /// The registered manifest's hash.
    pub manifest_hash: String,
    /// `runtime_capabilities`.
    pub capabilities: Vec<String>,
    /// Its actions' names; empty when the state was too large to hold them
    /// (`action_count` still counts them).
    pub actions: Vec<String>,
    /// How many actions it has. 0 from an emulator older than this field: take `actions.len()`.
    #[serde(default)]
    pub action_count: usize,
    /// Liveness from heartbeats.
    pub liveness: Liveness,
    /// When the last heartbeat arrived, wall clock.
    #[schemars(with = "Option<GoTimeSchema>")]
    pub last_seen: Option<GoTime>,
    /// Replicas seen (distinct `started_at`).
    pub replicas: usize,
}

/// A run in the state summary.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RunSummary {
    /// The run id.
    pub id: String,
    /// The flow.
    pub flow_id: String,
    /// Where it is.
    pub status: RunStatus,
    /// When it started (wall clock).
    #[schemars(with = "GoTimeSchema")]
    pub started_at: GoTime,
    /// When it settled.
    #[schemars(with = "Option<GoTimeSchema>")]
    pub settled_at: Option<GoTime>,
    /// Nodes that failed.
    pub failed: Vec<String>,
    /// Steps so far.
    pub steps: usize,
}

/// Everything a viewer needs at a glance (`state`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StateSummary {
    /// The emulator's clock.
    #[schemars(with = "GoTimeSchema")]
    pub clock: GoTime,
    /// Virtual or real.
    pub clock_mode: ClockMode,
    /// Registered services, by name: those that fit in one NATS message with the rest of the
    /// summary (`services_total` counts them all; `services` pages through them).
    pub services: Vec<ServiceSummary>,
    /// Services registered in all. 0 from an emulator older than this field: take
    /// `services.len()`.
    #[serde(default)]
    pub services_total: usize,
    /// Deployed flows, whole: those that fit in one NATS message with the rest of the summary
    /// (the largest are left out first when not all do; `flows_total` counts
    /// them all, and `flow` reads one).
    #[schemars(with = "Vec<FlowSchema>")]
    pub flows: Vec<Flow>,
    /// Flows deployed in all. 0 from an emulator older than this field: take `flows.len()`.
    #[serde(default)]
    pub flows_total: usize,
    /// The newest runs, in start order: at most the request's `runs_limit`
    /// (1000 unless it asked), fewer when they would not fit in one NATS
    /// message. `runs_total` says how many there are in all.
    pub runs: Vec<RunSummary>,
    /// Runs the emulator holds in all (`runs` may hold only the newest of them). 0 from an
    /// emulator older than this field: take `runs.len()` then.
    #[serde(default)]
    pub runs_total: usize,
    /// Conformance violations so far.
    pub violations: usize,
    /// The last record's sequence number.
    pub last_seq: u64,
    /// Records dropped off the ring (beyond `max_records` or `max_record_bytes`).
    pub dropped_records: u64,
    /// Settled runs evicted beyond `max_runs` (no longer in `runs`).
    #[serde(default)]
    pub evicted_runs: u64,
    /// Completion events of runs the emulator did not start whose runs it did not follow:
    /// `max_followed_runs` such runs were open.
    #[serde(default)]
    pub unfollowed_runs: u64,
    /// Conformance violations counted but not kept (beyond `max_violations`, or 16 per message).
    #[serde(default)]
    pub dropped_violations: u64,
    /// Violations kept with only an excerpt of their message (the violations' bytes had
    /// reached `max_record_bytes`).
    #[serde(default)]
    pub trimmed_violations: u64,
    /// Messages NATS dropped because a subscription of the emulator fell behind (slow consumer;
    /// at least this many). Above zero, what the emulator saw is incomplete.
    #[serde(default)]
    pub dropped_messages: u64,
    /// How many times the emulator's connection to NATS was lost and made again (a server
    /// restart, or the server cutting off a client that fell too far behind). Messages on plain
    /// subjects published meanwhile were not seen; the streams it follows lose nothing.
    #[serde(default)]
    pub connection_losses: u64,
    /// Records, violations and services sent cut to an excerpt by the control API, because one
    /// alone was larger than a NATS message (each cut says so in its text).
    #[serde(default)]
    pub cut_in_replies: u64,
    /// Times one of the emulator's streams (`TRIGGERS_EVENTS`, `TRIGGERS_DLQ`) was found gone
    /// (deleted by a client), and made again: what was published meanwhile is lost.
    #[serde(default)]
    pub streams_lost: u64,
}

/// A deployed flow at a glance (`flow_list`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FlowSummary {
    /// The flow's id.
    pub id: String,
    /// Its latest version.
    pub version: i64,
    /// How many nodes it has.
    pub nodes: usize,
    /// How many edges.
    pub edges: usize,
    /// The services it involves.
    pub services: Vec<String>,
}

/// One page of the runs, in start order (`run_page`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RunPage {
    /// Runs the emulator holds in all, now.
    pub total: usize,
    /// This page's runs.
    pub runs: Vec<RunSummary>,
    /// Where the next page starts: the `after` of the next request (the place of this page's
    /// last run; the request's own `after` when the page is empty). A place, not a position:
    /// runs evicted between two pages do not shift it, and asking again later from the last
    /// page's `next` gives the runs started since.
    pub next: u64,
    /// Whether more runs follow this page now.
    pub more: bool,
}

/// The run a `trigger` started.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RunStarted {
    /// Its id.
    pub run_id: String,
}

/// What an `advance` did.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Advanced {
    /// The clock after it.
    #[schemars(with = "GoTimeSchema")]
    pub clock: GoTime,
    /// The timers that fired.
    pub fired: Vec<crate::FiredTimer>,
}

/// Where the records are published, and for how long (`follow`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FollowLease {
    /// The lease granted, in milliseconds.
    pub lease_ms: u64,
    /// The subject the records are published on.
    pub subject: String,
}

/// A run (`run`): whole, or with one page of its timeline when the request named
/// `timeline_from` or `timeline_limit`: the entries from `timeline_from`, of `timeline_total`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RunTimelinePage {
    /// The run, its timeline only the page's entries.
    #[serde(flatten)]
    pub run: Run,
    /// The first entry's index. Absent when the run came whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline_from: Option<usize>,
    /// Entries in the whole timeline. Absent when the run came whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline_total: Option<usize>,
}

/// A conformance violation as the control API sends it (`violations`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ViolationReport {
    /// Error or warning.
    pub severity: crate::conformance::Severity,
    /// The rule broken: a stable snake_case code (docs/emulator.md, conformance checks).
    pub rule: String,
    /// The subject the message was published on.
    pub subject: String,
    /// What is wrong, where, and what Go or the contract expects instead.
    pub message: String,
    /// The message's headers, as received: `[name, value]` pairs.
    pub headers: Vec<(String, String)>,
    /// The message's payload as UTF-8 text (invalid bytes replaced).
    pub payload: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_op() -> Vec<Request> {
        let flow: Flow =
            serde_json::from_value(serde_json::json!({"id": "f", "nodes": [], "edges": []}))
                .unwrap();
        vec![
            StateRequest {
                runs_limit: Some(3),
            }
            .into(),
            DeployRequest { flow: flow.clone() }.into(),
            CheckReleaseRequest { flow }.into(),
            TriggerRequest {
                flow_id: "f".into(),
                entry: Some("in".into()),
                payload_json: Some("{\"n\":1}".into()),
                ..TriggerRequest::default()
            }
            .into(),
            ResendDlqRequest { msg_id: "m".into() }.into(),
            AdvanceRequest { duration_ms: 5 }.into(),
            CancelRequest { run_id: "r".into() }.into(),
            RunsRequest {}.into(),
            RunPageRequest {
                after: 2,
                limit: Some(4),
            }
            .into(),
            RunRequest {
                run_id: "r".into(),
                timeline_from: Some(1),
                timeline_limit: None,
            }
            .into(),
            FlowRequest {
                flow_id: "f".into(),
            }
            .into(),
            FlowListRequest {}.into(),
            RecordsRequest { since: 1, limit: 2 }.into(),
            ViolationsRequest {
                after: Some(1),
                limit: Some(2),
            }
            .into(),
            ServicesRequest {
                after: Some("a".into()),
                limit: None,
            }
            .into(),
            FollowRequest { lease_ms: Some(10) }.into(),
        ]
    }

    #[test]
    fn every_op_goes_over_the_wire_and_back_unchanged() {
        let requests = every_op();
        let listed: Vec<&str> = OPS.split(", ").collect();
        assert_eq!(requests.len(), listed.len(), "one request per op of {OPS}");
        for request in requests {
            let before = serde_json::to_value(&request).unwrap();
            let op = request.op();
            assert_eq!(before["op"], op, "op() names the serde tag");
            assert!(listed.contains(&op), "{op} is listed in OPS");
            let (wire_op, body) = request.into_wire().unwrap();
            assert_eq!(wire_op, op);
            let body_value: Value = serde_json::from_slice(&body).unwrap();
            assert!(
                body_value.get("op").is_none(),
                "the op is in the subject only"
            );
            let after = serde_json::to_value(Request::decode(&wire_op, &body).unwrap()).unwrap();
            assert_eq!(before, after, "{op}");
        }
    }

    #[test]
    fn old_bodies_are_read_as_before() {
        // An empty body is `{}`; state, violations and services take anything; runs and
        // flow_list ignore their body; a missing field is named.
        assert!(matches!(
            Request::decode("state", b"not json"),
            Ok(Request::State(StateRequest { runs_limit: None }))
        ));
        assert!(matches!(
            Request::decode("violations", br#"{"after": "x"}"#),
            Ok(Request::Violations(ViolationsRequest {
                after: None,
                limit: None
            }))
        ));
        assert!(matches!(
            Request::decode("runs", b"\xff"),
            Ok(Request::Runs(_))
        ));
        assert!(matches!(
            Request::decode("records", b"  "),
            Ok(Request::Records(RecordsRequest {
                since: 0,
                limit: 1000
            }))
        ));
        let missing = Request::decode("deploy", b"").unwrap_err();
        assert!(
            missing.starts_with("bad request: missing field `flow`"),
            "{missing}"
        );
        let unknown = Request::decode("follow", br#"{"lease": 1}"#).unwrap_err();
        assert!(unknown.contains("unknown field `lease`"), "{unknown}");
        assert_eq!(
            Request::decode("frobnicate", b"{}").unwrap_err(),
            format!("unknown control op \"frobnicate\"; ops: {OPS}")
        );
    }
}
