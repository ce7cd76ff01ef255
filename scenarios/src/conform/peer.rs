//! The peer service the hop checks send work to and take work from: `peer`, on the Rust SDK,
//! with one action, `echo`, on `peer.inbound`.

use std::time::Duration;

use serde_json::{Map, Value};
use triggers_sdk::runtime::{
    ActionContext, ActionDef, ActionError, RunningService, RuntimeConfig, Service,
};

/// The peer's name.
pub(crate) const PEER: &str = "peer";

async fn echo(
    input: Map<String, Value>,
    _ctx: ActionContext,
) -> Result<Map<String, Value>, ActionError> {
    Ok(input)
}

/// Starts `peer` against `url` (registered when this returns).
pub(crate) async fn start(url: &str) -> Result<RunningService, String> {
    let service = Service::builder(PEER, "1.0.0")
        .action(
            ActionDef::new("echo", echo)
                .timeout(Duration::from_secs(5))
                .max_attempts(1),
        )
        .nats_source("inbound", "peer.inbound")
        .capability("durable_timer.v1")
        .config(RuntimeConfig {
            nats_url: Some(url.to_owned()),
            shutdown_grace: Some(Duration::from_secs(2)),
            ..RuntimeConfig::default()
        })
        .build()
        .map_err(|e| e.to_string())?;
    service.start().await.map_err(|e| e.to_string())
}
