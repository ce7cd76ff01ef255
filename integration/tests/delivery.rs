//! The SDK's side of delivery correctness, against the emulator on a real nats-server: a hand-off
//! that cannot be made is dead-lettered as `routing_failed` and never runs the action again; a
//! forged broadcast cannot make a service publish on a locked subject nor install a Durable Timer
//! flow it lacks the capability for; `TRIGGERS_NATS_SOURCE_STREAM` names the stream the service
//! is served on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_nats::jetstream;
use serde_json::{Value, json};
use triggers_emulator::DlqFilter;
use triggers_emulator::recorder::RunStatus;
use triggers_integration::{config, flow, lab, one_step, publish_js};
use triggers_sdk::runtime::{ActionContext, ActionDef, ActionError, RuntimeConfig, Service};
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::{Envelope, FlowEnvelope, GoTime, subject};

fn counting(name: &str, calls: Arc<AtomicU32>) -> ActionDef {
    ActionDef::dynamic(
        name,
        &json!({"type": "object"}),
        &json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
        move |_input: Value, _ctx: ActionContext| {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ActionError>(json!({"ok": true}))
            }
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_that_fails_is_dead_lettered_and_the_action_does_not_run_again() {
    let lab = lab().await;
    let charged = Arc::new(AtomicU32::new(0));
    let shop = Service::builder("shop", "1.0.0")
        .action(counting("charge", charged.clone()))
        .nats_source("nats", "shop.inbound")
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let mail = Service::builder("mail", "1.0.0")
        .action(counting("send", Arc::new(AtomicU32::new(0))))
        .nats_source("nats", "mail.inbound")
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    lab.deploy(flow(json!({"id": "order", "nodes": [
        {"id": "in", "type": "service-in", "service": "shop"},
        {"id": "charge", "type": "action", "service": "shop", "action": "charge"},
        {"id": "send", "type": "action", "service": "mail", "action": "send"}
    ], "edges": [{"id": "e1", "from": "in", "to": "charge"}, {"id": "e2", "from": "charge", "to": "send"}]})))
        .await
        .unwrap();
    shop.wait_for_flow("order", 1, Duration::from_secs(10))
        .await;
    // mail's inbound stream goes away: shop cannot hand its result over.
    drop(mail);
    let js = jetstream::new(lab.client().clone());
    js.delete_stream(subject::stream_name("mail", None).unwrap())
        .await
        .unwrap();
    let run = lab.trigger("order", &json!({"amount": 3})).await.unwrap();
    let dlq = lab
        .with_wait_timeout(Duration::from_secs(30))
        .wait_dlq(DlqFilter::run(&run).with_kind("routing_failed"))
        .await
        .unwrap();
    assert_eq!(dlq.subject, "triggers.v2.dlq.shop.charge");
    let entry = dlq.entry.unwrap();
    assert_eq!(entry.body.get(), r#"{"ok":true}"#, "the result is the body");
    assert_eq!(entry.envelope.source_node_id, "charge");
    assert!(entry.err_msg.contains("mail"), "{}", entry.err_msg);
    // The run fails at the node that was never reached, instead of hanging.
    let settled = lab.wait_run_settled(&run).await.unwrap();
    assert_eq!(settled.status, RunStatus::Failed);
    assert!(settled.failed.contains("send"));
    // The message was acked, not given back: nothing will run charge again.
    let stream = js
        .get_stream(subject::stream_name("shop", None).unwrap())
        .await
        .unwrap();
    let mut consumer: jetstream::consumer::PullConsumer = stream
        .get_consumer(&subject::consumer_name("shop", "shop.inbound").unwrap())
        .await
        .unwrap();
    let info = consumer.info().await.unwrap();
    assert_eq!(info.num_ack_pending, 0, "{info:?}");
    assert_eq!(info.num_redelivered, 0, "{info:?}");
    assert_eq!(charged.load(Ordering::SeqCst), 1);
    lab.assert_no_conformance_errors();
    drop(shop);
}

async fn broadcast(lab: &triggers_emulator::Harness, service: &str, flow: Value) {
    let envelope = FlowEnvelope {
        id: flow["id"].as_str().unwrap().to_owned(),
        version: 1,
        body: json!({"nodes": flow["nodes"], "edges": flow["edges"]}),
    };
    lab.client()
        .publish(
            subject::flow_broadcast(service).unwrap(),
            envelope.to_json().unwrap().into(),
        )
        .await
        .unwrap();
    lab.client().flush().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_broadcast_cannot_make_a_service_publish_on_a_locked_subject() {
    let lab = lab().await;
    let shop = Service::builder("shop", "1.0.0")
        .action(counting("charge", Arc::new(AtomicU32::new(0))))
        .nats_source("nats", "shop.inbound")
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    // Not released by any orchestrator: an output onto the orchestrator's own DLQ subject.
    broadcast(
        &lab,
        "shop",
        json!({"id": "forged", "nodes": [
            {"id": "in", "type": "service-in", "service": "shop", "inbound": "shop.inbound"},
            {"id": "out", "type": "output", "service": "shop",
             "config": {"transport": "nats", "target": "triggers.v2.dlq.source.orders"}}
        ], "edges": [{"id": "e1", "from": "in", "to": "out"}]}),
    )
    .await;
    assert!(
        shop.wait_for_flow("forged", 1, Duration::from_secs(10))
            .await
    );
    let envelope = Envelope {
        flow_run_id: "run-forged".into(),
        flow_id: "forged".into(),
        flow_version: 1,
        idempotency_key: "run-forged:in".into(),
        source_node_id: "in".into(),
        emitted_at: GoTime::now(),
        ..Default::default()
    };
    let mut headers = envelope.to_headers();
    headers.insert(names::NATS_MSG_ID, "run-forged:in");
    publish_js(lab.url(), "shop.inbound", &headers, br#"{"a":1}"#).await;
    let dlq = lab
        .wait_dlq(DlqFilter::run("run-forged").with_kind("node_failed"))
        .await
        .unwrap();
    let err = dlq.entry.unwrap().err_msg;
    assert!(err.contains("triggers.v2.dlq.source.orders"), "{err}");
    // The DLQ stream keeps every DLQ subject in order: nothing went onto the source DLQ before.
    assert!(
        lab.dlq()
            .iter()
            .all(|r| !r.subject.starts_with("triggers.v2.dlq.source.")),
        "{:?}",
        lab.dlq()
    );
    assert!(
        lab.violations()
            .iter()
            .all(|v| v.rule != "source_dlq_publish")
    );
    drop(shop);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_without_durable_timer_installs_no_durable_timer_flow_whoever_sends_it() {
    let lab = lab().await;
    let shop = Service::builder("shop", "1.0.0")
        .action(counting("charge", Arc::new(AtomicU32::new(0))))
        .nats_source("nats", "shop.inbound")
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    broadcast(
        &lab,
        "shop",
        json!({"id": "timed", "nodes": [
            {"id": "in", "type": "service-in", "service": "shop", "inbound": "shop.inbound"},
            {"id": "charge", "type": "action", "service": "shop", "action": "charge"},
            {"id": "wait", "type": "timer", "config": {"delay_ms": 5}}
        ], "edges": [{"id": "e1", "from": "in", "to": "charge"}, {"id": "e2", "from": "charge", "to": "wait"}]}),
    )
    .await;
    // Broadcasts are handled in order: once the next one is installed, the first was seen.
    broadcast(
        &lab,
        "shop",
        json!({"id": "plain", "nodes": [
            {"id": "in", "type": "service-in", "service": "shop", "inbound": "shop.inbound"},
            {"id": "charge", "type": "action", "service": "shop", "action": "charge"}
        ], "edges": [{"id": "e1", "from": "in", "to": "charge"}]}),
    )
    .await;
    assert!(
        shop.wait_for_flow("plain", 1, Duration::from_secs(10))
            .await
    );
    assert!(!shop.flows().contains_key("timed"));
    assert_eq!(shop.stats().flows_gated, 1);
    drop(shop);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_stream_override_is_the_stream_the_service_is_served_on() {
    let lab = lab().await;
    let calls = Arc::new(AtomicU32::new(0));
    let shop = Service::builder("shop", "1.0.0")
        .action(counting("charge", calls.clone()))
        .nats_source("nats", "shop.inbound")
        .config(RuntimeConfig {
            source_stream: Some("orders-in".into()),
            ..config(&lab)
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let js = jetstream::new(lab.client().clone());
    assert_eq!(
        js.stream_by_subject("shop.inbound").await.unwrap(),
        "orders-in"
    );
    assert!(
        js.get_stream(subject::stream_name("shop", None).unwrap())
            .await
            .is_err(),
        "the emulator made no stream of its own"
    );
    lab.deploy(one_step("order", "shop", "charge"))
        .await
        .unwrap();
    let run = lab.trigger("order", &json!({"amount": 1})).await.unwrap();
    let settled = lab.wait_run_settled(&run).await.unwrap();
    assert_eq!(settled.status, RunStatus::Succeeded);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // The trigger went through that stream, and left it once handled (a work queue).
    let mut stream = js.get_stream("orders-in").await.unwrap();
    let state = &stream.info().await.unwrap().state;
    assert_eq!((state.last_sequence, state.messages), (1, 0));
    lab.assert_no_conformance_errors();
    drop(shop);
}
