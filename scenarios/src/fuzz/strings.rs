//! Strings for the `format`s and `pattern`s a schema names.

use rand::Rng;
use regex_syntax::hir::{Class, Hir, HirKind};

use super::generate::Generator;

impl Generator {
    /// A string of a well-known `format`, edges among them; `None` for a format it does not
    /// know (a plain string is made instead).
    pub(super) fn formatted(&mut self, format: &str) -> Option<String> {
        let r = &mut self.rng;
        let s = match format {
            "date-time" => match r.random_range(0..4) {
                0 => "1970-01-01T00:00:00Z".to_owned(),
                1 => "2024-02-29T23:59:59.999999999+14:00".to_owned(),
                2 => "9999-12-31T23:59:59-12:00".to_owned(),
                _ => format!(
                    "20{:02}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
                    r.random_range(0..100),
                    r.random_range(1..=12),
                    r.random_range(1..=28),
                    r.random_range(0..24),
                    r.random_range(0..60),
                    r.random_range(0..60)
                ),
            },
            "date" => match r.random_range(0..4) {
                0 => "2024-02-29".to_owned(),
                1 => "0001-01-01".to_owned(),
                2 => "9999-12-31".to_owned(),
                _ => format!(
                    "{:04}-{:02}-{:02}",
                    r.random_range(1900..2100),
                    r.random_range(1..=12),
                    r.random_range(1..=28)
                ),
            },
            "time" => match r.random_range(0..3) {
                0 => "00:00:00Z".to_owned(),
                1 => "23:59:59.999+05:30".to_owned(),
                _ => format!(
                    "{:02}:{:02}:{:02}Z",
                    r.random_range(0..24),
                    r.random_range(0..60),
                    r.random_range(0..60)
                ),
            },
            "email" | "idn-email" => match r.random_range(0..4) {
                0 => "a@b.co".to_owned(),
                1 => "o.brien+tag@example.com".to_owned(),
                2 => format!("{}@example.org", "x".repeat(64)),
                _ => format!("user{}@example.com", r.random_range(0..100_000)),
            },
            "uuid" => match r.random_range(0..3) {
                0 => "00000000-0000-0000-0000-000000000000".to_owned(),
                _ => {
                    let b: u128 = r.random();
                    let h = format!("{b:032x}");
                    format!(
                        "{}-{}-4{}-a{}-{}",
                        &h[0..8],
                        &h[8..12],
                        &h[13..16],
                        &h[17..20],
                        &h[20..32]
                    )
                }
            },
            "uri" | "iri" | "uri-reference" | "iri-reference" => match r.random_range(0..3) {
                0 => "https://example.com/a/b?c=d&e=%20#f".to_owned(),
                1 => "urn:isbn:0451450523".to_owned(),
                _ => format!("http://localhost:{}/", r.random_range(1..65_536)),
            },
            "hostname" | "idn-hostname" => match r.random_range(0..3) {
                0 => "a".to_owned(),
                1 => "xn--bcher-kva.example".to_owned(),
                _ => format!("host-{}.example.com", r.random_range(0..1000)),
            },
            "ipv4" => match r.random_range(0..3) {
                0 => "0.0.0.0".to_owned(),
                1 => "255.255.255.255".to_owned(),
                _ => format!(
                    "{}.{}.{}.{}",
                    r.random_range(0..256),
                    r.random_range(0..256),
                    r.random_range(0..256),
                    r.random_range(0..256)
                ),
            },
            "ipv6" => {
                ["::", "::1", "fe80::1", "2001:db8::ff00:42:8329"][r.random_range(0..4)].to_owned()
            }
            "duration" => {
                ["P1D", "PT0S", "P1Y2M3DT4H5M6S", "PT36H"][r.random_range(0..4)].to_owned()
            }
            _ => return None,
        };
        Some(s)
    }

    /// A string the pattern matches (anchors aside).
    pub(super) fn sample(&mut self, hir: &Hir, out: &mut String) {
        match hir.kind() {
            HirKind::Empty | HirKind::Look(_) => {}
            HirKind::Literal(lit) => out.push_str(&String::from_utf8_lossy(&lit.0)),
            HirKind::Class(Class::Unicode(class)) => {
                // Mostly printable ASCII where the class has some (JSON Schema's `\d`, `\w`
                // and `\s` are ASCII, the parser's are Unicode), sometimes anywhere in it.
                let printable: Vec<(u32, u32)> = class
                    .ranges()
                    .iter()
                    .map(|r| (u32::from(r.start()).max(0x20), u32::from(r.end()).min(0x7e)))
                    .filter(|(a, b)| a <= b)
                    .collect();
                let (a, b) = if !printable.is_empty() && self.rng.random_bool(0.95) {
                    *self.pick(&printable)
                } else if let Some(range) = class.ranges().get(
                    self.rng
                        .random_range(0..class.ranges().len().max(1))
                        .min(class.ranges().len().saturating_sub(1)),
                ) {
                    (u32::from(range.start()), u32::from(range.end()))
                } else {
                    return;
                };
                let code = self.rng.random_range(a..=b);
                out.push(char::from_u32(code).unwrap_or('x'));
            }
            HirKind::Class(Class::Bytes(class)) => {
                let ranges = class.ranges();
                if !ranges.is_empty() {
                    let range = self.pick(ranges);
                    let byte = self
                        .rng
                        .random_range(range.start()..=range.end().min(0x7f).max(range.start()));
                    out.push(char::from(byte.min(0x7f)));
                }
            }
            HirKind::Repetition(rep) => {
                let max = rep.max.unwrap_or(rep.min.saturating_add(4));
                let max = max.min(rep.min.saturating_add(16));
                let n = if self.edge_first() && self.rng.random_bool(0.5) {
                    if self.rng.random_bool(0.5) {
                        rep.min
                    } else {
                        max
                    }
                } else {
                    self.rng.random_range(rep.min..=max)
                };
                for _ in 0..n.min(4096) {
                    self.sample(&rep.sub, out);
                }
            }
            HirKind::Capture(capture) => self.sample(&capture.sub, out),
            HirKind::Concat(parts) => {
                for part in parts {
                    self.sample(part, out);
                }
            }
            HirKind::Alternation(branches) => {
                let branch = self.pick(branches);
                self.sample(branch, out);
            }
        }
    }
}

/// `pattern` parsed, its `\d`, `\w` and `\s` made ASCII as in ECMA-262 (the parser's are
/// Unicode); `None` for what the parser does not take (lookaround, backreferences).
pub(super) fn parse_pattern(pattern: &str) -> Option<Hir> {
    let mut ecma = String::with_capacity(pattern.len() + 16);
    let mut in_class = false;
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(next) = chars.next() else {
                    ecma.push(c);
                    break;
                };
                let ascii = match next {
                    'd' => Some("0-9"),
                    'w' => Some("A-Za-z0-9_"),
                    's' => Some(" \\t\\n\\r\\x0B\\x0C"),
                    _ => None,
                };
                match (ascii, in_class) {
                    (Some(set), true) => ecma.push_str(set),
                    (Some(set), false) => {
                        ecma.push('[');
                        ecma.push_str(set);
                        ecma.push(']');
                    }
                    (None, _) => {
                        let negated = match next {
                            'D' => Some("0-9"),
                            'W' => Some("A-Za-z0-9_"),
                            'S' => Some(" \\t\\n\\r\\x0B\\x0C"),
                            _ => None,
                        };
                        match negated {
                            Some(set) if !in_class => {
                                ecma.push_str("[^");
                                ecma.push_str(set);
                                ecma.push(']');
                            }
                            _ => {
                                ecma.push(c);
                                ecma.push(next);
                            }
                        }
                    }
                }
            }
            '[' if !in_class => {
                in_class = true;
                ecma.push(c);
            }
            ']' if in_class => {
                in_class = false;
                ecma.push(c);
            }
            _ => ecma.push(c),
        }
    }
    regex_syntax::ParserBuilder::new().build().parse(&ecma).ok()
}
