//! The flow model: what a `FlowEnvelope`'s `body` holds, and the rules both the SDK runtime and the
//! emulator follow when they move a payload through it.
//!
//! The wire contract does not define flow bodies; this is ours (see `docs/flows.md`):
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

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

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

/// What kind of problem a [`FlowIssue`] is; release gives each its own code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowIssueKind {
    /// The graph or a node's settings are malformed.
    Structure,
    /// An id cannot be carried in headers, keys or subjects ([`check_id`]).
    Id,
    /// The flow has more nodes or edges than [`MAX_NODES`] / [`MAX_EDGES`].
    Limit,
    /// A timer is followed by a node the engine cannot resume into.
    TimerResume,
    /// A timer's `delay_ms` or `repeat` is out of range.
    TimerLimit,
    /// An output sends to a subject no flow may send to
    /// ([`check_publish_target`](crate::wire::subject::check_publish_target)).
    Target,
}

/// A structural problem of a flow, with the node or edge it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {message}")]
pub struct FlowIssue {
    /// What kind of problem.
    pub kind: FlowIssueKind,
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
        let targets: HashSet<&str> = self.body.edges.iter().map(|e| e.to.as_str()).collect();
        self.body
            .nodes
            .iter()
            .filter(move |n| n.node_type == NodeType::ServiceIn && !targets.contains(n.id.as_str()))
    }

    /// How many node executions one trigger can owe at most: every node runs once per path
    /// that reaches it (there is no join: each arrival of a fan-in is an execution, and two
    /// parallel edges are two arrivals), a timer's successors once per occurrence. Counted from
    /// every entry point at once, saturating; nodes on a cycle are not counted (a cycle is
    /// refused on its own).
    #[must_use]
    pub fn executions_per_trigger(&self) -> u64 {
        let graph = Graph::new(self);
        let mut reach = vec![0u64; self.body.nodes.len()];
        let mut total = 0u64;
        for i in graph.topological_order() {
            if graph.incoming[i].is_empty() {
                reach[i] = 1;
            }
            total = total.saturating_add(reach[i]);
            let node = &self.body.nodes[i];
            let fires = if node.node_type == NodeType::Timer {
                reach[i].saturating_mul(timer_repeat(node))
            } else {
                reach[i]
            };
            for &e in &graph.outgoing[i] {
                let to = graph.edge_to[e];
                reach[to] = reach[to].saturating_add(fires);
            }
        }
        total
    }

    /// Gives every node without a service the service of the node before it (timers excepted):
    /// the first predecessor, in edge order, that has one. Nodes are visited in topological
    /// order, so a chain of inheriting nodes resolves in one pass: linear in the flow's size.
    pub fn assign_owners(&mut self) {
        let owners: Vec<Option<usize>> = {
            let graph = Graph::new(self);
            let mut owner: Vec<Option<usize>> = vec![None; self.body.nodes.len()];
            for &i in &graph.topological_order() {
                let node = &self.body.nodes[i];
                if node.node_type == NodeType::Timer {
                    continue;
                }
                if !node.service.is_empty() {
                    owner[i] = Some(i);
                    continue;
                }
                owner[i] = graph.incoming[i]
                    .iter()
                    .filter_map(|&e| graph.node_of(&self.body.edges[e].from))
                    .find_map(|p| owner[p]);
            }
            owner
        };
        let services: Vec<String> = owners
            .iter()
            .map(|o| {
                o.map(|i| self.body.nodes[i].service.clone())
                    .unwrap_or_default()
            })
            .collect();
        for (node, service) in self.body.nodes.iter_mut().zip(services) {
            if node.service.is_empty() && node.node_type != NodeType::Timer {
                node.service = service;
            }
        }
    }

    /// Structural problems: bad or repeated ids, dangling edges, missing settings, limits, timer
    /// shapes the engine cannot run, cycles, unowned nodes. Run it after [`Flow::assign_owners`].
    /// Linear in the flow's size (a 10 000-node flow is checked in milliseconds).
    #[must_use]
    pub fn structural_issues(&self) -> Vec<FlowIssue> {
        let mut issues = Vec::new();
        let mut issue = |kind: FlowIssueKind, at: String, message: String| {
            issues.push(FlowIssue { kind, at, message });
        };
        if let Err(e) = check_id(IdKind::Flow, &self.id) {
            issue(FlowIssueKind::Id, "flow".into(), e);
        }
        if self.version < 1 {
            issue(
                FlowIssueKind::Structure,
                "flow".into(),
                format!("version {} is not a positive integer", self.version),
            );
        }
        if self.body.nodes.is_empty() {
            issue(
                FlowIssueKind::Structure,
                "flow".into(),
                "has no nodes".into(),
            );
        }
        for (what, count, max) in [
            ("nodes", self.body.nodes.len(), MAX_NODES),
            ("edges", self.body.edges.len(), MAX_EDGES),
        ] {
            if count > max {
                issue(
                    FlowIssueKind::Limit,
                    "flow".into(),
                    format!("has {count} {what}; at most {max}: split it into several flows"),
                );
            }
        }
        let graph = Graph::new(self);
        let mut seen = HashSet::new();
        for n in &self.body.nodes {
            if let Err(e) = check_id(IdKind::Node, &n.id) {
                issue(
                    FlowIssueKind::Id,
                    format!("nodes[{}]", n.id.escape_debug()),
                    e,
                );
            } else if !seen.insert(n.id.as_str()) {
                issue(
                    FlowIssueKind::Structure,
                    format!("nodes[{}]", n.id),
                    "the id is used twice".into(),
                );
            }
        }
        let mut edge_ids = HashSet::new();
        for e in &self.body.edges {
            if let Err(err) = check_id(IdKind::Edge, &e.id) {
                issue(
                    FlowIssueKind::Id,
                    format!("edges[{}]", e.id.escape_debug()),
                    err,
                );
            } else if !edge_ids.insert(e.id.as_str()) {
                issue(
                    FlowIssueKind::Structure,
                    format!("edges[{}]", e.id),
                    "the id is used twice".into(),
                );
            }
            for end in [&e.from, &e.to] {
                if graph.node_of(end).is_none() {
                    issue(
                        FlowIssueKind::Structure,
                        format!("edges[{}]", e.id.escape_debug()),
                        format!(
                            "refers to node {:?}, which the flow does not have",
                            end.escape_debug().to_string()
                        ),
                    );
                }
            }
        }
        if !self.body.nodes.is_empty() && self.entry_points().next().is_none() {
            issue(
                FlowIssueKind::Structure,
                "flow".into(),
                "has no entry point (a service-in node with no edge into it)".into(),
            );
        }
        for (i, n) in self.body.nodes.iter().enumerate() {
            let at = format!("nodes[{}]", n.id.escape_debug());
            match n.node_type {
                NodeType::ServiceIn | NodeType::Action if n.service.is_empty() => {
                    issue(
                        FlowIssueKind::Structure,
                        at.clone(),
                        format!("a {} node must name its service", n.node_type),
                    );
                }
                NodeType::Mapping | NodeType::Condition | NodeType::Lookup | NodeType::Output
                    if n.service.is_empty() =>
                {
                    let after_timer = graph.incoming[i]
                        .iter()
                        .filter_map(|&e| graph.node_of(&self.body.edges[e].from))
                        .any(|p| self.body.nodes[p].node_type == NodeType::Timer);
                    if !after_timer {
                        issue(
                            FlowIssueKind::Structure,
                            at.clone(),
                            "belongs to no service: no node before it has one; put a service-in first, or name its service"
                                .into(),
                        );
                    }
                }
                _ => {}
            }
            match n.node_type {
                NodeType::Action if n.action.is_empty() => {
                    issue(
                        FlowIssueKind::Structure,
                        at,
                        "an action node must name its action".into(),
                    );
                }
                NodeType::Timer => {
                    self.timer_issues(n, &graph, i, &mut issue);
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
                            FlowIssueKind::Structure,
                            at,
                            "an output needs config.transport (nats or http) and config.target"
                                .into(),
                        );
                    } else if transport == "nats"
                        && let Err(e) = crate::wire::subject::check_output_target(target)
                    {
                        issue(FlowIssueKind::Target, at, e.to_string());
                    }
                }
                NodeType::Lookup if n.config.get("lookup").and_then(Value::as_str).is_none() => {
                    issue(
                        FlowIssueKind::Structure,
                        at,
                        "a lookup node needs config.lookup, the name of a runtime lookup".into(),
                    );
                }
                _ => {}
            }
        }
        if let Some(cycle_at) = graph.find_cycle() {
            issue(
                FlowIssueKind::Structure,
                format!("nodes[{}]", self.body.nodes[cycle_at].id),
                "is on a cycle; flows must be acyclic".into(),
            );
        }
        issues
    }

    /// A timer's settings and successors.
    fn timer_issues(
        &self,
        n: &Node,
        graph: &Graph<'_>,
        i: usize,
        issue: &mut impl FnMut(FlowIssueKind, String, String),
    ) {
        let at = format!("nodes[{}]", n.id.escape_debug());
        match n.config.get("delay_ms").map(Value::as_u64) {
            None | Some(None) => issue(
                FlowIssueKind::Structure,
                at.clone(),
                "a timer needs config.delay_ms, a non-negative integer".into(),
            ),
            Some(Some(d)) if d > MAX_TIMER_DELAY_MS => issue(
                FlowIssueKind::TimerLimit,
                at.clone(),
                format!(
                    "config.delay_ms {d} is above the limit of {MAX_TIMER_DELAY_MS} (ten years)"
                ),
            ),
            Some(Some(_)) => {}
        }
        match n.config.get("repeat") {
            None => {}
            Some(v) => match v.as_u64() {
                Some(r @ 1..=MAX_TIMER_REPEAT) => {
                    if r > 1 && timer_delay_ms(n) == Some(0) {
                        issue(
                            FlowIssueKind::TimerLimit,
                            at.clone(),
                            format!(
                                "a timer that repeats ({r} occurrences) needs config.delay_ms above 0: every occurrence would be due at once"
                            ),
                        );
                    }
                }
                _ => issue(
                    FlowIssueKind::TimerLimit,
                    at.clone(),
                    format!("config.repeat {v} is not a whole number from 1 to {MAX_TIMER_REPEAT}"),
                ),
            },
        }
        for &e in &graph.outgoing[i] {
            let Some(next) = graph.node_of(&self.body.edges[e].to) else {
                continue;
            };
            let next = &self.body.nodes[next];
            if !matches!(next.node_type, NodeType::ServiceIn | NodeType::Timer) {
                issue(
                    FlowIssueKind::TimerResume,
                    at.clone(),
                    format!(
                        "a timer resumes into a service-in node (or another timer); {:?} is a {}: put a service-in of the service that should go on between them",
                        next.id, next.node_type
                    ),
                );
            }
        }
    }
}

/// The most nodes a flow may have.
pub const MAX_NODES: usize = 20_000;
/// The most edges a flow may have.
pub const MAX_EDGES: usize = 40_000;
/// The longest id (of a flow, node or edge), in bytes.
pub const MAX_ID_LEN: usize = 128;
/// The most node executions one trigger may owe ([`Flow::executions_per_trigger`]): a release
/// refuses a flow above it (parallel edges, or fan-ins without a join, multiplying along a path:
/// thirty-one pairs of parallel edges owe 2^31).
pub const MAX_EXECUTIONS_PER_TRIGGER: u64 = 100_000;
/// The most occurrences of a repeating timer.
pub const MAX_TIMER_REPEAT: u64 = 10_000;
/// The longest timer delay: ten years, in milliseconds.
pub const MAX_TIMER_DELAY_MS: u64 = 10 * 365 * 24 * 60 * 60 * 1000;

/// What an id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// A flow id: it becomes a subject token (`triggers.v2.flow.events.<flow_id>`).
    Flow,
    /// A node id: it travels in headers (`X-Triggers-Source-Node-Id`) and idempotency keys.
    Node,
    /// An edge id: it travels in the Durable Timer context and in idempotency keys.
    Edge,
    /// A run id: it travels in headers (`X-Triggers-Flow-Run-Id`) and every key of the run.
    Run,
}

impl IdKind {
    fn as_str(self) -> &'static str {
        match self {
            IdKind::Flow => "flow id",
            IdKind::Node => "node id",
            IdKind::Edge => "edge id",
            IdKind::Run => "run id",
        }
    }
}

/// Checks an id: 1 to [`MAX_ID_LEN`] characters, each an ASCII letter or digit, `_`, `-`, or
/// (but in a flow id, which is a subject token) `.`. Ids travel in header values, idempotency
/// keys and subjects: a character outside this set could not be carried by all of them.
///
/// # Errors
/// A message naming the id and what is wrong with it.
pub fn check_id(kind: IdKind, id: &str) -> Result<(), String> {
    let what = kind.as_str();
    if id.is_empty() {
        return Err(format!("the {what} is empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(format!(
            "the {what} {:?}… is {} bytes long; at most {MAX_ID_LEN}",
            id.chars().take(32).collect::<String>(),
            id.len()
        ));
    }
    let allowed = |c: char| {
        c.is_ascii_alphanumeric() || c == '_' || c == '-' || (c == '.' && kind != IdKind::Flow)
    };
    if let Some(c) = id.chars().find(|c| !allowed(*c)) {
        return Err(format!(
            "the {what} {:?} contains {c:?}; use letters, digits, '_', '-'{}",
            id.escape_debug().to_string(),
            if kind == IdKind::Flow { "" } else { " and '.'" }
        ));
    }
    Ok(())
}

/// An index over a flow's graph, built once in linear time: node positions by id, and the edges
/// out of and into each node, in edge order.
pub(crate) struct Graph<'a> {
    by_id: HashMap<&'a str, usize>,
    outgoing: Vec<Vec<usize>>,
    incoming: Vec<Vec<usize>>,
    /// The position of each edge's `to` node (unused for dangling edges, which no list holds).
    edge_to: Vec<usize>,
}

impl<'a> Graph<'a> {
    pub(crate) fn new(flow: &'a Flow) -> Self {
        let mut by_id = HashMap::with_capacity(flow.body.nodes.len());
        for (i, n) in flow.body.nodes.iter().enumerate() {
            by_id.entry(n.id.as_str()).or_insert(i);
        }
        let mut outgoing = vec![Vec::new(); flow.body.nodes.len()];
        let mut incoming = vec![Vec::new(); flow.body.nodes.len()];
        let mut edge_to = vec![usize::MAX; flow.body.edges.len()];
        for (e, edge) in flow.body.edges.iter().enumerate() {
            if let (Some(&from), Some(&to)) =
                (by_id.get(edge.from.as_str()), by_id.get(edge.to.as_str()))
            {
                outgoing[from].push(e);
                incoming[to].push(e);
                edge_to[e] = to;
            }
        }
        Graph {
            by_id,
            outgoing,
            incoming,
            edge_to,
        }
    }

    pub(crate) fn node_of(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }

    /// Kahn's algorithm over node positions; nodes on or behind a cycle are left out.
    pub(crate) fn topological_order(&self) -> Vec<usize> {
        let mut indegree: Vec<usize> = self.incoming.iter().map(Vec::len).collect();
        let mut ready: VecDeque<usize> = indegree
            .iter()
            .enumerate()
            .filter(|(_, d)| **d == 0)
            .map(|(i, _)| i)
            .collect();
        let mut order = Vec::with_capacity(indegree.len());
        while let Some(i) = ready.pop_front() {
            order.push(i);
            for &e in &self.outgoing[i] {
                let to = self.edge_to[e];
                indegree[to] -= 1;
                if indegree[to] == 0 {
                    ready.push_back(to);
                }
            }
        }
        order
    }

    /// A node on or behind a cycle, if there is one.
    fn find_cycle(&self) -> Option<usize> {
        let order = self.topological_order();
        if order.len() == self.outgoing.len() {
            return None;
        }
        let mut placed = vec![false; self.outgoing.len()];
        for i in order {
            placed[i] = true;
        }
        placed.iter().position(|p| !p)
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

    /// A long chain of inheriting nodes: owners resolve in one pass (a cubic algorithm would not
    /// finish a 10 000-node flow in a test's lifetime).
    fn chain(n: usize) -> Flow {
        let mut nodes = vec![json!({"id": "in", "type": "service-in", "service": "a"})];
        let mut edges = Vec::new();
        let mut prev = "in".to_owned();
        for i in 0..n {
            let id = format!("m{i}");
            nodes.push(json!({"id": id, "type": "mapping", "config": {"fields": {"x": "$"}}}));
            edges.push(json!({"id": format!("e{i}"), "from": prev, "to": id}));
            prev = id;
        }
        flow(json!({"id": "big", "nodes": nodes, "edges": edges}))
    }

    #[test]
    fn a_ten_thousand_node_flow_is_checked_in_one_pass() {
        let mut f = chain(10_000);
        f.assign_owners();
        assert!(f.body.nodes.iter().all(|n| n.service == "a"));
        assert!(f.structural_issues().is_empty());
        let mut too_big = chain(MAX_NODES);
        too_big.assign_owners();
        let issues = too_big.structural_issues();
        assert_eq!(issues.len(), 1, "{issues:?}");
        assert_eq!(issues[0].kind, FlowIssueKind::Limit);
    }

    #[test]
    fn ids_headers_and_keys_cannot_carry_are_refused() {
        for (kind, id) in [
            (IdKind::Node, "charge\nnow"),
            (IdKind::Node, ""),
            (IdKind::Edge, "e 1"),
            (IdKind::Flow, "f.x"),
            (IdKind::Node, "x>y"),
            (IdKind::Run, "r:1"),
        ] {
            assert!(check_id(kind, id).is_err(), "{kind:?} {id:?}");
        }
        assert!(check_id(IdKind::Node, &"n".repeat(MAX_ID_LEN + 1)).is_err());
        for (kind, id) in [
            (IdKind::Node, "charge.v2"),
            (IdKind::Flow, "order-flow_2"),
            (IdKind::Run, "run-0123abcd"),
        ] {
            assert_eq!(check_id(kind, id), Ok(()), "{kind:?} {id:?}");
        }
    }

    #[test]
    fn timer_shapes_are_classified() {
        let mut f = flow(json!({"id": "f", "nodes": [
            {"id": "in", "type": "service-in", "service": "a"},
            {"id": "t", "type": "timer", "config": {"delay_ms": 5}},
            {"id": "t2", "type": "timer", "config": {"delay_ms": 5, "repeat": 0}},
            {"id": "x", "type": "action", "service": "a", "action": "x"},
            {"id": "m", "type": "mapping", "config": {"fields": {}}}
        ], "edges": [
            {"id": "e1", "from": "in", "to": "t"}, {"id": "e2", "from": "t", "to": "t2"},
            {"id": "e3", "from": "t2", "to": "x"}, {"id": "e4", "from": "t", "to": "m"}
        ]}));
        f.assign_owners();
        let kinds: Vec<(String, FlowIssueKind)> = f
            .structural_issues()
            .into_iter()
            .map(|i| (i.at, i.kind))
            .collect();
        assert!(
            kinds.contains(&("nodes[t2]".into(), FlowIssueKind::TimerResume)),
            "{kinds:?}"
        );
        assert!(
            kinds.contains(&("nodes[t2]".into(), FlowIssueKind::TimerLimit)),
            "{kinds:?}"
        );
        assert!(
            kinds.contains(&("nodes[t]".into(), FlowIssueKind::TimerResume)),
            "{kinds:?}"
        );
        // A timer into a timer is a shape the engine runs.
        assert!(
            !kinds
                .iter()
                .any(|(at, k)| at == "nodes[t]" && *k == FlowIssueKind::Structure)
        );
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
