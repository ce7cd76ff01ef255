//! Throughput of a no-op action through the SDK runtime (publish to completion event), beside raw
//! async-nats JetStream consume-and-ack (publish to ack), measured in the same run on the same
//! nats-server, with the same publisher and the same consumer settings; the same runtime with the
//! emulator as its orchestrator; and, to tell the emulator's own cost from that of the events
//! stream it keeps, the runtime alone with such a stream. Prints each round's rates and ratios, and
//! ends with one line, the medians of the per-round ratios, after the machine's CPU time per
//! message on each side:
//!
//! `ratios: runtime/raw R, emulator/runtime E, runtime/raw+event F, emulator/runtime+stream G`
//!
//! F and G hold each side to a baseline that does the same work: the runtime to raw
//! consume-and-ack that also publishes the completion event every node reports, the emulator to
//! the runtime whose events a JetStream stream keeps, as the emulator's does.
//! `docs/benchmarks.md` keeps the figures.
//!
//! Every side runs in this one process, on mimalloc (as `triggers-lab` does): glibc's malloc took
//! a quarter of the machine's time per message on the runtime's side, more than any code of ours.
//! `--features system-alloc` measures on glibc's instead.
//!
//! ```sh
//! cargo bench -p triggers-integration --bench runtime_throughput [-- MESSAGES [ROUNDS]]
//! BENCH_ONLY=emulator cargo bench -p triggers-integration --bench runtime_throughput   # one side, to profile
//! cargo bench -p triggers-integration --features system-alloc --bench runtime_throughput
//! ```

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::PullConsumer};
use futures::StreamExt;
use serde_json::json;
use triggers_integration::{bench, config, lab};
use triggers_sdk::flow::Flow;
use triggers_sdk::runtime::RuntimeConfig;

#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The allocator every side runs on, for the report.
const ALLOCATOR_NAME: &str = if cfg!(feature = "system-alloc") {
    "the system allocator"
} else {
    "mimalloc"
};

const CONCURRENCY: usize = 64;

/// The envelope a trigger carries: run `i` of `round`, of `flow`, entering at node `in`.
fn envelope_headers(flow: &str, version: i64, round: usize, i: usize) -> async_nats::HeaderMap {
    bench::envelope_headers(flow, version, &format!("run-{round}-{i}"), i)
}

/// Publishes `n` messages as fast as JetStream acks them (a window of outstanding acks).
async fn publish(
    js: &jetstream::Context,
    subject: &str,
    n: usize,
    headers: impl Fn(usize) -> async_nats::HeaderMap,
) {
    let mut pending = futures::stream::FuturesUnordered::new();
    for i in 0..n {
        let ack = js
            .publish_with_headers(
                subject.to_owned(),
                headers(i),
                br#"{"n":1}"#.to_vec().into(),
            )
            .await
            .expect("publish");
        pending.push(ack.into_future());
        if pending.len() >= 256 {
            pending.next().await.expect("an ack").expect("acked");
        }
    }
    while let Some(ack) = pending.next().await {
        ack.expect("acked");
    }
}

/// Raw async-nats: a durable pull consumer, `CONCURRENCY` messages in flight, each acked (and,
/// with `event`, a completion event published for each first, as the runtime does).
async fn raw(url: &str, n: usize, round: usize) -> Measured {
    raw_with(url, n, round, false).await
}

async fn raw_with(url: &str, n: usize, round: usize, event: bool) -> Measured {
    let client = triggers_sdk::transport::connect(url).await.unwrap();
    let js = jetstream::new(client.clone());
    let tag = if event { "rawev" } else { "raw" };
    let subject = format!("{tag}{round}.in");
    let events_subject = format!("triggers.v2.flow.events.{tag}{round}");
    let mut events = client.subscribe(events_subject.clone()).await.unwrap();
    triggers_sdk::transport::round_trip(&client).await.unwrap();
    let stream = js
        .create_stream(jetstream::stream::Config {
            name: format!("{tag}{round}"),
            subjects: vec![subject.clone()],
            ..Default::default()
        })
        .await
        .unwrap();
    let consumer: PullConsumer = stream
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some("raw".into()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            max_ack_pending: (CONCURRENCY * 4) as i64,
            ..Default::default()
        })
        .await
        .unwrap();
    let start = Instant::now();
    let cpu = bench::CpuMeter::start();
    let publisher = client.clone();
    let count = tokio::spawn(async move {
        if event {
            for _ in 0..n {
                events.next().await.unwrap();
            }
        }
    });
    let consume = tokio::spawn(async move {
        let mut messages = consumer
            .stream()
            .max_messages_per_batch(CONCURRENCY)
            .messages()
            .await
            .unwrap();
        let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut seen = 0;
        while seen < n {
            let msg = messages.next().await.unwrap().unwrap();
            seen += 1;
            let permit = permits.clone().acquire_owned().await.unwrap();
            let done_tx = done_tx.clone();
            let publisher = publisher.clone();
            let events_subject = events_subject.clone();
            tokio::spawn(async move {
                if event {
                    publisher
                        .publish(events_subject, bench::raw_event("noop").into())
                        .await
                        .unwrap();
                }
                msg.ack().await.unwrap();
                drop(permit);
                let _ = done_tx.send(());
            });
        }
        for _ in 0..n {
            done_rx.recv().await;
        }
    });
    // The same messages the runtime gets: the envelope headers make them as large.
    publish(&js, &subject, n, |i| envelope_headers("raw", 1, round, i)).await;
    consume.await.unwrap();
    count.await.unwrap();
    Measured::since(start, &cpu, n)
}

/// The runtime with the emulator as its orchestrator (recording and checking every message, and
/// keeping completion events in a stream): time from the first publish to the n-th event.
async fn with_emulator(lab: &triggers_emulator::Harness, n: usize, round: usize) -> Measured {
    let service_name = format!("bench{round}");
    let inbound = format!("bench{round}.inbound");
    let running = bench::noop_service(
        &service_name,
        "noop",
        &inbound,
        RuntimeConfig {
            max_concurrency: Some(CONCURRENCY),
            heartbeat_interval: Some(Duration::from_secs(5)),
            ..config(lab)
        },
    )
    .await;
    let flow: Flow = serde_json::from_value(json!({"id": service_name, "nodes": [
        {"id": "in", "type": "service-in", "service": service_name},
        {"id": "noop", "type": "action", "service": service_name, "action": "noop"}
    ], "edges": [{"id": "e1", "from": "in", "to": "noop"}]}))
    .unwrap();
    let deployed = lab.deploy(flow).await.unwrap();
    assert!(
        running
            .wait_for_flow(&service_name, deployed.flow.version, Duration::from_secs(5))
            .await
    );

    let client = triggers_sdk::transport::connect(lab.url()).await.unwrap();
    let mut events = client
        .subscribe(format!("triggers.v2.flow.events.{service_name}"))
        .await
        .unwrap();
    triggers_sdk::transport::round_trip(&client).await.unwrap();
    let js = jetstream::new(client.clone());
    let start = Instant::now();
    let cpu = bench::CpuMeter::start();
    let count = tokio::spawn(async move {
        for _ in 0..n {
            events.next().await.unwrap();
        }
    });
    let version = deployed.flow.version;
    publish(&js, &inbound, n, |i| {
        envelope_headers(&service_name, version, round, i)
    })
    .await;
    count.await.unwrap();
    let measured = Measured::since(start, &cpu, n);
    running.shutdown().await;
    measured
}

fn main() {
    // As `triggers-lab` does (cli/src/main.rs): the emulator's growing heap on huge pages has
    // the kernel zeroing 2 MiB at a fault.
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    let (measuring, numbers) = bench::args();
    let n = numbers
        .first()
        .copied()
        .unwrap_or(if measuring { 5_000 } else { 100 });
    let rounds = numbers
        .get(1)
        .copied()
        .unwrap_or(if measuring { 3 } else { 1 });
    bench::runtime().block_on(async {
        let bare = bench::server().await;
        println!(
            "{n} messages per round, {rounds} rounds, {CONCURRENCY} in flight, {ALLOCATOR_NAME}, {}",
            bare.summary()
        );
        // One side alone, for a profiler (`perf record`):
        // BENCH_ONLY=raw|raw+event|runtime|runtime+stream|emulator.
        if let Ok(side) = std::env::var("BENCH_ONLY") {
            // The emulator side runs on a server of its own: its traffic is counted there.
            let emulator_lab = if side == "emulator" {
                Some(lab().await)
            } else {
                None
            };
            let monitor = emulator_lab
                .as_ref()
                .map_or(bare.monitor_url(), |l| l.monitor_url())
                .map(str::to_owned);
            let before = monitor.as_deref().and_then(bench::traffic);
            let measured = match side.as_str() {
                "raw" => raw(bare.url(), n, 0).await,
                "raw+event" => raw_with(bare.url(), n, 0, true).await,
                "runtime" => runtime_alone(bare.url(), n, 0, false).await,
                "runtime+stream" => runtime_alone(bare.url(), n, 0, true).await,
                "emulator" => with_emulator(emulator_lab.as_ref().expect("started above"), n, 0).await,
                other => panic!(
                    "BENCH_ONLY={other}: expected raw, raw+event, runtime, runtime+stream or emulator"
                ),
            };
            println!(
                "{side} only: {:.0} msg/s, {:.0} µs of CPU per message, {:.0} µs of it in this process",
                n as f64 / measured.elapsed.as_secs_f64(),
                measured.cpu_micros.unwrap_or(f64::NAN),
                measured.own_micros.unwrap_or(f64::NAN)
            );
            if let (Some(before), Some(after)) =
                (before, monitor.as_deref().and_then(bench::traffic))
            {
                let per = |i: usize| after[i].saturating_sub(before[i]) as f64 / n as f64;
                println!(
                    "the server, per message: {:.2} messages in, {:.2} out, {:.0} bytes in, {:.0} out",
                    per(0),
                    per(1),
                    per(2),
                    per(3)
                );
            }
            return;
        }
        // The emulator runs on a server of its own, started once; each round measures it beside
        // the others so that its ratio to the runtime is taken within the round.
        let lab = lab().await;
        let mut raw_rates = Vec::new();
        let mut rt_rates = Vec::new();
        let mut ev_rates = Vec::new();
        let mut stream_rates = Vec::new();
        let mut emu_rates = Vec::new();
        let mut rt_ratios = Vec::new();
        let mut emu_ratios = Vec::new();
        let mut own_ratios = Vec::new();
        let mut fair_rt_ratios = Vec::new();
        let mut cpu: [Vec<f64>; 5] = Default::default();
        let mut own: [Vec<f64>; 5] = Default::default();
        for round in 0..rounds {
            // Each round starts with another side: the server gathers streams and stored
            // messages as a round goes on, and the machine's load drifts, so no side should
            // always go first (or last).
            let mut ran: [Option<Measured>; 5] = [None; 5];
            for k in 0..ran.len() {
                let side = (round + k) % ran.len();
                ran[side] = Some(match side {
                    0 => raw(bare.url(), n, round).await,
                    1 => raw_with(bare.url(), n, round, true).await,
                    2 => runtime_alone(bare.url(), n, round, false).await,
                    3 => runtime_alone(bare.url(), n, round, true).await,
                    _ => with_emulator(&lab, n, round).await,
                });
            }
            let sides = ran.map(|m| m.expect("every side ran this round"));
            let [rr, er, sr, tr, mr] = sides.map(|m| n as f64 / m.elapsed.as_secs_f64());
            println!(
                "round {round}: raw {rr:>7.0} msg/s   raw+event {er:>7.0} msg/s   runtime {sr:>7.0} msg/s   runtime+stream {tr:>7.0} msg/s   emulator {mr:>7.0} msg/s   runtime/raw {:.2} (vs raw+event {:.2})   emulator/runtime {:.2} (vs runtime+stream {:.2})",
                sr / rr,
                sr / er,
                mr / sr,
                mr / tr
            );
            own_ratios.push(mr / tr);
            for ((spent, own), side) in cpu.iter_mut().zip(&mut own).zip(&sides) {
                spent.extend(side.cpu_micros);
                own.extend(side.own_micros);
            }
            raw_rates.push(rr);
            ev_rates.push(er);
            rt_rates.push(sr);
            stream_rates.push(tr);
            emu_rates.push(mr);
            rt_ratios.push(sr / rr);
            emu_ratios.push(mr / sr);
            fair_rt_ratios.push(sr / er);
        }
        let (rr, er, sr, tr, mr) = (
            median(&mut raw_rates),
            median(&mut ev_rates),
            median(&mut rt_rates),
            median(&mut stream_rates),
            median(&mut emu_rates),
        );
        println!(
            "median rates: raw {rr:.0} msg/s, raw+event {er:.0} msg/s, runtime {sr:.0} msg/s, runtime+stream {tr:.0} msg/s, emulator {mr:.0} msg/s"
        );
        // What each side costs the machine (every process, every core) per message: the rates
        // are bounded by it on a machine the sides saturate, and the machine's other load moves it
        // far less than it moves a rate.
        if cpu.iter().all(|c| c.len() == rounds) {
            let [raw, ev, rt, rts, emu] = cpu.map(|mut c| median(&mut c));
            println!(
                "median CPU per message: raw {raw:.0} µs, raw+event {ev:.0} µs, runtime {rt:.0} µs, runtime+stream {rts:.0} µs, emulator {emu:.0} µs"
            );
        }
        // Of which this process's (the bench's clients, the runtime, the emulator): the rest is
        // the server's, and tells how much of a gap the clients could close at all.
        if own.iter().all(|c| c.len() == rounds) {
            let [raw, ev, rt, rts, emu] = own.map(|mut c| median(&mut c));
            println!(
                "  of which in the bench process: raw {raw:.0} µs, raw+event {ev:.0} µs, runtime {rt:.0} µs, runtime+stream {rts:.0} µs, emulator {emu:.0} µs"
            );
        }
        // The ratios are taken within each round (the machine's load changes between rounds), and
        // their medians reported: this last line is what docs/benchmarks.md records. The emulator
        // keeps the completion events in a stream (a server restart loses none), so the runtime it
        // drives publishes each event through JetStream; beside a runtime doing the same without
        // an emulator (runtime+stream), what is left is the emulator's own cost.
        // The last two hold each side to a baseline that does the same work (design.md,
        // decision 11): the runtime to raw consume-and-ack with a completion event, the emulator
        // to the runtime with an events stream.
        println!(
            "ratios: runtime/raw {:.2}, emulator/runtime {:.2}, runtime/raw+event {:.2}, emulator/runtime+stream {:.2}",
            median(&mut rt_ratios),
            median(&mut emu_ratios),
            median(&mut fair_rt_ratios),
            median(&mut own_ratios)
        );
        drop(lab);
        drop(bare);
    });
}

/// One side's run: how long it took, and the machine's CPU time per message meanwhile.
#[derive(Clone, Copy)]
struct Measured {
    elapsed: Duration,
    cpu_micros: Option<f64>,
    /// The part of `cpu_micros` this process spent (all but the server's share).
    own_micros: Option<f64>,
}

impl Measured {
    fn since(start: Instant, cpu: &bench::CpuMeter, n: usize) -> Self {
        Measured {
            elapsed: start.elapsed(),
            cpu_micros: cpu.micros_per(n),
            own_micros: cpu.own_micros_per(n),
        }
    }
}

/// The median of `v` (the mean of the middle two when its length is even).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

/// The runtime with a stand-in orchestrator that only answers the registration: no emulator
/// recording or checking anything, so the runtime's own cost is what is measured.
///
/// With `events_stream`, a JetStream stream keeps the service's completion events, as the
/// emulator's does: the runtime then publishes each through JetStream and waits for its ack.
async fn runtime_alone(url: &str, n: usize, round: usize, events_stream: bool) -> Measured {
    let tag = if events_stream { "stream" } else { "alone" };
    let service_name = format!("{tag}{round}");
    let inbound = format!("{tag}{round}.inbound");
    let running = bench::stand_in(
        url,
        &service_name,
        &inbound,
        events_stream,
        RuntimeConfig {
            max_concurrency: Some(CONCURRENCY),
            ..Default::default()
        },
    )
    .await;
    let client = triggers_sdk::transport::connect(url).await.unwrap();
    let js = jetstream::new(client.clone());
    let mut events = client
        .subscribe(format!("triggers.v2.flow.events.{service_name}"))
        .await
        .unwrap();
    triggers_sdk::transport::round_trip(&client).await.unwrap();
    let start = Instant::now();
    let cpu = bench::CpuMeter::start();
    let count = tokio::spawn(async move {
        for _ in 0..n {
            events.next().await.unwrap();
        }
    });
    publish(&js, &inbound, n, |i| {
        envelope_headers(&service_name, 1, round, i)
    })
    .await;
    count.await.unwrap();
    let measured = Measured::since(start, &cpu, n);
    running.shutdown().await;
    measured
}
