//! The record ring: every record the emulator keeps, bounded by count and by bytes, numbered,
//! and indexed by kind where waiters need it (the DLQ entries).

use std::collections::VecDeque;

use triggers_sdk::wire::GoTime;

use crate::recorder::{Body, Record, RecordKind, SharedHeaders};

/// The records kept, oldest first. Records are appended in sequence order, and only taken out
/// whole with their run ([`Records::remove_run`]), so the ring stays sorted by seq.
pub(crate) struct Records {
    ring: VecDeque<Record>,
    /// The seq of the last record made (kept or not).
    seq: u64,
    bytes: usize,
    max_count: usize,
    max_bytes: usize,
    dropped: u64,
    /// Of them, DLQ records: a count of DLQ entries made since is short of them.
    dropped_dlq: u64,
    /// Seqs of the DLQ records in the ring, oldest first.
    dlq: VecDeque<u64>,
}

impl Records {
    pub(crate) fn new(max_count: usize, max_bytes: usize) -> Self {
        Records {
            ring: VecDeque::new(),
            seq: 0,
            bytes: 0,
            max_count: max_count.max(1),
            max_bytes: max_bytes.max(1),
            dropped: 0,
            dropped_dlq: 0,
            dlq: VecDeque::new(),
        }
    }

    /// The seq of the last record made.
    pub(crate) fn last_seq(&self) -> u64 {
        self.seq
    }

    /// The seq the next record will get.
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq + 1
    }

    /// Records dropped off the ring (beyond its count or bytes).
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Of the records dropped, the DLQ entries.
    pub(crate) fn dropped_dlq(&self) -> u64 {
        self.dropped_dlq
    }

    /// Makes the next record, keeps it (dropping the oldest beyond the bounds) and returns it.
    pub(crate) fn append(
        &mut self,
        subject: &str,
        headers: SharedHeaders,
        payload: Body,
        kind: RecordKind,
        clock: GoTime,
    ) -> &Record {
        self.seq += 1;
        let record = Record {
            seq: self.seq,
            at: GoTime::now(),
            clock,
            subject: subject.to_owned(),
            headers,
            payload,
            kind,
        };
        self.bytes += record.size();
        if matches!(record.kind, RecordKind::Dlq { .. }) {
            self.dlq.push_back(record.seq);
        }
        self.ring.push_back(record);
        while self.ring.len() > self.max_count
            || (self.bytes > self.max_bytes && self.ring.len() > 1)
        {
            let Some(old) = self.ring.pop_front() else {
                break;
            };
            self.bytes = self.bytes.saturating_sub(old.size());
            self.dropped += 1;
            if self.dlq.front() == Some(&old.seq) {
                self.dlq.pop_front();
                self.dropped_dlq += 1;
            }
        }
        // Just pushed, and the loop keeps at least one.
        self.ring.back().unwrap_or_else(|| unreachable!())
    }

    /// Takes out every record about `run_id` (a run rolled back never happened); returns how
    /// many. Not counted as dropped: they are gone with their run.
    pub(crate) fn remove_run(&mut self, run_id: &str) -> usize {
        let before = self.ring.len();
        let mut bytes = self.bytes;
        let mut gone_dlq = Vec::new();
        self.ring.retain(|r| {
            if r.kind.run_id() != Some(run_id) {
                return true;
            }
            bytes = bytes.saturating_sub(r.size());
            if matches!(r.kind, RecordKind::Dlq { .. }) {
                gone_dlq.push(r.seq);
            }
            false
        });
        self.bytes = bytes;
        if !gone_dlq.is_empty() {
            self.dlq.retain(|seq| !gone_dlq.contains(seq));
        }
        before - self.ring.len()
    }

    /// The position of the first record whose seq is at least `seq`.
    fn position(&self, seq: u64) -> usize {
        self.ring.partition_point(|r| r.seq < seq)
    }

    /// The record with this seq, if still kept.
    pub(crate) fn get(&self, seq: u64) -> Option<&Record> {
        self.ring.get(self.position(seq)).filter(|r| r.seq == seq)
    }

    /// Records after `seq`, oldest first.
    pub(crate) fn since(&self, seq: u64) -> impl Iterator<Item = &Record> {
        self.ring.range(self.position(seq.saturating_add(1))..)
    }

    /// Every record kept, oldest first.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &Record> {
        self.ring.iter()
    }

    /// The DLQ records kept, oldest first.
    pub(crate) fn dlq(&self) -> impl Iterator<Item = &Record> {
        self.dlq.iter().filter_map(|seq| self.get(*seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trigger(run: &str) -> RecordKind {
        RecordKind::Trigger {
            run_id: run.into(),
            flow_id: "f".into(),
            entry: "in".into(),
        }
    }

    fn push(records: &mut Records, kind: RecordKind) -> u64 {
        records
            .append(
                "",
                Arc::from(Vec::new()),
                Body::default(),
                kind,
                GoTime::now(),
            )
            .seq
    }

    use std::sync::Arc;

    #[test]
    fn a_removed_run_takes_its_records_and_leaves_the_others_findable_by_seq() {
        let mut records = Records::new(100, 1 << 20);
        let a = push(&mut records, trigger("a"));
        let b = push(&mut records, trigger("b"));
        let a2 = push(
            &mut records,
            RecordKind::RunSettled {
                run_id: "a".into(),
                flow_id: "f".into(),
                status: crate::recorder::RunStatus::Succeeded,
            },
        );
        let c = push(&mut records, trigger("c"));
        assert_eq!(records.remove_run("a"), 2);
        assert!(records.get(a).is_none() && records.get(a2).is_none());
        assert_eq!(records.get(b).map(|r| r.seq), Some(b));
        assert_eq!(records.get(c).map(|r| r.seq), Some(c));
        let after_a: Vec<u64> = records.since(a).map(|r| r.seq).collect();
        assert_eq!(after_a, [b, c]);
        let after_b: Vec<u64> = records.since(b).map(|r| r.seq).collect();
        assert_eq!(after_b, [c]);
        // Seqs are never reused.
        assert_eq!(push(&mut records, trigger("d")), c + 1);
    }

    #[test]
    fn the_ring_keeps_its_bounds_and_counts_what_it_dropped() {
        let mut records = Records::new(2, 1 << 20);
        for run in ["a", "b", "c"] {
            push(&mut records, trigger(run));
        }
        assert_eq!(records.dropped(), 1);
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(records.since(0).count(), 2);
    }
}
