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
use triggers_sdk::wire::header::{Envelope, Headers, Traceparent, names};
use triggers_sdk::wire::subject::{self, LockedSubject};
use triggers_sdk::wire::{GoTime, Manifest};

mod object;
mod shapes;
#[cfg(test)]
mod tests;

/// How bad a violation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
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
    /// The message's headers, as received.
    pub headers: Vec<(String, String)>,
    /// The message's payload, verbatim (serialised as UTF-8, invalid bytes replaced).
    #[serde(serialize_with = "lossy_utf8")]
    pub payload: Vec<u8>,
}

impl Violation {
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

fn lossy_utf8<S: serde::Serializer>(payload: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&String::from_utf8_lossy(payload))
}

/// Who published a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The emulator itself: broadcasts, register replies, trigger and timer deliveries. Not judged.
    Emulator,
    /// Anything else: the SDKs under test.
    Peer,
}

/// What the checker knows of the emulator's state.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// Registered services by name, with their current manifest.
    pub manifests: &'a BTreeMap<String, Manifest>,
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
        "time_not_go_text",
        Severity::Error,
        "a time that is not RFC 3339, or not byte-equal to Go's text for that instant",
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
        "triplet_leaked",
        Severity::Error,
        "a peer's hop carrying Durable Timer triplet headers (SDKs strip them before every hop)",
    ),
];

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
    if origin == Origin::Emulator {
        return Vec::new();
    }
    let mut report = Report {
        subject,
        headers,
        payload,
        found: Vec::new(),
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
    report.found
}

/// The message being judged and the violations found so far.
struct Report<'m> {
    subject: &'m str,
    headers: &'m Headers,
    payload: &'m [u8],
    found: Vec<Violation>,
}

impl Report<'_> {
    fn push(&mut self, rule: &'static str, message: impl Into<String>) {
        let severity = rule_info(rule).map(|(s, _)| s);
        debug_assert!(severity.is_some(), "rule {rule} is not in RULES");
        self.found.push(Violation {
            severity: severity.unwrap_or(Severity::Error),
            rule,
            subject: self.subject.to_owned(),
            message: message.into(),
            headers: self
                .headers
                .iter()
                .map(|(n, v)| (n.to_owned(), v.to_owned()))
                .collect(),
            payload: self.payload.to_vec(),
        });
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
            if !envelope.trace_id.is_empty()
                && let Ok(tp) = Traceparent::parse(&envelope.traceparent)
                && tp.trace_id != envelope.trace_id
            {
                report.push(
                    "traceparent_mismatch",
                    format!(
                        "{} names trace {}, {} says {}: one hop is one trace",
                        names::TRACEPARENT,
                        tp.trace_id,
                        names::TRACE_ID,
                        envelope.trace_id
                    ),
                );
            }
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
        let present: Vec<&str> = headers
            .iter()
            .map(|(n, _)| n)
            .filter(|n| {
                names::DURABLE_TIMER_TRIPLET
                    .iter()
                    .any(|t| t.eq_ignore_ascii_case(n))
            })
            .collect();
        report.push(
            "triplet_leaked",
            format!(
                "a peer's hop carries the Durable Timer private triplet ({}); it comes only on the \
                 engine's trusted deliveries and the SDK strips it before handlers and every \
                 onward hop",
                present.join(", ")
            ),
        );
    }
}
