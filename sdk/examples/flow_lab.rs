//! The flow-lab dummy service: three chained actions where each downstream input binds to the
//! upstream result through the auto-derived `result_event` (the way the studio wires them), plus
//! an action that fails on demand, for trying retries and the DLQ.
//!
//! ```sh
//! triggers-lab up                                    # in one terminal
//! cargo run -p triggers-sdk --example flow_lab       # in another (TRIGGERS_NATS_URL from `up`)
//! triggers-lab deploy sdk/examples/flows/flow_lab.yaml
//! triggers-lab trigger flow-lab '{"customer": "ada", "items": 3}' --wait
//! triggers-lab trigger flow-lab '{"customer": "fail", "items": 1}' --wait   # retries, then DLQ
//! ```
//!
//! `-- --print-manifest` prints the manifest it registers: each action's `result_event` lists the
//! fields the mappings in `flows/flow_lab.yaml` bind to.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use triggers_sdk::runtime::{ActionContext, ActionDef, ActionError, Retry, Service};

/// An order to place.
#[derive(Deserialize, JsonSchema)]
struct PlaceOrder {
    customer: String,
    /// Any integer, as the manifest says (`{"type": "integer"}`: the contract's schemas carry no
    /// bounds): none or fewer is an empty order. `scenarios/flow-lab/fuzz.yaml` holds it to that.
    items: i64,
}

/// The order placed.
#[derive(Serialize, JsonSchema)]
struct OrderPlaced {
    order_id: String,
    customer: String,
    total_cents: i64,
}

/// Stock to reserve for an order.
#[derive(Deserialize, JsonSchema)]
struct ReserveStock {
    order_id: String,
    total_cents: i64,
}

/// The reservation.
#[derive(Serialize, JsonSchema)]
struct StockReserved {
    order_id: String,
    reservation_id: String,
}

/// A confirmation to send.
#[derive(Deserialize, JsonSchema)]
struct Notify {
    order_id: String,
    reservation_id: String,
}

/// The confirmation sent.
#[derive(Serialize, JsonSchema)]
struct Notified {
    delivered: bool,
}

async fn place_order(input: PlaceOrder, _ctx: ActionContext) -> Result<OrderPlaced, ActionError> {
    let items = input.items.max(0);
    Ok(OrderPlaced {
        order_id: format!("ord-{}-{items}", input.customer),
        customer: input.customer,
        total_cents: items.saturating_mul(1_250),
    })
}

async fn reserve_stock(
    input: ReserveStock,
    ctx: ActionContext,
) -> Result<StockReserved, ActionError> {
    // "fail" customers make this action fail every attempt: retries, then the DLQ.
    if input.order_id.starts_with("ord-fail-") {
        return Err(ActionError::retryable(format!(
            "the warehouse is unreachable (attempt {} of {})",
            ctx.attempt, ctx.max_attempts
        )));
    }
    Ok(StockReserved {
        reservation_id: format!("res-{}-{}", input.order_id, input.total_cents),
        order_id: input.order_id,
    })
}

async fn notify_customer(input: Notify, _ctx: ActionContext) -> Result<Notified, ActionError> {
    tracing::info!(
        "order {} confirmed ({})",
        input.order_id,
        input.reservation_id
    );
    Ok(Notified { delivered: true })
}

fn service() -> Result<Service, Box<dyn std::error::Error>> {
    Ok(Service::builder("flowlab", "1.0.0")
        .action(ActionDef::new("place_order", place_order).display_name("Place order"))
        .action(
            ActionDef::new("reserve_stock", reserve_stock)
                .display_name("Reserve stock")
                .retry(Retry {
                    max_attempts: 3,
                    initial_backoff_ms: 50,
                    backoff_factor: 2.0,
                    max_backoff_ms: 500,
                }),
        )
        .action(ActionDef::new("notify_customer", notify_customer).display_name("Notify customer"))
        .nats_source("nats", "flowlab.inbound")
        .catalog(
            "Flow lab",
            "A dummy service for trying flows end to end",
            "triggers-lab",
        )
        .build()?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let service = service()?;
    if std::env::args().any(|a| a == "--print-manifest") {
        println!("{}", String::from_utf8(service.manifest().to_json()?)?);
        return Ok(());
    }
    let running = service.start().await?;
    println!("flowlab is running; Ctrl-C stops it");
    let report = running.run_until_signal().await;
    println!("stopped ({report:?})");
    Ok(())
}
