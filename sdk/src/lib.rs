//! The Rust SDK for services on the triggers platform, byte-compatible with the Go reference SDK.
//!
//! - [`wire`]: the locked wire contract (pure, no I/O; usable with default features off).
//! - [`flow`]: the flow model and the evaluation of mapping and condition nodes (pure).
//! - [`runtime`] (feature `runtime`, default): the service runtime.
//! - `transport` (feature `runtime`): headers between the wire module and async-nats.

pub mod error;
pub mod flow;
#[cfg(feature = "runtime")]
pub mod runtime;
#[cfg(feature = "runtime")]
pub mod transport;
pub mod wire;
