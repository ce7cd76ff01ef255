//! Reading a JSON Schema's keywords: `$ref`s followed, `allOf` merged, bounds and types.

use serde_json::{Map, Number, Value, json};

/// How many `$ref`s one schema may pass through before it is taken as "anything".
const MAX_REFS: usize = 32;

/// `schema` with its `$ref`s followed (local ones) and its `allOf` merged in; `None` for a
/// boolean schema or one that cannot be resolved.
pub(super) fn effective(root: &Value, schema: &Value) -> Option<Value> {
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
pub(super) fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    root.pointer(pointer)
}

/// Merges `from`'s keywords into `into`: properties merged, required joined, bounds tightened,
/// the rest kept from `into` when it has them.
pub(super) fn merge_into(into: &mut Map<String, Value>, from: &Map<String, Value>) {
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

/// A length or count keyword (`minLength`, `maxItems`...): a non-negative number.
pub(super) fn bound(obj: &Map<String, Value>, key: &str) -> Option<f64> {
    obj.get(key)
        .and_then(Value::as_f64)
        .filter(|v| v.is_finite() && *v >= 0.0)
}

/// The lower bound and whether it is exclusive (draft 4's boolean form too).
pub(super) fn lower(obj: &Map<String, Value>) -> (f64, bool) {
    edge(
        obj,
        "minimum",
        "exclusiveMinimum",
        f64::NEG_INFINITY,
        f64::max,
    )
}

/// The upper bound and whether it is exclusive.
pub(super) fn upper(obj: &Map<String, Value>) -> (f64, bool) {
    edge(obj, "maximum", "exclusiveMaximum", f64::INFINITY, f64::min)
}

pub(super) fn edge(
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
pub(super) fn int_range(obj: &Map<String, Value>) -> (i64, i64) {
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

pub(super) fn saturate(v: f64) -> i64 {
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
pub(super) fn multiple_in(v: i64, m: i64, lo: i64, hi: i64) -> i64 {
    let down = v.saturating_sub(v.rem_euclid(m));
    [down, down.saturating_add(m), down.saturating_sub(m)]
        .into_iter()
        .find(|c| (lo..=hi).contains(c) && c.rem_euclid(m) == 0)
        .unwrap_or(v)
}

pub(super) fn number_value(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        json!(v as i64)
    } else {
        Number::from_f64(v).map_or(Value::Null, Value::Number)
    }
}

pub(super) fn types_of(obj: &Map<String, Value>) -> Vec<String> {
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

pub(super) fn types_of_value(root: &Value, schema: &Value) -> Vec<String> {
    match effective(root, schema) {
        Some(Value::Object(obj)) => types_of(&obj),
        _ => Vec::new(),
    }
}

pub(super) fn matches_type(v: &Value, types: &[String]) -> bool {
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
