//! Latency of one hop through the SDK runtime, beside the same hop made with raw async-nats on
//! the same nats-server, in the same run: a message published to service A's inbound stream, A's
//! action, the hand-off (a JetStream publish) to service B's inbound stream, B's action, and B's
//! completion event. The raw hop has the same shape: a durable pull consumer on stream 1 that
//! publishes each message to stream 2 (awaiting the JetStream ack) and acks it, and one on
//! stream 2 that publishes an event and acks. One message at a time, so each sample is a
//! latency, not a queue; the two are measured alternately, in the same rounds, so a noisy
//! neighbour hits both.
//!
//! Prints p50/p99/p999 of each (HDR histograms, microseconds) and ends with one line,
//! `ratios: hop p50 R50, p99 R99, p999 R999` (runtime over raw); `docs/benchmarks.md` keeps the
//! figures. The orchestrator is a stand-in that only answers registrations: what is measured is
//! the runtime, not the emulator.
//!
//! ```sh
//! cargo bench -p triggers-integration --bench hop_latency [-- SAMPLES]
//! ```

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::PullConsumer};
use futures::StreamExt;
use hdrhistogram::Histogram;
use serde_json::json;
use triggers_integration::bench;
use triggers_sdk::runtime::{RunningService, RuntimeConfig};
use triggers_sdk::transport;
use triggers_sdk::wire::CompletionEvent;

async fn stream(js: &jetstream::Context, name: &str, subject: &str) -> jetstream::stream::Stream {
    js.create_stream(jetstream::stream::Config {
        name: name.to_owned(),
        subjects: vec![subject.to_owned()],
        ..Default::default()
    })
    .await
    .unwrap()
}

async fn consumer(stream: &jetstream::stream::Stream) -> PullConsumer {
    stream
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some("raw".into()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .unwrap()
}

/// The raw hop: stream `raw1` → consumer → JetStream publish to `raw2` → consumer → an event on
/// `raw.events`. Returns the subject to publish to and the events to wait on.
async fn raw_pipeline(client: &async_nats::Client) -> async_nats::Subscriber {
    let js = jetstream::new(client.clone());
    let first = consumer(&stream(&js, "raw1", "raw1.in").await).await;
    let second = consumer(&stream(&js, "raw2", "raw2.in").await).await;
    let events = client.subscribe("raw.events").await.unwrap();
    transport::round_trip(client).await.unwrap();
    let hand_off = js.clone();
    tokio::spawn(async move {
        let mut messages = first.messages().await.unwrap();
        while let Some(Ok(msg)) = messages.next().await {
            let headers = msg.headers.clone().unwrap_or_default();
            hand_off
                .publish_with_headers("raw2.in", headers, msg.payload.clone())
                .await
                .unwrap()
                .await
                .unwrap();
            msg.ack().await.unwrap();
        }
    });
    let publisher = client.clone();
    tokio::spawn(async move {
        let mut messages = second.messages().await.unwrap();
        while let Some(Ok(msg)) = messages.next().await {
            publisher
                .publish("raw.events", bench::raw_event("b").into())
                .await
                .unwrap();
            msg.ack().await.unwrap();
        }
    });
    events
}

/// A no-op service `name` on `<name>.inbound`.
async fn hop_service(url: &str, name: &str, action: &str) -> RunningService {
    bench::noop_service(
        name,
        action,
        &format!("{name}.inbound"),
        RuntimeConfig {
            nats_url: Some(url.to_owned()),
            heartbeat_interval: Some(Duration::from_secs(5)),
            ..Default::default()
        },
    )
    .await
}

/// The runtime's hop: services `hopa` and `hopb` on the flow `in → a → inb → b`, with a stand-in
/// orchestrator that answers each registration with that flow. Returns the services (to keep
/// them running) and the events of the flow.
async fn runtime_pipeline(
    client: &async_nats::Client,
    url: &str,
) -> (Vec<RunningService>, async_nats::Subscriber) {
    let js = jetstream::new(client.clone());
    for name in ["hopa", "hopb"] {
        stream(
            &js,
            &format!("triggers-sources-{name}"),
            &format!("{name}.inbound"),
        )
        .await;
    }
    let flow = json!({"id": "hop", "version": 1, "body": {"nodes": [
        {"id": "in", "type": "service-in", "service": "hopa", "inbound": "hopa.inbound"},
        {"id": "a", "type": "action", "service": "hopa", "action": "a", "inbound": "hopa.inbound"},
        {"id": "inb", "type": "service-in", "service": "hopb", "inbound": "hopb.inbound"},
        {"id": "b", "type": "action", "service": "hopb", "action": "b", "inbound": "hopb.inbound"}
    ], "edges": [
        {"id": "e1", "from": "in", "to": "a"},
        {"id": "e2", "from": "a", "to": "inb"},
        {"id": "e3", "from": "inb", "to": "b"}
    ]}});
    let mut register = client
        .subscribe("triggers.v2.manifest.register")
        .await
        .unwrap();
    transport::round_trip(client).await.unwrap();
    let responder = client.clone();
    let reply = serde_json::to_vec(&json!({"flows": [flow]})).unwrap();
    tokio::spawn(async move {
        while let Some(msg) = register.next().await {
            if let Some(to) = msg.reply {
                responder.publish(to, reply.clone().into()).await.unwrap();
            }
        }
    });
    let events = client
        .subscribe("triggers.v2.flow.events.hop")
        .await
        .unwrap();
    transport::round_trip(client).await.unwrap();
    let services = vec![
        hop_service(url, "hopa", "a").await,
        hop_service(url, "hopb", "b").await,
    ];
    (services, events)
}

/// Publishes run `i` to `subject` and waits for the event that ends its hop: any event on the
/// raw side, node `b`'s of run `i` on the runtime's.
async fn one(
    client: &async_nats::Client,
    subject: &str,
    events: &mut async_nats::Subscriber,
    i: usize,
    runtime: bool,
) -> Duration {
    let started = Instant::now();
    client
        .publish_with_headers(
            subject.to_owned(),
            bench::envelope_headers("hop", 1, &format!("run-{i}"), i),
            br#"{"n":1}"#.to_vec().into(),
        )
        .await
        .unwrap();
    let run = format!("run-{i}");
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .expect("the hop ends within 30 s")
            .expect("events");
        if !runtime {
            return started.elapsed();
        }
        let event = CompletionEvent::from_json(&msg.payload).expect("a completion event");
        if event.node_id == "b" && event.flow_run_id == run {
            return started.elapsed();
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

fn main() {
    let (measuring, numbers) = bench::args();
    let samples = numbers
        .first()
        .copied()
        .unwrap_or(if measuring { 5_000 } else { 50 });
    let warm_up = (samples / 10).max(10);
    bench::runtime().block_on(async {
        let server = bench::server().await;
        println!(
            "{samples} hops each (after {warm_up} to warm up), one at a time, {}",
            server.summary()
        );
        let client = triggers_sdk::transport::connect(server.url())
            .await
            .unwrap();
        let mut raw_events = raw_pipeline(&client).await;
        let (services, mut runtime_events) = runtime_pipeline(&client, server.url()).await;

        let mut raw = Histogram::<u64>::new(3).unwrap();
        let mut runtime = Histogram::<u64>::new(3).unwrap();
        for i in 0..warm_up + samples {
            // Alternately, so that whatever else the machine does hits both alike.
            let r = one(&client, "raw1.in", &mut raw_events, i, false).await;
            let s = one(&client, "hopa.inbound", &mut runtime_events, i, true).await;
            if i >= warm_up {
                raw.record(micros(r)).unwrap();
                runtime.record(micros(s)).unwrap();
            }
        }
        for (name, h) in [("raw", &raw), ("runtime", &runtime)] {
            println!(
                "{name:>8}: p50 {:>6} µs   p99 {:>6} µs   p999 {:>6} µs   max {:>6} µs",
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.99),
                h.value_at_quantile(0.999),
                h.max()
            );
        }
        let ratio = |q: f64| runtime.value_at_quantile(q) as f64 / raw.value_at_quantile(q) as f64;
        // This last line is what docs/benchmarks.md records (goal: p50 ≤ 1.5, p99 ≤ 2).
        println!(
            "ratios: hop p50 {:.2}, p99 {:.2}, p999 {:.2}",
            ratio(0.5),
            ratio(0.99),
            ratio(0.999)
        );
        for s in services {
            s.shutdown().await;
        }
        drop(server);
    });
}
