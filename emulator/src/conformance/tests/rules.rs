//! One test per rule: a message made wrong in one way from a conforming one must fire the rule
//! with its severity, and nothing else.

use super::*;

/// A message made wrong in one way: `rule` must fire with `severity`, and the rules that fire are
/// exactly `rule` and `also`.
struct Case {
    rule: &'static str,
    severity: Severity,
    msg: Msg,
    world: World,
    also: &'static [&'static str],
}

fn case(rule: &'static str, severity: Severity, msg: Msg) -> Case {
    Case {
        rule,
        severity,
        msg,
        world: World::new(),
        also: &[],
    }
}

impl Case {
    fn also(mut self, rules: &'static [&'static str]) -> Self {
        self.also = rules;
        self
    }
}

fn run(cases: Vec<Case>) {
    assert!(!cases.is_empty());
    for c in cases {
        let found = c.msg.check_in(&c.world);
        let hit = found.iter().find(|v| v.rule == c.rule);
        let hit =
            hit.unwrap_or_else(|| panic!("{} did not fire on {:?}: {found:#?}", c.rule, c.msg));
        assert_eq!(hit.severity, c.severity, "{hit}");
        let fired: BTreeSet<&str> = found.iter().map(|v| v.rule).collect();
        let want: BTreeSet<&str> = c.also.iter().copied().chain([c.rule]).collect();
        assert_eq!(fired, want, "{found:#?}");
    }
}

use Severity::{Error, Warning};

macro_rules! rule_tests {
    ($($rule:ident => $cases:expr;)*) => {
        pub(super) const TESTED: &[&str] = &[$(stringify!($rule)),*];
        $(
            #[test]
            fn $rule() {
                run($cases);
            }
        )*
    };
}

rule_tests! {
    unknown_subject => vec![
        case("unknown_subject", Warning, Msg::new("triggers.v2.flow.event.flow-lab", b"{}".to_vec())),
        case("unknown_subject", Warning, Msg::new("triggers.v2.flow.events.a.b", b"{}".to_vec())),
        case("unknown_subject", Warning, Msg::new("triggers.v2.dlq.svc", b"{}".to_vec())),
    ];
    source_dlq_publish => vec![
        case("source_dlq_publish", Error, Msg { subject: "triggers.v2.dlq.source.src-1".into(), ..dlq_msg() }),
    ];
    peer_broadcast => vec![
        case("peer_broadcast", Warning, Msg::new("triggers.v2.flow.broadcast.svc", b"{}".to_vec())),
        case("peer_broadcast", Warning, Msg::new(subject::FLOW_BROADCAST_ALL, b"{}".to_vec())),
    ];
    header_spelling => vec![
        case("header_spelling", Warning, hop_msg().map_headers(|h| {
            let v = h.get(names::FLOW_ID).unwrap().to_owned();
            h.insert("x-triggers-flow-id", v);
        })),
        case("header_spelling", Warning, completion_msg().map_headers(|h| {
            h.insert("X-TRIGGERS-TRACE-ID", "4bf92f3577b34da6a3ce929d0e0e4736");
        })),
    ];
    nats_msg_id_spelling => vec![
        case("nats_msg_id_spelling", Error, hop_msg().map_headers(|h| {
            h.insert("nats-msg-id", "run-01:send");
        })),
        case("nats_msg_id_spelling", Error, dlq_msg().map_headers(|h| {
            h.insert("NATS-MSG-ID", header::dlq_msg_id("run-01:send", DLQ_NS));
        })),
    ];
    header_unknown => vec![
        case("header_unknown", Warning, hop_msg().map_headers(|h| {
            h.append("X-Triggers-TraceId", "4bf92f3577b34da6a3ce929d0e0e4736");
        })),
    ];
    header_repeated => vec![
        case("header_repeated", Warning, hop_msg().map_headers(|h| {
            h.append(names::FLOW_ID, "flow-other");
        })),
    ];
    undecodable => vec![
        case("undecodable", Error, heartbeat_msg().map_payload(|_| b"not json".to_vec())),
        case("undecodable", Error, heartbeat_msg().map_payload(|_| Vec::new())),
        case("undecodable", Error, completion_msg().map_payload(|_| b"[1]".to_vec())),
        case("undecodable", Error, dlq_msg().map_payload(|p| p[..p.len() - 1].to_vec())),
        case("undecodable", Error, register_msg().map_payload(|p| set(p, "actions", r#"[{"name":1}]"#))),
        case("undecodable", Error, register_msg().map_payload(|p| remove(p, "supports_nodes"))),
    ];
    missing_field => vec![
        case("missing_field", Error, heartbeat_msg().map_payload(|p| remove(p, "now"))),
        case("missing_field", Error, heartbeat_msg().map_payload(|p| remove(p, "shutting_down"))),
        case("missing_field", Error, completion_msg().map_payload(|p| remove(p, "service"))),
        case("missing_field", Error, completion_msg().map_payload(|p| remove(p, "started_at"))),
        case("missing_field", Error, dlq_msg().map_payload(|p| remove(p, "body"))),
        case("missing_field", Error, dlq_msg()
            .map_payload(|p| nested(p, "envelope", |e| remove(e, "emitted_at")))),
        case("missing_field", Error, dlq_msg()
            .map_payload(|p| nested(p, "envelope", |e| remove(e, "trace_id")))),
    ];
    unknown_field => vec![
        case("unknown_field", Error, heartbeat_msg().map_payload(|p| set(p, "pid", "1"))),
        case("unknown_field", Error, completion_msg().map_payload(|p| set(p, "attempt", "2"))),
        case("unknown_field", Error, dlq_msg().map_payload(|p| set(p, "attempts", "3"))),
        case("unknown_field", Error, dlq_msg()
            .map_payload(|p| nested(p, "envelope", |e| set(e, "tenant", "\"t-1\"")))),
    ];
    duplicate_field => vec![
        case("duplicate_field", Error, heartbeat_msg().map_payload(|p| {
            let mut f = fields(p);
            f.push(("service".into(), "\"svc\"".into()));
            join(&f)
        })),
    ];
    wrong_type => vec![
        case("wrong_type", Error, heartbeat_msg().map_payload(|p| set(p, "shutting_down", "\"false\""))),
        case("wrong_type", Error, heartbeat_msg().map_payload(|p| set(p, "service_version", "14"))),
        case("wrong_type", Error, completion_msg().map_payload(|p| set(p, "flow_version", "3.0"))),
        case("wrong_type", Error, completion_msg().map_payload(|p| set(p, "flow_version", "\"3\""))),
        case("wrong_type", Error, completion_msg().map_payload(|p| set(p, "started_at", "1779805845"))),
        case("wrong_type", Error, dlq_msg().map_payload(|p| set(p, "envelope", "\"run-01:send\""))),
        case("wrong_type", Error, dlq_msg()
            .map_payload(|p| nested(p, "envelope", |e| set(e, "retry_count", "1e0")))),
    ];
    null_field => vec![
        case("null_field", Warning, completion_msg().map_payload(|p| set(p, "error", "null"))),
        case("null_field", Warning, dlq_msg().map_payload(|p| set(p, "envelope", "null"))),
        case("null_field", Warning, heartbeat_msg().map_payload(|p| set(p, "service_version", "null"))),
        case("null_field", Warning, completion_msg().map_payload(|p| set(p, "flow_version", "null")))
            .also(&[]),
    ];
    time_invalid => vec![
        case("time_invalid", Error, heartbeat_msg()
            .map_payload(|p| set(p, "now", "\"2026-05-26 14:31:00\""))),
        case("time_invalid", Error, completion_msg()
            .map_payload(|p| set(p, "finished_at", "\"yesterday\""))),
    ];
    // Go reads these: the bytes differ from what it writes, no more (spec-style padding too).
    time_not_go_text => vec![
        case("time_not_go_text", Warning, heartbeat_msg()
            .map_payload(|p| set(p, "started_at", "\"2026-05-26T14:30:45.100000000Z\""))),
        case("time_not_go_text", Warning, heartbeat_msg()
            .map_payload(|p| set(p, "now", "\"2026-05-26T14:31:00+00:00\""))),
        case("time_not_go_text", Warning, completion_msg()
            .map_payload(|p| set(p, "finished_at", "\"2026-05-26T14:30:45.512345000Z\""))),
        case("time_not_go_text", Warning, dlq_msg()
            .map_payload(|p| set(p, "occurred_at", "\"2026-05-26T14:30:47.000000001+00:00\""))),
        case("time_not_go_text", Warning, dlq_msg().map_payload(|p| {
            nested(p, "envelope", |e| set(e, "emitted_at", "\"2026-05-26T14:30:45.100Z\""))
        })),
        case("time_not_go_text", Warning, hop_msg().map_headers(|h| {
            h.insert(names::EMITTED_AT, "2026-05-26T14:30:45.100000Z");
        })),
    ];
    empty_omitempty_field => vec![
        case("empty_omitempty_field", Warning, completion_msg().map_payload(|p| set(p, "error", "\"\""))),
        case("empty_omitempty_field", Warning, completion_msg().map_payload(|p| set(p, "trace_id", "\"\""))),
    ];
    not_go_bytes => vec![
        // Number text: Go writes the float64 2.0 as 2 (the hash is unaffected).
        case("not_go_bytes", Warning, register_msg().map_payload(|p| {
            String::from_utf8(p.to_vec()).unwrap()
                .replace("\"backoff_factor\":2,", "\"backoff_factor\":2.0,").into_bytes()
        })),
        // Catalog fields present but empty: Go leaves them out.
        case("not_go_bytes", Warning, register_msg().map_payload(|p| set(p, "tags", "[]"))),
        // HTML escaping: Go's encoder has it switched off.
        case("not_go_bytes", Warning, Msg::new("triggers.v2.flow.events.flow-lab", CompletionEvent {
            status: status::FAILED.into(),
            error: "upstream said <503>".into(),
            ..completion()
        }.to_json().unwrap()).map_payload(|p| {
            String::from_utf8(p.to_vec()).unwrap().replace('<', "\\u003c").into_bytes()
        })),
        // A trailing newline (json.Encoder's, which the contract strips).
        case("not_go_bytes", Warning, heartbeat_msg().map_payload(|p| [p, b"\n"].concat())),
        // Envelope keys in another order inside a DLQ entry.
        case("not_go_bytes", Warning, dlq_msg().map_payload(|p| nested(p, "envelope", |e| {
            let mut f = fields(e);
            f.reverse();
            join(&f)
        }))),
        // Whitespace in the raw body: Go compacts a RawMessage.
        case("not_go_bytes", Warning, dlq_msg().map_payload(|p| set(p, "body", "{\"amount\": 2.50}"))),
    ];
    service_invalid => vec![
        case("service_invalid", Error, heartbeat_msg().map_payload(|p| set(p, "service", "\"\""))),
        case("service_invalid", Error, completion_msg().map_payload(|p| set(p, "service", "\"\""))),
        case("service_invalid", Error, heartbeat_msg().map_payload(|p| set(p, "service", "\"all\""))),
        case("service_invalid", Error, Msg { subject: "triggers.v2.dlq.all.send".into(), ..dlq_msg() }),
    ];
    service_unregistered => vec![
        case("service_unregistered", Warning, heartbeat_msg().map_payload(|p| set(p, "service", "\"other\""))),
        case("service_unregistered", Warning, completion_msg().map_payload(|p| set(p, "service", "\"other\""))),
        case("service_unregistered", Warning, Msg { subject: "triggers.v2.dlq.other.send".into(), ..dlq_msg() }),
    ];
    manifest_invalid => vec![{
        let mut m = manifest();
        m.actions[0].timeout_ms = 0;
        m.actions[0].dlq = "triggers.v2.dlq.svc.other".into();
        m.seal().unwrap();
        case("manifest_invalid", Error, Msg::new(subject::MANIFEST_REGISTER, m.to_json().unwrap()))
    }, {
        let mut m = manifest();
        m.protocol_version = "one".into();
        case("manifest_invalid", Error, Msg::new(subject::MANIFEST_REGISTER, m.to_json().unwrap()))
    }];
    protocol_major => vec![{
        let mut m = manifest();
        m.protocol_version = "2.0.0".into();
        case("protocol_major", Error, Msg::new(subject::MANIFEST_REGISTER, m.to_json().unwrap()))
    }];
    manifest_hash_mismatch => vec![
        case("manifest_hash_mismatch", Error, register_msg().map_payload(|p| {
            set(p, "manifest_hash", &format!("\"sha256:{}\"", "0".repeat(64)))
        })),
        case("manifest_hash_mismatch", Error, register_msg().map_payload(|p| remove(p, "manifest_hash"))),
        case("manifest_hash_mismatch", Error, {
            let mut m = manifest();
            m.actions[0].timeout_ms = 1000;
            Msg::new(subject::MANIFEST_REGISTER, m.to_json().unwrap())
        }),
    ];
    manifest_unknown_field => vec![
        case("manifest_unknown_field", Warning, register_msg().map_payload(|p| set(p, "sdk", "\"python\""))),
    ];
    heartbeat_hash_form => vec![
        case("heartbeat_hash_form", Error, heartbeat_msg().map_payload(|p| set(p, "manifest_hash", "\"6f3a\""))),
        case("heartbeat_hash_form", Error, heartbeat_msg().map_payload(|p| set(p, "manifest_hash", "\"\""))),
    ];
    heartbeat_hash_unknown => vec![
        case("heartbeat_hash_unknown", Warning, heartbeat_msg().map_payload(|p| {
            set(p, "manifest_hash", &format!("\"sha256:{}\"", "a".repeat(64)))
        })),
    ];
    heartbeat_time_order => vec![
        case("heartbeat_time_order", Warning, heartbeat_msg()
            .map_payload(|p| set(p, "now", "\"2026-05-26T14:30:45Z\""))),
    ];
    completion_has_result => vec![
        case("completion_has_result", Error, completion_msg().map_payload(|p| set(p, "result", "{\"ok\":true}"))),
        case("completion_has_result", Error, completion_msg().map_payload(|p| set(p, "output", "null"))),
    ];
    completion_flow_mismatch => vec![
        case("completion_flow_mismatch", Error, Msg {
            subject: "triggers.v2.flow.events.flow-other".into(),
            ..completion_msg()
        }),
    ];
    completion_field_empty => vec![
        case("completion_field_empty", Warning, completion_msg().map_payload(|p| set(p, "node_id", "\"\""))),
        case("completion_field_empty", Warning, completion_msg().map_payload(|p| set(p, "flow_run_id", "\"\""))),
    ];
    completion_node_type_unknown => vec![
        case("completion_node_type_unknown", Warning, completion_msg().map_payload(|p| set(p, "node_type", "\"task\""))),
        case("completion_node_type_unknown", Warning, completion_msg().map_payload(|p| set(p, "node_type", "\"Action\""))),
    ];
    completion_status_unknown => vec![
        case("completion_status_unknown", Warning, completion_msg().map_payload(|p| set(p, "status", "\"success\""))),
    ];
    completion_time_order => vec![
        case("completion_time_order", Warning, completion_msg()
            .map_payload(|p| set(p, "finished_at", "\"2026-05-26T14:30:45Z\""))),
    ];
    trace_id_form => vec![
        case("trace_id_form", Warning, completion_msg()
            .map_payload(|p| set(p, "trace_id", "\"4BF92F3577B34DA6A3CE929D0E0E4736\""))),
    ];
    dlq_msg_id_missing => vec![
        case("dlq_msg_id_missing", Error, dlq_msg().map_headers(|h| { h.remove(names::NATS_MSG_ID); })),
    ];
    dlq_msg_id_form => vec![
        case("dlq_msg_id_form", Error, dlq_msg().map_headers(|h| h.insert(names::NATS_MSG_ID, "run-01:send"))),
        case("dlq_msg_id_form", Error, dlq_msg().map_headers(|h| h.insert(names::NATS_MSG_ID, "run-01:send:dlq:2026-05-26T14:30:47Z"))),
        // An empty key only fits an entry whose envelope has none.
        case("dlq_msg_id_form", Error, dlq_msg().map_headers(|h| h.insert(names::NATS_MSG_ID, ":dlq:1"))),
    ];
    dlq_msg_id_key_mismatch => vec![
        case("dlq_msg_id_key_mismatch", Error, dlq_msg()
            .map_headers(|h| h.insert(names::NATS_MSG_ID, header::dlq_msg_id("run-02:send", DLQ_NS)))),
    ];
    dlq_subject_unknown_tail => vec![
        case("dlq_subject_unknown_tail", Error, Msg { subject: "triggers.v2.dlq.svc.sned".into(), ..dlq_msg() }),
    ];
    dlq_msg_id_time => vec![
        // Milliseconds where nanoseconds belong.
        case("dlq_msg_id_time", Error, dlq_msg().map_headers(|h| {
            h.insert(names::NATS_MSG_ID, header::dlq_msg_id("run-01:send", DLQ_NS / 1_000_000));
        })),
    ];
    dlq_envelope_invalid => vec![
        // A routing failure's envelope is the hop's, the service's own: its trace answers.
        case("dlq_envelope_invalid", Error, dlq_msg().map_payload(|p| {
            let p = set(p, "kind", "\"routing_failed\"");
            nested(&p, "envelope", |e| set(e, "trace_id", "\"XYZ\""))
        })),
        case("dlq_envelope_invalid", Error, dlq_msg().map_payload(|p| {
            let p = set(p, "kind", "\"routing_failed\"");
            nested(&p, "envelope", |e| set(e, "traceparent", "\"00-zz-zz-01\""))
        })),
        case("dlq_envelope_invalid", Error, dlq_msg().map_payload(|p| {
            nested(p, "envelope", |e| set(e, "source_node_id", "\"\""))
        })),
        // An empty key: the Nats-Msg-Id cannot carry the entry's key either.
        case("dlq_envelope_invalid", Error, dlq_msg()
            .map_payload(|p| nested(p, "envelope", |e| set(e, "idempotency_key", "\"\"")))
            .map_headers(|h| h.insert(names::NATS_MSG_ID, header::dlq_msg_id("", DLQ_NS)))),
    ];
    dlq_body_double_encoded => vec![
        case("dlq_body_double_encoded", Error, dlq_msg().map_payload(|p| {
            set(p, "body", r#""{\"amount\":2.5}""#)
        })),
    ];
    dlq_kind_mismatch => vec![
        case("dlq_kind_mismatch", Warning, dlq_fallback_msg().map_payload(|p| set(p, "kind", "\"unknown_flow\""))),
        case("dlq_kind_mismatch", Warning, dlq_fallback_msg().map_payload(|p| set(p, "kind", "\"action_failed\""))),
    ];
    dlq_kind_unknown => vec![
        case("dlq_kind_unknown", Warning, dlq_msg().map_payload(|p| set(p, "kind", "\"boom\""))),
        case("dlq_kind_unknown", Warning, dlq_msg().map_payload(|p| set(p, "kind", "\"invalid_json\""))),
    ];
    hop_envelope_invalid => vec![
        case("hop_envelope_invalid", Error, hop_msg().map_headers(|h| { h.remove(names::FLOW_ID); })),
        case("hop_envelope_invalid", Error, hop_msg().map_headers(|h| h.insert(names::RETRY_COUNT, "02"))),
        case("hop_envelope_invalid", Error, hop_msg().map_headers(|h| h.insert(names::TRACE_ID, "4BF9"))),
        case("hop_envelope_invalid", Error, hop_msg().map_headers(|h| h.insert(names::EMITTED_AT, "yesterday"))),
        case("hop_envelope_invalid", Error, hop_msg().with_headers(Headers::new())).also(&["hop_msg_id"]),
    ];
    hop_msg_id => vec![
        case("hop_msg_id", Error, hop_msg().map_headers(|h| { h.remove(names::NATS_MSG_ID); })),
        case("hop_msg_id", Error, hop_msg().map_headers(|h| h.insert(names::NATS_MSG_ID, "run-01:send:dlq:1"))),
    ];
    traceparent_mismatch => vec![
        case("traceparent_mismatch", Warning, hop_msg().map_headers(|h| {
            h.insert(names::TRACEPARENT, "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01");
        })),
    ];
    traceparent_invalid => vec![
        case("traceparent_invalid", Warning, hop_msg().map_headers(|h| h.insert(names::TRACEPARENT, "00-0000-00f067aa0ba902b7-01"))),
    ];
    triplet_leaked => vec![
        // A root context of another execution than the hop's run.
        case("triplet_leaked", Error, hop_msg().map_headers(|h| {
            let ctx = TimerContext::Root(RootContext::new("flow-lab", 3, "exec-1"));
            durable_timer::write_triplet(h, &ctx, br#"{"amount":12}"#);
        })),
        // The payload hash of other bytes than this hop's.
        case("triplet_leaked", Error, hop_msg().map_headers(|h| {
            let ctx = TimerContext::Root(RootContext::new("flow-lab", 3, "run-01"));
            durable_timer::write_triplet(h, &ctx, br#"{"amount":13}"#);
        })),
        case("triplet_leaked", Error, hop_msg().map_headers(|h| {
            h.insert(names::EXECUTION_ID, "exec-1");
        })),
    ];
    manifest_lenient => vec![
        case("manifest_lenient", Warning, register_msg().map_payload(|_| {
            let mut m = manifest();
            m.service_version.clear();
            m.seal().unwrap();
            m.to_json().unwrap()
        })),
        case("manifest_lenient", Warning, register_msg().map_payload(|_| {
            let mut m = manifest();
            m.actions[0].input_schema = None;
            m.seal().unwrap();
            m.to_json().unwrap()
        })),
    ];
    capabilities_not_canonical => vec![
        case("capabilities_not_canonical", Warning, register_msg().map_payload(|_| {
            let mut m = manifest();
            m.runtime_capabilities = vec!["x.v1".into(), "durable_timer.v1".into(), "x.v1".into()];
            m.seal().unwrap();
            m.to_json().unwrap()
        })),
    ];
    violations_capped => vec![
        case("violations_capped", Warning, hop_msg().map_headers(|h| {
            for i in 0..40 {
                h.insert(format!("X-Triggers-Junk-{i}"), "x");
            }
        })).also(&["header_unknown"]),
    ];
}

/// Rules about a run as a whole, not one message: the emulator fires them (see
/// `emulator/tests/delivery.rs` and `run.rs`'s tests), the pure checker cannot.
pub(super) const STATEFUL: &[&str] = &[
    "idempotency_key_reused",
    "completion_unexpected",
    "delivery_deduplicated",
    "completion_node_unknown",
    "completion_node_type_mismatch",
    "completion_status_invalid",
    "completion_service_mismatch",
    "completion_version_mismatch",
    "completion_trace_mismatch",
    "retries_exceed_policy",
    "service_in_unreported",
    "hop_flow_unknown",
    "hop_node_unknown",
    "heartbeat_version_mismatch",
    // Fired in `emulator/tests/order.rs` (the last four need the wire tap).
    "hop_traceparent_missing",
    "hop_version_mismatch",
    "hop_not_jetstream",
    "handed_on_before_event",
    "dlq_before_failed_event",
    "ack_before_reports",
    // Fired by the emulator's stream follower (emulator/tests/bounds.rs).
    "emulator_stream_lost",
    // Read from the JetStream API: `emulator/tests/order.rs`.
    "consumer_missing",
    "consumer_config",
];
