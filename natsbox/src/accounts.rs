//! A server with the control API in an account of its own ([`NatsConfig::private_control`]).
//!
//! NATS accounts are separate subject spaces: a message published in one is never seen in
//! another. Clients that connect without credentials (the services under test) are placed, by
//! `no_auth_user`, in the `SERVICES` account, with JetStream, where the emulator serves the
//! platform's subjects as usual. The control API and the records live in the `LAB` account,
//! reached only with a user and a password generated for this server.
//!
//! Accounts rather than one account with a user denied `triggerslab.>`: within one account a
//! service could still create a JetStream stream over `triggerslab.>` (stream subjects are not
//! checked against the creator's permissions) and read every record from it. Across accounts
//! nothing leaks unless exported, and nothing is.
//!
//! Within `SERVICES`, the orchestrator (the emulator) has a user of its own, with an inbox prefix
//! of its own ([`OrchestratorCredentials`]). The services' user may neither subscribe to the
//! JetStream API's request subjects (`$JS.API.>`) nor subscribe or publish under that prefix: a
//! service cannot see the orchestrator's JetStream requests, answer one before the server does,
//! nor forge a reply to it. A subscription to `>` is allowed, and simply not given those
//! subjects (the server filters what a wildcard delivers against the denials).
//!
//! [`NatsConfig::private_control`]: super::NatsConfig::private_control

use std::fmt;

/// The `LAB` account's user: what the emulator, the CLI and the terminal UI connect with to serve
/// or use the control API on a server started with [`NatsConfig::private_control`].
///
/// [`NatsConfig::private_control`]: super::NatsConfig::private_control
#[derive(Clone, PartialEq, Eq)]
pub struct ControlCredentials {
    /// The user name.
    pub user: String,
    /// Its password, random for each server.
    pub password: String,
}

impl fmt::Debug for ControlCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControlCredentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl ControlCredentials {
    /// Connect options that log in as this user.
    #[must_use]
    pub fn connect_options(&self) -> async_nats::ConnectOptions {
        self.apply(async_nats::ConnectOptions::new())
    }

    /// `options`, logging in as this user.
    #[must_use]
    pub fn apply(&self, options: async_nats::ConnectOptions) -> async_nats::ConnectOptions {
        options.user_and_password(self.user.clone(), self.password.clone())
    }
}

/// The orchestrator's user in the services' account, on a server started with
/// [`NatsConfig::private_control`]: what the emulator connects with there, so that its JetStream
/// requests and their replies stay out of the services' sight. [`apply`](Self::apply) sets the
/// user, its password and its inbox prefix, which services may not use.
///
/// [`NatsConfig::private_control`]: super::NatsConfig::private_control
#[derive(Clone, PartialEq, Eq)]
pub struct OrchestratorCredentials {
    /// The user name.
    pub user: String,
    /// Its password, random for each server.
    pub password: String,
    /// The prefix of its inboxes (every request's reply subject, every pull consumer's delivery
    /// subject): services may neither subscribe nor publish under it.
    pub inbox_prefix: String,
}

impl fmt::Debug for OrchestratorCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrchestratorCredentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .field("inbox_prefix", &self.inbox_prefix)
            .finish()
    }
}

impl OrchestratorCredentials {
    /// Connect options that log in as this user, with its inbox prefix.
    #[must_use]
    pub fn connect_options(&self) -> async_nats::ConnectOptions {
        self.apply(async_nats::ConnectOptions::new())
    }

    /// `options`, logging in as this user, with its inbox prefix.
    #[must_use]
    pub fn apply(&self, options: async_nats::ConnectOptions) -> async_nats::ConnectOptions {
        options
            .user_and_password(self.user.clone(), self.password.clone())
            .custom_inbox_prefix(&self.inbox_prefix)
    }
}

/// The two accounts' credentials of a server started with [`NatsConfig::private_control`].
///
/// [`NatsConfig::private_control`]: super::NatsConfig::private_control
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Private {
    pub(crate) control: ControlCredentials,
    pub(crate) orchestrator: OrchestratorCredentials,
}

/// The user of the control account.
pub(crate) const CONTROL_USER: &str = "triggers-lab";
/// The user clients without credentials become.
const SERVICES_USER: &str = "services";
/// The orchestrator's user in the services' account.
const ORCHESTRATOR_USER: &str = "orchestrator";
/// The orchestrator's inbox prefix (fixed: it is the denial, not its secrecy, that keeps services
/// out). The wire contract's table of reserved sources names it too
/// (`triggers_sdk::wire::subject::EMULATOR_INBOX_PREFIX`), so no service stream captures it.
pub const ORCHESTRATOR_INBOX: &str = "_TRIGGERS_LAB_INBOX";

/// The emulator's own streams, which the services' user may not delete, purge, reconfigure,
/// delete messages from, nor delete the consumers of (the emulator follows each with a consumer).
/// The names are the emulator's `DLQ_STREAM` and `EVENTS_STREAM` (a test there keeps them equal).
pub const PROTECTED_STREAMS: [&str; 2] = ["TRIGGERS_DLQ", "TRIGGERS_EVENTS"];

/// The JetStream API subjects the services' user may not publish on: every request that would
/// remove or change one of [`PROTECTED_STREAMS`] or what it holds.
pub(crate) fn protected_api() -> Vec<String> {
    let mut subjects = Vec::new();
    for stream in PROTECTED_STREAMS {
        for op in [
            "STREAM.DELETE",
            "STREAM.PURGE",
            "STREAM.UPDATE",
            "STREAM.MSG.DELETE",
        ] {
            subjects.push(format!("$JS.API.{op}.{stream}"));
        }
        subjects.push(format!("$JS.API.CONSUMER.DELETE.{stream}.*"));
    }
    subjects
}

/// 32 random bytes as hex, from the thread's CSPRNG.
pub(crate) fn secret() -> String {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes[..]);
    hex::encode(bytes)
}

/// The server configuration: the two accounts, and who lands where. Returns it with the
/// credentials of the control account and of the orchestrator's user.
pub(crate) fn config() -> (String, Private) {
    let credentials = ControlCredentials {
        user: CONTROL_USER.to_string(),
        password: secret(),
    };
    let orchestrator = OrchestratorCredentials {
        user: ORCHESTRATOR_USER.to_string(),
        password: secret(),
        inbox_prefix: ORCHESTRATOR_INBOX.to_string(),
    };
    // Nobody needs the services user's password (clients without credentials become that user),
    // but an empty or known one would let a client log in as it on purpose: harmless, yet odd.
    let text = format!(
        "# Written by triggers-lab for one nats-server: services land in SERVICES (no credentials),\n\
         # the control API and its records live in LAB. In SERVICES, the orchestrator's JetStream\n\
         # requests and its inboxes are out of the services' reach.\n\
         accounts {{\n  \
           SERVICES: {{ jetstream: enabled, users: [\n    \
             {{ user: \"{SERVICES_USER}\", password: \"{services}\", permissions: {{\n      \
               subscribe: {{ deny: [\"$JS.API.>\", \"{ORCHESTRATOR_INBOX}.>\"] }},\n      \
               publish: {{ deny: [\"{ORCHESTRATOR_INBOX}.>\", {protected}] }} }} }},\n    \
             {{ user: \"{orchestrator_user}\", password: \"{orchestrator_password}\" }}\n  \
           ] }}\n  \
           LAB: {{ users: [ {{ user: \"{user}\", password: \"{password}\" }} ] }}\n\
         }}\n\
         no_auth_user: \"{SERVICES_USER}\"\n",
        services = secret(),
        protected = protected_api()
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", "),
        orchestrator_user = orchestrator.user,
        orchestrator_password = orchestrator.password,
        user = credentials.user,
        password = credentials.password,
    );
    (
        text,
        Private {
            control: credentials,
            orchestrator,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_config_has_its_own_passwords_and_the_debug_forms_hide_them() {
        let (a, pa) = config();
        let (_, pb) = config();
        assert_ne!(pa.control.password, pb.control.password);
        assert_ne!(pa.orchestrator.password, pb.orchestrator.password);
        assert_ne!(pa.control.password, pa.orchestrator.password);
        assert_eq!(pa.control.password.len(), 64);
        assert!(a.contains(&pa.control.password) && a.contains(&pa.orchestrator.password));
        assert!(a.contains("no_auth_user"));
        assert!(
            a.contains("\"$JS.API.STREAM.DELETE.TRIGGERS_EVENTS\""),
            "{a}"
        );
        assert!(!format!("{pa:?}").contains(&pa.control.password));
        assert!(!format!("{pa:?}").contains(&pa.orchestrator.password));
    }
}
