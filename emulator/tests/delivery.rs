//! Delivery accounting, with raw NATS clients playing the services (as an SDK in any language
//! would): a run owes each node one completion per arrival, so lost and duplicated work shows;
//! a key repeated across distinct deliveries is reported; the emulator's own deliveries are
//! never deduplicated away unnoticed; timer deliveries that cannot be published stay armed; a
//! service without `durable_timer.v1` gets no Durable Timer flow, whatever was deployed before.

use std::time::Duration;

use async_nats::jetstream;
use serde_json::json;
use triggers_emulator::recorder::{RecordKind, RunStatus};
use triggers_emulator::{EmulatorConfig, EmulatorError, TriggerOptions};
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::{Envelope, GoTime, subject};

use triggers_testkit::peer::*;
use triggers_testkit::{lab, lab_with};

const DT: &[&str] = &["durable_timer.v1"];

/// shop's charge (after a repeating timer) hands its result to mail.
fn repeating_hop_flow() -> triggers_sdk::flow::Flow {
    flow(json!({"id": "sub", "nodes": [
        {"id": "in", "type": "service-in", "service": "shop", "config": {"target": "shop.inbound"}},
        {"id": "wait", "type": "timer", "config": {"delay_ms": 1000, "repeat": 2}},
        {"id": "resume", "type": "service-in", "service": "shop", "config": {"target": "shop.inbound"}},
        {"id": "charge", "type": "action", "service": "shop", "action": "charge"},
        {"id": "send", "type": "action", "service": "mail", "action": "send"}
    ], "edges": [
        {"id": "e1", "from": "in", "to": "wait"}, {"id": "e2", "from": "wait", "to": "resume"},
        {"id": "e3", "from": "resume", "to": "charge"}, {"id": "e4", "from": "charge", "to": "send"}
    ]}))
}

/// Publishes a hop to mail as a service would, with the given key.
async fn hop(client: &async_nats::Client, from: &Envelope, key: &str) -> bool {
    let next = Envelope {
        idempotency_key: key.to_owned(),
        source_node_id: "charge".into(),
        retry_count: 0,
        emitted_at: GoTime::now(),
        ..from.clone()
    };
    let mut headers = next.to_headers();
    headers.insert(names::NATS_MSG_ID, key);
    let ack = jetstream::new(client.clone())
        .publish_with_headers(
            "mail.inbound",
            triggers_sdk::transport::to_nats(&headers).unwrap(),
            br#"{"charged":true}"#.to_vec().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    ack.duplicate
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hop_key_repeated_across_occurrences_is_caught_and_the_lost_delivery_keeps_the_run_open()
{
    let lab = lab().await;
    let client = connect(&lab).await;
    register(&client, &manifest("shop", &["charge"], DT)).await;
    register(&client, &manifest("mail", &["send"], DT)).await;
    lab.deploy(repeating_hop_flow()).await.unwrap();
    let run = lab.trigger("sub", &json!({"n": 1})).await.unwrap();
    lab.wait_run_idle(&run).await.unwrap();
    // A service with the old key scheme: `<run>:<from>><service>`, the same for every occurrence.
    let stale_key = format!("{run}:charge>mail");
    for occurrence in 1..=2 {
        lab.advance(Duration::from_secs(1)).await.unwrap();
        let d = next_delivery(&client, "shop").await;
        let env = Envelope::from_headers(&d.headers).unwrap();
        assert_eq!(env.source_node_id, "resume");
        succeed(&client, &env, "shop", "charge").await;
        let dropped = hop(&client, &env, &stale_key).await;
        assert_eq!(dropped, occurrence == 2, "JetStream dedups the second");
        if occurrence == 1 {
            let m = next_delivery(&client, "mail").await;
            succeed(
                &client,
                &Envelope::from_headers(&m.headers).unwrap(),
                "mail",
                "send",
            )
            .await;
            lab.wait_for_node(&run, "send").await.unwrap();
        }
    }
    let v = lab
        .wait_for_violation("idempotency_key_reused")
        .await
        .unwrap();
    assert!(
        v.message.contains("node \"charge\" ran 2 times"),
        "{}",
        v.message
    );
    // The second send is owed and never comes: the run does not pass for succeeded.
    let r = lab.run(&run.0).unwrap();
    assert_eq!(r.status, RunStatus::Running);
    assert_eq!(r.pending.get("send"), Some(&1));
    assert_eq!(r.executions("send"), 1);
    assert_eq!(r.executions("charge"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_nothing_reached_is_reported_and_opens_nothing() {
    let lab = lab().await;
    let client = connect(&lab).await;
    register(&client, &manifest("shop", &["charge"], &[])).await;
    lab.deploy(one_step_flow("order", "shop", "charge"))
        .await
        .unwrap();
    let run = lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let d = next_delivery(&client, "shop").await;
    let env = Envelope::from_headers(&d.headers).unwrap();
    succeed(&client, &env, "shop", "step").await;
    lab.wait_run_settled(&run).await.unwrap();
    // The same node again (a redelivery that ran it twice): one duplicate.
    succeed(&client, &env, "shop", "step").await;
    let v = lab
        .wait_for_violation("completion_unexpected")
        .await
        .unwrap();
    assert!(v.message.contains("\"step\""), "{}", v.message);
    let r = lab.run(&run.0).unwrap();
    assert_eq!(r.unexpected, ["step"]);
    assert_eq!(r.executions("step"), 1);
    assert_eq!(r.status, RunStatus::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emulator_delivery_deduplicated_away_is_reported() {
    let lab = lab().await;
    let client = connect(&lab).await;
    register(&client, &manifest("shop", &["charge"], &[])).await;
    lab.deploy(one_step_flow("order", "shop", "charge"))
        .await
        .unwrap();
    // Someone else took the key the trigger will use.
    let mut headers = triggers_sdk::wire::Headers::new();
    headers.insert(names::NATS_MSG_ID, "run-taken:in");
    jetstream::new(client.clone())
        .publish_with_headers(
            "shop.inbound",
            triggers_sdk::transport::to_nats(&headers).unwrap(),
            "{}".into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    lab.trigger_bytes(
        "order",
        b"{}".to_vec(),
        TriggerOptions {
            run_id: Some("run-taken".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let v = lab
        .wait_for_violation("delivery_deduplicated")
        .await
        .unwrap();
    assert!(v.message.contains("run-taken:in"), "{}", v.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timer_deliveries_that_cannot_be_published_stay_armed_and_the_rest_go_out() {
    let lab = lab_with(EmulatorConfig {
        wait_timeout: Duration::from_secs(15),
        ..Default::default()
    })
    .await;
    let client = connect(&lab).await;
    for s in ["shop", "mail", "ship"] {
        register(&client, &manifest(s, &["act"], DT)).await;
    }
    for (id, to) in [("to-mail", "mail"), ("to-ship", "ship")] {
        lab.deploy(flow(json!({"id": id, "nodes": [
            {"id": "in", "type": "service-in", "service": "shop", "config": {"target": "shop.inbound"}},
            {"id": "wait", "type": "timer", "config": {"delay_ms": 1000}},
            {"id": "in2", "type": "service-in", "service": to, "config": {"target": format!("{to}.inbound")}},
            {"id": "go", "type": "action", "service": to, "action": "act"}
        ], "edges": [
            {"id": "e1", "from": "in", "to": "wait"}, {"id": "e2", "from": "wait", "to": "in2"},
            {"id": "e3", "from": "in2", "to": "go"}
        ]})))
        .await
        .unwrap();
    }
    let to_mail = lab.trigger("to-mail", &json!({})).await.unwrap();
    let to_ship = lab.trigger("to-ship", &json!({})).await.unwrap();
    // mail's inbound stream goes away: its delivery cannot be published.
    let js = jetstream::new(client.clone());
    js.delete_stream(subject::stream_name("mail", None).unwrap())
        .await
        .unwrap();
    let err = lab.advance(Duration::from_secs(1)).await.unwrap_err();
    assert!(
        matches!(
            err,
            EmulatorError::TimerDelivery {
                failed: 1,
                attempted: 2,
                ..
            }
        ),
        "{err}"
    );
    // ship's went out in the same advance.
    let ship = next_delivery(&client, "ship").await;
    assert_eq!(
        Envelope::from_headers(&ship.headers).unwrap().flow_run_id,
        to_ship.0
    );
    // mail's is still armed, not fired, and says why.
    let r = lab.run(&to_mail.0).unwrap();
    assert_eq!(
        r.status,
        RunStatus::Waiting,
        "{}",
        lab.describe_run(&to_mail.0)
    );
    assert!(r.pending.is_empty());
    assert!(lab.records().0.iter().any(|rec| matches!(
        &rec.kind,
        RecordKind::TimerUndelivered { run_id, gave_up: false, .. } if *run_id == to_mail.0
    )));
    // The stream comes back (mail registers again): the next advance delivers it.
    register(&client, &manifest("mail", &["act"], DT)).await;
    let fired = lab.advance(Duration::ZERO).await.unwrap();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].run_id, to_mail.0);
    let mail = next_delivery(&client, "mail").await;
    let env = Envelope::from_headers(&mail.headers).unwrap();
    assert_eq!(env.flow_run_id, to_mail.0);
    succeed(&client, &env, "mail", "go").await;
    let settled = lab.wait_run_settled(&to_mail).await.unwrap();
    assert_eq!(settled.status, RunStatus::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_registering_without_durable_timer_gets_no_durable_timer_flow() {
    let lab = lab().await;
    let client = connect(&lab).await;
    register(&client, &manifest("shop", &["act"], DT)).await;
    lab.deploy(flow(json!({"id": "timed", "nodes": [
        {"id": "in", "type": "service-in", "service": "shop", "config": {"target": "shop.inbound"}},
        {"id": "act", "type": "action", "service": "shop", "action": "act"},
        {"id": "wait", "type": "timer", "config": {"delay_ms": 1000}}
    ], "edges": [{"id": "e1", "from": "in", "to": "act"}, {"id": "e2", "from": "act", "to": "wait"}]})))
        .await
        .unwrap();
    lab.deploy(one_step_flow("plain", "shop", "act"))
        .await
        .unwrap();
    let with = register(&client, &manifest("shop", &["act"], DT)).await;
    let ids: Vec<&str> = with.flows.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids, ["plain", "timed"]);
    // The same service again, without the capability: the timed flow is withheld, and why.
    let without = register(&client, &manifest("shop", &["act"], &[])).await;
    let ids: Vec<&str> = without.flows.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids, ["plain"]);
    assert!(lab.records().0.iter().any(|r| matches!(
        &r.kind,
        RecordKind::FlowsWithheld { service, flows, .. } if service == "shop" && flows == &["timed"]
    )));
    // And a redeploy is refused at release.
    let refused = lab.check_release(&lab.flows()["timed"]).unwrap_err();
    assert_eq!(refused[0].code.as_str(), "durable_timer_capability_missing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_delivery_fails_the_nodes_it_was_for() {
    let lab = lab().await;
    let client = connect(&lab).await;
    register(&client, &manifest("shop", &["charge"], &[])).await;
    lab.deploy(one_step_flow("order", "shop", "charge"))
        .await
        .unwrap();
    let run = lab
        .trigger_bytes("order", b"{not json".to_vec(), TriggerOptions::default())
        .await
        .unwrap();
    let d = next_delivery(&client, "shop").await;
    let env = Envelope::from_headers(&d.headers).unwrap();
    // The service dead-letters it as invalid_json, as the SDK does; no completion event follows.
    let entry = triggers_sdk::wire::DlqEntry {
        kind: "invalid_json".into(),
        envelope: env.clone(),
        body: triggers_sdk::wire::RawJson::from_message_body(&d.payload),
        err_msg: "the body is not JSON".into(),
        occurred_at: GoTime::now(),
    };
    let mut headers = triggers_sdk::wire::Headers::new();
    headers.insert(
        names::NATS_MSG_ID,
        env.dlq_msg_id(GoTime::now().unix_nanos()),
    );
    jetstream::new(client.clone())
        .publish_with_headers(
            "triggers.v2.dlq.shop.invalid_json",
            triggers_sdk::transport::to_nats(&headers).unwrap(),
            entry.to_json().unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let settled = lab.wait_run_settled(&run).await.unwrap();
    assert_eq!(settled.status, RunStatus::Failed);
    assert!(settled.failed.contains("step"));
    assert!(
        settled
            .node_entries("step")
            .any(|e| e.status == "dead_lettered"),
        "{}",
        lab.describe_run(&run.0)
    );
}

/// A trigger whose delivery cannot be published is taken back whole: no run, none of its
/// records, nothing in the summary; the same run id can be triggered again once the service is
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_that_cannot_be_delivered_leaves_no_run_and_no_record() {
    let lab = lab().await;
    let client = connect(&lab).await;
    register(&client, &manifest("shop", &["charge"], &[])).await;
    lab.deploy(one_step_flow("order", "shop", "charge"))
        .await
        .unwrap();
    // shop's inbound stream goes away: the trigger's delivery cannot be published.
    let js = jetstream::new(client.clone());
    js.delete_stream(subject::stream_name("shop", None).unwrap())
        .await
        .unwrap();
    let options = TriggerOptions {
        run_id: Some("run-lost".into()),
        ..Default::default()
    };
    let err = lab
        .trigger_bytes("order", b"{}".to_vec(), options.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, EmulatorError::Publish { .. }), "{err}");
    assert!(lab.run("run-lost").is_none());
    assert!(lab.runs().is_empty());
    let summary = lab.summary();
    assert_eq!(summary.runs_total, 0);
    let (records, _) = lab.records();
    let left: Vec<_> = records
        .iter()
        .filter(|r| r.kind.run_id() == Some("run-lost"))
        .map(|r| r.kind.name())
        .collect();
    assert!(left.is_empty(), "records of the rolled-back run: {left:?}");
    // Back: the same id starts afresh, with one trigger record.
    register(&client, &manifest("shop", &["charge"], &[])).await;
    let run = lab
        .trigger_bytes("order", b"{}".to_vec(), options)
        .await
        .unwrap();
    assert_eq!(run.0, "run-lost");
    let triggers = lab
        .records()
        .0
        .iter()
        .filter(|r| matches!(&r.kind, RecordKind::Trigger { run_id, .. } if run_id == "run-lost"))
        .count();
    assert_eq!(triggers, 1);
    let delivery = next_delivery(&client, "shop").await;
    assert_eq!(
        Envelope::from_headers(&delivery.headers)
            .unwrap()
            .flow_run_id,
        "run-lost"
    );
}
