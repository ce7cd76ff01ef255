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
use triggers_sdk::flow::{self, Flow, NodeType};
use triggers_sdk::wire::durable_timer::{self, ElapsedContext, TimerContext};
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::{GoTime, Headers, idempotency, json};

use crate::clock::{ClockMode, plus_ms};
use crate::emulator::{Emulator, FiredTimer, Shared, new_envelope};
use crate::error::EmulatorError;
use crate::recorder::{ArmedTimer, Body, RecordKind};
use crate::state::State;

/// Attempts to publish one timer delivery before the engine gives up on it and fails its node.
pub(crate) const MAX_DELIVERY_ATTEMPTS: u32 = 5;

/// Arms a new instance of `timer` for `run_id`, due at `now + delay`.
pub(crate) fn arm(shared: &Shared, state: &mut State, run_id: &str, timer: &str, now: GoTime) {
    let Some(flow) = state.runs.get(run_id).and_then(|r| r.flow.clone()) else {
        return;
    };
    let Some(node) = flow.node(timer) else { return };
    // A delivery of a cancelled run that was already on its way arms nothing after it.
    if state
        .runs
        .get(run_id)
        .is_some_and(|r| r.status == crate::recorder::RunStatus::Cancelled)
    {
        return;
    }
    let delay = flow::timer_delay_ms(node).unwrap_or(0);
    let fence = state.own.next_fence();
    let due = plus_ms(now, delay);
    let Some(run) = state.runs.get_mut(run_id) else {
        return;
    };
    run.timers.push(ArmedTimer {
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
        let (fire, keep): (Vec<_>, Vec<_>) = run
            .timers
            .drain(..)
            .partition(|t| t.due.unix_nanos() <= due.unix_nanos() && !retried.contains(&t.fence));
        run.timers = keep;
        due_now.extend(fire.into_iter().map(|t| (run.id.clone(), t)));
    }
    // Runs in a stable order, so deliveries of one advance go out in the same order each time.
    due_now.sort_by(|a, b| a.1.fence.cmp(&b.1.fence).then(a.0.cmp(&b.0)));
    let mut deliveries = Vec::new();
    for (run_id, timer) in due_now {
        let Some(flow) = state.runs.get(&run_id).and_then(|r| r.flow.clone()) else {
            continue;
        };
        fire(shared, state, &flow, &run_id, &timer, now, &mut deliveries);
    }
    deliveries
}

/// Fires one occurrence of one armed timer.
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
    let snapshot = run.snapshot.clone();
    let trace_id = run.trace_id.clone();
    let snapshot_sha = durable_timer::payload_sha256(&snapshot);
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
        let payload = match &edge.mapping {
            Some(cfg) => {
                let input: Value = serde_json::from_slice(&snapshot).unwrap_or(Value::Null);
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
            None => snapshot.to_vec(),
        };
        let key = idempotency::timer(
            run_id,
            &timer.node_id,
            timer.occurrence,
            timer.fence,
            &edge.id,
        );
        let envelope = new_envelope(flow, run_id, &resume.id, &trace_id, key, now);
        let mut headers = envelope.to_headers();
        headers.insert(names::NATS_MSG_ID, envelope.nats_msg_id());
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
            snapshot_sha256: snapshot_sha.clone(),
            resume_edge_id: edge.id.clone(),
            resume_run_id: run_id.to_owned(),
        });
        durable_timer::write_triplet(&mut headers, &context, &payload);
        // What the resume service-in leads to is reached before the delivery goes out, so a
        // completion can never arrive before the arrival it settles; timers after it are armed
        // once the delivery is out.
        if let Some(run) = state.runs.get_mut(run_id) {
            for next in crate::run::Run::service_successors(flow, &resume.id) {
                run.reach(&next);
            }
        }
        let fired = FiredTimer {
            run_id: run_id.to_owned(),
            node_id: timer.node_id.clone(),
            occurrence: timer.occurrence,
            due: timer.due,
        };
        if crate::run::Run::service_successors(flow, &resume.id).is_empty() {
            // Only timers after the resume service-in: nothing for the service to run.
            let d = Delivery {
                subject: String::new(),
                headers,
                payload,
                fired,
                timer: timer.clone(),
                edge: edge.id.clone(),
                resume_node_id: resume.id.clone(),
            };
            delivered(shared, state, &d);
            continue;
        }
        state.own.remember(envelope.nats_msg_id());
        deliveries.push(Delivery {
            subject: resume.inbound.clone(),
            headers,
            payload,
            fired,
            timer: timer.clone(),
            edge: edge.id.clone(),
            resume_node_id: resume.id.clone(),
        });
    }
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
        arm(shared, state, run_id, &next, now);
    }
    let Some(run) = state.runs.get_mut(run_id) else {
        return;
    };
    if !retry {
        if timer.occurrence < timer.repeat {
            let delay = flow
                .node(&timer.node_id)
                .and_then(flow::timer_delay_ms)
                .unwrap_or(0);
            run.timers.push(ArmedTimer {
                due: plus_ms(timer.due, delay),
                occurrence: timer.occurrence + 1,
                edges: Vec::new(),
                attempts: 0,
                ..timer.clone()
            });
        } else {
            run.completed.insert(timer.node_id.clone());
        }
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
        .and_then(|r| r.flow.clone())
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
    let Some(flow) = run.flow.clone() else { return };
    for next in crate::run::Run::service_successors(&flow, &d.resume_node_id) {
        run.unreach(&next);
    }
    let attempts = d.timer.attempts + 1;
    let cancelled = run.status == crate::recorder::RunStatus::Cancelled;
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
        run.timers.push(ArmedTimer {
            edges: vec![d.edge.clone()],
            attempts,
            // Only this occurrence: the next one is armed already.
            repeat: d.timer.occurrence,
            ..d.timer.clone()
        });
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
