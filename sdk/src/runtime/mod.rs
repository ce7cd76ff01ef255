//! The service runtime (feature `runtime`, on by default): define a service with typed actions,
//! start it against the orchestrator (or the emulator), and it registers, heartbeats, consumes
//! its inbound stream, runs its nodes, hands payloads on, and reports every outcome.
//!
//! ```no_run
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use triggers_sdk::runtime::{ActionContext, ActionDef, ActionError, Service};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct SendInput {
//!     tenant_id: String,
//! }
//!
//! #[derive(Serialize, JsonSchema)]
//! struct SendResult {
//!     delivered: bool,
//! }
//!
//! async fn send(input: SendInput, _ctx: ActionContext) -> Result<SendResult, ActionError> {
//!     Ok(SendResult { delivered: !input.tenant_id.is_empty() })
//! }
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let service = Service::builder("notifications", "1.0.0")
//!     .action(ActionDef::new("send_inapp", send))
//!     .nats_source("nats", "notifications.inbound")
//!     .build()?;
//! let running = service.start().await?; // TRIGGERS_NATS_URL, or RuntimeConfig
//! running.run_until_signal().await;
//! # Ok(())
//! # }
//! ```
//!
//! See `docs/sdk.md` for the guide.

mod action;
mod bounded;
#[cfg(feature = "conformance-breaks")]
pub mod breaks;
#[cfg(not(feature = "conformance-breaks"))]
mod breaks;
mod builder;
mod config;
mod confirm;
mod dispatch;
mod ledger;
mod limits;
mod lookup;
mod outcome;
mod output;
mod service;
mod settle;

pub use action::{ActionContext, ActionDef, ActionError, DEFAULT_RETRY, DEFAULT_TIMEOUT, Handler};
pub use builder::{Service, ServiceBuilder};
pub use config::{ENV_VARS, MAX_DELIVER, RuntimeConfig};
pub use ledger::{
    BUCKET as DLQ_LEDGER_BUCKET, MAX_AGE as DLQ_LEDGER_MAX_AGE, MAX_BYTES as DLQ_LEDGER_MAX_BYTES,
};
pub use limits::{
    MAX_ATTEMPTS, MAX_CONCURRENCY, MAX_DURATION, MAX_DURATION_MS, MAX_SUBSCRIPTION_CAPACITY,
    check_action,
};
pub use lookup::LookupDef;
pub use service::{RunningService, RuntimeStats, ShutdownReport};

pub use crate::wire::manifest::DURABLE_TIMER_V1;
pub use crate::wire::{ResultEvent, ResultEventConfig, Retry};
