//! Harnesses on one shared nats-server are as apart as harnesses on servers of their own: each
//! has a NATS account of its own, and an account comes back to its next user clean.
use std::time::Duration;

use async_nats::jetstream;
use futures::TryStreamExt;
use serde_json::json;
use triggers_emulator::{DLQ_STREAM, DlqFilter, EVENTS_STREAM, Harness};
use triggers_sdk::transport;
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::{DlqEntry, Envelope, GoTime, Headers, RawJson, subject};

use triggers_testkit::lab;
use triggers_testkit::peer::*;

/// One test's doings: a service `shop` registers, flow `order` is deployed and triggered with
/// `n`, the delivery is completed, a DLQ entry `msg_id` is written and a `source_dlq_publish`
/// violation made when `misbehave`. Returns the run id and the SDK's connection.
async fn a_test(lab: &Harness, n: u64, msg_id: &str) -> (String, async_nats::Client) {
    let sdk = connect(lab).await;
    let reply = register(&sdk, &manifest("shop", &["charge"], &[])).await;
    assert_eq!(reply.error, "");
    lab.deploy(one_step_flow("order", "shop", "charge"))
        .await
        .unwrap();
    let run = lab.trigger("order", &json!({ "n": n })).await.unwrap();
    let delivery = next_delivery(&sdk, "shop").await;
    let envelope = Envelope::from_headers(&delivery.headers).unwrap();
    assert_eq!(
        envelope.flow_run_id, run.0,
        "the delivery is of this test's run"
    );
    assert_eq!(delivery.payload, format!(r#"{{"n":{n}}}"#).into_bytes());
    succeed(&sdk, &envelope, "shop", "step").await;
    lab.wait_run_settled(&run).await.unwrap();
    publish_dlq(&sdk, &envelope, msg_id).await;
    (run.0, sdk)
}

async fn publish_dlq(sdk: &async_nats::Client, envelope: &Envelope, msg_id: &str) {
    let entry = DlqEntry {
        kind: "action_failed".into(),
        envelope: envelope.clone(),
        body: RawJson::from_text(r#"{"n":1}"#).unwrap(),
        err_msg: "boom".into(),
        occurred_at: GoTime::now(),
    };
    let mut h = Headers::new();
    h.insert(names::NATS_MSG_ID, msg_id);
    jetstream::new(sdk.clone())
        .publish_with_headers(
            "triggers.v2.dlq.shop.charge",
            transport::to_nats(&h).unwrap(),
            entry.to_json().unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
}

/// Two harnesses on one server, each with a service of the same name, the same flow id and so
/// the same stream names, running at once: each sees only its own messages, records, runs,
/// violations and DLQ entries.
#[tokio::test]
async fn two_emulators_on_one_server_see_only_their_own() {
    let (a, b) = tokio::join!(lab(), lab());
    let (account_a, account_b) = (
        a.account().expect("an account on the shared server"),
        b.account().expect("an account on the shared server"),
    );
    assert_eq!(account_a.server_url(), account_b.server_url(), "one server");
    assert_ne!(account_a.name(), account_b.name());

    let ((run_a, sdk_a), (run_b, sdk_b)) =
        tokio::join!(a_test(&a, 1, "k:dlq:a"), a_test(&b, 2, "k:dlq:b"));

    // A violation in a only; b's marker violation comes after it.
    sdk_a
        .publish("triggers.v2.dlq.source.src1", b"{}".to_vec().into())
        .await
        .unwrap();
    sdk_a.flush().await.unwrap();
    a.wait_for_violation("source_dlq_publish").await.unwrap();
    sdk_b
        .publish(
            subject::flow_events("elsewhere").unwrap(),
            br#"{"flow_run_id":"r","flow_id":"elsewhere","flow_version":1,"node_id":"n","node_type":"action","service":"shop","started_at":"2026-05-26T14:30:45Z","finished_at":"2026-05-26T14:30:45Z","status":"succeeded","result":{"x":1}}"#.to_vec().into(),
        )
        .await
        .unwrap();
    sdk_b.flush().await.unwrap();
    b.wait_for_violation("completion_has_result").await.unwrap();

    for (lab, own_run, other_run, own_id, other_id, own_n, other_n) in [
        (&a, &run_a, &run_b, "k:dlq:a", "k:dlq:b", 1, 2),
        (&b, &run_b, &run_a, "k:dlq:b", "k:dlq:a", 2, 1),
    ] {
        let entry = lab.wait_dlq(DlqFilter::run(own_run)).await.unwrap();
        assert_eq!(entry.msg_id, own_id);
        let dlq: Vec<_> = lab
            .dlq()
            .into_iter()
            .filter(|r| r.subject == "triggers.v2.dlq.shop.charge")
            .collect();
        assert_eq!(dlq.len(), 1, "only its own DLQ entry: {dlq:?}");
        assert!(
            dlq.iter()
                .all(|r| r.header(names::NATS_MSG_ID) != Some(other_id))
        );
        let runs: Vec<String> = lab.runs().into_iter().map(|r| r.id).collect();
        assert!(
            runs.contains(own_run) && !runs.contains(other_run),
            "{runs:?}"
        );
        assert!(lab.run(other_run).is_none());
        let (records, _) = lab.records();
        let own = format!(r#"{{"n":{own_n}}}"#);
        let other = format!(r#"{{"n":{other_n}}}"#);
        assert!(records.iter().any(|r| r.payload.text() == own));
        assert!(
            records.iter().all(|r| r.payload.text() != other),
            "a record of the other test's trigger"
        );
        assert!(
            records
                .iter()
                .all(|r| !r.payload.text().contains(other_run.as_str()))
        );
        assert_eq!(lab.services().len(), 1);
    }
    let rules = |lab: &Harness| {
        lab.violations()
            .into_iter()
            .map(|v| v.rule)
            .collect::<Vec<_>>()
    };
    assert!(rules(&a).contains(&"source_dlq_publish"));
    assert!(
        !rules(&a).contains(&"completion_has_result"),
        "{:?}",
        rules(&a)
    );
    assert!(rules(&b).contains(&"completion_has_result"));
    assert!(
        !rules(&b).contains(&"source_dlq_publish"),
        "{:?}",
        rules(&b)
    );
}

/// A test that panics with its streams full leaves nothing the next user of its account sees.
#[tokio::test]
async fn a_test_that_panics_leaves_nothing_behind() {
    let (sender, receiver) = std::sync::mpsc::channel();
    // A test of its own, on a runtime of its own, that panics halfway.
    let panicked = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move {
                let lab = lab().await;
                sender.send(lab.account().unwrap().name()).unwrap();
                let (_run, sdk) = a_test(&lab, 7, "k:dlq:left").await;
                // More left behind: an undelivered trigger, a KV bucket of the service's.
                lab.trigger("order", &json!({"n": 8})).await.unwrap();
                jetstream::new(sdk)
                    .create_key_value(jetstream::kv::Config {
                        bucket: "leftover".into(),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                panic!("the test fails here, its harness unwinding");
            })
    })
    .join();
    assert!(panicked.is_err());
    let name = receiver.recv().unwrap();

    // Harnesses until one has that account (it is cleaned in the background first).
    let next = tokio::time::timeout(Duration::from_secs(60), async {
        let mut held = Vec::new();
        loop {
            let next = lab().await;
            if next.account().unwrap().name() == name {
                break next;
            }
            held.push(next);
            if held.len() > 8 {
                held.clear();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    })
    .await
    .expect("the account comes back");

    let js = jetstream::new(connect(&next).await);
    let mut streams: Vec<String> = js.stream_names().try_collect().await.unwrap();
    streams.sort();
    let mut fresh = vec![DLQ_STREAM.to_string(), EVENTS_STREAM.to_string()];
    fresh.sort();
    assert_eq!(streams, fresh, "only the new emulator's own streams");
    for stream in [DLQ_STREAM, EVENTS_STREAM] {
        let info = js
            .get_stream(stream)
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .clone();
        assert_eq!(
            info.state.messages, 0,
            "{stream} holds the last test's messages"
        );
    }
    assert!(next.services().is_empty() && next.runs().is_empty() && next.dlq().is_empty());
}
