//! What every part of the emulator shares ([`Shared`]): the connection, the configuration, the
//! state behind its one lock, the record stream and the wakers; and the operations on them that
//! several parts use: recording, settling a run, broadcasting, publishing a delivery.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_nats::jetstream;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use triggers_sdk::flow::Flow;
use triggers_sdk::transport;
use triggers_sdk::wire::header::{Traceparent, names};
use triggers_sdk::wire::{Envelope, FlowEnvelope, GoTime, Headers};

use crate::config::EmulatorConfig;
use crate::conformance::Violation;
use crate::error::EmulatorError;
use crate::recorder::{Body, Record, RecordKind, share_headers};
use crate::state::State;

/// How long a publish to a replicated stream is retried while the stream elects a leader.
const CLUSTER_PUBLISH_PATIENCE: Duration = Duration::from_secs(30);

pub(crate) struct Shared {
    pub(crate) client: async_nats::Client,
    pub(crate) js: jetstream::Context,
    pub(crate) config: EmulatorConfig,
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    /// Wakes for the `wait_*` calls, by what they wait on.
    pub(crate) topics: crate::topics::Topics,
    records_tx: broadcast::Sender<Record>,
    pub(crate) tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The wire tap, when on.
    pub(crate) tap: Option<natsbox::tap::Tap>,
    /// The subject of the marks [`Emulator::sync_wire_tap`] sends through the tap, the last
    /// mark sent and the last the tap read.
    pub(crate) tap_mark_subject: String,
    tap_mark_sent: std::sync::atomic::AtomicU64,
    pub(crate) tap_marks: watch::Sender<u64>,
    /// Services whose consumers are to be read ([`crate::consumers`]).
    pub(crate) consumer_checks: tokio::sync::mpsc::Sender<(String, Vec<String>)>,
}

pub(crate) fn new_envelope(
    flow: &Flow,
    run_id: &str,
    source_node_id: &str,
    trace_id: &str,
    idempotency_key: String,
    now: GoTime,
) -> Envelope {
    let span_id = transport::random_hex(8);
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
    pub(crate) fn new(
        client: async_nats::Client,
        config: EmulatorConfig,
        tap: Option<natsbox::tap::Tap>,
        tap_mark_subject: String,
        consumer_checks: tokio::sync::mpsc::Sender<(String, Vec<String>)>,
    ) -> Self {
        Shared {
            js: jetstream::new(client.clone()),
            client,
            state: Mutex::new(State::new(&config)),
            config,
            changed: watch::channel(0).0,
            topics: crate::topics::Topics::default(),
            records_tx: broadcast::channel(4096).0,
            tasks: Mutex::new(Vec::new()),
            tap,
            tap_mark_subject,
            tap_mark_sent: std::sync::atomic::AtomicU64::new(0),
            tap_marks: watch::channel(0).0,
            consumer_checks,
        }
    }

    /// A receiver that sees every record from now on.
    pub(crate) fn subscribe_records(&self) -> broadcast::Receiver<Record> {
        self.records_tx.subscribe()
    }

    /// A receiver told of every change of the state.
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The number of the next mark sent through the wire tap.
    pub(crate) fn next_tap_mark(&self) -> u64 {
        self.tap_mark_sent
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1
    }

    /// Publishes a flow on a broadcast subject, known as the emulator's own (so that observing
    /// it is not taken for a forged broadcast), flushed, and recorded.
    pub(crate) async fn broadcast(
        &self,
        subject: String,
        envelope: &FlowEnvelope,
        bytes: Vec<u8>,
    ) -> Result<(), EmulatorError> {
        self.lock().own.broadcast_sent(bytes.clone());
        self.client
            .publish(subject.clone(), bytes.clone().into())
            .await
            .map_err(|e| EmulatorError::nats("broadcast the flow", e))?;
        self.client
            .flush()
            .await
            .map_err(|e| EmulatorError::nats("broadcast the flow", e))?;
        self.push(
            &subject,
            &Headers::new(),
            Body::from(bytes),
            RecordKind::Broadcast {
                flow_id: envelope.id.clone(),
                version: envelope.version,
            },
        );
        Ok(())
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock (a bug) must not take every later test call down with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells whoever follows the state that it changed: the emulator's own tasks (every
    /// change), and the waiters of what the records pushed since the last call were about.
    pub(crate) fn notify(&self) {
        self.changed.send_modify(|v| *v += 1);
        self.topics.wake();
    }

    /// Appends a record; returns its sequence number.
    pub(crate) fn push(
        &self,
        subject: &str,
        headers: &Headers,
        payload: Body,
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
        payload: Body,
        kind: RecordKind,
    ) -> u64 {
        self.push_shared(state, subject, share_headers(headers), payload, kind)
    }

    /// [`Shared::push_locked`] with headers already shared (several records of one message).
    pub(crate) fn push_shared(
        &self,
        state: &mut State,
        subject: &str,
        headers: crate::recorder::SharedHeaders,
        payload: Body,
        kind: RecordKind,
    ) -> u64 {
        let clock = state.clock.now();
        let record = state.records.append(subject, headers, payload, kind, clock);
        self.topics.touch(&record.kind);
        // Cloned for followers only (a clone shares the bytes, but copies the rest): nobody
        // follows the records in most runs.
        if self.records_tx.receiver_count() > 0 {
            let _ = self.records_tx.send(record.clone());
        }
        record.seq
    }

    /// Recomputes a run's status; records `run_settled` (and evicts beyond `max_runs`) when it
    /// has just settled.
    pub(crate) fn refresh_run(&self, state: &mut State, run_id: &str) {
        let settled = state.runs.get_mut(run_id).and_then(|run| {
            let was = run.status.is_settled();
            run.refresh_status(GoTime::now());
            (!was && run.status.is_settled()).then(|| (run.flow_id.clone(), run.status))
        });
        if let Some((flow_id, status)) = settled {
            self.push_locked(
                state,
                "",
                &Headers::new(),
                Body::default(),
                RecordKind::RunSettled {
                    run_id: run_id.to_owned(),
                    flow_id,
                    status,
                },
            );
            state.settled(run_id);
        }
    }

    /// Publishes on a service's inbound subject through JetStream (acked, deduplicated by
    /// `Nats-Msg-Id`).
    pub(crate) async fn publish_inbound(
        &self,
        subject: &str,
        headers: Headers,
        payload: Vec<u8>,
    ) -> Result<(), EmulatorError> {
        let payload_for_record = Body::from(payload.clone());
        let map = transport::to_nats(&headers).map_err(|e| EmulatorError::Publish {
            subject: subject.to_owned(),
            source: e.into(),
            hint: "",
        })?;
        // On a cluster (replicated streams) a publish can meet a stream between leaders: the ack
        // times out, or nobody answers, for the second or two an election takes. The same
        // message again is safe (`Nats-Msg-Id` dedup), so it is retried until the wait timeout.
        let clustered = self.config.stream_replicas > 1;
        let expected = self.expect_delivery(subject, &headers);
        // A leader's crash is noticed after a few missed heartbeats, and the client may have to
        // reconnect to another node first: elections have taken up to ~15 s on a busy machine.
        let deadline =
            tokio::time::Instant::now() + self.config.wait_timeout.max(CLUSTER_PUBLISH_PATIENCE);
        let mut attempt = 0u32;
        let ack = loop {
            attempt += 1;
            let outcome = async {
                let ack = self
                    .js
                    .publish_with_headers(subject.to_owned(), map.clone(), payload.clone().into())
                    .await?;
                ack.await
            }
            .await;
            match outcome {
                Ok(ack) => break ack,
                Err(e)
                    if clustered
                        && tokio::time::Instant::now() < deadline
                        && matches!(
                            e.kind(),
                            jetstream::context::PublishErrorKind::TimedOut
                                | jetstream::context::PublishErrorKind::StreamNotFound
                        ) =>
                {
                    tracing::debug!(%subject, attempt, %e, "publish to a replicated stream failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => {
                    let hint = match e.kind() {
                        jetstream::context::PublishErrorKind::StreamNotFound => {
                            " (is the service's inbound stream there? it is created when the \
                             service registers)"
                        }
                        // The stream holds that much not yet handled.
                        _ if transport::refused_as_full(&e) => {
                            " (the service's inbound stream is full of deliveries not handled yet: \
                             is the service running and consuming it? A handled delivery leaves \
                             the stream)"
                        }
                        _ => "",
                    };
                    return Err(EmulatorError::Publish {
                        subject: subject.to_owned(),
                        source: e.into(),
                        hint,
                    });
                }
            }
        };
        if !ack.duplicate
            && let Some(expected) = expected
        {
            self.stored(expected, &ack.stream, ack.sequence);
        }
        // A duplicate after a retry is the earlier attempt, stored before its ack was lost.
        if ack.duplicate && attempt == 1 {
            // Every delivery of the emulator's has a key of its own: one that JetStream drops as
            // a duplicate is a delivery lost, and the verdict must say so.
            self.own_delivery_deduplicated(subject, &headers, payload_for_record);
        }
        Ok(())
    }

    /// A delivery of the emulator's about to be published on `subject`: the wire tap expects
    /// it. Returns its run and index, for [`Shared::stored`].
    fn expect_delivery(&self, subject: &str, headers: &Headers) -> Option<(String, usize)> {
        self.tap.as_ref()?;
        let envelope = Envelope::from_headers(headers).ok()?;
        let mut state = self.lock();
        let service = state.registry.owner_of(subject).cloned()?;
        let st = &mut *state;
        let flow = st
            .runs
            .get(&envelope.flow_run_id)
            .filter(|r| !r.is_followed())
            .and_then(crate::recorder::Run::shared_flow)?;
        let index = st.order.expect(&flow, &service, subject, &envelope)?;
        Some((envelope.flow_run_id, index))
    }

    /// The expected delivery `(run, index)` was stored as `seq` of `stream`: its ack is judged.
    fn stored(&self, (run_id, index): (String, usize), stream: &str, seq: u64) {
        let mut state = self.lock();
        let found = state.order.stored(&run_id, index, stream, seq);
        if !found.is_empty() {
            self.add_violations(&mut state, found);
            drop(state);
            self.notify();
        }
    }

    fn own_delivery_deduplicated(&self, subject: &str, headers: &Headers, payload: Body) {
        let key = headers.get(names::NATS_MSG_ID).unwrap_or_default();
        let violation = Violation::new(
            "delivery_deduplicated",
            subject,
            format!(
                "JetStream dropped the emulator's delivery with Nats-Msg-Id {key:?} as a duplicate of an earlier one: a distinct delivery was lost (a bug of the emulator's keys; please report it)"
            ),
            share_headers(headers),
            payload,
        );
        let mut state = self.lock();
        self.add_violations(&mut state, vec![violation]);
    }
}
