//! Release validation: whether a flow may be deployed against the services registered now, and the
//! resolved flow (owners assigned, inbound subjects written into the nodes) when it may.
//!
//! Every problem has a stable snake_case [`ReleaseCode`], so a test or a scenario can expect one.

use std::fmt;

use serde::Serialize;
use serde_json::Value;
use triggers_sdk::flow::{Flow, FlowIssueKind, MAX_EXECUTIONS_PER_TRIGGER, Node, NodeType};
use triggers_sdk::wire::manifest::{DURABLE_TIMER_V1, TRANSPORT_NATS};
use triggers_sdk::wire::{Manifest, subject};

/// Why a release is refused.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseCode {
    /// The flow itself is malformed (ids, edges, settings, cycles).
    InvalidFlow,
    /// A node names a service that has not registered.
    UnknownService,
    /// An action node names an action its service does not declare.
    UnknownAction,
    /// A service of the flow declares no NATS service source, so nothing can reach it.
    NoNatsSource,
    /// A mapping, condition or lookup node belongs to a service whose `supports_nodes` lacks it.
    UnsupportedNode,
    /// A lookup node names a runtime lookup its service does not declare.
    UnknownLookup,
    /// A service-in's target is not the default of any of its service's NATS sources.
    ServiceInTargetUnknown,
    /// A service of a Durable Timer lineage does not declare exactly `durable_timer.v1`.
    DurableTimerCapabilityMissing,
    /// A business service-in of a Durable Timer lineage does not use transport `nats`.
    DurableTimerTransportNotNats,
    /// A business service-in of a Durable Timer lineage has no `config.target`.
    DurableTimerTargetMissing,
    /// A business service-in of a Durable Timer lineage matches its service's NATS source only in
    /// transport: its target equals no active NATS source's default.
    DurableTimerTargetMismatch,
    /// A flow, node or edge id cannot be carried in headers, keys and subjects.
    InvalidId,
    /// The flow has more nodes or edges than a flow may have.
    FlowTooLarge,
    /// A timer is followed by a node it cannot resume into (only a service-in, or a timer).
    TimerResumeInvalid,
    /// A timer's `delay_ms` or `repeat` is out of range.
    TimerOutOfRange,
    /// An output or a hop would publish on a subject no flow may send to (a locked subject, a
    /// NATS system subject, the control namespace, or a malformed one).
    LockedTarget,
    /// One trigger would owe more node executions than a flow may
    /// ([`triggers_sdk::flow::MAX_EXECUTIONS_PER_TRIGGER`]): parallel edges, or fan-ins without
    /// a join, multiply along a path.
    TooManyExecutions,
}

impl ReleaseCode {
    /// The stable code.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseCode::InvalidFlow => "invalid_flow",
            ReleaseCode::UnknownService => "unknown_service",
            ReleaseCode::UnknownAction => "unknown_action",
            ReleaseCode::NoNatsSource => "no_nats_source",
            ReleaseCode::UnsupportedNode => "unsupported_node",
            ReleaseCode::UnknownLookup => "unknown_lookup",
            ReleaseCode::ServiceInTargetUnknown => "service_in_target_unknown",
            ReleaseCode::DurableTimerCapabilityMissing => "durable_timer_capability_missing",
            ReleaseCode::DurableTimerTransportNotNats => "durable_timer_transport_not_nats",
            ReleaseCode::DurableTimerTargetMissing => "durable_timer_target_missing",
            ReleaseCode::DurableTimerTargetMismatch => "durable_timer_target_mismatch",
            ReleaseCode::InvalidId => "invalid_id",
            ReleaseCode::FlowTooLarge => "flow_too_large",
            ReleaseCode::TimerResumeInvalid => "timer_resume_invalid",
            ReleaseCode::TimerOutOfRange => "timer_out_of_range",
            ReleaseCode::LockedTarget => "locked_target",
            ReleaseCode::TooManyExecutions => "too_many_executions",
        }
    }

    /// Every code, for docs and for parsing scenario files.
    pub const ALL: [ReleaseCode; 17] = [
        ReleaseCode::InvalidFlow,
        ReleaseCode::UnknownService,
        ReleaseCode::UnknownAction,
        ReleaseCode::NoNatsSource,
        ReleaseCode::UnsupportedNode,
        ReleaseCode::UnknownLookup,
        ReleaseCode::ServiceInTargetUnknown,
        ReleaseCode::DurableTimerCapabilityMissing,
        ReleaseCode::DurableTimerTransportNotNats,
        ReleaseCode::DurableTimerTargetMissing,
        ReleaseCode::DurableTimerTargetMismatch,
        ReleaseCode::InvalidId,
        ReleaseCode::FlowTooLarge,
        ReleaseCode::TimerResumeInvalid,
        ReleaseCode::TimerOutOfRange,
        ReleaseCode::LockedTarget,
        ReleaseCode::TooManyExecutions,
    ];

    /// The code named `s`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ReleaseCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One reason a release is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ReleaseProblem {
    /// The stable code.
    pub code: ReleaseCode,
    /// The node concerned, if one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The service concerned, if one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for ReleaseProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code)?;
        if let Some(node) = &self.node {
            write!(f, " (node {node})")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// The NATS source subjects of a manifest (the defaults of its `nats` service sources).
pub(crate) fn nats_sources(manifest: &Manifest) -> Vec<&str> {
    manifest
        .service_sources
        .iter()
        .filter(|s| s.transport == TRANSPORT_NATS && !s.default.is_empty())
        .map(|s| s.default.as_str())
        .collect()
}

/// Checks a flow against the registered manifests; on success returns it resolved: owners
/// assigned, each node's `inbound` set to its owner's first NATS source, and each service-in
/// without a target given that source.
///
/// # Errors
/// Every problem found, each with its code.
pub fn check_release(
    flow: &Flow,
    manifests: &crate::conformance::Manifests,
) -> Result<Flow, Vec<ReleaseProblem>> {
    let mut flow = flow.clone();
    flow.assign_owners();
    let mut problems = Problems(structural_problems(&flow));
    // Only a flow without structural problems is counted (a cycle is reported as one).
    if problems.0.is_empty() {
        check_executions(&flow, &mut problems);
    }
    check_services(&flow, manifests, &mut problems);
    let durable = flow.has_timer();
    for node in &flow.body.nodes {
        let Some(m) = manifests.get(&node.service) else {
            continue;
        };
        check_node(node, m, &mut problems);
        if node.node_type == NodeType::ServiceIn {
            check_service_in(node, m, durable, &mut problems);
        }
    }
    check_hop_targets(&flow, manifests, &mut problems);
    let mut problems = problems.0;
    if !problems.is_empty() {
        problems.sort_by(|a, b| a.code.cmp(&b.code).then(a.node.cmp(&b.node)));
        return Err(problems);
    }
    resolve_inbound(&mut flow, manifests);
    Ok(flow)
}

/// The problems a release check finds.
struct Problems(Vec<ReleaseProblem>);

impl Problems {
    fn push(
        &mut self,
        code: ReleaseCode,
        node: Option<&str>,
        service: Option<&str>,
        message: String,
    ) {
        self.0.push(ReleaseProblem {
            code,
            node: node.map(str::to_owned),
            service: service.map(str::to_owned),
            message,
        });
    }
}

/// The flow's own shape (ids, edges, limits, timers), before any manifest is read.
fn structural_problems(flow: &Flow) -> Vec<ReleaseProblem> {
    flow.structural_issues()
        .into_iter()
        .map(|i| ReleaseProblem {
            code: match i.kind {
                FlowIssueKind::Structure => ReleaseCode::InvalidFlow,
                FlowIssueKind::Id => ReleaseCode::InvalidId,
                FlowIssueKind::Limit => ReleaseCode::FlowTooLarge,
                FlowIssueKind::TimerResume => ReleaseCode::TimerResumeInvalid,
                FlowIssueKind::TimerLimit => ReleaseCode::TimerOutOfRange,
                FlowIssueKind::Target => ReleaseCode::LockedTarget,
            },
            node: i
                .at
                .strip_prefix("nodes[")
                .and_then(|r| r.strip_suffix(']'))
                .map(str::to_owned),
            service: None,
            message: i.to_string(),
        })
        .collect()
}

/// What one trigger would owe: at most [`MAX_EXECUTIONS_PER_TRIGGER`] node executions.
fn check_executions(flow: &Flow, problems: &mut Problems) {
    let owed = flow.executions_per_trigger();
    if owed <= MAX_EXECUTIONS_PER_TRIGGER {
        return;
    }
    problems.push(
        ReleaseCode::TooManyExecutions,
        None,
        None,
        format!(
            "one trigger would owe {} node executions, more than the {MAX_EXECUTIONS_PER_TRIGGER} a flow may: \
                 every node runs once per path that reaches it (two parallel edges are two \
                 arrivals, and a fan-in has no join), so they multiply along a path; remove \
                 the parallel edges, or fan out fewer branches into one node",
            if owed == u64::MAX {
                "more than 18 446 744 073 709 551 615".to_owned()
            } else {
                owed.to_string()
            }
        ),
    );
}

/// Every service of the flow registered, reachable over NATS, and (for a Durable Timer flow)
/// declaring exactly `durable_timer.v1`.
fn check_services(flow: &Flow, manifests: &crate::conformance::Manifests, problems: &mut Problems) {
    for service in flow.services() {
        match manifests.get(service) {
            None => problems.push(
                ReleaseCode::UnknownService,
                None,
                Some(service),
                format!(
                    "service {service:?} has not registered; start it (or register its manifest) before deploying"
                ),
            ),
            Some(m) if nats_sources(m).is_empty() => problems.push(
                ReleaseCode::NoNatsSource,
                None,
                Some(service),
                format!(
                    "service {service:?} declares no NATS service source, so no message can reach it"
                ),
            ),
            Some(_) => {}
        }
    }
    if !flow.has_timer() {
        return;
    }
    for service in flow.services() {
        if let Some(m) = manifests.get(service)
            && !m.has_capability(DURABLE_TIMER_V1)
        {
            problems.push(
                ReleaseCode::DurableTimerCapabilityMissing,
                None,
                Some(service),
                format!(
                    "the flow has a Durable Timer, and service {service:?} declares runtime_capabilities {:?}, not exactly {DURABLE_TIMER_V1:?}",
                    m.runtime_capabilities
                ),
            );
        }
    }
}

/// A node against its service's manifest: its action, node kind and lookup declared.
fn check_node(node: &Node, m: &Manifest, problems: &mut Problems) {
    let id = Some(node.id.as_str());
    let svc = Some(node.service.as_str());
    match node.node_type {
        NodeType::Action if m.action(&node.action).is_none() => problems.push(
            ReleaseCode::UnknownAction,
            id,
            svc,
            format!(
                "service {:?} declares no action {:?} (it has {:?})",
                node.service,
                node.action,
                m.actions
                    .iter()
                    .map(|a| a.name.as_str())
                    .collect::<Vec<_>>()
            ),
        ),
        t if t.is_local() && !m.supports_nodes.iter().any(|n| n == t.as_str()) => problems.push(
            ReleaseCode::UnsupportedNode,
            id,
            svc,
            format!(
                "service {:?} evaluates {t} nodes but its supports_nodes is {:?}",
                node.service, m.supports_nodes
            ),
        ),
        _ => {}
    }
    if node.node_type == NodeType::Lookup {
        let name = node
            .config
            .get("lookup")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !m.runtime_lookups.iter().any(|l| l.name == name) {
            problems.push(
                ReleaseCode::UnknownLookup,
                id,
                svc,
                format!(
                    "service {:?} declares no runtime lookup {name:?}",
                    node.service
                ),
            );
        }
    }
}

/// A service-in's transport and target against its service's NATS sources: in a Durable Timer
/// lineage, transport nats and a target equal to one of them; elsewhere, a target given must be
/// one of them.
fn check_service_in(node: &Node, m: &Manifest, durable: bool, problems: &mut Problems) {
    let id = Some(node.id.as_str());
    let svc = Some(node.service.as_str());
    let sources = nats_sources(m);
    let transport = node
        .config
        .get("transport")
        .and_then(Value::as_str)
        .unwrap_or(TRANSPORT_NATS);
    let target = node
        .config
        .get("target")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !durable {
        if !target.is_empty() && !sources.is_empty() && !sources.contains(&target) {
            problems.push(
                ReleaseCode::ServiceInTargetUnknown,
                id,
                svc,
                format!(
                    "config.target {target:?} is none of service {:?}'s NATS sources {sources:?}",
                    node.service
                ),
            );
        }
        return;
    }
    if transport != TRANSPORT_NATS {
        problems.push(
            ReleaseCode::DurableTimerTransportNotNats,
            id,
            svc,
            format!(
                "a business service-in of a Durable Timer lineage must use transport nats, not {transport:?}"
            ),
        );
    } else if target.is_empty() {
        problems.push(
            ReleaseCode::DurableTimerTargetMissing,
            id,
            svc,
            format!(
                "a business service-in of a Durable Timer lineage needs config.target, one of {sources:?}"
            ),
        );
    } else if !sources.contains(&target) {
        problems.push(
            ReleaseCode::DurableTimerTargetMismatch,
            id,
            svc,
            format!(
                "config.target {target:?} matches service {:?}'s NATS sources only in transport: it equals none of their defaults {sources:?}",
                node.service
            ),
        );
    }
}

/// Where hops will go: every NATS source of a service of the flow must be a subject a flow may
/// send to (registration refuses most bad ones; this holds whatever registered).
fn check_hop_targets(
    flow: &Flow,
    manifests: &crate::conformance::Manifests,
    problems: &mut Problems,
) {
    for service in flow.services() {
        for source in manifests
            .get(service)
            .map(|m| nats_sources(m))
            .unwrap_or_default()
        {
            if let Err(e) = subject::check_publish_target(source) {
                problems.push(
                    ReleaseCode::LockedTarget,
                    None,
                    Some(service),
                    format!("service {service:?}'s NATS source cannot take hops: {e}"),
                );
            }
        }
    }
}

/// Resolves a checked flow: each node's `inbound` is its owner's first NATS source, and each
/// service-in without a target gets that source (and transport nats).
fn resolve_inbound(flow: &mut Flow, manifests: &crate::conformance::Manifests) {
    for node in &mut flow.body.nodes {
        let Some(first) = manifests
            .get(&node.service)
            .and_then(|m| nats_sources(m).first().map(|s| (*s).to_owned()))
        else {
            continue;
        };
        if node.node_type == NodeType::ServiceIn {
            node.config
                .entry("transport")
                .or_insert_with(|| Value::from(TRANSPORT_NATS));
            let target = node
                .config
                .entry("target")
                .or_insert_with(|| Value::from(first.clone()));
            if target.as_str().is_some_and(str::is_empty) {
                *target = Value::from(first.clone());
            }
            node.inbound = target.as_str().unwrap_or(&first).to_owned();
        } else {
            node.inbound = first;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manifest(service: &str, caps: &[&str]) -> Manifest {
        serde_json::from_value(json!({
            "protocol_version": "1.0.0", "service": service, "service_version": "1",
            "actions": [{"name": "act", "input_schema": null, "result_schema": null, "timeout_ms": 1000,
                         "retry": {"max_attempts": 1, "initial_backoff_ms": 0, "backoff_factor": 1, "max_backoff_ms": 0},
                         "dlq": format!("triggers.v2.dlq.{service}.act")}],
            "service_sources": [{"name": "nats", "transport": "nats", "default": format!("{service}.in")}],
            "supports_nodes": ["mapping"],
            "runtime_capabilities": caps,
        }))
        .unwrap()
    }

    fn registry(entries: &[(&str, &[&str])]) -> crate::conformance::Manifests {
        entries
            .iter()
            .map(|(s, c)| ((*s).to_owned(), crate::KeptManifest::new(manifest(s, c))))
            .collect()
    }

    fn timer_flow(target: &str, transport: &str) -> Flow {
        serde_json::from_value(json!({"id": "f", "nodes": [
            {"id": "in", "type": "service-in", "service": "a", "config": {"transport": "nats", "target": "a.in"}},
            {"id": "x", "type": "action", "service": "a", "action": "act"},
            {"id": "t", "type": "timer", "config": {"delay_ms": 10}},
            {"id": "in2", "type": "service-in", "service": "b", "config": {"transport": transport, "target": target}},
            {"id": "y", "type": "action", "service": "b", "action": "act"}
        ], "edges": [
            {"id": "e1", "from": "in", "to": "x"}, {"id": "e2", "from": "x", "to": "t"},
            {"id": "e3", "from": "t", "to": "in2"}, {"id": "e4", "from": "in2", "to": "y"}
        ]}))
        .unwrap()
    }

    fn codes(r: Result<Flow, Vec<ReleaseProblem>>) -> Vec<&'static str> {
        r.err()
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.code.as_str())
            .collect()
    }

    #[test]
    fn a_durable_timer_lineage_needs_the_capability_everywhere() {
        let dt = ["durable_timer.v1"];
        let ok = check_release(
            &timer_flow("b.in", "nats"),
            &registry(&[("a", &dt), ("b", &dt)]),
        )
        .unwrap();
        assert_eq!(ok.node("y").unwrap().inbound, "b.in");
        assert_eq!(
            codes(check_release(
                &timer_flow("b.in", "nats"),
                &registry(&[("a", &dt), ("b", &[])])
            )),
            ["durable_timer_capability_missing"]
        );
        assert_eq!(
            codes(check_release(
                &timer_flow("b.in", "nats"),
                &registry(&[("a", &dt), ("b", &["durable_timer.v2"])])
            )),
            ["durable_timer_capability_missing"]
        );
    }

    #[test]
    fn target_rules_for_business_service_ins() {
        let dt = ["durable_timer.v1"];
        let reg = registry(&[("a", &dt), ("b", &dt)]);
        assert_eq!(
            codes(check_release(&timer_flow("b.other", "nats"), &reg)),
            ["durable_timer_target_mismatch"]
        );
        assert_eq!(
            codes(check_release(&timer_flow("", "nats"), &reg)),
            ["durable_timer_target_missing"]
        );
        assert_eq!(
            codes(check_release(&timer_flow("b.in", "http"), &reg)),
            ["durable_timer_transport_not_nats"]
        );
    }

    #[test]
    fn a_repeating_timer_needs_a_delay() {
        let dt = ["durable_timer.v1"];
        let reg = registry(&[("a", &dt), ("b", &dt)]);
        let mut f = timer_flow("b.in", "nats");
        f.body.nodes[2].config.insert("delay_ms".into(), json!(0));
        assert!(
            check_release(&f, &reg).is_ok(),
            "one occurrence at 0 is fine"
        );
        f.body.nodes[2].config.insert("repeat".into(), json!(3));
        assert_eq!(codes(check_release(&f, &reg)), ["timer_out_of_range"]);
        f.body.nodes[2].config.insert("delay_ms".into(), json!(1));
        assert!(check_release(&f, &reg).is_ok());
        f.body.nodes[2]
            .config
            .insert("repeat".into(), json!(1_000_000_000_000u64));
        assert_eq!(codes(check_release(&f, &reg)), ["timer_out_of_range"]);
    }

    #[test]
    fn unknown_services_and_actions() {
        let mut f = timer_flow("b.in", "nats");
        f.body.nodes[1].action = "nope".into();
        let c = codes(check_release(
            &f,
            &registry(&[("a", &["durable_timer.v1"])]),
        ));
        assert_eq!(c, ["unknown_service", "unknown_action"]);
    }

    /// Found by an audit: a 31-node flow, each node joined to the next by two parallel edges,
    /// was released; one trigger owed 2^31 executions, run at some 4 000 a second for days.
    #[test]
    fn flows_whose_executions_multiply_beyond_the_bound_are_refused() {
        let chain = |n: usize, parallel: usize| -> Flow {
            let mut nodes = vec![json!({"id": "n0", "type": "service-in", "service": "a"})];
            let mut edges = Vec::new();
            for i in 1..n {
                nodes.push(
                    json!({"id": format!("n{i}"), "type": "mapping", "service": "a",
                                  "config": {"fields": {}}}),
                );
                for p in 0..parallel {
                    edges.push(
                        json!({"id": format!("e{i}_{p}"), "from": format!("n{}", i - 1),
                                      "to": format!("n{i}")}),
                    );
                }
            }
            serde_json::from_value(json!({"id": "f", "nodes": nodes, "edges": edges})).unwrap()
        };
        let reg = registry(&[("a", &[])]);
        assert_eq!(chain(31, 1).executions_per_trigger(), 31);
        assert!(check_release(&chain(31, 1), &reg).is_ok());
        assert_eq!(chain(31, 2).executions_per_trigger(), (1 << 31) - 1);
        let problems = check_release(&chain(31, 2), &reg).unwrap_err();
        assert_eq!(
            problems.iter().map(|p| p.code.as_str()).collect::<Vec<_>>(),
            ["too_many_executions"]
        );
        assert!(
            problems[0].message.contains("2147483647"),
            "{}",
            problems[0].message
        );
        // Saturates rather than overflows.
        assert_eq!(chain(100, 2).executions_per_trigger(), u64::MAX);
        // A few parallel edges stay within the bound.
        assert!(check_release(&chain(10, 2), &reg).is_ok());
    }
}
