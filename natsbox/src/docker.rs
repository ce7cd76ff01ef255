//! The Docker backend: a nats-server container started through testcontainers.
//!
//! Host ports are fixed at start (free ports picked here, mapped explicitly) rather than left to
//! Docker, because Docker hands out new random ports when a container is started again: a restart
//! must keep the URL so that connected clients reconnect to the same address.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use testcontainers::bollard::Docker;
use testcontainers::bollard::models::HostConfig;
use testcontainers::bollard::query_parameters::{
    ListContainersOptionsBuilder, ListImagesOptionsBuilder, RemoveContainerOptionsBuilder,
};
use testcontainers::core::IntoContainerPort;
use testcontainers::core::client::docker_client_instance;
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt, TestcontainersError};
use tokio::io::AsyncBufReadExt;
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::config::{ENV_IMAGE, LOCAL_IMAGE, OFFICIAL_IMAGE, Resolved};
use super::probe::{PORT_ATTEMPTS, PortAttempt};
use super::{Backend, ChosenBackend, SkippedBackend, image, probe};
use crate::error::NatsError;

/// Ports inside the container; the image's EXPOSE and our command line agree on them.
const CLIENT_PORT: u16 = 4222;
const MONITOR_PORT: u16 = 8222;
/// A scratch image has no /tmp, where nats-server would put the store by default. The store
/// lives in the container's own filesystem, which `docker stop` / `docker start` keep.
const STORE_DIR: &str = "/data";
/// Where the configuration file (accounts) goes in the container.
const CONFIG_FILE: &str = "/triggers-lab.conf";
/// Marks our containers, and one start attempt, so a failed attempt can clean up after itself.
const LABEL: &str = "org.triggers-lab.nats-server";
/// The pid of the process that started the container: once it is gone (SIGKILLed before it
/// could remove the container), the next start on this machine removes the container.
const OWNER_PID_LABEL: &str = "org.triggers-lab.owner-pid";
/// The machine that process ran on: a remote engine may hold containers of other machines,
/// whose pids mean nothing here.
const OWNER_HOST_LABEL: &str = "org.triggers-lab.owner-host";
/// A stale-container sweep is a courtesy; a slow engine must not hold up a start or an exit.
const SWEEP_TIMEOUT: Duration = Duration::from_secs(10);
/// A local engine answers a ping in milliseconds; a missing one fails at once. Only a hung
/// engine needs this bound.
const PING_TIMEOUT: Duration = Duration::from_secs(3);
const BUILD_HINT: &str = "let it be built from the pinned binary: `triggers-lab doctor --prepare`";

/// Names of the networks of Docker clusters start so; the pid of the process that made one
/// follows, so a sweep can remove those of processes that were killed.
pub(crate) const NETWORK_PREFIX: &str = "triggers-lab-nats-";

/// Containers of this process whose creation Docker has been asked for and not yet answered:
/// a forced exit must not list the containers before these appear, or they outlive it.
static CREATING: AtomicUsize = AtomicUsize::new(0);

/// Set once a forced exit removes this process's containers: no container is created after.
static CLOSING: AtomicBool = AtomicBool::new(false);

/// Counts a creation in flight for as long as it lives.
struct Creating;

impl Creating {
    /// `None` once a forced exit has begun. Counted before [`CLOSING`] is read, and
    /// [`remove_own`] sets it before it reads [`CREATING`]: either this sees the exit or the
    /// exit waits for this.
    fn new() -> Option<Self> {
        CREATING.fetch_add(1, Ordering::SeqCst);
        let creating = Creating;
        (!CLOSING.load(Ordering::SeqCst)).then_some(creating)
    }
}

impl Drop for Creating {
    fn drop(&mut self) {
        CREATING.fetch_sub(1, Ordering::SeqCst);
    }
}

fn skip(reason: impl Into<String>) -> SkippedBackend {
    SkippedBackend::new(Backend::Docker, reason)
}

fn docker_error(action: impl Into<String>) -> impl FnOnce(TestcontainersError) -> NatsError {
    let action = action.into();
    move |source| NatsError::Docker {
        action,
        source: Box::new(source),
    }
}

/// A client for the engine testcontainers uses, if that engine answers.
pub(crate) async fn engine() -> Result<Docker, SkippedBackend> {
    let docker = docker_client_instance()
        .await
        .map_err(|e| skip(format!("no Docker client could be set up: {e}")))?;
    match timeout(PING_TIMEOUT, docker.ping()).await {
        Ok(Ok(_)) => Ok(docker),
        Ok(Err(e)) => Err(skip(format!(
            "no Docker engine answers ({e}); start it, or point DOCKER_HOST at one"
        ))),
        Err(_) => Err(skip(format!(
            "the Docker engine did not answer a ping within {PING_TIMEOUT:?}"
        ))),
    }
}

/// Picks the image to run: the one named by config or `TRIGGERS_NATS_IMAGE`; else a local tag of
/// the official image; else the local scratch image; else a bounded pull of the official one.
pub(crate) async fn choose_image(
    docker: &Docker,
    resolved: &Resolved,
) -> Result<String, SkippedBackend> {
    if let Some(image) = &resolved.image {
        if docker.inspect_image(image).await.is_ok() {
            return Ok(image.clone());
        }
        if image::is_ours(image) {
            return match image::build_local(docker, &resolved.pinned, image).await {
                Ok(()) => Ok(image.clone()),
                Err(e) => Err(skip(format!(
                    "the image {image} is not present and could not be built: {e}"
                ))),
            };
        }
        return match pull(image, resolved.pull_timeout).await {
            Ok(()) => Ok(image.clone()),
            Err(e) => Err(skip(format!(
                "the image {image} (from NatsConfig::image or {ENV_IMAGE}) is not present locally \
                 and could not be pulled: {e}; {BUILD_HINT}"
            ))),
        };
    }
    if let Some(official) = local_official_tag(docker).await {
        return Ok(official);
    }
    if docker.inspect_image(LOCAL_IMAGE).await.is_ok() {
        return Ok(LOCAL_IMAGE.to_string());
    }
    // No registry is needed to build the local image from the pinned binary; a pull is the last
    // resort, and tried once per process.
    let built = image::build_local(docker, &resolved.pinned, LOCAL_IMAGE).await;
    let build_error = match built {
        Ok(()) => return Ok(LOCAL_IMAGE.to_string()),
        Err(e) => e,
    };
    let official = format!("{OFFICIAL_IMAGE}:latest");
    match pull(&official, resolved.pull_timeout).await {
        Ok(()) => Ok(official),
        Err(e) => Err(skip(format!(
            "no nats image is present; {LOCAL_IMAGE} could not be built ({build_error}), and \
             pulling {official} failed: {e}; {BUILD_HINT}"
        ))),
    }
}

/// Any local tag of the official image, `latest` first.
async fn local_official_tag(docker: &Docker) -> Option<String> {
    let filters = HashMap::from([("reference", vec![OFFICIAL_IMAGE])]);
    let options = ListImagesOptionsBuilder::new().filters(&filters).build();
    let images = docker.list_images(Some(options)).await.ok()?;
    let prefix = format!("{OFFICIAL_IMAGE}:");
    let tags: Vec<String> = images
        .into_iter()
        .flat_map(|image| image.repo_tags)
        .filter(|tag| tag.starts_with(&prefix))
        .collect();
    let latest = format!("{OFFICIAL_IMAGE}:latest");
    tags.iter()
        .find(|tag| **tag == latest)
        .or(tags.first())
        .cloned()
}

/// Pulls `image` within `bound`, unless a pull of it already failed in this process.
async fn pull(image: &str, bound: Duration) -> Result<(), String> {
    if let Some(reason) = image::failed_pull(image) {
        return Err(format!(
            "{reason} (earlier in this process; not tried again)"
        ));
    }
    let (name, tag) = split_image(image);
    let outcome = match timeout(bound, GenericImage::new(name, tag).pull_image()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {bound:?}")),
    };
    if let Err(reason) = &outcome {
        image::remember_failed_pull(image, reason);
    }
    outcome
}

/// `name:tag`, where a colon before the last `/` belongs to a registry host, not a tag.
fn split_image(image: &str) -> (&str, &str) {
    match image.rfind(':') {
        Some(colon) if !image[colon..].contains('/') => (&image[..colon], &image[colon + 1..]),
        _ => (image, "latest"),
    }
}

/// Whether published ports can be bound to 127.0.0.1: only when the engine runs on this machine.
/// A test server has no business listening on every interface.
fn engine_is_local() -> bool {
    match std::env::var("DOCKER_HOST") {
        Ok(host) => host.is_empty() || host.starts_with("unix://") || host.starts_with("npipe://"),
        Err(_) => true,
    }
}

fn bind_loopback(config: &mut HostConfig) {
    if let Some(bindings) = config.port_bindings.as_mut() {
        for binding in bindings.values_mut().flatten().flatten() {
            binding.host_ip = Some("127.0.0.1".to_string());
        }
    }
}

fn is_port_conflict(error: &TestcontainersError) -> bool {
    let text = format!("{error} {error:?}");
    text.contains("port is already allocated") || text.contains("address already in use")
}

/// A label value unique to one start attempt in this process.
fn attempt_label() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Removes what a failed attempt left: testcontainers does not remove a container it created but
/// could not start (a port race, say).
async fn remove_attempt(docker: &Docker, attempt: &str) {
    remove_labelled(docker, vec![format!("{LABEL}={attempt}")], |_| true).await;
}

/// This machine's name, as the owner-host label holds it.
fn host_name() -> String {
    #[cfg(unix)]
    {
        rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned()
    }
    #[cfg(not(unix))]
    {
        std::env::var("COMPUTERNAME").unwrap_or_default()
    }
}

/// Force-removes every container matching the label filters that `remove_if` accepts; returns how
/// many were removed.
async fn remove_labelled(
    docker: &Docker,
    labels: Vec<String>,
    remove_if: impl Fn(&HashMap<String, String>) -> bool,
) -> usize {
    let filters = HashMap::from([("label", labels)]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let Ok(containers) = docker.list_containers(Some(options)).await else {
        return 0;
    };
    let mut removed = 0;
    for container in containers {
        let labels = container.labels.unwrap_or_default();
        let Some(id) = container.id.filter(|_| remove_if(&labels)) else {
            continue;
        };
        let options = RemoveContainerOptionsBuilder::new().force(true).build();
        if docker.remove_container(&id, Some(options)).await.is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Removes the nats containers that processes of this machine started and did not remove because
/// they were killed (their owner pid no longer runs). Best effort, bounded.
pub(crate) async fn remove_stale(docker: &Docker) {
    let me = std::process::id();
    let sweep = remove_labelled(
        docker,
        vec![
            LABEL.to_string(),
            format!("{OWNER_HOST_LABEL}={}", host_name()),
        ],
        |labels| {
            labels
                .get(OWNER_PID_LABEL)
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| pid != me && !crate::watchdog::process_alive(pid))
        },
    );
    match timeout(SWEEP_TIMEOUT, sweep).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            removed = n,
            "removed nats containers left by killed processes"
        ),
        Err(_) => tracing::debug!("the stale-container sweep did not finish in time"),
    }
    if engine_is_local() {
        let _ = timeout(SWEEP_TIMEOUT, remove_stale_networks(docker, me)).await;
    }
}

/// Removes the cluster networks of processes of this machine that no longer run (their
/// containers are gone by now: removed above).
async fn remove_stale_networks(docker: &Docker, me: u32) {
    let Ok(networks) = docker
        .list_networks(None::<testcontainers::bollard::query_parameters::ListNetworksOptions>)
        .await
    else {
        return;
    };
    for network in networks {
        let Some(name) = network.name else { continue };
        let owner = name
            .strip_prefix(NETWORK_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = owner
            && pid != me
            && !crate::watchdog::process_alive(pid)
        {
            let _ = docker.remove_network(&name).await;
        }
    }
}

/// Force-removes every nats container this process started, at once (no graceful stop), then
/// the cluster networks it made: for an exit that cannot wait. A container whose creation is
/// still in flight (a second Ctrl-C while a cluster starts) is waited for and removed too, within
/// `bound`. Returns how many containers were removed.
pub(crate) async fn remove_own(bound: Duration) -> usize {
    let Ok(docker) = docker_client_instance().await else {
        return 0;
    };
    let labels = vec![
        LABEL.to_string(),
        format!("{OWNER_HOST_LABEL}={}", host_name()),
        format!("{OWNER_PID_LABEL}={}", std::process::id()),
    ];
    CLOSING.store(true, Ordering::SeqCst);
    let mut removed = 0;
    let _ = timeout(bound, async {
        loop {
            // Read before the listing: a creation that ends after it is listed again.
            let creating = CREATING.load(Ordering::SeqCst);
            removed += remove_labelled(&docker, labels.clone(), |_| true).await;
            if creating == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        remove_own_networks(&docker).await;
    })
    .await;
    removed
}

/// Removes the cluster networks this process made (their containers are gone by now).
async fn remove_own_networks(docker: &Docker) {
    let Ok(networks) = docker
        .list_networks(None::<testcontainers::bollard::query_parameters::ListNetworksOptions>)
        .await
    else {
        return;
    };
    let mine = format!("{NETWORK_PREFIX}{}-", std::process::id());
    for network in networks {
        if let Some(name) = network.name.filter(|n| n.starts_with(&mine)) {
            let _ = docker.remove_network(&name).await;
        }
    }
}

/// The container's log as it streams in. Docker replays a container's whole log (every run) when
/// it is followed again after a restart, so each follow starts a new generation that replaces the
/// text; a follower of an older generation can no longer write.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<(u64, Vec<u8>)>>);

impl LogBuffer {
    fn new_generation(&self) -> u64 {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 += 1;
        state.1.clear();
        state.0
    }

    fn append(&self, generation: u64, bytes: &[u8]) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if state.0 == generation {
            state.1.extend_from_slice(bytes);
        }
    }

    fn replace(&self, bytes: Vec<u8>) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 += 1;
        state.1 = bytes;
    }

    fn text(&self) -> String {
        let state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&state.1).into_owned()
    }
}

/// A running container. Dropping it removes the container (testcontainers' Drop does).
pub(crate) struct DockerServer {
    image: String,
    host: String,
    client_port: u16,
    monitor_port: u16,
    log: LogBuffer,
    followers: Vec<JoinHandle<()>>,
    container: Option<ContainerAsync<GenericImage>>,
    /// False between [`halt`](Self::halt) and [`start_again`](Self::start_again).
    running: bool,
}

/// What makes a container a cluster node: its host ports, its name on the cluster's network, and
/// the flags that name it and route it to the others.
pub(crate) struct DockerNode {
    /// The cluster's own network.
    pub(crate) network: String,
    /// The container's name, which the other nodes' routes use.
    pub(crate) name: String,
    /// Host ports for the client and the monitoring listeners.
    pub(crate) ports: (u16, u16),
    /// `--name`, `--cluster_name`, `--cluster`, `--routes`.
    pub(crate) args: Vec<String>,
}

impl DockerServer {
    /// Starts a container from `image` on free host ports (with the configuration file `config`,
    /// if any) and waits until it is ready.
    pub(crate) async fn start(
        docker: &Docker,
        image: String,
        config: Option<String>,
        ready_timeout: Duration,
        fixed_port: Option<u16>,
    ) -> Result<Self, NatsError> {
        let mut server =
            Self::launch(docker, image, config, ready_timeout, None, fixed_port).await?;
        // On failure `server` is dropped here, which removes the container.
        server.wait_ready(ready_timeout).await?;
        Ok(server)
    }

    /// Creates and starts the container, without waiting for the server in it to be ready: a
    /// cluster node is not ready before a quorum of nodes runs. A node (`node`) has its ports,
    /// name and network given, and is not retried on other ports.
    pub(crate) async fn launch(
        docker: &Docker,
        image: String,
        config: Option<String>,
        ready_timeout: Duration,
        node: Option<&DockerNode>,
        fixed_port: Option<u16>,
    ) -> Result<Self, NatsError> {
        let (name, tag) = split_image(&image);
        remove_stale(docker).await;
        let owner_pid = std::process::id().to_string();
        let owner_host = host_name();
        // A fixed port or a cluster node's ports are not retried on others: taken is an error.
        let attempts = if node.is_some() || fixed_port.is_some() {
            1
        } else {
            PORT_ATTEMPTS
        };
        let (image, config) = (&image, &config);
        let (owner_pid, owner_host) = (&owner_pid, &owner_host);
        probe::on_free_ports("nats container", attempts, (), move |()| async move {
            let (client_port, monitor_port) = match node {
                Some(node) => node.ports,
                None => probe::ports(fixed_port).map_err(PortAttempt::Failed)?,
            };
            let attempt_id = attempt_label();
            let mut cmd: Vec<String> = ["-js", "-m", "8222", "--store_dir", STORE_DIR]
                .map(String::from)
                .to_vec();
            if config.is_some() {
                // First: the flags after it override what the file says.
                cmd.splice(0..0, ["-c".to_string(), CONFIG_FILE.to_string()]);
            }
            if let Some(node) = node {
                cmd.extend(node.args.iter().cloned());
                // Clients learn the other nodes from INFO: they must hear the published ports.
                cmd.extend([
                    "--client_advertise".to_string(),
                    format!("127.0.0.1:{client_port}"),
                ]);
            }
            let request = GenericImage::new(name, tag).with_cmd(cmd);
            let request = match node {
                Some(node) => request
                    .with_network(node.network.clone())
                    .with_container_name(node.name.clone()),
                None => request,
            };
            let request = match &config {
                // At the root: a scratch image may have no other folder to put it in.
                Some(text) => request.with_copy_to(CONFIG_FILE, text.clone().into_bytes()),
                None => request,
            };
            let request = request
                .with_mapped_port(client_port, CLIENT_PORT.tcp())
                .with_mapped_port(monitor_port, MONITOR_PORT.tcp())
                .with_label(LABEL, attempt_id.as_str())
                .with_label(OWNER_PID_LABEL, owner_pid.as_str())
                .with_label(OWNER_HOST_LABEL, owner_host.as_str())
                .with_startup_timeout(ready_timeout);
            let request = if engine_is_local() {
                request.with_host_config_modifier(bind_loopback)
            } else {
                request
            };
            let Some(creating) = Creating::new() else {
                return Err(PortAttempt::Failed(NatsError::Io {
                    action: format!("start a container from {image}"),
                    source: std::io::Error::other("the process is exiting (a forced stop)"),
                }));
            };
            let started = request.start().await;
            drop(creating);
            let container = match started {
                Ok(container) => container,
                Err(e) => {
                    remove_attempt(docker, &attempt_id).await;
                    let lost_race = is_port_conflict(&e);
                    let e = docker_error(format!("start a container from {image}"))(e);
                    return Err(if lost_race {
                        PortAttempt::LostRace(e, ())
                    } else {
                        PortAttempt::Failed(e)
                    });
                }
            };
            let host = match container.get_host().await {
                Ok(host) => host.to_string(),
                Err(e) => {
                    return Err(PortAttempt::Failed(docker_error(
                        "find the container's host",
                    )(e)));
                }
            };
            let mut server = DockerServer {
                image: image.clone(),
                // The client would try ::1 first for "localhost"; the ports are bound on IPv4.
                host: if host == "localhost" {
                    "127.0.0.1".to_string()
                } else {
                    host
                },
                client_port,
                monitor_port,
                log: LogBuffer::default(),
                followers: Vec::new(),
                container: Some(container),
                running: true,
            };
            server.follow_logs();
            Ok(server)
        })
        .await
    }

    pub(crate) fn client_url(&self) -> String {
        format!("nats://{}:{}", self.host, self.client_port)
    }

    pub(crate) fn monitor_url(&self) -> String {
        format!("http://{}:{}", self.host, self.monitor_port)
    }

    pub(crate) fn backend(&self) -> ChosenBackend {
        ChosenBackend::Docker {
            image: self.image.clone(),
        }
    }

    pub(crate) fn log(&self) -> String {
        self.log.text()
    }

    fn follow_logs(&mut self) {
        for follower in self.followers.drain(..) {
            follower.abort();
        }
        let Some(container) = &self.container else {
            return;
        };
        let generation = self.log.new_generation();
        // nats-server logs to stderr; stdout is followed too so nothing printed is lost.
        for mut reader in [container.stderr(true), container.stdout(true)] {
            let log = self.log.clone();
            self.followers.push(tokio::spawn(async move {
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match reader.read_until(b'\n', &mut line).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => log.append(generation, &line),
                    }
                }
            }));
        }
    }

    pub(crate) async fn wait_ready(&mut self, budget: Duration) -> Result<(), NatsError> {
        let client_url = self.client_url();
        let monitor_url = self.monitor_url();
        // The container goes to a blocking thread for each look (see `off_task`) and comes back.
        let slot = tokio::sync::Mutex::new(self.container.take());
        let result = probe::wait_ready(&client_url, Some(&monitor_url), None, budget, || {
            Box::pin(async {
                let mut slot = slot.lock().await;
                let container = slot.take()?;
                let (container, how) = off_task(container, |c| {
                    Box::pin(async move {
                        match c.is_running().await {
                            Ok(false) => Some(match c.exit_code().await {
                                Ok(Some(code)) => format!("the container exited with code {code}"),
                                _ => "the container stopped".to_string(),
                            }),
                            // An engine hiccup is no reason to give up; the deadline still holds.
                            _ => None,
                        }
                    })
                })
                .await;
                *slot = Some(container);
                how
            })
        })
        .await;
        self.container = slot.into_inner();
        let Err(reason) = result else {
            return Ok(());
        };
        if let Some(container) = self.container.take() {
            // The followers may lag behind a container that just died; read the log whole.
            let (container, logs) = off_task(container, |c| {
                Box::pin(async move { (c.stderr_to_vec().await, c.stdout_to_vec().await) })
            })
            .await;
            self.container = Some(container);
            if let (Ok(mut all), Ok(stdout)) = logs {
                all.extend(stdout);
                self.log.replace(all);
            }
        }
        Err(NatsError::NotReady {
            backend: self.backend(),
            waited: budget,
            reason,
            log: self.log(),
        })
    }

    /// `docker stop` (SIGTERM, so JetStream flushes) and `docker start` of the same container:
    /// same ports, same store in the container's filesystem.
    ///
    /// Every testcontainers call here runs through [`off_task`]: testcontainers' futures hold
    /// references whose `Send` the compiler cannot prove for every lifetime, and awaiting one
    /// here would keep `NatsServer::restart` out of spawned tasks (a scenario runner spawns).
    pub(crate) async fn restart(&mut self, ready_timeout: Duration) -> Result<(), NatsError> {
        if let Some(container) = self.container.take() {
            let (container, result) = off_task(container, |c| {
                Box::pin(async move {
                    c.stop()
                        .await
                        .map_err(docker_error("stop the nats container"))?;
                    c.start()
                        .await
                        .map_err(docker_error("start the nats container again"))
                })
            })
            .await;
            self.container = Some(container);
            result?;
        }
        self.follow_logs();
        self.wait_ready(ready_timeout).await
    }

    /// `docker stop` (SIGTERM; `kill`: at once, SIGKILL), keeping the container for
    /// [`start_again`](Self::start_again).
    pub(crate) async fn halt(&mut self, kill: bool) -> Result<(), NatsError> {
        let Some(container) = self.container.take() else {
            return Ok(());
        };
        let (container, result) = off_task(container, move |c| {
            Box::pin(async move {
                let outcome = if kill {
                    c.stop_with_timeout(Some(0)).await
                } else {
                    c.stop().await
                };
                outcome.map_err(docker_error("stop a nats container"))
            })
        })
        .await;
        self.container = Some(container);
        self.running = false;
        result
    }

    /// `docker start` of a halted container (stopping it first if it runs), then waits until
    /// the server is ready.
    pub(crate) async fn start_again(&mut self, ready_timeout: Duration) -> Result<(), NatsError> {
        if self.running {
            return self.restart(ready_timeout).await;
        }
        if let Some(container) = self.container.take() {
            let (container, result) = off_task(container, |c| {
                Box::pin(async move {
                    c.start()
                        .await
                        .map_err(docker_error("start the nats container again"))
                })
            })
            .await;
            self.container = Some(container);
            result?;
        }
        self.running = true;
        self.follow_logs();
        self.wait_ready(ready_timeout).await
    }

    /// Stops the server gracefully and removes the container.
    pub(crate) async fn stop(&mut self) -> Result<(), NatsError> {
        for follower in self.followers.drain(..) {
            follower.abort();
        }
        if let Some(container) = self.container.take() {
            // On a blocking thread, as in `off_task`; `rm` consumes the container.
            let handle = tokio::runtime::Handle::current();
            tokio::task::spawn_blocking(move || {
                handle.block_on(async move {
                    // If stop fails, rm still removes the container (it forces).
                    let stopped = container.stop().await;
                    container
                        .rm()
                        .await
                        .map_err(docker_error("remove the nats container"))?;
                    stopped.map_err(docker_error("stop the nats container"))
                })
            })
            .await
            .expect("testcontainers calls do not panic")?;
        }
        Ok(())
    }
}

/// Runs testcontainers calls on a blocking thread of the runtime, handing the container back.
async fn off_task<T: Send + 'static>(
    container: ContainerAsync<GenericImage>,
    op: impl for<'c> FnOnce(
        &'c ContainerAsync<GenericImage>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'c>>
    + Send
    + 'static,
) -> (ContainerAsync<GenericImage>, T) {
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let out = handle.block_on(op(&container));
        (container, out)
    })
    .await
    .expect("testcontainers calls do not panic")
}

impl Drop for DockerServer {
    fn drop(&mut self) {
        for follower in self.followers.drain(..) {
            follower.abort();
        }
        let Some(container) = self.container.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(container);
            return;
        }
        // testcontainers' Drop removes the container from inside a Tokio runtime and panics
        // outside one, e.g. when the handle outlives the runtime that made it. Lend it one.
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime.block_on(async move { drop(container) }),
            Err(e) => {
                tracing::warn!(%e, "no runtime to remove the nats container; it is left running");
                std::mem::forget(container);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_image_handles_registries_and_missing_tags() {
        assert_eq!(split_image("nats:2.10"), ("nats", "2.10"));
        assert_eq!(
            split_image("triggers-lab/nats-server:local"),
            ("triggers-lab/nats-server", "local")
        );
        assert_eq!(split_image("nats"), ("nats", "latest"));
        assert_eq!(
            split_image("registry:5000/nats"),
            ("registry:5000/nats", "latest")
        );
        assert_eq!(
            split_image("registry:5000/nats:2"),
            ("registry:5000/nats", "2")
        );
    }

    #[test]
    fn a_new_log_generation_silences_the_old_follower() {
        let log = LogBuffer::default();
        let first = log.new_generation();
        log.append(first, b"run 1\n");
        let second = log.new_generation();
        log.append(first, b"late line from run 1\n");
        log.append(second, b"run 1\nrun 2\n");
        assert_eq!(log.text(), "run 1\nrun 2\n");
    }
}
