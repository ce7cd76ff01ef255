//! Run-level rules: a message judged against the flow, the run and the manifest it belongs to, not
//! only against its shape. Pure functions of what the emulator knows; the emulator calls them as
//! it follows each run and records what they find.

use std::collections::BTreeMap;
use std::sync::Arc;

use triggers_sdk::flow::{Flow, NodeType};
use triggers_sdk::wire::shapes::status;
use triggers_sdk::wire::{CompletionEvent, Envelope, Heartbeat};

use crate::recorder::Run;

/// A rule found broken, with what is wrong.
pub(crate) type Finding = (&'static str, String);

/// A completion event against its run's flow, before it is applied.
pub(crate) fn completion(run: &Run, event: &CompletionEvent) -> Vec<Finding> {
    let mut found = Vec::new();
    if run.flow_version != event.flow_version {
        found.push((
            "completion_version_mismatch",
            format!(
                "the event says flow_version {}; run {} runs version {} (the version of the delivery's envelope)",
                event.flow_version, run.id, run.flow_version
            ),
        ));
    }
    if !event.trace_id.is_empty() && !run.trace_id.is_empty() && event.trace_id != run.trace_id {
        found.push((
            "completion_trace_mismatch",
            format!(
                "the event's trace_id is {}; run {} is trace {} (the envelope's X-Triggers-Trace-Id)",
                event.trace_id, run.id, run.trace_id
            ),
        ));
    }
    let Some(flow) = run.flow() else {
        return found;
    };
    let Some(node) = flow.node(&event.node_id) else {
        found.push((
            "completion_node_unknown",
            format!(
                "flow {} v{} has no node {:?}: a completion event names the node of the flow that ran",
                flow.id, flow.version, event.node_id
            ),
        ));
        return found;
    };
    if node.node_type.as_str() != event.node_type {
        found.push((
            "completion_node_type_mismatch",
            format!(
                "node {:?} is a {} node; the event says node_type {:?}",
                node.id, node.node_type, event.node_type
            ),
        ));
    }
    if event.status == status::SKIPPED && node.node_type != NodeType::Condition {
        found.push((
            "completion_status_invalid",
            format!(
                "node {:?} is a {} node and reported `skipped`: only a condition stops a path; the run counts the node as failed",
                node.id, node.node_type
            ),
        ));
    }
    if node.node_type == NodeType::Timer {
        found.push((
            "completion_service_mismatch",
            format!(
                "node {:?} is a timer: the engine's, no service reports it",
                node.id
            ),
        ));
    } else if node.service != event.service {
        found.push((
            "completion_service_mismatch",
            format!(
                "node {:?} belongs to {}; the event says service {:?} (a service reports only its own nodes)",
                node.id, node.service, event.service
            ),
        ));
    }
    found
}

/// A completion event of a run the emulator follows (did not start) against the deployed flow:
/// the node exists, its type, its owner (when the run's version is the one deployed), and a
/// version never deployed. Runs of an older version than the deployed one are not judged (the
/// emulator holds the newest version of each flow only).
pub(crate) fn followed_completion(
    run: &Run,
    event: &CompletionEvent,
    deployed: Option<&Flow>,
) -> Vec<Finding> {
    if run.flow().is_some() {
        return completion(run, event);
    }
    match deployed {
        Some(flow) if event.flow_version > flow.version => vec![(
            "completion_version_mismatch",
            format!(
                "the event says flow {} v{}; the newest deployed is v{} (a version never deployed: a run carries the version of its delivery's envelope)",
                flow.id, event.flow_version, flow.version
            ),
        )],
        _ => Vec::new(),
    }
}

/// The `max_attempts` (at least 1) of the action `event`'s node runs, where the run's flow, the
/// node and its service's manifest are known: read once per event, for `Run::apply` (each
/// execution's allowance of `retrying` events) and for [`after_completion`].
pub(crate) fn max_attempts(
    run: &Run,
    event: &CompletionEvent,
    manifests: &crate::conformance::Manifests,
) -> Option<i64> {
    let node = run.flow()?.node(&event.node_id)?;
    if node.node_type != NodeType::Action {
        return None;
    }
    let action = manifests.get(&node.service)?.action(&node.action)?;
    Some(action.retry.max_attempts.max(1))
}

/// A completion event after it was applied: retries beyond the action's policy, and a node run
/// after a service-in of its service that nobody reported.
pub(crate) fn after_completion(
    run: &Run,
    event: &CompletionEvent,
    max_attempts: Option<i64>,
    unexpected: bool,
) -> Vec<Finding> {
    let mut found = Vec::new();
    let Some(flow) = run.flow() else {
        return found;
    };
    let Some(node) = flow.node(&event.node_id) else {
        return found;
    };
    if event.status == status::RETRYING
        && let Some(max) = max_attempts
    {
        // Events name no execution: the retrying events no finished execution accounts for are
        // held against the executions of the node under way (at least this one), each allowed
        // max - 1 of them.
        let allowance = max - 1;
        let unaccounted = i64::from(run.retrying(&node.id));
        let under_way = i64::from(run.pending.get(&node.id).copied().unwrap_or(0)).max(1);
        // Reported once, when the count goes past what they may have made between them.
        if unaccounted == allowance * under_way + 1 {
            let counted = if under_way == 1 {
                "for one execution".to_owned()
            } else {
                format!("between the {under_way} executions of it under way")
            };
            found.push((
                "retries_exceed_policy",
                format!(
                    "action {}.{} (node {:?}) reported {unaccounted} retrying events {counted}; its retry policy allows {max} attempt(s) in all, so at most {allowance} retrying event(s) per execution before succeeded or failed",
                    node.service, node.action, node.id,
                ),
            ));
        }
    }
    if unexpected {
        let unreported: Vec<&str> = flow
            .predecessors(&node.id)
            .map(|(_, p)| p)
            .filter(|p| {
                p.node_type == NodeType::ServiceIn
                    && p.service == event.service
                    && run.pending.contains_key(&p.id)
            })
            .map(|p| p.id.as_str())
            .collect();
        if let Some(p) = unreported.first() {
            found.push((
                "service_in_unreported",
                format!(
                    "{} ran {:?} after service-in {p:?}, which it never reported: a service-in reached by a hop is the receiving service's node, and it must publish its completion event before running what follows (run {} waits on it)",
                    event.service, node.id, run.id
                ),
            ));
        }
    }
    found
}

/// A peer's hop onto an inbound subject, against the deployed flows.
pub(crate) fn hop(flows: &BTreeMap<String, Arc<Flow>>, envelope: &Envelope) -> Vec<Finding> {
    let Some(flow) = flows.get(&envelope.flow_id) else {
        return vec![(
            "hop_flow_unknown",
            format!(
                "the hop names flow {:?}, which is not deployed (deployed: {:?})",
                envelope.flow_id,
                flows.keys().collect::<Vec<_>>()
            ),
        )];
    };
    if envelope.flow_version > flow.version {
        return vec![(
            "hop_flow_unknown",
            format!(
                "the hop names flow {} v{}; v{} is the latest deployed",
                flow.id, envelope.flow_version, flow.version
            ),
        )];
    }
    if flow.node(&envelope.source_node_id).is_none() {
        return vec![(
            "hop_node_unknown",
            format!(
                "the hop's source_node_id {:?} is no node of flow {}: it must name the node whose output the hop carries",
                envelope.source_node_id, flow.id
            ),
        )];
    }
    Vec::new()
}

/// A peer's hop against the run it belongs to (one the emulator started): the version of the
/// run's envelope, and its trace.
pub(crate) fn hop_in_run(run: &Run, envelope: &Envelope) -> Vec<Finding> {
    let mut found = Vec::new();
    if run.is_followed() {
        return found;
    }
    if envelope.flow_version != run.flow_version {
        found.push((
            "hop_version_mismatch",
            format!(
                "the hop of {:?} says flow_version {}; run {} runs version {} (the version of the delivery's envelope): a hop carries the run's version, never the held flow's newest (protocol.md §7)",
                envelope.source_node_id, envelope.flow_version, run.id, run.flow_version
            ),
        ));
    }
    if !run.trace_id.is_empty() && envelope.traceparent.is_empty() {
        found.push((
            "hop_traceparent_missing",
            format!(
                "the hop of {:?} has no X-Triggers-Traceparent though run {} is trace {}: a hop carries `00-<trace_id>-<new span_id>-01` (protocol.md §7), else the trace breaks there",
                envelope.source_node_id, run.id, run.trace_id
            ),
        ));
    }
    found
}

/// A heartbeat against its service's registration.
pub(crate) fn heartbeat(manifests: &crate::conformance::Manifests, hb: &Heartbeat) -> Vec<Finding> {
    match manifests.get(&hb.service) {
        Some(m) if m.service_version != hb.service_version => vec![(
            "heartbeat_version_mismatch",
            format!(
                "the heartbeat says service_version {:?}; {} registered {:?} (a new version registers again)",
                hb.service_version, hb.service, m.service_version
            ),
        )],
        _ => Vec::new(),
    }
}
