//! What the fuzzer sends: a random message of one of the targets, made from a valid one and
//! mutated (headers, sizes, encodings, JSON shapes, Durable Timer triplets, flow bodies).

use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use triggers_emulator::Harness;
use triggers_sdk::wire::durable_timer::{self, RootContext, TimerContext};
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::{Envelope, GoTime, Headers, idempotency};

use super::{FLOW, INBOUND, SERVICE, flows};

/// One message to send, and how its outcome is found.
#[derive(Debug, Clone)]
pub(super) struct Message {
    pub(super) target: &'static str,
    pub(super) subject: String,
    pub(super) headers: Headers,
    pub(super) body: Vec<u8>,
    pub(super) how: Send,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Send {
    /// A core-NATS request: a reply is the outcome.
    Request,
    /// A core-NATS publish the emulator records.
    Publish,
    /// A JetStream publish onto the service's inbound stream: a completion or a DLQ entry for
    /// the run is the outcome (the run id is in the message).
    Inbound,
}

// ---- mutators ------------------------------------------------------------------------------

fn weird_string(rng: &mut StdRng) -> String {
    match rng.random_range(0..12) {
        0 => String::new(),
        1 => "x".repeat(rng.random_range(1_000..20_000)),
        2 => "\u{2028}\u{2029}<>&\"\\\u{0}\u{1f}".into(),
        3 => "0000-01-01T00:00:00Z".into(),
        4 => "9999-12-31T23:59:59.999999999Z".into(),
        5 => "2026-13-40T99:99:99Z".into(),
        6 => "a.b.c > *".into(),
        7 => "ünïcødé 💥".into(),
        8 => "sha256:".to_owned() + &"0".repeat(64),
        9 => "-1".into(),
        10 => "in\nwork".into(),
        _ => format!("r{}", rng.random::<u32>()),
    }
}

fn weird_value(rng: &mut StdRng, depth: usize) -> Value {
    match rng.random_range(0..12) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(i64::MIN),
        3 => json!(u64::MAX),
        4 => json!(1e308),
        5 => json!(-0.0),
        6 => json!(1.5),
        7 => Value::String(weird_string(rng)),
        8 => json!([]),
        9 => json!({}),
        10 if depth < 3 => {
            // Deep nesting: past serde_json's recursion limit sometimes.
            let levels = rng.random_range(1..300);
            let mut v = json!(1);
            for _ in 0..levels {
                v = json!([v]);
            }
            v
        }
        _ => json!(rng.random::<i32>()),
    }
}

/// A mutation of a JSON value: a key removed, a value of another type, a key added.
fn mutate_json(rng: &mut StdRng, value: &mut Value, depth: usize) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            let keys: Vec<String> = map.keys().cloned().collect();
            let key = keys[rng.random_range(0..keys.len())].clone();
            match rng.random_range(0..4) {
                0 => {
                    map.remove(&key);
                }
                1 => {
                    map.insert(key, weird_value(rng, depth));
                }
                2 => {
                    map.insert(weird_string(rng), weird_value(rng, depth));
                }
                _ => {
                    if let Some(v) = map.get_mut(&key) {
                        mutate_json(rng, v, depth + 1);
                    }
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let i = rng.random_range(0..items.len());
            if rng.random_bool(0.3) {
                items.remove(i);
            } else {
                mutate_json(rng, &mut items[i], depth + 1);
            }
        }
        other => *other = weird_value(rng, depth),
    }
}

/// A body from a JSON value: its bytes, mutated as JSON or as bytes.
fn body_of(rng: &mut StdRng, mut value: Value) -> Vec<u8> {
    let rounds = rng.random_range(0..4);
    for _ in 0..rounds {
        mutate_json(rng, &mut value, 0);
    }
    let mut bytes = serde_json::to_vec(&value).unwrap_or_default();
    match rng.random_range(0..10) {
        0 => bytes.truncate(rng.random_range(0..=bytes.len())),
        1 => {
            // Bytes that are not UTF-8.
            let at = rng.random_range(0..=bytes.len());
            bytes.splice(at..at, [0xff, 0xfe, 0xc3]);
        }
        2 => {
            for _ in 0..rng.random_range(1..8) {
                if !bytes.is_empty() {
                    let i = rng.random_range(0..bytes.len());
                    bytes[i] = rng.random();
                }
            }
        }
        3 => bytes = Vec::new(),
        4 => {
            // Large: up to 600 KB (the server's max_payload is 1 MB), mostly less.
            let n = if rng.random_bool(0.1) {
                rng.random_range(300_000..600_000)
            } else {
                rng.random_range(10_000..100_000)
            };
            bytes = serde_json::to_vec(&json!({"pad": "p".repeat(n)})).unwrap_or_default();
        }
        5 => {
            // UTF-16 with a BOM: another encoding.
            let text = String::from_utf8_lossy(&bytes).into_owned();
            bytes = vec![0xff, 0xfe];
            for u in text.encode_utf16() {
                bytes.extend_from_slice(&u.to_le_bytes());
            }
        }
        _ => {}
    }
    bytes
}

/// Header mutations: junk names, other spellings, repeats, long and odd values.
fn mutate_headers(rng: &mut StdRng, headers: &mut Headers) {
    for _ in 0..rng.random_range(0..4) {
        match rng.random_range(0..9) {
            0 => {
                for i in 0..rng.random_range(1..200) {
                    headers.insert(format!("X-Triggers-Junk-{i}"), "junk");
                }
            }
            1 => {
                let names: Vec<String> = headers.iter().map(|(n, _)| n.to_owned()).collect();
                if let Some(n) = names.get(rng.random_range(0..names.len().max(1))) {
                    let v = headers.get(n).unwrap_or_default().to_owned();
                    headers.remove(n);
                    headers.insert(n.to_ascii_lowercase(), v);
                }
            }
            2 => {
                let names: Vec<String> = headers.iter().map(|(n, _)| n.to_owned()).collect();
                if let Some(n) = names.get(rng.random_range(0..names.len().max(1))) {
                    headers.append(n.clone(), "repeated");
                }
            }
            3 => {
                let names: Vec<String> = headers.iter().map(|(n, _)| n.to_owned()).collect();
                if let Some(n) = names.get(rng.random_range(0..names.len().max(1))) {
                    let v = weird_string(rng).replace(['\r', '\n'], " ");
                    headers.insert(n.clone(), v);
                }
            }
            4 => {
                let names: Vec<String> = headers.iter().map(|(n, _)| n.to_owned()).collect();
                if let Some(n) = names.get(rng.random_range(0..names.len().max(1))) {
                    headers.remove(n);
                }
            }
            5 => headers.insert("nats-msg-id", format!("m{}", rng.random::<u32>())),
            6 => headers.insert(names::TRACEPARENT, "00-zz-yy-01"),
            7 => headers.insert(
                names::FLOW_VERSION,
                weird_string(rng).replace(['\r', '\n'], " "),
            ),
            _ => headers.insert(
                names::DURABLE_TIMER_CONTEXT,
                weird_string(rng).replace(['\r', '\n'], " "),
            ),
        }
    }
}

fn random_hex(rng: &mut StdRng, bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", rng.random::<u8>()))
        .collect()
}

/// A delivery onto the service's inbound subject, from a valid one of the fuzz flow, mutated.
fn inbound(rng: &mut StdRng, n: u64, version: i64) -> Message {
    let run_id = format!("fzr-{n}");
    let source = ["in", "t", "in2", "work", "work2", "nope"][rng.random_range(0..6)];
    let trace = random_hex(rng, 16);
    let span = random_hex(rng, 8);
    let key = idempotency::root(&run_id, source);
    let envelope = Envelope {
        trace_id: trace.clone(),
        span_id: span.clone(),
        traceparent: format!("00-{trace}-{span}-01"),
        flow_run_id: run_id.clone(),
        flow_id: if rng.random_bool(0.9) {
            FLOW.into()
        } else {
            "unknown-flow".into()
        },
        flow_version: if rng.random_bool(0.9) {
            version
        } else {
            rng.random_range(-2..1_000)
        },
        idempotency_key: key,
        source_node_id: source.into(),
        retry_count: 0,
        emitted_at: GoTime::now(),
    };
    let mut headers = envelope.to_headers();
    headers.insert(names::NATS_MSG_ID, envelope.nats_msg_id());
    let body = if rng.random_bool(0.3) {
        body_of(rng, json!({"n": n, "x": "y"}))
    } else {
        serde_json::to_vec(&json!({"n": n})).unwrap_or_default()
    };
    match rng.random_range(0..6) {
        // A Durable Timer triplet: valid, or made invalid.
        0 | 1 => {
            let ctx = TimerContext::Root(RootContext::new(FLOW, version, &run_id));
            durable_timer::write_triplet(&mut headers, &ctx, &body);
            if rng.random_bool(0.6) {
                let which = names::DURABLE_TIMER_TRIPLET[rng.random_range(0..3)];
                if rng.random_bool(0.5) {
                    headers.remove(which);
                } else {
                    headers.insert(which, weird_string(rng).replace(['\r', '\n'], " "));
                }
            }
        }
        2 => mutate_headers(rng, &mut headers),
        3 => {
            // No envelope at all (the run id goes with it: counted apart).
            headers = Headers::new();
            headers.insert(names::NATS_MSG_ID, format!("noenv-{n}"));
        }
        _ => {}
    }
    // The run id is how the outcome is found: the mutations above may drop it (the entry then
    // has none, counted apart) but do not change it.
    if headers.contains(names::FLOW_RUN_ID) {
        headers.insert(names::FLOW_RUN_ID, run_id);
    }
    Message {
        target: "inbound",
        subject: INBOUND.into(),
        headers,
        body,
        how: Send::Inbound,
    }
}

fn manifest_value(lab: &Harness) -> Value {
    lab.services()
        .get(SERVICE)
        .and_then(|s| serde_json::to_value(&s.manifest).ok())
        .unwrap_or_else(|| json!({}))
}

/// A random message of one of the targets, by weight: registrations, fetches, heartbeats,
/// completion events, DLQ entries, flow broadcasts, unknown subjects, control requests and
/// deliveries to the service's inbound stream.
pub(super) fn generate(rng: &mut StdRng, n: u64, lab: &Harness, version: i64) -> Message {
    let mut headers = Headers::new();
    if rng.random_bool(0.3) {
        mutate_headers(rng, &mut headers);
    }
    match rng.random_range(0..100) {
        0..=9 => registration(rng, lab, headers),
        10..=14 => Message {
            target: "fetch",
            subject: triggers_sdk::wire::subject::MANIFEST_FETCH.into(),
            headers,
            body: body_of(rng, json!({"service": SERVICE})),
            how: Send::Request,
        },
        15..=26 => {
            let hb = json!({"service": SERVICE, "service_version": "1.0.0",
                "manifest_hash": "sha256:00", "started_at": "2026-11-30T00:00:00Z",
                "now": "2026-11-30T00:00:01.5Z", "shutting_down": false});
            let body = body_of(rng, hb);
            publish(
                "heartbeat",
                triggers_sdk::wire::subject::HEARTBEAT.into(),
                headers,
                body,
            )
        }
        27..=41 => event(rng, n, version, headers),
        42..=49 => dlq_entry(rng, n, headers),
        50..=57 => broadcast(rng, headers),
        58..=62 => {
            let tail = ["nope", "flow.nope", "manifest.nope", "dlq", "heartbeat.x"]
                [rng.random_range(0..5)];
            let body = body_of(rng, json!({"n": n}));
            publish(
                "unknown_subject",
                format!("triggers.v2.{tail}"),
                headers,
                body,
            )
        }
        63..=72 => control(rng, n, headers),
        _ => inbound(rng, n, version),
    }
}

/// A core-NATS publish the emulator records.
fn publish(target: &'static str, subject: String, headers: Headers, body: Vec<u8>) -> Message {
    Message {
        target,
        subject,
        headers,
        body,
        how: Send::Publish,
    }
}

/// A registration request: the service's own manifest under another name, sometimes with names
/// or sources the server, the platform or the emulator must refuse.
fn registration(rng: &mut StdRng, lab: &Harness, headers: Headers) -> Message {
    let mut m = manifest_value(lab);
    m["service"] = json!(format!("fz-{}", rng.random_range(0..5)));
    // Names the server cannot carry in one request line (found by an audit: the
    // emulator was cut off, and every registration stalled).
    if rng.random_bool(0.03) {
        m["service"] = json!("s".repeat(rng.random_range(129..5000)));
    }
    if rng.random_bool(0.03)
        && let Some(action) = m["actions"].get_mut(0)
    {
        action["name"] = json!("a".repeat(rng.random_range(129..5000)));
    }
    if let Some(src) = m["service_sources"].get_mut(0) {
        src["default"] = json!(match rng.random_range(0..20) {
            // Sources over what the server, the platform or the emulator own.
            0 => [
                "$KV.>",
                "$JS.API.>",
                "_TRIGGERS_LAB_INBOX.>",
                "_INBOX.*",
                "triggerslab.>",
                ">",
                "*.>",
                "triggers.v2.dlq.>",
                "triggers.v2.flow.*.x"
            ][rng.random_range(0..9)]
            .to_owned(),
            // Longer than a subscription line the server takes.
            1 => format!("fzl.{}", "l".repeat(rng.random_range(1000..5000))),
            _ => format!("fzx{}.inbound", rng.random_range(0..5)),
        });
    }
    Message {
        target: "register",
        subject: triggers_sdk::wire::subject::MANIFEST_REGISTER.into(),
        headers,
        body: body_of(rng, m),
        how: Send::Request,
    }
}

/// A completion event for a made-up run, in volume: many say `retrying` (or a status nobody
/// knows), which keeps a followed run open; past `max_followed_runs` they are recorded, not
/// followed, and never refuse a trigger (the canary's, after each batch).
fn event(rng: &mut StdRng, n: u64, version: i64, headers: Headers) -> Message {
    let status = ["succeeded", "failed", "retrying", "skipped", "bogus"][rng.random_range(0..5)];
    let ev = json!({"flow_run_id": format!("fze-{n}"), "flow_id": FLOW, "flow_version": version,
        "node_id": "work", "node_type": "action", "service": SERVICE,
        "started_at": "2026-11-30T00:00:00Z", "finished_at": "2026-11-30T00:00:01Z",
        "status": status,
        "error": "", "trace_id": random_hex(rng, 16)});
    let flow = if rng.random_bool(0.8) { FLOW } else { "other" };
    let body = body_of(rng, ev);
    publish(
        "event",
        format!("triggers.v2.flow.events.{flow}"),
        headers,
        body,
    )
}

/// A DLQ entry for a made-up run, on a DLQ subject of a known or an unknown service.
fn dlq_entry(rng: &mut StdRng, n: u64, mut headers: Headers) -> Message {
    let entry = json!({"kind": "action_failed", "envelope": {"flow_run_id": format!("fzd-{n}")},
        "body": {"n": n}, "err_msg": "fuzz", "occurred_at": "2026-11-30T00:00:00Z"});
    headers.insert(names::NATS_MSG_ID, format!("fzd-{n}:dlq:{n}"));
    let tail = ["fz.work", "fz.invalid_json", "nobody.x", "source.x"][rng.random_range(0..4)];
    let body = body_of(rng, entry);
    publish("dlq", format!("triggers.v2.dlq.{tail}"), headers, body)
}

/// A flow broadcast of the fuzz flow under another id, to the service or to all.
fn broadcast(rng: &mut StdRng, headers: Headers) -> Message {
    let mut flow = serde_json::to_value(&flows()[0]).unwrap_or_default();
    flow["id"] = json!(format!("fzb-{}", rng.random_range(0..100)));
    let envelope = json!({"id": flow["id"], "version": rng.random_range(1..5), "body": flow});
    let subject = if rng.random_bool(0.5) {
        "triggers.v2.flow.broadcast.fz"
    } else {
        "triggers.v2.flow.broadcast.all"
    };
    publish("broadcast", subject.into(), headers, body_of(rng, envelope))
}

/// A control API request: one of its ops (or one it does not have), with a body that has a bit
/// of every op's fields.
fn control(rng: &mut StdRng, n: u64, headers: Headers) -> Message {
    let op = [
        "state",
        "deploy",
        "check_release",
        "trigger",
        "advance",
        "cancel",
        "runs",
        "run",
        "records",
        "violations",
        "frobnicate",
    ][rng.random_range(0..11)];
    let body = json!({"flow_id": FLOW, "payload": {"n": n}, "duration_ms": 1000,
        "run_id": "nope", "since": 0, "limit": 5,
        "flow": {"id": format!("fzc-{}", rng.random_range(0..5)), "nodes": [], "edges": []}});
    Message {
        target: "control",
        subject: format!("triggerslab.v1.control.{op}"),
        headers,
        body: body_of(rng, body),
        how: Send::Request,
    }
}
