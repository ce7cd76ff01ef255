//! A registered manifest as the emulator keeps it: its bytes once, and parsed only what the
//! emulator reads.
//!
//! A parsed manifest costs some ten to fifteen times its text: every schema is a tree of
//! `serde_json` maps of small strings. The emulator never reads a schema or a catalog value (it
//! routes, checks releases and judges heartbeats on names, policies, sources, capabilities and
//! hashes), so it keeps the manifest's Go-writer bytes (what `manifest.fetch` answers and the
//! `services` op shows) and an outline: the manifest without its schemas, `result_event`,
//! `action_env` and `compatibility`. [`KeptManifest::full`] parses the whole manifest again where
//! someone needs it. When the service sent exactly those bytes (any SDK that writes as Go does),
//! they are the received payload itself, shared with the registration's record.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use bytes::Bytes;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use triggers_sdk::error::DecodeError;
use triggers_sdk::wire::Manifest;

/// A registered manifest: its bytes and an outline, shared (a clone is a reference count).
///
/// It dereferences to the outline, a [`Manifest`] whose actions have no schemas, no
/// `result_event`, no `action_env` and no `compatibility`; [`KeptManifest::full`] has them.
/// Serialized, it is the whole manifest as the Go writer writes it.
#[derive(Clone)]
pub struct KeptManifest(Arc<Kept>);

struct Kept {
    /// The whole manifest, as [`Manifest::to_json`] writes it (JSON, so it serializes raw).
    text: Bytes,
    /// What the emulator reads of it.
    outline: Manifest,
    /// Its hash as computed (the manifest's own `manifest_hash` field may differ).
    computed_hash: String,
}

impl KeptManifest {
    /// Keeps `manifest`: its bytes and its outline. A manifest the Go writer cannot write (it
    /// came through [`Manifest::from_json`], so it can) is kept as `null`.
    #[must_use]
    pub fn new(manifest: Manifest) -> Self {
        Self::received(manifest, &Bytes::new())
    }

    /// Keeps `manifest`, decoded from `payload`: when the payload is what the Go writer writes,
    /// it is kept (a reference count, shared with whoever else holds it), not a copy.
    #[must_use]
    pub fn received(manifest: Manifest, payload: &Bytes) -> Self {
        let text = match manifest.to_json() {
            Ok(go) if go == payload.as_ref() => payload.clone(),
            Ok(go) => Bytes::from(go),
            Err(_) => Bytes::from_static(b"null"),
        };
        let computed_hash = manifest.compute_hash().unwrap_or_default();
        let mut outline = manifest;
        for a in &mut outline.actions {
            a.input_schema = None;
            a.result_schema = None;
            a.result_event = None;
            a.action_env = None;
            a.compatibility = None;
        }
        outline.actions.shrink_to_fit();
        KeptManifest(Arc::new(Kept {
            text,
            outline,
            computed_hash,
        }))
    }

    /// The whole manifest, as the Go writer writes it.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.0.text
    }

    /// The whole manifest, schemas and catalog values included, parsed from its bytes.
    ///
    /// # Errors
    /// Never for a manifest the emulator accepted (its bytes are the Go writer's); the decoder's
    /// error otherwise.
    pub fn full(&self) -> Result<Manifest, DecodeError> {
        Manifest::from_json(self.bytes())
    }

    /// The manifest's hash as computed from it (see [`Manifest::compute_hash`]).
    #[must_use]
    pub fn computed_hash(&self) -> &str {
        &self.0.computed_hash
    }

    /// How many holders share this one copy (the service table, the checker's registry, and
    /// each clone handed out).
    #[must_use]
    pub fn holders(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}

impl From<Manifest> for KeptManifest {
    fn from(manifest: Manifest) -> Self {
        KeptManifest::new(manifest)
    }
}

impl Deref for KeptManifest {
    type Target = Manifest;

    fn deref(&self) -> &Manifest {
        &self.0.outline
    }
}

impl fmt::Debug for KeptManifest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeptManifest")
            .field("service", &self.0.outline.service)
            .field("manifest_hash", &self.0.outline.manifest_hash)
            .field("actions", &self.0.outline.actions.len())
            .field("bytes", &self.bytes().len())
            .finish()
    }
}

impl Serialize for KeptManifest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Borrowed, not copied: the Go writer's bytes are one JSON value.
        let raw: &RawValue = serde_json::from_slice(&self.0.text).map_err(S::Error::custom)?;
        raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for KeptManifest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Manifest::deserialize(deserializer).map(KeptManifest::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        let m: Manifest = serde_json::from_value(serde_json::json!({
            "protocol_version": "1.0.0", "service": "svc", "service_version": "1.0.0",
            "actions": [{"name": "act",
                "input_schema": {"type": "object", "properties": {"a": {"type": "string"}}},
                "result_schema": {"type": "object"}, "timeout_ms": 1000,
                "retry": {"max_attempts": 3, "initial_backoff_ms": 10, "backoff_factor": 2.0, "max_backoff_ms": 100},
                "dlq": "triggers.v2.dlq.svc.act",
                "result_event": {"fields": [{"name": "ok", "type": "boolean"}]}}],
            "service_sources": [], "supports_nodes": [],
        }))
        .unwrap();
        let mut m = m;
        m.seal().unwrap();
        m
    }

    #[test]
    fn keeps_the_go_writers_bytes_and_an_outline_without_schemas() {
        let m = manifest();
        let kept = KeptManifest::new(m.clone());
        assert_eq!(kept.bytes(), m.to_json().unwrap().as_slice());
        assert_eq!(kept.full().unwrap(), m);
        assert_eq!(kept.computed_hash(), m.compute_hash().unwrap());
        let a = &kept.actions[0];
        assert!(a.input_schema.is_none() && a.result_schema.is_none() && a.result_event.is_none());
        assert_eq!((a.name.as_str(), a.retry), ("act", m.actions[0].retry));
    }

    #[test]
    fn keeps_the_received_payload_when_it_is_the_go_writers() {
        let m = manifest();
        let payload = Bytes::from(m.to_json().unwrap());
        let kept = KeptManifest::received(m.clone(), &payload);
        assert_eq!(
            kept.bytes().as_ptr(),
            payload.as_ptr(),
            "a copy of the payload"
        );
        // Another key order: the Go writer's bytes are kept instead.
        let value: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        let other = Bytes::from(serde_json::to_vec_pretty(&value).unwrap());
        let kept = KeptManifest::received(m.clone(), &other);
        assert_eq!(kept.bytes(), payload.as_ref());
    }

    #[test]
    fn serializes_as_the_whole_manifest_and_reads_back() {
        let m = manifest();
        let kept = KeptManifest::new(m.clone());
        let text = serde_json::to_vec(&kept).unwrap();
        assert_eq!(text, m.to_json().unwrap());
        // `to_value` (the control API's path) sees the whole manifest too.
        let value = serde_json::to_value(&kept).unwrap();
        let whole: serde_json::Value = serde_json::from_slice(&m.to_json().unwrap()).unwrap();
        assert_eq!(value, whole);
        let back: KeptManifest = serde_json::from_slice(&text).unwrap();
        assert_eq!(back.full().unwrap(), m);
    }
}
