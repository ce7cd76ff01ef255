//! What the emulator answers `state`, `flow_list` and `run_page` with, built from its state.

use triggers_sdk::flow::Flow;
use triggers_sdk::wire::GoTime;

use super::protocol::{FlowSummary, RunPage, RunSummary, ServiceSummary, StateSummary};
use crate::emulator::Emulator;
use crate::recorder::Run;

impl Emulator {
    /// The state summary, with every run it holds (in a test, or a viewer in the same process;
    /// the control API serves [`Emulator::summary_newest`]).
    #[must_use]
    pub fn summary(&self) -> StateSummary {
        self.summary_newest(usize::MAX)
    }

    /// The state summary with only the newest `runs_limit` runs in `runs` (`runs_total` counts
    /// them all).
    #[must_use]
    pub fn summary_newest(&self, runs_limit: usize) -> StateSummary {
        let state = self.lock();
        let now = GoTime::now();
        StateSummary {
            clock: state.clock.now(),
            clock_mode: state.clock.mode(),
            services: state
                .registry
                .services()
                .iter()
                .map(|(name, s)| ServiceSummary {
                    name: name.clone(),
                    version: s.manifest.service_version.clone(),
                    manifest_hash: s.manifest.manifest_hash.clone(),
                    capabilities: s.manifest.runtime_capabilities.clone(),
                    actions: s.manifest.actions.iter().map(|a| a.name.clone()).collect(),
                    action_count: s.manifest.actions.len(),
                    liveness: s.liveness(now, self.config().heartbeat_interval),
                    last_seen: s.last_seen,
                    replicas: s.replicas.len(),
                })
                .collect(),
            services_total: state.registry.services().len(),
            flows: state
                .registry
                .flows()
                .values()
                .map(|f| Flow::clone(f))
                .collect(),
            flows_total: state.registry.flows().len(),
            runs: state.runs.newest(runs_limit).map(run_summary).collect(),
            runs_total: state.runs.len(),
            violations: state.violations.found(),
            last_seq: state.records.last_seq(),
            dropped_records: state.records.dropped(),
            evicted_runs: state.runs.evicted(),
            unfollowed_runs: state.runs.unfollowed(),
            dropped_violations: state.violations.dropped(),
            trimmed_violations: state.violations.trimmed(),
            dropped_messages: self.dropped_messages(),
            connection_losses: self.connection_losses(),
            cut_in_replies: state.counts.cut_in_replies,
            streams_lost: state.counts.streams_lost,
        }
    }

    /// Every deployed flow at a glance.
    #[must_use]
    pub fn flow_list(&self) -> Vec<FlowSummary> {
        self.lock()
            .registry
            .flows()
            .values()
            .map(|f| FlowSummary {
                id: f.id.clone(),
                version: f.version,
                nodes: f.body.nodes.len(),
                edges: f.body.edges.len(),
                services: f.services().into_iter().map(str::to_owned).collect(),
            })
            .collect()
    }

    /// Up to `limit` run summaries in start order, from the first whose place is after `after`
    /// (0: from the oldest).
    #[must_use]
    pub fn run_page(&self, after: u64, limit: usize) -> RunPage {
        let state = self.lock();
        let mut runs = Vec::new();
        let mut next = after;
        let mut more = false;
        for (place, run) in state.runs.after(after) {
            if runs.len() == limit {
                more = true;
                break;
            }
            runs.push(run_summary(run));
            next = place;
        }
        RunPage {
            total: state.runs.len(),
            runs,
            next,
            more,
        }
    }
}

pub(super) fn run_summary(r: &Run) -> RunSummary {
    RunSummary {
        id: r.id.clone(),
        flow_id: r.flow_id.clone(),
        status: r.status,
        started_at: r.started_at,
        settled_at: r.settled_at,
        failed: r.failed.iter().cloned().collect(),
        steps: r.timeline.len(),
    }
}
