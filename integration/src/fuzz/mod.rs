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

use async_nats::HeaderMap;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use triggers_emulator::control::ControlClient;
use triggers_emulator::{EmulatorConfig, Harness};
use triggers_sdk::flow::Flow;
use triggers_sdk::runtime::{
    ActionContext, ActionDef, ActionError, DURABLE_TIMER_V1, RunningService, RuntimeConfig, Service,
};
use triggers_sdk::wire::header::names;

mod check;
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

    /// Counts `by` more outcomes of a kind.
    fn outcome(&mut self, kind: &'static str, by: u64) {
        *self.outcomes.entry(kind).or_default() += by;
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
    let mut fuzzer = Fuzzer::start(config.seed).await;
    while (fuzzer.n as usize) < config.messages {
        if config.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        let size = config.batch.min(config.messages - fuzzer.n as usize) as u64;
        let sent = fuzzer.send_batch(size, &mut report).await;
        check::check_batch(&fuzzer, &sent, &mut report).await;
        report.batches += 1;
        if config.progress {
            eprintln!(
                "{}/{} messages, unaccounted {}, crashes {}, hangs {}, bound breaches {}, {} problems, RSS {} MiB ({:.0?})",
                fuzzer.n,
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
    let nats = crate::soak::nats_server_pid(fuzzer.lab.url());
    report.nats_peak_rss_kib = crate::soak::peak_rss_kib(nats);
    report.elapsed = started.elapsed();
    drop(fuzzer);
    report
}

/// A fuzz session: the harness, the service under fuzz, the fuzzer's connections, and what it
/// has sent so far. The service stops first when it is dropped.
struct Fuzzer {
    running: RunningService,
    control: ControlClient,
    js: async_nats::jetstream::Context,
    client: async_nats::Client,
    lab: Harness,
    /// The fuzz flow's deployed version.
    version: i64,
    rng: StdRng,
    /// Messages generated so far.
    n: u64,
    /// Runs started through the control API so far: a timer on the fuzzer's clock may keep
    /// them waiting for good, and the runs bound allows for them.
    control_runs: usize,
    /// The idempotency key of every inbound delivery so far.
    keys_seen: HashSet<String>,
}

/// What one batch sent, for its check.
#[derive(Default)]
struct Sent {
    /// The emulator's last record before the batch.
    since: u64,
    /// Records the emulator had dropped off its ring before the batch.
    dropped_before: u64,
    /// Messages the emulator or the service took (a publish sent, a delivery stored).
    published: Vec<Message>,
    /// The run of each stored inbound delivery that names one.
    inbound_runs: Vec<String>,
    /// Stored inbound deliveries without a run id.
    without_run: u64,
    /// Messages generated by the end of the batch.
    n: u64,
    /// Runs started through the control API by the end of the batch.
    control_runs: usize,
    /// Each inbound run's idempotency key.
    run_keys: HashMap<String, String>,
    /// Runs whose delivery carried a key an earlier one had.
    reused_key: HashSet<String>,
}

impl Fuzzer {
    /// The harness with the fuzz service running and both flows deployed.
    async fn start(seed: u64) -> Self {
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
        Fuzzer {
            running,
            control,
            js,
            client,
            lab,
            version,
            rng: StdRng::seed_from_u64(seed),
            n: 0,
            control_runs: 0,
            keys_seen: HashSet::new(),
        }
    }

    /// Generates and sends `size` messages, each as its target takes it.
    async fn send_batch(&mut self, size: u64, report: &mut FuzzReport) -> Sent {
        let mut sent = Sent {
            since: self.lab.summary().last_seq,
            dropped_before: self.lab.records().1,
            ..Default::default()
        };
        for _ in 0..size {
            self.n += 1;
            let m = generate(&mut self.rng, self.n, &self.lab, self.version);
            *report.sent.entry(m.target).or_default() += 1;
            let Ok(headers) = triggers_sdk::transport::to_nats(&m.headers) else {
                report.outcome("refused_by_client", 1);
                continue;
            };
            match m.how {
                Send::Request => self.request(&m, headers, report).await,
                Send::Publish => {
                    let body = m.body.clone().into();
                    let published =
                        self.client
                            .publish_with_headers(m.subject.clone(), headers, body);
                    match published.await {
                        Ok(()) => sent.published.push(m),
                        Err(e) => {
                            report.outcome("refused_by_client", 1);
                            tracing::debug!("not published: {e}");
                        }
                    }
                }
                Send::Inbound => self.inbound(m, headers, &mut sent, report).await,
            }
        }
        self.client.flush().await.ok();
        sent.n = self.n;
        sent.control_runs = self.control_runs;
        sent
    }

    /// A request: its reply is its outcome. Half the runs a control `trigger` starts are
    /// cancelled by hand, which must take.
    async fn request(&mut self, m: &Message, headers: HeaderMap, report: &mut FuzzReport) {
        let request = async_nats::Request::new()
            .payload(m.body.clone().into())
            .headers(headers)
            .timeout(Some(REPLY_WITHIN));
        let asked = Instant::now();
        match self.client.send_request(m.subject.clone(), request).await {
            Ok(reply) => {
                report.outcome("replied", 1);
                report.slowest_reply = report.slowest_reply.max(asked.elapsed());
                if m.subject.ends_with(".trigger") && reply.payload.starts_with(br#"{"ok":true"#) {
                    self.control_runs += 1;
                    if self.rng.random_bool(0.5) {
                        cancel(&self.control, &reply.payload, self.n, report).await;
                    }
                }
            }
            Err(e)
                if matches!(e.kind(), async_nats::RequestErrorKind::NoResponders)
                    && is_control_without_op(&m.subject) =>
            {
                report.outcome("no_responders", 1);
            }
            Err(e) => {
                report.hangs += 1;
                report.problems.push(format!(
                    "message {}: a request on {} got no reply within {REPLY_WITHIN:?} ({e}); body {}",
                    self.n,
                    m.subject,
                    preview(&m.body)
                ));
            }
        }
    }

    /// A delivery onto the service's inbound stream: once stored, a completion or a DLQ entry
    /// for its run is owed.
    async fn inbound(
        &mut self,
        m: Message,
        headers: HeaderMap,
        sent: &mut Sent,
        report: &mut FuzzReport,
    ) {
        let body = m.body.clone().into();
        let stored = match self
            .js
            .publish_with_headers(m.subject.clone(), headers, body)
            .await
        {
            Ok(ack) => ack.await,
            Err(e) => {
                report.outcome("refused_by_client", 1);
                tracing::debug!("not published: {e}");
                return;
            }
        };
        match stored {
            Ok(ack) if ack.duplicate => report.outcome("deduplicated_at_publish", 1),
            Ok(_) => sent.stored(m, &mut self.keys_seen),
            Err(e) => {
                report.outcome("refused_by_server", 1);
                tracing::debug!("not stored: {e}");
            }
        }
    }
}

impl Sent {
    /// A delivery the stream stored: its run (or its lack of one) is owed an outcome.
    fn stored(&mut self, m: Message, keys_seen: &mut HashSet<String>) {
        match m.headers.get(names::FLOW_RUN_ID) {
            Some(r) if !r.is_empty() => {
                let r = r.to_owned();
                // A delivery whose idempotency key an earlier one carried is, by the contract,
                // that delivery again: its completion event repeats that one's id and the
                // events stream drops it.
                let key = m
                    .headers
                    .get(names::IDEMPOTENCY_KEY)
                    .unwrap_or_default()
                    .to_owned();
                if !keys_seen.insert(key.clone()) {
                    self.reused_key.insert(r.clone());
                }
                self.run_keys.insert(r.clone(), key);
                self.inbound_runs.push(r);
            }
            _ => self.without_run += 1,
        }
        self.published.push(m);
    }
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
        Ok(Ok(_)) => report.outcome("cancelled", 1),
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
