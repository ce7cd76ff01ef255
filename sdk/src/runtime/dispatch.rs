//! Dispatch: from one inbound message to the nodes this service runs, and on to the next hop.
//!
//! Order of checks (each failure dead-letters the message with its reason, then acks it):
//! envelope (`missing_envelope`, `invalid_envelope`) → JSON body (`invalid_json`) → flow
//! (`unknown_flow`, after waiting briefly for its broadcast) → the source node's successors
//! (`unknown_node` when none is this service's to run; none but timers is nothing to do) → the
//! Durable Timer triplet (`durable_timer_rejected`) → the nodes, in edge order. A delivery to
//! this service's own node (an entry, a timer's resume) is handed on in full: its successors in
//! other services get a hop.
//!
//! Every message ends one of three ways: handled (acked), dead-lettered with a reason (the DLQ
//! publish confirmed, then acked), or given back for a redelivery when an outcome could not be
//! reported (NATS unreachable). A redelivery is bounded by the consumer's `max_deliver`; on the
//! last one the message is dead-lettered as `delivery_exhausted`. Handing a result on (a hop) is
//! never a reason to run a node again: a hand-off that fails is dead-lettered as
//! `routing_failed`, and a kept outcome is reused if the message comes back.

use std::sync::Arc;

use async_nats::jetstream::{self, AckKind};
use futures::FutureExt;
use serde_json::Value;

use crate::flow::{self, Edge, Flow, Node, NodeType};
use crate::runtime::action::{ActionContext, CallError};
use crate::runtime::breaks::{self, ProtocolBreak};
use crate::runtime::confirm::{UNCONFIRMED, Unconfirmed};
use crate::runtime::ledger;
use crate::runtime::outcome::{Failure, Fatal, Target};
use crate::runtime::service::Runtime;
use crate::runtime::settle::Delivery;
use crate::transport;
use crate::wire::durable_timer;
use crate::wire::header::names;
use crate::wire::shapes::{dlq_kind, status};
use crate::wire::subject::{self, FallbackKind};
use crate::wire::{Envelope, GoTime, Headers, Traceparent, idempotency, json};

/// A payload on its way through the nodes: the value, and the exact bytes it arrived as (or, for
/// a node's output, its Go JSON, written only when something needs the bytes: a hop, an output,
/// a DLQ entry).
#[derive(Clone)]
pub(crate) struct Payload {
    pub(crate) value: Value,
    bytes: std::sync::OnceLock<Vec<u8>>,
}

impl Payload {
    fn arrived(value: Value, bytes: &[u8]) -> Self {
        Payload {
            value,
            bytes: std::sync::OnceLock::from(bytes.to_vec()),
        }
    }

    fn from_value(value: Value) -> Self {
        Payload {
            value,
            bytes: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        self.bytes
            .get_or_init(|| json::to_vec(&json::GoAny(&self.value)).unwrap_or_default())
    }
}

/// The edges taken inside one delivery, from its source node to the node at hand. With the
/// delivery's idempotency key it names one execution of one node: the key of everything that
/// execution sends ([`idempotency`]), and of the outcome kept for a redelivery.
pub(crate) type Trail<'a> = Vec<&'a str>;

/// An action's outcome, kept so that a redelivery of its message hands the result on again
/// instead of running the handler again.
#[derive(Clone)]
pub(crate) struct KeptOutcome {
    output: Value,
    /// How far its completion event got.
    reported: Reported,
}

/// How far an action's completion event is known to have reached the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reported {
    /// Not published: its publish failed.
    No,
    /// Published plainly, behind (or among) these plain publishes of its delivery: reported
    /// once the confirmer has confirmed them on the connection they were queued on. A connection
    /// that broke before then may have taken the event with it, and the message comes back.
    Queued(Unconfirmed),
    /// Reached the server: its delivery published nothing plainly, or a JetStream ack took it.
    Yes,
}

/// The identity of a node's failure in the DLQ ledger: the delivery, the edges taken inside it,
/// the node.
fn failure_identity(envelope: &Envelope, trail: &[&str], node: &Node) -> String {
    ledger::identity(&[&outcome_key(envelope, trail), &node.id])
}

fn outcome_key(envelope: &Envelope, trail: &[&str]) -> String {
    let mut key = envelope.idempotency_key.clone();
    for edge in trail {
        key.push('\n');
        key.push_str(edge);
    }
    key
}

impl Runtime {
    /// Handles one delivery from the inbound stream: dispatches it, then acks it; a NATS failure
    /// while reporting the outcome gives it back for a redelivery, up to the consumer's
    /// `max_deliver`, after which it is dead-lettered as `delivery_exhausted`.
    ///
    /// `permit` is its place among the deliveries in flight, given up once it is settled.
    pub(crate) async fn handle(
        self: Arc<Self>,
        msg: jetstream::Message,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        UNCONFIRMED
            .scope(
                std::cell::Cell::new(None),
                self.handle_delivery(msg, permit),
            )
            .await;
    }

    async fn handle_delivery(
        self: Arc<Self>,
        msg: jetstream::Message,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        let headers = transport::from_nats(msg.headers.as_ref());
        let key = headers.get(names::IDEMPOTENCY_KEY).map(str::to_owned);
        let origin = ledger::Origin::of(&msg);
        let delivered = origin.delivered();
        let last = delivered >= i64::from(self.config.max_deliver);
        if breaks::idle() {
            return;
        }
        if breaks::on(ProtocolBreak::AckOnPull) {
            let _ = msg.ack().await;
        }
        if delivered > 1
            && let Some(k) = &key
            && self.lock_processed().contains_key(k)
            && !breaks::on(ProtocolBreak::RunAgainOnRedelivery)
        {
            // Handled before; only the ack was lost (a server restart): ack, do not run again.
            let _ = msg.ack().await;
            return;
        }
        // Keep the message ours while it runs (retries with backoff can take long): an
        // in-progress ack every third of the ack wait, from this task rather than one spawned
        // per message. The work is polled first: most deliveries finish at their first poll,
        // and then the tick's timer is never registered.
        let result = {
            let work = self.dispatch(&origin, &headers, &msg.payload);
            tokio::pin!(work);
            let every = self.config.ack_wait / 3;
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                tokio::select! {
                    biased;
                    result = &mut work => break result,
                    _ = tick.tick() => {
                        let _ = msg.ack_with(AckKind::Progress).await;
                    }
                }
            }
        };
        let result = match result {
            Err(Fatal(reason)) if last => {
                // The last delivery JetStream will make: dead-letter it rather than lose it.
                let envelope = Envelope::from_inbound_headers(&headers)
                    .unwrap_or_else(|_| partial_envelope(&headers));
                self.dead_letter_fallback(
                    FallbackKind::DeliveryExhausted,
                    &envelope,
                    &msg.payload,
                    &format!(
                        "delivery {delivered} of at most {}: an outcome could not be reported: {reason}",
                        self.config.max_deliver
                    ),
                    origin.identity(),
                )
                .await
            }
            other => other,
        };
        let delivery = Delivery {
            msg,
            key,
            delivered,
            last,
        };
        // Its plain publishes (events) are confirmed before the ack, by a round trip shared by
        // every delivery waiting then: the settler's, which acks it.
        match (result, UNCONFIRMED.with(std::cell::Cell::get)) {
            (Ok(()), Some(waiting)) => {
                self.settle_when_confirmed(delivery, waiting, permit).await;
            }
            (result, _) => {
                self.settle(delivery, result).await;
                drop(permit);
            }
        }
    }

    /// Runs one message through the flow. `Err` only when an outcome could not be reported.
    /// `origin` is the message's place in its stream: the identity of the failures found
    /// before any node runs ([`ledger`]).
    pub(crate) async fn dispatch(
        &self,
        origin: &ledger::Origin<'_>,
        headers: &Headers,
        body: &[u8],
    ) -> Result<(), Fatal> {
        // A malformed trace_id or span_id is ignored, as an invalid traceparent is: tracing is
        // never a reason to refuse work (docs/protocol.md §5).
        if breaks::on(ProtocolBreak::RefuseInvalidTraceparent)
            && let Some(tp) = headers.get(names::TRACEPARENT)
            && crate::wire::header::Traceparent::parse(tp).is_err()
        {
            let partial = partial_envelope(headers);
            return self
                .dead_letter_fallback(
                    FallbackKind::InvalidEnvelope,
                    &partial,
                    body,
                    "an invalid traceparent (deliberately refused)",
                    origin.identity(),
                )
                .await;
        }
        let envelope = match Envelope::from_inbound_headers(headers) {
            Ok(e) => e,
            Err(e) => {
                let kind = if matches!(e, crate::error::EnvelopeError::Absent) {
                    FallbackKind::MissingEnvelope
                } else {
                    FallbackKind::InvalidEnvelope
                };
                let partial = partial_envelope(headers);
                return self
                    .dead_letter_fallback(kind, &partial, body, &e.to_string(), origin.identity())
                    .await;
            }
        };
        let value: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => {
                return self
                    .dead_letter_fallback(
                        FallbackKind::InvalidJson,
                        &envelope,
                        body,
                        &format!("the body is not JSON: {e}"),
                        origin.identity(),
                    )
                    .await;
            }
        };
        let Some(flow) = self.flow_for(&envelope).await else {
            let held: Vec<String> = self.flows.borrow().keys().cloned().collect();
            return self
                .dead_letter_fallback(
                    FallbackKind::UnknownFlow,
                    &envelope,
                    body,
                    &format!(
                        "flow {:?} v{} is not held by {} (it holds {held:?}); was it deployed with this service in it?",
                        envelope.flow_id,
                        envelope.flow_version,
                        self.service()
                    ),
                    origin.identity(),
                )
                .await;
        };
        let Some(source) = flow.node(&envelope.source_node_id) else {
            return self
                .dead_letter_fallback(
                    FallbackKind::UnknownNode,
                    &envelope,
                    body,
                    &format!("flow {} has no node {:?}", flow.id, envelope.source_node_id),
                    origin.identity(),
                )
                .await;
        };
        let successors: Vec<(&Edge, &Node)> = flow.successors(&source.id).collect();
        // A delivery to a node of this service (the run's entry, a timer's resume) makes this
        // service the holder of that node's output: it runs its own successors and hands the
        // others on. A hop from another service's node: this service runs its own successors of
        // it; the sender hands the rest to their services.
        let holder = source.service == self.service();
        let mine: Vec<(&Edge, &Node)> = successors
            .iter()
            .copied()
            .filter(|(_, n)| n.service == self.service() && n.node_type != NodeType::Timer)
            .collect();
        let nothing_to_do = successors
            .iter()
            .all(|(_, n)| n.node_type == NodeType::Timer);
        if !successors.is_empty() && nothing_to_do {
            // Only timers follow: the engine's to arm. Nothing for this service to do.
            tracing::debug!(run = %envelope.flow_run_id, node = %source.id, "only timers follow; nothing to run");
            return Ok(());
        }
        if successors.is_empty() || (!holder && mine.is_empty()) {
            return self
                .dead_letter_fallback(
                    FallbackKind::UnknownNode,
                    &envelope,
                    body,
                    &format!(
                        "no successor of node {:?} in flow {} belongs to {}",
                        source.id,
                        flow.id,
                        self.service()
                    ),
                    origin.identity(),
                )
                .await;
        }
        if let Err(reason) = self.check_triplet(headers, body) {
            // The handler is not called. The first action this delivery was for gets the entry.
            return match mine.iter().find(|(_, n)| n.node_type == NodeType::Action) {
                Some((_, node)) => {
                    self.dead_letter_action(
                        &node.action,
                        dlq_kind::DURABLE_TIMER_REJECTED,
                        &envelope,
                        body,
                        &reason,
                        origin.identity(),
                    )
                    .await
                }
                None => {
                    self.dead_letter_fallback(
                        FallbackKind::InvalidEnvelope,
                        &envelope,
                        body,
                        &reason,
                        origin.identity(),
                    )
                    .await
                }
            };
        }
        let payload = Payload::arrived(value, body);
        if holder {
            return self.route(&flow, source, payload, &envelope, &[]).await;
        }
        for (edge, node) in mine {
            self.run_node(
                &flow,
                node,
                payload.clone(),
                &envelope,
                vec![edge.id.as_str()],
            )
            .await?;
        }
        Ok(())
    }

    /// The Durable Timer triplet: validated when the service declares `durable_timer.v1`,
    /// refused when it does not. Nothing of it goes further: every later step builds its own
    /// headers from the envelope alone.
    fn check_triplet(&self, headers: &Headers, body: &[u8]) -> Result<(), String> {
        if !durable_timer::has_triplet(headers) || breaks::on(ProtocolBreak::AcceptAnyTimerTriplet)
        {
            return Ok(());
        }
        if !self.durable_timer {
            return Err(format!(
                "the delivery carries the Durable Timer private context, and {} does not declare durable_timer.v1",
                self.service()
            ));
        }
        durable_timer::read_triplet(headers, body)
            .map(|_| ())
            .map_err(|e| format!("invalid Durable Timer context: {e}"))
    }

    /// The flow of the envelope, waiting up to `flow_wait` for its broadcast when it is unknown
    /// or older than the envelope's version.
    async fn flow_for(&self, envelope: &Envelope) -> Option<Arc<Flow>> {
        // The common case: the flow is there; no receiver, no waiting.
        if let Some(f) = self.flows.borrow().get(&envelope.flow_id)
            && f.version >= envelope.flow_version
        {
            return Some(f.clone());
        }
        let mut rx = self.flows.subscribe();
        let wait = if breaks::on(ProtocolBreak::NoFlowWait) {
            std::time::Duration::ZERO
        } else {
            self.config.flow_wait
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(f) = rx.borrow_and_update().get(&envelope.flow_id)
                && f.version >= envelope.flow_version
            {
                return Some(f.clone());
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return rx.borrow().get(&envelope.flow_id).cloned(),
            }
        }
    }

    /// Runs a node this service owns (reached by `trail` in this delivery), reports its
    /// completion, and routes its output.
    fn run_node<'a>(
        &'a self,
        flow: &'a Flow,
        node: &'a Node,
        input: Payload,
        envelope: &'a Envelope,
        trail: Trail<'a>,
    ) -> futures::future::BoxFuture<'a, Result<(), Fatal>> {
        async move {
            let started = GoTime::now();
            let outcome: Result<Option<Payload>, Failure> = match node.node_type {
                NodeType::Action => {
                    return self.run_action(flow, node, input, envelope, trail).await;
                }
                NodeType::Timer => return Ok(()),
                NodeType::ServiceIn => Ok(Some(input.clone())),
                NodeType::Mapping => flow::mapping(&node.config, &input.value)
                    .map(|v| Some(Payload::from_value(v)))
                    .map_err(|e| Failure::node(e.to_string())),
                NodeType::Condition => match flow::condition(&node.config, &input.value) {
                    Ok(true) => Ok(Some(input.clone())),
                    Ok(false) if breaks::on(ProtocolBreak::FalseConditionSucceeds) => {
                        Ok(Some(input.clone()))
                    }
                    Ok(false) => Ok(None),
                    Err(e) => Err(Failure::node(e.to_string())),
                },
                NodeType::Lookup => self.run_lookup(node, &input).await,
                NodeType::Output => self
                    .deliver_output(node, &input, envelope, &trail)
                    .await
                    .map(|()| None),
            };
            match outcome {
                Ok(next) => {
                    let st = match (&next, node.node_type) {
                        (None, NodeType::Condition) => status::SKIPPED,
                        _ => status::SUCCEEDED,
                    };
                    self.complete(envelope, &trail, node, started, st, "")
                        .await?;
                    if let Some(out) = next {
                        self.route(flow, node, out, envelope, &trail).await?;
                    }
                    Ok(())
                }
                Err(f) => {
                    self.complete(envelope, &trail, node, started, status::FAILED, &f.message)
                        .await?;
                    self.dead_letter_fallback(
                        FallbackKind::NodeFailed,
                        envelope,
                        input.bytes(),
                        &format!("node {} ({}): {}", node.id, node.node_type, f.message),
                        &failure_identity(envelope, &trail, node),
                    )
                    .await
                }
            }
        }
        .boxed()
    }

    /// An action node: attempts with timeout, retries with backoff, a panic as a failed attempt.
    /// A kept outcome (the message came back after the handler had succeeded) is handed on
    /// without calling the handler again.
    async fn run_action(
        &self,
        flow: &Flow,
        node: &Node,
        input: Payload,
        envelope: &Envelope,
        trail: Trail<'_>,
    ) -> Result<(), Fatal> {
        let Some(action) = self.actions.get(&node.action) else {
            let started = GoTime::now();
            let msg = format!("{} has no action {:?}", self.service(), node.action);
            self.complete(envelope, &trail, node, started, status::FAILED, &msg)
                .await?;
            return self
                .dead_letter_fallback(
                    FallbackKind::UnknownNode,
                    envelope,
                    input.bytes(),
                    &msg,
                    &failure_identity(envelope, &trail, node),
                )
                .await;
        };
        let kept_key = outcome_key(envelope, &trail);
        let kept = self.lock_outcomes().get(&kept_key).cloned();
        if let Some(kept) = kept
            && !breaks::on(ProtocolBreak::RunAgainOnRedelivery)
        {
            tracing::debug!(run = %envelope.flow_run_id, node = %node.id, "the handler ran before this redelivery; handing its kept result on");
            if !self.has_reached_the_server(kept.reported) {
                // Never published, or published on a connection that broke before the server
                // confirmed it: report it (again; the orchestrator settles a node once).
                self.complete(envelope, &trail, node, GoTime::now(), status::SUCCEEDED, "")
                    .await?;
                self.kept_reported(&kept_key);
            }
            return self
                .route(
                    flow,
                    node,
                    Payload::from_value(kept.output),
                    envelope,
                    &trail,
                )
                .await;
        }
        let max = u32::try_from(action.retry.max_attempts.max(1)).unwrap_or(u32::MAX);
        let mut attempt = 1;
        loop {
            let started = GoTime::now();
            let deadline = tokio::time::Instant::now() + action.timeout;
            let attempt_envelope = || Envelope {
                retry_count: i64::from(attempt - 1),
                ..envelope.clone()
            };
            let span = tracing::info_span!(
                "action",
                service = self.service(),
                action = %action.name,
                run = %envelope.flow_run_id,
                node = %node.id,
                attempt
            );
            let ctx = ActionContext {
                envelope: attempt_envelope(),
                attempt,
                max_attempts: max,
                deadline,
                node_id: node.id.clone(),
                service: self.service().to_owned(),
                span,
            };
            let call = std::panic::AssertUnwindSafe((action.handler)(input.value.clone(), ctx))
                .catch_unwind();
            let (kind, message, retryable) = match tokio::time::timeout(action.timeout, call).await
            {
                Ok(Ok(Ok(output))) => {
                    self.lock_outcomes().insert(
                        kept_key.clone(),
                        KeptOutcome {
                            output: output.clone(),
                            reported: Reported::No,
                        },
                    );
                    if breaks::on(ProtocolBreak::HandOnBeforeEvent) {
                        self.route(
                            flow,
                            node,
                            Payload::from_value(output.clone()),
                            envelope,
                            &trail,
                        )
                        .await?;
                    }
                    self.complete(envelope, &trail, node, started, status::SUCCEEDED, "")
                        .await?;
                    self.kept_reported(&kept_key);
                    if breaks::on(ProtocolBreak::HandOnBeforeEvent) {
                        return Ok(());
                    }
                    return self
                        .route(flow, node, Payload::from_value(output), envelope, &trail)
                        .await;
                }
                Ok(Ok(Err(CallError::InvalidInput(e)))) => (
                    dlq_kind::INVALID_INPUT,
                    format!("the input is not {}'s input type: {e}", action.name),
                    false,
                ),
                Ok(Ok(Err(CallError::BadOutput(e)))) => (
                    dlq_kind::ACTION_FAILED,
                    format!("the output cannot be written as JSON: {e}"),
                    false,
                ),
                Ok(Ok(Err(CallError::Failed(e)))) => (
                    dlq_kind::ACTION_FAILED,
                    e.message().to_owned(),
                    e.is_retryable(),
                ),
                Ok(Err(panic)) => (
                    dlq_kind::ACTION_PANICKED,
                    format!("the handler panicked: {}", panic_message(&panic)),
                    true,
                ),
                Err(_) => (
                    dlq_kind::ACTION_TIMEOUT,
                    format!("the attempt took longer than {:?}", action.timeout),
                    true,
                ),
            };
            // Only a failure goes on here: the attempt's envelope made again (the handler has its
            // own), rather than cloned for every success.
            let attempt_envelope = attempt_envelope();
            if retryable && attempt < max {
                self.complete(
                    &attempt_envelope,
                    &trail,
                    node,
                    started,
                    status::RETRYING,
                    &message,
                )
                .await?;
                attempt += 1;
                if !breaks::on(ProtocolBreak::IgnoreBackoff) {
                    tokio::time::sleep(action.retry.backoff_before(attempt)).await;
                }
                continue;
            }
            let err = if attempt > 1 {
                format!("{message} (after {attempt} attempts)")
            } else {
                message.clone()
            };
            let identity = failure_identity(envelope, &trail, node);
            let dead_letter = || {
                self.dead_letter_action(
                    &action.name,
                    kind,
                    &attempt_envelope,
                    input.bytes(),
                    &err,
                    &identity,
                )
            };
            if breaks::on(ProtocolBreak::DeadLetterBeforeEvent) {
                dead_letter().await?;
            }
            self.complete(
                &attempt_envelope,
                &trail,
                node,
                started,
                status::FAILED,
                &message,
            )
            .await?;
            if breaks::on(ProtocolBreak::DeadLetterBeforeEvent) {
                return Ok(());
            }
            return dead_letter().await;
        }
    }

    /// Notes that the completion event of the outcome kept as `key` was just published: reached
    /// the server, or queued behind this delivery's unconfirmed plain publishes.
    fn kept_reported(&self, key: &str) {
        let unconfirmed = UNCONFIRMED.try_with(std::cell::Cell::get).ok().flatten();
        if let Some(kept) = self.lock_outcomes().get_mut(key) {
            kept.reported = unconfirmed.map_or(Reported::Yes, Reported::Queued);
        }
    }

    /// Whether a kept outcome's completion event is known to have reached the server.
    fn has_reached_the_server(&self, reported: Reported) -> bool {
        match reported {
            Reported::No => false,
            Reported::Queued(waiting) => self.confirmer.holds(waiting),
            Reported::Yes => true,
        }
    }

    async fn run_lookup(&self, node: &Node, input: &Payload) -> Result<Option<Payload>, Failure> {
        let name = node
            .config
            .get("lookup")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let lookup = self.lookups.get(name).ok_or_else(|| {
            Failure::node(format!("{} has no runtime lookup {name:?}", self.service()))
        })?;
        let params = flow::lookup_params(&node.config, &input.value)
            .map_err(|e| Failure::node(e.to_string()))?;
        let result = (lookup.handler)(params)
            .await
            .map_err(|e| Failure::node(e.to_string()))?;
        // The result's fields are laid over the input object; a non-object input is replaced.
        let merged = match (input.value.clone(), result) {
            (Value::Object(mut base), Value::Object(extra)) => {
                base.extend(extra);
                Value::Object(base)
            }
            (_, other) => other,
        };
        Ok(Some(Payload::from_value(merged)))
    }

    /// Hands a node's output on: this service's successors run here; another service's get one
    /// message per service on its inbound subject; timers stop (the engine arms them). A
    /// hand-off that fails is dead-lettered (`routing_failed` for an action's result,
    /// `node_failed` otherwise) with the output as the body; it is never a reason to run the
    /// node again.
    pub(crate) fn route<'a>(
        &'a self,
        flow: &'a Flow,
        from: &'a Node,
        output: Payload,
        envelope: &'a Envelope,
        trail: &'a [&'a str],
    ) -> futures::future::BoxFuture<'a, Result<(), Fatal>> {
        async move {
            let mut hops: Vec<(&str, &str)> = Vec::new();
            for (edge, next) in flow.successors(&from.id) {
                match next.node_type {
                    NodeType::Timer => {}
                    _ if next.service == self.service() => {
                        let mut next_trail = trail.to_vec();
                        next_trail.push(edge.id.as_str());
                        self.run_node(flow, next, output.clone(), envelope, next_trail)
                            .await?;
                    }
                    _ => {
                        if !hops.iter().any(|(s, _)| *s == next.service) {
                            hops.push((next.service.as_str(), next.inbound.as_str()));
                        }
                    }
                }
            }
            for (service, inbound) in hops {
                let (next, sent) = self
                    .hop(from, service, inbound, &output, envelope, trail)
                    .await;
                if let Err(reason) = sent {
                    self.routing_failed(from, service, &next, output.bytes(), &reason)
                        .await?;
                }
            }
            Ok(())
        }
        .boxed()
    }

    /// Sends `output` to `service` on its inbound subject, through JetStream (the hop must be
    /// stored: a plain publish nobody keeps would lose it). Returns the hop's envelope and
    /// whether it was sent.
    #[allow(clippy::too_many_arguments)]
    async fn hop(
        &self,
        from: &Node,
        service: &str,
        inbound: &str,
        output: &Payload,
        envelope: &Envelope,
        trail: &[&str],
    ) -> (Envelope, Result<(), String>) {
        let span_id = transport::random_hex(8);
        let next = Envelope {
            traceparent: if envelope.trace_id.is_empty()
                || breaks::on(ProtocolBreak::DropHopTraceparent)
            {
                String::new()
            } else {
                Traceparent::new(&envelope.trace_id, &span_id, true).to_string()
            },
            span_id,
            // The run's version (the envelope's), never the held flow's newest: a run that
            // started before a redeploy goes on as that version (docs/protocol.md §7).
            flow_id: envelope.flow_id.clone(),
            flow_version: envelope.flow_version,
            idempotency_key: if breaks::on(ProtocolBreak::HopKeyWithoutDelivery) {
                idempotency::hop::<&str>(&envelope.flow_run_id, "", &[], &from.id, service)
            } else {
                idempotency::hop(
                    &envelope.flow_run_id,
                    &envelope.idempotency_key,
                    trail,
                    &from.id,
                    service,
                )
            },
            source_node_id: from.id.clone(),
            retry_count: 0,
            emitted_at: GoTime::now(),
            ..envelope.clone()
        };
        if inbound.is_empty() {
            let reason = format!(
                "node {} hands over to {service}, but the flow names no inbound subject for it (was it released by an orchestrator?)",
                from.id
            );
            return (next, Err(reason));
        }
        if let Err(e) = subject::check_publish_target(inbound) {
            return (
                next,
                Err(format!("node {} hands over to {service}: {e}", from.id)),
            );
        }
        let mut headers = next.to_headers();
        headers.insert(names::NATS_MSG_ID, next.nats_msg_id());
        let sent = self
            .publish(inbound, &headers, output.bytes().to_vec(), Target::Stream)
            .await
            .map_err(|e| format!("hand-off of node {} to {service}: {e}", from.id));
        (next, sent)
    }

    /// A hand-off that could not be made: dead-lettered with the output as the body and the
    /// hop's envelope, on the action's DLQ (`routing_failed`) or, for another node, as
    /// `node_failed`.
    async fn routing_failed(
        &self,
        from: &Node,
        service: &str,
        hop: &Envelope,
        body: &[u8],
        reason: &str,
    ) -> Result<(), Fatal> {
        tracing::warn!(run = %hop.flow_run_id, node = %from.id, to = service, "{reason}");
        if from.node_type == NodeType::Action && self.actions.contains_key(&from.action) {
            // The hop's key names the hand-off: the delivery, the edges taken, the receiver.
            self.dead_letter_action(
                &from.action,
                dlq_kind::ROUTING_FAILED,
                hop,
                body,
                reason,
                &hop.idempotency_key,
            )
            .await
        } else {
            self.dead_letter_fallback(
                FallbackKind::NodeFailed,
                hop,
                body,
                reason,
                &hop.idempotency_key,
            )
            .await
        }
    }
}

/// What can be read of an envelope that does not decode, for the DLQ entry.
fn partial_envelope(headers: &Headers) -> Envelope {
    let text = |n: &str| headers.get(n).unwrap_or_default().to_owned();
    Envelope {
        trace_id: text(names::TRACE_ID),
        span_id: text(names::SPAN_ID),
        traceparent: text(names::TRACEPARENT),
        flow_run_id: text(names::FLOW_RUN_ID),
        flow_id: text(names::FLOW_ID),
        flow_version: headers
            .get(names::FLOW_VERSION)
            .and_then(|v| v.parse().ok())
            .unwrap_or_default(),
        idempotency_key: text(names::IDEMPOTENCY_KEY),
        source_node_id: text(names::SOURCE_NODE_ID),
        retry_count: headers
            .get(names::RETRY_COUNT)
            .and_then(|v| v.parse().ok())
            .unwrap_or_default(),
        emitted_at: headers
            .get(names::EMITTED_AT)
            .and_then(|v| GoTime::parse(v).ok())
            .unwrap_or_default(),
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-text payload".into())
}
