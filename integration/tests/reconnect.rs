//! A service outlives its server: `triggers-lab up` stopped and started again on the same port
//! is a new nats-server and a new emulator that has never heard of the service. The runtime
//! reconnects by itself, registers again, and works again: the new emulator runs a flow on it.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use triggers_emulator::recorder::RunStatus;
use triggers_emulator::{Backend, EmulatorConfig, Harness, NatsConfig};
use triggers_integration::{config, one_step};
use triggers_sdk::runtime::{ActionContext, ActionDef, ActionError, Service};

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Order {
    order_id: String,
}

async fn charge(order: Order, _ctx: ActionContext) -> Result<Order, ActionError> {
    Ok(order)
}

/// An `up` on `port`: a nats-server there and an emulator on it. The wait is generous: the
/// runtime's reconnect attempts and its registration retries back off.
async fn up(port: u16) -> Harness {
    Harness::start_with(
        NatsConfig {
            backend: Backend::Binary,
            client_port: Some(port),
            ..Default::default()
        },
        EmulatorConfig {
            wait_timeout: Duration::from_secs(60),
            ..Default::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("cannot start nats-server and the emulator on {port}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_service_registers_again_with_the_emulator_of_a_restarted_server() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let a = up(port).await;
    let running = Service::builder("shop", "1.0.0")
        .action(ActionDef::new("charge", charge))
        .nats_source("nats", "shop.inbound")
        .config(config(&a))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    a.wait_for_registration("shop").await.unwrap();
    drop(a);

    let b = up(port).await;
    assert!(b.services().is_empty() || b.services().contains_key("shop"));
    let registered = b.wait_for_registration("shop").await.unwrap();
    assert_eq!(
        registered.manifest.manifest_hash,
        running.manifest().manifest_hash
    );
    // Not only registered: its consumers are back, so it runs flows of the new emulator.
    b.deploy(one_step("order", "shop", "charge")).await.unwrap();
    let run = b
        .trigger("order", &json!({"order_id": "o-1"}))
        .await
        .unwrap();
    let settled = b.wait_run_settled(&run).await.unwrap();
    assert_eq!(
        settled.status,
        RunStatus::Succeeded,
        "{}",
        b.describe_run(&run.0)
    );
    running.shutdown().await;
}
