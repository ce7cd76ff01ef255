//! The DLQ ledger: the instant each failure was first dead-lettered at, shared by every replica
//! of every service on the server through one JetStream key-value bucket.
//!
//! A DLQ entry's `Nats-Msg-Id` is locked to `<idempotency_key>:dlq:<unix_ns>` so that repeated
//! writes of one failure collapse under the DLQ stream's dedup. With the instant taken from the
//! clock at each write, only a publish retried by the same execution collapses: a failure run
//! again after a crash (another replica takes the redelivery because the server lost the first
//! one's ack) would write a second entry. The ledger gives the failure one instant wherever and
//! however often it runs: the first execution records its instant under the failure's identity
//! (`create`, first writer wins), a later one reads it back and writes the same `Nats-Msg-Id`
//! and `occurred_at`, which the stream drops.
//!
//! A failure's identity is what stays the same across redeliveries and replicas: for a node that
//! failed, the delivery's idempotency key, the edges taken inside it and the node; for a message
//! with no usable envelope, its place in the inbound stream (stream, sequence, stored instant).
//!
//! When the bucket cannot be reached within [`PATIENCE`] the clock's instant is used (the entry
//! is then at-least-once, as without a ledger), logged and counted
//! ([`RuntimeStats::dlq_ledger_misses`](crate::runtime::RuntimeStats)).

use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use sha2::{Digest, Sha256};

use crate::runtime::service::Runtime;
use crate::wire::GoTime;

/// The DLQ ledger bucket's name (its stream is `KV_triggers_dlq_ledger`). A service without
/// JetStream rights on it writes its entries with the clock's instant, and counts each in
/// [`RuntimeStats::dlq_ledger_misses`](crate::runtime::RuntimeStats).
pub const BUCKET: &str = "triggers_dlq_ledger";
/// How long an instant is remembered: longer than a crashed replica's ack wait and than the DLQ
/// stream's duplicate window (the emulator's is two minutes), beyond which a repeated id would
/// not be dropped anyway.
pub const MAX_AGE: Duration = Duration::from_secs(15 * 60);
/// The bucket's size bound (an entry is about 150 bytes: some 400 000 failures in 15 minutes).
pub const MAX_BYTES: i64 = 64 * 1024 * 1024;
/// How long a dead-lettering waits for the bucket before using the clock's instant.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

/// Where a failure comes from, the same in every execution of it.
pub(crate) fn identity(parts: &[&str]) -> String {
    parts.join("\n")
}

/// A message's place in its inbound stream: how many times it was delivered, and the identity of
/// the failures found before any node runs, written out only when one needs it (the rare path).
pub(crate) struct Origin<'a> {
    info: Option<jetstream::message::Info<'a>>,
    identity: std::sync::OnceLock<String>,
}

impl<'a> Origin<'a> {
    pub(crate) fn of(msg: &'a jetstream::Message) -> Self {
        Origin {
            info: msg.info().ok(),
            identity: std::sync::OnceLock::new(),
        }
    }

    /// Which delivery of the message this is, from 1.
    pub(crate) fn delivered(&self) -> i64 {
        self.info.as_ref().map_or(1, |i| i.delivered).max(1)
    }

    /// The identity: stream, sequence and publication instant; empty for a message that is not a
    /// JetStream delivery (then the clock's instant stands in).
    pub(crate) fn identity(&self) -> &str {
        self.identity.get_or_init(|| match &self.info {
            Some(info) => format!(
                "{}\n{}\n{}",
                info.stream,
                info.stream_sequence,
                info.published.unix_timestamp_nanos()
            ),
            None => String::new(),
        })
    }
}

/// The bucket key of a failure of `service`: 64 hex digits (any identity makes a valid key).
/// The kind is not part of it: a failure that reads differently when run again (a timeout the
/// second time) is still the same failure, and its first entry stands.
fn key(service: &str, identity: &str) -> String {
    let mut h = Sha256::new();
    for part in [service, identity] {
        h.update(part.as_bytes());
        h.update(b"\n");
    }
    hex::encode(h.finalize())
}

async fn open(js: &jetstream::Context) -> Result<kv::Store, String> {
    if let Ok(store) = js.get_key_value(BUCKET).await {
        return Ok(store);
    }
    match js
        .create_key_value(kv::Config {
            bucket: BUCKET.to_owned(),
            description: "triggers-lab SDK: the first instant of each dead-lettered failure"
                .to_owned(),
            history: 1,
            max_age: MAX_AGE,
            max_bytes: MAX_BYTES,
            // The server counts headers in a message's size: room for them beside the digits.
            max_value_size: 1024,
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
    {
        Ok(store) => Ok(store),
        // Another replica created it meanwhile.
        Err(create) => js
            .get_key_value(BUCKET)
            .await
            .map_err(|_| format!("cannot create the bucket {BUCKET}: {create}")),
    }
}

impl Runtime {
    /// The instant the failure with `identity` was first dead-lettered at: `now` when this is
    /// the first time (recorded for the next), the recorded one otherwise.
    pub(crate) async fn first_instant(&self, identity: &str, now: GoTime) -> GoTime {
        if identity.is_empty() {
            return now;
        }
        let key = key(self.service(), identity);
        match tokio::time::timeout(PATIENCE, self.ledger_exchange(&key, now)).await {
            Ok(Ok(instant)) => instant,
            Ok(Err(e)) => self.ledger_miss(&e, now),
            Err(_) => self.ledger_miss(&format!("no answer within {PATIENCE:?}"), now),
        }
    }

    fn ledger_miss(&self, reason: &str, now: GoTime) -> GoTime {
        self.stats.dlq_ledger_misses.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            "the DLQ ledger ({BUCKET}) is out of reach ({reason}): this entry's Nats-Msg-Id uses the clock, so a crash that makes another replica run the failure again would write it twice"
        );
        now
    }

    /// Records `now` under `key` unless an instant is there already; retries while NATS is away
    /// (the caller bounds the wait).
    async fn ledger_exchange(&self, key: &str, now: GoTime) -> Result<GoTime, String> {
        let mut pause = Duration::from_millis(50);
        loop {
            match self.ledger_once(key, now).await {
                Ok(instant) => return Ok(instant),
                Err((e, retry)) if retry => {
                    tracing::debug!("DLQ ledger: {e}; trying again in {pause:?}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// One try: `Err((reason, worth retrying))`.
    async fn ledger_once(&self, key: &str, now: GoTime) -> Result<GoTime, (String, bool)> {
        let store = self
            .ledger
            .get_or_try_init(|| open(&self.js))
            .await
            .map_err(|e| (e, true))?;
        let recorded = now.unix_nanos().to_string();
        match store.create(key, recorded.into()).await {
            Ok(_) => Ok(now),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                let value = store
                    .get(key)
                    .await
                    .map_err(|e| (format!("reading {key}: {e}"), true))?;
                // Gone between the two calls (aged out): this execution is the first again.
                let Some(value) = value else { return Ok(now) };
                std::str::from_utf8(&value)
                    .ok()
                    .and_then(|text| text.parse::<i128>().ok())
                    .and_then(|ns| GoTime::from_unix_nanos(ns).ok())
                    .ok_or_else(|| {
                        (
                            format!("{key} holds {value:?}, not an instant in nanoseconds"),
                            false,
                        )
                    })
            }
            Err(e) if e.kind() == kv::CreateErrorKind::InvalidKey => {
                Err((format!("key {key}: {e}"), false))
            }
            // Full (MAX_BYTES of failures within MAX_AGE): it stays full for minutes, and
            // waiting PATIENCE at every dead-lettering would stall each one 10 s.
            Err(e) if crate::transport::refused_as_full(&e) => {
                Err((format!("recording {key}: {e}"), false))
            }
            Err(e) => Err((format!("recording {key}: {e}"), true)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_valid_bucket_keys_and_tell_failures_apart() {
        let a = key("shop", &identity(&["run-1:in", "e1", "charge"]));
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(a, key("shop", &identity(&["run-1:in", "e1", "charge"])));
        for other in [
            key("mail", &identity(&["run-1:in", "e1", "charge"])),
            key("shop", &identity(&["run-1:in", "e2", "charge"])),
            key("shop", &identity(&["run-1:in", "e1", "refund"])),
        ] {
            assert_ne!(a, other);
        }
    }

    /// A full bucket is told from a passing failure, on a real server: a key-value bucket of a
    /// kilobyte takes writes until it refuses one, and that refusal reads as full; a key already
    /// there does not.
    #[tokio::test]
    async fn a_full_bucket_is_no_reason_to_wait() {
        let server = natsbox::NatsServer::start(natsbox::NatsConfig {
            backend: natsbox::Backend::Binary,
            ..Default::default()
        })
        .await
        .expect("a nats-server binary");
        let client = async_nats::connect(server.url()).await.unwrap();
        let js = jetstream::new(client);
        let store = js
            .create_key_value(kv::Config {
                bucket: "tiny".into(),
                history: 1,
                max_bytes: 1024,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut refused = None;
        for i in 1..100 {
            if let Err(e) = store.create(&format!("k{i}"), vec![b'x'; 100].into()).await {
                refused = Some(e);
                break;
            }
        }
        let refused =
            refused.expect("a kilobyte bucket refuses a write before a hundred of 100 bytes");
        assert!(crate::transport::refused_as_full(&refused), "{refused}");
        let again = store.create("k1", "y".into()).await.unwrap_err();
        assert_eq!(again.kind(), kv::CreateErrorKind::AlreadyExists, "{again}");
        assert!(!crate::transport::refused_as_full(&again), "{again}");
    }
}
