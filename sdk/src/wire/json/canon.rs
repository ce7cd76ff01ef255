//! Go's re-encoding of JSON text decoded into `any`, written straight from the text: no tree of
//! maps and values is built. Object keys sorted byte-wise (the last of a repeated key kept, as
//! Go's decoder keeps it), every number through `float64`, strings escaped as the writer escapes
//! them, whitespace gone. The bytes are exactly what decoding the text into a
//! `serde_json::Value` and writing it through [`GoAny`](super::GoAny) gives.
//!
//! It is the fast path of hashing a large manifest (its schemas are most of its bytes): anything
//! unusual (a string with an escape serde refuses, nesting deeper than
//! serde_json decodes, a number out of `float64`'s range, text that is not JSON) makes it decline
//! with `None`, and the caller takes the decoding path, which gives the answer or the error.

use std::borrow::Cow;
use std::ops::Range;

use super::{push_f64, push_str};

/// serde_json's nesting limit: deeper text does not decode into a `Value`.
const MAX_DEPTH: usize = 128;

/// Appends the Go re-encoding of `text` (one JSON value, surrounding whitespace allowed) to
/// `out`; `None` when it declines (see the module's documentation), with `out` then in an
/// unspecified state.
pub(crate) fn go_any_text(out: &mut Vec<u8>, text: &[u8]) -> Option<()> {
    let mut canon = Canon { text, pos: 0 };
    canon.value(out, 0)?;
    canon.ws();
    (canon.pos == text.len()).then_some(())
}

struct Canon<'t> {
    text: &'t [u8],
    pos: usize,
}

impl<'t> Canon<'t> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.text.get(self.pos) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        self.ws();
        (self.text.get(self.pos) == Some(&byte)).then(|| self.pos += 1)
    }

    fn literal(&mut self, out: &mut Vec<u8>, word: &[u8]) -> Option<()> {
        let end = self.pos + word.len();
        (self.text.get(self.pos..end) == Some(word)).then(|| {
            out.extend_from_slice(word);
            self.pos = end;
        })
    }

    fn value(&mut self, out: &mut Vec<u8>, depth: usize) -> Option<()> {
        self.ws();
        match *self.text.get(self.pos)? {
            b'{' => self.object(out, depth + 1),
            b'[' => self.array(out, depth + 1),
            b'"' => {
                let s = self.string()?;
                push_str(out, &s);
                Some(())
            }
            b't' => self.literal(out, b"true"),
            b'f' => self.literal(out, b"false"),
            b'n' => self.literal(out, b"null"),
            b'-' | b'0'..=b'9' => self.number(out),
            _ => None,
        }
    }

    fn array(&mut self, out: &mut Vec<u8>, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.pos += 1; // `[`
        out.push(b'[');
        if self.eat(b']').is_some() {
            out.push(b']');
            return Some(());
        }
        loop {
            self.value(out, depth)?;
            if self.eat(b',').is_some() {
                out.push(b',');
                continue;
            }
            self.eat(b']')?;
            out.push(b']');
            return Some(());
        }
    }

    fn object(&mut self, out: &mut Vec<u8>, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.pos += 1; // `{`
        out.push(b'{');
        let start = out.len();
        // Each member's key, decoded, and the span of its `"key":value` in `out`.
        let mut members: Vec<(Cow<'t, str>, Range<usize>)> = Vec::new();
        let mut in_order = true;
        if self.eat(b'}').is_none() {
            loop {
                self.ws();
                if self.text.get(self.pos) != Some(&b'"') {
                    return None;
                }
                let key = self.string()?;
                if let Some((last, _)) = members.last()
                    && key.as_bytes() <= last.as_bytes()
                {
                    in_order = false;
                }
                if !members.is_empty() {
                    out.push(b',');
                }
                let begin = out.len();
                push_str(out, &key);
                self.eat(b':')?;
                out.push(b':');
                self.value(out, depth)?;
                members.push((key, begin..out.len()));
                if self.eat(b',').is_some() {
                    continue;
                }
                self.eat(b'}')?;
                break;
            }
        }
        if !in_order {
            // Byte-wise, stable: of a repeated key, the last stays (Go's decoder keeps it).
            members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            let written = out.split_off(start);
            let mut first = true;
            for (i, (key, span)) in members.iter().enumerate() {
                if members.get(i + 1).is_some_and(|(next, _)| next == key) {
                    continue;
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                out.extend_from_slice(&written[span.start - start..span.end - start]);
            }
        }
        out.push(b'}');
        Some(())
    }

    /// A string at `pos` (its opening quote): its text, decoded.
    fn string(&mut self) -> Option<Cow<'t, str>> {
        let open = self.pos;
        let mut i = open + 1;
        let mut escaped = false;
        loop {
            match *self.text.get(i)? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    i += 2;
                }
                0..0x20 => return None,
                _ => i += 1,
            }
        }
        self.pos = i + 1;
        Some(if escaped {
            // serde's own unescaping, so that what it refuses (a lone surrogate) is declined.
            Cow::Owned(serde_json::from_slice::<String>(&self.text[open..=i]).ok()?)
        } else {
            Cow::Borrowed(std::str::from_utf8(&self.text[open + 1..i]).ok()?)
        })
    }

    /// A number, by JSON's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self, out: &mut Vec<u8>) -> Option<()> {
        let start = self.pos;
        let digits = |c: &mut Self| {
            let from = c.pos;
            while let Some(b'0'..=b'9') = c.text.get(c.pos) {
                c.pos += 1;
            }
            c.pos - from
        };
        if self.text.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        let int_start = self.pos;
        let int_len = digits(self);
        if int_len == 0 || (int_len > 1 && self.text[int_start] == b'0') {
            return None;
        }
        let mut plain = true;
        if self.text.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            plain = false;
            if digits(self) == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.text.get(self.pos) {
            self.pos += 1;
            plain = false;
            if let Some(b'+' | b'-') = self.text.get(self.pos) {
                self.pos += 1;
            }
            if digits(self) == 0 {
                return None;
            }
        }
        let text = &self.text[start..self.pos];
        if plain && int_len <= 15 {
            // Exact in a float64, and printed by Go as the same digits (`-0` included).
            out.extend_from_slice(text);
            return Some(());
        }
        let f: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
        if !f.is_finite() {
            return None;
        }
        push_f64(out, f);
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::json::{GoAny, to_vec};
    use serde_json::Value;

    /// What decoding into a `Value` and writing through `GoAny` gives, or `None` where serde
    /// refuses the text.
    fn through_value(text: &str) -> Option<Vec<u8>> {
        let v: Value = serde_json::from_str(text).ok()?;
        to_vec(&GoAny(&v)).ok()
    }

    fn canon(text: &str) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        go_any_text(&mut out, text.as_bytes()).map(|()| out)
    }

    #[test]
    fn the_same_bytes_as_decoding_into_a_value() {
        let cases = [
            r#"{"b": 1, "a": [1.5, -0, 0, -0.0, 1e21, 1E-7, 123456789012345678, 9007199254740993, 100000000000000000000000, 2.50]}"#,
            r#"{"z": {"y": {"x": null}}, "a": true, "m": false, "é": "ü", "A": "a\u2028b", "B": "tab\there"}"#,
            r#"{"k": 1, "k": 2, "j": 0}"#,
            r#"{"k": 1, "a": 0, "k": {"n": 3}}"#,
            r#"{"b\u0061": 1, "ba": 2, "\u00e9": 3, "a\"q": 4}"#,
            r#"{"s": "esc \" \\ \/ \b\f\n\r\t \u0001 \u00e9 \ud83d\ude00 <&>"}"#,
            r#"  [ ]  "#,
            r#"{}"#,
            r#"[{"b":1,"a":2},[3,[4]],"x",-12,0.1,-1.5e300]"#,
            r#"{"type": ["string", "null"], "minimum": 0, "maximum": 1000000, "multipleOf": 0.001}"#,
            r#"12345678901234567890"#,
            r#"-00012"#,
        ];
        for text in cases {
            assert_eq!(
                canon(text).map(String::from_utf8),
                through_value(text).map(String::from_utf8),
                "{text}"
            );
        }
    }

    #[test]
    fn what_serde_refuses_or_the_fast_path_leaves_is_declined() {
        for text in [
            r#"{"a": "\ud800"}"#,
            r#"{"a": 1e400}"#,
            r#"{"a": 1,}"#,
            r#"{"a" 1}"#,
            "[1] x",
            "\"tab\tinside\"",
            &format!("{}{}", "[".repeat(200), "]".repeat(200)),
        ] {
            assert_eq!(canon(text), None, "{text}");
        }
        // Within serde's depth, nesting is fine.
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(canon(&deep), through_value(&deep));
    }
}
