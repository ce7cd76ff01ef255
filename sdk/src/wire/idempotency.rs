//! Idempotency keys: the `X-Triggers-Idempotency-Key` (and `Nats-Msg-Id`) of every delivery an SDK
//! or the engine writes.
//!
//! The rule (decision 6 of the design, `docs/wire.md`): a key is derived from the key of the
//! delivery that caused it, plus what makes this delivery distinct: the edges taken since, the
//! target service, the timer occurrence. So a redelivery of the same inbound message reproduces
//! every key it leads to (JetStream's dedup window collapses the repeats), and two distinct
//! deliveries never share one (nothing distinct is deduplicated away).
//!
//! Keys start with the run id and the node they come from, so a person can read them; the part
//! that makes them unique is a digest, so they stay short however long the chain of hops.

use sha2::{Digest, Sha256};

/// The key of a run's first delivery to an entry `service-in`: `<run>:<entry>`.
#[must_use]
pub fn root(run_id: &str, entry: &str) -> String {
    format!("{run_id}:{entry}")
}

/// The key of a Durable Timer delivery:
/// `<run>:<timer>:<occurrence>:<fence>:<resume edge>`.
///
/// The fence is unique to one arming of the timer, the occurrence to one firing of it, the edge
/// to one resume branch: every delivery of every branch of every occurrence has its own key.
#[must_use]
pub fn timer(run_id: &str, timer_node: &str, occurrence: u64, fence: u64, edge: &str) -> String {
    format!("{run_id}:{timer_node}:{occurrence}:{fence}:{edge}")
}

/// The key of a hop: the output of node `from` handed to `service` on its inbound subject, while
/// handling the delivery whose key is `inbound_key`, having taken the edges `trail` (in order,
/// from that delivery's source node to `from`). `<run>:<from>><service>:<digest>`.
#[must_use]
pub fn hop<S: AsRef<str>>(
    run_id: &str,
    inbound_key: &str,
    trail: &[S],
    from: &str,
    service: &str,
) -> String {
    format!(
        "{run_id}:{from}>{service}:{}",
        digest(inbound_key, trail, service)
    )
}

/// The key of an output node's delivery out of the flow (NATS or HTTP), reached as in [`hop`]:
/// `<run>:<node>:<digest>`.
#[must_use]
pub fn output<S: AsRef<str>>(run_id: &str, inbound_key: &str, trail: &[S], node: &str) -> String {
    format!("{run_id}:{node}:{}", digest(inbound_key, trail, ""))
}

/// The `Nats-Msg-Id` of a completion event (ours: the spec sets no id on events), published
/// where a JetStream stream keeps the events: `ev:` and the 64 lowercase hex digits of SHA-256
/// over what names one outcome of one execution, one part a line (joined by `\n`, no trailing
/// newline): the inbound delivery's key, each edge of `trail` (the edges taken inside the
/// delivery to reach `node`: two paths to one node in one delivery are two executions), the node,
/// the status and `retry_count` as decimal text. `retry_count` is the attempt's (attempt − 1) for
/// an action's `retrying` and `failed` events, and the delivery's (as received) for every other
/// event, so that a `succeeded` event reported again after a redelivery has the same id.
/// Hashed, so that any key or id (whatever a peer sent) makes a header value of a fixed length.
#[must_use]
pub fn event<S: AsRef<str>>(
    inbound_key: &str,
    trail: &[S],
    node: &str,
    status: &str,
    retry_count: i64,
) -> String {
    // Straight into the hasher (this runs for every event): the same bytes as the parts joined
    // by newlines.
    let mut named = Sha256::new();
    named.update(inbound_key.as_bytes());
    for part in trail.iter().map(AsRef::as_ref).chain([node, status]) {
        named.update(b"\n");
        named.update(part.as_bytes());
    }
    named.update(b"\n");
    named.update(itoa::Buffer::new().format(retry_count).as_bytes());
    let mut hex = [0u8; 64];
    // 32 bytes always fit 64 hex digits.
    let _ = hex::encode_to_slice(named.finalize(), &mut hex);
    let mut id = String::with_capacity(3 + hex.len());
    id.push_str("ev:");
    id.push_str(std::str::from_utf8(&hex).unwrap_or_default());
    id
}

/// 16 lowercase hex digits of SHA-256 over the inbound key, the trail and the target, each on a
/// line of its own (identifiers cannot hold a newline); the target's line starts with `>`.
fn digest<S: AsRef<str>>(inbound_key: &str, trail: &[S], target: &str) -> String {
    let mut h = Sha256::new();
    h.update(inbound_key.as_bytes());
    for edge in trail {
        h.update(b"\n");
        h.update(edge.as_ref().as_bytes());
    }
    h.update(b"\n>");
    h.update(target.as_bytes());
    hex::encode(&h.finalize()[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redelivery_reproduces_its_keys() {
        assert_eq!(
            hop("r", "r:in", &["e1", "e2"], "x", "mail"),
            hop("r", "r:in", &["e1", "e2"], "x", "mail")
        );
        assert_eq!(
            output("r", "r:in", &["e1"], "o"),
            output("r", "r:in", &["e1"], "o")
        );
    }

    #[test]
    fn distinct_deliveries_never_share_a_key() {
        let keys = [
            // Another inbound delivery (a second timer occurrence), same path.
            hop("r", "r:t:1:1:e3", &["e4"], "x", "mail"),
            hop("r", "r:t:2:1:e3", &["e4"], "x", "mail"),
            // Another path to the same node (fan-in inside one service).
            hop("r", "r:in", &["e1", "e3"], "z", "mail"),
            hop("r", "r:in", &["e2", "e4"], "z", "mail"),
            // Another target service.
            hop("r", "r:in", &["e1", "e3"], "z", "ship"),
            timer("r", "t", 1, 1, "e3"),
            timer("r", "t", 1, 1, "e4"),
            timer("r", "t", 2, 1, "e3"),
            timer("r", "t", 1, 2, "e3"),
            root("r", "in"),
            output("r", "r:in", &["e1"], "o"),
            output("r", "r:in", &["e2"], "o"),
        ];
        let unique: std::collections::BTreeSet<_> = keys.iter().collect();
        assert_eq!(unique.len(), keys.len(), "{keys:#?}");
    }

    /// The id is the SHA-256 of the parts joined by newlines, however it is computed.
    #[test]
    fn event_ids_hash_the_parts_joined_by_newlines() {
        for (trail, node, status) in [
            (vec![], "charge", "succeeded"),
            (vec!["e1", "e2"], "ship", "retrying"),
            (vec!["é"], "", "failed"),
        ] {
            let mut joined = String::from("run-1:in");
            for part in trail.iter().copied().chain([node, status]) {
                joined.push('\n');
                joined.push_str(part);
            }
            joined.push_str("\n12");
            let expected = format!(
                "ev:{}",
                crate::wire::durable_timer::payload_sha256(joined.as_bytes())
            );
            assert_eq!(event("run-1:in", &trail, node, status, 12), expected);
        }
    }

    #[test]
    fn keys_stay_readable_and_short() {
        let k = hop(
            "run-1",
            "a".repeat(4000).as_str(),
            &["e1"; 500],
            "charge",
            "mail",
        );
        assert!(k.starts_with("run-1:charge>mail:"), "{k}");
        assert_eq!(k.len(), "run-1:charge>mail:".len() + 16);
        assert_eq!(timer("run-1", "wait", 2, 7, "e3"), "run-1:wait:2:7:e3");
        assert_eq!(root("run-1", "in"), "run-1:in");
    }
}
