//! What the emulator records: every message it sees (with raw bytes and headers), and each run's
//! progress through its flow.
//!
//! Run tracking follows the flow graph from completion events alone, so it works for SDKs in any
//! language: a run starts with its entry's successors pending; a node's `succeeded` event makes
//! its successors pending (a timer is armed instead); `skipped` and `failed` end that path. A run
//! with nothing pending is *waiting* while a timer is armed, else *settled*.
//!
//! A run's times (start, settle, each step) are wall-clock, as the services' completion events
//! are; only a timer's `due` is on the emulator's clock, which may be virtual.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::kept_manifest::KeptManifest;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use triggers_sdk::flow::Flow;
use triggers_sdk::wire::{CompletionEvent, DlqEntry, GoTime, Headers, Heartbeat};

pub use crate::run::{
    ArmedTimer, CANCEL_STEP, Cancelled, MAX_TIMELINE, Run, RunStatus, TimelineEntry,
};
pub use crate::timeline::{EventSteps, retry_allowance};

/// Bytes as received, shared by every record and violation of one message (a clone is a
/// reference count, not a copy), written as UTF-8 text with invalid bytes replaced.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Body(Bytes);

impl Body {
    /// The bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The bytes as text, invalid UTF-8 replaced.
    #[must_use]
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }

    /// How many bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::ops::Deref for Body {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Bytes> for Body {
    fn from(b: Bytes) -> Self {
        Body(b)
    }
}

impl From<Vec<u8>> for Body {
    fn from(b: Vec<u8>) -> Self {
        Body(Bytes::from(b))
    }
}

impl From<&[u8]> for Body {
    fn from(b: &[u8]) -> Self {
        Body(Bytes::copy_from_slice(b))
    }
}

impl From<&str> for Body {
    fn from(s: &str) -> Self {
        Body(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl PartialEq<[u8]> for Body {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_bytes() == other
    }
}

impl PartialEq<&[u8]> for Body {
    fn eq(&self, other: &&[u8]) -> bool {
        self.as_bytes() == *other
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for Body {
    fn eq(&self, other: &&[u8; N]) -> bool {
        self.as_bytes() == other.as_slice()
    }
}

impl PartialEq<Vec<u8>> for Body {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_bytes() == other.as_slice()
    }
}

impl PartialEq<str> for Body {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for Body {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<String> for Body {
    fn eq(&self, other: &String) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.text(), f)
    }
}

impl Serialize for Body {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text())
    }
}

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(|s| Body(Bytes::from(s.into_bytes())))
    }
}

/// Headers as received, shared like [`Body`].
pub type SharedHeaders = Arc<[(String, String)]>;

/// Shares `headers` for records and violations.
#[must_use]
pub fn share_headers(headers: &Headers) -> SharedHeaders {
    headers
        .iter()
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect()
}

/// One recorded thing, in the order the emulator saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// 1, 2, 3... in arrival order.
    pub seq: u64,
    /// Wall-clock time of arrival.
    pub at: GoTime,
    /// The emulator's clock (virtual or real) at arrival.
    pub clock: GoTime,
    /// The NATS subject, when it came from or went to NATS.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subject: String,
    /// The headers as received.
    #[serde(default = "no_headers", skip_serializing_if = "<[_]>::is_empty")]
    pub headers: SharedHeaders,
    /// The payload as received (written as UTF-8; other bytes replaced).
    #[serde(default, skip_serializing_if = "Body::is_empty")]
    pub payload: Body,
    /// What it is.
    #[serde(flatten)]
    pub kind: RecordKind,
}

fn no_headers() -> SharedHeaders {
    Arc::from(Vec::new())
}

impl Record {
    /// The first header named `name` (exactly: NATS header names are case-sensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Roughly how many bytes the record holds, for the recorder's byte bound.
    #[must_use]
    pub fn size(&self) -> usize {
        let headers: usize = self.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
        let kind = match &self.kind {
            RecordKind::Dlq { entry: Some(e), .. } => e.body.get().len() + e.err_msg.len(),
            RecordKind::Violation { message, .. } => message.len(),
            // A rough size: a flow's JSON is mostly its nodes and edges.
            RecordKind::Deploy { flow: Some(f), .. } => {
                256 * (f.body.nodes.len() + f.body.edges.len())
            }
            _ => 0,
        };
        256 + self.subject.len() + headers + self.payload.len() + kind
    }
}

/// The kinds of record.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RecordKind {
    /// A registration request and the emulator's answer.
    Registration {
        /// The service (empty when the manifest could not be read).
        service: String,
        /// Whether it was accepted.
        accepted: bool,
        /// The reply's error, if refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The manifest's own hash field.
        manifest_hash: String,
    },
    /// Deployed flows left out of a register reply, and why (the capability gate).
    FlowsWithheld {
        /// The service that registered.
        service: String,
        /// The flows withheld.
        flows: Vec<String>,
        /// Why.
        reason: String,
    },
    /// A manifest fetch and whether it was answered.
    Fetch {
        /// The service asked for.
        service: String,
        /// Whether it was known.
        found: bool,
    },
    /// A heartbeat.
    Heartbeat {
        /// The decoded heartbeat.
        heartbeat: Heartbeat,
    },
    /// A completion event.
    Completion {
        /// The decoded event.
        event: CompletionEvent,
    },
    /// A DLQ entry as stored by JetStream (after `Nats-Msg-Id` dedup).
    Dlq {
        /// The entry, when it decodes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        entry: Option<DlqEntry>,
        /// Its `Nats-Msg-Id`.
        msg_id: String,
    },
    /// A DLQ entry re-sent to its service (`Emulator::resend_dlq`): the record's subject,
    /// headers and payload are the new delivery's.
    Resend {
        /// The run.
        run_id: String,
        /// The DLQ entry's `Nats-Msg-Id`.
        dlq_msg_id: String,
        /// The nodes the run waits on again.
        nodes: Vec<String>,
    },
    /// A flow deployed.
    Deploy {
        /// The flow.
        flow_id: String,
        /// Its version.
        version: i64,
        /// The flow as released (resolved, with its version), so that a recording can deploy it
        /// again (`triggers-lab replay`). Absent in recordings written before it was recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        flow: Option<Box<Flow>>,
    },
    /// A flow whose release was refused (by `deploy`, the control API's or the harness's), with
    /// every problem, so that a log shows why nothing was deployed.
    DeployRefused {
        /// The flow.
        flow_id: String,
        /// Each problem, with its stable code.
        problems: Vec<String>,
    },
    /// A broadcast sent.
    Broadcast {
        /// The flow.
        flow_id: String,
        /// Its version.
        version: i64,
    },
    /// A run started by the emulator.
    Trigger {
        /// The run.
        run_id: String,
        /// The flow.
        flow_id: String,
        /// The `service-in` node the run started at (the record's `payload` is what it was sent).
        /// Empty in recordings written before it was recorded: the flow's first entry point.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        entry: String,
    },
    /// A message seen on a service's inbound subject (a trigger, a hop between services, a
    /// timer delivery).
    Hop {
        /// The run, from the envelope.
        run_id: String,
        /// The envelope's `source_node_id`.
        source_node_id: String,
        /// Whether the emulator sent it.
        from_emulator: bool,
    },
    /// A timer armed.
    TimerArmed {
        /// The run.
        run_id: String,
        /// The timer node.
        node_id: String,
        /// When it is due, on the emulator's clock.
        due: GoTime,
        /// Which occurrence.
        occurrence: u64,
        /// The arming's fence.
        fence: u64,
    },
    /// A timer elapsed and its delivery was sent.
    TimerFired {
        /// The run.
        run_id: String,
        /// The timer node.
        node_id: String,
        /// Which occurrence.
        occurrence: u64,
        /// The service-in it resumed into.
        resume_node_id: String,
    },
    /// A timer delivery could not be published: it stays armed for the next advance, or, after
    /// the last attempt, its resume service-in fails.
    TimerUndelivered {
        /// The run.
        run_id: String,
        /// The timer node.
        node_id: String,
        /// Which occurrence.
        occurrence: u64,
        /// The service-in it was to resume into.
        resume_node_id: String,
        /// Why it could not be published.
        error: String,
        /// Whether the engine gave up on it (the last attempt).
        gave_up: bool,
    },
    /// A run settled: every path ended.
    RunSettled {
        /// The run.
        run_id: String,
        /// Its flow.
        flow_id: String,
        /// `succeeded` or `failed`.
        status: RunStatus,
    },
    /// The clock moved.
    ClockAdvanced {
        /// From this time (absent in recordings made before it was written down: then the clock
        /// of the last record before the advance's timers fired).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<GoTime>,
        /// To this time.
        to: GoTime,
    },
    /// A conformance violation (the offending bytes and headers are the record's).
    Violation {
        /// `error` or `warning`.
        severity: String,
        /// The rule's stable code.
        rule: String,
        /// What is wrong.
        message: String,
    },
}

impl RecordKind {
    /// The run the record is about, when it is about one (a completion event's or a DLQ entry's
    /// from its envelope; a hop's may be empty when its envelope did not decode).
    #[must_use]
    pub fn run_id(&self) -> Option<&str> {
        match self {
            RecordKind::Completion { event } => Some(&event.flow_run_id),
            RecordKind::Dlq { entry, .. } => entry.as_ref().map(|e| &*e.envelope.flow_run_id),
            RecordKind::Resend { run_id, .. }
            | RecordKind::Trigger { run_id, .. }
            | RecordKind::Hop { run_id, .. }
            | RecordKind::TimerArmed { run_id, .. }
            | RecordKind::TimerFired { run_id, .. }
            | RecordKind::TimerUndelivered { run_id, .. }
            | RecordKind::RunSettled { run_id, .. } => Some(run_id),
            RecordKind::Registration { .. }
            | RecordKind::FlowsWithheld { .. }
            | RecordKind::Fetch { .. }
            | RecordKind::Heartbeat { .. }
            | RecordKind::Deploy { .. }
            | RecordKind::DeployRefused { .. }
            | RecordKind::Broadcast { .. }
            | RecordKind::ClockAdvanced { .. }
            | RecordKind::Violation { .. } => None,
        }
    }

    /// The kind's name, as in the JSON `kind` field.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            RecordKind::Registration { .. } => "registration",
            RecordKind::FlowsWithheld { .. } => "flows_withheld",
            RecordKind::Fetch { .. } => "fetch",
            RecordKind::Heartbeat { .. } => "heartbeat",
            RecordKind::Completion { .. } => "completion",
            RecordKind::Dlq { .. } => "dlq",
            RecordKind::Resend { .. } => "resend",
            RecordKind::Deploy { .. } => "deploy",
            RecordKind::DeployRefused { .. } => "deploy_refused",
            RecordKind::Broadcast { .. } => "broadcast",
            RecordKind::Trigger { .. } => "trigger",
            RecordKind::Hop { .. } => "hop",
            RecordKind::TimerArmed { .. } => "timer_armed",
            RecordKind::TimerFired { .. } => "timer_fired",
            RecordKind::TimerUndelivered { .. } => "timer_undelivered",
            RecordKind::RunSettled { .. } => "run_settled",
            RecordKind::ClockAdvanced { .. } => "clock_advanced",
            RecordKind::Violation { .. } => "violation",
        }
    }
}

/// A registered service as the emulator sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServiceState {
    /// Its current manifest: its bytes once and an outline without schemas (see
    /// [`KeptManifest`]), shared with the conformance checker's registry.
    pub manifest: KeptManifest,
    /// When it (last) registered, wall clock.
    pub registered_at: GoTime,
    /// How many times it registered.
    pub registrations: u32,
    /// The last heartbeat, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<Heartbeat>,
    /// When the last heartbeat arrived, wall clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<GoTime>,
    /// Heartbeats received.
    pub heartbeats: u64,
    /// Distinct `started_at` values seen: one per replica (start).
    pub replicas: BTreeMap<String, GoTime>,
}

/// A service's liveness from its heartbeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// Registered, no heartbeat yet.
    Registered,
    /// A heartbeat within two intervals.
    Live,
    /// The last heartbeat is two to three intervals old.
    Late,
    /// No heartbeat for three intervals.
    Down,
    /// The last heartbeat said `shutting_down`.
    ShuttingDown,
}

impl ServiceState {
    /// Liveness at `now` (wall clock) for heartbeats expected every `interval`.
    #[must_use]
    pub fn liveness(&self, now: GoTime, interval: std::time::Duration) -> Liveness {
        let (Some(hb), Some(seen)) = (&self.last_heartbeat, self.last_seen) else {
            return Liveness::Registered;
        };
        if hb.shutting_down {
            return Liveness::ShuttingDown;
        }
        let age_ns = now.unix_nanos() - seen.unix_nanos();
        let interval_ns = interval.as_nanos() as i128;
        if age_ns <= 2 * interval_ns {
            Liveness::Live
        } else if age_ns <= 3 * interval_ns {
            Liveness::Late
        } else {
            Liveness::Down
        }
    }
}
