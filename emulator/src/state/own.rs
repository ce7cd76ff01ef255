//! What the emulator sent itself, so that seeing it again on the wire is not judged as a
//! service's (or a peer's) message: its deliveries' `Nats-Msg-Id`s, its broadcasts' bytes; and
//! the numbers it gives its own messages (timer fences, re-send counts).

use std::collections::{HashMap, HashSet, VecDeque};

/// How many of its own `Nats-Msg-Id`s the emulator remembers, to tell its deliveries from a
/// peer's.
const OWN_IDS_KEPT: usize = 100_000;

/// How many of its broadcasts not yet seen on the wire the emulator remembers.
const OWN_BROADCASTS_KEPT: usize = 1024;

/// Runs taken back (their trigger could not be delivered) remembered, so that the emulator's
/// own delivery of one, seen on the wire after it was taken back, is not recorded.
const TAKEN_BACK_KEPT: usize = 1024;

/// Idempotency keys whose re-sends are counted: beyond it the oldest count is forgotten (a
/// re-send of it then starts at 1 again, and JetStream's dedup window, minutes, is long past).
const RESENDS_KEPT: usize = 100_000;

pub(crate) struct Own {
    /// `Nats-Msg-Id`s of the emulator's own publishes on inbound subjects.
    msg_ids: BoundedSet<String>,
    /// The bytes of the emulator's own broadcasts not yet seen on the wire: a broadcast from
    /// anyone else is a peer's, and judged.
    broadcasts: BoundedSet<Vec<u8>>,
    /// How many times each idempotency key was re-sent from the DLQ (`:resend:<n>`).
    resends: HashMap<String, u32>,
    resend_order: VecDeque<String>,
    /// Runs taken back whose deliveries may still be seen on the wire.
    taken_back: BoundedSet<String>,
    fences: u64,
}

impl Default for Own {
    fn default() -> Self {
        Own {
            msg_ids: BoundedSet::new(OWN_IDS_KEPT),
            broadcasts: BoundedSet::new(OWN_BROADCASTS_KEPT),
            resends: HashMap::new(),
            resend_order: VecDeque::new(),
            taken_back: BoundedSet::new(TAKEN_BACK_KEPT),
            fences: 0,
        }
    }
}

impl Own {
    /// Notes a `Nats-Msg-Id` (or idempotency key) as the emulator's own.
    pub(crate) fn remember(&mut self, msg_id: &str) {
        self.msg_ids.insert(msg_id.to_owned());
    }

    /// Whether a `Nats-Msg-Id` (or idempotency key) is the emulator's own.
    pub(crate) fn is_own(&self, msg_id: &str) -> bool {
        self.msg_ids.contains(msg_id)
    }

    /// Notes a broadcast the emulator is about to send.
    pub(crate) fn broadcast_sent(&mut self, bytes: Vec<u8>) {
        self.broadcasts.insert(bytes);
    }

    /// Whether a broadcast seen is one the emulator sent (then forgotten: seen once).
    pub(crate) fn broadcast_seen(&mut self, bytes: &[u8]) -> bool {
        self.broadcasts.remove(bytes)
    }

    /// Notes a run taken back: its delivery may yet be seen.
    pub(crate) fn taken_back(&mut self, run_id: &str) {
        self.taken_back.insert(run_id.to_owned());
    }

    /// Whether `run_id` was taken back (and not started again since).
    pub(crate) fn was_taken_back(&self, run_id: &str) -> bool {
        self.taken_back.contains(run_id)
    }

    /// A run of this id starts (again): its deliveries are its own.
    pub(crate) fn started(&mut self, run_id: &str) {
        self.taken_back.remove(run_id);
    }

    /// A new timer fence: every arming is its own instance.
    pub(crate) fn next_fence(&mut self) -> u64 {
        self.fences += 1;
        self.fences
    }

    /// Counts one more re-send of `key`; its number (1 for the first).
    pub(crate) fn next_resend(&mut self, key: &str) -> u32 {
        if let Some(n) = self.resends.get_mut(key) {
            *n += 1;
            return *n;
        }
        self.resends.insert(key.to_owned(), 1);
        self.resend_order.push_back(key.to_owned());
        while self.resend_order.len() > RESENDS_KEPT {
            if let Some(old) = self.resend_order.pop_front() {
                self.resends.remove(&old);
            }
        }
        1
    }
}

/// A set that forgets its oldest members beyond a bound.
struct BoundedSet<T> {
    members: HashSet<T>,
    order: VecDeque<T>,
    capacity: usize,
}

impl<T: std::hash::Hash + Eq + Clone> BoundedSet<T> {
    fn new(capacity: usize) -> Self {
        BoundedSet {
            members: HashSet::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    fn insert(&mut self, value: T) {
        if self.members.insert(value.clone()) {
            self.order.push_back(value);
            while self.order.len() > self.capacity {
                if let Some(old) = self.order.pop_front() {
                    self.members.remove(&old);
                }
            }
        }
    }

    fn contains<Q>(&self, value: &Q) -> bool
    where
        T: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.members.contains(value)
    }

    /// Removes `value`; whether it was there.
    fn remove<Q>(&mut self, value: &Q) -> bool
    where
        T: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.members.remove(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resend_numbers_count_per_key_and_stay_bounded() {
        let mut own = Own::default();
        assert_eq!(own.next_resend("k"), 1);
        assert_eq!(own.next_resend("k"), 2);
        assert_eq!(own.next_resend("j"), 1);
        for i in 0..RESENDS_KEPT {
            own.next_resend(&format!("x{i}"));
        }
        assert!(own.resends.len() <= RESENDS_KEPT);
        // "k" was the oldest: forgotten, so it starts again.
        assert_eq!(own.next_resend("k"), 1);
    }
}
