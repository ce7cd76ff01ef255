//! Order on the wire, judged by the emulator's wire tap: a "service" written with a raw
//! async-nats client does in turn the right thing and a mistake the protocol forbids (an ack
//! before the events, a DLQ entry before the failed event, a hop before its node's event, a hop
//! as a plain publish, a hop without traceparent or with another version), and each rule fires
//! on the mistake only.

use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;
use serde_json::json;
use triggers_emulator::Harness;
use triggers_sdk::transport;
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::json::RawJson;
use triggers_sdk::wire::shapes::status;
use triggers_sdk::wire::{DlqEntry, Envelope, GoTime, Headers, subject};

use triggers_testkit::peer::*;

/// The protocol's durable consumer of `service` (`triggers-<service>-<safe-subject>` on
/// `<service>.inbound`), made with `edit` applied to the settings protocol.md §4 asks for.
async fn consumer(
    client: &async_nats::Client,
    service: &str,
    edit: impl FnOnce(&mut jetstream::consumer::pull::Config),
) -> jetstream::consumer::PullConsumer {
    let js = jetstream::new(client.clone());
    let inbound = format!("{service}.inbound");
    let stream = js
        .get_stream(subject::stream_name(service, None).unwrap())
        .await
        .unwrap();
    let name = subject::consumer_name(service, &inbound).unwrap();
    let mut config = jetstream::consumer::pull::Config {
        durable_name: Some(name.clone()),
        filter_subject: inbound,
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        max_deliver: 5,
        max_ack_pending: 16,
        ..Default::default()
    };
    edit(&mut config);
    stream.get_or_create_consumer(&name, config).await.unwrap()
}

/// Pulls the next delivery of `service` on the protocol's durable consumer, without acking it.
async fn pull(client: &async_nats::Client, service: &str) -> jetstream::Message {
    let consumer = consumer(client, service, |_| {}).await;
    let mut messages = consumer.messages().await.unwrap();
    tokio::time::timeout(Duration::from_secs(15), messages.next())
        .await
        .expect("a delivery within 15 s")
        .unwrap()
        .unwrap()
}

fn envelope(msg: &jetstream::Message) -> Envelope {
    Envelope::from_headers(&transport::from_nats(msg.headers.as_ref())).unwrap()
}

/// Acks and waits for the server's confirmation, as a careful SDK does at the end.
async fn ack(msg: &jetstream::Message) {
    msg.double_ack().await.unwrap();
}

/// A completion event through JetStream, its ack awaited (confirmed: seen by the tap).
async fn event(client: &async_nats::Client, env: &Envelope, service: &str, node: &str, st: &str) {
    let now = GoTime::now();
    let e = triggers_sdk::wire::CompletionEvent {
        flow_run_id: env.flow_run_id.clone(),
        flow_id: env.flow_id.clone(),
        flow_version: env.flow_version,
        node_id: node.into(),
        node_type: if node.starts_with("in") {
            "service-in"
        } else {
            "action"
        }
        .into(),
        service: service.into(),
        started_at: now,
        finished_at: now,
        status: st.into(),
        error: if st == status::FAILED {
            "boom".into()
        } else {
            String::new()
        },
        trace_id: env.trace_id.clone(),
    };
    jetstream::new(client.clone())
        .publish(
            subject::flow_events(&env.flow_id).unwrap(),
            e.to_json().unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
}

async fn dlq(client: &async_nats::Client, env: &Envelope) {
    let now = GoTime::now();
    let entry = DlqEntry {
        kind: "action_failed".into(),
        envelope: env.clone(),
        body: RawJson::from_text(r#"{"n":1}"#).unwrap(),
        err_msg: "boom".into(),
        occurred_at: now,
    };
    let mut headers = Headers::new();
    headers.insert(names::NATS_MSG_ID, env.dlq_msg_id(now.unix_nanos()));
    jetstream::new(client.clone())
        .publish_with_headers(
            "triggers.v2.dlq.shop.charge",
            transport::to_nats(&headers).unwrap(),
            entry.to_json().unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
}

/// The hop of charge's output to mail, as the protocol has it; `edit` spoils it.
fn hop_envelope(env: &Envelope, edit: impl FnOnce(&mut Envelope)) -> Envelope {
    let span = "00f067aa0ba902b7";
    let mut hop = Envelope {
        source_node_id: "charge".into(),
        idempotency_key: format!("{}:charge>mail:0123456789abcdef", env.flow_run_id),
        span_id: span.into(),
        traceparent: format!("00-{}-{span}-01", env.trace_id),
        retry_count: 0,
        emitted_at: GoTime::now(),
        ..env.clone()
    };
    edit(&mut hop);
    hop
}

/// Publishes a hop to mail: through JetStream (its ack awaited), or as a plain publish.
async fn hop(client: &async_nats::Client, hop: &Envelope, through_jetstream: bool) {
    let mut headers = hop.to_headers();
    headers.insert(names::NATS_MSG_ID, hop.idempotency_key.clone());
    let headers = transport::to_nats(&headers).unwrap();
    if through_jetstream {
        jetstream::new(client.clone())
            .publish_with_headers("mail.inbound", headers, r#"{"ok":true}"#.into())
            .await
            .unwrap()
            .await
            .unwrap();
    } else {
        client
            .publish_with_headers("mail.inbound", headers, r#"{"ok":true}"#.into())
            .await
            .unwrap();
        client.flush().await.unwrap();
    }
}

/// The rules of the violations recorded so far, once the tap read everything sent before.
async fn rules(lab: &Harness) -> Vec<&'static str> {
    assert!(lab.sync_wire_tap().await, "the wire tap catches up");
    lab.violations().into_iter().map(|v| v.rule).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_reports_then_hands_on_then_acks_breaks_no_order_rule() {
    let (lab, client) = shop_then_mail().await;
    let run = lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let d = pull(&client, "shop").await;
    let env = envelope(&d);
    // A retry in process, with in-progress acks (not acks).
    event(&client, &env, "shop", "charge", status::RETRYING).await;
    d.ack_with(jetstream::AckKind::Progress).await.unwrap();
    event(&client, &env, "shop", "charge", status::SUCCEEDED).await;
    hop(&client, &hop_envelope(&env, |_| {}), true).await;
    ack(&d).await;
    // The receiver: mail reports its service-in and its action, then acks.
    let h = pull(&client, "mail").await;
    let henv = envelope(&h);
    event(&client, &henv, "mail", "in2", status::SUCCEEDED).await;
    event(&client, &henv, "mail", "send", status::SUCCEEDED).await;
    ack(&h).await;
    lab.wait_run_settled(&run).await.unwrap();
    assert_eq!(rules(&lab).await, Vec::<&str>::new());
    lab.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_before_the_events_is_ack_before_reports() {
    let (lab, client) = shop_then_mail().await;
    lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let d = pull(&client, "shop").await;
    let env = envelope(&d);
    ack(&d).await;
    event(&client, &env, "shop", "charge", status::SUCCEEDED).await;
    let v = lab.wait_for_violation("ack_before_reports").await.unwrap();
    assert!(v.message.contains("\"charge\""), "{v}");
    assert!(v.subject.starts_with("triggers.v2.flow.events."), "{v}");
}

/// A delivery published again by another client after the first was handled and acked (a
/// replay, a redelivery forced by hand, a replica that never saw the first): what the service
/// reports for it again is that delivery's, not a late report of the acked one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_published_again_is_not_blamed_on_the_acked_one() {
    let (lab, client) = shop_then_mail().await;
    lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let d = pull(&client, "shop").await;
    let env = envelope(&d);
    event(&client, &env, "shop", "charge", status::FAILED).await;
    dlq(&client, &env).await;
    ack(&d).await;
    assert_eq!(rules(&lab).await, Vec::<&str>::new());
    // The same delivery again, under another Nats-Msg-Id, from a client that is not the
    // emulator; handled again: its failed event is the stream's duplicate (not published
    // again here), its DLQ entry is written again, then it is acked.
    let mut headers = env.to_headers();
    headers.insert(names::NATS_MSG_ID, format!("{}-again", env.idempotency_key));
    jetstream::new(client.clone())
        .publish_with_headers(
            "shop.inbound",
            transport::to_nats(&headers).unwrap(),
            d.payload.clone(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let again = pull(&client, "shop").await;
    assert_eq!(envelope(&again).idempotency_key, env.idempotency_key);
    dlq(&client, &env).await;
    ack(&again).await;
    assert_eq!(rules(&lab).await, Vec::<&str>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_action_dead_lettered_in_order_breaks_no_rule_and_out_of_order_does() {
    let (lab, client) = shop_then_mail().await;
    // In order: failed event, DLQ entry, ack.
    let run = lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let d = pull(&client, "shop").await;
    let env = envelope(&d);
    event(&client, &env, "shop", "charge", status::FAILED).await;
    dlq(&client, &env).await;
    ack(&d).await;
    lab.wait_run_settled(&run).await.unwrap();
    assert_eq!(rules(&lab).await, Vec::<&str>::new());

    // The DLQ entry first: dlq_before_failed_event; then acked before the event:
    // ack_before_reports too.
    lab.trigger("order", &json!({"n": 2})).await.unwrap();
    let d = pull(&client, "shop").await;
    let env = envelope(&d);
    dlq(&client, &env).await;
    ack(&d).await;
    event(&client, &env, "shop", "charge", status::FAILED).await;
    let v = lab
        .wait_for_violation("dlq_before_failed_event")
        .await
        .unwrap();
    assert!(v.message.contains(&env.flow_run_id), "{v}");
    lab.wait_for_violation("ack_before_reports").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hop_before_its_nodes_event_is_handed_on_before_event() {
    let (lab, client) = shop_then_mail().await;
    lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let d = pull(&client, "shop").await;
    let env = envelope(&d);
    hop(&client, &hop_envelope(&env, |_| {}), true).await;
    event(&client, &env, "shop", "charge", status::SUCCEEDED).await;
    ack(&d).await;
    let v = lab
        .wait_for_violation("handed_on_before_event")
        .await
        .unwrap();
    assert_eq!(v.subject, "mail.inbound");
    assert_eq!(rules(&lab).await, vec!["handed_on_before_event"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hop_as_a_plain_publish_is_hop_not_jetstream() {
    let (lab, client) = shop_then_mail().await;
    lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let d = pull(&client, "shop").await;
    let env = envelope(&d);
    event(&client, &env, "shop", "charge", status::SUCCEEDED).await;
    hop(&client, &hop_envelope(&env, |_| {}), false).await;
    ack(&d).await;
    lab.wait_for_violation("hop_not_jetstream").await.unwrap();
    assert_eq!(rules(&lab).await, vec!["hop_not_jetstream"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hop_without_traceparent_or_of_another_version_is_flagged() {
    let (lab, client) = shop_then_mail().await;
    lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let d = pull(&client, "shop").await;
    let env = envelope(&d);
    assert!(!env.trace_id.is_empty(), "the emulator's runs have a trace");
    event(&client, &env, "shop", "charge", status::SUCCEEDED).await;
    hop(
        &client,
        &hop_envelope(&env, |h| h.traceparent = String::new()),
        true,
    )
    .await;
    let v = lab
        .wait_for_violation("hop_traceparent_missing")
        .await
        .unwrap();
    assert_eq!(v.subject, "mail.inbound");
    // The flow redeployed meanwhile: the hop still carries the run's version, not the newest.
    let newer = lab.flows().remove("order").unwrap();
    lab.deploy(newer).await.unwrap();
    hop(
        &client,
        &hop_envelope(&env, |h| {
            h.flow_version += 1;
            h.idempotency_key.push('2');
        }),
        true,
    )
    .await;
    let v = lab
        .wait_for_violation("hop_version_mismatch")
        .await
        .unwrap();
    assert!(v.message.contains("runs version 1"), "{v}");
    ack(&d).await;
    let mut found = rules(&lab).await;
    found.sort_unstable();
    assert_eq!(
        found,
        vec!["hop_traceparent_missing", "hop_version_mismatch"]
    );
}

async fn heartbeat(lab: &Harness, client: &async_nats::Client, service: &str) {
    let hb = triggers_sdk::wire::Heartbeat {
        service: service.into(),
        service_version: "1.0.0".into(),
        manifest_hash: lab.services()[service].manifest.manifest_hash.clone(),
        started_at: GoTime::now(),
        now: GoTime::now(),
        shutting_down: false,
    };
    client
        .publish(subject::HEARTBEAT, hb.to_json().unwrap().into())
        .await
        .unwrap();
    client.flush().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_are_read_once_a_service_heartbeats_and_held_to_the_protocol() {
    let (lab, client) = shop_then_mail().await;
    register(&client, &manifest("audit", &["log"], &[])).await;
    // shop: as protocol.md §4 asks. mail: redelivers for ever, no bound on pending, an ack_wait
    // of half a second (a work queue takes only explicit acks: that one the server enforces).
    consumer(&client, "shop", |_| {}).await;
    consumer(&client, "mail", |c| {
        c.ack_wait = Duration::from_millis(500);
        c.max_deliver = -1;
        c.max_ack_pending = -1;
    })
    .await;
    // Read one service after the other, in the order they heartbeat: once audit's missing
    // consumer is reported, shop's and mail's were judged.
    heartbeat(&lab, &client, "shop").await;
    heartbeat(&lab, &client, "mail").await;
    heartbeat(&lab, &client, "audit").await;
    let v = lab.wait_for_violation("consumer_missing").await.unwrap();
    assert!(v.message.contains("triggers-audit-audit_inbound"), "{v}");
    let mut config: Vec<String> = lab
        .violations()
        .into_iter()
        .filter(|v| v.rule == "consumer_config")
        .map(|v| v.message)
        .collect();
    config.sort();
    assert_eq!(config.len(), 3, "{config:#?}");
    assert!(
        config
            .iter()
            .all(|m| m.contains("triggers-mail-mail_inbound")),
        "{config:#?}"
    );
    for field in ["ack_wait", "max_deliver", "max_ack_pending"] {
        assert!(
            config.iter().any(|m| m.contains(field)),
            "{field}: {config:#?}"
        );
    }
    // Read once per registration: another heartbeat adds nothing.
    heartbeat(&lab, &client, "audit").await;
    heartbeat(&lab, &client, "mail").await;
    lab.wait_for_heartbeat("mail", |_| true).await.unwrap();
    assert_eq!(lab.violations().len(), 4, "{:#?}", lab.violations());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_runs_the_emulator_follows_are_judged_against_the_deployed_flow() {
    let (lab, client) = shop_then_mail().await;
    let env = |run: &str, version: i64| Envelope {
        flow_run_id: run.into(),
        flow_id: "order".into(),
        flow_version: version,
        trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
        ..Default::default()
    };
    // A correct event of a run started elsewhere: nothing to say.
    triggers_testkit::peer::complete(
        &client,
        &env("elsewhere-1", 1),
        "shop",
        "charge",
        "action",
        status::SUCCEEDED,
        "",
    )
    .await;
    // A node the flow lacks, a node of another owner, a type that is not the node's, a version
    // never deployed.
    triggers_testkit::peer::complete(
        &client,
        &env("elsewhere-2", 1),
        "shop",
        "refund",
        "action",
        status::SUCCEEDED,
        "",
    )
    .await;
    triggers_testkit::peer::complete(
        &client,
        &env("elsewhere-3", 1),
        "shop",
        "send",
        "action",
        status::SUCCEEDED,
        "",
    )
    .await;
    triggers_testkit::peer::complete(
        &client,
        &env("elsewhere-4", 1),
        "shop",
        "charge",
        "mapping",
        status::SUCCEEDED,
        "",
    )
    .await;
    triggers_testkit::peer::complete(
        &client,
        &env("elsewhere-5", 7),
        "shop",
        "charge",
        "action",
        status::SUCCEEDED,
        "",
    )
    .await;
    for rule in [
        "completion_node_unknown",
        "completion_service_mismatch",
        "completion_node_type_mismatch",
        "completion_version_mismatch",
    ] {
        lab.wait_for_violation(rule).await.unwrap();
    }
    assert!(
        lab.violations()
            .iter()
            .all(|v| !String::from_utf8_lossy(&v.payload).contains("elsewhere-1")),
        "{:#?}",
        lab.violations()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hop_of_the_runs_version_after_a_redeploy_breaks_no_rule() {
    // hop_version_mismatch's passing case: the flow redeployed mid-run, the hop still carries
    // the run's version (and the run's trace), as protocol.md §7 asks.
    let (lab, client) = shop_then_mail().await;
    lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let d = pull(&client, "shop").await;
    let env = envelope(&d);
    event(&client, &env, "shop", "charge", status::SUCCEEDED).await;
    let newer = lab.flows().remove("order").unwrap();
    assert_eq!(lab.deploy(newer).await.unwrap().flow.version, 2);
    hop(&client, &hop_envelope(&env, |_| {}), true).await;
    ack(&d).await;
    assert_eq!(rules(&lab).await, Vec::<&str>::new());
}
