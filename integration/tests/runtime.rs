//! The SDK runtime against the emulator on a real nats-server: registration, broadcasts and the
//! shared work queue, retries and DLQ, fallback kinds, chaining, condition and mapping nodes, HTTP
//! outputs, the Durable Timer triplet, graceful shutdown. Every test ends with the emulator's
//! conformance checker finding nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use triggers_emulator::{DlqFilter, TriggerOptions};
use triggers_integration::{config, lab, one_step, publish_js};
use triggers_sdk::error::StartError;
use triggers_sdk::runtime::{ActionContext, ActionDef, ActionError, Retry, RuntimeConfig, Service};
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::{Envelope, Headers, subject};

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Order {
    order_id: String,
    amount: i64,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Charged {
    order_id: String,
    charged: bool,
}

async fn charge(order: Order, _ctx: ActionContext) -> Result<Charged, ActionError> {
    Ok(Charged {
        order_id: order.order_id,
        charged: order.amount > 0,
    })
}

fn shop() -> triggers_sdk::runtime::ServiceBuilder {
    Service::builder("shop", "1.0.0")
        .action(ActionDef::new("charge", charge))
        .nats_source("nats", "shop.inbound")
}

#[tokio::test]
async fn registers_runs_an_action_and_reports_its_completion() {
    let lab = lab().await;
    let service = shop().config(config(&lab)).build().unwrap();
    let expected_hash = service.manifest().compute_hash().unwrap();
    let running = service.start().await.unwrap();
    let registered = lab.wait_for_registration("shop").await.unwrap();
    assert_eq!(registered.manifest.manifest_hash, expected_hash);
    lab.wait_for_heartbeat("shop", |hb| !hb.shutting_down)
        .await
        .unwrap();

    lab.deploy(one_step("order", "shop", "charge"))
        .await
        .unwrap();
    let run = lab
        .trigger("order", &json!({"order_id": "o-1", "amount": 5}))
        .await
        .unwrap();
    let step = lab.wait_for_node(&run, "step").await.unwrap();
    assert_eq!(
        (step.status.as_str(), step.service.as_str()),
        ("succeeded", "shop")
    );
    lab.wait_run_settled(&run).await.unwrap();
    running.shutdown().await;
    lab.assert_conformant();
}

#[tokio::test]
async fn registration_fails_fast_on_an_error_reply_no_responders_and_a_timeout() {
    let lab = lab().await;
    // An error reply: a second service with the same name but a manifest the emulator refuses.
    let bad = Service::builder("shop", "1.0.0")
        .action(ActionDef::new("charge", charge))
        .nats_source("nats", "triggers.v2.flow.events.x")
        .config(config(&lab))
        .build();
    // The builder already refuses a locked subject as a source; say so rather than start.
    assert!(
        bad.is_err(),
        "a locked subject as a NATS source is refused at build time"
    );

    // No responders: a nats-server with no orchestrator.
    let bare = triggers_emulator::NatsServer::start(triggers_emulator::NatsConfig {
        backend: triggers_emulator::Backend::Binary,
        ..Default::default()
    })
    .await
    .unwrap();
    let err = shop()
        .config(RuntimeConfig {
            nats_url: Some(bare.url().into()),
            ..Default::default()
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap_err();
    assert_eq!(err, StartError::NoResponders);
    assert!(err.to_string().contains("triggers-lab up"), "{err}");

    // A timeout: someone listens on the subject but never answers.
    let silent = triggers_sdk::transport::connect(bare.url()).await.unwrap();
    let _sub = silent.subscribe(subject::MANIFEST_REGISTER).await.unwrap();
    silent.flush().await.unwrap();
    let err = shop()
        .config(RuntimeConfig {
            nats_url: Some(bare.url().into()),
            register_timeout: Some(Duration::from_millis(300)),
            ..Default::default()
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap_err();
    // It gives up after the configured 300 ms, not the default 10 s: the error says so.
    assert_eq!(err, StartError::RegisterTimeout(Duration::from_millis(300)));

    // An error reply: the emulator refuses a second service whose inbound subject another
    // service's stream already takes; start() says so and stops.
    let _first = shop()
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let err = Service::builder("rival", "1.0.0")
        .action(ActionDef::new("charge", charge))
        .nats_source("nats", "shop.inbound")
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap_err();
    let StartError::Refused(reason) = &err else {
        panic!("a refusal, got {err:?}")
    };
    assert!(reason.contains("shop.inbound"), "{reason}");
    assert!(
        err.to_string().contains("refused the registration"),
        "{err}"
    );
}

#[tokio::test]
async fn two_replicas_both_get_broadcasts_and_share_the_work() {
    let lab = lab().await;
    let counts = [Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0))];
    let mut replicas = Vec::new();
    for count in &counts {
        let count = count.clone();
        let service = Service::builder("shop", "1.0.0")
            .action(ActionDef::new(
                "charge",
                move |o: Order, _ctx: ActionContext| {
                    let count = count.clone();
                    async move {
                        count.fetch_add(1, Ordering::SeqCst);
                        // Hold the message a little, so the other replica takes the next ones.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Ok::<_, ActionError>(Charged {
                            order_id: o.order_id,
                            charged: true,
                        })
                    }
                },
            ))
            .nats_source("nats", "shop.inbound")
            .config(config(&lab))
            .build()
            .unwrap();
        replicas.push(service.start().await.unwrap());
    }
    let deployed = lab
        .deploy(one_step("order", "shop", "charge"))
        .await
        .unwrap();
    for r in &replicas {
        assert!(
            r.wait_for_flow("order", deployed.flow.version, Duration::from_secs(15))
                .await,
            "every replica got the broadcast"
        );
    }
    let mut runs = Vec::new();
    for i in 0..20 {
        runs.push(
            lab.trigger("order", &json!({"order_id": format!("o-{i}"), "amount": 1}))
                .await
                .unwrap(),
        );
    }
    for run in &runs {
        lab.wait_run_settled(run).await.unwrap();
    }
    let (a, b) = (
        counts[0].load(Ordering::SeqCst),
        counts[1].load(Ordering::SeqCst),
    );
    assert_eq!(a + b, 20, "each message handled exactly once");
    assert!(a > 0 && b > 0, "both replicas took work: {a} and {b}");
    // A redeploy reaches both replicas too.
    let again = lab
        .deploy(one_step("order", "shop", "charge"))
        .await
        .unwrap();
    for r in &replicas {
        assert!(
            r.wait_for_flow("order", again.flow.version, Duration::from_secs(15))
                .await
        );
    }
    lab.assert_conformant();
}

#[tokio::test]
async fn retries_then_dead_letters_with_the_right_subject_body_and_message_id() {
    let lab = lab().await;
    let attempts = Arc::new(AtomicU32::new(0));
    let seen = attempts.clone();
    let service = Service::builder("shop", "1.0.0")
        .action(
            ActionDef::new("charge", move |_o: Order, ctx: ActionContext| {
                let seen = seen.clone();
                async move {
                    seen.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(ctx.envelope.retry_count, i64::from(ctx.attempt - 1));
                    Err::<Charged, _>(ActionError::retryable(format!(
                        "card declined (attempt {})",
                        ctx.attempt
                    )))
                }
            })
            .retry(Retry {
                max_attempts: 3,
                initial_backoff_ms: 10,
                backoff_factor: 2.0,
                max_backoff_ms: 50,
            }),
        )
        .nats_source("nats", "shop.inbound")
        .config(config(&lab))
        .build()
        .unwrap();
    let _running = service.start().await.unwrap();
    lab.deploy(one_step("order", "shop", "charge"))
        .await
        .unwrap();
    let run = lab
        .trigger("order", &json!({"order_id": "o-9", "amount": 3}))
        .await
        .unwrap();
    let dlq = lab.wait_dlq(DlqFilter::run(&run)).await.unwrap();
    assert_eq!(dlq.subject, "triggers.v2.dlq.shop.charge");
    let entry = dlq.entry.unwrap();
    assert_eq!(entry.kind, "action_failed");
    assert_eq!(entry.body.get(), r#"{"amount":3,"order_id":"o-9"}"#);
    assert_eq!(entry.envelope.retry_count, 2);
    assert!(
        entry.err_msg.contains("card declined (attempt 3)"),
        "{}",
        entry.err_msg
    );
    let (key, _) =
        triggers_sdk::wire::header::parse_dlq_msg_id(&dlq.msg_id).expect("<key>:dlq:<ns>");
    assert_eq!(key, entry.envelope.idempotency_key);
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    let settled = lab.wait_run_settled(&run).await.unwrap();
    let statuses: Vec<&str> = settled
        .node_entries("step")
        .map(|e| e.status.as_str())
        .collect();
    assert_eq!(statuses, ["retrying", "retrying", "failed"]);
    lab.assert_conformant();
}

#[tokio::test]
async fn a_panicking_or_slow_handler_is_a_failed_attempt_not_a_dead_service() {
    let lab = lab().await;
    let service = Service::builder("shop", "1.0.0")
        .action(
            ActionDef::new("boom", |o: Order, _ctx: ActionContext| async move {
                if o.amount < 0 {
                    panic!("negative amount {}", o.amount);
                }
                Ok::<_, ActionError>(Charged {
                    order_id: o.order_id,
                    charged: true,
                })
            })
            .max_attempts(1),
        )
        .action(
            ActionDef::new("slow", |o: Order, _ctx: ActionContext| async move {
                tokio::time::sleep(Duration::from_secs(15)).await;
                Ok::<_, ActionError>(Charged {
                    order_id: o.order_id,
                    charged: true,
                })
            })
            .max_attempts(1)
            .timeout(Duration::from_millis(100)),
        )
        .nats_source("nats", "shop.inbound")
        .config(config(&lab))
        .build()
        .unwrap();
    let _running = service.start().await.unwrap();
    lab.deploy(one_step("boom", "shop", "boom")).await.unwrap();
    lab.deploy(one_step("slow", "shop", "slow")).await.unwrap();
    let run = lab
        .trigger("boom", &json!({"order_id": "o", "amount": -1}))
        .await
        .unwrap();
    let dlq = lab.wait_dlq(DlqFilter::run(&run)).await.unwrap();
    assert_eq!(dlq.entry.as_ref().unwrap().kind, "action_panicked");
    assert!(dlq.entry.unwrap().err_msg.contains("negative amount -1"));
    let run = lab
        .trigger("slow", &json!({"order_id": "o", "amount": 1}))
        .await
        .unwrap();
    assert_eq!(
        lab.wait_dlq(DlqFilter::run(&run))
            .await
            .unwrap()
            .entry
            .unwrap()
            .kind,
        "action_timeout"
    );
    // Still serving.
    let run = lab
        .trigger("boom", &json!({"order_id": "o", "amount": 1}))
        .await
        .unwrap();
    assert_eq!(
        lab.wait_for_node(&run, "step").await.unwrap().status,
        "succeeded"
    );
    // Input that is not the action's type: no retry, invalid_input.
    let run = lab.trigger("boom", &json!({"order_id": 7})).await.unwrap();
    assert_eq!(
        lab.wait_dlq(DlqFilter::run(&run))
            .await
            .unwrap()
            .entry
            .unwrap()
            .kind,
        "invalid_input"
    );
    lab.assert_conformant();
}

#[tokio::test]
async fn messages_without_action_context_go_to_the_fallback_dlqs() {
    let lab = lab().await;
    let _running = shop()
        .config(RuntimeConfig {
            flow_wait: Some(Duration::from_millis(200)),
            ..config(&lab)
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    lab.deploy(one_step("order", "shop", "charge"))
        .await
        .unwrap();

    // Bad JSON, sent by the emulator itself (a poison message).
    let run = lab
        .trigger_bytes("order", b"{not json".to_vec(), TriggerOptions::default())
        .await
        .unwrap();
    let d = lab
        .wait_dlq(DlqFilter::subject("triggers.v2.dlq.shop.invalid_json"))
        .await
        .unwrap();
    assert_eq!(d.entry.as_ref().unwrap().envelope.flow_run_id, run.0);
    assert_eq!(
        d.entry.unwrap().body.get(),
        r#""{not json""#,
        "the body is kept, as a JSON string"
    );

    // No envelope at all.
    let mut h = Headers::new();
    h.insert(names::NATS_MSG_ID, "raw-1");
    publish_js(
        lab.url(),
        "shop.inbound",
        &h,
        br#"{"order_id":"x","amount":1}"#,
    )
    .await;
    lab.wait_dlq(DlqFilter::subject("triggers.v2.dlq.shop.missing_envelope"))
        .await
        .unwrap();

    // An envelope for a flow the service does not hold, and one for a node that is not there.
    let envelope = |flow: &str, node: &str, key: &str| {
        let e = Envelope {
            flow_run_id: format!("run-{key}"),
            flow_id: flow.into(),
            flow_version: 1,
            idempotency_key: key.into(),
            source_node_id: node.into(),
            emitted_at: triggers_sdk::wire::GoTime::now(),
            ..Envelope::default()
        };
        let mut h = e.to_headers();
        h.insert(names::NATS_MSG_ID, key);
        h
    };
    publish_js(
        lab.url(),
        "shop.inbound",
        &envelope("nope", "in", "k-flow"),
        b"{}",
    )
    .await;
    let d = lab
        .wait_dlq(DlqFilter::subject("triggers.v2.dlq.shop.unknown_flow"))
        .await
        .unwrap();
    assert!(d.entry.unwrap().err_msg.contains("\"nope\""));
    publish_js(
        lab.url(),
        "shop.inbound",
        &envelope("order", "ghost", "k-node"),
        b"{}",
    )
    .await;
    lab.wait_dlq(DlqFilter::subject("triggers.v2.dlq.shop.unknown_node"))
        .await
        .unwrap();
    // Nothing on the orchestrator's source DLQ, and every DLQ publish conformed.
    assert!(
        lab.dlq()
            .iter()
            .all(|r| !r.subject.starts_with("triggers.v2.dlq.source."))
    );
    assert!(
        lab.violations()
            .iter()
            .all(|v| !v.subject.starts_with("triggers.v2.dlq")),
        "{:?}",
        lab.violations()
    );
}

/// A burst of deliveries that all publish to a subject the runtime has not asked about yet (here,
/// the completion events of a new flow, kept in the emulator's stream) asks JetStream once which
/// stream takes it: the others wait for that answer instead of each sending the same request.
#[tokio::test]
async fn a_burst_of_deliveries_asks_jetstream_once_which_stream_takes_their_events() {
    let lab = lab().await;
    let running = triggers_integration::bench::noop_service(
        "burst",
        "noop",
        "burst.inbound",
        RuntimeConfig {
            max_concurrency: Some(64),
            ..config(&lab)
        },
    )
    .await;
    let deployed = lab
        .deploy(one_step("burst", "burst", "noop"))
        .await
        .unwrap();
    assert!(
        running
            .wait_for_flow("burst", deployed.flow.version, Duration::from_secs(5))
            .await
    );
    // Every stream lookup anyone makes, as the server receives it.
    let watcher = triggers_sdk::transport::connect(lab.url()).await.unwrap();
    let mut lookups = watcher.subscribe("$JS.API.STREAM.NAMES").await.unwrap();
    triggers_sdk::transport::round_trip(&watcher).await.unwrap();

    let lab_ref = &lab;
    let runs = futures::future::join_all(
        (0..64).map(|i| async move { lab_ref.trigger("burst", &json!({"n": i})).await.unwrap() }),
    )
    .await;
    for run in &runs {
        lab.wait_run_settled(run).await.unwrap();
    }
    let events_subject = subject::flow_events("burst").unwrap();
    let mut asked = 0;
    while let Ok(Some(request)) = tokio::time::timeout(
        Duration::from_millis(200),
        futures::StreamExt::next(&mut lookups),
    )
    .await
    {
        if String::from_utf8_lossy(&request.payload).contains(&events_subject) {
            asked += 1;
        }
    }
    assert_eq!(asked, 1, "lookups of {events_subject} for 64 deliveries");
    running.shutdown().await;
    lab.assert_conformant();
}

/// A completion event published without JetStream (no stream keeps the subject) carries no header,
/// as the Go SDK's events do: a `Nats-Msg-Id` serves only a stream's dedup. One a stream keeps
/// carries the `ev:` id that dedup needs.
#[tokio::test]
async fn an_event_carries_a_msg_id_only_where_a_stream_deduplicates_it() {
    use triggers_integration::bench;
    let server = bench::server().await;
    let client = triggers_sdk::transport::connect(server.url())
        .await
        .unwrap();
    let js = async_nats::jetstream::new(client.clone());
    for (name, kept) in [("plainev", false), ("keptev", true)] {
        let inbound = format!("{name}.inbound");
        let running =
            bench::stand_in(server.url(), name, &inbound, kept, RuntimeConfig::default()).await;
        let mut events = client
            .subscribe(subject::flow_events(name).unwrap())
            .await
            .unwrap();
        triggers_sdk::transport::round_trip(&client).await.unwrap();
        js.publish_with_headers(
            inbound,
            bench::envelope_headers(name, 1, "run-1", 0),
            br#"{"n":1}"#.to_vec().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
        let event = tokio::time::timeout(
            Duration::from_secs(10),
            futures::StreamExt::next(&mut events),
        )
        .await
        .expect("an event within 10 s")
        .unwrap();
        let decoded = triggers_sdk::wire::CompletionEvent::from_json(&event.payload).unwrap();
        assert_eq!(
            (decoded.node_id.as_str(), decoded.status.as_str()),
            ("noop", "succeeded")
        );
        let id = event
            .headers
            .as_ref()
            .and_then(|h| h.get(names::NATS_MSG_ID))
            .map(|v| v.as_str().to_owned());
        if kept {
            assert!(
                id.as_deref().is_some_and(|id| id.starts_with("ev:")),
                "{name}: {id:?}"
            );
        } else {
            assert!(
                event.headers.as_ref().is_none_or(|h| h.is_empty()),
                "{name}: {:?}",
                event.headers
            );
        }
        running.shutdown().await;
    }
}
