//! Flow coverage on a real nats-server: a flow with two conditions after one action, of which only
//! one lets the payload through, run by scripted services; the JSON names the branch that ran,
//! the one that never did, the edge never taken, and how each condition went. A second scenario
//! deploying the same flow version is merged into the same entry.

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use triggers_emulator::{Backend, NatsConfig};
use triggers_scenarios::coverage::Coverage;
use triggers_scenarios::{RunOptions, load_str, run_suite};

const SCENARIO: &str = r"
name: two branches, one taken
services:
  - name: shop
    actions:
      - {name: charge, behavior: {echo: true}}
      - {name: ship, behavior: {echo: true}}
      - {name: remind, behavior: {echo: true}}
flows:
  - id: order
    version: 2
    nodes:
      - {id: in, type: service-in, service: shop, config: {transport: nats, target: shop.inbound}}
      - {id: charge, type: action, service: shop, action: charge}
      - {id: paid, type: condition, config: {path: $.paid, op: eq, value: true}}
      - {id: unpaid, type: condition, config: {path: $.paid, op: eq, value: false}}
      - {id: ship, type: action, service: shop, action: ship}
      - {id: remind, type: action, service: shop, action: remind}
    edges:
      - {id: e1, from: in, to: charge}
      - {id: e2, from: charge, to: paid}
      - {id: e3, from: charge, to: unpaid}
      - {id: e4, from: paid, to: ship}
      - {id: e5, from: unpaid, to: remind}
steps:
  - deploy: order
  - trigger: {flow: order, payload: {order_id: o-1, paid: true}, as: r1}
  - wait_settled: r1
  - expect_calls: {service: shop, action: ship, run: r1, count: 1}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_branch_that_ran_is_covered_and_conditions_say_how_they_went() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let load = |name: &str| {
        let mut s =
            load_str("coverage.scenario.yaml", SCENARIO, here).unwrap_or_else(|e| panic!("{e}"));
        s.name = name.into();
        s
    };
    let coverage = Arc::new(Mutex::new(Coverage::new()));
    let options = RunOptions {
        nats: NatsConfig {
            backend: Backend::Binary,
            ..Default::default()
        },
        coverage: Some(coverage.clone()),
        ..Default::default()
    };
    let report = run_suite(vec![load("first"), load("second")], 1, &options).await;
    for s in &report.scenarios {
        assert!(s.passed(), "{}", s.failure_text());
    }
    let coverage = coverage.lock().unwrap().clone();
    let json: Value = serde_json::from_str(&coverage.to_json().unwrap()).unwrap();
    assert_eq!(json["format"], 1);
    let flows = json["flows"].as_array().unwrap();
    assert_eq!(
        flows.len(),
        1,
        "the same flow id and version is merged: {json:#}"
    );
    let flow = &flows[0];
    assert_eq!(
        (flow["flow_id"].clone(), flow["version"].clone()),
        (json!("order"), json!(2))
    );
    assert_eq!(flow["runs"], 2, "one run in each scenario");
    let node = |id: &str| {
        flow["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == id)
            .unwrap_or_else(|| panic!("no node {id} in {flow:#}"))
            .clone()
    };
    for ran in ["in", "charge", "paid", "unpaid", "ship"] {
        assert_eq!(node(ran)["runs"], 2, "{ran} ran in both runs: {flow:#}");
    }
    assert_eq!(node("remind")["runs"], 0, "{flow:#}");
    assert_eq!(node("ship")["outcomes"]["succeeded"], 2);
    assert_eq!(node("ship")["outcomes"]["failed"], 0);
    assert_eq!(
        node("paid")["condition"],
        json!({"passed": 2, "stopped": 0})
    );
    assert_eq!(
        node("unpaid")["condition"],
        json!({"passed": 0, "stopped": 2})
    );
    assert_eq!(node("unpaid")["outcomes"]["skipped"], 2);
    assert!(node("ship").get("condition").is_none());
    let taken: Vec<(String, u64)> = flow["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_owned(),
                e["taken"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        taken,
        [("e1", 2), ("e2", 2), ("e3", 2), ("e4", 2), ("e5", 0)]
            .map(|(id, n)| (id.to_owned(), n))
            .to_vec()
    );
    assert_eq!(
        (flow["nodes_covered"].clone(), flow["nodes_total"].clone()),
        (json!(5), json!(6))
    );
    assert_eq!(
        (flow["edges_covered"].clone(), flow["edges_total"].clone()),
        (json!(4), json!(5))
    );
    let f = coverage.flow("order", 2).unwrap();
    assert_eq!(
        f.summary_line(),
        "order v2: nodes 5/6, edges 4/5 (2 runs); never ran: remind; edges never taken: unpaid->remind"
    );
    let md = coverage.to_markdown();
    assert!(
        md.contains("| `order` | 2 | 2 | 5/6 (83 %) | 4/5 (80 %) | `remind` | `unpaid->remind` |"),
        "{md}"
    );
    assert!(
        md.contains("| `order v2` | `unpaid` | 0 | 2 | **no** |"),
        "{md}"
    );
}

/// Outcomes that only the DLQ tells apart: a timed-out and a panicked action (the shipped
/// `timeouts-and-panics` scenario), each also a `failed` event and a dead-lettered input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_panics_are_told_apart_by_their_dlq_entries() {
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("flow-lab/timeouts-and-panics.scenario.yaml");
    let scenario = triggers_scenarios::load_file(&file).unwrap_or_else(|e| panic!("{e}"));
    let coverage = Arc::new(Mutex::new(Coverage::new()));
    let options = RunOptions {
        nats: NatsConfig {
            backend: Backend::Binary,
            ..Default::default()
        },
        coverage: Some(coverage.clone()),
        ..Default::default()
    };
    let report = run_suite(vec![scenario], 1, &options).await;
    assert!(
        report.scenarios[0].passed(),
        "{}",
        report.scenarios[0].failure_text()
    );
    let coverage = coverage.lock().unwrap().clone();
    let step = |flow: &str| {
        coverage
            .flow(flow, 1)
            .and_then(|f| f.nodes.iter().find(|n| n.id == "step"))
            .unwrap_or_else(|| panic!("no {flow}.step in {coverage:#?}"))
            .outcomes
    };
    let slow = step("slow");
    assert_eq!(
        (
            slow.retrying,
            slow.failed,
            slow.timed_out,
            slow.panicked,
            slow.dead_lettered
        ),
        (1, 1, 1, 0, 1),
        "{slow:?}"
    );
    let boom = step("boom");
    assert_eq!(
        (
            boom.failed,
            boom.timed_out,
            boom.panicked,
            boom.dead_lettered
        ),
        (1, 0, 1, 1),
        "{boom:?}"
    );
    let fine = step("fine");
    assert_eq!((fine.succeeded, fine.failed, fine.dead_lettered), (1, 0, 0));
    for f in &coverage.flows {
        assert_eq!(
            (f.nodes_covered, f.edges_covered),
            (2, 1),
            "{}",
            f.summary_line()
        );
    }
}
