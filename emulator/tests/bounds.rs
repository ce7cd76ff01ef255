//! The emulator stays bounded under floods: a message with thousands of junk headers keeps at most
//! 16 violations and one copy of its bytes; the record ring holds to its byte bound; settled runs
//! beyond `max_runs` are evicted and counted; and it keeps answering throughout.

use std::time::Duration;

use futures::StreamExt;
use serde_json::json;
use triggers_emulator::EmulatorConfig;
use triggers_emulator::conformance::MAX_PER_MESSAGE;
use triggers_emulator::recorder::RecordKind;
use triggers_sdk::wire::{Envelope, subject};

use triggers_testkit::lab_with;
use triggers_testkit::peer::*;

/// A lab with `shop` (action `charge`) registered and the one-step flow `order` deployed on it,
/// and a client of its server.
async fn shop_lab(config: EmulatorConfig) -> (triggers_emulator::Harness, async_nats::Client) {
    let lab = lab_with(config).await;
    let client = connect(&lab).await;
    register(&client, &manifest("shop", &["charge"], &[])).await;
    lab.deploy(one_step_flow("order", "shop", "charge"))
        .await
        .unwrap();
    (lab, client)
}

/// A lab whose records (and the messages its violations hold) are bounded by `max_record_bytes`.
async fn lab_with_record_bytes(max_record_bytes: usize) -> triggers_emulator::Harness {
    lab_with(EmulatorConfig {
        max_record_bytes,
        ..Default::default()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_headers_and_big_payloads_stay_within_the_bounds() {
    let max_record_bytes = 4 << 20;
    let lab = lab_with_record_bytes(max_record_bytes).await;
    let client = connect(&lab).await;
    register(&client, &manifest("shop", &["charge"], &[])).await;
    // Thirteen heartbeats of 400 KB with 5 000 junk X-Triggers-* headers each.
    let payload = vec![b'x'; 400 * 1024];
    for i in 0..13 {
        let mut headers = async_nats::HeaderMap::new();
        for h in 0..5000 {
            headers.insert(format!("X-Triggers-Junk-{h}").as_str(), "junk");
        }
        headers.insert("X-Flood", i.to_string().as_str());
        client
            .publish_with_headers(subject::HEARTBEAT, headers, payload.clone().into())
            .await
            .unwrap();
    }
    client.flush().await.unwrap();
    // All thirteen judged: each with at most 16 violations, the last saying how many more.
    let capped = eventually(&lab, "13 capped messages", |lab| {
        let capped = lab
            .violations()
            .iter()
            .filter(|v| v.rule == "violations_capped")
            .count();
        (capped == 13).then_some(capped)
    })
    .await;
    assert_eq!(capped, 13);
    let violations = lab.violations();
    assert!(
        violations.len() <= 13 * MAX_PER_MESSAGE,
        "{}",
        violations.len()
    );
    let capped = violations
        .iter()
        .find(|v| v.rule == "violations_capped")
        .unwrap();
    assert!(
        capped.message.contains("more violation"),
        "{}",
        capped.message
    );
    // The violations of one message share one copy of its bytes.
    let first = &violations[0];
    let same: Vec<_> = violations
        .iter()
        .filter(|v| v.headers == first.headers)
        .collect();
    assert!(same.len() > 1);
    assert!(
        same.iter()
            .all(|v| v.payload.as_bytes().as_ptr() == first.payload.as_bytes().as_ptr()),
        "one shared copy of the payload"
    );
    // The ring kept to its byte bound, and says what it dropped.
    let (records, dropped) = lab.records();
    let bytes: usize = records.iter().map(|r| r.size()).sum();
    assert!(bytes <= max_record_bytes, "{bytes} > {max_record_bytes}");
    assert!(dropped > 0);
    assert_eq!(lab.summary().dropped_records, dropped);
    // And it still answers.
    lab.deploy(one_step_flow("order", "shop", "charge"))
        .await
        .unwrap();
    assert!(lab.summary().violations >= 13);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_violations_hold_their_messages_within_max_record_bytes() {
    // Each violation keeps the message it is about; past max_record_bytes of them, only an
    // excerpt, so max_violations violations of 1 MB messages cannot hold 10 GB.
    let max_record_bytes = 1 << 20;
    let lab = lab_with_record_bytes(max_record_bytes).await;
    let client = connect(&lab).await;
    let payload = vec![b'x'; 200 * 1024];
    let floods = 30;
    for i in 0..floods {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("X-Flood", i.to_string().as_str());
        // Not JSON: a heartbeat_invalid violation each.
        client
            .publish_with_headers(subject::HEARTBEAT, headers, payload.clone().into())
            .await
            .unwrap();
    }
    client.flush().await.unwrap();
    let violations = eventually(&lab, "a violation per heartbeat", |lab| {
        let v = lab.violations();
        let flooded = v
            .iter()
            .filter(|v| v.headers.iter().any(|(n, _)| n == "X-Flood"))
            .count();
        (flooded >= floods).then_some(v)
    })
    .await;
    let mut held = std::collections::HashSet::new();
    let bytes: usize = violations
        .iter()
        .filter(|v| held.insert(v.payload.as_bytes().as_ptr()))
        .map(|v| v.payload.len())
        .sum();
    let trimmed: Vec<_> = violations
        .iter()
        .filter(|v| v.message.contains("kept as an excerpt"))
        .collect();
    assert!(!trimmed.is_empty());
    assert!(trimmed.iter().all(|v| v.payload.len() == 4096));
    assert!(
        bytes <= max_record_bytes + trimmed.len() * 4096,
        "{bytes} bytes held by {} violations",
        violations.len()
    );
    assert_eq!(lab.summary().trimmed_violations, trimmed.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_runs_beyond_max_runs_are_evicted_and_counted() {
    let (lab, client) = shop_lab(EmulatorConfig {
        max_runs: 5,
        wait_timeout: Duration::from_secs(15),
        ..Default::default()
    })
    .await;
    let mut runs = Vec::new();
    let mut early_page = None;
    for n in 0..20 {
        if n == 3 {
            early_page = Some(lab.run_page(0, 3));
        }
        let run = lab.trigger("order", &json!({"n": n})).await.unwrap();
        let d = next_delivery(&client, "shop").await;
        succeed(
            &client,
            &Envelope::from_headers(&d.headers).unwrap(),
            "shop",
            "step",
        )
        .await;
        lab.wait_run_settled(&run).await.unwrap();
        runs.push(run);
    }
    // A run still open is never evicted.
    let open = lab.trigger("order", &json!({"n": 99})).await.unwrap();
    let kept = lab.runs();
    // max_runs settled, plus the eviction batch's slack (max_runs / 10 + 1), plus the open run.
    assert!(kept.len() <= 5 + 1 + 1, "{}", kept.len());
    assert!(kept.iter().any(|r| r.id == open.0));
    assert!(kept.iter().any(|r| r.id == runs[19].0), "the newest stay");
    assert!(lab.run(&runs[0].0).is_none(), "the oldest go");
    let summary = lab.summary();
    assert_eq!(summary.evicted_runs as usize + kept.len(), 21);
    // A page's `next` is a place, not a position: read after the evictions, the page after the
    // first three runs is every run kept (all started after them), none skipped.
    let early_page = early_page.unwrap();
    let ids: Vec<&str> = early_page.runs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        [runs[0].0.as_str(), runs[1].0.as_str(), runs[2].0.as_str()]
    );
    assert!(!early_page.more, "three runs then, all on the page");
    let rest = lab.run_page(early_page.next, 100);
    let rest: Vec<&str> = rest.runs.iter().map(|r| r.id.as_str()).collect();
    let kept_ids: Vec<&str> = kept.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(rest, kept_ids);
    // Waiting on an evicted run says so.
    let err = lab
        .with_wait_timeout(Duration::from_millis(100))
        .wait_run_settled(&runs[0])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("evicted"), "{err}");
}

/// Found by an audit: open runs are never evicted, so triggers of a flow whose service did not
/// run grew the emulator by some 7 KB a run without end (20 000 runs: +150 MB). Now a trigger
/// beyond `max_open_runs` is refused with a reason, and accepted again once runs settle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triggers_beyond_max_open_runs_are_refused_until_runs_settle() {
    let (lab, client) = shop_lab(EmulatorConfig {
        max_open_runs: 3,
        ..Default::default()
    })
    .await;
    for n in 0..3 {
        lab.trigger("order", &json!({"n": n})).await.unwrap();
    }
    let err = lab.trigger("order", &json!({"n": 3})).await.unwrap_err();
    assert!(
        matches!(
            err,
            triggers_emulator::EmulatorError::TooManyOpenRuns { open: 3, .. }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("max_open_runs"), "{err}");
    assert_eq!(lab.runs().len(), 3, "the refused trigger left no run");
    // One settles: one more may start.
    let d = next_delivery(&client, "shop").await;
    let envelope = Envelope::from_headers(&d.headers).unwrap();
    succeed(&client, &envelope, "shop", "step").await;
    lab.wait_run_settled(&triggers_emulator::RunId(envelope.flow_run_id.clone()))
        .await
        .unwrap();
    lab.trigger("order", &json!({"n": 4})).await.unwrap();
    assert!(lab.trigger("order", &json!({"n": 5})).await.is_err());
}

/// Found by an audit: completion events for ever new run ids (another orchestrator's, or forged)
/// each made a followed run, open while its node was retrying, without bound: 210 000 events held
/// 221 006 runs and a gigabyte. They are held within `max_followed_runs`; beyond it the event is
/// recorded, its run not followed, and counted. And (a second audit) followed runs counted
/// against `max_open_runs`: 100 000 made-up `retrying` events refused every trigger until `up`
/// restarted. They have their own bound now: a trigger still starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_followed_from_events_are_held_within_their_own_bound_and_never_refuse_a_trigger() {
    let (lab, client) = shop_lab(EmulatorConfig {
        max_open_runs: 3,
        max_followed_runs: 3,
        ..Default::default()
    })
    .await;
    for n in 0..8 {
        let envelope = Envelope {
            flow_run_id: format!("foreign-{n}"),
            flow_id: "order".into(),
            flow_version: 1,
            ..Envelope::default()
        };
        complete(
            &client,
            &envelope,
            "shop",
            "step",
            "action",
            triggers_sdk::wire::shapes::status::RETRYING,
            "busy",
        )
        .await;
    }
    let state = eventually(&lab, "8 completion events judged", |lab| {
        (lab.completions().len() == 8).then(|| lab.summary())
    })
    .await;
    assert_eq!(
        lab.runs().len(),
        3,
        "followed runs beyond max_followed_runs"
    );
    assert_eq!(state.unfollowed_runs, 5);
    // The emulator's own runs still start, up to their own bound.
    for n in 0..3 {
        lab.trigger("order", &json!({"n": n}))
            .await
            .expect("followed runs do not refuse a trigger");
    }
    let err = lab.trigger("order", &json!({})).await.unwrap_err();
    assert!(
        matches!(
            err,
            triggers_emulator::EmulatorError::TooManyOpenRuns { open: 3 }
        ),
        "{err}"
    );
}

/// Found by an audit: every registration under a new service name made an inbound stream on the
/// server and a subscription in the emulator, without bound: a service that took a new name at
/// every start (a process id in it) grew both over a long `up`. Beyond `max_services` a new name
/// is refused with what to do; the services held keep registering, and their streams are the only
/// ones made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_under_new_names_beyond_max_services_are_refused() {
    let lab = lab_with(EmulatorConfig {
        max_services: 2,
        ..Default::default()
    })
    .await;
    let client = connect(&lab).await;
    for name in ["svc-1", "svc-2"] {
        let reply = register(&client, &manifest(name, &["charge"], &[])).await;
        assert!(reply.error.is_empty(), "{name}: {}", reply.error);
    }
    let reply = register(&client, &manifest("svc-3", &["charge"], &[])).await;
    assert!(
        reply.error.contains("holds 2 services") && reply.error.contains("max_services"),
        "{}",
        reply.error
    );
    // A service held registers again (a restart), and nothing was made for the refused one.
    let reply = register(&client, &manifest("svc-1", &["charge", "refund"], &[])).await;
    assert!(reply.error.is_empty(), "{}", reply.error);
    assert_eq!(
        lab.services().keys().cloned().collect::<Vec<_>>(),
        ["svc-1", "svc-2"]
    );
    let js = async_nats::jetstream::new(client.clone());
    assert!(
        js.get_stream(subject::stream_name("svc-1", None).unwrap())
            .await
            .is_ok(),
        "a registered service has its inbound stream"
    );
    assert!(
        js.get_stream(subject::stream_name("svc-3", None).unwrap())
            .await
            .is_err(),
        "the refused service got a stream"
    );
}

/// Found by an audit: a service's inbound stream full (its `max_bytes`) let its oldest
/// messages go, deliveries no one had handled yet, and their runs waited for nothing. Now a
/// full inbound stream refuses the new message and its publisher is told: the trigger fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_inbound_stream_refuses_a_trigger_and_keeps_what_it_holds_until_handled() {
    let (lab, client) = shop_lab(EmulatorConfig {
        stream_max_bytes: 1 << 20,
        ..Default::default()
    })
    .await;
    let big = json!({"n": 1, "pad": "x".repeat(400 * 1024)});
    let first = lab.trigger("order", &big).await.unwrap();
    lab.trigger("order", &big).await.unwrap();
    let err = lab.trigger("order", &big).await.unwrap_err();
    assert!(err.to_string().contains("maximum bytes"), "{err}");
    assert!(err.to_string().contains("not handled yet"), "{err}");
    assert_eq!(lab.runs().len(), 2, "the refused trigger left no run");
    // The first delivery is still there to be handled, then the second; each is acked and the
    // server has taken the ack (a double ack) before the next trigger.
    let js = async_nats::jetstream::new(client.clone());
    let consumer: async_nats::jetstream::consumer::PullConsumer = js
        .get_stream(subject::stream_name("shop", None).unwrap())
        .await
        .unwrap()
        .get_or_create_consumer(
            "shop",
            async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("shop".into()),
                ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut deliveries = consumer.messages().await.unwrap();
    let mut handle = async || {
        let msg = tokio::time::timeout(Duration::from_secs(15), deliveries.next())
            .await
            .expect("a delivery within 15 s")
            .unwrap()
            .unwrap();
        msg.double_ack().await.unwrap();
        Envelope::from_headers(&triggers_sdk::transport::from_nats(msg.headers.as_ref())).unwrap()
    };
    assert_eq!(handle().await.flow_run_id, first.0);
    handle().await;
    // Found by an audit: a handled delivery stayed in the stream until its max_age (a day), so
    // once max_bytes of messages had passed through, every later trigger and hand-off was
    // refused though nothing was waiting (a load of 2 668 runs of 100 KB filled `up`'s 256 MiB).
    // A handled delivery leaves the stream: ten times its size goes through, one at a time.
    for n in 0..25 {
        lab.trigger("order", &json!({"n": n, "pad": "x".repeat(400 * 1024)}))
            .await
            .unwrap_or_else(|e| panic!("trigger {n} after {} KB handled: {e}", (n + 2) * 400));
        handle().await;
    }
}

/// Found by the protocol fuzzer: a control reply above the server's max_payload (here the
/// violations of a few 400 KB messages) was never sent, and the requester waited for nothing
/// while the requests behind it queued. Now it gets an error that says how to ask for less, at
/// once, and the API keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_reply_too_large_for_nats_is_an_error_not_silence() {
    let lab = lab_with(EmulatorConfig::default()).await;
    let client = connect(&lab).await;
    let payload = vec![b'x'; 400 * 1024];
    for i in 0..4 {
        client
            .publish(format!("triggers.v2.nope{i}"), payload.clone().into())
            .await
            .unwrap();
    }
    client.flush().await.unwrap();
    eventually(&lab, "4 violations", |lab| {
        (lab.violations().len() >= 4).then_some(())
    })
    .await;
    let control = triggers_emulator::control::ControlClient::connect(lab.url())
        .await
        .unwrap();
    let ask = |op: &'static str, body: serde_json::Value| {
        let client = client.clone();
        async move {
            let reply = tokio::time::timeout(
                Duration::from_secs(1),
                client.request(
                    format!("triggerslab.v1.control.{op}"),
                    serde_json::to_vec(&body).unwrap().into(),
                ),
            )
            .await
            .unwrap_or_else(|_| panic!("{op}: no reply within 1 s"))
            .unwrap();
            serde_json::from_slice::<serde_json::Value>(&reply.payload).unwrap()
        }
    };
    let reply = ask("violations", json!({})).await;
    assert_eq!(reply["ok"], json!(false), "{reply}");
    let error = reply["error"].as_str().unwrap();
    assert!(error.contains("max_payload"), "{error}");
    assert!(error.contains("`limit`"), "{error}");
    // Records come a page at a time: the first that fit, whatever the limit asked.
    let reply = ask("records", json!({"since": 0, "limit": 1000})).await;
    assert_eq!(reply["ok"], json!(true), "{reply}");
    let page = reply["result"].as_array().unwrap().len();
    assert!(page >= 1 && page < lab.records().0.len(), "{page}");
    let reply = ask("records", json!({"since": 0, "limit": 1})).await;
    assert_eq!(reply["ok"], json!(true), "{reply}");
    // Violations, whole, do not fit; a page at a time they all do.
    assert!(control.violations().await.unwrap().len() >= 4);
    assert!(control.state().await.unwrap().violations >= 4);
    // A request too large for the server is not sent, and says so: not "nothing answers".
    let big = json!({"text": "x".repeat(2 << 20)});
    match control.trigger("order", &big).await {
        Err(triggers_emulator::ControlError::TooLarge { op, bytes, max }) => {
            assert_eq!(op, "trigger");
            assert!(bytes > max, "{bytes} <= {max}");
        }
        other => panic!("{other:?}"),
    }
    assert!(control.state().await.is_ok());
}

/// Found by an audit: with some 6 500 runs held the `state` reply outgrew NATS' max_payload, and
/// `status`, `runs list`, `flows` and the terminal UI all failed on an `up` that had run a load.
/// Now `state` carries the newest runs that fit (and the count of all), and `run_page` reads
/// every run a page at a time; flows too large together are left out of `state` (counted) and
/// read with `flow_list` and `flow`. A server with a 16 KB max_payload makes 300 runs too many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_number_of_runs_flows_and_actions_is_read_through_the_control_api() {
    let (_server, lab, client) = shop_lab_with_small_messages().await;
    let total = 300;
    for n in 0..total {
        lab.trigger("order", &json!({"n": n})).await.unwrap();
    }
    let all: Vec<String> = lab.runs().into_iter().map(|r| r.id).collect();
    assert_eq!(all.len(), total);
    let control = triggers_emulator::control::ControlClient::connect(lab.url())
        .await
        .unwrap();
    // The state answers, with the newest runs that fit, newest last, and the count of all.
    let state = control.state().await.unwrap();
    assert_eq!(state.runs_total, total);
    assert!(
        !state.runs.is_empty() && state.runs.len() < total,
        "{}",
        state.runs.len()
    );
    let newest: Vec<&str> = state.runs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(newest, all[total - state.runs.len()..]);
    // A limit below what fits is kept.
    let state = control.state_with_runs(7).await.unwrap();
    assert_eq!(state.runs.len(), 7);
    assert_eq!(state.runs.last().unwrap().id, all[total - 1]);
    // Every run, in start order, a page at a time (each page as large as fits).
    let paged: Vec<String> = control
        .run_summaries()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(paged, all);
    let page = control.run_page(0, 1000).await.unwrap();
    assert!(page.runs.len() < total && page.more);
    assert_eq!(page.total, total);
    // The last page says it is the last.
    let last = control.run_page(0, 1).await.unwrap();
    // Flows that fit one at a time but not all at once with the rest of the state: the state
    // leaves the largest out and counts them all; `flow_list` and `flow` read every one.
    let chain = |id: &str, n: usize| {
        let mut nodes = vec![json!({"id": "in", "type": "service-in", "service": "shop"})];
        let mut edges = Vec::new();
        let mut from = "in".to_owned();
        for i in 0..n {
            let node = format!("step_{i}");
            nodes
                .push(json!({"id": node, "type": "action", "service": "shop", "action": "charge"}));
            edges.push(json!({"id": format!("e{i}"), "from": from, "to": node}));
            from = node;
        }
        flow(json!({"id": id, "nodes": nodes, "edges": edges}))
    };
    for (i, n) in [40, 60, 80, 100].into_iter().enumerate() {
        lab.deploy(chain(&format!("chain{i}"), n)).await.unwrap();
    }
    let state = control.state().await.unwrap();
    assert_eq!(state.flows_total, 5);
    assert!(state.flows.len() < 5, "{}", state.flows.len());
    assert!(
        state.flows.iter().all(|f| f.id != "chain3"),
        "the largest is left out first"
    );
    let listed = control.flow_list().await.unwrap();
    assert_eq!(listed.len(), 5);
    let chain3 = listed.iter().find(|f| f.id == "chain3").unwrap();
    assert_eq!((chain3.nodes, chain3.edges), (101, 100));
    for f in &listed {
        assert_eq!(control.flow(&f.id).await.unwrap().body.nodes.len(), f.nodes);
    }
    // Services whose action names do not fit all together: the longest lists are left out,
    // counted, until the rest fits.
    for service in 0..12 {
        let names: Vec<String> = (0..30)
            .map(|i| format!("an_action_with_quite_a_long_name_number_{i}"))
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let reply = register(&client, &manifest(&format!("big{service}"), &names, &[])).await;
        assert!(reply.error.is_empty(), "{}", reply.error);
    }
    let state = control.state().await.unwrap();
    let big: Vec<_> = state
        .services
        .iter()
        .filter(|s| s.name.starts_with("big"))
        .collect();
    assert_eq!(big.len(), 12);
    assert!(big.iter().all(|s| s.action_count == 30));
    assert!(big.iter().any(|s| s.actions.is_empty()), "some left out");
    let shop = state.services.iter().find(|s| s.name == "shop").unwrap();
    assert_eq!(shop.actions, ["charge"], "the shortest list stays");
    let after_first = control.run_page(last.next, 1000).await.unwrap();
    assert_eq!(after_first.runs[0].id, all[1]);
}

/// Found by an audit: above some 2 600 registered services neither `state` nor `services` could
/// be read (each error pointed to the other); one record was unreadable even with `limit: 1`; one
/// message with 3 000 junk headers broke `violations` for good. Now `state` carries the services
/// that fit (and counts them all), `services` and `violations` are read a page at a time, and an
/// item too large for a message on its own comes cut, saying so, counted. A 16 KB max_payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_control_list_is_readable_whatever_was_registered_or_recorded() {
    let (_server, lab, client) = shop_lab_with_small_messages().await;
    let control = triggers_emulator::control::ControlClient::connect(lab.url())
        .await
        .unwrap();
    // Services whose summaries do not fit in one state (a 5 KB service_version each).
    for n in 0..5 {
        let mut m = manifest(&format!("wide{n}"), &["x"], &[]);
        m.service_version = "v".repeat(5000);
        m.seal().unwrap();
        assert_eq!(register(&client, &m).await.error, "");
    }
    let state = control.state().await.expect("the state is readable");
    assert_eq!(state.services_total, 6);
    assert!(state.services.len() < 6, "{}", state.services.len());
    let services = control.services().await.expect("the services are readable");
    assert_eq!(services.len(), 6);
    assert_eq!(services["wide4"].manifest.service_version.len(), 5000);
    // Whole, they do not fit, and the error says how to page.
    let whole = control_reply(&client, "services", b"{}").await;
    assert!(
        whole["error"].as_str().unwrap().contains("`after`"),
        "{whole}"
    );

    // One message larger than a reply once written as JSON (quotes escape to two bytes).
    let quotes = "\"".repeat(12 * 1024);
    client
        .publish("triggers.v2.bulky", quotes.clone().into())
        .await
        .unwrap();
    // One with hundreds of junk headers: its violations hold them all.
    let mut headers = async_nats::HeaderMap::new();
    for h in 0..300 {
        headers.insert(format!("X-Triggers-Junk-{h}").as_str(), "junk");
    }
    client
        .publish_with_headers(
            subject::HEARTBEAT,
            headers,
            "\"".repeat(6 * 1024).into_bytes().into(),
        )
        .await
        .unwrap();
    client.flush().await.unwrap();
    let seq = eventually(&lab, "the bulky message recorded", |lab| {
        lab.records()
            .0
            .iter()
            .find(|r| r.subject == "triggers.v2.bulky")
            .map(|r| r.seq)
    })
    .await;
    eventually(&lab, "the junk headers judged", |lab| {
        lab.violations()
            .iter()
            .any(|v| v.headers.len() >= 300)
            .then_some(())
    })
    .await;
    let records = control.records(seq - 1, 1).await.expect("one record, cut");
    assert_eq!(records[0].seq, seq);
    let text = records[0].payload.text();
    assert!(text.contains("[cut for the reply: "), "{}", &text[..100]);
    let violations = control
        .violations()
        .await
        .expect("the violations are readable");
    assert_eq!(violations.len(), lab.violations().len());
    let junk = violations
        .iter()
        .find(|v| v.headers.len() > 16)
        .expect("a violation of the junk message");
    let last = junk.headers.last().unwrap();
    assert_eq!(last.0, "Triggers-Lab-Cut", "{last:?}");
    assert!(control.state().await.unwrap().cut_in_replies >= 2);
}

async fn control_reply(client: &async_nats::Client, op: &str, body: &[u8]) -> serde_json::Value {
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        client.request(format!("triggerslab.v1.control.{op}"), body.to_vec().into()),
    )
    .await
    .unwrap_or_else(|_| panic!("{op}: no reply within 10 s"))
    .unwrap();
    serde_json::from_slice(&reply.payload).unwrap()
}

/// Found by an audit: a client deleted `TRIGGERS_EVENTS` (any client may, on a server whose
/// permissions are not `up`'s), the emulator never noticed, and every later run stayed
/// `running`. Now it says so (a violation, `streams_lost` in the state), makes the stream again,
/// and runs settle again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_stream_of_the_emulator_is_said_and_made_again() {
    let (lab, client) = shop_lab(EmulatorConfig::default()).await;
    let js = async_nats::jetstream::new(client.clone());
    js.delete_stream(triggers_emulator::EVENTS_STREAM)
        .await
        .unwrap();
    let lost = eventually(&lab, "the loss said", |lab| {
        lab.violations()
            .into_iter()
            .find(|v| v.rule == "emulator_stream_lost")
    })
    .await;
    assert!(lost.message.contains("TRIGGERS_EVENTS"), "{}", lost.message);
    assert!(lab.summary().streams_lost >= 1);
    // Made again, and followed: a run settles.
    let run = lab.trigger("order", &json!({})).await.unwrap();
    let envelope = Envelope::from_headers(&next_delivery(&client, "shop").await.headers).unwrap();
    succeed(&client, &envelope, "shop", "step").await;
    lab.wait_run_settled(&run)
        .await
        .expect("a run settles after the stream was made again");
}

/// Found by an audit: `up` restarted on the same external server imported the dead instance's
/// work: 56 runs it never triggered and 2 752 `unknown_flow` DLQ entries, with no note. With
/// `clean_start` (what `up` sets) the deliveries left waiting in the services' inbound streams
/// are removed, and what was found is said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_emulator_on_a_used_server_starts_clean_and_says_what_it_removed() {
    let server = small_server("100GB", "").await;
    let first = lab_on(&server).await;
    let client = connect(&first).await;
    register(&client, &manifest("shop", &["charge"], &[])).await;
    first
        .deploy(one_step_flow("order", "shop", "charge"))
        .await
        .unwrap();
    for n in 0..3 {
        first.trigger("order", &json!({"n": n})).await.unwrap();
    }
    drop(first);
    let second = triggers_emulator::Harness::start_with(
        triggers_emulator::NatsConfig {
            backend: triggers_emulator::Backend::External,
            url: Some(server.url.clone()),
            ..Default::default()
        },
        EmulatorConfig {
            clean_start: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let found = second.found_at_start();
    assert!(
        found.contains(&triggers_emulator::FoundAtStart {
            stream: "triggers-sources-shop".into(),
            messages: 3,
            removed: true,
        }),
        "{found:?}"
    );
    let mut stream = async_nats::jetstream::new(client.clone())
        .get_stream("triggers-sources-shop")
        .await
        .unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 0);
}

/// Found by an audit: a run whose timeline outgrew max_payload could not be read through the
/// control API at all (`runs show`, `trigger --wait`, a `load` on `up`). Its timeline is now read
/// a page at a time. A 16 KB max_payload, forty retries of a kilobyte of error each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_larger_than_one_message_is_read_a_page_at_a_time() {
    let (_server, lab, client) = shop_lab_with_small_messages().await;
    let run = lab.trigger("order", &json!({})).await.unwrap();
    let envelope = Envelope::from_headers(&next_delivery(&client, "shop").await.headers).unwrap();
    let error = "e".repeat(1024);
    for _ in 0..40 {
        complete(
            &client, &envelope, "shop", "step", "action", "retrying", &error,
        )
        .await;
    }
    succeed(&client, &envelope, "shop", "step").await;
    let held = lab.wait_run_settled(&run.0).await.unwrap();
    // The trigger, forty retries, the success.
    assert_eq!(held.timeline.len(), 42);

    // Whole, it does not fit, and the error says how to read it.
    let reply = control(
        &client,
        "run",
        json!({"run_id": run.0}).to_string().as_bytes(),
    )
    .await;
    assert_eq!(reply["ok"], json!(false), "{reply}");
    assert!(
        reply["error"].as_str().unwrap().contains("`timeline_from`"),
        "{reply}"
    );
    // A page says where it starts and how many there are.
    let reply = control(
        &client,
        "run",
        json!({"run_id": run.0, "timeline_from": 5})
            .to_string()
            .as_bytes(),
    )
    .await;
    assert_eq!(reply["ok"], json!(true), "{reply}");
    let page = &reply["result"];
    assert_eq!(
        (
            page["timeline_from"].clone(),
            page["timeline_total"].clone()
        ),
        (json!(5), json!(42))
    );
    let n = page["timeline"].as_array().unwrap().len();
    assert!(
        (1..37).contains(&n),
        "{n} entries in a page of a 16 KB message"
    );
    assert_eq!(page["timeline"][0]["seq"], json!(held.timeline[5].seq));

    // The client reads it whole.
    let control = triggers_emulator::control::ControlClient::connect(lab.url())
        .await
        .unwrap();
    let read = control.run(&run.0).await.unwrap();
    assert_eq!(read.status, held.status);
    let seqs = |r: &triggers_emulator::recorder::Run| -> Vec<u64> {
        r.timeline.iter().map(|e| e.seq).collect()
    };
    assert_eq!(seqs(&read), seqs(&held));
    assert_eq!(read.timeline[40].error, error);
}

/// A flow `id` of `steps` chained `charge` actions on `shop`: about 140 bytes a step.
fn chain_flow(id: &str, steps: usize) -> triggers_sdk::flow::Flow {
    let mut nodes = vec![json!({"id": "in", "type": "service-in", "service": "shop"})];
    let mut edges = Vec::new();
    for i in 0..steps {
        nodes.push(
            json!({"id": format!("s{i}"), "type": "action", "service": "shop", "action": "charge"}),
        );
        let from = if i == 0 {
            "in".to_owned()
        } else {
            format!("s{}", i - 1)
        };
        edges.push(json!({"id": format!("e{i}"), "from": from, "to": format!("s{i}")}));
    }
    flow(json!({"id": id, "nodes": nodes, "edges": edges}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_a_register_reply_cannot_carry_are_broadcast_after_it_and_none_is_held_unsendable() {
    // A server carrying at most 16 KB in a message, and five flows of about 5 KB: together
    // more than one reply can carry.
    let server = small_server("100GB", "max_payload: 16KB").await;
    let lab = lab_on(&server).await;
    let client = connect(&lab).await;
    register(&client, &manifest("shop", &["charge"], &[])).await;
    let ids: Vec<String> = (0..5).map(|i| format!("chain{i}")).collect();
    for id in &ids {
        lab.deploy(chain_flow(id, 35)).await.unwrap();
    }
    // A flow no message can carry is refused whole, and not held.
    let Err(triggers_emulator::EmulatorError::Release(problems)) =
        lab.deploy(chain_flow("huge", 200)).await
    else {
        panic!("a flow larger than max_payload was deployed");
    };
    assert_eq!(problems[0].code.as_str(), "flow_too_large", "{problems:?}");
    assert!(problems[0].message.contains("max_payload"), "{problems:?}");
    assert!(!lab.flows().contains_key("huge"));
    assert!(lab.records().0.iter().any(|r| matches!(
        &r.kind,
        RecordKind::DeployRefused { flow_id, .. } if flow_id == "huge"
    )));
    // The service registers again: a reply it gets, within max_payload, and every flow the reply
    // had no room for as a broadcast after it.
    let mut broadcasts = client
        .subscribe(subject::flow_broadcast("shop").unwrap())
        .await
        .unwrap();
    client.flush().await.unwrap();
    let raw = tokio::time::timeout(
        Duration::from_secs(10),
        client.request(
            subject::MANIFEST_REGISTER,
            manifest("shop", &["charge"], &[]).to_json().unwrap().into(),
        ),
    )
    .await
    .expect("a register reply within 10 s, however many flows are deployed")
    .unwrap();
    assert!(raw.payload.len() <= 16 * 1024);
    let reply = triggers_sdk::wire::RegisterReply::from_json(&raw.payload).unwrap();
    assert!(reply.error.is_empty(), "{}", reply.error);
    assert!(!reply.flows.is_empty() && reply.flows.len() < ids.len());
    let mut got: Vec<String> = reply.flows.iter().map(|f| f.id.clone()).collect();
    while got.len() < ids.len() {
        let msg = tokio::time::timeout(Duration::from_secs(10), broadcasts.next())
            .await
            .expect("the flows left out of the reply are broadcast")
            .unwrap();
        let envelope = triggers_sdk::wire::FlowEnvelope::from_json(&msg.payload).unwrap();
        got.push(envelope.id);
    }
    got.sort();
    assert_eq!(got, ids);
    let withheld = lab
        .records()
        .0
        .into_iter()
        .find_map(|r| match r.kind {
            RecordKind::FlowsWithheld { flows, reason, .. } => Some((flows, reason)),
            _ => None,
        })
        .expect("the flows left out are recorded");
    assert_eq!(withheld.0.len(), ids.len() - reply.flows.len());
    assert!(withheld.1.contains("max_payload"), "{}", withheld.1);
    // Broadcasts the emulator sent are its own, not forged ones.
    assert!(lab.violations().is_empty(), "{:?}", lab.violations());
}

/// The shop lab ([`shop_lab`]) on a server of its own that carries at most 16 KB in a message,
/// so that a few hundred runs, or one long run, outgrow a control reply. The server stops when
/// the first of the three is dropped.
async fn shop_lab_with_small_messages()
-> (SmallServer, triggers_emulator::Harness, async_nats::Client) {
    let server = small_server("100GB", "max_payload: 16KB").await;
    let lab = lab_on(&server).await;
    let client = connect(&lab).await;
    register(&client, &manifest("shop", &["charge"], &[])).await;
    lab.deploy(one_step_flow("order", "shop", "charge"))
        .await
        .unwrap();
    (server, lab, client)
}

/// A lab on `server`, with the emulator's defaults.
async fn lab_on(server: &SmallServer) -> triggers_emulator::Harness {
    triggers_emulator::Harness::start_with(
        triggers_emulator::NatsConfig {
            backend: triggers_emulator::Backend::External,
            url: Some(server.url.clone()),
            ..Default::default()
        },
        EmulatorConfig::default(),
    )
    .await
    .unwrap()
}

/// A nats-server of our own with `max_file_store` JetStream storage (and `extra` lines of
/// configuration), stopped when dropped.
struct SmallServer {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for SmallServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn small_server(max_file_store: &str, extra: &str) -> SmallServer {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let conf = dir.path().join("server.conf");
    std::fs::write(
        &conf,
        format!(
            "listen: 127.0.0.1:{port}\njetstream {{ store_dir: {:?}, max_file_store: {max_file_store} }}\n{extra}\n",
            dir.path().join("store")
        ),
    )
    .unwrap();
    let child = std::process::Command::new("nats-server")
        .arg("-c")
        .arg(&conf)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("nats-server on the PATH");
    let server = SmallServer {
        child,
        url: format!("nats://127.0.0.1:{port}"),
        _dir: dir,
    };
    for _ in 0..100 {
        if triggers_sdk::transport::connect(&server.url).await.is_ok() {
            return server;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the nats-server at {} did not start", server.url);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_gets_a_stream_on_a_server_with_little_storage() {
    // JetStream reserves each stream's max_bytes of the server's storage (three quarters of the
    // free disk by default): about 3 GB is a 4 GB disk. With 1 GiB per stream, the DLQ and
    // events streams and one service took it all, and every later service was refused
    // ("insufficient storage resources available"). Twelve services: the first ones at the
    // default size, the later ones at what is left, halved until the server can reserve it.
    let server = small_server("2900MB", "").await;
    let lab = lab_on(&server).await;
    let client = connect(&lab).await;
    let services = 12;
    for i in 0..services {
        let service = format!("svc{i}");
        let reply = register(&client, &manifest(&service, &["work"], &[])).await;
        assert!(reply.error.is_empty(), "{service}: {}", reply.error);
    }
    let js = async_nats::jetstream::new(client);
    let mut sizes = Vec::new();
    for i in 0..services {
        let mut stream = js
            .get_stream(format!("triggers-sources-svc{i}"))
            .await
            .unwrap();
        sizes.push(stream.info().await.unwrap().config.max_bytes);
    }
    assert_eq!(sizes[0], EmulatorConfig::default().stream_max_bytes);
    assert!(
        sizes
            .iter()
            .all(|&b| b >= triggers_sdk::transport::MIN_STREAM_BYTES),
        "{sizes:?}"
    );
    assert!(
        sizes[services - 1] < sizes[0],
        "halved once full: {sizes:?}"
    );
}
