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

    /// Writes Go's text (without JSON quotes) into `out`.
    fn write_go(&self, out: &mut impl fmt::Write) -> fmt::Result {
        let t = self.0;
        let year = t.year();
        if year < 0 {
            write!(out, "-{:04}", -year)?;
        } else {
            write!(out, "{year:04}")?;
        }
        write!(
            out,
            "-{:02}-{:02}T{:02}:{:02}:{:02}",
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        )?;
        let nanos = t.nanosecond();
        if nanos != 0 {
            let digits = format!("{nanos:09}");
            write!(out, ".{}", digits.trim_end_matches('0'))?;
        }
        let offset = t.offset();
        if offset.is_utc() {
            out.write_char('Z')
        } else {
            let (h, m, _) = offset.as_hms();
            let sign = if offset.is_negative() { '-' } else { '+' };
            write!(out, "{sign}{:02}:{:02}", h.unsigned_abs(), m.unsigned_abs())
        }
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
        self.write_go(f)
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
        serializer.collect_str(self)
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
