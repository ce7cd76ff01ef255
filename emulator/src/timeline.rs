//! A run's timeline as its completion events make it, in one definition shared by the emulator's
//! run tracking ([`crate::recorder::Run`]) and the terminal UI, which builds timelines from the
//! records it follows: each distinct event is one step, and a step's `retries` are the failed
//! attempts of *its* execution of the node.
//!
//! An event does not say which execution of its node it comes from (a fan-in without a join, or
//! a repeating timer, runs a node several times at once), so the `retrying` events of a node are
//! held until an execution finishes (`succeeded`, `skipped`, `failed`, or anything else that is
//! not `retrying`); the finishing step takes as many as one execution may make (its action's
//! `max_attempts` less one: the *allowance*), and leaves the rest to the next. A second
//! execution's step therefore does not count the first's retries again.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use triggers_sdk::wire::CompletionEvent;
use triggers_sdk::wire::shapes::status;

use crate::run::TimelineEntry;

/// The service name of the engine's own steps (triggers, timers, re-sends, cancels).
const ENGINE: &str = "engine";

/// What a run's completion events have made of its timeline so far: the events seen (so one
/// published twice is one step) and the `retrying` events no finished execution took yet.
#[derive(Debug, Clone, Default)]
pub struct EventSteps {
    /// Fingerprints of the events applied.
    seen: HashSet<u64>,
    /// `retrying` events per node that no finished execution of it accounts for yet.
    retrying: HashMap<String, u32>,
}

/// The `retrying` events one execution of an action may report: its `max_attempts` less one
/// (`max_attempts` counts every attempt, the first included); all of them (`u32::MAX`) where
/// the policy is not known.
#[must_use]
pub fn retry_allowance(max_attempts: Option<i64>) -> u32 {
    max_attempts
        .and_then(|max| u32::try_from(max.max(1) - 1).ok())
        .unwrap_or(u32::MAX)
}

impl EventSteps {
    /// The step `event` (record `seq`) adds to its run's timeline; `None` for an event applied
    /// already (the same event published twice). `allowance` is [`retry_allowance`] of the
    /// event's node.
    pub fn step(
        &mut self,
        event: &CompletionEvent,
        seq: u64,
        allowance: u32,
    ) -> Option<TimelineEntry> {
        let fresh = self.seen.insert(fingerprint(
            &event.node_id,
            &event.status,
            event.started_at.unix_nanos(),
            event.finished_at.unix_nanos(),
            &event.error,
            &event.service,
        ));
        if !fresh {
            return None;
        }
        let retries = self.retries(&event.node_id, &event.status, allowance);
        Some(TimelineEntry {
            seq,
            node_id: event.node_id.clone(),
            node_type: event.node_type.clone(),
            service: event.service.clone(),
            status: event.status.clone(),
            started_at: event.started_at,
            finished_at: event.finished_at,
            error: event.error.clone(),
            retries,
        })
    }

    /// The failed attempts a step of `node` with `status` comes after, and what it leaves for
    /// the next steps.
    fn retries(&mut self, node: &str, step_status: &str, allowance: u32) -> u32 {
        if step_status == status::RETRYING {
            let n = self.retrying.entry(node.to_owned()).or_insert(0);
            *n += 1;
            return *n - 1;
        }
        match self.retrying.get_mut(node) {
            Some(n) if *n > allowance => {
                *n -= allowance;
                allowance
            }
            Some(_) => self.retrying.remove(node).unwrap_or(0),
            None => 0,
        }
    }

    /// The steps of a timeline made elsewhere (a run read through the control API), as if its
    /// events had been applied here, so that the events that follow continue it.
    /// `allowance` gives each node's [`retry_allowance`].
    pub fn resume(timeline: &[TimelineEntry], allowance: impl Fn(&str) -> u32) -> Self {
        let mut steps = EventSteps::default();
        for e in timeline.iter().filter(|e| e.service != ENGINE) {
            steps.seen.insert(fingerprint(
                &e.node_id,
                &e.status,
                e.started_at.unix_nanos(),
                e.finished_at.unix_nanos(),
                &e.error,
                &e.service,
            ));
            steps.retries(&e.node_id, &e.status, allowance(&e.node_id));
        }
        steps
    }

    /// `retrying` events of `node` that no finished execution of it accounts for.
    #[must_use]
    pub fn retrying(&self, node: &str) -> u32 {
        self.retrying.get(node).copied().unwrap_or(0)
    }

    /// Forgets the retries not accounted for (a cancelled run owes no execution).
    pub fn forget_retries(&mut self) {
        self.retrying.clear();
    }
}

fn fingerprint(
    node: &str,
    step_status: &str,
    started: i128,
    finished: i128,
    error: &str,
    service: &str,
) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (node, step_status, started, finished, error, service).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use triggers_sdk::wire::GoTime;

    fn event(node: &str, status: &str, at: i64) -> CompletionEvent {
        CompletionEvent {
            flow_run_id: "r".into(),
            flow_id: "f".into(),
            node_id: node.into(),
            service: "shop".into(),
            status: status.into(),
            started_at: GoTime::from_unix_nanos(i128::from(at)).unwrap(),
            ..CompletionEvent::default()
        }
    }

    #[test]
    fn a_step_counts_the_retries_of_its_own_execution_only() {
        // max_attempts 3: two retrying events per execution at most.
        let allowance = retry_allowance(Some(3));
        assert_eq!(allowance, 2);
        let mut steps = EventSteps::default();
        let mut retries = Vec::new();
        for (i, s) in ["retrying", "retrying", "succeeded", "retrying", "succeeded"]
            .iter()
            .enumerate()
        {
            let e = event("x", s, i as i64);
            retries.push(steps.step(&e, i as u64, allowance).unwrap().retries);
        }
        // The second execution's step counts its one retry, not the first's two as well.
        assert_eq!(retries, [0, 1, 2, 0, 1]);
        assert_eq!(steps.retrying("x"), 0);
    }

    #[test]
    fn an_event_twice_is_one_step() {
        let mut steps = EventSteps::default();
        let e = event("x", "retrying", 1);
        assert!(steps.step(&e, 1, u32::MAX).is_some());
        assert!(steps.step(&e, 2, u32::MAX).is_none());
        assert_eq!(steps.retrying("x"), 1);
    }

    #[test]
    fn a_timeline_resumed_continues_as_if_its_events_had_been_applied() {
        let allowance = retry_allowance(Some(2));
        let events = [
            event("x", "retrying", 1),
            event("x", "retrying", 2),
            event("x", "succeeded", 3),
        ];
        let mut here = EventSteps::default();
        let timeline: Vec<TimelineEntry> = events
            .iter()
            .enumerate()
            .filter_map(|(i, e)| here.step(e, i as u64, allowance))
            .collect();
        let mut resumed = EventSteps::resume(&timeline, |_| allowance);
        assert_eq!(resumed.retrying("x"), here.retrying("x"));
        // A replayed event is no new step; the next finishing one takes what is left.
        assert!(resumed.step(&events[2], 9, allowance).is_none());
        let next = event("x", "succeeded", 4);
        assert_eq!(
            resumed.step(&next, 10, allowance).map(|e| e.retries),
            here.step(&next, 10, allowance).map(|e| e.retries)
        );
    }

    #[test]
    fn the_allowance_is_every_attempt_but_the_first() {
        assert_eq!(retry_allowance(Some(1)), 0);
        assert_eq!(retry_allowance(Some(0)), 0);
        assert_eq!(retry_allowance(Some(5)), 4);
        assert_eq!(retry_allowance(None), u32::MAX);
    }
}
