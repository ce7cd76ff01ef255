//! The JSON messages of the contract besides the manifest: heartbeats, completion events, DLQ
//! entries, registration replies and flow envelopes. Field order is the declared order; every
//! time is Go's time text.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{DecodeError, JsonError};
use crate::wire::decode::{self, null_default, strict_default, strict_list};
use crate::wire::header::Envelope;
use crate::wire::json::{self, RawJson, go_any};
use crate::wire::time::GoTime;

/// Encodes any wire shape with the Go writer.
///
/// # Errors
/// Only for values JSON cannot carry.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, JsonError> {
    json::to_vec(value)
}

/// Published on `triggers.v2.heartbeat` every 5 s. All six fields are always present.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The service name.
    #[serde(deserialize_with = "null_default")]
    pub service: String,
    /// The service's version text.
    #[serde(deserialize_with = "null_default")]
    pub service_version: String,
    /// The hash of the manifest this replica registered.
    #[serde(deserialize_with = "null_default")]
    pub manifest_hash: String,
    /// When this replica started; fixed for its life.
    pub started_at: GoTime,
    /// When this heartbeat was sent.
    pub now: GoTime,
    /// True on the last heartbeat of a graceful shutdown.
    #[serde(deserialize_with = "null_default")]
    pub shutting_down: bool,
}

/// Completion statuses the SDK writes.
pub mod status {
    /// The node ran and succeeded.
    pub const SUCCEEDED: &str = "succeeded";
    /// An attempt failed and another will follow.
    pub const RETRYING: &str = "retrying";
    /// The node failed for good (after its last attempt); its input went to the DLQ.
    pub const FAILED: &str = "failed";
    /// The node was evaluated and stopped the path (a condition that did not hold).
    pub const SKIPPED: &str = "skipped";
    /// Every status above.
    pub const ALL: [&str; 4] = [SUCCEEDED, RETRYING, FAILED, SKIPPED];
}

/// Published on `triggers.v2.flow.events.<flow_id>` for each executed node. It carries no result:
/// output travels through the flow graph.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionEvent {
    /// The run.
    #[serde(deserialize_with = "null_default")]
    pub flow_run_id: String,
    /// The flow.
    #[serde(deserialize_with = "null_default")]
    pub flow_id: String,
    /// The flow's version.
    #[serde(deserialize_with = "null_default")]
    pub flow_version: i64,
    /// The node that ran.
    #[serde(deserialize_with = "null_default")]
    pub node_id: String,
    /// Its type: `action`, `mapping`, `condition`, `lookup`, `output`...
    #[serde(deserialize_with = "null_default")]
    pub node_type: String,
    /// The service that ran it. Always present.
    #[serde(deserialize_with = "null_default")]
    pub service: String,
    /// When the node (this attempt) started.
    pub started_at: GoTime,
    /// When it finished.
    pub finished_at: GoTime,
    /// One of [`status`].
    #[serde(deserialize_with = "null_default")]
    pub status: String,
    /// What went wrong. Left out when empty.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub error: String,
    /// The run's trace id. Left out when empty.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub trace_id: String,
}

/// Published on a DLQ subject when a message cannot be processed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DlqEntry {
    /// Why: a [`crate::wire::subject::FallbackKind`] name or an action failure kind.
    #[serde(deserialize_with = "null_default")]
    pub kind: String,
    /// The full envelope of the message, as an object.
    #[serde(deserialize_with = "strict_default")]
    pub envelope: Envelope,
    /// The original input, as raw JSON.
    pub body: RawJson,
    /// The error text.
    #[serde(deserialize_with = "null_default")]
    pub err_msg: String,
    /// When it was dead-lettered.
    pub occurred_at: GoTime,
}

/// DLQ entry kinds of an action failure (the subject is the action's).
pub mod dlq_kind {
    /// The handler returned an error on its last attempt.
    pub const ACTION_FAILED: &str = "action_failed";
    /// The last attempt ran past the action's timeout.
    pub const ACTION_TIMEOUT: &str = "action_timeout";
    /// The handler panicked on its last attempt.
    pub const ACTION_PANICKED: &str = "action_panicked";
    /// The body does not decode as the action's input: not retried.
    pub const INVALID_INPUT: &str = "invalid_input";
    /// The Durable Timer private context was invalid or not allowed: the handler was not called.
    pub const DURABLE_TIMER_REJECTED: &str = "durable_timer_rejected";
    /// Routing the action's result onward failed (a hop or an output could not be delivered).
    pub const ROUTING_FAILED: &str = "routing_failed";

    /// Every kind above (the fallback kinds are [`crate::wire::subject::FallbackKind`]'s).
    pub const ALL: [&str; 6] = [
        ACTION_FAILED,
        ACTION_TIMEOUT,
        ACTION_PANICKED,
        INVALID_INPUT,
        DURABLE_TIMER_REJECTED,
        ROUTING_FAILED,
    ];
}

/// The reply to `triggers.v2.manifest.register` (and to `fetch`'s error case).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RegisterReply {
    /// Why registration was refused. Left out when it was accepted.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub error: String,
    /// The flows that involve the service. `null` when there are none (a Go nil slice).
    #[serde(
        default,
        deserialize_with = "strict_list",
        serialize_with = "nil_if_empty"
    )]
    pub flows: Vec<FlowEnvelope>,
}

/// A flow as the orchestrator sends it: in register replies and broadcasts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowEnvelope {
    /// The flow id.
    #[serde(deserialize_with = "null_default")]
    pub id: String,
    /// Its version; a newer version replaces an older one.
    #[serde(deserialize_with = "null_default")]
    pub version: i64,
    /// Its nodes and edges (free-form JSON; see `wire::flow`).
    #[serde(deserialize_with = "null_default", serialize_with = "go_any")]
    pub body: Value,
}

fn nil_if_empty<S: serde::Serializer, T: Serialize>(
    items: &[T],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    if items.is_empty() {
        serializer.serialize_none()
    } else {
        serializer.collect_seq(items)
    }
}

macro_rules! json_codec {
    ($($ty:ty => $shape:literal),* $(,)?) => {
        $(impl $ty {
            #[doc = concat!("Decodes a ", $shape, " from JSON, naming the field on error.")]
            ///
            /// # Errors
            /// A [`DecodeError`] with the JSON path, line and column.
            pub fn from_json(bytes: &[u8]) -> Result<Self, DecodeError> {
                decode::from_slice($shape, bytes)
            }

            /// Encodes it as the Go reference does.
            ///
            /// # Errors
            /// Only for values JSON cannot carry.
            pub fn to_json(&self) -> Result<Vec<u8>, JsonError> {
                json::to_vec(self)
            }
        })*
    };
}

json_codec!(
    Heartbeat => "heartbeat",
    CompletionEvent => "completion event",
    DlqEntry => "DLQ entry",
    RegisterReply => "register reply",
    FlowEnvelope => "flow envelope",
    Envelope => "envelope",
);

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> GoTime {
        GoTime::parse(s).unwrap()
    }

    #[test]
    fn heartbeat_writes_every_field() {
        let hb = Heartbeat {
            service: "svc".into(),
            started_at: t("2026-05-26T14:30:45Z"),
            now: t("2026-05-26T14:30:50.5Z"),
            ..Heartbeat::default()
        };
        assert_eq!(
            String::from_utf8(hb.to_json().unwrap()).unwrap(),
            r#"{"service":"svc","service_version":"","manifest_hash":"","started_at":"2026-05-26T14:30:45Z","now":"2026-05-26T14:30:50.5Z","shutting_down":false}"#
        );
    }

    #[test]
    fn completion_event_omits_empty_error_and_trace() {
        let ev = CompletionEvent {
            flow_run_id: "r".into(),
            flow_id: "f".into(),
            flow_version: 1,
            node_id: "n".into(),
            node_type: "action".into(),
            service: "svc".into(),
            started_at: t("2026-05-26T14:30:45Z"),
            finished_at: t("2026-05-26T14:30:45.001Z"),
            status: status::SUCCEEDED.into(),
            ..CompletionEvent::default()
        };
        let text = String::from_utf8(ev.to_json().unwrap()).unwrap();
        assert!(text.ends_with(r#""status":"succeeded"}"#), "{text}");
        assert!(text.contains(r#""service":"svc""#));
        assert_eq!(CompletionEvent::from_json(text.as_bytes()).unwrap(), ev);
    }

    #[test]
    fn dlq_entry_nests_the_envelope_and_keeps_the_body_raw() {
        let entry = DlqEntry {
            kind: dlq_kind::ACTION_FAILED.into(),
            envelope: Envelope::default(),
            body: RawJson::from_text(r#"{"b":1.0,"a":2}"#).unwrap(),
            err_msg: "boom".into(),
            occurred_at: t("2026-05-26T14:30:45Z"),
        };
        let text = String::from_utf8(entry.to_json().unwrap()).unwrap();
        assert!(text.contains(r#""body":{"b":1.0,"a":2}"#), "{text}");
        assert!(text.contains(r#""envelope":{"trace_id":"","#), "{text}");
        assert_eq!(DlqEntry::from_json(text.as_bytes()).unwrap(), entry);
    }

    #[test]
    fn register_reply_error_and_nil_flows() {
        let r = RegisterReply {
            error: "protocol major 2 is not supported".into(),
            flows: vec![],
        };
        assert_eq!(
            String::from_utf8(r.to_json().unwrap()).unwrap(),
            r#"{"error":"protocol major 2 is not supported","flows":null}"#
        );
        let err = RegisterReply::from_json(br#"{"flows":[{"id":1}]}"#).unwrap_err();
        assert_eq!(err.path, "flows[0].id");
    }
}
