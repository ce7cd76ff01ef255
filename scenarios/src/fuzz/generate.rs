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
use serde_json::{Map, Number, Value, json};

use super::keywords::{
    bound, effective, int_range, lower, matches_type, merge_into, multiple_in, number_value,
    types_of, types_of_value, upper,
};
use super::strings::parse_pattern;

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
/// How many tries an input the schema accepts gets (see [`Inputs`]).
const TRIES: usize = 100;

/// Generates inputs from a JSON Schema, boundary values first.
pub struct Generator {
    pub(super) rng: StdRng,
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

    pub(super) fn edge_first(&self) -> bool {
        self.made <= 40
    }

    pub(super) fn pick<'v, T>(&mut self, items: &'v [T]) -> &'v T {
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
    /// When none was found in 100 tries: what the last one broke, and where.
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
