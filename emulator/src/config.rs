//! How the emulator is configured: [`EmulatorConfig`], with the wire tap's and the hash
//! policy's choices.

use std::time::Duration;

use serde::Serialize;

use crate::clock::ClockMode;
#[cfg(doc)]
use crate::emulator::Emulator;
#[cfg(doc)]
use crate::error::EmulatorError;
#[cfg(doc)]
use triggers_sdk::transport;

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
