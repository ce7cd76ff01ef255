//! A slow consumer on purpose: the emulator's connection with a subscription capacity of 1, a
//! flood on `triggers.v2.>` it cannot keep up with. NATS drops what does not fit; the emulator
//! must count it, and say so in its `state` (the Rust summary and the control API). No timing:
//! the flood goes on, a round at a time, until a drop is counted.

use triggers_emulator::control::ControlClient;
use triggers_emulator::{
    Backend, Emulator, EmulatorConfig, Harness, NatsConfig, NatsServer, drops,
};
use triggers_sdk::transport::DropCounter;

/// A binary nats-server, a fault proxy in front of it, and a lab that reaches the server only
/// through the proxy.
async fn lab_behind_proxy(config: EmulatorConfig) -> (NatsServer, natsbox::FaultProxy, Harness) {
    let server = NatsServer::start(NatsConfig {
        backend: Backend::Binary,
        ..Default::default()
    })
    .await
    .unwrap();
    let proxy = natsbox::FaultProxy::start(server.url()).await.unwrap();
    let lab = Harness::start_with(
        NatsConfig {
            backend: Backend::External,
            url: Some(proxy.url().to_owned()),
            ..Default::default()
        },
        config,
    )
    .await
    .unwrap();
    (server, proxy, lab)
}

/// Rounds of the flood before giving up: far more than a capacity of 1 ever needs.
const ROUNDS: usize = 500;

/// Publishes junk heartbeats (each judged and recorded: work for the emulator) a round at a
/// time until `dropped()` is above zero; returns how many rounds it took.
async fn flood(url: &str, dropped: impl Fn() -> u64) -> usize {
    let client = triggers_sdk::transport::connect(url).await.unwrap();
    for round in 1..=ROUNDS {
        for i in 0..1_000 {
            client
                .publish("triggers.v2.heartbeat", format!("{{not json {i}").into())
                .await
                .unwrap();
        }
        client.flush().await.unwrap();
        tokio::task::yield_now().await;
        if dropped() > 0 {
            return round;
        }
    }
    panic!("{ROUNDS} rounds of 1000 messages and no drop counted: is the callback wired?");
}

#[tokio::test]
async fn drops_on_a_connection_of_its_own_are_counted_and_in_the_state() {
    let nats = NatsServer::start(NatsConfig {
        backend: Backend::Binary,
        ..Default::default()
    })
    .await
    .unwrap();
    let counter = DropCounter::new();
    let client = drops::connect_options("slow emulator", &counter)
        .subscription_capacity(1)
        .connect(nats.url())
        .await
        .unwrap();
    let emulator = Emulator::start(
        client,
        EmulatorConfig {
            slow_consumers: counter.clone(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(emulator.dropped_messages(), 0);
    assert_eq!(emulator.summary().dropped_messages, 0);

    flood(nats.url(), || emulator.dropped_messages()).await;

    let dropped = emulator.dropped_messages();
    assert!(dropped > 0);
    assert_eq!(counter.count(), dropped, "one counter, shared");
    assert!(emulator.summary().dropped_messages >= dropped);
    // The control API's `state`, as the CLI and the terminal UI read it.
    let control = ControlClient::connect(nats.url()).await.unwrap();
    let state = control.state().await.unwrap();
    assert!(state.dropped_messages >= dropped, "{state:?}");
}

#[tokio::test]
async fn the_harness_counts_drops_with_the_capacity_it_is_given() {
    let lab = Harness::start_with(
        NatsConfig {
            backend: Backend::Binary,
            subscription_capacity: Some(1),
            ..Default::default()
        },
        EmulatorConfig::default(),
    )
    .await
    .unwrap();
    flood(lab.url(), || lab.dropped_messages()).await;
    assert!(lab.summary().dropped_messages > 0);
    assert_eq!(lab.config().slow_consumers.count(), lab.dropped_messages());
}

#[tokio::test]
async fn a_harness_with_the_default_capacity_drops_nothing_in_a_normal_test() {
    let lab = triggers_testkit::lab().await;
    let sdk = triggers_testkit::peer::connect(&lab).await;
    triggers_testkit::peer::register(&sdk, &triggers_testkit::peer::manifest("a", &["x"], &[]))
        .await;
    lab.wait_for_registration("a").await.unwrap();
    assert_eq!(lab.dropped_messages(), 0);
    assert_eq!(lab.summary().dropped_messages, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_is_counted() {
    // The server cutting the emulator off (a flood past its max_pending) looks to the emulator
    // like any lost connection: it reconnects by itself, and what was published on plain
    // subjects meanwhile never reached it. Counted, so that a verdict can say so.
    let (server, proxy, lab) = lab_behind_proxy(EmulatorConfig::default()).await;
    assert_eq!(lab.connection_losses(), 0);
    // Through the control API as well, for the CLI's `status`, `load` and `trigger --wait`.
    let control = triggers_emulator::control::ControlClient::connect(server.url())
        .await
        .unwrap();
    assert_eq!(control.missed().await.unwrap(), 0);
    proxy.cut();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while lab.connection_losses() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no connection loss counted in 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        lab.dropped_messages(),
        0,
        "a loss is not a slow-consumer drop"
    );
    // The emulator answers again once it has reconnected.
    let state = loop {
        match control.state().await {
            Ok(state) => break state,
            Err(e) => {
                assert!(tokio::time::Instant::now() < deadline, "{e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    };
    assert!(state.connection_losses >= 1, "{}", state.connection_losses);
    assert!(control.missed().await.unwrap() >= 1);
}

/// Found by an audit: a stream the emulator follows lets its oldest messages go at its
/// `max_bytes`; a follower that was behind then went on from the oldest message left, and the
/// ones between were never judged nor counted. Now the gap in the stream's sequence is counted
/// as missed. The follower is held behind by holding its pull requests at a proxy while DLQ
/// entries pour in, four times what the stream keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_messages_let_go_before_they_were_read_are_counted_as_missed() {
    let (server, proxy, lab) = lab_behind_proxy(EmulatorConfig {
        stream_max_bytes: 1 << 20,
        ..Default::default()
    })
    .await;
    let direct = triggers_sdk::transport::connect(server.url())
        .await
        .unwrap();
    let js = async_nats::jetstream::new(direct);
    let entry = |i: usize| {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", format!("m{i}").as_str());
        (headers, bytes::Bytes::from(vec![b'x'; 4096]))
    };
    let (headers, body) = entry(0);
    js.publish_with_headers("triggers.v2.dlq.svc.act", headers, body)
        .await
        .unwrap()
        .await
        .unwrap();
    lab.emulator()
        .wait_dlq(triggers_emulator::DlqFilter::any())
        .await
        .unwrap();
    assert_eq!(lab.dropped_messages(), 0);
    proxy.hold(true);
    for i in 1..=1000 {
        let (headers, body) = entry(i);
        js.publish_with_headers("triggers.v2.dlq.svc.act", headers, body)
            .await
            .unwrap()
            .await
            .unwrap();
    }
    proxy.hold(false);
    // Every entry is either judged and recorded, or counted as missed: none is simply gone.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (recorded, missed) = (lab.emulator().dlq().len() as u64, lab.dropped_messages());
        if recorded + missed == 1001 && missed > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "after 30 s: {recorded} recorded + {missed} missed of 1001"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
