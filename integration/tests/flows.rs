//! Flows across services: chaining through the auto-derived result_event, condition and mapping
//! nodes, HTTP outputs, and the Durable Timer triplet accepted, refused and stripped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use triggers_emulator::DlqFilter;
use triggers_integration::{config, flow, lab, publish_js};
use triggers_sdk::runtime::{ActionContext, ActionDef, ActionError, DURABLE_TIMER_V1, Service};
use triggers_sdk::wire::durable_timer::{self, RootContext, TimerContext};
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::{Envelope, GoTime, Headers, ResultEvent};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[derive(Debug, Deserialize, JsonSchema)]
struct NewOrder {
    customer: String,
    amount: i64,
}

#[derive(Debug, Serialize, JsonSchema)]
struct OrderCreated {
    order_id: String,
    total: i64,
    priority: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ReceiptInput {
    order_id: String,
    total: i64,
}

#[derive(Debug, Serialize, JsonSchema)]
struct ReceiptSent {
    sent: bool,
}

type Seen = Arc<Mutex<Vec<(String, i64, Envelope)>>>;

fn orders() -> triggers_sdk::runtime::ServiceBuilder {
    Service::builder("orders", "1.0.0")
        .action(ActionDef::new(
            "create_order",
            |o: NewOrder, _ctx: ActionContext| async move {
                Ok::<_, ActionError>(OrderCreated {
                    order_id: format!("ord-{}", o.customer),
                    total: o.amount * 100,
                    priority: o.amount > 10,
                })
            },
        ))
        .nats_source("nats", "orders.inbound")
}

fn notify(seen: Seen) -> triggers_sdk::runtime::ServiceBuilder {
    Service::builder("notify", "1.0.0")
        .action(ActionDef::new(
            "send_receipt",
            move |r: ReceiptInput, ctx: ActionContext| {
                let seen = seen.clone();
                async move {
                    seen.lock()
                        .unwrap()
                        .push((r.order_id, r.total, ctx.envelope));
                    Ok::<_, ActionError>(ReceiptSent { sent: true })
                }
            },
        ))
        .nats_source("nats", "notify.inbound")
}

#[tokio::test]
async fn chained_actions_across_two_services_bind_through_the_derived_result_event() {
    let lab = lab().await;
    let seen: Seen = Arc::default();
    let orders = orders().config(config(&lab)).build().unwrap();
    // The upstream action declares its result event, derived from its output type.
    let declared =
        ResultEvent::from_map(orders.manifest().actions[0].result_event.as_ref().unwrap()).unwrap();
    let fields: Vec<&str> = declared.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(fields, ["order_id", "priority", "total"]);
    let _orders = orders.start().await.unwrap();
    let _notify = notify(seen.clone())
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();

    // The binding a studio makes from that result event: a mapping of its fields.
    let bind: serde_json::Map<String, Value> = declared
        .fields
        .iter()
        .filter(|f| f.name != "priority")
        .map(|f| (f.name.clone(), Value::from(format!("$.{}", f.name))))
        .collect();
    lab.deploy(flow(json!({"id": "checkout", "nodes": [
        {"id": "in", "type": "service-in", "service": "orders"},
        {"id": "create", "type": "action", "service": "orders", "action": "create_order"},
        {"id": "bind", "type": "mapping", "config": {"fields": bind}},
        {"id": "receipt", "type": "action", "service": "notify", "action": "send_receipt"}
    ], "edges": [
        {"id": "e1", "from": "in", "to": "create"}, {"id": "e2", "from": "create", "to": "bind"},
        {"id": "e3", "from": "bind", "to": "receipt"}
    ]})))
    .await
    .unwrap();
    let run = lab
        .trigger("checkout", &json!({"customer": "ada", "amount": 3}))
        .await
        .unwrap();
    let settled = lab.wait_run_settled(&run).await.unwrap();
    let services: Vec<(&str, &str)> = settled
        .timeline
        .iter()
        .filter(|e| e.service != "engine")
        .map(|e| (e.node_id.as_str(), e.service.as_str()))
        .collect();
    assert_eq!(
        services,
        [
            ("create", "orders"),
            ("bind", "orders"),
            ("receipt", "notify")
        ]
    );
    let seen = seen.lock().unwrap();
    assert_eq!((seen[0].0.as_str(), seen[0].1), ("ord-ada", 300));
    // The hop carried the run's envelope: same run and trace, the mapping as its source.
    assert_eq!(seen[0].2.flow_run_id, run.0);
    assert_eq!(seen[0].2.source_node_id, "bind");
    assert_eq!(seen[0].2.trace_id, settled.trace_id);
    lab.assert_conformant();
}

#[tokio::test]
async fn condition_and_mapping_nodes_shape_the_path() {
    let lab = lab().await;
    let seen: Seen = Arc::default();
    let _orders = orders()
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let _notify = notify(seen.clone())
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    lab.deploy(flow(json!({"id": "vip", "nodes": [
        {"id": "in", "type": "service-in", "service": "orders"},
        {"id": "create", "type": "action", "service": "orders", "action": "create_order"},
        {"id": "only_priority", "type": "condition", "config": {"path": "$.priority", "op": "eq", "value": true}},
        {"id": "shape", "type": "mapping", "config": {"fields": {"order_id": "$.order_id", "total": 1}}},
        {"id": "receipt", "type": "action", "service": "notify", "action": "send_receipt"}
    ], "edges": [
        {"id": "e1", "from": "in", "to": "create"}, {"id": "e2", "from": "create", "to": "only_priority"},
        {"id": "e3", "from": "only_priority", "to": "shape"}, {"id": "e4", "from": "shape", "to": "receipt"}
    ]})))
    .await
    .unwrap();
    let small = lab
        .trigger("vip", &json!({"customer": "bo", "amount": 2}))
        .await
        .unwrap();
    let big = lab
        .trigger("vip", &json!({"customer": "cy", "amount": 20}))
        .await
        .unwrap();
    let small = lab.wait_run_settled(&small).await.unwrap();
    let big = lab.wait_run_settled(&big).await.unwrap();
    assert_eq!(
        small.node_entries("only_priority").last().unwrap().status,
        "skipped"
    );
    assert!(small.node_entries("receipt").next().is_none());
    assert_eq!(
        big.node_entries("shape").last().unwrap().status,
        "succeeded"
    );
    assert_eq!(
        big.node_entries("receipt").last().unwrap().status,
        "succeeded"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].0.as_str(), seen[0].1),
        ("ord-cy", 1),
        "the mapping's literal and path"
    );
    lab.assert_conformant();
}

#[tokio::test]
async fn http_outputs_post_the_payload_with_the_canonical_headers_and_no_triplet() {
    let lab = lab().await;
    let hook = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/hook"))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&hook)
        .await;
    Mock::given(method("POST"))
        .and(path("/down"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&hook)
        .await;
    let _orders = orders()
        .capability(DURABLE_TIMER_V1)
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let out = |id: &str, url: String| {
        flow(json!({"id": id, "nodes": [
            {"id": "in", "type": "service-in", "service": "orders", "config": {"transport": "nats", "target": "orders.inbound"}},
            {"id": "create", "type": "action", "service": "orders", "action": "create_order"},
            {"id": "hook", "type": "output", "config": {"transport": "http", "target": url}},
            {"id": "later", "type": "timer", "config": {"delay_ms": 1000}}
        ], "edges": [
            {"id": "e1", "from": "in", "to": "create"}, {"id": "e2", "from": "create", "to": "hook"},
            {"id": "e3", "from": "create", "to": "later"}
        ]}))
    };
    // A Durable Timer lineage: the delivery carries the root triplet, which must not leak.
    let mut f = out("notify-http", format!("{}/hook", hook.uri()));
    f.body.nodes.push(serde_json::from_value(json!({"id": "in2", "type": "service-in", "service": "orders", "config": {"transport": "nats", "target": "orders.inbound"}})).unwrap());
    f.body
        .edges
        .push(serde_json::from_value(json!({"id": "e4", "from": "later", "to": "in2"})).unwrap());
    lab.deploy(f).await.unwrap();
    let run = lab
        .trigger("notify-http", &json!({"customer": "di", "amount": 1}))
        .await
        .unwrap();
    assert_eq!(
        lab.wait_for_node(&run, "hook").await.unwrap().status,
        "succeeded"
    );
    let requests = hook.received_requests().await.unwrap();
    let request = &requests[0];
    let body: Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(
        body,
        json!({"order_id": "ord-di", "total": 100, "priority": false})
    );
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    assert_eq!(
        header("X-Triggers-Flow-Run-Id").as_deref(),
        Some(run.0.as_str())
    );
    assert_eq!(header("X-Triggers-Source-Node-Id").as_deref(), Some("hook"));
    assert!(header("X-Triggers-Traceparent").is_some());
    for name in names::DURABLE_TIMER_TRIPLET {
        assert_eq!(header(name), None, "{name} leaked into an HTTP output");
    }
    // A failing endpoint fails the node and dead-letters the payload.
    let mut down = out("down", format!("{}/down", hook.uri()));
    down.body.nodes.retain(|n| n.id != "later");
    down.body.edges.retain(|e| e.id != "e3");
    lab.deploy(down).await.unwrap();
    let run = lab
        .trigger("down", &json!({"customer": "ed", "amount": 1}))
        .await
        .unwrap();
    let d = lab.wait_dlq(DlqFilter::run(&run)).await.unwrap();
    assert_eq!(d.subject, "triggers.v2.dlq.orders.node_failed");
    assert!(d.entry.unwrap().err_msg.contains("503"));
    lab.assert_conformant();
}

fn root_delivery(flow_id: &str, run: &str, node: &str, body: &[u8]) -> Headers {
    let e = Envelope {
        flow_run_id: run.into(),
        flow_id: flow_id.into(),
        flow_version: 1,
        idempotency_key: format!("{run}:{node}"),
        source_node_id: node.into(),
        emitted_at: GoTime::now(),
        ..Envelope::default()
    };
    let mut h = e.to_headers();
    h.insert(names::NATS_MSG_ID, e.nats_msg_id());
    durable_timer::write_triplet(
        &mut h,
        &TimerContext::Root(RootContext::new(flow_id, 1, run)),
        body,
    );
    h
}

#[tokio::test]
async fn the_durable_timer_triplet_is_accepted_refused_and_stripped() {
    let lab = lab().await;
    let seen: Seen = Arc::default();
    let _orders = orders()
        .capability(DURABLE_TIMER_V1)
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let _notify = notify(seen.clone())
        .capability(DURABLE_TIMER_V1)
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    lab.deploy(flow(json!({"id": "remind", "nodes": [
        {"id": "in", "type": "service-in", "service": "orders", "config": {"transport": "nats", "target": "orders.inbound"}},
        {"id": "create", "type": "action", "service": "orders", "action": "create_order"},
        {"id": "wait", "type": "timer", "config": {"delay_ms": 3600000}},
        {"id": "in2", "type": "service-in", "service": "notify", "config": {"transport": "nats", "target": "notify.inbound"}},
        {"id": "receipt", "type": "action", "service": "notify", "action": "send_receipt"}
    ], "edges": [
        {"id": "e1", "from": "in", "to": "create"}, {"id": "e2", "from": "create", "to": "wait"},
        {"id": "e3", "from": "wait", "to": "in2", "mapping": {"fields": {"order_id": "$.customer", "total": "$.amount"}}},
        {"id": "e4", "from": "in2", "to": "receipt"}
    ]})))
    .await
    .unwrap();
    // Accepted: the root delivery runs; the elapsed delivery an hour later (virtual) runs too.
    let run = lab
        .trigger("remind", &json!({"customer": "fay", "amount": 7}))
        .await
        .unwrap();
    lab.wait_run_idle(&run).await.unwrap();
    lab.advance(Duration::from_secs(3600)).await.unwrap();
    lab.wait_run_settled(&run).await.unwrap();
    {
        let seen = seen.lock().unwrap();
        assert_eq!((seen[0].0.as_str(), seen[0].1), ("fay", 7));
        // Stripped: the handler's envelope is the ten fields, nothing of the triplet.
        assert_eq!(seen[0].2.source_node_id, "in2");
    }

    // Refused: a payload that does not match its hash header; the handler is not called.
    let body = br#"{"customer":"gus","amount":1}"#;
    let mut headers = root_delivery("remind", "run-tampered", "in", body);
    headers.insert(
        names::DURABLE_TIMER_PAYLOAD_SHA256,
        durable_timer::payload_sha256(b"something else"),
    );
    publish_js(lab.url(), "orders.inbound", &headers, body).await;
    let d = lab.wait_dlq(DlqFilter::run("run-tampered")).await.unwrap();
    assert_eq!(d.subject, "triggers.v2.dlq.orders.create_order");
    let entry = d.entry.unwrap();
    assert_eq!(entry.kind, "durable_timer_rejected");
    assert!(
        entry.err_msg.contains("does not match the payload"),
        "{}",
        entry.err_msg
    );
    assert!(
        lab.run("run-tampered")
            .map(|r| r.timeline.is_empty())
            .unwrap_or(true),
        "no node ran"
    );

    // Refused: a service without durable_timer.v1 gets a delivery carrying a valid triplet.
    let plain_seen: Seen = Arc::default();
    let plain = Service::builder("plain", "1.0.0")
        .action(ActionDef::new("send_receipt", {
            let plain_seen = plain_seen.clone();
            move |r: ReceiptInput, ctx: ActionContext| {
                let plain_seen = plain_seen.clone();
                async move {
                    plain_seen
                        .lock()
                        .unwrap()
                        .push((r.order_id, r.total, ctx.envelope));
                    Ok::<_, ActionError>(ReceiptSent { sent: true })
                }
            }
        }))
        .nats_source("nats", "plain.inbound")
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    lab.deploy(flow(json!({"id": "plainflow", "nodes": [
        {"id": "in", "type": "service-in", "service": "plain"},
        {"id": "receipt", "type": "action", "service": "plain", "action": "send_receipt"}
    ], "edges": [{"id": "e1", "from": "in", "to": "receipt"}]})))
        .await
        .unwrap();
    assert!(
        plain
            .wait_for_flow("plainflow", 1, Duration::from_secs(15))
            .await
    );
    let body = br#"{"order_id":"x","total":1}"#;
    publish_js(
        lab.url(),
        "plain.inbound",
        &root_delivery("plainflow", "run-nocap", "in", body),
        body,
    )
    .await;
    let d = lab.wait_dlq(DlqFilter::run("run-nocap")).await.unwrap();
    assert_eq!(d.entry.unwrap().kind, "durable_timer_rejected");
    assert!(plain_seen.lock().unwrap().is_empty());
    // Only the hand-made deliveries (a peer sending the triplet) are flagged; the runtime's own
    // traffic conforms.
    let runtime_violations: Vec<_> = lab
        .violations()
        .into_iter()
        .filter(|v| v.subject != "orders.inbound" && v.subject != "plain.inbound")
        .collect();
    assert!(
        runtime_violations.is_empty(),
        "{}",
        triggers_emulator::describe_violations(&runtime_violations)
    );
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_work_and_says_goodbye() {
    let lab = lab().await;
    let started = Arc::new(tokio::sync::Notify::new());
    let service = Service::builder("slow", "1.0.0")
        .action(
            ActionDef::new("work", {
                let started = started.clone();
                move |_v: Value, _ctx: ActionContext| {
                    let started = started.clone();
                    async move {
                        started.notify_one();
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        Ok::<_, ActionError>(json!({"done": true}))
                    }
                }
            })
            .result_event(triggers_sdk::runtime::ResultEventConfig::Off),
        )
        .nats_source("nats", "slow.inbound")
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    lab.deploy(flow(json!({"id": "job", "nodes": [
        {"id": "in", "type": "service-in", "service": "slow"},
        {"id": "work", "type": "action", "service": "slow", "action": "work"}
    ], "edges": [{"id": "e1", "from": "in", "to": "work"}]})))
        .await
        .unwrap();
    let run = lab.trigger("job", &json!({})).await.unwrap();
    started.notified().await;
    let report = service.shutdown().await;
    assert!(report.drained, "{report:?}");
    assert_eq!(
        lab.wait_for_node(&run, "work").await.unwrap().status,
        "succeeded"
    );
    let last = lab
        .wait_for_heartbeat("slow", |hb| hb.shutting_down)
        .await
        .unwrap();
    assert!(last.shutting_down);
    lab.assert_conformant();
}

#[tokio::test]
async fn a_lookup_node_calls_the_services_runtime_lookup_and_merges_its_result() {
    let lab = lab().await;
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let _crm = Service::builder("crm", "1.0.0")
        .lookup(
            triggers_sdk::runtime::LookupDef::new("user_by_id", |params: Value| async move {
                let id = params["id"].as_str().unwrap_or_default().to_owned();
                Ok::<_, ActionError>(json!({"name": format!("user {id}"), "tier": "gold"}))
            })
            .param("id", "string", true)
            .result_field("name", "string", true)
            .result_field("tier", "string", false),
        )
        .action(
            ActionDef::new("greet", {
                let seen = seen.clone();
                move |v: Value, _ctx: ActionContext| {
                    let seen = seen.clone();
                    async move {
                        seen.lock().unwrap().push(v);
                        Ok::<_, ActionError>(json!({"ok": true}))
                    }
                }
            })
            .result_event(triggers_sdk::runtime::ResultEventConfig::Off),
        )
        .nats_source("nats", "crm.inbound")
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    lab.deploy(flow(json!({"id": "welcome", "nodes": [
        {"id": "in", "type": "service-in", "service": "crm"},
        {"id": "who", "type": "lookup", "config": {"lookup": "user_by_id", "params": {"id": "$.user"}}},
        {"id": "greet", "type": "action", "service": "crm", "action": "greet"}
    ], "edges": [{"id": "e1", "from": "in", "to": "who"}, {"id": "e2", "from": "who", "to": "greet"}]})))
    .await
    .unwrap();
    let run = lab
        .trigger("welcome", &json!({"user": "u7"}))
        .await
        .unwrap();
    let settled = lab.wait_run_settled(&run).await.unwrap();
    assert_eq!(
        settled.node_entries("who").last().unwrap().status,
        "succeeded"
    );
    assert_eq!(
        seen.lock().unwrap()[0],
        json!({"user": "u7", "name": "user u7", "tier": "gold"})
    );
    // A lookup the service does not declare is refused at release.
    let err = lab
        .deploy(flow(json!({"id": "bad", "nodes": [
            {"id": "in", "type": "service-in", "service": "crm"},
            {"id": "who", "type": "lookup", "config": {"lookup": "nope"}}
        ], "edges": [{"id": "e1", "from": "in", "to": "who"}]})))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unknown_lookup"), "{err}");
    lab.assert_conformant();
}
