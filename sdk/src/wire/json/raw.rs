//! Raw JSON (Go's `json.RawMessage`) and compaction.

use serde::ser::{self, Serialize};
use serde_json::Value;

use super::{push_str, to_string};
use crate::error::JsonError;

/// A JSON document kept as its text: Go's `json.RawMessage`.
///
/// It is checked to be valid JSON when made, and written compacted (insignificant whitespace
/// removed, everything else byte for byte), which is what Go's encoder does with a `RawMessage`.
/// serde_json's serializers copy it as text too; any other serializer sees a string.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RawJson(Box<str>);

impl RawJson {
    /// Checks that `text` is one JSON value and keeps it as it is.
    ///
    /// # Errors
    /// The parser's message, with line and column, when `text` is not JSON.
    pub fn from_text(text: impl Into<String>) -> Result<Self, serde_json::Error> {
        let text = text.into();
        let mut de = serde_json::Deserializer::from_str(&text);
        <serde::de::IgnoredAny as serde::Deserialize>::deserialize(&mut de)?;
        de.end()?;
        Ok(RawJson(text.into_boxed_str()))
    }

    /// As [`RawJson::from_text`] for bytes, which must be UTF-8 JSON.
    ///
    /// # Errors
    /// When the bytes are not UTF-8 or not one JSON value.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        let text = std::str::from_utf8(bytes).map_err(|e| {
            <serde_json::Error as serde::de::Error>::custom(format!("not UTF-8: {e}"))
        })?;
        Self::from_text(text)
    }

    /// The body of a DLQ entry for a message's raw bytes, losing nothing: the bytes themselves when
    /// they are one JSON value, else a JSON string holding them (UTF-8 text as is, other bytes as
    /// `hex:` and their lowercase hex).
    #[must_use]
    pub fn from_message_body(bytes: &[u8]) -> Self {
        if let Ok(raw) = Self::from_slice(bytes) {
            return raw;
        }
        let text = match std::str::from_utf8(bytes) {
            Ok(text) => text.to_owned(),
            Err(_) => format!("hex:{}", hex::encode(bytes)),
        };
        let mut out = Vec::with_capacity(text.len() + 2);
        push_str(&mut out, &text);
        RawJson(
            String::from_utf8(out)
                .expect("escaped JSON is UTF-8")
                .into_boxed_str(),
        )
    }

    /// Encodes `value` with the Go writer and keeps the bytes.
    ///
    /// # Errors
    /// As [`to_vec`](super::to_vec).
    pub fn from_value<T: Serialize + ?Sized>(value: &T) -> Result<Self, JsonError> {
        Ok(RawJson(to_string(value)?.into_boxed_str()))
    }

    /// The JSON text as it was given.
    #[must_use]
    pub fn get(&self) -> &str {
        &self.0
    }

    /// Parses the text into a [`Value`].
    ///
    /// # Errors
    /// Never for a `RawJson` made by its constructors; kept fallible for the type's sake.
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.0)
    }
}

impl std::fmt::Debug for RawJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawJson({})", self.0)
    }
}

impl std::fmt::Display for RawJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for RawJson {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // serde_json's raw-value protocol (what its `RawValue` does): its serializers, text and
        // `Value`, take the text as it is, and so does this module's writer.
        use ser::SerializeStruct;
        let mut s = serializer.serialize_struct(SERDE_JSON_RAW_TOKEN, 1)?;
        s.serialize_field(SERDE_JSON_RAW_TOKEN, &*self.0)?;
        s.end()
    }
}

/// serde_json's name for a raw value: its deserializers hand such a newtype the exact text.
pub(super) const SERDE_JSON_RAW_TOKEN: &str = "$serde_json::private::RawValue";

impl<'de> serde::Deserialize<'de> for RawJson {
    /// From serde_json's deserializer (text or `Value`), the exact text; from any other (serde's
    /// buffering for `flatten` and internally tagged enums included), the value re-written as
    /// JSON.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RawVisitor;
        impl<'de> serde::de::Visitor<'de> for RawVisitor {
            type Value = RawJson;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<RawJson, A::Error> {
                // serde_json's raw-value protocol: one entry, the token, then the text.
                match map.next_key::<String>()? {
                    Some(key) if key == SERDE_JSON_RAW_TOKEN => {
                        let text: String = map.next_value()?;
                        Ok(RawJson(text.into_boxed_str()))
                    }
                    first => {
                        // A plain object reached us (a non-serde_json deserializer): rebuild it.
                        let mut object = serde_json::Map::new();
                        if let Some(key) = first {
                            object.insert(key, map.next_value()?);
                            while let Some((k, v)) = map.next_entry::<String, Value>()? {
                                object.insert(k, v);
                            }
                        }
                        RawJson::from_plain(&Value::Object(object))
                    }
                }
            }
            fn visit_newtype_struct<D: serde::Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<RawJson, D::Error> {
                RawJson::from_plain(&<Value as serde::Deserialize>::deserialize(d)?)
            }
            fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<RawJson, D::Error> {
                RawJson::from_plain(&<Value as serde::Deserialize>::deserialize(d)?)
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<RawJson, E> {
                Ok(RawJson("null".into()))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<RawJson, E> {
                Ok(RawJson("null".into()))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<RawJson, E> {
                RawJson::from_plain(&Value::Bool(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RawJson, E> {
                RawJson::from_plain(&Value::from(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RawJson, E> {
                RawJson::from_plain(&Value::from(v))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<RawJson, E> {
                RawJson::from_plain(&Value::from(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawJson, E> {
                RawJson::from_plain(&Value::from(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<RawJson, A::Error> {
                let mut items = Vec::new();
                while let Some(v) = seq.next_element::<Value>()? {
                    items.push(v);
                }
                RawJson::from_plain(&Value::Array(items))
            }
        }
        deserializer.deserialize_newtype_struct(SERDE_JSON_RAW_TOKEN, RawVisitor)
    }
}

impl RawJson {
    fn from_plain<E: serde::de::Error>(value: &Value) -> Result<Self, E> {
        serde_json::to_string(value)
            .map(|s| RawJson(s.into_boxed_str()))
            .map_err(E::custom)
    }
}

/// JSON text without insignificant whitespace (Go's `json.Compact`); everything else, string
/// contents and number text included, byte for byte.
#[must_use]
pub fn compact(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    compact_bytes_into(&mut out, text);
    out
}

pub(super) fn compact_into(out: &mut Vec<u8>, text: &str) {
    compact_bytes_into(out, text.as_bytes());
}

fn compact_bytes_into(out: &mut Vec<u8>, text: &[u8]) {
    let mut in_string = false;
    let mut escaped = false;
    for &b in text {
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            if b == b'"' {
                in_string = true;
            }
            out.push(b);
        }
    }
}
