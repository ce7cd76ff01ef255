//! The services' durable consumers, read from the JetStream API once a service heartbeats (its
//! start-up is done: the consumers are in place) and held to protocol.md §4: one durable
//! `triggers-<service>-<safe-subject>` per NATS source subject, filtered on that subject, with
//! `ack_policy: explicit`, a bounded `max_deliver` and `max_ack_pending`, and an `ack_wait`
//! between 1 s and a day. Checked once per registration.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::AckPolicy;
use triggers_sdk::wire::subject;

use crate::conformance::Violation;
use crate::emulator::Shared;
use crate::recorder::Body;
use crate::state::State;

/// How long one JetStream API request may take.
const PATIENCE: Duration = Duration::from_secs(5);

impl Shared {
    /// A heartbeat of `service`: its consumers are read, once per registration.
    pub(crate) fn heartbeat_seen(&self, state: &mut State, service: &str) {
        if !state.registry.consumers_due(service) {
            return;
        }
        let Some(manifest) = state.registry.view().manifests.get(service).cloned() else {
            return;
        };
        let sources: Vec<String> = crate::release::nats_sources(&manifest)
            .into_iter()
            .map(str::to_owned)
            .collect();
        if sources.is_empty() {
            return;
        }
        let queued = self.consumer_checks.try_send((service.to_owned(), sources));
        if queued.is_err() {
            tracing::warn!(
                service,
                "the consumers of {service} were not read: {QUEUE} services wait already"
            );
        }
    }
}

/// Services waiting for their consumers to be read, at most.
pub(crate) const QUEUE: usize = 1024;

/// Reads the consumers of each service queued, one service after the other (in the order they
/// heartbeat).
pub(crate) async fn serve(
    shared: Arc<Shared>,
    mut queue: tokio::sync::mpsc::Receiver<(String, Vec<String>)>,
) {
    while let Some((service, sources)) = queue.recv().await {
        let mut found = Vec::new();
        for source in &sources {
            found.extend(check(&shared, &service, source).await);
        }
        let mut state = shared.lock();
        shared.add_violations(&mut state, found);
        state.counts.consumers_read += 1;
        drop(state);
        shared.notify();
    }
}

/// The consumer of `service` for `source`, against the protocol.
async fn check(shared: &Shared, service: &str, source: &str) -> Vec<Violation> {
    let Ok(durable) = subject::consumer_name(service, source) else {
        return Vec::new();
    };
    let stream = match tokio::time::timeout(PATIENCE, shared.js.stream_by_subject(source)).await {
        Ok(Ok(name)) => name,
        Ok(Err(e)) => {
            tracing::debug!(service, source, "no stream to read consumers of: {e}");
            return Vec::new();
        }
        Err(_) => return Vec::new(),
    };
    let api = format!("$JS.API.CONSUMER.INFO.{stream}.{durable}");
    let info = async {
        let stream = shared
            .js
            .get_stream(&stream)
            .await
            .map_err(|e| e.to_string())?;
        stream
            .consumer_info(&durable)
            .await
            .map_err(|e| e.to_string())
    };
    let info = match tokio::time::timeout(PATIENCE, info).await {
        Ok(Ok(info)) => info,
        Ok(Err(e)) if e.contains("consumer not found") || e.contains("10014") => {
            return vec![Violation::new(
                "consumer_missing",
                &api,
                format!(
                    "{service} heartbeats (its start-up is done) but stream {stream} has no durable consumer {durable} for its source {source}: a service creates (or binds to) one durable pull consumer per NATS source subject, named triggers-<service>-<safe-subject> (protocol.md §4, wire.md), shared by its replicas; under another name a restart or a replica does not resume it"
                ),
                Arc::from(Vec::new()),
                Body::default(),
            )];
        }
        Ok(Err(e)) => {
            tracing::debug!(service, source, "cannot read consumer {durable}: {e}");
            return Vec::new();
        }
        Err(_) => return Vec::new(),
    };
    let c = &info.config;
    let mut wrong = Vec::new();
    if c.ack_policy != AckPolicy::Explicit {
        wrong.push(format!(
            "ack_policy is {:?}; expected explicit (a message is done only when the service says so)",
            c.ack_policy
        ));
    }
    if c.max_deliver <= 0 {
        wrong.push(format!(
            "max_deliver is {} (unlimited); expected a bound (5 is the default): a message that always fails is redelivered for ever",
            c.max_deliver
        ));
    }
    if c.max_ack_pending <= 0 {
        wrong.push(format!(
            "max_ack_pending is {} (unlimited); expected a bound (the Rust SDK: 4 × its concurrency)",
            c.max_ack_pending
        ));
    }
    if c.ack_wait < Duration::from_secs(1) || c.ack_wait > Duration::from_secs(24 * 3600) {
        wrong.push(format!(
            "ack_wait is {:?}; expected between 1 s and a day (30 s by default)",
            c.ack_wait
        ));
    }
    let filtered = c.filter_subject == source
        || (c.filter_subject.is_empty() && c.filter_subjects == [source.to_owned()]);
    if !filtered {
        wrong.push(format!(
            "filter_subject is {:?} (filter_subjects {:?}); expected {source:?}, one consumer per source subject",
            c.filter_subject, c.filter_subjects
        ));
    }
    let payload = Body::from(serde_json::to_vec(c).unwrap_or_default());
    wrong
        .into_iter()
        .map(|w| {
            Violation::new(
                "consumer_config",
                &api,
                format!("{service}'s consumer {durable} on stream {stream}: {w} (protocol.md §4)"),
                Arc::from(Vec::new()),
                payload.clone(),
            )
        })
        .collect()
}
