//! Shared fixtures for the end-to-end tests and benchmarks: the SDK runtime against the emulator,
//! both on a real nats-server. The tests themselves are in `tests/`.

use std::time::Duration;

pub mod bench;
pub mod fuzz;
pub mod shapes;
pub mod soak;

use natsbox::Isolation;
use serde_json::{Value, json};
use triggers_emulator::{Backend, EmulatorConfig, Harness, NatsConfig};
use triggers_sdk::flow::Flow;
use triggers_sdk::runtime::RuntimeConfig;

/// A harness on an account of the process's shared nats-server (binary backend), waits bounded at 20 s (they return as soon as
/// what they wait for arrives; the bound only matters on a loaded CI machine).
///
/// # Panics
/// When no nats-server can be started (the message says how to get one).
pub async fn lab() -> Harness {
    lab_with(EmulatorConfig {
        wait_timeout: Duration::from_secs(20),
        ..Default::default()
    })
    .await
}

/// As [`lab`], with the emulator configured exactly as given.
///
/// # Panics
/// As [`lab`].
pub async fn lab_with(config: EmulatorConfig) -> Harness {
    start(Isolation::Auto, config).await
}

/// As [`lab`], on a nats-server of its own (not an account of the shared one): for a test that
/// restarts or kills the server.
///
/// # Panics
/// As [`lab`].
pub async fn own_lab() -> Harness {
    own_lab_with(EmulatorConfig {
        wait_timeout: Duration::from_secs(20),
        ..Default::default()
    })
    .await
}

/// As [`own_lab`], with the emulator configured exactly as given.
///
/// # Panics
/// As [`lab`].
pub async fn own_lab_with(config: EmulatorConfig) -> Harness {
    start(Isolation::Server, config).await
}

async fn start(isolation: Isolation, config: EmulatorConfig) -> Harness {
    Harness::start_with(
        NatsConfig {
            backend: Backend::Binary,
            isolation,
            ..Default::default()
        },
        config,
    )
    .await
    .unwrap_or_else(|e| panic!("cannot start the harness: {e}"))
}

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
