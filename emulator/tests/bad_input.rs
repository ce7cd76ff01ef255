//! Every kind of bad input the emulator can receive, with the outcome `docs/emulator.md` ("Bad
//! input") promises for it; and after all of it, the emulator still serves. Each test sends a
//! batch on a real nats-server, then checks registration, fetch, observation, DLQ recording and
//! the control API still work, and that nothing panicked.

use std::collections::BTreeSet;
use std::sync::{Mutex, Once};
use std::time::Duration;

use async_nats::jetstream;
use serde_json::{Value, json};
use triggers_emulator::recorder::{RecordKind, RunStatus};
use triggers_emulator::{DlqFilter, EmulatorConfig, Harness, HashMismatchPolicy};
use triggers_sdk::transport;
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::{
    DlqEntry, Envelope, GoTime, Headers, Heartbeat, Manifest, RawJson, RegisterReply, subject,
};

use triggers_testkit::peer::*;
use triggers_testkit::{lab, lab_with};

/// Panics anywhere in the process (an emulator task included): a task that panics stops serving
/// its subscription, so none may.
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn watch_for_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(info.to_string());
            default(info);
        }));
    });
}

fn set<const N: usize>(rules: [&'static str; N]) -> BTreeSet<&'static str> {
    rules.into_iter().collect()
}

/// The raw reply to a registration request.
async fn register_raw(client: &async_nats::Client, bytes: &[u8]) -> String {
    let reply = client
        .request(subject::MANIFEST_REGISTER, bytes.to_vec().into())
        .await
        .expect("a reply to the registration");
    String::from_utf8_lossy(&reply.payload).into_owned()
}

/// Registers `bytes`; expects a refusal whose error starts with `starts_with`; checks the
/// refusal is recorded and returns the error.
async fn refused(lab: &Harness, client: &async_nats::Client, bytes: &[u8], starts: &str) -> String {
    let services = lab.services();
    let raw = register_raw(client, bytes).await;
    let reply = RegisterReply::from_json(raw.as_bytes())
        .unwrap_or_else(|e| panic!("a RegisterReply, got {raw:?}: {e}"));
    assert!(
        reply.error.starts_with(starts),
        "expected an error starting {starts:?}, got {:?}",
        reply.error
    );
    assert!(reply.flows.is_empty());
    assert_eq!(raw, json_reply(&reply.error), "the reply's exact bytes");
    let payload = String::from_utf8_lossy(bytes).into_owned();
    let recorded = lab.records().0.into_iter().any(|r| {
        r.payload == bytes
            && matches!(&r.kind, RecordKind::Registration { accepted: false, error: Some(e), .. } if *e == reply.error)
    });
    assert!(recorded, "the refusal of {payload:?} is recorded");
    assert_eq!(
        lab.services().keys().collect::<Vec<_>>(),
        services.keys().collect::<Vec<_>>(),
        "a refused registration registers nothing"
    );
    reply.error
}

/// Waits until everything `client` published so far has been judged: messages on
/// `triggers.v2.>` reach the checker in order, so once a sentinel's violation is recorded, the
/// messages before it have been checked. Then "no violation" means none.
async fn settle(lab: &Harness, client: &async_nats::Client) {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let payload = format!("sentinel {n}");
    client
        .publish("triggers.v2.sentinel", payload.clone().into())
        .await
        .unwrap();
    client.flush().await.unwrap();
    assert_eq!(
        violations_of(lab, "triggers.v2.sentinel", payload.as_bytes()).await,
        set(["unknown_subject"])
    );
}

fn judged(lab: &Harness, subject: &str, payload: &[u8]) -> Vec<&'static str> {
    lab.violations()
        .into_iter()
        .filter(|v| v.subject == subject && v.payload == payload)
        .map(|v| v.rule)
        .collect()
}

/// `{"error":"...","flows":null}` as the emulator writes it.
fn json_reply(error: &str) -> String {
    format!(
        "{{\"error\":{},\"flows\":null}}",
        serde_json::to_string(error).unwrap()
    )
}

/// A manifest for `service`, with the DLQ subjects that go with the name, sealed.
fn named(service: &str) -> Manifest {
    let mut m = manifest("placeholder", &["x"], &[]);
    m.service = service.into();
    m.service_sources[0].default = format!("{service}.inbound");
    for a in &mut m.actions {
        a.dlq = format!("triggers.v2.dlq.{service}.{}", a.name);
    }
    m.seal().unwrap();
    m
}

fn with_source(service: &str, source: &str) -> Manifest {
    let mut m = manifest(service, &["x"], &[]);
    m.service_sources[0].default = source.into();
    m.seal().unwrap();
    m
}

/// After the bad input: a fresh service registers, is fetched, deployed, triggered and tracked;
/// heartbeats and DLQ entries are recorded; the control API answers; nothing panicked.
async fn assert_still_serves(lab: &Harness, sdk: &async_nats::Client) {
    let m = manifest("survivor", &["work"], &[]);
    let reply = register(sdk, &m).await;
    assert_eq!(reply.error, "", "a valid registration is accepted");
    let fetched = sdk
        .request(
            subject::MANIFEST_FETCH,
            br#"{"service":"survivor"}"#.to_vec().into(),
        )
        .await
        .unwrap();
    assert_eq!(Manifest::from_json(&fetched.payload).unwrap(), m);

    lab.deploy(one_step_flow("survive", "survivor", "work"))
        .await
        .expect("deploy succeeds");
    let run = lab
        .trigger("survive", &json!({"n": 1}))
        .await
        .expect("trigger succeeds");
    let delivery = next_delivery(sdk, "survivor").await;
    let envelope = Envelope::from_headers(&delivery.headers).unwrap();
    assert_eq!(envelope.flow_run_id, run.0);
    succeed(sdk, &envelope, "survivor", "step").await;
    assert_eq!(
        lab.wait_for_node(&run, "step").await.unwrap().status,
        "succeeded"
    );

    let now = GoTime::now();
    let heartbeat = Heartbeat {
        service: "survivor".into(),
        service_version: m.service_version.clone(),
        manifest_hash: m.manifest_hash.clone(),
        started_at: now,
        now,
        shutting_down: false,
    };
    sdk.publish(subject::HEARTBEAT, heartbeat.to_json().unwrap().into())
        .await
        .unwrap();
    lab.wait_for_heartbeat("survivor", |h| h.now == now)
        .await
        .expect("heartbeats are still recorded");

    let entry = DlqEntry {
        kind: "action_failed".into(),
        envelope: envelope.clone(),
        body: RawJson::from_text(r#"{"n":1}"#).unwrap(),
        err_msg: "boom".into(),
        occurred_at: now,
    };
    let mut headers = Headers::new();
    headers.insert(
        names::NATS_MSG_ID,
        format!("{}:dlq:1", envelope.idempotency_key),
    );
    jetstream::new(sdk.clone())
        .publish_with_headers(
            "triggers.v2.dlq.survivor.work",
            transport::to_nats(&headers).unwrap(),
            entry.to_json().unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let dlq = lab.wait_dlq(DlqFilter::run(&run.0)).await.unwrap();
    assert_eq!(dlq.entry.unwrap().err_msg, "boom");

    let state = control(sdk, "state", b"{}").await;
    assert_eq!(state["ok"], true, "{state}");
    assert!(
        state["result"]["services"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "survivor"),
        "{state}"
    );
    let panics = PANICS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(panics.is_empty(), "something panicked: {panics:#?}");
}

#[tokio::test]
async fn bad_registrations_are_refused_with_a_reason_and_recorded() {
    watch_for_panics();
    let lab = lab().await;
    let sdk = connect(&lab).await;
    let reg = subject::MANIFEST_REGISTER;

    // Bytes that are not a manifest: refused, `undecodable`.
    let full = manifest("m", &["x"], &[]).to_json().unwrap();
    let mut missing: serde_json::Map<String, Value> = serde_json::from_slice(&full).unwrap();
    missing.remove("service_sources");
    let missing = serde_json::to_vec(&missing).unwrap();
    for (bytes, error) in [
        (
            &b"{not json"[..],
            "invalid manifest: manifest: at ?: key must be a string (line 1, column 2)",
        ),
        (
            b"",
            "invalid manifest: manifest: EOF while parsing a value (line 1, column 1)",
        ),
        (
            b"[]",
            "invalid manifest: manifest: invalid type: sequence, expected a JSON object (line 1, column 1)",
        ),
        (
            b"\xff\xfe",
            "invalid manifest: manifest: expected value (line 1, column 1)",
        ),
        (
            br#"{"service": 3}"#,
            "invalid manifest: manifest: at service: invalid type: integer `3`, expected a string",
        ),
        (
            &missing,
            "invalid manifest: manifest: missing field `service_sources`",
        ),
    ] {
        let got = refused(&lab, &sdk, bytes, error).await;
        assert!(got.starts_with(error), "{got}");
        assert_eq!(violations_of(&lab, reg, bytes).await, set(["undecodable"]));
    }

    // A manifest that breaks a contract rule: refused, one `manifest_invalid` per issue.
    let mut m = manifest("rules", &["x"], &[]);
    m.actions[0].timeout_ms = 0;
    m.seal().unwrap();
    let bytes = m.to_json().unwrap();
    refused(
        &lab,
        &sdk,
        &bytes,
        "invalid manifest: actions[0].timeout_ms: is 0, must be positive",
    )
    .await;
    assert_eq!(
        violations_of(&lab, reg, &bytes).await,
        set(["manifest_invalid"])
    );

    // Another protocol major: refused, `protocol_major`.
    let mut m = manifest("major", &["x"], &[]);
    m.protocol_version = "2.0.0".into();
    m.seal().unwrap();
    let bytes = m.to_json().unwrap();
    refused(
        &lab,
        &sdk,
        &bytes,
        "protocol major 2 is not supported (protocol_version \"2.0.0\"); this orchestrator speaks major 1",
    )
    .await;
    assert_eq!(
        violations_of(&lab, reg, &bytes).await,
        set(["protocol_major"])
    );
    // Not a version at all: refused, `manifest_invalid`.
    m.protocol_version = "banana".into();
    let bytes = m.to_json().unwrap();
    refused(
        &lab,
        &sdk,
        &bytes,
        "protocol_version \"banana\" is not MAJOR.MINOR.PATCH",
    )
    .await;
    assert_eq!(
        violations_of(&lab, reg, &bytes).await,
        set(["manifest_invalid"])
    );

    // A wrong hash under the default policy (reject): refused, whatever its form.
    let good = manifest("hashes", &["x"], &[]);
    let computed = good.compute_hash().unwrap();
    for (hash, rules) in [
        (
            format!("sha256:{}", "0".repeat(64)),
            set(["manifest_hash_mismatch"]),
        ),
        (
            "garbage".to_owned(),
            set(["manifest_hash_mismatch", "manifest_invalid"]),
        ),
        (String::new(), set(["manifest_hash_mismatch"])),
    ] {
        let mut m = good.clone();
        m.manifest_hash = hash.clone();
        let bytes = m.to_json().unwrap();
        let error = refused(&lab, &sdk, &bytes, "manifest_hash mismatch: ").await;
        assert_eq!(
            error,
            format!(
                "manifest_hash mismatch: the manifest says {hash:?}, its contents hash to {computed}"
            )
        );
        assert_eq!(violations_of(&lab, reg, &bytes).await, rules);
    }
    assert!(!lab.services().contains_key("hashes"));

    // Service names that cannot be one: refused, `manifest_invalid` on `service`.
    for (service, error) in [
        (
            "source",
            "invalid manifest: service: service \"source\" is reserved",
        ),
        (
            "all",
            "invalid manifest: service: service \"all\" is reserved",
        ),
        (
            "a.b",
            "invalid manifest: service: service \"a.b\" cannot be a subject token: it contains '.'",
        ),
        (
            "",
            "invalid manifest: service: service \"\" cannot be a subject token: it is empty",
        ),
        (
            "a b",
            "invalid manifest: service: service \"a b\" cannot be a subject token: it contains ' '",
        ),
        (
            "a>",
            "invalid manifest: service: service \"a>\" cannot be a subject token: it contains '>'",
        ),
    ] {
        let bytes = named(service).to_json().unwrap();
        refused(&lab, &sdk, &bytes, error).await;
        assert_eq!(
            violations_of(&lab, reg, &bytes).await,
            set(["manifest_invalid"])
        );
    }

    // NATS sources the emulator cannot give the service.
    assert_eq!(register(&sdk, &manifest("a", &["x"], &[])).await.error, "");
    for (service, source, error) in [
        // Another service's subject, or one inside it: JetStream refuses the overlap.
        (
            "b",
            "a.inbound",
            "cannot create stream triggers-sources-b for subjects [\"a.inbound\"]: jetstream error: subjects overlap with an existing stream",
        ),
        (
            "c",
            "a.*",
            "cannot create stream triggers-sources-c for subjects [\"a.*\"]: jetstream error: subjects overlap with an existing stream",
        ),
    ] {
        let bytes = with_source(service, source).to_json().unwrap();
        refused(&lab, &sdk, &bytes, error).await;
        assert!(!lab.services().contains_key(service));
        settle(&lab, &sdk).await;
        assert_eq!(judged(&lab, reg, &bytes), Vec::<&str>::new(), "{source}");
    }
    // Found by an audit: sources over the emulator's inbox, the server's key-value and
    // JetStream subjects, a locked subject, or too long for the server's control line (the
    // emulator was cut off at every resubscribe), and names too long for a stream-create
    // request: refused with the manifest, the same table the checker reads (`manifest_invalid`).
    let long_source = format!("a.{}", "x".repeat(4100));
    for (service, source, error) in [
        (
            "k",
            "triggers.v2.heartbeat",
            "invalid manifest: service_sources[0].default: source subject \"triggers.v2.heartbeat\" is reserved: it overlaps triggers.v2.heartbeat, the services' heartbeats",
        ),
        (
            "d",
            "triggers.v2.dlq.>",
            "invalid manifest: service_sources[0].default: source subject \"triggers.v2.dlq.>\" is reserved: it overlaps triggers.v2.dlq.>",
        ),
        (
            "e",
            "e inbound",
            "invalid manifest: service_sources[0].default: source subject \"e inbound\" cannot be a subject token: it contains ' '",
        ),
        (
            "f",
            "triggers.v2.manifest.*",
            "invalid manifest: service_sources[0].default: source subject \"triggers.v2.manifest.*\" is reserved: it overlaps triggers.v2.manifest.>, where the orchestrator answers registrations",
        ),
        (
            "g",
            "triggerslab.v1.control.*",
            "invalid manifest: service_sources[0].default: source subject \"triggerslab.v1.control.*\" is reserved: it overlaps triggerslab.>, the emulator's control namespace",
        ),
        (
            "h",
            ">",
            "invalid manifest: service_sources[0].default: source subject \">\" is reserved: it captures every subject",
        ),
        (
            "i",
            "_TRIGGERS_LAB_INBOX.>",
            "invalid manifest: service_sources[0].default: source subject \"_TRIGGERS_LAB_INBOX.>\" is reserved: it overlaps _TRIGGERS_LAB_INBOX.>, where the emulator receives its JetStream replies",
        ),
        (
            "j",
            "$KV.>",
            "invalid manifest: service_sources[0].default: source subject \"$KV.>\" is reserved: subjects starting with $ belong to the NATS server",
        ),
        (
            "l",
            "*.>",
            "invalid manifest: service_sources[0].default: source subject \"*.>\" is reserved: it overlaps $JS.>",
        ),
        (
            "m",
            "_INBOX.*",
            "invalid manifest: service_sources[0].default: source subject \"_INBOX.*\" is reserved: it overlaps _INBOX.>",
        ),
        (
            "n",
            &long_source,
            "invalid manifest: service_sources[0].default: source subject \"a.xxx",
        ),
    ] {
        let bytes = with_source(service, source).to_json().unwrap();
        let error = refused(&lab, &sdk, &bytes, error).await;
        assert!(error.len() < 1000, "the error repeats the input: {error}");
        assert_eq!(
            violations_of(&lab, reg, &bytes).await,
            set(["manifest_invalid"]),
            "{service}"
        );
    }
    let long_name = "s".repeat(4100);
    let bytes = named(&long_name).to_json().unwrap();
    let error = refused(
        &lab,
        &sdk,
        &bytes,
        "invalid manifest: service: service \"sss",
    )
    .await;
    assert!(error.contains("4100 bytes long; at most 128"), "{error}");
    let mut m = manifest("o", &["x"], &[]);
    m.actions[0].name = "x".repeat(4100);
    m.actions[0].dlq = format!("triggers.v2.dlq.o.{}", m.actions[0].name);
    m.seal().unwrap();
    let error = refused(
        &lab,
        &sdk,
        &m.to_json().unwrap(),
        "invalid manifest: actions[0].name: action \"xxx",
    )
    .await;
    assert!(error.contains("at most 128"), "{error}");
    // Service a keeps its stream and its subject.
    let mut stream = jetstream::new(sdk.clone())
        .get_stream("triggers-sources-a")
        .await
        .unwrap();
    assert_eq!(stream.info().await.unwrap().config.subjects, ["a.inbound"]);

    // A registration published without a reply subject: handled and recorded all the same.
    sdk.publish(reg, b"{no reply wanted".to_vec().into())
        .await
        .unwrap();
    let error = eventually(&lab, "the refusal of a request without reply", |lab| {
        lab.records().0.into_iter().find_map(|r| match r.kind {
            RecordKind::Registration {
                accepted: false,
                error,
                ..
            } if r.payload == "{no reply wanted" => error,
            _ => None,
        })
    })
    .await;
    assert!(error.starts_with("invalid manifest: manifest:"), "{error}");
    assert_eq!(
        violations_of(&lab, reg, b"{no reply wanted").await,
        set(["undecodable"])
    );

    assert_still_serves(&lab, &sdk).await;
    // The registration reply is the emulator's, not a JetStream ack.
    assert_eq!(
        register_raw(&sdk, &manifest("late", &["x"], &[]).to_json().unwrap()).await,
        r#"{"flows":null}"#
    );
}

#[tokio::test]
async fn wrong_hashes_are_accepted_and_recorded_under_the_record_policy() {
    watch_for_panics();
    let lab = lab_with(EmulatorConfig {
        hash_mismatch: HashMismatchPolicy::Record,
        ..Default::default()
    })
    .await;
    let sdk = connect(&lab).await;
    for (service, hash, rules) in [
        (
            "zeros",
            format!("sha256:{}", "0".repeat(64)),
            set(["manifest_hash_mismatch"]),
        ),
        (
            "garbage",
            "garbage".to_owned(),
            set(["manifest_hash_mismatch", "manifest_invalid"]),
        ),
        ("empty", String::new(), set(["manifest_hash_mismatch"])),
    ] {
        let mut m = manifest(service, &["x"], &[]);
        m.manifest_hash = hash;
        let bytes = m.to_json().unwrap();
        assert_eq!(register_raw(&sdk, &bytes).await, r#"{"flows":null}"#);
        assert!(lab.services().contains_key(service));
        assert_eq!(
            violations_of(&lab, subject::MANIFEST_REGISTER, &bytes).await,
            rules
        );
    }
    assert_still_serves(&lab, &sdk).await;
}

#[tokio::test]
async fn bad_fetches_heartbeats_events_dlq_entries_and_stray_messages() {
    watch_for_panics();
    let lab = lab().await;
    let sdk = connect(&lab).await;
    let a = manifest("a", &["x"], &[]);
    register(&sdk, &a).await;

    // Fetch: the body is `{"service": name}`; anything else is taken whole (trimmed) as the name.
    for (body, name) in [
        (&br#"{"service":"nobody"}"#[..], "nobody"),
        (b"{not json", "{not json"),
        (b"", ""),
        (b"[]", "[]"),
        (br#"{"service":3}"#, r#"{"service":3}"#),
        (b"\xff", "\u{fffd}"),
    ] {
        let reply = sdk
            .request(subject::MANIFEST_FETCH, body.to_vec().into())
            .await
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&reply.payload),
            json_reply(&format!(
                "unknown service {name:?}: it has not registered (send {{\"service\": \"<name>\"}})"
            ))
        );
    }
    // A bare name works too.
    let reply = sdk
        .request(subject::MANIFEST_FETCH, b" a\n".to_vec().into())
        .await
        .unwrap();
    assert_eq!(Manifest::from_json(&reply.payload).unwrap(), a);
    let fetches = lab
        .records()
        .0
        .into_iter()
        .filter(|r| matches!(r.kind, RecordKind::Fetch { found: false, .. }))
        .count();
    assert_eq!(fetches, 6, "every unanswered fetch is recorded");
    settle(&lab, &sdk).await;
    assert!(
        !lab.violations()
            .iter()
            .any(|v| v.subject == subject::MANIFEST_FETCH),
        "fetches are not judged"
    );

    // Heartbeats.
    let hb = subject::HEARTBEAT;
    let ghost = br#"{"service":"ghost","service_version":"1","manifest_hash":"sha256:0000000000000000000000000000000000000000000000000000000000000000","started_at":"2026-05-26T14:30:45Z","now":"2026-05-26T14:30:46Z","shutting_down":false}"#;
    let typed = br#"{"service":"a","service_version":1,"manifest_hash":"x","started_at":"yesterday","now":"2026-05-26T14:30:46Z","shutting_down":"no"}"#;
    let cases: [(&[u8], BTreeSet<&str>); 4] = [
        (b"{not json hb", set(["undecodable"])),
        (b"[1]", set(["undecodable"])),
        (typed, set(["wrong_type", "time_invalid"])),
        (ghost, set(["service_unregistered"])),
    ];
    for (bytes, _) in &cases {
        sdk.publish(hb, bytes.to_vec().into()).await.unwrap();
    }
    for (bytes, rules) in &cases {
        assert_eq!(&violations_of(&lab, hb, bytes).await, rules);
    }
    // Only the one that decodes is recorded as a heartbeat; no service state comes of it.
    let heartbeats: Vec<String> = lab
        .records()
        .0
        .into_iter()
        .filter_map(|r| match r.kind {
            RecordKind::Heartbeat { heartbeat } => Some(heartbeat.service),
            _ => None,
        })
        .collect();
    assert_eq!(heartbeats, ["ghost"]);
    assert!(!lab.services().contains_key("ghost"));
    assert_eq!(lab.services()["a"].heartbeats, 0);

    // Completion events.
    let events = "triggers.v2.flow.events.f";
    let garbage = b"{not json event";
    let unknown_run = br#"{"flow_run_id":"ghost-run","flow_id":"f","flow_version":1,"node_id":"n","node_type":"action","service":"a","started_at":"2026-05-26T14:30:45Z","finished_at":"2026-05-26T14:30:45Z","status":"succeeded"}"#;
    let other_flow = br#"{"flow_run_id":"ghost-run2","flow_id":"nope","flow_version":1,"node_id":"n","node_type":"action","service":"a","started_at":"2026-05-26T14:30:45Z","finished_at":"2026-05-26T14:30:45Z","status":"failed"}"#;
    let odd = br#"{"flow_run_id":"","flow_id":"f","flow_version":1,"node_id":"","node_type":"bogus","service":"a","started_at":"2026-05-26T14:30:45Z","finished_at":"2026-05-26T14:30:44Z","status":"weird"}"#;
    for bytes in [&garbage[..], unknown_run, other_flow, odd] {
        sdk.publish(events, bytes.to_vec().into()).await.unwrap();
    }
    assert_eq!(
        violations_of(&lab, events, garbage).await,
        set(["undecodable"])
    );
    assert_eq!(
        violations_of(&lab, events, other_flow).await,
        set(["completion_flow_mismatch"])
    );
    assert_eq!(
        violations_of(&lab, events, odd).await,
        set([
            "completion_field_empty",
            "completion_node_type_unknown",
            "completion_status_unknown",
            "completion_time_order"
        ])
    );
    // A well-formed event for a run the emulator did not start: recorded, followed as a run.
    let followed = eventually(&lab, "the followed runs", |lab| {
        let runs = lab.runs();
        (runs.len() == 3).then_some(runs)
    })
    .await;
    let status = |id: &str| followed.iter().find(|r| r.id == id).map(|r| r.status);
    assert_eq!(status("ghost-run"), Some(RunStatus::Succeeded));
    assert_eq!(status("ghost-run2"), Some(RunStatus::Failed));
    // Its only event says nothing finished (an unknown status): the run stays open.
    assert_eq!(status(""), Some(RunStatus::Running));
    assert_eq!(
        lab.completions().len(),
        3,
        "the garbage is not a completion"
    );
    assert!(!lab.violations().iter().any(|v| v.payload == unknown_run));

    // DLQ: whatever lands on triggers.v2.dlq.> is stored by the DLQ stream and recorded.
    let dlq_cases: [(&str, &[u8], BTreeSet<&str>); 5] = [
        (
            "triggers.v2.dlq.a.x",
            b"{not json dlq",
            set(["undecodable", "dlq_msg_id_missing"]),
        ),
        (
            "triggers.v2.dlq.a.invalid_json",
            b"{}",
            set(["missing_field", "dlq_msg_id_missing"]),
        ),
        (
            "triggers.v2.dlq.a.nope",
            b"{}",
            set([
                "dlq_subject_unknown_tail",
                "dlq_msg_id_missing",
                "missing_field",
            ]),
        ),
        (
            "triggers.v2.dlq.ghost.x",
            b"[]",
            set(["service_unregistered", "dlq_msg_id_missing", "undecodable"]),
        ),
        (
            "triggers.v2.dlq.source.s1",
            b"\xff\xfe from a peer",
            set(["source_dlq_publish"]),
        ),
    ];
    for (subject, bytes, _) in &dlq_cases {
        sdk.publish(subject.to_string(), bytes.to_vec().into())
            .await
            .unwrap();
    }
    for (subject, bytes, rules) in &dlq_cases {
        assert_eq!(&violations_of(&lab, subject, bytes).await, rules);
        let stored = lab.wait_dlq(DlqFilter::subject(*subject)).await.unwrap();
        assert!(stored.entry.is_none(), "not a DLQ entry: {stored:?}");
        assert_eq!(stored.payload, String::from_utf8_lossy(bytes));
    }

    // Stray messages.
    let mut h = async_nats::HeaderMap::new();
    h.insert("X-Triggers-Flow-Id", "f");
    sdk.publish_with_headers(
        "triggers.v2.flow.broadcast.a",
        h,
        b"{peer broadcast".to_vec().into(),
    )
    .await
    .unwrap();
    sdk.publish(
        "triggers.v2.flow.broadcast.all",
        b"{headerless peer broadcast".to_vec().into(),
    )
    .await
    .unwrap();
    sdk.publish("triggers.v2.whatever", b"stray".to_vec().into())
        .await
        .unwrap();
    sdk.publish("a.inbound", b"no envelope".to_vec().into())
        .await
        .unwrap();
    assert_eq!(
        violations_of(&lab, "triggers.v2.flow.broadcast.a", b"{peer broadcast").await,
        set(["peer_broadcast"])
    );
    assert_eq!(
        violations_of(
            &lab,
            "triggers.v2.flow.broadcast.all",
            b"{headerless peer broadcast"
        )
        .await,
        set(["peer_broadcast"])
    );
    assert_eq!(
        violations_of(&lab, "triggers.v2.whatever", b"stray").await,
        set(["unknown_subject"])
    );
    assert_eq!(
        violations_of(&lab, "a.inbound", b"no envelope").await,
        set(["hop_envelope_invalid", "hop_msg_id"])
    );
    let hop = lab
        .records()
        .0
        .into_iter()
        .find(|r| r.subject == "a.inbound" && r.kind.name() == "hop")
        .expect("the hop is recorded");
    assert_eq!(hop.payload, "no envelope");
    assert!(
        matches!(&hop.kind, RecordKind::Hop { run_id, from_emulator: false, .. } if run_id.is_empty()),
        "{hop:?}"
    );

    assert_still_serves(&lab, &sdk).await;
    // The emulator's own broadcasts are not judged.
    assert!(
        !lab.violations()
            .iter()
            .any(|v| v.rule == "peer_broadcast" && v.payload.starts_with(b"{\"id\""))
    );
}

#[tokio::test]
async fn bad_control_requests_get_an_error_reply() {
    watch_for_panics();
    let lab = lab().await;
    let sdk = connect(&lab).await;
    register(&sdk, &manifest("a", &["x"], &[])).await;
    let error = |reply: Value| -> Value {
        assert_eq!(reply["ok"], false, "{reply}");
        reply["error"].clone()
    };
    let text = |reply: Value| -> String { error(reply).as_str().unwrap().to_owned() };

    assert!(
        text(control(&sdk, "deploy", b"{not json").await)
            .starts_with("bad request: key must be a string")
    );
    assert!(
        text(control(&sdk, "deploy", b"").await).starts_with("bad request: missing field `flow`")
    );
    assert!(text(control(&sdk, "deploy", b"[]").await).starts_with("bad request: "));
    assert!(
        text(control(&sdk, "trigger", b"\xff").await).starts_with("bad request: expected value")
    );
    assert!(text(control(&sdk, "frobnicate", b"{}").await).starts_with(
        "unknown control op \"frobnicate\"; ops: state, deploy, check_release, trigger, \
             resend_dlq, advance, cancel, runs, run_page, run, flow, flow_list, records, violations"
    ));
    // A body that is not a flow.
    assert!(
        text(
            control(
                &sdk,
                "deploy",
                br#"{"flow": {"id": "f", "nodes": [{"id": "n", "type": "bogus"}]}}"#
            )
            .await
        )
        .starts_with("bad request: unknown variant `bogus`, expected one of `service-in`")
    );
    assert!(
        text(control(&sdk, "check_release", br#"{"flow": 3}"#).await)
            .starts_with("bad request: invalid type: integer `3`, expected struct Flow")
    );
    // A flow the release refuses: the message and every problem with its code.
    for op in ["deploy", "check_release"] {
        let refused = error(
            control(
                &sdk,
                op,
                br#"{"flow": {"id": "f.x", "nodes": [{"id": "in", "type": "service-in", "service": "ghost"}]}}"#,
            )
            .await,
        );
        assert!(
            refused["message"]
                .as_str()
                .unwrap()
                .starts_with("release refused"),
            "{refused}"
        );
        let codes: BTreeSet<&str> = refused["problems"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["code"].as_str().unwrap())
            .collect();
        assert_eq!(codes, set(["invalid_id", "unknown_service"]));
    }
    // A timer whose occurrences would all fall due at once (an advance would never end).
    let endless = error(
        control(
            &sdk,
            "deploy",
            br#"{"flow": {"id": "endless", "nodes": [
                {"id": "in", "type": "service-in", "service": "a", "config": {"target": "a.inbound"}},
                {"id": "x", "type": "action", "service": "a", "action": "x"},
                {"id": "t", "type": "timer", "config": {"delay_ms": 0, "repeat": 5}},
                {"id": "in2", "type": "service-in", "service": "a", "config": {"target": "a.inbound"}}],
              "edges": [{"id": "e1", "from": "in", "to": "x"}, {"id": "e2", "from": "x", "to": "t"},
                        {"id": "e3", "from": "t", "to": "in2"}]}}"#,
        )
        .await,
    );
    assert!(
        endless["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["code"] == "timer_out_of_range"
                && p["message"]
                    .as_str()
                    .unwrap()
                    .contains("needs config.delay_ms above 0")),
        "{endless}"
    );
    assert!(lab.flows().is_empty());
    // Wrong fields and unknown ids.
    assert_eq!(
        text(control(&sdk, "trigger", br#"{"flow_id": "nope"}"#).await),
        "no flow \"nope\" is deployed; deploy it first"
    );
    assert!(
        text(control(&sdk, "trigger", br#"{"flow_id": 3}"#).await)
            .starts_with("bad request: invalid type: integer `3`, expected a string")
    );
    assert!(
        text(control(&sdk, "advance", br#"{"duration_ms": -1}"#).await)
            .starts_with("bad request: invalid value: integer `-1`, expected u64")
    );
    assert!(
        text(control(&sdk, "advance", br#"{"duration_ms": "1h"}"#).await)
            .starts_with("bad request: invalid type: string \"1h\", expected u64")
    );
    assert_eq!(
        text(control(&sdk, "run", br#"{"run_id": "nope"}"#).await),
        "no run \"nope\""
    );
    assert!(
        text(control(&sdk, "records", br#"{"since": -5}"#).await)
            .starts_with("bad request: invalid value: integer `-5`, expected u64")
    );
    // Ops without required fields ignore the body.
    for op in ["state", "runs", "violations"] {
        assert_eq!(control(&sdk, op, b"garbage").await["ok"], true, "{op}");
    }
    // Subjects with no op, or more tokens: nobody answers.
    for subject in ["triggerslab.v1.control", "triggerslab.v1.control.state.x"] {
        let err = sdk
            .request(subject, b"{}".to_vec().into())
            .await
            .unwrap_err();
        assert_eq!(
            err.kind(),
            async_nats::client::RequestErrorKind::NoResponders,
            "{subject}"
        );
    }
    // A duration past year 9999: the clock stops at the latest time it can hold.
    let far = control(&sdk, "advance", br#"{"duration_ms": 18446744073709551615}"#).await;
    assert_eq!(
        far["result"]["clock"], "9999-12-31T23:59:59.999999999Z",
        "{far}"
    );

    assert_still_serves(&lab, &sdk).await;
}

#[tokio::test]
async fn a_redeploy_past_the_largest_version_is_refused_and_nothing_changes() {
    watch_for_panics();
    let lab = lab().await;
    let sdk = connect(&lab).await;
    register(&sdk, &manifest("a", &["x"], &[])).await;
    let mut last = one_step_flow("f", "a", "x");
    last.version = i64::MAX;
    let deployed = lab.deploy(last.clone()).await.expect("the largest version");
    assert_eq!(deployed.flow.version, i64::MAX);
    // `previous.version + 1` would overflow: a typed error, through the API and the control API.
    let err = lab.deploy(one_step_flow("f", "a", "x")).await.unwrap_err();
    assert!(
        matches!(
            err,
            triggers_emulator::EmulatorError::FlowVersion {
                version: i64::MAX,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "flow \"f\" is deployed at version 9223372036854775807, the largest there is: a redeploy \
         has no next version; deploy it under another id"
    );
    let reply = control(
        &sdk,
        "deploy",
        json!({"flow": one_step_flow("f", "a", "x")})
            .to_string()
            .as_bytes(),
    )
    .await;
    assert_eq!(reply["ok"], false, "{reply}");
    assert!(
        reply["error"]
            .as_str()
            .unwrap()
            .contains("the largest there is"),
        "{reply}"
    );
    assert_eq!(lab.flows()["f"].version, i64::MAX);
    assert_still_serves(&lab, &sdk).await;
}

/// Publishes `payload` on `subject` (any bytes, even not UTF-8, which no NATS client library
/// sends) over a raw connection to `url`, and waits for the server to have read it.
async fn publish_raw(url: &str, subject: &[u8], payload: &[u8]) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let rest = url.trim_start_matches("nats://");
    // The account's user, on a shared server (`nats://user:password@host:port`).
    let (login, addr) = match rest.rsplit_once('@') {
        Some((info, addr)) => (info.split_once(':'), addr),
        None => (None, rest),
    };
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let login = login
        .map(|(user, pass)| format!(",\"user\":\"{user}\",\"pass\":\"{pass}\""))
        .unwrap_or_default();
    let mut command =
        format!("CONNECT {{\"verbose\":false,\"pedantic\":false{login}}}\r\nPUB ").into_bytes();
    command.extend_from_slice(subject);
    command.extend_from_slice(format!(" {}\r\n", payload.len()).as_bytes());
    command.extend_from_slice(payload);
    command.extend_from_slice(b"\r\nPING\r\n");
    stream.write_all(&command).await.unwrap();
    let mut lines = BufReader::new(stream).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        assert!(!line.starts_with("-ERR"), "{line}");
        if line == "PONG" {
            return;
        }
    }
    panic!("the server closed the connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_message_that_cannot_be_read_is_skipped_and_counted_not_a_stall() {
    // A DLQ entry on a subject that is not UTF-8: JetStream stores it, the client library cannot
    // parse it. The follower of the DLQ stream must not stop there for good: the entries after
    // it are still recorded, and the one it could not read is counted as missed.
    let lab = lab().await;
    let client = connect(&lab).await;
    let envelope = Envelope {
        flow_run_id: "after-the-unreadable".into(),
        flow_id: "order".into(),
        flow_version: 1,
        idempotency_key: "after-the-unreadable:in".into(),
        source_node_id: "in".into(),
        ..Default::default()
    };
    let entry = DlqEntry {
        kind: "action_failed".into(),
        envelope: envelope.clone(),
        body: RawJson::from_text(r#"{"n":1}"#).unwrap(),
        err_msg: "boom".into(),
        occurred_at: GoTime::now(),
    };
    let bytes = entry.to_json().unwrap();
    publish_raw(lab.url(), b"triggers.v2.dlq.shop.\xff\xfe", &bytes).await;
    jetstream::new(client.clone())
        .publish("triggers.v2.dlq.shop.work", bytes.into())
        .await
        .unwrap()
        .await
        .unwrap();
    let dlq = lab
        .with_wait_timeout(Duration::from_secs(60))
        .wait_dlq(DlqFilter::run("after-the-unreadable"))
        .await
        .expect("the entry after the unreadable one is recorded");
    assert_eq!(dlq.entry.unwrap().err_msg, "boom");
    assert!(
        lab.dropped_messages() >= 1,
        "the unreadable entry is counted as missed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_for_a_huge_unknown_name_gets_a_reply_nats_can_carry() {
    // 300 000 quotes, each escaped twice in the error that named them: 1.2 MB, more than the
    // server carries, and the requester waited for nothing.
    let lab = lab().await;
    let client = connect(&lab).await;
    let reply = tokio::time::timeout(
        Duration::from_secs(5),
        client.request(subject::MANIFEST_FETCH, vec![b'"'; 300_000].into()),
    )
    .await
    .expect("a reply within 5 s")
    .unwrap();
    assert!(reply.payload.len() < 4096, "{} bytes", reply.payload.len());
    let reply: RegisterReply = serde_json::from_slice(&reply.payload).unwrap();
    assert!(reply.error.contains("unknown service"), "{}", reply.error);
}
