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

    pub(crate) async fn record_dlq(
        shared: Arc<Shared>,
        mut messages: jetstream::consumer::pull::Ordered,
    ) {
        while let Some(next) = messages.next().await {
            let Ok(msg) = next else {
                // The ordered consumer recreates itself after a server restart.
                continue;
            };
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
            shared.notify();
        }
    }

    pub(crate) async fn observe_inbound(shared: Arc<Shared>, mut sub: async_nats::Subscriber) {
        while let Some(msg) = sub.next().await {
            let headers = transport::from_nats(msg.headers.as_ref());
            shared.observe(&msg.subject, &headers, &msg.payload);
        }
    }
}

impl Shared {
    fn check(&self, subject: &str, headers: &Headers, payload: &[u8]) {
        let violations = {
            let state = self.lock();
            let manifests = state.manifests();
            let origin = if headers
                .get(names::NATS_MSG_ID)
                .is_some_and(|id| state.own_msg_ids.contains(id))
                || (subject.starts_with("triggers.v2.flow.broadcast.") && headers.is_empty())
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
            Some(LockedSubject::FlowEvents { .. }) => {
                if let Ok(event) = CompletionEvent::from_json(payload) {
                    let seq = self.push(
                        subject,
                        headers,
                        payload,
                        RecordKind::Completion {
                            event: event.clone(),
                        },
                    );
                    self.track(&event, seq);
                }
            }
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
            run.refresh_status(now);
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
