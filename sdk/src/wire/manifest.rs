//! The service manifest, as sent on `triggers.v2.manifest.register`, and its hash.
//!
//! The hash is `sha256:` + lowercase hex of SHA-256 over the canonical JSON of a subset of the
//! manifest (design decision 3):
//!
//! ```text
//! {actions, service_sources, supports_nodes, supports_rate_limit?, runtime_capabilities?, runtime_lookups?}
//! ```
//!
//! - each action is exactly `{name, input_schema, result_schema, timeout_ms, retry, dlq}`: the
//!   catalog fields (`display_name`, `description`, `version`, `lifecycle`, `action_env`,
//!   `result_event`, `compatibility`) never reach the hash;
//! - actions, service sources and lookups are sorted by name, `supports_nodes` and
//!   `runtime_capabilities` as strings, each lookup's `params` and `result_fields` by name;
//! - lookups are stripped to `{name, params, result_fields}`, fields to `{name, type, required?}`;
//! - an empty list is `null` (a Go nil slice), never `[]`; `supports_rate_limit` is left out when
//!   false, `runtime_capabilities` and `runtime_lookups` when empty;
//! - schemas are free-form (`map[string]any`): keys sorted, numbers through `float64`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::error::{DecodeError, JsonError, ManifestIssue};
use crate::wire::decode::{self, null_default, object_or_null, strict_default, strict_list};
use crate::wire::json::{self, go_any_opt};
use crate::wire::result_event;
use crate::wire::subject;

/// The manifest protocol this SDK speaks.
pub const PROTOCOL_VERSION: &str = "1.0.0";
/// The runtime capability that lets a service take part in a Durable Timer lineage.
pub const DURABLE_TIMER_V1: &str = "durable_timer.v1";
/// The transport name of NATS service sources.
pub const TRANSPORT_NATS: &str = "nats";
/// Transports a service source may declare.
pub const TRANSPORTS: [&str; 3] = ["nats", "http", "kafka"];
/// Node types an SDK may evaluate locally (`supports_nodes`).
pub const LOCAL_NODE_TYPES: [&str; 3] = ["condition", "lookup", "mapping"];

/// A service's manifest as it travels on the wire.
///
/// Decoding follows Go: keys in any order, unknown keys ignored, `null` as the zero value; the
/// fields the spec always writes must be present. Encoding writes the fields in this order: the
/// locked fields in the spec's order, then the catalog fields (decision 7).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Manifest protocol, `1.0.0`.
    #[serde(deserialize_with = "null_default")]
    pub protocol_version: String,
    /// The service name: one subject token.
    #[serde(deserialize_with = "null_default")]
    pub service: String,
    /// The service's own version text.
    #[serde(deserialize_with = "null_default")]
    pub service_version: String,
    /// `sha256:<hex>` of the hash input: see [`Manifest::compute_hash`].
    #[serde(default, deserialize_with = "null_default")]
    pub manifest_hash: String,
    /// The actions the service runs.
    #[serde(deserialize_with = "strict_list")]
    pub actions: Vec<Action>,
    /// Where the service takes its inbound messages.
    #[serde(deserialize_with = "strict_list")]
    pub service_sources: Vec<ServiceSource>,
    /// Node types the SDK evaluates locally.
    #[serde(deserialize_with = "null_default")]
    pub supports_nodes: Vec<String>,
    /// Whether the service honours rate-limit nodes. Left out when false.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "is_false"
    )]
    pub supports_rate_limit: bool,
    /// Engine-to-service capabilities such as `durable_timer.v1`. Left out when empty.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub runtime_capabilities: Vec<String>,
    /// Reads the engine may issue to the service. Left out when empty.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub runtime_lookups: Vec<Lookup>,
    /// Catalog: a human name. Not hashed.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub display_name: String,
    /// Catalog: what the service does. Not hashed.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub description: String,
    /// Catalog: the owning team. Not hashed.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub owner: String,
    /// Catalog: free tags. Not hashed.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tags: Vec<String>,
}

/// One action of a manifest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Action {
    /// The action name: one subject token.
    #[serde(deserialize_with = "null_default")]
    pub name: String,
    /// Catalog: a human name. Not hashed.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub display_name: String,
    /// Catalog: what it does. Not hashed.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub description: String,
    /// Catalog: the action's version text. Not hashed.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub version: String,
    /// Catalog: `stable`, `beta`, `deprecated`... Not hashed.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub lifecycle: String,
    /// JSON Schema of the input, normalised (see `wire::schema`). `null` when absent.
    #[serde(deserialize_with = "object_or_null", serialize_with = "go_object")]
    pub input_schema: Option<Map<String, Value>>,
    /// JSON Schema of the output, normalised. `null` when absent.
    #[serde(deserialize_with = "object_or_null", serialize_with = "go_object")]
    pub result_schema: Option<Map<String, Value>>,
    /// Per-attempt timeout in milliseconds.
    #[serde(deserialize_with = "null_default")]
    pub timeout_ms: i64,
    /// Retry policy.
    #[serde(deserialize_with = "strict_default")]
    pub retry: Retry,
    /// The action's DLQ subject, `triggers.v2.dlq.<service>.<action>`.
    #[serde(deserialize_with = "null_default")]
    pub dlq: String,
    /// Catalog: environment the action needs. Not hashed.
    #[serde(
        default,
        deserialize_with = "null_default",
        serialize_with = "go_any_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub action_env: Option<Value>,
    /// Catalog: how downstream nodes bind to this action's result (see `wire::result_event`).
    /// Not hashed. Left out when absent or empty.
    #[serde(
        default,
        deserialize_with = "object_or_null",
        serialize_with = "go_object",
        skip_serializing_if = "is_empty_object"
    )]
    pub result_event: Option<Map<String, Value>>,
    /// Catalog: compatibility notes. Not hashed.
    #[serde(
        default,
        deserialize_with = "null_default",
        serialize_with = "go_any_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub compatibility: Option<Value>,
}

/// An action's retry policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Retry {
    /// Attempts in all, the first included.
    #[serde(deserialize_with = "null_default")]
    pub max_attempts: i64,
    /// Delay before the second attempt.
    #[serde(deserialize_with = "null_default")]
    pub initial_backoff_ms: i64,
    /// Each later delay is the previous one times this.
    #[serde(deserialize_with = "null_default")]
    pub backoff_factor: f64,
    /// No delay is longer than this.
    #[serde(deserialize_with = "null_default")]
    pub max_backoff_ms: i64,
}

impl Retry {
    /// The delay before attempt `attempt` (1-based; none before the first), capped at
    /// `max_backoff_ms` (when positive). It never panics: a policy whose delays outgrow what a
    /// `Duration` holds (a huge factor, thousands of attempts) saturates at the cap, or without
    /// one at `i64::MAX` milliseconds, the longest delay the contract can express.
    #[must_use]
    pub fn backoff_before(&self, attempt: u32) -> std::time::Duration {
        let initial = self.initial_backoff_ms.max(0);
        if attempt <= 1 || initial == 0 {
            return std::time::Duration::ZERO;
        }
        let exp = i32::try_from(attempt - 2).unwrap_or(i32::MAX);
        let factor = if self.backoff_factor.is_finite() && self.backoff_factor > 0.0 {
            self.backoff_factor
        } else {
            1.0
        };
        let cap_ms = if self.max_backoff_ms > 0 {
            self.max_backoff_ms
        } else {
            i64::MAX
        };
        let cap = std::time::Duration::from_millis(cap_ms.unsigned_abs());
        // `initial` and `factor` are positive and finite, so the product is never NaN: at worst
        // it is infinite, and the cap takes it.
        let ms = initial as f64 * factor.powi(exp);
        if ms >= cap_ms as f64 {
            return cap;
        }
        std::time::Duration::try_from_secs_f64(ms / 1000.0).map_or(cap, |d| d.min(cap))
    }
}

/// Where a service takes inbound messages from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceSource {
    /// The source's name, unique in the manifest.
    #[serde(deserialize_with = "null_default")]
    pub name: String,
    /// `nats`, `http` or `kafka`.
    #[serde(deserialize_with = "null_default")]
    pub transport: String,
    /// The default target: for NATS, the inbound subject.
    #[serde(deserialize_with = "null_default")]
    pub default: String,
}

/// A read the engine may issue to the service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lookup {
    /// The lookup's name, unique in the manifest.
    #[serde(deserialize_with = "null_default")]
    pub name: String,
    /// Catalog: a human name. Not hashed.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub display_name: String,
    /// Catalog: what it reads. Not hashed.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub description: String,
    /// Its parameters.
    #[serde(default, deserialize_with = "strict_list")]
    pub params: Vec<InputField>,
    /// The fields of its result.
    #[serde(default, deserialize_with = "strict_list")]
    pub result_fields: Vec<InputField>,
}

/// A named, typed field: a lookup parameter or result field, or a result-event field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputField {
    /// The field name.
    #[serde(deserialize_with = "null_default")]
    pub name: String,
    /// A JSON Schema type name: `string`, `integer`, `number`, `boolean`...
    #[serde(rename = "type", deserialize_with = "null_default")]
    pub field_type: String,
    /// Whether it must be given. Left out when false.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "is_false"
    )]
    pub required: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_empty_object(m: &Option<Map<String, Value>>) -> bool {
    m.as_ref().is_none_or(Map::is_empty)
}

fn go_object<S: serde::Serializer>(
    value: &Option<Map<String, Value>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        // A map of free-form values: keys sorted by the writer, numbers through float64.
        Some(map) => serializer.collect_map(map.iter().map(|(k, v)| (k, json::GoAny(v)))),
        None => serializer.serialize_none(),
    }
}

/// A list that encodes as `null` when empty: a Go nil slice.
struct NilIfEmpty<T>(Vec<T>);

impl<T: Serialize> Serialize for NilIfEmpty<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0.is_empty() {
            serializer.serialize_none()
        } else {
            self.0.serialize(serializer)
        }
    }
}

#[derive(Serialize)]
struct HashInput<'a, 'v, S> {
    actions: NilIfEmpty<&'v HashAction<'a, S>>,
    service_sources: NilIfEmpty<&'a ServiceSource>,
    supports_nodes: NilIfEmpty<&'a str>,
    #[serde(skip_serializing_if = "is_false")]
    supports_rate_limit: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime_capabilities: Option<NilIfEmpty<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime_lookups: Option<NilIfEmpty<HashLookup<'a>>>,
}

/// One action as hashed; `S` writes a schema (a decoded map, or the text of one: see
/// `manifest_hash`).
#[derive(Serialize)]
pub(super) struct HashAction<'a, S> {
    pub(super) name: &'a str,
    pub(super) input_schema: S,
    pub(super) result_schema: S,
    pub(super) timeout_ms: i64,
    pub(super) retry: &'a Retry,
    pub(super) dlq: &'a str,
}

/// A decoded schema as hashed: keys sorted, numbers through `float64`.
struct GoObject<'a>(&'a Option<Map<String, Value>>);

impl Serialize for GoObject<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        go_object(self.0, serializer)
    }
}

/// What is hashed besides the actions, borrowed from a decoded manifest (or its hashing view).
pub(super) struct HashedParts<'a> {
    pub(super) service_sources: &'a [ServiceSource],
    pub(super) supports_nodes: &'a [String],
    pub(super) supports_rate_limit: bool,
    pub(super) runtime_capabilities: &'a [String],
    pub(super) runtime_lookups: &'a [Lookup],
}

/// The hash input made of `actions` (sorted here) and `parts`: the one place its shape is
/// written, whichever way the manifest was read.
fn hash_input<'a, 'v, S: Serialize>(
    actions: &'v [HashAction<'a, S>],
    parts: &HashedParts<'a>,
) -> HashInput<'a, 'v, S> {
    let lookups: Vec<HashLookup<'_>> = sorted_by_name(parts.runtime_lookups, |l| &l.name)
        .into_iter()
        .map(|l| HashLookup {
            name: &l.name,
            params: NilIfEmpty(sorted_by_name(&l.params, |f| &f.name)),
            result_fields: NilIfEmpty(sorted_by_name(&l.result_fields, |f| &f.name)),
        })
        .collect();
    HashInput {
        actions: NilIfEmpty(sorted_by_name(actions, |a| a.name)),
        service_sources: NilIfEmpty(sorted_by_name(parts.service_sources, |s| &s.name)),
        supports_nodes: NilIfEmpty(sorted_strings(parts.supports_nodes)),
        supports_rate_limit: parts.supports_rate_limit,
        runtime_capabilities: (!parts.runtime_capabilities.is_empty())
            .then(|| NilIfEmpty(sorted_strings(parts.runtime_capabilities))),
        runtime_lookups: (!lookups.is_empty()).then_some(NilIfEmpty(lookups)),
    }
}

#[derive(Serialize)]
struct HashLookup<'a> {
    name: &'a str,
    params: NilIfEmpty<&'a InputField>,
    result_fields: NilIfEmpty<&'a InputField>,
}

/// `sha256:<64 lowercase hex>` of the hash input made of `actions` and `parts`, its bytes
/// written straight into the digest.
pub(super) fn hash_text<'a, S: Serialize>(
    actions: &[HashAction<'a, S>],
    parts: &HashedParts<'a>,
) -> Result<String, JsonError> {
    let digest = json::sha256(&hash_input(actions, parts))?;
    Ok(format!("sha256:{}", hex::encode(digest)))
}

fn sorted_by_name<T>(items: &[T], name: impl Fn(&T) -> &str) -> Vec<&T> {
    let mut v: Vec<&T> = items.iter().collect();
    // Stable, so equal names (which validation refuses) keep their order.
    v.sort_by(|a, b| name(a).as_bytes().cmp(name(b).as_bytes()));
    v
}

fn sorted_strings(items: &[String]) -> Vec<&str> {
    let mut v: Vec<&str> = items.iter().map(String::as_str).collect();
    v.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    v
}

impl Manifest {
    /// Decodes a manifest as sent on the wire.
    ///
    /// # Errors
    /// A [`DecodeError`] naming the JSON path, line and column.
    pub fn from_json(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode::from_slice("manifest", bytes)
    }

    /// Encodes the whole manifest (Go JSON).
    ///
    /// # Errors
    /// Only for values JSON cannot carry (a NaN backoff factor).
    pub fn to_json(&self) -> Result<Vec<u8>, JsonError> {
        json::to_vec(self)
    }

    /// The exact bytes that are hashed.
    ///
    /// # Errors
    /// Only for values JSON cannot carry (a NaN or infinite backoff factor).
    pub fn hash_input(&self) -> Result<Vec<u8>, JsonError> {
        json::to_vec(&hash_input(&self.hashed_actions(), &self.hashed_parts()))
    }

    /// The hashed part of each action, borrowed from the manifest.
    fn hashed_actions(&self) -> Vec<HashAction<'_, GoObject<'_>>> {
        self.actions
            .iter()
            .map(|a| HashAction {
                name: &a.name,
                input_schema: GoObject(&a.input_schema),
                result_schema: GoObject(&a.result_schema),
                timeout_ms: a.timeout_ms,
                retry: &a.retry,
                dlq: &a.dlq,
            })
            .collect()
    }

    fn hashed_parts(&self) -> HashedParts<'_> {
        HashedParts {
            service_sources: &self.service_sources,
            supports_nodes: &self.supports_nodes,
            supports_rate_limit: self.supports_rate_limit,
            runtime_capabilities: &self.runtime_capabilities,
            runtime_lookups: &self.runtime_lookups,
        }
    }

    /// `sha256:<64 lowercase hex>` of [`Manifest::hash_input`].
    ///
    /// # Errors
    /// As [`Manifest::hash_input`].
    pub fn compute_hash(&self) -> Result<String, JsonError> {
        hash_text(&self.hashed_actions(), &self.hashed_parts())
    }

    /// Sets `manifest_hash` to the computed hash.
    ///
    /// # Errors
    /// As [`Manifest::hash_input`].
    pub fn seal(&mut self) -> Result<(), JsonError> {
        self.manifest_hash = self.compute_hash()?;
        Ok(())
    }

    /// The major number of `protocol_version`, if it is `MAJOR.MINOR.PATCH` (or `MAJOR[.MINOR]`).
    #[must_use]
    pub fn protocol_major(&self) -> Option<u64> {
        let mut parts = self.protocol_version.split('.');
        let major = parts.next()?.parse().ok()?;
        parts
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            .then_some(major)
    }

    /// Whether the service declares `capability` exactly.
    #[must_use]
    pub fn has_capability(&self, capability: &str) -> bool {
        self.runtime_capabilities.iter().any(|c| c == capability)
    }

    /// The action named `name`.
    #[must_use]
    pub fn action(&self, name: &str) -> Option<&Action> {
        self.actions.iter().find(|a| a.name == name)
    }

    /// Checks the manifest against the contract; every problem found, each with its JSON path.
    ///
    /// The hash is not checked here (see [`Manifest::compute_hash`]): callers decide what a
    /// mismatch means.
    #[must_use]
    pub fn validate(&self) -> Vec<ManifestIssue> {
        let mut issues = Vec::new();
        let mut issue = |path: String, message: String| {
            // What Go's SDK can produce and the orchestrator accepts.
            let lenient = path == "service_version"
                || path.ends_with(".input_schema")
                || path.ends_with(".result_schema");
            issues.push(ManifestIssue {
                path,
                message,
                lenient,
            });
        };
        match self.protocol_major() {
            None => issue(
                "protocol_version".into(),
                format!("{:?} is not a version like 1.0.0", self.protocol_version),
            ),
            Some(1) => {}
            Some(major) => issue(
                "protocol_version".into(),
                format!("protocol major {major} is not supported (this side speaks major 1)"),
            ),
        }
        if let Err(e) = subject::check_service(&self.service) {
            issue("service".into(), e.to_string());
        }
        if self.service_version.is_empty() {
            issue("service_version".into(), "is empty".into());
        }
        if !self.manifest_hash.is_empty() && !is_hash_text(&self.manifest_hash) {
            issue(
                "manifest_hash".into(),
                format!("{:?} is not sha256:<64 lowercase hex>", self.manifest_hash),
            );
        }
        duplicates(&self.actions, |a| &a.name, "actions", &mut issue);
        for (i, a) in self.actions.iter().enumerate() {
            let at = |field: &str| format!("actions[{i}].{field}");
            if let Err(e) = subject::check_action(&a.name) {
                issue(at("name"), e.to_string());
            } else if let Ok(want) = subject::dlq_action(&self.service, &a.name)
                && a.dlq != want
            {
                issue(at("dlq"), format!("is {:?}, expected {want:?}", a.dlq));
            }
            if a.timeout_ms <= 0 {
                issue(
                    at("timeout_ms"),
                    format!("is {}, must be positive", a.timeout_ms),
                );
            }
            let r = &a.retry;
            if r.max_attempts < 1 {
                issue(
                    at("retry.max_attempts"),
                    format!("is {}, must be at least 1", r.max_attempts),
                );
            }
            if r.initial_backoff_ms < 0 || r.max_backoff_ms < 0 {
                issue(at("retry"), "backoffs must not be negative".into());
            }
            if !r.backoff_factor.is_finite() || r.backoff_factor < 1.0 {
                issue(
                    at("retry.backoff_factor"),
                    format!("is {}, must be at least 1", r.backoff_factor),
                );
            }
            for (field, schema) in [
                ("input_schema", &a.input_schema),
                ("result_schema", &a.result_schema),
            ] {
                if schema.is_none() {
                    issue(at(field), "is missing (null)".into());
                }
            }
            if let Some(re) = &a.result_event
                && let Err(e) = result_event::ResultEvent::from_map(re)
            {
                issue(at("result_event"), e.to_string());
            }
        }
        duplicates(
            &self.service_sources,
            |s| &s.name,
            "service_sources",
            &mut issue,
        );
        for (i, s) in self.service_sources.iter().enumerate() {
            if s.name.is_empty() {
                issue(format!("service_sources[{i}].name"), "is empty".into());
            }
            if !TRANSPORTS.contains(&s.transport.as_str()) {
                issue(
                    format!("service_sources[{i}].transport"),
                    format!("{:?} is not one of {TRANSPORTS:?}", s.transport),
                );
            }
            if s.default.is_empty() {
                issue(format!("service_sources[{i}].default"), "is empty".into());
            }
            if s.transport == TRANSPORT_NATS
                && !s.default.is_empty()
                && let Err(e) = subject::check_source(&s.default)
            {
                issue(format!("service_sources[{i}].default"), e.to_string());
            }
        }
        for (i, n) in self.supports_nodes.iter().enumerate() {
            if !LOCAL_NODE_TYPES.contains(&n.as_str()) && n != "rate_limit" {
                issue(
                    format!("supports_nodes[{i}]"),
                    format!("{n:?} is not a node type an SDK evaluates ({LOCAL_NODE_TYPES:?})"),
                );
            }
        }
        duplicates(
            &self.runtime_lookups,
            |l| &l.name,
            "runtime_lookups",
            &mut issue,
        );
        for (i, l) in self.runtime_lookups.iter().enumerate() {
            for (list, fields) in [("params", &l.params), ("result_fields", &l.result_fields)] {
                for (j, f) in fields.iter().enumerate() {
                    if f.name.is_empty() || f.field_type.is_empty() {
                        issue(
                            format!("runtime_lookups[{i}].{list}[{j}]"),
                            "needs a name and a type".into(),
                        );
                    }
                }
            }
        }
        issues
    }
}

fn duplicates<T>(
    items: &[T],
    name: impl Fn(&T) -> &str,
    list: &str,
    issue: &mut impl FnMut(String, String),
) {
    let mut seen = std::collections::BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        if let Some(first) = seen.insert(name(item), i) {
            issue(
                format!("{list}[{i}].name"),
                format!("{:?} is already used by {list}[{first}]", name(item)),
            );
        }
    }
}

/// Whether `s` is `sha256:` and 64 lowercase hex digits.
#[must_use]
pub fn is_hash_text(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// `sha256:` + lowercase hex SHA-256 of `bytes`.
#[must_use]
pub fn hash_bytes(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC_EXAMPLE: &str = r#"{
      "protocol_version": "1.0.0",
      "service": "my-python-svc",
      "service_version": "dev",
      "manifest_hash": "sha256:6f3a...c91d",
      "actions": [
        {
          "name": "send_inapp",
          "input_schema": {"type": "object", "properties": {"tenant_id": {"type": "string"}}, "required": ["tenant_id"]},
          "result_schema": {"type": "object", "properties": {"delivered": {"type": "boolean"}}, "required": ["delivered"]},
          "timeout_ms": 30000,
          "retry": {"max_attempts": 3, "initial_backoff_ms": 100, "backoff_factor": 2.0, "max_backoff_ms": 5000},
          "dlq": "triggers.v2.dlq.my-python-svc.send_inapp"
        }
      ],
      "service_sources": [
        {"name": "nats", "transport": "nats", "default": "triggers.v2.mysvc.inbound"}
      ],
      "supports_nodes": ["condition", "lookup", "mapping"]
    }"#;

    #[test]
    fn spec_example_hash_input() {
        let m = Manifest::from_json(SPEC_EXAMPLE.as_bytes()).unwrap();
        let canon = String::from_utf8(m.hash_input().unwrap()).unwrap();
        assert_eq!(
            canon,
            concat!(
                r#"{"actions":[{"name":"send_inapp","#,
                r#""input_schema":{"properties":{"tenant_id":{"type":"string"}},"required":["tenant_id"],"type":"object"},"#,
                r#""result_schema":{"properties":{"delivered":{"type":"boolean"}},"required":["delivered"],"type":"object"},"#,
                r#""timeout_ms":30000,"retry":{"max_attempts":3,"initial_backoff_ms":100,"backoff_factor":2,"max_backoff_ms":5000},"#,
                r#""dlq":"triggers.v2.dlq.my-python-svc.send_inapp"}],"#,
                r#""service_sources":[{"name":"nats","transport":"nats","default":"triggers.v2.mysvc.inbound"}],"#,
                r#""supports_nodes":["condition","lookup","mapping"]}"#
            )
        );
        assert!(is_hash_text(&m.compute_hash().unwrap()));
    }

    #[test]
    fn the_streamed_hash_is_the_hash_of_the_canonical_bytes() {
        // Large enough that the writer drains into the hasher many times, with maps to sort.
        let mut m = Manifest::from_json(SPEC_EXAMPLE.as_bytes()).unwrap();
        let template = m.actions[0].clone();
        m.actions = (0..2_000)
            .rev()
            .map(|i| Action {
                name: format!("a{i:04}"),
                input_schema: Some(
                    serde_json::json!({"z": i, "a": {"y": 1.5, "b": [i, "x"]}, "m": null})
                        .as_object()
                        .cloned()
                        .unwrap(),
                ),
                ..template.clone()
            })
            .collect();
        let bytes = m.hash_input().unwrap();
        assert!(bytes.len() > 200_000, "{}", bytes.len());
        assert_eq!(m.compute_hash().unwrap(), hash_bytes(&bytes));
    }

    #[test]
    fn empty_lists_hash_as_null_and_optional_parts_are_left_out() {
        let m = Manifest {
            runtime_lookups: vec![Lookup {
                name: "l".into(),
                display_name: "Shown".into(),
                ..Lookup::default()
            }],
            ..Manifest::default()
        };
        assert_eq!(
            String::from_utf8(m.hash_input().unwrap()).unwrap(),
            r#"{"actions":null,"service_sources":null,"supports_nodes":null,"runtime_lookups":[{"name":"l","params":null,"result_fields":null}]}"#
        );
    }

    #[test]
    fn missing_required_key_names_the_path() {
        let text = SPEC_EXAMPLE.replace(r#""timeout_ms": 30000,"#, "");
        let err = Manifest::from_json(text.as_bytes()).unwrap_err();
        assert_eq!(err.path, "actions[0]");
        assert!(err.message.contains("timeout_ms"), "{err}");
        let text = SPEC_EXAMPLE.replace("30000", "\"30000\"");
        let err = Manifest::from_json(text.as_bytes()).unwrap_err();
        assert_eq!(err.path, "actions[0].timeout_ms");
    }

    #[test]
    fn validation_reports_each_problem_with_its_path() {
        let mut m = Manifest::from_json(SPEC_EXAMPLE.as_bytes()).unwrap();
        assert_eq!(
            m.validate(),
            vec![ManifestIssue {
                path: "manifest_hash".into(),
                message: "\"sha256:6f3a...c91d\" is not sha256:<64 lowercase hex>".into(),
                lenient: false,
            }]
        );
        m.seal().unwrap();
        assert!(m.validate().is_empty());
        m.protocol_version = "2.0.0".into();
        m.actions[0].dlq = "elsewhere".into();
        m.actions.push(m.actions[0].clone());
        let paths: Vec<String> = m.validate().into_iter().map(|i| i.path).collect();
        assert_eq!(
            paths,
            [
                "protocol_version",
                "actions[1].name",
                "actions[0].dlq",
                "actions[1].dlq"
            ]
        );
    }

    #[test]
    fn backoff_saturates_instead_of_panicking() {
        let huge = Retry {
            max_attempts: i64::MAX,
            initial_backoff_ms: i64::MAX,
            backoff_factor: 1e300,
            max_backoff_ms: 0,
        };
        let most = std::time::Duration::from_millis(i64::MAX.unsigned_abs());
        for attempt in [2, 3, 100, 1100, u32::MAX] {
            assert_eq!(huge.backoff_before(attempt), most, "attempt {attempt}");
        }
        // 0 * 2^1098 is NaN in floating point: no backoff, not a panic.
        let zero = Retry {
            initial_backoff_ms: 0,
            backoff_factor: 2.0,
            ..huge
        };
        assert_eq!(zero.backoff_before(1100), std::time::Duration::ZERO);
        let capped = Retry {
            initial_backoff_ms: 1,
            backoff_factor: 2.0,
            max_backoff_ms: 60_000,
            ..huge
        };
        assert_eq!(capped.backoff_before(u32::MAX).as_millis(), 60_000);
        for factor in [f64::NAN, f64::INFINITY, -3.0, 0.0] {
            let odd = Retry {
                backoff_factor: factor,
                ..capped
            };
            assert_eq!(odd.backoff_before(5).as_millis(), 1, "factor {factor}");
        }
    }

    #[test]
    fn backoff_grows_and_caps() {
        let r = Retry {
            max_attempts: 5,
            initial_backoff_ms: 100,
            backoff_factor: 2.0,
            max_backoff_ms: 300,
        };
        let ms: Vec<u128> = (1..=5).map(|a| r.backoff_before(a).as_millis()).collect();
        assert_eq!(ms, [0, 100, 200, 300, 300]);
    }
}
