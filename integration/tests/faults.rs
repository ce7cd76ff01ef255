//! Faults: the nats-server restarts in the middle of a run, and every message is accounted for:
//! none lost, none handled twice.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use triggers_integration::{config, lab};
use triggers_sdk::flow::Flow;
use triggers_sdk::runtime::{ActionContext, ActionDef, ActionError, ResultEventConfig, Service};

#[tokio::test]
async fn a_nats_server_restart_mid_run_loses_and_repeats_nothing() {
    let mut lab = lab().await;
    let handled: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    let progress = Arc::new(tokio::sync::Notify::new());
    let _service = Service::builder("steady", "1.0.0")
        .action(
            ActionDef::new("work", {
                let handled = handled.clone();
                let progress = progress.clone();
                move |v: Value, _ctx: ActionContext| {
                    let handled = handled.clone();
                    let progress = progress.clone();
                    async move {
                        let id = v["id"].as_str().unwrap_or_default().to_owned();
                        *handled.lock().unwrap().entry(id).or_default() += 1;
                        progress.notify_one();
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        Ok::<_, ActionError>(json!({"ok": true}))
                    }
                }
            })
            .result_event(ResultEventConfig::Off)
            // A short worst case keeps the consumer's ack wait at its floor (60 s).
            .timeout(Duration::from_secs(1))
            .max_attempts(1),
        )
        .nats_source("nats", "steady.inbound")
        .config(triggers_sdk::runtime::RuntimeConfig {
            max_concurrency: Some(2),
            ..config(&lab)
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let flow: Flow = serde_json::from_value(json!({"id": "steady", "nodes": [
        {"id": "in", "type": "service-in", "service": "steady"},
        {"id": "work", "type": "action", "service": "steady", "action": "work"}
    ], "edges": [{"id": "e1", "from": "in", "to": "work"}]}))
    .unwrap();
    lab.deploy(flow).await.unwrap();
    let mut runs = Vec::new();
    for i in 0..40 {
        runs.push(
            lab.trigger("steady", &json!({"id": format!("m-{i}")}))
                .await
                .unwrap(),
        );
    }
    // Some are done, some in flight, most still in the stream: restart the server now.
    while handled.lock().unwrap().len() < 8 {
        progress.notified().await;
    }
    lab.nats_mut().restart().await.unwrap();

    // A message the client held when the server went away (pulled, not yet handled) comes back
    // only when its ack wait runs out: JetStream's rule, and still exactly once. Wait past it.
    let patient = lab.with_wait_timeout(Duration::from_secs(90));
    for run in &runs {
        let settled = match patient.wait_run_settled(run).await {
            Ok(s) => s,
            Err(e) => panic!(
                "{e}\nthe service handled {} message(s); the emulator recorded {} completion event(s)",
                handled.lock().unwrap().len(),
                lab.completions().len()
            ),
        };
        assert_eq!(format!("{:?}", settled.status), "Succeeded", "{run}");
    }
    let handled = handled.lock().unwrap();
    assert_eq!(handled.len(), 40, "every message was handled");
    let twice: Vec<_> = handled.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "handled more than once: {twice:?}");
    assert!(
        lab.dlq().is_empty(),
        "nothing dead-lettered: {:?}",
        lab.dlq()
    );
    lab.assert_conformant();
}
