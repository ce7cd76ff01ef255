//! `publish`: raw bytes (or JSON, as Go writes it) with headers on a subject, through JetStream
//! when a stream captures it.

use std::collections::BTreeMap;

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;
use serde_json::Value;
use triggers_sdk::transport::check_header;
use triggers_sdk::wire::json;

use super::{CheckCx, StepFailure, StepKind, StepOutcome};
use crate::model::present;
use crate::runner::Lab;

/// `publish`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishStep {
    /// The subject.
    pub subject: String,
    /// Headers, written as given.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The body, as text (exact bytes).
    #[serde(default)]
    pub body: Option<String>,
    /// The body, as JSON (written as Go writes it) instead.
    #[serde(default, deserialize_with = "present")]
    pub json: Option<Value>,
}

impl StepKind for PublishStep {
    fn label(&self) -> String {
        format!("publish {}", self.subject)
    }

    fn check(&self, _: &mut CheckCx<'_>) -> Result<(), String> {
        if self.body.is_some() && self.json.is_some() {
            return Err("give `body` (text) or `json`, not both".into());
        }
        for (name, value) in &self.headers {
            check_header(name, value).map_err(|e| format!("headers: {e}"))?;
        }
        Ok(())
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        publish(lab, self).boxed_local()
    }
}

async fn publish(lab: &Lab<'_>, p: &PublishStep) -> StepOutcome {
    let subject = lab.subst_str(&p.subject)?;
    let body: Vec<u8> = match (&p.body, &p.json) {
        (Some(text), _) => lab.subst_str(text)?.into_bytes(),
        (None, Some(v)) => json::to_vec(&json::GoAny(&lab.subst(v)?))
            .map_err(|e| StepFailure::invalid(e.to_string()).caused_by(e))?,
        (None, None) => Vec::new(),
    };
    let mut headers = async_nats::HeaderMap::new();
    for (name, value) in &p.headers {
        let value = lab.subst_str(value)?;
        // Checked when the file was read; a `${...}` could still bring a line break in.
        check_header(name, &value).map_err(|e| StepFailure::invalid(e.to_string()))?;
        headers.insert(name.as_str(), value.as_str());
    }
    let cannot = |e: &dyn std::fmt::Display| format!("cannot publish on {subject}: {e}");
    let js = async_nats::jetstream::new(lab.hand.clone());
    // Through JetStream (and its ack) when a stream captures the subject, so the step ends
    // when the message is stored; a plain publish otherwise.
    let limit = lab.scenario.step_timeout;
    let Ok(stream) = js.stream_by_subject(subject.clone()).await else {
        lab.hand
            .publish_with_headers(subject.clone(), headers, body.into())
            .await
            .map_err(|e| StepFailure::environment(cannot(&e)).caused_by(e))?;
        lab.hand
            .flush()
            .await
            .map_err(|e| StepFailure::environment(cannot(&e)).caused_by(e))?;
        return Ok("published (no stream captures the subject)".into());
    };
    let ack = tokio::time::timeout(limit, async {
        js.publish_with_headers(subject.clone(), headers, body.into())
            .await
            .map_err(|e| StepFailure::environment(cannot(&e)).caused_by(e))?
            .await
            .map_err(|e| StepFailure::environment(cannot(&e)).caused_by(e))
    })
    .await
    .map_err(|_| {
        StepFailure::timeout(format!(
            "JetStream did not ack the publish on {subject} within {limit:?}"
        ))
    })??;
    Ok(if ack.duplicate {
        format!(
            "a duplicate: stream {stream} kept the first (seq {})",
            ack.sequence
        )
    } else {
        format!("stored in stream {stream} (seq {})", ack.sequence)
    })
}
