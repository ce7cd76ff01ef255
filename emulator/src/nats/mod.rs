//! A real nats-server with JetStream for tests and for `triggers-lab up`, from whichever source this
//! machine has.
//!
//! [`NatsServer::start`] picks a backend in this order and says which it chose and why it passed
//! over the ones before it ([`NatsServer::summary`], and a `tracing` event at `info`):
//!
//! 1. **external**: `TRIGGERS_NATS_URL` (or [`NatsConfig::url`]) names a running server. It is not
//!    ours: it is checked, never stopped.
//! 2. **docker**: a Docker engine answers. It runs the official `nats` image if a tag of it is
//!    present locally, else `triggers-lab/nats-server:local` (built by
//!    `emulator/docker/build-nats-image.sh`), else it tries to pull `nats:latest` for a few
//!    seconds. `TRIGGERS_NATS_IMAGE=name:tag` names another image.
//! 3. **binary**: `nats-server` on `PATH` (or `TRIGGERS_NATS_SERVER_BIN`), spawned on free ports
//!    with its store and log in a temporary directory.
//!
//! Failing all three, the error lists how to get each. `TRIGGERS_NATS_BACKEND=docker|binary|url`
//! or [`NatsConfig::backend`] forces one.
//!
//! Every server the emulator starts is its own: own ports, own JetStream store. It is ready when
//! its monitoring port answers `GET /healthz` with 200 and a client has connected; dropping the
//! handle stops it, and a handle dropped while a test panics prints the server's log.
//!
//! ```no_run
//! use triggers_emulator::nats::{Backend, NatsConfig, NatsServer};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! // Whatever this machine offers:
//! let server = NatsServer::start(NatsConfig::default()).await?;
//! println!("{}", server.summary());
//! let client = async_nats::connect(server.url()).await?;
//! client.publish("greetings", "hello".into()).await?;
//!
//! // Or one backend in particular:
//! let mut own = NatsServer::start(NatsConfig {
//!     backend: Backend::Binary,
//!     ..Default::default()
//! })
//! .await?;
//! own.restart().await?; // same URL, same streams
//! # Ok(())
//! # }
//! ```

pub(crate) mod accounts;
mod binary;
mod choice;
mod config;
mod docker;
mod probe;

use std::time::Duration;

pub use accounts::ControlCredentials;
pub use choice::{ChosenBackend, SkippedBackend};
pub use config::{
    Backend, ENV_BACKEND, ENV_IMAGE, ENV_MONITOR_URL, ENV_SERVER_BIN, ENV_URL, LOCAL_IMAGE,
    NatsConfig, OFFICIAL_IMAGE,
};

use crate::error::NatsError;
use binary::BinaryServer;
use config::Resolved;
use docker::DockerServer;

/// A running nats-server with JetStream. Dropping it stops the server if the emulator started it
/// (kills the process, or removes the container) and deletes its store.
pub struct NatsServer {
    url: String,
    monitor_url: Option<String>,
    backend: ChosenBackend,
    skipped: Vec<SkippedBackend>,
    ready_timeout: Duration,
    control: Option<ControlCredentials>,
    running: Running,
}

enum Running {
    External,
    Docker(Box<DockerServer>),
    Binary(BinaryServer),
}

impl NatsServer {
    /// Provisions a server as `config` and the environment ask, and returns once it accepts
    /// clients. See the [module docs](self) for the order backends are tried in.
    pub async fn start(config: NatsConfig) -> Result<NatsServer, NatsError> {
        let resolved = config.resolve(|name| std::env::var(name).ok())?;
        let mut skipped = Vec::new();
        let server = provision(&resolved, &mut skipped).await?;
        for skip in &server.skipped {
            tracing::info!(backend = %skip.backend, reason = %skip.reason, "nats-server backend skipped");
        }
        tracing::info!(backend = %server.backend, url = %server.url, "nats-server ready");
        Ok(server)
    }

    /// The client URL, e.g. `nats://127.0.0.1:41234`. It stays the same across [`restart`](Self::restart).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The HTTP monitoring URL (`/healthz`, `/varz`, `/jsz`), when known: always for a server the
    /// emulator started, for an external one only if `TRIGGERS_NATS_MONITOR_URL` or
    /// [`NatsConfig::monitor_url`] gave it.
    pub fn monitor_url(&self) -> Option<&str> {
        self.monitor_url.as_deref()
    }

    /// The control account's user, when the server was started with
    /// [`NatsConfig::private_control`]: connect with [`ControlCredentials::connect_options`] to
    /// serve or use the control API. `None` for an open server (and any external one).
    pub fn control_credentials(&self) -> Option<&ControlCredentials> {
        self.control.as_ref()
    }

    /// Where the server came from; displays as `docker (image)`, `binary (/path)` or
    /// `external (url)`.
    pub fn backend(&self) -> &ChosenBackend {
        &self.backend
    }

    /// The backends looked at before the chosen one, and why each was passed over.
    pub fn skipped(&self) -> &[SkippedBackend] {
        &self.skipped
    }

    /// One line for a CLI or a test log: what was chosen, where it listens, what was skipped.
    pub fn summary(&self) -> String {
        let mut text = format!("nats-server {} at {}", self.backend, self.url);
        if !self.skipped.is_empty() {
            let skipped: Vec<String> = self.skipped.iter().map(ToString::to_string).collect();
            text.push_str(&format!(" (skipped {})", skipped.join("; ")));
        }
        text
    }

    /// What the server has logged so far, across restarts. Empty for an external server, whose
    /// log the emulator cannot see.
    pub fn log(&self) -> String {
        match &self.running {
            Running::External => String::new(),
            Running::Docker(server) => server.log(),
            Running::Binary(server) => server.log(),
        }
    }

    /// Stops the server and starts it again at the same URL with the same JetStream store, as a
    /// crash-and-recover would: connected clients reconnect, streams and their messages survive.
    /// Returns once the server is ready again.
    ///
    /// An external server cannot be restarted: that is [`NatsError::RestartNotSupported`].
    pub async fn restart(&mut self) -> Result<(), NatsError> {
        tracing::info!(backend = %self.backend, url = %self.url, "restarting nats-server");
        match &mut self.running {
            Running::External => Err(NatsError::RestartNotSupported {
                url: self.url.clone(),
            }),
            Running::Docker(server) => server.restart(self.ready_timeout).await,
            Running::Binary(server) => server.restart(self.ready_timeout).await,
        }
    }

    /// Stops the server gracefully and removes what it left behind (an external server is left
    /// running). Dropping the handle does the same, less gracefully.
    pub async fn stop(mut self) -> Result<(), NatsError> {
        match &mut self.running {
            Running::External => Ok(()),
            Running::Docker(server) => server.stop().await,
            Running::Binary(server) => {
                server.stop().await;
                Ok(())
            }
        }
    }
}

impl std::fmt::Debug for NatsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsServer")
            .field("url", &self.url)
            .field("monitor_url", &self.monitor_url)
            .field("backend", &self.backend)
            .field("skipped", &self.skipped)
            .finish_non_exhaustive()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        // A failing test should show why the server misbehaved without a rerun.
        if std::thread::panicking() {
            let log = self.log();
            if !log.trim().is_empty() {
                eprintln!(
                    "--- log of nats-server {} at {} ---\n{}\n--- end of nats-server log ---",
                    self.backend,
                    self.url,
                    log.trim_end()
                );
            }
        }
        // The backend's own Drop stops what it started.
    }
}

/// Force-removes, at once, every nats-server container this process started (they carry its pid
/// in a label), for an exit that cannot wait for [`NatsServer::stop`]: a second Ctrl-C. Gives up
/// after `within`; returns how many were removed. Containers of a process that was killed before
/// it could do even this are removed by the next Docker start on the machine.
///
/// Servers of the binary backend need nothing of the kind: a watchdog kills each one (and
/// removes its store) when the process that started it ends, however it ends.
pub async fn remove_own_containers(within: Duration) -> usize {
    docker::remove_own(within).await
}

/// Goes through the backends `resolved` allows, recording each one passed over in `skipped`.
async fn provision(
    resolved: &Resolved,
    skipped: &mut Vec<SkippedBackend>,
) -> Result<NatsServer, NatsError> {
    let wants = |backend: Backend| resolved.backend == Backend::Auto || resolved.backend == backend;

    if wants(Backend::External) {
        match &resolved.url {
            Some(url) => return external(resolved, url, std::mem::take(skipped)).await,
            None => skipped.push(SkippedBackend::new(
                Backend::External,
                format!("{ENV_URL} is not set (nor NatsConfig::url)"),
            )),
        }
    }

    if wants(Backend::Docker) {
        let found = match docker::engine().await {
            Ok(engine) => docker::choose_image(&engine, resolved)
                .await
                .map(|image| (engine, image)),
            Err(skip) => Err(skip),
        };
        match found {
            Ok((engine, image)) => {
                let (config, control) = accounts_config(resolved);
                let server = DockerServer::start(
                    &engine,
                    image,
                    config,
                    resolved.ready_timeout,
                    resolved.client_port,
                )
                .await?;
                return Ok(NatsServer {
                    control,
                    url: server.client_url(),
                    monitor_url: Some(server.monitor_url()),
                    backend: server.backend(),
                    skipped: std::mem::take(skipped),
                    ready_timeout: resolved.ready_timeout,
                    running: Running::Docker(Box::new(server)),
                });
            }
            Err(skip) => skipped.push(skip),
        }
    }

    if wants(Backend::Binary) {
        match binary::find(resolved) {
            Ok(path) => {
                let (config, control) = accounts_config(resolved);
                let server =
                    BinaryServer::start(path, config, resolved.ready_timeout, resolved.client_port)
                        .await?;
                return Ok(NatsServer {
                    control,
                    url: server.client_url(),
                    monitor_url: Some(server.monitor_url()),
                    backend: server.backend(),
                    skipped: std::mem::take(skipped),
                    ready_timeout: resolved.ready_timeout,
                    running: Running::Binary(server),
                });
            }
            Err(skip) => skipped.push(skip),
        }
    }

    Err(NatsError::NoBackend {
        tried: std::mem::take(skipped),
    })
}

/// Checks that the external server answers (its `/healthz` too when a monitoring URL is known).
async fn external(
    resolved: &Resolved,
    url: &str,
    skipped: Vec<SkippedBackend>,
) -> Result<NatsServer, NatsError> {
    let monitor_url = resolved.monitor_url.clone();
    probe::wait_ready(
        url,
        monitor_url.as_deref(),
        resolved.ready_timeout,
        probe::never_exits,
    )
    .await
    .map_err(|reason| NatsError::ExternalUnreachable {
        url: url.to_string(),
        waited: resolved.ready_timeout,
        reason,
    })?;
    Ok(NatsServer {
        url: url.to_string(),
        monitor_url,
        backend: ChosenBackend::External {
            url: url.to_string(),
        },
        skipped,
        ready_timeout: resolved.ready_timeout,
        control: None,
        running: Running::External,
    })
}

/// The server configuration file and the control credentials, when the config asks for a
/// private control account.
fn accounts_config(resolved: &Resolved) -> (Option<String>, Option<ControlCredentials>) {
    if resolved.private_control {
        let (text, credentials) = accounts::config();
        (Some(text), Some(credentials))
    } else {
        (None, None)
    }
}
