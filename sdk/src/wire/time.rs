//! Go's time text: what `time.Time` marshals to in JSON, and what the `X-Triggers-Emitted-At` header
//! carries.
//!
//! Go writes RFC 3339 with nanoseconds and trims trailing zeros from the fraction, dropping it (and
//! the dot) at zero nanoseconds: `2026-05-26T14:30:45.12345Z`, `2026-05-26T14:30:45Z`. A zero UTC
//! offset is written `Z`, any other as `+hh:mm`. The spec's "pad to 9 digits" is not what Go does;
//! Go is the reference. Reading accepts any RFC 3339 precision.

use std::fmt;

use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, UtcOffset};

use crate::error::TimeError;

/// An instant with the offset it was written in, printed as Go prints a `time.Time`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct GoTime(OffsetDateTime);

impl GoTime {
    /// Go's zero time, `0001-01-01T00:00:00Z`: what a missing time decodes to in Go.
    pub const ZERO: GoTime = GoTime(time::macros::datetime!(0001-01-01 0:00 UTC));

    /// The current time in UTC.
    #[must_use]
    pub fn now() -> Self {
        GoTime(OffsetDateTime::now_utc())
    }

    /// The instant `nanos` nanoseconds after the Unix epoch, in UTC (Go's `time.Unix(0, n).UTC()`).
    ///
    /// # Errors
    /// When the instant is outside the years -9999..=9999.
    pub fn from_unix_nanos(nanos: i128) -> Result<Self, TimeError> {
        OffsetDateTime::from_unix_timestamp_nanos(nanos)
            .map(GoTime)
            .map_err(|e| TimeError::OutOfRange(e.to_string()))
    }

    /// Nanoseconds since the Unix epoch.
    #[must_use]
    pub fn unix_nanos(&self) -> i128 {
        self.0.unix_timestamp_nanos()
    }

    /// Parses RFC 3339 text of any fractional precision (beyond nine digits is truncated, as Go does).
    ///
    /// # Errors
    /// [`TimeError::Invalid`] naming the text and what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, TimeError> {
        OffsetDateTime::parse(text, &Rfc3339)
            .map(GoTime)
            .map_err(|e| TimeError::Invalid {
                text: text.to_owned(),
                reason: e.to_string(),
            })
    }

    /// The same instant in UTC.
    #[must_use]
    pub fn to_utc(self) -> Self {
        GoTime(self.0.to_offset(UtcOffset::UTC))
    }

    /// The underlying `time` value.
    #[must_use]
    pub fn as_offset_date_time(&self) -> OffsetDateTime {
        self.0
    }

    /// This time plus a duration (saturating at the representable range).
    #[must_use]
    pub fn saturating_add(self, d: std::time::Duration) -> Self {
        GoTime(
            self.0
                .saturating_add(time::Duration::try_from(d).unwrap_or(time::Duration::MAX)),
        )
    }

    /// Whether this is Go's zero time.
    #[must_use]
    pub fn is_zero(&self) -> bool {
        *self == Self::ZERO
    }

    /// Go's text (without JSON quotes), on the stack.
    fn go_text(&self) -> Ascii {
        // Written digit by digit into a buffer and handed over at once: this runs for every
        // envelope and completion event, where `write!` with its padding specs cost the most.
        let mut text = Ascii::default();
        let t = self.0;
        let (year, month, day) = t.to_calendar_date();
        if year < 0 {
            text.push(b'-');
        }
        text.digits(year.unsigned_abs(), 4);
        text.push(b'-');
        text.digits(u32::from(u8::from(month)), 2);
        text.push(b'-');
        text.digits(u32::from(day), 2);
        let (hour, minute, second, nanos) = t.to_hms_nano();
        text.push(b'T');
        text.digits(u32::from(hour), 2);
        text.push(b':');
        text.digits(u32::from(minute), 2);
        text.push(b':');
        text.digits(u32::from(second), 2);
        if nanos != 0 {
            // Go's RFC3339Nano: the fraction without its trailing zeros.
            let mut fraction = nanos;
            let mut width = 9;
            while fraction % 10 == 0 {
                fraction /= 10;
                width -= 1;
            }
            text.push(b'.');
            text.digits(fraction, width);
        }
        let offset = t.offset();
        if offset.is_utc() {
            text.push(b'Z');
        } else {
            let (h, m, _) = offset.as_hms();
            text.push(if offset.is_negative() { b'-' } else { b'+' });
            text.digits(u32::from(h.unsigned_abs()), 2);
            text.push(b':');
            text.digits(u32::from(m.unsigned_abs()), 2);
        }
        text
    }
}

/// A short ASCII text on the stack.
struct Ascii {
    buf: [u8; 48],
    len: usize,
}

impl Default for Ascii {
    fn default() -> Self {
        Ascii {
            buf: [0; 48],
            len: 0,
        }
    }
}

impl Ascii {
    fn push(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    /// `n` in decimal, zero-padded to at least `width` digits.
    fn digits(&mut self, n: u32, width: usize) {
        let mut buf = itoa::Buffer::new();
        let text = buf.format(n);
        for _ in text.len()..width {
            self.push(b'0');
        }
        for &b in text.as_bytes() {
            self.push(b);
        }
    }

    fn as_str(&self) -> &str {
        // Only ASCII is ever pushed.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }
}

impl Default for GoTime {
    fn default() -> Self {
        Self::ZERO
    }
}

impl From<OffsetDateTime> for GoTime {
    fn from(t: OffsetDateTime) -> Self {
        GoTime(t)
    }
}

impl From<std::time::SystemTime> for GoTime {
    fn from(t: std::time::SystemTime) -> Self {
        GoTime(OffsetDateTime::from(t))
    }
}

impl fmt::Display for GoTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.go_text().as_str())
    }
}

impl fmt::Debug for GoTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GoTime({self})")
    }
}

impl std::str::FromStr for GoTime {
    type Err = TimeError;
    fn from_str(s: &str) -> Result<Self, TimeError> {
        GoTime::parse(s)
    }
}

impl Serialize for GoTime {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let year = self.0.year();
        if !(0..=9999).contains(&year) {
            // Go's MarshalJSON refuses these too.
            return Err(serde::ser::Error::custom(format!(
                "year {year} is outside [0,9999], which Go's time JSON cannot carry"
            )));
        }
        // The text as it is, not through `Display` into a fresh `String` (serde's collect_str).
        serializer.serialize_str(self.go_text().as_str())
    }
}

impl<'de> Deserialize<'de> for GoTime {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Go's UnmarshalJSON leaves the zero time for `null`.
        let text = Option::<std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        match text {
            None => Ok(GoTime::ZERO),
            Some(text) => GoTime::parse(&text).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text as `write!` with padding specs wrote it before the buffer: the reference.
    fn reference(t: OffsetDateTime) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let year = t.year();
        if year < 0 {
            let _ = write!(out, "-{:04}", -year);
        } else {
            let _ = write!(out, "{year:04}");
        }
        let _ = write!(
            out,
            "-{:02}-{:02}T{:02}:{:02}:{:02}",
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        );
        let nanos = t.nanosecond();
        if nanos != 0 {
            let _ = write!(out, ".{}", format!("{nanos:09}").trim_end_matches('0'));
        }
        let offset = t.offset();
        if offset.is_utc() {
            out.push('Z');
        } else {
            let (h, m, _) = offset.as_hms();
            let sign = if offset.is_negative() { '-' } else { '+' };
            let _ = write!(out, "{sign}{:02}:{:02}", h.unsigned_abs(), m.unsigned_abs());
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn the_text_is_the_reference_text(
            nanos in -377_705_116_800_000_000_000i128..253_402_300_799_999_999_999i128,
            offset_minutes in -1439i32..=1439,
            whole in proptest::bool::ANY,
        ) {
            let nanos = if whole { nanos - nanos % 1_000_000_000 } else { nanos };
            let offset = time::UtcOffset::from_whole_seconds(offset_minutes * 60).unwrap();
            if let Ok(t) = OffsetDateTime::from_unix_timestamp_nanos(nanos) {
                let t = t.to_offset(offset);
                proptest::prop_assert_eq!(GoTime(t).to_string(), reference(t));
            }
        }
    }

    #[test]
    fn trims_trailing_zeros_and_drops_a_zero_fraction() {
        for (input, want) in [
            (
                "2026-05-26T14:30:45.123456789Z",
                "2026-05-26T14:30:45.123456789Z",
            ),
            (
                "2026-05-26T14:30:45.123450000Z",
                "2026-05-26T14:30:45.12345Z",
            ),
            ("2026-05-26T14:30:45.100Z", "2026-05-26T14:30:45.1Z"),
            ("2026-05-26T14:30:45.000000000Z", "2026-05-26T14:30:45Z"),
            ("2026-05-26T14:30:45Z", "2026-05-26T14:30:45Z"),
            ("2026-05-26T14:30:45.5+02:00", "2026-05-26T14:30:45.5+02:00"),
            ("2026-05-26T14:30:45-00:00", "2026-05-26T14:30:45Z"),
            (
                "2026-05-26T14:30:45.1234567891Z",
                "2026-05-26T14:30:45.123456789Z",
            ),
        ] {
            assert_eq!(GoTime::parse(input).unwrap().to_string(), want, "{input}");
        }
    }

    #[test]
    fn unix_nanos_round_trip_in_utc() {
        let t = GoTime::from_unix_nanos(1_779_805_845_000_000_001).unwrap();
        assert_eq!(t.to_string(), "2026-05-26T14:30:45.000000001Z");
        assert_eq!(t.unix_nanos(), 1_779_805_845_000_000_001);
        assert_eq!(GoTime::ZERO.to_string(), "0001-01-01T00:00:00Z");
    }

    #[test]
    fn json_is_quoted_go_text_and_null_is_zero() {
        let t = GoTime::parse("2026-05-26T14:30:45.120Z").unwrap();
        assert_eq!(
            crate::wire::json::to_string(&t).unwrap(),
            "\"2026-05-26T14:30:45.12Z\""
        );
        let back: GoTime = serde_json::from_str("\"2026-05-26T14:30:45.12Z\"").unwrap();
        assert_eq!(back, t);
        let zero: GoTime = serde_json::from_str("null").unwrap();
        assert!(zero.is_zero());
        assert!(serde_json::from_str::<GoTime>("\"yesterday\"").is_err());
    }
}
