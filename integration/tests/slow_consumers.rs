//! The SDK runtime as a slow consumer on purpose: a subscription capacity of 1 and a flood of
//! broadcasts it cannot keep up with. NATS drops what does not fit; the runtime counts it
//! (`RunningService::dropped_messages`) and keeps serving. No timing: the flood goes on a round
//! at a time until a drop is counted. Out-of-range settings fail `start()` naming them.

use std::time::Duration;

use serde_json::{Value, json};
use triggers_integration::{config, lab, one_step};
use triggers_sdk::error::StartError;
use triggers_sdk::runtime::{ActionDef, ActionError, RuntimeConfig, Service};
use triggers_sdk::wire::subject;

fn echo() -> triggers_sdk::runtime::ServiceBuilder {
    Service::builder("shop", "1.0.0")
        .action(ActionDef::dynamic(
            "charge",
            &json!({}),
            &json!({}),
            |v: Value, _| async move { Ok::<_, ActionError>(v) },
        ))
        .nats_source("nats", "shop.inbound")
}

#[tokio::test]
async fn a_flooded_service_counts_what_nats_dropped_and_keeps_serving() {
    let lab = lab().await;
    let running = echo()
        .config(RuntimeConfig {
            subscription_capacity: Some(1),
            ..config(&lab)
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    assert_eq!(running.dropped_messages(), 0);

    let flooder = triggers_sdk::transport::connect(lab.url()).await.unwrap();
    let broadcasts = subject::flow_broadcast("shop").unwrap();
    let mut rounds = 0;
    while running.dropped_messages() == 0 {
        rounds += 1;
        assert!(
            rounds <= 500,
            "500 rounds of 1000 broadcasts and no drop counted"
        );
        for i in 0..1_000 {
            // Not a FlowEnvelope: each is decoded, refused and logged, slower than NATS delivers.
            flooder
                .publish(broadcasts.clone(), format!("{{\"id\": {i}").into())
                .await
                .unwrap();
        }
        flooder.flush().await.unwrap();
        tokio::task::yield_now().await;
    }

    // Still serving: a flow deployed now reaches it (a broadcast may be dropped again while the
    // flood drains, so redeploy until it holds one), and a run completes.
    for attempt in 1.. {
        let version = lab
            .deploy(one_step("order", "shop", "charge"))
            .await
            .unwrap()
            .flow
            .version;
        if running
            .wait_for_flow("order", version, Duration::from_secs(2))
            .await
        {
            break;
        }
        assert!(
            attempt < 50,
            "no broadcast reached the service in 50 deploys"
        );
    }
    let run = lab.trigger("order", &json!({"n": 1})).await.unwrap();
    assert_eq!(
        lab.wait_for_node(&run, "step").await.unwrap().status,
        "succeeded"
    );
    assert!(running.dropped_messages() > 0);
}

#[tokio::test]
async fn out_of_range_settings_fail_start_naming_them() {
    let lab = lab().await;
    for (config, says) in [
        (
            RuntimeConfig {
                heartbeat_interval: Some(Duration::ZERO),
                ..config(&lab)
            },
            "RuntimeConfig::heartbeat_interval=\"0ns\" is not valid: expected a whole number of milliseconds from 1",
        ),
        (
            RuntimeConfig {
                max_concurrency: Some(usize::MAX),
                ..config(&lab)
            },
            "RuntimeConfig::max_concurrency=\"18446744073709551615\" is not valid: expected a whole number from 1 to 1048576",
        ),
        (
            RuntimeConfig {
                register_timeout: Some(Duration::MAX),
                ..config(&lab)
            },
            "RuntimeConfig::register_timeout",
        ),
        (
            RuntimeConfig {
                subscription_capacity: Some(0),
                ..config(&lab)
            },
            "RuntimeConfig::subscription_capacity=\"0\"",
        ),
    ] {
        let err = echo()
            .config(config)
            .build()
            .unwrap()
            .start()
            .await
            .unwrap_err();
        assert!(matches!(err, StartError::Config(_)), "{err:?}");
        assert!(err.to_string().contains(says), "{err}");
    }
}
