//! The `load` step's DLQ verdict against the emulator's bounds: failed runs evicted beyond
//! `emulator.max_runs` before the load counts their DLQ entries make the count a floor, and a
//! `max_dlq` verdict on a floor is no verdict. Raised above the load's runs, the same load
//! passes with the exact count.

use std::path::Path;

use triggers_emulator::{Backend, NatsConfig};
use triggers_scenarios::{RunOptions, load_str, run_suite};

/// `max_runs` settled runs kept, then a load of twelve runs that all fail into the DLQ.
fn scenario(max_runs: usize) -> String {
    format!(
        r"
name: failing load, max_runs {max_runs}
emulator: {{max_runs: {max_runs}}}
services:
  - name: shop
    actions:
      - name: charge
        retry: {{max_attempts: 1}}
        behavior: {{fail: the card was declined, permanent: true}}
flows:
  - id: pay
    nodes:
      - {{id: in, type: service-in, service: shop, config: {{transport: nats, target: shop.inbound}}}}
      - {{id: charge, type: action, service: shop, action: charge}}
    edges:
      - {{id: e1, from: in, to: charge}}
steps:
  - deploy: pay
  - load:
      flow: pay
      runs: 12
      concurrency: 1
      run_timeout: 20s
      expect: {{max_failed: 12, max_dlq: 100}}
"
    )
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dlq_verdict_on_failed_runs_evicted_before_they_were_counted_is_no_verdict() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let evicting =
        load_str("evicting.scenario.yaml", &scenario(3), here).unwrap_or_else(|e| panic!("{e}"));
    let kept =
        load_str("kept.scenario.yaml", &scenario(100), here).unwrap_or_else(|e| panic!("{e}"));
    let report = run_suite(vec![evicting, kept], 1, &options()).await;
    let (evicting, kept) = (&report.scenarios[0], &report.scenarios[1]);

    assert!(
        !evicting.passed(),
        "a floor of the DLQ count passed max_dlq"
    );
    let text = evicting.failure_text();
    assert!(
        text.contains("could no longer be read") && text.contains("is a floor"),
        "{text}"
    );
    assert!(
        text.contains("emulator.max_runs"),
        "says what to raise: {text}"
    );

    assert!(kept.passed(), "{}", kept.failure_text());
}

#[test]
fn a_bound_of_zero_is_refused_where_it_is_written() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let err = load_str("zero.scenario.yaml", &scenario(0), here)
        .expect_err("max_runs: 0 keeps no settled run")
        .to_string();
    assert!(err.contains("zero.scenario.yaml:3:"), "{err}");
    assert!(err.contains("nonzero"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_of_a_flow_not_deployed_stops_before_any_run() {
    // Found by an audit: every one of the runs was tried and reported "not started".
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = scenario(100)
        .replace("  - deploy: pay\n", "")
        .replace("runs: 12", "runs: 100000");
    let undeployed =
        load_str("undeployed.scenario.yaml", &text, here).unwrap_or_else(|e| panic!("{e}"));
    let report = run_suite(vec![undeployed], 1, &options()).await;
    let failed = &report.scenarios[0];
    assert!(!failed.passed());
    let text = failed.failure_text();
    assert!(text.contains("no flow \"pay\" is deployed"), "{text}");
    assert!(!text.contains("not started"), "{text}");
}
