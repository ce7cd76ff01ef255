//! The property test over flow shapes, CI-sized: random valid flows (chains, branches, joins,
//! conditions, mappings, hops, timers with repeats, two to four services, two replicas each) run
//! against the emulator with SDK services; every run must settle with the status the oracle
//! gives, every node must have run exactly as many times as it was reached, and nothing distinct
//! may have been deduplicated. The large run is `cargo run --release -p triggers-integration
//! --example flow_shapes` (figures in docs/benchmarks.md).

use triggers_integration::lab_with;
use triggers_integration::shapes::{self, Tally};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_flows_run_every_node_exactly_as_often_as_it_is_reached() {
    let seed = std::env::var("TRIGGERS_SHAPES_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_130);
    let lab = lab_with(shapes::emulator_config()).await;
    let services = shapes::start_services(&lab, 2).await;
    let mut rng = shapes::rng(seed);
    let flows: Vec<_> = (0..24)
        .map(|i| {
            let width = 2 + i % 3;
            shapes::generate(&mut rng, &format!("shape-{i}"), width)
        })
        .collect();
    let mut tally = Tally::default();
    shapes::run_batch(&lab, &flows, &mut tally).await;
    assert!(
        tally.problems.is_empty(),
        "seed {seed} (TRIGGERS_SHAPES_SEED={seed} reproduces it):\n{}",
        tally.problems.join("\n")
    );
    assert_eq!(tally.runs, 48);
    // The order rules (acks, events before hops and DLQ entries) judged on everything sent.
    assert!(lab.sync_wire_tap().await, "the wire tap catches up");
    assert!(tally.executions > 48, "{tally:?}");
    for rule in [
        "idempotency_key_reused",
        "delivery_deduplicated",
        "completion_unexpected",
    ] {
        assert!(
            lab.violations().iter().all(|v| v.rule != rule),
            "{rule}: {:?}",
            lab.violations()
        );
    }
    lab.assert_no_conformance_errors();
    drop(services);
}
