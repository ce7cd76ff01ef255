//! Evaluating mapping and condition nodes, and a lookup node's parameters: pure functions over JSON.
//!
//! Paths are a small JSONPath subset: `$` (the whole input), `$.a.b`, `$.items[0].id`,
//! `$["odd key"]`. A path that leads nowhere yields `null`.

use serde_json::{Map, Value};

/// A node's config cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// A path is not of the supported form.
    #[error("path {path:?} is not valid: {reason}")]
    BadPath {
        /// The path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The config lacks a setting or has one of the wrong type.
    #[error("config.{key}: {reason}")]
    BadConfig {
        /// The setting.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
}

enum Step {
    Key(String),
    Index(usize),
}

fn parse_path(path: &str) -> Result<Vec<Step>, EvalError> {
    let bad = |reason: &str| EvalError::BadPath {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = path
        .strip_prefix('$')
        .ok_or_else(|| bad("it must start with $"))?;
    let mut steps = Vec::new();
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '.' => {
                let start = i + 1;
                let mut end = rest.len();
                while let Some(&(j, c)) = chars.peek() {
                    if c == '.' || c == '[' {
                        end = j;
                        break;
                    }
                    chars.next();
                }
                let key = &rest[start..end];
                if key.is_empty() {
                    return Err(bad("an empty key after '.'"));
                }
                steps.push(Step::Key(key.to_owned()));
            }
            '[' => {
                let close = rest[i..].find(']').ok_or_else(|| bad("'[' without ']'"))? + i;
                let inner = &rest[i + 1..close];
                if let Some(quoted) = inner
                    .strip_prefix('"')
                    .and_then(|s| s.strip_suffix('"'))
                    .or_else(|| inner.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
                {
                    steps.push(Step::Key(quoted.to_owned()));
                } else {
                    let index = inner
                        .parse()
                        .map_err(|_| bad("a bracket holds an index or a quoted key"))?;
                    steps.push(Step::Index(index));
                }
                while chars.peek().is_some_and(|(j, _)| *j <= close) {
                    chars.next();
                }
            }
            _ => return Err(bad("expected '.' or '[' after $")),
        }
    }
    Ok(steps)
}

/// The value at `path` in `input`, or `null` when there is none.
///
/// # Errors
/// When the path is not of the supported form.
pub fn resolve_path(input: &Value, path: &str) -> Result<Value, EvalError> {
    let mut at = input;
    for step in parse_path(path)? {
        let next = match (&step, at) {
            (Step::Key(k), Value::Object(m)) => m.get(k),
            (Step::Index(i), Value::Array(a)) => a.get(*i),
            _ => None,
        };
        match next {
            Some(v) => at = v,
            None => return Ok(Value::Null),
        }
    }
    Ok(at.clone())
}

/// An expression in a mapping: a string starting with `$` is a path into the input; anything else
/// (including an object `{"const": v}` for a literal string starting with `$`) is a literal.
fn expression(input: &Value, expr: &Value) -> Result<Value, EvalError> {
    match expr {
        Value::String(s) if s.starts_with('$') => resolve_path(input, s),
        Value::Object(o) if o.len() == 1 && o.contains_key("const") => Ok(o["const"].clone()),
        other => Ok(other.clone()),
    }
}

/// Evaluates a mapping node (or a resume edge's mapping): `config.fields` maps each output field
/// to an expression. With `config.merge: true` the fields are laid over the input object.
///
/// # Errors
/// When `fields` is missing or not an object, or a path is malformed.
pub fn mapping(config: &Map<String, Value>, input: &Value) -> Result<Value, EvalError> {
    let fields = config
        .get("fields")
        .and_then(Value::as_object)
        .ok_or_else(|| EvalError::BadConfig {
            key: "fields",
            reason: "must be an object of output field -> expression".into(),
        })?;
    let mut out = match (config.get("merge"), input) {
        (Some(Value::Bool(true)), Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    for (name, expr) in fields {
        out.insert(name.clone(), expression(input, expr)?);
    }
    Ok(Value::Object(out))
}

/// Evaluates a condition node: `config.path` (default `$`), `config.op` and, for comparisons,
/// `config.value`. Ops: `eq`, `ne`, `gt`, `gte`, `lt`, `lte`, `in`, `exists`, `not_exists`,
/// `truthy`, `falsy`.
///
/// # Errors
/// When the op is unknown, a comparison has no value, or the path is malformed.
pub fn condition(config: &Map<String, Value>, input: &Value) -> Result<bool, EvalError> {
    let path = config.get("path").and_then(Value::as_str).unwrap_or("$");
    let op = config
        .get("op")
        .and_then(Value::as_str)
        .ok_or_else(|| EvalError::BadConfig {
            key: "op",
            reason: "is missing (eq, ne, gt, gte, lt, lte, in, exists, not_exists, truthy, falsy)"
                .into(),
        })?;
    let actual = resolve_path(input, path)?;
    let expected = || {
        config.get("value").ok_or_else(|| EvalError::BadConfig {
            key: "value",
            reason: format!("op {op} compares with config.value, which is missing"),
        })
    };
    let ordering = |want: &Value| match (actual.as_f64(), want.as_f64()) {
        (Some(a), Some(b)) => a.partial_cmp(&b),
        _ => match (actual.as_str(), want.as_str()) {
            (Some(a), Some(b)) => Some(a.cmp(b)),
            _ => None,
        },
    };
    use std::cmp::Ordering::{Equal, Greater, Less};
    Ok(match op {
        "eq" => top_level_numeric_eq(&actual, expected()?),
        "ne" => !top_level_numeric_eq(&actual, expected()?),
        "gt" => ordering(expected()?) == Some(Greater),
        "gte" => matches!(ordering(expected()?), Some(Greater | Equal)),
        "lt" => ordering(expected()?) == Some(Less),
        "lte" => matches!(ordering(expected()?), Some(Less | Equal)),
        "in" => expected()?
            .as_array()
            .is_some_and(|list| list.iter().any(|v| top_level_numeric_eq(&actual, v))),
        "exists" => !actual.is_null(),
        "not_exists" => actual.is_null(),
        "truthy" => truthy(&actual),
        "falsy" => !truthy(&actual),
        other => {
            return Err(EvalError::BadConfig {
                key: "op",
                reason: format!("{other:?} is not an op"),
            });
        }
    })
}

/// A condition's equality: two numbers compare as numbers (`1` equals `1.0`), everything else
/// exactly, so inside arrays and objects `1` and `1.0` differ (unlike the scenarios'
/// recursive `json_eq`). Kept shallow: making it recursive would change which edge a condition
/// takes.
fn top_level_numeric_eq(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// A lookup node's parameters: `config.params` maps each parameter to an expression.
///
/// # Errors
/// When a path is malformed.
pub fn lookup_params(config: &Map<String, Value>, input: &Value) -> Result<Value, EvalError> {
    let mut out = Map::new();
    if let Some(params) = config.get("params").and_then(Value::as_object) {
        for (name, expr) in params {
            out.insert(name.clone(), expression(input, expr)?);
        }
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn paths() {
        let v = json!({"a": {"b": [10, {"c": "x"}]}, "odd key": 1});
        assert_eq!(resolve_path(&v, "$").unwrap(), v);
        assert_eq!(resolve_path(&v, "$.a.b[1].c").unwrap(), json!("x"));
        assert_eq!(resolve_path(&v, "$[\"odd key\"]").unwrap(), json!(1));
        assert_eq!(resolve_path(&v, "$.a.nope.deeper").unwrap(), Value::Null);
        assert!(resolve_path(&v, "a.b").is_err());
        assert!(resolve_path(&v, "$.a[").is_err());
        assert!(resolve_path(&v, "$..a").is_err());
    }

    #[test]
    fn mappings() {
        let input = json!({"order_id": "o-1", "total": 12.5, "keep": true});
        let out = mapping(
            &cfg(json!({"fields": {"id": "$.order_id", "fixed": 3, "dollar": {"const": "$5"}}})),
            &input,
        )
        .unwrap();
        assert_eq!(out, json!({"id": "o-1", "fixed": 3, "dollar": "$5"}));
        let merged = mapping(&cfg(json!({"merge": true, "fields": {"total": 0}})), &input).unwrap();
        assert_eq!(merged, json!({"order_id": "o-1", "total": 0, "keep": true}));
        assert!(mapping(&cfg(json!({})), &input).is_err());
    }

    #[test]
    fn conditions() {
        let input = json!({"n": 5, "s": "b", "ok": true, "list": []});
        let c = |v: Value| condition(&cfg(v), &input).unwrap();
        assert!(c(json!({"path": "$.n", "op": "eq", "value": 5.0})));
        assert!(c(json!({"path": "$.n", "op": "gt", "value": 4})));
        assert!(!c(json!({"path": "$.n", "op": "lt", "value": 4})));
        assert!(c(json!({"path": "$.s", "op": "in", "value": ["a", "b"]})));
        assert!(c(json!({"path": "$.ok", "op": "truthy"})));
        assert!(c(json!({"path": "$.list", "op": "falsy"})));
        assert!(c(json!({"path": "$.missing", "op": "not_exists"})));
        assert!(condition(&cfg(json!({"op": "eq"})), &input).is_err());
        assert!(condition(&cfg(json!({"op": "near"})), &input).is_err());
    }
}
