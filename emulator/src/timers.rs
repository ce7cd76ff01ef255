//! Durable Timers: armed when the node before them completes, fired when the emulator's clock
//! reaches them. On elapse the run's immutable snapshot (through the resume edge's mapping, if
//! any) goes to the next business service-in with the elapsed-context triplet.

use std::time::Duration;

use serde_json::Value;
use triggers_sdk::flow::{self, Flow, NodeType};
use triggers_sdk::wire::durable_timer::{self, ElapsedContext, TimerContext};
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::{GoTime, Headers, json};

use crate::clock::{ClockMode, plus_ms};
use crate::emulator::{Emulator, FiredTimer, Shared, State, new_envelope};
use crate::error::EmulatorError;
use crate::recorder::{ArmedTimer, RecordKind};

/// Arms `timer` for `run_id` at `now + delay`. A timer armed again for the same run gets a new
/// fence, which makes any earlier arming stale.
pub(crate) fn arm(
    shared: &Shared,
    state: &mut State,
    flow: &Flow,
    run_id: &str,
    timer: &str,
    now: GoTime,
) {
    let Some(node) = flow.node(timer) else { return };
    let delay = flow::timer_delay_ms(node).unwrap_or(0);
    let fence = Shared::next_fence(state);
    let due = plus_ms(now, delay);
    let Some(run) = state.runs.get_mut(run_id) else {
        return;
    };
    run.timers.retain(|t| t.node_id != timer);
    run.timers.push(ArmedTimer {
        node_id: timer.to_owned(),
        due,
        occurrence: 1,
        repeat: flow::timer_repeat(node),
        fence,
    });
    let seq = shared.push_locked(
        state,
        "",
        &Headers::new(),
        &[],
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
    resume_node_id: String,
}

/// Moves the virtual clock to `target`, firing every timer due by then in order of due time.
pub(crate) async fn advance_to(
    emulator: &Emulator,
    target: GoTime,
) -> Result<Vec<FiredTimer>, EmulatorError> {
    let mut fired = Vec::new();
    loop {
        let next = {
            let mut state = emulator.lock();
            let earliest =
                earliest_due(&state).filter(|due| due.unix_nanos() <= target.unix_nanos());
            match earliest {
                Some(due) => {
                    state.clock.advance_to(due);
                    Some(take_due(&mut state, due))
                }
                None => {
                    state.clock.advance_to(target);
                    None
                }
            }
        };
        let Some(deliveries) = next else { break };
        for d in deliveries {
            emulator
                .shared
                .publish_inbound(&d.subject, d.headers.clone(), d.payload.clone())
                .await?;
            emulator.shared.push(
                &d.subject,
                &d.headers,
                &d.payload,
                RecordKind::TimerFired {
                    run_id: d.fired.run_id.clone(),
                    node_id: d.fired.node_id.clone(),
                    occurrence: d.fired.occurrence,
                    resume_node_id: d.resume_node_id.clone(),
                },
            );
            fired.push(d.fired);
        }
    }
    let to = emulator.now();
    emulator
        .shared
        .push("", &Headers::new(), &[], RecordKind::ClockAdvanced { to });
    emulator.shared.notify();
    Ok(fired)
}

pub(crate) fn earliest_due(state: &State) -> Option<GoTime> {
    state
        .runs
        .values()
        .flat_map(|r| r.timers.iter().map(|t| t.due))
        .min_by_key(GoTime::unix_nanos)
}

/// Takes every timer due at exactly `due`, re-arming repeating ones, and builds their deliveries.
fn take_due(state: &mut State, due: GoTime) -> Vec<Delivery> {
    let now = state.clock.now();
    let mut due_now: Vec<(String, ArmedTimer)> = Vec::new();
    for run in state.runs.values_mut() {
        let (fire, keep): (Vec<_>, Vec<_>) = run
            .timers
            .drain(..)
            .partition(|t| t.due.unix_nanos() <= due.unix_nanos());
        run.timers = keep;
        due_now.extend(fire.into_iter().map(|t| (run.id.clone(), t)));
    }
    let mut deliveries = Vec::new();
    for (run_id, timer) in due_now {
        let Some(run) = state.runs.get(&run_id) else {
            continue;
        };
        let Some(flow) = state.flows.get(&run.flow_id).cloned() else {
            continue;
        };
        let snapshot = run.snapshot.clone();
        let trace_id = run.trace_id.clone();
        let snapshot_sha = durable_timer::payload_sha256(&snapshot);
        for (edge, resume) in flow.successors(&timer.node_id) {
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
                            snapshot.clone()
                        }
                    }
                }
                None => snapshot.clone(),
            };
            let key = format!(
                "{run_id}:{}:{}:{}",
                timer.node_id, timer.occurrence, timer.fence
            );
            let envelope = new_envelope(&flow, &run_id, &resume.id, &trace_id, key, now);
            let mut headers = envelope.to_headers();
            headers.insert(names::NATS_MSG_ID, envelope.nats_msg_id());
            let context = TimerContext::Elapsed(ElapsedContext {
                v: durable_timer::CONTEXT_VERSION,
                kind: durable_timer::KIND_ELAPSED,
                flow_id: flow.id.clone(),
                flow_version: flow.version,
                root_execution_id: run_id.clone(),
                timer_node_id: timer.node_id.clone(),
                timer_ref: format!("{run_id}:{}:{}", timer.node_id, timer.fence),
                occurrence: timer.occurrence as i64,
                fence: timer.fence as i64,
                snapshot_sha256: snapshot_sha.clone(),
                resume_edge_id: edge.id.clone(),
                resume_run_id: run_id.clone(),
            });
            durable_timer::write_triplet(&mut headers, &context, &payload);
            Shared::remember_own(state, envelope.nats_msg_id());
            deliveries.push(Delivery {
                subject: resume.inbound.clone(),
                headers,
                payload,
                fired: FiredTimer {
                    run_id: run_id.clone(),
                    node_id: timer.node_id.clone(),
                    occurrence: timer.occurrence,
                    due: timer.due,
                },
                resume_node_id: resume.id.clone(),
            });
        }
        let seq = state.seq;
        if let Some(run) = state.runs.get_mut(&run_id) {
            run.engine_step(
                seq,
                &timer.node_id,
                NodeType::Timer.as_str(),
                "fired",
                GoTime::now(),
            );
            for (_, resume) in flow.successors(&timer.node_id) {
                run.enter(&flow, &resume.id);
            }
            if timer.occurrence < timer.repeat {
                let delay = flow
                    .node(&timer.node_id)
                    .and_then(flow::timer_delay_ms)
                    .unwrap_or(0);
                run.timers.push(ArmedTimer {
                    due: plus_ms(timer.due, delay),
                    occurrence: timer.occurrence + 1,
                    ..timer.clone()
                });
            } else {
                run.completed.insert(timer.node_id.clone());
            }
            run.refresh_status(GoTime::now());
        }
    }
    deliveries
}

/// On the virtual clock with auto-advance: whenever every run is idle (nothing pending) and a
/// timer is armed, jump to it.
pub(crate) async fn auto_advance(emulator: Emulator) {
    let mut changes = emulator.changes();
    loop {
        let next = {
            let state = emulator.lock();
            let busy = state.runs.values().any(|r| !r.pending.is_empty());
            if busy { None } else { earliest_due(&state) }
        };
        if let Some(due) = next {
            if let Err(e) = advance_to(&emulator, due).await {
                tracing::warn!("auto-advance: {e}");
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
            earliest_due(&state).map(|due| {
                let ns = due.unix_nanos() - GoTime::now().unix_nanos();
                Duration::from_nanos(ns.clamp(0, i128::from(u64::MAX)) as u64)
            })
        };
        match wait {
            Some(d) if d.is_zero() => {
                if let Err(e) = advance_to(&emulator, GoTime::now()).await {
                    tracing::warn!("real clock: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
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
