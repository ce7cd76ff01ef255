//! The control API's JSON Schema (`docs/control-schema.json`), generated from the protocol's
//! types, for clients in other languages; and the schemas of the types it carries that are
//! written by hand: another crate's (a flow, a time), or too rich to derive one here (a run, a
//! record, a service's state), which give their top-level shape and point at the docs.

use std::borrow::Cow;

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Map, Value};

use super::protocol::{
    AdvanceRequest, CancelRequest, CheckReleaseRequest, DeployRequest, ErrorReply, FlowListRequest,
    FlowRequest, FollowRequest, Op, RecordsRequest, Request, ResendDlqRequest, RunPageRequest,
    RunRequest, RunsRequest, ServicesRequest, StateRequest, TriggerRequest, ViolationsRequest,
};
use crate::recorder::{Cancelled, Record, Run, ServiceState};
use crate::release::{ReleaseCode, ReleaseProblem};

/// The command that writes `docs/control-schema.json` again after the types changed.
pub const BLESS: &str = "TRIGGERS_BLESS=1 cargo test -p triggers-emulator --test control_schema";

/// The control API's JSON Schema: every type in `$defs`; a request validates against
/// `#/$defs/Request` (its `op` is the subject's last token, the other fields its body), the reply
/// to op `x_y` against `#/$defs/XYReply` (`{"ok": true, "result": …}` or `#/$defs/ErrorReply`).
#[must_use]
pub fn schema() -> Value {
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    generator.subschema_for::<Request>();
    generator.subschema_for::<ErrorReply>();
    let mut replies = Map::new();
    reply::<StateRequest>(&mut generator, &mut replies);
    reply::<DeployRequest>(&mut generator, &mut replies);
    reply::<CheckReleaseRequest>(&mut generator, &mut replies);
    reply::<TriggerRequest>(&mut generator, &mut replies);
    reply::<ResendDlqRequest>(&mut generator, &mut replies);
    reply::<AdvanceRequest>(&mut generator, &mut replies);
    reply::<CancelRequest>(&mut generator, &mut replies);
    reply::<RunsRequest>(&mut generator, &mut replies);
    reply::<RunPageRequest>(&mut generator, &mut replies);
    reply::<RunRequest>(&mut generator, &mut replies);
    reply::<FlowRequest>(&mut generator, &mut replies);
    reply::<FlowListRequest>(&mut generator, &mut replies);
    reply::<RecordsRequest>(&mut generator, &mut replies);
    reply::<ViolationsRequest>(&mut generator, &mut replies);
    reply::<ServicesRequest>(&mut generator, &mut replies);
    reply::<FollowRequest>(&mut generator, &mut replies);
    let mut defs = generator.take_definitions(true);
    defs.extend(replies);
    let mut root = Map::new();
    root.insert(
        "$schema".into(),
        "https://json-schema.org/draft/2020-12/schema".into(),
    );
    root.insert("title".into(), "triggers-lab control API".into());
    root.insert(
        "description".into(),
        "Requests on triggerslab.v1.control.<op>: validate one against #/$defs/Request (its `op` \
         is the subject's last token, its other fields the body). The reply to op `x_y` \
         validates against #/$defs/XYReply. See docs/emulator.md, \"The control API\". \
         Generated from the Rust types (emulator/src/control/protocol.rs); do not edit."
            .into(),
    );
    root.insert("$defs".into(), Value::Object(defs));
    Value::Object(root)
}

/// The op's name in the schema's reply definitions: `run_page` -> `RunPage`.
#[must_use]
pub fn pascal(op: &str) -> String {
    op.split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// `<Op>Reply`: the op's result in the success envelope, or the error reply.
fn reply<T: Op>(generator: &mut SchemaGenerator, replies: &mut Map<String, Value>) {
    let result = generator.subschema_for::<T::ReplySchema>();
    let success = json_schema!({
        "type": "object",
        "properties": {
            "ok": {"const": true},
            "result": result,
        },
        "required": ["ok", "result"],
    });
    let error = generator.subschema_for::<ErrorReply>();
    let schema = json_schema!({
        "description": format!("The reply to `{}`.", T::OP),
        "oneOf": [success, error],
    });
    replies.insert(format!("{}Reply", pascal(T::OP)), schema.to_value());
}

/// `false`, the `ok` of every error reply.
pub(super) fn always_false(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"const": false})
}

/// A string property.
fn string() -> Value {
    serde_json::json!({"type": "string"})
}

/// An object with these properties, those in `required` required, others allowed.
fn object(description: &str, properties: Value, required: &[&str]) -> Schema {
    json_schema!({
        "type": "object",
        "description": description,
        "properties": properties,
        "required": required,
    })
}

/// A time as Go writes it: RFC 3339 in UTC, `Z`, the fraction's trailing zeros trimmed.
pub struct GoTimeSchema;

impl JsonSchema for GoTimeSchema {
    fn schema_name() -> Cow<'static, str> {
        "GoTime".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "format": "date-time",
            "description": "RFC 3339 in UTC as Go writes it (2026-11-30T07:52:55.741326827Z).",
        })
    }
}

/// A flow (triggers-sdk's `Flow`): docs/flows.md describes its nodes and edges.
pub struct FlowSchema;

impl JsonSchema for FlowSchema {
    fn schema_name() -> Cow<'static, str> {
        "Flow".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        object(
            "A flow: its id, version (set by the release), nodes and edges; docs/flows.md \
             describes them.",
            serde_json::json!({
                "id": string(),
                "version": {"type": "integer"},
                "nodes": {"type": "array", "items": {"type": "object"}},
                "edges": {"type": "array", "items": {"type": "object"}},
            }),
            &["id"],
        )
    }
}

impl JsonSchema for Run {
    fn schema_name() -> Cow<'static, str> {
        "Run".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let time = generator.subschema_for::<GoTimeSchema>();
        let status = generator.subschema_for::<crate::recorder::RunStatus>();
        let names = serde_json::json!({"type": "array", "items": string()});
        object(
            "A run and its progress; docs/emulator.md, \"Runs and their statuses\", describes \
             its timeline entries and timers.",
            serde_json::json!({
                "id": string(),
                "flow_id": string(),
                "flow_version": {"type": "integer"},
                "trace_id": string(),
                "status": status,
                "started_at": time,
                "settled_at": time,
                "pending": {"type": "object", "additionalProperties": {"type": "integer"}},
                "completed": names,
                "failed": names,
                "timers": {"type": "array", "items": {"type": "object"}},
                "timeline": {"type": "array", "items": {"type": "object"}},
                "timeline_dropped": {"type": "integer"},
                "dlq": {"type": "array", "items": {"type": "integer"}},
                "unexpected": names,
            }),
            &[
                "id",
                "flow_id",
                "flow_version",
                "trace_id",
                "status",
                "started_at",
                "pending",
                "completed",
                "failed",
                "timers",
                "timeline",
                "dlq",
            ],
        )
    }
}

impl JsonSchema for Record {
    fn schema_name() -> Cow<'static, str> {
        "Record".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let time = generator.subschema_for::<GoTimeSchema>();
        object(
            "One recorded thing: `seq`, `at`, `clock`, `kind` and the kind's fields; \
             docs/emulator.md, \"The recorder\", lists the kinds.",
            serde_json::json!({
                "seq": {"type": "integer"},
                "at": time,
                "clock": time,
                "kind": string(),
                "subject": string(),
                "headers": {"type": "array", "items": {"type": "array", "items": string()}},
                "payload": string(),
            }),
            &["seq", "at", "clock", "kind"],
        )
    }
}

impl JsonSchema for ServiceState {
    fn schema_name() -> Cow<'static, str> {
        "ServiceState".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let time = generator.subschema_for::<GoTimeSchema>();
        object(
            "A registered service: its whole manifest (docs/protocol.md) and what the \
             emulator saw of it.",
            serde_json::json!({
                "manifest": {"type": "object"},
                "registered_at": time,
                "registrations": {"type": "integer"},
                "last_heartbeat": {"type": "object"},
                "last_seen": time,
                "heartbeats": {"type": "integer"},
                "replicas": {"type": "object", "additionalProperties": time},
            }),
            &[
                "manifest",
                "registered_at",
                "registrations",
                "heartbeats",
                "replicas",
            ],
        )
    }
}

impl JsonSchema for Cancelled {
    fn schema_name() -> Cow<'static, str> {
        "Cancelled".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        object(
            "What cancelling a run dropped: the nodes it waited on (with how many arrivals \
             each) and the timers that were armed.",
            serde_json::json!({
                "run_id": string(),
                "pending": {"type": "object", "additionalProperties": {"type": "integer"}},
                "timers": {"type": "array", "items": string()},
            }),
            &["run_id", "pending", "timers"],
        )
    }
}

impl JsonSchema for crate::Resent {
    fn schema_name() -> Cow<'static, str> {
        "Resent".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        object(
            "A DLQ entry sent again: its run, the subject, the new idempotency key, the nodes \
             the run waits on again.",
            serde_json::json!({
                "run_id": string(),
                "subject": string(),
                "idempotency_key": string(),
                "nodes": {"type": "array", "items": string()},
            }),
            &["run_id", "subject", "idempotency_key", "nodes"],
        )
    }
}

impl JsonSchema for crate::Deployment {
    fn schema_name() -> Cow<'static, str> {
        "Deployment".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let flow = generator.subschema_for::<FlowSchema>();
        object(
            "A released flow (owners assigned, inbound subjects resolved, version set) and the \
             subject it was broadcast on.",
            serde_json::json!({"flow": flow, "broadcast_subject": string()}),
            &["flow", "broadcast_subject"],
        )
    }
}

impl JsonSchema for crate::FiredTimer {
    fn schema_name() -> Cow<'static, str> {
        "FiredTimer".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let time = generator.subschema_for::<GoTimeSchema>();
        object(
            "A timer that fired during an `advance`.",
            serde_json::json!({
                "run_id": string(),
                "node_id": string(),
                "occurrence": {"type": "integer"},
                "due": time,
            }),
            &["run_id", "node_id", "occurrence", "due"],
        )
    }
}

impl JsonSchema for ReleaseProblem {
    fn schema_name() -> Cow<'static, str> {
        "ReleaseProblem".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let codes: Vec<&str> = ReleaseCode::ALL.iter().map(|c| c.as_str()).collect();
        object(
            "One reason a release is refused: a stable code, the node and service concerned \
             when there are, and what to do.",
            serde_json::json!({
                "code": {"enum": codes},
                "node": string(),
                "service": string(),
                "message": string(),
            }),
            &["code", "message"],
        )
    }
}
