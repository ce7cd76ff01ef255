//! The control API: how other processes (the `triggers-lab` CLI, the terminal UI) drive a running
//! emulator over NATS. Ours, not the platform's: it lives under `triggerslab.v1.`, outside the
//! locked `triggers.v2.` namespace.
//!
//! Requests are JSON on `triggerslab.v1.control.<op>`; every reply is
//! `{"ok": true, "result": ...}` or `{"ok": false, "error": "..."}`. While someone follows (a
//! `follow` request, renewed before its lease runs out), every record is also published, as JSON,
//! on `triggerslab.v1.records`; nobody following, nothing is serialised nor sent.
//!
//! Who may use it: by default anyone on the server (tests in one process). `triggers-lab up`
//! closes it two ways ([`ControlAccess`]): on a server it starts, the API lives in a NATS account
//! of its own that services cannot reach ([`crate::NatsConfig::private_control`]); and every
//! request must carry a per-instance [`ControlToken`] in the [`TOKEN_HEADER`] header (checked in
//! constant time), with the records on [`records_subject`]`(token)`. On an external server only
//! the token applies: anyone who can subscribe to `triggerslab.>` there sees the token go by.
//!
//! | op | request | result |
//! |---|---|---|
//! | `state` | `{"runs_limit"?}` | [`StateSummary`], with the newest `runs_limit` runs ([`STATE_RUNS`] unless asked; fewer when they would not fit in one message) |
//! | `deploy` | `{"flow": Flow}` | the released flow and broadcast subject, or `{"problems": [...]}` in the error |
//! | `check_release` | `{"flow": Flow}` | the resolved flow |
//! | `trigger` | `{"flow_id", "payload", "entry"?, "payload_json"?}` | `{"run_id"}`; `payload_json`, when given, is the payload's exact JSON text, sent as is (a 64-bit integer stays exact) instead of `payload` |
//! | `advance` | `{"duration_ms"}` | the timers fired |
//! | `cancel` | `{"run_id"}` | [`Cancelled`](crate::recorder::Cancelled): what the run still owed, dropped; it settles `cancelled` |
//! | `resend_dlq` | `{"msg_id"}` | [`Resent`](crate::Resent) |
//! | `runs` | `{}` | every run, whole (timelines included): fails once they outgrow one message; page with `run_page` |
//! | `run_page` | `{"after"?, "limit"?}` | [`RunPage`]: the runs' summaries in start order after the place `after` (from the last page's `next`), at most `limit` ([`RUN_PAGE`]) |
//! | `run` | `{"run_id", "timeline_from"?, "timeline_limit"?}` | the run; with either key, only the timeline entries from `timeline_from` that fit (at most `timeline_limit`), and `timeline_from`, `timeline_total` |
//! | `flow` | `{"flow_id"}` | the deployed flow (as released, its latest version) |
//! | `flow_list` | `{}` | [`FlowSummary`] of every deployed flow |
//! | `records` | `{"since": seq, "limit": n}` | records after `since` |
//! | `violations` | `{}` | every conformance violation |
//! | `services` | `{}` | every registered service by name, with its whole manifest (schemas included) |
//! | `follow` | `{"lease_ms"?}` | `{"subject", "lease_ms"}`: records are published on `subject` for the lease |

use crate::reply_fit::{self, json_len};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use triggers_sdk::flow::Flow;
use triggers_sdk::transport::DropCounter;
use triggers_sdk::wire::GoTime;

use crate::clock::ClockMode;
use crate::emulator::{Emulator, TriggerOptions};
use crate::error::{ControlError, EmulatorError};
use crate::recorder::{Liveness, Record, Run, RunStatus};

/// The prefix of every control subject.
pub const PREFIX: &str = "triggerslab.v1.control";
/// Where records are published as JSON while someone follows (followed by `.<token>` when the
/// emulator has one).
pub const RECORDS_SUBJECT: &str = "triggerslab.v1.records";
/// How long a `follow` request keeps the records published unless renewed, when it names no
/// `lease_ms`; [`ControlClient::follow`] renews it every third of this.
pub const FOLLOW_LEASE: Duration = Duration::from_secs(10);
/// The longest lease a `follow` request gets (a `nats sub` by hand can ask for this much).
pub const MAX_FOLLOW_LEASE: Duration = Duration::from_secs(3600);
/// The header a control request carries its [`ControlToken`] in.
pub const TOKEN_HEADER: &str = "Triggers-Lab-Token";

/// How many of the newest runs a `state` reply holds when the request names no `runs_limit`:
/// enough for a screen or a glance, small enough for one NATS message. All of them are read a
/// page at a time with `run_page` ([`ControlClient::run_summaries`]).
pub const STATE_RUNS: usize = 1000;
/// The most run summaries a `run_page` reply holds (fewer when they would not fit in one message).
pub const RUN_PAGE: usize = 1000;
/// Services [`ControlClient::services`] asks for at a time.
const SERVICES_PAGE: usize = 500;
/// Violations [`ControlClient::violations`] asks for at a time.
const VIOLATIONS_PAGE: usize = 1000;

/// A per-instance secret for the control API: requests carry it in [`TOKEN_HEADER`], and the
/// records go to a subject that includes it. Its `Debug` form hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct ControlToken(String);

impl ControlToken {
    /// 32 random bytes (hex) from the thread's CSPRNG.
    #[must_use]
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        rand::fill(&mut bytes[..]);
        ControlToken(hex::encode(bytes))
    }

    /// A token someone else generated (read from `up`'s discovery file, say).
    #[must_use]
    pub fn new(token: impl Into<String>) -> Self {
        ControlToken(token.into())
    }

    /// The token's text, to write down for other processes.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this token, in time that does not depend on where they differ.
    #[must_use]
    pub fn matches(&self, given: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), given.as_bytes());
        // The length is no secret (every token is 64 hex digits); the contents are.
        a.len() == b.len()
            && std::hint::black_box(a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
    }
}

impl std::fmt::Debug for ControlToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlToken(<redacted>)")
    }
}

/// The subject records are published on: [`RECORDS_SUBJECT`], then `.<token>` when there is one,
/// so only who holds the token knows where to listen.
#[must_use]
pub fn records_subject(token: Option<&ControlToken>) -> String {
    match token {
        Some(t) => format!("{RECORDS_SUBJECT}.{}", t.as_str()),
        None => RECORDS_SUBJECT.to_string(),
    }
}

/// What a client needs to reach a closed control API: the control account's credentials (when
/// the server has one) and the token (when the emulator has one). The default reaches an open
/// one.
#[derive(Debug, Clone, Default)]
pub struct ControlAccess {
    /// Log in to the server's control account as this user.
    pub credentials: Option<natsbox::ControlCredentials>,
    /// Send this token with every request, and follow the records on its subject.
    pub token: Option<ControlToken>,
}

/// A service in the state summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServiceSummary {
    /// The name.
    pub name: String,
    /// `service_version`.
    pub version: String,
    /// The registered manifest's hash.
    pub manifest_hash: String,
    /// `runtime_capabilities`.
    pub capabilities: Vec<String>,
    /// Its actions' names; empty when the state was too large to hold them
    /// ([`ServiceSummary::action_count`] still counts them).
    pub actions: Vec<String>,
    /// How many actions it has. 0 from an emulator older than this field: take `actions.len()`.
    #[serde(default)]
    pub action_count: usize,
    /// Liveness from heartbeats.
    pub liveness: Liveness,
    /// When the last heartbeat arrived, wall clock.
    pub last_seen: Option<GoTime>,
    /// Replicas seen (distinct `started_at`).
    pub replicas: usize,
}

/// A run in the state summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSummary {
    /// The run id.
    pub id: String,
    /// The flow.
    pub flow_id: String,
    /// Where it is.
    pub status: RunStatus,
    /// When it started (wall clock).
    pub started_at: GoTime,
    /// When it settled.
    pub settled_at: Option<GoTime>,
    /// Nodes that failed.
    pub failed: Vec<String>,
    /// Steps so far.
    pub steps: usize,
}

/// Everything a viewer needs at a glance.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StateSummary {
    /// The emulator's clock.
    pub clock: GoTime,
    /// Virtual or real.
    pub clock_mode: ClockMode,
    /// Registered services, by name: those that fit in one NATS message with the rest of the
    /// summary ([`StateSummary::services_total`] counts them all; `services` pages through them).
    pub services: Vec<ServiceSummary>,
    /// Services registered in all. 0 from an emulator older than this field: take
    /// `services.len()`.
    #[serde(default)]
    pub services_total: usize,
    /// Deployed flows, whole: those that fit in one NATS message with the rest of the summary
    /// (the largest are left out first when not all do; [`StateSummary::flows_total`] counts
    /// them all, and `flow` reads one).
    pub flows: Vec<Flow>,
    /// Flows deployed in all. 0 from an emulator older than this field: take `flows.len()`.
    #[serde(default)]
    pub flows_total: usize,
    /// The newest runs, in start order: at most the request's `runs_limit` ([`STATE_RUNS`] unless
    /// it asked), fewer when they would not fit in one NATS message. [`StateSummary::runs_total`]
    /// says how many there are in all.
    pub runs: Vec<RunSummary>,
    /// Runs the emulator holds in all (`runs` may hold only the newest of them). 0 from an
    /// emulator older than this field: take `runs.len()` then.
    #[serde(default)]
    pub runs_total: usize,
    /// Conformance violations so far.
    pub violations: usize,
    /// The last record's sequence number.
    pub last_seq: u64,
    /// Records dropped off the ring (beyond `max_records` or `max_record_bytes`).
    pub dropped_records: u64,
    /// Settled runs evicted beyond `max_runs` (no longer in `runs`).
    #[serde(default)]
    pub evicted_runs: u64,
    /// Completion events of runs the emulator did not start whose runs it did not follow:
    /// `max_followed_runs` such runs were open.
    #[serde(default)]
    pub unfollowed_runs: u64,
    /// Conformance violations counted but not kept (beyond `max_violations`, or 16 per message).
    #[serde(default)]
    pub dropped_violations: u64,
    /// Violations kept with only an excerpt of their message (the violations' bytes had
    /// reached `max_record_bytes`).
    #[serde(default)]
    pub trimmed_violations: u64,
    /// Messages NATS dropped because a subscription of the emulator fell behind (slow consumer;
    /// at least this many). Above zero, what the emulator saw is incomplete.
    #[serde(default)]
    pub dropped_messages: u64,
    /// How many times the emulator's connection to NATS was lost and made again (a server
    /// restart, or the server cutting off a client that fell too far behind). Messages on plain
    /// subjects published meanwhile were not seen; the streams it follows lose nothing.
    #[serde(default)]
    pub connection_losses: u64,
    /// Records, violations and services sent cut to an excerpt by the control API, because one
    /// alone was larger than a NATS message (each cut says so in its text).
    #[serde(default)]
    pub cut_in_replies: u64,
    /// Times one of the emulator's streams (`TRIGGERS_EVENTS`, `TRIGGERS_DLQ`) was found gone
    /// (deleted by a client), and made again: what was published meanwhile is lost.
    #[serde(default)]
    pub streams_lost: u64,
}

/// A deployed flow at a glance (`flow_list`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlowSummary {
    /// The flow's id.
    pub id: String,
    /// Its latest version.
    pub version: i64,
    /// How many nodes it has.
    pub nodes: usize,
    /// How many edges.
    pub edges: usize,
    /// The services it involves.
    pub services: Vec<String>,
}

/// One page of the runs, in start order (`run_page`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunPage {
    /// Runs the emulator holds in all, now.
    pub total: usize,
    /// This page's runs.
    pub runs: Vec<RunSummary>,
    /// Where the next page starts: the `after` of the next request (the place of this page's
    /// last run; the request's own `after` when the page is empty). A place, not a position:
    /// runs evicted between two pages do not shift it, and asking again later from the last
    /// page's `next` gives the runs started since.
    pub next: u64,
    /// Whether more runs follow this page now.
    pub more: bool,
}

impl Emulator {
    /// The state summary, with every run it holds (in a test, or a viewer in the same process;
    /// the control API serves [`Emulator::summary_newest`]).
    #[must_use]
    pub fn summary(&self) -> StateSummary {
        self.summary_newest(usize::MAX)
    }

    /// The state summary with only the newest `runs_limit` runs in `runs` (`runs_total` counts
    /// them all).
    #[must_use]
    pub fn summary_newest(&self, runs_limit: usize) -> StateSummary {
        let state = self.lock();
        let now = GoTime::now();
        StateSummary {
            clock: state.clock.now(),
            clock_mode: state.clock.mode(),
            services: state
                .services
                .iter()
                .map(|(name, s)| ServiceSummary {
                    name: name.clone(),
                    version: s.manifest.service_version.clone(),
                    manifest_hash: s.manifest.manifest_hash.clone(),
                    capabilities: s.manifest.runtime_capabilities.clone(),
                    actions: s.manifest.actions.iter().map(|a| a.name.clone()).collect(),
                    action_count: s.manifest.actions.len(),
                    liveness: s.liveness(now, self.config().heartbeat_interval),
                    last_seen: s.last_seen,
                    replicas: s.replicas.len(),
                })
                .collect(),
            services_total: state.services.len(),
            flows: state.flows.values().map(|f| Flow::clone(f)).collect(),
            flows_total: state.flows.len(),
            runs: state
                .run_order
                .iter()
                .skip(state.run_order.len().saturating_sub(runs_limit))
                .filter_map(|id| state.runs.get(id))
                .map(run_summary)
                .collect(),
            runs_total: state.run_order.len(),
            violations: state.violations.len() + state.dropped_violations as usize,
            last_seq: state.seq,
            dropped_records: state.records.dropped,
            evicted_runs: state.evicted_runs,
            unfollowed_runs: state.unfollowed_runs,
            dropped_violations: state.dropped_violations,
            trimmed_violations: state.trimmed_violations,
            dropped_messages: self.dropped_messages(),
            connection_losses: self.connection_losses(),
            cut_in_replies: state.cut_in_replies,
            streams_lost: state.streams_lost,
        }
    }

    /// Every deployed flow at a glance.
    #[must_use]
    pub fn flow_list(&self) -> Vec<FlowSummary> {
        self.lock()
            .flows
            .values()
            .map(|f| FlowSummary {
                id: f.id.clone(),
                version: f.version,
                nodes: f.body.nodes.len(),
                edges: f.body.edges.len(),
                services: f.services().into_iter().map(str::to_owned).collect(),
            })
            .collect()
    }

    /// Up to `limit` run summaries in start order, from the first whose place is after `after`
    /// (0: from the oldest).
    #[must_use]
    pub fn run_page(&self, after: u64, limit: usize) -> RunPage {
        let state = self.lock();
        let mut runs = Vec::new();
        let mut next = after;
        let mut more = false;
        for (place, id) in state.run_order.after(after) {
            if runs.len() == limit {
                more = true;
                break;
            }
            if let Some(run) = state.runs.get(id) {
                runs.push(run_summary(run));
            }
            next = place;
        }
        RunPage {
            total: state.run_order.len(),
            runs,
            next,
            more,
        }
    }
}

fn run_summary(r: &Run) -> RunSummary {
    RunSummary {
        id: r.id.clone(),
        flow_id: r.flow_id.clone(),
        status: r.status,
        started_at: r.started_at,
        settled_at: r.settled_at,
        failed: r.failed.iter().cloned().collect(),
        steps: r.timeline.len(),
    }
}

#[derive(Deserialize)]
struct FlowRequest {
    flow: Flow,
}

#[derive(Deserialize)]
struct TriggerRequest {
    flow_id: String,
    #[serde(default)]
    payload: Value,
    #[serde(default)]
    entry: Option<String>,
    #[serde(default)]
    payload_json: Option<String>,
    /// Bytes sent as they are, JSON or not (a poison message replayed).
    #[serde(default)]
    payload_raw: Option<String>,
}

#[derive(Deserialize)]
struct ResendRequest {
    msg_id: String,
}

#[derive(Deserialize)]
struct CancelRequest {
    run_id: String,
}

#[derive(Deserialize)]
struct AdvanceRequest {
    duration_ms: u64,
}

/// Any body is taken (older clients sent anything): only a `runs_limit` it holds counts.
#[derive(Deserialize, Default)]
struct StateRequest {
    #[serde(default)]
    runs_limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunPageRequest {
    #[serde(default)]
    after: u64,
    #[serde(default)]
    limit: Option<usize>,
}

#[derive(Deserialize)]
struct FlowIdRequest {
    flow_id: String,
}

#[derive(Deserialize)]
struct RunRequest {
    run_id: String,
    /// With either of these, a page of the timeline: from entry `timeline_from` (default 0),
    /// at most `timeline_limit` entries (default: all), fewer when they would not fit.
    #[serde(default)]
    timeline_from: Option<usize>,
    #[serde(default)]
    timeline_limit: Option<usize>,
}

/// A run with one page of its timeline (the `run` op with `timeline_from`): the entries from
/// `timeline_from`, of `timeline_total` in all.
#[derive(Deserialize)]
struct RunTimelinePage {
    #[serde(flatten)]
    run: Run,
    /// Absent from an emulator older than paging: the run came whole.
    #[serde(default)]
    timeline_from: Option<usize>,
    #[serde(default)]
    timeline_total: Option<usize>,
}

/// The run, whole, or a page of its timeline that fits in `max` bytes.
fn run_reply(run: Run, req: &RunRequest, max: usize) -> Result<Vec<u8>, Value> {
    if req.timeline_from.is_none() && req.timeline_limit.is_none() {
        return to_json(
            &run,
            max,
            "read its timeline a page at a time with `timeline_from` (ControlClient::run does)",
        );
    }
    let mut run = run;
    let timeline = std::mem::take(&mut run.timeline);
    let total = timeline.len();
    let from = req.timeline_from.unwrap_or(0).min(total);
    let mut limit = req.timeline_limit.unwrap_or(total).clamp(1, total.max(1));
    let mut page = serde_json::to_value(&run).map_err(|e| Value::from(e.to_string()))?;
    page["timeline_from"] = json!(from);
    page["timeline_total"] = json!(total);
    // As many entries as fit: half as many each time they do not (one at least).
    loop {
        let end = (from + limit).min(total);
        page["timeline"] =
            serde_json::to_value(&timeline[from..end]).map_err(|e| Value::from(e.to_string()))?;
        match to_json(
            &page,
            max,
            "even one timeline entry (with the run's other fields) is more than one message holds",
        ) {
            Err(_) if limit > 1 => limit /= 2,
            other => return other,
        }
    }
}

/// A page of a list: the items after the first `after`, at most `limit` of them.
#[derive(Deserialize, Default)]
struct PageRequest {
    #[serde(default)]
    after: Option<usize>,
    #[serde(default)]
    limit: Option<usize>,
}

/// A page of the services: those named after `after`, at most `limit` of them.
#[derive(Deserialize, Default)]
struct ServicesRequest {
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

/// Counts the items sent cut (`cut_in_replies` in the state).
fn note_cuts(emulator: &Emulator, cuts: usize) {
    if cuts > 0 {
        emulator.lock().cut_in_replies += cuts as u64;
    }
}

/// The first of `items` that fit in a reply, each cut to fit on its own if it must (counted).
/// With `whole`, the request asked for every item: if they do not all fit, that error instead.
fn page_reply(
    emulator: &Emulator,
    items: Vec<Value>,
    max: usize,
    whole: Option<&str>,
) -> Result<Vec<u8>, Value> {
    let total = items.len();
    let (page, cuts) = reply_fit::fit_page(items, max);
    note_cuts(emulator, cuts);
    if let Some(error) = whole
        && page.len() < total
    {
        return Err(Value::from(format!(
            "{total} items are more than one reply holds (the server's max_payload is {max} bytes): {error}"
        )));
    }
    to_json(&page, max, "")
}

#[derive(Deserialize)]
struct RecordsRequest {
    #[serde(default)]
    since: u64,
    #[serde(default = "default_limit")]
    limit: usize,
}

fn default_limit() -> usize {
    1000
}

fn parse<T: DeserializeOwned>(payload: &[u8]) -> Result<T, String> {
    let payload = if payload.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        payload
    };
    serde_json::from_slice(payload).map_err(|e| format!("bad request: {e}"))
}

/// A writer that refuses to grow past a limit, so a reply too large for NATS is found while it
/// is written, not after the whole of it was built.
struct Limited {
    bytes: Vec<u8>,
    max: usize,
}

impl std::io::Write for Limited {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.max {
            return Err(std::io::Error::other("too large"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `v` as JSON in at most `max` bytes; else an error that says how to ask for less.
fn to_json<T: Serialize>(v: &T, max: usize, ask_for_less: &str) -> Result<Vec<u8>, Value> {
    let mut out = Limited {
        bytes: Vec::new(),
        max,
    };
    match serde_json::to_writer(&mut out, v) {
        Ok(()) => Ok(out.bytes),
        Err(e) if e.is_io() => Err(Value::from(format!(
            "the reply would be larger than the server's max_payload ({max} bytes) and cannot be sent: {ask_for_less}"
        ))),
        Err(e) => Err(Value::from(e.to_string())),
    }
}

/// Handles one request; the result as JSON of at most `max` bytes.
async fn handle(
    emulator: &Emulator,
    op: &str,
    payload: &[u8],
    max: usize,
) -> Result<Vec<u8>, Value> {
    let err = |e: String| Value::from(e);
    match op {
        "state" => {
            let req: StateRequest = parse(payload).unwrap_or_default();
            let mut summary = emulator.summary_newest(req.runs_limit.unwrap_or(STATE_RUNS));
            // The newest runs that fit: half as many each time they do not; then the flows that
            // fit, the largest left out first (`flow` reads them); then the services' action
            // names, the longest list first (counted in `action_count`).
            loop {
                match to_json(&summary, max, "") {
                    Err(_) if !summary.runs.is_empty() => {
                        let keep = summary.runs.len() / 2;
                        summary.runs.drain(..summary.runs.len() - keep);
                    }
                    Err(_) if !summary.flows.is_empty() => {
                        // The largest flows that together make up what is too much, measured once
                        // (not one flow and a new try at a time: there may be thousands).
                        let mut over = json_len(&summary).saturating_sub(max);
                        summary
                            .flows
                            .sort_by_cached_key(|f| std::cmp::Reverse(json_len(f)));
                        while over > 0 && !summary.flows.is_empty() {
                            over = over.saturating_sub(json_len(&summary.flows.remove(0)));
                        }
                        summary.flows.sort_by(|a, b| a.id.cmp(&b.id));
                    }
                    Err(_) if summary.services.iter().any(|s| !s.actions.is_empty()) => {
                        let mut over = json_len(&summary).saturating_sub(max);
                        let mut order: Vec<usize> = (0..summary.services.len()).collect();
                        order.sort_by_cached_key(|i| {
                            std::cmp::Reverse(json_len(&summary.services[*i].actions))
                        });
                        for i in order {
                            if over == 0 {
                                break;
                            }
                            let names = std::mem::take(&mut summary.services[i].actions);
                            over = over.saturating_sub(json_len(&names));
                        }
                    }
                    // Then the services that fit, the first by name (`services` pages them all).
                    Err(_) if !summary.services.is_empty() => {
                        let keep = summary.services.len() / 2;
                        summary.services.truncate(keep);
                    }
                    other => {
                        break other.map_err(|_| {
                            err(format!(
                                "the state is larger than the server's max_payload ({max} bytes) even without its runs, flows and services: read its parts with `services`, `flow_list`, `violations` and `run_page`"
                            ))
                        });
                    }
                }
            }
        }
        "run_page" => {
            let req: RunPageRequest = parse(payload).map_err(err)?;
            let mut limit = req.limit.unwrap_or(RUN_PAGE).clamp(1, RUN_PAGE);
            loop {
                let page = emulator.run_page(req.after, limit);
                match to_json(&page, max, "ask for a smaller `limit`") {
                    Err(_) if limit > 1 => limit /= 2,
                    other => break other,
                }
            }
        }
        "deploy" => {
            let req: FlowRequest = parse(payload).map_err(err)?;
            match emulator.deploy(req.flow).await {
                Ok(d) => to_json(&d, max, "deploy a smaller flow"),
                Err(EmulatorError::Release(problems)) => Err(json!({
                    "message": format!("release refused: {}", problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")),
                    "problems": problems,
                })),
                Err(e) => Err(err(e.to_string())),
            }
        }
        "check_release" => {
            let req: FlowRequest = parse(payload).map_err(err)?;
            match emulator.check_release(&req.flow) {
                Ok(flow) => to_json(&flow, max, "check a smaller flow"),
                Err(problems) => Err(json!({
                    "message": "release refused",
                    "problems": problems,
                })),
            }
        }
        "trigger" => {
            let req: TriggerRequest = parse(payload).map_err(err)?;
            let bytes = match (req.payload_raw, req.payload_json) {
                (Some(raw), _) => raw.into_bytes(),
                (None, Some(text)) => {
                    serde_json::from_str::<serde::de::IgnoredAny>(&text)
                        .map_err(|e| err(format!("payload_json is not JSON: {e}")))?;
                    text.into_bytes()
                }
                (None, None) => {
                    triggers_sdk::wire::json::to_vec(&triggers_sdk::wire::json::GoAny(&req.payload))
                        .map_err(|e| err(e.to_string()))?
                }
            };
            let run = emulator
                .trigger_bytes(
                    &req.flow_id,
                    bytes,
                    TriggerOptions {
                        entry: req.entry,
                        run_id: None,
                    },
                )
                .await
                .map_err(|e| err(e.to_string()))?;
            to_json(&json!({"run_id": run.0}), max, "")
        }
        "resend_dlq" => {
            let req: ResendRequest = parse(payload).map_err(err)?;
            let resent = emulator
                .resend_dlq(&req.msg_id)
                .await
                .map_err(|e| err(e.to_string()))?;
            to_json(&resent, max, "")
        }
        "cancel" => {
            let req: CancelRequest = parse(payload).map_err(err)?;
            let cancelled = emulator
                .cancel(&req.run_id)
                .map_err(|e| err(e.to_string()))?;
            to_json(
                &cancelled,
                max,
                "the run was cancelled, but what it dropped is too long to send; read the run with `run`",
            )
        }
        "advance" => {
            let req: AdvanceRequest = parse(payload).map_err(err)?;
            let fired = emulator
                .advance(Duration::from_millis(req.duration_ms))
                .await
                .map_err(|e| err(e.to_string()))?;
            to_json(
                &json!({"fired": fired, "clock": emulator.now()}),
                max,
                "the timers fired, but their list is too long to send; read them from the records",
            )
        }
        "runs" => to_json(
            &emulator.runs(),
            max,
            "read their summaries a page at a time with `run_page`, and each run with `run`",
        ),
        "flow" => {
            let req: FlowIdRequest = parse(payload).map_err(err)?;
            match emulator.lock().flows.get(&req.flow_id).cloned() {
                Some(flow) => to_json(&*flow, max, "the flow is larger than one message"),
                None => Err(err(format!("no flow {:?} is deployed", req.flow_id))),
            }
        }
        "flow_list" => to_json(
            &emulator.flow_list(),
            max,
            "too many flows to list at once; read them one at a time with `flow`",
        ),
        "run" => {
            let req: RunRequest = parse(payload).map_err(err)?;
            match emulator.run(&req.run_id) {
                Some(run) => run_reply(run, &req, max),
                None => Err(err(format!("no run {:?}", req.run_id))),
            }
        }
        "records" => {
            let req: RecordsRequest = parse(payload).map_err(err)?;
            let records = emulator.records_since(req.since, req.limit);
            let items = records
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| err(e.to_string()))?;
            // The first records that fit: the requester asks again after the last seq it got.
            page_reply(emulator, items, max, None)
        }
        "violations" => {
            // As `state`: a body it cannot read asks for everything, as before paging.
            let req: PageRequest = parse(payload).unwrap_or_default();
            let all = emulator.violations();
            let from = req.after.unwrap_or(0).min(all.len());
            let items = all[from..]
                .iter()
                .take(req.limit.unwrap_or(usize::MAX))
                .map(serde_json::to_value)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| err(e.to_string()))?;
            let whole = req.limit.is_none().then_some(
                "the violations do not fit in one reply: read them a page at a time with `after` \
                 (how many you have) and `limit` (ControlClient::violations does)",
            );
            page_reply(emulator, items, max, whole)
        }
        "services" => {
            let req: ServicesRequest = parse(payload).unwrap_or_default();
            let services = emulator.services_after(req.after.as_deref(), req.limit);
            let items = services
                .iter()
                .map(|(name, s)| serde_json::to_value((name, s)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| err(e.to_string()))?;
            let (page, cuts) = reply_fit::fit_page(items, max);
            note_cuts(emulator, cuts);
            if req.limit.is_none() && page.len() < services.len() {
                return Err(err(format!(
                    "the {} services do not fit in one reply (the server's max_payload is {max} \
                     bytes): read them a page at a time with `after` (the last name you have) \
                     and `limit` (ControlClient::services does)",
                    services.len()
                )));
            }
            let map: serde_json::Map<String, Value> = page
                .into_iter()
                .filter_map(|pair| match pair {
                    Value::Array(mut kv) if kv.len() == 2 => {
                        let v = kv.pop()?;
                        Some((kv.pop()?.as_str()?.to_owned(), v))
                    }
                    _ => None,
                })
                .collect();
            to_json(&map, max, "")
        }
        other => Err(err(format!(
            "unknown control op {other:?}; ops: state, deploy, check_release, trigger, resend_dlq, advance, cancel, runs, run_page, run, flow, flow_list, records, violations, services, follow"
        ))),
    }
}

/// The reply's bytes: `{"ok": true, "result": …}` or `{"ok": false, "error": …}`, within `max`
/// bytes (an error too large is cut to its first part).
fn reply_bytes(result: Result<Vec<u8>, Value>, max: usize) -> Vec<u8> {
    match result {
        Ok(result) => {
            let mut bytes = br#"{"ok":true,"result":"#.to_vec();
            bytes.extend_from_slice(&result);
            bytes.push(b'}');
            bytes
        }
        Err(error) => {
            let bytes =
                serde_json::to_vec(&json!({"ok": false, "error": error})).unwrap_or_default();
            if bytes.len() <= max {
                return bytes;
            }
            let text = error.to_string();
            let cut: String = text.chars().take(max / 8).collect();
            serde_json::to_vec(&json!({"ok": false, "error": format!("{cut}… (cut: the whole error is larger than the server's max_payload)")}))
                .unwrap_or_default()
        }
    }
}

/// Subscribes the control subjects; returns the task that serves them (and starts the records'
/// forwarder while someone follows).
pub(crate) async fn serve(
    emulator: Emulator,
) -> Result<impl std::future::Future<Output = ()> + Send + 'static, EmulatorError> {
    let client = emulator
        .config()
        .control_client
        .clone()
        .unwrap_or_else(|| emulator.client().clone());
    let token = emulator.config().control_token.clone();
    let records_to = records_subject(token.as_ref());
    let mut requests = client
        .subscribe(format!("{PREFIX}.*"))
        .await
        .map_err(|e| EmulatorError::nats("subscribe to the control API", e))?;
    // In place at the server before the emulator says it is up.
    triggers_sdk::transport::round_trip(&client)
        .await
        .map_err(|e| EmulatorError::nats("subscribe to the control API", e))?;
    let lease = std::sync::Arc::new(std::sync::Mutex::new(Lease::default()));
    Ok(async move {
        while let Some(msg) = requests.next().await {
            let op = msg
                .subject
                .as_str()
                .rsplit('.')
                .next()
                .unwrap_or_default()
                .to_owned();
            // A reply above the server's max_payload would never be sent, and the requester
            // would wait for nothing: keep room for the envelope of the result.
            let max = client
                .server_info()
                .max_payload
                .saturating_sub(64)
                .max(1024);
            let result = if let Some(refusal) = refuse(token.as_ref(), msg.headers.as_ref()) {
                Err(Value::from(refusal))
            } else if op == "follow" {
                follow(&emulator, &client, &lease, &records_to, &msg.payload)
            } else {
                handle(&emulator, &op, &msg.payload, max).await
            };
            if let Some(to) = msg.reply {
                let bytes = reply_bytes(result, max);
                if let Err(e) = client.publish(to, bytes.into()).await {
                    tracing::warn!(op, "a control reply could not be sent: {e}");
                }
            }
        }
    })
}

/// Whether records are being published, and until when.
#[derive(Debug, Default)]
struct Lease {
    until: Option<tokio::time::Instant>,
    /// A forwarder task is running.
    forwarding: bool,
}

/// A `follow` request: records are published on `subject` for the lease it asks (at most
/// [`MAX_FOLLOW_LEASE`]), or until a later request's lease ends, whichever is later. The
/// forwarder's receiver is made here, before the reply, so every record after the reply is sent.
fn follow(
    emulator: &Emulator,
    client: &async_nats::Client,
    lease: &std::sync::Arc<std::sync::Mutex<Lease>>,
    subject: &str,
    payload: &[u8],
) -> Result<Vec<u8>, Value> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct FollowRequest {
        lease_ms: Option<u64>,
    }
    let req: FollowRequest = parse(payload).map_err(Value::from)?;
    let asked = req
        .lease_ms
        .map_or(FOLLOW_LEASE, Duration::from_millis)
        .min(MAX_FOLLOW_LEASE);
    let until = tokio::time::Instant::now() + asked;
    {
        let mut held = lease.lock().unwrap_or_else(|e| e.into_inner());
        held.until = Some(held.until.map_or(until, |u| u.max(until)));
        if !held.forwarding {
            held.forwarding = true;
            tokio::spawn(forward_records(
                emulator.subscribe_records(),
                client.clone(),
                subject.to_owned(),
                lease.clone(),
            ));
        }
    }
    let ms = u64::try_from(asked.as_millis()).unwrap_or(u64::MAX);
    serde_json::to_vec(&json!({"subject": subject, "lease_ms": ms}))
        .map_err(|e| e.to_string().into())
}

/// Publishes every record on `subject` until the lease runs out (then ends, so an emulator nobody
/// follows neither serialises nor sends records) or the emulator is gone. A forwarder that falls
/// behind the recorder's channel skips records, counted and logged here; a follower sees the gap
/// in their `seq` and fetches them with `records`.
async fn forward_records(
    mut records: tokio::sync::broadcast::Receiver<Record>,
    client: async_nats::Client,
    subject: String,
    lease: std::sync::Arc<std::sync::Mutex<Lease>>,
) {
    use tokio::sync::broadcast::error::RecvError;
    let mut skipped: u64 = 0;
    loop {
        let until = {
            let mut held = lease.lock().unwrap_or_else(|e| e.into_inner());
            match held.until {
                Some(until) if until > tokio::time::Instant::now() => until,
                _ => {
                    // Decided under the lock, so a request now starts a new forwarder.
                    held.forwarding = false;
                    held.until = None;
                    return;
                }
            }
        };
        let sleep = tokio::time::sleep_until(until);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                record = records.recv() => match record {
                    Ok(record) => {
                        if let Ok(bytes) = serde_json::to_vec(&record) {
                            let _ = client.publish(subject.clone(), bytes.into()).await;
                        }
                    }
                    Err(RecvError::Lagged(n)) => {
                        skipped = skipped.saturating_add(n);
                        tracing::warn!(
                            skipped,
                            "the records' forwarder fell behind and skipped {n} records \
                             (followers fetch them by seq with `records`)"
                        );
                    }
                    Err(RecvError::Closed) => {
                        lease.lock().unwrap_or_else(|e| e.into_inner()).forwarding = false;
                        return;
                    }
                },
                // The lease as it was: look again (it may have been renewed).
                () = &mut sleep => break,
            }
        }
    }
}

/// Why a request is refused for want of the token; `None` when it may go on.
fn refuse(token: Option<&ControlToken>, headers: Option<&async_nats::HeaderMap>) -> Option<String> {
    let token = token?;
    let given = headers
        .and_then(|h| h.get(TOKEN_HEADER))
        .map(async_nats::HeaderValue::as_str);
    match given {
        Some(given) if token.matches(given) => None,
        Some(_) => Some(format!(
            "the {TOKEN_HEADER} header does not match this emulator's token: use the one its \
             `triggers-lab up` wrote to its discovery file (the triggers-lab CLI reads it)"
        )),
        None => Some(format!(
            "this emulator's control API needs its token in the {TOKEN_HEADER} header: use the \
             triggers-lab CLI (deploy, trigger, advance, watch), which reads it from the \
             discovery file `triggers-lab up` writes"
        )),
    }
}

/// A client of the control API, for the CLI and the terminal UI.
#[derive(Debug, Clone)]
pub struct ControlClient {
    client: async_nats::Client,
    url: String,
    drops: DropCounter,
    token: Option<ControlToken>,
}

impl ControlClient {
    /// Connects to the NATS server a `triggers-lab up` runs on and checks an emulator answers:
    /// for an open control API. [`ControlClient::connect_with`] takes what a closed one needs.
    ///
    /// # Errors
    /// [`ControlError::NoEmulator`] when nothing answers.
    pub async fn connect(url: &str) -> Result<Self, ControlError> {
        Self::connect_with(url, &ControlAccess::default()).await
    }

    /// Connects with `access` (the control account's credentials, the token) and checks an
    /// emulator answers.
    ///
    /// # Errors
    /// [`ControlError::NoEmulator`] when the server refuses the credentials or nothing answers;
    /// [`ControlError::Refused`] when the emulator refuses the token.
    pub async fn connect_with(url: &str, access: &ControlAccess) -> Result<Self, ControlError> {
        let drops = DropCounter::new();
        let options = triggers_sdk::transport::with_url_credentials(
            crate::drops::connect_options("triggers-lab control", &drops),
            url,
        );
        let options = match &access.credentials {
            Some(c) => c.apply(options),
            None => options,
        };
        let client = options
            .connection_timeout(Duration::from_secs(5))
            .connect(url)
            .await
            .map_err(|e| ControlError::NoEmulator {
                url: url.to_owned(),
                reason: e.to_string(),
            })?;
        let this = ControlClient::from_client(client, url)
            .with_token(access.token.clone())
            .with_drops(drops);
        this.state().await?;
        Ok(this)
    }

    /// Wraps an existing connection (no check). Its drops are not counted unless it was made
    /// with [`crate::drops::connect_options`] and the counter given to [`ControlClient::with_drops`].
    #[must_use]
    pub fn from_client(client: async_nats::Client, url: &str) -> Self {
        ControlClient {
            client,
            url: url.to_owned(),
            drops: DropCounter::new(),
            token: None,
        }
    }

    /// The counter of the connection's slow-consumer drops (the connection was made with
    /// [`crate::drops::connect_options`] over it).
    #[must_use]
    pub fn with_drops(mut self, drops: DropCounter) -> Self {
        self.drops = drops;
        self
    }

    /// Messages NATS dropped for this client's slow subscriptions (records it followed).
    #[must_use]
    pub fn dropped_messages(&self) -> u64 {
        self.drops.count()
    }

    /// Sends `token` with every request and follows the records on its subject.
    #[must_use]
    pub fn with_token(mut self, token: Option<ControlToken>) -> Self {
        self.token = token;
        self
    }

    /// The NATS client underneath.
    #[must_use]
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    async fn call<T: DeserializeOwned>(&self, op: &str, request: Value) -> Result<T, ControlError> {
        let bytes =
            serde_json::to_vec(&request).map_err(|e| ControlError::BadReply(e.to_string()))?;
        let mut headers = async_nats::HeaderMap::new();
        if let Some(token) = &self.token {
            headers.insert(TOKEN_HEADER, token.as_str());
        }
        // The server would refuse it, and async-nats says so only as a failed request, which
        // reads as "nothing answers": say what is wrong instead.
        let max = self.client.server_info().max_payload;
        let size = bytes.len() + TOKEN_HEADER.len() + 64;
        if max > 0 && size > max {
            return Err(ControlError::TooLarge {
                op: op.to_owned(),
                bytes: bytes.len(),
                max,
            });
        }
        let reply = tokio::time::timeout(
            Duration::from_secs(30),
            self.client
                .request_with_headers(format!("{PREFIX}.{op}"), headers, bytes.into()),
        )
        .await
        .map_err(|_| ControlError::NoEmulator {
            url: self.url.clone(),
            reason: format!("no reply to {op} within 30 s"),
        })?
        .map_err(|e| ControlError::NoEmulator {
            url: self.url.clone(),
            // async-nats' text repeats its kind ("no responders: no responders"): say it once,
            // in words.
            reason: match e.kind() {
                async_nats::RequestErrorKind::NoResponders => {
                    format!("nothing answers {PREFIX}.{op}")
                }
                async_nats::RequestErrorKind::TimedOut => format!("no reply to {op} in time"),
                _ => e.to_string(),
            },
        })?;
        let value: Value = serde_json::from_slice(&reply.payload)
            .map_err(|e| ControlError::BadReply(e.to_string()))?;
        if value.get("ok") == Some(&Value::Bool(true)) {
            serde_json::from_value(value.get("result").cloned().unwrap_or(Value::Null))
                .map_err(|e| ControlError::BadReply(e.to_string()))
        } else {
            let error = value.get("error").cloned().unwrap_or(Value::Null);
            let message = match &error {
                Value::String(s) => s.clone(),
                Value::Object(o) => o
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("refused")
                    .to_owned(),
                other => other.to_string(),
            };
            Err(ControlError::Refused(message))
        }
    }

    /// The state summary.
    ///
    /// # Errors
    /// When the call fails.
    pub async fn state(&self) -> Result<StateSummary, ControlError> {
        self.call("state", json!({})).await
    }

    /// The state summary with up to the newest `runs_limit` runs (fewer when they would not fit
    /// in one NATS message; `runs_total` counts them all).
    ///
    /// # Errors
    /// When the call fails.
    pub async fn state_with_runs(&self, runs_limit: usize) -> Result<StateSummary, ControlError> {
        self.call("state", json!({"runs_limit": runs_limit})).await
    }

    /// Messages the emulator has missed since it started: dropped for a slow subscription,
    /// plus connections lost (after each, plain-subject traffic published meanwhile went
    /// unseen). Read it before and after something to know whether a verdict on it rests on
    /// everything.
    ///
    /// # Errors
    /// When the call fails.
    pub async fn missed(&self) -> Result<u64, ControlError> {
        let s = self.state_with_runs(0).await?;
        Ok(s.dropped_messages + s.connection_losses)
    }

    /// The deployed flow `flow_id`, whole.
    ///
    /// # Errors
    /// When it is not deployed, or the call fails.
    pub async fn flow(&self, flow_id: &str) -> Result<Flow, ControlError> {
        self.call("flow", json!({"flow_id": flow_id})).await
    }

    /// Every deployed flow at a glance.
    ///
    /// # Errors
    /// When the call fails.
    pub async fn flow_list(&self) -> Result<Vec<FlowSummary>, ControlError> {
        self.call("flow_list", json!({})).await
    }

    /// One page of the runs' summaries, in start order, after the place `after` (0: from the
    /// oldest; else the `next` of the page before).
    ///
    /// # Errors
    /// When the call fails.
    pub async fn run_page(&self, after: u64, limit: usize) -> Result<RunPage, ControlError> {
        self.call("run_page", json!({"after": after, "limit": limit}))
            .await
    }

    /// Every run's summary, in start order, read a page at a time (runs that start meanwhile
    /// are included, runs evicted meanwhile may be missing).
    ///
    /// # Errors
    /// When a call fails.
    pub async fn run_summaries(&self) -> Result<Vec<RunSummary>, ControlError> {
        let mut runs = Vec::new();
        let mut after = 0;
        loop {
            let page = self.run_page(after, RUN_PAGE).await?;
            runs.extend(page.runs);
            if !page.more || page.next <= after {
                return Ok(runs);
            }
            after = page.next;
        }
    }

    /// Deploys a flow; returns the released flow.
    ///
    /// # Errors
    /// The release problems, or a failed call.
    pub async fn deploy(&self, flow: &Flow) -> Result<Value, ControlError> {
        self.call("deploy", json!({"flow": flow})).await
    }

    /// Starts a run; returns its id.
    ///
    /// # Errors
    /// When the call fails.
    pub async fn trigger(&self, flow_id: &str, payload: &Value) -> Result<String, ControlError> {
        self.start_run(json!({"flow_id": flow_id, "payload": payload}))
            .await
    }

    /// Starts a run with `payload_json` sent exactly as written (a 64-bit integer stays exact);
    /// returns its id.
    ///
    /// # Errors
    /// When the call fails, or the text is not JSON.
    pub async fn trigger_json(
        &self,
        flow_id: &str,
        payload_json: &str,
    ) -> Result<String, ControlError> {
        self.start_run(json!({"flow_id": flow_id, "payload_json": payload_json}))
            .await
    }

    /// Starts a run at the `service-in` node `entry` (the flow's first entry point when `None`)
    /// with `payload_json` sent exactly as written; returns its id.
    ///
    /// # Errors
    /// When the call fails, the text is not JSON, or `entry` is not a `service-in` of the flow.
    pub async fn trigger_at(
        &self,
        flow_id: &str,
        entry: Option<&str>,
        payload_json: &str,
    ) -> Result<String, ControlError> {
        self.start_run(json!({"flow_id": flow_id, "entry": entry, "payload_json": payload_json}))
            .await
    }

    /// Starts a run at the `service-in` node `entry` (the flow's first entry point when `None`)
    /// with `raw` as its payload, JSON or not (a poison message); returns its id.
    ///
    /// # Errors
    /// When the call fails, or `entry` is not a `service-in` of the flow.
    pub async fn trigger_raw(
        &self,
        flow_id: &str,
        entry: Option<&str>,
        raw: &str,
    ) -> Result<String, ControlError> {
        self.start_run(json!({"flow_id": flow_id, "entry": entry, "payload_raw": raw}))
            .await
    }

    /// A `trigger` call with `request`: the new run's id.
    async fn start_run(&self, request: Value) -> Result<String, ControlError> {
        let v: Value = self.call("trigger", request).await?;
        Ok(v.get("run_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned())
    }

    /// Every registered service with its whole manifest.
    ///
    /// # Errors
    /// When the call fails.
    pub async fn services(
        &self,
    ) -> Result<std::collections::BTreeMap<String, crate::recorder::ServiceState>, ControlError>
    {
        // A page at a time: however many registered, every one can be read.
        let mut all = std::collections::BTreeMap::new();
        let mut after: Option<String> = None;
        loop {
            let page: std::collections::BTreeMap<String, crate::recorder::ServiceState> = self
                .call("services", json!({"after": after, "limit": SERVICES_PAGE}))
                .await?;
            let Some(last) = page.keys().next_back().cloned() else {
                return Ok(all);
            };
            after = Some(last);
            all.extend(page);
        }
    }

    /// Every conformance violation, as JSON (`severity`, `rule`, `message`, ...).
    ///
    /// # Errors
    /// When the call fails.
    pub async fn violations(&self) -> Result<Vec<Value>, ControlError> {
        // A page at a time, so that however large, every one can be read (one too large alone
        // comes cut, and says so).
        let mut all: Vec<Value> = Vec::new();
        loop {
            let page: Vec<Value> = self
                .call(
                    "violations",
                    json!({"after": all.len(), "limit": VIOLATIONS_PAGE}),
                )
                .await?;
            if page.is_empty() {
                return Ok(all);
            }
            all.extend(page);
        }
    }

    /// Re-sends the DLQ entry whose `Nats-Msg-Id` is `msg_id` to its service
    /// ([`Emulator::resend_dlq`]).
    ///
    /// # Errors
    /// When the call fails, or the entry cannot be re-sent (the reason is the error's text).
    pub async fn resend_dlq(&self, msg_id: &str) -> Result<crate::Resent, ControlError> {
        self.call("resend_dlq", json!({ "msg_id": msg_id })).await
    }

    /// Cancels an open run ([`Emulator::cancel`]); returns what it dropped.
    ///
    /// # Errors
    /// When the call fails, or the run cannot be cancelled (the reason is the error's text).
    pub async fn cancel(&self, run_id: &str) -> Result<crate::recorder::Cancelled, ControlError> {
        self.call("cancel", json!({ "run_id": run_id })).await
    }

    /// Advances the virtual clock; returns the timers fired and the new time.
    ///
    /// # Errors
    /// When the call fails (the real clock cannot be advanced).
    pub async fn advance(&self, by: Duration) -> Result<Value, ControlError> {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.call("advance", json!({"duration_ms": ms})).await
    }

    /// A run, whole: its timeline read a page at a time, as much as fits in one message each,
    /// so a run of any size is read (entries added meanwhile are included; the run's other
    /// fields are as of the last page).
    ///
    /// # Errors
    /// When a call fails or there is no such run.
    pub async fn run(&self, run_id: &str) -> Result<Run, ControlError> {
        let mut timeline = Vec::new();
        loop {
            let page: RunTimelinePage = self
                .call(
                    "run",
                    json!({"run_id": run_id, "timeline_from": timeline.len()}),
                )
                .await?;
            let (Some(from), Some(total)) = (page.timeline_from, page.timeline_total) else {
                // An emulator that does not page sent the run whole.
                return Ok(page.run);
            };
            if from != timeline.len() {
                return Err(ControlError::BadReply(format!(
                    "asked for run {run_id}'s timeline from entry {}, got it from {from}",
                    timeline.len()
                )));
            }
            let got = page.run.timeline.len();
            let mut run = page.run;
            timeline.append(&mut run.timeline);
            // Every page holds one entry at least while any is left, so this ends.
            if got == 0 || timeline.len() >= total {
                run.timeline = timeline;
                return Ok(run);
            }
        }
    }

    /// Records after `since`.
    ///
    /// # Errors
    /// When the call fails.
    pub async fn records(&self, since: u64, limit: usize) -> Result<Vec<Record>, ControlError> {
        self.call("records", json!({"since": since, "limit": limit}))
            .await
    }

    /// Every record from now on, as the emulator publishes them. The emulator publishes records
    /// only while someone follows: this asks it to (a `follow` request) and renews the lease
    /// every third of [`FOLLOW_LEASE`] until the stream is dropped.
    ///
    /// # Errors
    /// When the subscription fails, or the emulator does not answer the `follow` request.
    pub async fn follow(&self) -> Result<BoxStream<'static, Record>, ControlError> {
        let sub = self
            .client
            .subscribe(records_subject(self.token.as_ref()))
            .await
            .map_err(|e| ControlError::NoEmulator {
                url: self.url.clone(),
                reason: e.to_string(),
            })?;
        // Every record published after this returns reaches the stream.
        triggers_sdk::transport::round_trip(&self.client)
            .await
            .map_err(|reason| ControlError::NoEmulator {
                url: self.url.clone(),
                reason,
            })?;
        let lease =
            json!({"lease_ms": u64::try_from(FOLLOW_LEASE.as_millis()).unwrap_or(u64::MAX)});
        let _: Value = self.call("follow", lease.clone()).await?;
        let renewer = self.clone();
        let mut renew = tokio::task::JoinSet::new();
        renew.spawn(async move {
            loop {
                tokio::time::sleep(FOLLOW_LEASE / 3).await;
                if let Err(e) = renewer.call::<Value>("follow", lease.clone()).await {
                    tracing::debug!("the records' lease could not be renewed (tried again): {e}");
                }
            }
        });
        let records = sub
            .filter_map(|m| async move { serde_json::from_slice(&m.payload).ok() })
            .boxed();
        Ok(Following {
            records,
            _renew: renew,
        }
        .boxed())
    }
}

/// The records a [`ControlClient::follow`] returns, with the task renewing their lease: dropped
/// together.
struct Following {
    records: BoxStream<'static, Record>,
    /// Aborts the renewing task when dropped.
    _renew: tokio::task::JoinSet<()>,
}

impl futures::Stream for Following {
    type Item = Record;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Record>> {
        self.records.poll_next_unpin(cx)
    }
}
