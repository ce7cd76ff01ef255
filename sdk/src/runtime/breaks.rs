//! Deliberate protocol mistakes, for the conformance kit's own tests: with the cargo feature
//! `conformance-breaks` (off by default; only the reference conformance service enables it),
//! [`set`] makes the runtime get one behaviour wrong, so that the kit's check of that behaviour
//! can be shown to fail. Without the feature nothing can set one and the runtime never consults
//! anything: every call site reads a constant `false`.

/// A mistake the runtime can be made to make, named after the conformance check that catches
/// it (`docs/conform.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(not(feature = "conformance-breaks"), allow(unreachable_pub))]
pub enum ProtocolBreak {
    /// `mapping_condition`: a false condition is reported `succeeded`, and what follows runs.
    FalseConditionSucceeds,
    /// `timer_rejected`: the Durable Timer triplet is not verified (a forged one is accepted).
    AcceptAnyTimerTriplet,
    /// `hop_traceparent`: hops leave `X-Triggers-Traceparent` empty.
    DropHopTraceparent,
    /// `traceparent_invalid`: a delivery with an invalid traceparent is dead-lettered.
    RefuseInvalidTraceparent,
    /// `hop_keys`: a hop key made of the run, the node and the service alone.
    HopKeyWithoutDelivery,
    /// `retry_backoff`: retries at once, without the policy's backoff.
    IgnoreBackoff,
    /// `unknown_flow_wait`: an unknown flow is dead-lettered at once, without waiting.
    NoFlowWait,
    /// `heartbeat_interval`: each heartbeat's `started_at` is its own `now`.
    MovingStartedAt,
    /// `crash_redelivery`, `ack_order`: a delivery is acked as soon as it is pulled.
    AckOnPull,
    /// `ack_lost`: a redelivery of a delivery handled already (its ack lost) runs its actions
    /// again.
    RunAgainOnRedelivery,
    /// `broadcast_before_reply`: the broadcast subjects are subscribed to only after the
    /// register reply, so a flow broadcast in between is missed.
    BroadcastsAfterReply,
    /// `consumer`: the durable consumer without a bound on deliveries (`max_deliver` -1).
    UnboundedMaxDeliver,
    /// `dlq_order`: an action's DLQ entry published before its `failed` event.
    DeadLetterBeforeEvent,
    /// `handoff_order`: an action's output handed on before its `succeeded` event.
    HandOnBeforeEvent,
    /// `hop_jetstream`: hops published as plain NATS publishes.
    HopPlainPublish,
    /// `redeploy_mid_run`: completion events carry the newest version held, not the run's.
    HeldFlowVersion,
    /// `replicas`: the broadcast subjects subscribed to in a queue group.
    BroadcastsInQueueGroup,
    /// `timer_strip`: outputs carry a Durable Timer triplet, as if forwarded from a timer's
    /// delivery.
    TimerTripletOnOutputs,
    /// `server_restart`: once the connection was lost, deliveries are dropped unhandled (a
    /// service that does not resume its work after the server comes back).
    IdleAfterConnectionLoss,
}

#[cfg(feature = "conformance-breaks")]
impl ProtocolBreak {
    /// Every break, with the name of the check it fails.
    pub const ALL: [(&'static str, ProtocolBreak); 20] = [
        ("mapping_condition", ProtocolBreak::FalseConditionSucceeds),
        ("timer_rejected", ProtocolBreak::AcceptAnyTimerTriplet),
        ("hop_traceparent", ProtocolBreak::DropHopTraceparent),
        (
            "traceparent_invalid",
            ProtocolBreak::RefuseInvalidTraceparent,
        ),
        ("hop_keys", ProtocolBreak::HopKeyWithoutDelivery),
        ("retry_backoff", ProtocolBreak::IgnoreBackoff),
        ("unknown_flow_wait", ProtocolBreak::NoFlowWait),
        ("heartbeat_interval", ProtocolBreak::MovingStartedAt),
        ("crash_redelivery", ProtocolBreak::AckOnPull),
        ("ack_order", ProtocolBreak::AckOnPull),
        ("ack_lost", ProtocolBreak::RunAgainOnRedelivery),
        (
            "broadcast_before_reply",
            ProtocolBreak::BroadcastsAfterReply,
        ),
        ("consumer", ProtocolBreak::UnboundedMaxDeliver),
        ("dlq_order", ProtocolBreak::DeadLetterBeforeEvent),
        ("handoff_order", ProtocolBreak::HandOnBeforeEvent),
        ("hop_jetstream", ProtocolBreak::HopPlainPublish),
        ("redeploy_mid_run", ProtocolBreak::HeldFlowVersion),
        ("replicas", ProtocolBreak::BroadcastsInQueueGroup),
        ("timer_strip", ProtocolBreak::TimerTripletOnOutputs),
        ("server_restart", ProtocolBreak::IdleAfterConnectionLoss),
    ];

    /// The break whose check is `check`.
    #[must_use]
    pub fn for_check(check: &str) -> Option<ProtocolBreak> {
        Self::ALL.iter().find(|(c, _)| *c == check).map(|(_, b)| *b)
    }
}

#[cfg(feature = "conformance-breaks")]
static BROKEN: std::sync::OnceLock<ProtocolBreak> = std::sync::OnceLock::new();

/// Makes the runtime make `mistake` from now on, in this process (once: a second call is
/// ignored).
#[cfg(feature = "conformance-breaks")]
pub fn set(mistake: ProtocolBreak) {
    let _ = BROKEN.set(mistake);
}

/// Whether the runtime is to make `mistake`.
#[cfg(feature = "conformance-breaks")]
pub(crate) fn on(mistake: ProtocolBreak) -> bool {
    BROKEN.get() == Some(&mistake)
}

/// Set once the connection was lost (for [`ProtocolBreak::IdleAfterConnectionLoss`]).
static CONNECTION_LOST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The connection was lost: remembered for the breaks that act after it.
pub(crate) fn connection_lost() {
    CONNECTION_LOST.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether deliveries are to be dropped unhandled: the connection was lost and the runtime is
/// to make [`ProtocolBreak::IdleAfterConnectionLoss`]. Never, without the feature.
pub(crate) fn idle() -> bool {
    on(ProtocolBreak::IdleAfterConnectionLoss)
        && CONNECTION_LOST.load(std::sync::atomic::Ordering::SeqCst)
}

/// Whether the runtime is to make `mistake`: never, without the feature.
#[cfg(not(feature = "conformance-breaks"))]
pub(crate) const fn on(_mistake: ProtocolBreak) -> bool {
    false
}
