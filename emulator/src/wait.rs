//! Waiting for things to happen, without sleeps: each waiter re-checks the state whenever the
//! emulator records something, and on timeout says what it was waiting for and what did arrive.

use std::time::Duration;

use triggers_sdk::wire::shapes::status;
use triggers_sdk::wire::{DlqEntry, Heartbeat};

use crate::emulator::Emulator;
use crate::error::WaitError;
use crate::recorder::{Record, RecordKind, Run, ServiceState, TimelineEntry};
use crate::state::State;
use crate::topics::Topic;

/// Which DLQ entry to wait for. Empty fields match anything.
#[derive(Debug, Clone, Default)]
pub struct DlqFilter {
    /// The exact subject.
    pub subject: Option<String>,
    /// The run (the entry's envelope `flow_run_id`).
    pub run_id: Option<String>,
    /// The entry's `kind`.
    pub kind: Option<String>,
}

impl DlqFilter {
    /// Entries on this subject.
    #[must_use]
    pub fn subject(subject: impl Into<String>) -> Self {
        DlqFilter {
            subject: Some(subject.into()),
            ..Default::default()
        }
    }

    /// Entries of this run.
    #[must_use]
    pub fn run(run_id: impl AsRef<str>) -> Self {
        DlqFilter {
            run_id: Some(run_id.as_ref().to_owned()),
            ..Default::default()
        }
    }

    /// Any entry.
    #[must_use]
    pub fn any() -> Self {
        DlqFilter::default()
    }

    /// Also require this kind.
    #[must_use]
    pub fn with_kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    fn matches(&self, record: &Record) -> bool {
        let RecordKind::Dlq { entry, .. } = &record.kind else {
            return false;
        };
        self.subject.as_ref().is_none_or(|s| *s == record.subject)
            && self
                .run_id
                .as_ref()
                .is_none_or(|r| entry.as_ref().is_some_and(|e| e.envelope.flow_run_id == *r))
            && self
                .kind
                .as_ref()
                .is_none_or(|k| entry.as_ref().is_some_and(|e| e.kind == *k))
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(s) = &self.subject {
            parts.push(format!("on {s}"));
        }
        if let Some(r) = &self.run_id {
            parts.push(format!("of run {r}"));
        }
        if let Some(k) = &self.kind {
            parts.push(format!("of kind {k}"));
        }
        if parts.is_empty() {
            "a DLQ entry".into()
        } else {
            format!("a DLQ entry {}", parts.join(", "))
        }
    }
}

/// A DLQ entry as recorded: the subject, the `Nats-Msg-Id`, the decoded entry and the raw bytes.
#[derive(Debug, Clone)]
pub struct DlqRecord {
    /// The subject it was published on.
    pub subject: String,
    /// Its `Nats-Msg-Id`.
    pub msg_id: String,
    /// The entry (`None` when the bytes are not a DLQ entry: the conformance checker says why).
    pub entry: Option<DlqEntry>,
    /// The bytes as published.
    pub payload: String,
    /// The record's sequence number.
    pub seq: u64,
}

impl DlqRecord {
    fn from_record(r: &Record) -> Option<Self> {
        match &r.kind {
            RecordKind::Dlq { entry, msg_id } => Some(DlqRecord {
                subject: r.subject.clone(),
                msg_id: msg_id.clone(),
                entry: entry.clone(),
                payload: r.payload.text().into_owned(),
                seq: r.seq,
            }),
            _ => None,
        }
    }
}

impl Emulator {
    /// Waits until `check` finds something, re-checking whenever the emulator records anything
    /// about `topic` (and every [`RECHECK`](crate::topics::RECHECK) in any case).
    async fn wait_until<T>(
        &self,
        topic: Topic,
        timeout: Duration,
        what: impl Fn() -> String,
        check: impl Fn(&State) -> Option<T>,
        saw: impl Fn(&State) -> String,
    ) -> Result<T, WaitError> {
        let now = tokio::time::Instant::now();
        // A timeout too long for the clock (Duration::MAX) waits "forever": 100 years.
        let deadline = now
            .checked_add(timeout)
            .unwrap_or_else(|| now + triggers_sdk::runtime::MAX_DURATION);
        let mut wakes = self.shared.topics.subscribe(topic);
        loop {
            // Mark the wakes so far seen before checking, so no change slips between the two.
            wakes.seen();
            let found = check(&self.lock());
            if let Some(found) = found {
                return Ok(found);
            }
            if tokio::time::timeout_at(deadline, wakes.next())
                .await
                .is_err()
            {
                let state = self.lock();
                if let Some(found) = check(&state) {
                    return Ok(found);
                }
                return Err(WaitError::Timeout {
                    waited: timeout,
                    waiting_for: what(),
                    saw: saw(&state),
                });
            }
        }
    }

    /// Waits for `service` to register; returns its state.
    ///
    /// # Errors
    /// [`WaitError::Timeout`] listing the registrations that did arrive.
    pub async fn wait_for_registration(&self, service: &str) -> Result<ServiceState, WaitError> {
        self.wait_until(
            Topic::Service(service.to_owned()),
            self.wait_timeout.unwrap_or(self.config().wait_timeout),
            || format!("service {service:?} to register"),
            |s| s.registry.service(service).cloned(),
            |s| describe_records(s, |k| matches!(k, RecordKind::Registration { .. })),
        )
        .await
    }

    /// Waits for a heartbeat from `service` that satisfies `pred`.
    ///
    /// # Errors
    /// [`WaitError::Timeout`] listing the heartbeats that did arrive.
    pub async fn wait_for_heartbeat(
        &self,
        service: &str,
        pred: impl Fn(&Heartbeat) -> bool,
    ) -> Result<Heartbeat, WaitError> {
        self.wait_until(
            Topic::Service(service.to_owned()),
            self.wait_timeout.unwrap_or(self.config().wait_timeout),
            || format!("a matching heartbeat from {service:?}"),
            |s| {
                s.records.iter().rev().find_map(|r| match &r.kind {
                    RecordKind::Heartbeat { heartbeat }
                        if heartbeat.service == service && pred(heartbeat) =>
                    {
                        Some(heartbeat.clone())
                    }
                    _ => None,
                })
            },
            |s| describe_records(s, |k| matches!(k, RecordKind::Heartbeat { .. })),
        )
        .await
    }

    /// Waits until node `node_id` of run `run_id` has finished: its completion event says
    /// `succeeded`, `failed` or `skipped` (not `retrying`). Returns that timeline entry.
    ///
    /// # Errors
    /// [`WaitError::Timeout`] with the run's timeline so far.
    pub async fn wait_for_node(
        &self,
        run_id: impl AsRef<str>,
        node_id: &str,
    ) -> Result<TimelineEntry, WaitError> {
        let run_id = run_id.as_ref();
        self.wait_until(
            Topic::Run(run_id.to_owned()),
            self.wait_timeout.unwrap_or(self.config().wait_timeout),
            || format!("node {node_id:?} of run {run_id} to finish"),
            |s| {
                s.runs.get(run_id).and_then(|r| {
                    r.node_entries(node_id)
                        .find(|e| {
                            matches!(
                                e.status.as_str(),
                                status::SUCCEEDED | status::FAILED | status::SKIPPED
                            )
                        })
                        .cloned()
                })
            },
            |s| describe_run(s, run_id),
        )
        .await
    }

    /// Waits until run `run_id` has settled (every path ended); returns the run.
    ///
    /// # Errors
    /// [`WaitError::Timeout`] with the run's timeline, what is pending and any armed timer.
    pub async fn wait_run_settled(&self, run_id: impl AsRef<str>) -> Result<Run, WaitError> {
        let run_id = run_id.as_ref();
        self.wait_until(
            Topic::Run(run_id.to_owned()),
            self.wait_timeout.unwrap_or(self.config().wait_timeout),
            || format!("run {run_id} to settle"),
            |s| {
                s.runs
                    .get(run_id)
                    .filter(|r| r.status.is_settled())
                    .cloned()
            },
            |s| describe_run(s, run_id),
        )
        .await
    }

    /// Waits until run `run_id` is idle: settled, or waiting on a timer with nothing pending.
    ///
    /// # Errors
    /// [`WaitError::Timeout`] with the run's timeline.
    pub async fn wait_run_idle(&self, run_id: impl AsRef<str>) -> Result<Run, WaitError> {
        let run_id = run_id.as_ref();
        self.wait_until(
            Topic::Run(run_id.to_owned()),
            self.wait_timeout.unwrap_or(self.config().wait_timeout),
            || format!("run {run_id} to be idle (settled, or waiting on a timer)"),
            |s| s.runs.get(run_id).filter(|r| r.pending.is_empty()).cloned(),
            |s| describe_run(s, run_id),
        )
        .await
    }

    /// Waits for a conformance violation of `rule`; returns it.
    ///
    /// # Errors
    /// [`WaitError::Timeout`] listing the violations that were found.
    pub async fn wait_for_violation(
        &self,
        rule: &str,
    ) -> Result<crate::conformance::Violation, WaitError> {
        self.wait_until(
            Topic::Violations,
            self.wait_timeout.unwrap_or(self.config().wait_timeout),
            || format!("a {rule} conformance violation"),
            |s| s.violations.iter().find(|v| v.rule == rule).cloned(),
            |s| describe_records(s, |k| matches!(k, RecordKind::Violation { .. })),
        )
        .await
    }

    /// Waits for a DLQ entry that matches `filter` (as stored, after `Nats-Msg-Id` dedup).
    ///
    /// # Errors
    /// [`WaitError::Timeout`] listing the DLQ entries that did arrive.
    pub async fn wait_dlq(&self, filter: DlqFilter) -> Result<DlqRecord, WaitError> {
        self.wait_until(
            Topic::Dlq,
            self.wait_timeout.unwrap_or(self.config().wait_timeout),
            || format!("{} (after Nats-Msg-Id dedup)", filter.describe()),
            |s| {
                s.records
                    .dlq()
                    .find(|r| filter.matches(r))
                    .and_then(DlqRecord::from_record)
            },
            |s| describe_records(s, |k| matches!(k, RecordKind::Dlq { .. })),
        )
        .await
    }

    /// Waits for `count` DLQ entries that match `filter`.
    ///
    /// # Errors
    /// [`WaitError::Timeout`] listing the DLQ entries that did arrive.
    pub async fn wait_dlq_count(
        &self,
        filter: DlqFilter,
        count: usize,
    ) -> Result<Vec<DlqRecord>, WaitError> {
        self.wait_until(
            Topic::Dlq,
            self.wait_timeout.unwrap_or(self.config().wait_timeout),
            || format!("{count} x {}", filter.describe()),
            |s| {
                let found: Vec<DlqRecord> = s
                    .records
                    .dlq()
                    .filter(|r| filter.matches(r))
                    .filter_map(DlqRecord::from_record)
                    .collect();
                (found.len() >= count).then_some(found)
            },
            |s| describe_records(s, |k| matches!(k, RecordKind::Dlq { .. })),
        )
        .await
    }
}

fn describe_records(state: &State, keep: impl Fn(&RecordKind) -> bool) -> String {
    let lines: Vec<String> = state
        .records
        .iter()
        .filter(|r| keep(&r.kind))
        .map(describe_record)
        .collect();
    if lines.is_empty() {
        "nothing of that kind arrived".into()
    } else {
        let skipped = lines.len().saturating_sub(20);
        let mut out = lines
            .into_iter()
            .skip(skipped)
            .collect::<Vec<_>>()
            .join("\n  ");
        if skipped > 0 {
            out = format!("({skipped} earlier not shown)\n  {out}");
        }
        format!("what arrived:\n  {out}")
    }
}

/// One line for a record.
pub(crate) fn describe_record(r: &Record) -> String {
    match &r.kind {
        RecordKind::Registration {
            service,
            accepted,
            error,
            ..
        } => match error {
            Some(e) if !accepted => format!("#{} registration of {service:?} refused: {e}", r.seq),
            _ => format!("#{} registration of {service:?} accepted", r.seq),
        },
        RecordKind::Heartbeat { heartbeat } => format!(
            "#{} heartbeat {} {} shutting_down={}",
            r.seq, heartbeat.service, heartbeat.now, heartbeat.shutting_down
        ),
        RecordKind::Dlq { entry, msg_id } => match entry {
            Some(e) => format!(
                "#{} DLQ {} kind={} run={} msg_id={msg_id}: {}",
                r.seq, r.subject, e.kind, e.envelope.flow_run_id, e.err_msg
            ),
            None => format!(
                "#{} DLQ {} (not a DLQ entry) msg_id={msg_id}",
                r.seq, r.subject
            ),
        },
        RecordKind::Completion { event } => format!(
            "#{} {} {} {} {}{}",
            r.seq,
            event.flow_run_id,
            event.node_id,
            event.service,
            event.status,
            if event.error.is_empty() {
                String::new()
            } else {
                format!(": {}", event.error)
            }
        ),
        other => format!("#{} {} {}", r.seq, other.name(), r.subject),
    }
}

impl Emulator {
    /// A readable account of a run: its timeline with errors, what is pending, armed timers and
    /// its DLQ entries (what a timed-out wait prints).
    #[must_use]
    pub fn describe_run(&self, run_id: &str) -> String {
        describe_run(&self.lock(), run_id)
    }
}

fn describe_run(state: &State, run_id: &str) -> String {
    let Some(run) = state.runs.get(run_id) else {
        let known: Vec<&str> = state.runs.latest_ids(5).collect();
        let evicted = if state.runs.evicted() > 0 {
            format!(
                "; {} settled run(s) were evicted beyond EmulatorConfig::max_runs, it may be one",
                state.runs.evicted()
            )
        } else {
            String::new()
        };
        let unfollowed = if state.runs.unfollowed() > 0 {
            format!(
                "; the events of {} run(s) it did not start were not followed (max_followed_runs such runs were open), it may be one",
                state.runs.unfollowed()
            )
        } else {
            String::new()
        };
        return format!("no run {run_id} is known (latest runs: {known:?}){evicted}{unfollowed}");
    };
    let mut out = format!(
        "run {} of flow {} v{} is {:?}\n  timeline:",
        run.id, run.flow_id, run.flow_version, run.status
    );
    if run.timeline.is_empty() {
        out.push_str(
            " (empty: no completion event arrived; is the service running and subscribed?)",
        );
    }
    for e in &run.timeline {
        out.push_str(&format!("\n    {e}"));
    }
    if run.timeline_dropped > 0 {
        out.push_str(&format!(
            "\n    ({} later steps not kept)",
            run.timeline_dropped
        ));
    }
    if !run.pending.is_empty() {
        let pending: Vec<String> = run
            .pending
            .iter()
            .map(|(node, n)| {
                if *n == 1 {
                    format!("{node:?}")
                } else {
                    format!("{node:?} x{n}")
                }
            })
            .collect();
        out.push_str(&format!("\n  pending: {{{}}}", pending.join(", ")));
    }
    if !run.unexpected.is_empty() {
        out.push_str(&format!(
            "\n  unexpected completions (nodes nothing had reached): {:?}",
            run.unexpected
        ));
    }
    for t in &run.timers {
        out.push_str(&format!(
            "\n  timer {} armed, due {} (the clock says {}): advance the clock, or enable auto_advance",
            t.node_id,
            t.due,
            state.clock.now()
        ));
    }
    if !run.dlq.is_empty() {
        out.push_str(&format!("\n  DLQ entries: {}", run.dlq.len()));
        for r in run.dlq.iter().filter_map(|seq| state.records.get(*seq)) {
            out.push_str(&format!("\n    {}", describe_record(r)));
        }
    }
    out
}
