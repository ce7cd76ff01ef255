//! The conformance checker: judges every message an SDK (in any language) sends against the locked
//! wire contract (`docs/wire.md`, `triggers_sdk::wire`) and reports what breaks it.
//!
//! It is pure: no I/O, no NATS, no clock. The emulator hands [`check`] every message it sees on
//! `triggers.v2.>` and on the services' inbound subjects, with a [`Context`] of what is registered,
//! and records the [`Violation`]s. Each violation names a stable rule from [`RULES`], says what is
//! wrong and what Go (the byte reference) writes instead, and carries the offending message verbatim.
//!
//! What is judged:
//! - **subjects**: anything under `triggers.v2.` outside the locked table; a peer publishing on the
//!   orchestrator's `triggers.v2.dlq.source.*` or on a broadcast subject;
//! - **headers**, on every message: contract header names in another spelling (`Nats-Msg-Id`
//!   misspelt is an error: the server ignores it for dedup), unknown `X-Triggers-*` names, repeats;
//! - **JSON shapes** (manifest registration, heartbeat, completion event, DLQ entry): the exact field
//!   set, field types, time text byte-equal to Go's, the recomputed manifest hash, the rules of each
//!   shape, and finally the bytes themselves against the Go encoding of the decoded value: a Go SDK
//!   is byte-identical; another SDK that orders keys differently gets a warning, not an error;
//! - **DLQ publishes**: the `Nats-Msg-Id` form `<idempotency_key>:dlq:<unix_ns>`, the subject's tail
//!   against the service's manifest, the entry's `kind` against the subject;
//! - **hops** onto a service's inbound subject: a valid envelope, `Nats-Msg-Id` equal to the
//!   idempotency key, no leaked Durable Timer triplet.
//!
//! What the emulator publishes itself ([`Origin::Emulator`]) is not judged.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use triggers_sdk::wire::durable_timer;

use crate::recorder::{Body, SharedHeaders, share_headers};
use triggers_sdk::wire::GoTime;
use triggers_sdk::wire::header::{Envelope, Headers, Traceparent, names};
use triggers_sdk::wire::subject::{self, LockedSubject};

mod object;
pub(crate) use object::clip;
pub(crate) mod runs;
mod shapes;
#[cfg(test)]
mod tests;

/// How bad a violation is.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The orchestrator (or JetStream) would misread, refuse or mishandle the message.
    Error,
    /// The message works, but is not what the Go reference writes, or looks like a mistake.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One way a message breaks the contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Error or warning; always the severity [`RULES`] gives the rule.
    pub severity: Severity,
    /// The rule broken: a stable snake_case code listed in [`RULES`].
    pub rule: &'static str,
    /// The subject the message was published on.
    pub subject: String,
    /// What is wrong, where, and what Go or the contract expects instead.
    pub message: String,
    /// The message's headers, as received (shared by every violation of the message).
    pub headers: SharedHeaders,
    /// The message's payload, verbatim (shared; serialised as UTF-8, invalid bytes replaced).
    pub payload: Body,
}

impl Violation {
    /// A violation of `rule` (whose severity [`RULES`] gives).
    pub(crate) fn new(
        rule: &'static str,
        subject: &str,
        message: String,
        headers: SharedHeaders,
        payload: Body,
    ) -> Self {
        let severity = rule_info(rule).map(|(s, _)| s);
        debug_assert!(severity.is_some(), "rule {rule} is not in RULES");
        Violation {
            severity: severity.unwrap_or(Severity::Error),
            rule,
            subject: subject.to_owned(),
            message,
            headers,
            payload,
        }
    }

    /// Whether it is an [`Severity::Error`].
    #[must_use]
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}[{}] on {}: {}",
            self.severity, self.rule, self.subject, self.message
        )
    }
}

/// Who published a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The emulator itself: broadcasts, register replies, trigger and timer deliveries. Not judged.
    Emulator,
    /// Anything else: the SDKs under test.
    Peer,
}

/// Registered services by name, each with its current manifest (shared, so a new snapshot of the
/// registry copies pointers, not manifests; kept as bytes and an outline, see [`KeptManifest`](crate::KeptManifest)).
pub type Manifests = BTreeMap<String, crate::KeptManifest>;

/// What the checker knows of the emulator's state.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// Registered services by name, with their current manifest.
    pub manifests: &'a Manifests,
    /// Inbound NATS subject -> the service that owns it (from the services' NATS sources).
    pub inbound: &'a BTreeMap<String, String>,
}

/// Every rule: its code, its severity, and what it means (one line, for the docs).
pub const RULES: &[(&str, Severity, &str)] = &[
    // Subjects.
    (
        "unknown_subject",
        Severity::Warning,
        "a subject under triggers.v2. that is not in the locked table (nor an inbound subject)",
    ),
    (
        "source_dlq_publish",
        Severity::Error,
        "a peer published on triggers.v2.dlq.source.*, which the orchestrator owns",
    ),
    (
        "peer_broadcast",
        Severity::Warning,
        "a peer published on triggers.v2.flow.broadcast.*, which only the orchestrator publishes",
    ),
    (
        "emulator_stream_lost",
        Severity::Error,
        "one of the emulator's streams (TRIGGERS_EVENTS, TRIGGERS_DLQ) disappeared (a client deleted it through the JetStream API): what was published meanwhile is lost; the emulator made it again",
    ),
    // Headers.
    (
        "header_spelling",
        Severity::Warning,
        "a contract header in another spelling than the canonical one (read ignoring case, written canonically)",
    ),
    (
        "nats_msg_id_spelling",
        Severity::Error,
        "Nats-Msg-Id spelt otherwise: the NATS server ignores it for dedup",
    ),
    (
        "header_unknown",
        Severity::Warning,
        "an X-Triggers-* header that is not in the contract's table (an alias or a typo?)",
    ),
    (
        "header_repeated",
        Severity::Warning,
        "a contract header given more than once (readers take the first)",
    ),
    // JSON shapes, any.
    (
        "undecodable",
        Severity::Error,
        "the payload does not decode as the subject's shape (not JSON, not an object, a value Go refuses)",
    ),
    (
        "missing_field",
        Severity::Error,
        "a field the shape always carries is missing",
    ),
    (
        "unknown_field",
        Severity::Error,
        "a field outside the shape (heartbeat, completion event, DLQ entry, envelope)",
    ),
    (
        "duplicate_field",
        Severity::Error,
        "the same key twice in one object",
    ),
    (
        "wrong_type",
        Severity::Error,
        "a field of the wrong JSON type (a string for a number, a non-integer for an integer...)",
    ),
    (
        "null_field",
        Severity::Warning,
        "null where Go writes the zero value (\"\", 0, false, an object)",
    ),
    (
        "time_invalid",
        Severity::Error,
        "a time that is not RFC 3339: Go cannot read it",
    ),
    (
        "time_not_go_text",
        Severity::Warning,
        "a time Go reads (RFC 3339) whose text is not Go's for that instant (9 digits padded, as the spec tells the Python SDK to write; a +00:00 offset)",
    ),
    (
        "empty_omitempty_field",
        Severity::Warning,
        "an omitempty field present but empty: Go leaves it out",
    ),
    (
        "not_go_bytes",
        Severity::Warning,
        "the bytes differ from Go's encoding beyond the other rules (key order, number text, escaping, whitespace)",
    ),
    (
        "service_invalid",
        Severity::Error,
        "a service name that is empty, not one subject token, or reserved",
    ),
    (
        "service_unregistered",
        Severity::Warning,
        "a message from (or for) a service that has not registered",
    ),
    // Manifest registration.
    (
        "manifest_invalid",
        Severity::Error,
        "the manifest breaks a contract rule (one violation per issue, with its JSON path)",
    ),
    (
        "protocol_major",
        Severity::Error,
        "the manifest's protocol major is not 1",
    ),
    (
        "manifest_hash_mismatch",
        Severity::Error,
        "manifest_hash differs from the hash of the manifest",
    ),
    (
        "manifest_unknown_field",
        Severity::Warning,
        "a top-level manifest field outside the contract (Go ignores it; Go's SDK never writes it)",
    ),
    // Heartbeat.
    (
        "heartbeat_hash_form",
        Severity::Error,
        "a heartbeat manifest_hash that is not sha256:<64 lowercase hex>",
    ),
    (
        "heartbeat_hash_unknown",
        Severity::Warning,
        "a heartbeat manifest_hash that differs from the registered manifest's hash",
    ),
    (
        "heartbeat_time_order",
        Severity::Warning,
        "a heartbeat whose now is before its started_at",
    ),
    // Completion events.
    (
        "completion_has_result",
        Severity::Error,
        "a completion event carrying a result/output body (output travels through the flow graph)",
    ),
    (
        "completion_flow_mismatch",
        Severity::Error,
        "a completion event whose flow_id differs from its subject's token",
    ),
    (
        "completion_field_empty",
        Severity::Warning,
        "a completion event with an empty flow_run_id or node_id",
    ),
    (
        "completion_node_type_unknown",
        Severity::Warning,
        "a completion event whose node_type is not a node type of the flow model",
    ),
    (
        "completion_status_unknown",
        Severity::Warning,
        "a completion status other than succeeded, retrying, failed, skipped",
    ),
    (
        "completion_time_order",
        Severity::Warning,
        "a completion event that finished before it started",
    ),
    (
        "trace_id_form",
        Severity::Warning,
        "a completion event trace_id that is not 32 lowercase hex digits",
    ),
    // DLQ.
    (
        "dlq_msg_id_missing",
        Severity::Error,
        "a DLQ publish without Nats-Msg-Id: repeated writes do not collapse",
    ),
    (
        "dlq_msg_id_form",
        Severity::Error,
        "a DLQ Nats-Msg-Id not of the form <idempotency_key>:dlq:<unix_ns>",
    ),
    (
        "dlq_msg_id_key_mismatch",
        Severity::Error,
        "a DLQ Nats-Msg-Id whose key differs from the entry's envelope.idempotency_key",
    ),
    (
        "dlq_subject_unknown_tail",
        Severity::Error,
        "a DLQ subject whose tail is neither an action of the service nor a fallback kind",
    ),
    (
        "dlq_msg_id_time",
        Severity::Error,
        "a DLQ Nats-Msg-Id whose instant is not the entry's occurred_at in nanoseconds (milliseconds or seconds collapse distinct failures)",
    ),
    (
        "dlq_envelope_invalid",
        Severity::Error,
        "a DLQ entry's envelope with an empty run, flow, idempotency key or source node; for routing_failed (the hop's envelope, the service's own), a malformed trace or span id or traceparent (any other entry's envelope is the delivery's as read: a malformed trace it copied is not blamed)",
    ),
    (
        "dlq_body_double_encoded",
        Severity::Error,
        "a DLQ body that is a JSON string holding JSON: the body is the message's bytes as raw JSON",
    ),
    (
        "dlq_kind_mismatch",
        Severity::Warning,
        "a DLQ entry on a fallback-kind subject whose kind is not that kind",
    ),
    (
        "dlq_kind_unknown",
        Severity::Warning,
        "a DLQ entry on an action subject whose kind is not an action failure kind",
    ),
    // Hops.
    (
        "hop_envelope_invalid",
        Severity::Error,
        "a hop onto an inbound subject without a valid envelope in its headers",
    ),
    (
        "hop_msg_id",
        Severity::Error,
        "a hop whose Nats-Msg-Id is missing or differs from its idempotency key",
    ),
    (
        "traceparent_mismatch",
        Severity::Warning,
        "a hop whose traceparent names another trace than X-Triggers-Trace-Id",
    ),
    (
        "traceparent_invalid",
        Severity::Warning,
        "a hop whose traceparent does not parse (W3C Trace Context: ignored, the trace restarts)",
    ),
    (
        "triplet_leaked",
        Severity::Error,
        "a peer's hop carrying a Durable Timer triplet that is not valid for it (the payload hash is not this hop's bytes, the execution id is not the run's root), or on a run of no Durable Timer lineage",
    ),
    (
        "idempotency_key_reused",
        Severity::Error,
        "one idempotency key on distinct deliveries of a run (a node ran more times than its hops have keys): JetStream's dedup window drops all but the first",
    ),
    (
        "hop_traceparent_missing",
        Severity::Error,
        "a hop without a traceparent though its run has a trace id: the trace breaks at the hop",
    ),
    (
        "hop_version_mismatch",
        Severity::Error,
        "a hop whose flow_version is not its run's (the version of the delivery's envelope), e.g. the held flow's newest",
    ),
    (
        "hop_not_jetstream",
        Severity::Error,
        "a hop published as a plain NATS publish (no reply subject: no JetStream ack awaited), seen by the wire tap",
    ),
    (
        "handed_on_before_event",
        Severity::Error,
        "a hop published before the `succeeded` event of the node whose output it carries, seen by the wire tap",
    ),
    (
        "dlq_before_failed_event",
        Severity::Error,
        "an action's DLQ entry published before the action's `failed` completion event, seen by the wire tap",
    ),
    (
        "ack_before_reports",
        Severity::Error,
        "a delivery of the emulator's acked before all its reports (completion events, DLQ entries, hops) were published, seen by the wire tap",
    ),
    (
        "consumer_missing",
        Severity::Error,
        "a service heartbeats (its start-up done) without the durable consumer triggers-<service>-<safe-subject> on a NATS source subject",
    ),
    (
        "consumer_config",
        Severity::Error,
        "a service's durable consumer not as protocol.md §4 asks (ack_policy explicit, max_deliver and max_ack_pending bounded, ack_wait 1 s to a day, filtered on its source subject)",
    ),
    (
        "completion_node_unknown",
        Severity::Error,
        "a completion event for a node the run's flow does not have",
    ),
    (
        "completion_node_type_mismatch",
        Severity::Error,
        "a completion event whose node_type is not the type of its node in the flow",
    ),
    (
        "completion_status_invalid",
        Severity::Error,
        "a completion event with a status its node cannot report: `skipped` for a node other than a condition (only a condition stops a path); the run counts the node as failed",
    ),
    (
        "completion_service_mismatch",
        Severity::Error,
        "a completion event whose service is not the owner of its node (or for a timer, the engine's)",
    ),
    (
        "completion_version_mismatch",
        Severity::Error,
        "a completion event whose flow_version is not its run's",
    ),
    (
        "completion_trace_mismatch",
        Severity::Warning,
        "a completion event whose trace_id is not its run's",
    ),
    (
        "retries_exceed_policy",
        Severity::Error,
        "more retrying events for one execution of an action than its retry policy allows (max_attempts counts every attempt, the first included); an event names no execution, so when a node runs several times at once (a fan-in without a join, timer occurrences fired together) the retries no finished execution accounts for are held against all those under way",
    ),
    (
        "service_in_unreported",
        Severity::Error,
        "a service ran the nodes after a service-in of its own, reached by a hop, without reporting the service-in: the run waits on it forever",
    ),
    (
        "hop_flow_unknown",
        Severity::Error,
        "a hop naming a flow (or a version) that is not deployed",
    ),
    (
        "hop_node_unknown",
        Severity::Error,
        "a hop whose source_node_id is no node of its flow",
    ),
    (
        "heartbeat_version_mismatch",
        Severity::Warning,
        "a heartbeat whose service_version is not the registered one",
    ),
    (
        "completion_unexpected",
        Severity::Warning,
        "a completion event for a node nothing had reached: a duplicate execution (a redelivery ran it again) or a node the flow did not route to",
    ),
    (
        "delivery_deduplicated",
        Severity::Error,
        "JetStream dropped one of the emulator's own deliveries as a duplicate: a distinct delivery was lost",
    ),
    (
        "capabilities_not_canonical",
        Severity::Warning,
        "runtime_capabilities not sorted and de-duplicated on the wire (the hash sorts them; Go's SDK writes them sorted)",
    ),
    (
        "manifest_lenient",
        Severity::Warning,
        "a manifest the orchestrator accepts though it is not what a careful SDK writes (a null schema, an empty service_version): accepted, reported",
    ),
    (
        "violations_capped",
        Severity::Warning,
        "more violations in one message than are kept per message (16); the rest are counted, not kept",
    ),
];

/// Violations kept per message: a message with thousands of bad headers must not take the
/// emulator's memory with it.
pub const MAX_PER_MESSAGE: usize = 16;

/// The severity and description of `rule`, if it is one of [`RULES`].
#[must_use]
pub fn rule_info(rule: &str) -> Option<(Severity, &'static str)> {
    RULES
        .iter()
        .find(|(code, _, _)| *code == rule)
        .map(|&(_, severity, description)| (severity, description))
}

/// Judges one message against the contract; every violation found, in the order found.
///
/// `subject`, `headers` and `payload` are the message as it crossed the wire. Messages of
/// [`Origin::Emulator`] are not judged.
#[must_use]
pub fn check(
    ctx: &Context<'_>,
    subject: &str,
    headers: &Headers,
    payload: &[u8],
    origin: Origin,
) -> Vec<Violation> {
    check_body(ctx, subject, headers, &Body::from(payload), origin).violations
}

/// What [`check_body`] found, and what it decoded on the way (so that the one recording the
/// message need not decode it again).
#[derive(Debug, Default)]
pub(crate) struct Checked {
    pub(crate) violations: Vec<Violation>,
    pub(crate) decoded: Option<Decoded>,
}

/// The value a judged message decoded to, when it decoded: one per message.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// A message on an inbound subject: its envelope, from its headers.
    Envelope(Envelope),
    Heartbeat(triggers_sdk::wire::Heartbeat),
    Event(triggers_sdk::wire::CompletionEvent),
    Dlq(triggers_sdk::wire::DlqEntry),
}

/// What the checker decoded, picked by `pick` (`Decoded::event`...), else `decode`d here: a message
/// the checker did not decode (the emulator's own, or one that failed) is decoded by its reader.
pub(crate) fn decoded_or<T, E>(
    decoded: Option<Decoded>,
    pick: fn(Decoded) -> Option<T>,
    decode: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    decoded.and_then(pick).map_or_else(decode, Ok)
}

impl Decoded {
    pub(crate) fn envelope(self) -> Option<Envelope> {
        match self {
            Decoded::Envelope(envelope) => Some(envelope),
            _ => None,
        }
    }

    pub(crate) fn heartbeat(self) -> Option<triggers_sdk::wire::Heartbeat> {
        match self {
            Decoded::Heartbeat(hb) => Some(hb),
            _ => None,
        }
    }

    pub(crate) fn event(self) -> Option<triggers_sdk::wire::CompletionEvent> {
        match self {
            Decoded::Event(event) => Some(event),
            _ => None,
        }
    }

    pub(crate) fn dlq(self) -> Option<triggers_sdk::wire::DlqEntry> {
        match self {
            Decoded::Dlq(entry) => Some(entry),
            _ => None,
        }
    }
}

/// [`check`] of a message whose bytes are already shared: its violations share them.
pub(crate) fn check_body(
    ctx: &Context<'_>,
    subject: &str,
    headers: &Headers,
    body: &Body,
    origin: Origin,
) -> Checked {
    if origin == Origin::Emulator {
        return Checked::default();
    }
    let mut report = Report {
        subject,
        headers,
        payload: body.as_bytes(),
        body: body.clone(),
        shared: None,
        found: Vec::new(),
        more: 0,
        decoded: None,
    };
    check_header_names(&mut report);
    let inbound = ctx.inbound.get(subject);
    if let Some(service) = inbound {
        check_hop(&mut report, service);
    }
    match LockedSubject::parse(subject) {
        Some(LockedSubject::ManifestRegister) => shapes::manifest(&mut report),
        // The request body of a fetch is not part of the contract.
        Some(LockedSubject::ManifestFetch) => {}
        Some(LockedSubject::Heartbeat) => shapes::heartbeat(ctx, &mut report),
        Some(LockedSubject::FlowEvents { flow_id }) => {
            shapes::completion(ctx, &mut report, &flow_id);
        }
        Some(LockedSubject::FlowBroadcast { service }) => report.push(
            "peer_broadcast",
            format!(
                "a peer published a broadcast (for {service:?}); only the orchestrator publishes on \
                 triggers.v2.flow.broadcast.*, SDKs subscribe"
            ),
        ),
        Some(LockedSubject::Dlq { service, .. }) if service == "source" => report.push(
            "source_dlq_publish",
            "triggers.v2.dlq.source.* is the orchestrator's; an SDK dead-letters on \
             triggers.v2.dlq.<service>.<action|kind>",
        ),
        Some(LockedSubject::Dlq { service, tail }) => {
            shapes::dlq(ctx, &mut report, &service, &tail);
        }
        None if subject.starts_with(subject::PREFIX) && inbound.is_none() => report.push(
            "unknown_subject",
            "not a subject of the locked table (manifest.register|fetch, heartbeat, \
             flow.events.<flow_id>, flow.broadcast.<service|all>, dlq.<service>.<action|kind>); \
             anything of ours lives outside triggers.v2.",
        ),
        None => {}
    }
    let decoded = report.decoded.take();
    Checked {
        violations: report.finish(),
        decoded,
    }
}

/// The message being judged and the violations found so far.
struct Report<'m> {
    subject: &'m str,
    headers: &'m Headers,
    payload: &'m [u8],
    body: Body,
    /// The message's headers, copied once for all its violations, and its bytes.
    shared: Option<(SharedHeaders, Body)>,
    found: Vec<Violation>,
    /// Violations beyond [`MAX_PER_MESSAGE`].
    more: usize,
    /// What the message decoded to, when it did.
    decoded: Option<Decoded>,
}

impl Report<'_> {
    fn push(&mut self, rule: &'static str, message: impl Into<String>) {
        if self.found.len() >= MAX_PER_MESSAGE {
            self.more += 1;
            return;
        }
        let (headers, payload) = self
            .shared
            .get_or_insert_with(|| (share_headers(self.headers), self.body.clone()))
            .clone();
        self.found.push(Violation::new(
            rule,
            self.subject,
            message.into(),
            headers,
            payload,
        ));
    }

    fn finish(mut self) -> Vec<Violation> {
        if self.more > 0 {
            let more = self.more;
            self.found.truncate(MAX_PER_MESSAGE - 1);
            let (headers, payload) = self.shared.clone().unwrap_or_default();
            self.found.push(Violation::new(
                "violations_capped",
                self.subject,
                format!(
                    "{} more violation(s) of this message are not kept (at most {MAX_PER_MESSAGE} per message)",
                    more + 1
                ),
                headers,
                payload,
            ));
        }
        self.found
    }

    /// How many violations have been found so far.
    fn count(&self) -> usize {
        self.found.len()
    }
}

/// Header names: canonical spelling, no unknown `X-Triggers-*` names, no repeats.
fn check_header_names(report: &mut Report<'_>) {
    const PREFIX: &str = "x-triggers-";
    let mut seen: BTreeMap<&'static str, usize> = BTreeMap::new();
    for (name, _) in report.headers.iter() {
        match names::canonical(name) {
            Some(canonical) => {
                *seen.entry(canonical).or_default() += 1;
                if canonical == names::NATS_MSG_ID && name != canonical {
                    report.push(
                        "nats_msg_id_spelling",
                        format!(
                            "header {name:?} must be spelt exactly {canonical:?}: the NATS server \
                             ignores any other spelling for dedup"
                        ),
                    );
                } else if name != canonical {
                    report.push(
                        "header_spelling",
                        format!(
                            "header {name:?} is read, but the contract writes it {canonical:?}"
                        ),
                    );
                }
            }
            None if name
                .get(..PREFIX.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(PREFIX)) =>
            {
                report.push(
                    "header_unknown",
                    format!(
                        "header {name:?} is not in the contract; the X-Triggers-* headers are {}",
                        names::ALL
                            .iter()
                            .filter(|n| n.starts_with("X-"))
                            .copied()
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
            None => {}
        }
    }
    for (name, count) in seen {
        if count > 1 {
            report.push(
                "header_repeated",
                format!("header {name} is given {count} times; readers take the first"),
            );
        }
    }
}

/// A hop onto `service`'s inbound subject.
fn check_hop(report: &mut Report<'_>, service: &str) {
    let headers = report.headers;
    match Envelope::from_headers(headers) {
        Err(e) => report.push(
            "hop_envelope_invalid",
            format!(
                "a hop onto {service}'s inbound subject must carry a valid envelope: {e} \
                 (required: {}, {}, {}, {}, {})",
                names::FLOW_RUN_ID,
                names::FLOW_ID,
                names::FLOW_VERSION,
                names::IDEMPOTENCY_KEY,
                names::SOURCE_NODE_ID
            ),
        ),
        Ok(envelope) => {
            // The envelope keeps a traceparent only if it parsed: one present but not kept did
            // not (parsed again here only then, for the reason).
            if envelope.traceparent.is_empty()
                && let Some(tp) = headers.get(names::TRACEPARENT)
                && !tp.is_empty()
                && let Err(e) = Traceparent::check(tp)
            {
                report.push(
                    "traceparent_invalid",
                    format!(
                        "{} {tp:?} does not parse ({e}); readers ignore it and the trace restarts",
                        names::TRACEPARENT
                    ),
                );
            }
            if let Some(text) = headers.get(names::EMITTED_AT) {
                // from_headers accepted it, so it is RFC 3339; Go's text is stricter.
                if let Ok(t) = GoTime::parse(text)
                    && t.to_string() != text
                {
                    report.push(
                        "time_not_go_text",
                        format!(
                            "header {} is {text:?}; Go writes {:?}",
                            names::EMITTED_AT,
                            t.to_string()
                        ),
                    );
                }
            }
            // A traceparent the envelope kept is well formed: its trace id is at 3..35.
            if !envelope.trace_id.is_empty()
                && let Some(trace_id) = envelope.traceparent.get(3..35)
                && trace_id != envelope.trace_id
            {
                report.push(
                    "traceparent_mismatch",
                    format!(
                        "{} names trace {}, {} says {}: one hop is one trace",
                        names::TRACEPARENT,
                        trace_id,
                        names::TRACE_ID,
                        envelope.trace_id
                    ),
                );
            }
            report.decoded = Some(Decoded::Envelope(envelope));
        }
    }
    let key = headers.get(names::IDEMPOTENCY_KEY).unwrap_or_default();
    match headers.get(names::NATS_MSG_ID) {
        None => report.push(
            "hop_msg_id",
            format!(
                "a hop carries no {}; JetStream dedups hops on it: set it to the idempotency key \
                 ({})",
                names::NATS_MSG_ID,
                if key.is_empty() {
                    format!("the {} header", names::IDEMPOTENCY_KEY)
                } else {
                    format!("{key:?}")
                }
            ),
        ),
        Some(id) if id != key => report.push(
            "hop_msg_id",
            format!(
                "{} is {id:?}; on a hop it is the idempotency key, {key:?}",
                names::NATS_MSG_ID
            ),
        ),
        Some(_) => {}
    }
    if durable_timer::has_triplet(headers) {
        // Decision 9: a triplet forwarded on an internal hop of a Durable Timer lineage is
        // accepted when it is valid for that hop; any other is flagged.
        let run = headers.get(names::FLOW_RUN_ID).unwrap_or_default();
        let flow = headers.get(names::FLOW_ID).unwrap_or_default();
        let problem = match durable_timer::read_triplet(headers, report.payload) {
            Err(e) => Some(e.to_string()),
            Ok(Some(ctx)) if ctx.root_execution_id() != run => Some(format!(
                "its root_execution_id {:?} is not the hop's run {run:?}",
                ctx.root_execution_id()
            )),
            Ok(Some(ctx)) if ctx.flow_id() != flow => Some(format!(
                "its flow_id {:?} is not the hop's flow {flow:?}",
                ctx.flow_id()
            )),
            Ok(_) => None,
        };
        if let Some(problem) = problem {
            report.push(
                "triplet_leaked",
                format!(
                    "a peer's hop carries the Durable Timer private triplet, not valid for this hop: {problem}; an SDK strips the triplet before handlers and onward hops, or forwards one valid for the hop (the payload hash of this hop's bytes, the execution id of the root)"
                ),
            );
        }
    }
}
