//! Reporting outcomes: a completion event per executed node, DLQ entries with the right subject,
//! body and `Nats-Msg-Id`. Never `triggers.v2.dlq.source.*` (the builders cannot produce it).

use crate::flow::Node;
use crate::runtime::service::Runtime;
use crate::wire::header::{dlq_msg_id, names};
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
    /// Publishes the completion event of `node`.
    pub(crate) async fn complete(
        &self,
        envelope: &Envelope,
        node: &Node,
        started_at: GoTime,
        status: &str,
        error: &str,
    ) -> Result<(), Fatal> {
        let event = CompletionEvent {
            flow_run_id: envelope.flow_run_id.clone(),
            flow_id: envelope.flow_id.clone(),
            flow_version: envelope.flow_version,
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
        self.client
            .publish(subject, bytes.into())
            .await
            .map_err(|e| Fatal(format!("completion event: {e}")))
    }

    /// A DLQ entry on `triggers.v2.dlq.<service>.<action>`.
    pub(crate) async fn dead_letter_action(
        &self,
        action: &str,
        kind: &str,
        envelope: &Envelope,
        body: &[u8],
        err_msg: &str,
    ) -> Result<(), Fatal> {
        let subject =
            subject::dlq_action(self.service(), action).map_err(|e| Fatal(e.to_string()))?;
        self.dead_letter(&subject, kind, envelope, body, err_msg)
            .await
    }

    /// A DLQ entry on `triggers.v2.dlq.<service>.<kind>`, for a message with no action context.
    pub(crate) async fn dead_letter_fallback(
        &self,
        kind: FallbackKind,
        envelope: &Envelope,
        body: &[u8],
        err_msg: &str,
    ) -> Result<(), Fatal> {
        let subject =
            subject::dlq_fallback(self.service(), kind).map_err(|e| Fatal(e.to_string()))?;
        self.dead_letter(&subject, kind.as_str(), envelope, body, err_msg)
            .await
    }

    async fn dead_letter(
        &self,
        subject: &str,
        kind: &str,
        envelope: &Envelope,
        body: &[u8],
        err_msg: &str,
    ) -> Result<(), Fatal> {
        let now = GoTime::now();
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
        self.publish_js(subject, &headers, bytes).await
    }

    /// Publishes through JetStream and waits for the ack (so a hop or a DLQ entry is stored, and
    /// `Nats-Msg-Id` deduplicates); when no stream captures the subject, a plain publish.
    pub(crate) async fn publish_js(
        &self,
        subject: &str,
        headers: &Headers,
        payload: Vec<u8>,
    ) -> Result<(), Fatal> {
        let map = crate::transport::to_nats(headers).map_err(|e| Fatal(e.to_string()))?;
        let ack = self
            .js
            .publish_with_headers(subject.to_owned(), map.clone(), payload.clone().into())
            .await
            .map_err(|e| Fatal(format!("publish to {subject}: {e}")))?;
        match ack.await {
            Ok(_) => Ok(()),
            Err(e)
                if e.kind() == async_nats::jetstream::context::PublishErrorKind::StreamNotFound =>
            {
                tracing::debug!(
                    subject,
                    "no stream captures it; publishing without JetStream"
                );
                self.client
                    .publish_with_headers(subject.to_owned(), map, payload.into())
                    .await
                    .map_err(|e| Fatal(format!("publish to {subject}: {e}")))
            }
            Err(e) => Err(Fatal(format!("publish to {subject}: {e}"))),
        }
    }
}
