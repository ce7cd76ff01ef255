//! The shipped scenarios (`scenarios/flow-lab/`) through the library, on real nats-servers: every
//! one passes, and each would fail if the behaviour it checks broke: with an expectation changed,
//! it fails and its message names what arrived instead.

use std::path::{Path, PathBuf};
use std::time::Duration;

use triggers_emulator::{Backend, NatsConfig};
use triggers_scenarios::model::{Short, Step};
use triggers_scenarios::{RunOptions, Scenario, ScenarioReport, load_file, load_str, run_suite};

fn shipped_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("flow-lab")
}

fn options() -> RunOptions {
    RunOptions {
        nats: NatsConfig {
            backend: Backend::Binary,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn shipped(file: &str) -> Scenario {
    load_file(&shipped_dir().join(file)).unwrap_or_else(|e| panic!("{e}"))
}

/// A shipped scenario's text with `from` replaced by `to` (which must occur), loaded as if it
/// were the shipped file, with short waits so that a failure comes quickly.
fn edited(file: &str, from: &str, to: &str) -> Scenario {
    let path = shipped_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{file} has no {from:?}");
    let mut s = load_str(
        &path.display().to_string(),
        &text.replacen(from, to, 1),
        &shipped_dir(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    s.step_timeout = Duration::from_secs(3);
    s
}

async fn run_one(scenario: Scenario) -> ScenarioReport {
    let mut report = run_suite(vec![scenario], 1, &options()).await;
    report.scenarios.remove(0)
}

fn failure(report: &ScenarioReport) -> String {
    assert!(
        !report.passed(),
        "{} passed, but its expectation was broken",
        report.name
    );
    report.failure.as_ref().unwrap().message.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shipped_scenario_passes() {
    let scenarios = triggers_scenarios::load_all(&[shipped_dir()])
        .unwrap_or_else(|errors| panic!("{}", errors[0]));
    assert!(scenarios.len() >= 12, "{} scenarios", scenarios.len());
    let report = run_suite(scenarios, 2, &options()).await;
    let failed: Vec<String> = report
        .scenarios
        .iter()
        .filter(|s| !s.passed())
        .map(|s| format!("{}\n{}", s.summary_line(), s.failure_text()))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_then_dlq_fails_when_the_dlq_kind_is_not_the_one_expected() {
    // Broken in the parsed model: the DLQ entry must now be an action_timeout.
    let mut s = shipped("retries-then-dlq.scenario.yaml");
    s.step_timeout = Duration::from_secs(2);
    let step = s
        .steps
        .iter_mut()
        .find_map(|st| match &mut st.step {
            Step::ExpectDlq(d) => Some(d),
            _ => None,
        })
        .unwrap();
    step.kind = Some("action_timeout".into());
    let report = run_one(s).await;
    let message = failure(&report);
    assert!(message.contains("of kind action_timeout"), "{message}");
    // What arrived instead, and how it differs.
    assert!(
        message.contains("kind=action_failed")
            && message.contains("kind is action_failed, not action_timeout"),
        "{message}"
    );
    assert!(
        message.contains("carrier refused (attempt 3 of 3)"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_target_mismatch_scenario_fails_when_another_code_is_expected() {
    let s = edited(
        "durable-timer-target-mismatch.scenario.yaml",
        "expect_error: durable_timer_target_mismatch",
        "expect_error: durable_timer_capability_missing",
    );
    let report = run_suite(vec![s], 1, &options()).await;
    let r = &report.scenarios[0];
    let message = failure(r);
    assert_eq!(r.failure.as_ref().unwrap().step, Some(1));
    assert!(
        message.contains("expected the release of mistargeted to be refused with durable_timer_capability_missing"),
        "{message}"
    );
    assert!(
        message.contains("durable_timer_target_mismatch"),
        "what arrived: {message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_dedup_fails_when_two_copies_are_expected() {
    let s = edited(
        "dlq-dedup.scenario.yaml",
        "body: {amount: 3}\n      count: 1",
        "body: {amount: 3}\n      count: 2",
    );
    let report = run_one(s).await;
    let message = failure(&report);
    assert!(message.contains("exactly 2 DLQ entries"), "{message}");
    assert!(message.contains("in vain"), "{message}");
    assert!(
        message.contains("(matches)"),
        "the one that arrived: {message}"
    );
    assert!(
        message.contains("msg_id=run-dedup:in:dlq:1767225600000000000"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_durable_timer_scenario_fails_when_the_run_is_expected_to_fire_early() {
    // Broken in the model: after 23h59m the run must have settled (the timer fired early).
    let mut s = shipped("durable-timer.scenario.yaml");
    s.step_timeout = Duration::from_secs(2);
    let idle = s
        .steps
        .iter_mut()
        .filter_map(|st| match &mut st.step {
            Step::WaitIdle(Short(w)) => Some(w),
            _ => None,
        })
        .nth(1)
        .unwrap();
    idle.status = Some("succeeded".into());
    let report = run_one(s).await;
    let message = failure(&report);
    assert!(
        message.contains("expected run r1 to be succeeded; it is waiting"),
        "{message}"
    );
    assert!(message.contains("timer wait armed, due"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_scenario_fails_when_a_header_differs() {
    let s = edited(
        "http-output.scenario.yaml",
        "X-Triggers-Source-Node-Id: hook",
        "X-Triggers-Source-Node-Id: create",
    );
    let report = run_one(s).await;
    let message = failure(&report);
    assert!(
        message.contains("x-triggers-source-node-id: create"),
        "{message}"
    );
    // The request that did arrive, with its headers.
    assert!(
        message.contains("x-triggers-source-node-id: hook"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_step_says_what_it_waited_for_and_what_it_saw() {
    let text = r#"
name: slow work
step_timeout: 700ms
services:
  - name: slow
    actions:
      - {name: work, timeout: 30s, behavior: {sleep: 20s, return: {done: true}}}
flows:
  - id: job
    nodes:
      - {id: in, type: service-in, service: slow}
      - {id: work, type: action, service: slow, action: work}
    edges: [{id: e1, from: in, to: work}]
steps:
  - deploy: job
  - trigger: {flow: job, as: r1}
  - wait_node: {run: r1, node: work}
  - wait_settled: r1
"#;
    let s = load_str("slow.yaml", text, Path::new(".")).unwrap();
    let report = run_one(s).await;
    let f = report.failure.as_ref().unwrap();
    assert_eq!(f.step, Some(3));
    assert_eq!(f.at, "slow.yaml:17:5");
    let m = &f.message;
    assert!(m.starts_with("waited 700ms"), "{m}");
    assert!(
        m.contains("for node work of run r1 to finish succeeded, in vain"),
        "{m}"
    );
    assert!(m.contains("run r1 (run-"), "{m}");
    assert!(m.contains("is running"), "{m}");
    assert!(m.contains("in (service-in on engine): triggered"), "{m}");
    assert!(m.contains("pending: work"), "{m}");
    // The steps after it are reported, as skipped.
    assert_eq!(
        report.steps[3].outcome,
        triggers_scenarios::Outcome::Skipped
    );
    assert!(
        report.duration < Duration::from_secs(15),
        "the service was stopped without waiting for the 20 s action: {:?}",
        report.duration
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junit_and_json_reports_are_well_formed() {
    let pass = r#"
name: "passes <&> \"quoted\""
steps:
  - register:
      manifest:
        protocol_version: 1.0.0
        service: shop
        service_version: 1.0.0
        actions: []
        service_sources: [{name: nats, transport: nats, default: shop.inbound}]
        supports_nodes: []
  - expect_registration: {service: shop}
"#;
    let fail = r#"
name: fails
step_timeout: 300ms
steps:
  - expect_registration: {service: "nobody <here>"}
"#;
    let scenarios = vec![
        load_str("pass.yaml", pass, Path::new(".")).unwrap(),
        load_str("fail.yaml", fail, Path::new(".")).unwrap(),
    ];
    let report = run_suite(scenarios, 2, &options()).await;
    assert_eq!((report.passed(), report.failed()), (1, 1));

    let xml = report.to_junit().unwrap();
    let parsed = quick_junit::Report::deserialize_from_str(&xml)
        .unwrap_or_else(|e| panic!("not well-formed JUnit: {e}\n{xml}"));
    assert_eq!(parsed.tests, 2);
    assert_eq!(parsed.failures, 1);
    let cases = &parsed.test_suites[0].test_cases;
    assert_eq!(cases[0].name.as_str(), "passes <&> \"quoted\"");
    assert_eq!(cases[1].classname.as_deref(), Some("fail.yaml"));
    match &cases[1].status {
        quick_junit::TestCaseStatus::NonSuccess { description, .. } => {
            let d = description.as_deref().unwrap_or_default();
            assert!(
                d.contains("a registration of \"nobody <here>\" accepted"),
                "{d}"
            );
        }
        other => panic!("{other:?}"),
    }

    let json: serde_json::Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
    assert_eq!(json["jobs"], 2);
    assert_eq!(json["scenarios"][0]["outcome"], "passed");
    assert_eq!(json["scenarios"][1]["outcome"], "failed");
    assert_eq!(json["scenarios"][1]["failure"]["step"], 1);
    assert_eq!(json["scenarios"][1]["failure"]["at"], "fail.yaml:5:5");
    assert_eq!(json["scenarios"][0]["steps"][1]["outcome"], "passed");
    assert!(json["scenarios"][0]["duration_ms"].as_f64().unwrap() > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_scenario_fails_when_fewer_failures_are_allowed_and_names_them() {
    let s = edited(
        "load.scenario.yaml",
        "expect: {max_failed: 5, max_dlq: 5}",
        "expect: {max_failed: 4, max_dlq: 5}",
    );
    let report = run_one(s).await;
    let message = failure(&report);
    assert!(
        message.contains("5 runs failed, at most 4 may"),
        "{message}"
    );
    // The report comes with it: the failing node and the runs that failed, by number.
    assert!(message.contains("node reserve"), "{message}");
    assert!(message.contains("5 failed"), "{message}");
    assert!(
        message.contains("run #9 ") && message.contains("the warehouse is unreachable"),
        "{message}"
    );
    assert!(message.contains("5 DLQ entries"), "{message}");
}
