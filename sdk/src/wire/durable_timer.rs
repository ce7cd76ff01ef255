//! The Durable Timer private context: three headers on trusted internal NATS deliveries.
//!
//! - `X-Triggers-Durable-Timer-Context`: a JSON object, the root context (exactly `v`, `kind`,
//!   `flow_id`, `flow_version`, `root_execution_id`) or the elapsed context (those plus the timer
//!   node and reference, occurrence and fence, the immutable original `snapshot_sha256`, the resume
//!   edge and the resume run id);
//! - `X-Triggers-Execution-Id`: equal to the context's `root_execution_id`;
//! - `X-Triggers-Durable-Timer-Payload-SHA256`: lowercase hex SHA-256 of the exact bytes of the
//!   current hop's payload.
//!
//! The triplet is unsigned by design; it is stripped ([`strip_triplet`]) before action handlers,
//! HTTP, outputs and every onward hop. The snapshot hash is never compared with a mapped or
//! action-result payload: only the payload header is checked against the bytes.

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::error::DurableTimerError;
use crate::wire::header::{Headers, names};
use crate::wire::json;

/// The context format version this SDK reads and writes.
pub const CONTEXT_VERSION: i64 = 1;
/// `kind` of the context a run of a Durable Timer lineage starts with.
pub const KIND_ROOT: &str = "root";
/// `kind` of the context delivered when a timer elapses.
pub const KIND_ELAPSED: &str = "elapsed";

/// The keys of a root context, in order.
pub const ROOT_KEYS: [&str; 5] = ["v", "kind", "flow_id", "flow_version", "root_execution_id"];
/// The keys of an elapsed context, in order.
pub const ELAPSED_KEYS: [&str; 12] = [
    "v",
    "kind",
    "flow_id",
    "flow_version",
    "root_execution_id",
    "timer_node_id",
    "timer_ref",
    "occurrence",
    "fence",
    "snapshot_sha256",
    "resume_edge_id",
    "resume_run_id",
];

/// The context a Durable Timer lineage's run starts with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RootContext {
    /// Always [`CONTEXT_VERSION`].
    pub v: i64,
    /// Always [`KIND_ROOT`].
    pub kind: &'static str,
    /// The flow.
    pub flow_id: String,
    /// The flow's version.
    pub flow_version: i64,
    /// The id of the root execution; equals the execution id header.
    pub root_execution_id: String,
}

/// The context delivered to the resume target when a timer elapses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ElapsedContext {
    /// Always [`CONTEXT_VERSION`].
    pub v: i64,
    /// Always [`KIND_ELAPSED`].
    pub kind: &'static str,
    /// The flow.
    pub flow_id: String,
    /// The flow's version.
    pub flow_version: i64,
    /// The id of the root execution.
    pub root_execution_id: String,
    /// The timer node that elapsed.
    pub timer_node_id: String,
    /// The timer's reference (one per arming).
    pub timer_ref: String,
    /// Which occurrence of the timer this is (1 for a one-shot timer).
    pub occurrence: i64,
    /// A number that grows with every re-arming; a stale fence is a stale delivery.
    pub fence: i64,
    /// Lowercase hex SHA-256 of the run's immutable original snapshot.
    pub snapshot_sha256: String,
    /// The edge the run resumes along.
    pub resume_edge_id: String,
    /// The run id of the resumed part.
    pub resume_run_id: String,
}

/// A Durable Timer context of either kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerContext {
    /// The start of a run.
    Root(RootContext),
    /// A timer elapsed.
    Elapsed(ElapsedContext),
}

impl RootContext {
    /// A root context.
    #[must_use]
    pub fn new(flow_id: &str, flow_version: i64, root_execution_id: &str) -> Self {
        RootContext {
            v: CONTEXT_VERSION,
            kind: KIND_ROOT,
            flow_id: flow_id.into(),
            flow_version,
            root_execution_id: root_execution_id.into(),
        }
    }
}

impl TimerContext {
    /// The root execution id, which the execution id header must equal.
    #[must_use]
    pub fn root_execution_id(&self) -> &str {
        match self {
            TimerContext::Root(c) => &c.root_execution_id,
            TimerContext::Elapsed(c) => &c.root_execution_id,
        }
    }

    /// The flow id.
    #[must_use]
    pub fn flow_id(&self) -> &str {
        match self {
            TimerContext::Root(c) => &c.flow_id,
            TimerContext::Elapsed(c) => &c.flow_id,
        }
    }

    /// The header text: the context as compact Go JSON.
    #[must_use]
    pub fn to_header_value(&self) -> String {
        let text = match self {
            TimerContext::Root(c) => json::to_string(c),
            TimerContext::Elapsed(c) => json::to_string(c),
        };
        text.expect("a timer context has no floats or maps")
    }

    /// Parses the header text, strictly: a JSON object with exactly the keys of its kind.
    ///
    /// # Errors
    /// A [`DurableTimerError`] for each way it can be wrong.
    pub fn parse(text: &str) -> Result<Self, DurableTimerError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| DurableTimerError::ContextNotJson(e.to_string()))?;
        let Value::Object(map) = value else {
            return Err(DurableTimerError::ContextNotObject);
        };
        let v = int(&map, "v")?;
        if v != CONTEXT_VERSION {
            return Err(DurableTimerError::UnsupportedVersion(v));
        }
        let kind = string(&map, "kind")?;
        let expected: &[&str] = match kind.as_str() {
            KIND_ROOT => &ROOT_KEYS,
            KIND_ELAPSED => &ELAPSED_KEYS,
            _ => return Err(DurableTimerError::UnknownKind(kind)),
        };
        if let Some(missing) = expected.iter().find(|k| !map.contains_key(**k)) {
            return Err(DurableTimerError::MissingKey((*missing).to_owned()));
        }
        if let Some(extra) = map.keys().find(|k| !expected.contains(&k.as_str())) {
            return Err(DurableTimerError::ExtraKey(extra.clone()));
        }
        let flow_id = nonempty(&map, "flow_id")?;
        let flow_version = int(&map, "flow_version")?;
        let root_execution_id = nonempty(&map, "root_execution_id")?;
        if kind == KIND_ROOT {
            return Ok(TimerContext::Root(RootContext {
                v,
                kind: KIND_ROOT,
                flow_id,
                flow_version,
                root_execution_id,
            }));
        }
        let snapshot_sha256 = string(&map, "snapshot_sha256")?;
        if !is_sha256_hex(&snapshot_sha256) {
            return Err(DurableTimerError::WrongType {
                key: "snapshot_sha256".into(),
                expected: "64 lowercase hex digits",
            });
        }
        Ok(TimerContext::Elapsed(ElapsedContext {
            v,
            kind: KIND_ELAPSED,
            flow_id,
            flow_version,
            root_execution_id,
            timer_node_id: nonempty(&map, "timer_node_id")?,
            timer_ref: nonempty(&map, "timer_ref")?,
            occurrence: int(&map, "occurrence")?,
            fence: int(&map, "fence")?,
            snapshot_sha256,
            resume_edge_id: string(&map, "resume_edge_id")?,
            resume_run_id: nonempty(&map, "resume_run_id")?,
        }))
    }
}

fn string(map: &Map<String, Value>, key: &str) -> Result<String, DurableTimerError> {
    match map.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(DurableTimerError::WrongType {
            key: key.into(),
            expected: "a string",
        }),
        None => Err(DurableTimerError::MissingKey(key.into())),
    }
}

fn nonempty(map: &Map<String, Value>, key: &str) -> Result<String, DurableTimerError> {
    let s = string(map, key)?;
    if s.is_empty() {
        return Err(DurableTimerError::WrongType {
            key: key.into(),
            expected: "a non-empty string",
        });
    }
    Ok(s)
}

fn int(map: &Map<String, Value>, key: &str) -> Result<i64, DurableTimerError> {
    match map.get(key) {
        Some(Value::Number(n)) if n.as_i64().is_some() => Ok(n.as_i64().unwrap_or_default()),
        Some(_) => Err(DurableTimerError::WrongType {
            key: key.into(),
            expected: "an integer",
        }),
        None => Err(DurableTimerError::MissingKey(key.into())),
    }
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Lowercase hex SHA-256 of `payload`: the payload header's value.
#[must_use]
pub fn payload_sha256(payload: &[u8]) -> String {
    hex::encode(Sha256::digest(payload))
}

/// Sets the three triplet headers for `payload` (the exact bytes that will be published).
pub fn write_triplet(headers: &mut Headers, context: &TimerContext, payload: &[u8]) {
    headers.insert(names::DURABLE_TIMER_CONTEXT, context.to_header_value());
    headers.insert(names::EXECUTION_ID, context.root_execution_id());
    headers.insert(names::DURABLE_TIMER_PAYLOAD_SHA256, payload_sha256(payload));
}

/// Whether any triplet header is present (in any spelling).
#[must_use]
pub fn has_triplet(headers: &Headers) -> bool {
    names::DURABLE_TIMER_TRIPLET
        .iter()
        .any(|n| headers.contains(n))
}

/// Reads and validates the triplet against the exact payload bytes.
///
/// `Ok(None)` when none of the three headers is present.
///
/// # Errors
/// A [`DurableTimerError`]: a header missing from a partial triplet, repeated, a context that is
/// not exactly right, an execution id other than `root_execution_id`, a payload hash that is not
/// lowercase hex or does not match the bytes.
pub fn read_triplet(
    headers: &Headers,
    payload: &[u8],
) -> Result<Option<TimerContext>, DurableTimerError> {
    if !has_triplet(headers) {
        return Ok(None);
    }
    for name in names::DURABLE_TIMER_TRIPLET {
        let count = headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .count();
        match count {
            0 => return Err(DurableTimerError::MissingHeader(name)),
            1 => {}
            _ => return Err(DurableTimerError::RepeatedHeader(name)),
        }
    }
    let get = |name| headers.get(name).unwrap_or_default();
    let context = TimerContext::parse(get(names::DURABLE_TIMER_CONTEXT))?;
    let execution_id = get(names::EXECUTION_ID);
    if execution_id != context.root_execution_id() {
        return Err(DurableTimerError::ExecutionIdMismatch {
            execution_id: execution_id.to_owned(),
            root_execution_id: context.root_execution_id().to_owned(),
        });
    }
    let claimed = get(names::DURABLE_TIMER_PAYLOAD_SHA256);
    if !is_sha256_hex(claimed) {
        return Err(DurableTimerError::PayloadHashMalformed(claimed.to_owned()));
    }
    let actual = payload_sha256(payload);
    if claimed != actual {
        return Err(DurableTimerError::PayloadHashMismatch {
            header: claimed.to_owned(),
            actual,
        });
    }
    Ok(Some(context))
}

/// Removes the three triplet headers, in any spelling. Returns whether any was there.
pub fn strip_triplet(headers: &mut Headers) -> bool {
    let mut any = false;
    for name in names::DURABLE_TIMER_TRIPLET {
        any |= headers.remove(name);
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elapsed() -> TimerContext {
        TimerContext::Elapsed(ElapsedContext {
            v: 1,
            kind: KIND_ELAPSED,
            flow_id: "f".into(),
            flow_version: 2,
            root_execution_id: "exec-1".into(),
            timer_node_id: "wait".into(),
            timer_ref: "exec-1:wait:1".into(),
            occurrence: 1,
            fence: 3,
            snapshot_sha256: payload_sha256(b"{}"),
            resume_edge_id: "e2".into(),
            resume_run_id: "run-2".into(),
        })
    }

    #[test]
    fn root_context_has_exactly_its_keys() {
        let ctx = TimerContext::Root(RootContext::new("f", 2, "exec-1"));
        assert_eq!(
            ctx.to_header_value(),
            r#"{"v":1,"kind":"root","flow_id":"f","flow_version":2,"root_execution_id":"exec-1"}"#
        );
        assert_eq!(TimerContext::parse(&ctx.to_header_value()).unwrap(), ctx);
        assert_eq!(
            TimerContext::parse(&elapsed().to_header_value()).unwrap(),
            elapsed()
        );
    }

    #[test]
    fn each_failure_has_its_error() {
        let payload = br#"{"a":1}"#;
        let mut h = Headers::new();
        write_triplet(&mut h, &elapsed(), payload);
        assert_eq!(read_triplet(&h, payload).unwrap(), Some(elapsed()));
        assert_eq!(read_triplet(&Headers::new(), payload).unwrap(), None);

        let case = |edit: &dyn Fn(&mut Headers)| {
            let mut h2 = h.clone();
            edit(&mut h2);
            read_triplet(&h2, payload).unwrap_err()
        };
        assert!(matches!(
            case(&|h| {
                h.remove(names::EXECUTION_ID);
            }),
            DurableTimerError::MissingHeader(_)
        ));
        assert!(matches!(
            case(&|h| h.insert(names::EXECUTION_ID, "other")),
            DurableTimerError::ExecutionIdMismatch { .. }
        ));
        assert!(matches!(
            case(&|h| h.insert(
                names::DURABLE_TIMER_PAYLOAD_SHA256,
                payload_sha256(b"x").to_uppercase()
            )),
            DurableTimerError::PayloadHashMalformed(_)
        ));
        assert!(matches!(
            case(&|h| h.insert(names::DURABLE_TIMER_PAYLOAD_SHA256, payload_sha256(b"x"))),
            DurableTimerError::PayloadHashMismatch { .. }
        ));
        assert!(matches!(
            case(&|h| h.append(names::EXECUTION_ID.to_lowercase(), "exec-1")),
            DurableTimerError::RepeatedHeader(_)
        ));
        let root = TimerContext::Root(RootContext::new("f", 2, "exec-1")).to_header_value();
        for (text, want) in [
            (root.replace("}", r#","extra":1}"#), "ExtraKey"),
            (root.replace(r#","flow_version":2"#, ""), "MissingKey"),
            (root.replace(r#""v":1"#, r#""v":2"#), "UnsupportedVersion"),
            (root.replace("root\"", "other\""), "UnknownKind"),
            (
                root.replace(r#""flow_version":2"#, r#""flow_version":"2""#),
                "WrongType",
            ),
            ("[]".to_owned(), "ContextNotObject"),
            ("{".to_owned(), "ContextNotJson"),
        ] {
            let err = case(&|h| h.insert(names::DURABLE_TIMER_CONTEXT, text.clone()));
            assert!(format!("{err:?}").starts_with(want), "{text}: {err:?}");
        }
    }

    #[test]
    fn strip_removes_every_spelling() {
        let mut h = Headers::new();
        write_triplet(&mut h, &elapsed(), b"{}");
        h.append("x-triggers-execution-id", "dup");
        h.append("Other", "kept");
        assert!(strip_triplet(&mut h));
        assert_eq!(h.iter().collect::<Vec<_>>(), vec![("Other", "kept")]);
        assert!(!strip_triplet(&mut h));
    }
}
