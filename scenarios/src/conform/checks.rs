//! The checks of the conformance kit: the table of them, in the order of `docs/conform.md`, what
//! they share (`Ctx`, the flows they deploy) and the dispatch; the checks themselves, one function
//! each, are in the submodules by concern.

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

mod basic;
mod dlq;
mod faults;
mod hard;
mod hops;

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
        "register" => basic::register(ctx).await,
        "heartbeat" => basic::heartbeat(ctx).await,
        "echo" => basic::echo(ctx).await,
        "mapping_condition" => basic::mapping_condition(ctx).await,
        "lookup" => basic::lookup(ctx).await,
        "output_nats" => basic::output_nats(ctx).await,
        "retry" => dlq::retry(ctx).await,
        "dlq_action_failed" => dlq::dlq_action_failed(ctx).await,
        "dlq_action_timeout" => {
            dlq::action_dlq(
                ctx,
                "conform-slow",
                "slow",
                json!({"ms": 2000}),
                "action_timeout",
            )
            .await
        }
        "dlq_action_panicked" => {
            dlq::action_dlq(
                ctx,
                "conform-crash",
                "crash",
                json!({"boom": true}),
                "action_panicked",
            )
            .await
        }
        "dlq_invalid_input" => dlq::dlq_invalid_input(ctx).await,
        "dlq_missing_envelope" => dlq::dlq_missing_envelope(ctx).await,
        "dlq_invalid_envelope" => dlq::dlq_invalid_envelope(ctx).await,
        "dlq_invalid_json" => dlq::dlq_invalid_json(ctx).await,
        "dlq_unknown_flow" => dlq::dlq_unknown_flow(ctx).await,
        "dlq_unknown_node" => dlq::dlq_unknown_node(ctx).await,
        "hop_out" => hops::hop_out(ctx).await,
        "hop_in" => hops::hop_in(ctx).await,
        "timer" => hops::timer(ctx).await,
        "timer_rejected" => hops::timer_rejected(ctx).await,
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
        "conformant" => basic::conformant(ctx).await,
        "shutdown" => basic::shutdown(ctx).await,
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

fn flaky_flow() -> Value {
    line(
        "conform-flaky",
        vec![cin("in"), action("flaky", SERVICE, "flaky")],
    )
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
