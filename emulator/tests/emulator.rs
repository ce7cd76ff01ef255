//! The emulator on a real nats-server, with raw async-nats clients playing the SDK.

use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;
use serde_json::{Value, json};
use triggers_emulator::{
    DlqFilter, EmulatorConfig, EmulatorError, HashMismatchPolicy, ReleaseCode, WaitError,
};
use triggers_sdk::transport;
use triggers_sdk::wire::durable_timer::{self, TimerContext};
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::{
    DlqEntry, Envelope, GoTime, Headers, Manifest, RawJson, RegisterReply, subject,
};

use triggers_testkit::peer::*;
use triggers_testkit::{lab, lab_with};

#[tokio::test]
async fn a_user_test_reads_like_this() {
    // Start the harness, register, deploy, trigger, wait for the node, assert. No sleeps.
    let lab = lab().await;
    let sdk = connect(&lab).await;
    let reply = register(&sdk, &manifest("shop", &["charge"], &[])).await;
    assert_eq!(reply.error, "");
    lab.deploy(one_step_flow("order", "shop", "charge"))
        .await
        .unwrap();

    let run = lab.trigger("order", &json!({"n": 3})).await.unwrap();
    let delivery = next_delivery(&sdk, "shop").await;
    let envelope = Envelope::from_headers(&delivery.headers).unwrap();
    assert_eq!(envelope.flow_run_id, run.0);
    assert_eq!(envelope.source_node_id, "in");
    assert_eq!(delivery.payload, br#"{"n":3}"#);
    succeed(&sdk, &envelope, "shop", "step").await;

    let step = lab.wait_for_node(&run, "step").await.unwrap();
    assert_eq!(step.status, "succeeded");
    let settled = lab.wait_run_settled(&run).await.unwrap();
    assert_eq!(format!("{:?}", settled.status), "Succeeded");
    lab.assert_conformant();
}

#[tokio::test]
async fn registration_success_wrong_major_hash_mismatch_and_malformed_json() {
    let lab = lab().await;
    let sdk = connect(&lab).await;

    let ok = manifest("alpha", &["a"], &[]);
    let reply = register(&sdk, &ok).await;
    assert_eq!(reply.error, "");
    assert!(reply.flows.is_empty());
    assert_eq!(
        lab.wait_for_registration("alpha")
            .await
            .unwrap()
            .manifest
            .full()
            .unwrap(),
        ok
    );
    // The inbound stream exists, over the service's NATS source.
    let js = jetstream::new(sdk.clone());
    let mut stream = js.get_stream("triggers-sources-alpha").await.unwrap();
    assert_eq!(
        stream.info().await.unwrap().config.subjects,
        ["alpha.inbound"]
    );

    let mut v2 = manifest("beta", &["a"], &[]);
    v2.protocol_version = "2.0.0".into();
    v2.seal().unwrap();
    let reply = register(&sdk, &v2).await;
    assert!(
        reply.error.contains("protocol major 2 is not supported"),
        "{}",
        reply.error
    );

    let mut wrong = manifest("gamma", &["a"], &[]);
    wrong.manifest_hash = format!("sha256:{}", "0".repeat(64));
    let reply = register(&sdk, &wrong).await;
    assert!(
        reply.error.contains("manifest_hash mismatch"),
        "{}",
        reply.error
    );
    assert!(
        reply.error.contains(&wrong.compute_hash().unwrap()),
        "{}",
        reply.error
    );

    for bad in [&b"{not json"[..], b"[]", b"", br#"{"service": 3}"#] {
        let reply = register_bytes(&sdk, bad.to_vec()).await;
        assert!(
            reply.error.starts_with("invalid manifest"),
            "{}",
            reply.error
        );
    }
    // Still serving.
    let reply = register(&sdk, &manifest("delta", &["a"], &[])).await;
    assert_eq!(reply.error, "");
    assert!(!lab.services().contains_key("beta"));
    assert!(!lab.services().contains_key("gamma"));
}

#[tokio::test]
async fn a_hash_mismatch_can_be_accepted_and_recorded() {
    let lab = lab_with(EmulatorConfig {
        hash_mismatch: HashMismatchPolicy::Record,
        ..Default::default()
    })
    .await;
    let sdk = connect(&lab).await;
    let mut wrong = manifest("gamma", &["a"], &[]);
    wrong.manifest_hash = format!("sha256:{}", "1".repeat(64));
    assert_eq!(register(&sdk, &wrong).await.error, "");
    let violations = lab.violations();
    assert!(
        violations
            .iter()
            .any(|v| v.rule == "manifest_hash_mismatch"),
        "{violations:?}"
    );
}

#[tokio::test]
async fn fetch_returns_the_manifest_or_an_error() {
    let lab = lab().await;
    let sdk = connect(&lab).await;
    let m = manifest("alpha", &["a"], &[]);
    register(&sdk, &m).await;
    let reply = sdk
        .request(
            subject::MANIFEST_FETCH,
            br#"{"service":"alpha"}"#.to_vec().into(),
        )
        .await
        .unwrap();
    assert_eq!(Manifest::from_json(&reply.payload).unwrap(), m);
    let reply = sdk
        .request(
            subject::MANIFEST_FETCH,
            br#"{"service":"nobody"}"#.to_vec().into(),
        )
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert!(
        v["error"].as_str().unwrap().contains("unknown service"),
        "{v}"
    );
}

#[tokio::test]
async fn every_replica_receives_every_broadcast() {
    let lab = lab().await;
    let sdk = connect(&lab).await;
    register(&sdk, &manifest("a", &["x"], &[])).await;
    register(&sdk, &manifest("b", &["y"], &[])).await;
    // Two replicas of service a, each with plain subscriptions on both broadcast subjects.
    let r1 = connect(&lab).await;
    let r2 = connect(&lab).await;
    let mut subs = Vec::new();
    for c in [&r1, &r2] {
        subs.push(c.subscribe("triggers.v2.flow.broadcast.a").await.unwrap());
        subs.push(c.subscribe(subject::FLOW_BROADCAST_ALL).await.unwrap());
        // In place at the server, not only sent (async-nats' flush only writes the socket).
        triggers_sdk::transport::round_trip(c).await.unwrap();
    }
    let single = lab.deploy(one_step_flow("solo", "a", "x")).await.unwrap();
    assert_eq!(single.broadcast_subject, "triggers.v2.flow.broadcast.a");
    let cross = lab
        .deploy(flow(json!({"id": "cross", "nodes": [
            {"id": "in", "type": "service-in", "service": "a"},
            {"id": "x", "type": "action", "service": "a", "action": "x"},
            {"id": "y", "type": "action", "service": "b", "action": "y"}
        ], "edges": [{"id": "e1", "from": "in", "to": "x"}, {"id": "e2", "from": "x", "to": "y"}]})))
        .await
        .unwrap();
    assert_eq!(cross.broadcast_subject, subject::FLOW_BROADCAST_ALL);
    // Each replica got the single-service flow on its own subject and the cross one on .all.
    for (i, sub) in subs.iter_mut().enumerate() {
        let msg = tokio::time::timeout(Duration::from_secs(15), sub.next())
            .await
            .unwrap_or_else(|_| panic!("subscriber {i} got nothing"))
            .unwrap();
        let env = triggers_sdk::wire::FlowEnvelope::from_json(&msg.payload).unwrap();
        assert_eq!(env.id, if i % 2 == 0 { "solo" } else { "cross" });
        // The node resolved the service's inbound subject at release.
        assert!(msg.payload.windows(9).any(|w| w == b"a.inbound"));
    }
    // A registration afterwards gets the flows that involve the service.
    let reply = register(&sdk, &manifest("b", &["y"], &[])).await;
    assert_eq!(
        reply
            .flows
            .iter()
            .map(|f| f.id.as_str())
            .collect::<Vec<_>>(),
        ["cross"]
    );
}

#[tokio::test]
async fn every_release_code() {
    let lab = lab().await;
    let sdk = connect(&lab).await;
    let dt = ["durable_timer.v1"];
    register(&sdk, &manifest("a", &["x"], &dt)).await;
    register(&sdk, &manifest("b", &["y"], &dt)).await;
    register(&sdk, &manifest("plain", &["z"], &[])).await;
    let mut no_source = manifest("nosrc", &["w"], &[]);
    no_source.service_sources[0].transport = "http".into();
    no_source.seal().unwrap();
    register(&sdk, &no_source).await;

    let timer_flow = |svc_b: &str, transport: &str, target: &str| {
        flow(json!({"id": "dt", "nodes": [
            {"id": "in", "type": "service-in", "service": "a", "config": {"transport": "nats", "target": "a.inbound"}},
            {"id": "x", "type": "action", "service": "a", "action": "x"},
            {"id": "wait", "type": "timer", "config": {"delay_ms": 1000}},
            {"id": "in2", "type": "service-in", "service": svc_b, "config": {"transport": transport, "target": target}},
            {"id": "y", "type": "action", "service": svc_b, "action": if svc_b == "plain" { "z" } else { "y" }}
        ], "edges": [
            {"id": "e1", "from": "in", "to": "x"}, {"id": "e2", "from": "x", "to": "wait"},
            {"id": "e3", "from": "wait", "to": "in2"}, {"id": "e4", "from": "in2", "to": "y"}
        ]}))
    };
    let code = |r: Result<_, Vec<triggers_emulator::ReleaseProblem>>| -> Vec<ReleaseCode> {
        r.err()
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.code)
            .collect()
    };
    assert!(
        lab.check_release(&timer_flow("b", "nats", "b.inbound"))
            .is_ok()
    );
    assert_eq!(
        code(lab.check_release(&timer_flow("b", "nats", "b.elsewhere"))),
        [ReleaseCode::DurableTimerTargetMismatch],
        "matching only the transport kind"
    );
    assert_eq!(
        code(lab.check_release(&timer_flow("b", "nats", ""))),
        [ReleaseCode::DurableTimerTargetMissing]
    );
    assert_eq!(
        code(lab.check_release(&timer_flow("b", "http", "b.inbound"))),
        [ReleaseCode::DurableTimerTransportNotNats]
    );
    assert_eq!(
        code(lab.check_release(&timer_flow("plain", "nats", "plain.inbound"))),
        [ReleaseCode::DurableTimerCapabilityMissing]
    );
    assert_eq!(
        code(lab.check_release(&timer_flow("ghost", "nats", "ghost.inbound"))),
        [ReleaseCode::UnknownService]
    );
    assert_eq!(
        code(lab.check_release(&one_step_flow("f", "a", "nope"))),
        [ReleaseCode::UnknownAction]
    );
    assert_eq!(
        code(lab.check_release(&one_step_flow("f", "nosrc", "w"))),
        [ReleaseCode::NoNatsSource]
    );
    let mut bad_target = one_step_flow("f", "a", "x");
    bad_target.body.nodes[0]
        .config
        .insert("target".into(), json!("a.nowhere"));
    assert_eq!(
        code(lab.check_release(&bad_target)),
        [ReleaseCode::ServiceInTargetUnknown]
    );
    let mut unsupported = manifest("nomap", &["m"], &[]);
    unsupported.supports_nodes = vec![];
    unsupported.seal().unwrap();
    register(&sdk, &unsupported).await;
    let with_mapping = flow(json!({"id": "m", "nodes": [
        {"id": "in", "type": "service-in", "service": "nomap"},
        {"id": "map", "type": "mapping", "config": {"fields": {"k": "$.v"}}},
        {"id": "lk", "type": "lookup", "service": "a", "config": {"lookup": "missing"}}
    ], "edges": [{"id": "e1", "from": "in", "to": "map"}, {"id": "e2", "from": "map", "to": "lk"}]}));
    assert_eq!(
        code(lab.check_release(&with_mapping)),
        [ReleaseCode::UnsupportedNode, ReleaseCode::UnknownLookup]
    );
    let broken = flow(
        json!({"id": "broken", "nodes": [{"id": "x", "type": "action", "service": "a", "action": "x"}], "edges": [{"id": "e", "from": "x", "to": "ghost"}]}),
    );
    assert!(code(lab.check_release(&broken)).contains(&ReleaseCode::InvalidFlow));
    // deploy refuses with the same codes, and says them.
    let err = lab
        .deploy(timer_flow("b", "nats", "b.elsewhere"))
        .await
        .unwrap_err();
    assert!(matches!(err, EmulatorError::Release(_)));
    assert!(
        err.to_string().contains("durable_timer_target_mismatch"),
        "{err}"
    );
}

#[tokio::test]
async fn a_durable_timer_run_from_root_delivery_to_elapsed_delivery() {
    let lab = lab().await;
    let sdk = connect(&lab).await;
    let dt = ["durable_timer.v1"];
    register(&sdk, &manifest("a", &["x"], &dt)).await;
    register(&sdk, &manifest("b", &["y"], &dt)).await;
    lab.deploy(flow(json!({"id": "remind", "nodes": [
        {"id": "in", "type": "service-in", "service": "a", "config": {"transport": "nats", "target": "a.inbound"}},
        {"id": "x", "type": "action", "service": "a", "action": "x"},
        {"id": "wait", "type": "timer", "config": {"delay_ms": 86400000}},
        {"id": "in2", "type": "service-in", "service": "b", "config": {"transport": "nats", "target": "b.inbound"}},
        {"id": "y", "type": "action", "service": "b", "action": "y"}
    ], "edges": [
        {"id": "e1", "from": "in", "to": "x"}, {"id": "e2", "from": "x", "to": "wait"},
        {"id": "e3", "from": "wait", "to": "in2", "mapping": {"fields": {"who": "$.user"}}},
        {"id": "e4", "from": "in2", "to": "y"}
    ]})))
    .await
    .unwrap();

    let started = lab.now();
    let run = lab
        .trigger("remind", &json!({"user": "ada", "n": 1}))
        .await
        .unwrap();
    // Root delivery: the envelope and the root-context triplet, valid against the exact bytes.
    let root = next_delivery(&sdk, "a").await;
    let ctx = durable_timer::read_triplet(&root.headers, &root.payload)
        .unwrap()
        .unwrap();
    let TimerContext::Root(rc) = &ctx else {
        panic!("a root context, got {ctx:?}")
    };
    assert_eq!(rc.root_execution_id, run.0);
    assert_eq!(
        root.headers.get(names::NATS_MSG_ID),
        root.headers.get(names::IDEMPOTENCY_KEY)
    );
    let envelope = Envelope::from_headers(&root.headers).unwrap();
    succeed(&sdk, &envelope, "a", "x").await;

    // The engine arms the timer; the run waits; nothing is delivered until the clock moves.
    let waiting = lab.wait_run_idle(&run).await.unwrap();
    assert_eq!(waiting.timers.len(), 1);
    assert!(
        lab.advance(Duration::from_secs(3600))
            .await
            .unwrap()
            .is_empty()
    );
    let fired = lab.advance(Duration::from_secs(86400)).await.unwrap();
    assert_eq!(fired.len(), 1);
    assert!(lab.now().unix_nanos() - started.unix_nanos() >= 90_000 * 1_000_000_000);

    // Elapsed delivery to the resume target: mapped snapshot, elapsed context, valid triplet.
    let elapsed = next_delivery(&sdk, "b").await;
    assert_eq!(elapsed.subject, "b.inbound");
    assert_eq!(elapsed.payload, br#"{"who":"ada"}"#);
    let ctx = durable_timer::read_triplet(&elapsed.headers, &elapsed.payload)
        .unwrap()
        .unwrap();
    let TimerContext::Elapsed(ec) = ctx else {
        panic!("an elapsed context")
    };
    assert_eq!(ec.timer_node_id, "wait");
    assert_eq!(ec.resume_edge_id, "e3");
    assert_eq!(ec.occurrence, 1);
    assert_eq!(
        ec.snapshot_sha256,
        durable_timer::payload_sha256(br#"{"n":1,"user":"ada"}"#)
    );
    let env2 = Envelope::from_headers(&elapsed.headers).unwrap();
    assert_eq!(env2.source_node_id, "in2");
    assert_eq!(env2.flow_run_id, run.0);
    succeed(&sdk, &env2, "b", "y").await;
    let done = lab.wait_run_settled(&run).await.unwrap();
    assert!(done.timers.is_empty());
    lab.assert_conformant();
}

async fn publish_dlq(sdk: &async_nats::Client, subject: &str, msg_id: &str, run: &str) {
    let entry = DlqEntry {
        kind: "action_failed".into(),
        envelope: Envelope {
            flow_run_id: run.into(),
            flow_id: "f".into(),
            flow_version: 1,
            idempotency_key: "k1".into(),
            source_node_id: "in".into(),
            emitted_at: GoTime::now(),
            ..Envelope::default()
        },
        body: RawJson::from_text(r#"{"n":1}"#).unwrap(),
        err_msg: "boom".into(),
        occurred_at: GoTime::now(),
    };
    let mut h = Headers::new();
    h.insert(names::NATS_MSG_ID, msg_id);
    let js = jetstream::new(sdk.clone());
    js.publish_with_headers(
        subject.to_owned(),
        transport::to_nats(&h).unwrap(),
        entry.to_json().unwrap().into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
}

#[tokio::test]
async fn dlq_entries_are_deduplicated_by_nats_msg_id() {
    let lab = lab().await;
    let sdk = connect(&lab).await;
    register(&sdk, &manifest("a", &["x"], &[])).await;
    let subject = "triggers.v2.dlq.a.x";
    publish_dlq(&sdk, subject, "k1:dlq:100", "r1").await;
    publish_dlq(&sdk, subject, "k1:dlq:100", "r1").await; // the same write again: collapses
    publish_dlq(&sdk, subject, "k1:dlq:200", "r2").await;
    let both = lab
        .wait_dlq_count(DlqFilter::subject(subject), 2)
        .await
        .unwrap();
    assert_eq!(both[0].msg_id, "k1:dlq:100");
    assert_eq!(both[1].msg_id, "k1:dlq:200");
    assert_eq!(both[0].entry.as_ref().unwrap().err_msg, "boom");
    // Nothing more arrives: the duplicate was dropped by JetStream, not by the recorder.
    let js = jetstream::new(sdk.clone());
    let mut stream = js.get_stream(triggers_emulator::DLQ_STREAM).await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 2);
    assert_eq!(lab.dlq().len(), 2);
    lab.wait_dlq(DlqFilter::run("r2").with_kind("action_failed"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_wait_that_times_out_says_what_did_arrive() {
    let lab = lab_with(EmulatorConfig {
        wait_timeout: Duration::from_millis(300),
        ..Default::default()
    })
    .await;
    let sdk = connect(&lab).await;
    register(&sdk, &manifest("a", &["x"], &[])).await;
    lab.deploy(one_step_flow("f", "a", "x")).await.unwrap();
    let run = lab.trigger("f", &json!({})).await.unwrap();
    let envelope = Envelope::from_headers(&next_delivery(&sdk, "a").await.headers).unwrap();
    complete(
        &sdk,
        &envelope,
        "a",
        "step",
        "action",
        "retrying",
        "first attempt: boom",
    )
    .await;
    // wait_for_node ignores `retrying`; the timeout shows the timeline, with the error.
    let err = lab.wait_for_node(&run, "step").await.unwrap_err();
    let WaitError::Timeout { saw, .. } = &err;
    assert!(saw.contains("retrying: first attempt: boom"), "{err}");
    assert!(saw.contains("pending: {\"step\"}"), "{err}");
    let err = lab
        .with_wait_timeout(Duration::from_millis(120))
        .wait_dlq(DlqFilter::subject("triggers.v2.dlq.a.x"))
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("waited 120ms"), "{err}");
    assert!(
        lab.describe_run(&run.0)
            .contains("retrying: first attempt: boom")
    );
    assert!(
        err.to_string().contains("nothing of that kind arrived"),
        "{err}"
    );
}

#[tokio::test]
async fn conformance_violations_are_caught_on_the_wire() {
    let lab = lab().await;
    let sdk = connect(&lab).await;
    register(&sdk, &manifest("a", &["x"], &[])).await;
    // A heartbeat with 9-digit padded time (Python's habit, not Go's) and keys out of order.
    sdk.publish(
        subject::HEARTBEAT,
        br#"{"service":"a","service_version":"1.0.0","manifest_hash":"","started_at":"2026-05-26T14:30:45.100000000Z","now":"2026-05-26T14:30:46Z","shutting_down":false}"#.to_vec().into(),
    )
    .await
    .unwrap();
    // An SDK writing to the orchestrator's source DLQ.
    sdk.publish("triggers.v2.dlq.source.src1", b"{}".to_vec().into())
        .await
        .unwrap();
    // A completion event with a result body.
    sdk.publish(
        "triggers.v2.flow.events.f",
        br#"{"flow_run_id":"r","flow_id":"f","flow_version":1,"node_id":"n","node_type":"action","service":"a","started_at":"2026-05-26T14:30:45Z","finished_at":"2026-05-26T14:30:45Z","status":"succeeded","result":{"x":1}}"#.to_vec().into(),
    )
    .await
    .unwrap();
    // A DLQ publish with a lowercase nats-msg-id (the server ignores it for dedup).
    let mut h = async_nats::HeaderMap::new();
    h.insert("nats-msg-id", "k:dlq:1");
    sdk.publish_with_headers("triggers.v2.dlq.a.x", h, b"{}".to_vec().into())
        .await
        .unwrap();
    sdk.flush().await.unwrap();
    let rules = [
        "time_not_go_text",
        "source_dlq_publish",
        "completion_has_result",
        "nats_msg_id_spelling",
    ];
    for rule in rules {
        let v = lab.wait_for_violation(rule).await.unwrap();
        assert!(
            !v.payload.is_empty() || rule == "nats_msg_id_spelling",
            "the offending bytes are kept"
        );
    }
    let emulator = lab.emulator().clone();
    let text = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        emulator.assert_conformant()
    }))
    .unwrap_err();
    let text = text.downcast_ref::<String>().unwrap();
    assert!(text.contains("source_dlq_publish"), "{text}");
}

/// Completion events and DLQ entries are judged once, as their stream stored them: the plain
/// subscription that also receives them drops them, and a retransmission the stream deduplicates
/// is neither recorded nor judged again. A subject no stream keeps is still judged as it arrives.
#[tokio::test]
async fn a_message_a_stream_keeps_is_judged_once_as_stored() {
    let lab = lab().await;
    let sdk = connect(&lab).await;
    register(&sdk, &manifest("a", &["x"], &[])).await;
    let event: &[u8] = br#"{"flow_run_id":"r","flow_id":"f","flow_version":1,"node_id":"n","node_type":"action","service":"a","started_at":"2026-05-26T14:30:45Z","finished_at":"2026-05-26T14:30:45Z","status":"succeeded","result":{"x":1}}"#;
    let (events, dlq) = ("triggers.v2.flow.events.f", "triggers.v2.dlq.a.x");
    // Not a subject of the table, and no stream keeps it: judged from the subscription.
    sdk.publish("triggers.v2.flow.events", b"{}".to_vec().into())
        .await
        .unwrap();
    // The same event three times (a publisher retrying), the same DLQ entry twice, then a last
    // event and entry: once those are judged, everything before them in their streams is.
    let sends: [(&str, &str, &[u8]); 7] = [
        (events, "ev-1", event),
        (events, "ev-1", event),
        (events, "ev-1", event),
        (dlq, "k:dlq:1", b"{}"),
        (dlq, "k:dlq:1", b"{}"),
        (events, "ev-2", event),
        (dlq, "k:dlq:2", b"{}"),
    ];
    for (subject, id, body) in sends {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", id);
        sdk.publish_with_headers(subject, headers, body.to_vec().into())
            .await
            .unwrap();
    }
    sdk.flush().await.unwrap();
    lab.wait_for_violation("unknown_subject").await.unwrap();
    // The rules the message with `Nats-Msg-Id` `id` broke, once per time it was judged.
    let rules_of = |id: &str| -> Vec<&'static str> {
        lab.violations()
            .iter()
            .filter(|v| v.headers.iter().any(|(_, value)| value == id))
            .map(|v| v.rule)
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while rules_of("ev-2").is_empty() || lab.dlq().len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the last event and entry were not judged"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(rules_of("ev-1"), ["completion_has_result"]);
    assert_eq!(rules_of("ev-2"), ["completion_has_result"]);
    let stored = lab.completions();
    assert_eq!(stored.len(), 2, "one record per stored event: {stored:?}");
    assert!(!rules_of("k:dlq:1").is_empty(), "the entry is judged");
    assert_eq!(
        rules_of("k:dlq:1"),
        rules_of("k:dlq:2"),
        "each entry judged once, by the same rules"
    );
}

async fn timer_run_fires_by_itself(config: EmulatorConfig, delay_ms: u64) {
    let lab = lab_with(config).await;
    let sdk = connect(&lab).await;
    let dt = ["durable_timer.v1"];
    register(&sdk, &manifest("a", &["x"], &dt)).await;
    lab.deploy(flow(json!({"id": "tick", "nodes": [
        {"id": "in", "type": "service-in", "service": "a", "config": {"transport": "nats", "target": "a.inbound"}},
        {"id": "x", "type": "action", "service": "a", "action": "x"},
        {"id": "wait", "type": "timer", "config": {"delay_ms": delay_ms}},
        {"id": "in2", "type": "service-in", "service": "a", "config": {"transport": "nats", "target": "a.inbound"}},
        {"id": "y", "type": "action", "service": "a", "action": "x"}
    ], "edges": [
        {"id": "e1", "from": "in", "to": "x"}, {"id": "e2", "from": "x", "to": "wait"},
        {"id": "e3", "from": "wait", "to": "in2"}, {"id": "e4", "from": "in2", "to": "y"}
    ]})))
    .await
    .unwrap();
    let run = lab.trigger("tick", &json!({})).await.unwrap();
    let envelope = Envelope::from_headers(&next_delivery(&sdk, "a").await.headers).unwrap();
    succeed(&sdk, &envelope, "a", "x").await;
    // Nobody advances the clock: the elapsed delivery arrives anyway.
    let elapsed = next_delivery(&sdk, "a").await;
    let ctx = durable_timer::read_triplet(&elapsed.headers, &elapsed.payload)
        .unwrap()
        .unwrap();
    assert!(matches!(ctx, TimerContext::Elapsed(_)));
    let env2 = Envelope::from_headers(&elapsed.headers).unwrap();
    succeed(&sdk, &env2, "a", "y").await;
    lab.wait_run_settled(&run).await.unwrap();
}

#[tokio::test]
async fn auto_advance_jumps_to_the_timer_when_every_run_is_idle() {
    // A week of virtual time: were it waited for, the test's waits would give up long before.
    timer_run_fires_by_itself(
        EmulatorConfig {
            auto_advance: true,
            ..Default::default()
        },
        7 * 24 * 3600 * 1000,
    )
    .await;
}

#[tokio::test]
async fn the_real_clock_fires_timers_when_they_are_due() {
    timer_run_fires_by_itself(
        EmulatorConfig {
            clock: triggers_emulator::ClockMode::Real,
            ..Default::default()
        },
        300,
    )
    .await;
}

/// Every reply a `manifest.register` request gets within `wait`, however many emulators answer.
async fn register_replies(client: &async_nats::Client, wait: Duration) -> usize {
    let inbox = client.new_inbox();
    let mut replies = client.subscribe(inbox.clone()).await.unwrap();
    let body = manifest("shop", &["charge"], &[]).to_json().unwrap();
    client
        .publish_with_reply(subject::MANIFEST_REGISTER, inbox, body.into())
        .await
        .unwrap();
    client.flush().await.unwrap();
    let mut n = 0;
    while let Ok(Some(_)) = tokio::time::timeout(wait, replies.next()).await {
        n += 1;
    }
    n
}

#[tokio::test]
async fn a_dropped_emulator_stops_answering_with_every_config() {
    // The control API and a clock of its own are tasks that reach the emulator: they must not
    // keep it alive once its last handle is gone, or it answers registrations meant for the next
    // emulator on the server (a test's second harness, `up` restarted on the same port).
    let lab = lab().await;
    let client = connect(&lab).await;
    assert_eq!(
        register_replies(&client, Duration::from_millis(500)).await,
        1
    );
    for config in [
        EmulatorConfig::default(),
        EmulatorConfig {
            auto_advance: true,
            ..Default::default()
        },
        EmulatorConfig {
            clock: triggers_emulator::ClockMode::Real,
            ..Default::default()
        },
    ] {
        let second = triggers_emulator::Emulator::start(connect(&lab).await, config)
            .await
            .unwrap();
        assert_eq!(
            register_replies(&client, Duration::from_millis(500)).await,
            2
        );
        drop(second);
        // The aborted tasks drop their subscriptions; the connection closes with the last one.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            register_replies(&client, Duration::from_millis(500)).await,
            1,
            "a dropped emulator still answers manifest.register"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_held_for_a_registration_is_broadcast_after_the_reply_is_made_and_before_it_is_sent()
{
    let lab = lab().await;
    let client = connect(&lab).await;
    lab.deploy_at_registration("shop", one_step_flow("early", "shop", "charge"));
    // One subscription sees what the server sends this client in the order it sends it.
    let mut seen = client.subscribe(">").await.unwrap();
    client.flush().await.unwrap();
    let inbox = client.new_inbox();
    let bytes = manifest("shop", &["charge"], &[]).to_json().unwrap();
    client
        .publish_with_reply(subject::MANIFEST_REGISTER, inbox.clone(), bytes.into())
        .await
        .unwrap();
    let broadcast = subject::flow_broadcast("shop").unwrap();
    let mut order = Vec::new();
    let reply = loop {
        let msg = tokio::time::timeout(Duration::from_secs(15), seen.next())
            .await
            .expect("the reply within 15 s")
            .unwrap();
        if msg.subject.as_str() == broadcast {
            order.push("broadcast");
        } else if msg.subject.as_str() == inbox {
            order.push("reply");
            break RegisterReply::from_json(&msg.payload).unwrap();
        }
    };
    assert_eq!(order, ["broadcast", "reply"]);
    assert!(reply.error.is_empty(), "{}", reply.error);
    assert!(
        reply.flows.iter().all(|f| f.id != "early"),
        "the reply was made before the deploy: {:?}",
        reply.flows
    );
    assert_eq!(lab.flows()["early"].version, 1);
    // Held for one registration only: the next one deploys nothing again.
    register(&client, &manifest("shop", &["charge"], &[])).await;
    assert_eq!(lab.flows()["early"].version, 1);
}
