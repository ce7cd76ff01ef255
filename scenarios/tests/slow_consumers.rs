//! A scenario whose emulator dropped messages fails, whatever its steps found: a verdict reached
//! on partial data is not a verdict. The emulator's connection gets a subscription capacity of 1
//! and a flood on `triggers.v2.>`, a round at a time until a drop is counted (no timing).

use std::path::Path;
use std::sync::Arc;

use triggers_emulator::{Backend, Emulator, NatsConfig};
use triggers_scenarios::{Outcome, RunOptions, WatchFn, load_str, run_scenario};

const SCENARIO: &str = "name: flooded\nconformance: off\nsteps:\n  - sleep: 10ms\n";

fn options(capacity: Option<usize>, watch: Option<WatchFn>) -> RunOptions {
    RunOptions {
        nats: NatsConfig {
            backend: Backend::Binary,
            subscription_capacity: capacity,
            ..Default::default()
        },
        watch,
        ..Default::default()
    }
}

/// Floods the scenario's emulator with junk heartbeats from its own connection until it has
/// counted a drop.
fn flood() -> WatchFn {
    Arc::new(|emulator: Emulator| {
        Box::pin(async move {
            let client = emulator.client().clone();
            for _ in 0..500 {
                for i in 0..1_000 {
                    let _ = client
                        .publish("triggers.v2.heartbeat", format!("{{not json {i}").into())
                        .await;
                }
                let _ = client.flush().await;
                tokio::task::yield_now().await;
                if emulator.dropped_messages() > 0 {
                    return;
                }
            }
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scenario_whose_emulator_dropped_messages_fails_naming_the_drops() {
    let scenario = load_str("flooded.yaml", SCENARIO, Path::new(".")).unwrap();
    let report = run_scenario(&scenario, &options(Some(1), Some(flood())), 0, 1).await;
    assert!(report.dropped_messages > 0, "the flood made no drop");
    assert!(
        !report.passed(),
        "it passed with {} drops",
        report.dropped_messages
    );
    let failure = report.failure.as_ref().unwrap();
    assert_eq!(failure.what, "dropped messages");
    assert_eq!(failure.at, "flooded.yaml");
    for says in [
        format!("NATS dropped {} message(s)", report.dropped_messages),
        format!(
            "(slow consumer: {} to the emulator)",
            report.dropped_messages
        ),
        "a verdict reached on partial data is not a verdict".into(),
    ] {
        assert!(
            failure.message.contains(&says),
            "{says:?} not in {}",
            failure.message
        );
    }
    assert!(
        report
            .failure_text()
            .contains("dropped messages (flooded.yaml)")
    );
    // Every step passed: the drops alone fail it.
    assert!(report.steps.iter().all(|s| s.outcome == Outcome::Passed));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["dropped_messages"], report.dropped_messages);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_scenario_without_drops_passes() {
    let scenario = load_str("calm.yaml", SCENARIO, Path::new(".")).unwrap();
    let report = run_scenario(&scenario, &options(None, None), 0, 1).await;
    assert!(report.passed(), "{}", report.failure_text());
    assert_eq!(report.dropped_messages, 0);
}
