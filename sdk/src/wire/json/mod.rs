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

use serde::ser::{self, Serialize};
use serde_json::Value;

use crate::error::JsonError;

mod canon;
mod raw;
mod writer;

pub use raw::{RawJson, compact};
use writer::Writer;

/// Encodes `value` as Go's `json.Encoder` (HTML escaping off, trailing newline stripped) would.
///
/// # Errors
/// Fails on values JSON cannot carry (NaN, infinities, non-string map keys), as Go's encoder does.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, JsonError> {
    let mut writer = Writer::new();
    value.serialize(&mut writer)?;
    Ok(writer.out)
}

/// The SHA-256 of [`to_vec`]'s bytes, written straight into the hasher: a large document (a
/// 5 000-action manifest) is never held whole, only a few tens of KiB at a time (and any one map,
/// whose keys may need sorting, whole).
///
/// # Errors
/// As [`to_vec`].
pub(crate) fn sha256<T: Serialize + ?Sized>(value: &T) -> Result<[u8; 32], JsonError> {
    let mut writer = Writer::hashing();
    value.serialize(&mut writer)?;
    Ok(writer.finish_digest())
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

/// JSON text that serialises, through this module's writer, as Go's re-encoding of it decoded
/// into `any` (what [`GoAny`] writes for the decoded value), without decoding it into a tree.
/// Writing fails with [`JsonError::Custom`] where the text holds something the fast path leaves
/// to a real decode (see `canon`); other serializers see a newtype around a string.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GoAnyText<'a>(pub(crate) &'a str);

/// The newtype name [`GoAnyText`] is recognised by.
const GO_ANY_TEXT_TOKEN: &str = "$triggers::GoAnyText";

impl Serialize for GoAnyText<'_> {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_newtype_struct(GO_ANY_TEXT_TOKEN, self.0)
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

/// Whether any of the eight bytes of `word` needs a look in [`ESCAPE`]: one below 0x20, `"`, `\\`
/// or 0xE2. Never no for a word that holds one: a byte below `n` (`n` at most 0x80) wraps when
/// `n` is taken from it, whatever borrow it takes, so its high bit is set in `x - n·0x01…01` and
/// clear in `!x` (a byte equal to `c` is a zero byte of `x ^ c·0x01…01`, the case `n = 1`). A
/// yes for a word that holds none (a borrow can make one) only sends it through the table.
#[inline]
fn needs_look(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    below_space
        | zero_byte(word ^ (ONES * u64::from(b'"')))
        | zero_byte(word ^ (ONES * u64::from(b'\\')))
        | zero_byte(word ^ (ONES * 0xe2))
        != 0
}

/// Appends `s` as a Go JSON string literal (quotes included), HTML escaping off.
///
/// Eight bytes at a time while none of them needs a look (ids, names and times never do), byte
/// by byte through [`ESCAPE`] inside a word that may.
pub(crate) fn push_str(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        // The last few bytes padded with spaces (which need no look).
        let end = (i + 8).min(bytes.len());
        let mut word = [b' '; 8];
        word[..end - i].copy_from_slice(&bytes[i..end]);
        if !needs_look(u64::from_le_bytes(word)) {
            i = end;
            continue;
        }
        while i < end {
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
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Serialize;
    use serde_json::json;

    /// The string literal byte by byte through the table, as before the word-at-a-time scan.
    fn push_str_bytewise(out: &mut Vec<u8>, s: &str) {
        out.push(b'"');
        let bytes = s.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            match ESCAPE[usize::from(b)] {
                0 => out.push(b),
                b'E' => match (bytes.get(i + 1), bytes.get(i + 2)) {
                    (Some(0x80), Some(&last @ (0xa8 | 0xa9))) => {
                        out.extend_from_slice(if last == 0xa8 { b"\\u2028" } else { b"\\u2029" });
                        i += 2;
                    }
                    _ => out.push(b),
                },
                b'u' => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
                short => out.extend_from_slice(&[b'\\', short]),
            }
            i += 1;
        }
        out.push(b'"');
    }

    proptest! {
        /// Whatever the string (escapes at every offset of a word, at its edges, across two
        /// words, U+2028 split between words), the word-at-a-time scan writes what the table
        /// alone writes.
        #[test]
        fn the_word_scan_writes_what_the_table_writes(
            parts in proptest::collection::vec(prop_oneof![
                Just("a"), Just("0123456"), Just("bc"), Just("\""), Just("\\"), Just("\n"), Just("\u{1}"),
                Just("\u{1f}"), Just(" "), Just("\u{2028}"), Just("\u{2029}"), Just("\u{2027}"),
                Just("\u{20ac}"), Just("é"), Just("\u{7f}"), Just("<&>"),
            ], 0..24),
        ) {
            let s: String = parts.concat();
            let mut fast = Vec::new();
            push_str(&mut fast, &s);
            let mut slow = Vec::new();
            push_str_bytewise(&mut slow, &s);
            prop_assert_eq!(String::from_utf8_lossy(&fast), String::from_utf8_lossy(&slow));
        }
    }

    /// Every byte value at every offset of a word: only the escaped ones make it look.
    #[test]
    fn a_word_needs_a_look_exactly_when_a_byte_of_it_does() {
        for b in 0..=255u8 {
            for at in 0..8 {
                let mut word = *b"abcdefgh";
                word[at] = b;
                let needs = ESCAPE[usize::from(b)] != 0;
                if needs {
                    assert!(needs_look(u64::from_le_bytes(word)), "byte {b:#x} at {at}");
                }
            }
        }
        assert!(!needs_look(u64::from_le_bytes(*b"run-1:in")));
    }

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
