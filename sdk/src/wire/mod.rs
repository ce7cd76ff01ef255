//! The wire contract, locked byte for byte to the Go reference SDK: subjects, headers, JSON shapes,
//! the manifest hash, schema normalisation, `result_event` derivation and the Durable Timer private
//! context.
//!
//! Pure functions and types: no I/O, no async runtime. Everything else in triggers-lab calls this
//! module for anything that crosses the wire, so the contract lives in one place. See
//! `docs/wire.md` for the contract in prose, with every decision and why.

pub mod decode;
pub mod durable_timer;
pub mod header;
pub mod idempotency;
pub mod json;
pub mod manifest;
mod manifest_hash;
pub mod result_event;
pub mod schema;
pub mod shapes;
pub mod subject;
pub mod time;

pub use header::{Envelope, Headers, Traceparent};
pub use json::RawJson;
pub use manifest::{Action, InputField, Lookup, Manifest, Retry, ServiceSource};
pub use result_event::{ResultEvent, ResultEventConfig};
pub use shapes::{CompletionEvent, DlqEntry, FlowEnvelope, Heartbeat, RegisterReply};
pub use time::GoTime;
