//! Raw async-nats clients playing an SDK against the emulator: manifests, registration,
//! deliveries pulled as a durable consumer would, completion events, and waits on what the
//! emulator records. What the emulator's own tests and the end-to-end tests share.

use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;
use serde_json::{Value, json};
use triggers_emulator::Harness;
use triggers_sdk::flow::Flow;
use triggers_sdk::transport;
use triggers_sdk::wire::shapes::status;
use triggers_sdk::wire::{
    CompletionEvent, Envelope, GoTime, Headers, Manifest, RegisterReply, subject,
};

/// A client of the harness's account, as a service would connect.
///
/// # Panics
/// When it cannot connect.
pub async fn connect(lab: &Harness) -> async_nats::Client {
    triggers_sdk::transport::connect(lab.url()).await.unwrap()
}

/// A sealed manifest: one NATS source `<service>.inbound`, the given actions (flat schemas).
pub fn manifest(service: &str, actions: &[&str], capabilities: &[&str]) -> Manifest {
    let mut m: Manifest = serde_json::from_value(json!({
        "protocol_version": "1.0.0",
        "service": service,
        "service_version": "1.0.0",
        "actions": actions.iter().map(|a| json!({
            "name": a,
            "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "result_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
            "timeout_ms": 1000,
            "retry": {"max_attempts": 2, "initial_backoff_ms": 10, "backoff_factor": 2.0, "max_backoff_ms": 100},
            "dlq": format!("triggers.v2.dlq.{service}.{a}"),
        })).collect::<Vec<_>>(),
        "service_sources": [{"name": "nats", "transport": "nats", "default": format!("{service}.inbound")}],
        "supports_nodes": ["condition", "lookup", "mapping"],
        "runtime_capabilities": capabilities,
    }))
    .unwrap();
    m.seal().unwrap();
    m
}

/// Sends `bytes` to `manifest.register` and decodes the emulator's reply.
pub async fn register_bytes(client: &async_nats::Client, bytes: Vec<u8>) -> RegisterReply {
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        client.request(subject::MANIFEST_REGISTER, bytes.into()),
    )
    .await
    .expect("the emulator answers a registration within 10 s")
    .expect("a reply");
    RegisterReply::from_json(&reply.payload).expect("a RegisterReply")
}

/// Registers `m` as a service would.
pub async fn register(client: &async_nats::Client, m: &Manifest) -> RegisterReply {
    register_bytes(client, m.to_json().unwrap()).await
}

/// A flow from its JSON.
pub fn flow(v: Value) -> Flow {
    serde_json::from_value(v).unwrap()
}

/// `in` -> `action` on one service: flow `id`, node `step`.
pub fn one_step_flow(id: &str, service: &str, action: &str) -> Flow {
    flow(json!({"id": id, "nodes": [
        {"id": "in", "type": "service-in", "service": service},
        {"id": "step", "type": "action", "service": service, "action": action}
    ], "edges": [{"id": "e1", "from": "in", "to": "step"}]}))
}

/// A delivery taken from a service's inbound stream.
pub struct Delivery {
    /// The subject it was stored under.
    pub subject: String,
    /// Its headers (the envelope).
    pub headers: Headers,
    /// Its body.
    pub payload: Vec<u8>,
}

/// Pulls the next message from the service's inbound stream (as an SDK's durable consumer
/// would), acks it and returns it.
pub async fn next_delivery(client: &async_nats::Client, service: &str) -> Delivery {
    let js = jetstream::new(client.clone());
    let stream = js
        .get_stream(subject::stream_name(service, None).unwrap())
        .await
        .expect("the emulator created the inbound stream at registration");
    let consumer: jetstream::consumer::PullConsumer = stream
        .get_or_create_consumer(
            "test",
            jetstream::consumer::pull::Config {
                durable_name: Some("test".into()),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(15), messages.next())
        .await
        .expect("a delivery within 15 s")
        .unwrap()
        .unwrap();
    msg.ack().await.unwrap();
    Delivery {
        subject: msg.subject.to_string(),
        headers: transport::from_nats(msg.headers.as_ref()),
        payload: msg.payload.to_vec(),
    }
}

/// A Go-exact completion event for `node` of the run in `envelope`, published as an SDK would.
pub async fn complete(
    client: &async_nats::Client,
    envelope: &Envelope,
    service: &str,
    node: &str,
    node_type: &str,
    status: &str,
    error: &str,
) {
    let now = GoTime::now();
    let event = CompletionEvent {
        flow_run_id: envelope.flow_run_id.clone(),
        flow_id: envelope.flow_id.clone(),
        flow_version: envelope.flow_version,
        node_id: node.into(),
        node_type: node_type.into(),
        service: service.into(),
        started_at: now,
        finished_at: now,
        status: status.into(),
        error: error.into(),
        trace_id: envelope.trace_id.clone(),
    };
    client
        .publish(
            subject::flow_events(&envelope.flow_id).unwrap(),
            event.to_json().unwrap().into(),
        )
        .await
        .unwrap();
    client.flush().await.unwrap();
}

/// A `succeeded` completion event for action `node`.
pub async fn succeed(client: &async_nats::Client, envelope: &Envelope, service: &str, node: &str) {
    complete(
        client,
        envelope,
        service,
        node,
        "action",
        status::SUCCEEDED,
        "",
    )
    .await;
}

/// Waits, without sleeping, until `check` finds something: it is re-run whenever the emulator
/// records anything. Panics after 10 s, saying what it waited for.
pub async fn eventually<T>(lab: &Harness, what: &str, check: impl Fn(&Harness) -> Option<T>) -> T {
    let mut records = lab.subscribe_records();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = check(lab) {
            return found;
        }
        match tokio::time::timeout_at(deadline, records.recv()).await {
            Ok(Ok(_)) | Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) | Err(_) => {
                return check(lab).unwrap_or_else(|| panic!("waited 10 s for {what}, in vain"));
            }
        }
    }
}

/// The rules of the violations recorded for the message `payload` on `subject`, once there is
/// at least one (the checker records all of a message's violations at once).
pub async fn violations_of(
    lab: &Harness,
    subject: &str,
    payload: &[u8],
) -> std::collections::BTreeSet<&'static str> {
    eventually(
        lab,
        &format!(
            "a violation for {:?} on {subject}",
            String::from_utf8_lossy(payload)
        ),
        |lab| {
            let rules: std::collections::BTreeSet<&'static str> = lab
                .violations()
                .into_iter()
                .filter(|v| v.subject == subject && v.payload == payload)
                .map(|v| v.rule)
                .collect();
            (!rules.is_empty()).then_some(rules)
        },
    )
    .await
}

/// Calls the control API by hand: `triggerslab.v1.control.<op>` with raw bytes; the reply as
/// JSON.
pub async fn control(client: &async_nats::Client, op: &str, body: &[u8]) -> Value {
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        client.request(
            format!("{}.{op}", triggers_emulator::control::PREFIX),
            body.to_vec().into(),
        ),
    )
    .await
    .unwrap_or_else(|_| panic!("the control API answers {op} within 10 s"))
    .unwrap_or_else(|e| panic!("control {op}: {e}"));
    serde_json::from_slice(&reply.payload).unwrap_or_else(|e| {
        panic!(
            "control {op} replied {:?}, not JSON: {e}",
            String::from_utf8_lossy(&reply.payload)
        )
    })
}

/// Two services and one flow across them, a world the rule tests judge messages in: `shop`
/// (`in` -> `charge`), then `mail` (`in2`, a service-in reached by a hop from `charge`, ->
/// `send`), flow `order`; both registered by the returned client.
///
/// # Panics
/// When the harness cannot start or the flow is refused.
pub async fn shop_then_mail() -> (Harness, async_nats::Client) {
    let lab = crate::lab().await;
    let client = connect(&lab).await;
    register(&client, &manifest("shop", &["charge"], &[])).await;
    register(&client, &manifest("mail", &["send"], &[])).await;
    lab.deploy(flow(json!({"id": "order", "nodes": [
        {"id": "in", "type": "service-in", "service": "shop"},
        {"id": "charge", "type": "action", "service": "shop", "action": "charge"},
        {"id": "in2", "type": "service-in", "service": "mail"},
        {"id": "send", "type": "action", "service": "mail", "action": "send"}
    ], "edges": [
        {"id": "e1", "from": "in", "to": "charge"}, {"id": "e2", "from": "charge", "to": "in2"},
        {"id": "e3", "from": "in2", "to": "send"}
    ]})))
    .await
    .unwrap();
    (lab, client)
}
