//! The test harness: a nats-server of its own, an emulator on it, and a client, in one value that
//! stops everything when dropped.

use std::ops::Deref;

use crate::emulator::{Emulator, EmulatorConfig};
use crate::error::HarnessError;
use crate::nats::{NatsConfig, NatsServer};

/// A nats-server (provisioned as [`NatsServer::start`] chooses) with an emulator running on it.
///
/// It dereferences to the [`Emulator`], so `lab.deploy(..)`, `lab.trigger(..)` and the
/// `lab.wait_*` methods read as they should.
pub struct Harness {
    emulator: Emulator,
    client: async_nats::Client,
    nats: NatsServer,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("url", &self.nats.url())
            .field("backend", &self.nats.backend())
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// Starts a nats-server and an emulator with the default settings (virtual clock, hash
    /// mismatches refused).
    ///
    /// # Errors
    /// When no nats-server can be had (the error says how to get one), or the emulator cannot
    /// subscribe.
    pub async fn start() -> Result<Self, HarnessError> {
        Self::start_with(NatsConfig::default(), EmulatorConfig::default()).await
    }

    /// Starts with the given settings. When the server has a private control account
    /// ([`NatsConfig::private_control`]), the emulator connects as the orchestrator's user of the
    /// services' account (its JetStream requests out of the services' sight), and when `config`
    /// names no control connection, the control API is served on one logged in to the control
    /// account.
    /// The emulator's connection counts slow-consumer drops in
    /// `config.slow_consumers` ([`crate::drops`]), with `nats.subscription_capacity` if set.
    ///
    /// # Errors
    /// As [`Harness::start`].
    pub async fn start_with(
        nats: NatsConfig,
        mut config: EmulatorConfig,
    ) -> Result<Self, HarnessError> {
        let capacity = nats.subscription_capacity;
        let nats = NatsServer::start(nats).await?;
        if config.stream_replicas == 0 {
            config.stream_replicas = nats.node_count().min(3);
        }
        let mut options =
            crate::drops::connect_options("triggers-lab emulator", &config.slow_consumers)
                .retry_on_initial_connect();
        if let Some(capacity) = capacity {
            options = options.subscription_capacity(capacity);
        }
        if let Some(credentials) = nats.orchestrator_credentials() {
            options = credentials.apply(options);
        }
        let client = options
            .connect(nats.url())
            .await
            .map_err(|e| HarnessError::Connect {
                url: nats.url().to_owned(),
                reason: e.to_string(),
            })?;
        if config.control_client.is_none()
            && let Some(credentials) = nats.control_credentials()
        {
            let control = credentials
                .connect_options()
                .name("triggers-lab emulator control")
                .connect(nats.url())
                .await
                .map_err(|e| HarnessError::Connect {
                    url: nats.url().to_owned(),
                    reason: format!("to the control account: {e}"),
                })?;
            config.control_client = Some(control);
        }
        config.wire_tap = config
            .wire_tap
            .resolve(nats.url(), nats.orchestrator_credentials());
        let emulator = Emulator::start(client.clone(), config).await?;
        Ok(Harness {
            emulator,
            client,
            nats,
        })
    }

    /// The NATS client URL to give the service under test.
    #[must_use]
    pub fn url(&self) -> &str {
        self.nats.url()
    }

    /// The emulator.
    #[must_use]
    pub fn emulator(&self) -> &Emulator {
        &self.emulator
    }

    /// The emulator's NATS client (to publish or subscribe by hand in a test).
    #[must_use]
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The nats-server, to restart it or read its log.
    #[must_use]
    pub fn nats(&self) -> &NatsServer {
        &self.nats
    }

    /// The nats-server, mutably (for [`NatsServer::restart`]).
    pub fn nats_mut(&mut self) -> &mut NatsServer {
        &mut self.nats
    }

    /// Stops the emulator, then the nats-server gracefully (and removes its store or container).
    /// Dropping the harness does the same, less gracefully.
    ///
    /// # Errors
    /// When the Docker engine fails to stop or remove the container.
    pub async fn stop(self) -> Result<(), crate::NatsError> {
        let Harness {
            emulator,
            client,
            nats,
        } = self;
        drop(emulator);
        drop(client);
        nats.stop().await
    }
}

impl Deref for Harness {
    type Target = Emulator;
    fn deref(&self) -> &Emulator {
        &self.emulator
    }
}
