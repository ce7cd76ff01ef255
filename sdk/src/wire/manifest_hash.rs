//! The manifest hash straight from a manifest's JSON text: the fast path of
//! `triggers-lab manifest hash` on a large manifest.
//!
//! Decoding a manifest builds every schema as a tree of `serde_json` maps, and most of a large
//! manifest's bytes are schemas; hashing then walks those trees. Here the manifest is read into a
//! view that holds each schema as its text (borrowed from the input, never decoded into a tree),
//! every other field decoded exactly as [`Manifest`] decodes it, and each schema is written into
//! the hash by [`GoAnyText`], which re-encodes the text as Go would after decoding it into `any`.
//! The hash input's shape is [`manifest`](super::manifest)'s own (`hash_text`): the same bytes
//! either way, checked by this module's tests, the goldens and the Go cross-check.
//!
//! Anything this path is not sure of makes it answer `None`: the caller decodes the manifest
//! ([`Manifest::from_json`]), which gives the hash or the error.

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::decode::{Strict, null_default, object_or_null, strict_default};
use super::json::GoAnyText;
use super::manifest::{HashAction, HashedParts, Lookup, Manifest, Retry, ServiceSource, hash_text};

/// A manifest as hashing reads it: [`Manifest`]'s fields with the same decoding, the schemas as
/// text.
#[derive(Deserialize)]
struct HashDoc<'a> {
    #[serde(deserialize_with = "null_default")]
    #[expect(dead_code, reason = "read for its checks, as Manifest reads it")]
    protocol_version: String,
    #[serde(deserialize_with = "null_default")]
    #[expect(dead_code, reason = "read for its checks, as Manifest reads it")]
    service: String,
    #[serde(deserialize_with = "null_default")]
    #[expect(dead_code, reason = "read for its checks, as Manifest reads it")]
    service_version: String,
    #[serde(default, deserialize_with = "null_default")]
    #[expect(dead_code, reason = "read for its checks, as Manifest reads it")]
    manifest_hash: String,
    #[serde(borrow, deserialize_with = "strict_actions")]
    actions: Vec<HashDocAction<'a>>,
    #[serde(deserialize_with = "super::decode::strict_list")]
    service_sources: Vec<ServiceSource>,
    #[serde(deserialize_with = "null_default")]
    supports_nodes: Vec<String>,
    #[serde(default, deserialize_with = "null_default")]
    supports_rate_limit: bool,
    #[serde(default, deserialize_with = "null_default")]
    runtime_capabilities: Vec<String>,
    #[serde(default, deserialize_with = "null_default")]
    runtime_lookups: Vec<Lookup>,
    #[serde(default, deserialize_with = "null_default")]
    #[expect(dead_code, reason = "read for its checks, as Manifest reads it")]
    display_name: String,
    #[serde(default, deserialize_with = "null_default")]
    #[expect(dead_code, reason = "read for its checks, as Manifest reads it")]
    description: String,
    #[serde(default, deserialize_with = "null_default")]
    #[expect(dead_code, reason = "read for its checks, as Manifest reads it")]
    owner: String,
    #[serde(default, deserialize_with = "null_default")]
    #[expect(dead_code, reason = "read for its checks, as Manifest reads it")]
    tags: Vec<String>,
}

/// An action as hashing reads it: [`Action`](super::manifest::Action)'s fields, the schemas as
/// text.
#[derive(Deserialize)]
#[expect(
    dead_code,
    reason = "the catalog fields are read for their checks only"
)]
struct HashDocAction<'a> {
    #[serde(deserialize_with = "null_default")]
    name: String,
    #[serde(default, deserialize_with = "null_default")]
    display_name: String,
    #[serde(default, deserialize_with = "null_default")]
    description: String,
    #[serde(default, deserialize_with = "null_default")]
    version: String,
    #[serde(default, deserialize_with = "null_default")]
    lifecycle: String,
    #[serde(borrow, deserialize_with = "object_text_or_null")]
    input_schema: Option<&'a RawValue>,
    #[serde(borrow, deserialize_with = "object_text_or_null")]
    result_schema: Option<&'a RawValue>,
    #[serde(deserialize_with = "null_default")]
    timeout_ms: i64,
    #[serde(deserialize_with = "strict_default")]
    retry: Retry,
    #[serde(deserialize_with = "null_default")]
    dlq: String,
    #[serde(default, deserialize_with = "null_default")]
    action_env: Option<Value>,
    #[serde(default, deserialize_with = "object_or_null")]
    result_event: Option<Map<String, Value>>,
    #[serde(default, deserialize_with = "null_default")]
    compatibility: Option<Value>,
}

/// `strict_list` for the borrowing actions.
fn strict_actions<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<HashDocAction<'a>>, D::Error> {
    Ok(
        Option::<Vec<Strict<HashDocAction<'a>>>>::deserialize(deserializer)?
            .map(|v| v.into_iter().map(|s| s.0).collect())
            .unwrap_or_default(),
    )
}

/// A JSON object's text, or `null`: what `object_or_null` takes, without decoding it.
fn object_text_or_null<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'a RawValue>, D::Error> {
    let raw = Option::<&'a RawValue>::deserialize(deserializer)?;
    match raw {
        Some(r) if !r.get().starts_with('{') => Err(serde::de::Error::custom("not a JSON object")),
        other => Ok(other),
    }
}

impl Manifest {
    /// `sha256:<64 lowercase hex>` of the manifest in `bytes`, computed from the text without
    /// decoding its schemas into trees: the same hash [`Manifest::from_json`] then
    /// [`Manifest::compute_hash`] give, several times faster on a large manifest. `None` when
    /// this path declines (the text is not a valid manifest, or holds something it leaves to a
    /// full decode): decode it then, for the hash or the error.
    #[must_use]
    pub fn hash_of_json(bytes: &[u8]) -> Option<String> {
        let doc: HashDoc<'_> = serde_json::from_slice(bytes).ok()?;
        let actions: Vec<_> = doc
            .actions
            .iter()
            .map(|a| HashAction {
                name: &a.name,
                input_schema: a.input_schema.map(|r| GoAnyText(r.get())),
                result_schema: a.result_schema.map(|r| GoAnyText(r.get())),
                timeout_ms: a.timeout_ms,
                retry: &a.retry,
                dlq: &a.dlq,
            })
            .collect();
        let parts = HashedParts {
            service_sources: &doc.service_sources,
            supports_nodes: &doc.supports_nodes,
            supports_rate_limit: doc.supports_rate_limit,
            runtime_capabilities: &doc.runtime_capabilities,
            runtime_lookups: &doc.runtime_lookups,
        };
        hash_text(&actions, &parts).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::manifest::Action;

    /// A field added to [`Manifest`] or [`Action`] stops this from compiling: add it to
    /// [`HashDoc`] or [`HashDocAction`] too, with the same decoding.
    #[expect(
        dead_code,
        reason = "compiled, never called: its patterns are the check"
    )]
    fn every_field_is_read(m: Manifest, a: Action) {
        let Manifest {
            protocol_version: _,
            service: _,
            service_version: _,
            manifest_hash: _,
            actions: _,
            service_sources: _,
            supports_nodes: _,
            supports_rate_limit: _,
            runtime_capabilities: _,
            runtime_lookups: _,
            display_name: _,
            description: _,
            owner: _,
            tags: _,
        } = m;
        let Action {
            name: _,
            display_name: _,
            description: _,
            version: _,
            lifecycle: _,
            input_schema: _,
            result_schema: _,
            timeout_ms: _,
            retry: _,
            dlq: _,
            action_env: _,
            result_event: _,
            compatibility: _,
        } = a;
    }

    fn decoded_hash(text: &str) -> Option<String> {
        Manifest::from_json(text.as_bytes())
            .ok()
            .and_then(|m| m.compute_hash().ok())
    }

    const BASE: &str = r#"{"protocol_version":"1.0.0","service":"svc","service_version":"1.0.0",
        "manifest_hash":"","service_sources":[{"name":"nats","transport":"nats","default":"svc.in"}],
        "supports_nodes":["mapping","condition"],"runtime_capabilities":["durable_timer.v1"],
        "actions":ACTIONS}"#;

    fn manifest(actions: &str) -> String {
        BASE.replace("ACTIONS", actions)
    }

    #[test]
    fn the_same_hash_as_decoding_then_hashing() {
        let action = |name: &str, input: &str| {
            format!(
                r#"{{"name":"{name}","display_name":"x","input_schema":{input},"result_schema":null,
                "timeout_ms":1000,"retry":{{"max_attempts":3,"initial_backoff_ms":100,"backoff_factor":2.5,"max_backoff_ms":1000}},
                "dlq":"triggers.v2.dlq.svc.{name}","result_event":{{"kind":"x"}}}}"#
            )
        };
        for actions in [
            "[]".to_owned(),
            "null".to_owned(),
            format!(
                "[{},{}]",
                action(
                    "b",
                    r#"{"type":"object","properties":{"z":{"type":"integer","maximum":9007199254740993},"a":{"type":["string","null"],"pattern":"^\\d+$"}},"required":["z"]}"#
                ),
                action(
                    "a",
                    r#"{"b":1.50,"a":[1e21,-0,0.1],"a":"last wins","é":"\u2028"}"#
                )
            ),
            format!("[{}]", action("only", "{}")),
        ] {
            let text = manifest(&actions);
            let fast = Manifest::hash_of_json(text.as_bytes());
            assert!(fast.is_some(), "{text}");
            assert_eq!(fast, decoded_hash(&text), "{text}");
        }
    }

    /// Where decoding fails, or the text holds what the fast path leaves to a decode, it
    /// declines: it never gives a hash the decoder would not.
    #[test]
    fn it_declines_what_it_is_not_sure_of() {
        for actions in [
            // Not an object where a schema must be one.
            r#"[{"name":"a","input_schema":[1],"result_schema":null,"timeout_ms":1,"retry":null,"dlq":""}]"#,
            // A wrong type in a field that is not hashed.
            r#"[{"name":"a","input_schema":null,"result_schema":null,"timeout_ms":1,"retry":null,"dlq":"","display_name":3}]"#,
            // A required field missing.
            r#"[{"name":"a","input_schema":null,"result_schema":null,"retry":null,"dlq":""}]"#,
            // A lone surrogate, a number out of range inside a schema.
            r#"[{"name":"a","input_schema":{"a":"\ud800"},"result_schema":null,"timeout_ms":1,"retry":null,"dlq":""}]"#,
            r#"[{"name":"a","input_schema":{"a":1e999},"result_schema":null,"timeout_ms":1,"retry":null,"dlq":""}]"#,
            // An action as an array.
            r#"[["a"]]"#,
        ] {
            let text = manifest(actions);
            assert_eq!(Manifest::hash_of_json(text.as_bytes()), None, "{text}");
        }
        // An escaped key is read as its decoded text, sorted as such.
        let text = manifest(
            r#"[{"name":"a","input_schema":{"\u0062":1,"a":2},"result_schema":null,"timeout_ms":1,"retry":null,"dlq":""}]"#,
        );
        assert!(decoded_hash(&text).is_some());
        assert_eq!(Manifest::hash_of_json(text.as_bytes()), decoded_hash(&text));
        assert_eq!(Manifest::hash_of_json(b"{not json"), None);
    }
}
