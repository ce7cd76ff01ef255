//! The smallest service: one action, one NATS source.
//!
//! ```sh
//! triggers-lab up                                   # in one terminal
//! cargo run -p triggers-sdk --example minimal       # in another (TRIGGERS_NATS_URL from `up`)
//! triggers-lab deploy sdk/examples/flows/minimal.yaml
//! triggers-lab trigger hello '{"name": "Ada"}' --wait
//! ```
//!
//! `cargo run -p triggers-sdk --example minimal -- --print-manifest` prints the manifest it
//! registers, hash included.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use triggers_sdk::runtime::{ActionContext, ActionDef, ActionError, Service};

/// Who to greet.
#[derive(Deserialize, JsonSchema)]
struct GreetInput {
    name: String,
}

/// The greeting.
#[derive(Serialize, JsonSchema)]
struct Greeting {
    greeting: String,
}

async fn greet(input: GreetInput, ctx: ActionContext) -> Result<Greeting, ActionError> {
    if input.name.trim().is_empty() {
        return Err(ActionError::permanent("name is empty"));
    }
    tracing::info!(run = %ctx.envelope.flow_run_id, "greeting {}", input.name);
    Ok(Greeting {
        greeting: format!("Hello, {}!", input.name),
    })
}

fn service() -> Result<Service, Box<dyn std::error::Error>> {
    Ok(Service::builder("hello", "1.0.0")
        .action(ActionDef::new("greet", greet).description("Greets someone by name"))
        .nats_source("nats", "hello.inbound")
        .build()?)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Errors for people: their text (which says what to do), not their Debug form.
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let service = service()?;
    if std::env::args().any(|a| a == "--print-manifest") {
        println!("{}", String::from_utf8(service.manifest().to_json()?)?);
        return Ok(());
    }
    let running = service.start().await?;
    println!("hello is running; Ctrl-C stops it");
    let report = running.run_until_signal().await;
    println!("stopped: {report}");
    Ok(())
}
