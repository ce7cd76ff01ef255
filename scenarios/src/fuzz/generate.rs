//! Inputs generated from a JSON Schema: boundary values and awkward strings first, then random
//! ones. What the generator understands: `type` (one or several), `enum`, `const`, `anyOf`,
//! `oneOf`, `allOf` (merged), local `$ref` (`#/$defs/...`, `#/definitions/...`, any `#/...`
//! pointer), `properties`/`required`/`additionalProperties`, `items`/`prefixItems`/
//! `minItems`/`maxItems`/`uniqueItems`, `minimum`/`maximum`/`exclusiveMinimum`/
//! `exclusiveMaximum` (numbers and draft 4's booleans)/`multipleOf`,
//! `minLength`/`maxLength`/`pattern`/`format`. What it does not (`not`, `if`/`then`,
//! dependencies, lookaround in a pattern) the campaign catches by validating every input before
//! it is sent (see [`Inputs`]): an input the schema refuses is never blamed on the service.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use regex_syntax::hir::{Class, Hir, HirKind};
use serde_json::{Map, Number, Value, json};

/// Strings a fuzzer is for: empty, blank, control characters, quotes, markup, non-ASCII,
/// right-to-left, astral-plane, long.
const AWKWARD: &[&str] = &[
    "",
    " ",
    "0",
    "-1",
    "null",
    "true",
    "\n",
    "\t\r",
    "\u{0}",
    "\"",
    "\\",
    "'; DROP TABLE orders; --",
    "<script>alert(1)</script>",
    "${jndi:ldap://x}",
    "ü",
    "日本語",
    "\u{202e}abc",
    "\u{2028}",
    "😀",
    "a.b.c",
    "$.path",
    "%s%n",
    "\u{feff}",
];

/// Integers at the edges of what services mishandle.
const EDGE_INTS: &[i64] = &[
    0,
    1,
    -1,
    2,
    255,
    256,
    65_535,
    65_536,
    i32::MAX as i64,
    i32::MIN as i64,
    (1 << 31) + 1,
    1 << 53,
    (1 << 53) + 1,
    i64::MAX,
    i64::MIN,
];

/// How deep the generator goes before it makes the smallest value a schema allows (a recursive
/// `$ref` ends there).
const DEEP: usize = 8;
/// How many `$ref`s one schema may pass through before it is taken as "anything".
const MAX_REFS: usize = 32;
/// How many tries an input the schema accepts gets (see [`Inputs`]).
const TRIES: usize = 100;

/// Generates inputs from a JSON Schema, boundary values first.
pub struct Generator {
    rng: StdRng,
    /// Inputs made so far: the first ones favour edges.
    made: u32,
}

impl Generator {
    /// A generator for `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Generator {
            rng: StdRng::seed_from_u64(seed),
            made: 0,
        }
    }

    /// An input meant to be valid for `schema` (the root, which local `$ref`s point into). It
    /// is valid for every keyword listed in the module's documentation; [`Inputs`] checks the
    /// rest.
    pub fn valid(&mut self, schema: &Value) -> Value {
        self.made += 1;
        self.value(schema, schema, 0)
    }

    /// An input meant to break `schema`: a required field left out, a wrong type at the top or
    /// inside, a bound crossed, a value outside an `enum`, a property the schema does not allow;
    /// `None` when the schema takes anything.
    pub fn invalid(&mut self, schema: &Value) -> Option<Value> {
        self.made += 1;
        self.breaking(schema, schema, 0)
    }

    fn edge_first(&self) -> bool {
        self.made <= 40
    }

    fn pick<'v, T>(&mut self, items: &'v [T]) -> &'v T {
        &items[self.rng.random_range(0..items.len())]
    }

    fn value(&mut self, root: &Value, schema: &Value, depth: usize) -> Value {
        let obj = match effective(root, schema) {
            Some(Value::Object(obj)) => obj,
            // `true`, `{}`, an unresolvable `$ref`: any JSON.
            _ => return self.any(depth),
        };
        if let Some(c) = obj.get("const") {
            return c.clone();
        }
        if let Some(values) = obj.get("enum").and_then(Value::as_array)
            && !values.is_empty()
        {
            return self.pick(values).clone();
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = obj.get(key).and_then(Value::as_array)
                && !branches.is_empty()
            {
                // Deep down, the branch that ends soonest (`null` when there is one).
                let branch = if depth >= DEEP {
                    branches
                        .iter()
                        .find(|b| types_of_value(root, b).iter().any(|t| t == "null"))
                        .unwrap_or(&branches[0])
                } else {
                    self.pick(branches)
                };
                let mut merged = obj.clone();
                merged.remove(key);
                let branch = match effective(root, branch) {
                    Some(Value::Object(b)) => {
                        merge_into(&mut merged, &b);
                        Value::Object(merged)
                    }
                    _ => branch.clone(),
                };
                return self.value(root, &branch, depth + 1);
            }
        }
        let types = types_of(&obj);
        let ty = if types.is_empty() {
            if obj.contains_key("properties") || obj.contains_key("required") {
                "object".to_owned()
            } else if obj.contains_key("items") || obj.contains_key("prefixItems") {
                "array".to_owned()
            } else if obj.contains_key("pattern")
                || obj.contains_key("format")
                || obj.contains_key("maxLength")
            {
                "string".to_owned()
            } else if obj.contains_key("minimum") || obj.contains_key("maximum") {
                "number".to_owned()
            } else {
                return self.any(depth);
            }
        } else if depth >= DEEP && types.iter().any(|t| t == "null") {
            "null".to_owned()
        } else {
            self.pick(&types).clone()
        };
        match ty.as_str() {
            "null" => Value::Null,
            "boolean" => Value::Bool(self.rng.random_bool(0.5)),
            "integer" => self.integer(&obj),
            "number" => self.number(&obj),
            "string" => self.string(&obj),
            "array" => self.array(root, &obj, depth),
            "object" => self.object(root, &obj, depth),
            _ => self.any(depth),
        }
    }

    fn any(&mut self, depth: usize) -> Value {
        match self.rng.random_range(0..if depth > 2 { 4 } else { 6 }) {
            0 => Value::Null,
            1 => Value::Bool(self.rng.random_bool(0.5)),
            2 => json!(*self.pick(EDGE_INTS)),
            3 => json!(*self.pick(AWKWARD)),
            4 => json!([self.any(depth + 1)]),
            _ => json!({"k": self.any(depth + 1)}),
        }
    }

    fn integer(&mut self, obj: &Map<String, Value>) -> Value {
        let (lo, hi) = int_range(obj);
        let step = obj
            .get("multipleOf")
            .and_then(Value::as_f64)
            .filter(|m| *m >= 1.0 && m.fract() == 0.0 && *m < 9.0e18)
            .map(|m| m as i64);
        let mut edges: Vec<i64> = EDGE_INTS.to_vec();
        for b in [lo, hi] {
            if b != i64::MIN && b != i64::MAX {
                edges.extend([b, b.saturating_add(1), b.saturating_sub(1)]);
            }
        }
        if let Some(m) = step {
            edges = edges
                .into_iter()
                .map(|v| multiple_in(v, m, lo, hi))
                .collect();
        }
        edges.retain(|v| (lo..=hi).contains(v));
        let v = if !edges.is_empty() && (self.edge_first() || self.rng.random_bool(0.3)) {
            *self.pick(&edges)
        } else {
            let (a, b) = (lo.max(-1_000_000_000), hi.min(1_000_000_000));
            let v = if a <= b {
                self.rng.random_range(a..=b)
            } else {
                lo
            };
            step.map_or(v, |m| multiple_in(v, m, lo, hi))
        };
        json!(v)
    }

    fn number(&mut self, obj: &Map<String, Value>) -> Value {
        let (lo, lo_open) = lower(obj);
        let (hi, hi_open) = upper(obj);
        let lo_in = if lo_open { lo.next_up() } else { lo };
        let hi_in = if hi_open { hi.next_down() } else { hi };
        let (lo, hi) = (lo_in.max(-1e300), hi_in.min(1e300));
        let edges = [
            0.0,
            -0.0,
            0.5,
            -1.5,
            0.1 + 0.2,
            1e-7,
            1e21,
            -1e21,
            9_007_199_254_740_993.0,
            f64::MAX,
            f64::MIN_POSITIVE,
            lo,
            hi,
        ];
        let mut v = if self.edge_first() || self.rng.random_bool(0.3) {
            self.pick(&edges).clamp(lo.min(hi), hi.max(lo))
        } else {
            let (a, b) = (lo.max(-1e12), hi.min(1e12));
            if a < b {
                self.rng.random_range(a..b)
            } else {
                a
            }
        };
        if let Some(m) = obj
            .get("multipleOf")
            .and_then(Value::as_f64)
            .filter(|m| *m > 0.0)
        {
            v = (v / m).round() * m;
            if v < lo {
                v += m;
            } else if v > hi {
                v -= m;
            }
        }
        if v.fract() == 0.0 && v.abs() < 9.0e15 && !(v == 0.0 && v.is_sign_negative()) {
            // An integral value written as an integer, as most encoders do.
            return json!(v as i64);
        }
        Number::from_f64(v).map_or(Value::Null, Value::Number)
    }

    fn string(&mut self, obj: &Map<String, Value>) -> Value {
        if let Some(format) = obj.get("format").and_then(Value::as_str)
            && let Some(s) = self.formatted(format)
        {
            return Value::String(s);
        }
        if let Some(pattern) = obj.get("pattern").and_then(Value::as_str)
            && let Some(hir) = parse_pattern(pattern)
        {
            let mut s = String::new();
            self.sample(&hir, &mut s);
            return Value::String(s);
        }
        let min = bound(obj, "minLength").map_or(0, |v| v as usize);
        let max = bound(obj, "maxLength")
            .map_or(4096, |v| v as usize)
            .max(min);
        let base = if self.edge_first() || self.rng.random_bool(0.4) {
            match self.rng.random_range(0..5) {
                0 => "x".repeat(max.min(4096)),
                1 => "x".repeat(min),
                2 => "é".repeat(max.min(300)),
                _ => (*self.pick(AWKWARD)).to_owned(),
            }
        } else {
            let len = self.rng.random_range(min..=max.min(min + 40));
            (0..len)
                .map(|_| char::from(self.rng.random_range(b'a'..=b'z')))
                .collect()
        };
        // Within the declared lengths, counted in characters as JSON Schema does.
        let mut s: String = base.chars().take(max).collect();
        while s.chars().count() < min {
            s.push('x');
        }
        Value::String(s)
    }

    /// A string of a well-known `format`, edges among them; `None` for a format it does not
    /// know (a plain string is made instead).
    fn formatted(&mut self, format: &str) -> Option<String> {
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
    fn sample(&mut self, hir: &Hir, out: &mut String) {
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

    fn array(&mut self, root: &Value, obj: &Map<String, Value>, depth: usize) -> Value {
        let prefix: Vec<Value> = obj
            .get("prefixItems")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let min = bound(obj, "minItems").map_or(0, |v| v as usize);
        let mut max = bound(obj, "maxItems")
            .map_or(if depth > 2 { 1 } else { 5 }, |v| v as usize)
            .max(min);
        if obj.get("items") == Some(&Value::Bool(false)) {
            // No items beyond the tuple's.
            max = max.min(prefix.len()).max(min.min(prefix.len()));
        }
        let len = if depth >= DEEP {
            min
        } else if self.edge_first() && self.rng.random_bool(0.5) {
            if self.rng.random_bool(0.5) {
                min
            } else {
                max.min(50)
            }
        } else {
            self.rng.random_range(min..=max.min(min + 5))
        };
        let items = obj.get("items").cloned().unwrap_or(Value::Bool(true));
        let unique = obj.get("uniqueItems") == Some(&Value::Bool(true));
        let mut out: Vec<Value> = Vec::with_capacity(len);
        let mut tries = 0;
        while out.len() < len && tries < len * 8 + 8 {
            tries += 1;
            let item_schema = prefix.get(out.len()).unwrap_or(&items);
            let item = self.value(root, item_schema, depth + 1);
            if unique && out.contains(&item) {
                continue;
            }
            out.push(item);
        }
        Value::Array(out)
    }

    fn object(&mut self, root: &Value, obj: &Map<String, Value>, depth: usize) -> Value {
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out = Map::new();
        let props = obj.get("properties").and_then(Value::as_object);
        if let Some(props) = props {
            for (name, schema) in props {
                let wanted = required.contains(&name.as_str())
                    || (depth < DEEP && self.rng.random_bool(0.5));
                if wanted {
                    out.insert(name.clone(), self.value(root, schema, depth + 1));
                }
            }
        }
        for name in &required {
            if !out.contains_key(*name) {
                let schema = match obj.get("additionalProperties") {
                    Some(s @ Value::Object(_)) => s.clone(),
                    _ => Value::Bool(true),
                };
                out.insert((*name).to_owned(), self.value(root, &schema, depth + 1));
            }
        }
        // A property the schema allows without naming it, now and then: services that choke
        // on an unknown field are a classic.
        let extra = match obj.get("additionalProperties") {
            None | Some(Value::Bool(true)) => Some(Value::Bool(true)),
            Some(s @ Value::Object(_)) => Some(s.clone()),
            Some(_) => None,
        };
        if let Some(schema) = extra
            && depth < DEEP
            && !self.edge_first()
            && self.rng.random_bool(0.1)
        {
            let name = ["extra", "__proto__", "", "ünknown"][self.rng.random_range(0..4)];
            if props.is_none_or(|p| !p.contains_key(name)) {
                out.insert(name.to_owned(), self.value(root, &schema, depth + 1));
            }
        }
        Value::Object(out)
    }

    /// An input that breaks `schema`, or `None`.
    fn breaking(&mut self, root: &Value, schema: &Value, depth: usize) -> Option<Value> {
        let Some(Value::Object(obj)) = effective(root, schema) else {
            return None;
        };
        let types = types_of(&obj);
        let props = obj.get("properties").and_then(Value::as_object);
        // Inside: one property of a valid object broken.
        if depth < 4
            && let Some(props) = props
            && !props.is_empty()
            && self.rng.random_bool(0.35)
        {
            let mut valid = self.value(root, schema, depth);
            let (name, inner) = props.iter().nth(self.rng.random_range(0..props.len()))?;
            if let Some(broken) = self.breaking(root, inner, depth + 1)
                && let Some(map) = valid.as_object_mut()
            {
                map.insert(name.clone(), broken);
                return Some(valid);
            }
        }
        // A required field left out.
        if let Some(required) = obj.get("required").and_then(Value::as_array)
            && !required.is_empty()
            && self.rng.random_bool(0.4)
        {
            let mut valid = self.value(root, schema, depth);
            if let Some(map) = valid.as_object_mut()
                && let Some(name) = self.pick(required).as_str()
            {
                map.remove(name);
                return Some(valid);
            }
        }
        // A bound crossed, an enum missed, an unknown property.
        if self.rng.random_bool(0.4)
            && let Some(v) = self.crossing(root, &obj, depth)
        {
            return Some(v);
        }
        if types.is_empty() && !obj.contains_key("enum") && !obj.contains_key("const") {
            return None;
        }
        let wrong = [
            json!("not the declared type"),
            json!(12345),
            json!(1.5),
            json!(true),
            json!(null),
            json!([1, 2]),
            json!({"unexpected": 1}),
        ];
        let candidates: Vec<&Value> = wrong
            .iter()
            .filter(|v| types.is_empty() || !matches_type(v, &types))
            .collect();
        if candidates.is_empty() {
            return None;
        }
        Some((*self.pick(&candidates)).clone())
    }

    /// A value just past one of the schema's bounds, or outside its `enum`.
    fn crossing(&mut self, root: &Value, obj: &Map<String, Value>, depth: usize) -> Option<Value> {
        let mut options: Vec<Value> = Vec::new();
        if obj.contains_key("enum") || obj.contains_key("const") {
            options.push(json!("not-one-of-the-values"));
        }
        let (lo, lo_open) = lower(obj);
        let (hi, hi_open) = upper(obj);
        let integral = types_of(obj).iter().any(|t| t == "integer");
        if lo.is_finite() {
            let v = if lo_open {
                lo
            } else if integral {
                lo - 1.0
            } else {
                lo - 0.5
            };
            options.push(number_value(v));
        }
        if hi.is_finite() {
            let v = if hi_open {
                hi
            } else if integral {
                hi + 1.0
            } else {
                hi + 0.5
            };
            options.push(number_value(v));
        }
        if let Some(max) = bound(obj, "maxLength") {
            options.push(Value::String("x".repeat(max as usize + 1)));
        }
        if let Some(min) = bound(obj, "minLength")
            && min >= 1.0
        {
            options.push(Value::String("x".repeat(min as usize - 1)));
        }
        if let Some(max) = bound(obj, "maxItems") {
            let items = obj.get("items").cloned().unwrap_or(Value::Bool(true));
            let n = max as usize + 1;
            if n <= 1000 {
                options.push(Value::Array(
                    (0..n)
                        .map(|_| self.value(root, &items, depth + 1))
                        .collect(),
                ));
            }
        }
        if obj.get("additionalProperties") == Some(&Value::Bool(false)) {
            let mut valid = self.value(root, &Value::Object(obj.clone()), depth);
            if let Some(map) = valid.as_object_mut() {
                map.insert("not_in_the_schema".into(), json!(1));
                options.push(valid);
            }
        }
        if options.is_empty() {
            return None;
        }
        Some(self.pick(&options).clone())
    }
}

/// Makes inputs the schema accepts: the generator's, each checked by a validator (formats
/// included) and made again when the schema refuses it, so that a keyword the generator does
/// not understand never turns into a false alarm.
pub struct Inputs {
    schema: Value,
    validator: jsonschema::Validator,
}

impl Inputs {
    /// For `schema`.
    ///
    /// # Errors
    /// When `schema` is not a usable JSON Schema.
    pub fn new(schema: Value) -> Result<Self, String> {
        let validator = validator(&schema)?;
        Ok(Inputs { schema, validator })
    }

    /// Whether `value` is valid.
    #[must_use]
    pub fn accepts(&self, value: &Value) -> bool {
        self.validator.is_valid(value)
    }

    /// An input the schema accepts.
    ///
    /// # Errors
    /// When none was found in [`TRIES`] tries: what the last one broke, and where.
    pub fn valid(&self, generator: &mut Generator) -> Result<Value, String> {
        let mut last = Value::Null;
        for _ in 0..TRIES {
            let v = generator.valid(&self.schema);
            if self.accepts(&v) {
                return Ok(v);
            }
            last = v;
        }
        let why = self
            .validator
            .iter_errors(&last)
            .next()
            .map(|e| format!("{e} (at {})", e.instance_path()))
            .unwrap_or_default();
        Err(format!(
            "no input valid for the input_schema was found in {TRIES} tries (the last, {}, breaks it: {why}); \
             the schema may be unsatisfiable or use keywords the fuzzer cannot generate for (`not`, `if`/`then`, lookaround in a `pattern`)",
            super::cut(&last.to_string(), 200)
        ))
    }

    /// An input the schema refuses, or `None` when none was found (a schema that takes
    /// anything).
    pub fn invalid(&self, generator: &mut Generator) -> Option<Value> {
        (0..TRIES / 4)
            .filter_map(|_| generator.invalid(&self.schema))
            .find(|v| !self.accepts(v))
    }
}

/// A validator for `schema`, formats checked.
///
/// # Errors
/// When `schema` is not a usable JSON Schema.
pub(super) fn validator(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| e.to_string())
}

/// `schema` with its `$ref`s followed (local ones) and its `allOf` merged in; `None` for a
/// boolean schema or one that cannot be resolved.
fn effective(root: &Value, schema: &Value) -> Option<Value> {
    let mut current = schema.as_object()?.clone();
    for _ in 0..MAX_REFS {
        let Some(reference) = current.get("$ref").and_then(Value::as_str) else {
            break;
        };
        let target = resolve(root, reference)?.as_object()?.clone();
        current.remove("$ref");
        // Keywords beside a `$ref` apply too (2020-12).
        let mut merged = target;
        merge_into(&mut merged, &current);
        current = merged;
    }
    if current.contains_key("$ref") {
        return None;
    }
    if let Some(Value::Array(all)) = current.remove("allOf") {
        for part in &all {
            if let Some(Value::Object(p)) = effective(root, part) {
                merge_into(&mut current, &p);
            }
        }
    }
    Some(Value::Object(current))
}

/// A local `$ref`'s target in `root`.
fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    root.pointer(pointer)
}

/// Merges `from`'s keywords into `into`: properties merged, required joined, bounds tightened,
/// the rest kept from `into` when it has them.
fn merge_into(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (key, value) in from {
        match (key.as_str(), into.get_mut(key), value) {
            ("properties", Some(Value::Object(mine)), Value::Object(theirs)) => {
                for (k, v) in theirs {
                    mine.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            ("required", Some(Value::Array(mine)), Value::Array(theirs)) => {
                for v in theirs {
                    if !mine.contains(v) {
                        mine.push(v.clone());
                    }
                }
            }
            ("minimum" | "exclusiveMinimum" | "minLength" | "minItems", Some(mine), theirs)
                if theirs.as_f64() > mine.as_f64() =>
            {
                *mine = theirs.clone();
            }
            ("maximum" | "exclusiveMaximum" | "maxLength" | "maxItems", Some(mine), theirs)
                if theirs.is_number() && (theirs.as_f64() < mine.as_f64() || !mine.is_number()) =>
            {
                *mine = theirs.clone();
            }
            (_, None, _) => {
                into.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
}

/// `pattern` parsed, its `\d`, `\w` and `\s` made ASCII as in ECMA-262 (the parser's are
/// Unicode); `None` for what the parser does not take (lookaround, backreferences).
fn parse_pattern(pattern: &str) -> Option<Hir> {
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

/// A length or count keyword (`minLength`, `maxItems`...): a non-negative number.
fn bound(obj: &Map<String, Value>, key: &str) -> Option<f64> {
    obj.get(key)
        .and_then(Value::as_f64)
        .filter(|v| v.is_finite() && *v >= 0.0)
}

/// The lower bound and whether it is exclusive (draft 4's boolean form too).
fn lower(obj: &Map<String, Value>) -> (f64, bool) {
    edge(
        obj,
        "minimum",
        "exclusiveMinimum",
        f64::NEG_INFINITY,
        f64::max,
    )
}

/// The upper bound and whether it is exclusive.
fn upper(obj: &Map<String, Value>) -> (f64, bool) {
    edge(obj, "maximum", "exclusiveMaximum", f64::INFINITY, f64::min)
}

fn edge(
    obj: &Map<String, Value>,
    inclusive: &str,
    exclusive: &str,
    none: f64,
    tighter: fn(f64, f64) -> f64,
) -> (f64, bool) {
    let closed = obj.get(inclusive).and_then(Value::as_f64);
    match obj.get(exclusive) {
        Some(Value::Bool(true)) => (closed.unwrap_or(none), closed.is_some()),
        Some(v) if v.is_number() => {
            let open = v.as_f64().unwrap_or(none);
            match closed {
                Some(c) if tighter(c, open) == c && c != open => (c, false),
                _ => (open, true),
            }
        }
        _ => (closed.unwrap_or(none), false),
    }
}

/// The integer range a schema allows, exclusive bounds moved inward.
fn int_range(obj: &Map<String, Value>) -> (i64, i64) {
    let (lo, lo_open) = lower(obj);
    let (hi, hi_open) = upper(obj);
    let lo = if lo.is_finite() {
        let c = lo.ceil();
        if lo_open && c == lo { c + 1.0 } else { c }
    } else {
        f64::MIN
    };
    let hi = if hi.is_finite() {
        let f = hi.floor();
        if hi_open && f == hi { f - 1.0 } else { f }
    } else {
        f64::MAX
    };
    (saturate(lo), saturate(hi))
}

fn saturate(v: f64) -> i64 {
    if v >= 9.2e18 {
        i64::MAX
    } else if v <= -9.2e18 {
        i64::MIN
    } else {
        v as i64
    }
}

/// The multiple of `m` nearest `v` toward zero that lies within `lo..=hi` (or `v` when none
/// does nearby).
fn multiple_in(v: i64, m: i64, lo: i64, hi: i64) -> i64 {
    let down = v.saturating_sub(v.rem_euclid(m));
    [down, down.saturating_add(m), down.saturating_sub(m)]
        .into_iter()
        .find(|c| (lo..=hi).contains(c) && c.rem_euclid(m) == 0)
        .unwrap_or(v)
}

fn number_value(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        json!(v as i64)
    } else {
        Number::from_f64(v).map_or(Value::Null, Value::Number)
    }
}

fn types_of(obj: &Map<String, Value>) -> Vec<String> {
    match obj.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

fn types_of_value(root: &Value, schema: &Value) -> Vec<String> {
    match effective(root, schema) {
        Some(Value::Object(obj)) => types_of(&obj),
        _ => Vec::new(),
    }
}

fn matches_type(v: &Value, types: &[String]) -> bool {
    types.iter().any(|t| match t.as_str() {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every keyword the module says it understands gives valid inputs without the validator's
    /// help, and the same seed gives the same inputs.
    #[test]
    fn understood_keywords_give_valid_inputs_and_the_same_seed_the_same_ones() {
        let schemas = [
            json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string", "maxLength": 8},
                    "amount": {"type": "integer", "minimum": 1, "maximum": 500},
                    "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                    "kind": {"enum": ["a", "b"]},
                    "note": {"type": ["string", "null"]}
                },
                "required": ["id", "amount"],
                "additionalProperties": false
            }),
            json!({
                "$defs": {"Line": {"type": "object", "properties": {
                    "sku": {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"},
                    "qty": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100, "multipleOf": 5}
                }, "required": ["sku", "qty"]}},
                "type": "object",
                "properties": {
                    "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}, "minItems": 1, "maxItems": 3},
                    "at": {"type": "string", "format": "date-time"},
                    "mail": {"type": "string", "format": "email"},
                    "id": {"type": "string", "format": "uuid"},
                    "ip": {"type": "string", "format": "ipv4"},
                    "price": {"type": "number", "minimum": 0, "exclusiveMaximum": 10, "multipleOf": 0.25},
                    "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                    "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false, "minItems": 2}
                },
                "required": ["lines", "at", "mail", "id", "ip", "price", "ratio", "pair"]
            }),
            json!({
                "definitions": {"Tree": {"type": "object", "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"$ref": "#/definitions/Tree"}}
                }, "required": ["value", "children"]}},
                "$ref": "#/definitions/Tree"
            }),
            json!({
                "allOf": [
                    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 10}}, "required": ["a"]},
                    {"properties": {"b": {"type": "boolean"}}, "required": ["b"]}
                ]
            }),
            json!({"anyOf": [{"type": "string", "minLength": 2}, {"type": "null"}]}),
            json!({
                "$schema": "http://json-schema.org/draft-04/schema#",
                "type": "object",
                "properties": {"old": {"type": "integer", "minimum": 3, "exclusiveMinimum": true, "maximum": 5, "exclusiveMaximum": true}},
                "required": ["old"]
            }),
        ];
        for schema in &schemas {
            let check = validator(schema).expect("a usable schema");
            let (mut a, mut b) = (Generator::new(7), Generator::new(7));
            for _ in 0..300 {
                let (x, y) = (a.valid(schema), b.valid(schema));
                assert_eq!(x, y);
                assert!(check.is_valid(&x), "{schema}\n{x}");
            }
        }
    }

    #[test]
    fn boundary_values_come_early() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 100}}, "required": ["n"]});
        let mut g = Generator::new(1);
        let seen: Vec<i64> = (0..40)
            .map(|_| g.valid(&schema)["n"].as_i64().unwrap())
            .collect();
        assert!(seen.contains(&100) && seen.contains(&0), "{seen:?}");
    }

    #[test]
    fn invalid_inputs_break_the_schema_in_several_ways() {
        let schema = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "maximum": 10},
                "s": {"type": "string", "maxLength": 3},
                "e": {"enum": ["x", "y"]}
            },
            "required": ["n"],
            "additionalProperties": false
        });
        let inputs = Inputs::new(schema.clone()).unwrap();
        let mut g = Generator::new(3);
        let mut shapes = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let v = inputs
                .invalid(&mut g)
                .expect("the schema refuses something");
            assert!(!inputs.accepts(&v), "{v}");
            let error = inputs.validator.iter_errors(&v).next().unwrap();
            shapes.insert(
                format!("{:?}", error.kind())
                    .split(['(', ' ', '{'])
                    .next()
                    .unwrap()
                    .to_owned(),
            );
        }
        // Wrong types, a missing field, crossed bounds, an enum missed, an unknown property.
        assert!(shapes.len() >= 5, "{shapes:?}");
        assert!(Inputs::new(json!({})).unwrap().invalid(&mut g).is_none());
    }

    /// A schema the generator cannot satisfy is an error that says why, not an input the
    /// service would be blamed for.
    #[test]
    fn an_unsatisfiable_schema_is_an_error_not_a_false_alarm() {
        let inputs = Inputs::new(json!({"type": "integer", "not": {"type": "integer"}})).unwrap();
        let err = inputs.valid(&mut Generator::new(1)).unwrap_err();
        assert!(err.contains("no input valid"), "{err}");
        // `not` the generator ignores, but the validator weeds out what breaks it.
        let inputs = Inputs::new(json!({"type": "integer", "not": {"const": 0}})).unwrap();
        let mut g = Generator::new(1);
        for _ in 0..100 {
            assert_ne!(inputs.valid(&mut g).unwrap(), json!(0));
        }
    }
}
