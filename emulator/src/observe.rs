//! Observation: everything on `triggers.v2.>` and on the services' inbound subjects goes through
//! the conformance checker and the recorder. Completion events (which drive run tracking) and DLQ
//! entries come from their JetStream streams (after `Nats-Msg-Id` dedup), and are judged there,
//! once: the plain subscription drops its copy of them.

use std::sync::Arc;

use async_nats::jetstream;
use futures::StreamExt;
use triggers_sdk::transport;
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::subject::{self, LockedSubject};
use triggers_sdk::wire::{CompletionEvent, DlqEntry, Envelope, GoTime, Headers, Heartbeat};

use crate::conformance::{self, Decoded, Origin, Violation, decoded_or, runs};
use crate::emulator::{Emulator, Shared};
use crate::recorder::{Body, RecordKind, Run, SharedHeaders, share_headers};
use crate::state::State;

impl Emulator {
    pub(crate) async fn observe_all(shared: Arc<Shared>, mut sub: async_nats::Subscriber) {
        while let Some(msg) = sub.next().await {
            if kept_by_stream(&msg.subject) {
                // Judged and recorded once, as its stream stored it (record_event, record_dlq).
                continue;
            }
            let headers = transport::from_nats(msg.headers.as_ref());
            shared.observe(&msg.subject, &headers, Body::from(msg.payload));
        }
    }

    pub(crate) async fn observe_inbound(shared: Arc<Shared>, mut sub: async_nats::Subscriber) {
        while let Some(msg) = sub.next().await {
            let headers = transport::from_nats(msg.headers.as_ref());
            shared.observe(&msg.subject, &headers, Body::from(msg.payload));
        }
    }
}

/// The wire tap's messages, in the order the server routed them, judged for order
/// ([`crate::order`]). Messages the tap lost (a reconnection, a full queue) are counted as
/// missed, and the runs open then are judged no further by those rules.
pub(crate) async fn tap(
    shared: Arc<Shared>,
    mut events: tokio::sync::mpsc::Receiver<natsbox::tap::TapEvent>,
) {
    let mut dropped = 0u64;
    while let Some(event) = events.recv().await {
        let now_dropped = shared.tap.as_ref().map_or(0, natsbox::tap::Tap::dropped);
        let lost = now_dropped > dropped;
        if lost {
            tracing::error!(
                "the wire tap fell behind and dropped {} message(s): counted as missed; runs open now are no longer judged for order",
                now_dropped - dropped
            );
            shared.config.slow_consumers.add(now_dropped - dropped);
            dropped = now_dropped;
        }
        let msg = match event {
            natsbox::tap::TapEvent::Message(msg) => msg,
            natsbox::tap::TapEvent::Reconnected => {
                tracing::warn!(
                    "the wire tap reconnected: what passed meanwhile was not seen; runs open now are no longer judged for order"
                );
                shared.lock().order.gap();
                continue;
            }
        };
        if msg.subject == shared.tap_mark_subject {
            if let Ok(mark) = std::str::from_utf8(&msg.payload)
                .unwrap_or_default()
                .parse::<u64>()
            {
                shared.tap_marks.send_modify(|m| *m = (*m).max(mark));
            }
            continue;
        }
        let headers: Headers = msg.headers.into_iter().collect();
        let inbound = {
            let mut state = shared.lock();
            if lost {
                state.order.gap();
            }
            state.registry.owner_of(&msg.subject).cloned()
        };
        let seen = crate::order::decode(
            &msg.subject,
            msg.reply.as_deref(),
            &headers,
            &msg.payload,
            inbound.as_deref(),
        );
        if matches!(seen, crate::order::Seen::Other) {
            continue;
        }
        let payload = Body::from(msg.payload);
        let mut state = shared.lock();
        // Only the emulator's own publish: the same envelope published again by someone else is
        // that client's delivery, whose reports are its own (see `Ownership`).
        let own = ownership(&headers, |id| state.own.is_own(id)) == Ownership::Published;
        let st = &mut *state;
        let runs = &st.runs;
        let found = st
            .order
            .seen(seen, &msg.subject, &headers, &payload, own, |id| {
                runs.get(id)
                    .filter(|r| !r.is_followed())
                    .and_then(Run::flow)
            });
        if !found.is_empty() {
            shared.add_violations(&mut state, found);
            drop(state);
            shared.notify();
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
    // Rounds in a row whose consumer, made, delivered nothing while the stream held more, and
    // since when.
    let mut stuck = 0u32;
    let mut stuck_since = tokio::time::Instant::now();
    loop {
        if stuck >= STUCK_ROUNDS && stuck_since.elapsed() >= STUCK_PATIENCE {
            // A stored message the client cannot read (a subject or header that is not UTF-8
            // fails async-nats' parser) would stop the follower there for good, and leak a
            // consumer each round: it is skipped, and counted as missed, since what it said is
            // not known.
            tracing::error!(
                stream = name,
                "message {next_seq} of stream {name} cannot be read (tried {stuck} times in {:?}): skipped, and counted as a message the emulator missed",
                stuck_since.elapsed()
            );
            shared.config.slow_consumers.add(1);
            next_seq += 1;
            stuck = 0;
        }
        // The stream is gone (a client deleted it through the JetStream API): said loudly, made
        // again, and followed from its start.
        if let Err(e) = shared.js.get_stream(name).await
            && is_not_found(&e)
        {
            next_seq = shared.stream_lost(name).await;
            stuck = 0;
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            continue;
        }
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
                let from = next_seq;
                loop {
                    // An ordered consumer can stall across a server restart without an error;
                    // when idle, check the stream has nothing newer, else start over.
                    let next = match tokio::time::timeout(IDLE_CHECK, messages.next()).await {
                        Ok(Some(next)) => next,
                        Ok(None) => break,
                        Err(_) => {
                            if behind(&shared, name, next_seq).await || gone(&shared, name).await {
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
                                // Messages the stream let go before they were read (its
                                // max_bytes or max_age, while the follower was behind): what
                                // they said is not known, so they count as missed.
                                if info.stream_sequence > next_seq {
                                    let gap = info.stream_sequence - next_seq;
                                    tracing::error!(
                                        stream = name,
                                        "messages {next_seq} to {} of stream {name} were gone before the emulator read them (the stream's max_bytes or max_age): counted as {gap} message(s) the emulator missed",
                                        info.stream_sequence - 1
                                    );
                                    shared.config.slow_consumers.add(gap);
                                }
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
                if next_seq == from && behind(&shared, name, next_seq).await {
                    if stuck == 0 {
                        stuck_since = tokio::time::Instant::now();
                    }
                    stuck += 1;
                } else {
                    stuck = 0;
                }
            }
            Err(e) => tracing::debug!(stream = name, "cannot follow yet: {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// Rounds a follower makes at one message, each with a new consumer that delivers nothing while
/// the stream holds it, and for how long at least, before it skips the message as unreadable
/// (a cluster electing a leader stalls a follower too, for seconds, and must not lose events).
const STUCK_ROUNDS: u32 = 5;
const STUCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(15);

/// How long a follower waits for a message before checking it is not stalled.
const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether `e` says the stream does not exist.
fn is_not_found(e: &jetstream::context::GetStreamError) -> bool {
    matches!(
        e.kind(),
        jetstream::context::GetStreamErrorKind::JetStream(j)
            if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}

/// Whether the stream no longer exists.
async fn gone(shared: &Shared, name: &str) -> bool {
    matches!(shared.js.get_stream(name).await, Err(e) if is_not_found(&e))
}

impl Shared {
    /// One of the emulator's streams is gone: a violation says so (and `state` counts it), and
    /// it is made again. Returns the sequence to follow it from.
    pub(crate) async fn stream_lost(&self, name: &'static str) -> u64 {
        let subjects = if name == crate::DLQ_STREAM {
            subject::DLQ_ALL
        } else {
            subject::FLOW_EVENTS_ALL
        };
        tracing::error!(
            stream = name,
            "the emulator's stream {name} is gone (deleted through the JetStream API?): what was \
             published on {subjects} meanwhile is lost; making it again"
        );
        {
            let mut state = self.lock();
            state.counts.streams_lost += 1;
            let v = Violation::new(
                "emulator_stream_lost",
                subjects,
                format!(
                    "the emulator's stream {name} (over {subjects}) disappeared: a client deleted it \
                     through the JetStream API, or the server lost it. What was published on \
                     {subjects} meanwhile is lost, so runs waiting on it may never settle; the \
                     emulator made it again and follows it from there"
                ),
                share_headers(&Headers::default()),
                Body::default(),
            );
            self.add_violations(&mut state, vec![v]);
        }
        self.notify();
        match crate::emulator::stream_end(&self.js, name, subjects, &self.config).await {
            Ok(next) => next,
            Err(e) => {
                tracing::error!(stream = name, "cannot make the stream {name} again: {e}");
                1
            }
        }
    }
}

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

/// A DLQ entry as JetStream stored it (after `Nats-Msg-Id` dedup): judged, recorded, and applied
/// to its run: a delivery dead-lettered before its nodes ran fails them.
pub(crate) fn record_dlq(shared: &Shared, msg: &jetstream::Message) {
    let headers = transport::from_nats(msg.headers.as_ref());
    let msg_id = headers
        .get(names::NATS_MSG_ID)
        .unwrap_or_default()
        .to_owned();
    let body = Body::from(msg.payload.clone());
    let Judged {
        violations,
        headers: judged_headers,
        decoded,
        ..
    } = shared.judge(&msg.subject, &headers, &body);
    let entry = decoded_or(decoded, Decoded::dlq, || DlqEntry::from_json(&msg.payload)).ok();
    let service = match LockedSubject::parse(&msg.subject) {
        Some(LockedSubject::Dlq { service, .. }) => service,
        _ => String::new(),
    };
    let mut state = shared.lock();
    shared.add_violations(&mut state, violations);
    let seq = shared.push_shared(
        &mut state,
        &msg.subject,
        judged_headers,
        body,
        RecordKind::Dlq {
            entry: entry.clone(),
            msg_id,
        },
    );
    let Some(entry) = entry else { return };
    let run_id = entry.envelope.flow_run_id.clone();
    if let Some(run) = state.runs.get_mut(&run_id) {
        run.dead_letter(
            &service,
            &entry.kind,
            &entry.envelope.source_node_id,
            seq,
            GoTime::now(),
        );
        shared.refresh_run(&mut state, &run_id);
    }
}

/// Whether one of the emulator's streams captures subject `name` (`triggers.v2.flow.events.>`,
/// `triggers.v2.dlq.>`): such a message is judged and recorded as the stream stored it
/// ([`record_event`], [`record_dlq`]), not from the plain subscription that also receives it.
pub(crate) fn kept_by_stream(name: &str) -> bool {
    [subject::FLOW_EVENTS_ALL, subject::DLQ_ALL]
        .iter()
        .any(|all| {
            name.strip_prefix(all.trim_end_matches('>'))
                .is_some_and(|rest| !rest.is_empty())
        })
}

/// A completion event as JetStream stored it (after `Nats-Msg-Id` dedup): judged, recorded and
/// applied to its run. This is the one place an event is looked at: the plain subscription
/// gets the same message, and drops it ([`kept_by_stream`]).
pub(crate) fn record_event(shared: &Shared, msg: &jetstream::Message) {
    let headers = transport::from_nats(msg.headers.as_ref());
    let body = Body::from(msg.payload.clone());
    let Judged {
        violations,
        headers,
        decoded,
        ..
    } = shared.judge(&msg.subject, &headers, &body);
    // As the checker decoded it, else decoded here; before the lock is taken either way: every
    // other message waits while it is held.
    let event = decoded_or(decoded, Decoded::event, || {
        CompletionEvent::from_json(&msg.payload)
    });
    let mut state = shared.lock();
    shared.add_violations(&mut state, violations);
    if let Ok(event) = event {
        let seq = shared.push_shared(
            &mut state,
            &msg.subject,
            headers.clone(),
            body.clone(),
            RecordKind::Completion {
                event: event.clone(),
            },
        );
        shared.track(&mut state, &event, seq, &msg.subject, headers, body);
    }
}

/// Whether a message is the emulator's, by its ids: the one rule the checker (`judge`) and the
/// wire tap (`tap`) share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ownership {
    /// The emulator published it: its `Nats-Msg-Id` (or, without one, its idempotency key) is
    /// one the emulator wrote.
    Published,
    /// The emulator's envelope published again by someone else: its idempotency key is the
    /// emulator's, its `Nats-Msg-Id` is not (a replay, a redelivery forced by hand, a replica's
    /// store of it). Its bytes are the emulator's, so the checker does not judge them; the
    /// publish is that client's, so the tap counts what follows as that delivery's, never as
    /// late reports of the delivery the emulator made.
    Republished,
    /// Not the emulator's.
    Foreign,
}

/// Whose `headers` are; `is_own` says whether an id is one the emulator wrote.
fn ownership(headers: &Headers, is_own: impl Fn(&str) -> bool) -> Ownership {
    let msg_id = headers.get(names::NATS_MSG_ID);
    let key = headers.get(names::IDEMPOTENCY_KEY);
    match (msg_id, key) {
        (Some(id), _) if is_own(id) => Ownership::Published,
        (None, Some(key)) if is_own(key) => Ownership::Published,
        (Some(_), Some(key)) if is_own(key) => Ownership::Republished,
        _ => Ownership::Foreign,
    }
}

/// A message as the checker judged it.
struct Judged {
    /// The registry it was judged on.
    registry: Arc<crate::state::RegistryView>,
    /// Whose message it is.
    origin: Origin,
    violations: Vec<Violation>,
    /// Its headers as records keep them (shared with its violations).
    headers: SharedHeaders,
    /// What the checker decoded (nothing for the emulator's own messages, which are not judged,
    /// nor for one that does not decode).
    decoded: Option<Decoded>,
}

/// What a message observed on `triggers.v2.>` or an inbound subject adds to the state, decoded
/// before the lock is taken.
enum Seen<'a> {
    /// A heartbeat, and what it breaks.
    Heartbeat(Heartbeat, Vec<Violation>),
    /// A message on `service`'s inbound subject: its envelope (if it has one) and `Nats-Msg-Id`.
    Hop {
        service: &'a str,
        envelope: Option<Envelope>,
        key: &'a str,
    },
    /// Judged only.
    Nothing,
}

impl Shared {
    /// Everything seen on `triggers.v2.>` and on inbound subjects: judged (outside the lock, on a
    /// snapshot of the registry), then recorded.
    pub(crate) fn observe(self: &Arc<Self>, subject: &str, headers: &Headers, payload: Body) {
        let Judged {
            registry,
            origin,
            violations,
            headers: shared_headers,
            decoded,
        } = self.judge(subject, headers, &payload);
        // Decoded and checked before the lock is taken: every other message waits while it is
        // held.
        let seen = match LockedSubject::parse(subject) {
            Some(LockedSubject::Heartbeat) => match decoded_or(decoded, Decoded::heartbeat, || {
                Heartbeat::from_json(&payload)
            }) {
                Ok(hb) => {
                    let found = violations_of(
                        runs::heartbeat(&registry.manifests, &hb),
                        subject,
                        &shared_headers,
                        &payload,
                    );
                    Seen::Heartbeat(hb, found)
                }
                Err(_) => Seen::Nothing,
            },
            // Completion events and DLQ entries are judged and recorded from their streams
            // (record_event, record_dlq), so a server restart loses none: they do not come this
            // way. The rest of the table is judged only.
            Some(_) => Seen::Nothing,
            None => match registry.inbound.get(subject) {
                Some(service) => Seen::Hop {
                    service,
                    envelope: decoded_or(decoded, Decoded::envelope, || {
                        Envelope::from_headers(headers)
                    })
                    .ok(),
                    key: headers.get(names::NATS_MSG_ID).unwrap_or_default(),
                },
                None => Seen::Nothing,
            },
        };
        let mut state = self.lock();
        self.add_violations(&mut state, violations);
        match seen {
            Seen::Heartbeat(hb, found) => {
                self.add_violations(&mut state, found);
                self.heartbeat_seen(&mut state, &hb.service);
                state.registry.heartbeat(&hb, GoTime::now());
                self.push_shared(
                    &mut state,
                    subject,
                    shared_headers,
                    payload,
                    RecordKind::Heartbeat { heartbeat: hb },
                );
            }
            Seen::Hop {
                service,
                envelope,
                key,
            } => {
                let from_emulator = origin == Origin::Emulator;
                let (run_id, source) = envelope
                    .as_ref()
                    .map(|e| (e.flow_run_id.clone(), e.source_node_id.clone()))
                    .unwrap_or_default();
                // The emulator's own delivery of a run it took back (its trigger's publish
                // failed, yet the message reached the subject): the run never was, nor its hop.
                if from_emulator && state.own.was_taken_back(&run_id) {
                    drop(state);
                    self.notify();
                    return;
                }
                self.push_shared(
                    &mut state,
                    subject,
                    shared_headers.clone(),
                    payload.clone(),
                    RecordKind::Hop {
                        run_id: run_id.clone(),
                        source_node_id: source.clone(),
                        from_emulator,
                    },
                );
                if !from_emulator && let Some(env) = &envelope {
                    let mut findings = runs::hop(state.registry.flows(), env);
                    if let Some(run) = state.runs.get(&env.flow_run_id) {
                        findings.extend(runs::hop_in_run(run, env));
                    }
                    let found = violations_of(findings, subject, &shared_headers, &payload);
                    self.add_violations(&mut state, found);
                }
                if !from_emulator && !key.is_empty() {
                    let reused = state
                        .runs
                        .get_mut(&run_id)
                        .and_then(|run| run.hop(&source, service, key));
                    if let Some(found) = reused {
                        let v = key_reused(&run_id, &found, subject, shared_headers, payload);
                        self.add_violations(&mut state, vec![v]);
                    }
                }
            }
            Seen::Nothing => {}
        }
        drop(state);
        self.notify();
    }

    /// One message judged (outside the lock, on a snapshot of the registry).
    fn judge(&self, subject: &str, headers: &Headers, payload: &Body) -> Judged {
        let (registry, origin) = {
            let mut state = self.lock();
            // The emulator's bytes, whoever published them, are not judged (see `Ownership`).
            let own = ownership(headers, |id| state.own.is_own(id)) != Ownership::Foreign
                || (subject.starts_with("triggers.v2.flow.broadcast.")
                    && headers.is_empty()
                    && state.own.broadcast_seen(payload.as_bytes()));
            let origin = if own { Origin::Emulator } else { Origin::Peer };
            (state.registry.view(), origin)
        };
        let ctx = conformance::Context {
            manifests: &registry.manifests,
            inbound: &registry.inbound,
        };
        let conformance::Checked {
            violations,
            decoded,
        } = conformance::check_body(&ctx, subject, headers, payload, origin);
        let headers = violations
            .first()
            .map(|v| v.headers.clone())
            .unwrap_or_else(|| share_headers(headers));
        Judged {
            registry,
            origin,
            violations,
            headers,
            decoded,
        }
    }

    /// Keeps violations (and their records) within the bounds; the rest are counted.
    pub(crate) fn add_violations(&self, state: &mut State, violations: Vec<Violation>) {
        let mut kept = Vec::new();
        state.violations.add(violations, |v| {
            kept.push((
                v.subject.clone(),
                v.headers.clone(),
                v.payload.clone(),
                RecordKind::Violation {
                    severity: v.severity.to_string(),
                    rule: v.rule.to_owned(),
                    message: v.message.clone(),
                },
            ));
        });
        for (subject, headers, payload, kind) in kept {
            self.push_shared(state, &subject, headers, payload, kind);
        }
    }

    /// Run tracking from a completion event, and the run-level rules it is judged by.
    fn track(
        &self,
        state: &mut State,
        event: &CompletionEvent,
        seq: u64,
        subject: &str,
        headers: SharedHeaders,
        body: Body,
    ) {
        let now = state.clock.now();
        if !state.runs.contains(&event.flow_run_id) {
            // A run the emulator did not start (another orchestrator, or a test publishing
            // events by hand): follow it from here, within the bound on followed runs (events
            // for ever new run ids would otherwise hold runs without end; and apart from the
            // runs the emulator starts, so they cannot refuse its triggers). Beyond it the event
            // is recorded but its run not followed, counted.
            let flow = state
                .registry
                .flow(&event.flow_id)
                .filter(|f| f.version == event.flow_version)
                .cloned();
            let run = Run::follow(event, flow);
            if !state.runs.follow(run, self.config.max_followed_runs) {
                return;
            }
        }
        let registry = state.registry.view();
        let deployed = state.registry.flow(&event.flow_id).cloned();
        let Some(run) = state.runs.get_mut(&event.flow_run_id) else {
            return;
        };
        // A cancelled run's late events are recorded, not judged: what it owed was dropped, so
        // nothing the services still do for it can be held against them.
        let cancelled = run.is_cancelled();
        let judged = !run.is_followed() && !cancelled;
        let mut findings = if cancelled {
            Vec::new()
        } else if run.is_followed() {
            runs::followed_completion(run, event, deployed.as_deref())
        } else {
            runs::completion(run, event)
        };
        let unexpected_before = run.unexpected.len();
        let max_attempts = runs::max_attempts(run, event, &registry.manifests);
        // What one execution may report; all of them where the policy is not known.
        let allowance = crate::timeline::retry_allowance(max_attempts);
        let to_arm = run.apply(event, seq, allowance);
        let unexpected = run.unexpected.len() > unexpected_before;
        if judged {
            findings.extend(runs::after_completion(run, event, max_attempts, unexpected));
        }
        let reused = run.key_reuse();
        for timer in to_arm {
            crate::timers::arm(self, state, &event.flow_run_id, &timer, now);
        }
        if unexpected {
            findings.push((
                "completion_unexpected",
                format!(
                    "run {} reports node {:?} {} though nothing reached it (again): a duplicate execution, or a node the flow did not route to",
                    event.flow_run_id, event.node_id, event.status
                ),
            ));
        }
        let mut violations = violations_of(findings, subject, &headers, &body);
        if let Some(found) = reused {
            violations.push(key_reused(
                &event.flow_run_id,
                &found,
                subject,
                headers,
                body,
            ));
        }
        self.add_violations(state, violations);
        self.refresh_run(state, &event.flow_run_id);
    }
}

fn key_reused(
    run_id: &str,
    found: &crate::run::KeyReuse,
    subject: &str,
    headers: crate::recorder::SharedHeaders,
    payload: Body,
) -> Violation {
    Violation::new(
        "idempotency_key_reused",
        subject,
        format!(
            "run {run_id}: {found}; JetStream's dedup window dropped the rest. A key must derive from the inbound delivery's key plus what makes the hop distinct (docs/wire.md)"
        ),
        headers,
        payload,
    )
}

/// Run-level findings about one message, as violations sharing its headers and payload.
fn violations_of(
    findings: Vec<runs::Finding>,
    subject: &str,
    headers: &SharedHeaders,
    payload: &Body,
) -> Vec<Violation> {
    findings
        .into_iter()
        .map(|(rule, message)| {
            Violation::new(rule, subject, message, headers.clone(), payload.clone())
        })
        .collect()
}

#[cfg(test)]
mod ownership_tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        let mut h = Headers::new();
        for (name, value) in pairs {
            h.insert(*name, *value);
        }
        h
    }

    #[test]
    fn the_msg_id_decides_and_the_key_stands_in_only_without_one() {
        let own = |id: &str| id.starts_with("emu-");
        let cases = [
            (
                vec![
                    (names::NATS_MSG_ID, "emu-1"),
                    (names::IDEMPOTENCY_KEY, "emu-1"),
                ],
                Ownership::Published,
            ),
            (
                vec![
                    (names::NATS_MSG_ID, "emu-1"),
                    (names::IDEMPOTENCY_KEY, "svc-1"),
                ],
                Ownership::Published,
            ),
            (
                vec![(names::IDEMPOTENCY_KEY, "emu-1")],
                Ownership::Published,
            ),
            (vec![(names::NATS_MSG_ID, "emu-1")], Ownership::Published),
            (
                vec![
                    (names::NATS_MSG_ID, "again"),
                    (names::IDEMPOTENCY_KEY, "emu-1"),
                ],
                Ownership::Republished,
            ),
            (
                vec![
                    (names::NATS_MSG_ID, "svc-1"),
                    (names::IDEMPOTENCY_KEY, "svc-1"),
                ],
                Ownership::Foreign,
            ),
            (vec![(names::IDEMPOTENCY_KEY, "svc-1")], Ownership::Foreign),
            (vec![], Ownership::Foreign),
        ];
        for (pairs, expected) in cases {
            assert_eq!(ownership(&headers(&pairs), own), expected, "{pairs:?}");
        }
    }
}
