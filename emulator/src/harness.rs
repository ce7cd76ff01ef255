//! The test harness: an account on the process's shared nats-server (or a server of its own),
//! an emulator on it, and a client, in one value that stops everything when dropped.

use std::ops::Deref;

use crate::emulator::{Emulator, EmulatorConfig};
use crate::error::HarnessError;
use natsbox::{
    ChosenBackend, ControlCredentials, NatsConfig, NatsServer, OrchestratorCredentials,
    SharedAccount,
};

/// An emulator on a NATS account of its own: on the process's shared nats-server
/// ([`SharedAccount`], the default where it is safe) or on a server of its own
/// ([`NatsServer::start`], with [`NatsConfig::isolation`] = `Server`, a cluster, a URL, Docker).
///
/// It dereferences to the [`Emulator`], so `lab.deploy(..)`, `lab.trigger(..)` and the
/// `lab.wait_*` methods read as they should.
pub struct Harness {
    emulator: Emulator,
    client: async_nats::Client,
    nats: Nats,
}

/// Where a harness's NATS is.
#[derive(Debug)]
enum Nats {
    Own(NatsServer),
    Shared(SharedAccount),
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("nats", &self.nats_summary())
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// Starts an emulator with the default settings (virtual clock, hash mismatches refused) on
    /// an account of the process's shared nats-server (started first if need be), or on a server
    /// of its own where sharing is not possible (see [`NatsConfig::isolation`]).
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
        config: EmulatorConfig,
    ) -> Result<Self, HarnessError> {
        HarnessBuilder::new(nats, config).start().await
    }

    /// A builder, for what [`start_with`](Self::start_with) does not say: the connections'
    /// names, or a look at the server before the emulator starts on it.
    pub fn builder(nats: NatsConfig, config: EmulatorConfig) -> HarnessBuilder {
        HarnessBuilder::new(nats, config)
    }

    /// The NATS client URL to give the service under test. On a shared server it carries the
    /// account's user and password (`nats://t3:…@127.0.0.1:41234`): Go, Python and Java clients
    /// read them from the URL, the triggers SDK too; a bare async-nats client does not (connect
    /// it with `triggers_sdk::transport::connect`).
    #[must_use]
    pub fn url(&self) -> &str {
        match &self.nats {
            Nats::Own(server) => server.url(),
            Nats::Shared(account) => account.url(),
        }
    }

    /// One line for a test log or a report: the server, and the account on a shared one.
    #[must_use]
    pub fn nats_summary(&self) -> String {
        match &self.nats {
            Nats::Own(server) => server.summary(),
            Nats::Shared(account) => account.summary(),
        }
    }

    /// Where the server came from.
    #[must_use]
    pub fn backend(&self) -> &ChosenBackend {
        match &self.nats {
            Nats::Own(server) => server.backend(),
            Nats::Shared(account) => account.backend(),
        }
    }

    /// The server's HTTP monitoring URL, when known.
    #[must_use]
    pub fn monitor_url(&self) -> Option<&str> {
        match &self.nats {
            Nats::Own(server) => server.monitor_url(),
            Nats::Shared(account) => Some(account.monitor_url()),
        }
    }

    /// The control account's user, with [`NatsConfig::private_control`].
    #[must_use]
    pub fn control_credentials(&self) -> Option<&ControlCredentials> {
        match &self.nats {
            Nats::Own(server) => server.control_credentials(),
            Nats::Shared(account) => account.control_credentials(),
        }
    }

    /// The orchestrator's user, with [`NatsConfig::private_control`]; without it the emulator
    /// connects as the user of [`url`](Self::url).
    #[must_use]
    pub fn orchestrator_credentials(&self) -> Option<&OrchestratorCredentials> {
        match &self.nats {
            Nats::Own(server) => server.orchestrator_credentials(),
            Nats::Shared(account) => account.orchestrator_credentials(),
        }
    }

    /// The account on the shared server, when the harness has one.
    #[must_use]
    pub fn account(&self) -> Option<&SharedAccount> {
        match &self.nats {
            Nats::Own(_) => None,
            Nats::Shared(account) => Some(account),
        }
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

    /// The nats-server of its own, to restart it or read its log; `None` on a shared server
    /// (ask for [`NatsConfig::isolation`] = `Server` to have one).
    #[must_use]
    pub fn nats(&self) -> Option<&NatsServer> {
        match &self.nats {
            Nats::Own(server) => Some(server),
            Nats::Shared(_) => None,
        }
    }

    /// The nats-server of its own, mutably (for [`NatsServer::restart`]); `None` on a shared
    /// server.
    pub fn nats_mut(&mut self) -> Option<&mut NatsServer> {
        match &mut self.nats {
            Nats::Own(server) => Some(server),
            Nats::Shared(_) => None,
        }
    }

    /// Stops the emulator, then the nats-server gracefully (and removes its store or container),
    /// or hands the account back to the shared server (cleaned before its next use). Dropping
    /// the harness does the same, less gracefully.
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
        match nats {
            Nats::Own(server) => server.stop().await,
            Nats::Shared(account) => {
                drop(account);
                Ok(())
            }
        }
    }
}

/// How a [`Harness`] starts: the one path from a [`NatsConfig`] and an [`EmulatorConfig`] to a
/// running emulator, for tests ([`Harness::start_with`]) and `triggers-lab up` alike, so that
/// what one learns (retrying the first connection, the orchestrator's credentials, the control
/// account's connection, the wire tap's login, the streams' replicas) the other has.
///
/// [`start`](Self::start) does it in one step; [`provision`](Self::provision) stops after the
/// server, so that the caller can look at it (is an emulator already answering there?) before
/// [`ProvisionedNats::start_emulator`].
#[derive(Debug)]
#[must_use]
pub struct HarnessBuilder {
    nats: NatsConfig,
    config: EmulatorConfig,
    name: &'static str,
    control_name: &'static str,
    own_server: bool,
}

impl HarnessBuilder {
    fn new(nats: NatsConfig, config: EmulatorConfig) -> Self {
        HarnessBuilder {
            nats,
            config,
            name: "triggers-lab emulator",
            control_name: "triggers-lab emulator control",
            own_server: false,
        }
    }

    /// A server of its own ([`NatsServer::start`]) whatever [`NatsConfig::isolation`] and
    /// `TRIGGERS_NATS_ISOLATION` say: for a process that outlives any test (`triggers-lab up`),
    /// never an account on the process's shared server.
    pub fn own_server(mut self) -> Self {
        self.own_server = true;
        self
    }

    /// The names the emulator's connection and its control connection give the server (its
    /// `/connz` shows them); `triggers-lab emulator` and `triggers-lab emulator control` unless
    /// set.
    pub fn connection_names(mut self, name: &'static str, control_name: &'static str) -> Self {
        self.name = name;
        self.control_name = control_name;
        self
    }

    /// Starts the server (or takes an account on the shared one) and the emulator on it.
    ///
    /// # Errors
    /// As [`Harness::start`].
    pub async fn start(self) -> Result<Harness, HarnessError> {
        self.provision().await?.start_emulator().await
    }

    /// Starts the server (or takes an account on the shared one), and stops there.
    ///
    /// # Errors
    /// When no nats-server can be had (the error says how to get one).
    pub async fn provision(self) -> Result<ProvisionedNats, HarnessError> {
        let shared = if self.own_server {
            None
        } else {
            SharedAccount::acquire(&self.nats).await?
        };
        let nats = match shared {
            Some(account) => Nats::Shared(account),
            None => Nats::Own(NatsServer::start(self.nats.clone()).await?),
        };
        Ok(ProvisionedNats {
            nats,
            builder: self,
        })
    }
}

/// A harness's NATS, started, with no emulator on it yet ([`HarnessBuilder::provision`]).
#[derive(Debug)]
#[must_use]
pub struct ProvisionedNats {
    nats: Nats,
    builder: HarnessBuilder,
}

impl ProvisionedNats {
    /// The server's client URL without credentials.
    pub fn server_url(&self) -> &str {
        match &self.nats {
            Nats::Own(server) => server.url(),
            Nats::Shared(account) => account.server_url(),
        }
    }

    /// The control account's user, when the server has one ([`NatsConfig::private_control`] on
    /// a server started here); `None` on a server someone else started.
    pub fn control_credentials(&self) -> Option<&ControlCredentials> {
        match &self.nats {
            Nats::Own(server) => server.control_credentials(),
            Nats::Shared(account) => account.control_credentials(),
        }
    }

    /// Connects the emulator's clients and starts it. On an error the server is stopped (or the
    /// account handed back).
    ///
    /// # Errors
    /// When no client can connect, or the emulator cannot subscribe.
    pub async fn start_emulator(self) -> Result<Harness, HarnessError> {
        let ProvisionedNats { nats, builder } = self;
        let HarnessBuilder {
            nats: nats_config,
            mut config,
            name,
            control_name,
            own_server: _,
        } = builder;
        if config.stream_replicas == 0 {
            config.stream_replicas = match &nats {
                Nats::Own(server) => server.node_count().min(3),
                Nats::Shared(_) => 1,
            };
        }
        let mut options =
            crate::drops::connect_options(name, &config.slow_consumers).retry_on_initial_connect();
        if let Some(capacity) = nats_config.subscription_capacity {
            options = options.subscription_capacity(capacity);
        }
        let (server_url, orchestrator, control) = match &nats {
            Nats::Own(server) => (
                server.url(),
                server.orchestrator_credentials(),
                server.control_credentials(),
            ),
            Nats::Shared(account) => {
                options = account.apply(options);
                (
                    account.server_url(),
                    account.orchestrator_credentials(),
                    account.control_credentials(),
                )
            }
        };
        if let Some(credentials) = orchestrator {
            options = credentials.apply(options);
        }
        let client = options
            .connect(server_url)
            .await
            .map_err(|source| HarnessError::Connect {
                url: server_url.to_owned(),
                source,
            })?;
        if config.control_client.is_none()
            && let Some(credentials) = control
        {
            let control = credentials
                .connect_options()
                .name(control_name)
                .connect(server_url)
                .await
                .map_err(|source| HarnessError::ControlAccount {
                    url: server_url.to_owned(),
                    source,
                })?;
            config.control_client = Some(control);
        }
        // The tap logs in as the orchestrator where there is one, else as the URL's user (an
        // account's, on a shared server): it sees what the emulator sees, in the same account.
        let tap_url = match &nats {
            Nats::Own(server) => server.url(),
            Nats::Shared(account) => account.url(),
        };
        config.wire_tap = config.wire_tap.resolve(tap_url, orchestrator);
        let emulator = Emulator::start(client.clone(), config).await?;
        Ok(Harness {
            emulator,
            client,
            nats,
        })
    }
}

impl Deref for Harness {
    type Target = Emulator;
    fn deref(&self) -> &Emulator {
        &self.emulator
    }
}
