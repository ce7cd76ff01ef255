//! The triggers orchestrator emulator: it runs inside a test process (or as `triggers-lab up`) in
//! place of the real orchestrator, against a real nats-server.
//!
//! This crate provides, so far, [`nats`]: a nats-server with JetStream from Docker, a local binary
//! or an external URL, behind one handle that stops it on drop.

mod error;
pub mod nats;

pub use error::NatsError;
pub use nats::{Backend, ChosenBackend, NatsConfig, NatsServer, SkippedBackend};
