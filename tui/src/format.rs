//! Text for the screen: clock times, durations, ages, short hashes, pretty JSON, and the duration
//! syntax of the advance-clock prompt (`30s`, `5m`, `1h30m`).

use std::time::Duration;

use triggers_sdk::wire::GoTime;

/// `HH:MM:SS.mmm` in UTC, or `-` for Go's zero time.
pub(crate) fn clock_time(t: GoTime) -> String {
    if t.is_zero() {
        return "-".into();
    }
    let t = t.to_utc().as_offset_date_time();
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// Nanoseconds between two times (`to - from`), never negative.
pub(crate) fn span_ns(from: GoTime, to: GoTime) -> i128 {
    (to.unix_nanos() - from.unix_nanos()).max(0)
}

/// A duration for a column: `350ms`, `1.25s`, `2m05s`, `1h02m`, `3d04h`.
pub(crate) fn duration_ns(ns: i128) -> String {
    let ns = ns.max(0);
    let ms = ns / 1_000_000;
    if ms < 1000 {
        if ns > 0 && ms == 0 {
            return format!("{}µs", ns / 1000);
        }
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    if s < 60 {
        return format!("{}.{:02}s", s, (ms % 1000) / 10);
    }
    let m = s / 60;
    if m < 60 {
        return format!("{}m{:02}s", m, s % 60);
    }
    let h = m / 60;
    if h < 24 {
        return format!("{}h{:02}m", h, m % 60);
    }
    format!("{}d{:02}h", h / 24, h % 24)
}

/// A heartbeat age: `3s`, `2m10s`, `-` when never seen.
pub(crate) fn age(now: GoTime, then: Option<GoTime>) -> String {
    match then {
        None => "-".into(),
        Some(t) => {
            let s = span_ns(t, now) / 1_000_000_000;
            if s < 60 {
                format!("{s}s")
            } else if s < 3600 {
                format!("{}m{:02}s", s / 60, s % 60)
            } else {
                format!("{}h{:02}m", s / 3600, (s / 60) % 60)
            }
        }
    }
}

/// The first 12 hex digits of a `sha256:` manifest hash.
pub(crate) fn short_hash(hash: &str) -> String {
    let hex = hash.strip_prefix("sha256:").unwrap_or(hash);
    hex.chars().take(12).collect()
}

/// JSON text indented for reading, keys in the order they were written (a DLQ body is shown as
/// the service sent it); text that is not JSON comes back as it is.
pub(crate) fn pretty_json(text: &str) -> String {
    let mut de = serde_json::Deserializer::from_str(text);
    let valid = <serde::de::IgnoredAny as serde::Deserialize>::deserialize(&mut de).is_ok()
        && de.end().is_ok();
    if !valid {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = text.trim().chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some('}' | ']')) {
                    out.extend(chars.next());
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

/// One line of at most `max` characters (newlines shown as `⏎`).
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i >= max {
            out.push('…');
            break;
        }
        out.push(match c {
            '\n' | '\r' => '⏎',
            c if c.is_control() => '·',
            c => c,
        });
    }
    out
}

/// Why the advance prompt's text is not a duration; the message says what to type instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DurationError {
    /// Not `<number><unit>` pairs with a known unit.
    #[error("{0:?} is not a duration (30s, 5m, 1h30m)")]
    Malformed(String),
    /// More than the clock may be advanced by at once.
    #[error("{0:?} is too long: at most 100 years (36500d)")]
    TooLong(String),
}

/// Parses the advance prompt's duration: one or more `<number><unit>` with units `ms`, `s`, `m`,
/// `h`, `d` (`30s`, `5m`, `1h30m`, `250ms`).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    let bad = || DurationError::Malformed(text.to_owned());
    if text.is_empty() {
        return Err(bad());
    }
    let mut total: u128 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u128 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.chars().take_while(char::is_ascii_alphabetic).count();
        let unit_ms: u128 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total = total
            .checked_add(n.checked_mul(unit_ms).ok_or_else(bad)?)
            .ok_or_else(bad)?;
    }
    if total > u128::from(triggers_sdk::runtime::MAX_DURATION_MS) {
        return Err(DurationError::TooLong(text.to_owned()));
    }
    u64::try_from(total)
        .map(Duration::from_millis)
        .map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration(" 1h30m "), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        for bad in ["", "5", "m", "5x", "-5s", "5 s", "99999999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_duration("36500d"),
            Ok(triggers_sdk::runtime::MAX_DURATION)
        );
        let e = parse_duration("99999999999d").unwrap_err();
        assert_eq!(e, DurationError::TooLong("99999999999d".into()));
        assert!(e.to_string().contains("at most 100 years"), "{e}");
        assert_eq!(
            parse_duration("5x").unwrap_err().to_string(),
            "\"5x\" is not a duration (30s, 5m, 1h30m)"
        );
    }

    proptest::proptest! {
        /// Whatever is typed at the advance prompt: a duration within 100 years, or an error.
        #[test]
        fn the_advance_prompt_never_panics(text in "\\PC{0,40}") {
            if let Ok(d) = parse_duration(&text) {
                proptest::prop_assert!(d <= triggers_sdk::runtime::MAX_DURATION);
            }
        }

        #[test]
        fn number_and_unit_forms_never_panic(n in proptest::num::u128::ANY, unit in "(ms|s|m|h|d|y|)") {
            let text = format!("{n}{unit}");
            if let Ok(d) = parse_duration(&text) {
                proptest::prop_assert!(d <= triggers_sdk::runtime::MAX_DURATION);
            }
        }
    }

    #[test]
    fn durations_print() {
        assert_eq!(duration_ns(0), "0ms");
        assert_eq!(duration_ns(1_500), "1µs");
        assert_eq!(duration_ns(350_000_000), "350ms");
        assert_eq!(duration_ns(1_250_000_000), "1.25s");
        assert_eq!(duration_ns(125_000_000_000), "2m05s");
        assert_eq!(duration_ns(3_720_000_000_000), "1h02m");
        assert_eq!(duration_ns(-5), "0ms");
    }

    #[test]
    fn text_helpers() {
        assert_eq!(short_hash("sha256:0123456789abcdef"), "0123456789ab");
        assert_eq!(short_hash("xyz"), "xyz");
        assert_eq!(one_line("a\nb", 10), "a⏎b");
        assert_eq!(one_line("abcdef", 3), "abc…");
        assert_eq!(pretty_json("{\"a\":1}"), "{\n  \"a\": 1\n}");
        assert_eq!(
            pretty_json(r#"{"z": [1, {}, []], "a": "x,:{\"}"}"#),
            "{\n  \"z\": [\n    1,\n    {},\n    []\n  ],\n  \"a\": \"x,:{\\\"}\"\n}"
        );
        assert_eq!(pretty_json("not json"), "not json");
        assert_eq!(clock_time(GoTime::ZERO), "-");
        let t = GoTime::parse("2026-05-26T14:30:45.123456Z").unwrap();
        assert_eq!(clock_time(t), "14:30:45.123");
        let later = GoTime::parse("2026-05-26T14:32:00Z").unwrap();
        assert_eq!(age(later, Some(t)), "1m14s");
        assert_eq!(age(later, None), "-");
    }
}
