//! The bridge between the wire module's transport-neutral [`Headers`] and async-nats, and the
//! watch every connection keeps on messages it drops.
//!
//! async-nats panics on a header name with a control character, a non-ASCII byte or `:`, and on a
//! value with CR or LF; these conversions check first and return an error instead.
//!
//! A core-NATS subscription holds at most `ConnectOptions::subscription_capacity` messages (65 536
//! by default) that its reader has not taken yet; async-nats drops whatever arrives beyond that
//! and reports `Event::SlowConsumer` to the connection's event callback, nothing else. A
//! [`DropCounter`] in that callback turns those reports into a number a test, a report or a
//! screen can show.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::{HeaderMap, HeaderName};

use crate::wire::Headers;

/// A header that NATS cannot carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("header {name:?} cannot be sent on NATS: {reason}")]
pub struct HeaderError {
    /// The header name.
    pub name: String,
    /// What is wrong with it or its value.
    pub reason: &'static str,
}

/// Checks that NATS can carry a header: the same rules async-nats enforces by panicking (a name of
/// printable ASCII without `:`, not empty; a value without CR or LF).
///
/// # Errors
/// When it cannot, saying why.
pub fn check_header(name: &str, value: &str) -> Result<(), HeaderError> {
    if name.is_empty() || name.contains(|c: char| !c.is_ascii_graphic() || c == ':') {
        return Err(HeaderError {
            name: name.to_owned(),
            reason: "a name must be printable ASCII without ':' or spaces, and not empty",
        });
    }
    check_value(name, value)
}

fn check_value(name: &str, value: &str) -> Result<(), HeaderError> {
    if value.contains(['\r', '\n']) {
        return Err(HeaderError {
            name: name.to_owned(),
            reason: "a value must not contain CR or LF",
        });
    }
    Ok(())
}

/// Converts headers for publishing, keeping every name's spelling.
///
/// # Errors
/// When a name or a value cannot be carried by NATS ([`check_header`]).
pub fn to_nats(headers: &Headers) -> Result<HeaderMap, HeaderError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers.iter() {
        match known_name(name) {
            Some(known) => {
                check_value(name, value)?;
                map.append(known, value);
            }
            None => {
                check_header(name, value)?;
                map.append(name, value);
            }
        }
    }
    Ok(map)
}

/// A name the contract uses, spelt as it spells it, as an async-nats name that needs neither a
/// check nor a copy (async-nats checks and copies every other name it is given: the envelope's
/// ten were a third of the cost of publishing an event).
fn known_name(name: &str) -> Option<HeaderName> {
    crate::wire::header::names::ALL
        .into_iter()
        .find(|known| *known == name)
        .map(HeaderName::from_static)
}

/// Counts the messages a NATS connection dropped because one of its subscriptions fell behind
/// (async-nats' slow-consumer events). Cheap to clone: clones share the count.
///
/// Give it the connection's events with [`DropCounter::observe`] from
/// `ConnectOptions::event_callback`. The count is a floor: async-nats reports each dropped message
/// as one event through a queue of 128, and drops the report too when that queue is full.
#[derive(Debug, Clone, Default)]
pub struct DropCounter {
    dropped: Arc<AtomicU64>,
    disconnects: Arc<AtomicU64>,
}

impl DropCounter {
    /// A counter at zero.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Messages dropped so far (at least this many).
    #[must_use]
    pub fn count(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Counts `n` messages missed otherwise than by a slow subscription (a stored message the
    /// client cannot read, skipped), so that they too make what was seen incomplete.
    pub fn add(&self, n: u64) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// How many times the connection was lost (it reconnects by itself): whatever was published
    /// on plain subjects meanwhile did not reach it, and the server's cutting off a client that
    /// reads too slowly (its pending bytes past `max_pending`) is such a loss too.
    #[must_use]
    pub fn disconnects(&self) -> u64 {
        self.disconnects.load(Ordering::Relaxed)
    }

    /// Counts `event` if it is a slow-consumer event, and logs it (a warning at the 1st, 2nd,
    /// 4th, 8th... drop, so a flood does not flood the log too); returns whether it was one.
    /// `connection` names the connection in the log.
    pub fn observe(&self, event: &async_nats::Event, connection: &str) -> bool {
        if matches!(event, async_nats::Event::Disconnected) {
            // Counted, and left to the caller to log.
            self.disconnects.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let async_nats::Event::SlowConsumer(sid) = event else {
            return false;
        };
        let total = self
            .dropped
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        if total.is_power_of_two() {
            tracing::warn!(
                connection,
                subscription = sid,
                dropped = total,
                "NATS dropped a message: subscription {sid} is a slow consumer (its reader fell \
                 more than the subscription capacity behind); {total} dropped so far"
            );
        } else {
            tracing::debug!(
                connection,
                subscription = sid,
                dropped = total,
                "NATS dropped a message"
            );
        }
        true
    }
}

/// Converts received headers: names keep their spelling, sorted; the values of one name stay in
/// the order they came in, so [`Headers::get`] gives the first one sent, as Go's `Header.Get`.
#[must_use]
pub fn from_nats(map: Option<&HeaderMap>) -> Headers {
    let Some(map) = map else {
        return Headers::new();
    };
    let mut pairs: Vec<(String, String)> = Vec::with_capacity(map.len());
    for (name, values) in map.iter() {
        let name: &str = name.as_ref();
        for value in values {
            pairs.push((name.to_owned(), value.as_str().to_owned()));
        }
    }
    // async-nats keeps names in a HashMap (an order of its own per process) and each name's
    // values in a list in the order received: sorted by name for a stable order in records and
    // tests, and stably, so that a repeated name keeps its values' order.
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    pairs.into_iter().collect()
}

/// Waits until the server has processed everything this client sent before the call: its
/// subscriptions included.
///
/// async-nats' `flush` only writes the client's buffer to the socket; a subscription made just
/// before it may not be in place yet when another connection publishes. A message to a fresh
/// inbox, received back, proves the server has read every earlier command of this connection (it
/// reads them in order).
///
/// # Errors
/// When the subscription or the publish fails, or the message does not come back in 10 s.
pub async fn round_trip(client: &async_nats::Client) -> Result<(), RoundTripError> {
    use futures::StreamExt;
    let inbox = client.new_inbox();
    let mut sub = client
        .subscribe(inbox.clone())
        .await
        .map_err(RoundTripError::Subscribe)?;
    client
        .publish(inbox, bytes::Bytes::new())
        .await
        .map_err(RoundTripError::Publish)?;
    match tokio::time::timeout(ROUND_TRIP_WAIT, sub.next()).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(RoundTripError::Closed),
        Err(_) => Err(RoundTripError::NoEcho(ROUND_TRIP_WAIT)),
    }
}

/// `bytes` random bytes as lowercase hex: the ids the runtime and the emulator make up (trace
/// and span ids, run ids, private subjects), from one place. Not for anything that must be
/// reproduced from a seed (the fuzzer draws its own).
#[must_use]
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::fill(&mut buf[..]);
    hex::encode(buf)
}

/// How long [`round_trip`] waits for its message to come back.
const ROUND_TRIP_WAIT: Duration = Duration::from_secs(10);

/// Why a [`round_trip`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RoundTripError {
    /// The subscription to a fresh inbox failed.
    #[error("cannot subscribe: {0}")]
    Subscribe(#[source] async_nats::SubscribeError),
    /// The publish to it failed.
    #[error("cannot publish: {0}")]
    Publish(#[source] async_nats::PublishError),
    /// The connection closed before the message came back.
    #[error("the connection closed")]
    Closed,
    /// The message did not come back in time.
    #[error("the server did not echo a message within {} s", .0.as_secs())]
    NoEcho(Duration),
}

/// How long a JetStream request that failed for a passing reason (a timeout, a cluster electing
/// its leaders or still forming) is tried again before the error stands.
pub const JETSTREAM_PATIENCE: Duration = Duration::from_secs(30);

/// An error JetStream may not give again in a moment: no answer in time, or "temporarily
/// unavailable" (a leader election, a cluster forming, a server starting).
pub trait Passing {
    /// Whether trying again in a moment may succeed.
    fn passing(&self) -> bool;
}

fn unavailable(e: &async_nats::jetstream::Error) -> bool {
    use async_nats::jetstream::ErrorCode;
    e.code() == 503
        || [
            ErrorCode::CLUSTER_NOT_AVAILABLE,
            ErrorCode::CLUSTER_NOT_ACTIVE,
        ]
        .contains(&e.error_code())
}

impl Passing for async_nats::jetstream::stream::ConsumerError {
    fn passing(&self) -> bool {
        use async_nats::jetstream::stream::ConsumerErrorKind as K;
        match self.kind() {
            K::TimedOut | K::Request => true,
            K::JetStream(e) => unavailable(&e),
            _ => false,
        }
    }
}

impl Passing for async_nats::jetstream::context::CreateStreamError {
    fn passing(&self) -> bool {
        use async_nats::jetstream::context::CreateStreamErrorKind as K;
        match self.kind() {
            K::TimedOut | K::JetStreamUnavailable => true,
            K::JetStream(e) => unavailable(&e),
            _ => false,
        }
    }
}

impl Passing for async_nats::jetstream::context::RequestError {
    fn passing(&self) -> bool {
        use async_nats::jetstream::context::RequestErrorKind as K;
        matches!(self.kind(), K::TimedOut | K::NoResponders)
    }
}

impl Passing for async_nats::jetstream::context::GetStreamError {
    fn passing(&self) -> bool {
        use async_nats::jetstream::context::GetStreamErrorKind as K;
        match self.kind() {
            K::Request => true,
            K::JetStream(e) => unavailable(&e),
            _ => false,
        }
    }
}

/// An error that says the JetStream server cannot reserve the storage a stream asks for
/// (JetStream's error 10047, "insufficient storage resources available").
pub trait StorageRefusal {
    /// Whether the server refused the stream's `max_bytes` for want of storage.
    fn storage_refused(&self) -> bool;
}

impl StorageRefusal for async_nats::jetstream::context::CreateStreamError {
    fn storage_refused(&self) -> bool {
        use async_nats::jetstream::context::CreateStreamErrorKind as K;
        matches!(
            self.kind(),
            K::JetStream(e)
                if e.error_code() == async_nats::jetstream::ErrorCode::STORAGE_RESOURCES_EXCEEDED
        )
    }
}

/// Whether an error (anywhere in its chain) is a stream's or bucket's refusal of a message for
/// being full (`discard: new` at `max_bytes` or `max_msgs`). JetStream says it only in words:
/// "maximum bytes exceeded", "maximum messages exceeded".
#[must_use]
pub fn refused_as_full(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(err) = cause {
        let text = err.to_string();
        if text.contains("maximum bytes exceeded") || text.contains("maximum messages exceeded") {
            return true;
        }
        cause = err.source();
    }
    false
}

/// The smallest `max_bytes` [`reserving`] goes down to.
pub const MIN_STREAM_BYTES: i64 = 1 << 20;

// The runtime's and the emulator's JetStream plumbing, not a service author's: public only with
// the `harness` feature, which the emulator (the one other crate that needs it) enables.
#[cfg(feature = "harness")]
pub use plumbing::{patiently, reserving};
#[cfg(not(feature = "harness"))]
pub(crate) use plumbing::{patiently, reserving};

mod plumbing {
    #![cfg_attr(
        not(feature = "harness"),
        expect(
            unreachable_pub,
            reason = "re-exported as pub(crate) without the harness feature"
        )
    )]

    use std::time::Duration;

    use super::{JETSTREAM_PATIENCE, MIN_STREAM_BYTES, Passing, StorageRefusal};

    /// `request` until it succeeds, fails for good, or [`JETSTREAM_PATIENCE`] has passed, with a
    /// pause doubling from 100 ms to 2 s between tries: a service that starts (or registers again)
    /// while its cluster elects a leader waits for it rather than failing.
    pub async fn patiently<T, E, F>(what: &str, mut request: impl FnMut() -> F) -> Result<T, E>
    where
        E: Passing + std::fmt::Display,
        F: std::future::Future<Output = Result<T, E>>,
    {
        let start = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(100);
        loop {
            match request().await {
                Err(e) if e.passing() && start.elapsed() + pause < JETSTREAM_PATIENCE => {
                    tracing::debug!("cannot {what} yet, trying again in {pause:?}: {e}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                other => return other,
            }
        }
    }

    /// Makes a stream with `make(config)`, halving its `max_bytes` (down to [`MIN_STREAM_BYTES`])
    /// while the server answers that it cannot reserve that much storage (JetStream's error 10047),
    /// and warns with the size it settled on.
    ///
    /// A JetStream server reserves each stream's `max_bytes` of its storage (by default three
    /// quarters of the free disk): on a small disk, or with many services, a bound that each stream
    /// alone could keep is more than the server can hand out, and every later stream would be
    /// refused, every service after the first few unable to register.
    ///
    /// # Errors
    /// `make`'s error: any other, or this one at [`MIN_STREAM_BYTES`].
    pub async fn reserving<T, E, F>(
        what: &str,
        mut config: async_nats::jetstream::stream::Config,
        mut make: impl FnMut(async_nats::jetstream::stream::Config) -> F,
    ) -> Result<T, E>
    where
        E: StorageRefusal,
        F: std::future::Future<Output = Result<T, E>>,
    {
        let asked = config.max_bytes;
        loop {
            match make(config.clone()).await {
                Err(e) if e.storage_refused() && config.max_bytes > MIN_STREAM_BYTES => {
                    config.max_bytes = (config.max_bytes / 2).max(MIN_STREAM_BYTES);
                }
                Ok(made) => {
                    if config.max_bytes != asked {
                        tracing::warn!(
                            "the JetStream server cannot reserve {asked} bytes for {what} (stream {}); \
                             it holds at most {} bytes instead: give the server more disk (its store \
                             directory) or ask for less",
                            config.name,
                            config.max_bytes
                        );
                    }
                    return Ok(made);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// `options`, logging in with the user and password (or the token) written in `url`
/// (`nats://user:password@host:4222`, `nats://token@host:4222`; of a comma-separated list, the
/// first that has any), unless `options` already has credentials of their own to win.
///
/// Go's, Python's and Java's NATS clients read credentials from the URL; async-nats does not
/// (nats-io/nats.rs#1623), so everything here that connects to a URL it was given goes through
/// this: a test's URL on a shared nats-server carries its account's user (`Harness::url`).
#[must_use]
pub fn with_url_credentials(
    options: async_nats::ConnectOptions,
    url: &str,
) -> async_nats::ConnectOptions {
    match url_credentials(url) {
        Some(UrlCredentials::User { user, password }) => options.user_and_password(user, password),
        Some(UrlCredentials::Token(token)) => options.token(token),
        None => options,
    }
}

/// Connects to `url` with the credentials it carries ([`with_url_credentials`]).
///
/// # Errors
/// As `async_nats::connect`.
pub async fn connect(url: &str) -> Result<async_nats::Client, async_nats::ConnectError> {
    with_url_credentials(async_nats::ConnectOptions::new(), url)
        .connect(url)
        .await
}

/// `url` with its password (or token) replaced by `***`, for messages and logs.
#[must_use]
pub fn redact_url(url: &str) -> String {
    url.split(',')
        .map(|one| match userinfo(one) {
            Some((scheme, info, rest)) => match info.split_once(':') {
                Some((user, _)) => format!("{scheme}{user}:***@{rest}"),
                None => format!("{scheme}***@{rest}"),
            },
            None => one.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[derive(Debug, PartialEq, Eq)]
enum UrlCredentials {
    User { user: String, password: String },
    Token(String),
}

/// `(scheme with "://", userinfo, the rest)` of one URL that has a userinfo.
fn userinfo(url: &str) -> Option<(&str, &str, &str)> {
    let url = url.trim();
    let (scheme, after) = match url.find("://") {
        Some(at) => url.split_at(at + 3),
        None => ("", url),
    };
    let authority_end = after.find('/').unwrap_or(after.len());
    let at = after[..authority_end].rfind('@')?;
    Some((scheme, &after[..at], &after[at + 1..]))
}

fn url_credentials(url: &str) -> Option<UrlCredentials> {
    url.split(',').find_map(|one| {
        let (_, info, _) = userinfo(one)?;
        Some(match info.split_once(':') {
            Some((user, password)) => UrlCredentials::User {
                user: percent_decode(user),
                password: percent_decode(password),
            },
            None => UrlCredentials::Token(percent_decode(info)),
        })
    })
}

/// `%XX` escapes decoded (a malformed one is kept as written).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_nats_cannot_carry_and_keeps_spelling() {
        let mut h = Headers::new();
        h.insert("X-Triggers-Flow-Id", "f");
        h.insert("nats-msg-id", "k");
        let back = from_nats(Some(&to_nats(&h).unwrap()));
        assert_eq!(back.get("X-Triggers-Flow-Id"), Some("f"));
        assert!(back.iter().any(|(n, _)| n == "nats-msg-id"));
        for (name, value) in [
            ("bad name", "v"),
            ("a:b", "v"),
            ("é", "v"),
            ("", "v"),
            ("ok", "a\nb"),
            ("ok", "a\rb"),
        ] {
            let mut h = Headers::new();
            h.insert(name, value);
            assert!(to_nats(&h).is_err(), "{name:?} {value:?}");
            assert!(check_header(name, value).is_err(), "{name:?} {value:?}");
        }
    }

    #[test]
    fn the_contract_names_go_out_as_any_other_name_would() {
        for name in &crate::wire::header::names::ALL {
            assert!(known_name(name).is_some(), "{name} is made without a check");
            let mut h = Headers::new();
            h.append(*name, "v1");
            h.append(*name, "v2");
            h.append(name.to_ascii_lowercase(), "v3");
            let map = to_nats(&h).unwrap();
            let mut by_str = HeaderMap::new();
            by_str.append(*name, "v1");
            by_str.append(*name, "v2");
            by_str.append(name.to_ascii_lowercase().as_str(), "v3");
            assert_eq!(map, by_str, "{name}");
            let mut bad = Headers::new();
            bad.append(*name, "a\r\nb");
            assert!(to_nats(&bad).is_err(), "{name}: a value with CR LF");
        }
    }

    #[test]
    fn a_repeated_name_gives_its_first_value_as_go_does() {
        let mut map = HeaderMap::new();
        map.append("X-Triggers-Run-Id", "z");
        map.append("X-Triggers-Flow-Id", "second-sorted-last");
        map.append("X-Triggers-Flow-Id", "a-sent-second");
        map.append("A-First", "1");
        let back = from_nats(Some(&map));
        assert_eq!(back.get("X-Triggers-Flow-Id"), Some("second-sorted-last"));
        let names: Vec<&str> = back.iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "A-First",
                "X-Triggers-Flow-Id",
                "X-Triggers-Flow-Id",
                "X-Triggers-Run-Id"
            ]
        );
    }

    proptest::proptest! {
        /// Whatever text a header is given: either check_header refuses it, or async-nats takes
        /// it without panicking.
        #[test]
        fn a_checked_header_never_panics_async_nats(name in "\\PC{0,12}", value in "(\\PC|\r|\n){0,12}") {
            if check_header(&name, &value).is_ok() {
                let mut map = HeaderMap::new();
                map.insert(name.as_str(), value.as_str());
                proptest::prop_assert_eq!(map.get(name.as_str()).map(|v| v.as_str()), Some(value.as_str()));
            }
        }
    }

    #[test]
    fn the_counter_counts_slow_consumer_events_only() {
        let drops = DropCounter::new();
        let shared = drops.clone();
        assert!(!drops.observe(&async_nats::Event::Disconnected, "test"));
        for _ in 0..3 {
            assert!(shared.observe(&async_nats::Event::SlowConsumer(7), "test"));
        }
        assert_eq!(drops.count(), 3);
    }

    #[derive(Debug)]
    struct Failure {
        passing: bool,
    }

    impl std::fmt::Display for Failure {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "passing: {}", self.passing)
        }
    }

    impl Passing for Failure {
        fn passing(&self) -> bool {
            self.passing
        }
    }

    #[tokio::test]
    async fn a_passing_jetstream_error_is_tried_again_and_a_lasting_one_is_not() {
        let mut tries = 0;
        let got = patiently("test", || {
            tries += 1;
            let n = tries;
            async move {
                if n < 3 {
                    Err(Failure { passing: true })
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(got.unwrap(), 3);

        let mut tries = 0;
        let got: Result<(), Failure> = patiently("test", || {
            tries += 1;
            async { Err(Failure { passing: false }) }
        })
        .await;
        assert!(!got.unwrap_err().passing);
        assert_eq!(tries, 1);
    }

    #[test]
    fn credentials_are_read_from_the_url_and_redacted_from_messages() {
        assert_eq!(
            url_credentials("nats://t1:p%40ss@127.0.0.1:4222"),
            Some(UrlCredentials::User {
                user: "t1".into(),
                password: "p@ss".into()
            })
        );
        assert_eq!(
            url_credentials("nats://a:4222, nats://tok@b:4222"),
            Some(UrlCredentials::Token("tok".into()))
        );
        assert_eq!(url_credentials("nats://127.0.0.1:4222"), None);
        assert_eq!(url_credentials("127.0.0.1:4222/x@y"), None);
        assert_eq!(
            redact_url("nats://t1:secret@127.0.0.1:4222"),
            "nats://t1:***@127.0.0.1:4222"
        );
        assert_eq!(redact_url("nats://h:1"), "nats://h:1");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }
}
