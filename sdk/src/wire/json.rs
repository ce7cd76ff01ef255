//! The one JSON writer of the wire contract: Go's `json.Encoder` with `SetEscapeHTML(false)` and the
//! trailing newline stripped.
//!
//! Every JSON document the SDK, the emulator and the tools emit goes through [`to_vec`], so that the
//! bytes are what the Go reference SDK writes for the same value:
//!
//! - struct fields in declared order (serde's order), map keys sorted byte-wise (Go sorts map keys);
//! - integers as plain decimal, floats as Go's `float64` text (shortest round-trip digits, exponent
//!   form below `1e-6` and from `1e21` on, `e-7` not `e-07`, `-0` kept);
//! - strings escaped as Go >= 1.22 does without HTML escaping: `"` `\\` `\n` `\r` `\t` `\b` `\f`
//!   short, other bytes below 0x20 as `\u00xx` (lowercase hex), U+2028 and U+2029 as `\u2028`
//!   `\u2029`, everything else (including `<>&`, DEL, `/` and non-ASCII) literal UTF-8.
//!
//! Free-form JSON (schemas, config maps, flow bodies) is `map[string]any` on the Go side, where every
//! number is a `float64`. Fields that hold such values serialise through [`go_any`], which sends every
//! number through `f64` exactly as Go's decoder would.

use std::fmt::Display;

use serde::ser::{self, Serialize};
use serde_json::Value;

use crate::error::JsonError;

/// Encodes `value` as Go's `json.Encoder` (HTML escaping off, trailing newline stripped) would.
///
/// # Errors
/// Fails on values JSON cannot carry (NaN, infinities, non-string map keys), as Go's encoder does.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, JsonError> {
    let mut writer = Writer::new();
    value.serialize(&mut writer)?;
    Ok(writer.out)
}

/// [`to_vec`] as a `String` (the output is always UTF-8).
///
/// # Errors
/// As [`to_vec`].
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, JsonError> {
    let bytes = to_vec(value)?;
    // The writer only ever appends UTF-8: escapes are ASCII and strings are copied from `&str`.
    Ok(String::from_utf8(bytes).expect("the Go JSON writer emits UTF-8"))
}

/// Serialises a free-form JSON value as Go's `any` decoded from JSON: every number as a `float64`.
///
/// Use as `#[serde(serialize_with = "go_any")]` on `Value` fields (schemas, configs, flow bodies).
///
/// # Errors
/// As the underlying serializer.
pub fn go_any<S: ser::Serializer>(value: &Value, serializer: S) -> Result<S::Ok, S::Error> {
    GoAny(value).serialize(serializer)
}

/// As [`go_any`] for an optional value (`None` is `null`).
///
/// # Errors
/// As the underlying serializer.
pub fn go_any_opt<S: ser::Serializer>(
    value: &Option<Value>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => GoAny(v).serialize(serializer),
        None => serializer.serialize_none(),
    }
}

/// A borrowed free-form value that serialises as Go's `any` (numbers through `float64`).
#[derive(Debug, Clone, Copy)]
pub struct GoAny<'a>(pub &'a Value);

impl Serialize for GoAny<'_> {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Value::Null => serializer.serialize_none(),
            Value::Bool(b) => serializer.serialize_bool(*b),
            // `as_f64` rounds u64/i64 to nearest-even, as Go's ParseFloat does on the same digits.
            Value::Number(n) => serializer.serialize_f64(n.as_f64().unwrap_or(f64::NAN)),
            Value::String(s) => serializer.serialize_str(s),
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&GoAny(item))?;
                }
                seq.end()
            }
            Value::Object(map) => {
                let mut m = serializer.serialize_map(Some(map.len()))?;
                for (k, v) in map {
                    m.serialize_entry(k, &GoAny(v))?;
                }
                m.end()
            }
        }
    }
}

/// Appends Go's `float64` JSON text for `f` (the caller has rejected NaN and infinities).
pub(crate) fn push_f64(out: &mut Vec<u8>, f: f64) {
    if f == 0.0 {
        // ryu-js follows JavaScript, which prints negative zero as "0"; Go prints "-0".
        out.extend_from_slice(if f.is_sign_negative() { b"-0" } else { b"0" });
        return;
    }
    // JavaScript's Number#toString and Go's encoder agree on everything else: shortest digits,
    // exponent form below 1e-6 and from 1e21 on, exponent without leading zeros, `e+` for positive.
    let mut buf = ryu_js::Buffer::new();
    out.extend_from_slice(buf.format_finite(f).as_bytes());
}

/// Appends Go's `float32` JSON text (same thresholds, float32 shortest digits).
fn push_f32(out: &mut Vec<u8>, f: f32) {
    if f == 0.0 {
        out.extend_from_slice(if f.is_sign_negative() { b"-0" } else { b"0" });
        return;
    }
    let mut buf = ryu_js::Buffer::new();
    out.extend_from_slice(buf.format_finite(f).as_bytes());
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// What each byte needs: 0 nothing, `u` a `\u00xx` escape, `E` a look at U+2028/U+2029 (0xE2
/// starts both), anything else the letter of a short escape. A table, as in serde_json: the common
/// case is one load and one compare per byte.
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[b'\n' as usize] = b'n';
    table[b'\r' as usize] = b'r';
    table[b'\t' as usize] = b't';
    table[0x08] = b'b';
    table[0x0c] = b'f';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table[0xe2] = b'E';
    table
};

/// Appends `s` as a Go JSON string literal (quotes included), HTML escaping off.
pub(crate) fn push_str(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let escape = ESCAPE[usize::from(b)];
        if escape == 0 {
            i += 1;
            continue;
        }
        if escape == b'E' {
            // U+2028 and U+2029 are E2 80 A8 / E2 80 A9; other E2 sequences stay literal.
            match (bytes.get(i + 1), bytes.get(i + 2)) {
                (Some(0x80), Some(&last @ (0xa8 | 0xa9))) => {
                    out.extend_from_slice(&bytes[start..i]);
                    out.extend_from_slice(if last == 0xa8 { b"\\u2028" } else { b"\\u2029" });
                    i += 3;
                    start = i;
                }
                _ => i += 1,
            }
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        if escape == b'u' {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
        } else {
            out.extend_from_slice(&[b'\\', escape]);
        }
        i += 1;
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

impl ser::Error for JsonError {
    fn custom<T: Display>(msg: T) -> Self {
        JsonError::Custom(msg.to_string())
    }
}

struct Writer {
    out: Vec<u8>,
    /// Set for [`RawJson`]'s field: the next string is JSON text to copy, not to quote.
    raw_next: bool,
}

/// Writes a sequence or a struct: elements separated by commas, in order.
struct Compound<'w> {
    writer: &'w mut Writer,
    first: bool,
    /// What closes it: `]` or `}`, plus `}` when it is wrapped in an enum variant object.
    close: &'static [u8],
    /// serde_json's raw-value struct: its one field is JSON text to copy, with no braces.
    raw: bool,
}

impl Compound<'_> {
    fn comma(&mut self) {
        if !self.first {
            self.writer.out.push(b',');
        }
        self.first = false;
    }

    fn finish(self) -> Result<(), JsonError> {
        self.writer.out.extend_from_slice(self.close);
        Ok(())
    }
}

/// Writes a map: Go sorts map keys byte-wise.
///
/// Entries are written straight to the output and their spans remembered. Maps usually arrive
/// sorted already (`serde_json::Map` is a `BTreeMap`, whose `String` order is byte-wise), and then
/// nothing more is done; otherwise the spans are reordered on `end`.
struct SortedMap<'w> {
    writer: &'w mut Writer,
    /// Offset just after the `{`.
    start: usize,
    /// Every key, raw, one after the other (one buffer for the map, not one per key).
    keys: String,
    /// Each entry's key span in `keys` and the span of its `"key":value` text in the output.
    entries: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    in_order: bool,
}

impl Writer {
    fn new() -> Self {
        Writer {
            out: Vec::with_capacity(128),
            raw_next: false,
        }
    }

    fn open(&mut self, open: u8, close: &'static [u8]) -> Compound<'_> {
        self.out.push(open);
        Compound {
            writer: self,
            first: true,
            close,
            raw: false,
        }
    }

    /// `{"variant":` for externally tagged enum variants (serde_json's form; Go has no enums).
    fn open_variant(&mut self, variant: &str) {
        self.out.push(b'{');
        push_str(&mut self.out, variant);
        self.out.push(b':');
    }
}

impl<'w> ser::Serializer for &'w mut Writer {
    type Ok = ();
    type Error = JsonError;
    type SerializeSeq = Compound<'w>;
    type SerializeTuple = Compound<'w>;
    type SerializeTupleStruct = Compound<'w>;
    type SerializeTupleVariant = Compound<'w>;
    type SerializeMap = SortedMap<'w>;
    type SerializeStruct = Compound<'w>;
    type SerializeStructVariant = Compound<'w>;

    fn serialize_bool(self, v: bool) -> Result<(), JsonError> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), JsonError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<(), JsonError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<(), JsonError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<(), JsonError> {
        self.out
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> Result<(), JsonError> {
        self.out
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> Result<(), JsonError> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<(), JsonError> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<(), JsonError> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<(), JsonError> {
        self.out
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Result<(), JsonError> {
        self.out
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), JsonError> {
        if !v.is_finite() {
            return Err(JsonError::UnsupportedFloat(f64::from(v)));
        }
        push_f32(&mut self.out, v);
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Result<(), JsonError> {
        if !v.is_finite() {
            return Err(JsonError::UnsupportedFloat(v));
        }
        push_f64(&mut self.out, v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), JsonError> {
        push_str(&mut self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), JsonError> {
        if std::mem::take(&mut self.raw_next) {
            compact_into(&mut self.out, v);
        } else {
            push_str(&mut self.out, v);
        }
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), JsonError> {
        // Go encodes []byte as base64; nothing on the wire uses it, so refuse loudly.
        Err(JsonError::Custom(format!(
            "raw bytes ({} bytes) have no JSON form on the wire",
            v.len()
        )))
    }
    fn serialize_none(self) -> Result<(), JsonError> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), JsonError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), JsonError> {
        self.serialize_none()
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), JsonError> {
        self.serialize_none()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), JsonError> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), JsonError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), JsonError> {
        self.open_variant(variant);
        value.serialize(&mut *self)?;
        self.out.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'w>, JsonError> {
        Ok(self.open(b'[', b"]"))
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'w>, JsonError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Compound<'w>, JsonError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'w>, JsonError> {
        self.open_variant(variant);
        Ok(self.open(b'[', b"]}"))
    }
    fn serialize_map(self, len: Option<usize>) -> Result<SortedMap<'w>, JsonError> {
        self.out.push(b'{');
        Ok(SortedMap {
            start: self.out.len(),
            writer: self,
            keys: String::new(),
            entries: Vec::with_capacity(len.unwrap_or(0)),
            in_order: true,
        })
    }
    fn serialize_struct(self, name: &'static str, _len: usize) -> Result<Compound<'w>, JsonError> {
        if name == SERDE_JSON_RAW_TOKEN {
            return Ok(Compound {
                writer: self,
                first: true,
                close: b"",
                raw: true,
            });
        }
        Ok(self.open(b'{', b"}"))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'w>, JsonError> {
        self.open_variant(variant);
        Ok(self.open(b'{', b"}}"))
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = JsonError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), JsonError> {
        self.comma();
        value.serialize(&mut *self.writer)
    }
    fn end(self) -> Result<(), JsonError> {
        self.finish()
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = JsonError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), JsonError> {
        ser::SerializeSeq::serialize_element(self, value)
    }
    fn end(self) -> Result<(), JsonError> {
        self.finish()
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = JsonError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), JsonError> {
        ser::SerializeSeq::serialize_element(self, value)
    }
    fn end(self) -> Result<(), JsonError> {
        self.finish()
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = JsonError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), JsonError> {
        ser::SerializeSeq::serialize_element(self, value)
    }
    fn end(self) -> Result<(), JsonError> {
        self.finish()
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = JsonError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), JsonError> {
        if self.raw {
            self.writer.raw_next = true;
            return value.serialize(&mut *self.writer);
        }
        self.comma();
        push_str(&mut self.writer.out, key);
        self.writer.out.push(b':');
        value.serialize(&mut *self.writer)
    }
    fn end(self) -> Result<(), JsonError> {
        self.finish()
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = JsonError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), JsonError> {
        ser::SerializeStruct::serialize_field(self, key, value)
    }
    fn end(self) -> Result<(), JsonError> {
        self.finish()
    }
}

impl ser::SerializeMap for SortedMap<'_> {
    type Ok = ();
    type Error = JsonError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), JsonError> {
        let key_start = self.keys.len();
        key.serialize(MapKey(&mut self.keys))?;
        let key_range = key_start..self.keys.len();
        if let Some((last, _)) = self.entries.last() {
            if self.keys.as_bytes()[key_range.clone()] < self.keys.as_bytes()[last.clone()] {
                self.in_order = false;
            }
            self.writer.out.push(b',');
        }
        let begin = self.writer.out.len();
        push_str(&mut self.writer.out, &self.keys[key_range.clone()]);
        self.writer.out.push(b':');
        self.entries.push((key_range, begin..usize::MAX));
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), JsonError> {
        value.serialize(&mut *self.writer)?;
        if let Some((_, span)) = self.entries.last_mut() {
            span.end = self.writer.out.len();
        }
        Ok(())
    }
    fn end(mut self) -> Result<(), JsonError> {
        if !self.in_order {
            // Byte-wise order, as Go's encoder sorts map keys; stable for a repeated key, which
            // only a hand-written Serialize impl can produce.
            let keys = self.keys.as_bytes();
            self.entries
                .sort_by(|a, b| keys[a.0.clone()].cmp(&keys[b.0.clone()]));
            let written = self.writer.out.split_off(self.start);
            for (i, (_, span)) in self.entries.iter().enumerate() {
                if i > 0 {
                    self.writer.out.push(b',');
                }
                self.writer
                    .out
                    .extend_from_slice(&written[span.start - self.start..span.end - self.start]);
            }
        }
        self.writer.out.push(b'}');
        Ok(())
    }
}

/// Appends a map key, as Go would write it, to the map's key buffer: strings as they are,
/// integers as decimal text.
struct MapKey<'k>(&'k mut String);

macro_rules! key_from_integer {
    ($($method:ident: $ty:ty),*) => {
        $(fn $method(self, v: $ty) -> Result<(), JsonError> {
            self.0.push_str(itoa::Buffer::new().format(v));
            Ok(())
        })*
    };
}

macro_rules! key_refused {
    ($($method:ident$(<$gen:ident>)?($($arg:ident: $ty:ty),*) -> $ret:ty),* $(,)?) => {
        $(fn $method$(<$gen: Serialize + ?Sized>)?(self, $($arg: $ty),*) -> Result<$ret, JsonError> {
            $(let _ = $arg;)*
            Err(JsonError::MapKeyNotString)
        })*
    };
}

impl ser::Serializer for MapKey<'_> {
    type Ok = ();
    type Error = JsonError;
    type SerializeSeq = ser::Impossible<(), JsonError>;
    type SerializeTuple = ser::Impossible<(), JsonError>;
    type SerializeTupleStruct = ser::Impossible<(), JsonError>;
    type SerializeTupleVariant = ser::Impossible<(), JsonError>;
    type SerializeMap = ser::Impossible<(), JsonError>;
    type SerializeStruct = ser::Impossible<(), JsonError>;
    type SerializeStructVariant = ser::Impossible<(), JsonError>;

    key_from_integer!(
        serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
        serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64
    );

    fn serialize_char(self, v: char) -> Result<(), JsonError> {
        self.0.push(v);
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), JsonError> {
        self.0.push_str(v);
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), JsonError> {
        self.0.push_str(variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), JsonError> {
        value.serialize(self)
    }

    key_refused!(
        serialize_bool(v: bool) -> (),
        serialize_f32(v: f32) -> (),
        serialize_f64(v: f64) -> (),
        serialize_bytes(v: &[u8]) -> (),
        serialize_none() -> (),
        serialize_some<T>(v: &T) -> (),
        serialize_unit() -> (),
        serialize_unit_struct(name: &'static str) -> (),
        serialize_newtype_variant<T>(name: &'static str, i: u32, variant: &'static str, v: &T) -> (),
        serialize_seq(len: Option<usize>) -> Self::SerializeSeq,
        serialize_tuple(len: usize) -> Self::SerializeTuple,
        serialize_tuple_struct(name: &'static str, len: usize) -> Self::SerializeTupleStruct,
        serialize_tuple_variant(name: &'static str, i: u32, variant: &'static str, len: usize) -> Self::SerializeTupleVariant,
        serialize_map(len: Option<usize>) -> Self::SerializeMap,
        serialize_struct(name: &'static str, len: usize) -> Self::SerializeStruct,
        serialize_struct_variant(name: &'static str, i: u32, variant: &'static str, len: usize) -> Self::SerializeStructVariant,
    );
}

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
    /// As [`to_vec`].
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
const SERDE_JSON_RAW_TOKEN: &str = "$serde_json::private::RawValue";

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

fn compact_into(out: &mut Vec<u8>, text: &str) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use serde_json::json;

    fn go(v: &Value) -> String {
        to_string(&GoAny(v)).unwrap()
    }

    #[test]
    fn floats_follow_go() {
        for (input, want) in [
            (2.0, "2"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (1e-7, "1e-7"),
            (1e-6, "0.000001"),
            (-0.0, "-0"),
            (0.0, "0"),
            (0.1, "0.1"),
            (1.5e-10, "1.5e-10"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (-123.456, "-123.456"),
            (9007199254740993.0, "9007199254740992"),
        ] {
            assert_eq!(to_string(&input).unwrap(), want, "{input:e}");
        }
        assert!(matches!(
            to_vec(&f64::NAN),
            Err(JsonError::UnsupportedFloat(_))
        ));
        assert_eq!(to_string(&1e-7f32).unwrap(), "1e-7");
        assert_eq!(to_string(&0.1f32).unwrap(), "0.1");
    }

    #[test]
    fn strings_follow_go_without_html_escaping() {
        assert_eq!(
            to_string("<a&b>/\"\\\u{7f}é😀").unwrap(),
            "\"<a&b>/\\\"\\\\\u{7f}é😀\""
        );
        assert_eq!(
            to_string("\n\r\t\u{8}\u{c}\u{1}\u{1f}\u{0}").unwrap(),
            r#""\n\r\t\b\f\u0001\u001f\u0000""#
        );
        assert_eq!(
            to_string("a\u{2028}b\u{2029}c").unwrap(),
            r#""a\u2028b\u2029c""#
        );
        // U+2027 and U+202A share the first two UTF-8 bytes and stay literal.
        assert_eq!(
            to_string("\u{2027}\u{202a}").unwrap(),
            "\"\u{2027}\u{202a}\""
        );
    }

    #[test]
    fn unsorted_maps_are_sorted_whatever_their_values() {
        let m: std::collections::HashMap<&str, Value> = [
            ("b", json!({"y": 1, "x": [1, {"d": 1, "c": 2}]})),
            ("a", json!("v")),
            ("é", json!(null)),
            ("Z", json!({})),
            ("c", json!([])),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            to_string(&m).unwrap(),
            r#"{"Z":{},"a":"v","b":{"x":[1,{"c":2,"d":1}],"y":1},"c":[],"é":null}"#
        );
    }

    #[test]
    fn free_form_numbers_go_through_float64_and_keys_are_sorted() {
        let v = json!({"b": 1, "a": [2.0, 9007199254740993u64, -0.0], "B": {"z": 1e21, "é": null, "e": true}});
        assert_eq!(
            go(&v),
            r#"{"B":{"e":true,"z":1e+21,"é":null},"a":[2,9007199254740992,-0],"b":1}"#
        );
    }

    #[test]
    fn structs_keep_declared_order_and_integers_stay_integers() {
        #[derive(Serialize)]
        struct S<'a> {
            z: u64,
            a: i64,
            #[serde(skip_serializing_if = "Option::is_none")]
            gone: Option<u8>,
            m: std::collections::HashMap<&'a str, u8>,
            v: Vec<u8>,
            n: Option<Vec<u8>>,
        }
        let s = S {
            z: u64::MAX,
            a: -1,
            gone: None,
            m: [("b", 2), ("a", 1)].into_iter().collect(),
            v: vec![],
            n: None,
        };
        assert_eq!(
            to_string(&s).unwrap(),
            r#"{"z":18446744073709551615,"a":-1,"m":{"a":1,"b":2},"v":[],"n":null}"#
        );
    }

    #[test]
    fn enums_take_serde_json_form() {
        #[derive(Serialize)]
        enum E {
            Unit,
            New(u8),
            Tuple(u8, u8),
            Struct { a: u8 },
        }
        assert_eq!(
            to_string(&[E::Unit, E::New(1), E::Tuple(1, 2), E::Struct { a: 3 }]).unwrap(),
            r#"["Unit",{"New":1},{"Tuple":[1,2]},{"Struct":{"a":3}}]"#
        );
    }

    #[test]
    fn raw_json_is_compacted_not_rewritten() {
        let raw = RawJson::from_text("{ \"b\" : 1.50 ,\n \"a\": \"x y\\\" \" }").unwrap();
        #[derive(Serialize)]
        struct W {
            body: RawJson,
        }
        assert_eq!(
            to_string(&W { body: raw }).unwrap(),
            r#"{"body":{"b":1.50,"a":"x y\" "}}"#
        );
        assert!(RawJson::from_text("{").is_err());
        // Through serde's buffering (flatten, tagged enums) and from a Value, too.
        #[derive(serde::Deserialize, Debug)]
        struct Outer {
            #[serde(flatten)]
            inner: Inner,
        }
        #[derive(serde::Deserialize, Debug)]
        struct Inner {
            body: RawJson,
        }
        let o: Outer = serde_json::from_str(r#"{"body": {"a": [1, 2.5, "x"]}}"#).unwrap();
        assert_eq!(o.inner.body.get(), r#"{"a":[1,2.5,"x"]}"#);
        let i: Inner = serde_json::from_value(json!({"body": "text"})).unwrap();
        assert_eq!(i.body.get(), r#""text""#);
        let i: Inner = serde_json::from_str(r#"{"body": 12.50}"#).unwrap();
        assert_eq!(
            i.body.get(),
            "12.50",
            "serde_json's own deserializer keeps the exact text"
        );
        assert_eq!(RawJson::from_message_body(b" [1] ").get(), " [1] ");
        assert_eq!(
            RawJson::from_message_body(b"not json {").get(),
            "\"not json {\""
        );
        assert_eq!(
            RawJson::from_message_body(&[0xff, 0x00]).get(),
            "\"hex:ff00\""
        );
        assert!(RawJson::from_text("1 2").is_err());
    }
}
