//! What was chosen, and what was passed over: for logs, CLI output and error messages.

use std::fmt;
use std::path::PathBuf;

use super::Backend;

/// The backend a running [`NatsServer`](super::NatsServer) came from, with what identifies it.
///
/// Displays as `docker (triggers-lab/nats-server:local)`, `binary (/usr/bin/nats-server)` or
/// `external (nats://127.0.0.1:4222)`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChosenBackend {
    /// A server someone else runs; the emulator never stops it.
    External {
        /// Its client URL.
        url: String,
    },
    /// A container the emulator started.
    Docker {
        /// The image it runs, `name:tag`.
        image: String,
    },
    /// A process the emulator spawned from a binary found on this machine.
    Binary {
        /// The binary it runs.
        path: PathBuf,
    },
    /// A process spawned from the pinned binary, fetched once and cached ([`crate::pinned`]).
    Pinned {
        /// The cached binary, checked against its pinned SHA-256 before every start.
        path: PathBuf,
        /// Its version.
        version: String,
    },
    /// A JetStream cluster of `nodes` servers, each started as `node` says.
    Cluster {
        /// How many servers.
        nodes: usize,
        /// Where each came from (all the same).
        node: Box<ChosenBackend>,
    },
}

impl ChosenBackend {
    /// Which [`Backend`] this is, for matching without the details.
    pub fn kind(&self) -> Backend {
        match self {
            ChosenBackend::External { .. } => Backend::External,
            ChosenBackend::Docker { .. } => Backend::Docker,
            ChosenBackend::Binary { .. } | ChosenBackend::Pinned { .. } => Backend::Binary,
            ChosenBackend::Cluster { node, .. } => node.kind(),
        }
    }
}

impl fmt::Display for ChosenBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChosenBackend::External { url } => write!(f, "external ({url})"),
            ChosenBackend::Docker { image } => write!(f, "docker ({image})"),
            ChosenBackend::Binary { path } => write!(f, "binary ({})", path.display()),
            ChosenBackend::Pinned { path, version } => {
                write!(f, "binary ({}, pinned {version})", path.display())
            }
            ChosenBackend::Cluster { nodes, node } => write!(f, "cluster of {nodes}: {node}"),
        }
    }
}

/// A backend that was looked at and passed over, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedBackend {
    /// The backend passed over.
    pub backend: Backend,
    /// Why, in words a user can act on.
    pub reason: String,
}

impl SkippedBackend {
    pub(crate) fn new(backend: Backend, reason: impl Into<String>) -> Self {
        SkippedBackend {
            backend,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for SkippedBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.backend, self.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_display_with_what_identifies_them() {
        let docker = ChosenBackend::Docker {
            image: "triggers-lab/nats-server:local".into(),
        };
        assert_eq!(
            docker.to_string(),
            "docker (triggers-lab/nats-server:local)"
        );
        let binary = ChosenBackend::Binary {
            path: "/usr/bin/nats-server".into(),
        };
        assert_eq!(binary.to_string(), "binary (/usr/bin/nats-server)");
        let pinned = ChosenBackend::Pinned {
            path: "/c/nats-server".into(),
            version: "2.15.1".into(),
        };
        assert_eq!(pinned.to_string(), "binary (/c/nats-server, pinned 2.15.1)");
        assert_eq!(pinned.kind(), Backend::Binary);
        let external = ChosenBackend::External {
            url: "nats://127.0.0.1:4222".into(),
        };
        assert_eq!(external.to_string(), "external (nats://127.0.0.1:4222)");
        assert_eq!(external.kind(), Backend::External);
    }
}
