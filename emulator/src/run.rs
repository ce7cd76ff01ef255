//! Run tracking: each run's progress through its flow, followed from completion events alone, so it
//! works for an SDK in any language.
//!
//! The model counts arrivals. A node is *reached* once per delivery that leads to it (a trigger,
//! a hop, a timer occurrence, each branch of a fan-out, each path of a fan-in); each reach is one
//! pending arrival, and each `succeeded`, `skipped` or `failed` event of the node settles one. So
//! a repeating timer that resumes three times expects the nodes after it three times, and a run
//! settles only when every arrival has been accounted for: a delivery that was lost leaves its
//! node pending, and the run never passes for succeeded.
//!
//! A completion nothing had reached is *unexpected*: a duplicate execution (a redelivery that ran
//! a node again) or an event for a node the flow did not route to. It is kept on the run and does
//! not open the paths after the node.
//!
//! A DLQ entry that says a delivery was never run (the receiver refused it: `invalid_json`,
//! `unknown_flow`...; or the sender could not hand it over: `routing_failed`) fails the nodes it
//! was for, so the run settles as failed rather than waiting for events that will not come.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use triggers_sdk::flow::{Flow, Node, NodeType};
use triggers_sdk::wire::shapes::{dlq_kind, status};
use triggers_sdk::wire::subject::FallbackKind;
use triggers_sdk::wire::{CompletionEvent, GoTime};

use crate::recorder::Body;
use crate::timeline::EventSteps;

/// Timeline entries kept per run; later ones are counted in [`Run::timeline_dropped`].
pub const MAX_TIMELINE: usize = 10_000;
/// The node id of the timeline step that records a cancel: not a node (no node id has
/// parentheses), the run as a whole.
pub const CANCEL_STEP: &str = "(run)";
/// Unexpected completions kept per run.
const MAX_UNEXPECTED: usize = 100;

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Some node is pending.
    Running,
    /// Nothing is pending but a timer is armed.
    Waiting,
    /// Every path ended and none failed.
    Succeeded,
    /// Every path ended and some node failed.
    Failed,
    /// Cancelled by hand ([`crate::Emulator::cancel`]): what it still owed was dropped, and
    /// later events are recorded on its timeline without reopening it.
    Cancelled,
}

impl RunStatus {
    /// The status of a run with nodes `pending`, timers armed, and nodes that `failed`: running
    /// while anything is pending, waiting while only a timer is, then settled.
    #[must_use]
    pub fn of(pending: bool, timers_armed: bool, failed: bool) -> Self {
        match (pending, timers_armed, failed) {
            (true, _, _) => RunStatus::Running,
            (false, true, _) => RunStatus::Waiting,
            (false, false, false) => RunStatus::Succeeded,
            (false, false, true) => RunStatus::Failed,
        }
    }

    /// Whether the run has ended.
    #[must_use]
    pub fn is_settled(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled
        )
    }

    /// The status as a word, as the JSON has it: `running`, `waiting`, `succeeded`, `failed`,
    /// `cancelled`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

/// One step of a run's timeline: a node's completion event, or the engine's own doing.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimelineEntry {
    /// The record it comes from.
    pub seq: u64,
    /// The node.
    pub node_id: String,
    /// Its type.
    pub node_type: String,
    /// The service that ran it (`engine` for triggers and timers).
    pub service: String,
    /// `succeeded`, `retrying`, `failed`, `skipped`, or the engine's `triggered`, `armed`,
    /// `fired`, `dead_lettered`.
    pub status: String,
    /// When it started.
    pub started_at: GoTime,
    /// When it finished.
    pub finished_at: GoTime,
    /// The error, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// How many failed attempts of this node came before this entry.
    pub retries: u32,
}

impl std::fmt::Display for TimelineEntry {
    /// One line: `#<seq> <node> (<type> on <service>): <status>[: <error>]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "#{} {} ({} on {}): {}",
            self.seq, self.node_id, self.node_type, self.service, self.status
        )?;
        if !self.error.is_empty() {
            write!(f, ": {}", self.error)?;
        }
        Ok(())
    }
}

/// An armed timer of a run: one arming (its own fence), at its next occurrence.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArmedTimer {
    /// The timer node.
    pub node_id: String,
    /// When it is due, on the emulator's clock.
    pub due: GoTime,
    /// Which occurrence will fire next (1-based).
    pub occurrence: u64,
    /// How many occurrences in all.
    pub repeat: u64,
    /// The arming's fence: unique to this arming in the emulator.
    pub fence: u64,
    /// Only these resume edges (a delivery that failed and is tried again); empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edges: Vec<String>,
    /// Failed attempts to deliver this occurrence so far.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero64(n: &u64) -> bool {
    *n == 0
}

/// A run and its progress.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    /// The run id (`flow_run_id`).
    pub id: String,
    /// The flow.
    pub flow_id: String,
    /// The flow's version.
    pub flow_version: i64,
    /// The trace id of the run.
    pub trace_id: String,
    /// Where it is.
    pub status: RunStatus,
    /// When it started (wall clock).
    pub started_at: GoTime,
    /// When it settled (wall clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled_at: Option<GoTime>,
    /// Nodes reached and not yet finished, with how many arrivals each still waits on.
    pub pending: BTreeMap<String, u32>,
    /// Nodes that completed (succeeded or skipped) at least once.
    pub completed: BTreeSet<String>,
    /// Nodes that failed (or whose delivery was dead-lettered) at least once.
    pub failed: BTreeSet<String>,
    /// Armed timers.
    pub timers: Vec<ArmedTimer>,
    /// Every step, in order (the first [`MAX_TIMELINE`]).
    pub timeline: Vec<TimelineEntry>,
    /// Steps beyond [`MAX_TIMELINE`], counted and not kept.
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub timeline_dropped: u64,
    /// DLQ entries of the run (record seq numbers).
    pub dlq: Vec<u64>,
    /// Completions of nodes nothing had reached (node ids): a duplicate execution, or an event
    /// for a node the flow did not route to. Empty for a correct service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unexpected: Vec<String>,
    /// The payload the run started with: the Durable Timer snapshot.
    #[serde(skip, default)]
    pub snapshot: Body,
    /// The flow version the run follows.
    #[serde(skip, default)]
    flow: Option<Arc<Flow>>,
    /// Followed from events only: the emulator did not start it, so it cannot know what is owed.
    #[serde(skip, default)]
    followed: bool,
    /// Arrivals known to be dead-lettered before the node was reached (the DLQ stream and the
    /// events stream are read apart): the next reach of the node fails at once.
    #[serde(skip, default)]
    dead: BTreeMap<String, u32>,
    /// The steps its completion events made: each distinct event once, with its retries
    /// ([`EventSteps`]).
    #[serde(skip, default)]
    steps: EventSteps,
    /// Settled arrivals (succeeded, skipped or failed events that a reach was waiting on), per
    /// node: how many times each node really ran.
    #[serde(skip, default)]
    executions: HashMap<String, u32>,
    /// The idempotency keys of the hops between services.
    #[serde(skip, default)]
    hops: HopLedger,
}

/// The hops of a run, by source node and receiving service: how many there were and how many
/// distinct keys they carried. A node that ran `n` times hands over `n` distinct deliveries; fewer
/// distinct keys than executions, once a key has repeated, means JetStream's dedup dropped
/// distinct deliveries. A redelivery that runs a node again does not count as an execution (it
/// was owed nothing), so its repeated key is no false alarm.
#[derive(Debug, Clone, Default)]
struct HopLedger {
    entries: HashMap<(String, String), HopEntry>,
}

#[derive(Debug, Clone, Default)]
struct HopEntry {
    keys: HashSet<String>,
    hops: u32,
    flagged: bool,
}

/// A key repeated across distinct deliveries: the hops of node `from` to `service`.
#[derive(Debug, Clone)]
pub(crate) struct KeyReuse {
    from: String,
    service: String,
    executions: u32,
    keys: usize,
    hops: u32,
}

impl std::fmt::Display for KeyReuse {
    /// `node "x" ran 3 times, but its hops to s carried only 1 distinct idempotency key(s) (3
    /// hops)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node {:?} ran {} times, but its hops to {} carried only {} distinct idempotency key(s) ({} hops)",
            self.from, self.executions, self.service, self.keys, self.hops
        )
    }
}

/// Keys remembered per (node, service) of a run.
const MAX_KEYS_PER_HOP: usize = 10_000;

impl HopLedger {
    /// A hop from `from` to `service` with `key`.
    fn observe(&mut self, from: &str, service: &str, key: &str) {
        let entry = self
            .entries
            .entry((from.to_owned(), service.to_owned()))
            .or_default();
        entry.hops = entry.hops.saturating_add(1);
        if entry.keys.len() < MAX_KEYS_PER_HOP {
            entry.keys.insert(key.to_owned());
        }
    }

    /// The first (node, service) whose keys repeated though the node ran more times than it has
    /// keys; each is reported once.
    fn reused(&mut self, executions: &HashMap<String, u32>) -> Option<KeyReuse> {
        for ((from, service), entry) in &mut self.entries {
            let ran = executions.get(from).copied().unwrap_or(0);
            let keys = entry.keys.len();
            if !entry.flagged
                && keys < MAX_KEYS_PER_HOP
                && entry.hops as usize > keys
                && keys < ran as usize
            {
                entry.flagged = true;
                return Some(KeyReuse {
                    from: from.clone(),
                    service: service.clone(),
                    executions: ran,
                    keys,
                    hops: entry.hops,
                });
            }
        }
        None
    }
}

impl Run {
    /// A run the emulator starts at `entry`: the entry is done, what follows it is reached.
    /// Returns the run and the timers to arm (timers right after the entry).
    pub(crate) fn start(
        id: String,
        flow: Arc<Flow>,
        entry: &str,
        trace_id: String,
        now: GoTime,
        snapshot: Body,
    ) -> (Self, Vec<String>) {
        let mut run = Run::new(id, &flow, trace_id, now);
        run.snapshot = snapshot;
        run.flow = Some(flow);
        run.completed.insert(entry.to_owned());
        let to_arm = run.enter(entry);
        run.refresh_status(now);
        (run, to_arm)
    }

    /// Whether the emulator did not start this run but follows it from its completion events
    /// (another orchestrator's, or published by hand). Known in the process that holds the
    /// emulator: a run read through the control API says `false`.
    #[must_use]
    pub fn is_followed(&self) -> bool {
        self.followed
    }

    /// A run the emulator did not start, followed from its first event.
    pub(crate) fn follow(event: &CompletionEvent, flow: Option<Arc<Flow>>) -> Self {
        let mut run = Run::new(
            event.flow_run_id.clone(),
            flow.as_deref().unwrap_or(&Flow {
                id: event.flow_id.clone(),
                version: event.flow_version,
                body: Default::default(),
            }),
            event.trace_id.clone(),
            event.started_at,
        );
        run.flow_version = event.flow_version;
        run.flow = flow;
        run.followed = true;
        run
    }

    fn new(id: String, flow: &Flow, trace_id: String, now: GoTime) -> Self {
        Run {
            id,
            flow_id: flow.id.clone(),
            flow_version: flow.version,
            trace_id,
            status: RunStatus::Running,
            started_at: now,
            settled_at: None,
            pending: BTreeMap::new(),
            completed: BTreeSet::new(),
            failed: BTreeSet::new(),
            timers: Vec::new(),
            timeline: Vec::new(),
            timeline_dropped: 0,
            dlq: Vec::new(),
            unexpected: Vec::new(),
            snapshot: Body::default(),
            flow: None,
            followed: false,
            dead: BTreeMap::new(),
            steps: EventSteps::default(),
            executions: HashMap::new(),
            hops: HopLedger::default(),
        }
    }

    /// The flow the run follows, if known.
    #[must_use]
    pub fn flow(&self) -> Option<&Flow> {
        self.flow.as_deref()
    }

    /// The flow the run follows, shared: to walk it while the run changes.
    pub(crate) fn shared_flow(&self) -> Option<Arc<Flow>> {
        self.flow.clone()
    }

    /// Whether the run was cancelled by hand: it owes nothing any more.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.status == RunStatus::Cancelled
    }

    /// Arms a timer instance; a cancelled run arms nothing.
    pub(crate) fn arm_timer(&mut self, timer: ArmedTimer) {
        if !self.is_cancelled() {
            self.timers.push(timer);
        }
    }

    /// Takes out the armed instances due by `due`, leaving those whose fence is in `retried`
    /// (tried once already in this advance).
    pub(crate) fn take_due_timers(
        &mut self,
        due: GoTime,
        retried: &HashSet<u64>,
    ) -> Vec<ArmedTimer> {
        let (fire, keep): (Vec<_>, Vec<_>) = self
            .timers
            .drain(..)
            .partition(|t| t.due.unix_nanos() <= due.unix_nanos() && !retried.contains(&t.fence));
        self.timers = keep;
        fire
    }

    /// An occurrence of `timer` fired on every edge: the next occurrence is armed `delay_ms`
    /// after it, or, after the last, the timer node is done.
    pub(crate) fn occurrence_fired(&mut self, timer: &ArmedTimer, delay_ms: u64) {
        if timer.occurrence < timer.repeat {
            self.arm_timer(ArmedTimer {
                due: crate::clock::plus_ms(timer.due, delay_ms),
                occurrence: timer.occurrence + 1,
                edges: Vec::new(),
                attempts: 0,
                ..timer.clone()
            });
        } else {
            self.completed.insert(timer.node_id.clone());
        }
    }

    /// The delivery of `timer`'s occurrence on `edge` could not be published (`attempts` times
    /// so far): that occurrence stays armed for that edge alone.
    pub(crate) fn retry_timer_delivery(&mut self, timer: &ArmedTimer, edge: &str, attempts: u32) {
        self.arm_timer(ArmedTimer {
            edges: vec![edge.to_owned()],
            attempts,
            // Only this occurrence: the next one is armed already.
            repeat: timer.occurrence,
            ..timer.clone()
        });
    }

    /// A dead-lettered delivery to `node` (of type `node_type`) is sent again at `seq`: the node
    /// is no longer failed and is owed an arrival.
    pub(crate) fn resend(&mut self, node: &str, node_type: &str, seq: u64, now: GoTime) {
        self.failed.remove(node);
        self.reach(node);
        self.engine_step(seq, node, node_type, "resent", now);
    }

    /// The resend to `node` could not be published: the arrival is taken back and the node
    /// fails again.
    pub(crate) fn resend_failed(&mut self, node: &str) {
        self.unreach(node);
        self.failed.insert(node.to_owned());
    }

    /// A hop of this run from node `from` to `service` carrying `key`; a key repeated across
    /// distinct executions that it reveals (each reported once).
    pub(crate) fn hop(&mut self, from: &str, service: &str, key: &str) -> Option<KeyReuse> {
        self.hops.observe(from, service, key);
        self.key_reuse()
    }

    /// A key repeated across distinct executions of a node, found now (each reported once):
    /// an execution counted after its hops were seen can reveal one.
    pub(crate) fn key_reuse(&mut self) -> Option<KeyReuse> {
        self.hops.reused(&self.executions)
    }

    /// Whether some node is still owed an arrival.
    #[must_use]
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// A delivery reached `node`, a service-in the engine delivers to (an entry, a timer's
    /// resume): what follows it is reached; the timers among them are returned to arm.
    pub(crate) fn enter(&mut self, node: &str) -> Vec<String> {
        let Some(flow) = self.flow.clone() else {
            return Vec::new();
        };
        let mut to_arm = Vec::new();
        for (_, next) in flow.successors(node) {
            if next.node_type == NodeType::Timer {
                to_arm.push(next.id.clone());
            } else {
                self.reach(&next.id);
            }
        }
        to_arm
    }

    /// The nodes after `node` that a delivery to it makes the services run (all but timers).
    pub(crate) fn service_successors(flow: &Flow, node: &str) -> Vec<String> {
        flow.successors(node)
            .filter(|(_, n)| n.node_type != NodeType::Timer)
            .map(|(_, n)| n.id.clone())
            .collect()
    }

    /// One arrival at `node`: pending, unless a dead-lettered delivery was already known for it.
    pub(crate) fn reach(&mut self, node: &str) {
        if let Some(dead) = self.dead.get_mut(node) {
            *dead -= 1;
            if *dead == 0 {
                self.dead.remove(node);
            }
            self.failed.insert(node.to_owned());
            return;
        }
        *self.pending.entry(node.to_owned()).or_insert(0) += 1;
    }

    /// Whether `node` may report `skipped`: a condition, or a node of a flow not known.
    fn may_skip(&self, node: &str) -> bool {
        self.flow()
            .and_then(|f| f.node(node))
            .is_none_or(|n| n.node_type == NodeType::Condition)
    }

    /// Takes back an arrival at `node` (its delivery could not be published after all).
    pub(crate) fn unreach(&mut self, node: &str) {
        self.settle_arrival(node);
    }

    /// Settles one arrival at `node`; false when none was pending.
    fn settle_arrival(&mut self, node: &str) -> bool {
        match self.pending.get_mut(node) {
            Some(n) => {
                *n -= 1;
                if *n == 0 {
                    self.pending.remove(node);
                }
                true
            }
            None => false,
        }
    }

    /// Applies a completion event; returns the timers to arm (node ids). `allowance` is how many
    /// `retrying` events one execution of the node may report (its action's `max_attempts` less
    /// one; `u32::MAX` where that is not known).
    pub(crate) fn apply(
        &mut self,
        event: &CompletionEvent,
        seq: u64,
        allowance: u32,
    ) -> Vec<String> {
        // The same event twice (a publish retried after a lost ack) is one step.
        let Some(step) = self.steps.step(event, seq, allowance) else {
            return Vec::new();
        };
        self.push_step(step);
        // A cancelled run owes nothing: the event is on its timeline, and opens no path.
        if self.status == RunStatus::Cancelled {
            return Vec::new();
        }
        let finishing = matches!(
            event.status.as_str(),
            status::SUCCEEDED | status::SKIPPED | status::FAILED
        );
        if !finishing {
            // A run followed from its events owes no arrival: a node that said it is retrying
            // (or something unknown) keeps the run open until it finishes.
            if self.followed && !self.pending.contains_key(&event.node_id) {
                self.pending.insert(event.node_id.clone(), 1);
            }
            return Vec::new();
        }
        let owed = self.settle_arrival(&event.node_id);
        if owed {
            *self.executions.entry(event.node_id.clone()).or_insert(0) += 1;
        } else if !self.followed {
            if self.unexpected.len() < MAX_UNEXPECTED {
                self.unexpected.push(event.node_id.clone());
            }
            // A duplicate must not open the paths after the node a second time.
            return Vec::new();
        }
        let mut to_arm = Vec::new();
        match event.status.as_str() {
            status::SUCCEEDED => {
                self.completed.insert(event.node_id.clone());
                if let Some(flow) = self.flow.clone() {
                    for (_, next) in flow.successors(&event.node_id) {
                        if next.node_type == NodeType::Timer {
                            to_arm.push(next.id.clone());
                        } else {
                            self.reach(&next.id);
                        }
                    }
                }
            }
            // Only a condition stops a path; another node that says so did not do its work
            // (`completion_status_invalid`), and what follows it will never run.
            status::SKIPPED if self.may_skip(&event.node_id) => {
                self.completed.insert(event.node_id.clone());
            }
            _ => {
                self.failed.insert(event.node_id.clone());
            }
        }
        to_arm
    }

    /// A DLQ entry of this run (record `seq`), published on a subject of `service`, of `kind`,
    /// for a delivery whose source node was `source`: kept among the run's DLQ entries, and
    /// fails the arrivals that delivery was for, when the service will send no completion event
    /// for them. Returns the nodes failed.
    pub(crate) fn dead_letter(
        &mut self,
        service: &str,
        kind: &str,
        source: &str,
        seq: u64,
        now: GoTime,
    ) -> Vec<String> {
        self.dlq.push(seq);
        let Some(flow) = self.flow.clone() else {
            return Vec::new();
        };
        if self.status == RunStatus::Cancelled {
            return Vec::new();
        }
        // Which of `source`'s successors the dead-lettered delivery was for.
        let owner = |n: &Node| n.service == service;
        let affected: Vec<&Node> = match kind {
            // The sender could not hand over: the nodes of the other services.
            dlq_kind::ROUTING_FAILED => flow
                .successors(source)
                .map(|(_, n)| n)
                .filter(|n| n.node_type != NodeType::Timer && !owner(n))
                .collect(),
            // The receiver refused the delivery before running anything: its own nodes, or all
            // of them when the delivery was to its own node (an entry, a timer's resume: it
            // would have handed the others on).
            k if receiver_refused(k) => {
                let holder = flow.node(source).is_some_and(|n| n.service == service);
                flow.successors(source)
                    .map(|(_, n)| n)
                    .filter(|n| n.node_type != NodeType::Timer && (holder || owner(n)))
                    .collect()
            }
            // Action failures and node_failed come with a `failed` completion event.
            _ => Vec::new(),
        };
        let mut failed = Vec::new();
        for node in affected {
            if !self.settle_arrival(&node.id) {
                // Not reached yet (its events are read apart from the DLQ): fail it when it is.
                *self.dead.entry(node.id.clone()).or_insert(0) += 1;
            }
            self.failed.insert(node.id.clone());
            self.push_step(TimelineEntry {
                seq,
                node_id: node.id.clone(),
                node_type: node.node_type.as_str().to_owned(),
                service: service.to_owned(),
                status: "dead_lettered".into(),
                started_at: now,
                finished_at: now,
                error: format!("its delivery was dead-lettered as {kind} (DLQ record #{seq})"),
                retries: 0,
            });
            failed.push(node.id.clone());
        }
        failed
    }

    /// Engine-side timeline entry (trigger, timer armed or fired).
    pub(crate) fn engine_step(
        &mut self,
        seq: u64,
        node_id: &str,
        node_type: &str,
        status: &str,
        now: GoTime,
    ) {
        self.push_step(TimelineEntry {
            seq,
            node_id: node_id.to_owned(),
            node_type: node_type.to_owned(),
            service: "engine".into(),
            status: status.to_owned(),
            started_at: now,
            finished_at: now,
            error: String::new(),
            retries: 0,
        });
    }

    /// An engine step that failed (a timer delivery given up).
    pub(crate) fn engine_failure(&mut self, seq: u64, node: &Node, error: String, now: GoTime) {
        self.failed.insert(node.id.clone());
        self.push_step(TimelineEntry {
            seq,
            node_id: node.id.clone(),
            node_type: node.node_type.as_str().to_owned(),
            service: "engine".into(),
            status: status::FAILED.into(),
            started_at: now,
            finished_at: now,
            error,
            retries: 0,
        });
    }

    fn push_step(&mut self, entry: TimelineEntry) {
        if self.timeline.len() < MAX_TIMELINE {
            self.timeline.push(entry);
        } else {
            self.timeline_dropped += 1;
        }
    }

    /// Cancels the run at `seq`: the arrivals it still waited on and its armed timers are
    /// dropped (returned, for the record), and it settles as [`RunStatus::Cancelled`] for good.
    /// None when it had settled already.
    pub(crate) fn cancel(&mut self, seq: u64, now: GoTime) -> Option<Cancelled> {
        if self.status.is_settled() {
            return None;
        }
        let pending = std::mem::take(&mut self.pending);
        let timers = std::mem::take(&mut self.timers);
        self.dead.clear();
        self.steps.forget_retries();
        let cancelled = Cancelled {
            run_id: self.id.clone(),
            pending,
            timers: timers.into_iter().map(|t| t.node_id).collect(),
        };
        self.push_step(TimelineEntry {
            seq,
            node_id: CANCEL_STEP.into(),
            node_type: "run".into(),
            service: "engine".into(),
            status: RunStatus::Cancelled.as_str().into(),
            started_at: now,
            finished_at: now,
            error: cancelled.to_string(),
            retries: 0,
        });
        self.status = RunStatus::Cancelled;
        self.settled_at = Some(now);
        Some(cancelled)
    }

    /// Recomputes the status from what is pending (a cancelled run stays cancelled).
    pub(crate) fn refresh_status(&mut self, now: GoTime) {
        if self.status == RunStatus::Cancelled {
            return;
        }
        let before = self.status;
        self.status = RunStatus::of(
            !self.pending.is_empty(),
            !self.timers.is_empty(),
            !self.failed.is_empty(),
        );
        if self.status.is_settled() && !before.is_settled() {
            self.settled_at = Some(now);
        } else if !self.status.is_settled() {
            self.settled_at = None;
        }
    }

    /// The completion events of a node, in order.
    pub fn node_entries<'a>(
        &'a self,
        node_id: &'a str,
    ) -> impl Iterator<Item = &'a TimelineEntry> + 'a {
        self.timeline.iter().filter(move |e| e.node_id == node_id)
    }

    /// `retrying` events of `node` that no finished execution of it accounts for.
    pub(crate) fn retrying(&self, node: &str) -> u32 {
        self.steps.retrying(node)
    }

    /// How many times `node` ran to an end (succeeded, skipped or failed) for an arrival the
    /// run owed it.
    #[must_use]
    pub fn executions(&self, node: &str) -> u32 {
        self.executions.get(node).copied().unwrap_or(0)
    }
}

/// What cancelling a run dropped ([`crate::Emulator::cancel`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancelled {
    /// The run.
    pub run_id: String,
    /// The nodes it still waited on, with how many arrivals each: not waited on any more.
    pub pending: BTreeMap<String, u32>,
    /// The timers that were armed (node ids, one per armed instance): disarmed.
    pub timers: Vec<String>,
}

impl std::fmt::Display for Cancelled {
    /// `cancelled by hand; dropped: pending x (2), y; timers t`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cancelled by hand")?;
        if self.pending.is_empty() && self.timers.is_empty() {
            return f.write_str("; nothing was pending");
        }
        f.write_str("; dropped:")?;
        if !self.pending.is_empty() {
            let nodes: Vec<String> = self
                .pending
                .iter()
                .map(|(n, c)| {
                    if *c > 1 {
                        format!("{n} ({c})")
                    } else {
                        n.clone()
                    }
                })
                .collect();
            write!(f, " pending {}", nodes.join(", "))?;
        }
        if !self.timers.is_empty() {
            if !self.pending.is_empty() {
                f.write_str(";")?;
            }
            write!(f, " timers {}", self.timers.join(", "))?;
        }
        Ok(())
    }
}

/// DLQ kinds a receiving service writes instead of running the nodes a delivery was for.
fn receiver_refused(kind: &str) -> bool {
    kind == dlq_kind::DURABLE_TIMER_REJECTED
        || matches!(
            FallbackKind::parse(kind),
            Some(
                FallbackKind::InvalidJson
                    | FallbackKind::MissingEnvelope
                    | FallbackKind::InvalidEnvelope
                    | FallbackKind::UnknownFlow
                    | FallbackKind::UnknownNode
                    | FallbackKind::DeliveryExhausted
            )
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn flow(v: serde_json::Value) -> Arc<Flow> {
        let mut f: Flow = serde_json::from_value(v).unwrap();
        f.assign_owners();
        Arc::new(f)
    }

    fn sample() -> Arc<Flow> {
        flow(json!({"id": "f", "nodes": [
            {"id": "in", "type": "service-in", "service": "a"},
            {"id": "x", "type": "action", "service": "a", "action": "x"},
            {"id": "c", "type": "condition", "config": {"op": "truthy"}},
            {"id": "y", "type": "action", "service": "a", "action": "y"},
            {"id": "t", "type": "timer", "config": {"delay_ms": 5}}
        ], "edges": [
            {"id": "e1", "from": "in", "to": "x"}, {"id": "e2", "from": "x", "to": "c"},
            {"id": "e3", "from": "c", "to": "y"}, {"id": "e4", "from": "x", "to": "t"}
        ]}))
    }

    fn event(node: &str, status: &str, at: i64) -> CompletionEvent {
        CompletionEvent {
            flow_run_id: "r".into(),
            flow_id: "f".into(),
            node_id: node.into(),
            status: status.into(),
            started_at: GoTime::from_unix_nanos(i128::from(at)).unwrap(),
            ..CompletionEvent::default()
        }
    }

    fn start(f: Arc<Flow>) -> Run {
        Run::start(
            "r".into(),
            f,
            "in",
            String::new(),
            GoTime::ZERO,
            Body::default(),
        )
        .0
    }

    #[test]
    fn pending_follows_the_graph() {
        let mut run = start(sample());
        assert_eq!(run.pending, BTreeMap::from([("x".to_owned(), 1)]));
        assert!(
            run.apply(&event("x", "retrying", 1), 1, u32::MAX)
                .is_empty()
        );
        let arm = run.apply(&event("x", "succeeded", 2), 2, u32::MAX);
        assert_eq!(arm, ["t"]);
        assert_eq!(run.pending, BTreeMap::from([("c".to_owned(), 1)]));
        // The same event again changes nothing.
        assert!(
            run.apply(&event("x", "succeeded", 2), 3, u32::MAX)
                .is_empty()
        );
        run.apply(&event("c", "skipped", 4), 4, u32::MAX);
        run.refresh_status(GoTime::ZERO);
        assert_eq!(run.status, RunStatus::Succeeded);
        assert_eq!(run.node_entries("x").last().unwrap().retries, 1);
        assert!(run.unexpected.is_empty());
    }

    #[test]
    fn a_failed_node_fails_the_run() {
        let mut run = start(sample());
        run.apply(&event("x", "failed", 1), 1, u32::MAX);
        run.refresh_status(GoTime::ZERO);
        assert_eq!(run.status, RunStatus::Failed);
    }

    #[test]
    fn every_arrival_is_owed_a_completion() {
        // A node reached twice (a fan-in, or two timer occurrences) settles after two events.
        let mut run = start(sample());
        run.reach("y");
        run.reach("y");
        run.apply(&event("x", "succeeded", 1), 1, u32::MAX);
        run.apply(&event("c", "succeeded", 2), 2, u32::MAX);
        assert_eq!(run.pending.get("y"), Some(&3));
        for at in 10..13 {
            run.apply(&event("y", "succeeded", at), at as u64, u32::MAX);
        }
        run.refresh_status(GoTime::ZERO);
        assert_eq!(run.status, RunStatus::Succeeded);
        assert_eq!(run.executions("y"), 3);
        // A fourth execution was owed nothing: a duplicate.
        run.apply(&event("y", "succeeded", 20), 20, u32::MAX);
        assert_eq!(run.unexpected, ["y"]);
    }

    #[test]
    fn each_finished_execution_takes_at_most_its_allowance_of_the_retries() {
        // y reached twice; its executions interleave: retrying, retrying, succeeded,
        // succeeded, with one retrying event allowed each.
        let mut run = start(sample());
        run.reach("y");
        run.reach("y");
        run.apply(&event("y", "retrying", 1), 1, 1);
        run.apply(&event("y", "retrying", 2), 2, 1);
        assert_eq!(run.retrying("y"), 2);
        run.apply(&event("y", "succeeded", 3), 3, 1);
        // The first to finish took one: the other's is still under way.
        assert_eq!(run.retrying("y"), 1);
        assert_eq!(run.node_entries("y").last().unwrap().retries, 1);
        run.apply(&event("y", "succeeded", 4), 4, 1);
        assert_eq!(run.retrying("y"), 0);
        // An execution that made none takes none; one whose allowance is unknown takes all.
        run.apply(&event("y", "retrying", 5), 5, 1);
        run.apply(&event("y", "retrying", 6), 6, u32::MAX);
        run.apply(&event("y", "failed", 7), 7, u32::MAX);
        assert_eq!(run.retrying("y"), 0);
    }

    #[test]
    fn a_dead_lettered_delivery_fails_its_nodes_whichever_stream_comes_first() {
        let two = flow(json!({"id": "f", "nodes": [
            {"id": "in", "type": "service-in", "service": "a"},
            {"id": "x", "type": "action", "service": "a", "action": "x"},
            {"id": "z", "type": "action", "service": "b", "action": "z"}
        ], "edges": [{"id": "e1", "from": "in", "to": "x"}, {"id": "e2", "from": "x", "to": "z"}]}));
        // The hop's routing_failed DLQ entry read before x's event.
        let mut run = start(two.clone());
        assert_eq!(
            run.dead_letter("a", "routing_failed", "x", 5, GoTime::ZERO),
            ["z"]
        );
        run.apply(&event("x", "succeeded", 1), 6, u32::MAX);
        run.refresh_status(GoTime::ZERO);
        assert_eq!(run.status, RunStatus::Failed, "{:?}", run.pending);
        // The receiver refused the trigger: its nodes after the entry fail.
        let mut run = start(two);
        run.dead_letter("a", "invalid_json", "in", 3, GoTime::ZERO);
        run.refresh_status(GoTime::ZERO);
        assert_eq!(run.status, RunStatus::Failed);
        assert!(run.pending.is_empty());
    }

    #[test]
    fn a_key_repeated_across_distinct_executions_is_found_and_a_redelivery_is_not() {
        let mut ledger = HopLedger::default();
        let mut ran = HashMap::from([("charge".to_owned(), 1)]);
        ledger.observe("charge", "mail", "k1");
        ledger.observe("charge", "mail", "k1"); // a redelivery: charge ran once
        assert!(ledger.reused(&ran).is_none());
        ran.insert("charge".into(), 3); // two more occurrences, the same key again
        ledger.observe("charge", "mail", "k1");
        let found = ledger.reused(&ran).expect("reuse found");
        assert_eq!((found.executions, found.keys, found.hops), (3, 1, 3));
        assert!(ledger.reused(&ran).is_none(), "reported once");
    }
}
