//! Observation: everything on `triggers.v2.>` and on the services' inbound subjects goes through
//! the conformance checker and the recorder; completion events drive run tracking; DLQ entries
//! come from the JetStream stream (after `Nats-Msg-Id` dedup).

use std::collections::BTreeSet;
use std::sync::Arc;

use async_nats::jetstream;
use futures::StreamExt;
use triggers_sdk::transport;
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::subject::LockedSubject;
use triggers_sdk::wire::{CompletionEvent, DlqEntry, Envelope, GoTime, Headers, Heartbeat};

use crate::conformance::{self, Origin};
use crate::emulator::{Emulator, Shared};
use crate::recorder::{RecordKind, Run, RunStatus};

impl Emulator {
    pub(crate) async fn observe_all(shared: Arc<Shared>, mut sub: async_nats::Subscriber) {
        while let Some(msg) = sub.next().await {
            let headers = transport::from_nats(msg.headers.as_ref());
            shared.observe(&msg.subject, &headers, &msg.payload);
        }
    }

    pub(crate) async fn observe_inbound(shared: Arc<Shared>, mut sub: async_nats::Subscriber) {
        while let Some(msg) = sub.next().await {
            let headers = transport::from_nats(msg.headers.as_ref());
            shared.observe(&msg.subject, &headers, &msg.payload);
        }
    }
}

/// Follows a stream from `next_seq` on, through server restarts: whenever the ordered consumer
/// fails or ends, it is made again from the sequence after the last message handled.
pub(crate) async fn follow(
    shared: Arc<Shared>,
    name: &'static str,
    mut next_seq: u64,
    handle: fn(&Shared, &jetstream::Message),
) {
    loop {
        let messages = async {
            let stream = shared
                .js
                .get_stream(name)
                .await
                .map_err(|e| e.to_string())?;
            stream
                .create_consumer(jetstream::consumer::pull::OrderedConfig {
                    deliver_policy: jetstream::consumer::DeliverPolicy::ByStartSequence {
                        start_sequence: next_seq.max(1),
                    },
                    ..Default::default()
                })
                .await
                .map_err(|e| e.to_string())?
                .messages()
                .await
                .map_err(|e| e.to_string())
        }
        .await;
        match messages {
            Ok(mut messages) => {
                loop {
                    // An ordered consumer can stall across a server restart without an error;
                    // when idle, check the stream has nothing newer, else start over.
                    let next = match tokio::time::timeout(IDLE_CHECK, messages.next()).await {
                        Ok(Some(next)) => next,
                        Ok(None) => break,
                        Err(_) => {
                            if behind(&shared, name, next_seq).await {
                                tracing::debug!(
                                    stream = name,
                                    "the follower stalled; starting over from {next_seq}"
                                );
                                break;
                            }
                            continue;
                        }
                    };
                    match next {
                        Ok(msg) => {
                            if let Ok(info) = msg.info() {
                                next_seq = info.stream_sequence + 1;
                            }
                            handle(&shared, &msg);
                            shared.notify();
                        }
                        Err(e) => {
                            tracing::debug!(stream = name, "following interrupted: {e}");
                            break;
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(stream = name, "cannot follow yet: {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// How long a follower waits for a message before checking it is not stalled.
const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether the stream holds a message at or after `next_seq` that the follower has not seen.
async fn behind(shared: &Shared, name: &str, next_seq: u64) -> bool {
    match shared.js.get_stream(name).await {
        Ok(mut stream) => stream
            .info()
            .await
            .map(|i| i.state.last_sequence >= next_seq)
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// A DLQ entry as JetStream stored it (after `Nats-Msg-Id` dedup).
pub(crate) fn record_dlq(shared: &Shared, msg: &jetstream::Message) {
    let headers = transport::from_nats(msg.headers.as_ref());
    let msg_id = headers
        .get(names::NATS_MSG_ID)
        .unwrap_or_default()
        .to_owned();
    let entry = DlqEntry::from_json(&msg.payload).ok();
    let run = entry.as_ref().map(|e| e.envelope.flow_run_id.clone());
    let seq = shared.push(
        &msg.subject,
        &headers,
        &msg.payload,
        RecordKind::Dlq { entry, msg_id },
    );
    if let Some(run) = run {
        let mut state = shared.lock();
        if let Some(r) = state.runs.get_mut(&run) {
            r.dlq.push(seq);
        }
    }
}

/// A completion event as JetStream stored it: recorded and applied to its run.
pub(crate) fn record_event(shared: &Shared, msg: &jetstream::Message) {
    if let Ok(event) = CompletionEvent::from_json(&msg.payload) {
        let headers = transport::from_nats(msg.headers.as_ref());
        let seq = shared.push(
            &msg.subject,
            &headers,
            &msg.payload,
            RecordKind::Completion {
                event: event.clone(),
            },
        );
        shared.track(&event, seq);
    }
}

impl Shared {
    fn check(&self, subject: &str, headers: &Headers, payload: &[u8]) {
        let violations = {
            let mut state = self.lock();
            let manifests = state.manifests();
            let origin = if headers
                .get(names::NATS_MSG_ID)
                .is_some_and(|id| state.own_msg_ids.contains(id))
                || (subject.starts_with("triggers.v2.flow.broadcast.")
                    && headers.is_empty()
                    && state.own_broadcasts.remove(payload))
            {
                Origin::Emulator
            } else {
                Origin::Peer
            };
            let ctx = conformance::Context {
                manifests: &manifests,
                inbound: &state.inbound,
            };
            conformance::check(&ctx, subject, headers, payload, origin)
        };
        for v in violations {
            let kind = RecordKind::Violation {
                severity: v.severity.to_string(),
                rule: v.rule.to_owned(),
                message: v.message.clone(),
            };
            self.lock().violations.push(v);
            self.push(subject, headers, payload, kind);
        }
    }

    /// Everything seen on `triggers.v2.>` and on inbound subjects.
    pub(crate) fn observe(&self, subject: &str, headers: &Headers, payload: &[u8]) {
        self.check(subject, headers, payload);
        match LockedSubject::parse(subject) {
            Some(LockedSubject::Heartbeat) => {
                if let Ok(hb) = Heartbeat::from_json(payload) {
                    {
                        let mut state = self.lock();
                        if let Some(s) = state.services.get_mut(&hb.service) {
                            s.last_seen = Some(GoTime::now());
                            s.heartbeats += 1;
                            s.replicas.insert(hb.started_at.to_string(), hb.now);
                            s.last_heartbeat = Some(hb.clone());
                        }
                    }
                    self.push(
                        subject,
                        headers,
                        payload,
                        RecordKind::Heartbeat { heartbeat: hb },
                    );
                }
            }
            // Completion events are recorded from the events stream (record_events), so a server
            // restart loses none; here they are only checked.
            Some(_) => {}
            None => {
                let (inbound, from_emulator) = {
                    let state = self.lock();
                    let own = headers
                        .get(names::NATS_MSG_ID)
                        .is_some_and(|id| state.own_msg_ids.contains(id));
                    (state.inbound.contains_key(subject), own)
                };
                if inbound {
                    let env = Envelope::from_headers(headers).ok();
                    self.push(
                        subject,
                        headers,
                        payload,
                        RecordKind::Hop {
                            run_id: env
                                .as_ref()
                                .map(|e| e.flow_run_id.clone())
                                .unwrap_or_default(),
                            source_node_id: env.map(|e| e.source_node_id).unwrap_or_default(),
                            from_emulator,
                        },
                    );
                }
            }
        }
        self.notify();
    }

    /// Run tracking from a completion event.
    fn track(&self, event: &CompletionEvent, seq: u64) {
        let mut state = self.lock();
        let now = state.clock.now();
        let flow = state.flows.get(&event.flow_id).cloned();
        if !state.runs.contains_key(&event.flow_run_id) {
            // A run the emulator did not start (another orchestrator, or a test publishing
            // events by hand): follow it from here.
            let run = Run {
                id: event.flow_run_id.clone(),
                flow_id: event.flow_id.clone(),
                flow_version: event.flow_version,
                trace_id: event.trace_id.clone(),
                status: RunStatus::Running,
                started_at: event.started_at,
                settled_at: None,
                pending: BTreeSet::new(),
                completed: BTreeSet::new(),
                failed: BTreeSet::new(),
                timers: Vec::new(),
                timeline: Vec::new(),
                dlq: Vec::new(),
                snapshot: Vec::new(),
            };
            state.runs.insert(event.flow_run_id.clone(), run);
            state.run_order.push(event.flow_run_id.clone());
        }
        let to_arm = state
            .runs
            .get_mut(&event.flow_run_id)
            .map(|run| run.apply(flow.as_ref(), event, seq))
            .unwrap_or_default();
        if let Some(flow) = &flow {
            for timer in to_arm {
                crate::timers::arm(self, &mut state, flow, &event.flow_run_id, &timer, now);
            }
        }
        let settled = state.runs.get_mut(&event.flow_run_id).and_then(|run| {
            let was = run.status.is_settled();
            run.refresh_status(GoTime::now());
            (!was && run.status.is_settled()).then(|| (run.flow_id.clone(), run.status))
        });
        if let Some((flow_id, status)) = settled {
            self.push_locked(
                &mut state,
                "",
                &Headers::new(),
                &[],
                RecordKind::RunSettled {
                    run_id: event.flow_run_id.clone(),
                    flow_id,
                    status,
                },
            );
        }
    }
}
