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

/// The user of the control account.
pub(crate) const CONTROL_USER: &str = "triggers-lab";
/// The user clients without credentials become.
const SERVICES_USER: &str = "services";

/// 32 random bytes as hex, from the thread's CSPRNG.
pub(crate) fn secret() -> String {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes[..]);
    hex::encode(bytes)
}

/// The server configuration: the two accounts, and who lands where. Returns it with the control
/// account's credentials.
pub(crate) fn config() -> (String, ControlCredentials) {
    let credentials = ControlCredentials {
        user: CONTROL_USER.to_string(),
        password: secret(),
    };
    // Nobody needs the services user's password (clients without credentials become that user),
    // but an empty or known one would let a client log in as it on purpose: harmless, yet odd.
    let text = format!(
        "# Written by triggers-lab for one nats-server: services land in SERVICES (no credentials),\n\
         # the control API and its records live in LAB.\n\
         accounts {{\n  \
           SERVICES: {{ jetstream: enabled, users: [ {{ user: \"{SERVICES_USER}\", password: \"{services}\" }} ] }}\n  \
           LAB: {{ users: [ {{ user: \"{user}\", password: \"{password}\" }} ] }}\n\
         }}\n\
         no_auth_user: \"{SERVICES_USER}\"\n",
        services = secret(),
        user = credentials.user,
        password = credentials.password,
    );
    (text, credentials)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_config_has_its_own_password_and_the_debug_form_hides_it() {
        let (a, ca) = config();
        let (_, cb) = config();
        assert_ne!(ca.password, cb.password);
        assert_eq!(ca.password.len(), 64);
        assert!(a.contains(&ca.password) && a.contains("no_auth_user"));
        assert!(!format!("{ca:?}").contains(&ca.password));
    }
}
