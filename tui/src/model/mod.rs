//! The model: everything the screen shows, changed only by [`crate::update`].
//!
//! Services, flows, runs, DLQ entries, violations and the traffic log are built from the
//! messages the sources send (emulator records, state summaries, or raw NATS traffic in passive
//! mode). Every collection that grows with traffic is bounded: it keeps the newest items and counts
//! what it dropped.

mod ingest;
mod ring;
mod rows;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use triggers_emulator::ClockMode;
use triggers_emulator::recorder::{EventSteps, Liveness, RecordKind, RunStatus, TimelineEntry};
use triggers_sdk::flow::Flow;
use triggers_sdk::wire::{DlqEntry, GoTime};

use crate::theme::Theme;

pub(crate) use ring::Ring;
pub(crate) use rows::{RowCache, is_failure};

/// Where the model's data comes from, which decides what the user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A `triggers-lab up` reached over its control API: trigger and advance available.
    Control,
    /// Any NATS server, watched passively on `triggers.v2.>`: read-only.
    Passive,
    /// An emulator in this process (`up --tui`, `run --tui`): trigger and advance available.
    InProcess,
}

impl Mode {
    /// Whether the user can trigger flows and advance the clock.
    #[must_use]
    pub fn can_drive(self) -> bool {
        !matches!(self, Mode::Passive)
    }
}

/// The tabs, in display order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tab {
    /// Registered services and their liveness.
    Services,
    /// Deployed flows and their graphs.
    Flows,
    /// Flow runs.
    Runs,
    /// Dead-lettered messages.
    Dlq,
    /// Conformance violations.
    Violations,
    /// Every message, raw.
    Traffic,
}

impl Tab {
    /// Every tab, in display order.
    pub const ALL: [Tab; 6] = [
        Tab::Services,
        Tab::Flows,
        Tab::Runs,
        Tab::Dlq,
        Tab::Violations,
        Tab::Traffic,
    ];

    /// The tab's title.
    #[must_use]
    pub fn title(self) -> &'static str {
        match self {
            Tab::Services => "Services",
            Tab::Flows => "Flows",
            Tab::Runs => "Runs",
            Tab::Dlq => "DLQ",
            Tab::Violations => "Violations",
            Tab::Traffic => "Traffic",
        }
    }

    pub(crate) fn index(self) -> usize {
        Tab::ALL.iter().position(|t| *t == self).unwrap_or(0)
    }

    pub(crate) fn list(self) -> ListId {
        match self {
            Tab::Services => ListId::Services,
            Tab::Flows => ListId::Flows,
            Tab::Runs => ListId::Runs,
            Tab::Dlq => ListId::Dlq,
            Tab::Violations => ListId::Violations,
            Tab::Traffic => ListId::Traffic,
        }
    }
}

/// The lists that can be moved in and filtered: one per tab, and a run's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListId {
    Services,
    Flows,
    Runs,
    Dlq,
    Violations,
    Traffic,
    Timeline,
}

impl ListId {
    pub(crate) const COUNT: usize = 7;

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// The state of the NATS connection as the status bar shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Connection {
    /// Connected.
    Connected,
    /// Not yet connected.
    Connecting,
    /// Lost; the client is reconnecting.
    Lost {
        /// What happened.
        reason: String,
    },
}

/// Selection, scroll and filter of one list.
#[derive(Debug, Default)]
pub(crate) struct ListState {
    /// Position in the list's visible (filtered) rows.
    pub(crate) selected: usize,
    /// The first row drawn; the view moves it to keep the selection in sight.
    pub(crate) offset: Cell<usize>,
    /// Case-insensitive substring filter; empty is none.
    pub(crate) filter: String,
}

/// A drill-in page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Detail {
    /// A traffic record (by sequence number).
    Event(u64),
    /// A DLQ entry (by absolute index).
    Dlq(u64),
    /// A violation (by absolute index).
    Violation(u64),
    /// A flow's graph and nodes.
    Flow(String),
    /// A service's manifest summary.
    Service(String),
}

/// A page of text being read, and how far it is scrolled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Page {
    pub(crate) detail: Detail,
    pub(crate) scroll: u16,
}

/// An input line or picker over the screen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Prompt {
    /// Typing a filter for the current list (it applies as you type).
    Filter { input: String },
    /// Choosing the flow to trigger.
    PickFlow { selected: usize },
    /// The JSON payload of a trigger.
    Payload {
        flow_id: String,
        input: String,
        error: Option<String>,
    },
    /// How far to advance the clock.
    Advance {
        input: String,
        error: Option<String>,
    },
}

/// A one-line message in the status bar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Notice {
    pub(crate) text: String,
    pub(crate) error: bool,
}

/// A service as the UI knows it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServiceRow {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) manifest_hash: String,
    pub(crate) capabilities: Vec<String>,
    pub(crate) actions: Vec<String>,
    /// Each action's `retry.max_attempts`, for the retries a timeline step counts.
    pub(crate) max_attempts: BTreeMap<String, i64>,
    pub(crate) last_seen: Option<GoTime>,
    pub(crate) shutting_down: bool,
    pub(crate) replicas: BTreeSet<String>,
    /// Replicas as counted by the emulator (when it says).
    pub(crate) replica_count: Option<usize>,
}

impl ServiceRow {
    /// Liveness at `now`, with the emulator's rule (live within two intervals, late within three).
    pub(crate) fn liveness(&self, now: GoTime, interval: Duration) -> Liveness {
        if self.shutting_down {
            return Liveness::ShuttingDown;
        }
        let Some(seen) = self.last_seen else {
            return Liveness::Registered;
        };
        let age = now.unix_nanos() - seen.unix_nanos();
        let interval = interval.as_nanos() as i128;
        if age <= 2 * interval {
            Liveness::Live
        } else if age <= 3 * interval {
            Liveness::Late
        } else {
            Liveness::Down
        }
    }

    pub(crate) fn replicas(&self) -> usize {
        self.replica_count.unwrap_or(self.replicas.len())
    }
}

/// A flow: its latest version (with the graph when known) and the versions seen.
#[derive(Debug, Clone)]
pub(crate) struct FlowRow {
    pub(crate) id: String,
    pub(crate) version: i64,
    pub(crate) flow: Option<Flow>,
    pub(crate) versions: BTreeSet<i64>,
}

/// A run as the UI knows it.
#[derive(Debug, Clone)]
pub(crate) struct RunRow {
    pub(crate) id: String,
    pub(crate) flow_id: String,
    pub(crate) flow_version: i64,
    pub(crate) status: RunStatus,
    pub(crate) started_at: GoTime,
    pub(crate) settled_at: Option<GoTime>,
    pub(crate) failed: Vec<String>,
    pub(crate) timeline: Vec<TimelineEntry>,
    /// What the completion events made of `timeline`, as the emulator counts it.
    pub(crate) event_steps: EventSteps,
    /// Steps the emulator counts (it may know more than the records kept here).
    pub(crate) steps: usize,
    pub(crate) dlq: usize,
    /// Tracking from completion events alone (used until the emulator says otherwise).
    pub(crate) pending: BTreeSet<String>,
    pub(crate) completed: BTreeSet<String>,
    pub(crate) timers: usize,
    /// The emulator's summary has described this run.
    pub(crate) from_emulator: bool,
    /// The payload it was triggered with (from the trigger record), for a re-trigger.
    pub(crate) payload: Option<String>,
}

impl RunRow {
    /// Wall time from the first step's start to the last step's end, or the clock span.
    pub(crate) fn duration_ns(&self, clock: GoTime) -> i128 {
        let steps = self.timeline.iter().filter(|e| e.service != "engine");
        let first = steps.clone().map(|e| e.started_at.unix_nanos()).min();
        let last = steps.map(|e| e.finished_at.unix_nanos()).max();
        match (first, last) {
            (Some(a), Some(b)) => (b - a).max(0),
            _ => {
                let end = self.settled_at.unwrap_or(clock);
                crate::format::span_ns(self.started_at, end)
            }
        }
    }

    pub(crate) fn failed_node(&self) -> String {
        self.failed.join(", ")
    }
}

/// One entry of the traffic log.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub(crate) seq: u64,
    pub(crate) at: GoTime,
    pub(crate) subject: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) payload: String,
    /// What it is, when known (passive messages that do not decode have none).
    pub(crate) kind: Option<RecordKind>,
    /// What the passive observer made of it (or why it could not).
    pub(crate) note: String,
}

/// A DLQ entry.
#[derive(Debug, Clone)]
pub(crate) struct DlqRow {
    pub(crate) seq: u64,
    pub(crate) at: GoTime,
    pub(crate) subject: String,
    pub(crate) msg_id: String,
    pub(crate) entry: Option<DlqEntry>,
    pub(crate) payload: String,
}

impl DlqRow {
    /// `<service>.<action or kind>` from the subject.
    pub(crate) fn target(&self) -> &str {
        self.subject
            .strip_prefix("triggers.v2.dlq.")
            .unwrap_or(&self.subject)
    }
}

/// A conformance violation (or, in passive mode, a message that does not decode).
#[derive(Debug, Clone)]
pub(crate) struct ViolationRow {
    pub(crate) seq: u64,
    pub(crate) at: GoTime,
    pub(crate) severity: String,
    pub(crate) rule: String,
    pub(crate) message: String,
    pub(crate) subject: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) payload: String,
}

/// How a model is set up. Every field has a default; set what you need and end with
/// `..Default::default()`.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// Where the data comes from.
    pub mode: Mode,
    /// What to show as the source: a NATS URL, or `in-process`.
    pub source: String,
    /// Traffic records kept; older ones drop off with a visible count (default 100 000).
    pub event_capacity: usize,
    /// Runs kept (default 10 000).
    pub run_capacity: usize,
    /// DLQ entries and violations kept, each (default 10 000).
    pub entry_capacity: usize,
    /// The heartbeat period services use; liveness is judged against it (default 5 s).
    pub heartbeat_interval: Duration,
    /// Colours (default: on unless `NO_COLOR` is set).
    pub theme: Theme,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            mode: Mode::Control,
            source: String::new(),
            event_capacity: 100_000,
            run_capacity: 10_000,
            entry_capacity: 10_000,
            heartbeat_interval: Duration::from_secs(5),
            theme: Theme::default(),
        }
    }
}

/// What of one flow version ran in this session: its nodes, and its edges taken (an edge
/// `a -> b` is taken in a run where `a` passed its output on and `b` was reached, the rule of
/// `run --coverage`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Covered {
    pub(crate) nodes: BTreeSet<String>,
    pub(crate) edges: BTreeSet<String>,
}

/// Everything the screen shows.
#[derive(Debug)]
pub struct Model {
    pub(crate) mode: Mode,
    pub(crate) source: String,
    pub(crate) theme: Theme,
    pub(crate) connection: Connection,
    /// Wall-clock now, from ticks (so that tests are deterministic).
    pub(crate) now: GoTime,
    /// The emulator's clock.
    pub(crate) clock: Option<(GoTime, ClockMode)>,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) services: BTreeMap<String, ServiceRow>,
    pub(crate) flows: BTreeMap<String, FlowRow>,
    pub(crate) runs: Ring<RunRow>,
    /// The nodes that ran and the edges taken, per flow id and version, over the whole session
    /// (runs dropped off `runs` included): the flow graph marks the others as not run yet.
    pub(crate) ran: BTreeMap<(String, i64), Covered>,
    pub(crate) run_index: HashMap<String, u64>,
    pub(crate) events: Ring<Event>,
    pub(crate) dlq: Ring<DlqRow>,
    pub(crate) violations: Ring<ViolationRow>,
    /// Violations the emulator counts (it may have more than the records kept here).
    pub(crate) violations_total: usize,
    /// Records the emulator itself dropped off its ring.
    pub(crate) emulator_dropped: u64,
    /// Messages NATS dropped for the emulator's slow subscriptions (its summary says).
    pub(crate) emulator_lost: u64,
    /// Times the emulator lost its NATS connection (its summary says): plain-subject traffic
    /// published meanwhile went unseen.
    pub(crate) emulator_disconnects: u64,
    /// Settled runs the emulator evicted beyond its `max_runs` (from its state summary).
    pub(crate) evicted_runs: u64,
    /// Completion events of runs the emulator did not start that it did not follow, beyond its
    /// `max_followed_runs` (from its state summary).
    pub(crate) unfollowed_runs: u64,
    /// Messages NATS dropped for this UI's own slow subscription.
    pub(crate) own_dropped: u64,
    /// The last record sequence number applied (records at or below it are repeats).
    pub(crate) last_seq: u64,
    pub(crate) tab: Tab,
    pub(crate) lists: [ListState; ListId::COUNT],
    pub(crate) rows: [RowCache; ListId::COUNT],
    pub(crate) page: Option<Page>,
    /// The run whose timeline is open (kept under a page opened from it).
    pub(crate) open_run: Option<String>,
    pub(crate) prompt: Option<Prompt>,
    /// Rows a page key moves (from the terminal's height).
    pub(crate) page_rows: usize,
    pub(crate) help: bool,
    pub(crate) follow: bool,
    pub(crate) failures_only: bool,
    /// Heartbeats left out of Traffic (by default; `H` shows them): a service's heartbeat every
    /// few seconds buries the rest.
    pub(crate) hide_heartbeats: bool,
    /// The last payload triggered per flow, offered again by `t`.
    pub(crate) last_payloads: BTreeMap<String, String>,
    pub(crate) notice: Option<Notice>,
    pub(crate) quit: bool,
}

impl Model {
    /// An empty model.
    #[must_use]
    pub fn new(config: ModelConfig) -> Self {
        let mut model = Model {
            mode: config.mode,
            source: config.source,
            theme: config.theme,
            connection: Connection::Connecting,
            now: GoTime::ZERO,
            clock: None,
            heartbeat_interval: config.heartbeat_interval,
            services: BTreeMap::new(),
            flows: BTreeMap::new(),
            runs: Ring::new(config.run_capacity),
            ran: BTreeMap::new(),
            run_index: HashMap::new(),
            events: Ring::new(config.event_capacity),
            dlq: Ring::new(config.entry_capacity),
            violations: Ring::new(config.entry_capacity),
            violations_total: 0,
            emulator_dropped: 0,
            emulator_lost: 0,
            emulator_disconnects: 0,
            evicted_runs: 0,
            unfollowed_runs: 0,
            own_dropped: 0,
            last_seq: 0,
            tab: Tab::Services,
            lists: Default::default(),
            rows: Default::default(),
            page: None,
            open_run: None,
            prompt: None,
            page_rows: 20,
            help: false,
            follow: true,
            failures_only: false,
            hide_heartbeats: true,
            last_payloads: BTreeMap::new(),
            notice: None,
            quit: false,
        };
        // Traffic starts filtered: its heartbeats hidden.
        model.recompute_rows(ListId::Traffic);
        model
    }

    /// Where the data comes from.
    #[must_use]
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The tab shown.
    #[must_use]
    pub fn tab(&self) -> Tab {
        self.tab
    }

    /// Whether the user asked to quit.
    #[must_use]
    pub fn should_quit(&self) -> bool {
        self.quit
    }

    /// The connection state.
    #[must_use]
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// Messages NATS dropped for slow subscriptions: the emulator's (from its summary), and this
    /// UI's own. Above zero, what the screen shows is incomplete.
    #[must_use]
    pub fn dropped_messages(&self) -> (u64, u64) {
        (self.emulator_lost, self.own_dropped)
    }

    /// Traffic records kept, and how many older ones dropped off.
    #[must_use]
    pub fn events(&self) -> (usize, u64) {
        (self.events.len(), self.events.dropped())
    }

    /// Whether follow mode (stick to the newest row) is on.
    #[must_use]
    pub fn follow(&self) -> bool {
        self.follow
    }

    /// The list the keys move in: the open run's timeline, or the tab's list.
    pub(crate) fn current_list(&self) -> ListId {
        if self.open_run.is_some() {
            ListId::Timeline
        } else {
            self.tab.list()
        }
    }

    pub(crate) fn list(&self, id: ListId) -> &ListState {
        &self.lists[id.index()]
    }

    pub(crate) fn list_mut(&mut self, id: ListId) -> &mut ListState {
        &mut self.lists[id.index()]
    }

    pub(crate) fn run(&self, id: &str) -> Option<&RunRow> {
        self.run_index
            .get(id)
            .and_then(|abs| self.runs.get_abs(*abs))
    }

    pub(crate) fn event_by_seq(&self, seq: u64) -> Option<&Event> {
        self.events
            .find_sorted(&seq, |e| e.seq)
            .and_then(|abs| self.events.get_abs(abs))
    }

    /// The emulator's clock when known, else wall-clock now.
    pub(crate) fn clock_now(&self) -> GoTime {
        self.clock.map_or(self.now, |(t, _)| t)
    }

    /// The flows, for the trigger picker.
    pub(crate) fn flow_ids(&self) -> Vec<String> {
        self.flows.keys().cloned().collect()
    }
}

impl Event {
    /// The record kind's name, or `message` for what the passive observer could not place.
    pub(crate) fn kind_name(&self) -> &'static str {
        self.kind.as_ref().map_or("message", RecordKind::name)
    }

    /// One line saying what it is, for the traffic log: one arm per record kind, so that a new
    /// kind cannot go without its line.
    pub(crate) fn summary(&self) -> String {
        use crate::format::clock_time;
        let Some(kind) = &self.kind else {
            return self.note.clone();
        };
        match kind {
            RecordKind::Registration {
                service,
                accepted,
                error,
                manifest_hash,
            } => registration_line(service, *accepted, error.as_deref(), manifest_hash),
            RecordKind::Fetch { service, found } => {
                format!("{service} {}", if *found { "found" } else { "unknown" })
            }
            RecordKind::Heartbeat { heartbeat } => heartbeat_line(heartbeat),
            RecordKind::Completion { event } => completion_line(event),
            RecordKind::Dlq { entry, msg_id } => match entry {
                Some(e) => format!("{} {}: {}", e.kind, e.envelope.flow_run_id, e.err_msg),
                None => format!("undecodable entry {msg_id}"),
            },
            RecordKind::Deploy {
                flow_id, version, ..
            } => format!("deployed {flow_id} v{version}"),
            RecordKind::Broadcast { flow_id, version } => format!("broadcast {flow_id} v{version}"),
            RecordKind::Trigger {
                run_id, flow_id, ..
            } => format!("run {run_id} of {flow_id}"),
            RecordKind::Resend {
                run_id,
                dlq_msg_id,
                nodes,
            } => format!(
                "re-sent {dlq_msg_id}: run {run_id} waits on {}",
                nodes.join(", ")
            ),
            RecordKind::Hop {
                run_id,
                source_node_id,
                from_emulator,
            } => {
                let by = if *from_emulator {
                    " (from the emulator)"
                } else {
                    ""
                };
                format!("run {run_id} after {source_node_id}{by}")
            }
            RecordKind::TimerArmed { .. }
            | RecordKind::TimerFired { .. }
            | RecordKind::TimerUndelivered { .. } => timer_line(kind),
            RecordKind::FlowsWithheld {
                service,
                flows,
                reason,
            } => format!("{} withheld from {service}: {reason}", flows.join(", ")),
            RecordKind::RunSettled { run_id, status, .. } => {
                format!("run {run_id} {}", crate::view::run_status_text(*status))
            }
            RecordKind::ClockAdvanced { to, .. } => format!("clock now {}", clock_time(*to)),
            RecordKind::DeployRefused { flow_id, problems } => {
                format!("deploy of {flow_id} refused: {}", problems.join("; "))
            }
            RecordKind::Violation {
                severity,
                rule,
                message,
            } => format!("{severity} {rule}: {message}"),
        }
    }
}

fn registration_line(service: &str, accepted: bool, error: Option<&str>, hash: &str) -> String {
    if accepted {
        format!("{service} registered {}", crate::format::short_hash(hash))
    } else {
        format!("{service} refused: {}", error.unwrap_or("no reason given"))
    }
}

fn heartbeat_line(hb: &triggers_sdk::wire::Heartbeat) -> String {
    format!(
        "{} {} {}{}",
        hb.service,
        hb.service_version,
        crate::format::short_hash(&hb.manifest_hash),
        if hb.shutting_down {
            " shutting down"
        } else {
            ""
        }
    )
}

fn completion_line(e: &triggers_sdk::wire::CompletionEvent) -> String {
    let mut s = format!("{} {} {} {}", e.flow_id, e.flow_run_id, e.node_id, e.status);
    if !e.error.is_empty() {
        s.push_str(": ");
        s.push_str(&e.error);
    }
    s
}

/// A timer record's line; any other kind has none here.
fn timer_line(kind: &RecordKind) -> String {
    use crate::format::clock_time;
    match kind {
        RecordKind::TimerArmed {
            run_id,
            node_id,
            due,
            occurrence,
            ..
        } => format!(
            "{node_id} of {run_id} due {} (#{occurrence})",
            clock_time(*due)
        ),
        RecordKind::TimerFired {
            run_id,
            node_id,
            resume_node_id,
            ..
        } => format!("{node_id} of {run_id} fired, resumes at {resume_node_id}"),
        RecordKind::TimerUndelivered {
            run_id,
            node_id,
            occurrence,
            error,
            gave_up,
            ..
        } => {
            let then = if *gave_up {
                ", given up"
            } else {
                ", stays armed"
            };
            format!("{node_id} of {run_id} (#{occurrence}) not delivered{then}: {error}")
        }
        _ => String::new(),
    }
}
