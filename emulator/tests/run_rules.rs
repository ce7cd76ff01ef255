//! Run-level conformance rules: each message is judged against its run's flow, the run and the
//! manifest. Each rule fires on a message that breaks it, and a correct run of the same flow
//! breaks none.

use async_nats::jetstream;
use serde_json::json;
use triggers_emulator::recorder::RunStatus;
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::shapes::status;
use triggers_sdk::wire::{Envelope, GoTime, Heartbeat, subject};

use triggers_testkit::peer::*;

/// Changes one field of an otherwise correct completion event.
type Tamper = fn(&mut triggers_sdk::wire::CompletionEvent);

async fn event(
    client: &async_nats::Client,
    env: &Envelope,
    edit: impl FnOnce(&mut triggers_sdk::wire::CompletionEvent),
) {
    let now = GoTime::now();
    let mut e = triggers_sdk::wire::CompletionEvent {
        flow_run_id: env.flow_run_id.clone(),
        flow_id: env.flow_id.clone(),
        flow_version: env.flow_version,
        node_id: "charge".into(),
        node_type: "action".into(),
        service: "shop".into(),
        started_at: now,
        finished_at: now,
        status: status::SUCCEEDED.into(),
        error: String::new(),
        trace_id: env.trace_id.clone(),
    };
    edit(&mut e);
    client
        .publish(
            subject::flow_events(&env.flow_id).unwrap(),
            e.to_json().unwrap().into(),
        )
        .await
        .unwrap();
    client.flush().await.unwrap();
}

async fn hop(client: &async_nats::Client, env: &Envelope, key: &str) {
    let mut headers = env.to_headers();
    headers.insert(names::IDEMPOTENCY_KEY, key);
    headers.insert(names::NATS_MSG_ID, key);
    jetstream::new(client.clone())
        .publish_with_headers(
            "mail.inbound",
            triggers_sdk::transport::to_nats(&headers).unwrap(),
            "{}".into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correct_run_breaks_no_rule() {
    let (lab, client) = shop_then_mail().await;
    let run = lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let d = next_delivery(&client, "shop").await;
    let env = Envelope::from_headers(&d.headers).unwrap();
    event(&client, &env, |e| {
        e.status = status::RETRYING.into();
        e.error = "busy".into();
    })
    .await;
    event(&client, &env, |_| {}).await;
    let hop_env = Envelope {
        source_node_id: "charge".into(),
        idempotency_key: format!("{run}:charge>mail:1"),
        ..env.clone()
    };
    hop(&client, &hop_env, &hop_env.idempotency_key).await;
    event(&client, &hop_env, |e| {
        e.node_id = "in2".into();
        e.node_type = "service-in".into();
        e.service = "mail".into();
    })
    .await;
    event(&client, &hop_env, |e| {
        e.node_id = "send".into();
        e.service = "mail".into();
    })
    .await;
    lab.wait_run_settled(&run).await.unwrap();
    lab.assert_conformant();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_events_are_judged_against_the_flow_and_the_run() {
    let (lab, client) = shop_then_mail().await;
    lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let env = Envelope::from_headers(&next_delivery(&client, "shop").await.headers).unwrap();
    let cases: [(&str, Tamper); 5] = [
        ("completion_node_unknown", |e| e.node_id = "refund".into()),
        ("completion_node_type_mismatch", |e| {
            e.node_type = "mapping".into()
        }),
        ("completion_service_mismatch", |e| e.service = "mail".into()),
        ("completion_version_mismatch", |e| e.flow_version = 7),
        ("completion_trace_mismatch", |e| {
            e.trace_id = "0af7651916cd43dd8448eb211c80319c".into();
        }),
    ];
    for (rule, edit) in cases {
        event(&client, &env, |e| {
            e.status = status::RETRYING.into();
            e.error = rule.into();
            edit(e);
        })
        .await;
        let v = lab.wait_for_violation(rule).await.unwrap();
        assert!(!v.message.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_beyond_the_policy_are_reported() {
    let (lab, client) = shop_then_mail().await;
    lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let env = Envelope::from_headers(&next_delivery(&client, "shop").await.headers).unwrap();
    // The manifest's policy: max_attempts 2, so one retrying event at most.
    for attempt in 1..=2 {
        event(&client, &env, |e| {
            e.status = status::RETRYING.into();
            e.error = format!("attempt {attempt}");
        })
        .await;
    }
    let v = lab
        .wait_for_violation("retries_exceed_policy")
        .await
        .unwrap();
    assert!(v.message.contains("2 attempt(s)"), "{}", v.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_in_nobody_reported_is_named() {
    let (lab, client) = shop_then_mail().await;
    let run = lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let env = Envelope::from_headers(&next_delivery(&client, "shop").await.headers).unwrap();
    event(&client, &env, |_| {}).await;
    // mail runs send without reporting in2 first.
    event(&client, &env, |e| {
        e.node_id = "send".into();
        e.service = "mail".into();
    })
    .await;
    let v = lab
        .wait_for_violation("service_in_unreported")
        .await
        .unwrap();
    assert!(v.message.contains("\"in2\""), "{}", v.message);
    let r = lab.run(&run.0).unwrap();
    assert!(r.pending.contains_key("in2"), "{:?}", r.pending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hops_and_heartbeats_are_judged_against_what_is_deployed_and_registered() {
    let (lab, client) = shop_then_mail().await;
    let run = lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let env = Envelope::from_headers(&next_delivery(&client, "shop").await.headers).unwrap();
    let ghost_flow = Envelope {
        flow_id: "ghost".into(),
        idempotency_key: format!("{run}:a"),
        ..env.clone()
    };
    hop(&client, &ghost_flow, &ghost_flow.idempotency_key).await;
    lab.wait_for_violation("hop_flow_unknown").await.unwrap();
    let ghost_node = Envelope {
        source_node_id: "nowhere".into(),
        idempotency_key: format!("{run}:b"),
        ..env.clone()
    };
    hop(&client, &ghost_node, &ghost_node.idempotency_key).await;
    lab.wait_for_violation("hop_node_unknown").await.unwrap();
    let hb = Heartbeat {
        service: "shop".into(),
        service_version: "9.9.9".into(),
        manifest_hash: lab.services()["shop"].manifest.manifest_hash.clone(),
        started_at: GoTime::now(),
        now: GoTime::now(),
        shutting_down: false,
    };
    client
        .publish(subject::HEARTBEAT, hb.to_json().unwrap().into())
        .await
        .unwrap();
    let v = lab
        .wait_for_violation("heartbeat_version_mismatch")
        .await
        .unwrap();
    assert!(v.message.contains("9.9.9"), "{}", v.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_that_says_skipped_fails_its_run_rather_than_ending_it() {
    // Only a condition stops a path: an action reporting `skipped` did not do its work, and the
    // hop after it will never come. The run must not read as succeeded.
    let (lab, client) = shop_then_mail().await;
    let run = lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let env = Envelope::from_headers(&next_delivery(&client, "shop").await.headers).unwrap();
    event(&client, &env, |e| e.status = status::SKIPPED.into()).await;
    let v = lab
        .wait_for_violation("completion_status_invalid")
        .await
        .unwrap();
    assert!(v.message.contains("only a condition"), "{}", v.message);
    let settled = lab.wait_run_settled(&run).await.unwrap();
    assert_eq!(settled.status, RunStatus::Failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_followed_from_a_retrying_or_unknown_event_stays_open_until_its_node_finishes() {
    let (lab, client) = shop_then_mail().await;
    for (id, first) in [("foreign-1", status::RETRYING), ("foreign-2", "bogus")] {
        let env = Envelope {
            flow_run_id: id.into(),
            flow_id: "order".into(),
            flow_version: 1,
            ..Envelope::default()
        };
        event(&client, &env, |e| e.status = first.into()).await;
        let run = eventually(&lab, "the followed run", |lab| {
            lab.runs().into_iter().find(|r| r.id == id)
        })
        .await;
        assert_eq!(run.status, RunStatus::Running, "{id} after {first:?}");
        // The node finishes: what follows it (the hop to mail) is then awaited.
        event(&client, &env, |e| e.status = status::FAILED.into()).await;
        let run = lab.wait_run_settled(id).await.unwrap();
        assert_eq!(run.status, RunStatus::Failed, "{id}");
    }
}
