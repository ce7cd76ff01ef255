//! The conformance kit against the Rust conformance service (`src/bin/conformance-service.rs`):
//! the correct service scores 100 %, and each behaviour it can get wrong (`CONFORM_BREAK`) fails
//! the matching check and no other.

use std::time::Duration;

use triggers_scenarios::conform::{
    CHECKS, CheckOutcome, ConformError, ConformOptions, ConformReport, conform,
};

fn options(only: &[&str], broken: Option<&str>) -> ConformOptions {
    let mut options = ConformOptions {
        command: vec![env!("CARGO_BIN_EXE_conformance-service").to_owned()],
        timeout: Duration::from_secs(5),
        only: only.iter().map(|s| (*s).to_owned()).collect(),
        ..ConformOptions::default()
    };
    if let Some(check) = broken {
        options.env.insert("CONFORM_BREAK".into(), check.into());
    }
    options
}

async fn judge(options: &ConformOptions) -> ConformReport {
    conform(options, |_| {})
        .await
        .unwrap_or_else(|e| panic!("the kit could not judge: {e}"))
}

fn failed(report: &ConformReport) -> Vec<&str> {
    report
        .checks
        .iter()
        .filter(|c| matches!(c.outcome, CheckOutcome::Failed { .. }))
        .map(|c| c.name)
        .collect()
}

#[tokio::test]
async fn the_rust_conformance_service_scores_100_percent() {
    let report = judge(&options(&[], None)).await;
    assert!(
        report.conformant(),
        "{}\n{}",
        report.table(),
        report.service_output
    );
    assert_eq!(report.checks.len(), CHECKS.len());
    assert_eq!(report.score(), 100.0);
    let junit = report.to_junit().expect("JUnit");
    assert!(junit.contains("conformant"), "{junit}");
    let json: serde_json::Value = serde_json::from_str(&report.to_json().expect("JSON")).unwrap();
    assert_eq!(json["passed"], CHECKS.len());
}

#[tokio::test]
async fn each_broken_behaviour_fails_its_own_check() {
    // (what is broken, the checks run, the checks that must fail)
    let cases: [(&str, &[&str], &[&str]); 9] = [
        ("echo", &["echo"], &["echo"]),
        ("retry", &["retry"], &["retry"]),
        (
            "dlq_action_failed",
            &["dlq_action_failed"],
            &["dlq_action_failed"],
        ),
        (
            "dlq_action_timeout",
            &["dlq_action_timeout"],
            &["dlq_action_timeout"],
        ),
        (
            "dlq_action_panicked",
            &["dlq_action_panicked"],
            &["dlq_action_panicked"],
        ),
        (
            "dlq_invalid_input",
            &["dlq_invalid_input"],
            &["dlq_invalid_input"],
        ),
        ("lookup", &["lookup"], &["lookup"]),
        ("register", &["echo"], &["register"]),
        ("shutdown", &["shutdown"], &["shutdown"]),
    ];
    // Protocol behaviours the SDK gets right by construction, broken through its
    // conformance-breaks hook: each fails its own check.
    let protocol = [
        "mapping_condition",
        "timer_rejected",
        "hop_traceparent",
        "traceparent_invalid",
        "hop_keys",
        "retry_backoff",
        "unknown_flow_wait",
        "heartbeat_interval",
        "crash_redelivery",
        "ack_order",
        "ack_lost",
        "broadcast_before_reply",
        "consumer",
        "dlq_order",
        "handoff_order",
        "hop_jetstream",
        "redeploy_mid_run",
        "replicas",
        "timer_strip",
        "server_restart",
    ];
    let cases = cases.into_iter().chain(protocol.iter().map(|c| {
        let one: &[&str] = std::slice::from_ref(c);
        (*c, one, one)
    }));
    for (broken, only, fails) in cases {
        let report = judge(&options(only, Some(broken))).await;
        assert_eq!(
            failed(&report),
            fails,
            "CONFORM_BREAK={broken}:\n{}",
            report.table()
        );
        assert!(!report.conformant());
    }
}

#[tokio::test]
async fn a_command_that_cannot_start_is_an_error_not_a_verdict() {
    let options = ConformOptions {
        command: vec!["/nonexistent/conformance-service".into()],
        ..ConformOptions::default()
    };
    let err = conform(&options, |_| {})
        .await
        .expect_err("no such program");
    assert!(
        err.to_string().contains("/nonexistent/conformance-service"),
        "{err}"
    );
    let unknown = ConformOptions {
        command: vec!["true".into()],
        only: vec!["no_such_check".into()],
        ..ConformOptions::default()
    };
    let err = conform(&unknown, |_| {}).await.expect_err("unknown check");
    assert!(err.to_string().contains("--list"), "{err}");
}

#[tokio::test]
async fn a_timeout_shorter_than_the_protocols_own_waits_is_refused() {
    for timeout in [Duration::ZERO, Duration::from_secs(2)] {
        let options = ConformOptions {
            command: vec!["true".into()],
            timeout,
            ..ConformOptions::default()
        };
        let err = conform(&options, |_| {})
            .await
            .expect_err("too short a timeout");
        assert!(matches!(err, ConformError::TimeoutTooShort(_)), "{err}");
        assert!(err.to_string().contains("--timeout 3s or more"), "{err}");
    }
}

#[tokio::test]
async fn a_service_that_exits_is_not_waited_for() {
    // A service that dies at once: every check ends as soon as the process is gone, not after
    // its patience (60 s here; the bound below is half of it, so a slow machine cannot fail it).
    let options = ConformOptions {
        command: vec![
            "sh".into(),
            "-c".into(),
            "echo dying on purpose; exit 3".into(),
        ],
        timeout: Duration::from_secs(60),
        only: vec!["echo".into()],
        ..ConformOptions::default()
    };
    let report = conform(&options, |_| {}).await.expect("judged");
    assert_eq!(failed(&report), ["register"], "{}", report.table());
    let register = &report.checks[0];
    assert!(register.millis < 30_000, "{}", report.table());
    assert!(
        report.table().contains("exited"),
        "the failure says the service exited:\n{}",
        report.table()
    );
    assert!(report.service_output.contains("dying on purpose"));
}

#[tokio::test]
async fn the_service_output_is_kept_when_every_check_passes() {
    // `-v` prints it: the report keeps it whether or not a check failed.
    let mut options = options(&["echo"], None);
    let bin = options.command[0].clone();
    options.command = vec![
        "sh".into(),
        "-c".into(),
        format!("echo hello-from-the-service; exec {bin}"),
    ];
    let report = judge(&options).await;
    assert!(report.conformant(), "{}", report.table());
    assert!(
        report.service_output.contains("hello-from-the-service"),
        "{}",
        report.service_output
    );
}

#[tokio::test]
async fn a_service_that_never_registers_fails_register_and_nothing_else_is_judged() {
    let options = ConformOptions {
        command: vec!["sleep".into(), "30".into()],
        timeout: Duration::from_secs(3),
        ..ConformOptions::default()
    };
    let report = conform(&options, |_| {}).await.expect("judged");
    assert_eq!(failed(&report), ["register"]);
    assert_eq!(report.not_applicable(), CHECKS.len() - 1);
    assert_eq!(report.score(), 0.0);
}

/// The Python conformance service (examples/conformance-python), written from the docs alone.
fn python(only: &[&str], broken: Option<&str>) -> ConformOptions {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let has_nats_py = std::process::Command::new("python3")
        .args(["-c", "import nats"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_nats_py,
        "python3 with nats-py is needed: pip install -r examples/conformance-python/requirements.txt (scripts/test does it)"
    );
    let mut options = options(only, broken);
    options.command = vec![
        "python3".into(),
        root.join("examples/conformance-python/service.py")
            .to_string_lossy()
            .into_owned(),
    ];
    options
}

#[tokio::test]
async fn the_python_conformance_service_scores_100_percent() {
    let report = judge(&python(&[], None)).await;
    assert!(
        report.conformant(),
        "{}\n{}",
        report.table(),
        report.service_output
    );
    assert_eq!(report.score(), 100.0);
}

#[tokio::test]
async fn the_python_service_doing_what_the_docs_allow_otherwise_still_scores_100_percent() {
    // No false failures (issue 31): actions and supports_nodes in another order, no in-progress
    // acks, a 3 s wait for a broadcast, times at +02:00, exit status 143 after SIGTERM.
    let mut options = python(&[], None);
    options
        .env
        .insert("CONFORM_VARIANT".into(), "allowed".into());
    let report = judge(&options).await;
    assert!(
        report.conformant(),
        "{}\n{}",
        report.table(),
        report.service_output
    );
}

/// Checks that read what the emulator's checker observes of acks, consumers and ordering
/// (issue 31, item 2), and the rule each reads: until a rule is in the checker, its check
/// passes every service, so the Python service's break of it cannot be caught yet.
const READS_A_RULE: &[(&str, &str)] = &[
    ("consumer", "consumer_config"),
    ("ack_order", "ack_before_reports"),
    ("dlq_order", "dlq_before_failed_event"),
    ("handoff_order", "handed_on_before_event"),
    ("hop_jetstream", "hop_not_jetstream"),
];

/// Whether the checker lacks the rule `check` reads.
fn awaiting_the_checker(check: &str) -> bool {
    READS_A_RULE.iter().any(|(c, rule)| {
        *c == check
            && !triggers_emulator::conformance::RULES
                .iter()
                .any(|(code, _, _)| code == rule)
    })
}

#[tokio::test]
async fn each_broken_python_behaviour_fails_its_own_check() {
    for (check, _) in CHECKS {
        if awaiting_the_checker(check) {
            continue;
        }
        let only: Vec<&str> = if *check == "register" {
            vec!["echo"]
        } else {
            vec![check]
        };
        let report = judge(&python(&only, Some(check))).await;
        assert_eq!(
            failed(&report),
            [*check],
            "CONFORM_BREAK={check}:\n{}",
            report.table()
        );
    }
}

#[test]
fn the_table_marks_a_check_that_failed_only_under_strict() {
    use triggers_scenarios::conform::CheckResult;
    let report = ConformReport {
        command: vec!["svc".into()],
        checks: vec![CheckResult {
            name: "conformant",
            about: "the conformance checker found no error in anything sent",
            outcome: CheckOutcome::Failed {
                expected: "no conformance warning either".into(),
                arrived: "1 warning(s)".into(),
            },
            millis: 1,
            strict_only: true,
        }],
        warnings: vec!["time_padded: padded".into()],
        service_output: String::new(),
        strict: true,
    };
    assert!(
        report.table().contains("(fails only under --strict)"),
        "{}",
        report.table()
    );
    assert!(!report.conformant());
    let json = report.to_json().expect("JSON");
    assert!(json.contains("\"strict_only\": true"), "{json}");
}

/// The failure of `check` when the service breaks it, as the table shows it.
async fn failure_of(options: &ConformOptions, check: &str) -> String {
    let report = judge(options).await;
    let found = report.checks.iter().find(|c| c.name == check);
    match found.map(|c| &c.outcome) {
        Some(CheckOutcome::Failed { expected, arrived }) => format!("{expected} / {arrived}"),
        _ => panic!("{check} did not fail:\n{}", report.table()),
    }
}

#[tokio::test]
async fn a_false_condition_reported_succeeded_and_a_forged_timer_run_are_named() {
    // The Rust service's SDK breaks these through its conformance-breaks hook.
    let text = failure_of(
        &options(&["mapping_condition"], Some("mapping_condition")),
        "mapping_condition",
    )
    .await;
    assert!(
        text.contains("a false condition is reported `skipped`") && text.contains("succeeded"),
        "{text}"
    );
    let text = failure_of(
        &options(&["timer_rejected"], Some("timer_rejected")),
        "timer_rejected",
    )
    .await;
    assert!(
        text.contains("echo ran on a delivery whose payload hash did not match"),
        "{text}"
    );
}

#[test]
fn the_docs_list_every_check_and_the_readme_counts_them() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let read = |path: &str| std::fs::read_to_string(root.join(path)).expect(path);
    let page = read("docs/conform.md");
    for (name, about) in CHECKS {
        assert!(
            page.contains(&format!("| `{name}` | {about} |")),
            "docs/conform.md's table of what each check proves lacks `{name}` ({about})"
        );
    }
    let count = CHECKS.len();
    assert!(
        page.contains(&format!("({count} checks)")),
        "docs/conform.md's sample run says another count than {count}"
    );
    assert!(
        read("README.md").contains(&format!("runs {count} checks")),
        "README.md says another count than {count}"
    );
}
