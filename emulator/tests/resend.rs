//! Re-sending a DLQ entry through the control API, with a raw NATS client playing the service
//! (as an SDK in any language would): the action fails into the DLQ, the resend arrives as a new
//! delivery (same body and envelope, a fresh idempotency key), the service succeeds this time and
//! the run with it.

use async_nats::jetstream;
use serde_json::json;
use triggers_emulator::recorder::{RecordKind, RunStatus};
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::shapes::status;
use triggers_sdk::wire::{DlqEntry, Envelope, GoTime, RawJson};

use triggers_testkit::lab;
use triggers_testkit::peer::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_action_re_sent_runs_again_and_its_run_succeeds() {
    let lab = lab().await;
    let client = connect(&lab).await;
    register(&client, &manifest("shop", &["charge"], &[])).await;
    lab.deploy(one_step_flow("order", "shop", "charge"))
        .await
        .unwrap();
    let run = lab
        .trigger("order", &json!({"order_id": "o-1"}))
        .await
        .unwrap();

    // The first delivery fails for good: a failed event, and the message to the DLQ.
    let first = next_delivery(&client, "shop").await;
    let env = Envelope::from_headers(&first.headers).unwrap();
    complete(
        &client,
        &env,
        "shop",
        "step",
        "action",
        status::FAILED,
        "card declined",
    )
    .await;
    let entry = DlqEntry {
        kind: "action_failed".into(),
        envelope: env.clone(),
        body: RawJson::from_message_body(&first.payload),
        err_msg: "card declined".into(),
        occurred_at: GoTime::now(),
    };
    let dlq_msg_id = env.dlq_msg_id(GoTime::now().unix_nanos());
    let mut headers = triggers_sdk::wire::Headers::new();
    headers.insert(names::NATS_MSG_ID, dlq_msg_id.clone());
    jetstream::new(client.clone())
        .publish_with_headers(
            "triggers.v2.dlq.shop.charge",
            triggers_sdk::transport::to_nats(&headers).unwrap(),
            entry.to_json().unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(
        lab.wait_run_settled(&run).await.unwrap().status,
        RunStatus::Failed
    );
    eventually(&lab, "the DLQ record", |lab| {
        lab.dlq()
            .into_iter()
            .find(|r| matches!(&r.kind, RecordKind::Dlq { msg_id, .. } if *msg_id == dlq_msg_id))
    })
    .await;

    // Unknown entries are refused, saying so.
    let refused = control(&client, "resend_dlq", br#"{"msg_id": "nope"}"#).await;
    assert_eq!(refused["ok"], false, "{refused}");
    assert!(
        refused["error"].to_string().contains("cannot be re-sent"),
        "{refused}"
    );

    let reply = control(
        &client,
        "resend_dlq",
        json!({ "msg_id": dlq_msg_id }).to_string().as_bytes(),
    )
    .await;
    assert_eq!(reply["ok"], true, "{reply}");
    let key = format!("{}:resend:1", env.idempotency_key);
    assert_eq!(reply["result"]["idempotency_key"], key.as_str(), "{reply}");
    assert_eq!(reply["result"]["nodes"], json!(["step"]), "{reply}");

    // The resend: the same body and envelope, a fresh key (and Msg-Id), to shop's inbound.
    let again = next_delivery(&client, "shop").await;
    assert_eq!(again.subject, first.subject);
    assert_eq!(again.payload, first.payload);
    let env2 = Envelope::from_headers(&again.headers).unwrap();
    assert_eq!(env2.idempotency_key, key);
    assert_eq!(again.headers.get(names::NATS_MSG_ID), Some(key.as_str()));
    assert_eq!(
        (&env2.flow_run_id, &env2.source_node_id, &env2.trace_id),
        (&env.flow_run_id, &env.source_node_id, &env.trace_id)
    );

    // This time the service succeeds, and the run with it.
    succeed(&client, &env2, "shop", "step").await;
    let settled = lab.wait_run_settled(&run).await.unwrap();
    assert_eq!(
        settled.status,
        RunStatus::Succeeded,
        "{}",
        lab.describe_run(&run.0)
    );
    assert!(settled.node_entries("step").any(|e| e.status == "resent"));
    assert!(
        lab.records()
            .0
            .iter()
            .any(|r| matches!(&r.kind, RecordKind::Resend { run_id, .. } if *run_id == run.0))
    );
}
