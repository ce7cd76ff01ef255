//! Every NATS subject and JetStream name of the contract, as typed builders.
//!
//! Names that become subject tokens (services, actions, flows) are checked here so that no builder
//! can produce a subject outside the table: in particular none can produce
//! `triggers.v2.dlq.source.<id>`, which the orchestrator owns.

use std::fmt;

use crate::error::SubjectError;

/// Manifest registration, request/reply, 10 s timeout.
pub const MANIFEST_REGISTER: &str = "triggers.v2.manifest.register";
/// Pull the current manifest, request/reply.
pub const MANIFEST_FETCH: &str = "triggers.v2.manifest.fetch";
/// Heartbeats, one every 5 s from each replica.
pub const HEARTBEAT: &str = "triggers.v2.heartbeat";
/// Cross-service flow updates, received by every replica of every service.
pub const FLOW_BROADCAST_ALL: &str = "triggers.v2.flow.broadcast.all";
/// Every completion event of every flow.
pub const FLOW_EVENTS_ALL: &str = "triggers.v2.flow.events.>";
/// Every DLQ subject (the SDKs' and the orchestrator's).
pub const DLQ_ALL: &str = "triggers.v2.dlq.>";
/// Everything in the locked namespace.
pub const ALL: &str = "triggers.v2.>";
/// The prefix of every locked subject.
pub const PREFIX: &str = "triggers.v2.";
/// The environment variable that overrides the inbound stream name. The wire module never reads
/// it: callers pass its value to [`stream_name`].
pub const SOURCE_STREAM_ENV: &str = "TRIGGERS_NATS_SOURCE_STREAM";

const FLOW_EVENTS_PREFIX: &str = "triggers.v2.flow.events.";
const FLOW_BROADCAST_PREFIX: &str = "triggers.v2.flow.broadcast.";
/// What every DLQ subject begins with: `triggers.v2.dlq.<service>.<action or kind>`.
pub const DLQ_PREFIX: &str = "triggers.v2.dlq.";

/// Service names that would collide with a locked subject: `all` (the cross-service broadcast) and
/// `source` (the orchestrator's source DLQ).
pub const RESERVED_SERVICE_NAMES: [&str; 2] = ["all", "source"];

/// The DLQ kinds for a message that has no action context: its subject is
/// `triggers.v2.dlq.<service>.<kind>`. Action names may not take these names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FallbackKind {
    /// The body is not JSON.
    InvalidJson,
    /// The message carries no envelope headers.
    MissingEnvelope,
    /// Envelope headers are present but malformed (a bad traceparent, retry count, time...).
    InvalidEnvelope,
    /// The envelope names a flow this service does not hold.
    UnknownFlow,
    /// The envelope's source node is not in the flow, or has no successor here.
    UnknownNode,
    /// A mapping, condition, lookup or output node failed (it has no action DLQ of its own), or
    /// handing its output on failed.
    NodeFailed,
    /// The message could not be handled in as many deliveries as its consumer allows
    /// (`max_deliver`): each time, an outcome could not be reported.
    DeliveryExhausted,
}

impl FallbackKind {
    /// Every fallback kind.
    pub const ALL: [FallbackKind; 7] = [
        FallbackKind::InvalidJson,
        FallbackKind::MissingEnvelope,
        FallbackKind::InvalidEnvelope,
        FallbackKind::UnknownFlow,
        FallbackKind::UnknownNode,
        FallbackKind::NodeFailed,
        FallbackKind::DeliveryExhausted,
    ];

    /// The subject token and the `kind` field of the DLQ entry.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            FallbackKind::InvalidJson => "invalid_json",
            FallbackKind::MissingEnvelope => "missing_envelope",
            FallbackKind::InvalidEnvelope => "invalid_envelope",
            FallbackKind::UnknownFlow => "unknown_flow",
            FallbackKind::UnknownNode => "unknown_node",
            FallbackKind::NodeFailed => "node_failed",
            FallbackKind::DeliveryExhausted => "delivery_exhausted",
        }
    }

    /// The kind whose name is `s`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for FallbackKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Checks that `value` can be one subject token and one JetStream name: not empty, no whitespace or
/// control characters, none of `.` `*` `>` (subject syntax) and `/` `\` (JetStream names are file
/// names on the server).
///
/// # Errors
/// [`SubjectError::InvalidToken`] naming `what` and the offending character.
pub fn check_token(what: &'static str, value: &str) -> Result<(), SubjectError> {
    let reason = if value.is_empty() {
        Some("it is empty".to_owned())
    } else {
        value
            .chars()
            .find(|c| {
                c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>' | '/' | '\\')
            })
            .map(|c| format!("it contains {c:?}"))
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(SubjectError::InvalidToken {
            what,
            value: clipped(value),
            reason,
        }),
    }
}

/// At most [`MAX_NAME_LEN`] bytes.
fn check_len(what: &'static str, value: &str) -> Result<(), SubjectError> {
    if value.len() > MAX_NAME_LEN {
        return Err(SubjectError::InvalidToken {
            what,
            value: clipped(value),
            reason: format!("it is {} bytes long; at most {MAX_NAME_LEN}", value.len()),
        });
    }
    Ok(())
}

/// Checks a service name: a valid token ([`check_token`]) of at most [`MAX_NAME_LEN`] bytes, and
/// not a reserved name.
///
/// # Errors
/// [`SubjectError::InvalidToken`] or [`SubjectError::Reserved`].
pub fn check_service(service: &str) -> Result<(), SubjectError> {
    check_token("service", service)?;
    check_len("service", service)?;
    if RESERVED_SERVICE_NAMES.contains(&service) {
        return Err(SubjectError::Reserved {
            what: "service",
            value: service.to_owned(),
            reason: "it would collide with a locked subject (triggers.v2.flow.broadcast.all, triggers.v2.dlq.source.*)",
        });
    }
    Ok(())
}

/// Checks an action name: a valid token of at most [`MAX_NAME_LEN`] bytes and not one of the [`FallbackKind`] names, whose DLQ
/// subjects it would share.
///
/// # Errors
/// [`SubjectError::InvalidToken`] or [`SubjectError::Reserved`].
pub fn check_action(action: &str) -> Result<(), SubjectError> {
    check_token("action", action)?;
    check_len("action", action)?;
    if FallbackKind::parse(action).is_some() {
        return Err(SubjectError::Reserved {
            what: "action",
            value: action.to_owned(),
            reason: "it is a DLQ fallback kind, and would share its subject",
        });
    }
    Ok(())
}

/// The families of the locked table, which only the orchestrator and the SDKs' own machinery
/// publish on: registration and fetch, heartbeats, completion events, broadcasts, DLQs
/// (`triggers.v2.dlq.source.*` included).
const LOCKED_FAMILIES: [&str; 4] = [
    "triggers.v2.manifest.",
    "triggers.v2.heartbeat.",
    "triggers.v2.flow.",
    "triggers.v2.dlq.",
];

/// The longest subject a flow may send to.
pub const MAX_TARGET_LEN: usize = 1024;

/// Checks a subject a hop is sent to (a service's inbound subject): a well-formed subject to
/// publish on (non-empty tokens, no wildcard, no whitespace or control character, at most
/// [`MAX_TARGET_LEN`] bytes) that is none of the locked table's subjects (nor below them), no
/// NATS system subject (`$JS.`, `$SYS.`... all start with `$`) and not in the emulator's control
/// namespace (`triggerslab.`). An inbound subject may be under `triggers.v2.` otherwise: the
/// spec's own example declares `triggers.v2.mysvc.inbound`.
///
/// Release refuses a flow with such a target, and an SDK refuses it again at runtime, so that a
/// forged broadcast cannot make a service publish on a locked subject (say
/// `triggers.v2.dlq.source.<id>`).
///
/// # Errors
/// [`SubjectError::InvalidToken`] for a malformed subject, [`SubjectError::Reserved`] for a
/// locked one.
pub fn check_publish_target(subject: &str) -> Result<(), SubjectError> {
    let invalid = |reason: String| {
        Err(SubjectError::InvalidToken {
            what: "target subject",
            value: subject.to_owned(),
            reason,
        })
    };
    if subject.len() > MAX_TARGET_LEN {
        return invalid(format!(
            "it is {} bytes long; at most {MAX_TARGET_LEN}",
            subject.len()
        ));
    }
    if let Some(c) = subject
        .chars()
        .find(|c| c.is_whitespace() || c.is_control())
    {
        return invalid(format!("it contains {c:?}"));
    }
    if subject.split('.').any(str::is_empty) {
        return invalid(
            "it has an empty token (check for a leading, trailing or double '.')".into(),
        );
    }
    if subject.split('.').any(|t| t == "*" || t == ">") {
        return invalid("it has a wildcard token: a message is published on one subject".into());
    }
    let reserved = |reason: &'static str| {
        Err(SubjectError::Reserved {
            what: "target subject",
            value: subject.to_owned(),
            reason,
        })
    };
    if subject == HEARTBEAT || LOCKED_FAMILIES.iter().any(|f| subject.starts_with(f)) {
        return reserved(
            "it is a subject of the locked table (manifest, heartbeat, flow events and broadcasts, DLQs), which only the orchestrator and the SDKs' own machinery publish on",
        );
    }
    if subject.starts_with('$') {
        return reserved("subjects starting with $ belong to the NATS server ($JS, $SYS, $KV...)");
    }
    if subject.starts_with("triggerslab.") {
        return reserved("triggerslab. is the emulator's control namespace");
    }
    Ok(())
}

/// Checks the subject of an output node, which delivers out of the flow: as
/// [`check_publish_target`], and nowhere under `triggers.v2.` (the platform's namespace: a
/// message there without its envelope would look like the platform's own).
///
/// # Errors
/// As [`check_publish_target`].
pub fn check_output_target(subject: &str) -> Result<(), SubjectError> {
    check_publish_target(subject)?;
    if subject.starts_with(PREFIX) {
        return Err(SubjectError::Reserved {
            what: "output subject",
            value: subject.to_owned(),
            reason: "triggers.v2. is the platform's namespace; an output delivers out of the flow",
        });
    }
    Ok(())
}

/// `triggers.v2.flow.events.<flow_id>`: where completion events of a flow go.
///
/// # Errors
/// When `flow_id` is not a valid token.
pub fn flow_events(flow_id: &str) -> Result<String, SubjectError> {
    check_token("flow_id", flow_id)?;
    Ok(format!("{FLOW_EVENTS_PREFIX}{flow_id}"))
}

/// `triggers.v2.flow.broadcast.<service>`: flow updates for one service.
///
/// # Errors
/// When `service` is not a valid service name.
pub fn flow_broadcast(service: &str) -> Result<String, SubjectError> {
    check_service(service)?;
    Ok(format!("{FLOW_BROADCAST_PREFIX}{service}"))
}

/// `triggers.v2.dlq.<service>.<action>`: the per-action DLQ.
///
/// # Errors
/// When `service` or `action` is not valid (so `source` and the fallback kinds are refused).
pub fn dlq_action(service: &str, action: &str) -> Result<String, SubjectError> {
    check_service(service)?;
    check_action(action)?;
    Ok(format!("{DLQ_PREFIX}{service}.{action}"))
}

/// `triggers.v2.dlq.<service>.<kind>`: the DLQ for a message with no action context.
///
/// # Errors
/// When `service` is not a valid service name.
pub fn dlq_fallback(service: &str, kind: FallbackKind) -> Result<String, SubjectError> {
    check_service(service)?;
    Ok(format!("{DLQ_PREFIX}{service}.{}", kind.as_str()))
}

/// The inbound JetStream stream: `triggers-sources-<service>`, or the override when one is given
/// (the value of [`SOURCE_STREAM_ENV`], read by the caller).
///
/// # Errors
/// When `service` or the override is not a valid name.
pub fn stream_name(service: &str, override_name: Option<&str>) -> Result<String, SubjectError> {
    check_service(service)?;
    match override_name {
        Some(name) => {
            check_token("stream override", name)?;
            Ok(name.to_owned())
        }
        None => Ok(format!("triggers-sources-{service}")),
    }
}

/// The durable consumer for one source subject: `triggers-<service>-<safe-subject>`.
///
/// # Errors
/// When `service` is not valid or `subject` is empty.
pub fn consumer_name(service: &str, subject: &str) -> Result<String, SubjectError> {
    check_service(service)?;
    if subject.is_empty() {
        return Err(SubjectError::InvalidToken {
            what: "source subject",
            value: String::new(),
            reason: "it is empty".into(),
        });
    }
    Ok(format!("triggers-{service}-{}", safe_subject(subject)))
}

/// The longest service name and the longest action name, in bytes. Every name the emulator and
/// the SDKs build from them (`triggers-sources-<service>`, `triggers-<service>-<subject>`,
/// `triggers.v2.dlq.<service>.<action>`, the JetStream API subjects naming a stream) then stays
/// within JetStream's 255-byte names and far within the server's `max_control_line` (4 096
/// bytes): a request line the server refuses cuts the emulator off, for every service.
pub const MAX_NAME_LEN: usize = 128;

/// The longest NATS source subject a service may declare (as long as a hop target may be).
/// The emulator subscribes to each one, and a subscription line longer than the server's
/// `max_control_line` (4 096 bytes) makes the server cut the connection, at every reconnect.
pub const MAX_SOURCE_LEN: usize = MAX_TARGET_LEN;

/// The inbox prefix of the emulator's connection on a server `triggers-lab up` (or the harness)
/// starts: the replies to its JetStream requests arrive under it.
pub const EMULATOR_INBOX_PREFIX: &str = "_TRIGGERS_LAB_INBOX";

/// Subjects no service source may overlap (in either direction of a wildcard): a stream over
/// one of them would capture what the server, the platform or the emulator sends there (the
/// JetStream API and its replies, key-value traffic, registrations, control requests), and the
/// service could read it or answer in the owner's place. Each with why, for the error. (`>`
/// overlaps them all.)
/// Registration and the conformance checker both read this table (through [`check_source`]).
///
/// `triggers.v2.` itself is not reserved: the spec's own example declares
/// `triggers.v2.mysvc.inbound`; its locked families are.
pub const RESERVED_SOURCES: [(&str, &str); 11] = [
    (
        "$JS.>",
        "it overlaps $JS.>, the NATS server's JetStream API",
    ),
    (
        "$KV.>",
        "it overlaps $KV.>, the NATS server's key-value buckets (the emulator's DLQ ledger)",
    ),
    (
        "$SYS.>",
        "it overlaps $SYS.>, the NATS server's system subjects",
    ),
    ("$O.>", "it overlaps $O.>, the NATS server's object stores"),
    (
        "_INBOX.>",
        "it overlaps _INBOX.>, where NATS clients receive their replies",
    ),
    (
        "_TRIGGERS_LAB_INBOX.>",
        "it overlaps _TRIGGERS_LAB_INBOX.>, where the emulator receives its JetStream replies",
    ),
    (
        "triggers.v2.manifest.>",
        "it overlaps triggers.v2.manifest.>, where the orchestrator answers registrations and fetches",
    ),
    (
        "triggers.v2.heartbeat",
        "it overlaps triggers.v2.heartbeat, the services' heartbeats",
    ),
    (
        "triggers.v2.flow.>",
        "it overlaps triggers.v2.flow.>, the flows' completion events and broadcasts",
    ),
    (
        "triggers.v2.dlq.>",
        "it overlaps triggers.v2.dlq.>, the dead-letter queues",
    ),
    (
        "triggerslab.>",
        "it overlaps triggerslab.>, the emulator's control namespace",
    ),
];

/// Whether two subject patterns (with `*` and `>` wildcards) can match one same subject.
#[must_use]
pub fn patterns_overlap(a: &str, b: &str) -> bool {
    let (mut a, mut b) = (a.split('.'), b.split('.'));
    loop {
        match (a.next(), b.next()) {
            (None, None) => return true,
            (Some(">"), Some(_)) | (Some(_), Some(">")) => return true,
            (Some(x), Some(y)) if x == y || x == "*" || y == "*" => {}
            _ => return false,
        }
    }
}

/// Checks a NATS source subject a service declares (the subject its inbound stream captures):
/// a well-formed subject pattern (non-empty tokens, `>` last if at all, no whitespace or control
/// character) of at most [`MAX_SOURCE_LEN`] bytes, overlapping none of [`RESERVED_SOURCES`] and
/// not under a `$` subject of the server.
///
/// # Errors
/// [`SubjectError::InvalidToken`] for a malformed subject, [`SubjectError::Reserved`] for one
/// that overlaps a reserved subject.
pub fn check_source(subject: &str) -> Result<(), SubjectError> {
    let invalid = |reason: String| {
        Err(SubjectError::InvalidToken {
            what: "source subject",
            value: clipped(subject),
            reason,
        })
    };
    if subject.len() > MAX_SOURCE_LEN {
        return invalid(format!(
            "it is {} bytes long; at most {MAX_SOURCE_LEN}",
            subject.len()
        ));
    }
    if let Some(c) = subject
        .chars()
        .find(|c| c.is_whitespace() || c.is_control())
    {
        return invalid(format!("it contains {c:?}"));
    }
    let tokens: Vec<&str> = subject.split('.').collect();
    if tokens.iter().any(|t| t.is_empty()) {
        return invalid(
            "it has an empty token (check for a leading, trailing or double '.')".into(),
        );
    }
    if tokens[..tokens.len() - 1].contains(&">") {
        return invalid("'>' may only be its last token".into());
    }
    let reserved = |reason: &'static str| {
        Err(SubjectError::Reserved {
            what: "source subject",
            value: subject.to_owned(),
            reason,
        })
    };
    if tokens[0] == ">" {
        return reserved("it captures every subject, the emulator's and the server's included");
    }
    if tokens[0].starts_with('$') {
        return reserved("subjects starting with $ belong to the NATS server ($JS, $SYS, $KV...)");
    }
    if let Some((_, why)) = RESERVED_SOURCES
        .iter()
        .find(|(pattern, _)| patterns_overlap(subject, pattern))
    {
        return reserved(why);
    }
    Ok(())
}

/// A name as an error shows it: its first 200 bytes, and how long it was beyond that.
fn clipped(value: &str) -> String {
    if value.len() <= 200 {
        return value.to_owned();
    }
    let mut end = 200;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &value[..end], value.len())
}

/// A subject made safe for a consumer name: `.`, `>`, `*`, space, tab and `/` become `_`.
#[must_use]
pub fn safe_subject(subject: &str) -> String {
    subject.replace(['.', '>', '*', ' ', '\t', '/'], "_")
}

/// What a subject under `triggers.v2.` is, as the conformance checker and the recorder need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockedSubject {
    /// [`MANIFEST_REGISTER`].
    ManifestRegister,
    /// [`MANIFEST_FETCH`].
    ManifestFetch,
    /// [`HEARTBEAT`].
    Heartbeat,
    /// A flow's completion events.
    FlowEvents {
        /// The flow id token.
        flow_id: String,
    },
    /// A broadcast to one service, or to all (`service == "all"`).
    FlowBroadcast {
        /// The service token, or `all`.
        service: String,
    },
    /// A DLQ subject: per action, per fallback kind, or the orchestrator's `source` DLQ.
    Dlq {
        /// The service token (`source` for the orchestrator's).
        service: String,
        /// The action, kind or source id.
        tail: String,
    },
}

impl LockedSubject {
    /// Classifies a subject. `None` for anything outside the locked table.
    #[must_use]
    pub fn parse(subject: &str) -> Option<Self> {
        match subject {
            MANIFEST_REGISTER => return Some(LockedSubject::ManifestRegister),
            MANIFEST_FETCH => return Some(LockedSubject::ManifestFetch),
            HEARTBEAT => return Some(LockedSubject::Heartbeat),
            _ => {}
        }
        let single =
            |rest: &str| (!rest.is_empty() && !rest.contains('.')).then(|| rest.to_owned());
        if let Some(rest) = subject.strip_prefix(FLOW_EVENTS_PREFIX) {
            return single(rest).map(|flow_id| LockedSubject::FlowEvents { flow_id });
        }
        if let Some(rest) = subject.strip_prefix(FLOW_BROADCAST_PREFIX) {
            return single(rest).map(|service| LockedSubject::FlowBroadcast { service });
        }
        if let Some(rest) = subject.strip_prefix(DLQ_PREFIX) {
            let (service, tail) = rest.split_once('.')?;
            if service.is_empty() || tail.is_empty() || tail.contains('.') {
                return None;
            }
            return Some(LockedSubject::Dlq {
                service: service.to_owned(),
                tail: tail.to_owned(),
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_follow_the_table() {
        assert_eq!(flow_events("f1").unwrap(), "triggers.v2.flow.events.f1");
        assert_eq!(
            flow_broadcast("svc").unwrap(),
            "triggers.v2.flow.broadcast.svc"
        );
        assert_eq!(
            dlq_action("svc", "send").unwrap(),
            "triggers.v2.dlq.svc.send"
        );
        assert_eq!(
            dlq_fallback("svc", FallbackKind::InvalidJson).unwrap(),
            "triggers.v2.dlq.svc.invalid_json"
        );
        assert_eq!(stream_name("svc", None).unwrap(), "triggers-sources-svc");
        assert_eq!(stream_name("svc", Some("MY_STREAM")).unwrap(), "MY_STREAM");
        assert_eq!(
            consumer_name("svc", "triggers.v2.svc.>").unwrap(),
            "triggers-svc-triggers_v2_svc__"
        );
        assert_eq!(safe_subject("a.b c\td/e*f>"), "a_b_c_d_e_f_");
    }

    #[test]
    fn no_builder_reaches_the_orchestrators_source_dlq() {
        assert!(matches!(
            dlq_action("source", "x"),
            Err(SubjectError::Reserved { .. })
        ));
        assert!(dlq_fallback("source", FallbackKind::UnknownFlow).is_err());
        assert!(flow_broadcast("all").is_err());
        assert!(dlq_action("svc", "unknown_flow").is_err());
        assert!(dlq_action("svc.source", "x").is_err());
        for bad in ["", "a.b", "a*", "a>", "a b", "a/b", "a\\b", "a\nb"] {
            assert!(check_token("t", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn flows_never_target_a_locked_subject() {
        for ok in [
            "shop.inbound",
            "audit.reminders",
            "a",
            "a.b-c_d",
            "triggers.v2.mysvc.inbound",
        ] {
            assert_eq!(check_publish_target(ok), Ok(()), "{ok}");
        }
        assert!(check_output_target("triggers.v2.mysvc.inbound").is_err());
        assert_eq!(check_output_target("audit.reminders"), Ok(()));
        for locked in [
            "triggers.v2.dlq.source.x",
            "triggers.v2.dlq.source.x.y",
            "triggers.v2.heartbeat",
            "triggers.v2.flow.events.f",
            "triggers.v2.flow.broadcast.all",
            "triggers.v2.manifest.register",
            "$JS.API.STREAM.DELETE.x",
            "$SYS.REQ.SERVER.PING",
            "triggerslab.v1.control.deploy",
        ] {
            assert!(
                matches!(
                    check_publish_target(locked),
                    Err(SubjectError::Reserved { .. })
                ),
                "{locked}"
            );
        }
        for bad in [
            "",
            "a..b",
            ".a",
            "a.",
            "a.*",
            "a.>",
            "a b",
            "a\nb",
            &"a".repeat(2000),
        ] {
            assert!(
                matches!(
                    check_publish_target(bad),
                    Err(SubjectError::InvalidToken { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn locked_subjects_are_classified() {
        assert_eq!(
            LockedSubject::parse("triggers.v2.dlq.source.src1"),
            Some(LockedSubject::Dlq {
                service: "source".into(),
                tail: "src1".into()
            })
        );
        assert_eq!(
            LockedSubject::parse(HEARTBEAT),
            Some(LockedSubject::Heartbeat)
        );
        assert_eq!(LockedSubject::parse("triggers.v2.flow.events.a.b"), None);
        assert_eq!(LockedSubject::parse("triggers.v2.other"), None);
    }

    #[test]
    fn subject_patterns_overlap_token_by_token() {
        assert!(patterns_overlap(
            "triggers.v2.manifest.*",
            MANIFEST_REGISTER
        ));
        assert!(patterns_overlap("triggers.>", MANIFEST_FETCH));
        assert!(patterns_overlap(">", "triggerslab.>"));
        assert!(patterns_overlap(
            "triggerslab.v1.control.*",
            "triggerslab.>"
        ));
        assert!(patterns_overlap(
            "*.v2.manifest.register",
            MANIFEST_REGISTER
        ));
        assert!(!patterns_overlap("triggerslab", "triggerslab.>"));
        assert!(!patterns_overlap("shop.inbound", MANIFEST_REGISTER));
        assert!(!patterns_overlap("triggers.v2.manifest", MANIFEST_REGISTER));
        assert!(!patterns_overlap("*", "triggerslab.>"));
    }

    /// Found by an audit: a source over the emulator's inbox, `$KV.>` or 4 KB long was taken,
    /// and the emulator captured its own JetStream replies, lost its DLQ ledger's traffic, or was
    /// cut off by the server at every resubscribe.
    #[test]
    fn sources_over_reserved_subjects_or_too_long_are_refused() {
        for ok in [
            "shop.inbound",
            "shop.>",
            "shop.*.orders",
            "triggers.v2.mysvc.inbound",
        ] {
            assert_eq!(check_source(ok), Ok(()), "{ok}");
        }
        for reserved in [
            ">",
            "*.>",
            "$KV.>",
            "$KV.TRIGGERS_DLQ.x",
            "$JS.API.>",
            "$G",
            "_INBOX.>",
            "_TRIGGERS_LAB_INBOX.>",
            "_TRIGGERS_LAB_INBOX.abc.def",
            "*.v2.manifest.register",
            "triggers.v2.heartbeat",
            "triggers.v2.*",
            "triggers.v2.>",
            "triggers.v2.dlq.source.x",
            "triggers.v2.flow.events.f1",
            "triggerslab.v1.control.state",
            "triggerslab.>",
        ] {
            assert!(
                matches!(check_source(reserved), Err(SubjectError::Reserved { .. })),
                "{reserved}: {:?}",
                check_source(reserved)
            );
        }
        let long = format!("shop.{}", "x".repeat(MAX_SOURCE_LEN));
        let err = check_source(&long).unwrap_err().to_string();
        assert!(err.contains("at most 1024"), "{err}");
        assert!(
            err.len() < 400,
            "the error repeats the whole subject: {}",
            err.len()
        );
        for bad in ["a..b", ".a", "a.>.b", "a b"] {
            assert!(
                matches!(check_source(bad), Err(SubjectError::InvalidToken { .. })),
                "{bad}"
            );
        }
    }

    /// Found by an audit: a 4 100-byte service name made the emulator's stream-create request
    /// line longer than the server's max_control_line: cut off, every registration stalled.
    #[test]
    fn service_and_action_names_are_bounded() {
        let name = "s".repeat(MAX_NAME_LEN);
        assert_eq!(check_service(&name), Ok(()));
        assert_eq!(check_action(&name), Ok(()));
        let long = "s".repeat(4100);
        let err = check_service(&long).unwrap_err().to_string();
        assert!(err.contains("4100 bytes long; at most 128"), "{err}");
        assert!(err.len() < 400, "{err}");
        assert!(check_action(&long).is_err());
        assert!(dlq_action("shop", &long).is_err());
        assert!(stream_name(&long, None).is_err());
    }
}
