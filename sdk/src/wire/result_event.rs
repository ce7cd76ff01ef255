//! `result_event`: per-action catalog metadata through which the studio binds a downstream node's
//! input to an upstream action's result.
//!
//! For a flat typed object output the SDK derives it: `event_type` `<service>.<action>.result`,
//! `schema_id` `<service>/<action>/result`, `schema_version` 1, and one field per property of the
//! result (scalar types only). An empty output has none. A shape that cannot be derived (nested
//! objects, arrays, a non-object output) must opt out ([`ResultEventConfig::Off`]) or say what it
//! is ([`ResultEventConfig::Custom`]). A v2 declaration must not carry `topic`. `result_event` is
//! catalog metadata: it never reaches the manifest hash.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::ResultEventError;
use crate::wire::manifest::InputField;

/// The schema version of a derived result event.
pub const DERIVED_SCHEMA_VERSION: i64 = 1;

/// Scalar JSON Schema types a derived field may have.
pub const SCALAR_TYPES: [&str; 4] = ["string", "integer", "number", "boolean"];

/// A result event declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultEvent {
    /// The event's type name.
    pub event_type: String,
    /// The id of the event's schema.
    pub schema_id: String,
    /// The version of that schema.
    pub schema_version: i64,
    /// The fields a downstream node can bind to.
    pub fields: Vec<InputField>,
}

/// What an action declares about its result event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ResultEventConfig {
    /// Derive it from the result schema (the default).
    #[default]
    Auto,
    /// Declare none.
    Off,
    /// Declare this one.
    Custom(ResultEvent),
}

impl ResultEvent {
    /// Reads a declaration from manifest JSON, refusing `topic` and unknown keys.
    ///
    /// # Errors
    /// [`ResultEventError::TopicNotAllowed`], or [`ResultEventError::Invalid`] with the reason.
    pub fn from_map(map: &Map<String, Value>) -> Result<Self, ResultEventError> {
        if map.contains_key("topic") {
            return Err(ResultEventError::TopicNotAllowed);
        }
        serde_json::from_value(Value::Object(map.clone()))
            .map_err(|e| ResultEventError::Invalid(e.to_string()))
    }

    /// Reads a declaration from JSON text (as a user may write one), refusing `topic`.
    ///
    /// # Errors
    /// As [`ResultEvent::from_map`], or when the text is not a JSON object.
    pub fn from_json(text: &str) -> Result<Self, ResultEventError> {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => Self::from_map(&map),
            Ok(_) => Err(ResultEventError::Invalid("expected a JSON object".into())),
            Err(e) => Err(ResultEventError::Invalid(e.to_string())),
        }
    }

    /// The declaration as a JSON object, as the manifest carries it.
    #[must_use]
    pub fn to_map(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            _ => unreachable!("a struct serialises to an object"),
        }
    }

    /// Derives the declaration from a normalised result schema.
    ///
    /// `Ok(None)` for an empty output (no properties, or `null`).
    ///
    /// # Errors
    /// [`ResultEventError::NotDerivable`] naming the field or shape that cannot be flattened.
    pub fn derive(
        service: &str,
        action: &str,
        result_schema: &Map<String, Value>,
    ) -> Result<Option<Self>, ResultEventError> {
        let not = |field: &str, reason: String| ResultEventError::NotDerivable {
            action: action.to_owned(),
            field: field.to_owned(),
            reason,
        };
        let ty = result_schema.get("type");
        if ty == Some(&Value::from("null")) || result_schema.is_empty() {
            return Ok(None);
        }
        if ty != Some(&Value::from("object")) {
            return Err(not(
                "",
                format!(
                    "the result is not an object (type {})",
                    ty.unwrap_or(&Value::Null)
                ),
            ));
        }
        let Some(props) = result_schema.get("properties").and_then(Value::as_object) else {
            return Ok(None);
        };
        if props.is_empty() {
            return Ok(None);
        }
        let required: Vec<&str> = result_schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut fields = Vec::with_capacity(props.len());
        for (name, prop) in props {
            let field_type = scalar_type(prop).ok_or_else(|| {
                not(
                    name,
                    format!("its schema {prop} is not a scalar (string, integer, number, boolean)"),
                )
            })?;
            fields.push(InputField {
                name: name.clone(),
                field_type: field_type.to_owned(),
                required: required.contains(&name.as_str()),
            });
        }
        fields.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Some(ResultEvent {
            event_type: format!("{service}.{action}.result"),
            schema_id: format!("{service}/{action}/result"),
            schema_version: DERIVED_SCHEMA_VERSION,
            fields,
        }))
    }
}

/// The scalar type of a property schema: `"T"` or `["T", "null"]`.
fn scalar_type(prop: &Value) -> Option<&str> {
    let t = match prop.get("type")? {
        Value::String(t) => t.as_str(),
        Value::Array(ts) => {
            let mut non_null = ts.iter().filter_map(Value::as_str).filter(|t| *t != "null");
            match (non_null.next(), non_null.next()) {
                (Some(one), None) if ts.len() == 2 => one,
                _ => return None,
            }
        }
        _ => return None,
    };
    SCALAR_TYPES.contains(&t).then_some(t)
}

impl ResultEventConfig {
    /// The declaration to put in the manifest for this action, if any.
    ///
    /// # Errors
    /// When `Auto` cannot derive one: the message says to opt out or declare one.
    pub fn resolve(
        &self,
        service: &str,
        action: &str,
        result_schema: &Map<String, Value>,
    ) -> Result<Option<ResultEvent>, ResultEventError> {
        match self {
            ResultEventConfig::Auto => ResultEvent::derive(service, action, result_schema),
            ResultEventConfig::Off => Ok(None),
            ResultEventConfig::Custom(ev) => Ok(Some(ev.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn derives_flat_outputs() {
        let schema = obj(json!({"type": "object", "properties": {
            "delivered": {"type": "boolean"}, "id": {"type": "string"}, "n": {"type": ["integer", "null"]}
        }, "required": ["delivered", "id"]}));
        let ev = ResultEvent::derive("svc", "send", &schema)
            .unwrap()
            .unwrap();
        assert_eq!(ev.event_type, "svc.send.result");
        assert_eq!(ev.schema_id, "svc/send/result");
        assert_eq!(
            ev.fields,
            vec![
                InputField {
                    name: "delivered".into(),
                    field_type: "boolean".into(),
                    required: true
                },
                InputField {
                    name: "id".into(),
                    field_type: "string".into(),
                    required: true
                },
                InputField {
                    name: "n".into(),
                    field_type: "integer".into(),
                    required: false
                },
            ]
        );
    }

    #[test]
    fn empty_outputs_have_none_and_nested_ones_must_opt_out() {
        assert_eq!(
            ResultEvent::derive("s", "a", &obj(json!({"type": "null"}))).unwrap(),
            None
        );
        assert_eq!(
            ResultEvent::derive("s", "a", &obj(json!({"type": "object", "properties": {}})))
                .unwrap(),
            None
        );
        let nested = obj(json!({"type": "object", "properties": {"inner": {"type": "object"}}}));
        let err = ResultEvent::derive("s", "a", &nested).unwrap_err();
        assert!(err.to_string().contains("inner"), "{err}");
        assert_eq!(
            ResultEventConfig::Off.resolve("s", "a", &nested).unwrap(),
            None
        );
    }

    #[test]
    fn topic_is_refused() {
        let err = ResultEvent::from_json(r#"{"topic": "x", "event_type": "e", "schema_id": "s", "schema_version": 1, "fields": []}"#)
            .unwrap_err();
        assert_eq!(err, ResultEventError::TopicNotAllowed);
    }
}
