//! Flow coverage: which nodes of each deployed flow ran, which edges were taken, which outcomes
//! each node showed, and how each condition went, over every scenario of a run
//! (`triggers-lab run --coverage FILE`).
//!
//! Coverage is read from what the emulator observed, never from the services: the completion
//! events of each run (its timeline), the engine's own steps (trigger, timer armed, timer fired)
//! and the DLQ entries, so a service in any language is measured the same way as a scripted one.
//!
//! **How edges are inferred.** The platform hands a node's output to *every* successor when the
//! node succeeds (a condition that stops the path reports `skipped`, and nothing follows it). So
//! in one run the edge `a -> b` is taken `min(s, r)` times, where `s` is how often `a` passed its
//! output on (`succeeded`; for the entry, `triggered`; for a timer, `fired`) and `r` how often `b`
//! was reached (any finishing event of `b`, `skipped` and `failed` included, a dead-lettered
//! delivery to it, or a timer armed). Limits: a delivery that was lost leaves `b` unreached and
//! the edge counts as not taken; an event the emulator did not see (a run evicted beyond
//! `max_runs`, a slow consumer's dropped messages) is not counted; when two edges lead from the
//! same node to the same successor, both count. An action's DLQ entries (which tell a timeout
//! and a panic apart) go to the action nodes of that service and action that failed in the run.
//!
//! The JSON format is versioned (`"format": 1`) and documented field by field in
//! `docs/scenarios.md`, section Coverage.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use triggers_emulator::Emulator;
use triggers_emulator::recorder::{Record, RecordKind, Run};
use triggers_sdk::flow::{Flow, NodeType};
use triggers_sdk::wire::shapes::dlq_kind;

use crate::error::ReportError;

/// The version of the JSON format [`Coverage::to_json`] writes.
pub const FORMAT: u32 = 1;

/// Coverage collected while scenarios run: [`crate::RunOptions::coverage`].
pub type CoverageCollector = Arc<Mutex<Coverage>>;

/// Coverage of every flow observed, merged by flow id and version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    /// [`FORMAT`].
    pub format: u32,
    /// One entry per flow id and version, sorted by both.
    pub flows: Vec<FlowCoverage>,
}

impl Default for Coverage {
    fn default() -> Self {
        Coverage {
            format: FORMAT,
            flows: Vec::new(),
        }
    }
}

/// One flow version's coverage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowCoverage {
    /// The flow id.
    pub flow_id: String,
    /// Its version.
    pub version: i64,
    /// Runs of this version observed.
    pub runs: u64,
    /// Nodes that ran in at least one run.
    pub nodes_covered: usize,
    /// Nodes in the flow.
    pub nodes_total: usize,
    /// Edges taken in at least one run.
    pub edges_covered: usize,
    /// Edges in the flow.
    pub edges_total: usize,
    /// Every node, in the flow's order.
    pub nodes: Vec<NodeCoverage>,
    /// Every edge, in the flow's order.
    pub edges: Vec<EdgeCoverage>,
}

/// One node's coverage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCoverage {
    /// The node id.
    pub id: String,
    /// Its type (`service-in`, `action`, `condition`...).
    #[serde(rename = "type")]
    pub node_type: String,
    /// Its service (empty for timers).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service: String,
    /// Its action (action nodes).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub action: String,
    /// Runs in which it ran (a dead-lettered delivery alone is not running).
    pub runs: u64,
    /// How often each outcome was seen.
    pub outcomes: Outcomes,
    /// A condition node's results; absent for other types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<ConditionCoverage>,
}

impl NodeCoverage {
    /// Whether it ran at all.
    #[must_use]
    pub fn covered(&self) -> bool {
        self.runs > 0
    }
}

/// Outcome counts of a node, over every run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcomes {
    /// `succeeded` events (for the entry: triggers; for a timer: occurrences fired).
    pub succeeded: u64,
    /// `retrying` events.
    pub retrying: u64,
    /// `failed` events.
    pub failed: u64,
    /// Failures dead-lettered as `action_timeout`.
    pub timed_out: u64,
    /// Failures dead-lettered as `action_panicked`.
    pub panicked: u64,
    /// `skipped` events (a condition that stopped the path).
    pub skipped: u64,
    /// Inputs dead-lettered: an action's DLQ entry, or a delivery to the node refused.
    pub dead_lettered: u64,
}

/// How a condition went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConditionCoverage {
    /// Times it passed the payload on.
    pub passed: u64,
    /// Times it stopped the path.
    pub stopped: u64,
}

/// One edge's coverage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeCoverage {
    /// The edge id.
    pub id: String,
    /// The upstream node.
    pub from: String,
    /// The downstream node.
    pub to: String,
    /// Times taken, over every run (inferred: see the module docs).
    pub taken: u64,
}

impl FlowCoverage {
    fn new(flow: &Flow) -> Self {
        let mut fc = FlowCoverage {
            flow_id: flow.id.clone(),
            version: flow.version,
            runs: 0,
            nodes_covered: 0,
            nodes_total: 0,
            edges_covered: 0,
            edges_total: 0,
            nodes: flow
                .body
                .nodes
                .iter()
                .map(|n| NodeCoverage {
                    id: n.id.clone(),
                    node_type: n.node_type.as_str().to_owned(),
                    service: n.service.clone(),
                    action: n.action.clone(),
                    runs: 0,
                    outcomes: Outcomes::default(),
                    condition: (n.node_type == NodeType::Condition)
                        .then(ConditionCoverage::default),
                })
                .collect(),
            edges: flow
                .body
                .edges
                .iter()
                .map(|e| EdgeCoverage {
                    id: e.id.clone(),
                    from: e.from.clone(),
                    to: e.to.clone(),
                    taken: 0,
                })
                .collect(),
        };
        fc.recount();
        fc
    }

    fn recount(&mut self) {
        self.nodes_total = self.nodes.len();
        self.nodes_covered = self.nodes.iter().filter(|n| n.covered()).count();
        self.edges_total = self.edges.len();
        self.edges_covered = self.edges.iter().filter(|e| e.taken > 0).count();
    }

    /// `shop v2`.
    #[must_use]
    pub fn name(&self) -> String {
        format!("{} v{}", self.flow_id, self.version)
    }

    /// Nodes that never ran.
    pub fn never_ran(&self) -> impl Iterator<Item = &NodeCoverage> {
        self.nodes.iter().filter(|n| !n.covered())
    }

    /// Edges never taken.
    pub fn never_taken(&self) -> impl Iterator<Item = &EdgeCoverage> {
        self.edges.iter().filter(|e| e.taken == 0)
    }

    /// One line: `shop v2: nodes 7/9, edges 8/11; never ran: refund, notify; edges never
    /// taken: a->b`.
    #[must_use]
    pub fn summary_line(&self) -> String {
        let mut line = format!(
            "{}: nodes {}/{}, edges {}/{} ({} run{})",
            self.name(),
            self.nodes_covered,
            self.nodes_total,
            self.edges_covered,
            self.edges_total,
            self.runs,
            if self.runs == 1 { "" } else { "s" }
        );
        let never: Vec<_> = self.never_ran().map(|n| n.id.as_str()).collect();
        if !never.is_empty() {
            let _ = write!(line, "; never ran: {}", never.join(", "));
        }
        let edges: Vec<_> = self
            .never_taken()
            .map(|e| format!("{}->{}", e.from, e.to))
            .collect();
        if !edges.is_empty() {
            let _ = write!(line, "; edges never taken: {}", edges.join(", "));
        }
        line
    }

    /// Adds one run of this version.
    fn observe_run(&mut self, flow: &Flow, run: &Run, dlq: &[&DlqSeen]) {
        self.runs += 1;
        // Per node in this run: how often it passed its output on, and how often it was reached.
        let mut passed_on: BTreeMap<String, u64> = BTreeMap::new();
        let mut reached: BTreeMap<String, u64> = BTreeMap::new();
        let mut ran: BTreeMap<String, bool> = BTreeMap::new();
        for node in &mut self.nodes {
            let mut here = Outcomes::default();
            let mut armed = 0;
            let mut any_run = false;
            for e in run.node_entries(&node.id) {
                match e.status.as_str() {
                    "succeeded" | "triggered" | "fired" => here.succeeded += 1,
                    "retrying" => here.retrying += 1,
                    "failed" => here.failed += 1,
                    "skipped" => here.skipped += 1,
                    "dead_lettered" => here.dead_lettered += 1,
                    "armed" => armed += 1,
                    _ => {}
                }
                any_run |= e.status != "dead_lettered";
            }
            let id = node.id.clone();
            reached.insert(
                id.clone(),
                here.succeeded + here.failed + here.skipped + here.dead_lettered + armed,
            );
            // An action's DLQ entry follows its `failed` event: only a node that failed here owns
            // one (two nodes of the same action that both failed each count both entries).
            if node.node_type == NodeType::Action.as_str() && here.failed > 0 {
                for d in dlq
                    .iter()
                    .filter(|d| d.service == node.service && d.action == node.action)
                {
                    here.dead_lettered += 1;
                    match d.kind.as_str() {
                        dlq_kind::ACTION_TIMEOUT => here.timed_out += 1,
                        dlq_kind::ACTION_PANICKED => here.panicked += 1,
                        _ => {}
                    }
                }
            }
            passed_on.insert(id.clone(), here.succeeded);
            ran.insert(id, any_run);
            add(&mut node.outcomes, &here);
            if let Some(c) = &mut node.condition {
                c.passed += here.succeeded;
                c.stopped += here.skipped;
            }
        }
        // A timer's resume service-in sends no event of its own: it ran when the timer fired.
        for node in flow
            .body
            .nodes
            .iter()
            .filter(|n| n.node_type == NodeType::ServiceIn)
        {
            if ran.get(node.id.as_str()).copied().unwrap_or(false) {
                continue;
            }
            let fired: u64 = flow
                .predecessors(&node.id)
                .filter(|(_, p)| p.node_type == NodeType::Timer)
                .map(|(_, p)| passed_on.get(p.id.as_str()).copied().unwrap_or(0))
                .sum();
            if fired > 0 {
                ran.insert(node.id.clone(), true);
                passed_on.insert(node.id.clone(), fired);
                reached.insert(node.id.clone(), fired);
                if let Some(n) = self.nodes.iter_mut().find(|n| n.id == node.id) {
                    n.outcomes.succeeded += fired;
                }
            }
        }
        for node in &mut self.nodes {
            if ran.get(node.id.as_str()).copied().unwrap_or(false) {
                node.runs += 1;
            }
        }
        for edge in &mut self.edges {
            let from = passed_on.get(edge.from.as_str()).copied().unwrap_or(0);
            let to = reached.get(edge.to.as_str()).copied().unwrap_or(0);
            edge.taken += from.min(to);
        }
        self.recount();
    }

    fn merge(&mut self, other: &FlowCoverage) {
        self.runs += other.runs;
        for o in &other.nodes {
            match self.nodes.iter_mut().find(|n| n.id == o.id) {
                Some(n) => {
                    n.runs += o.runs;
                    add(&mut n.outcomes, &o.outcomes);
                    if let (Some(c), Some(oc)) = (&mut n.condition, &o.condition) {
                        c.passed += oc.passed;
                        c.stopped += oc.stopped;
                    }
                }
                None => self.nodes.push(o.clone()),
            }
        }
        for o in &other.edges {
            match self.edges.iter_mut().find(|e| e.id == o.id) {
                Some(e) => e.taken += o.taken,
                None => self.edges.push(o.clone()),
            }
        }
        self.recount();
    }
}

fn add(to: &mut Outcomes, from: &Outcomes) {
    to.succeeded += from.succeeded;
    to.retrying += from.retrying;
    to.failed += from.failed;
    to.timed_out += from.timed_out;
    to.panicked += from.panicked;
    to.skipped += from.skipped;
    to.dead_lettered += from.dead_lettered;
}

/// An action's DLQ entry: `triggers.v2.dlq.<service>.<action>`.
struct DlqSeen {
    run_id: String,
    service: String,
    action: String,
    kind: String,
}

fn action_dlq(record: &Record) -> Option<DlqSeen> {
    let RecordKind::Dlq {
        entry: Some(entry), ..
    } = &record.kind
    else {
        return None;
    };
    if !matches!(
        entry.kind.as_str(),
        dlq_kind::ACTION_FAILED | dlq_kind::ACTION_TIMEOUT | dlq_kind::ACTION_PANICKED
    ) {
        return None;
    }
    let rest = record.subject.strip_prefix("triggers.v2.dlq.")?;
    let (service, action) = rest.split_once('.')?;
    Some(DlqSeen {
        run_id: entry.envelope.flow_run_id.clone(),
        service: service.to_owned(),
        action: action.to_owned(),
        kind: entry.kind.clone(),
    })
}

impl Coverage {
    /// Empty.
    #[must_use]
    pub fn new() -> Self {
        Coverage::default()
    }

    /// Adds what `emulator` observed: every flow deployed (so a flow that never ran shows with
    /// nothing covered), and every run it holds, with their DLQ entries.
    pub fn observe_emulator(&mut self, emulator: &Emulator) {
        let flows: Vec<Flow> = emulator.flows().into_values().collect();
        self.observe(&flows, &emulator.runs(), &emulator.dlq());
    }

    /// Adds `flows` (deployed, perhaps never run), then `runs` (each of the flow version it
    /// followed; runs whose flow is unknown are left out), with the DLQ records of the
    /// emulator.
    pub fn observe(&mut self, flows: &[Flow], runs: &[Run], dlq: &[Record]) {
        let mut fresh: Vec<FlowCoverage> = Vec::new();
        let entry = |fresh: &mut Vec<FlowCoverage>, flow: &Flow| -> usize {
            match fresh
                .iter()
                .position(|f| f.flow_id == flow.id && f.version == flow.version)
            {
                Some(i) => i,
                None => {
                    fresh.push(FlowCoverage::new(flow));
                    fresh.len() - 1
                }
            }
        };
        for flow in flows {
            entry(&mut fresh, flow);
        }
        let dlq: Vec<DlqSeen> = dlq.iter().filter_map(action_dlq).collect();
        for run in runs {
            let Some(flow) = run.flow() else {
                continue;
            };
            let i = entry(&mut fresh, flow);
            let own: Vec<&DlqSeen> = dlq.iter().filter(|d| d.run_id == run.id).collect();
            fresh[i].observe_run(flow, run, &own);
        }
        self.merge(&Coverage {
            format: FORMAT,
            flows: fresh,
        });
    }

    /// Adds another coverage: the same flow id and version are merged, counts summed.
    pub fn merge(&mut self, other: &Coverage) {
        for o in &other.flows {
            match self
                .flows
                .iter_mut()
                .find(|f| f.flow_id == o.flow_id && f.version == o.version)
            {
                Some(f) => f.merge(o),
                None => self.flows.push(o.clone()),
            }
        }
        self.flows
            .sort_by(|a, b| (&a.flow_id, a.version).cmp(&(&b.flow_id, b.version)));
    }

    /// The flow version, if observed.
    #[must_use]
    pub fn flow(&self, flow_id: &str, version: i64) -> Option<&FlowCoverage> {
        self.flows
            .iter()
            .find(|f| f.flow_id == flow_id && f.version == version)
    }

    /// The JSON document (`"format": 1`), indented.
    ///
    /// # Errors
    /// When serialising fails (it does not for this type; the error is the writer's).
    pub fn to_json(&self) -> Result<String, ReportError> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// What the terminal shows at the end of a run: a line per flow version, then the totals.
    #[must_use]
    pub fn summary(&self) -> String {
        let mut text = String::new();
        for f in &self.flows {
            let _ = writeln!(text, "  {}", f.summary_line());
        }
        let (nc, nt, ec, et) = self.totals();
        let _ = writeln!(
            text,
            "coverage: {} flow version{}, nodes {nc}/{nt} ({}), edges {ec}/{et} ({})",
            self.flows.len(),
            if self.flows.len() == 1 { "" } else { "s" },
            percent(nc, nt),
            percent(ec, et)
        );
        text
    }

    /// Nodes covered, nodes, edges covered, edges: over every flow version.
    #[must_use]
    pub fn totals(&self) -> (usize, usize, usize, usize) {
        self.flows.iter().fold((0, 0, 0, 0), |(a, b, c, d), f| {
            (
                a + f.nodes_covered,
                b + f.nodes_total,
                c + f.edges_covered,
                d + f.edges_total,
            )
        })
    }

    /// A Markdown summary for CI pages: a table of flow versions, then the conditions and what
    /// never ran.
    #[must_use]
    pub fn to_markdown(&self) -> String {
        let mut md = String::from("## Flow coverage\n\n");
        let (nc, nt, ec, et) = self.totals();
        let _ = writeln!(
            md,
            "{} flow version{}: nodes {nc}/{nt} ({}), edges {ec}/{et} ({}).\n",
            self.flows.len(),
            if self.flows.len() == 1 { "" } else { "s" },
            percent(nc, nt),
            percent(ec, et)
        );
        md.push_str("| flow | version | runs | nodes | edges | never ran | edges never taken |\n");
        md.push_str("|---|---:|---:|---:|---:|---|---|\n");
        let code = |items: Vec<String>| {
            if items.is_empty() {
                "–".to_owned()
            } else {
                items
                    .iter()
                    .map(|i| format!("`{i}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        for f in &self.flows {
            let _ = writeln!(
                md,
                "| `{}` | {} | {} | {}/{} ({}) | {}/{} ({}) | {} | {} |",
                f.flow_id,
                f.version,
                f.runs,
                f.nodes_covered,
                f.nodes_total,
                percent(f.nodes_covered, f.nodes_total),
                f.edges_covered,
                f.edges_total,
                percent(f.edges_covered, f.edges_total),
                code(f.never_ran().map(|n| n.id.clone()).collect()),
                code(
                    f.never_taken()
                        .map(|e| format!("{}->{}", e.from, e.to))
                        .collect()
                ),
            );
        }
        let conditions: Vec<_> = self
            .flows
            .iter()
            .flat_map(|f| {
                f.nodes
                    .iter()
                    .filter_map(move |n| n.condition.map(|c| (f, n, c)))
            })
            .collect();
        if !conditions.is_empty() {
            md.push_str("\n### Conditions\n\n| flow | condition | passed | stopped | both ways |\n|---|---|---:|---:|---|\n");
            for (f, n, c) in conditions {
                let _ = writeln!(
                    md,
                    "| `{}` | `{}` | {} | {} | {} |",
                    f.name(),
                    n.id,
                    c.passed,
                    c.stopped,
                    if c.passed > 0 && c.stopped > 0 {
                        "yes"
                    } else {
                        "**no**"
                    }
                );
            }
        }
        md
    }
}

fn percent(covered: usize, total: usize) -> String {
    if total == 0 {
        return "–".into();
    }
    format!("{:.0} %", covered as f64 * 100.0 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow() -> Flow {
        serde_json::from_value(serde_json::json!({
            "id": "shop", "version": 2,
            "nodes": [
                {"id": "in", "type": "service-in", "service": "shop"},
                {"id": "paid", "type": "condition", "service": "shop", "config": {"path": "$.paid", "op": "eq", "value": true}},
                {"id": "ship", "type": "action", "service": "shop", "action": "ship"}
            ],
            "edges": [
                {"id": "e1", "from": "in", "to": "paid"},
                {"id": "e2", "from": "paid", "to": "ship"}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn a_flow_never_run_is_listed_with_nothing_covered_and_merges_by_version() {
        let mut c = Coverage::new();
        c.observe(&[flow()], &[], &[]);
        c.observe(&[flow()], &[], &[]);
        assert_eq!(c.flows.len(), 1);
        let f = c.flow("shop", 2).unwrap();
        assert_eq!((f.nodes_covered, f.nodes_total), (0, 3));
        assert_eq!((f.edges_covered, f.edges_total), (0, 2));
        assert_eq!(
            f.summary_line(),
            "shop v2: nodes 0/3, edges 0/2 (0 runs); never ran: in, paid, ship; edges never taken: in->paid, paid->ship"
        );
        assert!(c.to_json().unwrap().contains("\"format\": 1"));
        assert!(c.to_markdown().contains("| `paid` | 0 | 0 | **no** |"));
    }
}
