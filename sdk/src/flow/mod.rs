//! The flow model: what a `FlowEnvelope`'s `body` holds, and the rules both the SDK runtime and the
//! emulator follow when they move a payload through it.
//!
//! The wire contract does not define flow bodies; this is ours (see `docs/emulator.md`):
//!
//! ```json
//! {"nodes": [
//!    {"id": "in",   "type": "service-in", "service": "shop",
//!     "config": {"transport": "nats", "target": "shop.inbound"}},
//!    {"id": "pay",  "type": "action", "service": "shop", "action": "charge"},
//!    {"id": "ok",   "type": "condition", "config": {"path": "$.paid", "op": "eq", "value": true}},
//!    {"id": "wait", "type": "timer", "config": {"delay_ms": 60000}},
//!    {"id": "in2",  "type": "service-in", "service": "mail",
//!     "config": {"transport": "nats", "target": "mail.inbound"}},
//!    {"id": "send", "type": "action", "service": "mail", "action": "send"}],
//!  "edges": [
//!    {"id": "e1", "from": "in", "to": "pay"}, {"id": "e2", "from": "pay", "to": "ok"},
//!    {"id": "e3", "from": "ok", "to": "wait"},
//!    {"id": "e4", "from": "wait", "to": "in2", "mapping": {"fields": {"order": "$.order_id"}}},
//!    {"id": "e5", "from": "in2", "to": "send"}]}
//! ```
//!
//! **Ownership.** Every node but a timer belongs to one service. `service-in` and `action` nodes
//! name theirs; `mapping`, `condition`, `lookup` and `output` nodes belong to the service of the
//! node before them unless they name one. Timers belong to the engine.
//!
//! **Choreography.** A message carries `source_node_id`: the node whose output it is. The service
//! that receives it runs the successors of that node that it owns. When a node finishes, its owner
//! delivers the output to each successor: its own nodes run in place, another service's nodes get
//! the message on that service's inbound subject (`inbound`, written into each node at release),
//! timers stop (the engine arms them when it sees the node before complete).

mod eval;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use eval::{EvalError, condition, lookup_params, mapping, resolve_path};

use crate::wire::FlowEnvelope;
use crate::wire::json::go_any;

/// The kinds of node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum NodeType {
    /// Where a run enters a service: a NATS subject (the business service-in).
    #[serde(rename = "service-in")]
    ServiceIn,
    /// One of a service's actions.
    #[serde(rename = "action")]
    Action,
    /// Builds a new payload from fields of the input.
    #[serde(rename = "mapping")]
    Mapping,
    /// Lets the payload through, or stops the path.
    #[serde(rename = "condition")]
    Condition,
    /// Calls one of the owning service's runtime lookups and merges its result in.
    #[serde(rename = "lookup")]
    Lookup,
    /// A Durable Timer: the engine waits, then resumes the run.
    #[serde(rename = "timer")]
    Timer,
    /// Delivers the payload out of the flow: a NATS subject or an HTTP endpoint.
    #[serde(rename = "output")]
    Output,
}

impl NodeType {
    /// The name used in flow bodies and completion events.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            NodeType::ServiceIn => "service-in",
            NodeType::Action => "action",
            NodeType::Mapping => "mapping",
            NodeType::Condition => "condition",
            NodeType::Lookup => "lookup",
            NodeType::Timer => "timer",
            NodeType::Output => "output",
        }
    }

    /// Whether an SDK evaluates it locally, so its owner must list it in `supports_nodes`.
    #[must_use]
    pub fn is_local(self) -> bool {
        matches!(
            self,
            NodeType::Mapping | NodeType::Condition | NodeType::Lookup
        )
    }
}

impl std::fmt::Display for NodeType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One node of a flow. Unknown keys are refused: a misspelt `service` must not pass unnoticed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// Unique in the flow.
    pub id: String,
    /// What it is.
    #[serde(rename = "type")]
    pub node_type: NodeType,
    /// The owning service (see the module docs); empty for timers.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service: String,
    /// For action nodes: the action's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub action: String,
    /// Per-type settings.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub config: Map<String, Value>,
    /// The owner's inbound NATS subject, written by the orchestrator at release.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub inbound: String,
}

/// One edge: `from`'s output goes to `to`. Unknown keys are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edge {
    /// Unique in the flow.
    pub id: String,
    /// The upstream node.
    pub from: String,
    /// The downstream node.
    pub to: String,
    /// A mapping applied on the way (used on a timer's resume edge), as a mapping node's config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mapping: Option<Map<String, Value>>,
}

/// A flow's body: its nodes and edges.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowBody {
    /// The nodes.
    #[serde(default)]
    pub nodes: Vec<Node>,
    /// The edges.
    #[serde(default)]
    pub edges: Vec<Edge>,
}

/// A flow: id, version and body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flow {
    /// The flow id: one subject token (it names `triggers.v2.flow.events.<flow_id>`).
    pub id: String,
    /// Its version; a newer one replaces an older one.
    #[serde(default = "one")]
    pub version: i64,
    /// Nodes and edges.
    #[serde(flatten)]
    pub body: FlowBody,
}

fn one() -> i64 {
    1
}

/// A structural problem of a flow, with the node or edge it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {message}")]
pub struct FlowIssue {
    /// `nodes[<id>]`, `edges[<id>]` or `flow`.
    pub at: String,
    /// What is wrong.
    pub message: String,
}

impl Flow {
    /// Reads a flow from an envelope (as broadcast or in a register reply).
    ///
    /// # Errors
    /// When the body is not a flow body.
    pub fn from_envelope(envelope: &FlowEnvelope) -> Result<Self, serde_json::Error> {
        Ok(Flow {
            id: envelope.id.clone(),
            version: envelope.version,
            body: serde_json::from_value(envelope.body.clone())?,
        })
    }

    /// The envelope to send.
    #[must_use]
    pub fn to_envelope(&self) -> FlowEnvelope {
        FlowEnvelope {
            id: self.id.clone(),
            version: self.version,
            body: serde_json::to_value(&self.body).unwrap_or(Value::Null),
        }
    }

    /// The node with this id.
    #[must_use]
    pub fn node(&self, id: &str) -> Option<&Node> {
        self.body.nodes.iter().find(|n| n.id == id)
    }

    /// The edges out of `id` with the node each leads to, in edge order.
    pub fn successors<'a>(
        &'a self,
        id: &'a str,
    ) -> impl Iterator<Item = (&'a Edge, &'a Node)> + 'a {
        self.body
            .edges
            .iter()
            .filter(move |e| e.from == id)
            .filter_map(|e| self.node(&e.to).map(|n| (e, n)))
    }

    /// The edges into `id` with the node each comes from.
    pub fn predecessors<'a>(
        &'a self,
        id: &'a str,
    ) -> impl Iterator<Item = (&'a Edge, &'a Node)> + 'a {
        self.body
            .edges
            .iter()
            .filter(move |e| e.to == id)
            .filter_map(|e| self.node(&e.from).map(|n| (e, n)))
    }

    /// The services that own a node of the flow (after [`Flow::assign_owners`]).
    #[must_use]
    pub fn services(&self) -> BTreeSet<&str> {
        self.body
            .nodes
            .iter()
            .filter(|n| !n.service.is_empty())
            .map(|n| n.service.as_str())
            .collect()
    }

    /// Whether the flow is a Durable Timer lineage (it has a timer node).
    #[must_use]
    pub fn has_timer(&self) -> bool {
        self.body
            .nodes
            .iter()
            .any(|n| n.node_type == NodeType::Timer)
    }

    /// The service-in nodes where runs start: those no edge leads into.
    pub fn entry_points(&self) -> impl Iterator<Item = &Node> {
        self.body.nodes.iter().filter(|n| {
            n.node_type == NodeType::ServiceIn && !self.body.edges.iter().any(|e| e.to == n.id)
        })
    }

    /// Gives every node without a service the service of the node before it (timers excepted),
    /// following edges from the entry points.
    pub fn assign_owners(&mut self) {
        // Repeat until nothing changes: a chain of inheriting nodes resolves in its length.
        loop {
            let mut changed = false;
            for i in 0..self.body.nodes.len() {
                let node = &self.body.nodes[i];
                if !node.service.is_empty() || node.node_type == NodeType::Timer {
                    continue;
                }
                let owner = self
                    .predecessors(&node.id)
                    .map(|(_, p)| p.service.clone())
                    .find(|s| !s.is_empty());
                if let Some(owner) = owner {
                    self.body.nodes[i].service = owner;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
    }

    /// Structural problems: duplicate or dangling ids, missing settings, cycles, unowned nodes.
    /// Run it after [`Flow::assign_owners`].
    #[must_use]
    pub fn structural_issues(&self) -> Vec<FlowIssue> {
        let mut issues = Vec::new();
        let mut issue = |at: String, message: String| issues.push(FlowIssue { at, message });
        if let Err(e) = crate::wire::subject::check_token("flow id", &self.id) {
            issue("flow".into(), e.to_string());
        }
        if self.body.nodes.is_empty() {
            issue("flow".into(), "has no nodes".into());
        }
        let mut ids = BTreeMap::new();
        for n in &self.body.nodes {
            if n.id.is_empty() {
                issue("nodes[]".into(), "a node has an empty id".into());
            } else if ids.insert(n.id.as_str(), ()).is_some() {
                issue(format!("nodes[{}]", n.id), "the id is used twice".into());
            }
        }
        let mut edge_ids = BTreeSet::new();
        for e in &self.body.edges {
            if !edge_ids.insert(e.id.as_str()) {
                issue(format!("edges[{}]", e.id), "the id is used twice".into());
            }
            for end in [&e.from, &e.to] {
                if self.node(end).is_none() {
                    issue(
                        format!("edges[{}]", e.id),
                        format!("refers to node {end:?}, which the flow does not have"),
                    );
                }
            }
        }
        if self.entry_points().next().is_none() && !self.body.nodes.is_empty() {
            issue(
                "flow".into(),
                "has no entry point (a service-in node with no edge into it)".into(),
            );
        }
        for n in &self.body.nodes {
            let at = format!("nodes[{}]", n.id);
            match n.node_type {
                NodeType::ServiceIn | NodeType::Action if n.service.is_empty() => {
                    issue(
                        at.clone(),
                        format!("a {} node must name its service", n.node_type),
                    );
                }
                NodeType::Mapping | NodeType::Condition | NodeType::Lookup | NodeType::Output
                    if n.service.is_empty() =>
                {
                    issue(at.clone(), "belongs to no service: the node before it is a timer or there is none; put a service-in first".into());
                }
                _ => {}
            }
            match n.node_type {
                NodeType::Action if n.action.is_empty() => {
                    issue(at, "an action node must name its action".into());
                }
                NodeType::Timer if timer_delay_ms(n).is_none() => {
                    issue(
                        at,
                        "a timer needs config.delay_ms, a non-negative integer".into(),
                    );
                }
                NodeType::Timer => {
                    for (_, next) in self.successors(&n.id) {
                        if next.node_type != NodeType::ServiceIn {
                            issue(
                                format!("nodes[{}]", n.id),
                                format!(
                                    "a timer resumes into a service-in node; {:?} is a {}",
                                    next.id, next.node_type
                                ),
                            );
                        }
                    }
                }
                NodeType::Output => {
                    let transport = n
                        .config
                        .get("transport")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    let target = n.config.get("target").and_then(Value::as_str).unwrap_or("");
                    if !matches!(transport, "nats" | "http") || target.is_empty() {
                        issue(
                            at,
                            "an output needs config.transport (nats or http) and config.target"
                                .into(),
                        );
                    }
                }
                NodeType::Lookup if n.config.get("lookup").and_then(Value::as_str).is_none() => {
                    issue(
                        at,
                        "a lookup node needs config.lookup, the name of a runtime lookup".into(),
                    );
                }
                _ => {}
            }
        }
        if let Some(cycle_at) = self.find_cycle() {
            issue(
                format!("nodes[{cycle_at}]"),
                "is on a cycle; flows must be acyclic".into(),
            );
        }
        issues
    }

    fn find_cycle(&self) -> Option<String> {
        // Kahn's algorithm: what cannot be removed is on or behind a cycle.
        let mut indegree: BTreeMap<&str, usize> =
            self.body.nodes.iter().map(|n| (n.id.as_str(), 0)).collect();
        for e in &self.body.edges {
            if let Some(d) = indegree.get_mut(e.to.as_str()) {
                *d += 1;
            }
        }
        let mut ready: Vec<&str> = indegree
            .iter()
            .filter(|(_, d)| **d == 0)
            .map(|(id, _)| *id)
            .collect();
        let mut removed = 0;
        while let Some(id) = ready.pop() {
            removed += 1;
            for e in self.body.edges.iter().filter(|e| e.from == id) {
                if let Some(d) = indegree.get_mut(e.to.as_str()) {
                    *d -= 1;
                    if *d == 0 {
                        ready.push(e.to.as_str());
                    }
                }
            }
        }
        (removed < indegree.len())
            .then(|| {
                indegree
                    .iter()
                    .find(|(_, d)| **d > 0)
                    .map(|(id, _)| (*id).to_owned())
            })
            .flatten()
    }
}

/// A timer node's delay.
#[must_use]
pub fn timer_delay_ms(node: &Node) -> Option<u64> {
    node.config.get("delay_ms").and_then(Value::as_u64)
}

/// How many times a timer fires (`config.repeat`, default 1).
#[must_use]
pub fn timer_repeat(node: &Node) -> u64 {
    node.config
        .get("repeat")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .max(1)
}

/// Serialises a flow body with the Go writer's number rules (for hashing or display).
///
/// # Errors
/// When the body cannot be written as JSON.
pub fn body_to_go_json(body: &FlowBody) -> Result<Vec<u8>, crate::error::JsonError> {
    let value =
        serde_json::to_value(body).map_err(|e| crate::error::JsonError::Custom(e.to_string()))?;
    struct W<'a>(&'a Value);
    impl Serialize for W<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            go_any(self.0, s)
        }
    }
    crate::wire::json::to_vec(&W(&value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn flow(v: Value) -> Flow {
        serde_json::from_value(v).unwrap()
    }

    fn sample() -> Flow {
        flow(json!({
            "id": "f", "version": 2,
            "nodes": [
                {"id": "in", "type": "service-in", "service": "a", "config": {"transport": "nats", "target": "a.in"}},
                {"id": "x", "type": "action", "service": "a", "action": "x"},
                {"id": "m", "type": "mapping", "config": {"fields": {"k": "$.v"}}},
                {"id": "y", "type": "action", "service": "b", "action": "y"},
                {"id": "c", "type": "condition", "config": {"path": "$.ok", "op": "truthy"}},
                {"id": "t", "type": "timer", "config": {"delay_ms": 1000}},
                {"id": "in2", "type": "service-in", "service": "b", "config": {"transport": "nats", "target": "b.in"}}
            ],
            "edges": [
                {"id": "e1", "from": "in", "to": "x"}, {"id": "e2", "from": "x", "to": "m"},
                {"id": "e3", "from": "m", "to": "y"}, {"id": "e4", "from": "y", "to": "c"},
                {"id": "e5", "from": "c", "to": "t"}, {"id": "e6", "from": "t", "to": "in2"}
            ]
        }))
    }

    #[test]
    fn owners_are_inherited_along_edges() {
        let mut f = sample();
        f.assign_owners();
        let owner = |id: &str| f.node(id).unwrap().service.clone();
        assert_eq!(owner("m"), "a");
        assert_eq!(owner("c"), "b");
        assert_eq!(owner("t"), "");
        assert_eq!(f.services().into_iter().collect::<Vec<_>>(), ["a", "b"]);
        assert!(
            f.structural_issues().is_empty(),
            "{:?}",
            f.structural_issues()
        );
        assert!(f.has_timer());
        assert_eq!(
            f.entry_points().map(|n| n.id.as_str()).collect::<Vec<_>>(),
            ["in"]
        );
    }

    #[test]
    fn structural_problems_are_named() {
        let mut f = sample();
        f.body.edges.push(Edge {
            id: "e7".into(),
            from: "y".into(),
            to: "x".into(),
            mapping: None,
        });
        f.body.edges.push(Edge {
            id: "e8".into(),
            from: "y".into(),
            to: "nope".into(),
            mapping: None,
        });
        f.body.nodes[1].action.clear();
        f.assign_owners();
        let at: Vec<String> = f.structural_issues().into_iter().map(|i| i.at).collect();
        assert!(at.contains(&"edges[e8]".to_owned()), "{at:?}");
        assert!(at.contains(&"nodes[x]".to_owned()), "{at:?}");
        assert!(at.iter().any(|a| a.starts_with("nodes[")), "{at:?}");
    }

    #[test]
    fn misspelt_keys_are_refused() {
        let err = serde_json::from_value::<Flow>(json!({"id": "f", "nodes": [
            {"id": "in", "type": "service-in", "servise": "a"}
        ], "edges": []}))
        .unwrap_err();
        assert!(err.to_string().contains("servise"), "{err}");
    }

    #[test]
    fn envelope_round_trip() {
        let f = sample();
        let back = Flow::from_envelope(&f.to_envelope()).unwrap();
        assert_eq!(back, f);
    }
}
