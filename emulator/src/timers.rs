//! Durable Timers: armed when the node before them completes (or at the trigger, right after the
//! entry), fired when the emulator's clock reaches them. On elapse the run's immutable snapshot
//! (through the resume edge's mapping, if any) goes to each resume service-in with the
//! elapsed-context triplet; a timer that follows a timer is armed in turn.
//!
//! Every arming is its own instance (its own fence): a timer reached twice (a fan-in, two
//! occurrences of a timer before it) fires for each. A delivery that cannot be published stays
//! armed for the next advance, a bounded number of times, and is never marked fired.

use std::time::Duration;

use serde_json::Value;
use triggers_sdk::flow::{self, Edge, Flow, Node, NodeType};
use triggers_sdk::wire::durable_timer::{self, ElapsedContext, TimerContext};
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::{GoTime, Headers, idempotency, json};

use crate::clock::{ClockMode, plus_ms};
use crate::emulator::{Emulator, FiredTimer, Shared, new_envelope};
use crate::error::EmulatorError;
use crate::recorder::{ArmedTimer, Body, RecordKind, Run};
use crate::state::State;

/// Attempts to publish one timer delivery before the engine gives up on it and fails its node.
pub(crate) const MAX_DELIVERY_ATTEMPTS: u32 = 5;

/// Arms a new instance of `timer` for `run_id`, due at `now + delay`.
pub(crate) fn arm(shared: &Shared, state: &mut State, run_id: &str, timer: &str, now: GoTime) {
    let Some(flow) = state.runs.get(run_id).and_then(Run::shared_flow) else {
        return;
    };
    let Some(node) = flow.node(timer) else { return };
    // A delivery of a cancelled run that was already on its way arms nothing after it.
    if state.runs.get(run_id).is_some_and(Run::is_cancelled) {
        return;
    }
    let delay = flow::timer_delay_ms(node).unwrap_or(0);
    let fence = state.own.next_fence();
    let due = plus_ms(now, delay);
    let Some(run) = state.runs.get_mut(run_id) else {
        return;
    };
    run.arm_timer(ArmedTimer {
        node_id: timer.to_owned(),
        due,
        occurrence: 1,
        repeat: flow::timer_repeat(node),
        fence,
        edges: Vec::new(),
        attempts: 0,
    });
    let seq = shared.push_locked(
        state,
        "",
        &Headers::new(),
        Body::default(),
        RecordKind::TimerArmed {
            run_id: run_id.to_owned(),
            node_id: timer.to_owned(),
            due,
            occurrence: 1,
            fence,
        },
    );
    if let Some(run) = state.runs.get_mut(run_id) {
        run.engine_step(seq, timer, NodeType::Timer.as_str(), "armed", GoTime::now());
    }
}

/// One delivery to make after the state lock is released.
struct Delivery {
    subject: String,
    headers: Headers,
    payload: Vec<u8>,
    fired: FiredTimer,
    /// The armed instance this delivery is of, to arm again if it cannot be published.
    timer: ArmedTimer,
    edge: String,
    resume_node_id: String,
}

/// Moves the virtual clock to `target`, firing every timer due by then in order of due time.
/// Every due delivery is attempted; one that fails stays armed (and is reported in the error),
/// the others go out.
pub(crate) async fn advance_to(
    emulator: &Emulator,
    target: GoTime,
) -> Result<Vec<FiredTimer>, EmulatorError> {
    // Recorded first, so that a recording reads in the order things happened: the advance, then
    // the timers it fired and what they led to (a replay or a generated scenario advances, then
    // waits for those).
    let from = emulator.now();
    let to = if target.unix_nanos() > from.unix_nanos() {
        target
    } else {
        from
    };
    emulator.shared.push(
        "",
        &Headers::new(),
        Body::default(),
        RecordKind::ClockAdvanced {
            from: Some(from),
            to,
        },
    );
    let mut fired = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let mut attempted = 0;
    // A delivery that failed is due again at once: it is tried once per advance, not in a loop.
    let mut retried = std::collections::HashSet::new();
    loop {
        let next = {
            let mut state = emulator.lock();
            let earliest = earliest_due(&state, &retried)
                .filter(|due| due.unix_nanos() <= target.unix_nanos());
            match earliest {
                Some(due) => {
                    if due.unix_nanos() > state.clock.now().unix_nanos() {
                        state.clock.advance_to(due);
                    }
                    Some(take_due(&emulator.shared, &mut state, due, &retried))
                }
                None => {
                    state.clock.advance_to(target);
                    None
                }
            }
        };
        let Some(deliveries) = next else { break };
        for d in deliveries {
            attempted += 1;
            let result = emulator
                .shared
                .publish_inbound(&d.subject, d.headers.clone(), d.payload.clone())
                .await;
            let mut state = emulator.lock();
            match result {
                Ok(()) => {
                    delivered(&emulator.shared, &mut state, &d);
                    fired.push(d.fired);
                }
                Err(e) => {
                    retried.insert(d.timer.fence);
                    failures.push(e.to_string());
                    undelivered(&emulator.shared, &mut state, d, e.to_string());
                }
            }
        }
    }
    emulator.shared.notify();
    match failures.first() {
        None => Ok(fired),
        Some(first) => Err(EmulatorError::TimerDelivery {
            failed: failures.len(),
            attempted,
            first: first.clone(),
        }),
    }
}

/// The earliest due time of any armed timer (leaving out instances already retried in this
/// advance).
pub(crate) fn earliest_due(
    state: &State,
    retried: &std::collections::HashSet<u64>,
) -> Option<GoTime> {
    state
        .runs
        .values()
        .flat_map(|r| r.timers.iter())
        .filter(|t| !retried.contains(&t.fence))
        .map(|t| t.due)
        .min_by_key(GoTime::unix_nanos)
}

/// Takes every timer instance due by `due`: re-arms repeating ones, arms timers that follow,
/// reaches what each resume service-in leads to, and builds the deliveries.
fn take_due(
    shared: &Shared,
    state: &mut State,
    due: GoTime,
    retried: &std::collections::HashSet<u64>,
) -> Vec<Delivery> {
    let now = state.clock.now();
    let mut due_now: Vec<(String, ArmedTimer)> = Vec::new();
    for run in state.runs.values_mut() {
        let fire = run.take_due_timers(due, retried);
        due_now.extend(fire.into_iter().map(|t| (run.id.clone(), t)));
    }
    // Runs in a stable order, so deliveries of one advance go out in the same order each time.
    due_now.sort_by(|a, b| a.1.fence.cmp(&b.1.fence).then(a.0.cmp(&b.0)));
    let mut deliveries = Vec::new();
    for (run_id, timer) in due_now {
        let Some(flow) = state.runs.get(&run_id).and_then(Run::shared_flow) else {
            continue;
        };
        fire(shared, state, &flow, &run_id, &timer, now, &mut deliveries);
    }
    deliveries
}

/// Fires one occurrence of one armed timer: a delivery to each resume service-in (on a retry,
/// only the edges it is for), then the timers right after it armed and its next occurrence.
fn fire(
    shared: &Shared,
    state: &mut State,
    flow: &Flow,
    run_id: &str,
    timer: &ArmedTimer,
    now: GoTime,
    deliveries: &mut Vec<Delivery>,
) {
    let Some(run) = state.runs.get(run_id) else {
        return;
    };
    let occurrence = Occurrence {
        flow,
        run_id,
        trace_id: run.trace_id.clone(),
        snapshot_sha: durable_timer::payload_sha256(&run.snapshot),
        snapshot: run.snapshot.clone(),
        timer,
        now,
    };
    let retry = !timer.edges.is_empty();
    let mut chained = Vec::new();
    for (edge, resume) in flow.successors(&timer.node_id) {
        if retry && !timer.edges.contains(&edge.id) {
            continue;
        }
        if resume.node_type == NodeType::Timer {
            chained.push(resume.id.clone());
            continue;
        }
        let (delivery, msg_id) = occurrence.delivery(edge, resume);
        // What the resume service-in leads to is reached before the delivery goes out, so a
        // completion can never arrive before the arrival it settles; timers after it are armed
        // once the delivery is out.
        let reached = Run::service_successors(flow, &resume.id);
        if let Some(run) = state.runs.get_mut(run_id) {
            for next in &reached {
                run.reach(next);
            }
        }
        if reached.is_empty() {
            // Only timers after the resume service-in: nothing for the service to run.
            let d = Delivery {
                subject: String::new(),
                ..delivery
            };
            delivered(shared, state, &d);
            continue;
        }
        state.own.remember(&msg_id);
        deliveries.push(delivery);
    }
    finish_occurrence(shared, state, &occurrence, retry, chained);
}

/// What every delivery of one occurrence of a timer shares.
struct Occurrence<'a> {
    flow: &'a Flow,
    run_id: &'a str,
    trace_id: String,
    /// The run's Durable Timer snapshot, and its SHA-256 for the elapsed context.
    snapshot: Body,
    snapshot_sha: String,
    timer: &'a ArmedTimer,
    now: GoTime,
}

impl Occurrence<'_> {
    /// The delivery on `edge` to the service-in `resume`: the snapshot (through the edge's
    /// mapping), with an envelope and the elapsed-context triplet; and its `Nats-Msg-Id`.
    fn delivery(&self, edge: &Edge, resume: &Node) -> (Delivery, String) {
        let (flow, run_id, timer) = (self.flow, self.run_id, self.timer);
        let payload = resume_payload(edge, &self.snapshot);
        let key = idempotency::timer(
            run_id,
            &timer.node_id,
            timer.occurrence,
            timer.fence,
            &edge.id,
        );
        let envelope = new_envelope(flow, run_id, &resume.id, &self.trace_id, key, self.now);
        let msg_id = envelope.nats_msg_id().to_owned();
        let mut headers = envelope.to_headers();
        headers.insert(names::NATS_MSG_ID, msg_id.as_str());
        let context = TimerContext::Elapsed(ElapsedContext {
            v: durable_timer::CONTEXT_VERSION,
            kind: durable_timer::KIND_ELAPSED,
            flow_id: flow.id.clone(),
            flow_version: flow.version,
            root_execution_id: run_id.to_owned(),
            timer_node_id: timer.node_id.clone(),
            timer_ref: format!("{run_id}:{}:{}", timer.node_id, timer.fence),
            occurrence: i64::try_from(timer.occurrence).unwrap_or(i64::MAX),
            fence: i64::try_from(timer.fence).unwrap_or(i64::MAX),
            snapshot_sha256: self.snapshot_sha.clone(),
            resume_edge_id: edge.id.clone(),
            resume_run_id: run_id.to_owned(),
        });
        durable_timer::write_triplet(&mut headers, &context, &payload);
        let delivery = Delivery {
            subject: resume.inbound.clone(),
            headers,
            payload,
            fired: FiredTimer {
                run_id: run_id.to_owned(),
                node_id: timer.node_id.clone(),
                occurrence: timer.occurrence,
                due: timer.due,
            },
            timer: timer.clone(),
            edge: edge.id.clone(),
            resume_node_id: resume.id.clone(),
        };
        (delivery, msg_id)
    }
}

/// What a resume delivery carries: the snapshot, through the edge's mapping if it has one (a
/// mapping that fails delivers the snapshot as is).
fn resume_payload(edge: &Edge, snapshot: &Body) -> Vec<u8> {
    let Some(cfg) = &edge.mapping else {
        return snapshot.to_vec();
    };
    let input: Value = serde_json::from_slice(snapshot).unwrap_or(Value::Null);
    match flow::mapping(cfg, &input) {
        Ok(v) => json::to_vec(&json::GoAny(&v)).unwrap_or_default(),
        Err(e) => {
            tracing::warn!(
                "resume mapping of edge {} failed: {e}; delivering the snapshot as is",
                edge.id
            );
            snapshot.to_vec()
        }
    }
}

/// After an occurrence's deliveries are made: its `fired` step on the timeline, the timers
/// right after it armed, and (unless it was a retry of some edges) its next occurrence armed or
/// the timer done.
fn finish_occurrence(
    shared: &Shared,
    state: &mut State,
    occurrence: &Occurrence<'_>,
    retry: bool,
    chained: Vec<String>,
) {
    let (run_id, timer) = (occurrence.run_id, occurrence.timer);
    let seq = state.records.last_seq();
    if !retry && let Some(run) = state.runs.get_mut(run_id) {
        run.engine_step(
            seq,
            &timer.node_id,
            NodeType::Timer.as_str(),
            "fired",
            GoTime::now(),
        );
    }
    for next in chained {
        arm(shared, state, run_id, &next, occurrence.now);
    }
    let Some(run) = state.runs.get_mut(run_id) else {
        return;
    };
    if !retry {
        let delay = occurrence
            .flow
            .node(&timer.node_id)
            .and_then(flow::timer_delay_ms)
            .unwrap_or(0);
        run.occurrence_fired(timer, delay);
    }
    shared.refresh_run(state, run_id);
}

/// A delivery is out (or needed none): recorded as fired, and the timers after its resume
/// service-in armed.
fn delivered(shared: &Shared, state: &mut State, d: &Delivery) {
    let now = state.clock.now();
    shared.push_locked(
        state,
        &d.subject,
        &d.headers,
        Body::from(d.payload.clone()),
        RecordKind::TimerFired {
            run_id: d.fired.run_id.clone(),
            node_id: d.fired.node_id.clone(),
            occurrence: d.fired.occurrence,
            resume_node_id: d.resume_node_id.clone(),
        },
    );
    let to_arm = state
        .runs
        .get(&d.fired.run_id)
        .and_then(Run::shared_flow)
        .map(|flow| {
            flow.successors(&d.resume_node_id)
                .filter(|(_, n)| n.node_type == NodeType::Timer)
                .map(|(_, n)| n.id.clone())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    for timer in to_arm {
        arm(shared, state, &d.fired.run_id, &timer, now);
    }
    shared.refresh_run(state, &d.fired.run_id);
}

/// A delivery could not be published: what it reached is taken back, and the occurrence stays
/// armed for this edge, until it has failed [`MAX_DELIVERY_ATTEMPTS`] times; then the resume
/// service-in fails, with the reason.
fn undelivered(shared: &Shared, state: &mut State, d: Delivery, error: String) {
    let run_id = d.fired.run_id.clone();
    let Some(run) = state.runs.get_mut(&run_id) else {
        return;
    };
    let Some(flow) = run.shared_flow() else {
        return;
    };
    for next in Run::service_successors(&flow, &d.resume_node_id) {
        run.unreach(&next);
    }
    let attempts = d.timer.attempts + 1;
    let cancelled = run.is_cancelled();
    let gave_up = attempts >= MAX_DELIVERY_ATTEMPTS || cancelled;
    if cancelled {
        // Cancelled while the delivery was on its way: nothing to try again.
    } else if gave_up {
        if let Some(resume) = flow.node(&d.resume_node_id) {
            let seq = state.records.next_seq();
            let message = format!(
                "the delivery of timer {} occurrence {} on edge {} could not be published in {attempts} attempts: {error}",
                d.fired.node_id, d.fired.occurrence, d.edge
            );
            if let Some(run) = state.runs.get_mut(&run_id) {
                run.engine_failure(seq, resume, message, GoTime::now());
            }
        }
    } else {
        run.retry_timer_delivery(&d.timer, &d.edge, attempts);
    }
    shared.push_locked(
        state,
        &d.subject,
        &d.headers,
        Body::from(d.payload),
        RecordKind::TimerUndelivered {
            run_id: run_id.clone(),
            node_id: d.fired.node_id.clone(),
            occurrence: d.fired.occurrence,
            resume_node_id: d.resume_node_id.clone(),
            error,
            gave_up,
        },
    );
    shared.refresh_run(state, &run_id);
}

/// On the virtual clock with auto-advance: whenever every run is idle (nothing pending) and a
/// timer is armed, jump to it.
pub(crate) async fn auto_advance(emulator: Emulator) {
    let mut changes = emulator.changes();
    loop {
        let next = {
            let state = emulator.lock();
            let busy = state.runs.values().any(|r| r.has_pending());
            if busy {
                None
            } else {
                earliest_due(&state, &Default::default())
            }
        };
        if let Some(due) = next {
            if let Err(e) = advance_to(&emulator, due).await {
                tracing::warn!("auto-advance: {e}");
                // Failed deliveries stay armed: give NATS a moment before the next attempt.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            continue;
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// On the real clock: sleep until the earliest timer is due (or something changes), fire it.
pub(crate) async fn real_clock(emulator: Emulator) {
    let mut changes = emulator.changes();
    loop {
        let wait = {
            let state = emulator.lock();
            debug_assert_eq!(state.clock.mode(), ClockMode::Real);
            earliest_due(&state, &Default::default()).map(|due| {
                let ns = due.unix_nanos() - GoTime::now().unix_nanos();
                Duration::from_nanos(ns.clamp(0, i128::from(u64::MAX)) as u64)
            })
        };
        match wait {
            Some(d) if d.is_zero() => {
                if let Err(e) = advance_to(&emulator, GoTime::now()).await {
                    tracing::warn!("real clock: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            Some(d) => {
                tokio::select! {
                    () = tokio::time::sleep(d) => {}
                    r = changes.changed() => if r.is_err() { return },
                }
            }
            None => {
                if changes.changed().await.is_err() {
                    return;
                }
            }
        }
    }
}
