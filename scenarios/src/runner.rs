//! Running one scenario: a nats-server and an emulator of its own, its HTTP stubs and services,
//! then its steps in order, each within its time limit, then the conformance check; services are
//! stopped and the server removed whatever happened.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::time::Instant;
use triggers_emulator::conformance::{Severity, Violation};
use triggers_emulator::recorder::Record;
use triggers_emulator::{
    Deployment, Emulator, EmulatorConfig, Harness, NatsConfig, WaitError, describe_violations,
};

use crate::describe::{self, RunNames};
use crate::external::{External, Output};
use crate::interrupt::Interrupt;
use crate::load::Scenario;
use crate::model::{Conformance, Readiness, StubSpec};
use crate::report::{Failure, FailureKind, Outcome, ScenarioReport, ServiceOutput, StepReport};
use crate::scripted::Scripted;
use crate::steps::StepFailure;
use crate::vars;

/// Called with the emulator of each scenario as it starts (for `--tui`); the scenario's
/// teardown waits for the future it returns.
pub type WatchFn = Arc<dyn Fn(Emulator) -> BoxFuture<'static, ()> + Send + Sync>;
/// Called with progress as scenarios run.
pub type EventFn = Arc<dyn Fn(Event) + Send + Sync>;

/// How to run scenarios.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// How each scenario gets its nats-server (default: as [`triggers_emulator::NatsServer`]
    /// chooses): by default an account of its own on the process's shared server
    /// ([`natsbox::SharedAccount`]), a server of its own when it restarts,
    /// stops or kills the server, runs a cluster, or `isolation` says `Server`.
    pub nats: NatsConfig,
    /// Overrides every scenario's `timeout`.
    pub timeout: Option<Duration>,
    /// Progress.
    pub on_event: Option<EventFn>,
    /// Watch each scenario's emulator (the terminal UI).
    pub watch: Option<WatchFn>,
    /// Stops the run early when requested (default: a request nobody makes).
    pub interrupt: Interrupt,
    /// Values for `${vars.<name>}` (`triggers-lab run --var name=value`).
    pub vars: BTreeMap<String, String>,
    /// Where each scenario adds the flow coverage its emulator observed, just before its
    /// nats-server stops (`triggers-lab run --coverage`); none: not collected.
    pub coverage: Option<crate::coverage::CoverageCollector>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("nats", &self.nats)
            .field("timeout", &self.timeout)
            .field("interrupt", &self.interrupt.reason())
            .field("vars", &self.vars)
            .finish_non_exhaustive()
    }
}

/// Progress of a run.
#[derive(Debug, Clone)]
pub enum Event {
    /// A scenario is starting (its server and services next).
    ScenarioStarted {
        /// Its position in the run (0-based).
        index: usize,
        /// Scenarios in the run.
        total: usize,
        /// Its name.
        name: String,
        /// What it checks.
        description: String,
    },
    /// A step is starting.
    StepStarted {
        /// The scenario's position.
        index: usize,
        /// The scenario's name.
        name: String,
        /// The step, 1-based.
        step: usize,
        /// Steps in the scenario.
        steps: usize,
        /// The step's label.
        label: String,
    },
    /// A step ended.
    StepFinished {
        /// The scenario's position.
        index: usize,
        /// The scenario's name.
        name: String,
        /// Steps in the scenario.
        steps: usize,
        /// The step's result.
        step: StepReport,
    },
    /// A scenario ended.
    ScenarioFinished {
        /// Its position.
        index: usize,
        /// Scenarios in the run.
        total: usize,
        /// Its result.
        report: Box<ScenarioReport>,
    },
}

/// How long to watch for more after an exact count was reached, by default.
pub(crate) const DEFAULT_SETTLE: Duration = Duration::from_millis(250);
/// How long past the scenario's deadline a step that does not wait by itself may take.
const BACKSTOP_GRACE: Duration = Duration::from_millis(250);

/// How long an idle run may sit before a mismatch is final.
pub(crate) const IDLE_GRACE: Duration = Duration::from_millis(300);

/// Waits for the emulator to record something, or a short tick, until a deadline.
pub(crate) struct Waiter {
    records: tokio::sync::broadcast::Receiver<Record>,
    started: Instant,
    deadline: Instant,
    /// The scenario's time limit, when the deadline is the scenario's rather than the step's.
    scenario_bound: Option<Duration>,
}

impl Waiter {
    /// `false` once the deadline has passed.
    pub(crate) async fn next(&mut self) -> bool {
        if Instant::now() >= self.deadline {
            return false;
        }
        let tick = Instant::now() + Duration::from_millis(50);
        tokio::select! {
            _ = self.records.recv() => {}
            () = tokio::time::sleep_until(tick.min(self.deadline)) => {}
        }
        true
    }

    /// The timeout failure: what it waited for, and what it saw.
    pub(crate) fn timeout(&self, waiting_for: String, saw: String) -> StepFailure {
        StepFailure::timeout(self.timeout_message(waiting_for, saw))
    }

    /// The timeout message: what it waited for, and what it saw.
    fn timeout_message(&self, waiting_for: String, saw: String) -> String {
        let text = WaitError::Timeout {
            waited: round(self.started.elapsed()),
            waiting_for,
            saw,
        }
        .to_string();
        match self.scenario_bound {
            Some(limit) => format!(
                "{text}\n(the scenario's timeout, {}, ran out)",
                crate::model::Dur(limit)
            ),
            None => text,
        }
    }
}

fn round(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis() / 10 * 10).unwrap_or(u64::MAX))
}

/// `from + d`, or 100 years on for a `d` too long for the clock (a `RunOptions::timeout` set in
/// code; files and flags cannot give one).
pub(crate) fn after(from: Instant, d: Duration) -> Instant {
    from.checked_add(d)
        .unwrap_or_else(|| from + triggers_sdk::runtime::MAX_DURATION)
}

/// A scenario while it runs.
pub(crate) struct Lab<'a> {
    pub(crate) scenario: &'a Scenario,
    pub(crate) harness: Harness,
    pub(crate) hand: async_nats::Client,
    /// What NATS dropped for `hand`'s slow subscriptions.
    pub(crate) hand_drops: triggers_sdk::transport::DropCounter,
    pub(crate) stubs: BTreeMap<String, (StubSpec, wiremock::MockServer)>,
    pub(crate) scripted: BTreeMap<String, Scripted>,
    pub(crate) external: BTreeMap<String, External>,
    pub(crate) outputs: Vec<(String, Output)>,
    /// Run name -> run id.
    pub(crate) runs: BTreeMap<String, String>,
    pub(crate) deployed: BTreeMap<String, Deployment>,
    /// Rules an `expect_violation` step expected, each on its subject where the step named one:
    /// the conformance check leaves them out.
    pub(crate) expected_rules: BTreeSet<(String, Option<String>)>,
    pub(crate) deadline: Instant,
    /// The scenario's time limit in force: `RunOptions::timeout`, else the file's.
    pub(crate) timeout: Duration,
    /// `RunOptions::vars`.
    pub(crate) vars: BTreeMap<String, String>,
    /// Service -> the cluster node a `stop_nats_node`/`kill_nats_node {leader_of: service}`
    /// took down: the node `restart_nats_node {leader_of: service}` brings back.
    pub(crate) downed_leaders: BTreeMap<String, usize>,
}

impl Lab<'_> {
    pub(crate) fn em(&self) -> &Emulator {
        self.harness.emulator()
    }

    /// A waiter for one step: its `timeout` (or the scenario's `step_timeout`), cut at the
    /// scenario's deadline.
    pub(crate) fn waiter(&self, step_timeout: Option<crate::model::Dur>) -> Waiter {
        let now = Instant::now();
        let own = after(
            now,
            step_timeout.map_or(self.scenario.step_timeout, |d| d.0),
        );
        Waiter {
            records: self.em().subscribe_records(),
            started: now,
            deadline: own.min(self.deadline),
            scenario_bound: (self.deadline < own).then_some(self.timeout),
        }
    }

    pub(crate) fn run_names(&self) -> RunNames {
        self.runs
            .iter()
            .map(|(name, id)| (id.clone(), name.clone()))
            .collect()
    }

    /// The run id of a run name.
    pub(crate) fn run_id(&self, name: &str) -> Result<String, StepFailure> {
        self.runs.get(name).cloned().ok_or_else(|| {
            StepFailure::invalid(format!(
                "no run named {name:?} has started (did its trigger step run?)"
            ))
        })
    }

    fn lookup(&self, name: &str) -> Option<String> {
        if let Some(var) = name.strip_prefix("vars.") {
            return self.vars.get(var).cloned();
        }
        if name == "nats.url" {
            return Some(self.harness.url().to_owned());
        }
        if let Some(run) = name.strip_prefix("runs.") {
            return self.runs.get(run).cloned();
        }
        let stub = name.strip_prefix("stubs.")?.strip_suffix(".url")?;
        self.stubs
            .get(stub)
            .map(|(spec, server)| format!("{}{}", server.uri(), spec.path))
    }

    /// `${...}` replaced in a JSON value.
    pub(crate) fn subst(&self, value: &Value) -> Result<Value, StepFailure> {
        vars::substitute(value, &|n| self.lookup(n)).map_err(StepFailure::invalid)
    }

    /// `${...}` replaced in text.
    pub(crate) fn subst_str(&self, text: &str) -> Result<String, StepFailure> {
        vars::substitute_str(text, &|n| self.lookup(n)).map_err(StepFailure::invalid)
    }

    pub(crate) fn account_run(&self, id: &str) -> String {
        describe::run(self.em(), id, &self.run_names())
    }
}

/// Runs one scenario; never fails: a failure is in the report.
pub async fn run_scenario(
    scenario: &Scenario,
    options: &RunOptions,
    index: usize,
    total: usize,
) -> ScenarioReport {
    let emitter = Emitter(options.on_event.clone());
    emitter.emit(Event::ScenarioStarted {
        index,
        total,
        name: scenario.name.clone(),
        description: scenario.description.clone(),
    });
    let started = Instant::now();
    let mut report = ScenarioReport {
        name: scenario.name.clone(),
        file: scenario.file.clone(),
        description: scenario.description.clone(),
        outcome: Outcome::Passed,
        duration: Duration::ZERO,
        nats: String::new(),
        steps: Vec::new(),
        failure: None,
        dropped_messages: 0,
        services: Vec::new(),
        failed_attempts: Vec::new(),
    };
    match setup(scenario, options).await {
        Err(e) => not_started(&mut report, scenario, e),
        Ok(lab) => run_lab(lab, &mut report, options, index, &emitter).await,
    }
    report.duration = started.elapsed();
    emitter.emit(Event::ScenarioFinished {
        index,
        total,
        report: Box::new(report.clone()),
    });
    report
}

/// The report of a scenario whose setup failed or was interrupted: its steps were not run.
fn not_started(report: &mut ScenarioReport, scenario: &Scenario, e: SetupError) {
    let (kind, what, steps) = match e.interrupted {
        Some(_) => (FailureKind::Interrupted, "interrupted", Outcome::NotRun),
        None => (FailureKind::Setup, "setup", Outcome::Skipped),
    };
    report.outcome = kind.outcome();
    report.failure = Some(Failure {
        kind,
        step: None,
        at: scenario.file.clone(),
        what: what.into(),
        message: e.message,
    });
    report.services = e.outputs;
    for (i, s) in scenario.steps.iter().enumerate() {
        report.steps.push(StepReport {
            index: i + 1,
            line: s.line,
            label: describe::label(&s.step),
            outcome: steps,
            duration: Duration::ZERO,
            detail: String::new(),
        });
    }
}

/// A started scenario: its steps, the conformance check, what NATS dropped, the teardown; the
/// first failure is the scenario's.
async fn run_lab(
    mut lab: Lab<'_>,
    report: &mut ScenarioReport,
    options: &RunOptions,
    index: usize,
    emitter: &Emitter,
) {
    let scenario = lab.scenario;
    report.nats = lab.harness.nats_summary();
    let watching = options
        .watch
        .as_ref()
        .map(|w| tokio::spawn(w(lab.em().clone())));
    lab.timeout = options.timeout.unwrap_or(scenario.timeout);
    lab.deadline = after(Instant::now(), lab.timeout);
    run_steps(&mut lab, report, index, emitter, &options.interrupt).await;
    let interrupted = report.outcome == Outcome::Interrupted;
    if report.failure.is_none()
        && !interrupted
        && let Some(message) = conformance(&lab)
    {
        report.failure = Some(Failure {
            kind: FailureKind::Conformance,
            step: None,
            at: scenario.file.clone(),
            what: format!("conformance: {}", scenario.conformance),
            message,
        });
    }
    if let Some(w) = watching {
        // An interrupted run does not wait for the viewer to be quit.
        if interrupted {
            w.abort();
        }
        let _ = w.await;
    }
    report_drops(&lab, report);
    if let Some(message) = teardown(&mut lab).await
        && report.failure.is_none()
    {
        report.failure = Some(Failure {
            kind: FailureKind::Teardown,
            step: None,
            at: scenario.file.clone(),
            what: "teardown".into(),
            message,
        });
    }
    report.services = service_outputs(&lab.outputs);
    if let Some(failure) = &report.failure
        && !interrupted
    {
        report.outcome = failure.kind.outcome();
    }
    if let Some(coverage) = &options.coverage {
        coverage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .observe_emulator(lab.em());
    }
    // Gracefully, so a Docker container is stopped and removed, a binary's store deleted,
    // before the next scenario (or the exit) comes.
    let Lab { harness, .. } = lab;
    if let Err(e) = harness.stop().await {
        tracing::warn!(%e, "the scenario's nats-server did not stop cleanly");
    }
}

/// What NATS dropped, and connections the emulator lost though no step took a server down: the
/// scenario's failure when it has none, else a note on the one it has (it may come from them).
fn report_drops(lab: &Lab<'_>, report: &mut ScenarioReport) {
    let (dropped, mut account) = drops(lab);
    report.dropped_messages = dropped;
    let losses = lab.em().connection_losses();
    let unplanned_losses = losses > 0 && !disturbs_the_server(lab.scenario);
    if unplanned_losses {
        let lost = format!(
            "the emulator's connection to NATS was lost {losses} time(s) though no step \
             restarted or stopped a server (the server cuts off a client that falls more \
             than its max_pending behind: a flood): what was published on plain subjects \
             meanwhile was not seen, and a verdict reached on partial data is not a verdict"
        );
        account = if account.is_empty() {
            lost
        } else {
            format!("{account}; {lost}")
        };
    }
    if dropped == 0 && !unplanned_losses {
        return;
    }
    match &mut report.failure {
        None => {
            report.failure = Some(Failure {
                kind: FailureKind::Dropped,
                step: None,
                at: lab.scenario.file.clone(),
                what: "dropped messages".into(),
                message: account,
            });
        }
        Some(failure) => {
            failure.message.push_str(&format!(
                "\n(and: {account}; this failure may come from them)"
            ));
        }
    }
}

/// Why a scenario could not start: a failure, or an interruption while it started.
struct SetupError {
    message: String,
    outputs: Vec<ServiceOutput>,
    /// Why the run was stopped, when it was.
    interrupted: Option<String>,
}

fn plain(message: String) -> SetupError {
    SetupError {
        message,
        outputs: Vec::new(),
        interrupted: None,
    }
}

/// The report of a scenario the run never got to.
pub(crate) fn not_run(scenario: &Scenario) -> ScenarioReport {
    ScenarioReport {
        name: scenario.name.clone(),
        file: scenario.file.clone(),
        description: scenario.description.clone(),
        outcome: Outcome::NotRun,
        duration: Duration::ZERO,
        nats: String::new(),
        steps: scenario
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| StepReport {
                index: i + 1,
                line: s.line,
                label: describe::label(&s.step),
                outcome: Outcome::NotRun,
                duration: Duration::ZERO,
                detail: String::new(),
            })
            .collect(),
        failure: None,
        services: Vec::new(),
        dropped_messages: 0,
        failed_attempts: Vec::new(),
    }
}

/// The message of an interruption.
fn interrupted_message(reason: &str, during: &str) -> String {
    format!("interrupted by {reason} during {during}; its services and nats-server were stopped")
}

/// Sends progress to the caller's [`EventFn`], if any.
struct Emitter(Option<EventFn>);

impl Emitter {
    fn emit(&self, e: Event) {
        if let Some(f) = &self.0 {
            f(e);
        }
    }
}

async fn setup<'a>(scenario: &'a Scenario, options: &RunOptions) -> Result<Lab<'a>, SetupError> {
    let defaults = EmulatorConfig::default();
    let bound = |given: Option<NonZeroUsize>, default| given.map_or(default, NonZeroUsize::get);
    let config = EmulatorConfig {
        hash_mismatch: scenario.emulator.hash_mismatch,
        clock: scenario.emulator.clock,
        auto_advance: scenario.emulator.auto_advance,
        wait_timeout: scenario.step_timeout,
        heartbeat_interval: Duration::from_millis(500),
        max_runs: bound(scenario.emulator.max_runs, defaults.max_runs),
        max_open_runs: bound(scenario.emulator.max_open_runs, defaults.max_open_runs),
        max_records: bound(scenario.emulator.max_records, defaults.max_records),
        ..defaults
    };

    let mut nats = options.nats.clone();
    if scenario.nats.cluster.is_some() {
        nats.cluster = scenario.nats.cluster;
    }
    // A step that restarts, stops or kills the server needs a server of its own.
    if disturbs_the_server(scenario) {
        nats.isolation = natsbox::Isolation::Server;
    }
    let harness = Harness::start_with(nats, config).await.map_err(|e| {
        plain(format!(
            "cannot start the nats-server and the emulator: {e}"
        ))
    })?;
    let hand_drops = triggers_sdk::transport::DropCounter::new();
    let hand = triggers_sdk::transport::with_url_credentials(
        triggers_emulator::drops::connect_options("triggers-lab scenario", &hand_drops),
        harness.url(),
    )
    .connect(harness.url())
    .await
    .map_err(|e| plain(format!("cannot connect to {}: {e}", harness.url())))?;
    let mut lab = Lab {
        scenario,
        harness,
        hand,
        hand_drops,
        stubs: BTreeMap::new(),
        scripted: BTreeMap::new(),
        external: BTreeMap::new(),
        outputs: Vec::new(),
        runs: BTreeMap::new(),
        deployed: BTreeMap::new(),
        expected_rules: BTreeSet::new(),
        deadline: Instant::now(),
        timeout: scenario.timeout,
        vars: options.vars.clone(),
        downed_leaders: BTreeMap::new(),
    };
    for stub in &scenario.http_stubs {
        lab.stubs
            .insert(stub.name.clone(), (stub.clone(), start_stub(stub).await));
    }
    if let Err(abort) = start_services(&mut lab, options).await {
        return Err(abandon(lab, abort).await);
    }
    // Starting is not cut short (a half-started container would be left behind); what started
    // is stopped before the first step instead.
    if let Some(why) = options.interrupt.reason() {
        let abort = Abort {
            message: interrupted_message(&why, "its setup"),
            interrupted: Some(why),
            outputs: None,
        };
        return Err(abandon(lab, abort).await);
    }
    Ok(lab)
}

/// Why a setup was given up, before what it started is stopped.
struct Abort {
    message: String,
    /// Why the run was stopped, when it was.
    interrupted: Option<String>,
    /// The output to report, when not every service's (the one service that failed to start).
    outputs: Option<Vec<ServiceOutput>>,
}

/// Gives a setup up: the one path by which every service, stub and the server it started is
/// stopped, whatever the reason (a service that would not start, an interruption).
async fn abandon(mut lab: Lab<'_>, abort: Abort) -> SetupError {
    let outputs = abort
        .outputs
        .unwrap_or_else(|| service_outputs(&lab.outputs));
    teardown(&mut lab).boxed_local().await;
    let _ = lab.harness.stop().await;
    SetupError {
        message: abort.message,
        outputs,
        interrupted: abort.interrupted,
    }
}

/// The last lines of each external service's output.
fn service_outputs(outputs: &[(String, Output)]) -> Vec<ServiceOutput> {
    outputs
        .iter()
        .map(|(service, out)| ServiceOutput {
            service: service.clone(),
            output: out.text(),
        })
        .collect()
}

/// Starts the scenario's services in order, each external one awaited until it is ready.
async fn start_services(lab: &mut Lab<'_>, options: &RunOptions) -> Result<(), Abort> {
    let scenario = lab.scenario;
    for spec in &scenario.services {
        if !spec.is_external() {
            let s = Scripted::start(spec, lab.harness.url())
                .boxed_local()
                .await
                .map_err(|message| Abort {
                    message,
                    interrupted: None,
                    outputs: None,
                })?;
            lab.scripted.insert(spec.name.clone(), s);
            continue;
        }
        let mut ext =
            External::start(spec, &scenario.base_dir, lab.harness.url()).map_err(|message| {
                Abort {
                    message,
                    interrupted: None,
                    outputs: None,
                }
            })?;
        lab.outputs.push((spec.name.clone(), ext.output.clone()));
        if spec.ready.unwrap_or_default() == Readiness::Registered {
            let limit = spec.ready_timeout.map_or(Duration::from_secs(300), |d| d.0);
            let ready = tokio::select! {
                biased;
                why = options.interrupt.requested() => Err((
                    interrupted_message(&why, &format!("the start of service {:?}", spec.name)),
                    Some(why),
                )),
                r = wait_registered(lab, &mut ext, limit).boxed_local() => r.map_err(|m| (m, None)),
            };
            if let Err((message, interrupted)) = ready {
                let outputs = vec![ServiceOutput {
                    service: spec.name.clone(),
                    output: ext.output.text(),
                }];
                let _ = ext.stop().await;
                return Err(Abort {
                    message,
                    interrupted,
                    outputs: Some(outputs),
                });
            }
        }
        lab.external.insert(spec.name.clone(), ext);
    }
    Ok(())
}

async fn start_stub(spec: &StubSpec) -> wiremock::MockServer {
    use wiremock::matchers::{method, path};
    let server = wiremock::MockServer::start().await;
    let mut response = wiremock::ResponseTemplate::new(spec.status);
    if let Some(body) = &spec.body {
        response = response.set_body_json(body.clone());
    }
    if let Some(d) = spec.delay {
        response = response.set_delay(d.0);
    }
    wiremock::Mock::given(method(spec.method.to_uppercase().as_str()))
        .and(path(spec.path.as_str()))
        .respond_with(response)
        .mount(&server)
        .await;
    server
}

async fn wait_registered(lab: &Lab<'_>, ext: &mut External, limit: Duration) -> Result<(), String> {
    let now = Instant::now();
    let mut w = Waiter {
        records: lab.em().subscribe_records(),
        started: now,
        deadline: after(now, limit),
        scenario_bound: None,
    };
    loop {
        if lab.em().services().contains_key(&ext.name) {
            return Ok(());
        }
        if let Some(status) = ext.exited() {
            // Give its last lines a moment to be read.
            tokio::time::sleep(Duration::from_millis(100)).await;
            return Err(format!(
                "service {:?} exited ({status}) before it registered; {}",
                ext.name,
                describe::registrations(lab.em())
            ));
        }
        if !w.next().await {
            return Err(w.timeout_message(
                format!(
                    "service {:?} to register (it is external: `ready: registered`)",
                    ext.name
                ),
                describe::registrations(lab.em()),
            ));
        }
    }
}

async fn run_steps(
    lab: &mut Lab<'_>,
    report: &mut ScenarioReport,
    index: usize,
    emitter: &Emitter,
    interrupt: &Interrupt,
) {
    let scenario = lab.scenario;
    let steps = scenario.steps.len();
    let mut failed = false;
    for (i, at) in scenario.steps.iter().enumerate() {
        let label = describe::label(&at.step);
        if failed || report.outcome == Outcome::Interrupted {
            report.steps.push(StepReport {
                index: i + 1,
                line: at.line,
                label,
                outcome: if failed {
                    Outcome::Skipped
                } else {
                    Outcome::NotRun
                },
                duration: Duration::ZERO,
                detail: String::new(),
            });
            continue;
        }
        emitter.emit(Event::StepStarted {
            index,
            name: scenario.name.clone(),
            step: i + 1,
            steps,
            label: label.clone(),
        });
        let started = Instant::now();
        let result = if Instant::now() >= lab.deadline {
            Err(StepFailure::timeout(format!(
                "the scenario's timeout ({}) ran out before this step",
                crate::model::Dur(lab.timeout)
            )))
        } else {
            // A backstop for steps that do not wait by themselves (a publish to a server that
            // is gone): the scenario's deadline, and a little more for the waits' own messages
            // (a waiting step ends at the deadline by itself, with a better one).
            let backstop = after(lab.deadline, BACKSTOP_GRACE);
            let step = tokio::time::timeout_at(backstop, crate::steps::run(lab, &at.step));
            // Biased: once the run is interrupted, no further step starts.
            tokio::select! {
                biased;
                why = interrupt.requested() => Err(StepFailure::interrupted(
                    interrupted_message(&why, &format!("step {}/{steps}", i + 1)),
                )),
                r = step => r.unwrap_or_else(|_| Err(StepFailure::timeout(format!(
                    "the step did not finish within the scenario's timeout ({})",
                    crate::model::Dur(lab.timeout)
                )))),
            }
        };
        let (outcome, detail) = match result {
            Ok(detail) => (Outcome::Passed, detail),
            Err(failure) => {
                let outcome = failure.kind().outcome();
                // An interrupted step stops the run where it is: the steps after it are not
                // run; a failed one skips them.
                if outcome == Outcome::Interrupted {
                    report.outcome = Outcome::Interrupted;
                } else {
                    failed = true;
                }
                report.failure = Some(Failure {
                    kind: failure.kind(),
                    step: Some(i + 1),
                    at: format!("{}:{}:{}", scenario.file, at.line, at.column),
                    what: label.clone(),
                    message: failure.message().to_owned(),
                });
                (outcome, failure.message().to_owned())
            }
        };
        let step = StepReport {
            index: i + 1,
            line: at.line,
            label,
            outcome,
            duration: started.elapsed(),
            detail,
        };
        emitter.emit(Event::StepFinished {
            index,
            name: scenario.name.clone(),
            steps,
            step: step.clone(),
        });
        report.steps.push(step);
    }
}

/// The violations the scenario's `conformance` setting does not allow, described with their
/// bytes; `None` when there are none.
fn conformance(lab: &Lab<'_>) -> Option<String> {
    let policy = lab.scenario.conformance;
    let failing: Vec<Violation> = lab
        .em()
        .violations()
        .into_iter()
        .filter(|v| {
            !lab.expected_rules.iter().any(|(rule, subject)| {
                rule == v.rule && subject.as_ref().is_none_or(|s| *s == v.subject)
            })
        })
        .filter(|v| match policy {
            Conformance::Strict => true,
            Conformance::Errors => v.severity == Severity::Error,
            Conformance::Off => false,
        })
        .collect();
    if failing.is_empty() {
        return None;
    }
    Some(format!(
        "the conformance checker found what `conformance: {}` does not allow (expect a rule with expect_violation if it is on purpose):\n{}",
        policy,
        describe_violations(&failing).trim_end()
    ))
}

/// Whether a step of `scenario` restarts, stops or kills a server: then the emulator's
/// connection is lost by design, and what it misses meanwhile is the scenario's to check.
fn disturbs_the_server(scenario: &Scenario) -> bool {
    scenario
        .steps
        .iter()
        .any(|s| s.step.kind().disturbs_the_server())
}

/// Messages NATS dropped for slow subscriptions of the emulator and the scripted services, and
/// an account naming who dropped how many (empty when none).
fn drops(lab: &Lab<'_>) -> (u64, String) {
    let mut total = lab.em().dropped_messages();
    let mut who = Vec::new();
    if total > 0 {
        who.push(format!("{total} to the emulator"));
    }
    let hand = lab.hand_drops.count();
    if hand > 0 {
        who.push(format!("{hand} to the scenario's own client"));
        total = total.saturating_add(hand);
    }
    for (name, service) in &lab.scripted {
        let n = service.dropped_messages();
        if n > 0 {
            who.push(format!("{n} to scripted service {name:?}"));
            total = total.saturating_add(n);
        }
    }
    if total == 0 {
        return (0, String::new());
    }
    (
        total,
        format!(
            "NATS dropped {total} message(s) that could not be taken in time (slow consumer: {}): \
             what the scenario checked is incomplete, and a verdict reached on partial data is \
             not a verdict. The machine may be overloaded: run fewer scenarios at once (-j), or \
             send fewer messages at a time",
            who.join(", ")
        ),
    )
}

/// Stops every service (gracefully) and the stubs. `Some` when a service would not stop.
async fn teardown(lab: &mut Lab<'_>) -> Option<String> {
    let mut problems = Vec::new();
    for (_, s) in std::mem::take(&mut lab.scripted) {
        s.stop().await;
    }
    for (_, mut e) in std::mem::take(&mut lab.external) {
        if let Err(m) = e.stop().await {
            problems.push(m);
        }
    }
    lab.stubs.clear();
    (!problems.is_empty()).then(|| problems.join("\n"))
}
