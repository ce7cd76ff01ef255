//! JSON objects as they were written, field by field: the field set, types and time text of a
//! shape, and the comparison of the received bytes with Go's encoding of the decoded value.
//!
//! The typed decoders of `triggers_sdk::wire` follow Go's decoder, which forgives (unknown keys,
//! `null`, keys in any order); a conformance checker must not. So the checks here read the object
//! as an ordered list of keys and raw values.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;
use triggers_sdk::wire::GoTime;

use super::Report;

/// A JSON object's fields in the order written, repeats kept, values as their raw text.
pub(super) struct Object(pub(super) Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Object;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Object, A::Error> {
                let mut fields = Vec::new();
                while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                    fields.push(entry);
                }
                Ok(Object(fields))
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

impl Object {
    /// Reads `bytes` as one JSON object.
    pub(super) fn parse(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The value of `key`; the last one when repeated, as Go's decoder keeps the last.
    pub(super) fn get(&self, key: &str) -> Option<&RawValue> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| &**v)
    }

    /// The keys in order, each once (first occurrence).
    fn keys(&self) -> Vec<&str> {
        let mut seen = BTreeSet::new();
        self.0
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| seen.insert(*k))
            .collect()
    }
}

/// What a field holds.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    /// A string.
    Str,
    /// `true` or `false`.
    Bool,
    /// An integer that fits an `int64`.
    Int,
    /// Go's time text.
    Time,
    /// A nested struct.
    Struct(&'static Shape),
    /// Any JSON (raw).
    Any,
}

/// One field of a shape.
pub(super) struct Field {
    pub(super) name: &'static str,
    pub(super) kind: Kind,
    /// Go's `omitempty`: left out when empty, so present-but-empty is not Go's bytes.
    pub(super) omitempty: bool,
}

/// A struct shape of the contract: its name (for messages) and its fields in Go's order.
pub(super) struct Shape {
    pub(super) name: &'static str,
    pub(super) fields: &'static [Field],
}

impl Shape {
    fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    fn names(&self) -> String {
        self.fields
            .iter()
            .map(|f| f.name)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

const fn always(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        omitempty: false,
    }
}

const fn omitempty(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        omitempty: true,
    }
}

/// `{service, service_version, manifest_hash, started_at, now, shutting_down}`, all always present.
pub(super) const HEARTBEAT: Shape = Shape {
    name: "heartbeat",
    fields: &[
        always("service", Kind::Str),
        always("service_version", Kind::Str),
        always("manifest_hash", Kind::Str),
        always("started_at", Kind::Time),
        always("now", Kind::Time),
        always("shutting_down", Kind::Bool),
    ],
};

/// The completion event; `error` and `trace_id` are omitempty.
pub(super) const COMPLETION_EVENT: Shape = Shape {
    name: "completion event",
    fields: &[
        always("flow_run_id", Kind::Str),
        always("flow_id", Kind::Str),
        always("flow_version", Kind::Int),
        always("node_id", Kind::Str),
        always("node_type", Kind::Str),
        always("service", Kind::Str),
        always("started_at", Kind::Time),
        always("finished_at", Kind::Time),
        always("status", Kind::Str),
        omitempty("error", Kind::Str),
        omitempty("trace_id", Kind::Str),
    ],
};

/// The envelope as a DLQ entry nests it: all ten fields.
pub(super) const ENVELOPE: Shape = Shape {
    name: "envelope",
    fields: &[
        always("trace_id", Kind::Str),
        always("span_id", Kind::Str),
        always("traceparent", Kind::Str),
        always("flow_run_id", Kind::Str),
        always("flow_id", Kind::Str),
        always("flow_version", Kind::Int),
        always("idempotency_key", Kind::Str),
        always("source_node_id", Kind::Str),
        always("retry_count", Kind::Int),
        always("emitted_at", Kind::Time),
    ],
};

/// `{kind, envelope, body, err_msg, occurred_at}`.
pub(super) const DLQ_ENTRY: Shape = Shape {
    name: "DLQ entry",
    fields: &[
        always("kind", Kind::Str),
        always("envelope", Kind::Struct(&ENVELOPE)),
        always("body", Kind::Any),
        always("err_msg", Kind::Str),
        always("occurred_at", Kind::Time),
    ],
};

/// Fields already reported, by JSON path (`started_at`, `envelope.emitted_at`): the Go-bytes
/// comparison does not report them again.
pub(super) type Explained = BTreeSet<String>;

/// Checks `object` against `shape`: repeated, missing and unknown fields, types, `null`s, time text,
/// empty omitempty fields. `unknown_rule` picks the rule for a field outside the shape. Every field
/// reported goes into `explained`.
pub(super) fn check_fields(
    report: &mut Report<'_>,
    shape: &Shape,
    object: &Object,
    prefix: &str,
    unknown_rule: fn(&str) -> &'static str,
    explained: &mut Explained,
) {
    let path = |key: &str| format!("{prefix}{key}");
    for key in object.keys() {
        let count = object.0.iter().filter(|(k, _)| k == key).count();
        if count > 1 {
            report.push(
                "duplicate_field",
                format!(
                    "`{}` appears {count} times in the {}; Go writes each field once (Go's \
                     decoder keeps the last, stricter ones refuse the message)",
                    path(key),
                    shape.name
                ),
            );
            explained.insert(path(key));
        }
        if shape.field(key).is_none() {
            let rule = unknown_rule(key);
            let why = if rule == "unknown_field" {
                String::new()
            } else {
                " (there is no result body: output travels through the flow graph)".to_owned()
            };
            report.push(
                rule,
                format!(
                    "`{}` is not a field of the {}{why}; its fields are {}",
                    path(key),
                    shape.name,
                    shape.names()
                ),
            );
            explained.insert(path(key));
        }
    }
    for field in shape.fields {
        let at = path(field.name);
        let Some(raw) = object.get(field.name) else {
            if !field.omitempty {
                report.push(
                    "missing_field",
                    format!(
                        "`{at}` is missing; the {} always carries it (Go writes it even when \
                         empty)",
                        shape.name
                    ),
                );
                explained.insert(at);
            }
            continue;
        };
        if check_value(report, shape, field, &at, raw, explained) {
            explained.insert(at);
        }
    }
}

/// Checks one present field; true when something was reported on it.
fn check_value(
    report: &mut Report<'_>,
    shape: &Shape,
    field: &Field,
    at: &str,
    raw: &RawValue,
    explained: &mut Explained,
) -> bool {
    let text = raw.get();
    if text == "null" {
        if matches!(field.kind, Kind::Any) {
            return false;
        }
        let go_writes = if field.omitempty {
            "leaves it out when empty".to_owned()
        } else {
            format!("writes {} (the zero value)", zero_text(field.kind))
        };
        report.push(
            "null_field",
            format!("`{at}` is null; Go {go_writes}, never null"),
        );
        return true;
    }
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        // Unreachable for text serde_json itself split out; nothing to add if it happens.
        Err(_) => return false,
    };
    let ok = match (field.kind, &value) {
        (Kind::Str, Value::String(s)) => {
            if field.omitempty && s.is_empty() {
                report.push(
                    "empty_omitempty_field",
                    format!(
                        "`{at}` is present but empty; Go leaves it out of the {} (omitempty)",
                        shape.name
                    ),
                );
                return true;
            }
            true
        }
        (Kind::Bool, Value::Bool(_)) | (Kind::Any, _) => true,
        (Kind::Int, Value::Number(_)) => is_int64_text(text),
        (Kind::Time, Value::String(s)) => return !time_is_go_text(report, at, s),
        (Kind::Struct(nested), Value::Object(_)) => {
            return match Object::parse(text.as_bytes()) {
                Ok(object) => {
                    // Nested fields are explained one by one, so the object is compared field by
                    // field too.
                    check_fields(
                        report,
                        nested,
                        &object,
                        &format!("{at}."),
                        |_| "unknown_field",
                        explained,
                    );
                    false
                }
                Err(_) => false,
            };
        }
        _ => false,
    };
    if !ok {
        report.push(
            "wrong_type",
            format!(
                "`{at}` is {} `{}`; the {} has {} there",
                json_kind(&value),
                clip(text, 60),
                shape.name,
                expected_text(field.kind)
            ),
        );
        return true;
    }
    false
}

/// Checks that `text` is RFC 3339 and Go's exact text for that instant; reports and returns false
/// when it is not.
pub(super) fn time_is_go_text(report: &mut Report<'_>, at: &str, text: &str) -> bool {
    match GoTime::parse(text) {
        Err(e) => {
            report.push(
                "time_invalid",
                format!(
                    "`{at}` is {text:?}, not RFC 3339 ({e}); Go writes RFC 3339 with nanoseconds, \
                     trailing zeros trimmed, like \"2026-05-26T14:30:45.1Z\""
                ),
            );
            false
        }
        Ok(t) if t.to_string() != text => {
            report.push(
                "time_not_go_text",
                format!(
                    "`{at}` is {text:?}; Go reads it, and writes {:?} (nanoseconds with trailing \
                     zeros trimmed, no fraction at zero, Z for UTC)",
                    t.to_string()
                ),
            );
            false
        }
        Ok(_) => true,
    }
}

/// Whether a JSON number's text is an integer Go decodes into an `int64`: no fraction, no
/// exponent, in range.
fn is_int64_text(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && text.parse::<i64>().is_ok()
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn expected_text(kind: Kind) -> &'static str {
    match kind {
        Kind::Str => "a string",
        Kind::Bool => "a boolean",
        Kind::Int => "an integer (int64, no fraction or exponent)",
        Kind::Time => "a time string",
        Kind::Struct(_) => "an object",
        Kind::Any => "any JSON",
    }
}

fn zero_text(kind: Kind) -> &'static str {
    match kind {
        Kind::Str => "\"\"",
        Kind::Bool => "false",
        Kind::Int => "0",
        Kind::Time => "\"0001-01-01T00:00:00Z\"",
        Kind::Struct(_) => "the object with zero fields",
        Kind::Any => "null",
    }
}

/// `text` cut to about `max` bytes (on a character boundary), with an ellipsis when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// JSON text without insignificant whitespace (Go's `json.Compact`).
pub(super) fn compact(bytes: &[u8]) -> Vec<u8> {
    triggers_sdk::wire::json::compact(bytes)
}

/// Where `a` and `b` first differ, and the differing stretch of each with a little context: the
/// common prefix and suffix are trimmed, so `…"factor":2.0,"max…` faces `…"factor":2,"max…`.
pub(super) fn first_difference(a: &[u8], b: &[u8]) -> (usize, String, String) {
    const CONTEXT: usize = 12;
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let max_suffix = a.len().min(b.len()) - prefix;
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(max_suffix)
        .take_while(|(x, y)| x == y)
        .count();
    let window = |bytes: &[u8]| {
        let start = prefix.saturating_sub(CONTEXT);
        // A long stretch (keys reordered) is cut: the start of it says enough.
        let end = (bytes.len() - suffix + CONTEXT)
            .min(prefix + 3 * CONTEXT)
            .min(bytes.len());
        format!(
            "{}{}{}",
            if start > 0 { "…" } else { "" },
            printable(&bytes[start..end]),
            if end < bytes.len() { "…" } else { "" }
        )
    };
    (prefix, window(a), window(b))
}

/// Bytes as text for a message: invalid UTF-8 replaced, control characters escaped.
fn printable(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Compares the received bytes with `go`, the Go encoding of the value they decode to, and says how
/// they differ beyond the `explained` fields; `None` when they do not. `nested` lists the paths of
/// struct fields compared field by field (`envelope`).
pub(super) fn go_bytes_difference(
    received: &[u8],
    go: &[u8],
    explained: &Explained,
    nested: &[&str],
) -> Option<String> {
    if received == go {
        return None;
    }
    let (Ok(ours), Ok(gos)) = (Object::parse(received), Object::parse(go)) else {
        return None;
    };
    let mut reasons: Vec<Reason> = Vec::new();
    let compacted = compact(received);
    if compacted != received {
        reasons.push(Reason::text(
            "insignificant whitespace (Go writes compact JSON, without a trailing newline)",
        ));
    }
    // Keys re-escaped as Go escapes them, values as written: any difference is in a key's text.
    let mut rebuilt = b"{".to_vec();
    for (i, (key, raw)) in ours.0.iter().enumerate() {
        if i > 0 {
            rebuilt.push(b',');
        }
        rebuilt.extend(triggers_sdk::wire::json::to_vec(key).unwrap_or_default());
        rebuilt.push(b':');
        rebuilt.extend(compact(raw.get().as_bytes()));
    }
    rebuilt.push(b'}');
    if rebuilt != compacted {
        reasons.push(Reason::text(
            "a key is escaped otherwise than Go escapes it",
        ));
    }
    compare_level(&ours, &gos, "", explained, nested, &mut reasons);
    if reasons.is_empty() {
        return None;
    }
    let (at, got, want) = first_difference(received, go);
    let reasons: Vec<String> = reasons
        .into_iter()
        .map(|r| match r.snippets {
            // The snippet that closes the message says it already.
            Some(pair) if pair == (got.clone(), want.clone()) => r.text,
            Some((ours, gos)) => format!("{}: `{ours}` where Go writes `{gos}`", r.text),
            None => r.text,
        })
        .collect();
    Some(format!(
        "{}; first difference at byte {at}: got `{got}`, Go writes `{want}`",
        reasons.join("; ")
    ))
}

/// One way the bytes differ from Go's; a differing value carries its snippets.
struct Reason {
    text: String,
    snippets: Option<(String, String)>,
}

impl Reason {
    fn text(text: impl Into<String>) -> Self {
        Reason {
            text: text.into(),
            snippets: None,
        }
    }
}

fn compare_level(
    ours: &Object,
    gos: &Object,
    prefix: &str,
    explained: &Explained,
    nested: &[&str],
    reasons: &mut Vec<Reason>,
) {
    let path = |key: &str| format!("{prefix}{key}");
    let our_keys: Vec<&str> = ours
        .keys()
        .into_iter()
        .filter(|k| !explained.contains(&path(k)))
        .collect();
    let go_keys: Vec<&str> = gos
        .keys()
        .into_iter()
        .filter(|k| !explained.contains(&path(k)))
        .collect();
    for key in our_keys.iter().filter(|k| !go_keys.contains(k)) {
        reasons.push(Reason::text(format!(
            "`{}` is written; Go leaves it out",
            path(key)
        )));
    }
    for key in go_keys.iter().filter(|k| !our_keys.contains(k)) {
        reasons.push(Reason::text(format!(
            "`{}` is left out; Go writes it",
            path(key)
        )));
    }
    let our_order: Vec<&str> = our_keys
        .iter()
        .copied()
        .filter(|k| go_keys.contains(k))
        .collect();
    let go_order: Vec<&str> = go_keys
        .iter()
        .copied()
        .filter(|k| our_keys.contains(k))
        .collect();
    if our_order != go_order {
        reasons.push(Reason::text(format!(
            "{} fields in the order {}; Go writes {}",
            if prefix.is_empty() {
                "top-level".to_owned()
            } else {
                format!("`{}`", prefix.trim_end_matches('.'))
            },
            our_order.join(", "),
            go_order.join(", ")
        )));
    }
    for key in go_order {
        let (Some(our_raw), Some(go_raw)) = (ours.get(key), gos.get(key)) else {
            continue;
        };
        let our_text = compact(our_raw.get().as_bytes());
        let go_text = go_raw.get().as_bytes();
        // Readers take `null` and `[]` alike for a list, and Go writes either (nil or empty slice).
        if our_text == go_text
            || matches!(
                (&our_text[..], go_text),
                (b"null", b"[]") | (b"[]", b"null")
            )
        {
            continue;
        }
        let at = path(key);
        if nested.contains(&at.as_str())
            && let (Ok(our_inner), Ok(go_inner)) =
                (Object::parse(&our_text), Object::parse(go_text))
        {
            compare_level(
                &our_inner,
                &go_inner,
                &format!("{at}."),
                explained,
                nested,
                reasons,
            );
            continue;
        }
        let (_, got, want) = first_difference(&our_text, go_text);
        reasons.push(Reason {
            text: format!("`{at}` differs"),
            snippets: Some((got, want)),
        });
    }
}
