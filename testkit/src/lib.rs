//! What the workspace's tests share, so that no test file keeps its own copy: a harness on a
//! real nats-server ([`lab`], [`own_lab`]), the `triggers-lab` binary and the processes it starts
//! ([`cli`]), and raw async-nats clients playing an SDK against the emulator ([`peer`]).
//!
//! A dev-dependency only (`publish = false`): no library of the workspace depends on it.

pub mod cli;
pub mod peer;

use std::time::Duration;

use natsbox::Isolation;
use triggers_emulator::{Backend, EmulatorConfig, Harness, NatsConfig};

/// How long a test's waits may take at most: they return as soon as what they wait for arrives,
/// so the bound only matters on a loaded CI machine.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(20);

/// A harness on an account of the process's shared nats-server (binary backend), waits bounded
/// at [`WAIT_TIMEOUT`].
///
/// # Panics
/// When no nats-server can be started (the message says how to get one).
pub async fn lab() -> Harness {
    lab_with(EmulatorConfig {
        wait_timeout: WAIT_TIMEOUT,
        ..Default::default()
    })
    .await
}

/// As [`lab`], with the emulator configured exactly as given.
///
/// # Panics
/// As [`lab`].
pub async fn lab_with(config: EmulatorConfig) -> Harness {
    start(Isolation::Auto, config).await
}

/// As [`lab`], on a nats-server of its own (not an account of the shared one): for a test that
/// restarts or kills the server.
///
/// # Panics
/// As [`lab`].
pub async fn own_lab() -> Harness {
    own_lab_with(EmulatorConfig {
        wait_timeout: WAIT_TIMEOUT,
        ..Default::default()
    })
    .await
}

/// As [`own_lab`], with the emulator configured exactly as given.
///
/// # Panics
/// As [`lab`].
pub async fn own_lab_with(config: EmulatorConfig) -> Harness {
    start(Isolation::Server, config).await
}

async fn start(isolation: Isolation, config: EmulatorConfig) -> Harness {
    Harness::start_with(
        NatsConfig {
            backend: Backend::Binary,
            isolation,
            ..Default::default()
        },
        config,
    )
    .await
    .unwrap_or_else(|e| panic!("cannot start the harness: {e}"))
}
