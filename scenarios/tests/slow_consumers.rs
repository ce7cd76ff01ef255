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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scenario_whose_emulator_lost_its_connection_fails_unless_a_step_did_it() {
    // The server cutting the emulator off (a flood past max_pending), made here by a proxy that
    // breaks the connection while the scenario sleeps: the emulator reconnects, but what was
    // published meanwhile never reached it.
    let server = triggers_emulator::NatsServer::start(NatsConfig {
        backend: Backend::Binary,
        ..Default::default()
    })
    .await
    .unwrap();
    let proxy = Arc::new(natsbox::FaultProxy::start(server.url()).await.unwrap());
    let cut = proxy.clone();
    let watch: WatchFn = Arc::new(move |emulator: Emulator| {
        let cut = cut.clone();
        Box::pin(async move {
            cut.cut();
            while emulator.connection_losses() == 0 {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
    });
    let options = RunOptions {
        nats: NatsConfig {
            backend: Backend::External,
            url: Some(proxy.url().to_owned()),
            ..Default::default()
        },
        watch: Some(watch),
        ..Default::default()
    };
    let text = "name: cut off\nconformance: off\nsteps:\n  - sleep: 2s\n";
    let scenario = load_str("cut.yaml", text, Path::new(".")).unwrap();
    let report = run_scenario(&scenario, &options, 0, 1).await;
    assert!(!report.passed(), "it passed though the connection was lost");
    let failure = report.failure.as_ref().unwrap();
    assert!(
        failure
            .message
            .contains("the emulator's connection to NATS was lost"),
        "{}",
        failure.message
    );
    assert!(report.steps.iter().all(|s| s.outcome == Outcome::Passed));
}
