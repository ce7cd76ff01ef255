//! What a run of scenarios found: per scenario and per step, as text for people, JSON for tools
//! and JUnit XML for CI.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::ReportError;

/// How a scenario or a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Everything it expected arrived.
    Passed,
    /// Something it expected did not (or something it did not expect did).
    Failed,
    /// Not run: an earlier step failed.
    Skipped,
    /// Stopped by a signal (Ctrl-C, SIGTERM) while it ran: neither passed nor failed.
    Interrupted,
    /// Not run: the run was interrupted before it got there.
    NotRun,
}

impl Outcome {
    /// `PASS`, `FAIL`, `SKIP`, `INTERRUPTED`, `NOT RUN`.
    #[must_use]
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Passed => "PASS",
            Outcome::Failed => "FAIL",
            Outcome::Skipped => "SKIP",
            Outcome::Interrupted => "INTERRUPTED",
            Outcome::NotRun => "NOT RUN",
        }
    }
}

/// The version of the JSON report's shape, written as its `format` field. A report without one
/// is read as format 0: the same shape, written before the field existed.
pub const REPORT_FORMAT: u32 = 1;

fn millis<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((d.as_secs_f64() * 1_000_000.0).round() / 1000.0)
}

/// `duration_ms` back: written to the microsecond, so read to the microsecond.
fn from_millis<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let ms = f64::deserialize(d)?;
    if !ms.is_finite() || !(0.0..=1e15).contains(&ms) {
        return Err(serde::de::Error::custom(format!(
            "{ms} is not a duration in milliseconds (0 or more)"
        )));
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(Duration::from_micros((ms * 1000.0).round() as u64))
}

/// One step's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepReport {
    /// 1-based position in the scenario.
    pub index: usize,
    /// Its line in the file.
    pub line: u64,
    /// In a few words.
    pub label: String,
    /// How it ended.
    pub outcome: Outcome,
    /// How long it took.
    #[serde(
        rename = "duration_ms",
        serialize_with = "millis",
        deserialize_with = "from_millis"
    )]
    pub duration: Duration,
    /// What it did or found (a run id, a version, "3 timer(s) fired"...), or why it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// What kind of failure ended a scenario: decided where the failure was made (a step, the
/// setup, the conformance check...), never read back from its message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// What a step expects did not hold: the services did not do what the scenario says.
    #[default]
    Expectation,
    /// A step could not be carried out as written: a `${...}` with no value, a run not started,
    /// a flow or manifest that does not parse once its values are in.
    Invalid,
    /// What a step needs around it failed: a request NATS refused, a server that would not
    /// restart, records the emulator could not keep.
    Environment,
    /// A step waited its time limit (or the scenario's) out.
    Timeout,
    /// The run was stopped (Ctrl-C, SIGTERM) while the scenario ran or started.
    Interrupted,
    /// The scenario's server, emulator or services could not be started.
    Setup,
    /// The conformance checker found what the scenario's `conformance` does not allow.
    Conformance,
    /// NATS dropped messages, or the emulator lost its connection: no verdict can be reached.
    Dropped,
    /// A service would not stop.
    Teardown,
}

impl FailureKind {
    /// The outcome of a step or scenario that ended with this kind of failure.
    #[must_use]
    pub fn outcome(self) -> Outcome {
        match self {
            FailureKind::Interrupted => Outcome::Interrupted,
            _ => Outcome::Failed,
        }
    }
}

/// Why a scenario failed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Failure {
    /// The kind of failure (`expectation` in a report written before the field existed).
    #[serde(default)]
    pub kind: FailureKind,
    /// The step (1-based), or none for setup, the conformance check or teardown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<usize>,
    /// `file:line:col` of the step (or the file).
    pub at: String,
    /// The step's label, or `setup`, `conformance`, `teardown`.
    pub what: String,
    /// What was expected versus what arrived.
    pub message: String,
}

/// The end of an external service's output.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServiceOutput {
    /// The service.
    pub service: String,
    /// Its last lines.
    pub output: String,
}

/// One scenario's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScenarioReport {
    /// Its name.
    pub name: String,
    /// Its file.
    pub file: String,
    /// What it checks.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Passed or failed.
    pub outcome: Outcome,
    /// Wall time, setup and teardown included.
    #[serde(
        rename = "duration_ms",
        serialize_with = "millis",
        deserialize_with = "from_millis"
    )]
    pub duration: Duration,
    /// The nats-server it ran on.
    pub nats: String,
    /// Every step.
    pub steps: Vec<StepReport>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// Messages NATS dropped on their way to the emulator or a scripted service because a
    /// subscription fell behind (slow consumer; at least this many). Above zero the scenario
    /// fails: what it checked was incomplete.
    pub dropped_messages: u64,
    /// External services' output (the last lines).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceOutput>,
    /// Earlier attempts that failed, oldest first (`triggers-lab run --retries N`): a scenario
    /// that passed after one is flaky.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_attempts: Vec<Failure>,
}

impl ScenarioReport {
    /// Whether it passed.
    #[must_use]
    pub fn passed(&self) -> bool {
        self.outcome == Outcome::Passed
    }

    /// Whether it passed only after failing (on a retry).
    #[must_use]
    pub fn flaky(&self) -> bool {
        self.passed() && !self.failed_attempts.is_empty()
    }

    /// `PASS name (1.23s)`.
    #[must_use]
    pub fn summary_line(&self) -> String {
        format!(
            "{} {} ({}){}",
            self.outcome.word(),
            self.name,
            seconds(self.duration),
            match self.failed_attempts.len() {
                0 => String::new(),
                n if self.passed() => format!(" FLAKY: passed on attempt {} of {}", n + 1, n + 1),
                n => format!(" after {} attempts", n + 1),
            }
        )
    }

    /// For a failure: which step, what was expected and what arrived, and external services'
    /// output. Empty when it passed.
    #[must_use]
    pub fn failure_text(&self) -> String {
        let Some(f) = &self.failure else {
            return String::new();
        };
        let mut out = match f.step {
            Some(i) => format!("  step {i}/{} at {}: {}\n", self.steps.len(), f.at, f.what),
            None => format!("  {} ({})\n", f.what, f.at),
        };
        for line in f.message.lines() {
            out.push_str("    ");
            out.push_str(line);
            out.push('\n');
        }
        for s in &self.services {
            let lines: Vec<&str> = s.output.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            out.push_str(&format!(
                "  output of service {} (last {} lines):\n",
                s.service,
                tail.len()
            ));
            if tail.is_empty() {
                out.push_str("    (nothing)\n");
            }
            for l in tail {
                out.push_str("    | ");
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

/// A JUnit failure's one-line message: what failed, where, and the first line of why.
fn junit_message(f: &Failure) -> String {
    let why = f.message.lines().next().unwrap_or_default().trim();
    if why.is_empty() {
        format!("{} at {}", f.what, f.at)
    } else {
        format!("{} at {}: {why}", f.what, f.at)
    }
}

/// `0.42s`, `12.3s`.
#[must_use]
pub fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        format!("{s:.2}s")
    } else {
        format!("{s:.1}s")
    }
}

/// How many scenarios of a run ended each way (the JSON report's `totals`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Every scenario of the run.
    pub scenarios: usize,
    /// Passed.
    pub passed: usize,
    /// Failed.
    pub failed: usize,
    /// Stopped by a signal while running.
    pub interrupted: usize,
    /// Passed on a retry, after failing (counted in `passed` too).
    pub flaky: usize,
    /// Not run: the run was interrupted first.
    pub not_run: usize,
}

/// A run of several scenarios.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SuiteReport {
    /// Each scenario, in file order.
    pub scenarios: Vec<ScenarioReport>,
    /// Wall time of the whole run.
    #[serde(
        rename = "duration_ms",
        serialize_with = "millis",
        deserialize_with = "from_millis"
    )]
    pub duration: Duration,
    /// Scenarios run at once.
    pub jobs: usize,
    /// Why the run was stopped early (`SIGINT`, `SIGTERM`), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<String>,
    /// The shard of the selection this run was (`triggers-lab run --shard K/N`), if it was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
}

/// Which part of a selection of scenarios a run was: what `triggers-lab report merge` needs to
/// put shards back in the order one unsharded run would have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// Which shard, 1-based.
    pub index: usize,
    /// Of how many.
    pub count: usize,
    /// How many scenarios the whole selection holds (every shard together).
    pub selected: usize,
    /// For each scenario of this report, in order, its 0-based place in the whole selection as
    /// an unsharded run would run it.
    pub positions: Vec<usize>,
}

impl SuiteReport {
    /// How many passed.
    #[must_use]
    pub fn passed(&self) -> usize {
        self.scenarios.iter().filter(|s| s.passed()).count()
    }

    /// How many failed.
    #[must_use]
    pub fn failed(&self) -> usize {
        self.count(Outcome::Failed)
    }

    /// How many ended with `outcome`.
    #[must_use]
    pub fn count(&self, outcome: Outcome) -> usize {
        self.scenarios
            .iter()
            .filter(|s| s.outcome == outcome)
            .count()
    }

    /// `14 passed, 0 failed`, then `, 1 interrupted, 3 not run` when the run was stopped early.
    #[must_use]
    pub fn counts(&self) -> String {
        let mut text = format!("{} passed, {} failed", self.passed(), self.failed());
        let flaky = self.scenarios.iter().filter(|s| s.flaky()).count();
        if flaky > 0 {
            text.push_str(&format!(", {flaky} flaky"));
        }
        if self.interrupted.is_some() {
            text.push_str(&format!(
                ", {} interrupted, {} not run",
                self.count(Outcome::Interrupted),
                self.count(Outcome::NotRun)
            ));
        }
        text
    }

    /// `14 passed, 0 failed in 12.3s`.
    #[must_use]
    pub fn summary_line(&self) -> String {
        format!("{} in {}", self.counts(), seconds(self.duration))
    }

    /// The report as JSON.
    ///
    /// # Errors
    /// Never in practice (every field serialises).
    pub fn to_json(&self) -> Result<String, ReportError> {
        // The totals first, so a tool (or `jq .totals`) need not count the scenarios itself.
        #[derive(Serialize)]
        struct WithTotals<'a> {
            format: u32,
            totals: Totals,
            #[serde(flatten)]
            report: &'a SuiteReport,
        }
        Ok(serde_json::to_string_pretty(&WithTotals {
            format: REPORT_FORMAT,
            totals: self.totals(),
            report: self,
        })?)
    }

    /// How many scenarios ended each way.
    #[must_use]
    pub fn totals(&self) -> Totals {
        Totals {
            scenarios: self.scenarios.len(),
            passed: self.passed(),
            failed: self.failed(),
            interrupted: self.count(Outcome::Interrupted),
            flaky: self.scenarios.iter().filter(|s| s.flaky()).count(),
            not_run: self.count(Outcome::NotRun),
        }
    }

    /// The report as JUnit XML: one test suite, one test case per scenario (its class name the
    /// file), a failure with what was expected and what arrived, the steps in system-out and
    /// external services' output in system-err.
    ///
    /// # Errors
    /// When the XML cannot be written.
    pub fn to_junit(&self) -> Result<String, ReportError> {
        use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
        let mut report = Report::new("triggers-lab scenarios");
        let mut suite = TestSuite::new("scenarios");
        for s in &self.scenarios {
            let status = match (&s.failure, s.outcome) {
                (_, Outcome::NotRun) => {
                    let mut st = TestCaseStatus::skipped();
                    st.set_message("not run: the run was interrupted before this scenario");
                    st
                }
                (failure, Outcome::Interrupted) => {
                    let mut st = TestCaseStatus::non_success(NonSuccessKind::Error);
                    if let Some(f) = failure {
                        st.set_message(format!("{} at {}", f.what, f.at));
                        st.set_description(f.message.clone());
                    }
                    st.set_type("interrupted");
                    st
                }
                (None, _) => {
                    let mut st = TestCaseStatus::success();
                    // A pass after failures: quick-junit writes each as a <flakyFailure>.
                    st.add_reruns(s.failed_attempts.iter().map(|f| {
                        let mut rerun = quick_junit::TestRerun::new(NonSuccessKind::Failure);
                        rerun.set_message(junit_message(f));
                        rerun.set_description(f.message.clone());
                        rerun
                    }));
                    st
                }
                (Some(f), _) => {
                    let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    // CI shows the message alone in its summary: it must say why, not only where.
                    st.set_message(junit_message(f));
                    st.set_description(f.message.clone());
                    st.set_type("scenario failure");
                    st
                }
            };
            let mut case = TestCase::new(s.name.clone(), status);
            case.set_classname(s.file.clone());
            case.set_time(s.duration);
            let steps: Vec<String> = s
                .steps
                .iter()
                .map(|st| {
                    format!(
                        "{} step {} (line {}): {} ({}){}",
                        st.outcome.word(),
                        st.index,
                        st.line,
                        st.label,
                        seconds(st.duration),
                        if st.detail.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", st.detail.lines().next().unwrap_or_default())
                        }
                    )
                })
                .collect();
            case.set_system_out(steps.join("\n"));
            if !s.services.is_empty() {
                case.set_system_err(
                    s.services
                        .iter()
                        .map(|o| format!("--- {} ---\n{}", o.service, o.output))
                        .collect::<Vec<_>>()
                        .join("\n"),
                );
            }
            suite.add_test_case(case);
        }
        suite.set_time(self.duration);
        report.add_test_suite(suite);
        report
            .to_string()
            .map_err(|e| ReportError::Junit(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(outcome: Outcome, failed_attempts: usize) -> ScenarioReport {
        let failure = Failure {
            kind: FailureKind::Expectation,
            step: Some(1),
            at: "s.scenario.yaml:3:5".into(),
            what: "expect_calls shop.charge".into(),
            message: "expected exactly 2 call(s), found 1\nmore".into(),
        };
        ScenarioReport {
            name: "s".into(),
            file: "s.scenario.yaml".into(),
            description: String::new(),
            outcome,
            duration: Duration::from_millis(10),
            nats: String::new(),
            steps: Vec::new(),
            failure: (outcome == Outcome::Failed).then(|| failure.clone()),
            dropped_messages: 0,
            services: Vec::new(),
            failed_attempts: vec![failure; failed_attempts],
        }
    }

    #[test]
    fn a_pass_after_a_failure_is_flaky_in_every_report() {
        let report = SuiteReport {
            scenarios: vec![scenario(Outcome::Passed, 1), scenario(Outcome::Failed, 2)],
            duration: Duration::from_millis(20),
            jobs: 1,
            interrupted: None,
            shard: None,
        };
        assert!(report.scenarios[0].flaky());
        assert!(!report.scenarios[1].flaky());
        assert!(
            report.scenarios[0]
                .summary_line()
                .ends_with("FLAKY: passed on attempt 2 of 2"),
            "{}",
            report.scenarios[0].summary_line()
        );
        assert!(
            report.scenarios[1]
                .summary_line()
                .ends_with("after 3 attempts")
        );
        assert_eq!(report.counts(), "1 passed, 1 failed, 1 flaky");
        let json: serde_json::Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
        assert_eq!(json["totals"]["flaky"], 1);
        assert_eq!(json["totals"]["scenarios"], 2);
        let xml = report.to_junit().unwrap();
        assert!(xml.contains("<flakyFailure"), "{xml}");
        // The failure's message says why, not only where.
        assert!(
            xml.contains(
                "message=\"expect_calls shop.charge at s.scenario.yaml:3:5: expected exactly 2 call(s), found 1\""
            ),
            "{xml}"
        );
    }
}
