//! The schema-driven fuzzer against real services on a real nats-server: a planted bug (an
//! action that fails above a value) is found, shrunk to the boundary and reproduced from its
//! seed; a correct action passes, and dead-letters every input that breaks its schema.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use triggers_emulator::Harness;
use triggers_scenarios::fuzz::{FuzzConfig, fuzz};
use triggers_sdk::runtime::{ActionContext, ActionDef, ActionError, RuntimeConfig, Service};

#[derive(Deserialize, JsonSchema)]
struct Charge {
    amount: i64,
    currency: Option<String>,
}

#[derive(Serialize, JsonSchema)]
struct Charged {
    charged: i64,
}

/// Correct for every amount up to a million; above, it fails: the planted bug.
async fn charge(input: Charge, _ctx: ActionContext) -> Result<Charged, ActionError> {
    if input.amount > 1_000_000 {
        return Err(ActionError::permanent("amount overflow in the ledger"));
    }
    Ok(Charged {
        charged: input.amount,
    })
}

/// Correct for every input its schema allows.
async fn refund(input: Charge, _ctx: ActionContext) -> Result<Charged, ActionError> {
    let _ = input.currency;
    Ok(Charged {
        charged: input.amount.saturating_neg(),
    })
}

async fn bank(lab: &Harness) -> triggers_sdk::runtime::RunningService {
    Service::builder("bank", "1.0.0")
        .action(ActionDef::new("charge", charge).max_attempts(1))
        .action(ActionDef::new("refund", refund).max_attempts(1))
        .nats_source("inbound", "bank.inbound")
        .config(RuntimeConfig {
            nats_url: Some(lab.url().to_owned()),
            ..RuntimeConfig::default()
        })
        .build()
        .expect("valid service")
        .start()
        .await
        .expect("bank starts")
}

fn config(action: &str, runs: u32, seed: u64, invalid: bool) -> FuzzConfig {
    FuzzConfig {
        service: "bank".into(),
        action: action.into(),
        runs,
        seed,
        invalid,
        run_timeout: Duration::from_secs(10),
        shrink_time: triggers_scenarios::fuzz::SHRINK_TIME,
    }
}

#[tokio::test]
async fn a_planted_bug_is_found_shrunk_to_its_boundary_and_reproduced_from_the_seed() {
    let lab = Harness::start().await.expect("harness");
    let service = bank(&lab).await;
    lab.wait_for_registration("bank").await.expect("registered");
    let report = fuzz(&lab, lab.client(), &config("charge", 100, 7, false))
        .await
        .expect("the campaign runs");
    let failure = report.failure.clone().expect("the bug is found");
    assert_eq!(
        failure.minimal,
        serde_json::json!({"amount": 1_000_001}),
        "{}",
        report.describe()
    );
    assert!(
        failure.reason.contains("action_failed"),
        "{}",
        failure.reason
    );
    assert!(
        report.describe().contains("seed 7"),
        "{}",
        report.describe()
    );
    // The same seed finds the same input at the same run.
    let again = fuzz(&lab, lab.client(), &config("charge", 100, 7, false))
        .await
        .expect("the campaign runs");
    let again = again.failure.expect("found again");
    assert_eq!(again.original, failure.original);
    assert_eq!(again.run, failure.run);
    service.shutdown().await;
}

#[tokio::test]
async fn a_correct_action_passes_and_dead_letters_what_breaks_its_schema() {
    let lab = Harness::start().await.expect("harness");
    let service = bank(&lab).await;
    lab.wait_for_registration("bank").await.expect("registered");
    let report = fuzz(&lab, lab.client(), &config("refund", 60, 11, true))
        .await
        .expect("the campaign runs");
    assert!(report.failure.is_none(), "{}", report.describe());
    assert_eq!(report.runs, 60);
    assert!(report.invalid_runs >= 10, "{}", report.invalid_runs);
    // An unknown action is an error, not a verdict.
    let err = fuzz(&lab, lab.client(), &config("nope", 1, 1, false))
        .await
        .expect_err("no such action");
    assert!(err.contains("charge"), "{err}");
    service.shutdown().await;
}

/// A scripted stand-in enforces the input schema it declares, as a typed action does: the step
/// with `invalid: true` passes against it (every input that breaks the schema dead-lettered as
/// `invalid_input`, the behaviour never called with one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_service_dead_letters_inputs_that_break_its_declared_schema() {
    let text = r#"
name: scripted fuzz
services:
  - name: till
    actions:
      - name: charge
        input:
          type: object
          properties:
            amount: {type: integer, minimum: 1, maximum: 1000}
            note: {type: string, maxLength: 8}
          required: [amount]
        behavior:
          return: {charged: true}
steps:
  - expect_registration: {service: till}
  - fuzz: {service: till, action: charge, runs: 40, seed: 3, invalid: true}
"#;
    let scenario =
        triggers_scenarios::load_str("scripted-fuzz.yaml", text, std::path::Path::new("."))
            .unwrap_or_else(|e| panic!("{e}"));
    let report = triggers_scenarios::run_suite(
        vec![scenario],
        1,
        &triggers_scenarios::RunOptions::default(),
    )
    .await;
    let s = &report.scenarios[0];
    assert!(s.passed(), "{}\n{}", s.summary_line(), s.failure_text());
    let detail = &s.steps[1].detail;
    assert!(
        detail.contains("breaking the schema on purpose"),
        "{detail}"
    );
    assert!(detail.contains("no failure"), "{detail}");
}
