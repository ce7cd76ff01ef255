//! The crate's errors: typed, so callers can match on what went wrong, and worded to say what to do.
//!
//! An error that has a cause keeps it, typed, as its [`source`](std::error::Error::source), and
//! also says it in its message (most callers print `{e}` alone, into a report or a control
//! reply); a printer of the whole chain skips a cause its error has said already (the CLI's does).

use std::time::Duration;

/// The cause of an error from a client library (async-nats' errors are one type per operation).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

pub use natsbox::NatsError;

/// An emulator operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmulatorError {
    /// A NATS or JetStream call failed.
    #[error("cannot {action}: {source}")]
    Nats {
        /// What the emulator was doing.
        action: &'static str,
        /// The client's error.
        #[source]
        source: BoxError,
    },
    /// The release was refused; every problem is listed with its stable code.
    #[error("release refused:\n{}", .0.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n"))]
    Release(Vec<crate::release::ReleaseProblem>),
    /// No deployed flow has this id.
    #[error("no flow {0:?} is deployed; deploy it first")]
    UnknownFlow(String),
    /// The flow has no service-in to start at (or not the one asked for).
    #[error("flow {flow:?} has no service-in entry {}", .entry.as_ref().map(|e| format!("{e:?}")).unwrap_or_default())]
    NoEntry {
        /// The flow.
        flow: String,
        /// The entry asked for.
        entry: Option<String>,
    },
    /// A publish to a service's inbound subject failed.
    #[error("cannot publish to {subject}: {source}{hint}")]
    Publish {
        /// The subject.
        subject: String,
        /// Why.
        #[source]
        source: BoxError,
        /// What to look at, when the cause says (` (is the service running …?)`), else empty.
        hint: &'static str,
    },
    /// A DLQ entry that cannot be re-sent, and why.
    #[error("DLQ entry {msg_id:?} cannot be re-sent: {why}")]
    NotResendable {
        /// The entry's `Nats-Msg-Id`.
        msg_id: String,
        /// Why not.
        why: String,
    },
    /// A run that cannot be cancelled, and why.
    #[error("run {run_id:?} cannot be cancelled: {why}")]
    NotCancellable {
        /// The run.
        run_id: String,
        /// Why not.
        why: String,
    },
    /// `advance` on the real clock.
    #[error(
        "the emulator runs on the real clock, which cannot be advanced; use ClockMode::Virtual"
    )]
    RealClock,
    /// A redeploy would need a version above the largest there is (`i64::MAX`).
    #[error(
        "flow {flow:?} is deployed at version {version}, the largest there is: a redeploy has no next version; deploy it under another id"
    )]
    FlowVersion {
        /// The flow.
        flow: String,
        /// The version deployed now.
        version: i64,
    },
    /// A value could not be written as JSON.
    #[error("cannot encode JSON: {0}")]
    Encode(triggers_sdk::error::JsonError),
    /// A run id given to `trigger_bytes` cannot be carried in headers and keys.
    #[error("run id not usable: {0}")]
    InvalidRunId(String),
    /// A run with this id exists already.
    #[error("run {0:?} exists already; give another run id (or none, for a new random one)")]
    RunExists(String),

    /// As many runs are open (running or waiting) as the emulator holds: a run is started only
    /// once some settle.
    #[error(
        "{open} runs the emulator started are open (running or waiting for a service, a timer or a \
         retry), the most this emulator holds (EmulatorConfig::max_open_runs): let them settle \
         (are their services running?), or raise the bound \
         (`up --max-open-runs`, a scenario's emulator.max_open_runs)"
    )]
    TooManyOpenRuns {
        /// Runs the emulator started that are open now (runs followed from events not counted:
        /// they have a bound of their own, `max_followed_runs`).
        open: usize,
    },
    /// Some timer deliveries could not be published; they stay armed and are tried again on the
    /// next advance (the others were delivered).
    #[error(
        "{failed} of {attempted} timer deliveries could not be published (they stay armed and are tried again on the next advance): {first}"
    )]
    TimerDelivery {
        /// Deliveries that failed.
        failed: usize,
        /// Deliveries tried.
        attempted: usize,
        /// The first failure's reason.
        first: String,
    },
}

impl EmulatorError {
    pub(crate) fn nats(action: &'static str, e: impl Into<BoxError>) -> Self {
        EmulatorError::Nats {
            action,
            source: e.into(),
        }
    }

    /// A redeploy of `deployed`, which is at the largest version there is.
    pub(crate) fn no_next_version(deployed: &triggers_sdk::flow::Flow) -> Self {
        EmulatorError::FlowVersion {
            flow: deployed.id.clone(),
            version: deployed.version,
        }
    }

    /// The release problems, if this is a refused release.
    #[must_use]
    pub fn release_problems(&self) -> Option<&[crate::release::ReleaseProblem]> {
        match self {
            EmulatorError::Release(p) => Some(p),
            _ => None,
        }
    }
}

/// A `wait_*` call gave up.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WaitError {
    /// Nothing matching arrived in time.
    #[error("waited {waited:?} for {waiting_for}, in vain; {saw}")]
    Timeout {
        /// How long it waited.
        waited: Duration,
        /// What it waited for.
        waiting_for: String,
        /// A readable account of what did arrive.
        saw: String,
    },
}

/// The harness could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// No nats-server (the message says how to get one).
    #[error(transparent)]
    Nats(#[from] NatsError),
    /// The server started but no client could connect.
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: async_nats::ConnectError,
    },
    /// The emulator's control connection could not log in to the server's control account.
    #[error("cannot log in to {url}'s control account: {source}")]
    ControlAccount {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: async_nats::ConnectError,
    },
    /// The emulator could not start.
    #[error(transparent)]
    Emulator(#[from] EmulatorError),
}

/// A control API call failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// No emulator answered on the control subjects.
    #[error(
        "no triggers-lab emulator answers on {url} ({reason}); start one with `triggers-lab up`, or point --nats / TRIGGERS_NATS_URL at it. An `up` answers only clients with its credentials, which the triggers-lab commands read from its discovery file: run them as the user who started it"
    )]
    NoEmulator {
        /// The NATS URL.
        url: String,
        /// The client's error.
        reason: String,
    },
    /// The emulator answered with an error.
    #[error("{0}")]
    Refused(String),
    /// The reply could not be read.
    #[error("unreadable reply from the emulator: {0}")]
    BadReply(String),
    /// The request is larger than the server carries: it was not sent.
    #[error(
        "the {op} request is {bytes} bytes, more than the NATS server carries in one message ({max} bytes, its max_payload): send less (a smaller flow or payload), or start the server with a larger max_payload"
    )]
    TooLarge {
        /// The operation.
        op: String,
        /// The request's size, headers included.
        bytes: usize,
        /// The server's `max_payload`.
        max: usize,
    },
}

/// A recording (`triggers-lab up --record FILE`) that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordingError {
    /// The file cannot be opened or read.
    #[error("cannot read the recording {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line of a recording with a header is not a record (or the header is malformed).
    #[error("{path}:{line}:{column}: not a record: {message}")]
    Line {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What serde found wrong.
        message: String,
    },
    /// A file without a header line whose lines are not records of today's shape: not a
    /// recording, or one too old to read.
    #[error(
        "{path}:{line}:{column}: not a recording: there is no header line ({{\"triggers_lab_recording\": N, ...}}), so it was read as a format-0 recording, and this line is not a record of that shape: {message}"
    )]
    NotARecording {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What serde found wrong.
        message: String,
    },
    /// A recording of a format this crate does not read.
    #[error(
        "{path}: a recording of format {found}{}; this triggers-lab ({}) reads formats 0 and {supported}: read it with {}",
        .written_by.as_ref().map(|v| format!(" (written by triggers-lab {v})")).unwrap_or_default(),
        env!("CARGO_PKG_VERSION"),
        .written_by.as_ref().map(|v| format!("triggers-lab {v} or newer")).unwrap_or_else(|| "the triggers-lab that wrote it".to_owned())
    )]
    Format {
        /// The header's `triggers_lab_recording`, as written.
        found: String,
        /// The header's `tool_version`, when it has one.
        written_by: Option<String>,
        /// The file.
        path: String,
        /// The newest format this crate reads.
        supported: u32,
    },
}
