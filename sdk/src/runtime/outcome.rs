//! Reporting outcomes: a completion event per executed node, DLQ entries with the right subject,
//! body and `Nats-Msg-Id`. Never `triggers.v2.dlq.source.*` (the builders cannot produce it).

use std::time::Duration;

use async_nats::jetstream::context::{GetStreamByNameErrorKind, PublishErrorKind};

use crate::flow::Node;
use crate::runtime::breaks::{self, ProtocolBreak};
use crate::runtime::confirm::{self, UNCONFIRMED, Unconfirmed};
use crate::runtime::service::Runtime;
use crate::wire::header::{dlq_msg_id, names};
use crate::wire::idempotency;
use crate::wire::subject::{self, FallbackKind};
use crate::wire::{CompletionEvent, DlqEntry, Envelope, GoTime, Headers, RawJson};

/// A node that failed in a way that ends its path.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn node(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
        }
    }
}

/// An outcome could not be reported (NATS unavailable): the message must be redelivered.
#[derive(Debug)]
pub(crate) struct Fatal(pub(crate) String);

impl Runtime {
    /// Publishes the completion event of `node`, reached by `trail` in the delivery of
    /// `envelope`. Where a stream keeps the events it carries a `Nats-Msg-Id` that names that
    /// execution's outcome ([`event_msg_id`]): the same event sent again (a redelivery after a
    /// lost ack reporting a kept outcome, or another replica running the node again after a
    /// crash) is dropped by the stream's dedup instead of settling the node twice. A plain
    /// publish carries no header, as the Go SDK's events: nothing deduplicates it.
    pub(crate) async fn complete(
        &self,
        envelope: &Envelope,
        trail: &[&str],
        node: &Node,
        started_at: GoTime,
        status: &str,
        error: &str,
    ) -> Result<(), Fatal> {
        let flow_version = if breaks::on(ProtocolBreak::HeldFlowVersion) {
            // The newest version held, whatever version the run is.
            self.flows
                .borrow()
                .get(&envelope.flow_id)
                .map_or(envelope.flow_version, |f| f.version)
        } else {
            envelope.flow_version
        };
        let event = CompletionEvent {
            flow_run_id: envelope.flow_run_id.clone(),
            flow_id: envelope.flow_id.clone(),
            flow_version,
            node_id: node.id.clone(),
            node_type: node.node_type.as_str().to_owned(),
            service: self.service().to_owned(),
            started_at,
            finished_at: GoTime::now(),
            status: status.to_owned(),
            error: error.to_owned(),
            trace_id: envelope.trace_id.clone(),
        };
        let subject = subject::flow_events(&envelope.flow_id).map_err(|e| Fatal(e.to_string()))?;
        let bytes = event.to_json().map_err(|e| Fatal(e.to_string()))?;
        // Through JetStream when a stream keeps the events (the emulator's does), so a server
        // restart loses none; a plain publish otherwise. The body is the same either way.
        let msg_id = || event_msg_id(envelope, trail, &node.id, status);
        self.publish_with_stream_id(
            &subject,
            &Headers::new(),
            bytes,
            Target::Auto,
            Some(&msg_id),
        )
        .await
        .map_err(Fatal)
    }

    /// A DLQ entry on `triggers.v2.dlq.<service>.<action>`. `identity` names the failure the
    /// same way in every execution of it ([`ledger`](super::ledger)).
    pub(crate) async fn dead_letter_action(
        &self,
        action: &str,
        kind: &str,
        envelope: &Envelope,
        body: &[u8],
        err_msg: &str,
        identity: &str,
    ) -> Result<(), Fatal> {
        let subject =
            subject::dlq_action(self.service(), action).map_err(|e| Fatal(e.to_string()))?;
        // Boxed: a dead letter is the rare path, and its future (the ledger, the publish) is
        // kilobytes that every delivery's future would otherwise carry and copy.
        Box::pin(self.dead_letter(&subject, kind, envelope, body, err_msg, identity)).await
    }

    /// A DLQ entry on `triggers.v2.dlq.<service>.<kind>`, for a message with no action context.
    pub(crate) async fn dead_letter_fallback(
        &self,
        kind: FallbackKind,
        envelope: &Envelope,
        body: &[u8],
        err_msg: &str,
        identity: &str,
    ) -> Result<(), Fatal> {
        let subject =
            subject::dlq_fallback(self.service(), kind).map_err(|e| Fatal(e.to_string()))?;
        // Boxed, as in dead_letter_action.
        Box::pin(self.dead_letter(&subject, kind.as_str(), envelope, body, err_msg, identity)).await
    }

    /// Writes the entry with the instant its failure was first dead-lettered at (the ledger's),
    /// as `occurred_at` and in the `Nats-Msg-Id`: the same failure run again after a crash
    /// writes the same id, and the DLQ stream keeps one entry.
    async fn dead_letter(
        &self,
        subject: &str,
        kind: &str,
        envelope: &Envelope,
        body: &[u8],
        err_msg: &str,
        identity: &str,
    ) -> Result<(), Fatal> {
        let now = self.first_instant(identity, GoTime::now()).await;
        tracing::warn!(subject, kind, run = %envelope.flow_run_id, "dead-lettered: {err_msg}");
        let entry = DlqEntry {
            kind: kind.to_owned(),
            envelope: envelope.clone(),
            body: RawJson::from_message_body(body),
            err_msg: err_msg.to_owned(),
            occurred_at: now,
        };
        let bytes = entry.to_json().map_err(|e| Fatal(e.to_string()))?;
        let mut headers = Headers::new();
        headers.insert(
            names::NATS_MSG_ID,
            dlq_msg_id(&envelope.idempotency_key, now.unix_nanos()),
        );
        self.publish(subject, &headers, bytes, Target::Auto)
            .await
            .map_err(Fatal)
    }

    /// Publishes `payload` on `subject`: through JetStream, waiting for the ack, when a stream
    /// must store it ([`Target::Stream`]: a hop) or does ([`Target::Auto`]: an event, a DLQ
    /// entry, an output, when some stream captures the subject); else a plain publish, confirmed
    /// once per delivery ([`UNCONFIRMED`]).
    /// Whether a stream captures a subject is asked of JetStream, not guessed from a publish: a
    /// JetStream publish to a subject only plain subscribers listen on gets no ack and would wait
    /// for its timeout.
    ///
    /// While NATS is unreachable (a server restart) it keeps trying for up to a minute, with the
    /// same `Nats-Msg-Id`, rather than fail the message: the handler has already run, and a
    /// redelivery would run it again. A hop for which no stream exists is given a few seconds
    /// (the receiver's stream may be on its way), then fails.
    ///
    /// # Errors
    /// What went wrong, when it could not be published within its patience.
    pub(crate) async fn publish(
        &self,
        subject: &str,
        headers: &Headers,
        payload: Vec<u8>,
        target: Target,
    ) -> Result<(), String> {
        self.publish_with_stream_id(subject, headers, payload, target, None)
            .await
    }

    /// [`Runtime::publish`], where `stream_id`, if given, makes the `Nats-Msg-Id` of a JetStream
    /// publish (made once, on the first), for the stream's dedup only: a plain publish goes
    /// without it.
    async fn publish_with_stream_id(
        &self,
        subject: &str,
        headers: &Headers,
        payload: Vec<u8>,
        target: Target,
        stream_id: Option<&(dyn Fn() -> String + Sync)>,
    ) -> Result<(), String> {
        // The first attempt takes these headers; a retry (rare) converts them again.
        let mut first = Some(crate::transport::to_nats(headers).map_err(|e| e.to_string())?);
        let mut map = || {
            first
                .take()
                .unwrap_or_else(|| crate::transport::to_nats(headers).unwrap_or_default())
        };
        let mut msg_id: Option<String> = None;
        let payload = bytes::Bytes::from(payload);
        let start = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(100);
        loop {
            let attempt = async {
                let stream = self.captured(subject).await.map_err(|e| (e, true))?;
                if !stream && target == Target::Stream {
                    // A plain publish would reach only plain subscribers (an observer), and the
                    // hop would be lost: it is not sent until a stream takes it.
                    return Err((format!("no JetStream stream captures {subject}"), false));
                }
                if !stream
                    || (target == Target::Stream && breaks::on(ProtocolBreak::HopPlainPublish))
                {
                    // Read before the publish is queued: the connection it travels on is this
                    // one or a later one.
                    let connection = confirm::connection(&self.client);
                    let headers = map();
                    if headers.is_empty() {
                        self.client
                            .publish(subject.to_owned(), payload.clone())
                            .await
                    } else {
                        self.client
                            .publish_with_headers(subject.to_owned(), headers, payload.clone())
                            .await
                    }
                    .map_err(|e| (e.to_string(), true))?;
                    // A plain publish is confirmed only as far as the server has read it: by
                    // the delivery, once, before its ack (UNCONFIRMED), unless a JetStream ack
                    // confirms it first; outside a delivery, now.
                    let n = self.confirmer.queued();
                    let waiting = UNCONFIRMED.try_with(|c| {
                        let waiting = Unconfirmed::and(c.get(), n, connection);
                        c.set(Some(waiting));
                    });
                    if waiting.is_ok() {
                        return Ok(());
                    }
                    return self
                        .confirmer
                        .confirm(&self.client, Unconfirmed::and(None, n, connection))
                        .await
                        .map_err(|e| (e, true));
                }
                let before = self.confirmer.sent();
                let mut headers = map();
                if let Some(make) = stream_id {
                    let id = msg_id.get_or_insert_with(make);
                    headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
                }
                let ack = self
                    .js
                    .publish_with_headers(subject.to_owned(), headers, payload.clone())
                    .await
                    .map_err(|e| (e.to_string(), true))?;
                match ack.await {
                    Ok(_) => {
                        // The server reads a connection in order, and acked this after every
                        // plain publish queued before it on the connection it came back on.
                        self.confirmer
                            .confirmed_up_to(before, confirm::connection(&self.client));
                        Ok(())
                    }
                    Err(e) if e.kind() == PublishErrorKind::StreamNotFound => {
                        // The stream went away since we asked: ask again next time.
                        self.forget_capture(subject);
                        Err((format!("no JetStream stream stores {subject}: {e}"), false))
                    }
                    Err(e) => {
                        // No ack: the stream may be gone (an observer's subscription keeps the
                        // publish from failing fast). Ask again next time.
                        self.forget_capture(subject);
                        Err((e.to_string(), true))
                    }
                }
            };
            let (e, patience) = match attempt.await {
                Ok(()) => return Ok(()),
                Err((e, true)) => (e, REPORT_PATIENCE),
                Err((e, false)) => (e, NO_STREAM_PATIENCE),
            };
            if start.elapsed() + pause >= patience {
                return Err(format!("publish to {subject}: {e}"));
            }
            tracing::debug!(subject, "publish failed, retrying in {pause:?}: {e}");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    /// Whether a JetStream stream captures `subject`, asked at most every [`CAPTURE_TTL`]. The
    /// deliveries that find no fresh answer wait for the one asking JetStream and take its answer
    /// (a failed lookup's too, for [`FAILED_LOOKUP_TTL`]), rather than all asking at once: a
    /// service starting under load, or the answer expiring, would otherwise send one request per
    /// message in flight.
    async fn captured(&self, subject: &str) -> Result<bool, String> {
        if let Some(known) = self.known_capture(subject) {
            return known;
        }
        let _asking = self.capture_lookup.lock().await;
        if let Some(known) = self.known_capture(subject) {
            return known;
        }
        let asked = tokio::time::Instant::now();
        let answer = match self.js.stream_by_subject(subject).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == GetStreamByNameErrorKind::NotFound => Ok(false),
            Err(e) => Err(format!(
                "cannot ask JetStream which stream takes {subject}: {e}"
            )),
        };
        self.lock_captures()
            .insert(subject.to_owned(), (answer.clone(), asked));
        answer
    }

    /// The last answer about `subject`, while it is fresh.
    fn known_capture(&self, subject: &str) -> Option<Result<bool, String>> {
        let captures = self.lock_captures();
        let (answer, asked) = captures.get(subject)?;
        let fresh = if answer.is_ok() {
            CAPTURE_TTL
        } else {
            FAILED_LOOKUP_TTL
        };
        (asked.elapsed() < fresh).then(|| answer.clone())
    }

    fn forget_capture(&self, subject: &str) {
        self.lock_captures().remove(subject);
    }
}

/// The `Nats-Msg-Id` of a completion event ([`idempotency::event`], where the recipe is): the
/// envelope's key and `retry_count` (the attempt's for an action's attempt), the trail, the
/// node and the status.
fn event_msg_id(envelope: &Envelope, trail: &[&str], node: &str, status: &str) -> String {
    idempotency::event(
        &envelope.idempotency_key,
        trail,
        node,
        status,
        envelope.retry_count,
    )
}

/// How long the answer to "does a stream capture this subject" is trusted.
const CAPTURE_TTL: Duration = Duration::from_secs(30);

/// How long a failed lookup's error is the answer for the deliveries that waited on it: they fail
/// their attempt with it (and retry later) instead of asking again one after another.
const FAILED_LOOKUP_TTL: Duration = Duration::from_millis(500);

/// How long an outcome keeps trying to reach NATS before the message is given back.
pub(crate) const REPORT_PATIENCE: Duration = Duration::from_secs(60);

/// How long a hop waits for a stream to store it before it is a routing failure.
const NO_STREAM_PATIENCE: Duration = Duration::from_secs(5);

/// Where a publish must land.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// In a JetStream stream, acked: a hop to another service's inbound subject.
    Stream,
    /// In a stream if one captures the subject, else a plain publish.
    Auto,
}
