//! The orchestrator emulator: registration, heartbeats, releases, broadcasts, flow runs, Durable
//! Timers, the recorder and the conformance checker, on one NATS connection.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_nats::jetstream;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use triggers_sdk::flow::{Flow, NodeType};
use triggers_sdk::transport;
use triggers_sdk::wire::durable_timer::{self, RootContext, TimerContext};
use triggers_sdk::wire::header::{Traceparent, names};
use triggers_sdk::wire::subject::{self};
use triggers_sdk::wire::{CompletionEvent, Envelope, GoTime, Headers, Manifest, json};

use crate::clock::{Clock, ClockMode};
use crate::conformance::{Severity, Violation};
use crate::error::EmulatorError;
use crate::recorder::{Record, RecordKind, Run, ServiceState};
use crate::release::{self, ReleaseProblem};

/// What to do when a registration's `manifest_hash` is not the hash of its contents.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HashMismatchPolicy {
    /// Refuse the registration with an error reply (what the orchestrator does).
    #[default]
    Reject,
    /// Accept it; the conformance checker records the violation.
    Record,
}

/// How the emulator behaves. Every field has a default; set what you need and end with
/// `..Default::default()`.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// A registration whose hash is wrong: refused (default) or accepted and recorded.
    pub hash_mismatch: HashMismatchPolicy,
    /// The clock Durable Timers run on: virtual (default) or real.
    pub clock: ClockMode,
    /// On the virtual clock, jump to the next timer whenever every run is idle (default off:
    /// tests advance by hand).
    pub auto_advance: bool,
    /// The heartbeat period services use; liveness is judged against it (default 5 s).
    pub heartbeat_interval: Duration,
    /// How long the `wait_*` methods wait before failing (default 10 s).
    pub wait_timeout: Duration,
    /// Serve the control API (`triggerslab.v1.control.*`) for the CLI and the terminal UI
    /// (default on).
    pub control_api: bool,
    /// JetStream's dedup window on the DLQ stream (default 2 min).
    pub dlq_duplicate_window: Duration,
    /// Records kept; older ones drop off (default 100 000).
    pub max_records: usize,
    /// The connection the control API is served on and the records are published on (default
    /// `None`: the emulator's own). `triggers-lab up` passes one logged in to the server's
    /// control account, out of the services' reach (see `NatsConfig::private_control`); the
    /// [`Harness`](crate::Harness) does the same when its server has one.
    pub control_client: Option<async_nats::Client>,
    /// A secret every control request must carry in the `Triggers-Lab-Token` header; records
    /// then go to `triggerslab.v1.records.<token>` (default `None`: no token, records on
    /// `triggerslab.v1.records`). See [`crate::control`].
    pub control_token: Option<crate::control::ControlToken>,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            hash_mismatch: HashMismatchPolicy::default(),
            clock: ClockMode::default(),
            auto_advance: false,
            heartbeat_interval: Duration::from_secs(5),
            wait_timeout: Duration::from_secs(10),
            control_api: true,
            dlq_duplicate_window: Duration::from_secs(120),
            max_records: 100_000,
            control_client: None,
            control_token: None,
        }
    }
}

/// The JetStream stream that holds every DLQ publish, so `Nats-Msg-Id` dedup is the server's own.
pub const DLQ_STREAM: &str = "TRIGGERS_DLQ";
/// The JetStream stream that holds every completion event, so none is lost to a server restart
/// (an SDK that publishes through JetStream gets an ack; a plain publish is stored as well).
pub const EVENTS_STREAM: &str = "TRIGGERS_EVENTS";

/// Creates (or reuses) a stream over `subjects`; returns the sequence its next message will
/// get, from which the emulator follows it.
async fn stream_end(
    js: &jetstream::Context,
    name: &str,
    subjects: &str,
    duplicate_window: Duration,
) -> Result<u64, EmulatorError> {
    let mut stream = js
        .get_or_create_stream(jetstream::stream::Config {
            name: name.into(),
            subjects: vec![subjects.into()],
            duplicate_window,
            ..Default::default()
        })
        .await
        .map_err(|e| EmulatorError::nats("create a stream", format!("{name}: {e}")))?;
    let info = stream
        .info()
        .await
        .map_err(|e| EmulatorError::nats("read a stream", format!("{name}: {e}")))?;
    Ok(info.state.last_sequence + 1)
}

/// The result of a deploy.
#[derive(Debug, Clone, Serialize)]
pub struct Deployment {
    /// The flow as released: owners assigned, inbound subjects resolved, version set.
    pub flow: Flow,
    /// The subject it was broadcast on.
    pub broadcast_subject: String,
}

/// A run the emulator started.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct RunId(pub String);

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for RunId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Options of a trigger.
#[derive(Debug, Clone, Default)]
pub struct TriggerOptions {
    /// The service-in node to start at (default: the flow's first entry point).
    pub entry: Option<String>,
    /// The run id (default: a new random one).
    pub run_id: Option<String>,
}

/// A timer that fired during an `advance`.
#[derive(Debug, Clone, Serialize)]
pub struct FiredTimer {
    /// The run.
    pub run_id: String,
    /// The timer node.
    pub node_id: String,
    /// Which occurrence.
    pub occurrence: u64,
    /// When it was due.
    pub due: GoTime,
}

pub(crate) struct State {
    pub(crate) seq: u64,
    pub(crate) clock: Clock,
    pub(crate) services: BTreeMap<String, ServiceState>,
    /// Inbound subject -> owning service.
    pub(crate) inbound: BTreeMap<String, String>,
    pub(crate) flows: BTreeMap<String, Flow>,
    pub(crate) runs: BTreeMap<String, Run>,
    /// Run ids in start order.
    pub(crate) run_order: Vec<String>,
    pub(crate) records: VecDeque<Record>,
    pub(crate) dropped_records: u64,
    pub(crate) violations: Vec<Violation>,
    /// `Nats-Msg-Id`s of the emulator's own publishes on inbound subjects.
    pub(crate) own_msg_ids: HashSet<String>,
    /// The bytes of the emulator's own broadcasts not yet seen on the wire: a broadcast from
    /// anyone else is a peer's, and judged.
    pub(crate) own_broadcasts: HashSet<Vec<u8>>,
    fences: u64,
}

impl State {
    pub(crate) fn manifests(&self) -> BTreeMap<String, Manifest> {
        self.services
            .iter()
            .map(|(k, v)| (k.clone(), v.manifest.clone()))
            .collect()
    }
}

pub(crate) struct Shared {
    pub(crate) client: async_nats::Client,
    pub(crate) js: jetstream::Context,
    pub(crate) config: EmulatorConfig,
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    records_tx: broadcast::Sender<Record>,
    pub(crate) tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// Aborts the emulator's tasks when the last handle goes.
struct Tasks(Arc<Shared>);

impl Drop for Tasks {
    fn drop(&mut self) {
        let tasks = std::mem::take(&mut *self.0.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in tasks {
            t.abort();
        }
    }
}

/// The orchestrator emulator. Cheap to clone; the last clone dropped stops it.
#[derive(Clone)]
pub struct Emulator {
    pub(crate) shared: Arc<Shared>,
    _tasks: Arc<Tasks>,
    /// This handle's `wait_*` timeout, when not the config's.
    pub(crate) wait_timeout: Option<Duration>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator").finish_non_exhaustive()
    }
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::fill(&mut buf[..]);
    hex::encode(buf)
}

impl Emulator {
    /// Starts the emulator on `client`: subscribes to the locked subjects, creates the DLQ
    /// stream and (by default) serves the control API. Everything is listening when it returns.
    ///
    /// # Errors
    /// When a subscription or the DLQ stream cannot be created.
    pub async fn start(
        client: async_nats::Client,
        config: EmulatorConfig,
    ) -> Result<Self, EmulatorError> {
        let js = jetstream::new(client.clone());
        let (changed, _) = watch::channel(0);
        let (records_tx, _) = broadcast::channel(4096);
        let shared = Arc::new(Shared {
            client: client.clone(),
            js: js.clone(),
            state: Mutex::new(State {
                seq: 0,
                clock: Clock::new(config.clock),
                services: BTreeMap::new(),
                inbound: BTreeMap::new(),
                flows: BTreeMap::new(),
                runs: BTreeMap::new(),
                run_order: Vec::new(),
                records: VecDeque::new(),
                dropped_records: 0,
                violations: Vec::new(),
                own_msg_ids: HashSet::new(),
                own_broadcasts: HashSet::new(),
                fences: 0,
            }),
            config,
            changed,
            records_tx,
            tasks: Mutex::new(Vec::new()),
        });
        let emulator = Emulator {
            _tasks: Arc::new(Tasks(shared.clone())),
            shared: shared.clone(),
            wait_timeout: None,
        };

        let register = client
            .subscribe(subject::MANIFEST_REGISTER)
            .await
            .map_err(|e| EmulatorError::nats("subscribe to manifest.register", e))?;
        let fetch = client
            .subscribe(subject::MANIFEST_FETCH)
            .await
            .map_err(|e| EmulatorError::nats("subscribe to manifest.fetch", e))?;
        let all = client
            .subscribe(subject::ALL)
            .await
            .map_err(|e| EmulatorError::nats("subscribe to triggers.v2.>", e))?;
        let dlq_from = stream_end(
            &js,
            DLQ_STREAM,
            subject::DLQ_ALL,
            shared.config.dlq_duplicate_window,
        )
        .await?;
        let events_from = stream_end(
            &js,
            EVENTS_STREAM,
            subject::FLOW_EVENTS_ALL,
            shared.config.dlq_duplicate_window,
        )
        .await?;

        emulator.spawn(Self::serve_register(shared.clone(), register));
        emulator.spawn(Self::serve_fetch(shared.clone(), fetch));
        emulator.spawn(Self::observe_all(shared.clone(), all));
        emulator.spawn(crate::observe::follow(
            shared.clone(),
            DLQ_STREAM,
            dlq_from,
            crate::observe::record_dlq,
        ));
        emulator.spawn(crate::observe::follow(
            shared.clone(),
            EVENTS_STREAM,
            events_from,
            crate::observe::record_event,
        ));
        if shared.config.control_api {
            let control = crate::control::serve(emulator.clone()).await?;
            emulator.spawn(control);
        }
        match shared.config.clock {
            ClockMode::Real => emulator.spawn(crate::timers::real_clock(emulator.clone())),
            ClockMode::Virtual if shared.config.auto_advance => {
                emulator.spawn(crate::timers::auto_advance(emulator.clone()));
            }
            ClockMode::Virtual => {}
        }
        // Every subscription in place at the server before anyone is told the emulator is up.
        transport::round_trip(&client)
            .await
            .map_err(|e| EmulatorError::nats("confirm the subscriptions", e))?;
        Ok(emulator)
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(task);
        self.shared
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(handle);
    }

    /// The NATS connection the emulator uses.
    #[must_use]
    pub fn client(&self) -> &async_nats::Client {
        &self.shared.client
    }

    /// A handle to the same emulator whose `wait_*` methods give up after `timeout` instead of
    /// [`EmulatorConfig::wait_timeout`]: `lab.with_wait_timeout(Duration::from_secs(60)).wait_run_settled(&run)`.
    #[must_use]
    pub fn with_wait_timeout(&self, timeout: Duration) -> Emulator {
        Emulator {
            wait_timeout: Some(timeout),
            ..self.clone()
        }
    }

    /// The configuration it runs with.
    #[must_use]
    pub fn config(&self) -> &EmulatorConfig {
        &self.shared.config
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// A receiver that sees every record from now on (the control API and the terminal UI use it).
    #[must_use]
    pub fn subscribe_records(&self) -> broadcast::Receiver<Record> {
        self.shared.records_tx.subscribe()
    }

    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.shared.changed.subscribe()
    }

    // ---- releases --------------------------------------------------------------------------

    /// Checks a flow against the registered services without deploying it.
    ///
    /// # Errors
    /// Every problem found, each with its stable code.
    pub fn check_release(&self, flow: &Flow) -> Result<Flow, Vec<ReleaseProblem>> {
        let manifests = self.lock().manifests();
        release::check_release(flow, &manifests)
    }

    /// Releases a flow: checks it, stores it (a redeploy of the same id gets the next version),
    /// and broadcasts it: on `triggers.v2.flow.broadcast.<service>` when one service is involved,
    /// on `triggers.v2.flow.broadcast.all` when several are.
    ///
    /// # Errors
    /// [`EmulatorError::Release`] with every problem, or a NATS error from the broadcast.
    pub async fn deploy(&self, flow: Flow) -> Result<Deployment, EmulatorError> {
        let mut resolved = self.check_release(&flow).map_err(EmulatorError::Release)?;
        let (subject, envelope) = {
            let mut state = self.lock();
            if let Some(previous) = state.flows.get(&resolved.id) {
                resolved.version = resolved.version.max(previous.version + 1);
            }
            let services = resolved.services();
            let subject = match services.iter().next() {
                Some(only) if services.len() == 1 => subject::flow_broadcast(only)
                    .unwrap_or_else(|_| subject::FLOW_BROADCAST_ALL.to_owned()),
                _ => subject::FLOW_BROADCAST_ALL.to_owned(),
            };
            state.flows.insert(resolved.id.clone(), resolved.clone());
            (subject, resolved.to_envelope())
        };
        let bytes = envelope.to_json().map_err(EmulatorError::Encode)?;
        self.lock().own_broadcasts.insert(bytes.clone());
        self.shared.push(
            "",
            &Headers::new(),
            &[],
            RecordKind::Deploy {
                flow_id: resolved.id.clone(),
                version: resolved.version,
            },
        );
        self.shared
            .client
            .publish(subject.clone(), bytes.clone().into())
            .await
            .map_err(|e| EmulatorError::nats("broadcast the flow", e))?;
        self.shared
            .client
            .flush()
            .await
            .map_err(|e| EmulatorError::nats("broadcast the flow", e))?;
        self.shared.push(
            &subject,
            &Headers::new(),
            &bytes,
            RecordKind::Broadcast {
                flow_id: resolved.id.clone(),
                version: resolved.version,
            },
        );
        self.shared.notify();
        Ok(Deployment {
            flow: resolved,
            broadcast_subject: subject,
        })
    }

    // ---- runs ------------------------------------------------------------------------------

    /// Starts a run of a deployed flow with a JSON payload (written as Go writes JSON).
    ///
    /// # Errors
    /// An unknown flow, a flow without an entry point, or a publish that JetStream did not ack.
    pub async fn trigger(&self, flow_id: &str, payload: &Value) -> Result<RunId, EmulatorError> {
        let bytes = json::to_vec(&json::GoAny(payload)).map_err(EmulatorError::Encode)?;
        self.trigger_bytes(flow_id, bytes, TriggerOptions::default())
            .await
    }

    /// Starts a run with exact payload bytes (which need not be JSON: a poison message).
    ///
    /// # Errors
    /// As [`Emulator::trigger`].
    pub async fn trigger_bytes(
        &self,
        flow_id: &str,
        payload: Vec<u8>,
        options: TriggerOptions,
    ) -> Result<RunId, EmulatorError> {
        let run_id = options
            .run_id
            .clone()
            .unwrap_or_else(|| format!("run-{}", random_hex(8)));
        let (target, headers, entry_id) = {
            let mut state = self.lock();
            let flow = state
                .flows
                .get(flow_id)
                .cloned()
                .ok_or_else(|| EmulatorError::UnknownFlow(flow_id.to_owned()))?;
            let entry = match &options.entry {
                Some(id) => flow
                    .node(id)
                    .filter(|n| n.node_type == NodeType::ServiceIn)
                    .cloned(),
                None => flow.entry_points().next().cloned(),
            }
            .ok_or_else(|| EmulatorError::NoEntry {
                flow: flow_id.to_owned(),
                entry: options.entry.clone(),
            })?;
            let now = state.clock.now();
            let trace_id = random_hex(16);
            let envelope = new_envelope(
                &flow,
                &run_id,
                &entry.id,
                &trace_id,
                format!("{run_id}:{}", entry.id),
                now,
            );
            let mut headers = envelope.to_headers();
            headers.insert(names::NATS_MSG_ID, envelope.nats_msg_id());
            if flow.has_timer() {
                let root = TimerContext::Root(RootContext::new(&flow.id, flow.version, &run_id));
                durable_timer::write_triplet(&mut headers, &root, &payload);
            }
            state.own_msg_ids.insert(envelope.idempotency_key.clone());
            // Run and timeline times are wall-clock, like the services' own steps; the
            // emulator's clock (virtual or not) rules envelopes and timers.
            let run = Run::start(
                run_id.clone(),
                &flow,
                &entry.id,
                trace_id,
                GoTime::now(),
                payload.clone(),
            );
            state.runs.insert(run_id.clone(), run);
            state.run_order.push(run_id.clone());
            (entry.inbound.clone(), headers, entry.id.clone())
        };
        let seq = self.shared.push(
            &target,
            &headers,
            &payload,
            RecordKind::Trigger {
                run_id: run_id.clone(),
                flow_id: flow_id.to_owned(),
            },
        );
        {
            let mut state = self.lock();
            if let Some(run) = state.runs.get_mut(&run_id) {
                run.engine_step(
                    seq,
                    &entry_id,
                    NodeType::ServiceIn.as_str(),
                    "triggered",
                    GoTime::now(),
                );
            }
        }
        if let Err(e) = self.shared.publish_inbound(&target, headers, payload).await {
            self.lock().runs.remove(&run_id);
            return Err(e);
        }
        self.shared.notify();
        Ok(RunId(run_id))
    }

    /// Moves the virtual clock forward and fires every timer that falls due, in order.
    ///
    /// # Errors
    /// On the real clock, or when a delivery cannot be published.
    pub async fn advance(&self, by: Duration) -> Result<Vec<FiredTimer>, EmulatorError> {
        let target = {
            let state = self.lock();
            if state.clock.mode() == ClockMode::Real {
                return Err(EmulatorError::RealClock);
            }
            state.clock.now().saturating_add(by)
        };
        crate::timers::advance_to(self, target).await
    }

    /// The emulator's current time.
    #[must_use]
    pub fn now(&self) -> GoTime {
        self.lock().clock.now()
    }

    // ---- reading state ---------------------------------------------------------------------

    /// Registered services.
    #[must_use]
    pub fn services(&self) -> BTreeMap<String, ServiceState> {
        self.lock().services.clone()
    }

    /// Deployed flows (as released).
    #[must_use]
    pub fn flows(&self) -> BTreeMap<String, Flow> {
        self.lock().flows.clone()
    }

    /// A run.
    #[must_use]
    pub fn run(&self, id: &str) -> Option<Run> {
        self.lock().runs.get(id).cloned()
    }

    /// Every run, in start order.
    #[must_use]
    pub fn runs(&self) -> Vec<Run> {
        let state = self.lock();
        state
            .run_order
            .iter()
            .filter_map(|id| state.runs.get(id).cloned())
            .collect()
    }

    /// The records kept, oldest first, and how many older ones were dropped.
    #[must_use]
    pub fn records(&self) -> (Vec<Record>, u64) {
        let state = self.lock();
        (
            state.records.iter().cloned().collect(),
            state.dropped_records,
        )
    }

    /// Records after `seq` (for followers).
    #[must_use]
    pub fn records_since(&self, seq: u64, limit: usize) -> Vec<Record> {
        let state = self.lock();
        state
            .records
            .iter()
            .filter(|r| r.seq > seq)
            .take(limit)
            .cloned()
            .collect()
    }

    /// DLQ entries recorded (after dedup), oldest first.
    #[must_use]
    pub fn dlq(&self) -> Vec<Record> {
        let state = self.lock();
        state
            .records
            .iter()
            .filter(|r| matches!(r.kind, RecordKind::Dlq { .. }))
            .cloned()
            .collect()
    }

    /// Completion events recorded, oldest first.
    #[must_use]
    pub fn completions(&self) -> Vec<CompletionEvent> {
        let state = self.lock();
        state
            .records
            .iter()
            .filter_map(|r| match &r.kind {
                RecordKind::Completion { event } => Some(event.clone()),
                _ => None,
            })
            .collect()
    }

    /// Every conformance violation seen.
    #[must_use]
    pub fn violations(&self) -> Vec<Violation> {
        self.lock().violations.clone()
    }

    /// Panics, listing them, if the conformance checker found any violation (error or warning).
    ///
    /// # Panics
    /// When there is one.
    #[track_caller]
    pub fn assert_conformant(&self) {
        let violations = self.violations();
        if !violations.is_empty() {
            panic!("{}", describe_violations(&violations));
        }
    }

    /// Panics, listing them, if the conformance checker found any violation of severity error.
    ///
    /// # Panics
    /// When there is one.
    #[track_caller]
    pub fn assert_no_conformance_errors(&self) {
        let errors: Vec<_> = self
            .violations()
            .into_iter()
            .filter(|v| v.severity == Severity::Error)
            .collect();
        if !errors.is_empty() {
            panic!("{}", describe_violations(&errors));
        }
    }
}

/// A readable list of violations, with the offending bytes.
#[must_use]
pub fn describe_violations(violations: &[Violation]) -> String {
    let mut out = format!("{} conformance violation(s):\n", violations.len());
    for v in violations {
        out.push_str(&format!(
            "  [{}] {} on {}: {}\n      bytes: {}\n",
            v.severity,
            v.rule,
            v.subject,
            v.message,
            String::from_utf8_lossy(&v.payload)
                .chars()
                .take(300)
                .collect::<String>()
        ));
    }
    out
}

pub(crate) fn new_envelope(
    flow: &Flow,
    run_id: &str,
    source_node_id: &str,
    trace_id: &str,
    idempotency_key: String,
    now: GoTime,
) -> Envelope {
    let span_id = random_hex(8);
    Envelope {
        traceparent: Traceparent::new(trace_id, &span_id, true).to_string(),
        trace_id: trace_id.to_owned(),
        span_id,
        flow_run_id: run_id.to_owned(),
        flow_id: flow.id.clone(),
        flow_version: flow.version,
        idempotency_key,
        source_node_id: source_node_id.to_owned(),
        retry_count: 0,
        emitted_at: now,
    }
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock (a bug) must not take every later test call down with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn notify(&self) {
        self.changed.send_modify(|v| *v += 1);
    }

    /// Appends a record; returns its sequence number.
    pub(crate) fn push(
        &self,
        subject: &str,
        headers: &Headers,
        payload: &[u8],
        kind: RecordKind,
    ) -> u64 {
        let mut state = self.lock();
        self.push_locked(&mut state, subject, headers, payload, kind)
    }

    /// [`Shared::push`] with the state lock already held.
    pub(crate) fn push_locked(
        &self,
        state: &mut State,
        subject: &str,
        headers: &Headers,
        payload: &[u8],
        kind: RecordKind,
    ) -> u64 {
        state.seq += 1;
        let record = Record {
            seq: state.seq,
            at: GoTime::now(),
            clock: state.clock.now(),
            subject: subject.to_owned(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_owned(), v.to_owned()))
                .collect(),
            payload: String::from_utf8_lossy(payload).into_owned(),
            kind,
        };
        state.records.push_back(record.clone());
        while state.records.len() > self.config.max_records.max(1) {
            state.records.pop_front();
            state.dropped_records += 1;
        }
        // No receiver is fine: nobody follows the records.
        let _ = self.records_tx.send(record);
        state.seq
    }

    /// Publishes on a service's inbound subject through JetStream (acked, deduplicated by
    /// `Nats-Msg-Id`).
    pub(crate) async fn publish_inbound(
        &self,
        subject: &str,
        headers: Headers,
        payload: Vec<u8>,
    ) -> Result<(), EmulatorError> {
        let map = transport::to_nats(&headers).map_err(|e| EmulatorError::Publish {
            subject: subject.to_owned(),
            reason: e.to_string(),
        })?;
        let ack = self
            .js
            .publish_with_headers(subject.to_owned(), map, payload.into())
            .await
            .map_err(|e| EmulatorError::Publish {
                subject: subject.to_owned(),
                reason: e.to_string(),
            })?;
        ack.await.map_err(|e| EmulatorError::Publish {
            subject: subject.to_owned(),
            reason: format!("{e} (is the service's inbound stream there? it is created when the service registers)"),
        })?;
        Ok(())
    }

    pub(crate) fn next_fence(state: &mut State) -> u64 {
        state.fences += 1;
        state.fences
    }

    pub(crate) fn remember_own(state: &mut State, msg_id: &str) {
        state.own_msg_ids.insert(msg_id.to_owned());
    }
}
