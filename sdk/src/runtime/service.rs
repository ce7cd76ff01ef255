//! Running a service: connect, register, install flows, heartbeat, consume the inbound stream,
//! shut down gracefully.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::PullConsumer};
use futures::StreamExt;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use crate::error::StartError;
use crate::flow::Flow;
use crate::runtime::action::ActionDef;
use crate::runtime::bounded::BoundedMap;
use crate::runtime::builder::Service;
use crate::runtime::config::Resolved;
use crate::runtime::dispatch::KeptOutcome;
use crate::runtime::lookup::LookupDef;
use crate::transport::patiently;
use crate::wire::manifest::DURABLE_TIMER_V1;
use crate::wire::{FlowEnvelope, GoTime, Heartbeat, Manifest, RegisterReply, subject};

/// Counters of what the runtime dropped, refused or gave up, so that none of it is silent.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Flows not installed: the table was full.
    pub(crate) flows_refused: AtomicU64,
    /// Durable Timer flows not installed: the service does not declare `durable_timer.v1`.
    pub(crate) flows_gated: AtomicU64,
    /// Messages neither handled nor dead-lettered in `max_deliver` deliveries.
    pub(crate) given_up: AtomicU64,
    /// DLQ entries whose instant came from the clock: the ledger was out of reach.
    pub(crate) dlq_ledger_misses: AtomicU64,
}

/// What a running service dropped, refused or gave up on: [`RunningService::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuntimeStats {
    /// Flows not installed because the service already holds [`RuntimeConfig::max_flows`]
    /// (every message for them is dead-lettered as `unknown_flow`).
    ///
    /// [`RuntimeConfig::max_flows`]: crate::runtime::RuntimeConfig::max_flows
    pub flows_refused: u64,
    /// Durable Timer flows not installed because the service does not declare
    /// `durable_timer.v1` (the capability gate).
    pub flows_gated: u64,
    /// Messages given up: neither handled nor dead-lettered in `max_deliver` deliveries (NATS
    /// was unreachable throughout). The emulator records them too.
    pub given_up: u64,
    /// Idempotency keys of handled messages forgotten to stay within the cache's bound (a
    /// redelivery of one of them after that would run again).
    pub handled_keys_evicted: u64,
    /// Kept action outcomes forgotten to stay within the cache's bound.
    pub outcomes_evicted: u64,
    /// DLQ entries written without the DLQ ledger (its bucket was out of reach): such an entry
    /// may be written twice if a crash makes another replica run its failure again.
    pub dlq_ledger_misses: u64,
}

/// Subjects whose stream lookup is remembered at once.
const MAX_CAPTURES: usize = 4096;

/// Whether a JetStream stream captures a subject, or why JetStream could not say.
pub(crate) type CaptureAnswer = Result<bool, String>;

/// Everything a running service shares between its tasks.
pub(crate) struct Runtime {
    pub(crate) manifest: Manifest,
    pub(crate) actions: HashMap<String, ActionDef>,
    pub(crate) lookups: HashMap<String, LookupDef>,
    pub(crate) client: async_nats::Client,
    pub(crate) js: jetstream::Context,
    pub(crate) flows: watch::Sender<Arc<BTreeMap<String, Arc<Flow>>>>,
    pub(crate) config: Resolved,
    /// The HTTP client of HTTP outputs, built at the first one: building it reads and parses the
    /// system's root certificates (milliseconds), which a service without HTTP outputs, or a
    /// test that starts one, should not pay at every start.
    pub(crate) http: std::sync::OnceLock<reqwest::Client>,
    /// Idempotency keys of messages fully handled, so a redelivery (after a lost ack) is not
    /// run twice.
    pub(crate) processed: Mutex<BoundedMap<String, ()>>,
    /// Action outcomes by delivery and trail, so a redelivery hands a result on again rather
    /// than running the handler again.
    pub(crate) outcomes: Mutex<BoundedMap<String, KeptOutcome>>,
    /// Whether a JetStream stream captures a subject (or why that could not be learnt), and when
    /// that was asked.
    pub(crate) captures: Mutex<BoundedMap<String, (CaptureAnswer, tokio::time::Instant)>>,
    /// Held while JetStream is asked which stream captures a subject: one lookup at a time.
    pub(crate) capture_lookup: tokio::sync::Mutex<()>,
    /// Confirms plain publishes with shared round trips.
    pub(crate) confirmer: crate::runtime::confirm::Confirmer,
    /// Acks the deliveries whose publishes wait for a confirmation, once confirmed.
    pub(crate) settler: crate::runtime::settle::Settler,
    pub(crate) stats: Stats,
    /// The DLQ ledger's bucket, opened at the first dead-lettering ([`super::ledger`]).
    pub(crate) ledger: tokio::sync::OnceCell<async_nats::jetstream::kv::Store>,
    pub(crate) durable_timer: bool,
    pub(crate) started_at: GoTime,
}

impl Runtime {
    pub(crate) fn service(&self) -> &str {
        &self.manifest.service
    }

    /// The HTTP client of HTTP outputs (built at the first call, with the configured timeout).
    pub(crate) fn http(&self) -> Result<&reqwest::Client, reqwest::Error> {
        if let Some(client) = self.http.get() {
            return Ok(client);
        }
        let client = reqwest::Client::builder()
            .timeout(self.config.http_timeout)
            .build()?;
        // Two first outputs at once may both build one; the first kept serves both.
        Ok(self.http.get_or_init(|| client))
    }

    pub(crate) fn lock_processed(&self) -> MutexGuard<'_, BoundedMap<String, ()>> {
        self.processed.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn lock_outcomes(&self) -> MutexGuard<'_, BoundedMap<String, KeptOutcome>> {
        self.outcomes.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn lock_captures(
        &self,
    ) -> MutexGuard<'_, BoundedMap<String, (CaptureAnswer, tokio::time::Instant)>> {
        self.captures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Installs a flow that involves this service, unless a newer version is already there, the
    /// flow has a Durable Timer and the service does not declare `durable_timer.v1` (the
    /// capability gate holds here too, whatever the orchestrator sends), or the table is full.
    /// The table is swapped whole, so a dispatch sees either the old one or the new one.
    pub(crate) fn install(&self, envelope: &FlowEnvelope) {
        let flow = match Flow::from_envelope(envelope) {
            Ok(mut f) => {
                f.assign_owners();
                f
            }
            Err(e) => {
                tracing::warn!(flow = %envelope.id, "ignoring a flow whose body is not a flow: {e}");
                return;
            }
        };
        if !flow.services().contains(self.service()) {
            return;
        }
        if flow.has_timer() && !self.durable_timer {
            tracing::warn!(flow = %flow.id, "not installing a Durable Timer flow: {} does not declare {DURABLE_TIMER_V1}", self.service());
            self.stats.flows_gated.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let max_flows = self.config.max_flows;
        self.flows.send_if_modified(|table| {
            if table
                .get(&flow.id)
                .is_some_and(|f| f.version > flow.version)
            {
                return false;
            }
            if !table.contains_key(&flow.id) && table.len() >= max_flows {
                tracing::warn!(flow = %flow.id, "not installing a flow: {max_flows} are held already (RuntimeConfig::max_flows)");
                self.stats.flows_refused.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            let mut next = (**table).clone();
            next.insert(flow.id.clone(), Arc::new(flow.clone()));
            *table = Arc::new(next);
            true
        });
    }

    pub(crate) fn heartbeat(&self, shutting_down: bool) -> Heartbeat {
        Heartbeat {
            service: self.manifest.service.clone(),
            service_version: self.manifest.service_version.clone(),
            manifest_hash: self.manifest.manifest_hash.clone(),
            started_at: if super::breaks::on(super::breaks::ProtocolBreak::MovingStartedAt) {
                GoTime::now()
            } else {
                self.started_at
            },
            now: GoTime::now(),
            shutting_down,
        }
    }

    async fn publish_heartbeat(&self, shutting_down: bool) {
        if let Ok(bytes) = self.heartbeat(shutting_down).to_json()
            && let Err(e) = self.client.publish(subject::HEARTBEAT, bytes.into()).await
        {
            tracing::debug!("heartbeat not sent: {e}");
        }
    }
}

/// A started service. Dropping it stops everything at once; [`RunningService::shutdown`] stops
/// gracefully.
pub struct RunningService {
    runtime: Arc<Runtime>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    inflight: Arc<Semaphore>,
}

impl std::fmt::Debug for RunningService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningService")
            .field("service", &self.runtime.service())
            .finish_non_exhaustive()
    }
}

/// How a graceful shutdown went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Whether every in-flight message finished within the grace period.
    pub drained: bool,
    /// Messages still running when the grace period ended (they will be redelivered).
    pub abandoned: usize,
    /// Whether the last heartbeat (`shutting_down: true`) and the connection's drain reached the
    /// server in time; `false` when NATS was gone.
    pub said_goodbye: bool,
}

impl std::fmt::Display for ShutdownReport {
    /// For people: `drained, said goodbye`, or what was left undone.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.drained {
            f.write_str("every message in flight finished")?;
        } else {
            write!(
                f,
                "{} message(s) still running were abandoned (NATS redelivers them)",
                self.abandoned
            )?;
        }
        f.write_str(if self.said_goodbye {
            "; the last heartbeat reached the server"
        } else {
            "; the last heartbeat did not reach the server (NATS was gone)"
        })
    }
}

/// The least time the goodbye (last heartbeat, flush, drain) gets when in-flight work used the
/// whole grace period.
const FAREWELL_FLOOR: Duration = Duration::from_secs(2);

impl Service {
    /// Starts the service: connects, registers (10 s timeout, failing fast), installs the flows
    /// from the reply, subscribes to both broadcast subjects, starts heartbeats and consumes the
    /// inbound stream.
    ///
    /// # Errors
    /// A [`StartError`] that says what failed and what to do.
    pub async fn start(self) -> Result<RunningService, StartError> {
        let config = self.config.resolve()?;
        let drops = config.drops.clone();
        // Counts (re)connections: after one, the server may be a new one that has never heard
        // of this service, so it registers again (see `reregister`).
        let (connections, reconnected) = watch::channel(0u64);
        let connections = Arc::new(connections);
        // Only a connection that follows a loss is a reconnection: the first one is start()'s.
        let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // The server's word that this client may not ping itself (see confirm).
        let refusals = crate::runtime::confirm::PingRefusals::default();
        let refused = refusals.clone();
        let mut options = async_nats::ConnectOptions::new()
            .name(format!("triggers {}", self.manifest.service))
            .connection_timeout(Duration::from_secs(5))
            .request_timeout(Some(config.register_timeout))
            .event_callback(move |event| {
                // Every subscription of the connection (broadcasts, the consumers' pulls) is
                // watched: a message NATS drops for a slow reader is counted and logged.
                let drops = drops.clone();
                let connections = connections.clone();
                let lost = lost.clone();
                let refused = refused.clone();
                async move {
                    use std::sync::atomic::Ordering;
                    match event {
                        async_nats::Event::Disconnected => {
                            lost.store(true, Ordering::SeqCst);
                            super::breaks::connection_lost();
                            tracing::warn!("NATS connection lost; reconnecting")
                        }
                        async_nats::Event::Connected => {
                            tracing::info!("NATS connection (re)established");
                            if lost.swap(false, Ordering::SeqCst) {
                                connections.send_modify(|n| *n += 1);
                            }
                        }
                        other if drops.observe(&other, "service runtime") => {}
                        other => {
                            refused.observe(&other);
                            tracing::debug!("NATS event: {other}");
                        }
                    }
                }
            });
        if let Some(capacity) = config.subscription_capacity {
            options = options.subscription_capacity(capacity);
        }
        let client = crate::transport::with_url_credentials(options, &config.nats_url)
            .connect(config.nats_url.as_str())
            .await
            .map_err(|e| StartError::Connect {
                url: crate::transport::redact_url(&config.nats_url),
                reason: e.to_string(),
            })?;
        let nats = |action: &'static str| {
            move |e: &dyn std::fmt::Display| StartError::Nats {
                action,
                reason: e.to_string(),
            }
        };

        // Subscribe to broadcasts before registering, so no update sent in between is missed.
        let early = if super::breaks::on(super::breaks::ProtocolBreak::BroadcastsAfterReply) {
            None
        } else {
            Some(broadcasts(&client, &self.manifest.service).await?)
        };

        // A stream named by TRIGGERS_NATS_SOURCE_STREAM is made before registering, so the
        // orchestrator finds the sources captured and serves the service on it.
        if let Some(name) = &config.source_stream {
            let name = subject::stream_name(&self.manifest.service, Some(name))
                .map_err(|e| nats("name the inbound stream")(&e))?;
            inbound_stream(
                &jetstream::new(client.clone()),
                &name,
                &nats_sources(&self.manifest),
            )
            .await?;
        }
        let reply = register(&client, &self.manifest, config.register_timeout).await?;
        let broadcasts = match early {
            Some(subscribed) => subscribed,
            None => broadcasts(&client, &self.manifest.service).await?,
        };
        let (flows, _) = watch::channel(Arc::new(BTreeMap::new()));
        let runtime = Arc::new(Runtime {
            durable_timer: self.manifest.has_capability(DURABLE_TIMER_V1),
            actions: self
                .actions
                .into_iter()
                .map(|a| (a.name.clone(), a))
                .collect(),
            lookups: self
                .lookups
                .into_iter()
                .map(|l| (l.name.clone(), l))
                .collect(),
            js: jetstream::new(client.clone()),
            client,
            flows,
            http: std::sync::OnceLock::new(),
            processed: Mutex::new(BoundedMap::new(config.max_handled_keys)),
            outcomes: Mutex::new(BoundedMap::new(config.max_kept_outcomes)),
            captures: Mutex::new(BoundedMap::new(MAX_CAPTURES)),
            capture_lookup: tokio::sync::Mutex::new(()),
            confirmer: crate::runtime::confirm::Confirmer::new(refusals),
            settler: crate::runtime::settle::Settler::default(),
            stats: Stats::default(),
            ledger: tokio::sync::OnceCell::new(),
            started_at: GoTime::now(),
            config,
            manifest: self.manifest,
        });
        for flow in &reply.flows {
            runtime.install(flow);
        }

        let consumers = consumers(&runtime).await?;
        let (stop, _) = watch::channel(false);
        let inflight = Arc::new(Semaphore::new(runtime.config.max_concurrency));
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(follow_broadcasts(runtime.clone(), broadcasts)));
        tasks.push(tokio::spawn(heartbeats(runtime.clone(), stop.subscribe())));
        tasks.push(tokio::spawn(reregister(
            runtime.clone(),
            reconnected,
            stop.subscribe(),
        )));
        for (name, consumer) in consumers {
            tasks.push(tokio::spawn(consume(
                runtime.clone(),
                name,
                consumer,
                inflight.clone(),
                stop.subscribe(),
            )));
        }
        runtime.publish_heartbeat(false).await;
        tracing::info!(service = runtime.service(), hash = %runtime.manifest.manifest_hash, "registered and running");
        Ok(RunningService {
            runtime,
            stop,
            tasks,
            inflight,
        })
    }
}

/// The subscriptions to both broadcast subjects: the service's own and `all`.
async fn broadcasts(
    client: &async_nats::Client,
    service: &str,
) -> Result<futures::stream::Select<async_nats::Subscriber, async_nats::Subscriber>, StartError> {
    let failed = |e: &dyn std::fmt::Display| StartError::Nats {
        action: "subscribe to flow broadcasts",
        reason: e.to_string(),
    };
    let own = subject::flow_broadcast(service).map_err(|e| failed(&e))?;
    if super::breaks::on(super::breaks::ProtocolBreak::BroadcastsInQueueGroup) {
        // Replicas share the flows out: each holds some.
        let group = format!("{service}-flows");
        return Ok(futures::stream::select(
            client
                .queue_subscribe(own, group.clone())
                .await
                .map_err(|e| failed(&e))?,
            client
                .queue_subscribe(subject::FLOW_BROADCAST_ALL, group)
                .await
                .map_err(|e| failed(&e))?,
        ));
    }
    Ok(futures::stream::select(
        client.subscribe(own).await.map_err(|e| failed(&e))?,
        client
            .subscribe(subject::FLOW_BROADCAST_ALL)
            .await
            .map_err(|e| failed(&e))?,
    ))
}

async fn register(
    client: &async_nats::Client,
    manifest: &Manifest,
    timeout: Duration,
) -> Result<RegisterReply, StartError> {
    let bytes = manifest
        .to_json()
        .map_err(|e| StartError::BadReply(e.to_string()))?;
    let reply = match tokio::time::timeout(
        timeout,
        client.request(subject::MANIFEST_REGISTER, bytes.into()),
    )
    .await
    {
        Err(_) => return Err(StartError::RegisterTimeout(timeout)),
        Ok(Err(e)) => {
            return Err(match e.kind() {
                async_nats::RequestErrorKind::NoResponders => StartError::NoResponders,
                async_nats::RequestErrorKind::TimedOut => StartError::RegisterTimeout(timeout),
                _ => StartError::Nats {
                    action: "send the registration",
                    reason: e.to_string(),
                },
            });
        }
        Ok(Ok(reply)) => reply,
    };
    let reply = RegisterReply::from_json(&reply.payload)
        .map_err(|e| StartError::BadReply(e.to_string()))?;
    if !reply.error.is_empty() {
        return Err(StartError::Refused(reply.error));
    }
    Ok(reply)
}

/// The inbound stream (created when the orchestrator has not) and one durable pull consumer per
/// NATS source subject, shared by every replica.
async fn consumers(runtime: &Arc<Runtime>) -> Result<Vec<(String, PullConsumer)>, StartError> {
    let service = runtime.service();
    let sources = nats_sources(&runtime.manifest);
    let stream_name = subject::stream_name(service, runtime.config.source_stream.as_deref())
        .map_err(|e| StartError::Nats {
            action: "name the inbound stream",
            reason: e.to_string(),
        })?;
    // Looked up (or made) only when a consumer cannot simply be created on the named stream:
    // the stream the emulator made at registration is the usual case, and asking for it first
    // cost every start a round trip (and a consumer's lookup before its creation another).
    let mut stream = None;
    if sources.is_empty() {
        inbound_stream(&runtime.js, &stream_name, &sources).await?;
    }
    // In-progress acks every third of it keep a message while it is handled, however long.
    let ack_wait = runtime.config.ack_wait;
    let mut out = Vec::new();
    for source in &sources {
        let name = subject::consumer_name(service, source).map_err(|e| StartError::Nats {
            action: "name a consumer",
            reason: e.to_string(),
        })?;
        let config = jetstream::consumer::pull::Config {
            durable_name: Some(name.clone()),
            filter_subject: source.clone(),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait,
            max_deliver: if super::breaks::on(super::breaks::ProtocolBreak::UnboundedMaxDeliver) {
                -1
            } else {
                i64::from(runtime.config.max_deliver)
            },
            max_ack_pending: i64::try_from(runtime.config.max_concurrency.saturating_mul(4))
                .unwrap_or(i64::MAX),
            ..Default::default()
        };
        if let Some(consumer) = created(&runtime.js, &stream_name, &name, &config).await {
            out.push((name, consumer));
            continue;
        }
        let found = match stream.take() {
            Some(found) => found,
            None => inbound_stream(&runtime.js, &stream_name, &sources).await?,
        };
        let consumer = patiently("create the durable consumer", || {
            found.get_or_create_consumer(&name, config.clone())
        })
        .await
        .map_err(|e| StartError::Nats {
            action: "create the durable consumer",
            reason: format!("{name} on {source}: {e}"),
        })?;
        stream = Some(found);
        out.push((name, consumer));
    }
    Ok(out)
}

/// The durable consumer `name` on the stream `stream_name`, in one round trip: created, or, when
/// it exists with another configuration (another replica's settings), the one there, as
/// `get_or_create_consumer` gives it. `None` when that does not settle it (no such stream,
/// JetStream not ready): the caller takes the patient way.
async fn created(
    js: &jetstream::Context,
    stream_name: &str,
    name: &str,
    config: &jetstream::consumer::pull::Config,
) -> Option<PullConsumer> {
    use async_nats::jetstream::stream::ConsumerCreateStrictErrorKind as K;
    match js
        .create_consumer_strict_on_stream(config.clone(), stream_name)
        .await
    {
        Ok(consumer) => Some(consumer),
        Err(e) if e.kind() == K::AlreadyExists => {
            js.get_consumer_from_stream(name, stream_name).await.ok()
        }
        Err(_) => None,
    }
}

/// The subjects of the manifest's NATS sources.
fn nats_sources(manifest: &Manifest) -> Vec<String> {
    manifest
        .service_sources
        .iter()
        .filter(|s| s.transport == crate::wire::manifest::TRANSPORT_NATS)
        .map(|s| s.default.clone())
        .collect()
}

/// The inbound stream: the one named (`triggers-sources-<service>`, or the override), else the
/// stream that already captures the service's sources (the orchestrator may have created it under
/// its own name), else a new one under the name.
async fn inbound_stream(
    js: &jetstream::Context,
    name: &str,
    sources: &[String],
) -> Result<jetstream::stream::Stream, StartError> {
    if let Ok(stream) = patiently("look up the inbound stream", || js.get_stream(name)).await {
        return Ok(stream);
    }
    if let Some(first) = sources.first()
        && let Ok(found) = js.stream_by_subject(first.as_str()).await
        && let Ok(stream) = js.get_stream(&found).await
    {
        tracing::info!(
            "the inbound stream {name} does not exist; using {found}, which captures {first}"
        );
        return Ok(stream);
    }
    let config = jetstream::stream::Config {
        name: name.to_owned(),
        subjects: sources.to_vec(),
        duplicate_window: Duration::from_secs(120),
        max_age: INBOUND_MAX_AGE,
        max_bytes: INBOUND_MAX_BYTES,
        // A delivery leaves the stream once handled (acked): the stream holds what is waiting,
        // not a week of everything. Full, it refuses a new message (its publisher is told)
        // rather than let an unhandled one go unseen.
        retention: async_nats::jetstream::stream::RetentionPolicy::WorkQueue,
        discard: async_nats::jetstream::stream::DiscardPolicy::New,
        ..Default::default()
    };
    patiently("create the inbound stream", || {
        crate::transport::reserving("the inbound stream", config.clone(), |c| {
            js.create_stream(c)
        })
    })
    .await
    .map_err(|e| StartError::Nats {
        action: "create the inbound stream",
        reason: format!("{name} over {sources:?}: {e}"),
    })
}

/// Limits of an inbound stream the SDK creates (when the orchestrator has not): a week of
/// messages, 1 GiB at most.
const INBOUND_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
const INBOUND_MAX_BYTES: i64 = 1 << 30;

async fn follow_broadcasts(
    runtime: Arc<Runtime>,
    mut broadcasts: impl futures::Stream<Item = async_nats::Message> + Unpin,
) {
    while let Some(msg) = broadcasts.next().await {
        match FlowEnvelope::from_json(&msg.payload) {
            Ok(envelope) => runtime.install(&envelope),
            Err(e) => {
                tracing::warn!(subject = %msg.subject, "ignoring a broadcast that is not a FlowEnvelope: {e}")
            }
        }
    }
}

async fn heartbeats(runtime: Arc<Runtime>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(runtime.config.heartbeat_interval);
    tick.tick().await; // the first tick is immediate; start() sent that heartbeat already
    loop {
        tokio::select! {
            _ = tick.tick() => runtime.publish_heartbeat(false).await,
            _ = stop.changed() => return,
        }
    }
}

/// How often a registration after a reconnect is tried before giving up until the next one,
/// and the pauses between tries: doubling from the first to the last (about 40 s in all, enough
/// for `triggers-lab up` to start its emulator after its server).
const REREGISTER_ATTEMPTS: u32 = 12;
const REREGISTER_FIRST_PAUSE: Duration = Duration::from_millis(100);
const REREGISTER_MAX_PAUSE: Duration = Duration::from_secs(5);

/// Registers again after every reconnection, as at start: the server may be a new one (a
/// restarted `triggers-lab up` on the same port, an orchestrator that lost its state) that has
/// never heard of this service, and nothing else would tell it. Heartbeats get no reply, so a
/// reconnection is the one signal there is. Tries [`REREGISTER_ATTEMPTS`] times with a doubling
/// pause (nobody may answer yet: the emulator starts after its server); a refusal is final. Once
/// registered it installs the flows of the reply and makes sure the inbound stream and the
/// consumers exist (a new server has neither), so the service works again, not just appears.
async fn reregister(
    runtime: Arc<Runtime>,
    mut reconnected: watch::Receiver<u64>,
    mut stop: watch::Receiver<bool>,
) {
    // A reconnection during start() was covered by its own registration.
    reconnected.borrow_and_update();
    loop {
        tokio::select! {
            changed = reconnected.changed() => if changed.is_err() { return },
            _ = stop.changed() => return,
        }
        let mut pause = REREGISTER_FIRST_PAUSE;
        for attempt in 1..=REREGISTER_ATTEMPTS {
            let outcome = register(
                &runtime.client,
                &runtime.manifest,
                runtime.config.register_timeout,
            )
            .await;
            match outcome {
                Ok(reply) => {
                    for flow in &reply.flows {
                        runtime.install(flow);
                    }
                    if let Err(e) = consumers(&runtime).await {
                        tracing::warn!(
                            "registered again, but the consumers could not be made: {e}"
                        );
                    }
                    runtime.publish_heartbeat(false).await;
                    tracing::info!(
                        service = runtime.service(),
                        attempt,
                        "registered again after the NATS connection came back"
                    );
                    break;
                }
                Err(StartError::Refused(why)) => {
                    tracing::error!(
                        service = runtime.service(),
                        "the registration after a reconnect was refused: {why}"
                    );
                    break;
                }
                Err(e) if attempt == REREGISTER_ATTEMPTS => {
                    tracing::warn!(
                        service = runtime.service(),
                        "gave up registering again after {attempt} tries ({e}); the next reconnect tries again"
                    );
                }
                Err(e) => {
                    tracing::debug!(attempt, "registering again failed ({e}); retrying");
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        _ = stop.changed() => return,
                    }
                    pause = (pause * 2).min(REREGISTER_MAX_PAUSE);
                }
            }
        }
    }
}

/// Pulls messages while not stopped; recreates the pull after errors (a server restart).
async fn consume(
    runtime: Arc<Runtime>,
    name: String,
    consumer: PullConsumer,
    inflight: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
) {
    let batch = runtime.config.max_concurrency.clamp(1, 256);
    loop {
        if *stop.borrow() {
            return;
        }
        let messages = consumer
            .stream()
            .max_messages_per_batch(batch)
            .heartbeat(Duration::from_secs(5))
            .messages()
            .await;
        let mut messages = match messages {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(consumer = %name, "cannot pull, retrying in 1 s: {e}");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    _ = stop.changed() => return,
                }
            }
        };
        loop {
            let next = tokio::select! {
                next = messages.next() => next,
                _ = stop.changed() => return,
            };
            match next {
                Some(Ok(msg)) => {
                    let Ok(permit) = inflight.clone().acquire_owned().await else {
                        return;
                    };
                    let runtime = runtime.clone();
                    tokio::spawn(runtime.handle(msg, permit));
                }
                Some(Err(e)) => {
                    tracing::debug!(consumer = %name, "pull interrupted: {e}");
                    break;
                }
                None => break,
            }
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = stop.changed() => return,
        }
    }
}

impl RunningService {
    /// The service's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.runtime.service()
    }

    /// The manifest it registered.
    #[must_use]
    pub fn manifest(&self) -> &Manifest {
        &self.runtime.manifest
    }

    /// The flows it holds now.
    #[must_use]
    pub fn flows(&self) -> BTreeMap<String, Flow> {
        self.runtime
            .flows
            .borrow()
            .iter()
            .map(|(id, f)| (id.clone(), Flow::clone(f)))
            .collect()
    }

    /// Waits until the service holds flow `id` (at least `version`), or `timeout` passes.
    pub async fn wait_for_flow(&self, id: &str, version: i64, timeout: Duration) -> bool {
        let mut rx = self.runtime.flows.subscribe();
        tokio::time::timeout(timeout, async {
            loop {
                if rx
                    .borrow_and_update()
                    .get(id)
                    .is_some_and(|f| f.version >= version)
                {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await
        .is_ok()
    }

    /// What the runtime dropped, refused or gave up on so far.
    #[must_use]
    pub fn stats(&self) -> RuntimeStats {
        let r = &self.runtime;
        RuntimeStats {
            flows_refused: r.stats.flows_refused.load(Ordering::Relaxed),
            flows_gated: r.stats.flows_gated.load(Ordering::Relaxed),
            given_up: r.stats.given_up.load(Ordering::Relaxed),
            handled_keys_evicted: r.lock_processed().evicted(),
            outcomes_evicted: r.lock_outcomes().evicted(),
            dlq_ledger_misses: r.stats.dlq_ledger_misses.load(Ordering::Relaxed),
        }
    }

    /// Messages NATS dropped because a subscription of this service fell behind (slow consumer;
    /// at least this many). Each is also logged. Above zero, the service may have missed flow
    /// broadcasts or deliveries.
    #[must_use]
    pub fn dropped_messages(&self) -> u64 {
        self.runtime.config.drops.count()
    }

    /// The NATS connection.
    #[must_use]
    pub fn client(&self) -> &async_nats::Client {
        &self.runtime.client
    }

    /// Stops gracefully: stops pulling, lets in-flight messages finish within the grace period,
    /// sends a last heartbeat with `shutting_down: true`, and drains the connection.
    ///
    /// It returns within the grace period (plus at most 2 s for the goodbye when
    /// in-flight work used all of it) whatever the server does: every wait is bounded, so a
    /// service whose NATS server is gone still exits ([`ShutdownReport::said_goodbye`] is then
    /// `false`).
    pub async fn shutdown(mut self) -> ShutdownReport {
        let grace = self.runtime.config.shutdown_grace;
        let deadline = tokio::time::Instant::now() + grace;
        let _ = self.stop.send(true);
        let max = self.runtime.config.max_concurrency;
        let all = u32::try_from(max).unwrap_or(u32::MAX);
        let drained = tokio::time::timeout_at(deadline, self.inflight.acquire_many(all))
            .await
            .is_ok();
        let abandoned = max - self.inflight.available_permits().min(max);
        for t in self.tasks.drain(..) {
            t.abort();
        }
        // The goodbye gets what is left of the grace, and at least the floor: a server that is
        // up answers in milliseconds, one that is gone never does (async-nats' flush and drain
        // wait for a reconnection that will not come).
        let farewell = deadline.max(tokio::time::Instant::now() + FAREWELL_FLOOR.min(grace));
        let client = self.runtime.client.clone();
        let runtime = self.runtime.clone();
        let said_goodbye = tokio::time::timeout_at(farewell, async move {
            runtime.publish_heartbeat(true).await;
            client.flush().await.is_ok() && client.drain().await.is_ok()
        })
        .await
        .unwrap_or(false);
        if !said_goodbye {
            tracing::warn!(
                service = self.runtime.service(),
                "the last heartbeat and the drain did not reach NATS in time; exiting anyway"
            );
        }
        ShutdownReport {
            drained,
            abandoned: if drained { 0 } else { abandoned },
            said_goodbye,
        }
    }

    /// Runs until Ctrl-C (or SIGTERM), then shuts down gracefully.
    pub async fn run_until_signal(self) -> ShutdownReport {
        #[cfg(unix)]
        {
            if let Ok(mut term) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            } else {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        self.shutdown().await
    }
}

impl Drop for RunningService {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}
