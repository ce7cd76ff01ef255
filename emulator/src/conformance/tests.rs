//! Every rule fires on a message made wrong in one way from a conforming one, with the rule's
//! severity and nothing else; the conforming messages (ours and the Go-judged goldens) give none;
//! random bytes never panic.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;
use triggers_sdk::wire::durable_timer::{self, RootContext, TimerContext};
use triggers_sdk::wire::header::{self, names};
use triggers_sdk::wire::shapes::{dlq_kind, status};
use triggers_sdk::wire::{
    Action, CompletionEvent, DlqEntry, Envelope, FlowEnvelope, GoTime, Headers, Heartbeat,
    Manifest, RawJson, Retry, ServiceSource, json as go_json,
};

use super::object::Object;
use super::*;
use rules::{STATEFUL, TESTED};

mod rules;

const SVC: &str = "svc";
/// An inbound subject under `triggers.v2.`, as the spec's example declares one.
const INBOUND: &str = "triggers.v2.svc.inbound";
const DLQ_NS: i128 = 1_779_805_847_000_000_001;

fn t(s: &str) -> GoTime {
    GoTime::parse(s).unwrap()
}

fn manifest() -> Manifest {
    let schema = |v: serde_json::Value| v.as_object().cloned();
    let mut m = Manifest {
        protocol_version: "1.0.0".into(),
        service: SVC.into(),
        service_version: "1.4.0".into(),
        actions: vec![Action {
            name: "send".into(),
            input_schema: schema(
                json!({"type": "object", "properties": {"amount": {"type": "number"}}}),
            ),
            result_schema: schema(json!({"type": "object"})),
            timeout_ms: 30_000,
            retry: Retry {
                max_attempts: 3,
                initial_backoff_ms: 100,
                backoff_factor: 2.0,
                max_backoff_ms: 5000,
            },
            dlq: "triggers.v2.dlq.svc.send".into(),
            ..Action::default()
        }],
        service_sources: vec![ServiceSource {
            name: "nats".into(),
            transport: "nats".into(),
            default: INBOUND.into(),
        }],
        supports_nodes: vec!["condition".into(), "mapping".into()],
        ..Manifest::default()
    };
    m.seal().unwrap();
    m
}

/// What the emulator knows: `svc` registered with [`manifest`], owning [`INBOUND`].
struct World {
    manifests: Manifests,
    inbound: BTreeMap<String, String>,
}

impl World {
    fn new() -> Self {
        World {
            manifests: [(SVC.to_owned(), crate::KeptManifest::new(manifest()))].into(),
            inbound: [(INBOUND.to_owned(), SVC.to_owned())].into(),
        }
    }

    fn empty() -> Self {
        World {
            manifests: BTreeMap::new(),
            inbound: BTreeMap::new(),
        }
    }

    fn ctx(&self) -> Context<'_> {
        Context {
            manifests: &self.manifests,
            inbound: &self.inbound,
        }
    }
}

#[derive(Clone, Debug)]
struct Msg {
    subject: String,
    headers: Headers,
    payload: Vec<u8>,
}

impl Msg {
    fn new(subject: &str, payload: impl Into<Vec<u8>>) -> Self {
        Msg {
            subject: subject.to_owned(),
            headers: Headers::new(),
            payload: payload.into(),
        }
    }

    fn with_headers(mut self, headers: Headers) -> Self {
        self.headers = headers;
        self
    }

    fn check_in(&self, world: &World) -> Vec<Violation> {
        let found = check(
            &world.ctx(),
            &self.subject,
            &self.headers,
            &self.payload,
            Origin::Peer,
        );
        for v in &found {
            let (severity, _) =
                rule_info(v.rule).unwrap_or_else(|| panic!("{} not in RULES", v.rule));
            assert_eq!(v.severity, severity, "{v}");
            assert!(!v.message.is_empty(), "{v}");
            assert_eq!(v.subject, self.subject);
            assert_eq!(v.payload.as_bytes(), &self.payload[..]);
            assert_eq!(v.headers.len(), self.headers.len());
        }
        found
    }

    fn check(&self) -> Vec<Violation> {
        self.check_in(&World::new())
    }

    fn map_payload(mut self, f: impl FnOnce(&[u8]) -> Vec<u8>) -> Self {
        self.payload = f(&self.payload);
        self
    }

    fn map_headers(mut self, f: impl FnOnce(&mut Headers)) -> Self {
        f(&mut self.headers);
        self
    }
}

// ---- editing JSON text field by field, keeping everything else byte for byte ----

fn fields(bytes: &[u8]) -> Vec<(String, String)> {
    Object::parse(bytes)
        .unwrap()
        .0
        .into_iter()
        .map(|(k, v)| (k, v.get().to_owned()))
        .collect()
}

fn join(fields: &[(String, String)]) -> Vec<u8> {
    let mut out = b"{".to_vec();
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend(go_json::to_vec(k).unwrap());
        out.push(b':');
        out.extend(v.as_bytes());
    }
    out.push(b'}');
    out
}

/// Sets `key` to the raw JSON `raw` where it is, or appends it.
fn set(bytes: &[u8], key: &str, raw: &str) -> Vec<u8> {
    let mut f = fields(bytes);
    match f.iter_mut().find(|(k, _)| k == key) {
        Some((_, v)) => *v = raw.to_owned(),
        None => f.push((key.to_owned(), raw.to_owned())),
    }
    join(&f)
}

fn remove(bytes: &[u8], key: &str) -> Vec<u8> {
    let mut f = fields(bytes);
    f.retain(|(k, _)| k != key);
    join(&f)
}

fn get(bytes: &[u8], key: &str) -> String {
    fields(bytes)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
        .unwrap()
}

/// Edits the nested object at `key`.
fn nested(bytes: &[u8], key: &str, f: impl FnOnce(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let inner = f(get(bytes, key).as_bytes());
    set(bytes, key, std::str::from_utf8(&inner).unwrap())
}

// ---- conforming messages ----

fn register_msg() -> Msg {
    Msg::new(subject::MANIFEST_REGISTER, manifest().to_json().unwrap())
}

fn heartbeat() -> Heartbeat {
    Heartbeat {
        service: SVC.into(),
        service_version: "1.4.0".into(),
        manifest_hash: manifest().manifest_hash,
        started_at: t("2026-05-26T14:30:45.1Z"),
        now: t("2026-05-26T14:31:00Z"),
        shutting_down: false,
    }
}

fn heartbeat_msg() -> Msg {
    Msg::new(subject::HEARTBEAT, heartbeat().to_json().unwrap())
}

fn completion() -> CompletionEvent {
    CompletionEvent {
        flow_run_id: "run-01".into(),
        flow_id: "flow-lab".into(),
        flow_version: 3,
        node_id: "send".into(),
        node_type: "action".into(),
        service: SVC.into(),
        started_at: t("2026-05-26T14:30:45.5Z"),
        finished_at: t("2026-05-26T14:30:45.512345Z"),
        status: status::SUCCEEDED.into(),
        error: String::new(),
        trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
    }
}

fn completion_msg() -> Msg {
    Msg::new(
        "triggers.v2.flow.events.flow-lab",
        completion().to_json().unwrap(),
    )
}

fn envelope() -> Envelope {
    Envelope {
        trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        span_id: "00f067aa0ba902b7".into(),
        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
        flow_run_id: "run-01".into(),
        flow_id: "flow-lab".into(),
        flow_version: 3,
        idempotency_key: "run-01:send".into(),
        source_node_id: "in".into(),
        retry_count: 2,
        emitted_at: t("2026-05-26T14:30:45.1Z"),
    }
}

fn dlq_entry(kind: &str) -> DlqEntry {
    DlqEntry {
        kind: kind.into(),
        envelope: envelope(),
        body: RawJson::from_text(r#"{"amount":2.50,"tags":["a","b"]}"#).unwrap(),
        err_msg: "boom: 3 attempts failed".into(),
        occurred_at: t("2026-05-26T14:30:47.000000001Z"),
    }
}

fn dlq_headers(key: &str) -> Headers {
    [(names::NATS_MSG_ID, header::dlq_msg_id(key, DLQ_NS))]
        .into_iter()
        .collect()
}

fn dlq_msg() -> Msg {
    Msg::new(
        "triggers.v2.dlq.svc.send",
        dlq_entry(dlq_kind::ACTION_FAILED).to_json().unwrap(),
    )
    .with_headers(dlq_headers("run-01:send"))
}

fn dlq_fallback_msg() -> Msg {
    Msg::new(
        "triggers.v2.dlq.svc.invalid_json",
        dlq_entry("invalid_json").to_json().unwrap(),
    )
    .with_headers(dlq_headers("run-01:send"))
}

fn hop_msg() -> Msg {
    let env = envelope();
    let mut headers = env.to_headers();
    headers.insert(names::NATS_MSG_ID, env.nats_msg_id());
    Msg::new(INBOUND, br#"{"amount":12}"#.to_vec()).with_headers(headers)
}

fn conforming() -> Vec<(&'static str, Msg)> {
    vec![
        ("register", register_msg()),
        (
            "fetch",
            Msg::new(subject::MANIFEST_FETCH, br#"{"service":"svc"}"#.to_vec()),
        ),
        ("heartbeat", heartbeat_msg()),
        (
            "heartbeat shutting down",
            heartbeat_msg().map_payload(|p| set(p, "shutting_down", "true")),
        ),
        ("completion", completion_msg()),
        (
            "failed completion with an error",
            Msg::new(
                "triggers.v2.flow.events.flow-lab",
                CompletionEvent {
                    status: status::FAILED.into(),
                    error: "upstream said <503> & \"try later\"\n".into(),
                    trace_id: String::new(),
                    ..completion()
                }
                .to_json()
                .unwrap(),
            ),
        ),
        ("dlq", dlq_msg()),
        ("dlq fallback", dlq_fallback_msg()),
        (
            "dlq missing_envelope with an empty key",
            Msg::new(
                "triggers.v2.dlq.svc.missing_envelope",
                DlqEntry {
                    envelope: Envelope::default(),
                    ..dlq_entry("missing_envelope")
                }
                .to_json()
                .unwrap(),
            )
            .with_headers(dlq_headers("")),
        ),
        ("hop", hop_msg()),
        (
            "hop with tracing headers left out",
            hop_msg().map_headers(|h| {
                h.remove(names::TRACE_ID);
                h.remove(names::SPAN_ID);
                h.remove(names::TRACEPARENT);
            }),
        ),
        (
            "outside triggers.v2",
            Msg::new("other.subject", b"anything".to_vec()),
        ),
    ]
}

#[test]
fn conforming_messages_give_no_violation() {
    for (name, msg) in conforming() {
        let found = msg.check();
        assert!(found.is_empty(), "{name}: {found:#?}");
    }
}

/// Go-judged goldens (`testdata/shapes`) are Go's bytes: no rule has anything to say about them
/// beyond who registered.
#[test]
fn go_goldens_give_no_violation() {
    let goldens: [(&str, &[u8]); 6] = [
        (
            subject::HEARTBEAT,
            include_bytes!("../../../testdata/shapes/heartbeat.json"),
        ),
        (
            subject::HEARTBEAT,
            include_bytes!("../../../testdata/shapes/heartbeat_shutting_down.json"),
        ),
        (
            "triggers.v2.flow.events.flow-lab",
            include_bytes!("../../../testdata/shapes/completion_event.json"),
        ),
        (
            "triggers.v2.flow.events.flow-lab",
            include_bytes!("../../../testdata/shapes/completion_event_failed.json"),
        ),
        (
            "triggers.v2.dlq.svc.send",
            include_bytes!("../../../testdata/shapes/dlq_entry.json"),
        ),
        (
            "triggers.v2.dlq.svc.invalid_json",
            include_bytes!("../../../testdata/shapes/dlq_entry_fallback.json"),
        ),
    ];
    for (subject, bytes) in goldens {
        let key = DlqEntry::from_json(bytes)
            .map(|e| e.envelope.idempotency_key)
            .unwrap_or_default();
        let msg = Msg::new(subject, bytes.to_vec()).with_headers(dlq_headers(&key));
        let found = msg.check_in(&World::empty());
        assert!(
            found.iter().all(|v| v.rule == "service_unregistered"),
            "{subject}: {found:#?}"
        );
    }
}

#[test]
fn the_emulators_own_messages_are_not_judged() {
    let world = World::new();
    let broadcast = FlowEnvelope {
        id: "flow-lab".into(),
        version: 1,
        body: json!({}),
    }
    .to_json()
    .unwrap();
    let mut timer_delivery = hop_msg();
    let ctx = TimerContext::Root(RootContext::new("flow-lab", 3, "exec-1"));
    durable_timer::write_triplet(&mut timer_delivery.headers, &ctx, &timer_delivery.payload);
    for msg in [
        Msg::new("triggers.v2.flow.broadcast.svc", broadcast.clone()),
        Msg::new(subject::FLOW_BROADCAST_ALL, broadcast),
        Msg::new("triggers.v2.dlq.source.src-1", b"{}".to_vec()),
        timer_delivery.clone(),
    ] {
        let found = check(
            &world.ctx(),
            &msg.subject,
            &msg.headers,
            &msg.payload,
            Origin::Emulator,
        );
        assert!(found.is_empty(), "{}: {found:#?}", msg.subject);
    }
    // The same delivery from a peer leaks the triplet: it names another execution than its run.
    let rules: Vec<_> = timer_delivery.check().into_iter().map(|v| v.rule).collect();
    assert_eq!(rules, ["triplet_leaked"]);
}

/// Decision 9: a Go SDK may forward the triplet on an internal hop of a Durable Timer lineage;
/// one valid for that hop (this hop's payload hash, the run's root execution) is no violation.
#[test]
fn a_forwarded_triplet_valid_for_its_hop_is_accepted() {
    let mut hop = hop_msg();
    let ctx = TimerContext::Root(RootContext::new("flow-lab", 3, "run-01"));
    durable_timer::write_triplet(&mut hop.headers, &ctx, &hop.payload);
    assert!(hop.check().is_empty(), "{:#?}", hop.check());
}

/// A Python SDK that writes the right values with its keys in another order: one warning.
#[test]
fn python_key_order_is_one_warning_not_an_error() {
    let hb = heartbeat();
    // serde_json's map is sorted: the order of Python's `json.dumps(sort_keys=True)`.
    let sorted = serde_json::to_vec(&serde_json::to_value(&hb).unwrap()).unwrap();
    assert_ne!(sorted, hb.to_json().unwrap());
    let found = Msg::new(subject::HEARTBEAT, sorted).check();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].rule, "not_go_bytes");
    assert_eq!(found[0].severity, Severity::Warning);
    assert!(found[0].message.contains("order"), "{}", found[0].message);
    assert!(found[0].message.contains("byte 2"), "{}", found[0].message);

    // Python's default separators add whitespace: still one warning.
    let spaced = serde_json::to_string(&serde_json::to_value(&hb).unwrap())
        .unwrap()
        .replace("\":", "\": ")
        .replace(",\"", ", \"");
    let found = Msg::new(subject::HEARTBEAT, spaced).check();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].message.contains("whitespace"),
        "{}",
        found[0].message
    );
}

#[test]
fn time_messages_show_what_go_writes() {
    let msg =
        heartbeat_msg().map_payload(|p| set(p, "started_at", "\"2026-05-26T14:30:45.100000000Z\""));
    let found = msg.check();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(
        found[0].message.split(" (").next().unwrap(),
        r#"`started_at` is "2026-05-26T14:30:45.100000000Z"; Go reads it, and writes "2026-05-26T14:30:45.1Z""#
    );
}

#[test]
fn undecodable_messages_say_where() {
    let msg = register_msg().map_payload(|p| set(p, "actions", r#"[{"name": 1}]"#));
    let found = msg.check();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].rule, "undecodable");
    assert!(
        found[0].message.contains("actions[0].name"),
        "{}",
        found[0].message
    );
    assert!(
        found[0].message.contains("line 1, column"),
        "{}",
        found[0].message
    );
    let found = heartbeat_msg()
        .map_payload(|_| b"{\n \"service\": ".to_vec())
        .check();
    assert!(found[0].message.contains("line 2"), "{}", found[0].message);
}

#[test]
fn violations_serialise_for_the_recorder() {
    let v = &heartbeat_msg().map_payload(|p| set(p, "pid", "1")).check()[0];
    let json = serde_json::to_value(v).unwrap();
    assert_eq!(json["severity"], "error");
    assert_eq!(json["rule"], "unknown_field");
    assert_eq!(json["subject"], subject::HEARTBEAT);
    assert!(json["payload"].as_str().unwrap().ends_with(r#""pid":1}"#));
    let bad = Violation {
        payload: vec![b'{', 0xff].into(),
        ..v.clone()
    };
    assert_eq!(serde_json::to_value(&bad).unwrap()["payload"], "{\u{fffd}");
    assert_eq!(Severity::Warning.to_string(), "warning");
    assert!(
        v.to_string()
            .starts_with("error[unknown_field] on triggers.v2.heartbeat: ")
    );
}

#[test]
fn rules_are_unique_snake_case_and_documented() {
    let mut seen = BTreeSet::new();
    for (rule, _, description) in RULES {
        assert!(seen.insert(*rule), "{rule} twice");
        assert!(
            rule.bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit()),
            "{rule}"
        );
        assert!(!description.is_empty());
    }
    let tested: BTreeSet<&str> = TESTED.iter().chain(STATEFUL).copied().collect();
    assert_eq!(
        seen, tested,
        "every rule has its test below, and no test is for a lost rule"
    );
}

#[test]
fn the_manifest_field_list_is_complete() {
    let mut m = manifest();
    m.display_name = "x".into();
    m.description = "x".into();
    m.owner = "x".into();
    m.tags = vec!["x".into()];
    m.supports_rate_limit = true;
    m.runtime_capabilities = vec!["durable_timer.v1".into()];
    m.runtime_lookups = vec![triggers_sdk::wire::Lookup {
        name: "l".into(),
        ..Default::default()
    }];
    m.seal().unwrap();
    let found = Msg::new(subject::MANIFEST_REGISTER, m.to_json().unwrap()).check();
    assert!(found.is_empty(), "{found:#?}");
}

/// Random bytes and mangled messages on every kind of subject never panic.
#[test]
fn random_bytes_never_panic() {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        // xorshift64*
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let alphabet = b"{}[]\":,.-+0123456789eE truefalsnul\\u\n\tZT:abc\xff\xe2\x80\xa8";
    let subjects = [
        subject::MANIFEST_REGISTER,
        subject::MANIFEST_FETCH,
        subject::HEARTBEAT,
        "triggers.v2.flow.events.flow-lab",
        "triggers.v2.flow.broadcast.svc",
        "triggers.v2.dlq.svc.send",
        "triggers.v2.dlq.svc.invalid_json",
        "triggers.v2.dlq.source.s",
        "triggers.v2.dlq.other.x",
        INBOUND,
        "triggers.v2.nope",
        "elsewhere",
    ];
    let seeds: Vec<Msg> = conforming().into_iter().map(|(_, m)| m).collect();
    let world = World::new();
    for i in 0..600 {
        let seed = &seeds[i % seeds.len()];
        let mut payload = if i % 3 == 0 {
            let len = (next() % 80) as usize;
            (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect()
        } else {
            let mut p = seed.payload.clone();
            for _ in 0..(1 + next() % 4) {
                if p.is_empty() {
                    break;
                }
                let at = (next() % p.len() as u64) as usize;
                match next() % 3 {
                    0 => p[at] = alphabet[(next() % alphabet.len() as u64) as usize],
                    1 => {
                        p.remove(at);
                    }
                    _ => p.truncate(at),
                }
            }
            p
        };
        if i % 50 == 0 {
            payload.clear();
        }
        let mut headers = seed.headers.clone();
        if next() % 2 == 0 {
            let name = names::ALL[(next() % names::ALL.len() as u64) as usize];
            let value: String = (0..(next() % 20))
                .map(|_| char::from(alphabet[(next() % 40) as usize]))
                .collect();
            if next() % 2 == 0 {
                headers.append(name.to_ascii_lowercase(), value);
            } else {
                headers.insert(name, value);
            }
        }
        for subject in subjects {
            for v in check(&world.ctx(), subject, &headers, &payload, Origin::Peer) {
                assert!(rule_info(v.rule).is_some(), "{v}");
            }
        }
    }
}

/// An event whose bytes are exactly what Go writes skips the field-by-field pass; the rules of its
/// value still find what the field-by-field path finds, word for word.
#[test]
fn a_go_exact_event_is_judged_as_the_field_by_field_path_judges_it() {
    let world = World::new();
    let cases = [
        completion(),
        CompletionEvent {
            flow_id: "another-flow".into(),
            ..completion()
        },
        CompletionEvent {
            node_type: "widget".into(),
            ..completion()
        },
        CompletionEvent {
            status: "done".into(),
            ..completion()
        },
        CompletionEvent {
            trace_id: "XYZ".into(),
            ..completion()
        },
        CompletionEvent {
            finished_at: t("2026-05-26T14:30:44Z"),
            ..completion()
        },
        CompletionEvent {
            service: "stranger".into(),
            ..completion()
        },
        CompletionEvent {
            service: "bad name".into(),
            ..completion()
        },
        CompletionEvent {
            flow_run_id: String::new(),
            node_id: String::new(),
            ..completion()
        },
        CompletionEvent {
            status: status::FAILED.into(),
            error: "boom \u{2028} <b>".into(),
            ..completion()
        },
    ];
    let mut judged = 0;
    for ev in cases {
        let payload = ev.to_json().unwrap();
        let headers = Headers::new();
        let judge = |by_field: bool| {
            let mut report = Report {
                subject: "triggers.v2.flow.events.flow-lab",
                headers: &headers,
                payload: &payload,
                body: Body::from(&payload[..]),
                shared: None,
                found: Vec::new(),
                more: 0,
                decoded: None,
            };
            if by_field {
                shapes::completion_by_field(&world.ctx(), &mut report, "flow-lab");
            } else {
                shapes::completion(&world.ctx(), &mut report, "flow-lab");
            }
            report
                .found
                .iter()
                .map(|v| (v.rule, v.message.clone()))
                .collect::<Vec<_>>()
        };
        let fast = judge(false);
        assert_eq!(fast, judge(true), "{}", String::from_utf8_lossy(&payload));
        judged += usize::from(!fast.is_empty());
    }
    // Every case but the first and the last breaks a rule of the value.
    assert_eq!(judged, 8);
}

#[test]
fn a_dlq_entry_copying_a_malformed_trace_from_its_delivery_is_not_blamed() {
    // protocol.md §9: the envelope is the delivery's as read; a service ignores a malformed
    // trace field and goes on, so what it copies is not its mistake.
    for kind in ["action_failed", "invalid_input"] {
        let found = dlq_msg()
            .map_payload(|p| {
                let p = set(p, "kind", &format!("\"{kind}\""));
                nested(&p, "envelope", |e| {
                    let e = set(e, "trace_id", "\"XYZ\"");
                    let e = set(&e, "span_id", "\"nope\"");
                    set(&e, "traceparent", "\"garbage\"")
                })
            })
            .check();
        assert!(found.is_empty(), "{kind}: {found:#?}");
    }
}
