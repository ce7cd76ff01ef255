//! The checks of the conformance kit, one function each, in the order of `docs/conform.md`.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use triggers_emulator::conformance::Severity;
use triggers_emulator::recorder::{RecordKind, RunStatus};
use triggers_emulator::{DlqFilter, Emulator, Harness, RunId, TriggerOptions, WaitError};
use triggers_sdk::flow::Flow;
use triggers_sdk::transport;
use triggers_sdk::wire::durable_timer::{self, RootContext, TimerContext};
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::shapes::status;
use triggers_sdk::wire::{CompletionEvent, Envelope, GoTime, Headers, idempotency};

use super::peer::PEER;
use crate::external::External;

mod faults;
mod hard;

/// How the kit started the service: what starts it again (the fault checks).
pub(crate) struct Launch {
    pub(crate) command: Vec<String>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: std::path::PathBuf,
}

/// The name the conformance service registers under.
pub(crate) const SERVICE: &str = "conformance";

/// Its inbound subject.
const INBOUND: &str = "conformance.inbound";

/// Every check: its name and what it proves, in the order they run.
pub const CHECKS: &[(&str, &str)] = &[
    (
        "register",
        "registers in time, accepted, with the conformance manifest",
    ),
    ("heartbeat", "heartbeats as it registered"),
    ("echo", "runs an action and reports it; its output goes on"),
    (
        "mapping_condition",
        "runs mapping and condition nodes; false skips",
    ),
    (
        "lookup",
        "runs a lookup node; the result is laid over the input",
    ),
    (
        "output_nats",
        "an output node delivers with the envelope and a fresh key",
    ),
    (
        "retry",
        "retries in process: a retrying event per failed attempt",
    ),
    (
        "dlq_action_failed",
        "the last failed attempt: failed event, then DLQ",
    ),
    (
        "dlq_action_timeout",
        "an attempt past timeout_ms: action_timeout",
    ),
    (
        "dlq_action_panicked",
        "a panic or uncaught exception: action_panicked",
    ),
    (
        "dlq_invalid_input",
        "an input the action cannot take: invalid_input",
    ),
    (
        "dlq_missing_envelope",
        "no envelope headers: missing_envelope",
    ),
    (
        "dlq_invalid_envelope",
        "a malformed envelope header: invalid_envelope",
    ),
    ("dlq_invalid_json", "a body that is not JSON: invalid_json"),
    ("dlq_unknown_flow", "a flow it does not hold: unknown_flow"),
    ("dlq_unknown_node", "a node the flow lacks: unknown_node"),
    (
        "hop_out",
        "hands a result on to another service through JetStream",
    ),
    (
        "hop_in",
        "takes a hop: reports its service-in, runs what follows",
    ),
    (
        "timer",
        "Durable Timer: root delivery, then the elapsed resume",
    ),
    (
        "timer_rejected",
        "a bad Durable Timer triplet: durable_timer_rejected",
    ),
    (
        "hop_traceparent",
        "a hop of a traced run carries a traceparent of the run's trace",
    ),
    (
        "traceparent_invalid",
        "an invalid inbound traceparent is ignored, not dead-lettered",
    ),
    (
        "hop_keys",
        "a node run twice before a hop (fan-in): two hop keys",
    ),
    (
        "timer_strip",
        "an output after a timer's delivery: no Durable Timer triplet",
    ),
    (
        "redeploy_mid_run",
        "a redeploy mid-run: the run's events and hops keep its version",
    ),
    (
        "retry_backoff",
        "retries wait initial_backoff_ms, times backoff_factor",
    ),
    (
        "unknown_flow_wait",
        "a flow broadcast late: the delivery waits for it, then runs",
    ),
    (
        "heartbeat_interval",
        "heartbeats every 5 s, started_at fixed",
    ),
    (
        "consumer",
        "the durable consumer is configured as protocol.md §4 says",
    ),
    (
        "ack_order",
        "a delivery is acked after its reports, never before",
    ),
    ("dlq_order", "a DLQ entry follows the node's failed event"),
    (
        "handoff_order",
        "an output or hop follows the node's succeeded event",
    ),
    (
        "hop_jetstream",
        "hops are JetStream publishes, the PubAck awaited",
    ),
    (
        "crash_redelivery",
        "SIGKILL mid-action, restart: the delivery runs once, to the end",
    ),
    (
        "replicas",
        "two replicas: both hold the flows, each delivery runs once",
    ),
    (
        "server_restart",
        "the nats-server restarts under it: later work still runs",
    ),
    (
        "ack_lost",
        "an ack lost on its way: the redelivery does not run echo again",
    ),
    (
        "broadcast_before_reply",
        "a flow broadcast while it registers (before the reply) is held",
    ),
    (
        "conformant",
        "the conformance checker found no error in anything sent",
    ),
    ("shutdown", "SIGTERM: a shutting_down heartbeat, then exit"),
];

/// The actions the service must declare: name, `timeout_ms`, and the retry policy
/// (`max_attempts`, `initial_backoff_ms`, `backoff_factor`, `max_backoff_ms`).
const ACTIONS: [(&str, i64, i64, i64, f64, i64); 5] = [
    ("echo", 5000, 1, 0, 1.0, 0),
    ("flaky", 5000, 3, 20, 2.0, 100),
    ("slow", 300, 1, 0, 1.0, 0),
    ("crash", 5000, 1, 0, 1.0, 0),
    ("shape", 5000, 1, 0, 1.0, 0),
];

/// What a failed check expected and what arrived.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) expected: String,
    pub(crate) arrived: String,
}

fn fail<T>(expected: impl Into<String>, arrived: impl Into<String>) -> Result<T, Failure> {
    Err(Failure {
        expected: expected.into(),
        arrived: arrived.into(),
    })
}

/// What the checks share.
pub(crate) struct Ctx {
    pub(crate) lab: Harness,
    pub(crate) client: async_nats::Client,
    pub(crate) service: External,
    pub(crate) timeout: Duration,
    /// Flows deployed so far, and their versions.
    pub(crate) versions: BTreeMap<String, i64>,
    /// Warnings fail too (`--strict`).
    pub(crate) strict: bool,
    /// Set by a check that failed only because of `--strict`.
    pub(crate) strict_only: bool,
    /// How the service was started.
    pub(crate) launch: Launch,
    /// The proxy the service is connected through, once a check put one in between (`ack_lost`).
    pub(crate) proxy: Option<natsbox::FaultProxy>,
}

/// How many times its patience a check waits, at most, while the service shows progress.
const PATIENCE_CAP: u32 = 3;

impl Ctx {
    /// The conformance checker's warnings about what the service sent, one line per rule.
    pub(crate) fn warnings(&self) -> Vec<String> {
        let mut seen = BTreeMap::new();
        for v in self.lab.violations() {
            if v.severity == Severity::Warning {
                seen.entry(v.rule).or_insert(v.message);
            }
        }
        seen.into_iter()
            .map(|(rule, message)| format!("{rule}: {message}"))
            .collect()
    }

    /// The sequence number of the service's latest report (a completion event of its own or a
    /// DLQ entry on its subjects): what tells a service at work from a stalled one.
    pub(crate) fn progress(&self) -> u64 {
        let (records, _) = self.lab.records();
        let dlq = format!("triggers.v2.dlq.{SERVICE}.");
        records
            .iter()
            .rev()
            .find(|r| match &r.kind {
                RecordKind::Completion { event } => event.service == SERVICE,
                RecordKind::Dlq { .. } => r.subject.starts_with(&dlq),
                _ => false,
            })
            .map_or(0, |r| r.seq)
    }

    /// Waits as `wait` does with the check's patience; when that runs out while the service
    /// reported something new (a loaded machine: slow, not stalled), waits again, up to
    /// [`PATIENCE_CAP`] times the patience in all. A stalled service fails after one patience.
    pub(crate) async fn patient<T, Fut>(
        &self,
        wait: impl Fn(Emulator) -> Fut,
    ) -> Result<T, WaitError>
    where
        Fut: Future<Output = Result<T, WaitError>>,
    {
        let cap = self.timeout.saturating_mul(PATIENCE_CAP);
        let started = Instant::now();
        loop {
            let before = self.progress();
            match wait(self.lab.with_wait_timeout(self.timeout)).await {
                Err(WaitError::Timeout { .. })
                    if started.elapsed() + self.timeout <= cap && self.progress() != before =>
                {
                    tracing::debug!("the service is still reporting: waiting once more");
                }
                Err(WaitError::Timeout {
                    waiting_for, saw, ..
                }) => {
                    return Err(WaitError::Timeout {
                        waited: started.elapsed(),
                        waiting_for,
                        saw,
                    });
                }
                done => return done,
            }
        }
    }

    /// Deploys `flow` once; returns its version.
    async fn deploy(&mut self, flow: Value) -> Result<i64, Failure> {
        let id = flow["id"].as_str().unwrap_or_default().to_owned();
        if let Some(v) = self.versions.get(&id) {
            return Ok(*v);
        }
        let flow: Flow = serde_json::from_value(flow).map_err(|e| Failure {
            expected: format!("the kit's flow {id} to decode"),
            arrived: e.to_string(),
        })?;
        match self.lab.deploy(flow).await {
            Ok(d) => {
                self.versions.insert(id, d.flow.version);
                Ok(d.flow.version)
            }
            Err(e) => fail(format!("flow {id} to be released"), e.to_string()),
        }
    }

    async fn trigger(&self, flow: &str, payload: &Value) -> Result<RunId, Failure> {
        self.lab.trigger(flow, payload).await.map_err(|e| Failure {
            expected: format!("a run of {flow} to start"),
            arrived: e.to_string(),
        })
    }

    async fn settled(&self, run: &RunId) -> Result<triggers_emulator::recorder::Run, Failure> {
        self.patient(|lab| {
            let run = run.clone();
            async move { lab.wait_run_settled(&run).await }
        })
        .await
        .map_err(|e| Failure {
            expected: format!("run {run} to settle"),
            arrived: e.to_string(),
        })
    }

    async fn succeeded(&self, run: &RunId) -> Result<triggers_emulator::recorder::Run, Failure> {
        let settled = self.settled(run).await?;
        if settled.status != RunStatus::Succeeded {
            return fail(
                format!("run {run} to succeed"),
                format!(
                    "{:?}: {}",
                    settled.status,
                    self.lab.describe_run(&run.0).replace('\n', "; ")
                ),
            );
        }
        Ok(settled)
    }

    /// The completion events of `node` in `run`, in the order they arrived.
    fn events(&self, run: &RunId, node: &str) -> Vec<CompletionEvent> {
        self.lab
            .completions()
            .into_iter()
            .filter(|e| e.flow_run_id == run.0 && e.node_id == node)
            .collect()
    }

    fn statuses(&self, run: &RunId, node: &str) -> Vec<String> {
        self.events(run, node)
            .into_iter()
            .map(|e| e.status)
            .collect()
    }

    async fn dlq(
        &self,
        filter: DlqFilter,
        what: &str,
    ) -> Result<triggers_emulator::DlqRecord, Failure> {
        self.patient(|lab| {
            let filter = filter.clone();
            async move { lab.wait_dlq(filter).await }
        })
        .await
        .map_err(|e| Failure {
            expected: what.to_owned(),
            arrived: e.to_string(),
        })
    }

    /// A message published by the kit on the service's inbound stream, as a forged delivery.
    async fn forge(&self, headers: &Headers, body: &[u8]) -> Result<(), Failure> {
        for name in [names::NATS_MSG_ID, names::IDEMPOTENCY_KEY] {
            if let Some(id) = headers.get(name) {
                self.lab.mark_test_input(id);
            }
        }
        let map = transport::to_nats(headers).map_err(|e| Failure {
            expected: "the kit's forged headers to be writable".into(),
            arrived: e.to_string(),
        })?;
        let js = async_nats::jetstream::new(self.client.clone());
        let ack = js
            .publish_with_headers(INBOUND, map, body.to_vec().into())
            .await
            .map_err(|e| Failure {
                expected: format!("a publish to {INBOUND}"),
                arrived: e.to_string(),
            })?;
        ack.await.map(|_| ()).map_err(|e| Failure {
            expected: format!("{INBOUND}'s stream to store the kit's message"),
            arrived: e.to_string(),
        })
    }

    /// A subscription to an output subject, made before the run that publishes to it. Flushed:
    /// the server has it before this returns, so an output published at once is not missed (on
    /// a loaded machine, an unflushed SUB could reach the server after the output did).
    async fn listen(&self, subject: &str) -> Result<async_nats::Subscriber, Failure> {
        let sub = self
            .client
            .subscribe(subject.to_owned())
            .await
            .map_err(|e| Failure {
                expected: format!("a subscription to {subject}"),
                arrived: e.to_string(),
            })?;
        self.client.flush().await.map_err(|e| Failure {
            expected: format!("the subscription to {subject} to reach the server"),
            arrived: e.to_string(),
        })?;
        Ok(sub)
    }

    /// The next message on `sub`, with the check's patience, extended as [`Ctx::patient`] does
    /// while the service reports progress.
    async fn next(
        &self,
        sub: &mut async_nats::Subscriber,
        what: &str,
    ) -> Result<async_nats::Message, Failure> {
        let cap = self.timeout.saturating_mul(PATIENCE_CAP);
        let started = Instant::now();
        loop {
            let before = self.progress();
            match tokio::time::timeout(self.timeout, sub.next()).await {
                Ok(Some(m)) => return Ok(m),
                Ok(None) => return fail(what, "the subscription ended"),
                Err(_) if started.elapsed() + self.timeout <= cap && self.progress() != before => {}
                Err(_) => {
                    return fail(what, format!("nothing within {:?}", started.elapsed()));
                }
            }
        }
    }
}

/// Runs the check `name`.
pub(crate) async fn run(name: &str, ctx: &mut Ctx) -> Result<(), Failure> {
    match name {
        "register" => register(ctx).await,
        "heartbeat" => heartbeat(ctx).await,
        "echo" => echo(ctx).await,
        "mapping_condition" => mapping_condition(ctx).await,
        "lookup" => lookup(ctx).await,
        "output_nats" => output_nats(ctx).await,
        "retry" => retry(ctx).await,
        "dlq_action_failed" => dlq_action_failed(ctx).await,
        "dlq_action_timeout" => {
            action_dlq(
                ctx,
                "conform-slow",
                "slow",
                json!({"ms": 2000}),
                "action_timeout",
            )
            .await
        }
        "dlq_action_panicked" => {
            action_dlq(
                ctx,
                "conform-crash",
                "crash",
                json!({"boom": true}),
                "action_panicked",
            )
            .await
        }
        "dlq_invalid_input" => dlq_invalid_input(ctx).await,
        "dlq_missing_envelope" => dlq_missing_envelope(ctx).await,
        "dlq_invalid_envelope" => dlq_invalid_envelope(ctx).await,
        "dlq_invalid_json" => dlq_invalid_json(ctx).await,
        "dlq_unknown_flow" => dlq_unknown_flow(ctx).await,
        "dlq_unknown_node" => dlq_unknown_node(ctx).await,
        "hop_out" => hop_out(ctx).await,
        "hop_in" => hop_in(ctx).await,
        "timer" => timer(ctx).await,
        "timer_rejected" => timer_rejected(ctx).await,
        "hop_traceparent" => hard::hop_traceparent(ctx).await,
        "traceparent_invalid" => hard::traceparent_invalid(ctx).await,
        "hop_keys" => hard::hop_keys(ctx).await,
        "timer_strip" => hard::timer_strip(ctx).await,
        "redeploy_mid_run" => hard::redeploy_mid_run(ctx).await,
        "retry_backoff" => hard::retry_backoff(ctx).await,
        "unknown_flow_wait" => hard::unknown_flow_wait(ctx).await,
        "heartbeat_interval" => hard::heartbeat_interval(ctx).await,
        "consumer" => hard::consumer(ctx).await,
        "ack_order" => hard::ack_order(ctx).await,
        "dlq_order" => hard::dlq_order(ctx).await,
        "handoff_order" => hard::handoff_order(ctx).await,
        "hop_jetstream" => hard::hop_jetstream(ctx).await,
        "crash_redelivery" => faults::crash_redelivery(ctx).await,
        "replicas" => faults::replicas(ctx).await,
        "server_restart" => faults::server_restart(ctx).await,
        "ack_lost" => faults::ack_lost(ctx).await,
        "broadcast_before_reply" => faults::broadcast_before_reply(ctx).await,
        "conformant" => conformant(ctx).await,
        "shutdown" => shutdown(ctx).await,
        other => fail(format!("a check named {other}"), "no such check"),
    }
}

/// A service-in of the conformance service (explicit target: flows with timers need it).
fn cin(id: &str) -> Value {
    json!({"id": id, "type": "service-in", "service": SERVICE,
           "config": {"transport": "nats", "target": INBOUND}})
}

fn pin(id: &str) -> Value {
    json!({"id": id, "type": "service-in", "service": PEER,
           "config": {"transport": "nats", "target": "peer.inbound"}})
}

fn action(id: &str, service: &str, name: &str) -> Value {
    json!({"id": id, "type": "action", "service": service, "action": name})
}

fn output(id: &str, target: &str) -> Value {
    json!({"id": id, "type": "output", "config": {"transport": "nats", "target": target}})
}

/// A flow whose nodes follow each other in a line.
fn line(id: &str, nodes: Vec<Value>) -> Value {
    let edges: Vec<Value> = nodes
        .windows(2)
        .enumerate()
        .map(|(i, w)| json!({"id": format!("e{}", i + 1), "from": w[0]["id"], "to": w[1]["id"]}))
        .collect();
    json!({"id": id, "nodes": nodes, "edges": edges})
}

fn echo_flow() -> Value {
    line(
        "conform-echo",
        vec![
            cin("in"),
            action("echo", SERVICE, "echo"),
            output("out", "conform.out.echo"),
        ],
    )
}

fn timer_flow() -> Value {
    line(
        "conform-timer",
        vec![
            cin("in"),
            action("echo", SERVICE, "echo"),
            json!({"id": "wait", "type": "timer", "config": {"delay_ms": 3_600_000}}),
            cin("cin"),
            action("echo2", SERVICE, "echo"),
        ],
    )
}

async fn register(ctx: &mut Ctx) -> Result<(), Failure> {
    let patience = ctx.timeout.max(Duration::from_secs(10));
    let state = match ctx
        .lab
        .with_wait_timeout(patience)
        .wait_for_registration(SERVICE)
        .await
    {
        Ok(state) => state,
        Err(_) => {
            let (records, _) = ctx.lab.records();
            let refused = records.iter().rev().find_map(|r| match &r.kind {
                RecordKind::Registration {
                    accepted: false,
                    error,
                    ..
                } => Some(error.clone().unwrap_or_default()),
                _ => None,
            });
            let arrived = match (refused, ctx.service.exited()) {
                (Some(error), _) => format!("the registration was refused: {error}"),
                (None, Some(status)) => {
                    format!("the service exited ({status}) without registering")
                }
                (None, None) => format!("no registration of {SERVICE:?} within {patience:?}"),
            };
            return fail(
                format!("{SERVICE} to register within {patience:?} and be accepted"),
                arrived,
            );
        }
    };
    let m = &state.manifest;
    let mut wrong = Vec::new();
    if m.service_version != "1.0.0" {
        wrong.push(format!(
            "service_version {:?}, not \"1.0.0\"",
            m.service_version
        ));
    }
    for (name, timeout_ms, attempts, initial, factor, max) in ACTIONS {
        let Some(a) = m.actions.iter().find(|a| a.name == name) else {
            wrong.push(format!("no action {name}"));
            continue;
        };
        let r = &a.retry;
        if a.timeout_ms != timeout_ms
            || r.max_attempts != attempts
            || r.initial_backoff_ms != initial
            || r.backoff_factor != factor
            || r.max_backoff_ms != max
        {
            wrong.push(format!(
                "{name}: timeout_ms {} retry ({}, {}, {}, {}), not {timeout_ms} ({attempts}, {initial}, {factor}, {max})",
                a.timeout_ms, r.max_attempts, r.initial_backoff_ms, r.backoff_factor, r.max_backoff_ms
            ));
        }
        let dlq = format!("triggers.v2.dlq.{SERVICE}.{name}");
        if a.dlq != dlq {
            wrong.push(format!("{name}: dlq {:?}, not {dlq:?}", a.dlq));
        }
    }
    if !m
        .service_sources
        .iter()
        .any(|s| s.transport == "nats" && s.default == INBOUND)
    {
        wrong.push(format!("no NATS source {INBOUND}"));
    }
    for node in ["condition", "lookup", "mapping"] {
        if !m.supports_nodes.iter().any(|n| n == node) {
            wrong.push(format!("supports_nodes lacks {node}"));
        }
    }
    if !m
        .runtime_capabilities
        .iter()
        .any(|c| c == triggers_sdk::runtime::DURABLE_TIMER_V1)
    {
        wrong.push("runtime_capabilities lacks durable_timer.v1".into());
    }
    if !m.runtime_lookups.iter().any(|l| l.name == "directory") {
        wrong.push("no runtime lookup directory".into());
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        fail(
            "the conformance service's manifest (docs/conform.md)",
            wrong.join("; "),
        )
    }
}

async fn heartbeat(ctx: &mut Ctx) -> Result<(), Failure> {
    let Some(state) = ctx.lab.services().get(SERVICE).cloned() else {
        return fail("a registered service", "none");
    };
    let beat = ctx
        .lab
        .with_wait_timeout(Duration::from_secs(7).max(ctx.timeout))
        .wait_for_heartbeat(SERVICE, |h| !h.shutting_down)
        .await
        .map_err(|e| Failure {
            expected: "a heartbeat within 7 s of registering".into(),
            arrived: e.to_string(),
        })?;
    let m = &state.manifest;
    if beat.service_version != m.service_version || beat.manifest_hash != m.manifest_hash {
        return fail(
            format!(
                "service_version {:?} and manifest_hash {}, as registered",
                m.service_version, m.manifest_hash
            ),
            format!(
                "service_version {:?}, manifest_hash {}",
                beat.service_version, beat.manifest_hash
            ),
        );
    }
    Ok(())
}

/// The one finishing event of `node` must be `want`, after `retrying` ones as `retries` says.
fn expect_statuses(ctx: &Ctx, run: &RunId, node: &str, want: &[&str]) -> Result<(), Failure> {
    let got = ctx.statuses(run, node);
    if got != want {
        return fail(
            format!("completion events of {node}: {want:?}"),
            format!("{got:?}"),
        );
    }
    Ok(())
}

async fn echo(ctx: &mut Ctx) -> Result<(), Failure> {
    let version = ctx.deploy(echo_flow()).await?;
    let mut out = ctx.listen("conform.out.echo").await?;
    let input = json!({"hello": "world", "n": [1, 2.5, null], "nested": {"ü": "<&>"}});
    let run = ctx.trigger("conform-echo", &input).await?;
    let msg = ctx
        .next(&mut out, "echo's output at conform.out.echo")
        .await?;
    let got: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
    if got != input {
        return fail(
            format!("echo's output to be its input, {input}"),
            String::from_utf8_lossy(&msg.payload).into_owned(),
        );
    }
    let settled = ctx.succeeded(&run).await?;
    expect_statuses(ctx, &run, "echo", &[status::SUCCEEDED])?;
    let event = &ctx.events(&run, "echo")[0];
    if event.node_type != "action"
        || event.service != SERVICE
        || event.trace_id != settled.trace_id
        || event.flow_version != version
    {
        return fail(
            format!(
                "node_type action, service {SERVICE}, trace_id {}, flow_version {version}",
                settled.trace_id
            ),
            format!(
                "node_type {}, service {}, trace_id {}, flow_version {}",
                event.node_type, event.service, event.trace_id, event.flow_version
            ),
        );
    }
    Ok(())
}

async fn mapping_condition(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(line(
        "conform-mapping",
        vec![
            cin("in"),
            json!({"id": "map", "type": "mapping",
                   "config": {"fields": {"flag": "$.flag", "n": "$.n"}}}),
            json!({"id": "check", "type": "condition",
                   "config": {"path": "$.flag", "op": "eq", "value": true}}),
            action("echo", SERVICE, "echo"),
        ],
    ))
    .await?;
    let yes = ctx
        .trigger("conform-mapping", &json!({"flag": true, "n": 1, "drop": 2}))
        .await?;
    let no = ctx
        .trigger("conform-mapping", &json!({"flag": false, "n": 2}))
        .await?;
    ctx.succeeded(&yes).await?;
    expect_statuses(ctx, &yes, "map", &[status::SUCCEEDED])?;
    expect_statuses(ctx, &yes, "check", &[status::SUCCEEDED])?;
    expect_statuses(ctx, &yes, "echo", &[status::SUCCEEDED])?;
    // A false condition's run settles with `check` skipped; a service that reports it
    // `succeeded` leaves echo pending, so wait for the node rather than the run.
    let checked = ctx
        .patient(|lab| {
            let no = no.clone();
            async move { lab.wait_for_node(&no.0, "check").await }
        })
        .await
        .map_err(|e| Failure {
            expected: "check (a false condition) reported skipped".into(),
            arrived: e.to_string(),
        })?;
    if checked.status != status::SKIPPED {
        return fail(
            "a false condition is reported `skipped` (and what follows it never runs)",
            format!(
                "check (condition $.flag eq true, on flag false) reported {:?}",
                checked.status
            ),
        );
    }
    ctx.settled(&no).await?;
    expect_statuses(ctx, &no, "check", &[status::SKIPPED])?;
    expect_statuses(ctx, &no, "echo", &[])
}

async fn lookup(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(line(
        "conform-lookup",
        vec![
            cin("in"),
            json!({"id": "find", "type": "lookup",
                   "config": {"lookup": "directory", "params": {"key": "$.key"}}}),
            output("out", "conform.out.lookup"),
        ],
    ))
    .await?;
    let mut out = ctx.listen("conform.out.lookup").await?;
    let run = ctx
        .trigger("conform-lookup", &json!({"key": "k1", "keep": 1}))
        .await?;
    let msg = ctx
        .next(&mut out, "the lookup's result at conform.out.lookup")
        .await?;
    let want = json!({"key": "k1", "keep": 1, "found": true, "value": "value-of-k1"});
    let got: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
    if got != want {
        return fail(
            want.to_string(),
            String::from_utf8_lossy(&msg.payload).into_owned(),
        );
    }
    ctx.succeeded(&run).await?;
    expect_statuses(ctx, &run, "find", &[status::SUCCEEDED])
}

async fn output_nats(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(line(
        "conform-output",
        vec![
            cin("in"),
            action("echo", SERVICE, "echo"),
            output("out", "conform.out.output"),
        ],
    ))
    .await?;
    let mut out = ctx.listen("conform.out.output").await?;
    let run = ctx.trigger("conform-output", &json!({"a": 1})).await?;
    let msg = ctx
        .next(&mut out, "the output at conform.out.output")
        .await?;
    let headers = transport::from_nats(msg.headers.as_ref());
    let envelope = Envelope::from_headers(&headers).map_err(|e| Failure {
        expected: "the output to carry the envelope headers".into(),
        arrived: e.to_string(),
    })?;
    let settled = ctx.succeeded(&run).await?;
    let msg_id = headers.get(names::NATS_MSG_ID).unwrap_or_default();
    let root = idempotency::root(&run.0, "in");
    let mut wrong = Vec::new();
    if envelope.flow_run_id != run.0 {
        wrong.push(format!("flow_run_id {}", envelope.flow_run_id));
    }
    if envelope.source_node_id != "out" {
        wrong.push(format!("source_node_id {:?}", envelope.source_node_id));
    }
    if envelope.trace_id != settled.trace_id {
        wrong.push(format!("trace_id {:?}", envelope.trace_id));
    }
    if msg_id != envelope.idempotency_key {
        wrong.push(format!(
            "Nats-Msg-Id {msg_id:?} differs from the idempotency key {:?}",
            envelope.idempotency_key
        ));
    }
    if envelope.idempotency_key == root {
        wrong.push(format!(
            "the idempotency key is the inbound delivery's ({root}), not one of its own"
        ));
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        fail(
            format!(
                "the run's envelope, source_node_id \"out\", trace_id {}, Nats-Msg-Id = a key of its own",
                settled.trace_id
            ),
            wrong.join("; "),
        )
    }
}

fn flaky_flow() -> Value {
    line(
        "conform-flaky",
        vec![cin("in"), action("flaky", SERVICE, "flaky")],
    )
}

async fn retry(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(flaky_flow()).await?;
    let run = ctx
        .trigger("conform-flaky", &json!({"failures": 2}))
        .await?;
    ctx.succeeded(&run).await?;
    expect_statuses(
        ctx,
        &run,
        "flaky",
        &[status::RETRYING, status::RETRYING, status::SUCCEEDED],
    )?;
    let dead = ctx.lab.dlq().into_iter().filter(|r| {
        matches!(&r.kind, RecordKind::Dlq { entry: Some(e), .. } if e.envelope.flow_run_id == run.0)
    });
    match dead.count() {
        0 => Ok(()),
        n => fail("no DLQ entry", format!("{n} DLQ entries for the run")),
    }
}

/// The checks every action DLQ entry must pass: subject, kind, body, Msg-Id.
fn check_entry(
    record: &triggers_emulator::DlqRecord,
    subject: &str,
    kind: &str,
    body: &Value,
) -> Result<triggers_sdk::wire::DlqEntry, Failure> {
    let Some(entry) = record.entry.clone() else {
        return fail(
            "a DLQ entry that decodes",
            record.payload.chars().take(200).collect::<String>(),
        );
    };
    let mut wrong = Vec::new();
    if record.subject != subject {
        wrong.push(format!("subject {}", record.subject));
    }
    if entry.kind != kind {
        wrong.push(format!("kind {}", entry.kind));
    }
    let got: Value = serde_json::from_str(&entry.body.to_string()).unwrap_or(Value::Null);
    if &got != body {
        wrong.push(format!("body {}", entry.body));
    }
    let msg_id = format!(
        "{}:dlq:{}",
        entry.envelope.idempotency_key,
        entry.occurred_at.unix_nanos()
    );
    if record.msg_id != msg_id {
        wrong.push(format!("Nats-Msg-Id {:?}", record.msg_id));
    }
    if wrong.is_empty() {
        Ok(entry)
    } else {
        fail(
            format!(
                "on {subject}: kind {kind}, body {body}, Nats-Msg-Id <key>:dlq:<occurred_at in ns> ({msg_id})"
            ),
            wrong.join("; "),
        )
    }
}

async fn dlq_action_failed(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(flaky_flow()).await?;
    let input = json!({"failures": 9});
    let run = ctx.trigger("conform-flaky", &input).await?;
    let record = ctx
        .dlq(
            DlqFilter::run(&run.0).with_kind("action_failed"),
            "an action_failed DLQ entry for the run",
        )
        .await?;
    let entry = check_entry(
        &record,
        &format!("triggers.v2.dlq.{SERVICE}.flaky"),
        "action_failed",
        &input,
    )?;
    if entry.envelope.retry_count != 2 {
        return fail(
            "envelope.retry_count 2 (the third attempt's)",
            entry.envelope.retry_count.to_string(),
        );
    }
    ctx.settled(&run).await?;
    expect_statuses(
        ctx,
        &run,
        "flaky",
        &[status::RETRYING, status::RETRYING, status::FAILED],
    )
}

async fn action_dlq(
    ctx: &mut Ctx,
    flow: &str,
    name: &str,
    input: Value,
    kind: &str,
) -> Result<(), Failure> {
    ctx.deploy(line(flow, vec![cin("in"), action(name, SERVICE, name)]))
        .await?;
    let run = ctx.trigger(flow, &input).await?;
    let record = ctx
        .dlq(
            DlqFilter::run(&run.0).with_kind(kind),
            &format!("a DLQ entry of kind {kind} for the run"),
        )
        .await?;
    check_entry(
        &record,
        &format!("triggers.v2.dlq.{SERVICE}.{name}"),
        kind,
        &input,
    )?;
    ctx.settled(&run).await?;
    expect_statuses(ctx, &run, name, &[status::FAILED])
}

async fn dlq_invalid_input(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(echo_flow()).await?;
    let run = ctx
        .lab
        .trigger_bytes(
            "conform-echo",
            b"\"text\"".to_vec(),
            TriggerOptions::default(),
        )
        .await
        .map_err(|e| Failure {
            expected: "a run of conform-echo to start".into(),
            arrived: e.to_string(),
        })?;
    let record = ctx
        .dlq(
            DlqFilter::run(&run.0).with_kind("invalid_input"),
            "an invalid_input DLQ entry for the run",
        )
        .await?;
    check_entry(
        &record,
        &format!("triggers.v2.dlq.{SERVICE}.echo"),
        "invalid_input",
        &json!("text"),
    )?;
    ctx.settled(&run).await?;
    expect_statuses(ctx, &run, "echo", &[status::FAILED])
}

/// A well-formed envelope of a run the kit makes up, for a forged delivery.
fn forged_envelope(run: &str, flow: &str, version: i64, source: &str) -> Envelope {
    Envelope {
        trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        span_id: "00f067aa0ba902b7".into(),
        flow_run_id: run.into(),
        flow_id: flow.into(),
        flow_version: version,
        idempotency_key: format!("{run}:{source}"),
        source_node_id: source.into(),
        emitted_at: GoTime::now(),
        ..Envelope::default()
    }
}

/// Waits for a fallback DLQ entry of `kind` and checks its subject, kind and body.
async fn fallback(
    ctx: &Ctx,
    kind: &str,
    body: &Value,
    run: Option<&str>,
) -> Result<triggers_sdk::wire::DlqEntry, Failure> {
    let subject = format!("triggers.v2.dlq.{SERVICE}.{kind}");
    let record = ctx
        .dlq(
            // The entry for the kit's own message: by its run where its envelope names one.
            match run {
                Some(run) => DlqFilter::run(run).with_kind(kind),
                None => DlqFilter::subject(subject.clone()).with_kind(kind),
            },
            &format!("a DLQ entry of kind {kind} on {subject}"),
        )
        .await?;
    if record.subject != subject {
        return fail(
            format!("the entry on {subject}"),
            format!("on {}", record.subject),
        );
    }
    let Some(entry) = record.entry.clone() else {
        return fail("a DLQ entry that decodes", record.payload);
    };
    let got: Value = serde_json::from_str(&entry.body.to_string()).unwrap_or(Value::Null);
    if &got != body {
        return fail(format!("body {body}"), format!("body {}", entry.body));
    }
    Ok(entry)
}

async fn dlq_missing_envelope(ctx: &mut Ctx) -> Result<(), Failure> {
    let body = json!({"forged": "missing_envelope"});
    // A Nats-Msg-Id is no envelope header: it only marks the message as the kit's.
    let mut headers = Headers::new();
    headers.insert(names::NATS_MSG_ID, "conform-forged-missing-envelope");
    ctx.forge(&headers, body.to_string().as_bytes()).await?;
    fallback(ctx, "missing_envelope", &body, None)
        .await
        .map(|_| ())
}

async fn dlq_invalid_envelope(ctx: &mut Ctx) -> Result<(), Failure> {
    let version = ctx.deploy(echo_flow()).await?;
    let run = "conform-forged-invalid-envelope";
    let mut headers = forged_envelope(run, "conform-echo", version, "in").to_headers();
    headers.insert(names::FLOW_VERSION, "x");
    let body = json!({"forged": "invalid_envelope"});
    ctx.forge(&headers, body.to_string().as_bytes()).await?;
    let entry = fallback(ctx, "invalid_envelope", &body, Some(run)).await?;
    if entry.envelope.flow_run_id != run {
        return fail(
            format!("envelope.flow_run_id {run:?} (the headers that could be read)"),
            format!("{:?}", entry.envelope.flow_run_id),
        );
    }
    Ok(())
}

async fn dlq_invalid_json(ctx: &mut Ctx) -> Result<(), Failure> {
    let version = ctx.deploy(echo_flow()).await?;
    let envelope = forged_envelope("conform-forged-invalid-json", "conform-echo", version, "in");
    ctx.forge(&envelope.to_headers(), b"not json").await?;
    let entry = fallback(
        ctx,
        "invalid_json",
        &json!("not json"),
        Some(&envelope.flow_run_id),
    )
    .await?;
    if entry.envelope.flow_run_id != envelope.flow_run_id {
        return fail(
            "the message's envelope in the entry",
            format!("flow_run_id {:?}", entry.envelope.flow_run_id),
        );
    }
    Ok(())
}

async fn dlq_unknown_flow(ctx: &mut Ctx) -> Result<(), Failure> {
    let envelope = forged_envelope("conform-forged-unknown-flow", "conform-nope", 1, "in");
    let body = json!({"forged": "unknown_flow"});
    ctx.forge(&envelope.to_headers(), body.to_string().as_bytes())
        .await?;
    fallback(ctx, "unknown_flow", &body, Some(&envelope.flow_run_id))
        .await
        .map(|_| ())
}

async fn dlq_unknown_node(ctx: &mut Ctx) -> Result<(), Failure> {
    let version = ctx.deploy(echo_flow()).await?;
    let envelope = forged_envelope(
        "conform-forged-unknown-node",
        "conform-echo",
        version,
        "ghost",
    );
    let body = json!({"forged": "unknown_node"});
    ctx.forge(&envelope.to_headers(), body.to_string().as_bytes())
        .await?;
    fallback(ctx, "unknown_node", &body, Some(&envelope.flow_run_id))
        .await
        .map(|_| ())
}

async fn hop_out(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(line(
        "conform-hop-out",
        vec![
            cin("in"),
            action("echo", SERVICE, "echo"),
            pin("pin"),
            action("pecho", PEER, "echo"),
        ],
    ))
    .await?;
    let run = ctx.trigger("conform-hop-out", &json!({"x": 1})).await?;
    let settled = ctx.succeeded(&run).await?;
    let (records, _) = ctx.lab.records();
    let hop = records.iter().find(|r| {
        matches!(&r.kind, RecordKind::Hop { run_id, source_node_id, from_emulator: false }
            if run_id == &run.0 && source_node_id == "echo")
    });
    let Some(hop) = hop else {
        return fail("a hop from echo on peer.inbound", "none recorded");
    };
    let headers: Headers = hop
        .headers
        .iter()
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    let envelope = Envelope::from_headers(&headers).map_err(|e| Failure {
        expected: "the hop's envelope".into(),
        arrived: e.to_string(),
    })?;
    let root = idempotency::root(&run.0, "in");
    if hop.subject != "peer.inbound"
        || envelope.trace_id != settled.trace_id
        || envelope.idempotency_key == root
        || headers.get(names::NATS_MSG_ID) != Some(envelope.idempotency_key.as_str())
    {
        return fail(
            format!(
                "on peer.inbound, trace_id {}, a key of its own (not {root}) also as Nats-Msg-Id",
                settled.trace_id
            ),
            format!(
                "on {}, trace_id {}, key {:?}, Nats-Msg-Id {:?}",
                hop.subject,
                envelope.trace_id,
                envelope.idempotency_key,
                headers.get(names::NATS_MSG_ID)
            ),
        );
    }
    expect_statuses(ctx, &run, "pecho", &[status::SUCCEEDED])
}

async fn hop_in(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(line(
        "conform-hop-in",
        vec![
            pin("pentry"),
            action("pecho", PEER, "echo"),
            cin("cin"),
            action("echo", SERVICE, "echo"),
        ],
    ))
    .await?;
    let run = ctx.trigger("conform-hop-in", &json!({"y": 2})).await?;
    let settled = ctx.succeeded(&run).await?;
    let seq = |node: &str| {
        settled
            .timeline
            .iter()
            .find(|e| e.node_id == node && e.status == status::SUCCEEDED)
            .map(|e| e.seq)
    };
    match (seq("cin"), seq("echo")) {
        (Some(a), Some(b)) if a < b => Ok(()),
        (a, b) => fail(
            "cin (the hop's service-in) reported succeeded by conformance, before echo",
            format!("cin at record {a:?}, echo at record {b:?}"),
        ),
    }
}

async fn timer(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.deploy(timer_flow()).await?;
    let run = ctx.trigger("conform-timer", &json!({"t": 1})).await?;
    let idle = ctx
        .patient(|lab| {
            let run = run.clone();
            async move { lab.wait_run_idle(&run).await }
        })
        .await
        .map_err(|e| Failure {
            expected: "the run to wait on its timer".into(),
            arrived: e.to_string(),
        })?;
    if idle.timers.is_empty() {
        return fail(
            "the timer armed after echo succeeded (the root delivery accepted)",
            format!(
                "{:?}: {}",
                idle.status,
                ctx.lab.describe_run(&run.0).replace('\n', "; ")
            ),
        );
    }
    ctx.lab
        .advance(Duration::from_secs(3600))
        .await
        .map_err(|e| Failure {
            expected: "the timer's delivery to be published".into(),
            arrived: e.to_string(),
        })?;
    ctx.succeeded(&run).await?;
    expect_statuses(ctx, &run, "echo2", &[status::SUCCEEDED])
}

async fn timer_rejected(ctx: &mut Ctx) -> Result<(), Failure> {
    let version = ctx.deploy(timer_flow()).await?;
    let run = "conform-forged-bad-triplet";
    let body = json!({"t": 2});
    let bytes = body.to_string().into_bytes();
    let mut headers = forged_envelope(run, "conform-timer", version, "in").to_headers();
    let context = TimerContext::Root(RootContext::new("conform-timer", version, run));
    durable_timer::write_triplet(&mut headers, &context, &bytes);
    headers.insert(
        names::DURABLE_TIMER_PAYLOAD_SHA256,
        durable_timer::payload_sha256(b"other bytes"),
    );
    ctx.forge(&headers, &bytes).await?;
    let ran = |ctx: &Ctx| {
        ctx.lab
            .completions()
            .into_iter()
            .filter(|e| e.flow_run_id == run && e.status == status::SUCCEEDED)
            .map(|e| e.node_id)
            .collect::<Vec<_>>()
    };
    let record = match ctx
        .dlq(
            DlqFilter::run(run).with_kind("durable_timer_rejected"),
            "a durable_timer_rejected DLQ entry",
        )
        .await
    {
        Ok(record) => record,
        Err(failure) => {
            let nodes = ran(ctx);
            if nodes.is_empty() {
                return Err(failure);
            }
            return fail(
                "a durable_timer_rejected DLQ entry, and no node run for the delivery",
                format!(
                    "{} ran on a delivery whose payload hash did not match \
                     (X-Triggers-Durable-Timer-Payload-SHA256 is not the body's SHA-256)",
                    nodes.join(", ")
                ),
            );
        }
    };
    if record.subject != format!("triggers.v2.dlq.{SERVICE}.echo") {
        return fail(
            format!("on triggers.v2.dlq.{SERVICE}.echo (the action it was for)"),
            record.subject,
        );
    }
    let nodes = ran(ctx);
    if !nodes.is_empty() {
        return fail(
            "no node run for the rejected delivery",
            format!(
                "{} ran on a delivery whose payload hash did not match",
                nodes.join(", ")
            ),
        );
    }
    Ok(())
}

async fn conformant(ctx: &mut Ctx) -> Result<(), Failure> {
    // Run alone (`--only conformant`), nothing but the registration would have been judged:
    // wait for a heartbeat too.
    let _ = ctx
        .lab
        .with_wait_timeout(Duration::from_secs(7).max(ctx.timeout))
        .wait_for_heartbeat(SERVICE, |_| true)
        .await;
    let errors: Vec<String> = ctx
        .lab
        .violations()
        .into_iter()
        .filter(|v| v.severity == Severity::Error)
        .map(|v| format!("{} on {}: {}", v.rule, v.subject, v.message))
        .collect();
    if errors.is_empty() {
        if ctx.strict {
            let warnings = ctx.warnings();
            if !warnings.is_empty() {
                ctx.strict_only = true;
                return fail(
                    "no conformance warning either (--strict: bytes identical to Go's)",
                    format!("{} warning(s): {}", warnings.len(), warnings.join(" | ")),
                );
            }
        }
        return Ok(());
    }
    let shown: Vec<&String> = errors.iter().take(5).collect();
    fail(
        "no conformance error in what the service sent",
        format!(
            "{} error(s): {}",
            errors.len(),
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" | ")
        ),
    )
}

async fn shutdown(ctx: &mut Ctx) -> Result<(), Failure> {
    ctx.service.terminate();
    // Nothing is in flight by now, so a correct service is gone in well under its grace period.
    let patience = ctx.timeout.saturating_mul(3);
    ctx.lab
        .with_wait_timeout(patience)
        .wait_for_heartbeat(SERVICE, |h| h.shutting_down)
        .await
        .map_err(|e| Failure {
            expected: "a heartbeat with shutting_down true after SIGTERM".into(),
            arrived: e.to_string(),
        })?;
    match ctx.service.wait_exit(patience).await {
        Some(_) => Ok(()),
        None => fail(
            format!("the process to exit within {patience:?} of SIGTERM"),
            "still running",
        ),
    }
}
