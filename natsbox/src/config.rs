//! What the caller asks for ([`NatsConfig`]) and how it is merged with the environment.
//!
//! Explicit config always wins over an environment variable, so a test that forces a backend is
//! not redirected by whatever the CI machine exports.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::error::NatsError;

/// Names a server someone else runs; its value is a client URL such as `nats://127.0.0.1:4222`.
pub const ENV_URL: &str = "TRIGGERS_NATS_URL";
/// The monitoring URL (`http://host:8222`) of the server named by [`ENV_URL`], to check `/healthz`.
pub const ENV_MONITOR_URL: &str = "TRIGGERS_NATS_MONITOR_URL";
/// Forces a backend: `docker`, `binary` or `url` (also `external`, `auto`).
pub const ENV_BACKEND: &str = "TRIGGERS_NATS_BACKEND";
/// Names the Docker image (`name:tag`) the Docker backend runs.
pub const ENV_IMAGE: &str = "TRIGGERS_NATS_IMAGE";
/// Path of the `nats-server` binary the binary backend spawns.
pub const ENV_SERVER_BIN: &str = "TRIGGERS_NATS_SERVER_BIN";
/// `server` or `account`: what [`Isolation::Auto`] means for every harness of the process.
pub const ENV_ISOLATION: &str = "TRIGGERS_NATS_ISOLATION";

/// The image `natsbox/docker/build-nats-image.sh` builds: FROM scratch around a static binary.
pub const LOCAL_IMAGE: &str = "triggers-lab/nats-server:local";
/// The official image, used when a tag of it is present locally or can be pulled.
pub const OFFICIAL_IMAGE: &str = "nats";

/// The longest duration a setting accepts: 100 years, as the triggers SDK bounds its own.
const MAX_DURATION: Duration = Duration::from_secs(36_500 * 86_400);
/// The largest per-subscription capacity async-nats is asked for (2^24 messages).
const MAX_SUBSCRIPTION_CAPACITY: usize = 1 << 24;

/// More nodes than this only slow a test machine down.
const MAX_CLUSTER_NODES: usize = 9;
const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_PULL_TIMEOUT: Duration = Duration::from_secs(15);

/// Which way to get a nats-server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Use `TRIGGERS_NATS_BACKEND` if set; otherwise the first that works of external (a URL is
    /// configured), Docker (an engine answers and an image is at hand), binary (one is found).
    #[default]
    Auto,
    /// A server someone else runs, named by [`NatsConfig::url`] or `TRIGGERS_NATS_URL`.
    External,
    /// A container on the local Docker engine, through testcontainers.
    Docker,
    /// A `nats-server` process spawned from a binary on this machine.
    Binary,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Auto => "auto",
            Backend::External => "external",
            Backend::Docker => "docker",
            Backend::Binary => "binary",
        })
    }
}

impl FromStr for Backend {
    type Err = NatsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Backend::Auto),
            "url" | "external" => Ok(Backend::External),
            "docker" => Ok(Backend::Docker),
            "binary" | "bin" => Ok(Backend::Binary),
            _ => Err(NatsError::InvalidConfig {
                setting: ENV_BACKEND,
                value: s.to_string(),
                expected: "one of docker, binary, url (or auto)",
            }),
        }
    }
}

/// How a test (a [`SharedAccount`](crate::SharedAccount) user such as the triggers harness) is
/// kept apart from the others of its process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Isolation {
    /// An account on the process's shared server wherever that is safe (no cluster, no URL, no
    /// fixed port, the binary backend at hand), else a server of its own. `TRIGGERS_NATS_ISOLATION`
    /// (`server` or `account`) overrides it for the whole process.
    #[default]
    Auto,
    /// A nats-server of its own: for tests that stop, kill or restart it, or read its log.
    Server,
    /// An account on the process's shared server, or an error saying why it cannot be had.
    Account,
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Isolation::Auto => "auto",
            Isolation::Server => "server",
            Isolation::Account => "account",
        })
    }
}

impl FromStr for Isolation {
    type Err = NatsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Isolation::Auto),
            "server" => Ok(Isolation::Server),
            "account" => Ok(Isolation::Account),
            _ => Err(NatsError::InvalidConfig {
                setting: ENV_ISOLATION,
                value: s.to_string(),
                expected: "one of server, account (or auto)",
            }),
        }
    }
}

/// How to provision a nats-server. Fill what you need and end with `..Default::default()`.
///
/// Every `None` falls back to an environment variable, then to a built-in default, so
/// `NatsConfig::default()` does what a developer's shell or CI asks for.
#[derive(Debug, Clone, Default)]
pub struct NatsConfig {
    /// Which backend to use. [`Backend::Auto`] (the default) reads `TRIGGERS_NATS_BACKEND`
    /// (`docker`, `binary` or `url`) and, without it, tries external, Docker, binary in turn.
    pub backend: Backend,
    /// Client URL of a server someone else runs (`nats://host:4222`). Setting it makes
    /// [`Backend::Auto`] use that server. `None` reads `TRIGGERS_NATS_URL`.
    pub url: Option<String>,
    /// Monitoring URL of that external server (`http://host:8222`); when known, its `/healthz` is
    /// checked as well as a client connection. `None` reads `TRIGGERS_NATS_MONITOR_URL`.
    pub monitor_url: Option<String>,
    /// Docker image (`name:tag`) for the Docker backend. `None` reads `TRIGGERS_NATS_IMAGE`;
    /// without it: a local tag of the official `nats` image, else `triggers-lab/nats-server:local`,
    /// else a pull of `nats:latest` bounded by [`NatsConfig::pull_timeout`].
    pub image: Option<String>,
    /// The `nats-server` binary for the binary backend. `None` reads `TRIGGERS_NATS_SERVER_BIN`,
    /// then looks for `nats-server` on `PATH`.
    pub server_bin: Option<PathBuf>,
    /// How long to wait for the server to answer `/healthz` and a client connection, at start and
    /// after a restart. `None`: 30 seconds.
    pub ready_timeout: Option<Duration>,
    /// How long a pull of the official image may take when no image is present locally.
    /// `None`: 15 seconds (a machine without a registry fails fast, one with it rarely needs more).
    pub pull_timeout: Option<Duration>,
    /// Messages each subscription of the clients the harness and `triggers-lab up` connect holds
    /// before NATS drops what comes next (the triggers emulator counts them). `None`: async-nats'
    /// 65 536. From 1 to 16 777 216.
    pub subscription_capacity: Option<usize>,
    /// Start the server (Docker or binary backend) with the control API in a NATS account of its
    /// own. Clients without credentials (the services under test) land in the default account,
    /// where everything of the platform works as usual, and can neither reach the control API
    /// nor see its records; the emulator, the CLI and the terminal UI log in to the control
    /// account with [`NatsServer::control_credentials`](super::NatsServer::control_credentials),
    /// a password generated for each start. In the default account the emulator connects as a
    /// user of its own ([`NatsServer::orchestrator_credentials`](super::NatsServer::orchestrator_credentials)),
    /// whose JetStream requests and inboxes services may not subscribe to (nor publish on its
    /// inboxes). No effect on an external server. Default `false`:
    /// one open account, as a bare `nats-server -js` has (what tests in one process want).
    pub private_control: bool,
    /// The client port on 127.0.0.1 for a server the emulator starts (Docker or binary backend);
    /// `None`: a free port (what tests want). `triggers-lab up` asks for 4222, so that services
    /// keep their URL across restarts of `up`. A port already taken is an error, not a retry.
    pub client_port: Option<u16>,
    /// Start a JetStream cluster of this many nodes (routed to one another, each with its own
    /// store) instead of one server: from the binary backend (local or pinned) or Docker (a
    /// network of its own). `None` or `Some(1)`: one server. From 1 to 9; 3 is what failover
    /// tests want (a quorum survives the loss of one node). Ignored for an external server.
    pub cluster: Option<usize>,
    /// Never take the server `TRIGGERS_NATS_URL` names (only [`NatsConfig::url`]): for a tool
    /// that starts a server of its own even where that variable is exported for other programs.
    pub ignore_env_url: bool,
    /// Whether a harness gets a server of its own or an account on the process's shared server
    /// ([`crate::SharedAccount`]). [`NatsServer::start`](crate::NatsServer::start) always starts
    /// a server; this is read by [`SharedAccount::acquire`](crate::SharedAccount::acquire).
    pub isolation: Isolation,
}

impl NatsConfig {
    /// A JetStream cluster of `nodes` servers (see [`NatsConfig::cluster`](#structfield.cluster)),
    /// the rest as the environment says.
    #[must_use]
    pub fn cluster(nodes: usize) -> Self {
        NatsConfig {
            cluster: Some(nodes),
            ..Default::default()
        }
    }
}

/// A [`NatsConfig`] with the environment and defaults applied: what the backends work from.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) backend: Backend,
    pub(crate) url: Option<String>,
    pub(crate) monitor_url: Option<String>,
    /// The image named by config or environment; `None` lets the Docker backend choose.
    pub(crate) image: Option<String>,
    /// The binary named by config or environment (with where it was named, for messages).
    pub(crate) server_bin: Option<(PathBuf, &'static str)>,
    pub(crate) ready_timeout: Duration,
    pub(crate) pull_timeout: Duration,
    pub(crate) private_control: bool,
    pub(crate) client_port: Option<u16>,
    /// `Some(n)` for a cluster of `n >= 2` nodes.
    pub(crate) cluster: Option<usize>,
    /// Where the pinned binary is cached and whether it may be fetched.
    pub(crate) pinned: crate::pinned::PinnedSettings,
    /// The isolation asked for, `TRIGGERS_NATS_ISOLATION` applied to [`Isolation::Auto`].
    pub(crate) isolation: Isolation,
}

impl NatsConfig {
    /// Applies `env` (a lookup such as `std::env::var`) under the explicit settings.
    pub(crate) fn resolve(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Resolved, NatsError> {
        // An empty variable counts as unset: `export TRIGGERS_NATS_URL=` is how shells clear one.
        let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let backend = match self.backend {
            // An explicit URL is a choice made in code; an exported variable must not override it.
            Backend::Auto if self.url.is_some() => Backend::Auto,
            Backend::Auto => match env(ENV_BACKEND) {
                Some(v) => v.parse()?,
                None => Backend::Auto,
            },
            forced => forced,
        };
        for (setting, value) in [
            ("NatsConfig::ready_timeout", self.ready_timeout),
            ("NatsConfig::pull_timeout", self.pull_timeout),
        ] {
            if let Some(d) = value
                && d > MAX_DURATION
            {
                return Err(NatsError::InvalidConfig {
                    setting,
                    value: format!("{d:?}"),
                    expected: "a duration of at most 100 years",
                });
            }
        }
        if let Some(n) = self.subscription_capacity
            && (n == 0 || n > MAX_SUBSCRIPTION_CAPACITY)
        {
            return Err(NatsError::InvalidConfig {
                setting: "NatsConfig::subscription_capacity",
                value: n.to_string(),
                expected: "a whole number from 1 to 16777216",
            });
        }
        if let Some(n) = self.cluster
            && !(1..=MAX_CLUSTER_NODES).contains(&n)
        {
            return Err(NatsError::InvalidConfig {
                setting: "NatsConfig::cluster",
                value: n.to_string(),
                expected: "a number of nodes from 1 to 9",
            });
        }
        let server_bin = match &self.server_bin {
            Some(path) => Some((path.clone(), "NatsConfig::server_bin")),
            None => env(ENV_SERVER_BIN).map(|p| (PathBuf::from(p), ENV_SERVER_BIN)),
        };
        Ok(Resolved {
            backend,
            url: self
                .url
                .clone()
                .or_else(|| (!self.ignore_env_url).then(|| env(ENV_URL)).flatten()),
            monitor_url: self.monitor_url.clone().or_else(|| env(ENV_MONITOR_URL)),
            image: self.image.clone().or_else(|| env(ENV_IMAGE)),
            server_bin,
            ready_timeout: self.ready_timeout.unwrap_or(DEFAULT_READY_TIMEOUT),
            pull_timeout: self.pull_timeout.unwrap_or(DEFAULT_PULL_TIMEOUT),
            private_control: self.private_control,
            client_port: self.client_port.filter(|p| *p != 0),
            cluster: self.cluster.filter(|&n| n > 1),
            pinned: crate::pinned::PinnedSettings::from_env(env),
            isolation: match self.isolation {
                Isolation::Auto => match env(ENV_ISOLATION) {
                    Some(v) => v.parse()?,
                    None => Isolation::Auto,
                },
                chosen => chosen,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn environment_fills_what_config_leaves_open() {
        let resolved = NatsConfig::default()
            .resolve(env(&[
                (ENV_BACKEND, "url"),
                (ENV_URL, "nats://10.0.0.1:4222"),
                (ENV_SERVER_BIN, "/opt/nats-server"),
            ]))
            .unwrap();
        assert_eq!(resolved.backend, Backend::External);
        assert_eq!(resolved.url.as_deref(), Some("nats://10.0.0.1:4222"));
        assert_eq!(
            resolved.server_bin,
            Some((PathBuf::from("/opt/nats-server"), ENV_SERVER_BIN))
        );
        assert_eq!(resolved.ready_timeout, DEFAULT_READY_TIMEOUT);
    }

    #[test]
    fn explicit_config_beats_the_environment() {
        let config = NatsConfig {
            backend: Backend::Binary,
            server_bin: Some("/here/nats-server".into()),
            ready_timeout: Some(Duration::from_secs(3)),
            ..Default::default()
        };
        let resolved = config
            .resolve(env(&[
                (ENV_BACKEND, "docker"),
                (ENV_SERVER_BIN, "/there/nats-server"),
            ]))
            .unwrap();
        assert_eq!(resolved.backend, Backend::Binary);
        assert_eq!(
            resolved.server_bin.unwrap().0,
            PathBuf::from("/here/nats-server")
        );
        assert_eq!(resolved.ready_timeout, Duration::from_secs(3));
    }

    #[test]
    fn an_explicit_url_is_not_overridden_by_the_backend_variable() {
        let config = NatsConfig {
            url: Some("nats://127.0.0.1:4222".into()),
            ..Default::default()
        };
        let resolved = config.resolve(env(&[(ENV_BACKEND, "docker")])).unwrap();
        assert_eq!(resolved.backend, Backend::Auto);
        assert_eq!(resolved.url.as_deref(), Some("nats://127.0.0.1:4222"));
    }

    #[test]
    fn empty_variables_count_as_unset() {
        let resolved = NatsConfig::default()
            .resolve(env(&[(ENV_URL, ""), (ENV_BACKEND, " ")]))
            .unwrap();
        assert_eq!(resolved.backend, Backend::Auto);
        assert_eq!(resolved.url, None);
    }

    #[test]
    fn out_of_range_settings_are_errors_naming_the_field() {
        for (config, says) in [
            (
                NatsConfig {
                    ready_timeout: Some(Duration::MAX),
                    ..Default::default()
                },
                "NatsConfig::ready_timeout",
            ),
            (
                NatsConfig {
                    pull_timeout: Some(Duration::from_secs(u64::MAX)),
                    ..Default::default()
                },
                "NatsConfig::pull_timeout",
            ),
            (
                NatsConfig {
                    subscription_capacity: Some(0),
                    ..Default::default()
                },
                "NatsConfig::subscription_capacity=\"0\"",
            ),
            (
                NatsConfig {
                    subscription_capacity: Some(usize::MAX),
                    ..Default::default()
                },
                "from 1 to 16777216",
            ),
        ] {
            let text = config.resolve(env(&[])).unwrap_err().to_string();
            assert!(text.contains(says), "{text}");
        }
    }

    #[test]
    fn an_unknown_backend_name_is_an_error_naming_the_variable() {
        let err = NatsConfig::default()
            .resolve(env(&[(ENV_BACKEND, "podman")]))
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(ENV_BACKEND) && text.contains("podman"),
            "{text}"
        );
    }
}
