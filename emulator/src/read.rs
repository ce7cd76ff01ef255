//! Reading the emulator's state: services, flows, runs, records, DLQ entries and violations, as
//! copies taken under the lock.

use std::collections::BTreeMap;

use triggers_sdk::flow::Flow;
use triggers_sdk::wire::CompletionEvent;

#[cfg(doc)]
use crate::config::EmulatorConfig;
use crate::conformance::Violation;
use crate::emulator::Emulator;
use crate::recorder::{Record, RecordKind, Run, ServiceState};

impl Emulator {
    // ---- reading state ---------------------------------------------------------------------

    /// Registered services.
    #[must_use]
    pub fn services(&self) -> BTreeMap<String, ServiceState> {
        self.lock().registry.services().clone()
    }

    /// The services named after `after` (all with `None`), at most `limit` of them, by name.
    #[must_use]
    pub fn services_after(
        &self,
        after: Option<&str>,
        limit: Option<usize>,
    ) -> Vec<(String, ServiceState)> {
        use std::ops::Bound;
        let state = self.lock();
        let from = after.map_or(Bound::Unbounded, |a| Bound::Excluded(a.to_owned()));
        state
            .registry
            .services()
            .range((from, Bound::Unbounded))
            .take(limit.unwrap_or(usize::MAX))
            .map(|(name, s)| (name.clone(), s.clone()))
            .collect()
    }

    /// Deployed flows (as released), the latest version of each.
    #[must_use]
    pub fn flows(&self) -> BTreeMap<String, Flow> {
        self.lock()
            .registry
            .flows()
            .iter()
            .map(|(id, f)| (id.clone(), Flow::clone(f)))
            .collect()
    }

    /// A run (`None` for an unknown run, or a settled one evicted beyond
    /// [`EmulatorConfig::max_runs`]).
    #[must_use]
    pub fn run(&self, id: &str) -> Option<Run> {
        self.lock().runs.get(id).cloned()
    }

    /// Every run kept, in start order.
    #[must_use]
    pub fn runs(&self) -> Vec<Run> {
        self.lock().runs.in_order().cloned().collect()
    }

    /// The records kept, oldest first, and how many older ones were dropped.
    #[must_use]
    pub fn records(&self) -> (Vec<Record>, u64) {
        let state = self.lock();
        (
            state.records.iter().cloned().collect(),
            state.records.dropped(),
        )
    }

    /// Records after `seq` (for followers).
    #[must_use]
    pub fn records_since(&self, seq: u64, limit: usize) -> Vec<Record> {
        let state = self.lock();
        state.records.since(seq).take(limit).cloned().collect()
    }

    /// DLQ entries recorded (after dedup), oldest first.
    #[must_use]
    pub fn dlq(&self) -> Vec<Record> {
        self.lock().records.dlq().cloned().collect()
    }

    /// DLQ records dropped off the record ring (beyond `max_records` or `max_record_bytes`):
    /// [`Emulator::dlq`] is short of them, so no count of DLQ entries is a verdict once any is.
    #[must_use]
    pub fn dropped_dlq_records(&self) -> u64 {
        self.lock().records.dropped_dlq()
    }

    /// Completion events recorded, oldest first.
    #[must_use]
    pub fn completions(&self) -> Vec<CompletionEvent> {
        let state = self.lock();
        state
            .records
            .iter()
            .filter_map(|r| match &r.kind {
                RecordKind::Completion { event } => Some(event.clone()),
                _ => None,
            })
            .collect()
    }

    /// Every conformance violation kept (at most [`EmulatorConfig::max_violations`]; the
    /// `state` summary counts the others).
    #[must_use]
    pub fn violations(&self) -> Vec<Violation> {
        self.lock().violations.iter().cloned().collect()
    }
}
