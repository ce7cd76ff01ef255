//! The orchestrator emulator: registration, heartbeats, releases, broadcasts, flow runs, Durable
//! Timers, the recorder and the conformance checker, on one NATS connection.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_nats::jetstream;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use triggers_sdk::flow::{self, Flow, IdKind, NodeType};
use triggers_sdk::transport;
use triggers_sdk::wire::durable_timer::{self, RootContext, TimerContext};
use triggers_sdk::wire::header::{Traceparent, names};
use triggers_sdk::wire::subject::{self};
use triggers_sdk::wire::{
    CompletionEvent, Envelope, FlowEnvelope, GoTime, Headers, idempotency, json,
};

use crate::clock::{Clock, ClockMode};
use crate::conformance::{Severity, Violation};
use crate::error::EmulatorError;
use crate::recorder::{Body, Record, RecordKind, Run, ServiceState, share_headers};
use crate::release::{self, ReleaseCode, ReleaseProblem};

/// What to do when a registration's `manifest_hash` is not the hash of its contents: the
/// emulator's setting, a scenario's `emulator.hash_mismatch` (`reject`, `record`) and
/// `up --hash-mismatch`, one type for the three.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum HashMismatchPolicy {
    /// Refuse the registration with an error reply (what the orchestrator does).
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(help = "Refuse a registration whose manifest_hash is wrong")
    )]
    Reject,
    /// Accept it; the conformance checker records the violation.
    #[cfg_attr(
        feature = "clap",
        value(help = "Accept it and record a conformance violation")
    )]
    Record,
}

impl std::fmt::Display for HashMismatchPolicy {
    /// The name a scenario file and `up --hash-mismatch` use: `reject`, `record`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HashMismatchPolicy::Reject => "reject",
            HashMismatchPolicy::Record => "record",
        })
    }
}

/// How the emulator behaves. Every field has a default; set what you need and end with
/// `..Default::default()`.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// A registration whose hash is wrong: refused (default) or accepted and recorded.
    pub hash_mismatch: HashMismatchPolicy,
    /// The clock Durable Timers run on: virtual (default) or real.
    pub clock: ClockMode,
    /// On the virtual clock, jump to the next timer whenever every run is idle (default off:
    /// tests advance by hand).
    pub auto_advance: bool,
    /// The heartbeat period services use; liveness is judged against it (default 5 s).
    pub heartbeat_interval: Duration,
    /// How long the `wait_*` methods wait before failing (default 10 s).
    pub wait_timeout: Duration,
    /// Serve the control API (`triggerslab.v1.control.*`) for the CLI and the terminal UI
    /// (default on).
    pub control_api: bool,
    /// JetStream's dedup window on the DLQ stream (default 2 min).
    pub dlq_duplicate_window: Duration,
    /// Records kept; older ones drop off, counted (default 100 000).
    pub max_records: usize,
    /// Bytes of records kept (payloads, headers, subjects); older ones drop off, counted
    /// (default 256 MiB).
    pub max_record_bytes: usize,
    /// Settled runs kept; the oldest beyond it are evicted, counted in the `state` summary
    /// (default 10 000). Runs still running or waiting are never evicted.
    pub max_runs: usize,
    /// Runs open at once (running, or waiting for a service, a timer or a retry): a trigger
    /// beyond it is refused with [`EmulatorError::TooManyOpenRuns`] (default 100 000). Open runs
    /// are never evicted, so without it a load on a flow whose service is down would grow the
    /// emulator's memory without end.
    pub max_open_runs: usize,
    /// Open runs the emulator did not start, followed from their completion events (another
    /// orchestrator's, or anyone's on the server: default 10 000). A bound of their own, apart
    /// from `max_open_runs`, so that events for made-up run ids cannot fill the room of the runs
    /// the emulator starts and refuse its triggers. Beyond it an event is recorded and judged,
    /// its run not followed, counted (`unfollowed_runs`).
    pub max_followed_runs: usize,
    /// Services registered at once (default 10 000): a registration under a new name beyond it
    /// is refused, with what to do. Each service costs an inbound stream on the server and a
    /// subscription here, so a service that registers under a new name at every start (a
    /// process id in its name) would otherwise grow both without end over a long `up`.
    pub max_services: usize,
    /// Conformance violations kept; later ones are counted, not kept (default 10 000). At most
    /// 16 are kept per message. The payloads and headers they hold are bounded by
    /// `max_record_bytes` as well: past it, a violation keeps only an excerpt of its message
    /// (the first 4 KiB of the payload, the first 64 headers), counted as trimmed.
    pub max_violations: usize,
    /// The age limit of every JetStream stream the emulator creates: the DLQ and events streams
    /// and each service's inbound stream (default 24 h).
    pub stream_max_age: Duration,
    /// The size limit of each of those streams, in bytes (default 256 MiB). JetStream reserves
    /// it of the server's storage (by default three quarters of the free disk); a stream the
    /// server cannot reserve it for is made with half, and half again, down to 1 MiB
    /// ([`transport::reserving`]), with a warning.
    pub stream_max_bytes: i64,
    /// Replicas of every stream the emulator creates (its DLQ and events streams, each service's
    /// inbound stream): 1 for one server, 3 on a three-node cluster so a node's loss loses
    /// nothing. `0` (the default): as many as the server has nodes, up to 3 ([`Harness`]
    /// fills it in; an emulator started on its own treats 0 as 1).
    ///
    /// [`Harness`]: crate::Harness
    pub stream_replicas: usize,
    /// Counts the messages NATS drops for the emulator's slow subscriptions; the connection given
    /// to [`Emulator::start`] must be made with [`crate::drops::connect_options`] over this same
    /// counter (the harness, `triggers-lab up` and the scenario runner do).
    pub slow_consumers: triggers_sdk::transport::DropCounter,
    /// The connection the control API is served on and the records are published on (default
    /// `None`: the emulator's own). `triggers-lab up` passes one logged in to the server's
    /// control account, out of the services' reach (see `NatsConfig::private_control`); the
    /// [`Harness`](crate::Harness) does the same when its server has one.
    pub control_client: Option<async_nats::Client>,
    /// A secret every control request must carry in the `Triggers-Lab-Token` header; records
    /// then go to `triggerslab.v1.records.<token>` (default `None`: no token, records on
    /// `triggerslab.v1.records`). See [`crate::control`].
    pub control_token: Option<crate::control::ControlToken>,
    /// The wire tap: a connection of its own that watches, in the order the server routes them,
    /// the services' events, DLQ entries, hops and acks, for the rules only order can tell
    /// (`ack_before_reports`, `dlq_before_failed_event`, `handed_on_before_event`,
    /// `hop_not_jetstream`). Default [`WireTap::Auto`]: on where the emulator knows how to log in
    /// to the server (the [`Harness`](crate::Harness) and `triggers-lab up` fill it in), else off.
    pub wire_tap: WireTap,
    /// Before serving, empty the services' inbound streams (`triggers-sources-*`) of the
    /// deliveries an earlier emulator left on the server (default off; `triggers-lab up` turns it
    /// on). Without it, a new emulator on a used server hands the services the dead one's work:
    /// runs it never started, DLQ entries for flows nobody deployed. What was removed, and what
    /// the DLQ and events streams held from before (never replayed), is in
    /// [`Emulator::found_at_start`]. Off for tests, where several emulators may share a server.
    pub clean_start: bool,
}

/// Whether and how the emulator taps the wire ([`EmulatorConfig::wire_tap`]).
#[derive(Debug, Clone, Default)]
pub enum WireTap {
    /// No tap: the rules that need order are not judged.
    Off,
    /// On where the emulator knows the server's URL and credentials: the [`Harness`](crate::Harness)
    /// and `triggers-lab up` turn it into [`WireTap::Connect`]; [`Emulator::start`] given `Auto`
    /// (it knows only a client) runs without one.
    #[default]
    Auto,
    /// Tap with these options (the orchestrator's user: it must see `$JS.ACK.>` and the services'
    /// subjects).
    Connect(natsbox::tap::TapOptions),
}

impl WireTap {
    /// `Auto` made concrete for a server at `url`, logged in as `credentials` if any; `Off` and
    /// `Connect` as they are.
    #[must_use]
    pub fn resolve(
        self,
        url: &str,
        credentials: Option<&natsbox::OrchestratorCredentials>,
    ) -> WireTap {
        match self {
            WireTap::Auto => {
                let mut options = natsbox::tap::TapOptions::new(url);
                if let Some(c) = credentials {
                    options = options.user_and_password(&c.user, &c.password);
                }
                WireTap::Connect(options)
            }
            other => other,
        }
    }
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            hash_mismatch: HashMismatchPolicy::default(),
            clock: ClockMode::default(),
            auto_advance: false,
            heartbeat_interval: Duration::from_secs(5),
            wait_timeout: Duration::from_secs(10),
            control_api: true,
            dlq_duplicate_window: Duration::from_secs(120),
            max_records: 100_000,
            max_record_bytes: 256 << 20,
            max_runs: 10_000,
            max_open_runs: 100_000,
            max_followed_runs: 10_000,
            max_services: 10_000,
            max_violations: 10_000,
            stream_max_age: Duration::from_secs(24 * 3600),
            stream_max_bytes: 256 << 20,
            stream_replicas: 0,
            slow_consumers: triggers_sdk::transport::DropCounter::new(),
            control_client: None,
            control_token: None,
            wire_tap: WireTap::default(),
            clean_start: false,
        }
    }
}

/// How long the emulator's start waits for its wire tap to connect.
const TAP_PATIENCE: Duration = Duration::from_secs(10);

/// How long a publish to a replicated stream is retried while the stream elects a leader.
const CLUSTER_PUBLISH_PATIENCE: Duration = Duration::from_secs(30);

/// How many of its own `Nats-Msg-Id`s the emulator remembers, to tell its deliveries from a
/// peer's.
const OWN_IDS_KEPT: usize = 100_000;

/// The JetStream stream that holds every DLQ publish, so `Nats-Msg-Id` dedup is the server's own.
pub const DLQ_STREAM: &str = "TRIGGERS_DLQ";
/// The JetStream stream that holds every completion event, so none is lost to a server restart
/// (an SDK that publishes through JetStream gets an ack; a plain publish is stored as well).
pub const EVENTS_STREAM: &str = "TRIGGERS_EVENTS";

/// Creates (or reuses) a stream over `subjects`; returns the sequence its next message will
/// get, from which the emulator follows it.
pub(crate) async fn stream_end(
    js: &jetstream::Context,
    name: &str,
    subjects: &str,
    config: &EmulatorConfig,
) -> Result<u64, EmulatorError> {
    // A cluster still electing its leaders answers late or "temporarily unavailable": patience.
    let stream_config = jetstream::stream::Config {
        name: name.into(),
        subjects: vec![subjects.into()],
        duplicate_window: config.dlq_duplicate_window.min(config.stream_max_age),
        max_age: config.stream_max_age,
        max_bytes: config.stream_max_bytes,
        num_replicas: config.stream_replicas.max(1),
        ..Default::default()
    };
    let stream = transport::patiently("create a stream", || {
        transport::reserving("the emulator", stream_config.clone(), |c| {
            js.get_or_create_stream(c)
        })
    })
    .await
    .map_err(|e| EmulatorError::nats("create a stream", format!("{name}: {e}")))?;
    // The stream's state as the server answered the lookup or the creation: asking again cost a
    // round trip and told nothing newer worth waiting for.
    Ok(stream.cached_info().state.last_sequence + 1)
}

/// What an earlier emulator left on the server, found when this one started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FoundAtStart {
    /// The stream.
    pub stream: String,
    /// How many messages it held (for the DLQ and events streams, the last sequence: what an
    /// earlier emulator saw, never replayed).
    pub messages: u64,
    /// Whether they were removed (the deliveries waiting in a service's inbound stream, with
    /// [`EmulatorConfig::clean_start`]), or only skipped.
    pub removed: bool,
}

impl std::fmt::Display for FoundAtStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.removed {
            write!(
                f,
                "removed {} delivery(ies) an earlier emulator left waiting in stream {}",
                self.messages, self.stream
            )
        } else {
            write!(
                f,
                "stream {} holds {} message(s) from before this emulator: not replayed",
                self.stream, self.messages
            )
        }
    }
}

/// Empties every service's inbound stream (`triggers-sources-*`) of what waits in it; returns
/// what was removed.
async fn clean_inbound_streams(js: &jetstream::Context) -> Vec<FoundAtStart> {
    let mut names = js.stream_names();
    let mut found = Vec::new();
    while let Some(name) = futures::StreamExt::next(&mut names).await {
        let Ok(name) = name else { break };
        if !name.starts_with("triggers-sources-") {
            continue;
        }
        let Ok(mut stream) = js.get_stream(&name).await else {
            continue;
        };
        let held = stream.info().await.map(|i| i.state.messages).unwrap_or(0);
        if held == 0 {
            continue;
        }
        match stream.purge().await {
            Ok(purged) => found.push(FoundAtStart {
                stream: name,
                messages: purged.purged,
                removed: true,
            }),
            Err(e) => tracing::warn!(
                stream = name,
                "cannot empty stream {name} of an earlier emulator's deliveries: {e}"
            ),
        }
    }
    found
}

/// The result of a deploy.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Deployment {
    /// The flow as released: owners assigned, inbound subjects resolved, version set.
    pub flow: Flow,
    /// The subject it was broadcast on.
    pub broadcast_subject: String,
}

/// A run the emulator started.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct RunId(pub String);

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for RunId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Options of a trigger.
#[derive(Debug, Clone, Default)]
pub struct TriggerOptions {
    /// The service-in node to start at (default: the flow's first entry point).
    pub entry: Option<String>,
    /// The run id (default: a new random one).
    pub run_id: Option<String>,
}

/// A timer that fired during an `advance`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct FiredTimer {
    /// The run.
    pub run_id: String,
    /// The timer node.
    pub node_id: String,
    /// Which occurrence.
    pub occurrence: u64,
    /// When it was due.
    pub due: GoTime,
}

pub(crate) struct State {
    pub(crate) seq: u64,
    pub(crate) clock: Clock,
    pub(crate) services: BTreeMap<String, ServiceState>,
    /// What the conformance checker reads: swapped whole on each registration, so a check runs on
    /// a snapshot, outside the lock.
    pub(crate) registry: Arc<Registry>,
    /// Deployed flows, the latest version of each.
    pub(crate) flows: BTreeMap<String, Arc<Flow>>,
    pub(crate) runs: HashMap<String, Run>,
    /// Run ids in start order.
    pub(crate) run_order: RunOrder,
    /// Settled run ids in settle order: the eviction queue.
    settled: VecDeque<String>,
    /// Settled runs evicted beyond `max_runs`.
    pub(crate) evicted_runs: u64,
    /// Completion events of runs the emulator did not start that it did not follow, because
    /// `max_followed_runs` such runs were open.
    pub(crate) unfollowed_runs: u64,
    /// Open runs the emulator did not start (followed from events); a bound, as `open_runs`.
    pub(crate) followed_open: usize,
    pub(crate) records: Records,
    pub(crate) violations: VecDeque<crate::conformance::Violation>,
    /// Violations beyond `max_violations` (and beyond 16 per message), counted, not kept.
    pub(crate) dropped_violations: u64,
    /// Bytes of the payloads and headers the kept violations hold.
    pub(crate) violation_bytes: usize,
    /// Violations kept with an excerpt of their message (its first bytes and headers) because
    /// the violations' bytes had reached `max_record_bytes`.
    pub(crate) trimmed_violations: u64,
    /// Items the control API sent cut to an excerpt (one alone was larger than a message).
    pub(crate) cut_in_replies: u64,
    /// Times one of the emulator's streams (DLQ, events) was found gone, and made again.
    pub(crate) streams_lost: u64,
    /// What an earlier emulator left on the server, found at the start.
    pub(crate) found_at_start: Vec<FoundAtStart>,
    /// `Nats-Msg-Id`s of the emulator's own publishes on inbound subjects.
    pub(crate) own_msg_ids: BoundedSet<String>,
    /// How many times each idempotency key was re-sent from the DLQ (`:resend:<n>`).
    pub(crate) resends: HashMap<String, u32>,
    /// The bytes of the emulator's own broadcasts not yet seen on the wire: a broadcast from
    /// anyone else is a peer's, and judged.
    pub(crate) own_broadcasts: BoundedSet<Vec<u8>>,
    fences: u64,
    /// What the wire tap saw, judged for order.
    pub(crate) order: crate::order::Order,
    /// Services whose consumers were read, with the registration they were read at.
    pub(crate) consumers_checked: HashMap<String, u32>,
    /// Services whose consumers have been read (judged) so far.
    pub(crate) consumers_read: u64,
    /// Flows to deploy at a service's next registration
    /// ([`Emulator::deploy_at_registration`]), by service.
    pub(crate) at_registration: HashMap<String, Flow>,
}

/// What is registered, as the conformance checker needs it.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    /// Each registered service's current manifest.
    pub(crate) manifests: crate::conformance::Manifests,
    /// Inbound NATS subject -> the service that owns it.
    pub(crate) inbound: BTreeMap<String, String>,
}

/// A set that forgets its oldest members beyond a bound.
pub(crate) struct BoundedSet<T> {
    members: HashSet<T>,
    order: VecDeque<T>,
    capacity: usize,
}

impl<T: std::hash::Hash + Eq + Clone> BoundedSet<T> {
    fn new(capacity: usize) -> Self {
        BoundedSet {
            members: HashSet::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    pub(crate) fn insert(&mut self, value: T) {
        if self.members.insert(value.clone()) {
            self.order.push_back(value);
            while self.order.len() > self.capacity {
                if let Some(old) = self.order.pop_front() {
                    self.members.remove(&old);
                }
            }
        }
    }

    pub(crate) fn contains<Q>(&self, value: &Q) -> bool
    where
        T: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.members.contains(value)
    }

    /// Removes `value`; whether it was there.
    pub(crate) fn remove<Q>(&mut self, value: &Q) -> bool
    where
        T: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.members.remove(value)
    }
}

/// The record ring: bounded by count and by bytes, indexed by sequence number (records are
/// appended in sequence order, so a seq is a position) and by kind where waiters need it.
pub(crate) struct Records {
    ring: VecDeque<Record>,
    bytes: usize,
    max_count: usize,
    max_bytes: usize,
    pub(crate) dropped: u64,
    /// Of them, DLQ records: a count of DLQ entries made since is short of them.
    pub(crate) dropped_dlq: u64,
    /// Seqs of the DLQ records in the ring, oldest first.
    dlq: VecDeque<u64>,
}

impl Records {
    fn new(max_count: usize, max_bytes: usize) -> Self {
        Records {
            ring: VecDeque::new(),
            bytes: 0,
            max_count: max_count.max(1),
            max_bytes: max_bytes.max(1),
            dropped: 0,
            dropped_dlq: 0,
            dlq: VecDeque::new(),
        }
    }

    fn push(&mut self, record: Record) {
        self.bytes += record.size();
        if matches!(record.kind, RecordKind::Dlq { .. }) {
            self.dlq.push_back(record.seq);
        }
        self.ring.push_back(record);
        while self.ring.len() > self.max_count
            || (self.bytes > self.max_bytes && self.ring.len() > 1)
        {
            let Some(old) = self.ring.pop_front() else {
                break;
            };
            self.bytes = self.bytes.saturating_sub(old.size());
            self.dropped += 1;
            if self.dlq.front() == Some(&old.seq) {
                self.dlq.pop_front();
                self.dropped_dlq += 1;
            }
        }
    }

    /// The record with this seq, if still kept.
    pub(crate) fn get(&self, seq: u64) -> Option<&Record> {
        let first = self.ring.front()?.seq;
        let i = usize::try_from(seq.checked_sub(first)?).ok()?;
        self.ring.get(i).filter(|r| r.seq == seq)
    }

    /// Records after `seq`, oldest first.
    pub(crate) fn since(&self, seq: u64) -> impl Iterator<Item = &Record> {
        let start = match self.ring.front() {
            Some(first) if seq >= first.seq => {
                usize::try_from(seq - first.seq + 1).unwrap_or(usize::MAX)
            }
            _ => 0,
        };
        self.ring.iter().skip(start)
    }

    /// Every record kept, oldest first.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &Record> {
        self.ring.iter()
    }

    /// The DLQ records kept, oldest first.
    pub(crate) fn dlq(&self) -> impl Iterator<Item = &Record> {
        self.dlq.iter().filter_map(|seq| self.get(*seq))
    }
}

/// Run ids in start order, each with its place: a number given at its start and never reused,
/// so a reader can page through the runs by place while settled runs are evicted in between
/// (a position would shift under it).
#[derive(Debug, Default)]
pub(crate) struct RunOrder {
    ids: VecDeque<(u64, String)>,
    next: u64,
}

impl RunOrder {
    pub(crate) fn push(&mut self, id: String) {
        self.next += 1;
        self.ids.push_back((self.next, id));
    }

    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&String) -> bool) {
        self.ids.retain(|(_, id)| keep(id));
    }

    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// The ids, oldest first.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.ids.iter().map(|(_, id)| id)
    }

    /// The ids with their places, oldest first, from the first whose place is above `after`.
    pub(crate) fn after(&self, after: u64) -> impl Iterator<Item = (u64, &String)> {
        let start = self.ids.partition_point(|(place, _)| *place <= after);
        self.ids.range(start..).map(|(place, id)| (*place, id))
    }
}

impl State {
    /// Runs neither settled nor evicted: every run held, less those waiting in the eviction
    /// queue (a run re-opened by a late event stays in that queue, so this may count a few too
    /// few; a bound, not a tally).
    pub(crate) fn open_runs(&self) -> usize {
        self.runs.len().saturating_sub(self.settled.len())
    }

    /// Notes that a run settled, and evicts the oldest settled runs beyond `max_runs`.
    pub(crate) fn settled(&mut self, run_id: &str, max_runs: usize) {
        if self.runs.get(run_id).is_some_and(|r| r.followed) {
            self.followed_open = self.followed_open.saturating_sub(1);
        }
        self.settled.push_back(run_id.to_owned());
        // Evict in batches, so the start-order list is rewritten rarely.
        let slack = max_runs / 10 + 1;
        if self.settled.len() <= max_runs + slack {
            return;
        }
        let mut gone = HashSet::new();
        while self.settled.len() > max_runs {
            let Some(id) = self.settled.pop_front() else {
                break;
            };
            // A run re-opened since (a late event) is not settled: keep it.
            if self.runs.get(&id).is_some_and(|r| r.status.is_settled()) {
                self.runs.remove(&id);
                self.evicted_runs += 1;
                gone.insert(id);
            }
        }
        self.run_order.retain(|id| !gone.contains(id));
    }
}

pub(crate) struct Shared {
    pub(crate) client: async_nats::Client,
    pub(crate) js: jetstream::Context,
    pub(crate) config: EmulatorConfig,
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    /// Wakes for the `wait_*` calls, by what they wait on.
    pub(crate) topics: crate::topics::Topics,
    records_tx: broadcast::Sender<Record>,
    pub(crate) tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The wire tap, when on.
    pub(crate) tap: Option<natsbox::tap::Tap>,
    /// The subject of the marks [`Emulator::sync_wire_tap`] sends through the tap, the last
    /// mark sent and the last the tap read.
    pub(crate) tap_mark_subject: String,
    tap_mark_sent: std::sync::atomic::AtomicU64,
    pub(crate) tap_marks: watch::Sender<u64>,
    /// Services whose consumers are to be read ([`crate::consumers`]).
    pub(crate) consumer_checks: tokio::sync::mpsc::Sender<(String, Vec<String>)>,
}

/// Aborts the emulator's tasks when the last handle goes.
struct Tasks(Arc<Shared>);

impl Drop for Tasks {
    fn drop(&mut self) {
        let tasks = std::mem::take(&mut *self.0.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in tasks {
            t.abort();
        }
    }
}

/// The orchestrator emulator. Cheap to clone; the last clone dropped stops it.
#[derive(Clone)]
pub struct Emulator {
    pub(crate) shared: Arc<Shared>,
    /// What keeps the emulator's tasks running; `None` in the handles those tasks hold
    /// ([`Emulator::for_task`]), which would otherwise keep it running for ever.
    _tasks: Option<Arc<Tasks>>,
    /// This handle's `wait_*` timeout, when not the config's.
    pub(crate) wait_timeout: Option<Duration>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator").finish_non_exhaustive()
    }
}

impl Emulator {
    /// Starts the emulator on `client`: subscribes to the locked subjects, creates the DLQ
    /// stream and (by default) serves the control API. Everything is listening when it returns.
    ///
    /// # Errors
    /// When a subscription or the DLQ stream cannot be created.
    pub async fn start(
        client: async_nats::Client,
        config: EmulatorConfig,
    ) -> Result<Self, EmulatorError> {
        let js = jetstream::new(client.clone());
        let tap_mark_subject = format!("_TRIGGERS_LAB_TAP.{}", transport::random_hex(8));
        let (tap, tap_events) = match &config.wire_tap {
            WireTap::Connect(options) => {
                let (tap, events) = natsbox::tap::Tap::start(options.clone());
                tap.subscribe(subject::ALL);
                tap.subscribe("$JS.ACK.>");
                tap.subscribe(&tap_mark_subject);
                (Some(tap), Some(events))
            }
            WireTap::Off | WireTap::Auto => (None, None),
        };
        let (changed, _) = watch::channel(0);
        let (consumer_checks, consumer_queue) = tokio::sync::mpsc::channel(crate::consumers::QUEUE);
        let (records_tx, _) = broadcast::channel(4096);
        let shared = Arc::new(Shared {
            client: client.clone(),
            js: js.clone(),
            state: Mutex::new(State {
                seq: 0,
                clock: Clock::new(config.clock),
                services: BTreeMap::new(),
                registry: Arc::new(Registry::default()),
                flows: BTreeMap::new(),
                runs: HashMap::new(),
                run_order: RunOrder::default(),
                settled: VecDeque::new(),
                evicted_runs: 0,
                unfollowed_runs: 0,
                followed_open: 0,
                records: Records::new(config.max_records, config.max_record_bytes),
                violations: VecDeque::new(),
                dropped_violations: 0,
                violation_bytes: 0,
                trimmed_violations: 0,
                cut_in_replies: 0,
                streams_lost: 0,
                found_at_start: Vec::new(),
                own_msg_ids: BoundedSet::new(OWN_IDS_KEPT),
                resends: HashMap::new(),
                own_broadcasts: BoundedSet::new(1024),
                fences: 0,
                order: crate::order::Order::default(),
                consumers_checked: HashMap::new(),
                consumers_read: 0,
                at_registration: HashMap::new(),
            }),
            config,
            changed,
            topics: crate::topics::Topics::default(),
            records_tx,
            tasks: Mutex::new(Vec::new()),
            tap,
            tap_mark_subject,
            tap_mark_sent: std::sync::atomic::AtomicU64::new(0),
            tap_marks: watch::channel(0).0,
            consumer_checks,
        });
        let emulator = Emulator {
            _tasks: Some(Arc::new(Tasks(shared.clone()))),
            shared: shared.clone(),
            wait_timeout: None,
        };

        let register = client
            .subscribe(subject::MANIFEST_REGISTER)
            .await
            .map_err(|e| EmulatorError::nats("subscribe to manifest.register", e))?;
        let fetch = client
            .subscribe(subject::MANIFEST_FETCH)
            .await
            .map_err(|e| EmulatorError::nats("subscribe to manifest.fetch", e))?;
        let all = client
            .subscribe(subject::ALL)
            .await
            .map_err(|e| EmulatorError::nats("subscribe to triggers.v2.>", e))?;
        // Both at once: each is a few JetStream round trips and a store the server makes.
        let (dlq_from, events_from) = tokio::try_join!(
            stream_end(&js, DLQ_STREAM, subject::DLQ_ALL, &shared.config),
            stream_end(&js, EVENTS_STREAM, subject::FLOW_EVENTS_ALL, &shared.config),
        )?;
        let mut found = Vec::new();
        for (stream, from) in [(DLQ_STREAM, dlq_from), (EVENTS_STREAM, events_from)] {
            if from > 1 {
                found.push(FoundAtStart {
                    stream: stream.to_owned(),
                    messages: from - 1,
                    removed: false,
                });
            }
        }
        if shared.config.clean_start {
            found.extend(clean_inbound_streams(&js).await);
        }
        for f in &found {
            tracing::warn!(stream = f.stream, "{f}");
        }
        shared.lock().found_at_start = found;

        emulator.spawn(Self::serve_register(emulator.for_task(), register));
        emulator.spawn(Self::serve_fetch(shared.clone(), fetch));
        emulator.spawn(Self::observe_all(shared.clone(), all));
        emulator.spawn(crate::consumers::serve(shared.clone(), consumer_queue));
        emulator.spawn(crate::observe::follow(
            shared.clone(),
            DLQ_STREAM,
            dlq_from,
            crate::observe::record_dlq,
        ));
        emulator.spawn(crate::observe::follow(
            shared.clone(),
            EVENTS_STREAM,
            events_from,
            crate::observe::record_event,
        ));
        if let (Some(tap), Some(events)) = (&shared.tap, tap_events) {
            emulator.spawn(crate::observe::tap(shared.clone(), events));
            // Deliveries judged from the first: the tap is up before the emulator is.
            if !tap.wait_connected(TAP_PATIENCE).await {
                tracing::warn!(
                    "the wire tap could not connect within {TAP_PATIENCE:?}: the rules that need the order of messages (ack_before_reports and others) are not judged until it does"
                );
            }
        }
        if shared.config.control_api {
            let control = crate::control::serve(emulator.for_task()).await?;
            emulator.spawn(control);
        }
        match shared.config.clock {
            ClockMode::Real => emulator.spawn(crate::timers::real_clock(emulator.for_task())),
            ClockMode::Virtual if shared.config.auto_advance => {
                emulator.spawn(crate::timers::auto_advance(emulator.for_task()));
            }
            ClockMode::Virtual => {}
        }
        // Every subscription in place at the server before anyone is told the emulator is up.
        transport::round_trip(&client)
            .await
            .map_err(|e| EmulatorError::nats("confirm the subscriptions", e))?;
        Ok(emulator)
    }

    /// A handle for one of the emulator's own tasks: it reaches everything a handle does but does
    /// not keep the emulator running, so dropping the last handle the user holds still stops
    /// every task (a task holding a full handle would keep itself, its subscriptions and its
    /// connection alive after its emulator was dropped, and answer the next server on its port).
    fn for_task(&self) -> Emulator {
        Emulator {
            shared: self.shared.clone(),
            _tasks: None,
            wait_timeout: self.wait_timeout,
        }
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(task);
        self.shared
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(handle);
    }

    /// What an earlier emulator left on the server, found when this one started: the messages
    /// its DLQ and events streams held (skipped, never replayed) and, with
    /// [`EmulatorConfig::clean_start`], the deliveries removed from the services' inbound streams.
    #[must_use]
    pub fn found_at_start(&self) -> Vec<FoundAtStart> {
        self.lock().found_at_start.clone()
    }

    /// The NATS connection the emulator uses.
    #[must_use]
    pub fn client(&self) -> &async_nats::Client {
        &self.shared.client
    }

    /// A handle to the same emulator whose `wait_*` methods give up after `timeout` instead of
    /// [`EmulatorConfig::wait_timeout`]: `lab.with_wait_timeout(Duration::from_secs(60)).wait_run_settled(&run)`.
    #[must_use]
    pub fn with_wait_timeout(&self, timeout: Duration) -> Emulator {
        Emulator {
            wait_timeout: Some(timeout),
            ..self.clone()
        }
    }

    /// Waits until the wire tap has read (and judged) everything the server routed before this
    /// call: call it after a service's last ack (confirmed: `double_ack`, or the service's own
    /// round trip) before reading [`Emulator::violations`], so the rules that need order
    /// ([`EmulatorConfig::wire_tap`]) have seen it all. Returns whether it caught up within the
    /// wait timeout (`false` at once when there is no tap).
    pub async fn sync_wire_tap(&self) -> bool {
        if self.shared.tap.is_none() {
            return false;
        }
        let mark = self
            .shared
            .tap_mark_sent
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let mut marks = self.shared.tap_marks.subscribe();
        if self
            .shared
            .client
            .publish(
                self.shared.tap_mark_subject.clone(),
                mark.to_string().into(),
            )
            .await
            .is_err()
        {
            return false;
        }
        let _ = self.shared.client.flush().await;
        let timeout = self.wait_timeout.unwrap_or(self.shared.config.wait_timeout);
        tokio::time::timeout(timeout, marks.wait_for(|m| *m >= mark))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The configuration it runs with.
    #[must_use]
    pub fn config(&self) -> &EmulatorConfig {
        &self.shared.config
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// Marks a message a test is about to publish as its own input (the conformance kit's forged
    /// deliveries), by its `Nats-Msg-Id` or idempotency key: it is recorded, but not judged as a
    /// service's message, so deliberate bad input is no conformance violation of the service
    /// under test. What the services do with it still is. (A scenario's `publish` step is judged:
    /// a scenario may expect the checker to flag what it sends.)
    pub fn mark_test_input(&self, id: &str) {
        if !id.is_empty() {
            Shared::remember_own(&mut self.lock(), id);
        }
    }

    /// A receiver that sees every record from now on (the control API and the terminal UI use it).
    #[must_use]
    pub fn subscribe_records(&self) -> broadcast::Receiver<Record> {
        self.shared.records_tx.subscribe()
    }

    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.shared.changed.subscribe()
    }

    // ---- releases --------------------------------------------------------------------------

    /// Deploys `flow` when `service` next registers, accepted: after the register reply is made
    /// (so the reply lacks the flow) and before it is sent, so the flow's broadcast reaches the
    /// service before its reply, as a deploy made while a service registers may. A service
    /// that subscribes to the broadcasts only after the reply misses it (docs/protocol.md §2);
    /// the conformance kit's `broadcast_before_reply` is this. One flow per service: a second
    /// call replaces the first. A flow refused then is logged, not deployed.
    pub fn deploy_at_registration(&self, service: &str, flow: Flow) {
        self.lock().at_registration.insert(service.to_owned(), flow);
    }

    /// Checks a flow against the registered services without deploying it.
    ///
    /// # Errors
    /// Every problem found, each with its stable code.
    pub fn check_release(&self, flow: &Flow) -> Result<Flow, Vec<ReleaseProblem>> {
        let registry = self.lock().registry.clone();
        release::check_release(flow, &registry.manifests)
    }

    /// Releases a flow: checks it, stores it (a redeploy of the same id gets the next version),
    /// and broadcasts it: on `triggers.v2.flow.broadcast.<service>` when one service is involved,
    /// on `triggers.v2.flow.broadcast.all` when several are.
    ///
    /// # Errors
    /// [`EmulatorError::Release`] with every problem, or a NATS error from the broadcast.
    pub async fn deploy(&self, flow: Flow) -> Result<Deployment, EmulatorError> {
        let mut resolved = match self.check_release(&flow) {
            Ok(resolved) => resolved,
            Err(problems) => return Err(self.refused(&flow.id, problems)),
        };
        let (subject, envelope, bytes) = {
            let mut state = self.lock();
            if let Some(previous) = state.flows.get(&resolved.id) {
                let next = previous.version.checked_add(1);
                let next = next.ok_or_else(|| EmulatorError::no_next_version(previous))?;
                resolved.version = resolved.version.max(next);
            }
            let services = resolved.services();
            let subject = match services.iter().next() {
                Some(only) if services.len() == 1 => subject::flow_broadcast(only)
                    .unwrap_or_else(|_| subject::FLOW_BROADCAST_ALL.to_owned()),
                _ => subject::FLOW_BROADCAST_ALL.to_owned(),
            };
            let envelope = resolved.to_envelope();
            let bytes = envelope.to_json().map_err(EmulatorError::Encode)?;
            // A flow no message can carry would be held but reach no service: refused whole.
            let max = self.shared.client.server_info().max_payload;
            if bytes.len() > max {
                drop(state);
                let problems = vec![ReleaseProblem {
                    code: ReleaseCode::FlowTooLarge,
                    node: None,
                    service: None,
                    message: format!(
                        "its broadcast is {} bytes, more than the NATS server carries in one message ({max} bytes, its max_payload): no service could receive it; split the flow, or start the server with a larger max_payload",
                        bytes.len()
                    ),
                }];
                return Err(self.refused(&resolved.id, problems));
            }
            state
                .flows
                .insert(resolved.id.clone(), Arc::new(resolved.clone()));
            (subject, envelope, bytes)
        };
        self.shared.push(
            "",
            &Headers::new(),
            Body::default(),
            RecordKind::Deploy {
                flow_id: resolved.id.clone(),
                version: resolved.version,
                flow: Some(Box::new(resolved.clone())),
            },
        );
        self.shared
            .broadcast(subject.clone(), &envelope, bytes)
            .await?;
        self.shared.notify();
        Ok(Deployment {
            flow: resolved,
            broadcast_subject: subject,
        })
    }

    /// Records a refused deploy of `flow_id`; the error to return.
    fn refused(&self, flow_id: &str, problems: Vec<ReleaseProblem>) -> EmulatorError {
        self.shared.push(
            "",
            &Headers::new(),
            Body::default(),
            RecordKind::DeployRefused {
                flow_id: flow_id.to_owned(),
                problems: problems.iter().map(ToString::to_string).collect(),
            },
        );
        EmulatorError::Release(problems)
    }

    // ---- runs ------------------------------------------------------------------------------

    /// Starts a run of a deployed flow with a JSON payload (written as Go writes JSON).
    ///
    /// # Errors
    /// An unknown flow, a flow without an entry point, or a publish that JetStream did not ack.
    pub async fn trigger(&self, flow_id: &str, payload: &Value) -> Result<RunId, EmulatorError> {
        let bytes = json::to_vec(&json::GoAny(payload)).map_err(EmulatorError::Encode)?;
        self.trigger_bytes(flow_id, bytes, TriggerOptions::default())
            .await
    }

    /// Starts a run with exact payload bytes (which need not be JSON: a poison message).
    ///
    /// The entry `service-in` is done at once (the engine's `triggered` step); what follows it is
    /// reached: the entry's service gets the payload (unless only timers follow the entry), and
    /// timers right after the entry are armed.
    ///
    /// # Errors
    /// As [`Emulator::trigger`], and a run id that is not usable or exists already.
    pub async fn trigger_bytes(
        &self,
        flow_id: &str,
        payload: Vec<u8>,
        options: TriggerOptions,
    ) -> Result<RunId, EmulatorError> {
        let run_id = match &options.run_id {
            Some(id) => {
                flow::check_id(IdKind::Run, id).map_err(EmulatorError::InvalidRunId)?;
                id.clone()
            }
            None => format!("run-{}", transport::random_hex(8)),
        };
        let payload = Body::from(payload);
        let (delivery, headers, entry_id) = {
            let mut state = self.lock();
            if state.runs.contains_key(&run_id) {
                return Err(EmulatorError::RunExists(run_id));
            }
            // Runs followed from events have a bound of their own: they never refuse a trigger.
            let open = state.open_runs().saturating_sub(state.followed_open);
            if open >= self.config().max_open_runs {
                return Err(EmulatorError::TooManyOpenRuns { open });
            }
            let flow = state
                .flows
                .get(flow_id)
                .cloned()
                .ok_or_else(|| EmulatorError::UnknownFlow(flow_id.to_owned()))?;
            let entry = match &options.entry {
                Some(id) => flow
                    .node(id)
                    .filter(|n| n.node_type == NodeType::ServiceIn)
                    .cloned(),
                None => flow.entry_points().next().cloned(),
            }
            .ok_or_else(|| EmulatorError::NoEntry {
                flow: flow_id.to_owned(),
                entry: options.entry.clone(),
            })?;
            let now = state.clock.now();
            let trace_id = transport::random_hex(16);
            let envelope = new_envelope(
                &flow,
                &run_id,
                &entry.id,
                &trace_id,
                idempotency::root(&run_id, &entry.id),
                now,
            );
            let mut headers = envelope.to_headers();
            headers.insert(names::NATS_MSG_ID, envelope.nats_msg_id());
            if flow.has_timer() {
                let root = TimerContext::Root(RootContext::new(&flow.id, flow.version, &run_id));
                durable_timer::write_triplet(&mut headers, &root, &payload);
            }
            // Run and timeline times are wall-clock, like the services' own steps; the
            // emulator's clock (virtual or not) rules envelopes and timers.
            let (run, to_arm) = Run::start(
                run_id.clone(),
                flow.clone(),
                &entry.id,
                trace_id,
                GoTime::now(),
                payload.clone(),
            );
            // Only timers after the entry: the engine's to arm; the service has nothing to run.
            let delivery = !Run::service_successors(&flow, &entry.id).is_empty();
            if delivery {
                state.own_msg_ids.insert(envelope.idempotency_key.clone());
            }
            state.runs.insert(run_id.clone(), run);
            state.run_order.push(run_id.clone());
            let seq = self.shared.push_locked(
                &mut state,
                if delivery { &entry.inbound } else { "" },
                &headers,
                payload.clone(),
                RecordKind::Trigger {
                    run_id: run_id.clone(),
                    flow_id: flow_id.to_owned(),
                    entry: entry.id.clone(),
                },
            );
            if let Some(run) = state.runs.get_mut(&run_id) {
                run.engine_step(
                    seq,
                    &entry.id,
                    NodeType::ServiceIn.as_str(),
                    "triggered",
                    GoTime::now(),
                );
            }
            for timer in to_arm {
                crate::timers::arm(&self.shared, &mut state, &run_id, &timer, now);
            }
            self.shared.refresh_run(&mut state, &run_id);
            (
                delivery.then(|| entry.inbound.clone()),
                headers,
                entry.id.clone(),
            )
        };
        if let Some(target) = delivery
            && let Err(e) = self
                .shared
                .publish_inbound(&target, headers, payload.to_vec())
                .await
        {
            let mut state = self.lock();
            state.runs.remove(&run_id);
            state.run_order.retain(|id| *id != run_id);
            tracing::debug!(run = %run_id, entry = %entry_id, "trigger not delivered: {e}");
            return Err(e);
        }
        self.shared.notify();
        Ok(RunId(run_id))
    }

    /// Moves the virtual clock forward and fires every timer that falls due, in order.
    ///
    /// # Errors
    /// On the real clock, or when a delivery cannot be published.
    pub async fn advance(&self, by: Duration) -> Result<Vec<FiredTimer>, EmulatorError> {
        let target = {
            let state = self.lock();
            if state.clock.mode() == ClockMode::Real {
                return Err(EmulatorError::RealClock);
            }
            state.clock.now().saturating_add(by)
        };
        crate::timers::advance_to(self, target).await
    }

    /// The emulator's current time.
    #[must_use]
    pub fn now(&self) -> GoTime {
        self.lock().clock.now()
    }

    // ---- reading state ---------------------------------------------------------------------

    /// Registered services.
    #[must_use]
    pub fn services(&self) -> BTreeMap<String, ServiceState> {
        self.lock().services.clone()
    }

    /// The services named after `after` (all with `None`), at most `limit` of them, by name.
    #[must_use]
    pub fn services_after(
        &self,
        after: Option<&str>,
        limit: Option<usize>,
    ) -> Vec<(String, ServiceState)> {
        use std::ops::Bound;
        let state = self.lock();
        let from = after.map_or(Bound::Unbounded, |a| Bound::Excluded(a.to_owned()));
        state
            .services
            .range((from, Bound::Unbounded))
            .take(limit.unwrap_or(usize::MAX))
            .map(|(name, s)| (name.clone(), s.clone()))
            .collect()
    }

    /// Deployed flows (as released), the latest version of each.
    #[must_use]
    pub fn flows(&self) -> BTreeMap<String, Flow> {
        self.lock()
            .flows
            .iter()
            .map(|(id, f)| (id.clone(), Flow::clone(f)))
            .collect()
    }

    /// A run (`None` for an unknown run, or a settled one evicted beyond
    /// [`EmulatorConfig::max_runs`]).
    #[must_use]
    pub fn run(&self, id: &str) -> Option<Run> {
        self.lock().runs.get(id).cloned()
    }

    /// Every run kept, in start order.
    #[must_use]
    pub fn runs(&self) -> Vec<Run> {
        let state = self.lock();
        state
            .run_order
            .iter()
            .filter_map(|id| state.runs.get(id).cloned())
            .collect()
    }

    /// The records kept, oldest first, and how many older ones were dropped.
    #[must_use]
    pub fn records(&self) -> (Vec<Record>, u64) {
        let state = self.lock();
        (
            state.records.iter().cloned().collect(),
            state.records.dropped,
        )
    }

    /// Records after `seq` (for followers).
    #[must_use]
    pub fn records_since(&self, seq: u64, limit: usize) -> Vec<Record> {
        let state = self.lock();
        state.records.since(seq).take(limit).cloned().collect()
    }

    /// DLQ entries recorded (after dedup), oldest first.
    #[must_use]
    pub fn dlq(&self) -> Vec<Record> {
        self.lock().records.dlq().cloned().collect()
    }

    /// DLQ records dropped off the record ring (beyond `max_records` or `max_record_bytes`):
    /// [`Emulator::dlq`] is short of them, so no count of DLQ entries is a verdict once any is.
    #[must_use]
    pub fn dropped_dlq_records(&self) -> u64 {
        self.lock().records.dropped_dlq
    }

    /// Completion events recorded, oldest first.
    #[must_use]
    pub fn completions(&self) -> Vec<CompletionEvent> {
        let state = self.lock();
        state
            .records
            .iter()
            .filter_map(|r| match &r.kind {
                RecordKind::Completion { event } => Some(event.clone()),
                _ => None,
            })
            .collect()
    }

    /// Every conformance violation kept (at most [`EmulatorConfig::max_violations`]; the
    /// `state` summary counts the others).
    #[must_use]
    pub fn violations(&self) -> Vec<Violation> {
        self.lock().violations.iter().cloned().collect()
    }

    /// Panics, listing them, if the conformance checker found any violation (error or warning).
    ///
    /// # Panics
    /// When there is one.
    #[track_caller]
    pub fn assert_conformant(&self) {
        let violations = self.violations();
        if !violations.is_empty() {
            panic!("{}", describe_violations(&violations));
        }
    }

    /// Panics, listing them, if the conformance checker found any violation of severity error.
    ///
    /// # Panics
    /// When there is one.
    #[track_caller]
    pub fn assert_no_conformance_errors(&self) {
        let errors: Vec<_> = self
            .violations()
            .into_iter()
            .filter(|v| v.severity == Severity::Error)
            .collect();
        if !errors.is_empty() {
            panic!("{}", describe_violations(&errors));
        }
    }
}

/// A readable list of violations, with the offending bytes.
#[must_use]
pub fn describe_violations(violations: &[Violation]) -> String {
    let mut out = format!("{} conformance violation(s):\n", violations.len());
    for v in violations {
        out.push_str(&format!(
            "  [{}] {} on {}: {}\n      bytes: {}\n",
            v.severity,
            v.rule,
            v.subject,
            v.message,
            v.payload.text().chars().take(300).collect::<String>()
        ));
    }
    out
}

pub(crate) fn new_envelope(
    flow: &Flow,
    run_id: &str,
    source_node_id: &str,
    trace_id: &str,
    idempotency_key: String,
    now: GoTime,
) -> Envelope {
    let span_id = transport::random_hex(8);
    Envelope {
        traceparent: Traceparent::new(trace_id, &span_id, true).to_string(),
        trace_id: trace_id.to_owned(),
        span_id,
        flow_run_id: run_id.to_owned(),
        flow_id: flow.id.clone(),
        flow_version: flow.version,
        idempotency_key,
        source_node_id: source_node_id.to_owned(),
        retry_count: 0,
        emitted_at: now,
    }
}

impl Shared {
    /// Publishes a flow on a broadcast subject, known as the emulator's own (so that observing
    /// it is not taken for a forged broadcast), flushed, and recorded.
    pub(crate) async fn broadcast(
        &self,
        subject: String,
        envelope: &FlowEnvelope,
        bytes: Vec<u8>,
    ) -> Result<(), EmulatorError> {
        self.lock().own_broadcasts.insert(bytes.clone());
        self.client
            .publish(subject.clone(), bytes.clone().into())
            .await
            .map_err(|e| EmulatorError::nats("broadcast the flow", e))?;
        self.client
            .flush()
            .await
            .map_err(|e| EmulatorError::nats("broadcast the flow", e))?;
        self.push(
            &subject,
            &Headers::new(),
            Body::from(bytes),
            RecordKind::Broadcast {
                flow_id: envelope.id.clone(),
                version: envelope.version,
            },
        );
        Ok(())
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock (a bug) must not take every later test call down with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells whoever follows the state that it changed: the emulator's own tasks (every
    /// change), and the waiters of what the records pushed since the last call were about.
    pub(crate) fn notify(&self) {
        self.changed.send_modify(|v| *v += 1);
        self.topics.wake();
    }

    /// Appends a record; returns its sequence number.
    pub(crate) fn push(
        &self,
        subject: &str,
        headers: &Headers,
        payload: Body,
        kind: RecordKind,
    ) -> u64 {
        let mut state = self.lock();
        self.push_locked(&mut state, subject, headers, payload, kind)
    }

    /// [`Shared::push`] with the state lock already held.
    pub(crate) fn push_locked(
        &self,
        state: &mut State,
        subject: &str,
        headers: &Headers,
        payload: Body,
        kind: RecordKind,
    ) -> u64 {
        self.push_shared(state, subject, share_headers(headers), payload, kind)
    }

    /// [`Shared::push_locked`] with headers already shared (several records of one message).
    pub(crate) fn push_shared(
        &self,
        state: &mut State,
        subject: &str,
        headers: crate::recorder::SharedHeaders,
        payload: Body,
        kind: RecordKind,
    ) -> u64 {
        state.seq += 1;
        let record = Record {
            seq: state.seq,
            at: GoTime::now(),
            clock: state.clock.now(),
            subject: subject.to_owned(),
            headers,
            payload,
            kind,
        };
        self.topics.touch(&record.kind);
        // Cloned for followers only (a clone shares the bytes, but copies the rest): nobody
        // follows the records in most runs.
        if self.records_tx.receiver_count() > 0 {
            let _ = self.records_tx.send(record.clone());
        }
        state.records.push(record);
        state.seq
    }

    /// Recomputes a run's status; records `run_settled` (and evicts beyond `max_runs`) when it
    /// has just settled.
    pub(crate) fn refresh_run(&self, state: &mut State, run_id: &str) {
        let settled = state.runs.get_mut(run_id).and_then(|run| {
            let was = run.status.is_settled();
            run.refresh_status(GoTime::now());
            (!was && run.status.is_settled()).then(|| (run.flow_id.clone(), run.status))
        });
        if let Some((flow_id, status)) = settled {
            self.push_locked(
                state,
                "",
                &Headers::new(),
                Body::default(),
                RecordKind::RunSettled {
                    run_id: run_id.to_owned(),
                    flow_id,
                    status,
                },
            );
            state.settled(run_id, self.config.max_runs);
            state.order.settled(run_id);
        }
    }

    /// Publishes on a service's inbound subject through JetStream (acked, deduplicated by
    /// `Nats-Msg-Id`).
    pub(crate) async fn publish_inbound(
        &self,
        subject: &str,
        headers: Headers,
        payload: Vec<u8>,
    ) -> Result<(), EmulatorError> {
        let payload_for_record = Body::from(payload.clone());
        let map = transport::to_nats(&headers).map_err(|e| EmulatorError::Publish {
            subject: subject.to_owned(),
            source: e.into(),
            hint: "",
        })?;
        // On a cluster (replicated streams) a publish can meet a stream between leaders: the ack
        // times out, or nobody answers, for the second or two an election takes. The same
        // message again is safe (`Nats-Msg-Id` dedup), so it is retried until the wait timeout.
        let clustered = self.config.stream_replicas > 1;
        let expected = self.expect_delivery(subject, &headers);
        // A leader's crash is noticed after a few missed heartbeats, and the client may have to
        // reconnect to another node first: elections have taken up to ~15 s on a busy machine.
        let deadline =
            tokio::time::Instant::now() + self.config.wait_timeout.max(CLUSTER_PUBLISH_PATIENCE);
        let mut attempt = 0u32;
        let ack = loop {
            attempt += 1;
            let outcome = async {
                let ack = self
                    .js
                    .publish_with_headers(subject.to_owned(), map.clone(), payload.clone().into())
                    .await?;
                ack.await
            }
            .await;
            match outcome {
                Ok(ack) => break ack,
                Err(e)
                    if clustered
                        && tokio::time::Instant::now() < deadline
                        && matches!(
                            e.kind(),
                            jetstream::context::PublishErrorKind::TimedOut
                                | jetstream::context::PublishErrorKind::StreamNotFound
                        ) =>
                {
                    tracing::debug!(%subject, attempt, %e, "publish to a replicated stream failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => {
                    let hint = match e.kind() {
                        jetstream::context::PublishErrorKind::StreamNotFound => {
                            " (is the service's inbound stream there? it is created when the \
                             service registers)"
                        }
                        // The stream holds that much not yet handled.
                        _ if transport::refused_as_full(&e) => {
                            " (the service's inbound stream is full of deliveries not handled yet: \
                             is the service running and consuming it? A handled delivery leaves \
                             the stream)"
                        }
                        _ => "",
                    };
                    return Err(EmulatorError::Publish {
                        subject: subject.to_owned(),
                        source: e.into(),
                        hint,
                    });
                }
            }
        };
        if !ack.duplicate
            && let Some(expected) = expected
        {
            self.stored(expected, &ack.stream, ack.sequence);
        }
        // A duplicate after a retry is the earlier attempt, stored before its ack was lost.
        if ack.duplicate && attempt == 1 {
            // Every delivery of the emulator's has a key of its own: one that JetStream drops as
            // a duplicate is a delivery lost, and the verdict must say so.
            self.own_delivery_deduplicated(subject, &headers, payload_for_record);
        }
        Ok(())
    }

    /// A delivery of the emulator's about to be published on `subject`: the wire tap expects
    /// it. Returns its run and index, for [`Shared::stored`].
    fn expect_delivery(&self, subject: &str, headers: &Headers) -> Option<(String, usize)> {
        self.tap.as_ref()?;
        let envelope = Envelope::from_headers(headers).ok()?;
        let mut state = self.lock();
        let service = state.registry.inbound.get(subject).cloned()?;
        let st = &mut *state;
        let flow = st
            .runs
            .get(&envelope.flow_run_id)
            .filter(|r| !r.followed)
            .and_then(|r| r.flow.clone())?;
        let index = st.order.expect(&flow, &service, subject, &envelope)?;
        Some((envelope.flow_run_id, index))
    }

    /// The expected delivery `(run, index)` was stored as `seq` of `stream`: its ack is judged.
    fn stored(&self, (run_id, index): (String, usize), stream: &str, seq: u64) {
        let mut state = self.lock();
        let found = state.order.stored(&run_id, index, stream, seq);
        if !found.is_empty() {
            self.add_violations(&mut state, found);
            drop(state);
            self.notify();
        }
    }

    pub(crate) fn next_fence(state: &mut State) -> u64 {
        state.fences += 1;
        state.fences
    }

    pub(crate) fn remember_own(state: &mut State, msg_id: &str) {
        state.own_msg_ids.insert(msg_id.to_owned());
    }

    fn own_delivery_deduplicated(&self, subject: &str, headers: &Headers, payload: Body) {
        let key = headers.get(names::NATS_MSG_ID).unwrap_or_default();
        let violation = Violation::new(
            "delivery_deduplicated",
            subject,
            format!(
                "JetStream dropped the emulator's delivery with Nats-Msg-Id {key:?} as a duplicate of an earlier one: a distinct delivery was lost (a bug of the emulator's keys; please report it)"
            ),
            share_headers(headers),
            payload,
        );
        let mut state = self.lock();
        self.add_violations(&mut state, vec![violation]);
    }
}
