//! A service outlives its server: `triggers-lab up` stopped and started again on the same port
//! is a new nats-server and a new emulator that has never heard of the service. The runtime
//! reconnects by itself, registers again, and works again: the new emulator runs a flow on it.
//! A connection that breaks with a completion event still unread by the server loses no event:
//! the delivery comes back and its kept outcome is reported again.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use triggers_emulator::recorder::RunStatus;
use triggers_emulator::{Backend, EmulatorConfig, Harness, NatsConfig};
use triggers_integration::{config, one_step};
use triggers_sdk::runtime::{ActionContext, ActionDef, ActionError, Service};

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct Order {
    order_id: String,
}

async fn charge(order: Order, _ctx: ActionContext) -> Result<Order, ActionError> {
    Ok(order)
}

/// An `up` on `port`: a nats-server there and an emulator on it. The wait is generous: the
/// runtime's reconnect attempts and its registration retries back off.
async fn up(port: u16) -> Harness {
    Harness::start_with(
        NatsConfig {
            backend: Backend::Binary,
            client_port: Some(port),
            ..Default::default()
        },
        EmulatorConfig {
            wait_timeout: Duration::from_secs(60),
            ..Default::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("cannot start nats-server and the emulator on {port}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_service_registers_again_with_the_emulator_of_a_restarted_server() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let a = up(port).await;
    let running = Service::builder("shop", "1.0.0")
        .action(ActionDef::new("charge", charge))
        .nats_source("nats", "shop.inbound")
        .config(config(&a))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    a.wait_for_registration("shop").await.unwrap();
    drop(a);

    let b = up(port).await;
    assert!(b.services().is_empty() || b.services().contains_key("shop"));
    let registered = b.wait_for_registration("shop").await.unwrap();
    assert_eq!(
        registered.manifest.manifest_hash,
        running.manifest().manifest_hash
    );
    // Not only registered: its consumers are back, so it runs flows of the new emulator.
    b.deploy(one_step("order", "shop", "charge")).await.unwrap();
    let run = b
        .trigger("order", &json!({"order_id": "o-1"}))
        .await
        .unwrap();
    let settled = b.wait_run_settled(&run).await.unwrap();
    assert_eq!(
        settled.status,
        RunStatus::Succeeded,
        "{}",
        b.describe_run(&run.0)
    );
    running.shutdown().await;
}

/// A service on the SDK runtime connected through a [`FaultProxy`] (no stream keeps its
/// completion events: they are plain publishes), with a first run handled, and a subscriber to
/// its events on the server itself.
///
/// [`FaultProxy`]: natsbox::FaultProxy
struct Proxied {
    _server: natsbox::NatsServer,
    proxy: natsbox::FaultProxy,
    running: triggers_sdk::runtime::RunningService,
    js: async_nats::jetstream::Context,
    name: &'static str,
    inbound: String,
    events_subject: String,
    events: async_nats::Subscriber,
}

impl Proxied {
    async fn start(name: &'static str) -> Proxied {
        use triggers_integration::bench;
        use triggers_sdk::runtime::RuntimeConfig;
        use triggers_sdk::wire::subject;
        let server = bench::server().await;
        let proxy = natsbox::FaultProxy::start(server.url()).await.unwrap();
        let inbound = format!("{name}.inbound");
        let running = bench::stand_in(
            server.url(),
            name,
            &inbound,
            false,
            RuntimeConfig {
                nats_url: Some(proxy.url().to_owned()),
                ..Default::default()
            },
        )
        .await;
        let client = triggers_sdk::transport::connect(server.url())
            .await
            .unwrap();
        let events_subject = subject::flow_events(name).unwrap();
        let events = client.subscribe(events_subject.clone()).await.unwrap();
        triggers_sdk::transport::round_trip(&client).await.unwrap();
        let mut proxied = Proxied {
            _server: server,
            proxy,
            running,
            js: async_nats::jetstream::new(client),
            name,
            inbound,
            events_subject,
            events,
        };
        // A first run: the runtime has asked JetStream whether a stream keeps its events (none).
        proxied.trigger("run-1").await;
        assert_eq!(
            next_event(&mut proxied.events, 10).await.flow_run_id,
            "run-1"
        );
        // Its ack written too, so that what is held from now on is a later run's.
        let pending = proxied.acked_within(Duration::from_secs(10)).await;
        assert_eq!(pending, 0, "the first run was not acked");
        proxied
    }

    /// Waits up to `patience` until the service's consumer has no delivery waiting for an ack;
    /// returns how many still wait.
    async fn acked_within(&self, patience: Duration) -> u64 {
        let stream = format!("triggers-sources-{}", self.name);
        let consumer = format!("triggers-{0}-{0}_inbound", self.name);
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let pending = self
                .js
                .get_stream(&stream)
                .await
                .unwrap()
                .consumer_info(&consumer)
                .await
                .unwrap()
                .num_ack_pending as u64;
            if pending == 0 || tokio::time::Instant::now() >= deadline {
                return pending;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Publishes a trigger of run `run` to the service's inbound stream.
    async fn trigger(&self, run: &str) {
        self.js
            .publish_with_headers(
                self.inbound.clone(),
                triggers_integration::bench::envelope_headers(self.name, 1, run, 0),
                br#"{"n":1}"#.to_vec().into(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }

    /// Holds the runtime's connection (the server reads nothing more from it, and still
    /// delivers to it), triggers `run`, and waits until the runtime has written its event.
    async fn event_written_and_held(&self, run: &str) {
        self.proxy.hold(true);
        self.trigger(run).await;
        let publish = format!("PUB {} ", self.events_subject);
        assert!(
            self.proxy
                .wait_held(publish.as_bytes(), Duration::from_secs(10))
                .await,
            "the runtime wrote no completion event within 10 s"
        );
    }
}

/// An action succeeds and its completion event (no stream keeps it: a plain publish) is written,
/// but the connection breaks before the server reads it. The delivery is not acked (its events
/// were not confirmed), comes back, and the kept outcome's event is published again rather than
/// taken as reported: the orchestrator hears of the node. Without, the run would wait forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_lost_with_its_connection_is_reported_again_on_the_redelivery() {
    let mut proxied = Proxied::start("lostev").await;
    proxied.event_written_and_held("run-2").await;
    // The connection breaks with the event unread; the runtime connects again.
    proxied.proxy.cut();
    proxied.proxy.hold(false);

    let event = next_event(&mut proxied.events, 30).await;
    assert_eq!(
        (
            event.flow_run_id.as_str(),
            event.node_id.as_str(),
            event.status.as_str()
        ),
        ("run-2", "noop", "succeeded")
    );
    proxied.running.shutdown().await;
}

/// A delivery is acked only once the server has read its completion event: while the server
/// reads nothing, the runtime writes the event and no ack after it; once the server reads
/// again, the event arrives and the ack follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_is_acked_only_once_its_event_has_reached_the_server() {
    let mut proxied = Proxied::start("ackafter").await;
    proxied.event_written_and_held("run-2").await;
    assert!(
        !proxied
            .proxy
            .wait_held(b"$JS.ACK.", Duration::from_secs(2))
            .await,
        "the runtime acked the delivery before the server had read its event"
    );
    proxied.proxy.hold(false);
    let event = next_event(&mut proxied.events, 10).await;
    assert_eq!(event.flow_run_id, "run-2");
    let pending = proxied.acked_within(Duration::from_secs(10)).await;
    assert_eq!(
        pending, 0,
        "the delivery was not acked once its event was read"
    );
    proxied.running.shutdown().await;
}

/// The next completion event on `events`, decoded, within `patience` seconds.
async fn next_event(
    events: &mut async_nats::Subscriber,
    patience: u64,
) -> triggers_sdk::wire::CompletionEvent {
    let event = tokio::time::timeout(
        Duration::from_secs(patience),
        futures::StreamExt::next(events),
    )
    .await
    .unwrap_or_else(|_| panic!("no completion event within {patience} s"))
    .unwrap();
    triggers_sdk::wire::CompletionEvent::from_json(&event.payload).unwrap()
}
