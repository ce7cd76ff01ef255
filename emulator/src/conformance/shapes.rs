//! The JSON messages an SDK sends: manifest registration, heartbeat, completion event, DLQ entry.
//! Each is checked field by field (see `object`), then by the rules of its shape, then byte by byte
//! against Go's encoding of what it decodes to.

use triggers_sdk::error::DecodeError;
use triggers_sdk::flow::NodeType;
use triggers_sdk::wire::header::{self, Traceparent, names};
use triggers_sdk::wire::manifest::is_hash_text;
use triggers_sdk::wire::shapes::{dlq_kind, status};
use triggers_sdk::wire::subject::{self, FallbackKind};
use triggers_sdk::wire::{CompletionEvent, DlqEntry, Heartbeat, Manifest};

use super::object::{
    self, COMPLETION_EVENT, DLQ_ENTRY, Explained, HEARTBEAT, Object, Shape, check_fields,
};
use super::{Context, Decoded, Report};

/// The top-level fields of a manifest, in Go's order.
const MANIFEST_FIELDS: [&str; 14] = [
    "protocol_version",
    "service",
    "service_version",
    "manifest_hash",
    "display_name",
    "description",
    "owner",
    "tags",
    "actions",
    "service_sources",
    "supports_nodes",
    "supports_rate_limit",
    "runtime_capabilities",
    "runtime_lookups",
];

/// The DLQ kinds of an action failure (the entry is on the action's subject).
const ACTION_KINDS: [&str; 6] = [
    dlq_kind::ACTION_FAILED,
    dlq_kind::ACTION_TIMEOUT,
    dlq_kind::ACTION_PANICKED,
    dlq_kind::INVALID_INPUT,
    dlq_kind::DURABLE_TIMER_REJECTED,
    dlq_kind::ROUTING_FAILED,
];

/// Names a completion event's body might go by; none is allowed.
const RESULT_FIELDS: [&str; 4] = ["result", "output", "results", "outputs"];

/// The payload as an object, or an `undecodable` violation carrying the typed decoder's error
/// (JSON path, line and column).
fn read_object<T>(
    report: &mut Report<'_>,
    shape: &Shape,
    decode: fn(&[u8]) -> Result<T, DecodeError>,
) -> Option<Object> {
    match Object::parse(report.payload) {
        Ok(object) => Some(object),
        Err(json_error) => {
            let why = match decode(report.payload) {
                Err(e) => e.to_string(),
                Ok(_) => format!("{}: {json_error}", shape.name),
            };
            report.push(
                "undecodable",
                format!(
                    "{why}; a {} is one JSON object {{{}}}",
                    shape.name,
                    shape
                        .fields
                        .iter()
                        .map(|f| f.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
            None
        }
    }
}

/// The typed value, or (when nothing reported so far explains the failure) `undecodable`.
fn decode_typed<T>(
    report: &mut Report<'_>,
    reported_before: usize,
    decode: fn(&[u8]) -> Result<T, DecodeError>,
) -> Option<T> {
    match decode(report.payload) {
        Ok(value) => Some(value),
        Err(e) => {
            if report.count() == reported_before {
                report.push("undecodable", e.to_string());
            }
            None
        }
    }
}

fn go_bytes(
    report: &mut Report<'_>,
    shape: &str,
    go: Option<Vec<u8>>,
    explained: &Explained,
    nested: &[&str],
) {
    let Some(go) = go else { return };
    if let Some(how) = object::go_bytes_difference(report.payload, &go, explained, nested) {
        report.push(
            "not_go_bytes",
            format!("the {shape} is not what Go writes for the same value: {how}"),
        );
    }
}

fn service_name(report: &mut Report<'_>, ctx: &Context<'_>, what: &str, service: &str) {
    if let Err(e) = subject::check_service(service) {
        report.push("service_invalid", format!("the {what}'s service: {e}"));
    } else if !ctx.manifests.contains_key(service) {
        report.push(
            "service_unregistered",
            format!(
                "service {service:?} has not registered; an SDK registers on {} before it sends \
                 anything else",
                subject::MANIFEST_REGISTER
            ),
        );
    }
}

/// `triggers.v2.manifest.register`.
pub(super) fn manifest(report: &mut Report<'_>) {
    let manifest = match Manifest::from_json(report.payload) {
        Ok(m) => m,
        Err(e) => {
            report.push("undecodable", e.to_string());
            return;
        }
    };
    let Ok(object) = Object::parse(report.payload) else {
        return;
    };
    let mut explained = Explained::new();
    for key in object.0.iter().map(|(k, _)| k.as_str()) {
        if explained.contains(key) {
            continue;
        }
        let count = object.0.iter().filter(|(k, _)| k == key).count();
        if count > 1 {
            report.push(
                "duplicate_field",
                format!("`{key}` appears {count} times in the manifest; Go writes it once"),
            );
            explained.insert(key.to_owned());
        } else if !MANIFEST_FIELDS.contains(&key) {
            report.push(
                "manifest_unknown_field",
                format!(
                    "`{key}` is not a manifest field (Go's decoder ignores it, Go's SDK never \
                     writes it); the fields are {}",
                    MANIFEST_FIELDS.join(", ")
                ),
            );
            explained.insert(key.to_owned());
        }
    }
    let major = manifest.protocol_major();
    if let Some(major) = major.filter(|m| *m != 1) {
        report.push(
            "protocol_major",
            format!(
                "protocol_version is {:?}: major {major}; the orchestrator speaks major 1 ({}) and \
                 refuses other majors",
                manifest.protocol_version,
                triggers_sdk::wire::manifest::PROTOCOL_VERSION
            ),
        );
    }
    for issue in manifest.validate() {
        // A parseable foreign major has its own rule above.
        if issue.path == "protocol_version" && major.is_some() {
            continue;
        }
        if issue.lenient {
            report.push(
                "manifest_lenient",
                format!(
                    "`{}`: {} (Go's SDK can write this and the orchestrator accepts it; a careful SDK does not)",
                    issue.path, issue.message
                ),
            );
        } else {
            report.push(
                "manifest_invalid",
                format!("`{}`: {}", issue.path, issue.message),
            );
        }
    }
    let caps = &manifest.runtime_capabilities;
    if caps.windows(2).any(|w| w[0] >= w[1]) {
        let mut canonical = caps.clone();
        canonical.sort();
        canonical.dedup();
        report.push(
            "capabilities_not_canonical",
            format!(
                "runtime_capabilities is {caps:?}; write it sorted and without repeats, {canonical:?}, as it is hashed"
            ),
        );
    }
    if let Ok(computed) = manifest.compute_hash()
        && manifest.manifest_hash != computed
    {
        report.push(
            "manifest_hash_mismatch",
            format!(
                "manifest_hash is {:?}; the hash of this manifest is {computed:?} (SHA-256 of the \
                 canonical hash input, see docs/wire.md)",
                manifest.manifest_hash
            ),
        );
        explained.insert("manifest_hash".to_owned());
    }
    go_bytes(report, "manifest", manifest.to_json().ok(), &explained, &[]);
}

/// `triggers.v2.heartbeat`.
pub(super) fn heartbeat(ctx: &Context<'_>, report: &mut Report<'_>) {
    let Some(object) = read_object(report, &HEARTBEAT, Heartbeat::from_json) else {
        return;
    };
    let before = report.count();
    let mut explained = Explained::new();
    check_fields(
        report,
        &HEARTBEAT,
        &object,
        "",
        |_| "unknown_field",
        &mut explained,
    );
    let Some(hb) = decode_typed(report, before, Heartbeat::from_json) else {
        return;
    };
    let fine = |field: &str| !explained.contains(field);
    if fine("service") {
        service_name(report, ctx, "heartbeat", &hb.service);
    }
    if fine("manifest_hash") {
        if !is_hash_text(&hb.manifest_hash) {
            report.push(
                "heartbeat_hash_form",
                format!(
                    "manifest_hash is {:?}; it is the registered manifest's hash, \
                     sha256:<64 lowercase hex>",
                    hb.manifest_hash
                ),
            );
        } else if let Some(m) = ctx.manifests.get(&hb.service) {
            let computed = m.computed_hash();
            if hb.manifest_hash != m.manifest_hash && hb.manifest_hash != computed {
                report.push(
                    "heartbeat_hash_unknown",
                    format!(
                        "manifest_hash is {}; {}'s registered manifest hashes to {}: this \
                         replica runs another manifest than the one registered last",
                        hb.manifest_hash, hb.service, computed
                    ),
                );
            }
        }
    }
    if fine("started_at") && fine("now") && hb.now.unix_nanos() < hb.started_at.unix_nanos() {
        report.push(
            "heartbeat_time_order",
            format!("now ({}) is before started_at ({})", hb.now, hb.started_at),
        );
    }
    go_bytes(report, "heartbeat", hb.to_json().ok(), &explained, &[]);
    report.decoded = Some(Decoded::Heartbeat(hb));
}

/// `triggers.v2.flow.events.<flow_id>`.
///
/// Most events are exactly what Go writes for the value they decode to: such bytes cannot break a
/// field rule (Go writes each field once, only the shape's, every one it always carries, each of
/// its JSON kind), so only the value's own rules are left to check, and the field-by-field pass
/// (most of the checker's time on a busy flow) is skipped. Anything else goes field by field.
pub(super) fn completion(ctx: &Context<'_>, report: &mut Report<'_>, flow_id: &str) {
    match CompletionEvent::from_json(report.payload) {
        Ok(ev) if ev.to_json().is_ok_and(|go| go == report.payload) => {
            completion_value(ctx, report, flow_id, &ev, &Explained::new());
            report.decoded = Some(Decoded::Event(ev));
        }
        _ => completion_by_field(ctx, report, flow_id),
    }
}

/// [`completion`], field by field, whatever the bytes.
pub(super) fn completion_by_field(ctx: &Context<'_>, report: &mut Report<'_>, flow_id: &str) {
    let Some(object) = read_object(report, &COMPLETION_EVENT, CompletionEvent::from_json) else {
        return;
    };
    let before = report.count();
    let mut explained = Explained::new();
    check_fields(
        report,
        &COMPLETION_EVENT,
        &object,
        "",
        |key| {
            if RESULT_FIELDS.contains(&key) {
                "completion_has_result"
            } else {
                "unknown_field"
            }
        },
        &mut explained,
    );
    let Some(ev) = decode_typed(report, before, CompletionEvent::from_json) else {
        return;
    };
    completion_value(ctx, report, flow_id, &ev, &explained);
    go_bytes(
        report,
        "completion event",
        ev.to_json().ok(),
        &explained,
        &[],
    );
    report.decoded = Some(Decoded::Event(ev));
}

/// The rules of a completion event's value; `explained` are the fields already reported on.
fn completion_value(
    ctx: &Context<'_>,
    report: &mut Report<'_>,
    flow_id: &str,
    ev: &CompletionEvent,
    explained: &Explained,
) {
    let fine = |field: &str| !explained.contains(field);
    if fine("service") {
        service_name(report, ctx, "completion event", &ev.service);
    }
    if fine("flow_id") && ev.flow_id != flow_id {
        report.push(
            "completion_flow_mismatch",
            format!(
                "flow_id is {:?} but the event is on the subject of flow {flow_id:?}; completion \
                 events go to triggers.v2.flow.events.<flow_id> of their own flow",
                ev.flow_id
            ),
        );
    }
    for (field, value) in [("flow_run_id", &ev.flow_run_id), ("node_id", &ev.node_id)] {
        if fine(field) && value.is_empty() {
            report.push(
                "completion_field_empty",
                format!("{field} is empty; a completion event names the run and node it reports"),
            );
        }
    }
    if fine("node_type")
        && serde_json::from_value::<NodeType>(serde_json::Value::String(ev.node_type.clone()))
            .is_err()
    {
        report.push(
            "completion_node_type_unknown",
            format!(
                "node_type is {:?}; the node types are service-in, action, mapping, condition, \
                 lookup, timer, output",
                ev.node_type
            ),
        );
    }
    if fine("status") && !status::ALL.contains(&ev.status.as_str()) {
        report.push(
            "completion_status_unknown",
            format!(
                "status is {:?}; the statuses are {}",
                ev.status,
                status::ALL.join(", ")
            ),
        );
    }
    if fine("trace_id")
        && !ev.trace_id.is_empty()
        && !(ev.trace_id.len() == 32
            && ev
                .trace_id
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    {
        report.push(
            "trace_id_form",
            format!(
                "trace_id is {:?}; it is the run's W3C trace id, 32 lowercase hex digits",
                ev.trace_id
            ),
        );
    }
    if fine("started_at")
        && fine("finished_at")
        && ev.finished_at.unix_nanos() < ev.started_at.unix_nanos()
    {
        report.push(
            "completion_time_order",
            format!(
                "finished_at ({}) is before started_at ({})",
                ev.finished_at, ev.started_at
            ),
        );
    }
}

/// `triggers.v2.dlq.<service>.<tail>` (not `source`: the caller reports that).
pub(super) fn dlq(ctx: &Context<'_>, report: &mut Report<'_>, service: &str, tail: &str) {
    let fallback = FallbackKind::parse(tail);
    if let Err(e) = subject::check_service(service) {
        report.push("service_invalid", format!("the DLQ subject's service: {e}"));
    } else if let Some(m) = ctx.manifests.get(service) {
        if fallback.is_none() && m.action(tail).is_none() {
            let actions: Vec<&str> = m.actions.iter().map(|a| a.name.as_str()).collect();
            report.push(
                "dlq_subject_unknown_tail",
                format!(
                    "{tail:?} is neither an action of {service} ({}) nor a fallback kind ({})",
                    actions.join(", "),
                    FallbackKind::ALL.map(FallbackKind::as_str).join(", ")
                ),
            );
        }
    } else {
        report.push(
            "service_unregistered",
            format!("service {service:?} has not registered, yet dead-letters"),
        );
    }
    let payload = report.payload;
    // The key is read from the JSON as it stands, so the Nats-Msg-Id is judged even when the
    // entry is otherwise broken.
    let entry_key: Option<String> = serde_json::from_slice::<serde_json::Value>(payload)
        .ok()
        .and_then(|v| {
            v.pointer("/envelope/idempotency_key")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        });
    check_dlq_msg_id(report, entry_key.as_deref());

    let Some(object) = read_object(report, &DLQ_ENTRY, DlqEntry::from_json) else {
        return;
    };
    let before = report.count();
    let mut explained = Explained::new();
    check_fields(
        report,
        &DLQ_ENTRY,
        &object,
        "",
        |_| "unknown_field",
        &mut explained,
    );
    let Some(entry) = decode_typed(report, before, DlqEntry::from_json) else {
        return;
    };
    if !explained.contains("kind") {
        match fallback {
            Some(kind) if entry.kind != kind.as_str() => report.push(
                "dlq_kind_mismatch",
                format!(
                    "kind is {:?} on the {kind} fallback subject; the entry's kind is the \
                     subject's kind",
                    entry.kind
                ),
            ),
            None if !ACTION_KINDS.contains(&entry.kind.as_str()) => report.push(
                "dlq_kind_unknown",
                format!(
                    "kind is {:?} on an action's DLQ subject; an action failure is one of {} \
                     (fallback kinds go to triggers.v2.dlq.<service>.<kind>)",
                    entry.kind,
                    ACTION_KINDS.join(", ")
                ),
            ),
            _ => {}
        }
    }
    dlq_details(
        report,
        &entry,
        fallback.is_none() && !explained.contains("envelope"),
    );
    go_bytes(
        report,
        "DLQ entry",
        entry.to_json().ok(),
        &explained,
        &["envelope"],
    );
    report.decoded = Some(Decoded::Dlq(entry));
}

/// What a DLQ entry's values must be beyond their types: the instant in the `Nats-Msg-Id`, the
/// nested envelope's fields, the body not encoded twice.
fn dlq_details(report: &mut Report<'_>, entry: &DlqEntry, full_envelope: bool) {
    if let Some((_, ns)) = report
        .headers
        .get(names::NATS_MSG_ID)
        .and_then(header::parse_dlq_msg_id)
    {
        let occurred = entry.occurred_at.unix_nanos();
        if !entry.occurred_at.is_zero() && (ns - occurred).abs() > DLQ_INSTANT_SLACK_NS {
            report.push(
                "dlq_msg_id_time",
                format!(
                    "the Nats-Msg-Id's instant is {ns}, but occurred_at is {} ({occurred} ns): it must be the entry's instant in nanoseconds since the Unix epoch (milliseconds or seconds make distinct failures within the same millisecond collapse)",
                    entry.occurred_at
                ),
            );
        }
    }
    // An action's entry carries the whole envelope its message arrived with; a fallback entry
    // (a message without a readable envelope, among others) carries what could be read.
    let env = &entry.envelope;
    let mut problems = Vec::new();
    if full_envelope {
        for (field, value) in [
            ("flow_run_id", &env.flow_run_id),
            ("flow_id", &env.flow_id),
            ("idempotency_key", &env.idempotency_key),
            ("source_node_id", &env.source_node_id),
        ] {
            if value.is_empty() {
                problems.push(format!("envelope.{field} is empty"));
            }
        }
    }
    // The trace fields are the delivery's as read (protocol.md §9), malformed or not: a service
    // ignores a malformed one and goes on, and copies it into the entry. Only a routing
    // failure's envelope is the service's own making (the hop's), and answers for them.
    let own_trace = entry.kind == dlq_kind::ROUTING_FAILED;
    for (field, value, width) in [
        ("trace_id", &env.trace_id, 32),
        ("span_id", &env.span_id, 16),
    ] {
        if own_trace && !value.is_empty() && !is_lower_hex(value, width) {
            problems.push(format!(
                "envelope.{field} is {value:?}, not {width} lowercase hex digits"
            ));
        }
    }
    if own_trace && !env.traceparent.is_empty() && Traceparent::parse(&env.traceparent).is_err() {
        problems.push(format!(
            "envelope.traceparent {:?} is not W3C Trace Context",
            env.traceparent
        ));
    }
    if env.retry_count < 0 || env.flow_version < 0 {
        problems.push("envelope counts are negative".into());
    }
    if !problems.is_empty() {
        report.push(
            "dlq_envelope_invalid",
            format!(
                "the entry's envelope is the dead-lettered message's, as read: {}",
                problems.join("; ")
            ),
        );
    }
    // The body is the message's bytes as raw JSON; a string holding JSON was encoded twice (a
    // body that is not JSON is carried as a string, but then it does not parse).
    if entry.kind != FallbackKind::InvalidJson.as_str()
        && let Ok(serde_json::Value::String(text)) =
            serde_json::from_str::<serde_json::Value>(entry.body.get())
        && serde_json::from_str::<serde_json::Value>(&text)
            .is_ok_and(|v| v.is_object() || v.is_array())
    {
        report.push(
            "dlq_body_double_encoded",
            format!(
                "body is a JSON string holding JSON ({}…): the body is the message's bytes as raw JSON, not a string of them",
                text.chars().take(40).collect::<String>()
            ),
        );
    }
}

/// How far a DLQ `Nats-Msg-Id`'s instant may be from the entry's `occurred_at`.
const DLQ_INSTANT_SLACK_NS: i128 = 24 * 3600 * 1_000_000_000;

/// The `Nats-Msg-Id` of a DLQ publish: `<idempotency_key>:dlq:<unix_ns>`. A misspelt name is
/// reported by the header checks; its value is judged here all the same.
fn check_dlq_msg_id(report: &mut Report<'_>, entry_key: Option<&str>) {
    let Some(id) = report.headers.get(names::NATS_MSG_ID) else {
        report.push(
            "dlq_msg_id_missing",
            format!(
                "a DLQ publish carries no {}; it must be <idempotency_key>:dlq:<unix_ns> so that \
                 repeated writes of one failure collapse under JetStream dedup",
                names::NATS_MSG_ID
            ),
        );
        return;
    };
    let key = match header::parse_dlq_msg_id(id) {
        Some((key, _)) => key,
        // Go formats an empty key as ":dlq:<ns>" too: right for an entry whose envelope has none.
        None if entry_key == Some("")
            && id
                .strip_prefix(":dlq:")
                .is_some_and(|ns| !ns.is_empty() && ns.bytes().all(|b| b.is_ascii_digit())) =>
        {
            ""
        }
        None => {
            report.push(
                "dlq_msg_id_form",
                format!(
                    "{} is {id:?}; on a DLQ publish it is <idempotency_key>:dlq:<unix_ns> \
                     (e.g. {:?})",
                    names::NATS_MSG_ID,
                    header::dlq_msg_id(
                        entry_key.unwrap_or("run-1:send"),
                        1_779_805_845_000_000_000
                    )
                ),
            );
            return;
        }
    };
    if let Some(entry_key) = entry_key
        && key != entry_key
    {
        report.push(
            "dlq_msg_id_key_mismatch",
            format!(
                "{} is {id:?}, keyed {key:?}; the entry's envelope.idempotency_key is \
                 {entry_key:?}",
                names::NATS_MSG_ID
            ),
        );
    }
}

/// True when `value` is exactly `width` lowercase hexadecimal digits.
fn is_lower_hex(value: &str, width: usize) -> bool {
    value.len() == width
        && value
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}
