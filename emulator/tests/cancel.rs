//! Cancelling a run by hand (issue 35: a run that would go on for days had no way to stop but
//! stopping `up`): over the control API, with a raw NATS client playing the service. What the run
//! still owed is dropped (the nodes it waited on, its armed timers), it settles `cancelled`, and
//! events that come later are recorded on its timeline without reopening it or being judged.

use std::time::Duration;

use serde_json::json;
use triggers_emulator::control::ControlClient;
use triggers_emulator::recorder::{CANCEL_STEP, RecordKind, RunStatus};
use triggers_sdk::wire::Envelope;

use triggers_testkit::lab;
use triggers_testkit::peer::*;

/// in -> a -> b, all on shop.
fn two_steps() -> triggers_sdk::flow::Flow {
    flow(json!({"id": "order", "nodes": [
        {"id": "in", "type": "service-in", "service": "shop"},
        {"id": "a", "type": "action", "service": "shop", "action": "a"},
        {"id": "b", "type": "action", "service": "shop", "action": "b"}
    ], "edges": [{"id": "e1", "from": "in", "to": "a"}, {"id": "e2", "from": "a", "to": "b"}]}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_drops_what_it_owed_and_later_events_do_not_reopen_it() {
    let lab = lab().await;
    let client = connect(&lab).await;
    assert_eq!(
        register(&client, &manifest("shop", &["a", "b"], &[]))
            .await
            .error,
        ""
    );
    lab.deploy(two_steps()).await.unwrap();
    let run = lab.trigger("order", &json!({"n": 1})).await.unwrap();
    let delivery = next_delivery(&client, "shop").await;
    let env = Envelope::from_headers(&delivery.headers).unwrap();
    assert_eq!(lab.run(&run.0).unwrap().status, RunStatus::Running);

    // A request without the run names the field.
    let bad = control(&client, "cancel", b"{}").await;
    assert_eq!(bad["ok"], false, "{bad}");
    assert!(bad["error"].to_string().contains("run_id"), "{bad}");

    let reply = control(
        &client,
        "cancel",
        json!({ "run_id": run.0 }).to_string().as_bytes(),
    )
    .await;
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(reply["result"]["run_id"], run.0.as_str(), "{reply}");
    assert_eq!(reply["result"]["pending"], json!({"a": 1}), "{reply}");
    let cancelled = lab.run(&run.0).unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    assert!(cancelled.settled_at.is_some());
    assert!(cancelled.pending.is_empty(), "{:?}", cancelled.pending);
    let step = cancelled.timeline.last().unwrap();
    assert_eq!(
        (step.node_id.as_str(), step.status.as_str()),
        (CANCEL_STEP, "cancelled")
    );
    assert!(step.error.contains("dropped: pending a"), "{}", step.error);
    assert!(lab.records().0.iter().any(|r| matches!(
        &r.kind,
        RecordKind::RunSettled { run_id, status: RunStatus::Cancelled, .. } if *run_id == run.0
    )));

    // The service finishes `a` after all: recorded on the timeline, and nothing more. `b` is not
    // reached, the run stays cancelled, and the event is not held against the service.
    succeed(&client, &env, "shop", "a").await;
    let after = eventually(&lab, "a's late event on the cancelled run", |lab| {
        lab.run(&run.0)
            .filter(|r| r.node_entries("a").any(|e| e.status == "succeeded"))
    })
    .await;
    assert_eq!(after.status, RunStatus::Cancelled);
    assert!(after.pending.is_empty(), "{:?}", after.pending);
    assert_eq!(after.executions("a"), 0, "a cancelled run owes nothing");
    assert!(after.unexpected.is_empty(), "{:?}", after.unexpected);
    assert!(
        lab.violations().is_empty(),
        "{}",
        triggers_emulator::describe_violations(&lab.violations())
    );
    let settled_records = lab
        .records()
        .0
        .iter()
        .filter(|r| matches!(&r.kind, RecordKind::RunSettled { run_id, .. } if *run_id == run.0))
        .count();
    assert_eq!(settled_records, 1, "settled once, never reopened");

    // Cancelled already, and unknown: refused, saying why.
    let again = control(
        &client,
        "cancel",
        json!({ "run_id": run.0 }).to_string().as_bytes(),
    )
    .await;
    assert_eq!(again["ok"], false, "{again}");
    assert!(
        again["error"]
            .to_string()
            .contains("cannot be cancelled: it was cancelled already"),
        "{again}"
    );
    let unknown = control(&client, "cancel", br#"{"run_id": "run-nosuch"}"#).await;
    assert!(
        unknown["error"].to_string().contains("no such run is kept"),
        "{unknown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_fires_no_timer_and_a_settled_one_is_not_cancelled() {
    let lab = lab().await;
    let client = connect(&lab).await;
    register(&client, &manifest("shop", &["go"], &["durable_timer.v1"])).await;
    lab.deploy(flow(json!({"id": "later", "nodes": [
        {"id": "in", "type": "service-in", "service": "shop", "config": {"target": "shop.inbound"}},
        {"id": "wait", "type": "timer", "config": {"delay_ms": 3_600_000}},
        {"id": "in2", "type": "service-in", "service": "shop", "config": {"target": "shop.inbound"}},
        {"id": "go", "type": "action", "service": "shop", "action": "go"}
    ], "edges": [
        {"id": "e1", "from": "in", "to": "wait"}, {"id": "e2", "from": "wait", "to": "in2"},
        {"id": "e3", "from": "in2", "to": "go"}
    ]})))
    .await
    .unwrap();
    lab.deploy(one_step_flow("once", "shop", "go"))
        .await
        .unwrap();
    let control = ControlClient::connect(lab.url()).await.unwrap();

    // Only a timer follows the entry: the run waits on it.
    let run = control.trigger("later", &json!({})).await.unwrap();
    assert_eq!(lab.run(&run).unwrap().status, RunStatus::Waiting);
    let cancelled = control.cancel(&run).await.unwrap();
    assert_eq!(cancelled.timers, ["wait"]);
    assert!(cancelled.pending.is_empty());
    assert_eq!(
        cancelled.to_string(),
        "cancelled by hand; dropped: timers wait"
    );
    // Its hour passes: nothing fires.
    let fired = lab.advance(Duration::from_secs(7200)).await.unwrap();
    assert!(fired.is_empty(), "{fired:?}");
    let r = lab.run(&run).unwrap();
    assert_eq!(r.status, RunStatus::Cancelled);
    assert!(r.timers.is_empty());

    // A run that settled is not cancelled: it keeps its status.
    let once = lab.trigger("once", &json!({})).await.unwrap();
    let delivery = next_delivery(&client, "shop").await;
    succeed(
        &client,
        &Envelope::from_headers(&delivery.headers).unwrap(),
        "shop",
        "step",
    )
    .await;
    lab.wait_run_settled(&once).await.unwrap();
    let err = control.cancel(&once.0).await.unwrap_err();
    assert!(
        err.to_string().contains("it has succeeded already"),
        "{err}"
    );
    assert_eq!(lab.run(&once.0).unwrap().status, RunStatus::Succeeded);
}
