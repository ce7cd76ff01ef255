//! The emulator's own JetStream streams (the DLQ and the completion events, so dedup and
//! restarts are the server's business), and what an earlier emulator left on the server.

use async_nats::jetstream;
use serde::Serialize;
use triggers_sdk::transport;

use crate::config::EmulatorConfig;
use crate::error::EmulatorError;

/// The JetStream stream that holds every DLQ publish, so `Nats-Msg-Id` dedup is the server's own.
pub const DLQ_STREAM: &str = "TRIGGERS_DLQ";
/// The JetStream stream that holds every completion event, so none is lost to a server restart
/// (an SDK that publishes through JetStream gets an ack; a plain publish is stored as well).
pub const EVENTS_STREAM: &str = "TRIGGERS_EVENTS";

/// Creates (or reuses) a stream over `subjects`; returns the sequence its next message will
/// get, from which the emulator follows it.
pub(crate) async fn stream_end(
    js: &jetstream::Context,
    name: &str,
    subjects: &str,
    config: &EmulatorConfig,
) -> Result<u64, EmulatorError> {
    // A cluster still electing its leaders answers late or "temporarily unavailable": patience.
    let stream_config = jetstream::stream::Config {
        name: name.into(),
        subjects: vec![subjects.into()],
        duplicate_window: config.dlq_duplicate_window.min(config.stream_max_age),
        max_age: config.stream_max_age,
        max_bytes: config.stream_max_bytes,
        num_replicas: config.stream_replicas.max(1),
        ..Default::default()
    };
    let stream = transport::patiently("create a stream", || {
        transport::reserving("the emulator", stream_config.clone(), |c| {
            js.get_or_create_stream(c)
        })
    })
    .await
    .map_err(|e| EmulatorError::nats("create a stream", format!("{name}: {e}")))?;
    // The stream's state as the server answered the lookup or the creation: asking again cost a
    // round trip and told nothing newer worth waiting for.
    Ok(stream.cached_info().state.last_sequence + 1)
}

/// What an earlier emulator left on the server, found when this one started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FoundAtStart {
    /// The stream.
    pub stream: String,
    /// How many messages it held (for the DLQ and events streams, the last sequence: what an
    /// earlier emulator saw, never replayed).
    pub messages: u64,
    /// Whether they were removed (the deliveries waiting in a service's inbound stream, with
    /// [`EmulatorConfig::clean_start`]), or only skipped.
    pub removed: bool,
}

impl std::fmt::Display for FoundAtStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.removed {
            write!(
                f,
                "removed {} delivery(ies) an earlier emulator left waiting in stream {}",
                self.messages, self.stream
            )
        } else {
            write!(
                f,
                "stream {} holds {} message(s) from before this emulator: not replayed",
                self.stream, self.messages
            )
        }
    }
}

/// Empties every service's inbound stream (`triggers-sources-*`) of what waits in it; returns
/// what was removed.
pub(crate) async fn clean_inbound_streams(js: &jetstream::Context) -> Vec<FoundAtStart> {
    let mut names = js.stream_names();
    let mut found = Vec::new();
    while let Some(name) = futures::StreamExt::next(&mut names).await {
        let Ok(name) = name else { break };
        if !name.starts_with("triggers-sources-") {
            continue;
        }
        let Ok(mut stream) = js.get_stream(&name).await else {
            continue;
        };
        let held = stream.info().await.map(|i| i.state.messages).unwrap_or(0);
        if held == 0 {
            continue;
        }
        match stream.purge().await {
            Ok(purged) => found.push(FoundAtStart {
                stream: name,
                messages: purged.purged,
                removed: true,
            }),
            Err(e) => tracing::warn!(
                stream = name,
                "cannot empty stream {name} of an earlier emulator's deliveries: {e}"
            ),
        }
    }
    found
}
