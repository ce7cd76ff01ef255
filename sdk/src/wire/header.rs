//! Message headers: the one table of header names, a transport-neutral header list that reads names
//! case-insensitively, the 10-field [`Envelope`], W3C [`Traceparent`] and the `Nats-Msg-Id` forms.
//!
//! The runtime converts between [`Headers`] and its transport's header type (async-nats'
//! `HeaderMap` is case-sensitive, hence this type); the wire module itself does no I/O.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{EnvelopeError, TraceparentError};
use crate::wire::time::GoTime;

/// The canonical spelling of every header name the contract uses.
pub mod names {
    /// `trace_id`.
    pub const TRACE_ID: &str = "X-Triggers-Trace-Id";
    /// `span_id`.
    pub const SPAN_ID: &str = "X-Triggers-Span-Id";
    /// `traceparent`, W3C form.
    pub const TRACEPARENT: &str = "X-Triggers-Traceparent";
    /// `flow_run_id`.
    pub const FLOW_RUN_ID: &str = "X-Triggers-Flow-Run-Id";
    /// `flow_id`.
    pub const FLOW_ID: &str = "X-Triggers-Flow-Id";
    /// `flow_version`, an integer as decimal text.
    pub const FLOW_VERSION: &str = "X-Triggers-Flow-Version";
    /// `idempotency_key`.
    pub const IDEMPOTENCY_KEY: &str = "X-Triggers-Idempotency-Key";
    /// `source_node_id`: the node whose output this message is.
    pub const SOURCE_NODE_ID: &str = "X-Triggers-Source-Node-Id";
    /// `retry_count`, an integer as decimal text.
    pub const RETRY_COUNT: &str = "X-Triggers-Retry-Count";
    /// `emitted_at`, Go's RFC 3339 text.
    pub const EMITTED_AT: &str = "X-Triggers-Emitted-At";
    /// JetStream's dedup header; NATS only. Must be spelled exactly so: the server ignores other
    /// spellings for dedup.
    pub const NATS_MSG_ID: &str = "Nats-Msg-Id";
    /// Durable Timer private context (JSON), on trusted internal NATS deliveries only.
    pub const DURABLE_TIMER_CONTEXT: &str = "X-Triggers-Durable-Timer-Context";
    /// Durable Timer execution id; equals the context's `root_execution_id`.
    pub const EXECUTION_ID: &str = "X-Triggers-Execution-Id";
    /// Lowercase hex SHA-256 of the exact bytes of the current hop's payload.
    pub const DURABLE_TIMER_PAYLOAD_SHA256: &str = "X-Triggers-Durable-Timer-Payload-SHA256";

    /// The ten envelope headers, in the envelope's field order.
    pub const ENVELOPE: [&str; 10] = [
        TRACE_ID,
        SPAN_ID,
        TRACEPARENT,
        FLOW_RUN_ID,
        FLOW_ID,
        FLOW_VERSION,
        IDEMPOTENCY_KEY,
        SOURCE_NODE_ID,
        RETRY_COUNT,
        EMITTED_AT,
    ];

    /// The Durable Timer private triplet.
    pub const DURABLE_TIMER_TRIPLET: [&str; 3] = [
        DURABLE_TIMER_CONTEXT,
        EXECUTION_ID,
        DURABLE_TIMER_PAYLOAD_SHA256,
    ];

    /// Every name above.
    pub const ALL: [&str; 14] = [
        TRACE_ID,
        SPAN_ID,
        TRACEPARENT,
        FLOW_RUN_ID,
        FLOW_ID,
        FLOW_VERSION,
        IDEMPOTENCY_KEY,
        SOURCE_NODE_ID,
        RETRY_COUNT,
        EMITTED_AT,
        NATS_MSG_ID,
        DURABLE_TIMER_CONTEXT,
        EXECUTION_ID,
        DURABLE_TIMER_PAYLOAD_SHA256,
    ];

    /// The canonical spelling of `name` when it is one of ours, compared ignoring ASCII case.
    #[must_use]
    pub fn canonical(name: &str) -> Option<&'static str> {
        ALL.into_iter().find(|c| c.eq_ignore_ascii_case(name))
    }
}

/// An ordered list of header name/value pairs; names compare ignoring ASCII case.
///
/// Writing keeps the spelling it is given (use the [`names`] constants); reading finds any spelling.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(Vec<(String, String)>);

impl Headers {
    /// No headers.
    #[must_use]
    pub fn new() -> Self {
        Headers(Vec::new())
    }

    /// The first value whose name matches `name` ignoring ASCII case.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether any header matches `name` ignoring ASCII case.
    #[must_use]
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Sets `name` to `value`, replacing every header of that name in any spelling.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let name = name.into();
        self.remove(&name);
        self.0.push((name, value.into()));
    }

    /// Adds a header, keeping any others of the same name.
    pub fn append(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0.push((name.into(), value.into()));
    }

    /// Removes every header of that name in any spelling; returns whether one was there.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.0.len();
        self.0.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.0.len() != before
    }

    /// The pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// How many pairs there are.
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

impl<N: Into<String>, V: Into<String>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        Headers(
            iter.into_iter()
                .map(|(n, v)| (n.into(), v.into()))
                .collect(),
        )
    }
}

impl IntoIterator for Headers {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// The envelope every hop carries, as headers on the wire and as a nested object in a DLQ entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// W3C trace id (32 lowercase hex digits).
    #[serde(default)]
    pub trace_id: String,
    /// The span of the hop that emitted this message (16 lowercase hex digits).
    #[serde(default)]
    pub span_id: String,
    /// W3C `traceparent`.
    #[serde(default)]
    pub traceparent: String,
    /// The run this message belongs to.
    #[serde(default)]
    pub flow_run_id: String,
    /// The flow.
    #[serde(default)]
    pub flow_id: String,
    /// The flow's version.
    #[serde(default)]
    pub flow_version: i64,
    /// Unique per hop of a run: the dedup key downstream.
    #[serde(default)]
    pub idempotency_key: String,
    /// The node whose output this message carries; its successors run next.
    #[serde(default)]
    pub source_node_id: String,
    /// Attempts made before this one (0 on the first delivery).
    #[serde(default)]
    pub retry_count: i64,
    /// When the message was emitted.
    #[serde(default)]
    pub emitted_at: GoTime,
}

impl Envelope {
    /// Writes the ten envelope headers in canonical spelling, replacing any present in another.
    ///
    /// Empty tracing fields are left out rather than sent empty.
    pub fn write_headers(&self, headers: &mut Headers) {
        // Into no headers (an event's, an output's: the common case) each is appended; else
        // replaced in any spelling, which compares every name already there.
        let fresh = headers.is_empty();
        let mut put = |name: &str, value: String| {
            if value.is_empty() {
                return;
            }
            if fresh {
                headers.append(name, value);
            } else {
                headers.insert(name, value);
            }
        };
        put(names::TRACE_ID, self.trace_id.clone());
        put(names::SPAN_ID, self.span_id.clone());
        put(names::TRACEPARENT, self.traceparent.clone());
        put(names::FLOW_RUN_ID, self.flow_run_id.clone());
        put(names::FLOW_ID, self.flow_id.clone());
        put(names::FLOW_VERSION, self.flow_version.to_string());
        put(names::IDEMPOTENCY_KEY, self.idempotency_key.clone());
        put(names::SOURCE_NODE_ID, self.source_node_id.clone());
        put(names::RETRY_COUNT, self.retry_count.to_string());
        put(names::EMITTED_AT, self.emitted_at.to_string());
    }

    /// The envelope headers alone.
    #[must_use]
    pub fn to_headers(&self) -> Headers {
        let mut h = Headers::new();
        self.write_headers(&mut h);
        h
    }

    /// Reads the envelope from headers, names compared ignoring case.
    ///
    /// `flow_run_id`, `flow_id`, `flow_version`, `idempotency_key` and `source_node_id` must be
    /// present; the tracing fields may be absent; `retry_count` defaults to 0 and `emitted_at` to
    /// Go's zero time. Every present value must be well formed, but for `traceparent`: one that
    /// does not parse is ignored (left empty), as W3C Trace Context says.
    ///
    /// # Errors
    /// [`EnvelopeError::Absent`] when no envelope header is there at all, else the first missing or
    /// malformed header, by name.
    pub fn from_headers(headers: &Headers) -> Result<Self, EnvelopeError> {
        Self::read(headers, Tracing::Strict)
    }

    /// The envelope of an **inbound** message, as a service reads it (docs/protocol.md §5):
    /// as [`Envelope::from_headers`], but a `trace_id` or `span_id` that is not lowercase hex of
    /// its width is ignored (left empty), like a traceparent that does not parse: tracing is
    /// never a reason to refuse work. What the service writes from this envelope (events, hops,
    /// outputs) then carries no malformed tracing value. The conformance checker, which judges
    /// what a service wrote, reads with [`Envelope::from_headers`].
    ///
    /// # Errors
    /// As [`Envelope::from_headers`], but never for `trace_id` or `span_id`.
    pub fn from_inbound_headers(headers: &Headers) -> Result<Self, EnvelopeError> {
        Self::read(headers, Tracing::Lenient)
    }

    fn read(headers: &Headers, tracing: Tracing) -> Result<Self, EnvelopeError> {
        // One pass over the headers (this runs for every message): each envelope header's first
        // value, in any spelling, by its place in names::ENVELOPE.
        let mut found: [Option<&str>; names::ENVELOPE.len()] = [None; names::ENVELOPE.len()];
        for (name, value) in headers.iter() {
            if let Some(i) = names::ENVELOPE
                .iter()
                .position(|n| n.eq_ignore_ascii_case(name))
                && found[i].is_none()
            {
                found[i] = Some(value);
            }
        }
        Self::from_values(found, tracing)
    }

    /// The envelope from the first value of each of [`names::ENVELOPE`], in its order.
    fn from_values(
        found: [Option<&str>; names::ENVELOPE.len()],
        tracing: Tracing,
    ) -> Result<Self, EnvelopeError> {
        if found.iter().all(Option::is_none) {
            return Err(EnvelopeError::Absent);
        }
        let [
            trace_id,
            span_id,
            traceparent,
            flow_run_id,
            flow_id,
            flow_version,
            idempotency_key,
            source_node_id,
            retry_count,
            emitted_at,
        ] = found;
        // What must be present for a message to be routed.
        for (header, value) in [
            (names::FLOW_RUN_ID, flow_run_id),
            (names::FLOW_ID, flow_id),
            (names::FLOW_VERSION, flow_version),
            (names::IDEMPOTENCY_KEY, idempotency_key),
            (names::SOURCE_NODE_ID, source_node_id),
        ] {
            if value.is_none_or(str::is_empty) {
                return Err(EnvelopeError::Missing { header });
            }
        }
        let text = |value: Option<&str>| value.unwrap_or_default().to_owned();
        // W3C Trace Context: a traceparent that does not parse is ignored (the trace restarts),
        // never a reason to refuse the message.
        let traceparent = traceparent
            .filter(|t| Traceparent::check(t).is_ok())
            .unwrap_or_default()
            .to_owned();
        let mut trace_id = trace_id;
        let mut span_id = span_id;
        for (name, value, width) in [
            (names::TRACE_ID, &mut trace_id, 32),
            (names::SPAN_ID, &mut span_id, 16),
        ] {
            let text = value.unwrap_or_default();
            if !text.is_empty() && !is_lower_hex(text, width) {
                match tracing {
                    Tracing::Lenient => *value = None,
                    Tracing::Strict => {
                        return Err(EnvelopeError::Invalid {
                            header: name,
                            value: text.to_owned(),
                            reason: format!("expected {width} lowercase hex digits"),
                        });
                    }
                }
            }
        }
        let flow_version = parse_count(flow_version, names::FLOW_VERSION)?;
        let retry_count = parse_count(retry_count, names::RETRY_COUNT)?;
        let emitted_at = match emitted_at {
            None => GoTime::ZERO,
            Some(v) => GoTime::parse(v).map_err(|e| EnvelopeError::Invalid {
                header: names::EMITTED_AT,
                value: v.to_owned(),
                reason: e.to_string(),
            })?,
        };
        Ok(Envelope {
            trace_id: text(trace_id),
            span_id: text(span_id),
            traceparent,
            flow_run_id: text(flow_run_id),
            flow_id: text(flow_id),
            flow_version: flow_version.unwrap_or_default(),
            idempotency_key: text(idempotency_key),
            source_node_id: text(source_node_id),
            retry_count: retry_count.unwrap_or_default(),
            emitted_at,
        })
    }

    /// The `Nats-Msg-Id` of this hop on NATS: the idempotency key.
    #[must_use]
    pub fn nats_msg_id(&self) -> &str {
        &self.idempotency_key
    }

    /// The `Nats-Msg-Id` of a DLQ publish: `<idempotency_key>:dlq:<unix_ns>`.
    #[must_use]
    pub fn dlq_msg_id(&self, unix_ns: i128) -> String {
        dlq_msg_id(&self.idempotency_key, unix_ns)
    }
}

/// `<idempotency_key>:dlq:<unix_ns>`, the `Nats-Msg-Id` of a DLQ publish.
#[must_use]
pub fn dlq_msg_id(idempotency_key: &str, unix_ns: i128) -> String {
    format!("{idempotency_key}:dlq:{unix_ns}")
}

/// Splits a DLQ `Nats-Msg-Id` into the idempotency key and the timestamp, if it has that form.
#[must_use]
pub fn parse_dlq_msg_id(msg_id: &str) -> Option<(&str, i128)> {
    let (key, ns) = msg_id.rsplit_once(":dlq:")?;
    if key.is_empty() || ns.is_empty() || !ns.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((key, ns.parse().ok()?))
}

fn parse_count(value: Option<&str>, name: &'static str) -> Result<Option<i64>, EnvelopeError> {
    let Some(value) = value else {
        return Ok(None);
    };
    // Canonical decimal only: what Go's strconv.Itoa writes for a non-negative int.
    let canonical = !value.is_empty()
        && value.bytes().all(|b| b.is_ascii_digit())
        && (value == "0" || !value.starts_with('0'));
    match value.parse::<i64>() {
        Ok(n) if canonical => Ok(Some(n)),
        _ => Err(EnvelopeError::Invalid {
            header: name,
            value: value.to_owned(),
            reason: "expected a non-negative integer as decimal text".into(),
        }),
    }
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A W3C `traceparent`: `<version>-<trace-id>-<parent-id>-<flags>` in lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Traceparent {
    /// Two hex digits; `ff` is invalid.
    pub version: String,
    /// 32 hex digits, not all zero.
    pub trace_id: String,
    /// 16 hex digits, not all zero.
    pub parent_id: String,
    /// Two hex digits; bit 0 is "sampled".
    pub flags: String,
}

impl Traceparent {
    /// A version-00 traceparent.
    #[must_use]
    pub fn new(trace_id: &str, parent_id: &str, sampled: bool) -> Self {
        Traceparent {
            version: "00".into(),
            trace_id: trace_id.into(),
            parent_id: parent_id.into(),
            flags: if sampled { "01" } else { "00" }.into(),
        }
    }

    /// Parses and checks a traceparent as the W3C Trace Context recommendation says.
    ///
    /// # Errors
    /// A [`TraceparentError`] saying which part is wrong.
    pub fn parse(s: &str) -> Result<Self, TraceparentError> {
        let [version, trace_id, parent_id, flags] = Self::parts(s)?;
        Ok(Traceparent {
            version: version.into(),
            trace_id: trace_id.into(),
            parent_id: parent_id.into(),
            flags: flags.into(),
        })
    }

    /// [`Traceparent::parse`]'s checks without keeping the parts (nothing is allocated).
    ///
    /// # Errors
    /// As [`Traceparent::parse`].
    pub fn check(s: &str) -> Result<(), TraceparentError> {
        Self::parts(s).map(|_| ())
    }

    /// The four parts, checked.
    fn parts(s: &str) -> Result<[&str; 4], TraceparentError> {
        // Version 00's shape, fixed (2-32-16-2 with dashes between), cut at its dashes when all
        // is well (every part is hex, so there is no other dash); anything else split on its
        // dashes, for the same verdict and the same error either way.
        let b = s.as_bytes();
        if b.len() == 55
            && b[2] == b'-'
            && b[35] == b'-'
            && b[52] == b'-'
            && let Ok(parts) = Self::checked([&s[..2], &s[3..35], &s[36..52], &s[53..]], false)
        {
            return Ok(parts);
        }
        Self::split_parts(s)
    }

    /// [`Traceparent::parts`] by splitting on every dash.
    fn split_parts(s: &str) -> Result<[&str; 4], TraceparentError> {
        let mut split = s.split('-');
        let mut parts = [""; 4];
        for part in &mut parts {
            *part = split.next().ok_or(TraceparentError::Shape)?;
        }
        let more = split.next().is_some();
        Self::checked(parts, more)
    }

    /// The four parts if each is well formed; `more` when the text had parts after them.
    fn checked(parts: [&str; 4], more: bool) -> Result<[&str; 4], TraceparentError> {
        let [version, trace_id, parent_id, flags] = parts;
        if !is_lower_hex(version, 2) {
            return Err(TraceparentError::Version);
        }
        if version == "ff" {
            return Err(TraceparentError::Version);
        }
        // Version 00 has exactly four parts; later versions may append more.
        if version == "00" && more {
            return Err(TraceparentError::Shape);
        }
        if !is_lower_hex(trace_id, 32) || trace_id.bytes().all(|b| b == b'0') {
            return Err(TraceparentError::TraceId);
        }
        if !is_lower_hex(parent_id, 16) || parent_id.bytes().all(|b| b == b'0') {
            return Err(TraceparentError::ParentId);
        }
        if !is_lower_hex(flags, 2) {
            return Err(TraceparentError::Flags);
        }
        Ok(parts)
    }
}

impl fmt::Display for Traceparent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-{}-{}-{}",
            self.version, self.trace_id, self.parent_id, self.flags
        )
    }
}

/// How [`Envelope`] reading treats a malformed `trace_id` or `span_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tracing {
    /// An error naming the header (judging what a service wrote).
    Strict,
    /// Ignored, left empty (a service reading its inbound message).
    Lenient,
}

#[cfg(test)]
mod tests {
    use proptest::strategy::Strategy as _;

    use super::*;

    /// The envelope as read before the single pass, by a lookup per field (kept as the reference
    /// the single pass must agree with).
    fn from_headers_by_lookup(headers: &Headers) -> Result<Envelope, EnvelopeError> {
        Envelope::from_values(
            names::ENVELOPE.map(|name| headers.get(name)),
            Tracing::Strict,
        )
    }

    proptest::proptest! {
        /// Any headers (envelope names in any spelling, repeated, empty, with bad values, among
        /// others) read the same in one pass as by a lookup per field: the same envelope, or the
        /// same error.
        #[test]
        fn the_single_pass_reads_what_the_lookups_read(
            pairs in proptest::collection::vec(
                (
                    proptest::prop_oneof![
                        proptest::sample::select(names::ENVELOPE.to_vec()).prop_map(|n: &str| n.to_owned()),
                        proptest::sample::select(names::ENVELOPE.to_vec())
                            .prop_map(|n: &str| n.to_ascii_lowercase()),
                        proptest::sample::select(vec!["Nats-Msg-Id", "X-Other"]).prop_map(|n: &str| n.to_owned()),
                    ],
                    proptest::prop_oneof![
                        proptest::sample::select(vec![
                            "", "0", "7", "07", "-1", "x", "run-1",
                            "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7",
                            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xx",
                            "2026-05-26T14:30:45.5Z", "yesterday",
                        ])
                        .prop_map(|n: &str| n.to_owned()),
                        "[a-z0-9-]{0,8}",
                    ],
                ),
                0..16,
            )
        ) {
            let mut headers = Headers::new();
            for (name, value) in pairs {
                headers.append(name, value);
            }
            let one_pass = Envelope::from_headers(&headers).map_err(|e| e.to_string());
            let by_lookup = from_headers_by_lookup(&headers).map_err(|e| e.to_string());
            proptest::prop_assert_eq!(one_pass, by_lookup);
        }
    }

    fn sample() -> Envelope {
        Envelope {
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
            span_id: "00f067aa0ba902b7".into(),
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            flow_run_id: "run-1".into(),
            flow_id: "flow-a".into(),
            flow_version: 3,
            idempotency_key: "run-1:n1".into(),
            source_node_id: "n1".into(),
            retry_count: 2,
            emitted_at: GoTime::parse("2026-05-26T14:30:45.1Z").unwrap(),
        }
    }

    #[test]
    fn round_trips_through_canonical_headers() {
        let env = sample();
        let h = env.to_headers();
        assert_eq!(h.len(), 10);
        assert_eq!(h.get(names::RETRY_COUNT), Some("2"));
        assert_eq!(h.get(names::EMITTED_AT), Some("2026-05-26T14:30:45.1Z"));
        assert!(h.iter().all(|(n, _)| names::ENVELOPE.contains(&n)));
        assert_eq!(Envelope::from_headers(&h).unwrap(), env);
    }

    #[test]
    fn reads_any_spelling() {
        let h: Headers = sample()
            .to_headers()
            .into_iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v))
            .collect();
        assert_eq!(Envelope::from_headers(&h).unwrap(), sample());
    }

    #[test]
    fn names_the_bad_header() {
        let mut h = sample().to_headers();
        h.insert("x-triggers-retry-count", "two");
        let err = Envelope::from_headers(&h).unwrap_err();
        assert!(
            matches!(err, EnvelopeError::Invalid { header, .. } if header == names::RETRY_COUNT)
        );
        let mut h = sample().to_headers();
        h.remove(names::FLOW_ID);
        assert!(matches!(
            Envelope::from_headers(&h),
            Err(EnvelopeError::Missing { header }) if header == names::FLOW_ID
        ));
        assert!(matches!(
            Envelope::from_headers(&Headers::new()),
            Err(EnvelopeError::Absent)
        ));
    }

    #[test]
    fn a_bad_traceparent_is_ignored_as_w3c_says() {
        let mut h = sample().to_headers();
        h.insert(names::TRACEPARENT, "00-0000-00f067aa0ba902b7-01");
        let read = Envelope::from_headers(&h).unwrap();
        assert_eq!(read.traceparent, "");
        assert_eq!(read.flow_run_id, sample().flow_run_id);
    }

    #[test]
    fn a_service_ignores_a_malformed_trace_or_span_id_the_checker_does_not() {
        for (name, bad) in [
            (names::TRACE_ID, "4BF92F3577B34DA6A3CE929D0E0E4736"),
            (names::SPAN_ID, "00f067aa"),
        ] {
            let mut h = sample().to_headers();
            h.insert(name, bad);
            assert!(
                matches!(Envelope::from_headers(&h), Err(EnvelopeError::Invalid { header, .. }) if header == name)
            );
            let read = Envelope::from_inbound_headers(&h).unwrap();
            let mut expected = sample();
            if name == names::TRACE_ID {
                expected.trace_id.clear();
            } else {
                expected.span_id.clear();
            }
            assert_eq!(read, expected, "{name}: {bad}");
        }
        // Everything else is as strict as ever.
        let mut h = sample().to_headers();
        h.insert(names::FLOW_VERSION, "x");
        assert!(Envelope::from_inbound_headers(&h).is_err());
    }

    #[test]
    fn traceparent_rules() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(Traceparent::parse(ok).unwrap().to_string(), ok);
        for bad in [
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "",
        ] {
            assert!(Traceparent::parse(bad).is_err(), "{bad}");
        }
        assert!(
            Traceparent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")
                .is_ok()
        );
    }

    #[test]
    fn the_fixed_shape_path_agrees_with_splitting() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            Traceparent::parts(ok).unwrap(),
            [
                "00",
                "4bf92f3577b34da6a3ce929d0e0e4736",
                "00f067aa0ba902b7",
                "01"
            ]
        );
        for at in 0..ok.len() {
            for with in ['-', '0', 'f', 'F', 'g', ' '] {
                let mut text = ok.to_owned();
                text.replace_range(at..=at, &with.to_string());
                assert_eq!(
                    Traceparent::parts(&text),
                    Traceparent::split_parts(&text),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn dlq_msg_id_form() {
        assert_eq!(sample().dlq_msg_id(42), "run-1:n1:dlq:42");
        assert_eq!(parse_dlq_msg_id("a:b:dlq:42"), Some(("a:b", 42)));
        assert_eq!(parse_dlq_msg_id("a:dlq:"), None);
        assert_eq!(parse_dlq_msg_id("a:dlq:x1"), None);
    }
}
