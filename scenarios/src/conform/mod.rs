//! The conformance kit behind `triggers-lab conform`: starts a nats-server, the emulator and a
//! peer service, starts the command under test (a "conformance service", `docs/conform.md`),
//! runs a battery of checks against it and scores it.
//!
//! Each check drives the service through the emulator (deploy, trigger, forged messages, the
//! clock) and compares what arrives with what `docs/protocol.md` and `docs/wire.md` require. A
//! check that fails says what it expected and what arrived; one that cannot be judged because a
//! check it needs failed is "not applicable".

mod checks;
mod peer;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use triggers_emulator::{EmulatorConfig, Harness, NatsConfig};

use crate::external::External;

pub use checks::CHECKS;

/// What to run, and how.
#[derive(Debug, Clone)]
pub struct ConformOptions {
    /// The command that starts the conformance service: the program, then its arguments.
    pub command: Vec<String>,
    /// The folder it runs in (default: the current one).
    pub cwd: Option<PathBuf>,
    /// Extra environment for it.
    pub env: BTreeMap<String, String>,
    /// Each check's patience for what it waits on.
    pub timeout: Duration,
    /// Run only these checks (all when empty). `register` always runs: everything needs it.
    pub only: Vec<String>,
    /// Where the NATS server comes from.
    pub nats: NatsConfig,
    /// Warnings fail too (`--strict`): for an SDK that means to be byte-identical to Go.
    pub strict: bool,
}

/// The `ack_wait` the kit gives the service (`TRIGGERS_ACK_WAIT_MS`), in milliseconds.
pub const ACK_WAIT_MS: u64 = 2000;

/// The shortest `timeout` the kit takes: a correct service may wait 2 s for a flow's broadcast
/// before it answers (`docs/protocol.md` §5), and a check must outlast that with room to spare.
pub const MIN_TIMEOUT: Duration = Duration::from_secs(3);

impl Default for ConformOptions {
    fn default() -> Self {
        ConformOptions {
            command: Vec::new(),
            cwd: None,
            env: BTreeMap::new(),
            timeout: Duration::from_secs(10),
            only: Vec::new(),
            nats: NatsConfig::default(),
            strict: false,
        }
    }
}

/// How one check went.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CheckOutcome {
    /// What arrived is what the protocol requires.
    Passed,
    /// Something else arrived, or nothing did.
    Failed {
        /// What the check expected.
        expected: String,
        /// What arrived instead.
        arrived: String,
    },
    /// Not judged: a check it needs failed first.
    NotApplicable {
        /// Why.
        because: String,
    },
}

/// One check's result.
#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    /// The check's name (`docs/conform.md`).
    pub name: &'static str,
    /// What it checks, in a line.
    pub about: &'static str,
    /// How it went.
    #[serde(flatten)]
    pub outcome: CheckOutcome,
    /// How long it took, in milliseconds.
    pub millis: u64,
    /// It failed only because `--strict` made warnings fail.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub strict_only: bool,
}

/// Every check's result and the score.
#[derive(Debug, Clone, Serialize)]
pub struct ConformReport {
    /// The command that was judged.
    pub command: Vec<String>,
    /// The checks, in the order they ran.
    pub checks: Vec<CheckResult>,
    /// The warnings the conformance checker reported (bytes Go reads the same).
    pub warnings: Vec<String>,
    /// The service's last lines of output.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service_output: String,
    /// Whether warnings failed too (`--strict`).
    pub strict: bool,
}

impl ConformReport {
    /// Checks passed.
    #[must_use]
    pub fn passed(&self) -> usize {
        self.count(|o| matches!(o, CheckOutcome::Passed))
    }

    /// Checks failed.
    #[must_use]
    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, CheckOutcome::Failed { .. }))
    }

    /// Checks not applicable.
    #[must_use]
    pub fn not_applicable(&self) -> usize {
        self.count(|o| matches!(o, CheckOutcome::NotApplicable { .. }))
    }

    fn count(&self, f: impl Fn(&CheckOutcome) -> bool) -> usize {
        self.checks.iter().filter(|c| f(&c.outcome)).count()
    }

    /// Passed checks over applicable ones (passed and failed), in percent. A service is
    /// conformant only when every check passed ([`ConformReport::conformant`]): a check that
    /// could not be judged is no pass.
    #[must_use]
    pub fn score(&self) -> f64 {
        let applicable = self.passed() + self.failed();
        if applicable == 0 {
            return 0.0;
        }
        100.0 * self.passed() as f64 / applicable as f64
    }

    /// Whether every check passed.
    #[must_use]
    pub fn conformant(&self) -> bool {
        !self.checks.is_empty() && self.passed() == self.checks.len()
    }

    /// The table `triggers-lab conform` prints.
    #[must_use]
    pub fn table(&self) -> String {
        let width = self.checks.iter().map(|c| c.name.len()).max().unwrap_or(5);
        let mut out = String::new();
        for c in &self.checks {
            let (mark, detail) = match &c.outcome {
                CheckOutcome::Passed => ("pass", String::new()),
                CheckOutcome::Failed { expected, arrived } => (
                    "FAIL",
                    format!(
                        "{}\n{:width$}        expected: {expected}\n{:width$}        arrived:  {arrived}",
                        if c.strict_only {
                            " (fails only under --strict)"
                        } else {
                            ""
                        },
                        "",
                        ""
                    ),
                ),
                CheckOutcome::NotApplicable { because } => {
                    ("n/a ", format!("\n{:width$}        {because}", ""))
                }
            };
            out.push_str(&format!(
                "  {mark}  {:width$}  {}{detail}\n",
                c.name, c.about
            ));
        }
        for w in &self.warnings {
            out.push_str(&format!("  warning: {w}\n"));
        }
        out.push_str(&format!(
            "\nscore: {:.0}% ({} passed, {} failed, {} not applicable, of {})\n",
            self.score(),
            self.passed(),
            self.failed(),
            self.not_applicable(),
            self.checks.len()
        ));
        out
    }

    /// The report as JSON.
    ///
    /// # Errors
    /// Never in practice (the report is plain data).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        let mut value = serde_json::to_value(self)?;
        if let Some(map) = value.as_object_mut() {
            map.insert("score".into(), serde_json::json!(self.score()));
            map.insert("passed".into(), serde_json::json!(self.passed()));
            map.insert("failed".into(), serde_json::json!(self.failed()));
            map.insert(
                "not_applicable".into(),
                serde_json::json!(self.not_applicable()),
            );
        }
        serde_json::to_string_pretty(&value)
    }

    /// The report as JUnit XML: one test case per check (a not-applicable check is skipped).
    ///
    /// # Errors
    /// When the XML cannot be written.
    pub fn to_junit(&self) -> Result<String, quick_junit::SerializeError> {
        use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
        let mut suite = TestSuite::new("conform");
        for c in &self.checks {
            let status = match &c.outcome {
                CheckOutcome::Passed => TestCaseStatus::success(),
                CheckOutcome::Failed { expected, arrived } => {
                    let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    s.set_message(format!("expected: {expected}; arrived: {arrived}"));
                    s.set_description(format!(
                        "expected: {expected}\narrived: {arrived}\n\n{}",
                        self.service_output
                    ));
                    s
                }
                CheckOutcome::NotApplicable { because } => {
                    let mut s = TestCaseStatus::skipped();
                    s.set_message(because.clone());
                    s
                }
            };
            let mut case = TestCase::new(c.name, status);
            case.set_time(Duration::from_millis(c.millis));
            suite.add_test_case(case);
        }
        let mut report = Report::new("triggers-lab conform");
        report.add_test_suite(suite);
        report.to_string()
    }
}

/// Why the kit could not judge at all.
#[derive(Debug, thiserror::Error)]
pub enum ConformError {
    /// No command was given.
    #[error(
        "no command to run: give it after `--`, e.g. `triggers-lab conform -- python3 service.py`"
    )]
    NoCommand,
    /// `--only` named a check that does not exist.
    #[error("there is no check {0:?}; `triggers-lab conform --list` lists them")]
    UnknownCheck(String),
    /// A check's patience shorter than what the protocol asks a correct service to wait.
    #[error(
        "--timeout {0:?} is too short: a correct service may wait 2 s for a flow's broadcast \
         before it answers (docs/protocol.md §5), so each check needs at least {MIN_TIMEOUT:?}; \
         give --timeout 3s or more (default 10s)"
    )]
    TimeoutTooShort(Duration),
    /// The nats-server or the emulator could not be started.
    #[error("cannot start the emulator: {0}")]
    Harness(String),
    /// The peer service could not be started.
    #[error("cannot start the peer service: {0}")]
    Peer(String),
    /// The command could not be started.
    #[error("{0}")]
    Start(String),
}

/// Starts what the checks share: a server and an emulator of their own, the peer service, and
/// the service under test.
async fn start(
    options: &ConformOptions,
) -> Result<(checks::Ctx, triggers_sdk::runtime::RunningService), ConformError> {
    // A server of its own: the server_restart check restarts it.
    let mut nats = options.nats.clone();
    nats.isolation = natsbox::Isolation::Server;
    let lab = Harness::start_with(
        nats,
        EmulatorConfig {
            wait_timeout: options.timeout,
            ..EmulatorConfig::default()
        },
    )
    .await
    .map_err(|e| ConformError::Harness(e.to_string()))?;
    let peer = peer::start(lab.url()).await.map_err(ConformError::Peer)?;
    let mut env = options.env.clone();
    env.insert("TRIGGERS_SERVICE".into(), checks::SERVICE.into());
    env.insert("CONFORM_OUT_SUBJECT".into(), "conform.out.>".into());
    // Short, so that a lost ack redelivers within a check's patience (docs/conform.md).
    env.entry("TRIGGERS_ACK_WAIT_MS".into())
        .or_insert_with(|| ACK_WAIT_MS.to_string());
    let cwd = options.cwd.clone().unwrap_or_else(|| PathBuf::from("."));
    let service = External::spawn(checks::SERVICE, &options.command, &env, &cwd, lab.url())
        .map_err(ConformError::Start)?;
    let launch = checks::Launch {
        command: options.command.clone(),
        env,
        cwd,
    };
    let client = triggers_sdk::transport::connect(lab.url())
        .await
        .map_err(|e| ConformError::Harness(format!("cannot connect to {}: {e}", lab.url())))?;
    let ctx = checks::Ctx {
        lab,
        client,
        service,
        timeout: options.timeout,
        versions: BTreeMap::new(),
        strict: options.strict,
        strict_only: false,
        launch,
        proxy: None,
    };
    Ok((ctx, peer))
}

/// Runs check `name`; a failure says so when the service has exited.
async fn run_check(name: &str, ctx: &mut checks::Ctx) -> CheckOutcome {
    ctx.strict_only = false;
    match run_watching_exit(name, ctx).await {
        Ok(()) => CheckOutcome::Passed,
        Err(failure) => {
            let mut arrived = failure.arrived;
            if let Some(status) = ctx.service.exited()
                && !arrived.contains("the service has exited")
            {
                arrived.push_str(&format!(" (the service has exited: {status})"));
            }
            CheckOutcome::Failed {
                expected: failure.expected,
                arrived,
            }
        }
    }
}

/// Runs the checks against the service `options.command` starts. `progress` is called with each
/// result as it is known.
///
/// # Errors
/// [`ConformError`] when nothing could be judged (no command, no nats-server, a command that
/// cannot be started). A service that misbehaves is a report with failed checks, not an error.
pub async fn conform(
    options: &ConformOptions,
    mut progress: impl FnMut(&CheckResult),
) -> Result<ConformReport, ConformError> {
    if options.command.is_empty() {
        return Err(ConformError::NoCommand);
    }
    if options.timeout < MIN_TIMEOUT {
        return Err(ConformError::TimeoutTooShort(options.timeout));
    }
    for name in &options.only {
        if !CHECKS.iter().any(|(n, _)| n == name) {
            return Err(ConformError::UnknownCheck(name.clone()));
        }
    }
    let (mut ctx, peer) = start(options).await?;
    let mut results = Vec::new();
    let mut registered = true;
    for (name, about) in CHECKS {
        let selected = options.only.is_empty()
            || *name == "register"
            || options.only.iter().any(|o| o == name);
        if !selected {
            continue;
        }
        let started = Instant::now();
        let outcome = if !registered {
            CheckOutcome::NotApplicable {
                because: "the service did not register (check `register`)".into(),
            }
        } else {
            run_check(name, &mut ctx).await
        };
        if *name == "register" && outcome != CheckOutcome::Passed {
            registered = false;
        }
        let strict_only = ctx.strict_only && matches!(outcome, CheckOutcome::Failed { .. });
        let result = CheckResult {
            name,
            about,
            outcome,
            millis: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            strict_only,
        };
        progress(&result);
        results.push(result);
    }
    let warnings = ctx.warnings();
    let _ = ctx.service.stop().await;
    // Kept whether or not a check failed: `-v` shows it when every check passed too.
    let service_output = ctx.service.output.text();
    peer.shutdown().await;
    let _ = ctx.lab.stop().await;
    Ok(ConformReport {
        command: options.command.clone(),
        checks: results,
        warnings,
        service_output,
        strict: options.strict,
    })
}

/// Checks during which the service is meant to exit (or be killed and started again).
const EXPECTS_EXIT: &[&str] = &[
    "shutdown",
    "crash_redelivery",
    "replicas",
    "ack_lost",
    "broadcast_before_reply",
];

/// Runs the check `name`, and fails it as soon as the service's process exits, rather than
/// waiting out the check's patience for what a dead process cannot send.
async fn run_watching_exit(name: &str, ctx: &mut checks::Ctx) -> Result<(), checks::Failure> {
    if EXPECTS_EXIT.contains(&name) {
        return checks::run(name, ctx).await;
    }
    let mut exit = ctx.service.exit_watch();
    let about = CHECKS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, a)| *a);
    tokio::select! {
        r = checks::run(name, ctx) => r,
        Ok(status) = exit.wait_for(Option::is_some) => {
            let status = status.clone().unwrap_or_default();
            Err(checks::Failure {
                expected: format!("the service to stay up through the check ({about})"),
                arrived: format!("the service has exited ({status}); nothing more can arrive"),
            })
        }
    }
}
