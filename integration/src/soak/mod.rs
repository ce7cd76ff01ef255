//! The chaos soak of issue 10: many runs of one flow across three services, with random action
//! failures, panics, timeouts and poison messages, while the nats-server is killed (SIGKILL) and
//! restarted and a service replica crashes; then every run is accounted for: settled exactly once
//! (its last node's completion, or one DLQ entry), none duplicated, none lost.
//!
//! The flow is `in` (service-in of `k0`) → `a` (`k0.work`) → `b` (`k1.work`) → `c` (`k2.work`):
//! two hops between services per run. Each run's payload carries its plan: for each action, what
//! its handler does on each attempt (succeed, fail retryably for the first attempts, panic, run
//! past its timeout, fail for good, fail retryably on every attempt). A poison run's payload is
//! not JSON. The plan decides the outcome, so the oracle knows for each run its status, which
//! nodes ran and how many DLQ entries it owes.
//!
//! The accounting reads the emulator's runs (tracked from the JetStream events and DLQ streams,
//! which a server restart does not lose), run by run after each batch, and the DLQ stream's count
//! at the end. Anything that would make it partial (a run evicted before it was checked, a stream
//! that discarded messages, a slow-consumer drop) is reported as such and fails the soak.
//!
//! Beside the services, a hostile client (its `hostile` module) registers what the emulator must
//! refuse and publishes completion events for made-up runs in volume, past `max_followed_runs`:
//! neither may cost the soak a run.
//!
//! The replica that crashes runs on a Tokio runtime of its own; the crash is that runtime shut
//! down at once: its tasks (the handlers, the pulls, the NATS connection) stop where they are,
//! nothing is acked or reported, as when a process dies. JetStream redelivers its messages to the
//! other replica after the consumer's ack wait.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use triggers_emulator::{Emulator, EmulatorConfig, EmulatorError, Harness, TriggerOptions};
use triggers_sdk::flow::Flow;
mod check;
mod hostile;
mod plan;
mod report;

use check::{check_batch, finish};
use plan::{Plan, RunPlan, plan_of};
pub use report::{Faults, SoakReport};

use triggers_sdk::runtime::{
    ActionContext, ActionDef, ActionError, Retry, RunningService, RuntimeConfig, Service,
};

/// The services of the soak, in flow order.
pub const SERVICES: [&str; 3] = ["k0", "k1", "k2"];
/// The action nodes, one per service, in flow order.
pub(super) const NODES: [&str; 3] = ["a", "b", "c"];
/// Attempts each action gets.
pub(super) const MAX_ATTEMPTS: u32 = 3;
/// Each attempt's timeout: an attempt planned to time out sleeps past it.
const ACTION_TIMEOUT: Duration = Duration::from_millis(300);

/// How a soak runs. `..Default::default()` fills the rest.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// Runs in all (default 1 000).
    pub runs: usize,
    /// The seed of every random choice (default 1).
    pub seed: u64,
    /// Runs triggered before the driver waits for them to settle and checks them (default 2 000).
    pub batch: usize,
    /// Replicas per service (default 2).
    pub replicas: usize,
    /// nats-server kills (SIGKILL, then a restart on the same store), spread over the runs
    /// (default 3).
    pub nats_kills: usize,
    /// Whether one replica of `k1` crashes halfway (default true). A replacement starts after.
    pub replica_crash: bool,
    /// The chance that an action has a fault planned (default 0.05); a tenth of the faults are
    /// final (the run fails), the rest recover within the retries.
    pub fault_rate: f64,
    /// The chance that a run is a poison message (default 0.002).
    pub poison_rate: f64,
    /// Stop triggering new runs after this long (default none); the report says how many ran.
    pub duration: Option<Duration>,
    /// Print a line per batch on stderr (default false).
    pub progress: bool,
    /// Set the services' consumers' ack wait to this once they run (default none: the SDK's,
    /// 30 s). Keep it well above the SDK's progress acks (a third of it) plus a server restart:
    /// at 15 s a message whose outcome was still being reported across a kill was redelivered
    /// to the other replica, which dead-lettered it again.
    pub ack_wait: Option<Duration>,
    /// Whether a hostile client works beside the services (default true): registrations the
    /// emulator must refuse before the runs, and [`FAKE_EVENTS`] completion events for made-up
    /// runs with each batch, past the emulator's `max_followed_runs` ([`MAX_FOLLOWED_RUNS`]).
    pub hostile: bool,
}

/// Completion events for made-up runs the hostile client publishes with each batch.
pub const FAKE_EVENTS: usize = 1_500;
/// The emulator's `max_followed_runs` in the soak: below [`FAKE_EVENTS`], so that the bound is
/// reached with the first batch.
pub const MAX_FOLLOWED_RUNS: usize = 1_000;

impl Default for SoakConfig {
    fn default() -> Self {
        SoakConfig {
            runs: 1_000,
            seed: 1,
            batch: 2_000,
            replicas: 2,
            nats_kills: 3,
            replica_crash: true,
            fault_rate: 0.05,
            poison_rate: 0.002,
            duration: None,
            progress: false,
            ack_wait: None,
            hostile: true,
        }
    }
}

/// Successes per (run number, node index), counted by the handlers of every replica.
type Successes = Arc<Mutex<HashMap<(u64, u8), u32>>>;

/// A soak service: one action `work` that follows the run's plan for its node.
fn service(name: &'static str, url: &str, successes: Successes) -> Service {
    let node = NODES[SERVICES.iter().position(|s| *s == name).unwrap_or(0)];
    Service::builder(name, "1.0.0")
        .action(
            ActionDef::dynamic(
                "work",
                &json!({"type": "object"}),
                &json!({"type": "object"}),
                move |input: Value, ctx: ActionContext| {
                    let successes = successes.clone();
                    async move {
                        let attempt = ctx.attempt;
                        match plan_of(&input, node) {
                            Plan::Flaky(n) if attempt <= n => {
                                return Err(ActionError::retryable(format!("flaky {attempt}")));
                            }
                            Plan::Panic(n) if attempt <= n => {
                                panic!("planned panic on attempt {attempt}")
                            }
                            Plan::Timeout(n) if attempt <= n => {
                                tokio::time::sleep(ACTION_TIMEOUT * 3).await;
                            }
                            Plan::Permanent => {
                                return Err(ActionError::permanent("planned permanent failure"));
                            }
                            Plan::Exhaust => {
                                return Err(ActionError::retryable("planned failure, every time"));
                            }
                            Plan::AlwaysPanic => panic!("planned panic, every time"),
                            _ => {}
                        }
                        let n = input["n"].as_u64().unwrap_or(u64::MAX);
                        let index =
                            u8::try_from(NODES.iter().position(|x| *x == node).unwrap_or(0))
                                .unwrap_or(0);
                        *successes
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .entry((n, index))
                            .or_default() += 1;
                        Ok::<_, ActionError>(input)
                    }
                },
            )
            .timeout(ACTION_TIMEOUT)
            .retry(Retry {
                max_attempts: i64::from(MAX_ATTEMPTS),
                initial_backoff_ms: 5,
                backoff_factor: 2.0,
                max_backoff_ms: 20,
            }),
        )
        .nats_source("nats", format!("{name}.inbound"))
        .config(RuntimeConfig {
            nats_url: Some(url.to_owned()),
            heartbeat_interval: Some(Duration::from_millis(1000)),
            shutdown_grace: Some(Duration::from_secs(5)),
            flow_wait: Some(Duration::from_secs(5)),
            max_concurrency: Some(64),
            ..Default::default()
        })
        .build()
        .expect("a valid soak service")
}

/// The soak's flow.
fn flow() -> Flow {
    serde_json::from_value(json!({"id": "soak", "nodes": [
        {"id": "in", "type": "service-in", "service": "k0"},
        {"id": "a", "type": "action", "service": "k0", "action": "work"},
        {"id": "b", "type": "action", "service": "k1", "action": "work"},
        {"id": "c", "type": "action", "service": "k2", "action": "work"}
    ], "edges": [
        {"id": "e1", "from": "in", "to": "a"},
        {"id": "e2", "from": "a", "to": "b"},
        {"id": "e3", "from": "b", "to": "c"}
    ]}))
    .expect("the soak flow")
}

/// A replica on a Tokio runtime of its own, so that it can crash: [`Crashable::crash`] shuts
/// that runtime down at once.
struct Crashable {
    crash: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Crashable {
    fn start(name: &'static str, url: String, successes: Successes) -> Self {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (crash_tx, crash_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a runtime for the crashable replica");
            let running = rt.block_on(service(name, &url, successes).start());
            let ok = running.is_ok();
            let _ = ready_tx.send(running.as_ref().err().map(ToString::to_string));
            if ok {
                let _ = crash_rx.recv();
            }
            // The crash: every task stops where it is; nothing is acked, reported or drained.
            rt.shutdown_background();
            drop(running);
        });
        match ready_rx.recv() {
            Ok(None) => {}
            Ok(Some(e)) => panic!("the crashable replica of {name} did not start: {e}"),
            Err(_) => panic!("the crashable replica of {name} did not start"),
        }
        Crashable {
            crash: Some(crash_tx),
            thread: Some(thread),
        }
    }

    fn crash(&mut self) {
        if let Some(tx) = self.crash.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Crashable {
    fn drop(&mut self) {
        self.crash();
    }
}

/// The pid of the nats-server listening on `url`'s port, from `/proc` (Linux).
#[must_use]
pub fn nats_server_pid(url: &str) -> Option<i32> {
    let port = url.rsplit(':').next()?.trim_end_matches('/').to_owned();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_server = args.first().is_some_and(|a| a.ends_with(b"nats-server"));
        let on_port = args
            .windows(2)
            .any(|w| w[0] == b"-p" && w[1] == port.as_bytes());
        if is_server && on_port {
            return Some(pid);
        }
    }
    None
}

/// `VmHWM` (peak resident set) of a process, KiB.
#[must_use]
pub fn peak_rss_kib(pid: Option<i32>) -> u64 {
    let path = match pid {
        Some(p) => format!("/proc/{p}/status"),
        None => "/proc/self/status".to_owned(),
    };
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// SIGKILLs the nats-server, then restarts it on the same store; waits until the emulator's
/// connection is back.
async fn kill_nats(lab: &mut Harness, report: &mut SoakReport) {
    let pid = nats_server_pid(lab.url());
    report.nats_peak_rss_kib = report.nats_peak_rss_kib.max(peak_rss_kib(pid));
    match pid.and_then(rustix::process::Pid::from_raw) {
        Some(pid) => {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        None => report
            .problems
            .push("no nats-server pid found: restarted gracefully instead of killed".into()),
    }
    // Let the services notice (publishes fail, pulls break) before it comes back.
    tokio::time::sleep(Duration::from_millis(500)).await;
    if let Some(Err(e)) = match lab.nats_mut() {
        Some(server) => Some(server.restart().await),
        None => None,
    } {
        report
            .problems
            .push(format!("the nats-server did not come back: {e}"));
        return;
    }
    report.nats_kills += 1;
    let deadline = Instant::now() + Duration::from_secs(30);
    while lab.client().connection_state() != async_nats::connection::State::Connected
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The emulator settings of the soak: room for a few batches of runs, long waits (a restart and
/// a crashed replica's ack wait).
#[must_use]
pub fn emulator_config(config: &SoakConfig) -> EmulatorConfig {
    EmulatorConfig {
        wait_timeout: Duration::from_secs(180),
        max_runs: config.batch.max(1) * 4,
        max_followed_runs: MAX_FOLLOWED_RUNS,
        ..Default::default()
    }
}

/// Runs the soak on a harness of its own and reports.
///
/// # Panics
/// When the harness or a service cannot start (nothing to soak).
pub async fn run(config: SoakConfig) -> SoakReport {
    quiet_planned_panics();
    let started = Instant::now();
    let mut report = SoakReport {
        seed: config.seed,
        ..Default::default()
    };
    let mut soak = Soak::start(config, &mut report).await;
    let runs = soak.config.runs;
    let mut plans: HashMap<String, (usize, RunPlan)> = HashMap::new();
    let mut next = 0;
    while next < runs {
        if soak.config.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        let end = (next + soak.config.batch.max(1)).min(runs);
        let batch = soak.trigger_batch(next..end, &mut plans, &mut report).await;
        if let Some(client) = &soak.hostile {
            hostile::fake_events(client, next, FAKE_EVENTS, &mut report).await;
        }
        check_batch(&soak.emulator, &batch, &plans, &soak.successes, &mut report).await;
        for id in &batch {
            plans.remove(id);
        }
        next = end;
        if soak.config.progress {
            eprintln!(
                "{}/{} runs, {} checked, lost {}, duplicated {}, wrong status {}, {} problems, {} kills, {} crashes, RSS {} MiB ({:.0?})",
                report.runs,
                runs,
                report.checked,
                report.lost,
                report.duplicated,
                report.wrong_status,
                report.problems.len(),
                report.nats_kills,
                report.replica_crashes,
                peak_rss_kib(None) / 1024,
                started.elapsed()
            );
        }
    }
    finish(&soak.lab, &soak.services, &soak.successes, &mut report).await;
    report.elapsed = started.elapsed();
    drop(soak);
    report
}

/// A soak under way: the harness, the services and their replicas, the hostile client, and
/// when the chaos comes. The crashable replica stops first, then the services, then the rest.
struct Soak {
    crashable: Option<Crashable>,
    services: Vec<RunningService>,
    hostile: Option<async_nats::Client>,
    emulator: Emulator,
    successes: Successes,
    lab: Harness,
    config: SoakConfig,
    rng: StdRng,
    /// The run numbers before which the nats-server is killed.
    kills: Vec<usize>,
    /// The run number before which the crashable replica crashes.
    crash_at: Option<usize>,
}

impl Soak {
    /// Its own harness (it kills and restarts the server), the services, the flow deployed, and
    /// the hostile client's registrations refused.
    async fn start(config: SoakConfig, report: &mut SoakReport) -> Self {
        let lab = crate::own_lab_with(emulator_config(&config)).await;
        let successes: Successes = Arc::default();
        let mut services: Vec<RunningService> = Vec::new();
        let mut crashable = None;
        for name in SERVICES {
            for r in 0..config.replicas.max(1) {
                if name == "k1" && r == 0 && config.replica_crash {
                    let url = lab.url().to_owned();
                    crashable = Some(Crashable::start(name, url, successes.clone()));
                    continue;
                }
                let running = service(name, lab.url(), successes.clone()).start().await;
                services.push(running.expect("a soak service starts"));
            }
        }
        lab.deploy(flow()).await.expect("the soak flow deploys");
        if let Some(ack_wait) = config.ack_wait {
            set_ack_wait(&lab, ack_wait).await;
        }
        let hostile = if config.hostile {
            let client = triggers_sdk::transport::connect(lab.url())
                .await
                .expect("the hostile client connects");
            hostile::refused_registrations(&lab, &client, report).await;
            Some(client)
        } else {
            None
        };
        let runs = config.runs;
        Soak {
            crashable,
            services,
            hostile,
            emulator: lab.emulator().clone(),
            successes,
            lab,
            rng: StdRng::seed_from_u64(config.seed),
            kills: (1..=config.nats_kills)
                .map(|k| runs * k / (config.nats_kills + 1))
                .collect(),
            crash_at: config.replica_crash.then_some(runs * 3 / 5 + 1),
            config,
        }
    }

    /// Plans and triggers the runs numbered `runs`, in chunks, with the chaos between chunks
    /// while the runs before are in flight; returns their ids.
    async fn trigger_batch(
        &mut self,
        runs: std::ops::Range<usize>,
        plans: &mut HashMap<String, (usize, RunPlan)>,
        report: &mut SoakReport,
    ) -> Vec<String> {
        let mut batch: Vec<String> = Vec::new();
        let mut i = runs.start;
        while i < runs.end {
            self.chaos(i, report).await;
            let next_event = (self.kills.iter().copied())
                .chain(self.crash_at)
                .filter(|k| *k > i)
                .min()
                .unwrap_or(usize::MAX);
            let chunk_end = (i + 64).min(runs.end).min(next_event.max(i + 1));
            let chunk: Vec<(String, RunPlan, usize)> = (i..chunk_end)
                .map(|n| {
                    let plan = RunPlan::generate(&mut self.rng, &self.config, &mut report.faults);
                    (format!("soak-{}-{n}", self.config.seed), plan, n)
                })
                .collect();
            trigger_chunk(&self.emulator, &chunk, report).await;
            for (id, plan, n) in chunk {
                batch.push(id.clone());
                plans.insert(id, (n, plan));
            }
            report.runs += chunk_end - i;
            i = chunk_end;
        }
        batch
    }

    /// The chaos due before run `i`: a nats-server kill, or the replica's crash (and its
    /// replacement).
    async fn chaos(&mut self, i: usize, report: &mut SoakReport) {
        if self.kills.contains(&i) && report.nats_kills < self.config.nats_kills {
            kill_nats(&mut self.lab, report).await;
        }
        if self.crash_at == Some(i)
            && let Some(mut c) = self.crashable.take()
        {
            c.crash();
            report.replica_crashes += 1;
            let replacement = service("k1", self.lab.url(), self.successes.clone())
                .start()
                .await;
            self.services
                .push(replacement.expect("the replacement replica starts"));
        }
    }
}

/// Triggers a chunk of runs, 32 at a time; a run that could not be triggered is a problem.
async fn trigger_chunk(
    emulator: &Emulator,
    chunk: &[(String, RunPlan, usize)],
    report: &mut SoakReport,
) {
    let results: Vec<(String, Result<(), EmulatorError>)> =
        futures::stream::iter(chunk.iter().map(|(id, plan, n)| {
            let emulator = emulator.clone();
            let id = id.clone();
            let payload = plan.payload(*n);
            async move {
                let r = trigger(&emulator, &id, payload).await;
                (id, r)
            }
        }))
        .buffer_unordered(32)
        .collect()
        .await;
    for (id, r) in results {
        if let Err(e) = r {
            report
                .problems
                .push(format!("run {id}: not triggered: {e}"));
        }
    }
}

/// Shortens the ack wait of every soak consumer (the server applies it to the messages
/// delivered from then on).
async fn set_ack_wait(lab: &Harness, ack_wait: Duration) {
    use async_nats::jetstream::consumer::pull;
    let js = async_nats::jetstream::new(lab.client().clone());
    for name in SERVICES {
        let subject = format!("{name}.inbound");
        let stream_name = js
            .stream_by_subject(subject.clone())
            .await
            .expect("the inbound stream");
        let stream = js
            .get_stream(&stream_name)
            .await
            .expect("the inbound stream");
        let consumer =
            triggers_sdk::wire::subject::consumer_name(name, &subject).expect("a consumer name");
        let mut info = stream
            .consumer_info(&consumer)
            .await
            .expect("the consumer")
            .config
            .clone();
        info.ack_wait = ack_wait;
        let config = pull::Config {
            durable_name: info.durable_name,
            filter_subject: info.filter_subject,
            ack_policy: info.ack_policy,
            ack_wait,
            max_deliver: info.max_deliver,
            max_ack_pending: info.max_ack_pending,
            ..Default::default()
        };
        stream
            .update_consumer(config)
            .await
            .expect("the ack wait is updated");
    }
}

/// The handlers' planned panics are caught by the SDK and are no news: keep them off stderr,
/// where any other panic still goes.
fn quiet_planned_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let planned = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .is_some_and(|m| m.starts_with("planned panic"));
            if !planned {
                previous(info);
            }
        }));
    });
}

/// Triggers one run with its own id, retrying a publish that failed (the server coming back).
async fn trigger(emulator: &Emulator, id: &str, payload: Vec<u8>) -> Result<(), EmulatorError> {
    let mut attempts = 1;
    loop {
        let options = TriggerOptions {
            run_id: Some(id.to_owned()),
            ..Default::default()
        };
        match emulator
            .trigger_bytes("soak", payload.clone(), options)
            .await
        {
            Ok(_) | Err(EmulatorError::RunExists(_)) => return Ok(()),
            Err(e) if attempts == 20 => return Err(e),
            Err(_) => attempts += 1,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
