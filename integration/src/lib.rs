//! Shared fixtures for the end-to-end tests and benchmarks: the SDK runtime against the emulator,
//! both on a real nats-server. The tests themselves are in `tests/`.

use std::time::Duration;

pub mod bench;
pub mod fuzz;
pub mod shapes;
pub mod soak;

use serde_json::{Value, json};
use triggers_emulator::Harness;
use triggers_sdk::flow::Flow;
use triggers_sdk::runtime::RuntimeConfig;

/// The harness starts every test shares (the workspace's test kit), re-exported for the tests and
/// benches here.
pub use triggers_testkit::{lab, lab_with, own_lab, own_lab_with};

/// Runtime settings for a service under test: the harness's URL, fast heartbeats.
#[must_use]
pub fn config(lab: &Harness) -> RuntimeConfig {
    logging();
    RuntimeConfig {
        nats_url: Some(lab.url().to_owned()),
        heartbeat_interval: Some(Duration::from_millis(200)),
        shutdown_grace: Some(Duration::from_secs(5)),
        ..Default::default()
    }
}

/// What the runtime and the emulator log, on the test's stderr, when `RUST_LOG` asks for it
/// (`RUST_LOG=triggers_sdk=debug cargo test ...`); once per test binary, quiet otherwise.
pub fn logging() {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    }
}

/// A flow from its JSON.
///
/// # Panics
/// When the JSON is not a flow (a mistake in the test).
#[must_use]
pub fn flow(v: Value) -> Flow {
    serde_json::from_value(v).expect("a flow")
}

/// `in -> step`: one service-in and one action of the same service.
#[must_use]
pub fn one_step(id: &str, service: &str, action: &str) -> Flow {
    flow(json!({"id": id, "nodes": [
        {"id": "in", "type": "service-in", "service": service},
        {"id": "step", "type": "action", "service": service, "action": action}
    ], "edges": [{"id": "e1", "from": "in", "to": "step"}]}))
}

/// Publishes exact bytes and headers through JetStream (waiting for the ack), as a peer would
/// put a hand-made delivery onto a service's inbound subject.
///
/// # Panics
/// When the publish fails (the test cannot go on).
pub async fn publish_js(
    url: &str,
    subject: &str,
    headers: &triggers_sdk::wire::Headers,
    body: &[u8],
) {
    let client = triggers_sdk::transport::connect(url)
        .await
        .expect("a connection");
    async_nats::jetstream::new(client)
        .publish_with_headers(
            subject.to_owned(),
            triggers_sdk::transport::to_nats(headers).expect("headers NATS can carry"),
            body.to_vec().into(),
        )
        .await
        .expect("published")
        .await
        .expect("acked");
}

/// `docs/sdk.md`, so its Rust blocks are compiled as doc tests.
#[doc = include_str!("../../docs/sdk.md")]
#[cfg(doctest)]
pub struct SdkGuide;

/// The end of a fuzz or soak report: what made it partial, the first `shown` problems (and how
/// many more), and the verdict.
pub(crate) fn write_verdict(
    f: &mut std::fmt::Formatter<'_>,
    partial: &[String],
    problems: &[String],
    shown: usize,
    passed: bool,
) -> std::fmt::Result {
    for p in partial {
        writeln!(f, "PARTIAL: {p}")?;
    }
    for p in problems.iter().take(shown) {
        writeln!(f, "problem: {p}")?;
    }
    if problems.len() > shown {
        writeln!(f, "... and {} more problems", problems.len() - shown)?;
    }
    writeln!(f, "verdict: {}", if passed { "PASS" } else { "FAIL" })
}
