//! JSON Schema normalisation: the same shape gives the same bytes in Go, Python and Rust.
//!
//! Go's reflection schema inlines nested types, writes `Option<T>` as `"type": [T, "null"]` and
//! carries shape only. schemars (1.x) writes `$ref`/`$defs`, `anyOf [T, null]`, titles, doc
//! comments and integer widths (`format: uint32`, `minimum: 0`). Normalising (design decision 4):
//!
//! 1. resolve every `$ref` against `$defs`/`definitions` and drop those;
//! 2. `anyOf: [S, {"type": "null"}]` where `S` has a `type` becomes `S` with `"type": [T, "null"]`;
//! 3. keep `required` and `additionalProperties`;
//! 4. keep only shape keywords ([`SHAPE_KEYWORDS`]); `format` only on strings (`date-time`...),
//!    never the integer/float widths.
//!
//! Two Rust types of the same shape, whatever their names, doc comments or integer widths, give
//! identical bytes.

use schemars::JsonSchema;
use serde_json::{Map, Value};

use crate::error::SchemaError;

/// The keywords that survive normalisation.
pub const SHAPE_KEYWORDS: [&str; 11] = [
    "type",
    "properties",
    "required",
    "items",
    "prefixItems",
    "additionalProperties",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
];

/// The JSON Schema of `T`, normalised.
///
/// # Errors
/// When the schema refers to itself (a recursive type cannot be inlined) or has a dangling `$ref`.
pub fn schema_for<T: JsonSchema>() -> Result<Map<String, Value>, SchemaError> {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let root = generator.into_root_schema_for::<T>();
    normalize(root.as_value())
}

/// Normalises any JSON Schema document (from schemars, Pydantic or by hand).
///
/// A boolean schema `true` becomes `{}`, `false` becomes `{"not": {}}`, so the result is always an
/// object as Go's `map[string]any` needs.
///
/// # Errors
/// When a `$ref` points nowhere or into a cycle.
pub fn normalize(schema: &Value) -> Result<Map<String, Value>, SchemaError> {
    let defs = Defs::of(schema);
    let mut stack = Vec::new();
    match normalize_node(schema, &defs, &mut stack)? {
        Value::Object(map) => Ok(map),
        other => Err(SchemaError::NotAnObject(other.to_string())),
    }
}

struct Defs<'a> {
    defs: Option<&'a Map<String, Value>>,
    definitions: Option<&'a Map<String, Value>>,
}

impl<'a> Defs<'a> {
    fn of(root: &'a Value) -> Self {
        Defs {
            defs: root.get("$defs").and_then(Value::as_object),
            definitions: root.get("definitions").and_then(Value::as_object),
        }
    }

    fn resolve(&self, reference: &str) -> Option<&'a Value> {
        if let Some(name) = reference.strip_prefix("#/$defs/") {
            return self.defs?.get(&unescape_pointer(name));
        }
        if let Some(name) = reference.strip_prefix("#/definitions/") {
            return self.definitions?.get(&unescape_pointer(name));
        }
        None
    }
}

fn unescape_pointer(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn normalize_node(
    node: &Value,
    defs: &Defs<'_>,
    stack: &mut Vec<String>,
) -> Result<Value, SchemaError> {
    let map = match node {
        Value::Bool(true) => return Ok(Value::Object(Map::new())),
        Value::Bool(false) => {
            return Ok(Value::Object(
                [("not".to_owned(), Value::Object(Map::new()))]
                    .into_iter()
                    .collect(),
            ));
        }
        Value::Object(map) => map,
        other => return Err(SchemaError::NotAnObject(other.to_string())),
    };
    if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
        if stack.iter().any(|r| r == reference) {
            return Err(SchemaError::Recursive(reference.to_owned()));
        }
        let target = defs
            .resolve(reference)
            .ok_or_else(|| SchemaError::DanglingRef(reference.to_owned()))?;
        stack.push(reference.to_owned());
        let resolved = normalize_node(target, defs, stack)?;
        stack.pop();
        // Keywords beside a `$ref` (2020-12 allows them) apply too; shape ones are merged in.
        let mut merged = match resolved {
            Value::Object(m) => m,
            other => return Ok(other),
        };
        let siblings: Map<String, Value> = map
            .iter()
            .filter(|(k, _)| *k != "$ref")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if let Value::Object(extra) = normalize_node(&Value::Object(siblings), defs, stack)? {
            for (k, v) in extra {
                merged.entry(k).or_insert(v);
            }
        }
        return Ok(Value::Object(merged));
    }

    let mut out = Map::new();
    for (key, value) in map {
        let kept = match key.as_str() {
            "properties" => match value {
                Value::Object(props) => {
                    let mut normalized = Map::new();
                    for (name, sub) in props {
                        normalized.insert(name.clone(), normalize_node(sub, defs, stack)?);
                    }
                    Value::Object(normalized)
                }
                other => other.clone(),
            },
            "items" | "additionalProperties" => match value {
                Value::Bool(b) => Value::Bool(*b),
                Value::Array(list) => Value::Array(
                    list.iter()
                        .map(|s| normalize_node(s, defs, stack))
                        .collect::<Result<_, _>>()?,
                ),
                sub => normalize_node(sub, defs, stack)?,
            },
            "prefixItems" | "anyOf" | "oneOf" | "allOf" => match value {
                Value::Array(list) => Value::Array(
                    list.iter()
                        .map(|s| normalize_node(s, defs, stack))
                        .collect::<Result<_, _>>()?,
                ),
                other => other.clone(),
            },
            "required" => match value {
                Value::Array(list) if list.is_empty() => continue,
                other => other.clone(),
            },
            "format" => {
                // Integer and float widths are a Rust artefact; string formats are shape.
                if is_type(map, "string") {
                    value.clone()
                } else {
                    continue;
                }
            }
            k if SHAPE_KEYWORDS.contains(&k) => value.clone(),
            _ => continue,
        };
        out.insert(key.clone(), kept);
    }
    Ok(Value::Object(merge_nullable(out)))
}

fn is_type(map: &Map<String, Value>, name: &str) -> bool {
    match map.get("type") {
        Some(Value::String(t)) => t == name,
        Some(Value::Array(ts)) => ts.iter().any(|t| t == name),
        _ => false,
    }
}

/// `{"anyOf": [S, {"type": "null"}]}` (either order) becomes `S` with `"type": [T, "null"]`.
fn merge_nullable(mut map: Map<String, Value>) -> Map<String, Value> {
    let Some(Value::Array(branches)) = map.get("anyOf") else {
        return map;
    };
    if branches.len() != 2 {
        return map;
    }
    let is_null = |v: &Value| {
        v.as_object()
            .is_some_and(|o| o.len() == 1 && o.get("type") == Some(&Value::from("null")))
    };
    let other = match (is_null(&branches[0]), is_null(&branches[1])) {
        (false, true) => &branches[0],
        (true, false) => &branches[1],
        _ => return map,
    };
    let Some(other) = other.as_object() else {
        return map;
    };
    let types = match other.get("type") {
        Some(Value::String(t)) => vec![Value::from(t.as_str()), Value::from("null")],
        Some(Value::Array(ts)) => {
            let mut ts = ts.clone();
            if !ts.contains(&Value::from("null")) {
                ts.push(Value::from("null"));
            }
            ts
        }
        _ => return map,
    };
    let mut merged = other.clone();
    merged.insert("type".into(), Value::Array(types));
    map.remove("anyOf");
    for (k, v) in map {
        merged.entry(k).or_insert(v);
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inlines_refs_and_merges_nullable() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Outer",
            "type": "object",
            "properties": {
                "a": {"$ref": "#/$defs/Inner", "description": "the a"},
                "b": {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}]},
                "n": {"type": "integer", "format": "uint8", "minimum": 0, "maximum": 255},
                "t": {"type": "string", "format": "date-time"}
            },
            "required": ["a", "n"],
            "$defs": {"Inner": {"type": "object", "title": "Inner", "properties": {"x": {"type": "number", "format": "double"}}, "additionalProperties": false}}
        });
        let got = Value::Object(normalize(&schema).unwrap());
        assert_eq!(
            got,
            json!({
                "type": "object",
                "properties": {
                    "a": {"type": "object", "properties": {"x": {"type": "number"}}, "additionalProperties": false},
                    "b": {"type": ["object", "null"], "properties": {"x": {"type": "number"}}, "additionalProperties": false},
                    "n": {"type": "integer"},
                    "t": {"type": "string", "format": "date-time"}
                },
                "required": ["a", "n"]
            })
        );
    }

    #[test]
    fn recursive_and_dangling_refs_are_errors() {
        let rec = json!({"$ref": "#/$defs/A", "$defs": {"A": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}}}});
        assert!(matches!(normalize(&rec), Err(SchemaError::Recursive(_))));
        let dangling = json!({"$ref": "#/$defs/Nope"});
        assert!(matches!(
            normalize(&dangling),
            Err(SchemaError::DanglingRef(_))
        ));
        assert_eq!(normalize(&json!(true)).unwrap(), Map::new());
    }
}
