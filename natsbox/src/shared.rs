//! One nats-server per process, one NATS account per test ([`SharedAccount`]).
//!
//! Starting a nats-server is nine tenths of a test that has one of its own (docs/benchmarks.md).
//! So a process (a test binary, a `triggers-lab run`) starts one server, lazily, on the first
//! [`SharedAccount::acquire`], and each caller gets an account of its own on it. NATS accounts are
//! separate subject spaces with JetStream of their own: the subjects, streams, consumers and KV
//! buckets of one account are never seen from another, with the same names.
//!
//! **How accounts come to be**: each shared server declares 64 accounts in its configuration
//! file; when all of a server's are in use, another server is started, up to [`MAX_ACCOUNTS`]
//! in all. Not operator mode (account JWTs pushed to a resolver): that needs keys, a JWT
//! library and a resolver for what a static file does. Not a pool grown by configuration reload
//! either, though it was tried first: with nats-server 2.15.1 a reload that adds accounts makes
//! JetStream answer "no responders" to the accounts already in use for a moment (a running test
//! would see its JetStream request fail), and a second reload is refused ("config reload not
//! supported for jetstream max memory and max store"). A second server costs its start (about
//! what a test's own server costs) once per 64 tests at once, and disturbs nobody.
//!
//! **What an account holds**: account `T<n>` with JetStream (bounded per account: at most
//! `32G` of file storage reserved, `1G` of memory, 1000 streams, 10 000 consumers) and three
//! users: `t<n>` (no restrictions), `t<n>-services` (the services' user of a private-control
//! server: no `$JS.API.>` subscriptions, nothing under the orchestrator's inbox prefix) and
//! `t<n>-orchestrator`; and account `T<n>_LAB` with the control user `t<n>-lab`. This is, per
//! test, what [`NatsConfig::private_control`](crate::NatsConfig::private_control) gives a server
//! of its own; without it the test uses `t<n>` for everything, as an open server has it.
//! Nobody gets in without a user: a client that drops the URL's credentials is refused, loudly.
//!
//! **Release**: dropping a [`SharedAccount`] (a test that ends, or panics) hands the account
//! back, and it is cleaned in the background before anyone else gets it: every stream (with its
//! consumers; KV buckets and object stores are streams) is deleted through the account's own
//! JetStream API, then the server's `/connz?acc=` must show no connection left in the account or
//! its `_LAB` account within 5 s. An account that a connection outstays (a service the test
//! leaked, another process) is never given out again: it is counted ([`SharedAccount::lost`])
//! and logged, so a leftover subscription can never see the next test's messages.
//!
//! **Process death**: the server is a binary-backend process under a [`crate::watchdog`]: when
//! this process ends, however it ends, the server is killed and its store removed.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::{Instant, sleep, timeout};

use crate::accounts::{
    ControlCredentials, ORCHESTRATOR_INBOX, OrchestratorCredentials, protected_api, secret,
};
use crate::binary::{self, BinaryServer};
use crate::config::{Backend, Isolation, Resolved};
use crate::probe::{self, Login};
use crate::{ChosenBackend, NatsConfig, NatsError};

/// Accounts (tests at once) the shared server holds at most. Past it, an acquire waits for a
/// release, up to [`NatsConfig::ready_timeout`], then fails saying so.
pub const MAX_ACCOUNTS: usize = 256;
/// Accounts each shared server declares; when all are in use, another server is started.
const ACCOUNTS_PER_SERVER: usize = 64;
/// Each account's JetStream bounds. Storage is what streams reserve (their `max_bytes`), not
/// what they hold: 32G is 128 of the emulator's 256 MiB streams. An account's limits are
/// reserved of the server's when the account is declared, so the server promises 16TB of file
/// and 512GB of memory storage (256 accounts of each fit); each stream stays bounded by its own
/// `max_bytes`, and what is written is what the machine must hold.
const ACCOUNT_JETSTREAM: &str =
    "{ max_mem: 1G, max_file: 32G, max_streams: 1000, max_consumers: 10000 }";
/// How long a release waits for the account's connections to close before it gives the
/// account up.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// How long one cleaning (listing and deleting streams) may take.
const CLEAN_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(10);

/// An account of its own on the process's shared nats-server: a subject space and a JetStream of
/// its own. [`url`](Self::url) carries its credentials. Dropping it hands the account back,
/// cleaned before its next use.
pub struct SharedAccount {
    server: Arc<Server>,
    index: usize,
    url: String,
    private_control: bool,
    /// The user of `url`.
    open: Login,
    orchestrator: OrchestratorCredentials,
    control: ControlCredentials,
}

impl std::fmt::Debug for SharedAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedAccount")
            .field("account", &self.name())
            .field("server", &self.server.url)
            .finish_non_exhaustive()
    }
}

impl SharedAccount {
    /// An account on the process's shared server (started now if it is the first), when
    /// `config` allows sharing: [`Isolation::Auto`] or [`Isolation::Account`], no cluster, no
    /// URL (`TRIGGERS_NATS_URL` included), no fixed client port, a backend of auto or binary and
    /// a binary at hand (local or pinned). `Ok(None)`: a server of its own is wanted; start one
    /// with [`NatsServer::start`](crate::NatsServer::start).
    ///
    /// The first acquire decides the server (its binary, its readiness timeout); later ones
    /// share it whatever they ask for those.
    ///
    /// # Errors
    /// [`Isolation::Account`] with a config that cannot share (the error says what stands in
    /// the way), a server that does not start, or every one of [`MAX_ACCOUNTS`] accounts in use
    /// for longer than the readiness timeout.
    pub async fn acquire(config: &NatsConfig) -> Result<Option<SharedAccount>, NatsError> {
        let resolved = config.resolve(|name| std::env::var(name).ok())?;
        if resolved.isolation == Isolation::Server {
            return Ok(None);
        }
        if let Some(why) = unshareable(&resolved) {
            return if resolved.isolation == Isolation::Account {
                Err(NatsError::InvalidConfig {
                    setting: "NatsConfig::isolation",
                    value: format!("account, with {why}"),
                    expected: "no cluster, no URL, no fixed client port and the binary backend \
                               for an account on the shared server (or isolation server)",
                })
            } else {
                Ok(None)
            };
        }
        let shared = SHARED.get_or_init(Shared::new);
        let task = shared
            .runtime
            .spawn(acquire_in(resolved, config.private_control));
        task.await.map_err(|e| NatsError::Io {
            action: "acquire an account on the shared nats-server".into(),
            source: std::io::Error::other(e.to_string()),
        })?
    }

    /// The client URL with this account's credentials in it
    /// (`nats://t3-services:…@127.0.0.1:41234`): give it to the service under test. Clients that
    /// read credentials from the URL (Go, Python, Java, the triggers SDK) land in the account;
    /// async-nats does not read them, use `triggers_sdk::transport::connect`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The server's client URL without credentials (no client gets in with it alone).
    pub fn server_url(&self) -> &str {
        &self.server.url
    }

    /// The server's HTTP monitoring URL (`/connz?acc=` + [`name`](Self::name) shows this
    /// account's connections).
    pub fn monitor_url(&self) -> &str {
        &self.server.monitor_url
    }

    /// The account's name on the server, e.g. `T3` (its control account is `T3_LAB`).
    pub fn name(&self) -> String {
        format!("T{}", self.index + 1)
    }

    /// Where the shared server came from.
    pub fn backend(&self) -> &ChosenBackend {
        &self.server.backend
    }

    /// One line for a CLI or a test log.
    pub fn summary(&self) -> String {
        format!(
            "account {} on the shared nats-server {} at {}",
            self.name(),
            self.server.backend,
            self.server.url
        )
    }

    /// Accounts of this account's server that could not be cleaned and are not used again.
    pub async fn lost(&self) -> usize {
        self.server.pool.lock().await.lost
    }

    /// What the shared server has logged so far (every account's doings).
    pub fn log(&self) -> String {
        self.server.binary.log()
    }

    /// `options`, logging in as the user of [`url`](Self::url).
    #[must_use]
    pub fn apply(&self, options: async_nats::ConnectOptions) -> async_nats::ConnectOptions {
        let (user, password) = &self.open;
        options.user_and_password(user.clone(), password.clone())
    }

    /// As [`NatsServer::control_credentials`](crate::NatsServer::control_credentials): the
    /// control user of this account's `_LAB` account, when acquired with `private_control`.
    pub fn control_credentials(&self) -> Option<&ControlCredentials> {
        self.private_control.then_some(&self.control)
    }

    /// As [`NatsServer::orchestrator_credentials`](crate::NatsServer::orchestrator_credentials),
    /// when acquired with `private_control`.
    pub fn orchestrator_credentials(&self) -> Option<&OrchestratorCredentials> {
        self.private_control.then_some(&self.orchestrator)
    }
}

impl Drop for SharedAccount {
    fn drop(&mut self) {
        let server = self.server.clone();
        let index = self.index;
        if let Some(shared) = SHARED.get() {
            shared.runtime.spawn(release(server, index));
        }
    }
}

/// Why `resolved` cannot have an account on the shared server, if it cannot.
fn unshareable(resolved: &Resolved) -> Option<String> {
    if resolved.cluster.is_some() {
        Some("a cluster".into())
    } else if let Some(url) = &resolved.url {
        Some(format!("a server at {url}"))
    } else if let Some(port) = resolved.client_port {
        Some(format!("the fixed client port {port}"))
    } else if !matches!(resolved.backend, Backend::Auto | Backend::Binary) {
        Some(format!("the {} backend", resolved.backend))
    } else {
        None
    }
}

/// The process's shared server and the runtime its work runs on: a runtime of its own, so that
/// the server, its reloads and the cleaning of released accounts outlive the test (and its
/// runtime) that happened to start them.
struct Shared {
    runtime: tokio::runtime::Runtime,
    servers: Mutex<Vec<Arc<Server>>>,
}

static SHARED: OnceLock<Shared> = OnceLock::new();

impl Shared {
    fn new() -> Shared {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("natsbox-shared")
            .enable_all()
            .build()
            .expect("a Tokio runtime for the shared nats-server");
        Shared {
            runtime,
            servers: Mutex::new(Vec::new()),
        }
    }
}

/// The users of one account (see the module docs).
#[derive(Clone)]
struct Slot {
    open: Login,
    services: Login,
    orchestrator: Login,
    control: Login,
}

impl Slot {
    fn new(index: usize) -> Slot {
        let n = index + 1;
        Slot {
            open: (format!("t{n}"), secret()),
            services: (format!("t{n}-services"), secret()),
            orchestrator: (format!("t{n}-orchestrator"), secret()),
            control: (format!("t{n}-lab"), secret()),
        }
    }
}

struct Server {
    binary: BinaryServer,
    url: String,
    monitor_url: String,
    backend: ChosenBackend,
    slots: Vec<Slot>,
    pool: Mutex<Pool>,
}

struct Pool {
    /// Free accounts; the last released is given first.
    free: Vec<usize>,
    /// Accounts that could not be cleaned (a connection stayed), never used again.
    lost: usize,
}

/// The configuration file: JetStream's server-wide limit and every account.
fn config_text(slots: &[Slot]) -> String {
    let mut text = String::from(
        "# Written by triggers-lab: the process's shared nats-server, one account per test.\n\
         jetstream { max_file_store: 16TB, max_memory_store: 512GB }\n\
         accounts {\n",
    );
    // The services' user may not remove or change the emulator's own streams, as on a server
    // of its own with a private control account.
    let protected = protected_api()
        .iter()
        .map(|s| format!("\"{s}\""))
        .collect::<Vec<_>>()
        .join(", ");
    for (index, slot) in slots.iter().enumerate() {
        let n = index + 1;
        let user =
            |(name, password): &Login| format!("{{ user: \"{name}\", password: \"{password}\" }}");
        text.push_str(&format!(
            "  T{n}: {{ jetstream: {ACCOUNT_JETSTREAM}, users: [\n    {open}\n    \
             {{ user: \"{services_user}\", password: \"{services_password}\", permissions: {{ \
             subscribe: {{ deny: [\"$JS.API.>\", \"{ORCHESTRATOR_INBOX}.>\"] }}, \
             publish: {{ deny: [\"{ORCHESTRATOR_INBOX}.>\", {protected}] }} }} }}\n    {orchestrator}\n  ] }}\n  \
             T{n}_LAB: {{ users: [ {control} ] }}\n",
            open = user(&slot.open),
            services_user = slot.services.0,
            services_password = slot.services.1,
            orchestrator = user(&slot.orchestrator),
            control = user(&slot.control),
        ));
    }
    text.push_str("}\n");
    text
}

async fn acquire_in(
    resolved: Resolved,
    private_control: bool,
) -> Result<Option<SharedAccount>, NatsError> {
    let shared = SHARED.get().expect("initialised before its runtime runs");
    let deadline = Instant::now() + resolved.ready_timeout;
    loop {
        let mut servers = shared.servers.lock().await;
        let mut found = None;
        for server in servers.iter() {
            if let Some(index) = server.pool.lock().await.free.pop() {
                found = Some((server.clone(), index));
                break;
            }
        }
        if found.is_none() && servers.len() < MAX_ACCOUNTS / ACCOUNTS_PER_SERVER {
            match start(&resolved).await? {
                Some(server) => {
                    let server = Arc::new(server);
                    let index = server.pool.lock().await.free.pop();
                    servers.push(server.clone());
                    found = index.map(|index| (server, index));
                }
                // No binary, and the caller may do without: a server of its own, from Docker.
                None if servers.is_empty() => return Ok(None),
                None => {}
            }
        }
        drop(servers);
        if let Some((server, index)) = found {
            return Ok(Some(lease(server, index, private_control)));
        }
        if Instant::now() >= deadline {
            return Err(NatsError::Io {
                action: format!(
                    "acquire an account on a shared nats-server: all {MAX_ACCOUNTS} are in use \
                     or lost (waited {:?}); run fewer tests at once, or give some a server of \
                     their own (NatsConfig::isolation = Server, TRIGGERS_NATS_ISOLATION=server)",
                    resolved.ready_timeout
                ),
                source: std::io::Error::other("no free account"),
            });
        }
        sleep(POLL * 5).await;
    }
}

/// Account `index` of `server`, for its new user.
fn lease(server: Arc<Server>, index: usize, private_control: bool) -> SharedAccount {
    let slot = server.slots[index].clone();
    let url_user = if private_control {
        slot.services.clone()
    } else {
        slot.open.clone()
    };
    SharedAccount {
        url: with_login(&server.url, &url_user),
        server,
        index,
        private_control,
        open: url_user,
        orchestrator: OrchestratorCredentials {
            user: slot.orchestrator.0,
            password: slot.orchestrator.1,
            inbox_prefix: ORCHESTRATOR_INBOX.to_string(),
        },
        control: ControlCredentials {
            user: slot.control.0,
            password: slot.control.1,
        },
    }
}

/// `nats://user:password@host:port` from `nats://host:port`.
fn with_login(url: &str, (user, password): &Login) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => format!("{scheme}://{user}:{password}@{rest}"),
        None => format!("{user}:{password}@{url}"),
    }
}

/// Starts a shared server, or `None` when no binary is at hand and the caller may do without.
async fn start(resolved: &Resolved) -> Result<Option<Server>, NatsError> {
    let mut skipped = Vec::new();
    let found = match binary::find(resolved) {
        Ok(path) => Some((path.clone(), ChosenBackend::Binary { path }, None)),
        Err(skip) => {
            skipped.push(skip);
            if resolved.server_bin.is_some() {
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
    let Some((path, chosen, sha256)) = found else {
        return if resolved.isolation == Isolation::Account {
            Err(NatsError::NoBackend { tried: skipped })
        } else {
            Ok(None)
        };
    };
    let slots: Vec<Slot> = (0..ACCOUNTS_PER_SERVER).map(Slot::new).collect();
    let binary = BinaryServer::start_as(
        path,
        chosen,
        sha256,
        Some(config_text(&slots)),
        resolved.ready_timeout,
        None,
        Some(slots[ACCOUNTS_PER_SERVER - 1].open.clone()),
    )
    .await?;
    let server = Server {
        url: binary.client_url(),
        monitor_url: binary.monitor_url(),
        backend: binary.backend(),
        binary,
        pool: Mutex::new(Pool {
            free: (0..slots.len()).rev().collect(),
            lost: 0,
        }),
        slots,
    };
    tracing::info!(backend = %server.backend, url = %server.url, accounts = ACCOUNTS_PER_SERVER, "shared nats-server ready");
    Ok(Some(server))
}

/// Cleans a released account and frees it; an account that cannot be cleaned (a connection
/// stays) is never used again, counted (see the module docs).
async fn release(server: Arc<Server>, index: usize) {
    let slot = &server.slots[index];
    match clean(&server, index, slot).await {
        Ok(()) => server.pool.lock().await.free.push(index),
        Err(e) => {
            let mut pool = server.pool.lock().await;
            pool.lost += 1;
            tracing::warn!(
                account = index + 1,
                server = %server.url,
                lost = pool.lost,
                "shared nats-server: account T{} is not used again: {e} (a client of its test \
                 outlived it; stop services before dropping the harness)",
                index + 1
            );
        }
    }
}

/// Deletes every stream of the account through its JetStream API, then waits for every
/// connection to the account (and its `_LAB` account) to close.
async fn clean(server: &Server, index: usize, slot: &Slot) -> Result<(), String> {
    let deleted = timeout(CLEAN_TIMEOUT, delete_streams(&server.url, &slot.open))
        .await
        .map_err(|_| format!("deleting its streams took over {CLEAN_TIMEOUT:?}"))??;
    if deleted > 0 {
        tracing::debug!(
            account = index + 1,
            deleted,
            "shared nats-server: streams deleted"
        );
    }
    let n = index + 1;
    let deadline = Instant::now() + CLOSE_WAIT;
    loop {
        let left = connections(&server.monitor_url, &format!("T{n}")).await?
            + connections(&server.monitor_url, &format!("T{n}_LAB")).await?;
        if left == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{left} connection(s) still open after {CLOSE_WAIT:?}"
            ));
        }
        sleep(POLL * 2).await;
    }
}

/// Deletes every stream `login` sees; how many.
async fn delete_streams(url: &str, (user, password): &Login) -> Result<usize, String> {
    use futures::TryStreamExt;
    let client = async_nats::ConnectOptions::new()
        .user_and_password(user.clone(), password.clone())
        .name("natsbox shared-server cleaner")
        .connect(url)
        .await
        .map_err(|e| format!("connect to clean it: {e}"))?;
    let js = async_nats::jetstream::new(client.clone());
    let names: Vec<String> = js
        .stream_names()
        .try_collect()
        .await
        .map_err(|e| format!("list its streams: {e}"))?;
    for name in &names {
        js.delete_stream(name)
            .await
            .map_err(|e| format!("delete stream {name}: {e}"))?;
    }
    drop(js);
    client
        .drain()
        .await
        .map_err(|e| format!("close the cleaning connection: {e}"))?;
    Ok(names.len())
}

/// How many connections `/connz` shows for `account`.
async fn connections(monitor_url: &str, account: &str) -> Result<usize, String> {
    let response = probe::get(monitor_url, &format!("/connz?acc={account}&limit=1")).await?;
    num_connections(&response)
        .ok_or_else(|| format!("GET {monitor_url}/connz?acc={account} has no num_connections"))
}

/// The `num_connections` of a `/connz` answer.
fn num_connections(response: &str) -> Option<usize> {
    let at = response.find("\"num_connections\"")?;
    let rest = response[at + "\"num_connections\"".len()..].trim_start();
    let rest = rest.strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_declares_each_account_with_its_users_and_bounds() {
        let slots: Vec<Slot> = (0..2).map(Slot::new).collect();
        let text = config_text(&slots);
        for needle in [
            "T1: { jetstream: { max_mem: 1G, max_file: 32G",
            "T2_LAB: { users: [ { user: \"t2-lab\"",
            "\"t1-services\"",
            "\"t2-orchestrator\"",
            "\"$JS.API.STREAM.DELETE.TRIGGERS_EVENTS\"",
            &slots[1].open.1,
        ] {
            assert!(text.contains(needle), "{needle} missing from\n{text}");
        }
        assert!(!text.contains("no_auth_user"));
    }

    #[test]
    fn credentials_go_into_the_url() {
        let login = ("t1".to_string(), "abc".to_string());
        assert_eq!(
            with_login("nats://127.0.0.1:4222", &login),
            "nats://t1:abc@127.0.0.1:4222"
        );
    }

    #[test]
    fn connz_counts_are_read_and_garbage_is_none() {
        assert_eq!(
            num_connections("HTTP/1.0 200 OK\r\n\r\n{\"num_connections\": 3, \"total\": 3}"),
            Some(3)
        );
        assert_eq!(num_connections("{\"num_connections\":0}"), Some(0));
        assert_eq!(num_connections("nothing"), None);
    }
}
