//! The orchestrator emulator: registration, heartbeats, releases, broadcasts, flow runs, Durable
//! Timers, the recorder and the conformance checker, on one NATS connection.

//!
//! `Emulator` is the façade; behind it, `Shared` (shared.rs) holds the connection and the state
//! (state.rs: parts that keep their own invariants). Each concern has its module: config.rs,
//! streams.rs, registration.rs, deploy.rs, trigger.rs, observe.rs, timers.rs, wait.rs, read.rs.

use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use async_nats::jetstream;
use serde::Serialize;
use tokio::sync::{broadcast, watch};
use triggers_sdk::flow::Flow;
use triggers_sdk::transport;
use triggers_sdk::wire::GoTime;
use triggers_sdk::wire::subject;

use crate::clock::ClockMode;
use crate::conformance::{Severity, Violation};
use crate::error::EmulatorError;
use crate::recorder::Record;
use crate::state::State;
use crate::streams::clean_inbound_streams;

pub use crate::config::{EmulatorConfig, HashMismatchPolicy, WireTap};
pub(crate) use crate::shared::{Shared, new_envelope};
pub(crate) use crate::streams::stream_end;
pub use crate::streams::{DLQ_STREAM, EVENTS_STREAM, FoundAtStart};

/// How long the emulator's start waits for its wire tap to connect.
const TAP_PATIENCE: Duration = Duration::from_secs(10);

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
        let (consumer_checks, consumer_queue) = tokio::sync::mpsc::channel(crate::consumers::QUEUE);
        let shared = Arc::new(Shared::new(
            client.clone(),
            config,
            tap,
            tap_mark_subject,
            consumer_checks,
        ));
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
        let mark = self.shared.next_tap_mark();
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
            self.lock().own.remember(id);
        }
    }

    /// A receiver that sees every record from now on (the control API and the terminal UI use it).
    #[must_use]
    pub fn subscribe_records(&self) -> broadcast::Receiver<Record> {
        self.shared.subscribe_records()
    }

    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.shared.changes()
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
