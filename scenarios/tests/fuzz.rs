//! The schema-driven fuzzer against real services on a real nats-server: a planted bug (an
//! action that fails above a value) is found, shrunk to the boundary and reproduced from its
//! seed; a correct action passes, and dead-letters every input that breaks its schema. Then a
//! gallery of planted bugs of other kinds (a length, a character, a count, a nested sign, a panic
//! on zero, a hang, one enum value, a missing optional field, a fraction), each in an action of
//! its own, with the default number of inputs: each is found, and shrunk to an input that shows
//! the bug and nothing else; and a bug that hangs, whose shrinking stops at its time budget.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use triggers_emulator::Harness;
use triggers_scenarios::fuzz::{FuzzConfig, fuzz};
use triggers_scenarios::model::DEFAULT_FUZZ_RUNS;
use triggers_sdk::runtime::{
    ActionContext, ActionDef, ActionError, RunningService, RuntimeConfig, Service, ServiceBuilder,
};

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

async fn bank(lab: &Harness) -> RunningService {
    let bank = Service::builder("bank", "1.0.0")
        .action(ActionDef::new("charge", charge).max_attempts(1))
        .action(ActionDef::new("refund", refund).max_attempts(1))
        .nats_source("inbound", "bank.inbound");
    start(lab, bank, "bank").await
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

#[derive(Deserialize, JsonSchema)]
struct Text {
    text: String,
}

#[derive(Deserialize, JsonSchema)]
struct Items {
    items: Vec<i64>,
}

#[derive(Deserialize, JsonSchema)]
struct Inner {
    n: i64,
}

#[derive(Deserialize, JsonSchema)]
struct Outer {
    label: String,
    inner: Inner,
}

#[derive(Deserialize, JsonSchema)]
struct Count {
    n: i64,
}

#[derive(Deserialize, JsonSchema)]
struct Flag {
    slow: bool,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Sale,
    Refund,
    Void,
}

#[derive(Deserialize, JsonSchema)]
struct Order {
    kind: Kind,
}

#[derive(Deserialize, JsonSchema)]
struct Optional {
    id: i64,
    note: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct Price {
    price: f64,
}

#[derive(Serialize, JsonSchema)]
struct Done {
    ok: bool,
}

fn done() -> Result<Done, ActionError> {
    Ok(Done { ok: true })
}

fn bug(what: &str) -> Result<Done, ActionError> {
    Err(ActionError::permanent(format!("planted: {what}")))
}

async fn long_text(input: Text, _: ActionContext) -> Result<Done, ActionError> {
    if input.text.chars().count() > 64 {
        return bug("a text over 64 characters");
    }
    done()
}

async fn non_ascii(input: Text, _: ActionContext) -> Result<Done, ActionError> {
    if !input.text.is_ascii() {
        return bug("a character outside ASCII");
    }
    done()
}

async fn many_items(input: Items, _: ActionContext) -> Result<Done, ActionError> {
    if input.items.len() > 3 {
        return bug("more than 3 items");
    }
    done()
}

async fn nested_sign(input: Outer, _: ActionContext) -> Result<Done, ActionError> {
    let _ = input.label;
    if input.inner.n < 0 {
        return bug("a negative inner number");
    }
    done()
}

async fn divide(input: Count, _: ActionContext) -> Result<Done, ActionError> {
    let share = 1000 / input.n; // panics on zero: the planted bug
    let _ = share;
    done()
}

async fn hang(input: Flag, _: ActionContext) -> Result<Done, ActionError> {
    if input.slow {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    done()
}

async fn one_kind(input: Order, _: ActionContext) -> Result<Done, ActionError> {
    match input.kind {
        Kind::Void => bug("void is not handled"),
        Kind::Sale | Kind::Refund => done(),
    }
}

async fn no_note(input: Optional, _: ActionContext) -> Result<Done, ActionError> {
    let _ = input.id;
    match input.note {
        None => bug("a missing note"),
        Some(_) => done(),
    }
}

async fn fraction(input: Price, _: ActionContext) -> Result<Done, ActionError> {
    if input.price.fract() != 0.0 {
        return bug("a price with cents");
    }
    done()
}

/// Each action, what its minimal failing input must satisfy, and what the reason must say.
type Check = fn(&Value) -> bool;
const BUGS: &[(&str, Check, &str)] = &[
    (
        "long_text",
        |v| v["text"].as_str().is_some_and(|s| s.chars().count() == 65),
        "action_failed",
    ),
    (
        "non_ascii",
        |v| {
            v["text"]
                .as_str()
                .is_some_and(|s| s.chars().count() == 1 && !s.is_ascii())
        },
        "action_failed",
    ),
    (
        "many_items",
        |v| {
            v["items"]
                .as_array()
                .is_some_and(|a| a.len() == 4 && a.iter().all(|i| i == &json!(0)))
        },
        "action_failed",
    ),
    (
        "nested_sign",
        |v| v["inner"]["n"] == json!(-1) && v["label"] == json!(""),
        "action_failed",
    ),
    ("divide", |v| v == &json!({"n": 0}), "panic"),
    ("hang", |v| v == &json!({"slow": true}), "timeout"),
    (
        "one_kind",
        |v| v == &json!({"kind": "void"}),
        "action_failed",
    ),
    ("no_note", |v| v == &json!({"id": 0}), "action_failed"),
    (
        "fraction",
        |v| {
            v["price"].as_f64().is_some_and(|f| f.fract() != 0.0)
                && v.as_object().is_some_and(|o| o.len() == 1)
        },
        "action_failed",
    ),
];

/// Starts the service on the lab's server and waits for its registration.
async fn start(lab: &Harness, builder: ServiceBuilder, name: &str) -> RunningService {
    let service = builder
        .config(RuntimeConfig {
            nats_url: Some(lab.url().to_owned()),
            ..RuntimeConfig::default()
        })
        .build()
        .expect("valid service")
        .start()
        .await
        .expect("the service starts");
    lab.wait_for_registration(name).await.expect("registered");
    service
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_planted_bug_is_found_with_the_default_runs_and_shrunk_to_what_shows_it() {
    let lab = Harness::start().await.expect("harness");
    let mut builder = Service::builder("gallery", "1.0.0")
        .action(ActionDef::new("long_text", long_text).max_attempts(1))
        .action(ActionDef::new("non_ascii", non_ascii).max_attempts(1))
        .action(ActionDef::new("many_items", many_items).max_attempts(1))
        .action(ActionDef::new("nested_sign", nested_sign).max_attempts(1))
        .action(ActionDef::new("divide", divide).max_attempts(1))
        .action(
            ActionDef::new("hang", hang)
                .max_attempts(1)
                .timeout(Duration::from_millis(300)),
        )
        .action(ActionDef::new("one_kind", one_kind).max_attempts(1))
        .action(ActionDef::new("no_note", no_note).max_attempts(1))
        .action(ActionDef::new("fraction", fraction).max_attempts(1));
    builder = builder.nats_source("inbound", "gallery.inbound");
    let service = start(&lab, builder, "gallery").await;
    let mut missed = Vec::new();
    for (action, minimal_ok, reason) in BUGS {
        let config = FuzzConfig {
            service: "gallery".into(),
            action: (*action).into(),
            runs: DEFAULT_FUZZ_RUNS,
            seed: 1,
            invalid: false,
            run_timeout: Duration::from_secs(10),
            shrink_time: triggers_scenarios::fuzz::SHRINK_TIME,
        };
        let report = fuzz(&lab, lab.client(), &config)
            .await
            .expect("the campaign runs");
        match &report.failure {
            None => missed.push(format!("{action}: not found ({})", report.describe())),
            Some(f) if !minimal_ok(&f.minimal) || !f.reason.contains(reason) => {
                missed.push(format!("{action}: shrunk to {} ({})", f.minimal, f.reason))
            }
            Some(_) => {}
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
    service.shutdown().await;
}

#[derive(Deserialize, JsonSchema)]
struct Stall {
    stall: bool,
    a: Option<String>,
    b: Option<String>,
    c: Option<String>,
}

/// Never answers when `stall` is set: each smaller input that still stalls costs a whole run
/// timeout.
async fn stall(input: Stall, _: ActionContext) -> Result<Done, ActionError> {
    let _ = (input.a, input.b, input.c);
    if input.stall {
        tokio::time::sleep(Duration::from_secs(120)).await;
    }
    done()
}

/// A bug that hangs is found, and its shrinking stops at its time budget and says so, rather
/// than spending a run timeout on every smaller input for minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrinking_an_input_that_hangs_stops_at_its_time_budget() {
    let lab = Harness::start().await.expect("harness");
    let service = Service::builder("staller", "1.0.0")
        .action(
            ActionDef::new("stall", stall)
                .max_attempts(1)
                .timeout(Duration::from_secs(300)),
        )
        .nats_source("inbound", "staller.inbound");
    let service = start(&lab, service, "staller").await;
    let started = std::time::Instant::now();
    let report = fuzz(
        &lab,
        lab.client(),
        &FuzzConfig {
            service: "staller".into(),
            action: "stall".into(),
            runs: DEFAULT_FUZZ_RUNS,
            seed: 1,
            invalid: false,
            run_timeout: Duration::from_millis(400),
            shrink_time: Duration::from_millis(500),
        },
    )
    .await
    .expect("the campaign runs");
    let failure = report.failure.clone().expect("the hang is found");
    assert!(
        failure.reason.contains("did not settle"),
        "{}",
        failure.reason
    );
    assert_eq!(
        failure.minimal["stall"],
        json!(true),
        "{}",
        report.describe()
    );
    assert!(
        report.describe().contains("shrinking stopped after 500ms"),
        "{}",
        report.describe()
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    drop(service); // its stalled handlers are abandoned with the test
}
