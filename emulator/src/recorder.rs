//! What the emulator records: every message it sees (with raw bytes and headers), and each run's
//! progress through its flow.
//!
//! Run tracking follows the flow graph from completion events alone, so it works for SDKs in any
//! language: a run starts with its entry's successors pending; a node's `succeeded` event makes
//! its successors pending (a timer is armed instead); `skipped` and `failed` end that path. A run
//! with nothing pending is *waiting* while a timer is armed, else *settled*.
//!
//! A run's times (start, settle, each step) are wall-clock, as the services' completion events
//! are; only a timer's `due` is on the emulator's clock, which may be virtual.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use triggers_sdk::flow::{Flow, NodeType};
use triggers_sdk::wire::shapes::status;
use triggers_sdk::wire::{CompletionEvent, DlqEntry, GoTime, Heartbeat, Manifest};

/// One recorded thing, in the order the emulator saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// 1, 2, 3... in arrival order.
    pub seq: u64,
    /// Wall-clock time of arrival.
    pub at: GoTime,
    /// The emulator's clock (virtual or real) at arrival.
    pub clock: GoTime,
    /// The NATS subject, when it came from or went to NATS.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subject: String,
    /// The headers as received.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// The payload as received (UTF-8; other bytes replaced).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub payload: String,
    /// What it is.
    #[serde(flatten)]
    pub kind: RecordKind,
}

/// The kinds of record.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RecordKind {
    /// A registration request and the emulator's answer.
    Registration {
        /// The service (empty when the manifest could not be read).
        service: String,
        /// Whether it was accepted.
        accepted: bool,
        /// The reply's error, if refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The manifest's own hash field.
        manifest_hash: String,
    },
    /// A manifest fetch and whether it was answered.
    Fetch {
        /// The service asked for.
        service: String,
        /// Whether it was known.
        found: bool,
    },
    /// A heartbeat.
    Heartbeat {
        /// The decoded heartbeat.
        heartbeat: Heartbeat,
    },
    /// A completion event.
    Completion {
        /// The decoded event.
        event: CompletionEvent,
    },
    /// A DLQ entry as stored by JetStream (after `Nats-Msg-Id` dedup).
    Dlq {
        /// The entry, when it decodes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        entry: Option<DlqEntry>,
        /// Its `Nats-Msg-Id`.
        msg_id: String,
    },
    /// A flow deployed.
    Deploy {
        /// The flow.
        flow_id: String,
        /// Its version.
        version: i64,
    },
    /// A broadcast sent.
    Broadcast {
        /// The flow.
        flow_id: String,
        /// Its version.
        version: i64,
    },
    /// A run started by the emulator.
    Trigger {
        /// The run.
        run_id: String,
        /// The flow.
        flow_id: String,
    },
    /// A message seen on a service's inbound subject (a trigger, a hop between services, a
    /// timer delivery).
    Hop {
        /// The run, from the envelope.
        run_id: String,
        /// The envelope's `source_node_id`.
        source_node_id: String,
        /// Whether the emulator sent it.
        from_emulator: bool,
    },
    /// A timer armed.
    TimerArmed {
        /// The run.
        run_id: String,
        /// The timer node.
        node_id: String,
        /// When it is due, on the emulator's clock.
        due: GoTime,
        /// Which occurrence.
        occurrence: u64,
        /// The arming's fence.
        fence: u64,
    },
    /// A timer elapsed and its delivery was sent.
    TimerFired {
        /// The run.
        run_id: String,
        /// The timer node.
        node_id: String,
        /// Which occurrence.
        occurrence: u64,
        /// The service-in it resumed into.
        resume_node_id: String,
    },
    /// A run settled: every path ended.
    RunSettled {
        /// The run.
        run_id: String,
        /// Its flow.
        flow_id: String,
        /// `succeeded` or `failed`.
        status: RunStatus,
    },
    /// The clock moved.
    ClockAdvanced {
        /// To this time.
        to: GoTime,
    },
    /// A conformance violation (the offending bytes and headers are the record's).
    Violation {
        /// `error` or `warning`.
        severity: String,
        /// The rule's stable code.
        rule: String,
        /// What is wrong.
        message: String,
    },
}

impl RecordKind {
    /// The kind's name, as in the JSON `kind` field.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            RecordKind::Registration { .. } => "registration",
            RecordKind::Fetch { .. } => "fetch",
            RecordKind::Heartbeat { .. } => "heartbeat",
            RecordKind::Completion { .. } => "completion",
            RecordKind::Dlq { .. } => "dlq",
            RecordKind::Deploy { .. } => "deploy",
            RecordKind::Broadcast { .. } => "broadcast",
            RecordKind::Trigger { .. } => "trigger",
            RecordKind::Hop { .. } => "hop",
            RecordKind::TimerArmed { .. } => "timer_armed",
            RecordKind::TimerFired { .. } => "timer_fired",
            RecordKind::RunSettled { .. } => "run_settled",
            RecordKind::ClockAdvanced { .. } => "clock_advanced",
            RecordKind::Violation { .. } => "violation",
        }
    }
}

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
        matches!(self, RunStatus::Succeeded | RunStatus::Failed)
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
    /// `succeeded`, `retrying`, `failed`, `skipped`, or the engine's `triggered`, `armed`, `fired`.
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

/// An armed timer of a run.
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
    /// The arming's fence.
    pub fence: u64,
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
    /// Nodes waiting for a completion event.
    pub pending: BTreeSet<String>,
    /// Nodes that completed (succeeded or skipped).
    pub completed: BTreeSet<String>,
    /// Nodes that failed for good.
    pub failed: BTreeSet<String>,
    /// Armed timers.
    pub timers: Vec<ArmedTimer>,
    /// Every step, in order.
    pub timeline: Vec<TimelineEntry>,
    /// DLQ entries of the run (record seq numbers).
    pub dlq: Vec<u64>,
    /// The payload the run started with: the Durable Timer snapshot.
    #[serde(skip, default)]
    pub snapshot: Vec<u8>,
}

impl Run {
    /// A run that starts at `entry`, whose successors become pending.
    pub(crate) fn start(
        id: String,
        flow: &Flow,
        entry: &str,
        trace_id: String,
        now: GoTime,
        snapshot: Vec<u8>,
    ) -> Self {
        let mut run = Run {
            id,
            flow_id: flow.id.clone(),
            flow_version: flow.version,
            trace_id,
            status: RunStatus::Running,
            started_at: now,
            settled_at: None,
            pending: BTreeSet::new(),
            completed: BTreeSet::from([entry.to_owned()]),
            failed: BTreeSet::new(),
            timers: Vec::new(),
            timeline: Vec::new(),
            dlq: Vec::new(),
            snapshot,
        };
        run.enter(flow, entry);
        run.refresh_status(now);
        run
    }

    /// A message reached `entry` (a service-in): its successors become pending.
    pub(crate) fn enter(&mut self, flow: &Flow, entry: &str) {
        for (_, next) in flow.successors(entry) {
            if !self.completed.contains(&next.id) {
                self.pending.insert(next.id.clone());
            }
        }
    }

    /// Applies a completion event; returns the timers to arm (node ids).
    pub(crate) fn apply(
        &mut self,
        flow: Option<&Flow>,
        event: &CompletionEvent,
        seq: u64,
    ) -> Vec<String> {
        // The same event twice (a publish retried after a lost ack) is one step.
        if self.timeline.iter().any(|e| {
            e.node_id == event.node_id
                && e.status == event.status
                && e.started_at == event.started_at
                && e.finished_at == event.finished_at
                && e.error == event.error
        }) {
            return Vec::new();
        }
        let retries = self
            .timeline
            .iter()
            .filter(|e| e.node_id == event.node_id && e.status == status::RETRYING)
            .count() as u32;
        self.timeline.push(TimelineEntry {
            seq,
            node_id: event.node_id.clone(),
            node_type: event.node_type.clone(),
            service: event.service.clone(),
            status: event.status.clone(),
            started_at: event.started_at,
            finished_at: event.finished_at,
            error: event.error.clone(),
            retries,
        });
        let mut to_arm = Vec::new();
        match event.status.as_str() {
            status::SUCCEEDED => {
                self.pending.remove(&event.node_id);
                // A redelivered event must not re-open the paths after it.
                if self.completed.insert(event.node_id.clone())
                    && let Some(flow) = flow
                {
                    for (_, next) in flow.successors(&event.node_id) {
                        if next.node_type == NodeType::Timer {
                            to_arm.push(next.id.clone());
                        } else if !self.completed.contains(&next.id) {
                            self.pending.insert(next.id.clone());
                        }
                    }
                }
            }
            status::SKIPPED => {
                self.pending.remove(&event.node_id);
                self.completed.insert(event.node_id.clone());
            }
            status::FAILED => {
                self.pending.remove(&event.node_id);
                self.failed.insert(event.node_id.clone());
            }
            _ => {}
        }
        to_arm
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
        self.timeline.push(TimelineEntry {
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

    /// Recomputes the status from what is pending.
    pub(crate) fn refresh_status(&mut self, now: GoTime) {
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
}

/// A registered service as the emulator sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServiceState {
    /// Its current manifest.
    pub manifest: Manifest,
    /// When it (last) registered, wall clock.
    pub registered_at: GoTime,
    /// How many times it registered.
    pub registrations: u32,
    /// The last heartbeat, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<Heartbeat>,
    /// When the last heartbeat arrived, wall clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<GoTime>,
    /// Heartbeats received.
    pub heartbeats: u64,
    /// Distinct `started_at` values seen: one per replica (start).
    pub replicas: BTreeMap<String, GoTime>,
}

/// A service's liveness from its heartbeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// Registered, no heartbeat yet.
    Registered,
    /// A heartbeat within two intervals.
    Live,
    /// The last heartbeat is two to three intervals old.
    Late,
    /// No heartbeat for three intervals.
    Down,
    /// The last heartbeat said `shutting_down`.
    ShuttingDown,
}

impl ServiceState {
    /// Liveness at `now` (wall clock) for heartbeats expected every `interval`.
    #[must_use]
    pub fn liveness(&self, now: GoTime, interval: std::time::Duration) -> Liveness {
        let (Some(hb), Some(seen)) = (&self.last_heartbeat, self.last_seen) else {
            return Liveness::Registered;
        };
        if hb.shutting_down {
            return Liveness::ShuttingDown;
        }
        let age_ns = now.unix_nanos() - seen.unix_nanos();
        let interval_ns = interval.as_nanos() as i128;
        if age_ns <= 2 * interval_ns {
            Liveness::Live
        } else if age_ns <= 3 * interval_ns {
            Liveness::Late
        } else {
            Liveness::Down
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn flow() -> Flow {
        let mut f: Flow = serde_json::from_value(json!({"id": "f", "nodes": [
            {"id": "in", "type": "service-in", "service": "a"},
            {"id": "x", "type": "action", "service": "a", "action": "x"},
            {"id": "c", "type": "condition", "config": {"op": "truthy"}},
            {"id": "y", "type": "action", "service": "a", "action": "y"},
            {"id": "t", "type": "timer", "config": {"delay_ms": 5}}
        ], "edges": [
            {"id": "e1", "from": "in", "to": "x"}, {"id": "e2", "from": "x", "to": "c"},
            {"id": "e3", "from": "c", "to": "y"}, {"id": "e4", "from": "x", "to": "t"}
        ]}))
        .unwrap();
        f.assign_owners();
        f
    }

    fn event(node: &str, status: &str) -> CompletionEvent {
        CompletionEvent {
            flow_run_id: "r".into(),
            flow_id: "f".into(),
            node_id: node.into(),
            status: status.into(),
            ..CompletionEvent::default()
        }
    }

    #[test]
    fn pending_follows_the_graph() {
        let f = flow();
        let now = GoTime::ZERO;
        let mut run = Run::start("r".into(), &f, "in", String::new(), now, vec![]);
        assert_eq!(run.pending, BTreeSet::from(["x".to_owned()]));
        assert!(run.apply(Some(&f), &event("x", "retrying"), 1).is_empty());
        let arm = run.apply(Some(&f), &event("x", "succeeded"), 2);
        assert_eq!(arm, ["t"]);
        assert_eq!(run.pending, BTreeSet::from(["c".to_owned()]));
        // A redelivered event changes nothing.
        assert!(run.apply(Some(&f), &event("x", "succeeded"), 3).is_empty());
        run.apply(Some(&f), &event("c", "skipped"), 4);
        run.refresh_status(now);
        assert_eq!(run.status, RunStatus::Succeeded);
        assert_eq!(run.node_entries("x").last().unwrap().retries, 1);
    }

    #[test]
    fn a_failed_node_fails_the_run() {
        let f = flow();
        let mut run = Run::start("r".into(), &f, "in", String::new(), GoTime::ZERO, vec![]);
        run.apply(Some(&f), &event("x", "failed"), 1);
        run.refresh_status(GoTime::ZERO);
        assert_eq!(run.status, RunStatus::Failed);
    }
}
