//! A JetStream cluster of nats-server processes on loopback, routed to one another, for failover
//! tests: stop, kill or restart one node while clients ride it out.
//!
//! Every node has its own client, monitoring and cluster (route) ports, its own store, and the same
//! cluster name; each lists every node's route, so any two can find each other whichever started
//! first. Clients connect to node 1 and learn the others from it, so a reconnect finds a node that
//! is up. A stopped or killed node keeps its ports and store: restarting it brings back the
//! same server, which catches up from the others.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use testcontainers::bollard::Docker;

use crate::binary::BinaryServer;
use crate::docker::{DockerNode, DockerServer, NETWORK_PREFIX};
use crate::error::NatsError;
use crate::probe::{PORT_ATTEMPTS, PortAttempt};
use crate::{ChosenBackend, probe};

/// A cluster name of its own for every cluster this process starts, so nodes of two clusters
/// never route to each other (a port found free and then reused by another cluster's node, a
/// stale node of an earlier run): a route to a node of another cluster name is refused.
fn cluster_name() -> String {
    static CLUSTERS: AtomicU64 = AtomicU64::new(0);
    format!(
        "triggers-lab-{}-{}",
        std::process::id(),
        CLUSTERS.fetch_add(1, Ordering::Relaxed)
    )
}

/// The nodes of a binary cluster. Dropping it kills them all and removes their stores.
pub(crate) struct BinaryCluster {
    nodes: Vec<BinaryServer>,
}

impl BinaryCluster {
    /// Starts `n` nodes from `path` and waits until every one is ready (JetStream answers, which
    /// in a cluster means a meta leader has been elected). A node that lost a port to another
    /// process (between finding the port free and binding it) starts the cluster over on other
    /// ports, up to [`PORT_ATTEMPTS`] times.
    pub(crate) async fn start(
        n: usize,
        path: PathBuf,
        chosen: ChosenBackend,
        sha256: Option<String>,
        config: Option<String>,
        ready_timeout: Duration,
    ) -> Result<Self, NatsError> {
        let (path, chosen, sha256, config) = (&path, &chosen, sha256.as_ref(), config.as_deref());
        probe::on_free_ports("a cluster node", PORT_ATTEMPTS, (), move |()| async move {
            let mut cluster =
                Self::spawn(n, path, chosen, sha256, config).map_err(PortAttempt::Failed)?;
            match cluster.wait_ready(ready_timeout).await {
                Ok(()) => Ok(cluster),
                // The whole cluster starts over on other ports.
                Err(e) if cluster.nodes.iter().any(BinaryServer::lost_port_race) => {
                    Err(PortAttempt::LostRace(e, ()))
                }
                Err(e) => Err(PortAttempt::Failed(e)),
            }
        })
        .await
    }

    /// `n` nodes on fresh ports, routed to one another, all spawned (none ready yet).
    fn spawn(
        n: usize,
        path: &std::path::Path,
        chosen: &ChosenBackend,
        sha256: Option<&String>,
        config: Option<&str>,
    ) -> Result<Self, NatsError> {
        let ports = probe::free_ports(3 * n).map_err(|source| NatsError::Io {
            action: "find free ports on 127.0.0.1".into(),
            source,
        })?;
        let routes: Vec<String> = (0..n)
            .map(|i| format!("nats://127.0.0.1:{}", ports[3 * i + 2]))
            .collect();
        let routes = routes.join(",");
        let name = cluster_name();
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let (client, monitor, cluster) = (ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]);
            let extra = vec![
                "--name".to_string(),
                format!("n{}", i + 1),
                "--cluster_name".to_string(),
                name.clone(),
                "--cluster".to_string(),
                format!("nats://127.0.0.1:{cluster}"),
                "--routes".to_string(),
                routes.clone(),
            ];
            nodes.push(BinaryServer::node(
                path.to_path_buf(),
                chosen.clone(),
                sha256.cloned(),
                config,
                (client, monitor),
                extra,
            )?);
        }
        // All spawned before any is waited for: a node's JetStream waits for a quorum.
        for node in &mut nodes {
            node.spawn()?;
        }
        Ok(BinaryCluster { nodes })
    }

    /// Waits until every node is ready. A node that is not carries the whole cluster's log in
    /// its error: why a meta leader is missing is often in another node's log.
    async fn wait_ready(&mut self, ready_timeout: Duration) -> Result<(), NatsError> {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if let Err(e) = node.wait_ready(ready_timeout).await {
                return Err(match e {
                    NatsError::NotReady {
                        backend,
                        waited,
                        reason,
                        ..
                    } => NatsError::NotReady {
                        backend,
                        waited,
                        reason: format!("node {} of {}: {reason}", i + 1, self.nodes.len()),
                        log: self.log(),
                    },
                    other => other,
                });
            }
        }
        Ok(())
    }

    /// Node 1's client URL: what clients connect to. The server tells them the other nodes'
    /// URLs (INFO `connect_urls`), so a client reconnects to another node when its node goes.
    /// One URL rather than a list because clients (async-nats among them) take one URL string.
    pub(crate) fn client_url(&self) -> String {
        self.nodes
            .first()
            .map(BinaryServer::client_url)
            .unwrap_or_default()
    }

    /// The monitoring URL of the first node that runs.
    pub(crate) fn monitor_url(&self) -> Option<String> {
        self.nodes
            .iter()
            .find(|n| n.is_running())
            .map(BinaryServer::monitor_url)
    }

    /// Each node's client URL, in node order (node 1 first).
    pub(crate) fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(BinaryServer::client_url).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    fn node_mut(&mut self, index: usize) -> Result<&mut BinaryServer, NatsError> {
        let count = self.nodes.len();
        self.nodes.get_mut(index).ok_or(NatsError::NoSuchNode {
            number: index + 1,
            count,
        })
    }

    /// Every node's log, each under a heading.
    pub(crate) fn log(&self) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| format!("=== node {} ===\n{}", i + 1, n.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// SIGTERM to node `index` (0-based), as a graceful shutdown; its store stays.
    pub(crate) async fn stop_node(&mut self, index: usize) -> Result<(), NatsError> {
        self.node_mut(index)?.stop().await;
        Ok(())
    }

    /// SIGKILL to node `index`: a crash, with no chance to hand leadership over.
    pub(crate) fn kill_node(&mut self, index: usize) -> Result<(), NatsError> {
        self.node_mut(index)?.kill();
        Ok(())
    }

    /// Starts node `index` again (stopping it first if it runs) on its ports with its store, and
    /// waits until it is ready.
    pub(crate) async fn restart_node(
        &mut self,
        index: usize,
        ready_timeout: Duration,
    ) -> Result<(), NatsError> {
        let node = self.node_mut(index)?;
        if node.is_running() {
            node.stop().await;
        }
        node.spawn()?;
        node.wait_ready(ready_timeout).await
    }

    /// Restarts every node in turn (a rolling restart: the cluster keeps a quorum throughout).
    pub(crate) async fn restart(&mut self, ready_timeout: Duration) -> Result<(), NatsError> {
        for index in 0..self.nodes.len() {
            self.restart_node(index, ready_timeout).await?;
        }
        Ok(())
    }

    /// Stops every node gracefully.
    pub(crate) async fn stop(&mut self) {
        for node in &mut self.nodes {
            node.stop().await;
        }
    }
}

/// The nodes of a Docker cluster, on a network of their own (testcontainers creates it with the
/// first container and removes it with the last). Dropping it removes the containers.
pub(crate) struct DockerCluster {
    nodes: Vec<DockerServer>,
    halted: Vec<bool>,
}

/// Networks this process made, for unique names.
static NETWORKS: AtomicU64 = AtomicU64::new(0);

impl DockerCluster {
    /// Starts `n` containers from `image`, routed to one another by container name, and waits
    /// until every one is ready.
    pub(crate) async fn start(
        docker: &Docker,
        n: usize,
        image: String,
        config: Option<String>,
        ready_timeout: Duration,
    ) -> Result<Self, NatsError> {
        let network = format!(
            "{NETWORK_PREFIX}{}-{}",
            std::process::id(),
            NETWORKS.fetch_add(1, Ordering::Relaxed)
        );
        let ports = probe::free_ports(2 * n).map_err(|source| NatsError::Io {
            action: "find free ports on 127.0.0.1".into(),
            source,
        })?;
        let cluster_name = cluster_name();
        let names: Vec<String> = (1..=n).map(|i| format!("{network}-n{i}")).collect();
        let routes: Vec<String> = names
            .iter()
            .map(|name| format!("nats://{name}:6222"))
            .collect();
        let routes = routes.join(",");
        let mut nodes = Vec::with_capacity(n);
        for (i, name) in names.iter().enumerate() {
            let node = DockerNode {
                network: network.clone(),
                name: name.clone(),
                ports: (ports[2 * i], ports[2 * i + 1]),
                args: vec![
                    "--name".into(),
                    format!("n{}", i + 1),
                    "--cluster_name".into(),
                    cluster_name.clone(),
                    "--cluster".into(),
                    "nats://0.0.0.0:6222".into(),
                    "--routes".into(),
                    routes.clone(),
                ],
            };
            // On failure the nodes started so far are dropped, which removes them.
            nodes.push(
                DockerServer::launch(
                    docker,
                    image.clone(),
                    config.clone(),
                    ready_timeout,
                    Some(&node),
                    None,
                )
                .await?,
            );
        }
        for node in &mut nodes {
            node.wait_ready(ready_timeout).await?;
        }
        Ok(DockerCluster {
            halted: vec![false; nodes.len()],
            nodes,
        })
    }

    pub(crate) fn client_url(&self) -> String {
        self.nodes
            .first()
            .map(DockerServer::client_url)
            .unwrap_or_default()
    }

    pub(crate) fn monitor_url(&self) -> Option<String> {
        self.nodes.first().map(DockerServer::monitor_url)
    }

    pub(crate) fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(DockerServer::client_url).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    pub(crate) fn image_backend(&self) -> Option<ChosenBackend> {
        self.nodes.first().map(DockerServer::backend)
    }

    pub(crate) fn log(&self) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| format!("=== node {} ===\n{}", i + 1, n.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `docker stop` of node `index` (0-based); `kill`: SIGKILL at once.
    pub(crate) async fn halt_node(&mut self, index: usize, kill: bool) -> Result<(), NatsError> {
        let count = self.nodes.len();
        let node = self.nodes.get_mut(index).ok_or(NatsError::NoSuchNode {
            number: index + 1,
            count,
        })?;
        node.halt(kill).await?;
        self.halted[index] = true;
        Ok(())
    }

    /// `docker start` of node `index` (after a stop of it if it runs); waits until it is ready.
    pub(crate) async fn restart_node(
        &mut self,
        index: usize,
        ready_timeout: Duration,
    ) -> Result<(), NatsError> {
        let count = self.nodes.len();
        let node = self.nodes.get_mut(index).ok_or(NatsError::NoSuchNode {
            number: index + 1,
            count,
        })?;
        node.start_again(ready_timeout).await?;
        self.halted[index] = false;
        Ok(())
    }

    /// Restarts every node in turn.
    pub(crate) async fn restart(&mut self, ready_timeout: Duration) -> Result<(), NatsError> {
        for index in 0..self.nodes.len() {
            self.restart_node(index, ready_timeout).await?;
        }
        Ok(())
    }

    /// Stops and removes every container.
    pub(crate) async fn stop(&mut self) -> Result<(), NatsError> {
        let mut first_error = None;
        for node in &mut self.nodes {
            if let Err(e) = node.stop().await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
