//! What the SDK runtime carries on from an inbound delivery's envelope (docs/protocol.md §5–§7):
//! the run's `flow_version` on hops (never the held flow's newest, after a redeploy mid-run), and
//! a malformed `trace_id` or `span_id` ignored rather than dead-lettered.

use std::time::Duration;

use futures::StreamExt as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use triggers_integration::{config, flow, lab, one_step, publish_js};
use triggers_sdk::runtime::{ActionContext, ActionDef, ActionError, Service};
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::{Envelope, GoTime};

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Anything {
    #[serde(default)]
    n: i64,
}

async fn echo(input: Anything, _ctx: ActionContext) -> Result<Anything, ActionError> {
    Ok(input)
}

fn service(name: &str) -> triggers_sdk::runtime::ServiceBuilder {
    Service::builder(name, "1.0.0")
        .action(ActionDef::new("echo", echo))
        .nats_source("nats", format!("{name}.inbound"))
}

/// The completion event of `node` in run `run` (a run the emulator follows: it did not start it),
/// waiting up to 20 s for it.
async fn completion(
    lab: &triggers_emulator::Harness,
    run: &str,
    node: &str,
) -> triggers_sdk::wire::CompletionEvent {
    for _ in 0..200 {
        if let Some(e) = lab
            .completions()
            .into_iter()
            .find(|e| e.flow_run_id == run && e.node_id == node && e.status != "retrying")
        {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "no completion of {node} in run {run} within 20 s; DLQ: {:?}",
        lab.dlq()
    );
}

/// A hand-made delivery of run `run` for `flow` at `version`, from its entry node `in`.
fn delivery(run: &str, flow: &str, version: i64) -> Envelope {
    Envelope {
        flow_run_id: run.into(),
        flow_id: flow.into(),
        flow_version: version,
        idempotency_key: format!("{run}:in"),
        source_node_id: "in".into(),
        emitted_at: GoTime::now(),
        ..Envelope::default()
    }
}

#[tokio::test]
async fn a_hop_carries_the_runs_version_after_a_redeploy() {
    let lab = lab().await;
    let shop = service("shop").config(config(&lab)).build().unwrap();
    let mail = service("mail").config(config(&lab)).build().unwrap();
    let (shop, mail) = (shop.start().await.unwrap(), mail.start().await.unwrap());
    let chain = || {
        flow(json!({"id": "chain", "nodes": [
            {"id": "in", "type": "service-in", "service": "shop"},
            {"id": "a", "type": "action", "service": "shop", "action": "echo"},
            {"id": "in2", "type": "service-in", "service": "mail"},
            {"id": "b", "type": "action", "service": "mail", "action": "echo"}
        ], "edges": [
            {"id": "e1", "from": "in", "to": "a"}, {"id": "e2", "from": "a", "to": "in2"},
            {"id": "e3", "from": "in2", "to": "b"}
        ]}))
    };
    lab.deploy(chain()).await.unwrap();
    let v2 = lab.deploy(chain()).await.unwrap();
    assert_eq!(v2.flow.version, 2, "the redeploy is version 2");
    // A plain subscription sees the hop as JetStream stores it.
    let client = triggers_sdk::transport::connect(lab.url()).await.unwrap();
    let mut hops = client.subscribe("mail.inbound").await.unwrap();
    client.flush().await.unwrap();

    // A run of version 1, still in flight when version 2 was deployed, reaches shop now.
    let mut headers = delivery("run-old", "chain", 1).to_headers();
    headers.insert(names::NATS_MSG_ID, "run-old:in");
    publish_js(lab.url(), "shop.inbound", &headers, br#"{"n":1}"#).await;

    let hop = tokio::time::timeout(Duration::from_secs(20), hops.next())
        .await
        .expect("a hop to mail within 20 s")
        .expect("the subscription is open");
    let version = hop
        .headers
        .as_ref()
        .and_then(|h| h.get(names::FLOW_VERSION))
        .map(|v| v.as_str().to_owned());
    assert_eq!(
        version.as_deref(),
        Some("1"),
        "the hop carries the run's version (the envelope's), not the held flow's 2"
    );
    // shop reported `a` with the run's version too.
    let reported = completion(&lab, "run-old", "a").await;
    assert_eq!(reported.flow_version, 1);
    shop.shutdown().await;
    mail.shutdown().await;
}

#[tokio::test]
async fn a_malformed_trace_or_span_id_is_ignored_not_dead_lettered() {
    let lab = lab().await;
    let shop = service("shop")
        .config(config(&lab))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    lab.deploy(one_step("order", "shop", "echo")).await.unwrap();
    for (run, name, bad) in [
        ("run-t", names::TRACE_ID, "NOT-A-TRACE-ID"),
        ("run-s", names::SPAN_ID, "00F067AA0BA902B7"),
    ] {
        let mut headers = delivery(run, "order", 1).to_headers();
        headers.insert(names::NATS_MSG_ID, format!("{run}:in"));
        headers.insert(name, bad);
        publish_js(lab.url(), "shop.inbound", &headers, br#"{"n":2}"#).await;
        let step = completion(&lab, run, "step").await;
        assert_eq!(step.status, "succeeded", "{name}: {bad}");
        assert_eq!(step.trace_id, "", "the malformed value goes no further");
    }
    assert!(
        lab.dlq().is_empty(),
        "nothing dead-lettered: {:?}",
        lab.dlq()
    );
    shop.shutdown().await;
}
