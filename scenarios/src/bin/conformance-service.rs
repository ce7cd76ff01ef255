//! The conformance service on the Rust SDK (`docs/conform.md`): what `triggers-lab conform`
//! judges, and the reference it must score 100 % on.
//!
//! ```sh
//! triggers-lab conform -- cargo run -q -p triggers-scenarios --bin conformance-service
//! ```
//!
//! `CONFORM_BREAK=<check>` makes it get one behaviour wrong, so that the check of that name
//! fails: the kit's own tests flip each in turn. The SDK gets the protocol right by
//! construction: what a service's code decides (its manifest, its actions, its lookup, how it
//! stops) is broken here, and some protocol behaviours through the SDK's
//! `conformance-breaks` hook (`triggers_sdk::runtime::breaks`). The Python service
//! (`examples/conformance-python`) breaks the protocol itself.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use triggers_sdk::runtime::breaks::{self, ProtocolBreak};
use triggers_sdk::runtime::{
    ActionContext, ActionDef, ActionError, DURABLE_TIMER_V1, LookupDef, Retry, RuntimeConfig,
    Service,
};

/// The behaviour to get wrong, from `CONFORM_BREAK`.
fn broken(check: &str) -> bool {
    std::env::var("CONFORM_BREAK").is_ok_and(|b| b == check)
}

async fn echo(
    input: Map<String, Value>,
    _ctx: ActionContext,
) -> Result<Map<String, Value>, ActionError> {
    let mut out = input;
    if broken("echo") {
        out.insert("changed".into(), json!(true));
    }
    Ok(out)
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Flaky {
    failures: u32,
}

async fn flaky(input: Flaky, ctx: ActionContext) -> Result<Value, ActionError> {
    let failing = !(broken("retry") || broken("dlq_action_failed"));
    if failing && ctx.attempt <= input.failures {
        return Err(ActionError::retryable(format!(
            "failing on purpose: attempt {} of the first {}",
            ctx.attempt, input.failures
        )));
    }
    Ok(json!({"attempts": ctx.attempt}))
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Slow {
    ms: u64,
}

async fn slow(input: Slow, _ctx: ActionContext) -> Result<Value, ActionError> {
    if !broken("dlq_action_timeout") {
        tokio::time::sleep(Duration::from_millis(input.ms)).await;
    }
    Ok(json!({"slept": input.ms}))
}

async fn crash(_input: Map<String, Value>, _ctx: ActionContext) -> Result<Value, ActionError> {
    if broken("dlq_action_panicked") {
        return Ok(json!({}));
    }
    panic!("crashing on purpose");
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Shape {
    value: Value,
}

async fn shape(input: Shape, _ctx: ActionContext) -> Result<Value, ActionError> {
    Ok(input.value)
}

async fn directory(params: Value) -> Result<Value, ActionError> {
    let key = params
        .get("key")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Ok(match key {
        "missing" => json!({"found": false}),
        _ if broken("lookup") => json!({"found": true, "value": key}),
        _ => json!({"found": true, "value": format!("value-of-{key}")}),
    })
}

fn retry(
    max_attempts: i64,
    initial_backoff_ms: i64,
    backoff_factor: f64,
    max_backoff_ms: i64,
) -> Retry {
    Retry {
        max_attempts,
        initial_backoff_ms,
        backoff_factor,
        max_backoff_ms,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // What the SDK gets right by construction can be broken only through its hook.
    if let Ok(check) = std::env::var("CONFORM_BREAK")
        && let Some(mistake) = ProtocolBreak::for_check(&check)
    {
        breaks::set(mistake);
    }
    let once = retry(1, 0, 1.0, 0);
    let five = Duration::from_secs(5);
    // Taking any JSON, where the contract says the input is an object, is the broken variant
    // of `dlq_invalid_input`.
    let echo_def = if broken("dlq_invalid_input") {
        ActionDef::dynamic(
            "echo",
            &json!({}),
            &json!({"type": "object"}),
            |v: Value, _ctx| async move { Ok::<_, ActionError>(v) },
        )
    } else {
        ActionDef::new("echo", echo)
    };
    let flaky_retry = if broken("register") {
        retry(4, 20, 2.0, 100)
    } else {
        retry(3, 20, 2.0, 100)
    };
    let builder = Service::builder("conformance", "1.0.0")
        .action(echo_def.timeout(five).retry(once))
        .action(
            ActionDef::new("flaky", flaky)
                .timeout(five)
                .retry(flaky_retry),
        )
        .action(
            ActionDef::new("slow", slow)
                .timeout(Duration::from_millis(300))
                .retry(once),
        )
        .action(ActionDef::new("crash", crash).timeout(five).retry(once))
        .action(ActionDef::new("shape", shape).timeout(five).retry(once))
        .nats_source("inbound", "conformance.inbound")
        .supports_nodes(["condition", "lookup", "mapping"])
        .lookup(
            LookupDef::new("directory", directory)
                .param("key", "string", true)
                .result_field("found", "boolean", true)
                .result_field("value", "string", false),
        )
        .config(RuntimeConfig {
            shutdown_grace: Some(Duration::from_secs(10)),
            ..RuntimeConfig::default()
        });
    let running = builder
        .capability(DURABLE_TIMER_V1)
        .build()?
        .start()
        .await?;
    if broken("shutdown") {
        // No handler: SIGTERM ends the process at once, without the goodbye heartbeat.
        std::future::pending::<()>().await;
    }
    let report = running.run_until_signal().await;
    if !report.drained {
        eprintln!(
            "{} message(s) were still running at shutdown",
            report.abandoned
        );
    }
    Ok(())
}
