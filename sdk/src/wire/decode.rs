//! Decoding JSON from the wire into typed values, with errors that name the field.
//!
//! Go's decoder is the reference for what is accepted: unknown keys are ignored, `null` leaves a
//! field at its zero value, numbers must fit the field's type. On top of that, the fields the spec
//! marks as always present must be there (as a key; `null` counts as present, as Go writes nil
//! slices and maps that way).

use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::error::{DecodeError, DecodeErrorKind};

/// Decodes `bytes` as the shape named `shape` (used in the error message).
///
/// # Errors
/// A [`DecodeError`] with the JSON path of the offending field, and line and column.
pub fn from_slice<T: DeserializeOwned>(
    shape: &'static str,
    bytes: &[u8],
) -> Result<T, DecodeError> {
    // Valid input is the common case, and tracking the path costs an allocation per map key and
    // list element, a large share of decoding a 3 MB manifest. So decode plainly first
    // and, only when that fails, decode again with the path tracked to say where: the same
    // `Deserialize` impls run both times, so what is accepted does not change.
    let mut de = serde_json::Deserializer::from_slice(bytes);
    if let Ok(Strict(value)) = Strict::<T>::deserialize(&mut de)
        && de.end().is_ok()
    {
        return Ok(value);
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let Strict(value) = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| DecodeError::from_path_error(shape, e))?;
    de.end()
        .map_err(|e| DecodeError::from_json(shape, String::new(), e))?;
    Ok(value)
}

/// As [`from_slice`] for text.
///
/// # Errors
/// As [`from_slice`].
pub fn from_str<T: DeserializeOwned>(shape: &'static str, text: &str) -> Result<T, DecodeError> {
    from_slice(shape, text.as_bytes())
}

impl DecodeError {
    fn from_path_error(
        shape: &'static str,
        e: serde_path_to_error::Error<serde_json::Error>,
    ) -> Self {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        Self::from_json(shape, path, e.into_inner())
    }

    pub(crate) fn from_json(shape: &'static str, path: String, e: serde_json::Error) -> Self {
        let kind = match e.classify() {
            serde_json::error::Category::Syntax => DecodeErrorKind::Syntax,
            serde_json::error::Category::Eof => DecodeErrorKind::Eof,
            serde_json::error::Category::Data => DecodeErrorKind::Data,
            serde_json::error::Category::Io => DecodeErrorKind::Syntax,
        };
        // serde_json appends " at line L column C"; keep the message bare, the fields say where.
        let message = e.to_string();
        let message = match message.rfind(" at line ") {
            Some(at) => message[..at].to_owned(),
            None => message,
        };
        DecodeError {
            shape,
            kind,
            path,
            line: e.line(),
            // serde_json says column 0 for an error at a line's start; editors count from 1.
            column: e.column().max(1),
            message,
        }
    }
}

/// `null` as the type's zero value, as Go's decoder leaves a non-pointer field on `null`.
pub(crate) fn null_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// A struct that must come as a JSON object.
///
/// serde's derived `Deserialize` also takes a JSON array, filling fields by position; Go refuses
/// that ("cannot unmarshal array into Go value"), and so do we: every wire struct is decoded
/// through this wrapper, at the top and in every nested field.
pub(crate) struct Strict<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Strict<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectOnly<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectOnly<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(ObjectOnly(PhantomData))
            .map(Strict)
    }
}

/// A nested struct field: an object, or `null` for the zero value.
pub(crate) fn strict_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<Strict<T>>::deserialize(deserializer)?
        .map(|s| s.0)
        .unwrap_or_default())
}

/// A list of structs: each an object; `null` for an empty list.
pub(crate) fn strict_list<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<Strict<T>>>::deserialize(deserializer)?
        .map(|v| v.into_iter().map(|s| s.0).collect())
        .unwrap_or_default())
}

/// A JSON object or `null` (Go's `map[string]any`): anything else is refused, as Go refuses it.
pub(crate) fn object_or_null<'de, D>(
    deserializer: D,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, D::Error>
where
    D: Deserializer<'de>,
{
    Option::<serde_json::Map<String, serde_json::Value>>::deserialize(deserializer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[expect(dead_code, reason = "decoded for the error it gives, never read")]
    struct Outer {
        inner: Vec<Inner>,
    }
    #[derive(Debug, Deserialize)]
    #[expect(dead_code, reason = "decoded for the error it gives, never read")]
    struct Inner {
        n: i64,
    }

    #[test]
    fn errors_name_the_path_line_and_column() {
        let err =
            from_str::<Outer>("test", "{\"inner\": [{\"n\": 1},\n {\"n\": \"x\"}]}").unwrap_err();
        assert_eq!(err.kind, DecodeErrorKind::Data);
        assert_eq!(err.path, "inner[1].n");
        assert_eq!((err.line, err.column), (2, 10));
        assert!(err.to_string().contains("inner[1].n"), "{err}");
        let err = from_str::<Outer>("test", "{\"inner\": [").unwrap_err();
        assert_eq!(err.kind, DecodeErrorKind::Eof);
        let err = from_str::<Outer>("test", "{\"inner\": []} x").unwrap_err();
        assert_eq!(err.kind, DecodeErrorKind::Syntax);
    }

    #[derive(Debug, Deserialize)]
    #[expect(dead_code, reason = "decoded for the error it gives, never read")]
    struct Nested {
        #[serde(deserialize_with = "strict_list")]
        inner: Vec<Inner>,
    }

    #[test]
    fn structs_must_be_objects_not_arrays() {
        let err = from_str::<Outer>("test", "[[]]").unwrap_err();
        assert!(err.message.contains("expected a JSON object"), "{err}");
        let err = from_str::<Nested>("test", r#"{"inner": [[1]]}"#).unwrap_err();
        assert_eq!(err.path, "inner[0]");
        assert!(from_str::<Nested>("test", r#"{"inner": null}"#).is_ok());
    }
}
