//! Order on the wire: what the wire tap ([`natsbox::tap`]) sees, in the order the server routed
//! it, judged per delivery. The tap watches, as the orchestrator's user, `triggers.v2.>`
//! (completion events, DLQ entries), `$JS.ACK.>` (acks) and the services' inbound subjects
//! (hops), all on one connection, so that "A was published before B" can be told.
//!
//! A delivery the emulator published (a trigger, a timer's firing, a resend) is known by its
//! stream sequence, from the publish's PubAck; its ack names that sequence
//! (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>...`). What a delivery makes its service
//! report (the events of the nodes it runs, its DLQ entries, its hops) is told from the flow: the
//! nodes of the receiving service reached from the delivery's source without leaving the service.
//! Rules:
//! - `ack_before_reports`: a report of a delivery published after the delivery was acked (a
//!   report repeated from before the ack, a redelivery's replay, is not one);
//! - `dlq_before_failed_event`: an action's DLQ entry before the action's `failed` event;
//! - `handed_on_before_event`: a hop before the `succeeded` event of the node it hands on;
//! - `hop_not_jetstream`: a hop published without a reply subject (a plain publish: no
//!   JetStream ack awaited).
//!
//! Deliveries the emulator did not publish (hops between services, an entry's delivery published
//! again by another client) are not judged by the ack rule; their reports are never blamed on one
//! of the emulator's deliveries. Acks count only on the protocol's durable consumer
//! (`triggers-<service>-<safe-subject>`); `+WPI` and `-NAK` are not acks. After the tap lost
//! messages (a reconnection, a full queue) the runs open then are judged no further by these
//! rules: a verdict on partial data is not one.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};

use triggers_sdk::flow::{Flow, NodeType};
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::shapes::status;
use triggers_sdk::wire::subject::LockedSubject;
use triggers_sdk::wire::{CompletionEvent, DlqEntry, Envelope, Headers};

use crate::conformance::Violation;
use crate::recorder::{Body, SharedHeaders};

/// Runs followed by the tap at once; the oldest beyond it are forgotten, counted.
const MAX_RUNS: usize = 20_000;
/// Settled runs kept (a late report of a settled run is still judged): the oldest beyond it go.
const MAX_SETTLED: usize = 2_000;
/// Deliveries, and reports remembered, per run.
const MAX_DELIVERIES: usize = 256;
const MAX_REPORTS: usize = 512;
/// Acks of deliveries whose PubAck the emulator has not read yet.
const MAX_EARLY_ACKS: usize = 4096;

/// What the tap has seen and what it judges by; kept in the emulator's state.
#[derive(Default)]
pub(crate) struct Order {
    /// Position of the last message the tap saw.
    pos: u64,
    runs: HashMap<String, RunOrder>,
    /// Run ids in the order they were first followed (eviction).
    fifo: VecDeque<String>,
    settled: VecDeque<String>,
    /// (stream, stream seq) -> (run, index of the delivery).
    by_seq: HashMap<(String, u64), (String, usize)>,
    /// Acks whose delivery is not known yet: (stream, seq, consumer, position).
    early_acks: VecDeque<(String, u64, String, u64)>,
    /// Runs forgotten beyond the bound.
    pub(crate) evicted: u64,
    /// Times the tap lost messages (reconnected, or its queue was full).
    pub(crate) gaps: u64,
}

#[derive(Default)]
struct RunOrder {
    deliveries: Vec<DeliveryOrder>,
    /// Reports seen, newest last (bounded), for acks learnt late.
    reports: VecDeque<Report>,
    /// Identities of the reports seen (bounded with `reports`' bound times 8).
    ids: HashSet<u64>,
    /// (node, status) of the completion events seen.
    events: HashSet<(String, String)>,
    /// The tap lost messages while the run was open: no more judged.
    gap: bool,
}

struct DeliveryOrder {
    service: String,
    source: String,
    key: String,
    /// The consumer whose ack counts: `triggers-<service>-<safe-subject>`.
    consumer: String,
    /// Nodes of `service` the delivery runs.
    nodes: BTreeSet<String>,
    /// Whether `service` holds `source` (an entry, a timer's resume): it hands on from it too.
    held: bool,
    /// Published by the emulator (its ack is judged); else a hop between services.
    tracked: bool,
    acked_at: Option<u64>,
    blamed: bool,
}

#[derive(Clone)]
struct Report {
    pos: u64,
    id: u64,
    /// The service that sent it.
    service: String,
    what: What,
    subject: String,
    headers: SharedHeaders,
    payload: Body,
}

#[derive(Clone)]
enum What {
    Event { node: String, status: String },
    Dlq { key: String, source: String },
    Hop { source: String },
}

impl What {
    fn dlq(entry: DlqEntry) -> Self {
        What::Dlq {
            key: entry.envelope.idempotency_key,
            source: entry.envelope.source_node_id,
        }
    }

    fn describe(&self) -> String {
        match self {
            What::Event { node, status } => format!("the completion event of {node:?} ({status})"),
            What::Dlq { .. } => "a DLQ entry".into(),
            What::Hop { source } => format!("a hop of {source:?}'s output"),
        }
    }
}

impl DeliveryOrder {
    fn reports(&self, r: &Report) -> bool {
        if r.service != self.service {
            return false;
        }
        let from =
            |source: &str| self.nodes.contains(source) || (self.held && source == self.source);
        match &r.what {
            What::Event { node, .. } => self.nodes.contains(node),
            What::Dlq { key, source } => *key == self.key || from(source) || *source == self.source,
            What::Hop { source } => from(source),
        }
    }
}

/// The nodes of `service` a delivery from `source` runs (reached without leaving the service or
/// passing a timer), and whether the service holds `source`.
fn nodes_run(flow: &Flow, source: &str, service: &str) -> (BTreeSet<String>, bool) {
    let held = flow.node(source).is_some_and(|n| n.service == service);
    let mut nodes = BTreeSet::new();
    let mut todo: Vec<&str> = flow
        .successors(source)
        .filter(|(_, n)| n.node_type != NodeType::Timer && n.service == service)
        .map(|(_, n)| n.id.as_str())
        .collect();
    while let Some(id) = todo.pop() {
        if nodes.len() >= 10_000 || !nodes.insert(id.to_owned()) {
            continue;
        }
        todo.extend(
            flow.successors(id)
                .filter(|(_, n)| n.node_type != NodeType::Timer && n.service == service)
                .map(|(_, n)| n.id.as_str()),
        );
    }
    (nodes, held)
}

/// A message the tap saw, decoded (outside the emulator's lock).
pub(crate) enum Seen {
    Ack {
        stream: String,
        consumer: String,
        seq: u64,
    },
    Event(CompletionEvent),
    Dlq {
        service: String,
        action: Option<String>,
        entry: DlqEntry,
    },
    /// A message on an inbound subject with an envelope.
    Hop {
        envelope: Envelope,
        jetstream: bool,
        /// The service whose inbound subject it is on.
        receiver: String,
    },
    Other,
}

/// Decodes what the tap saw on `subject`.
pub(crate) fn decode(
    subject: &str,
    reply: Option<&str>,
    headers: &Headers,
    payload: &[u8],
    inbound: Option<&str>,
) -> Seen {
    if let Some(rest) = subject.strip_prefix("$JS.ACK.") {
        // +WPI, -NAK, +NXT with a count... only an ack or a term settles a delivery.
        let acked = payload.is_empty()
            || payload.starts_with(b"+ACK")
            || payload.starts_with(b"+TERM")
            || payload.starts_with(b"+NXT");
        let tokens: Vec<&str> = rest.split('.').collect();
        // v1: <stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>;
        // v2: <domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>...
        let at = match tokens.len() {
            7 => 0,
            n if n >= 9 => 2,
            _ => return Seen::Other,
        };
        return match (acked, tokens[at + 3].parse()) {
            (true, Ok(seq)) => Seen::Ack {
                stream: tokens[at].to_owned(),
                consumer: tokens[at + 1].to_owned(),
                seq,
            },
            _ => Seen::Other,
        };
    }
    match LockedSubject::parse(subject) {
        Some(LockedSubject::FlowEvents { .. }) => CompletionEvent::from_json(payload)
            .map(Seen::Event)
            .unwrap_or(Seen::Other),
        Some(LockedSubject::Dlq { service, tail }) => match DlqEntry::from_json(payload) {
            Ok(entry) => Seen::Dlq {
                service,
                action: triggers_sdk::wire::subject::FallbackKind::parse(&tail)
                    .is_none()
                    .then_some(tail),
                entry,
            },
            Err(_) => Seen::Other,
        },
        Some(_) => Seen::Other,
        None => match (inbound, Envelope::from_headers(headers)) {
            (Some(receiver), Ok(envelope)) => Seen::Hop {
                envelope,
                jetstream: reply.is_some_and(|r| !r.is_empty()),
                receiver: receiver.to_owned(),
            },
            _ => Seen::Other,
        },
    }
}

fn identity(subject: &str, headers: &Headers, payload: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    subject.hash(&mut h);
    headers
        .get(names::NATS_MSG_ID)
        .unwrap_or_default()
        .hash(&mut h);
    payload.hash(&mut h);
    h.finish()
}

/// The action failure kinds: the action ran and failed, and its `failed` event comes first.
const FAILED_KINDS: [&str; 3] = ["action_failed", "action_timeout", "action_panicked"];

impl Order {
    /// The tap lost messages: every run followed now is judged no further.
    pub(crate) fn gap(&mut self) {
        self.gaps += 1;
        for run in self.runs.values_mut() {
            run.gap = true;
        }
    }

    /// A run settled: it is forgotten once `MAX_SETTLED` runs settled after it.
    pub(crate) fn settled(&mut self, run_id: &str) {
        if !self.runs.contains_key(run_id) {
            return;
        }
        self.settled.push_back(run_id.to_owned());
        while self.settled.len() > MAX_SETTLED {
            if let Some(old) = self.settled.pop_front() {
                self.forget(&old);
            }
        }
    }

    /// Forgets a run at once (a run taken back: it never happened).
    pub(crate) fn forget(&mut self, run_id: &str) {
        if self.runs.remove(run_id).is_some() {
            self.by_seq.retain(|_, (r, _)| r != run_id);
        }
    }

    fn run(&mut self, run_id: &str) -> &mut RunOrder {
        if !self.runs.contains_key(run_id) {
            while self.runs.len() >= MAX_RUNS {
                let Some(old) = self.fifo.pop_front() else {
                    break;
                };
                if self.runs.contains_key(&old) {
                    self.evicted += 1;
                    self.forget(&old);
                }
            }
            self.fifo.push_back(run_id.to_owned());
        }
        self.runs.entry(run_id.to_owned()).or_default()
    }

    /// A delivery the emulator is about to publish on `subject` (of `service`), for the run
    /// `flow` runs: known from before it can be acted on, so that no report of it is blamed on
    /// an earlier delivery meanwhile. Returns its index, for [`Order::stored`].
    pub(crate) fn expect(
        &mut self,
        flow: &Flow,
        service: &str,
        subject: &str,
        envelope: &Envelope,
    ) -> Option<usize> {
        let (nodes, held) = nodes_run(flow, &envelope.source_node_id, service);
        let consumer =
            triggers_sdk::wire::subject::consumer_name(service, subject).unwrap_or_default();
        let run = self.run(&envelope.flow_run_id);
        if run.deliveries.len() >= MAX_DELIVERIES {
            return None;
        }
        run.deliveries.push(DeliveryOrder {
            service: service.to_owned(),
            source: envelope.source_node_id.clone(),
            key: envelope.idempotency_key.clone(),
            consumer,
            nodes,
            held,
            tracked: true,
            acked_at: None,
            blamed: false,
        });
        Some(run.deliveries.len() - 1)
    }

    /// The delivery `index` of `run_id` was stored as `seq` of `stream` (its PubAck): its ack
    /// can be told from now on. An ack seen before (the service may be quicker than the
    /// emulator's reading of the PubAck) counts, and the reports seen after it are judged now.
    pub(crate) fn stored(
        &mut self,
        run_id: &str,
        index: usize,
        stream: &str,
        seq: u64,
    ) -> Vec<Violation> {
        let Some(consumer) = self
            .runs
            .get(run_id)
            .and_then(|r| r.deliveries.get(index))
            .map(|d| d.consumer.clone())
        else {
            return Vec::new();
        };
        self.by_seq
            .insert((stream.to_owned(), seq), (run_id.to_owned(), index));
        let Some(at) = self
            .early_acks
            .iter()
            .position(|(s, q, c, _)| s == stream && *q == seq && *c == consumer)
            .and_then(|i| self.early_acks.remove(i))
            .map(|(.., pos)| pos)
        else {
            return Vec::new();
        };
        let Some(run) = self.runs.get_mut(run_id) else {
            return Vec::new();
        };
        if let Some(d) = run.deliveries.get_mut(index) {
            d.acked_at = Some(at);
        }
        let late: Vec<Report> = run.reports.iter().filter(|r| r.pos > at).cloned().collect();
        // Judged as they would have been on arrival: against the reports seen before each.
        let mut found = Vec::new();
        for r in late {
            let before: HashSet<u64> = run
                .reports
                .iter()
                .filter(|o| o.pos < r.pos)
                .map(|o| o.id)
                .collect();
            if before.contains(&r.id) {
                continue;
            }
            if let Some(v) = judge_ack(run_id, run, &r, false) {
                found.push(v);
            }
        }
        found
    }

    /// One message the tap saw, in order. `run_flow` gives the flow of a run the emulator
    /// started (none for a run it does not know or follows only); `own` tells the emulator's own
    /// publishes.
    pub(crate) fn seen<'f>(
        &mut self,
        seen: Seen,
        subject: &str,
        headers: &Headers,
        payload: &Body,
        own: bool,
        run_flow: impl Fn(&str) -> Option<&'f Flow>,
    ) -> Vec<Violation> {
        self.pos += 1;
        let pos = self.pos;
        let wire = Wire {
            subject,
            headers,
            payload,
        };
        let mut found = Vec::new();
        let (run_id, service, what) = match seen {
            Seen::Other => return found,
            Seen::Ack {
                stream,
                consumer,
                seq,
            } => {
                self.ack(stream, consumer, seq, pos);
                return found;
            }
            Seen::Event(e) => {
                let what = What::Event {
                    node: e.node_id.clone(),
                    status: e.status.clone(),
                };
                (e.flow_run_id, e.service, what)
            }
            Seen::Dlq {
                service,
                action,
                entry,
            } => {
                let run_id = entry.envelope.flow_run_id.clone();
                let flow = run_flow(&run_id);
                found.extend(
                    flow.and_then(|f| self.dlq_before_failed(&wire, f, &service, action, &entry)),
                );
                (run_id, service, What::dlq(entry))
            }
            Seen::Hop {
                envelope,
                jetstream,
                receiver,
            } => {
                let flow = run_flow(&envelope.flow_run_id).filter(|_| !own);
                let hop = flow
                    .and_then(|f| self.hop(&wire, f, envelope, jetstream, receiver, &mut found));
                let Some(report) = hop else { return found };
                report
            }
        };
        if own || run_flow(&run_id).is_none() {
            return found;
        }
        found.extend(self.report(&wire, pos, &run_id, service, what));
        found
    }

    /// An ack of `seq` of `stream` by `consumer`, seen at `pos`: the delivery it settles is
    /// acked then (on its own consumer, once); an ack of a delivery whose PubAck the emulator
    /// has not read yet waits for it ([`Order::stored`]).
    fn ack(&mut self, stream: String, consumer: String, seq: u64, pos: u64) {
        match self.by_seq.get(&(stream.clone(), seq)) {
            Some((run_id, i)) => {
                if let Some(d) = self
                    .runs
                    .get_mut(run_id)
                    .and_then(|r| r.deliveries.get_mut(*i))
                    && d.consumer == consumer
                    && d.acked_at.is_none()
                {
                    d.acked_at = Some(pos);
                }
            }
            None => {
                if self.early_acks.len() >= MAX_EARLY_ACKS {
                    self.early_acks.pop_front();
                }
                self.early_acks.push_back((stream, seq, consumer, pos));
            }
        }
    }

    /// `dlq_before_failed_event`: a DLQ entry of an action's failure (on the action's own DLQ
    /// subject) seen before the `failed` event of any node of that action.
    fn dlq_before_failed(
        &self,
        wire: &Wire<'_>,
        flow: &Flow,
        service: &str,
        action: Option<String>,
        entry: &DlqEntry,
    ) -> Option<Violation> {
        let action = action?;
        let run_id = &entry.envelope.flow_run_id;
        let run = self.runs.get(run_id);
        if !FAILED_KINDS.contains(&entry.kind.as_str()) || run.is_some_and(|r| r.gap) {
            return None;
        }
        let nodes: Vec<&str> = flow
            .body
            .nodes
            .iter()
            .filter(|n| {
                n.node_type == NodeType::Action && n.service == service && n.action == action
            })
            .map(|n| n.id.as_str())
            .collect();
        let failed = nodes.iter().any(|n| {
            run.is_some_and(|r| r.events.contains(&(n.to_string(), status::FAILED.into())))
        });
        if nodes.is_empty() || failed {
            return None;
        }
        Some(wire.violation(
            "dlq_before_failed_event",
            format!(
                "run {run_id}: {service} dead-lettered action {action} ({}) before publishing the `failed` completion event of its node {}: the order is the failed event, then the DLQ entry, then the ack (protocol.md §9), so the run settles on the event and a DLQ reader finds the node already failed",
                entry.kind,
                nodes.join(" or ")
            ),
        ))
    }

    /// A hop between services of a run the emulator started: judged (`hop_not_jetstream`,
    /// `handed_on_before_event`, into `found`) and followed as a delivery of the receiver.
    /// Returns the report it is of its sender (run, service, what); none when the flow does not
    /// know its source node.
    fn hop(
        &mut self,
        wire: &Wire<'_>,
        flow: &Flow,
        envelope: Envelope,
        jetstream: bool,
        receiver: String,
        found: &mut Vec<Violation>,
    ) -> Option<(String, String, What)> {
        let Envelope {
            flow_run_id: run_id,
            source_node_id: source,
            idempotency_key: key,
            ..
        } = envelope;
        let sender = flow.node(&source).map(|n| n.service.clone())?;
        let subject = wire.subject;
        if !jetstream {
            found.push(wire.violation(
                "hop_not_jetstream",
                format!(
                    "run {run_id}: {sender} handed {source:?}'s output on to {subject} as a plain NATS publish (no reply subject): a hop MUST be published through JetStream and its ack awaited (protocol.md §7); a plain publish no stream stored is lost, and nobody knows"
                ),
            ));
        }
        // The receiving service runs what follows: its reports are its own, never blamed on an
        // earlier delivery. The same holds for a delivery of the service's own entry published
        // again by another client (a replay, a redelivery forced by hand): what it makes the
        // service report again is that delivery's, not a late report of the acked one.
        let (nodes, held) = nodes_run(flow, &source, &receiver);
        let run = self.run(&run_id);
        if run.deliveries.len() < MAX_DELIVERIES {
            run.deliveries.push(DeliveryOrder {
                service: receiver,
                source: source.clone(),
                key,
                consumer: String::new(),
                nodes,
                held,
                tracked: false,
                acked_at: None,
                blamed: false,
            });
        }
        if !self.may_hand_on(&run_id, &sender, &source) {
            found.push(wire.violation(
                "handed_on_before_event",
                format!(
                    "run {run_id}: {sender} handed {source:?}'s output on to {subject} before publishing {source:?}'s `succeeded` completion event: an event MUST be published before the node's output is handed on (protocol.md §6), so the orchestrator sees the node before what follows it"
                ),
            ));
        }
        Some((run_id, sender, What::Hop { source }))
    }

    /// Whether `sender` may hand on `source`'s output now: it holds the delivery to `source`
    /// (an entry, a timer's resume: no event of `source` comes), or `source`'s `succeeded`
    /// event was seen, or the tap lost messages of the run (no verdict then).
    fn may_hand_on(&self, run_id: &str, sender: &str, source: &str) -> bool {
        let Some(run) = self.runs.get(run_id) else {
            return false;
        };
        let held = run
            .deliveries
            .iter()
            .any(|d| d.tracked && d.held && d.service == sender && d.source == source);
        let reported = run
            .events
            .contains(&(source.to_owned(), status::SUCCEEDED.to_owned()));
        held || reported || run.gap
    }

    /// A report (a completion event, a DLQ entry, a hop) of `service` in a run the emulator
    /// started, seen at `pos`: judged against the acks of the deliveries it can be of
    /// (`ack_before_reports`), then remembered for acks learnt later.
    fn report(
        &mut self,
        wire: &Wire<'_>,
        pos: u64,
        run_id: &str,
        service: String,
        what: What,
    ) -> Option<Violation> {
        let report = Report {
            pos,
            id: identity(wire.subject, wire.headers, wire.payload.as_bytes()),
            service,
            what,
            subject: wire.subject.to_owned(),
            headers: crate::recorder::share_headers(wire.headers),
            payload: wire.payload.clone(),
        };
        let run = self.run(run_id);
        let found = judge_ack(run_id, run, &report, true);
        if let What::Event { node, status } = &report.what {
            run.events.insert((node.clone(), status.clone()));
        }
        if run.ids.len() < MAX_REPORTS * 8 {
            run.ids.insert(report.id);
        }
        if run.reports.len() >= MAX_REPORTS {
            run.reports.pop_front();
        }
        run.reports.push_back(report);
        found
    }
}

/// The message the tap saw that is being judged: what a violation about it quotes.
struct Wire<'a> {
    subject: &'a str,
    headers: &'a Headers,
    payload: &'a Body,
}

impl Wire<'_> {
    fn violation(&self, rule: &'static str, message: String) -> Violation {
        Violation::new(
            rule,
            self.subject,
            message,
            crate::recorder::share_headers(self.headers),
            self.payload.clone(),
        )
    }
}

/// Whether `report` came after every delivery of `run` it can be of was acked (and, when
/// `check_ids`, is not a repeat of a report seen before).
fn judge_ack(
    run_id: &str,
    run: &mut RunOrder,
    report: &Report,
    check_ids: bool,
) -> Option<Violation> {
    if run.gap || (check_ids && run.ids.contains(&report.id)) {
        return None;
    }
    let mut of: Vec<&mut DeliveryOrder> = run
        .deliveries
        .iter_mut()
        .filter(|d| d.reports(report))
        .collect();
    if of.is_empty()
        || !of
            .iter()
            .all(|d| d.tracked && d.acked_at.is_some_and(|a| a < report.pos))
        || of.iter().any(|d| d.blamed)
    {
        return None;
    }
    let d = of.pop()?;
    d.blamed = true;
    Some(Violation::new(
        "ack_before_reports",
        &report.subject,
        format!(
            "run {run_id}: {} published {} after it acked the delivery it belongs to (idempotency key {:?}, source node {:?}): a service MUST NOT ack a delivery before its events, DLQ entries and hops are confirmed (protocol.md §10); had it died in between, the report was lost and nothing would redeliver it",
            report.service,
            report.what.describe(),
            d.key,
            d.source
        ),
        report.headers.clone(),
        report.payload.clone(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_subjects_of_both_forms_name_the_stream_and_sequence() {
        let h = Headers::new();
        match decode("$JS.ACK.s.c.1.42.7.1700000000.0", None, &h, b"+ACK", None) {
            Seen::Ack {
                stream,
                consumer,
                seq,
            } => assert_eq!((stream.as_str(), consumer.as_str(), seq), ("s", "c", 42)),
            _ => panic!("an ack"),
        }
        assert!(matches!(
            decode("$JS.ACK.d.h.s.c.1.42.7.1700000000.0.x", None, &h, b"", None),
            Seen::Ack { seq: 42, .. }
        ));
        for not_an_ack in [&b"+WPI"[..], b"-NAK", b"-NAK {\"delay\":1}"] {
            assert!(matches!(
                decode(
                    "$JS.ACK.s.c.1.42.7.1700000000.0",
                    None,
                    &h,
                    not_an_ack,
                    None
                ),
                Seen::Other
            ));
        }
        assert!(matches!(
            decode("$JS.ACK.s.c.x", None, &h, b"+ACK", None),
            Seen::Other
        ));
    }
}
