//! Who may use the control API, on real servers: with a private control account
//! (`NatsConfig::private_control`, what `triggers-lab up` starts) a client without credentials,
//! as a service connects, can neither call it nor see its records; with a token (what `up` adds,
//! and all it has on an external server) a request without it is refused and the records are on
//! a subject only the token names. The default stays open, for tests in one process.

use std::time::Duration;

use async_nats::RequestErrorKind;
use futures::StreamExt;
use serde_json::json;
use triggers_emulator::control::{
    ControlAccess, ControlClient, ControlToken, PREFIX, TOKEN_HEADER, records_subject,
};
use triggers_emulator::{Backend, ControlError, EmulatorConfig, Harness, NatsConfig};

use triggers_testkit::peer::{manifest, one_step_flow, register};

async fn private_lab(backend: Backend) -> Harness {
    Harness::start_with(
        NatsConfig {
            backend,
            private_control: true,
            ..Default::default()
        },
        EmulatorConfig {
            wait_timeout: Duration::from_secs(15),
            ..Default::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("cannot start the harness: {e}"))
}

/// What a service can do to the control API on a server with a private control account:
/// nothing. Then the holder of the credentials can do everything.
async fn services_cannot_reach_a_private_control_api(lab: Harness) {
    let credentials = lab
        .control_credentials()
        .expect("a private control account")
        .clone();
    let service = triggers_sdk::transport::connect(lab.url()).await.unwrap();

    for (op, body) in [
        ("state", json!({})),
        (
            "deploy",
            json!({"flow": one_step_flow("f", "shop", "charge")}),
        ),
        ("trigger", json!({"flow_id": "f"})),
        ("advance", json!({"duration_ms": 3_600_000})),
        ("records", json!({})),
    ] {
        let err = service
            .request(format!("{PREFIX}.{op}"), body.to_string().into())
            .await
            .expect_err("a service reached the control API");
        assert_eq!(err.kind(), RequestErrorKind::NoResponders, "{op}: {err}");
    }
    assert!(
        ControlClient::connect(lab.url()).await.is_err(),
        "a client without credentials reached the control API"
    );
    // Everything the service can subscribe to, to catch any record or reply that leaks. (After
    // the requests: a subscription of its own to `>` would answer "no responders" for them.)
    let mut everything = service.subscribe(">").await.unwrap();
    service.flush().await.unwrap();

    // The holder of the credentials follows the records; the service's registration makes one.
    let control = ControlClient::connect_with(
        lab.url(),
        &ControlAccess {
            credentials: Some(credentials),
            token: None,
        },
    )
    .await
    .expect("the control account reaches the API");
    let mut records = control.follow().await.unwrap();
    let reply = register(&service, &manifest("shop", &["charge"], &[])).await;
    assert!(reply.error.is_empty(), "{}", reply.error);
    let record = tokio::time::timeout(Duration::from_secs(30), records.next())
        .await
        .expect("a record within 30 s")
        .expect("the record stream");
    assert_eq!(record.subject, "triggers.v2.manifest.register");
    control
        .deploy(&one_step_flow("f", "shop", "charge"))
        .await
        .expect("deploys");
    control.trigger("f", &json!({})).await.expect("triggers");
    control
        .advance(Duration::from_secs(60))
        .await
        .expect("advances");

    // The service's own JetStream requests still work (it may send them, not receive them).
    let js = async_nats::jetstream::new(service.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "own".into(),
        subjects: vec!["own.>".into()],
        ..Default::default()
    })
    .await
    .expect("a service makes a stream of its own");

    // A round trip on the service's connection, then: what it saw holds nothing of the lab's,
    // nor the emulator's JetStream requests (the registration made the service's inbound
    // stream, the trigger published into it) or their replies; the platform's own traffic, yes.
    service.flush().await.unwrap();
    let mut saw_broadcast = false;
    while let Ok(Some(msg)) =
        tokio::time::timeout(Duration::from_millis(200), everything.next()).await
    {
        assert!(
            !msg.subject.starts_with("triggerslab.")
                && !msg.subject.starts_with("$JS.API.")
                && !msg.subject.starts_with("_TRIGGERS_LAB_INBOX."),
            "a service saw {}",
            msg.subject
        );
        saw_broadcast |= msg.subject.starts_with("triggers.v2.flow.broadcast.");
    }
    assert!(
        saw_broadcast,
        "the service's `>` saw no broadcast: it saw nothing at all?"
    );
}

/// On a server with a private control account, a service may not listen where the emulator's
/// JetStream requests go, nor publish where their replies go: it can neither see nor answer
/// them. The emulator works as before.
async fn services_cannot_answer_the_emulators_jetstream_requests(lab: Harness) {
    let orchestrator = lab
        .orchestrator_credentials()
        .expect("an orchestrator user")
        .clone();
    let service = triggers_sdk::transport::connect(lab.url()).await.unwrap();
    let mut api = service.subscribe("$JS.API.>").await.unwrap();
    let mut stream_create = service
        .queue_subscribe("$JS.API.STREAM.CREATE.*", "impostors".into())
        .await
        .unwrap();
    let prefix = format!("{}.>", orchestrator.inbox_prefix);
    let mut inbox = service.subscribe(prefix.clone()).await.unwrap();
    service.flush().await.unwrap();

    // The emulator makes the service's inbound stream on registration, and publishes into it.
    let reply = register(&service, &manifest("shop", &["charge"], &[])).await;
    assert!(reply.error.is_empty(), "{}", reply.error);
    lab.emulator()
        .deploy(one_step_flow("f", "shop", "charge"))
        .await
        .expect("deploys");
    lab.emulator()
        .trigger("f", &json!({}))
        .await
        .expect("the emulator's own JetStream publish is acked by the server, not forged");
    // A forged reply under the emulator's prefix goes nowhere.
    service
        .publish(format!("{}.forged", orchestrator.inbox_prefix), "{}".into())
        .await
        .unwrap();
    service.flush().await.unwrap();
    for (what, sub) in [
        ("$JS.API.>", &mut api),
        ("a queue group on STREAM.CREATE", &mut stream_create),
        (prefix.as_str(), &mut inbox),
    ] {
        if let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(300), sub.next()).await {
            panic!(
                "a service's subscription to {what} was given {}",
                msg.subject
            );
        }
    }
    assert!(
        lab.emulator().services().contains_key("shop"),
        "the registration went through"
    );
}

/// Found by an audit: a service deleted `TRIGGERS_EVENTS` through the JetStream API, and every
/// later run stayed `running` for good, with nothing said. On the server `up` starts, the
/// services' user may not delete, purge or reconfigure the emulator's streams.
#[tokio::test]
async fn services_cannot_delete_or_purge_the_emulators_streams() {
    let lab = private_lab(Backend::Binary).await;
    let service = triggers_sdk::transport::connect(lab.url()).await.unwrap();
    let js = async_nats::jetstream::new(service.clone());
    for stream in [
        triggers_emulator::EVENTS_STREAM,
        triggers_emulator::DLQ_STREAM,
    ] {
        let deleted = tokio::time::timeout(Duration::from_secs(3), js.delete_stream(stream)).await;
        assert!(!matches!(deleted, Ok(Ok(_))), "a service deleted {stream}");
        let purged = tokio::time::timeout(
            Duration::from_secs(3),
            service.request(format!("$JS.API.STREAM.PURGE.{stream}"), "".into()),
        )
        .await;
        assert!(
            !matches!(purged, Ok(Ok(_))),
            "a service purged {stream}: {purged:?}"
        );
    }
    let own = async_nats::jetstream::new(lab.emulator().client().clone());
    for stream in [
        triggers_emulator::EVENTS_STREAM,
        triggers_emulator::DLQ_STREAM,
    ] {
        own.get_stream(stream)
            .await
            .unwrap_or_else(|e| panic!("{stream} is gone: {e}"));
    }
    assert_eq!(lab.emulator().summary().streams_lost, 0);
}

#[tokio::test]
async fn binary_with_a_private_control_account_keeps_services_out() {
    services_cannot_reach_a_private_control_api(private_lab(Backend::Binary).await).await;
}

#[tokio::test]
async fn binary_with_a_private_control_account_keeps_the_emulators_jetstream_requests_private() {
    services_cannot_answer_the_emulators_jetstream_requests(private_lab(Backend::Binary).await)
        .await;
}

#[tokio::test]
#[ignore = "needs Docker: scripts/test runs the docker_ tests when Docker answers"]
async fn docker_with_a_private_control_account_keeps_services_out() {
    services_cannot_reach_a_private_control_api(private_lab(Backend::Docker).await).await;
}

#[tokio::test]
async fn with_a_token_requests_without_it_are_refused_and_records_hide() {
    let token = ControlToken::generate();
    let lab = triggers_testkit::lab_with(EmulatorConfig {
        wait_timeout: Duration::from_secs(15),
        control_token: Some(token.clone()),
        ..Default::default()
    })
    .await;
    let other = triggers_sdk::transport::connect(lab.url()).await.unwrap();
    let mut open_records = other.subscribe(records_subject(None)).await.unwrap();
    other.flush().await.unwrap();

    match ControlClient::connect(lab.url()).await {
        Err(ControlError::Refused(message)) => {
            assert!(message.contains(TOKEN_HEADER), "{message}")
        }
        other => panic!("a request without the token was not refused: {other:?}"),
    }
    let wrong = ControlAccess {
        credentials: None,
        token: Some(ControlToken::generate()),
    };
    match ControlClient::connect_with(lab.url(), &wrong).await {
        Err(ControlError::Refused(message)) => assert!(message.contains("does not match")),
        other => panic!("a wrong token was not refused: {other:?}"),
    }
    // A refused deploy changes nothing.
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(TOKEN_HEADER, "not-the-token");
    let reply = other
        .request_with_headers(
            format!("{PREFIX}.deploy"),
            headers,
            json!({"flow": one_step_flow("f", "shop", "charge")})
                .to_string()
                .into(),
        )
        .await
        .unwrap();
    let reply: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(reply["ok"], false, "{reply}");
    assert!(lab.flows().is_empty());

    let right = ControlAccess {
        credentials: None,
        token: Some(token.clone()),
    };
    let control = ControlClient::connect_with(lab.url(), &right)
        .await
        .expect("the token opens the API");
    let mut records = control.follow().await.unwrap();
    register(&other, &manifest("shop", &["charge"], &[])).await;
    let record = tokio::time::timeout(Duration::from_secs(30), records.next())
        .await
        .expect("a record within 30 s")
        .expect("the record stream");
    assert_eq!(record.subject, "triggers.v2.manifest.register");
    control
        .deploy(&one_step_flow("f", "shop", "charge"))
        .await
        .expect("deploys with the token");
    other.flush().await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), open_records.next())
            .await
            .is_err(),
        "a record went to the subject without the token"
    );
}

/// Records are serialised and published only while someone follows: a `follow` request's lease
/// starts them, and they stop when it runs out unrenewed. A bad request is refused, a lease too
/// long is cut to the longest.
#[tokio::test]
async fn records_are_published_only_while_a_follow_lease_runs() {
    let lab = triggers_testkit::lab().await;
    let other = triggers_sdk::transport::connect(lab.url()).await.unwrap();
    let mut records = other.subscribe(records_subject(None)).await.unwrap();
    other.flush().await.unwrap();
    let follow = |body: serde_json::Value| {
        let other = other.clone();
        async move {
            let reply = other
                .request(format!("{PREFIX}.follow"), body.to_string().into())
                .await
                .unwrap();
            serde_json::from_slice::<serde_json::Value>(&reply.payload).unwrap()
        }
    };

    register(&other, &manifest("shop", &["charge"], &[])).await;
    assert!(
        quiet(&mut records).await,
        "a record was published with nobody following"
    );

    let reply = follow(json!({"lease_ms": 700})).await;
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(
        reply["result"]["subject"], "triggerslab.v1.records",
        "{reply}"
    );
    assert_eq!(reply["result"]["lease_ms"], 700, "{reply}");
    register(&other, &manifest("billing", &["bill"], &[])).await;
    let record = tokio::time::timeout(Duration::from_secs(10), records.next())
        .await
        .expect("a record while the lease runs")
        .unwrap();
    let record: triggers_emulator::recorder::Record =
        serde_json::from_slice(&record.payload).unwrap();
    assert_eq!(record.subject, "triggers.v2.manifest.register");
    while tokio::time::timeout(Duration::from_millis(100), records.next())
        .await
        .is_ok()
    {}

    tokio::time::sleep(Duration::from_millis(800)).await;
    register(&other, &manifest("stock", &["reserve"], &[])).await;
    assert!(
        quiet(&mut records).await,
        "a record was published after the lease ran out"
    );

    let reply = follow(json!({"lease_ms": u64::MAX})).await;
    assert_eq!(reply["result"]["lease_ms"], 3_600_000, "{reply}");
    let reply = follow(json!({"lease": 1})).await;
    assert_eq!(reply["ok"], false, "{reply}");
    assert!(
        reply["error"].as_str().unwrap().contains("lease"),
        "{reply}"
    );
}

/// Whether nothing arrives on `records` for 300 ms.
async fn quiet(records: &mut async_nats::Subscriber) -> bool {
    tokio::time::timeout(Duration::from_millis(300), records.next())
        .await
        .is_err()
}
