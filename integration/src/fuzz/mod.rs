//! The protocol fuzzer of issue 10: random and mutated messages (headers, sizes, encodings, JSON
//! shapes, Durable Timer triplets, flow bodies) sent to the emulator and to an SDK service over a
//! real nats-server, in batches. After each batch it checks that everything still lives and stays
//! within its bounds, and that every message had an outcome:
//!
//! - a request (registration, fetch, control API) was answered within a second;
//! - anything else the emulator sees (`triggers.v2.>`, a service's inbound subject) was recorded
//!   under its subject with its exact payload: as what it is, or as a violation;
//! - a delivery to the SDK service's inbound stream ended in a completion event or a DLQ entry
//!   for its run (or was refused by JetStream's dedup when published, or counted as given up);
//! - the liveness checks: the control API answers `state` within a second, a canary run through
//!   the SDK service settles, the nats-server process lives;
//! - the bounds: records within `max_records` and `max_record_bytes`, runs within `max_runs`
//!   (and its eviction slack), violations within `max_violations`, the service's flows within
//!   its `max_flows`.
//!
//! A batch whose records fell off the ring before they were checked cannot be verified: that is
//! reported as partial, and fails, rather than passed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use triggers_emulator::control::ControlClient;
use triggers_emulator::recorder::{RecordKind, RunStatus};
use triggers_emulator::{EmulatorConfig, Harness};
use triggers_sdk::flow::Flow;
use triggers_sdk::runtime::{
    ActionContext, ActionDef, ActionError, DURABLE_TIMER_V1, RunningService, RuntimeConfig, Service,
};
use triggers_sdk::wire::header::names;

mod generate;
use generate::{Message, Send, generate};

/// The SDK service under fuzz.
const SERVICE: &str = "fz";
/// Its inbound subject.
const INBOUND: &str = "fz.inbound";
/// The flow fuzzed deliveries are made from.
const FLOW: &str = "fzflow";
/// The canary's flow (never a fuzz target).
const CANARY: &str = "canary-fixed";

/// How a fuzz session runs. `..Default::default()` fills the rest.
#[derive(Debug, Clone)]
pub struct FuzzConfig {
    /// Messages in all (default 2 000).
    pub messages: usize,
    /// The seed (default 1).
    pub seed: u64,
    /// Messages per batch, between checks (default 200).
    pub batch: usize,
    /// Stop after this long (default none).
    pub duration: Option<Duration>,
    /// A line per batch on stderr (default false).
    pub progress: bool,
}

impl Default for FuzzConfig {
    fn default() -> Self {
        FuzzConfig {
            messages: 2_000,
            seed: 1,
            batch: 200,
            duration: None,
            progress: false,
        }
    }
}

/// What a fuzz session showed. [`FuzzReport::passed`] is the verdict.
#[derive(Debug, Default, Clone)]
pub struct FuzzReport {
    /// The seed.
    pub seed: u64,
    /// Messages sent, by target.
    pub sent: BTreeMap<&'static str, u64>,
    /// Outcomes, by kind: `replied`, `recorded`, `dead_lettered`, `completed`,
    /// `deduplicated_at_publish`, `refused_by_client` (NATS would not carry it: too big, a
    /// header it cannot write).
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Messages without an outcome.
    pub unaccounted: u64,
    /// Processes or tasks found dead (the control API or the canary gone, the server gone).
    pub crashes: u64,
    /// Requests not answered within a second; canaries that did not settle in time.
    pub hangs: u64,
    /// Bounds found exceeded.
    pub bound_breaches: u64,
    /// The slowest reply to a fuzzed request.
    pub slowest_reply: Duration,
    /// Batches checked.
    pub batches: u64,
    /// Peak resident memory of this process (emulator and service), KiB.
    pub peak_rss_kib: u64,
    /// Peak resident memory of the nats-server, KiB.
    pub nats_peak_rss_kib: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Why a check could not be made on complete data.
    pub partial: Vec<String>,
    /// Each problem, with the message that showed it.
    pub problems: Vec<String>,
}

impl FuzzReport {
    /// The verdict: every message had an outcome, nothing crashed, hung or outgrew its bound.
    #[must_use]
    pub fn passed(&self) -> bool {
        self.partial.is_empty()
            && self.problems.is_empty()
            && self.unaccounted == 0
            && self.crashes == 0
            && self.hangs == 0
            && self.bound_breaches == 0
    }

    /// Messages sent in all.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.sent.values().sum()
    }

    /// The header of [`FuzzReport::table_row`].
    pub const TABLE_HEADER: &'static str = "| messages | batches | unaccounted | crashes | hangs | bound breaches | slowest reply | peak RSS (emulator + service) | peak RSS (nats-server) | time |\n|---|---|---|---|---|---|---|---|---|---|";

    /// The figures as one markdown row.
    #[must_use]
    pub fn table_row(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {} | {} | {:.0?} | {} MiB | {} MiB | {:.0?} |",
            self.total(),
            self.batches,
            self.unaccounted,
            self.crashes,
            self.hangs,
            self.bound_breaches,
            self.slowest_reply,
            self.peak_rss_kib / 1024,
            self.nats_peak_rss_kib / 1024,
            self.elapsed
        )
    }
}

impl std::fmt::Display for FuzzReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "fuzz, seed {}: {} messages in {} batches",
            self.seed,
            self.total(),
            self.batches
        )?;
        writeln!(f, "sent: {:?}", self.sent)?;
        writeln!(f, "outcomes: {:?}", self.outcomes)?;
        writeln!(
            f,
            "unaccounted {}, crashes {}, hangs {}, bound breaches {}, slowest reply {:.0?}; peak RSS {} MiB (nats-server {} MiB); {:.1?}",
            self.unaccounted,
            self.crashes,
            self.hangs,
            self.bound_breaches,
            self.slowest_reply,
            self.peak_rss_kib / 1024,
            self.nats_peak_rss_kib / 1024,
            self.elapsed
        )?;
        crate::write_verdict(f, &self.partial, &self.problems, 40, self.passed())
    }
}

/// The emulator's bounds under fuzz: small, so that they are reached.
#[must_use]
pub fn emulator_config() -> EmulatorConfig {
    EmulatorConfig {
        wait_timeout: Duration::from_secs(10),
        max_records: 50_000,
        max_record_bytes: 256 << 20,
        max_runs: 500,
        max_violations: 2_000,
        // Reached by the fuzzed events for made-up runs within a few hundred messages.
        max_followed_runs: 20,
        ..Default::default()
    }
}

/// How long a fuzzed request may wait for its reply before it counts as a hang. The liveness
/// check after each batch (the control API's `state`) has a second; a fuzzed request may carry
/// 600 KB to decode and judge, on a loaded machine, in a debug build.
const REPLY_WITHIN: Duration = Duration::from_secs(5);

/// The service's flow table bound under fuzz.
const MAX_FLOWS: usize = 50;

fn service(url: &str) -> Service {
    Service::builder(SERVICE, "1.0.0")
        .action(ActionDef::dynamic(
            "work",
            &json!({"type": "object"}),
            &json!({"type": "object"}),
            |input: Value, _ctx: ActionContext| async move { Ok::<_, ActionError>(input) },
        ))
        .nats_source("nats", INBOUND)
        .capability(DURABLE_TIMER_V1)
        .config(RuntimeConfig {
            nats_url: Some(url.to_owned()),
            heartbeat_interval: Some(Duration::from_millis(500)),
            shutdown_grace: Some(Duration::from_secs(2)),
            flow_wait: Some(Duration::from_millis(100)),
            max_flows: Some(MAX_FLOWS),
            ..Default::default()
        })
        .build()
        .expect("a valid fuzz service")
}

fn flows() -> [Flow; 2] {
    let fuzz = json!({"id": FLOW, "nodes": [
        {"id": "in", "type": "service-in", "service": SERVICE, "config": {"transport": "nats", "target": INBOUND}},
        {"id": "work", "type": "action", "service": SERVICE, "action": "work"},
        {"id": "t", "type": "timer", "config": {"delay_ms": 60000}},
        {"id": "in2", "type": "service-in", "service": SERVICE, "config": {"transport": "nats", "target": INBOUND}},
        {"id": "work2", "type": "action", "service": SERVICE, "action": "work"}
    ], "edges": [
        {"id": "e1", "from": "in", "to": "work"},
        {"id": "e2", "from": "in", "to": "t"},
        {"id": "e3", "from": "t", "to": "in2"},
        {"id": "e4", "from": "in2", "to": "work2"}
    ]});
    let canary = json!({"id": CANARY, "nodes": [
        {"id": "in", "type": "service-in", "service": SERVICE},
        {"id": "work", "type": "action", "service": SERVICE, "action": "work"}
    ], "edges": [{"id": "e1", "from": "in", "to": "work"}]});
    [
        serde_json::from_value(fuzz).expect("the fuzz flow"),
        serde_json::from_value(canary).expect("the canary flow"),
    ]
}

// ---- the driver ----------------------------------------------------------------------------

/// Runs a fuzz session on a harness of its own and reports.
///
/// # Panics
/// When the harness or the service cannot start.
pub async fn run(config: FuzzConfig) -> FuzzReport {
    let started = Instant::now();
    let mut report = FuzzReport {
        seed: config.seed,
        ..Default::default()
    };
    let lab = crate::lab_with(emulator_config()).await;
    let running = service(lab.url())
        .start()
        .await
        .expect("the fuzz service starts");
    let [fuzz_flow, canary] = flows();
    let version = lab
        .deploy(fuzz_flow)
        .await
        .expect("the fuzz flow deploys")
        .flow
        .version;
    lab.deploy(canary).await.expect("the canary deploys");
    let client = triggers_sdk::transport::connect(lab.url())
        .await
        .expect("the fuzzer's connection");
    let js = async_nats::jetstream::new(client.clone());
    let control = ControlClient::connect(lab.url())
        .await
        .expect("a control client");
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut n: u64 = 0;
    let mut control_runs: usize = 0;
    let mut keys_seen: HashSet<String> = HashSet::new();
    while (n as usize) < config.messages {
        if config.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        let size = config.batch.min(config.messages - n as usize) as u64;
        let since = lab.summary().last_seq;
        let dropped_before = lab.records().1;
        let mut published: Vec<Message> = Vec::new();
        let mut inbound_runs: Vec<String> = Vec::new();
        let mut without_run = 0u64;
        let mut run_keys: HashMap<String, String> = HashMap::new();
        let mut reused_key: HashSet<String> = HashSet::new();
        for _ in 0..size {
            n += 1;
            let m = generate(&mut rng, n, &lab, version);
            *report.sent.entry(m.target).or_default() += 1;
            let Ok(nats_headers) = triggers_sdk::transport::to_nats(&m.headers) else {
                *report.outcomes.entry("refused_by_client").or_default() += 1;
                continue;
            };
            match m.how {
                Send::Request => {
                    let request = async_nats::Request::new()
                        .payload(m.body.clone().into())
                        .headers(nats_headers)
                        .timeout(Some(REPLY_WITHIN));
                    let asked = Instant::now();
                    match client.send_request(m.subject.clone(), request).await {
                        Ok(reply) => {
                            *report.outcomes.entry("replied").or_default() += 1;
                            report.slowest_reply = report.slowest_reply.max(asked.elapsed());
                            // A run started through the control API may wait on its timer for
                            // good (the clock is the fuzzer's): the runs bound allows for it.
                            if m.subject.ends_with(".trigger")
                                && reply.payload.starts_with(br#"{"ok":true"#)
                            {
                                control_runs += 1;
                                // Half of them are cancelled by hand: it must take.
                                if rng.random_bool(0.5) {
                                    cancel(&control, &reply.payload, n, &mut report).await;
                                }
                            }
                        }
                        Err(e)
                            if matches!(e.kind(), async_nats::RequestErrorKind::NoResponders)
                                && is_control_without_op(&m.subject) =>
                        {
                            *report.outcomes.entry("no_responders").or_default() += 1;
                        }
                        Err(e) => {
                            report.hangs += 1;
                            report.problems.push(format!(
                                "message {n}: a request on {} got no reply within {REPLY_WITHIN:?} ({e}); body {}",
                                m.subject,
                                preview(&m.body)
                            ));
                        }
                    }
                }
                Send::Publish => {
                    match client
                        .publish_with_headers(
                            m.subject.clone(),
                            nats_headers,
                            m.body.clone().into(),
                        )
                        .await
                    {
                        Ok(()) => published.push(m),
                        Err(e) => {
                            *report.outcomes.entry("refused_by_client").or_default() += 1;
                            tracing::debug!("not published: {e}");
                        }
                    }
                }
                Send::Inbound => {
                    let run = m.headers.get(names::FLOW_RUN_ID).map(str::to_owned);
                    match js
                        .publish_with_headers(
                            m.subject.clone(),
                            nats_headers,
                            m.body.clone().into(),
                        )
                        .await
                    {
                        Ok(ack) => match ack.await {
                            Ok(ack) if ack.duplicate => {
                                *report
                                    .outcomes
                                    .entry("deduplicated_at_publish")
                                    .or_default() += 1;
                            }
                            Ok(_) => {
                                match run {
                                    Some(r) if !r.is_empty() => {
                                        // A delivery whose idempotency key an earlier one
                                        // carried is, by the contract, that delivery again:
                                        // its completion event repeats that one's id and the
                                        // events stream drops it.
                                        let key = m
                                            .headers
                                            .get(names::IDEMPOTENCY_KEY)
                                            .unwrap_or_default()
                                            .to_owned();
                                        if !keys_seen.insert(key.clone()) {
                                            reused_key.insert(r.clone());
                                        }
                                        run_keys.insert(r.clone(), key);
                                        inbound_runs.push(r);
                                    }
                                    _ => without_run += 1,
                                }
                                published.push(m);
                            }
                            Err(e) => {
                                *report.outcomes.entry("refused_by_server").or_default() += 1;
                                tracing::debug!("not stored: {e}");
                            }
                        },
                        Err(e) => {
                            *report.outcomes.entry("refused_by_client").or_default() += 1;
                            tracing::debug!("not published: {e}");
                        }
                    }
                }
            }
        }
        client.flush().await.ok();
        check_batch(
            &lab,
            &running,
            &control,
            &js,
            Batch {
                since,
                dropped_before,
                published: &published,
                inbound_runs: &inbound_runs,
                without_run,
                n,
                control_runs,
                run_keys: &run_keys,
                reused_key: &reused_key,
            },
            &mut report,
        )
        .await;
        report.batches += 1;
        if config.progress {
            eprintln!(
                "{n}/{} messages, unaccounted {}, crashes {}, hangs {}, bound breaches {}, {} problems, RSS {} MiB ({:.0?})",
                config.messages,
                report.unaccounted,
                report.crashes,
                report.hangs,
                report.bound_breaches,
                report.problems.len(),
                crate::soak::peak_rss_kib(None) / 1024,
                started.elapsed()
            );
        }
        if report.crashes > 0 {
            break;
        }
    }
    report.peak_rss_kib = crate::soak::peak_rss_kib(None);
    report.nats_peak_rss_kib = crate::soak::peak_rss_kib(crate::soak::nats_server_pid(lab.url()));
    report.elapsed = started.elapsed();
    drop(running);
    report
}

/// Cancels the run a `trigger` reply names; a refusal is a problem (the run was open: its timer
/// waits on the fuzzer's clock).
async fn cancel(control: &ControlClient, reply: &[u8], n: u64, report: &mut FuzzReport) {
    let run_id = serde_json::from_slice::<Value>(reply)
        .ok()
        .and_then(|v| v["result"]["run_id"].as_str().map(str::to_owned));
    let Some(run_id) = run_id else {
        return;
    };
    match tokio::time::timeout(REPLY_WITHIN, control.cancel(&run_id)).await {
        Ok(Ok(_)) => *report.outcomes.entry("cancelled").or_default() += 1,
        Ok(Err(e)) => report.problems.push(format!(
            "message {n}: run {run_id}, started by a control trigger, could not be cancelled: {e}"
        )),
        Err(_) => {
            report.hangs += 1;
            report.problems.push(format!(
                "message {n}: cancelling run {run_id} got no reply within {REPLY_WITHIN:?}"
            ));
        }
    }
}

fn is_control_without_op(subject: &str) -> bool {
    subject.starts_with("triggerslab.") && subject.split('.').count() != 4
}

fn preview(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned()
}

struct Batch<'a> {
    since: u64,
    dropped_before: u64,
    published: &'a [Message],
    inbound_runs: &'a [String],
    without_run: u64,
    n: u64,
    control_runs: usize,
    run_keys: &'a HashMap<String, String>,
    reused_key: &'a HashSet<String>,
}

async fn check_batch(
    lab: &Harness,
    running: &RunningService,
    control: &ControlClient,
    js: &async_nats::jetstream::Context,
    batch: Batch<'_>,
    report: &mut FuzzReport,
) {
    // Liveness: the nats-server, the control API within a second.
    if crate::soak::nats_server_pid(lab.url()).is_none() {
        report.crashes += 1;
        report.problems.push(format!(
            "after message {}: the nats-server is gone",
            batch.n
        ));
        return;
    }
    match tokio::time::timeout(Duration::from_secs(1), control.state()).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            report.crashes += 1;
            report.problems.push(format!(
                "after message {}: the control API failed: {e}",
                batch.n
            ));
        }
        Err(_) => {
            report.hangs += 1;
            report.problems.push(format!(
                "after message {}: the control API did not answer within 1 s",
                batch.n
            ));
        }
    }
    // Every inbound delivery handled or dead-lettered: the consumer has nothing left.
    let consumer = triggers_sdk::wire::subject::consumer_name(SERVICE, INBOUND).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let idle = match js.get_stream(format!("triggers-sources-{SERVICE}")).await {
            Ok(stream) => match stream.consumer_info(&consumer).await {
                Ok(info) => info.num_pending == 0 && info.num_ack_pending == 0,
                Err(_) => false,
            },
            Err(_) => false,
        };
        if idle {
            break;
        }
        if Instant::now() >= deadline {
            report.hangs += 1;
            report.problems.push(format!(
                "after message {}: the service's consumer still has work after 30 s",
                batch.n
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The canary: the service still runs a flow.
    match lab.trigger(CANARY, &json!({"canary": batch.n})).await {
        Ok(run) => match lab.wait_run_settled(&run).await {
            Ok(r) if r.status == RunStatus::Succeeded => {}
            Ok(r) => report.problems.push(format!(
                "after message {}: the canary run ended {:?}",
                batch.n, r.status
            )),
            Err(e) => {
                report.hangs += 1;
                report.problems.push(format!(
                    "after message {}: the canary run did not settle: {e}",
                    batch.n
                ));
            }
        },
        Err(e) => {
            report.crashes += 1;
            report.problems.push(format!(
                "after message {}: the canary could not be triggered: {e}",
                batch.n
            ));
        }
    }
    // Outcomes: each published message recorded under its subject with its bytes; each
    // delivery's run completed or dead-lettered. Events and DLQ entries come through streams:
    // give them a moment.
    let wanted: Vec<(&str, &[u8])> = batch
        .published
        .iter()
        .map(|m| (m.subject.as_str(), m.body.as_slice()))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let (missing, missing_runs, missing_without_run) = loop {
        let records = lab.records_since(batch.since, usize::MAX);
        let first = records.first().map(|r| r.seq);
        if lab.records().1 > batch.dropped_before && first.is_some_and(|f| f > batch.since + 1) {
            report.partial.push(format!(
                "after message {}: records of the batch fell off the ring before they were checked",
                batch.n
            ));
            return;
        }
        let seen: HashSet<(&str, &[u8])> = records
            .iter()
            .map(|r| (r.subject.as_str(), r.payload.as_bytes()))
            .collect();
        let missing: Vec<usize> = wanted
            .iter()
            .enumerate()
            .filter(|(_, w)| !seen.contains(*w))
            .map(|(i, _)| i)
            .collect();
        let mut settled_runs: HashSet<&str> = HashSet::new();
        let mut without_run = 0u64;
        for r in &records {
            let run = match &r.kind {
                RecordKind::Completion { event } => Some(event.flow_run_id.as_str()),
                RecordKind::Dlq {
                    entry: Some(entry), ..
                } => Some(entry.envelope.flow_run_id.as_str()),
                _ => None,
            };
            match run {
                Some("") => without_run += 1,
                Some(id) => {
                    settled_runs.insert(id);
                }
                None => {}
            }
        }
        let missing_runs: Vec<&String> = batch
            .inbound_runs
            .iter()
            .filter(|r| !settled_runs.contains(r.as_str()))
            .collect();
        let missing_without_run = batch.without_run.saturating_sub(without_run);
        if (missing.is_empty() && missing_runs.is_empty() && missing_without_run == 0)
            || Instant::now() >= deadline
        {
            break (
                missing,
                missing_runs.into_iter().cloned().collect::<Vec<_>>(),
                missing_without_run,
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (by_key, missing_runs): (Vec<String>, Vec<String>) = missing_runs
        .into_iter()
        .partition(|r| batch.reused_key.contains(r));
    *report.outcomes.entry("deduplicated_by_key").or_default() += by_key.len() as u64;
    let given_up = running.stats().given_up;
    let published = batch.published.len() as u64;
    let unaccounted = missing.len() as u64 + missing_runs.len() as u64 + missing_without_run;
    let unaccounted = unaccounted.saturating_sub(given_up);
    *report.outcomes.entry("recorded").or_default() += published - missing.len() as u64;
    *report
        .outcomes
        .entry("completed_or_dead_lettered")
        .or_default() += (batch.inbound_runs.len() - missing_runs.len() - by_key.len()) as u64;
    report.unaccounted += unaccounted;
    for i in missing.iter().take(5) {
        let m = &batch.published[*i];
        report.problems.push(format!(
            "{} message on {} has no record: headers {:?}, body {}",
            m.target,
            m.subject,
            m.headers.iter().take(12).collect::<Vec<_>>(),
            preview(&m.body)
        ));
    }
    for r in missing_runs.iter().take(5) {
        report.problems.push(format!(
            "delivery for run {r}: neither a completion nor a DLQ entry (idempotency key {:?})",
            batch
                .run_keys
                .get(r)
                .map(String::as_str)
                .unwrap_or_default()
        ));
    }
    if missing_without_run > 0 {
        report.problems.push(format!(
            "{missing_without_run} deliveries without a run id had no DLQ entry"
        ));
    }
    // Bounds.
    let config = lab.config();
    let (records, _) = lab.records();
    let bytes: usize = records.iter().map(|r| r.size()).sum();
    let all_runs = lab.runs();
    let settled = all_runs.iter().filter(|r| r.status.is_settled()).count();
    let unsettled = all_runs.len() - settled;
    let started_unsettled = all_runs
        .iter()
        .filter(|r| !r.status.is_settled() && !r.is_followed())
        .count();
    let followed_unsettled = unsettled - started_unsettled;
    let violations = lab.violations().len();
    let flows = running.flows().len();
    let slack = config.max_runs / 10 + 1;
    for (what, value, bound) in [
        ("records", records.len(), config.max_records),
        ("record bytes", bytes, config.max_record_bytes),
        ("settled runs", settled, config.max_runs + slack),
        // Never evicted by design: the canary's, and those the fuzzer's control requests
        // started (a timer on the fuzzer's clock may keep them waiting).
        (
            "running or waiting runs it started",
            started_unsettled,
            batch.control_runs + 1,
        ),
        // Followed from fuzzed events for made-up runs (open while their node said
        // `retrying`): a bound of their own, reached under fuzz.
        (
            "running or waiting runs followed from events",
            followed_unsettled,
            config.max_followed_runs,
        ),
        ("violations", violations, config.max_violations),
        ("the service's flows", flows, MAX_FLOWS),
    ] {
        if value > bound {
            report.bound_breaches += 1;
            report.problems.push(format!(
                "after message {}: {what} {value} above the bound {bound}",
                batch.n
            ));
        }
    }
}
