//! Re-sending a dead-lettered message: its body and envelope again, to the subject the failed
//! node's service consumes, as a new delivery (a fresh idempotency key, so neither JetStream nor
//! the SDK drops it as a duplicate). The run owes the nodes an arrival again, so it settles on
//! what the service does this time.

use serde::{Deserialize, Serialize};
use triggers_sdk::flow::NodeType;
use triggers_sdk::wire::header::names;
use triggers_sdk::wire::shapes::dlq_kind;
use triggers_sdk::wire::subject::LockedSubject;
use triggers_sdk::wire::{Envelope, GoTime};

use crate::recorder::{Body, RecordKind};
use crate::state::State;
use crate::{Emulator, EmulatorError};

/// What [`Emulator::resend_dlq`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resent {
    /// The run the message belongs to.
    pub run_id: String,
    /// Where it was published: the service's inbound subject.
    pub subject: String,
    /// The new delivery's idempotency key: the original's with `:resend:<n>`.
    pub idempotency_key: String,
    /// The nodes the run waits on again.
    pub nodes: Vec<String>,
}

/// Where a DLQ entry is re-sent, and what with.
struct Target {
    /// The envelope it was dead-lettered with.
    original: Envelope,
    /// Its body.
    body: Vec<u8>,
    run_id: String,
    /// The inbound subject of the nodes it failed.
    subject: String,
    /// The nodes it failed: id, type and inbound subject.
    nodes: Vec<(String, String, String)>,
}

/// What the DLQ entry `msg_id` re-sends to, or why it cannot be re-sent.
fn target(state: &State, msg_id: &str) -> Result<Target, String> {
    let record = state
        .records
        .dlq()
        .filter(|r| matches!(&r.kind, RecordKind::Dlq { msg_id: m, .. } if m == msg_id))
        .last()
        .ok_or("no such DLQ entry (or it was evicted from the records)")?;
    let RecordKind::Dlq {
        entry: Some(entry), ..
    } = &record.kind
    else {
        return Err("the entry does not decode, so there is no envelope to re-send it with".into());
    };
    let original = &entry.envelope;
    if original.flow_run_id.is_empty()
        || original.idempotency_key.is_empty()
        || original.source_node_id.is_empty()
    {
        return Err(
            "its envelope is missing (no run, idempotency key or source node): nothing says where it belongs".into(),
        );
    }
    if entry.kind == dlq_kind::ROUTING_FAILED {
        return Err(format!(
            "a routing_failed entry is the sender's: its action ran, the hand-over failed; trigger run {} again instead",
            original.flow_run_id
        ));
    }
    let Some(LockedSubject::Dlq { service, .. }) = LockedSubject::parse(&record.subject) else {
        return Err(format!("{} is not a service's DLQ subject", record.subject));
    };
    let run_id = original.flow_run_id.clone();
    let run = state.runs.get(&run_id);
    if run.is_some_and(crate::recorder::Run::is_cancelled) {
        return Err(format!(
            "run {run_id:?} was cancelled: trigger its flow again instead"
        ));
    }
    let flow = run
        .and_then(|r| r.flow().cloned())
        .ok_or_else(|| format!("run {run_id:?} is not kept (or its flow is unknown)"))?;
    let nodes: Vec<(String, String, String)> = flow
        .successors(&original.source_node_id)
        .map(|(_, n)| n)
        .filter(|n| n.node_type != NodeType::Timer && n.service == service)
        .map(|n| {
            (
                n.id.clone(),
                n.node_type.as_str().to_owned(),
                n.inbound.clone(),
            )
        })
        .collect();
    let Some(subject) = nodes.iter().map(|n| n.2.clone()).find(|s| !s.is_empty()) else {
        return Err(format!(
            "no node of {service} with an inbound subject follows {:?} in flow {:?}",
            original.source_node_id, flow.id
        ));
    };
    Ok(Target {
        original: original.clone(),
        body: entry.body.get().as_bytes().to_vec(),
        run_id,
        subject,
        nodes,
    })
}

impl Emulator {
    /// Re-sends the DLQ entry whose `Nats-Msg-Id` is `msg_id`: its body, with its envelope
    /// (the idempotency key suffixed `:resend:<n>`, the n-th resend of that key; retry count 0),
    /// published to the inbound subject of the nodes it failed. The run waits on those nodes
    /// again; the resend is recorded (kind `resend`) and shown in the run's timeline.
    ///
    /// # Errors
    /// [`EmulatorError::NotResendable`] for an entry that is unknown (or evicted), has no
    /// envelope, belongs to no run kept, or fails no node of its service (a `routing_failed`
    /// entry is the sender's: its action ran, the hand-over failed; trigger the run again); and
    /// [`EmulatorError::Publish`] when the delivery cannot be published.
    pub async fn resend_dlq(&self, msg_id: &str) -> Result<Resent, EmulatorError> {
        let (headers, body, resent) = {
            let mut state = self.lock();
            let Target {
                original,
                body,
                run_id,
                subject,
                nodes,
            } = target(&state, msg_id).map_err(|why| EmulatorError::NotResendable {
                msg_id: msg_id.to_owned(),
                why,
            })?;
            let n = state.own.next_resend(&original.idempotency_key);
            let envelope = Envelope {
                idempotency_key: format!("{}:resend:{n}", original.idempotency_key),
                retry_count: 0,
                emitted_at: state.clock.now(),
                ..original.clone()
            };
            let mut headers = envelope.to_headers();
            headers.insert(names::NATS_MSG_ID, envelope.nats_msg_id());
            // The emulator's own delivery: not a service's message to judge.
            state.own.remember(&envelope.idempotency_key);
            let ids: Vec<String> = nodes.iter().map(|n| n.0.clone()).collect();
            let seq = self.shared.push_locked(
                &mut state,
                &subject,
                &headers,
                Body::from(body.clone()),
                RecordKind::Resend {
                    run_id: run_id.clone(),
                    dlq_msg_id: msg_id.to_owned(),
                    nodes: ids.clone(),
                },
            );
            if let Some(run) = state.runs.get_mut(&run_id) {
                for (id, node_type, _) in &nodes {
                    run.resend(id, node_type, seq, GoTime::now());
                }
            }
            self.shared.refresh_run(&mut state, &run_id);
            (
                headers,
                body,
                Resent {
                    run_id,
                    subject,
                    idempotency_key: envelope.idempotency_key,
                    nodes: ids,
                },
            )
        };
        if let Err(e) = self
            .shared
            .publish_inbound(&resent.subject, headers, body)
            .await
        {
            let mut state = self.lock();
            if let Some(run) = state.runs.get_mut(&resent.run_id) {
                for id in &resent.nodes {
                    run.resend_failed(id);
                }
            }
            self.shared.refresh_run(&mut state, &resent.run_id);
            return Err(e);
        }
        self.shared.notify();
        Ok(resent)
    }
}
