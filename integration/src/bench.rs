//! What the benches share: their arguments, a bare nats-server, and the envelope a trigger
//! carries (so that the raw baselines publish messages as large as the runtime's).

use serde_json::Value;
use triggers_emulator::{Backend, NatsConfig, NatsServer};
use triggers_sdk::runtime::{
    ActionContext, ActionDef, ActionError, ResultEventConfig, RunningService, RuntimeConfig,
    Service,
};
use triggers_sdk::transport;
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::{CompletionEvent, Envelope, GoTime};

/// The bench's numeric arguments (after `--`), and whether it measures: `cargo bench` passes
/// `--bench`; `cargo test --all-targets` does not, and then a bench makes a small run that only
/// checks it still works.
#[must_use]
pub fn args() -> (bool, Vec<usize>) {
    let measuring = std::env::args().any(|a| a == "--bench");
    let numbers = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .filter_map(|a| a.parse().ok())
        .collect();
    (measuring, numbers)
}

/// A multi-threaded Tokio runtime for a bench's `main`.
///
/// # Panics
/// When the runtime cannot be built.
#[must_use]
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime")
}

/// A nats-server (the local binary) with nothing else on it.
///
/// # Panics
/// When it cannot be started.
pub async fn server() -> NatsServer {
    NatsServer::start(NatsConfig {
        backend: Backend::Binary,
        ..Default::default()
    })
    .await
    .expect("a nats-server binary")
}

/// The NATS headers of a trigger of run `run_id` entering flow `flow` v`version` at node `in`
/// (the envelope and its `Nats-Msg-Id`); `n` makes its trace and span ids.
///
/// # Panics
/// Never for these values (every header is valid).
#[must_use]
pub fn envelope_headers(flow: &str, version: i64, run_id: &str, n: usize) -> async_nats::HeaderMap {
    let trace = format!("{:032x}", n + 1);
    let span = format!("{:016x}", n + 1);
    let e = Envelope {
        traceparent: format!("00-{trace}-{span}-01"),
        trace_id: trace,
        span_id: span,
        flow_run_id: run_id.to_owned(),
        flow_id: flow.to_owned(),
        flow_version: version,
        idempotency_key: format!("{run_id}:in"),
        source_node_id: "in".into(),
        retry_count: 0,
        emitted_at: GoTime::now(),
    };
    let mut h = e.to_headers();
    h.insert(names::NATS_MSG_ID, e.nats_msg_id());
    transport::to_nats(&h).expect("valid envelope headers")
}

/// A service `name` with one no-op `action` (its input is its result), consuming `inbound`,
/// started with `config`.
///
/// # Panics
/// When it cannot start.
pub async fn noop_service(
    name: &str,
    action: &str,
    inbound: &str,
    config: RuntimeConfig,
) -> RunningService {
    Service::builder(name, "1.0.0")
        .action(
            ActionDef::new(action, |v: Value, _ctx: ActionContext| async move {
                Ok::<_, ActionError>(v)
            })
            .result_event(ResultEventConfig::Off),
        )
        .nats_source("nats", inbound)
        .config(config)
        .build()
        .expect("a no-op service")
        .start()
        .await
        .expect("the no-op service starts")
}

/// A service `name` with a no-op action `noop` consuming `inbound`, on the server at `url`
/// with no emulator: its inbound stream made here, and a stand-in orchestrator that answers its
/// registration with a flow `name` (v1, `in` -> `noop`) and nothing else. With `events_stream`, a
/// stream keeps the flow's completion events (as the emulator's does), so the runtime publishes
/// them through JetStream; without, they are plain publishes. The runtime connects to
/// `config.nats_url` when it is set (a proxy in front of the server, say), else to `url`.
///
/// # Panics
/// When the streams cannot be made or the service cannot start.
pub async fn stand_in(
    url: &str,
    name: &str,
    inbound: &str,
    events_stream: bool,
    config: RuntimeConfig,
) -> RunningService {
    use futures::StreamExt;
    let client = triggers_sdk::transport::connect(url)
        .await
        .expect("connects");
    let js = async_nats::jetstream::new(client.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: format!("triggers-sources-{name}"),
        subjects: vec![inbound.to_owned()],
        ..Default::default()
    })
    .await
    .expect("the inbound stream");
    if events_stream {
        js.create_stream(async_nats::jetstream::stream::Config {
            name: format!("events-{name}"),
            subjects: vec![triggers_sdk::wire::subject::flow_events(name).expect("a flow id")],
            ..Default::default()
        })
        .await
        .expect("the events stream");
    }
    let flow = serde_json::json!({"id": name, "version": 1, "body": {"nodes": [
        {"id": "in", "type": "service-in", "service": name, "inbound": inbound},
        {"id": "noop", "type": "action", "service": name, "action": "noop", "inbound": inbound}
    ], "edges": [{"id": "e1", "from": "in", "to": "noop"}]}});
    let mut register = client
        .subscribe(triggers_sdk::wire::subject::MANIFEST_REGISTER)
        .await
        .expect("subscribes");
    transport::round_trip(&client).await.expect("a round trip");
    let reply = serde_json::to_vec(&serde_json::json!({"flows": [flow]})).expect("JSON");
    tokio::spawn(async move {
        if let Some(reply_to) = register.next().await.and_then(|m| m.reply) {
            let _ = client.publish(reply_to, reply.into()).await;
        }
    });
    noop_service(
        name,
        "noop",
        inbound,
        RuntimeConfig {
            nats_url: Some(config.nats_url.clone().unwrap_or_else(|| url.to_owned())),
            ..config
        },
    )
    .await
}

/// The completion event the raw baselines publish: node `node` succeeded, as large as the
/// runtime's.
///
/// # Panics
/// Never (the event always encodes).
#[must_use]
pub fn raw_event(node: &str) -> Vec<u8> {
    let now = GoTime::now();
    CompletionEvent {
        flow_run_id: "r".into(),
        flow_id: "raw".into(),
        flow_version: 1,
        node_id: node.into(),
        node_type: "action".into(),
        service: "raw".into(),
        started_at: now,
        finished_at: now,
        status: "succeeded".into(),
        ..Default::default()
    }
    .to_json()
    .expect("an event encodes")
}

/// The machine's CPU time spent (every core, every process: the server, the publisher and the
/// consumer alike) since it was made, read from `/proc/stat`: what a side of a bench costs per
/// message, a figure the machine's other load disturbs far less than a rate does. `None` where
/// `/proc/stat` cannot be read.
pub struct CpuMeter {
    start: Option<u64>,
    own_start: Option<u64>,
}

impl CpuMeter {
    /// Starts counting.
    #[must_use]
    pub fn start() -> Self {
        CpuMeter {
            start: busy_ticks(),
            own_start: own_ticks(),
        }
    }

    /// The CPU time spent since [`CpuMeter::start`], per message of `n`, in microseconds.
    #[must_use]
    pub fn micros_per(&self, n: usize) -> Option<f64> {
        let spent = busy_ticks()?.checked_sub(self.start?)?;
        Some(ticks_to_micros_per(spent, n))
    }

    /// The part of [`CpuMeter::micros_per`] spent by this process (the bench's publisher and
    /// consumer, a runtime or emulator it runs in-process), not by the server or anything else
    /// on the machine.
    #[must_use]
    pub fn own_micros_per(&self, n: usize) -> Option<f64> {
        let spent = own_ticks()?.checked_sub(self.own_start?)?;
        Some(ticks_to_micros_per(spent, n))
    }
}

/// Ticks as microseconds per message: the kernel counts in USER_HZ ticks, 100 per second on Linux.
fn ticks_to_micros_per(ticks: u64, n: usize) -> f64 {
    ticks as f64 * 10_000.0 / n.max(1) as f64
}

/// This process's user and system ticks, from `/proc/self/stat` (fields 14 and 15, counted after
/// the command name, which is in parentheses and may hold spaces).
fn own_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    // After the name: state (field 3) ... utime (14), stime (15).
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

/// The busy ticks of every core (all but idle and I/O wait), from the first line of `/proc/stat`.
fn busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq (then steal: another guest's, not ours)
    let busy = fields.iter().take(7).enumerate();
    Some(
        busy.filter(|(i, _)| *i != 3 && *i != 4)
            .map(|(_, v)| v)
            .sum(),
    )
}

/// The server's message and byte counters (`/varz`: `in_msgs`, `out_msgs`, `in_bytes`,
/// `out_bytes`), read over plain HTTP from its monitoring URL; `None` when it cannot be read.
#[must_use]
pub fn traffic(monitor_url: &str) -> Option<[u64; 4]> {
    use std::io::{Read, Write};
    let host = monitor_url.strip_prefix("http://")?.trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(host).ok()?;
    write!(
        stream,
        "GET /varz HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let body: serde_json::Value = serde_json::from_str(text.split("\r\n\r\n").nth(1)?).ok()?;
    let n = |k: &str| body.get(k).and_then(serde_json::Value::as_u64);
    Some([
        n("in_msgs")?,
        n("out_msgs")?,
        n("in_bytes")?,
        n("out_bytes")?,
    ])
}
