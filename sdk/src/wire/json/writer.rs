//! The serde `Serializer` that writes Go's JSON: compound values, sorted maps, map keys.

use std::fmt::Display;

use serde::ser::{self, Serialize};
use sha2::{Digest, Sha256};

use super::canon::go_any_text;
use super::raw::{SERDE_JSON_RAW_TOKEN, compact_into};
use super::{GO_ANY_TEXT_TOKEN, push_f32, push_f64, push_str};
use crate::error::JsonError;

impl ser::Error for JsonError {
    fn custom<T: Display>(msg: T) -> Self {
        JsonError::Custom(msg.to_string())
    }
}

pub(super) struct Writer {
    pub(super) out: Vec<u8>,
    /// Set for [`RawJson`]'s field: the next string is JSON text to copy, not to quote.
    raw_next: bool,
    /// Set for [`GoAnyText`](super::GoAnyText): the next string is JSON text to re-encode as Go
    /// would after decoding it into `any`.
    go_any_next: bool,
    /// When hashing: where `out` is drained to, so a large document is never held whole.
    pub(super) digest: Option<Sha256>,
    /// Maps being written: their entries may still be reordered, so `out` is not drained then.
    maps_open: usize,
}

/// How much `out` may hold before it is drained into the digest.
const DRAIN_AT: usize = 32 * 1024;

/// Writes a sequence or a struct: elements separated by commas, in order.
pub(super) struct Compound<'w> {
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
pub(super) struct SortedMap<'w> {
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
    pub(super) fn new() -> Self {
        Writer {
            // A completion event (the most written document, one per node run) is 300 to 400
            // bytes: written without growing the buffer.
            out: Vec::with_capacity(512),
            raw_next: false,
            go_any_next: false,
            digest: None,
            maps_open: 0,
        }
    }

    /// A writer that hashes what it writes instead of keeping it: see [`Writer::finish_digest`].
    pub(super) fn hashing() -> Self {
        Writer {
            out: Vec::with_capacity(DRAIN_AT + 4096),
            digest: Some(Sha256::new()),
            ..Writer::new()
        }
    }

    /// Feeds `out` to the digest once it is large, between values and outside any map.
    fn drain(&mut self) {
        if self.maps_open == 0
            && self.out.len() >= DRAIN_AT
            && let Some(digest) = &mut self.digest
        {
            digest.update(&self.out);
            self.out.clear();
        }
    }

    /// The SHA-256 of everything written (for a writer made by [`Writer::hashing`]).
    pub(super) fn finish_digest(mut self) -> [u8; 32] {
        let mut digest = self.digest.take().unwrap_or_default();
        digest.update(&self.out);
        digest.finalize().into()
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
        } else if std::mem::take(&mut self.go_any_next) {
            go_any_text(&mut self.out, v.as_bytes()).ok_or_else(|| {
                JsonError::Custom("JSON text left to a full decode (see wire::json::canon)".into())
            })?;
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
        name: &'static str,
        value: &T,
    ) -> Result<(), JsonError> {
        self.go_any_next = name == GO_ANY_TEXT_TOKEN;
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
        self.maps_open += 1;
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
        value.serialize(&mut *self.writer)?;
        self.writer.drain();
        Ok(())
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
        value.serialize(&mut *self.writer)?;
        self.writer.drain();
        Ok(())
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
        self.writer.maps_open -= 1;
        Ok(())
    }
}

/// Appends a map key, as Go would write it, to the map's key buffer: strings as they are,
/// integers as decimal text.
pub(super) struct MapKey<'k>(&'k mut String);

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
