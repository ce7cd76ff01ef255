//! Deterministic sample data (fixed times, fixed ids) for the snapshot tests, the rendering
//! benchmark and the captures in `docs/tui.md`: a shop whose card payments sometimes fail, a
//! mailer behind a Durable Timer, and a billing service shutting down.

use serde_json::json;
use triggers_emulator::ClockMode;
use triggers_emulator::control::{RunSummary, ServiceSummary, StateSummary};
use triggers_emulator::recorder::{Liveness, Record, RecordKind, RunStatus};
use triggers_sdk::flow::Flow;
use triggers_sdk::wire::{
    Action, CompletionEvent, DlqEntry, Envelope, GoTime, Heartbeat, Manifest, RawJson, Retry,
};

use crate::model::{Mode, Model, ModelConfig};
use crate::msg::{Msg, Observed};
use crate::theme::Theme;
use crate::update::update;

/// 2026-05-26T14:30:00Z plus `ms` milliseconds.
#[must_use]
pub fn at_ms(ms: i64) -> GoTime {
    const BASE_NS: i128 = 1_779_805_800_000_000_000; // 2026-05-26T14:30:00Z
    GoTime::from_unix_nanos(BASE_NS + i128::from(ms) * 1_000_000).unwrap_or(GoTime::ZERO)
}

/// The wall-clock "now" of the fixtures: 20 s after the start.
#[must_use]
pub fn now() -> GoTime {
    at_ms(20_000)
}

/// The `order` flow: pay, check, wait a minute, mail; and the `refund` flow.
#[must_use]
pub fn flows() -> Vec<Flow> {
    let order = json!({"id": "order", "version": 3, "nodes": [
        {"id": "in", "type": "service-in", "service": "shop", "inbound": "shop.inbound"},
        {"id": "pay", "type": "action", "service": "shop", "action": "charge"},
        {"id": "ok", "type": "condition", "config": {"path": "$.paid", "op": "eq", "value": true}},
        {"id": "wait", "type": "timer", "config": {"delay_ms": 60000}},
        {"id": "in2", "type": "service-in", "service": "mail", "inbound": "mail.inbound"},
        {"id": "send", "type": "action", "service": "mail", "action": "send"}],
      "edges": [
        {"id": "e1", "from": "in", "to": "pay"}, {"id": "e2", "from": "pay", "to": "ok"},
        {"id": "e3", "from": "ok", "to": "wait"},
        {"id": "e4", "from": "wait", "to": "in2", "mapping": {"fields": {"order": "$.order_id"}}},
        {"id": "e5", "from": "in2", "to": "send"}]});
    let refund = json!({"id": "refund", "version": 1, "nodes": [
        {"id": "rin", "type": "service-in", "service": "billing"},
        {"id": "refund", "type": "action", "service": "billing", "action": "refund"},
        {"id": "out", "type": "output", "config": {"subject": "refunds.done"}}],
      "edges": [{"id": "r1", "from": "rin", "to": "refund"}, {"id": "r2", "from": "refund", "to": "out"}]});
    [order, refund]
        .into_iter()
        .filter_map(|v| serde_json::from_value::<Flow>(v).ok())
        .map(|mut f| {
            f.assign_owners();
            f
        })
        .collect()
}

fn manifest(service: &str, version: &str, actions: &[&str], caps: &[&str]) -> Manifest {
    let mut m = Manifest {
        protocol_version: "1.0.0".into(),
        service: service.into(),
        service_version: version.into(),
        actions: actions
            .iter()
            .map(|a| Action {
                name: (*a).into(),
                timeout_ms: 30_000,
                dlq: format!("triggers.v2.dlq.{service}.{a}"),
                // Three attempts: the failing payments retry twice before they fail.
                retry: Retry {
                    max_attempts: 3,
                    initial_backoff_ms: 500,
                    backoff_factor: 2.0,
                    max_backoff_ms: 5_000,
                },
                ..Action::default()
            })
            .collect(),
        supports_nodes: vec!["condition".into(), "mapping".into()],
        runtime_capabilities: caps.iter().map(|c| (*c).into()).collect(),
        ..Manifest::default()
    };
    let _ = m.seal();
    m
}

fn manifests() -> Vec<Manifest> {
    vec![
        manifest("shop", "1.4.2", &["charge"], &["durable_timer.v1"]),
        manifest("mail", "0.9.0", &["send"], &["durable_timer.v1"]),
        manifest("billing", "2.0.0", &["refund"], &[]),
    ]
}

fn envelope(run: &str, flow: &str, node: &str, retry: i64, ms: i64) -> Envelope {
    Envelope {
        trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        span_id: "00f067aa0ba902b7".into(),
        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
        flow_run_id: run.into(),
        flow_id: flow.into(),
        flow_version: 3,
        idempotency_key: format!("{run}:{node}"),
        source_node_id: node.into(),
        retry_count: retry,
        emitted_at: at_ms(ms),
    }
}

/// A step of a run: node, its type and service, status, when (ms from the start), error.
type Step<'a> = (&'a str, &'a str, &'a str, &'a str, i64, &'a str);

fn completion(run: &str, flow: &str, step: Step<'_>) -> CompletionEvent {
    let (node, kind, service, status, ms, error) = step;
    CompletionEvent {
        flow_run_id: run.into(),
        flow_id: flow.into(),
        flow_version: if flow == "order" { 3 } else { 1 },
        node_id: node.into(),
        node_type: kind.into(),
        service: service.into(),
        started_at: at_ms(ms),
        finished_at: at_ms(ms + 120),
        status: status.into(),
        error: error.into(),
        trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
    }
}

fn dlq_entry(run: &str) -> DlqEntry {
    DlqEntry {
        kind: "action_failed".into(),
        envelope: envelope(run, "order", "in", 2, 5_400),
        body: RawJson::from_text(
            r#"{"order_id":"A-1002","amount":129.5,"card":"4000-0000-0000-0002"}"#,
        )
        .unwrap_or_else(|_| RawJson::from_message_body(b"{}")),
        err_msg: "card declined: insufficient funds".into(),
        occurred_at: at_ms(5_900),
    }
}

/// The records a `triggers-lab up` would have kept after the sample session.
#[must_use]
pub fn records() -> Vec<Record> {
    let mut log = Log::default();
    registrations_and_deploys(&mut log);
    run_events(&mut log);
    violations(&mut log);
    heartbeats(&mut log);
    log.0
}

/// Records numbered in the order they are pushed, as the emulator keeps them.
#[derive(Default)]
struct Log(Vec<Record>);

impl Log {
    fn push(&mut self, ms: i64, subject: &str, payload: String, kind: RecordKind) {
        let seq = self.0.len() as u64 + 1;
        self.0.push(Record {
            seq,
            at: at_ms(ms),
            clock: at_ms(ms),
            subject: subject.into(),
            headers: Vec::new().into(),
            payload: payload.as_str().into(),
            kind,
        });
    }
}

/// A wire type's JSON as the payload text of a record.
fn text<E>(json: Result<Vec<u8>, E>) -> String {
    json.map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// The services register, then both flows are deployed and broadcast.
fn registrations_and_deploys(log: &mut Log) {
    for (i, m) in manifests().into_iter().enumerate() {
        log.push(
            100 * i as i64,
            "triggers.v2.manifest.register",
            text(m.to_json()),
            RecordKind::Registration {
                service: m.service.clone(),
                accepted: true,
                error: None,
                manifest_hash: m.manifest_hash.clone(),
            },
        );
    }
    for f in flows() {
        let (flow_id, version) = (f.id.clone(), f.version);
        let deploy = RecordKind::Deploy {
            flow_id: flow_id.clone(),
            version,
            flow: None,
        };
        log.push(500, "", String::new(), deploy);
        let broadcast = RecordKind::Broadcast { flow_id, version };
        log.push(
            510,
            "triggers.v2.flow.broadcast.all",
            String::new(),
            broadcast,
        );
    }
}

const DECLINED: &str = "card declined: insufficient funds";

/// The completion events of the sample runs, in order: run, flow, step. A data table.
const EVENTS: [(&str, &str, Step<'static>); 8] = [
    (
        "run-0001",
        "order",
        ("pay", "action", "shop", "succeeded", 1_000, ""),
    ),
    (
        "run-0001",
        "order",
        ("ok", "condition", "shop", "succeeded", 1_200, ""),
    ),
    (
        "run-0002",
        "order",
        ("pay", "action", "shop", "retrying", 4_000, DECLINED),
    ),
    (
        "run-0002",
        "order",
        ("pay", "action", "shop", "retrying", 4_600, DECLINED),
    ),
    (
        "run-0002",
        "order",
        ("pay", "action", "shop", "failed", 5_400, DECLINED),
    ),
    (
        "run-0003",
        "order",
        ("pay", "action", "shop", "succeeded", 8_000, ""),
    ),
    (
        "run-0003",
        "order",
        ("ok", "condition", "shop", "succeeded", 8_200, ""),
    ),
    (
        "run-0004",
        "refund",
        (
            "refund",
            "action",
            "billing",
            "retrying",
            12_000,
            "upstream timeout after 30s",
        ),
    ),
];

/// Each run triggered before its first event, its events, and what the engine did after them.
fn run_events(log: &mut Log) {
    let mut triggered = std::collections::BTreeSet::new();
    for (run, flow, step) in EVENTS {
        let (node, _, _, status, ms, _) = step;
        if triggered.insert(run) {
            let trigger = RecordKind::Trigger {
                run_id: run.into(),
                flow_id: flow.into(),
                entry: String::new(),
            };
            log.push(ms - 50, "", String::new(), trigger);
        }
        let event = completion(run, flow, step);
        let subject = format!("triggers.v2.flow.events.{flow}");
        log.push(
            ms + 130,
            &subject,
            text(event.to_json()),
            RecordKind::Completion { event },
        );
        match (run, node, status) {
            ("run-0001", "ok", _) => timer_waited_out(log, run, flow),
            ("run-0002", _, "failed") => {
                let entry = dlq_entry(run);
                let dlq = RecordKind::Dlq {
                    msg_id: "run-0002:in:dlq:1779805805900000000".into(),
                    entry: Some(entry.clone()),
                };
                log.push(
                    5_900,
                    "triggers.v2.dlq.shop.charge",
                    text(entry.to_json()),
                    dlq,
                );
            }
            ("run-0003", "ok", _) => {
                let armed = RecordKind::TimerArmed {
                    run_id: run.into(),
                    node_id: "wait".into(),
                    due: at_ms(122_000),
                    occurrence: 1,
                    fence: 2,
                };
                log.push(8_400, "", String::new(), armed);
            }
            _ => {}
        }
    }
}

/// run-0001's timer armed, the clock advanced past it, the timer fired and the mail sent.
fn timer_waited_out(log: &mut Log, run: &str, flow: &str) {
    let armed = RecordKind::TimerArmed {
        run_id: run.into(),
        node_id: "wait".into(),
        due: at_ms(61_400),
        occurrence: 1,
        fence: 1,
    };
    log.push(1_400, "", String::new(), armed);
    let advanced = RecordKind::ClockAdvanced {
        from: None,
        to: at_ms(62_000),
    };
    log.push(2_000, "", String::new(), advanced);
    let fired = RecordKind::TimerFired {
        run_id: run.into(),
        node_id: "wait".into(),
        occurrence: 1,
        resume_node_id: "in2".into(),
    };
    log.push(2_001, "", String::new(), fired);
    let send = completion(
        run,
        flow,
        ("send", "action", "mail", "succeeded", 2_100, ""),
    );
    let payload = text(send.to_json());
    let event = RecordKind::Completion { event: send };
    log.push(2_300, "triggers.v2.flow.events.order", payload, event);
}

/// Two violations the emulator found in the services' messages.
fn violations(log: &mut Log) {
    log.push(
        9_000,
        "triggers.v2.flow.events.order",
        r#"{"flow_run_id":"run-0003","started_at":"2026-05-26T14:30:09.000000000Z"}"#.into(),
        RecordKind::Violation {
            severity: "error".into(),
            rule: "time_text".into(),
            message: "started_at \"2026-05-26T14:30:09.000000000Z\" is not Go's time text: Go writes \"2026-05-26T14:30:09Z\"".into(),
        },
    );
    log.push(9_100, "triggers.v2.heartbeat", String::new(), RecordKind::Violation {
        severity: "warning".into(),
        rule: "key_order".into(),
        message: "keys are not in the Go field order (service, service_version, manifest_hash, started_at, now, shutting_down)".into(),
    });
}

/// The last heartbeat of each service; billing's says it is shutting down.
fn heartbeats(log: &mut Log) {
    for (ms, service, shutting_down) in [
        (8_000, "mail", false),
        (18_000, "shop", false),
        (19_000, "billing", true),
    ] {
        let m = manifests()
            .into_iter()
            .find(|m| m.service == service)
            .unwrap_or_default();
        let heartbeat = Heartbeat {
            service: service.into(),
            service_version: m.service_version.clone(),
            manifest_hash: m.manifest_hash.clone(),
            started_at: at_ms(0),
            now: at_ms(ms),
            shutting_down,
        };
        let payload = text(heartbeat.to_json());
        log.push(
            ms,
            "triggers.v2.heartbeat",
            payload,
            RecordKind::Heartbeat { heartbeat },
        );
    }
}

/// The emulator's state summary at the end of the sample session.
#[must_use]
pub fn summary() -> StateSummary {
    let services = manifests()
        .into_iter()
        .map(|m| {
            let (liveness, seen, replicas) = match m.service.as_str() {
                "shop" => (Liveness::Live, 18_000, 2),
                "mail" => (Liveness::Late, 8_000, 1),
                _ => (Liveness::ShuttingDown, 19_000, 1),
            };
            ServiceSummary {
                name: m.service.clone(),
                version: m.service_version.clone(),
                manifest_hash: m.manifest_hash.clone(),
                capabilities: m.runtime_capabilities.clone(),
                actions: m.actions.iter().map(|a| a.name.clone()).collect(),
                action_count: m.actions.len(),
                liveness,
                last_seen: Some(at_ms(seen)),
                replicas,
            }
        })
        .collect();
    let run =
        |id: &str, flow: &str, status, start, settled: Option<i64>, failed: &[&str], steps| {
            RunSummary {
                id: id.into(),
                flow_id: flow.into(),
                status,
                started_at: at_ms(start),
                settled_at: settled.map(at_ms),
                failed: failed.iter().map(|s| (*s).into()).collect(),
                steps,
            }
        };
    StateSummary {
        evicted_runs: 0,
        unfollowed_runs: 0,
        services_total: 0,
        cut_in_replies: 0,
        streams_lost: 0,
        dropped_violations: 0,
        trimmed_violations: 0,
        clock: at_ms(62_000),
        clock_mode: ClockMode::Virtual,
        services,
        flows: flows(),
        runs: vec![
            run(
                "run-0001",
                "order",
                RunStatus::Succeeded,
                950,
                Some(62_000),
                &[],
                7,
            ),
            run(
                "run-0002",
                "order",
                RunStatus::Failed,
                3_950,
                Some(5_520),
                &["pay"],
                4,
            ),
            run("run-0003", "order", RunStatus::Waiting, 7_950, None, &[], 4),
            run(
                "run-0004",
                "refund",
                RunStatus::Running,
                11_950,
                None,
                &[],
                2,
            ),
        ],
        runs_total: 4,
        flows_total: 0,
        violations: 2,
        last_seq: 0,
        dropped_records: 0,
        dropped_messages: 0,
        connection_losses: 0,
    }
}

fn empty(mode: Mode, theme: Theme) -> Model {
    let mut model = Model::new(ModelConfig {
        mode,
        source: match mode {
            Mode::InProcess => "in-process".into(),
            _ => "nats://127.0.0.1:4222".into(),
        },
        theme,
        ..ModelConfig::default()
    });
    update(&mut model, Msg::Tick(now()));
    update(&mut model, Msg::Connected);
    model
}

/// A model connected to an emulator that has seen nothing yet.
#[must_use]
pub fn empty_model(mode: Mode, theme: Theme) -> Model {
    empty(mode, theme)
}

/// A control-API model after the sample session.
#[must_use]
pub fn control_model(theme: Theme) -> Model {
    let mut model = empty(Mode::Control, theme);
    update(&mut model, Msg::Summary(summary()));
    update(&mut model, Msg::Records(records()));
    update(&mut model, Msg::Summary(summary()));
    model
}

/// What the passive observer sees of the sample session on `triggers.v2.>`, plus one heartbeat
/// that does not decode.
#[must_use]
pub fn observed() -> Vec<Observed> {
    let bytes = |r: Result<Vec<u8>, triggers_sdk::error::JsonError>| r.unwrap_or_default();
    let mut out = Vec::new();
    for m in manifests() {
        out.push(Observed {
            at: at_ms(0),
            subject: "triggers.v2.manifest.register".into(),
            headers: vec![],
            payload: bytes(m.to_json()),
        });
    }
    for f in flows() {
        out.push(Observed {
            at: at_ms(500),
            subject: "triggers.v2.flow.broadcast.all".into(),
            headers: vec![],
            payload: bytes(f.to_envelope().to_json()),
        });
    }
    for r in records() {
        if let RecordKind::Completion { event } = &r.kind {
            out.push(Observed {
                at: r.at,
                subject: r.subject.clone(),
                headers: vec![],
                payload: bytes(event.to_json()),
            });
        }
        if let RecordKind::Dlq {
            entry: Some(entry),
            msg_id,
        } = &r.kind
        {
            out.push(Observed {
                at: r.at,
                subject: r.subject.clone(),
                headers: vec![("Nats-Msg-Id".into(), msg_id.clone())],
                payload: bytes(entry.to_json()),
            });
        }
        if let RecordKind::Heartbeat { heartbeat } = &r.kind {
            out.push(Observed {
                at: r.at,
                subject: r.subject.clone(),
                headers: vec![],
                payload: bytes(heartbeat.to_json()),
            });
        }
    }
    out.push(Observed {
        at: at_ms(19_500),
        subject: "triggers.v2.heartbeat".into(),
        headers: vec![],
        payload: br#"{"service": 5}"#.to_vec(),
    });
    out
}

/// A passive-observer model after the sample session.
#[must_use]
pub fn passive_model(theme: Theme) -> Model {
    let mut model = empty(Mode::Passive, theme);
    update(&mut model, Msg::Observed(observed()));
    model
}

/// A control-API model that was sent `events` records of a busy day (five records per run,
/// every tenth run failing into the DLQ) and keeps at most `capacity` of them.
#[must_use]
pub fn large_model(events: usize, capacity: usize, theme: Theme) -> Model {
    let mut model = Model::new(ModelConfig {
        mode: Mode::Control,
        source: "nats://127.0.0.1:4222".into(),
        event_capacity: capacity,
        theme,
        ..ModelConfig::default()
    });
    update(&mut model, Msg::Tick(now()));
    update(&mut model, Msg::Connected);
    let mut summary = summary();
    summary.runs.clear();
    update(&mut model, Msg::Summary(summary));
    let mut batch = Vec::with_capacity(1024);
    let mut seq = 0u64;
    let mut run = 0usize;
    while (seq as usize) < events {
        run += 1;
        let base = run as i64 * 40;
        for kind in busy_run(run, base) {
            seq += 1;
            let subject = match &kind {
                RecordKind::Completion { .. } => "triggers.v2.flow.events.order",
                RecordKind::Dlq { .. } => "triggers.v2.dlq.shop.charge",
                RecordKind::Hop { .. } => "shop.inbound",
                _ => "",
            };
            batch.push(Record {
                seq,
                at: at_ms(base),
                clock: at_ms(base),
                subject: subject.into(),
                headers: Vec::new().into(),
                payload: Default::default(),
                kind,
            });
            if batch.len() == 1024 {
                update(&mut model, Msg::Records(std::mem::take(&mut batch)));
            }
        }
    }
    update(&mut model, Msg::Records(batch));
    model
}

/// The five records of run number `run` of [`large_model`], at `base` ms: triggered, a hop,
/// then paid, checked and waiting on its timer, or (every tenth) retried, failed and
/// dead-lettered.
fn busy_run(run: usize, base: i64) -> Vec<RecordKind> {
    let id = format!("run-{run:06}");
    let failing = run.is_multiple_of(10);
    let steps: [(&str, &str, &str); 3] = if failing {
        [
            ("pay", "action", "retrying"),
            ("pay", "action", "failed"),
            ("pay", "action", "dlq"),
        ]
    } else {
        [
            ("pay", "action", "succeeded"),
            ("ok", "condition", "succeeded"),
            ("wait", "timer", "armed"),
        ]
    };
    let mut kinds = vec![
        RecordKind::Trigger {
            run_id: id.clone(),
            flow_id: "order".into(),
            entry: String::new(),
        },
        RecordKind::Hop {
            run_id: id.clone(),
            source_node_id: "in".into(),
            from_emulator: true,
        },
    ];
    for (node, kind, status) in steps {
        kinds.push(match status {
            "dlq" => RecordKind::Dlq {
                entry: Some(dlq_entry(&id)),
                msg_id: format!("{id}:in:dlq:1"),
            },
            "armed" => RecordKind::TimerArmed {
                run_id: id.clone(),
                node_id: node.into(),
                due: at_ms(base + 60_000),
                occurrence: 1,
                fence: run as u64,
            },
            _ => {
                let error = if status == "succeeded" {
                    ""
                } else {
                    "card declined"
                };
                let step = (node, kind, "shop", status, base, error);
                RecordKind::Completion {
                    event: completion(&id, "order", step),
                }
            }
        });
    }
    kinds
}
