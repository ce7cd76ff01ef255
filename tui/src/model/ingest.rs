//! How what the sources send becomes the model: emulator records, state summaries, a run fetched
//! on drill-in, and (passive mode) raw NATS messages decoded with the wire types.
//!
//! Runs are tracked from completion events the way the emulator's recorder does (a node's
//! success makes its successors pending; a run with nothing pending has settled), so the passive
//! observer shows runs too; the emulator's own word, when there is one, wins.

use std::collections::BTreeSet;

use triggers_emulator::control::StateSummary;
use triggers_emulator::recorder::{
    EventSteps, Record, RecordKind, Run, RunStatus, TimelineEntry, retry_allowance,
};
use triggers_sdk::flow::{Flow, Node, NodeType};
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::subject::LockedSubject;
use triggers_sdk::wire::{
    CompletionEvent, DlqEntry, FlowEnvelope, GoTime, Headers, Heartbeat, Manifest,
};

use super::{DlqRow, Event, FlowRow, ListId, Mode, Model, RunRow, ServiceRow, ViolationRow};
use crate::msg::Observed;

impl Model {
    /// Applies one emulator record. Returns whether a run changed in place.
    pub(crate) fn apply_record(&mut self, record: Record) -> bool {
        if record.seq != 0 && record.seq <= self.last_seq {
            return false; // already applied (backfill and live stream overlap)
        }
        self.last_seq = self.last_seq.max(record.seq);
        let event = Event {
            seq: record.seq,
            at: record.at,
            subject: record.subject,
            headers: record.headers.to_vec(),
            payload: record.payload.text().into_owned(),
            kind: Some(record.kind),
            note: String::new(),
        };
        self.apply_event(event, record.clock)
    }

    /// Updates services, flows, runs, DLQ and violations from an event, then logs it.
    fn apply_event(&mut self, event: Event, clock: GoTime) -> bool {
        let run_changed = match &event.kind {
            Some(kind) => self.apply_kind(kind, &event, clock),
            None => false,
        };
        let abs = self.events.push(event);
        self.row_added(ListId::Traffic, abs);
        run_changed
    }

    /// What one kind of record changes here; returns whether a run changed in place.
    fn apply_kind(&mut self, kind: &RecordKind, event: &Event, clock: GoTime) -> bool {
        match kind {
            RecordKind::Registration {
                service,
                accepted: true,
                manifest_hash,
                ..
            } => {
                let manifest = Manifest::from_json(event.payload.as_bytes()).ok();
                self.register(service, manifest_hash, manifest.as_ref());
            }
            RecordKind::Heartbeat { heartbeat } => self.heartbeat(heartbeat, event.at),
            RecordKind::Completion { event: completion } => {
                self.completion(completion, event.seq);
                return true;
            }
            RecordKind::Dlq { entry, msg_id } => return self.dlq_entry(event, entry, msg_id),
            RecordKind::Deploy {
                flow_id, version, ..
            }
            | RecordKind::Broadcast { flow_id, version } => {
                let row = self.flow_row(flow_id);
                row.versions.insert(*version);
                row.version = row.version.max(*version);
            }
            RecordKind::Trigger {
                run_id, flow_id, ..
            } => {
                self.triggered(run_id, flow_id, event, clock);
                return true;
            }
            RecordKind::TimerArmed {
                run_id, node_id, ..
            } => return self.timer_step(run_id, node_id, "armed", event.seq, clock),
            RecordKind::TimerFired {
                run_id, node_id, ..
            } => return self.timer_step(run_id, node_id, "fired", event.seq, clock),
            RecordKind::RunSettled { run_id, status, .. } => {
                return self.existing_run_mut(run_id).is_some_and(|run| {
                    run.status = *status;
                    run.settled_at = Some(clock);
                    run.pending.clear();
                    true
                });
            }
            RecordKind::ClockAdvanced { to, .. } => {
                if let Some((_, mode)) = self.clock {
                    self.clock = Some((*to, mode));
                }
            }
            RecordKind::Violation { .. } => self.violation_recorded(event),
            // Logged; the emulator's state summary carries their effect on runs.
            RecordKind::TimerUndelivered { .. }
            | RecordKind::FlowsWithheld { .. }
            | RecordKind::DeployRefused { .. } => {}
            RecordKind::Registration { .. }
            | RecordKind::Fetch { .. }
            | RecordKind::Hop { .. }
            | RecordKind::Resend { .. } => {}
        }
        false
    }

    /// A DLQ entry: a row of its own, and one more on its run. Returns whether a run changed.
    fn dlq_entry(&mut self, event: &Event, entry: &Option<DlqEntry>, msg_id: &str) -> bool {
        let run = entry
            .as_ref()
            .and_then(|e| self.run_index.get(&e.envelope.flow_run_id))
            .and_then(|abs| self.runs.get_abs_mut(*abs));
        let run_changed = run.is_some();
        if let Some(run) = run {
            run.dlq += 1;
        }
        let abs = self.dlq.push(DlqRow {
            seq: event.seq,
            at: event.at,
            subject: event.subject.clone(),
            msg_id: msg_id.to_owned(),
            entry: entry.clone(),
            payload: event.payload.clone(),
        });
        self.row_added(ListId::Dlq, abs);
        run_changed
    }

    /// A run the emulator started: its entry ran, the entry's successors are pending.
    fn triggered(&mut self, run_id: &str, flow_id: &str, event: &Event, clock: GoTime) {
        let flow = self.flows.get(flow_id).and_then(|f| f.flow.clone());
        let version = self.flows.get(flow_id).map_or(0, |f| f.version);
        let run = self.run_mut(run_id, flow_id, version, clock);
        run.payload = Some(event.payload.clone());
        let entry = flow
            .as_ref()
            .and_then(|f| f.entry_points().next().map(|n| n.id.clone()));
        if let (Some(flow), Some(entry)) = (&flow, &entry) {
            run.completed.insert(entry.clone());
            for (_, next) in flow.successors(entry) {
                run.pending.insert(next.id.clone());
            }
        }
        let node = entry.as_deref().unwrap_or("trigger");
        engine_step(run, event.seq, node, "service-in", "triggered", clock);
        let version = run.flow_version;
        if let Some(entry) = &entry {
            self.note_ran(run_id, flow_id, version, entry, "triggered");
        }
    }

    /// A timer of a known run `armed` or `fired`. Returns whether a run changed.
    fn timer_step(
        &mut self,
        run_id: &str,
        node_id: &str,
        status: &str,
        seq: u64,
        clock: GoTime,
    ) -> bool {
        let Some(run) = self.existing_run_mut(run_id) else {
            return false;
        };
        engine_step(run, seq, node_id, "timer", status, clock);
        if status == "armed" {
            run.timers += 1;
            refresh_status(run, clock);
        } else {
            run.timers = run.timers.saturating_sub(1);
        }
        let (flow_id, version) = (run.flow_id.clone(), run.flow_version);
        self.note_ran(run_id, &flow_id, version, node_id, status);
        true
    }

    /// A violation the emulator recorded, with the message it was found in.
    fn violation_recorded(&mut self, event: &Event) {
        if let Some(RecordKind::Violation {
            severity,
            rule,
            message,
        }) = &event.kind
        {
            self.push_violation(ViolationRow {
                seq: event.seq,
                at: event.at,
                severity: severity.clone(),
                rule: rule.clone(),
                message: message.clone(),
                subject: event.subject.clone(),
                headers: event.headers.clone(),
                payload: event.payload.clone(),
            });
        }
    }

    /// A violation, recorded by the emulator or found by the passive observer: a row of its
    /// own, counted in the total.
    fn push_violation(&mut self, row: ViolationRow) {
        let abs = self.violations.push(row);
        self.violations_total = self
            .violations_total
            .max(self.violations.end_abs() as usize);
        self.row_added(ListId::Violations, abs);
    }

    fn register(&mut self, service: &str, hash: &str, manifest: Option<&Manifest>) {
        if service.is_empty() {
            return;
        }
        let row = self
            .services
            .entry(service.to_owned())
            .or_insert_with(|| ServiceRow {
                name: service.to_owned(),
                ..ServiceRow::default()
            });
        row.manifest_hash = hash.to_owned();
        if let Some(m) = manifest {
            row.version = m.service_version.clone();
            row.capabilities = m.runtime_capabilities.clone();
            row.actions = m.actions.iter().map(|a| a.name.clone()).collect();
            row.max_attempts = m
                .actions
                .iter()
                .map(|a| (a.name.clone(), a.retry.max_attempts))
                .collect();
        }
        row.shutting_down = false;
    }

    fn heartbeat(&mut self, hb: &Heartbeat, at: GoTime) {
        if hb.service.is_empty() {
            return;
        }
        let row = self
            .services
            .entry(hb.service.clone())
            .or_insert_with(|| ServiceRow {
                name: hb.service.clone(),
                ..ServiceRow::default()
            });
        row.version = hb.service_version.clone();
        row.manifest_hash = hb.manifest_hash.clone();
        row.last_seen = Some(at);
        row.shutting_down = hb.shutting_down;
        row.replicas.insert(hb.started_at.to_string());
    }

    fn flow_row(&mut self, id: &str) -> &mut FlowRow {
        self.flows.entry(id.to_owned()).or_insert_with(|| FlowRow {
            id: id.to_owned(),
            version: 0,
            flow: None,
            versions: BTreeSet::new(),
        })
    }

    fn set_flow(&mut self, mut flow: Flow) {
        flow.assign_owners();
        let (id, version) = (flow.id.clone(), flow.version);
        let row = self.flow_row(&id);
        row.versions.insert(version);
        let known = row.flow.as_ref().is_some_and(|f| f.version == version);
        if version >= row.version || row.flow.is_none() {
            row.version = version;
            row.flow = Some(flow);
            if !known {
                self.note_runs_of(&id, version);
            }
        }
    }

    /// Notes what the runs of a flow version held here ran, once the flow itself is known. Its
    /// runs' events may come first (`up --tui` hears a deploy, a trigger and its events before
    /// its next poll of the state brings the flow): they are noted by the one rule of
    /// [`Model::note_ran`], as if the flow had been known, so the graph draws their edges taken.
    fn note_runs_of(&mut self, flow_id: &str, version: i64) {
        let entry = self
            .flows
            .get(flow_id)
            .and_then(|f| f.flow.as_ref())
            .and_then(|f| f.entry_points().next().map(|n| n.id.clone()));
        let mut steps = Vec::new();
        for abs in self.runs.first_abs()..self.runs.end_abs() {
            let Some(run) = self.runs.get_abs_mut(abs) else {
                continue;
            };
            if run.flow_id != flow_id || (run.flow_version != version && run.flow_version != 0) {
                continue;
            }
            run.flow_version = version;
            for t in &mut run.timeline {
                // A trigger heard before its flow was known could not name the entry.
                if t.node_id == "trigger"
                    && t.status == "triggered"
                    && let Some(entry) = &entry
                {
                    t.node_id.clone_from(entry);
                }
                steps.push((run.id.clone(), t.node_id.clone(), t.status.clone()));
            }
        }
        for (run, node, status) in steps {
            self.note_ran(&run, flow_id, version, &node, &status);
        }
    }

    /// The `retrying` events one execution of `node` of flow `flow_id` may report, from its
    /// action's retry policy in its service's manifest (all of them when that is not known).
    fn retry_allowance(&self, flow_id: &str, node: &str) -> u32 {
        let max_attempts = self
            .flows
            .get(flow_id)
            .and_then(|f| f.flow.as_ref())
            .and_then(|f| f.node(node))
            .filter(|n| n.node_type == NodeType::Action)
            .and_then(|n| {
                self.services
                    .get(&n.service)?
                    .max_attempts
                    .get(&n.action)
                    .copied()
            });
        retry_allowance(max_attempts)
    }

    fn existing_run_mut(&mut self, id: &str) -> Option<&mut RunRow> {
        let abs = *self.run_index.get(id)?;
        self.runs.get_abs_mut(abs)
    }

    fn run_mut(&mut self, id: &str, flow_id: &str, version: i64, start: GoTime) -> &mut RunRow {
        let known = self
            .run_index
            .get(id)
            .is_some_and(|abs| self.runs.get_abs(*abs).is_some());
        if !known {
            if let Some(oldest) = self.runs.next_dropped() {
                let oldest = oldest.id.clone();
                self.run_index.remove(&oldest);
            }
            let abs = self.runs.push(RunRow {
                id: id.to_owned(),
                flow_id: flow_id.to_owned(),
                flow_version: version,
                status: RunStatus::Running,
                started_at: start,
                settled_at: None,
                failed: Vec::new(),
                timeline: Vec::new(),
                event_steps: EventSteps::default(),
                steps: 0,
                dlq: 0,
                pending: BTreeSet::new(),
                completed: BTreeSet::new(),
                timers: 0,
                from_emulator: false,
                payload: None,
            });
            self.run_index.insert(id.to_owned(), abs);
            self.row_added(ListId::Runs, abs);
        }
        let abs = self.run_index[id];
        self.runs
            .get_abs_mut(abs)
            .expect("a run just indexed is kept")
    }

    fn completion(&mut self, event: &CompletionEvent, seq: u64) {
        if event.flow_run_id.is_empty() {
            return;
        }
        let passive = self.mode == Mode::Passive;
        self.note_ran(
            &event.flow_run_id,
            &event.flow_id,
            event.flow_version,
            &event.node_id,
            &event.status,
        );
        let flow = self.flows.get(&event.flow_id).and_then(|f| f.flow.clone());
        let allowance = self.retry_allowance(&event.flow_id, &event.node_id);
        let run = self.run_mut(
            &event.flow_run_id,
            &event.flow_id,
            event.flow_version,
            event.started_at,
        );
        // The emulator's definition of a step and its retries: an event published twice is one.
        let Some(step) = run.event_steps.step(event, seq, allowance) else {
            return;
        };
        run.timeline.push(step);
        run.steps = run.steps.max(run.timeline.len());
        if run.flow_version == 0 {
            run.flow_version = event.flow_version;
        }
        if run.from_emulator {
            return; // the emulator's summary is the authority on its own runs
        }
        if passive
            && run.timers > 0
            && !run.pending.contains(&event.node_id)
            && !run.completed.contains(&event.node_id)
        {
            // Passive mode sees no timer firing: a step nothing pointed to came after one.
            run.timers -= 1;
        }
        match event.status.as_str() {
            "succeeded" => {
                run.pending.remove(&event.node_id);
                if run.completed.insert(event.node_id.clone())
                    && let Some(flow) = &flow
                {
                    for (_, next) in flow.successors(&event.node_id) {
                        if next.node_type == NodeType::Timer {
                            // The emulator records its timers itself; the passive observer infers them.
                            if passive {
                                run.timers += 1;
                            }
                        } else if !run.completed.contains(&next.id) {
                            run.pending.insert(next.id.clone());
                        }
                    }
                }
            }
            "skipped" => {
                run.pending.remove(&event.node_id);
                run.completed.insert(event.node_id.clone());
            }
            "failed" => {
                run.pending.remove(&event.node_id);
                if !run.failed.contains(&event.node_id) {
                    run.failed.push(event.node_id.clone());
                }
            }
            _ => {
                run.pending.insert(event.node_id.clone());
            }
        }
        if flow.is_some() || !run.failed.is_empty() {
            refresh_status(run, event.finished_at);
        }
    }

    /// Applies the emulator's state summary: the authority on services, flows and runs.
    pub(crate) fn apply_summary(&mut self, summary: StateSummary) {
        self.clock = Some((summary.clock, summary.clock_mode));
        self.violations_total = summary.violations;
        self.emulator_dropped = summary.dropped_records;
        self.emulator_lost = summary.dropped_messages;
        self.emulator_disconnects = summary.connection_losses;
        self.evicted_runs = summary.evicted_runs;
        self.unfollowed_runs = summary.unfollowed_runs;
        let names: BTreeSet<&str> = summary.services.iter().map(|s| s.name.as_str()).collect();
        self.services
            .retain(|name, _| names.contains(name.as_str()));
        for s in summary.services {
            let row = self.services.entry(s.name.clone()).or_default();
            row.name = s.name;
            row.version = s.version;
            row.manifest_hash = s.manifest_hash;
            row.capabilities = s.capabilities;
            // Names left out of a state too large to send them: keep those the registration gave.
            if !s.actions.is_empty() || s.action_count == 0 {
                row.actions = s.actions;
            }
            if s.last_seen.is_some() {
                row.last_seen = row.last_seen.max_by_key_time(s.last_seen);
            }
            row.shutting_down = s.liveness == triggers_emulator::recorder::Liveness::ShuttingDown;
            row.replica_count = Some(s.replicas);
        }
        for flow in summary.flows {
            self.set_flow(flow);
        }
        // Only the newest runs fit; older ones would push each other out on every poll.
        let skip = summary.runs.len().saturating_sub(self.runs.capacity());
        for r in summary.runs.into_iter().skip(skip) {
            let version = self.flows.get(&r.flow_id).map_or(0, |f| f.version);
            let run = self.run_mut(&r.id, &r.flow_id, version, r.started_at);
            if run.flow_version == 0 {
                run.flow_version = version;
            }
            run.from_emulator = true;
            run.status = r.status;
            run.started_at = r.started_at;
            run.settled_at = r.settled_at;
            run.failed = r.failed;
            run.steps = r.steps.max(run.timeline.len());
        }
    }

    /// Replaces a run with the emulator's full account of it (fetched on drill-in).
    pub(crate) fn apply_run(&mut self, run: Run) {
        for e in &run.timeline {
            self.note_ran(
                &run.id,
                &run.flow_id,
                run.flow_version,
                &e.node_id,
                &e.status,
            );
        }
        let steps = EventSteps::resume(&run.timeline, |node| {
            self.retry_allowance(&run.flow_id, node)
        });
        let row = self.run_mut(&run.id, &run.flow_id, run.flow_version, run.started_at);
        row.from_emulator = true;
        row.flow_version = run.flow_version;
        row.status = run.status;
        row.started_at = run.started_at;
        row.settled_at = run.settled_at;
        row.failed = run.failed.into_iter().collect();
        row.steps = run.timeline.len();
        row.timeline = run.timeline;
        row.event_steps = steps;
        row.dlq = row.dlq.max(run.dlq.len());
    }

    /// Applies a message seen on `triggers.v2.>` by the passive observer.
    pub(crate) fn apply_observed(&mut self, msg: Observed) -> bool {
        let payload = String::from_utf8_lossy(&msg.payload).into_owned();
        let Decoded {
            kind,
            mut note,
            undecodable,
        } = self.decode_observed(&msg);
        self.last_seq += 1;
        let seq = self.last_seq;
        if let Some((shape, error)) = undecodable {
            note = format!("not decodable as a {shape}: {error}");
            self.push_violation(ViolationRow {
                seq,
                at: msg.at,
                severity: "error".into(),
                rule: format!("undecodable_{shape}"),
                message: error,
                subject: msg.subject.clone(),
                headers: msg.headers.clone(),
                payload: payload.clone(),
            });
        }
        let event = Event {
            seq,
            at: msg.at,
            subject: msg.subject,
            headers: msg.headers,
            payload,
            kind,
            note,
        };
        self.apply_event(event, msg.at)
    }

    /// Reads an observed message as the wire type its subject names. A flow broadcast and a
    /// registration request update the flows and services here and now.
    fn decode_observed(&mut self, msg: &Observed) -> Decoded {
        let payload = msg.payload.as_slice();
        match LockedSubject::parse(&msg.subject) {
            Some(LockedSubject::Heartbeat) => match Heartbeat::from_json(payload) {
                Ok(heartbeat) => Decoded::kind(RecordKind::Heartbeat { heartbeat }),
                Err(e) => Decoded::undecodable("heartbeat", &e),
            },
            Some(LockedSubject::FlowEvents { .. }) => match CompletionEvent::from_json(payload) {
                Ok(event) => Decoded::kind(RecordKind::Completion { event }),
                Err(e) => Decoded::undecodable("completion_event", &e),
            },
            Some(LockedSubject::Dlq { .. }) => {
                let headers: Headers = msg.headers.iter().cloned().collect();
                let msg_id = headers
                    .get(names::NATS_MSG_ID)
                    .unwrap_or_default()
                    .to_owned();
                match DlqEntry::from_json(payload) {
                    Ok(entry) => Decoded::kind(RecordKind::Dlq {
                        entry: Some(entry),
                        msg_id,
                    }),
                    Err(e) => Decoded {
                        kind: Some(RecordKind::Dlq {
                            entry: None,
                            msg_id,
                        }),
                        ..Decoded::undecodable("dlq_entry", &e)
                    },
                }
            }
            Some(LockedSubject::FlowBroadcast { .. }) => match FlowEnvelope::from_json(payload) {
                Ok(envelope) => {
                    if let Ok(flow) = Flow::from_envelope(&envelope) {
                        self.set_flow(flow);
                    }
                    Decoded::kind(RecordKind::Broadcast {
                        flow_id: envelope.id,
                        version: envelope.version,
                    })
                }
                Err(e) => Decoded::undecodable("flow_envelope", &e),
            },
            Some(LockedSubject::ManifestRegister) => match Manifest::from_json(payload) {
                Ok(m) => {
                    self.register(&m.service, &m.manifest_hash, Some(&m));
                    Decoded::note(format!("registration request of {}", m.service))
                }
                Err(e) => Decoded::undecodable("manifest", &e),
            },
            Some(LockedSubject::ManifestFetch) => Decoded::note("manifest fetch".into()),
            None => Decoded::note("outside the locked subject table".into()),
        }
    }
}

/// What the passive observer made of a message: its record kind when it is one, a note for the
/// traffic log, and the shape it failed to decode as (and why).
struct Decoded {
    kind: Option<RecordKind>,
    note: String,
    undecodable: Option<(&'static str, String)>,
}

impl Decoded {
    fn kind(kind: RecordKind) -> Self {
        Decoded {
            kind: Some(kind),
            note: String::new(),
            undecodable: None,
        }
    }

    fn note(note: String) -> Self {
        Decoded {
            kind: None,
            note,
            undecodable: None,
        }
    }

    fn undecodable(shape: &'static str, error: &dyn std::fmt::Display) -> Self {
        Decoded {
            kind: None,
            note: String::new(),
            undecodable: Some((shape, error.to_string())),
        }
    }
}

trait MaxTime {
    fn max_by_key_time(self, other: Option<GoTime>) -> Option<GoTime>;
}

impl MaxTime for Option<GoTime> {
    fn max_by_key_time(self, other: Option<GoTime>) -> Option<GoTime> {
        match (self, other) {
            (Some(a), Some(b)) => Some(if b.unix_nanos() > a.unix_nanos() {
                b
            } else {
                a
            }),
            (a, b) => a.or(b),
        }
    }
}

impl Model {
    /// Remembers for the rest of the session that `node` of the flow version ran in `run_id`,
    /// and which edges into and out of it that run took (its graph marks the nodes and edges no
    /// run reached). A dead-lettered delivery is not running; a timer that fired also ran the
    /// service-in it resumes into, which sends no event of its own.
    fn note_ran(&mut self, run_id: &str, flow_id: &str, version: i64, node: &str, status: &str) {
        if flow_id.is_empty() {
            return;
        }
        // Borrowed, field by field: this runs for every event.
        let flow = self.flows.get(flow_id).and_then(|f| f.flow.as_ref());
        let timeline: &[TimelineEntry] = self
            .run_index
            .get(run_id)
            .and_then(|abs| self.runs.get_abs(*abs))
            .map_or(&[], |run| run.timeline.as_slice());
        let in_run = |id: &str, test: fn(&str) -> bool| {
            timeline.iter().any(|t| t.node_id == id && test(&t.status))
        };
        let covered = self.ran.entry((flow_id.to_owned(), version)).or_default();
        if status != "dead_lettered" {
            covered.nodes.insert(node.to_owned());
        }
        let Some(flow) = flow.filter(|f| f.version == version) else {
            return;
        };
        // A service-in a fired timer resumed into passed its output on without an event.
        let passed = |n: &Node| {
            in_run(&n.id, passed_on)
                || (n.node_type == NodeType::ServiceIn
                    && flow.predecessors(&n.id).any(|(_, p)| {
                        p.node_type == NodeType::Timer && in_run(&p.id, |s| s == "fired")
                    }))
        };
        // Any event of a node (a retry too) says a predecessor's output reached it.
        for (edge, from) in flow.predecessors(node) {
            if passed(from) {
                covered.edges.insert(edge.id.clone());
            }
        }
        if passed_on(status) {
            for (edge, to) in flow.successors(node) {
                let resumed = status == "fired" && to.node_type == NodeType::ServiceIn;
                if resumed {
                    covered.nodes.insert(to.id.clone());
                }
                if resumed || in_run(&to.id, |_| true) {
                    covered.edges.insert(edge.id.clone());
                }
            }
        }
    }
}

/// A node with this status passed its output on to its successors.
fn passed_on(status: &str) -> bool {
    matches!(status, "succeeded" | "triggered" | "fired")
}

fn engine_step(run: &mut RunRow, seq: u64, node: &str, node_type: &str, status: &str, at: GoTime) {
    run.timeline.push(TimelineEntry {
        seq,
        node_id: node.to_owned(),
        node_type: node_type.to_owned(),
        service: "engine".into(),
        status: status.to_owned(),
        started_at: at,
        finished_at: at,
        error: String::new(),
        retries: 0,
    });
    run.steps = run.steps.max(run.timeline.len());
}

/// The recorder's rule, for runs the emulator has not described.
fn refresh_status(run: &mut RunRow, now: GoTime) {
    // A cancelled run stays so whatever comes after.
    if run.from_emulator || run.status == RunStatus::Cancelled {
        return;
    }
    let before = run.status;
    run.status = RunStatus::of(
        !run.pending.is_empty(),
        run.timers > 0,
        !run.failed.is_empty(),
    );
    if run.status.is_settled() && !before.is_settled() {
        run.settled_at = Some(now);
    } else if !run.status.is_settled() {
        run.settled_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{at_ms, empty_model};
    use crate::model::Mode;
    use crate::theme::Theme;

    fn event(run: &str, node: &str, status: &str) -> CompletionEvent {
        CompletionEvent {
            flow_run_id: run.into(),
            flow_id: "diamond".into(),
            flow_version: 1,
            node_id: node.into(),
            node_type: "action".into(),
            service: "s".into(),
            started_at: at_ms(0),
            finished_at: at_ms(1),
            status: status.into(),
            error: String::new(),
            trace_id: String::new(),
        }
    }

    /// A node reached by two edges ran, but only through the edge whose source passed its
    /// output on: the other edge is not taken, whatever order the events came in.
    #[test]
    fn an_edge_into_a_node_that_ran_is_taken_only_from_a_node_that_passed_on() {
        let flow: Flow = serde_json::from_value(serde_json::json!({"id": "diamond", "version": 1,
            "nodes": [
                {"id": "in", "type": "service-in", "service": "s"},
                {"id": "a", "type": "action", "service": "s", "action": "a"},
                {"id": "b", "type": "action", "service": "s", "action": "b"},
                {"id": "c", "type": "action", "service": "s", "action": "c"}],
            "edges": [
                {"id": "in-a", "from": "in", "to": "a"}, {"id": "in-b", "from": "in", "to": "b"},
                {"id": "a-c", "from": "a", "to": "c"}, {"id": "b-c", "from": "b", "to": "c"}]}))
        .expect("a flow");
        for order in [["a", "b", "c"], ["c", "b", "a"]] {
            let mut model = empty_model(Mode::Control, Theme::colored());
            let row = model.flow_row("diamond");
            row.version = 1;
            row.flow = Some(flow.clone());
            let run = model.run_mut("r1", "diamond", 1, at_ms(0));
            engine_step(run, 1, "in", "service-in", "triggered", at_ms(0));
            model.note_ran("r1", "diamond", 1, "in", "triggered");
            for (seq, node) in order.iter().enumerate() {
                let status = if *node == "a" { "failed" } else { "succeeded" };
                model.completion(&event("r1", node, status), seq as u64 + 2);
            }
            let covered = &model.ran[&("diamond".to_owned(), 1)];
            let edges: Vec<&str> = covered.edges.iter().map(String::as_str).collect();
            assert_eq!(
                edges,
                ["b-c", "in-a", "in-b"],
                "events in the order {order:?}"
            );
            assert_eq!(covered.nodes.len(), 4);
        }
    }

    /// Under `up --tui` a run's trigger and events arrive before the state poll brings its
    /// flow: once the flow is known, its edges are noted by the same rule as when it was known
    /// first (they were all drawn "not taken"; `watch` on the same `up` drew them taken).
    #[test]
    fn a_flow_known_after_its_runs_events_draws_their_edges_taken() {
        let flow: Flow = serde_json::from_value(serde_json::json!({"id": "diamond", "version": 1,
            "nodes": [
                {"id": "in", "type": "service-in", "service": "s"},
                {"id": "a", "type": "action", "service": "s", "action": "a"},
                {"id": "b", "type": "action", "service": "s", "action": "b"},
                {"id": "c", "type": "action", "service": "s", "action": "c"}],
            "edges": [
                {"id": "in-a", "from": "in", "to": "a"}, {"id": "in-b", "from": "in", "to": "b"},
                {"id": "a-c", "from": "a", "to": "c"}, {"id": "b-c", "from": "b", "to": "c"}]}))
        .expect("a flow");
        let mut model = empty_model(Mode::InProcess, Theme::colored());
        // The trigger, heard with no flow known: its entry unnamed, its version unknown.
        let run = model.run_mut("r1", "diamond", 0, at_ms(0));
        engine_step(run, 1, "trigger", "service-in", "triggered", at_ms(0));
        for (seq, (node, status)) in [("a", "failed"), ("b", "succeeded"), ("c", "succeeded")]
            .into_iter()
            .enumerate()
        {
            model.completion(&event("r1", node, status), seq as u64 + 2);
        }
        model.set_flow(flow);
        let covered = &model.ran[&("diamond".to_owned(), 1)];
        let edges: Vec<&str> = covered.edges.iter().map(String::as_str).collect();
        assert_eq!(edges, ["b-c", "in-a", "in-b"]);
        assert_eq!(covered.nodes.len(), 4, "{:?}", covered.nodes);
    }

    /// A node run twice (a fan-out into it, a repeating timer before it): each step counts the
    /// failed attempts of its own execution, as the emulator's timeline does, and an event
    /// published twice is one step.
    #[test]
    fn a_steps_retries_are_those_of_its_own_execution_as_the_emulator_counts_them() {
        let flow: Flow = serde_json::from_value(serde_json::json!({"id": "diamond", "version": 1,
            "nodes": [
                {"id": "in", "type": "service-in", "service": "s"},
                {"id": "a", "type": "action", "service": "s", "action": "a"}],
            "edges": [{"id": "in-a", "from": "in", "to": "a"}]}))
        .expect("a flow");
        let manifest: Manifest = serde_json::from_value(serde_json::json!({
            "protocol_version": "1.0.0", "service": "s", "service_version": "1",
            "actions": [{"name": "a", "input_schema": null, "result_schema": null,
                "timeout_ms": 1000, "dlq": "triggers.v2.dlq.s.a",
                "retry": {"max_attempts": 2, "initial_backoff_ms": 0, "backoff_factor": 1,
                          "max_backoff_ms": 0}}],
            "service_sources": [], "supports_nodes": []}))
        .expect("a manifest");
        let mut model = empty_model(Mode::Control, Theme::colored());
        model.register("s", "h", Some(&manifest));
        let row = model.flow_row("diamond");
        row.version = 1;
        row.flow = Some(flow);
        let events: Vec<CompletionEvent> = ["retrying", "succeeded", "retrying", "succeeded"]
            .iter()
            .enumerate()
            .map(|(i, status)| CompletionEvent {
                started_at: at_ms(10 * i as i64),
                finished_at: at_ms(10 * i as i64 + 1),
                ..event("r1", "a", status)
            })
            .collect();
        for (seq, e) in events.iter().enumerate() {
            model.completion(e, seq as u64 + 1);
        }
        // The same event again (a publish retried after a lost ack): no new step.
        model.completion(&events[3], 9);
        let run = model.existing_run_mut("r1").expect("the run");
        let retries: Vec<u32> = run.timeline.iter().map(|e| e.retries).collect();
        assert_eq!(retries, [0, 1, 0, 1]);
        // What the emulator makes of the same events.
        let mut steps = EventSteps::default();
        let allowance = retry_allowance(Some(2));
        let emulator: Vec<u32> = events
            .iter()
            .enumerate()
            .filter_map(|(i, e)| steps.step(e, i as u64, allowance))
            .map(|e| e.retries)
            .collect();
        assert_eq!(retries, emulator);
    }
}
