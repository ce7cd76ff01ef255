//! Who may use the control API: the per-instance token requests carry, and what a client needs
//! to reach a closed API.

use super::{RECORDS_SUBJECT, TOKEN_HEADER};

/// A per-instance secret for the control API: requests carry it in [`TOKEN_HEADER`], and the
/// records go to a subject that includes it. Its `Debug` form hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct ControlToken(String);

impl ControlToken {
    /// 32 random bytes (hex) from the thread's CSPRNG.
    #[must_use]
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        rand::fill(&mut bytes[..]);
        ControlToken(hex::encode(bytes))
    }

    /// A token someone else generated (read from `up`'s discovery file, say).
    #[must_use]
    pub fn new(token: impl Into<String>) -> Self {
        ControlToken(token.into())
    }

    /// The token's text, to write down for other processes.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this token, in time that does not depend on where they differ.
    #[must_use]
    pub fn matches(&self, given: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), given.as_bytes());
        // The length is no secret (every token is 64 hex digits); the contents are.
        a.len() == b.len()
            && std::hint::black_box(a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
    }
}

impl std::fmt::Debug for ControlToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlToken(<redacted>)")
    }
}

/// The subject records are published on: [`RECORDS_SUBJECT`], then `.<token>` when there is one,
/// so only who holds the token knows where to listen.
#[must_use]
pub fn records_subject(token: Option<&ControlToken>) -> String {
    match token {
        Some(t) => format!("{RECORDS_SUBJECT}.{}", t.as_str()),
        None => RECORDS_SUBJECT.to_string(),
    }
}

/// What a client needs to reach a closed control API: the control account's credentials (when
/// the server has one) and the token (when the emulator has one). The default reaches an open
/// one.
#[derive(Debug, Clone, Default)]
pub struct ControlAccess {
    /// Log in to the server's control account as this user.
    pub credentials: Option<natsbox::ControlCredentials>,
    /// Send this token with every request, and follow the records on its subject.
    pub token: Option<ControlToken>,
}

/// Why a request is refused for want of the token; `None` when it may go on.
pub(super) fn refuse(
    token: Option<&ControlToken>,
    headers: Option<&async_nats::HeaderMap>,
) -> Option<String> {
    let token = token?;
    let given = headers
        .and_then(|h| h.get(TOKEN_HEADER))
        .map(async_nats::HeaderValue::as_str);
    match given {
        Some(given) if token.matches(given) => None,
        Some(_) => Some(format!(
            "the {TOKEN_HEADER} header does not match this emulator's token: use the one its \
             `triggers-lab up` wrote to its discovery file (the triggers-lab CLI reads it)"
        )),
        None => Some(format!(
            "this emulator's control API needs its token in the {TOKEN_HEADER} header: use the \
             triggers-lab CLI (deploy, trigger, advance, watch), which reads it from the \
             discovery file `triggers-lab up` writes"
        )),
    }
}
