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
use triggers_emulator::recorder::RunStatus;
use triggers_emulator::{Emulator, EmulatorConfig, Harness, TriggerOptions};
use triggers_sdk::flow::Flow;
mod hostile;
mod plan;
mod report;

use plan::{Plan, RunPlan, plan_of};
use report::DUPLICATE_OR_LOSS_RULES;
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
    // It kills and restarts the server: one of its own.
    let mut lab = crate::own_lab_with(emulator_config(&config)).await;
    let successes: Successes = Arc::default();
    let mut services: Vec<RunningService> = Vec::new();
    let mut crashable = None;
    for name in SERVICES {
        for r in 0..config.replicas.max(1) {
            if name == "k1" && r == 0 && config.replica_crash {
                crashable = Some(Crashable::start(
                    name,
                    lab.url().to_owned(),
                    successes.clone(),
                ));
                continue;
            }
            services.push(
                service(name, lab.url(), successes.clone())
                    .start()
                    .await
                    .expect("a soak service starts"),
            );
        }
    }
    lab.deploy(flow()).await.expect("the soak flow deploys");
    if let Some(ack_wait) = config.ack_wait {
        set_ack_wait(&lab, ack_wait).await;
    }
    let emulator = lab.emulator().clone();
    let hostile = if config.hostile {
        let client = triggers_sdk::transport::connect(lab.url())
            .await
            .expect("the hostile client connects");
        hostile::refused_registrations(&lab, &client, &mut report).await;
        Some(client)
    } else {
        None
    };

    let mut rng = StdRng::seed_from_u64(config.seed);
    let runs = config.runs;
    let kills: Vec<usize> = (1..=config.nats_kills)
        .map(|k| runs * k / (config.nats_kills + 1))
        .collect();
    let crash_at = config.replica_crash.then_some(runs * 3 / 5 + 1);
    let mut plans: HashMap<String, (usize, RunPlan)> = HashMap::new();
    let mut next = 0;
    while next < runs {
        if config.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        let end = (next + config.batch.max(1)).min(runs);
        let mut batch: Vec<String> = Vec::new();
        let mut i = next;
        while i < end {
            // Chaos between chunks of triggers, while the runs before are in flight.
            if kills.contains(&i) && report.nats_kills < config.nats_kills {
                kill_nats(&mut lab, &mut report).await;
            }
            if crash_at == Some(i)
                && let Some(mut c) = crashable.take()
            {
                c.crash();
                report.replica_crashes += 1;
                services.push(
                    service("k1", lab.url(), successes.clone())
                        .start()
                        .await
                        .expect("the replacement replica starts"),
                );
            }
            let chunk_end = (i + 64).min(end);
            let next_event = kills
                .iter()
                .copied()
                .chain(crash_at)
                .filter(|k| *k > i)
                .min()
                .unwrap_or(usize::MAX);
            let chunk_end = chunk_end.min(next_event.max(i + 1));
            let chunk: Vec<(String, RunPlan, usize)> = (i..chunk_end)
                .map(|n| {
                    let plan = RunPlan::generate(&mut rng, &config, &mut report.faults);
                    (format!("soak-{}-{n}", config.seed), plan, n)
                })
                .collect();
            let results: Vec<(String, Result<(), String>)> =
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
            for (id, plan, n) in chunk {
                batch.push(id.clone());
                plans.insert(id, (n, plan));
            }
            report.runs += chunk_end - i;
            i = chunk_end;
        }
        if let Some(client) = &hostile {
            hostile::fake_events(client, next, FAKE_EVENTS, &mut report).await;
        }
        check_batch(&emulator, &batch, &plans, &successes, &mut report).await;
        for id in &batch {
            plans.remove(id);
        }
        next = end;
        if config.progress {
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
    finish(&lab, &services, &successes, &mut report).await;
    report.elapsed = started.elapsed();
    drop(crashable);
    drop(services);
    report
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
async fn trigger(emulator: &Emulator, id: &str, payload: Vec<u8>) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..20 {
        match emulator
            .trigger_bytes(
                "soak",
                payload.clone(),
                TriggerOptions {
                    run_id: Some(id.to_owned()),
                    ..Default::default()
                },
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(triggers_emulator::EmulatorError::RunExists(_)) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(last)
}

async fn check_batch(
    emulator: &Emulator,
    batch: &[String],
    plans: &HashMap<String, (usize, RunPlan)>,
    successes: &Successes,
    report: &mut SoakReport,
) {
    for id in batch {
        let Some((n, plan)) = plans.get(id) else {
            continue;
        };
        let run = match emulator.wait_run_settled(id).await {
            Ok(run) => run,
            Err(e) => {
                if emulator.run(id).is_none() {
                    report.partial.push(format!(
                        "run {id} is not in the emulator (evicted before it was checked?): {e}"
                    ));
                } else {
                    report.lost += 1;
                    report.problems.push(format!(
                        "run {id} ({plan:?}) did not settle: {}",
                        emulator.describe_run(id)
                    ));
                }
                continue;
            }
        };
        let (status, executions, dlq) = plan.expect();
        // A run settles on its failed completion; its DLQ entry is read from another stream
        // and may come a moment later.
        let run = if dlq > 0 && run.dlq.is_empty() {
            let _ = emulator
                .wait_dlq(triggers_emulator::DlqFilter::run(id))
                .await;
            emulator.run(id).unwrap_or(run)
        } else {
            run
        };
        report.checked += 1;
        report.dlq_owed += dlq;
        let mut problems = Vec::new();
        if run.status != status {
            report.wrong_status += 1;
            problems.push(format!("status {:?}, planned {status:?}", run.status));
        }
        match run.status {
            RunStatus::Succeeded => report.succeeded += 1,
            RunStatus::Failed => report.failed += 1,
            _ => {}
        }
        for (node, owed) in NODES.iter().zip(executions) {
            let ran = run.executions(node);
            if ran < owed {
                report.lost += u64::from(owed - ran);
                problems.push(format!("{node} ran {ran} times, owed {owed}"));
            } else if ran > owed {
                report.duplicated += u64::from(ran - owed);
                problems.push(format!("{node} ran {ran} times, owed {owed}"));
            }
        }
        let dlq_seen = run.dlq.len() as u64;
        if dlq_seen > dlq {
            // Counted once, from the DLQ stream at the end (a late repeat is only there).
            problems.push(format!("{dlq_seen} DLQ entries, owed {dlq}"));
        } else if dlq_seen < dlq {
            report.lost += dlq - dlq_seen;
            problems.push(format!("{dlq_seen} DLQ entries, owed {dlq}"));
        }
        if !run.unexpected.is_empty() {
            report.duplicated += run.unexpected.len() as u64;
            problems.push(format!("unexpected completions {:?}", run.unexpected));
        }
        let reruns: u32 = {
            let s = successes.lock().unwrap_or_else(|e| e.into_inner());
            (0u8..3)
                .map(|k| {
                    s.get(&(*n as u64, k))
                        .copied()
                        .unwrap_or(0)
                        .saturating_sub(1)
                })
                .sum()
        };
        report.handler_reruns += u64::from(reruns);
        if !problems.is_empty() {
            report
                .problems
                .push(format!("run {id} ({plan:?}): {}", problems.join("; ")));
        }
    }
    // A run the driver did not start is a duplicate: events for a run it had already settled
    // and that was evicted, followed anew. The hostile client's made-up runs are its own.
    for run in emulator.runs() {
        if !run.id.starts_with("soak-") && !run.id.starts_with(hostile::FAKE_RUN_PREFIX) {
            report.duplicated += 1;
            report.problems.push(format!(
                "a run the driver did not start: {} ({:?})",
                run.id, run.status
            ));
        }
    }
}

/// Reads the whole DLQ stream and counts the entries that repeat another for the same delivery.
async fn dlq_repeats(
    stream: &async_nats::jetstream::stream::Stream,
    count: u64,
    report: &mut SoakReport,
) {
    use async_nats::jetstream::consumer::{DeliverPolicy, pull::OrderedConfig};
    let messages = match stream
        .create_consumer(OrderedConfig {
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
    {
        Ok(consumer) => consumer.messages().await,
        Err(e) => {
            report
                .partial
                .push(format!("cannot read the DLQ stream: {e}"));
            return;
        }
    };
    let Ok(mut messages) = messages else {
        report.partial.push("cannot read the DLQ stream".into());
        return;
    };
    let mut seen: HashMap<(String, String), u32> = HashMap::new();
    let mut read = 0;
    while read < count {
        match tokio::time::timeout(Duration::from_secs(10), messages.next()).await {
            Ok(Some(Ok(msg))) => {
                read += 1;
                let key = triggers_sdk::wire::DlqEntry::from_json(&msg.payload)
                    .map(|e| (e.envelope.idempotency_key, e.envelope.flow_run_id))
                    .unwrap_or_default();
                let n = seen.entry((msg.subject.to_string(), key.0)).or_default();
                *n += 1;
                if *n > 1 {
                    report.dlq_repeats += 1;
                    report.dlq_repeat_runs.push(key.1);
                }
            }
            _ => {
                report
                    .partial
                    .push(format!("read {read} of the DLQ stream's {count} entries"));
                return;
            }
        }
    }
    if report.dlq_repeats > 0 {
        report.duplicated += report.dlq_repeats;
        report.problems.push(format!(
            "{} DLQ entries repeat one for the same delivery (runs {:?}): a failure run again by another replica after a server kill lost the first one's ack; the DLQ Nats-Msg-Id's instant differs, so JetStream keeps both",
            report.dlq_repeats, report.dlq_repeat_runs
        ));
    }
}

/// The end of the soak: quiet time for late messages, then the DLQ stream's count, the streams'
/// completeness, the drop counters, the services' stats and the violations.
async fn finish(
    lab: &Harness,
    services: &[RunningService],
    successes: &Successes,
    report: &mut SoakReport,
) {
    // Late duplicates (a redelivery after a crash) would arrive now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let js = async_nats::jetstream::new(lab.client().clone());
    for name in [
        triggers_emulator::DLQ_STREAM,
        triggers_emulator::EVENTS_STREAM,
    ] {
        match js.get_stream(name).await {
            Ok(mut stream) => match stream.info().await.cloned() {
                Ok(info) => {
                    if info.state.first_sequence > 1 {
                        report.partial.push(format!(
                            "stream {name} discarded messages (first sequence {}): the accounting would be partial",
                            info.state.first_sequence
                        ));
                    }
                    if name == triggers_emulator::DLQ_STREAM {
                        report.dlq_stored = info.state.messages;
                        dlq_repeats(&stream, info.state.messages, report).await;
                    }
                }
                Err(e) => report.partial.push(format!("stream {name}: {e}")),
            },
            Err(e) => report.partial.push(format!("stream {name}: {e}")),
        }
    }
    let state = lab.emulator().summary();
    if state.dropped_messages > 0 {
        report.partial.push(format!(
            "the emulator's subscriptions dropped {} messages (slow consumer)",
            state.dropped_messages
        ));
    }
    for s in services {
        if s.dropped_messages() > 0 {
            report.partial.push(format!(
                "a replica of {} dropped {} messages (slow consumer)",
                s.name(),
                s.dropped_messages()
            ));
        }
        let stats = s.stats();
        report.given_up += stats.given_up;
        report.cache_evictions += stats.handled_keys_evicted + stats.outcomes_evicted;
    }
    if state.dropped_violations > 0 {
        report.partial.push(format!(
            "{} violations were counted, not kept",
            state.dropped_violations
        ));
    }
    for v in lab.violations() {
        *report.violations.entry(v.rule.to_owned()).or_default() += 1;
        if DUPLICATE_OR_LOSS_RULES.contains(&v.rule) {
            report.problems.push(format!("{}: {}", v.rule, v.message));
        }
    }
    let _ = successes;
    report.unfollowed_runs = state.unfollowed_runs;
    if report.fake_events > MAX_FOLLOWED_RUNS as u64 && report.unfollowed_runs == 0 {
        report.problems.push(format!(
            "hostile: {} fake events for made-up runs, and none went unfollowed: max_followed_runs ({MAX_FOLLOWED_RUNS}) was not reached",
            report.fake_events
        ));
    }
    report.peak_rss_kib = peak_rss_kib(None);
    report.nats_peak_rss_kib = report
        .nats_peak_rss_kib
        .max(peak_rss_kib(nats_server_pid(lab.url())));
}
