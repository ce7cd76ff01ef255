//! Which rows of each list are shown: the filter (`/`), the failures-only toggle (`f`), and
//! follow mode, kept up to date as items arrive and drop off, so that drawing is proportional
//! to the rows on screen, not to the 100 000 records behind them.

use std::collections::VecDeque;

use triggers_emulator::recorder::{Liveness, RecordKind, RunStatus};

use super::{Event, ListId, Model};

/// The visible rows of one list.
#[derive(Debug, Default)]
pub(crate) struct RowCache {
    /// `None`: every item, in order. `Some`: the matching items' absolute indices (positions for
    /// services, flows and the timeline).
    matched: Option<VecDeque<u64>>,
    /// The collection's drop count when last pruned.
    seen_dropped: u64,
}

fn contains_ci(hay: &str, needle_lower: &str) -> bool {
    needle_lower.is_empty() || hay.to_lowercase().contains(needle_lower)
}

/// Whether a traffic record is about a failure.
pub(crate) fn is_failure(e: &Event) -> bool {
    match &e.kind {
        Some(RecordKind::Dlq { .. } | RecordKind::Violation { .. }) => true,
        Some(RecordKind::Completion { event }) => {
            matches!(event.status.as_str(), "failed" | "retrying")
        }
        Some(RecordKind::Registration { accepted, .. }) => !accepted,
        Some(_) => false,
        None => !e.note.is_empty() && e.note.starts_with("not decodable"),
    }
}

impl Model {
    fn ring_list(list: ListId) -> bool {
        matches!(
            list,
            ListId::Runs | ListId::Dlq | ListId::Violations | ListId::Traffic
        )
    }

    /// Lists whose newest row is last, which follow mode sticks to.
    pub(crate) fn time_ordered(list: ListId) -> bool {
        !matches!(list, ListId::Services | ListId::Flows)
    }

    fn filtering(&self, list: ListId) -> bool {
        self.failures_only
            || !self.list(list).filter.is_empty()
            || (list == ListId::Traffic && self.hide_heartbeats)
    }

    /// Items of `list`, filtered or not (a run's timeline: its open run's steps).
    pub(crate) fn collection_len(&self, list: ListId) -> usize {
        match list {
            ListId::Services => self.services.len(),
            ListId::Flows => self.flows.len(),
            ListId::Runs => self.runs.len(),
            ListId::Dlq => self.dlq.len(),
            ListId::Violations => self.violations.len(),
            ListId::Traffic => self.events.len(),
            ListId::Timeline => self
                .open_run
                .as_deref()
                .and_then(|id| self.run(id))
                .map_or(0, |r| r.timeline.len()),
        }
    }

    fn collection_first(&self, list: ListId) -> u64 {
        match list {
            ListId::Runs => self.runs.first_abs(),
            ListId::Dlq => self.dlq.first_abs(),
            ListId::Violations => self.violations.first_abs(),
            ListId::Traffic => self.events.first_abs(),
            _ => 0,
        }
    }

    /// Whether item `key` (absolute index or position) of `list` passes the filter and toggle.
    fn matches(&self, list: ListId, key: u64, needle: &str) -> bool {
        let failures = self.failures_only;
        match list {
            ListId::Services => {
                let Some(s) = self.services.values().nth(key as usize) else {
                    return false;
                };
                let live = s.liveness(self.now, self.heartbeat_interval);
                (!failures || matches!(live, Liveness::Late | Liveness::Down))
                    && (contains_ci(&s.name, needle)
                        || contains_ci(&s.version, needle)
                        || contains_ci(&s.manifest_hash, needle)
                        || s.capabilities.iter().any(|c| contains_ci(c, needle))
                        || contains_ci(crate::view::liveness_text(live), needle))
            }
            ListId::Flows => {
                let Some(f) = self.flows.values().nth(key as usize) else {
                    return false;
                };
                let failed = || {
                    self.runs
                        .iter()
                        .any(|r| r.flow_id == f.id && r.status == RunStatus::Failed)
                };
                (!failures || failed())
                    && (contains_ci(&f.id, needle)
                        || f.flow
                            .as_ref()
                            .is_some_and(|fl| fl.services().iter().any(|s| contains_ci(s, needle))))
            }
            ListId::Runs => {
                let Some(r) = self.runs.get_abs(key) else {
                    return false;
                };
                (!failures || r.status == RunStatus::Failed || r.dlq > 0)
                    && (contains_ci(&r.id, needle)
                        || contains_ci(&r.flow_id, needle)
                        || contains_ci(crate::view::run_status_text(r.status), needle)
                        || r.failed.iter().any(|n| contains_ci(n, needle)))
            }
            ListId::Dlq => {
                let Some(d) = self.dlq.get_abs(key) else {
                    return false;
                };
                contains_ci(&d.subject, needle)
                    || d.entry.as_ref().is_some_and(|e| {
                        contains_ci(&e.kind, needle)
                            || contains_ci(&e.err_msg, needle)
                            || contains_ci(&e.envelope.flow_run_id, needle)
                            || contains_ci(&e.envelope.flow_id, needle)
                            || contains_ci(&e.envelope.source_node_id, needle)
                    })
            }
            ListId::Violations => {
                let Some(v) = self.violations.get_abs(key) else {
                    return false;
                };
                contains_ci(&v.rule, needle)
                    || contains_ci(&v.severity, needle)
                    || contains_ci(&v.message, needle)
                    || contains_ci(&v.subject, needle)
            }
            ListId::Traffic => {
                let Some(e) = self.events.get_abs(key) else {
                    return false;
                };
                let heartbeat = matches!(e.kind, Some(RecordKind::Heartbeat { .. }));
                (!failures || is_failure(e))
                    && !(self.hide_heartbeats && heartbeat)
                    && (contains_ci(&e.subject, needle)
                        || contains_ci(e.kind.as_ref().map_or("", RecordKind::name), needle)
                        || contains_ci(&e.summary(), needle))
            }
            ListId::Timeline => {
                let Some(t) = self
                    .open_run
                    .as_deref()
                    .and_then(|id| self.run(id))
                    .and_then(|r| r.timeline.get(key as usize))
                else {
                    return false;
                };
                (!failures
                    || matches!(t.status.as_str(), "failed" | "retrying")
                    || !t.error.is_empty())
                    && (contains_ci(&t.node_id, needle)
                        || contains_ci(&t.service, needle)
                        || contains_ci(&t.status, needle)
                        || contains_ci(&t.node_type, needle)
                        || contains_ci(&t.error, needle))
            }
        }
    }

    /// Rebuilds one list's rows from scratch.
    pub(crate) fn recompute_rows(&mut self, list: ListId) {
        let matched = if self.filtering(list) {
            let needle = self.list(list).filter.to_lowercase();
            let first = self.collection_first(list);
            let len = self.collection_len(list) as u64;
            Some(
                (first..first + len)
                    .filter(|k| self.matches(list, *k, &needle))
                    .collect(),
            )
        } else {
            None
        };
        let dropped = self.dropped_of(list);
        let cache = &mut self.rows[list.index()];
        cache.matched = matched;
        cache.seen_dropped = dropped;
    }

    fn dropped_of(&self, list: ListId) -> u64 {
        match list {
            ListId::Runs => self.runs.dropped(),
            ListId::Dlq => self.dlq.dropped(),
            ListId::Violations => self.violations.dropped(),
            ListId::Traffic => self.events.dropped(),
            _ => 0,
        }
    }

    /// A new item was added to a ring list.
    pub(crate) fn row_added(&mut self, list: ListId, abs: u64) {
        if self.rows[list.index()].matched.is_none() {
            return;
        }
        let needle = self.list(list).filter.to_lowercase();
        if self.matches(list, abs, &needle)
            && let Some(m) = self.rows[list.index()].matched.as_mut()
        {
            m.push_back(abs);
        }
    }

    /// Forgets rows that dropped off their ring, moving the selection with its row.
    fn prune(&mut self, list: ListId) {
        let first = self.collection_first(list);
        let dropped = self.dropped_of(list);
        let cache = &mut self.rows[list.index()];
        let removed = match cache.matched.as_mut() {
            None => dropped.saturating_sub(cache.seen_dropped) as usize,
            Some(m) => {
                let before = m.len();
                while m.front().is_some_and(|k| *k < first) {
                    m.pop_front();
                }
                before - m.len()
            }
        };
        cache.seen_dropped = dropped;
        let state = self.list_mut(list);
        state.selected = state.selected.saturating_sub(removed);
    }

    /// How many rows `list` shows.
    pub(crate) fn row_count(&self, list: ListId) -> usize {
        match &self.rows[list.index()].matched {
            Some(m) => m.len(),
            None => self.collection_len(list),
        }
    }

    /// The item (absolute index, or position) shown at row `i` of `list`.
    pub(crate) fn row_at(&self, list: ListId, i: usize) -> Option<u64> {
        match &self.rows[list.index()].matched {
            Some(m) => m.get(i).copied(),
            None => (i < self.collection_len(list)).then(|| self.collection_first(list) + i as u64),
        }
    }

    /// The item under the selection.
    pub(crate) fn selected_item(&self, list: ListId) -> Option<u64> {
        self.row_at(list, self.list(list).selected)
    }

    /// Brings every list up to date after a change: drops, filters, follow mode, bounds.
    /// `changed_rings` says whether runs changed in place (status), which re-filters them.
    pub(crate) fn refresh(&mut self, runs_changed: bool) {
        for list in [
            ListId::Runs,
            ListId::Dlq,
            ListId::Violations,
            ListId::Traffic,
        ] {
            debug_assert!(Self::ring_list(list));
            self.prune(list);
        }
        if runs_changed && self.filtering(ListId::Runs) {
            self.recompute_rows(ListId::Runs);
        }
        for list in [ListId::Services, ListId::Flows, ListId::Timeline] {
            self.recompute_rows(list);
        }
        let lists = [
            ListId::Services,
            ListId::Flows,
            ListId::Runs,
            ListId::Dlq,
            ListId::Violations,
            ListId::Traffic,
            ListId::Timeline,
        ];
        for list in lists {
            let count = self.row_count(list);
            let follow = self.follow && Self::time_ordered(list);
            let state = self.list_mut(list);
            if follow || state.selected >= count {
                state.selected = count.saturating_sub(1);
            }
        }
    }
}
