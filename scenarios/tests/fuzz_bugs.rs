//! The fuzzer against a gallery of planted bugs of different kinds (a length, a character, a
//! count, a nested sign, a panic on zero, a hang, one enum value, a missing optional field, a
//! fraction), each in an action of its own, with the default number of inputs: each is found,
//! and shrunk to an input that shows the bug and nothing else.

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
