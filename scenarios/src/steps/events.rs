//! `expect_events`: the completion events (and engine steps) of a run, in order, strictly, or in
//! any order.

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;
use tokio::time::Instant;
use triggers_emulator::recorder::TimelineEntry;

use super::{CheckCx, StepFailure, StepKind, StepOutcome};
use crate::model::Dur;
use crate::runner::{IDLE_GRACE, Lab};

/// How `expect_events` compares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventOrder {
    /// The listed events appear in this order, others may come between (default).
    #[default]
    InOrder,
    /// The run's events are exactly these, in this order (the engine's `triggered`, `armed`,
    /// `fired` count only when one of them is listed).
    Strict,
    /// Each listed event appears, in any order.
    Any,
}

/// `expect_events`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectEventsStep {
    /// The run's name.
    pub run: String,
    /// How to compare.
    #[serde(default)]
    pub order: EventOrder,
    /// The events.
    pub events: Vec<EventSpec>,
    /// This step's time limit.
    #[serde(default)]
    pub timeout: Option<Dur>,
}

/// One expected completion event (or engine step).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSpec {
    /// The node.
    pub node: String,
    /// `succeeded`, `retrying`, `failed`, `skipped`, or the engine's `triggered`, `armed`, `fired`
    /// (default: any).
    #[serde(default)]
    pub status: Option<String>,
    /// The service that reported it.
    #[serde(default)]
    pub service: Option<String>,
    /// Text the event's error contains.
    #[serde(default)]
    pub error_contains: Option<String>,
}

/// What an event's `status` may be.
const STATUSES: [&str; 7] = [
    "succeeded",
    "retrying",
    "failed",
    "skipped",
    "triggered",
    "armed",
    "fired",
];

impl StepKind for ExpectEventsStep {
    fn label(&self) -> String {
        format!(
            "expect_events {} ({} event{})",
            self.run,
            self.events.len(),
            if self.events.len() == 1 { "" } else { "s" }
        )
    }

    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
        cx.run(&self.run)?;
        if self.events.is_empty() {
            return Err("`events` is empty".into());
        }
        for ev in &self.events {
            CheckCx::status(ev.status.as_ref(), &STATUSES)?;
        }
        Ok(())
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        expect_events(lab, self).boxed_local()
    }

    fn nodes_named(&self) -> Vec<(&str, &str)> {
        self.events
            .iter()
            .map(|ev| (self.run.as_str(), ev.node.as_str()))
            .collect()
    }
}

fn event_matches(spec: &EventSpec, e: &TimelineEntry) -> bool {
    e.node_id == spec.node
        && spec.status.as_ref().is_none_or(|s| *s == e.status)
        && spec.service.as_ref().is_none_or(|s| *s == e.service)
        && spec
            .error_contains
            .as_ref()
            .is_none_or(|t| e.error.contains(t.as_str()))
}

fn describe_event(spec: &EventSpec) -> String {
    let mut s = spec.node.clone();
    if let Some(st) = &spec.status {
        s.push_str(&format!(" {st}"));
    }
    if let Some(sv) = &spec.service {
        s.push_str(&format!(" on {sv}"));
    }
    if let Some(t) = &spec.error_contains {
        s.push_str(&format!(" (error contains {t:?})"));
    }
    s
}

/// Whether the timeline satisfies the expected events, in the step's order.
fn events_match(step: &ExpectEventsStep, timeline: &[TimelineEntry]) -> bool {
    let engine = ["triggered", "armed", "fired"];
    let with_engine = step
        .events
        .iter()
        .any(|e| e.status.as_deref().is_some_and(|s| engine.contains(&s)));
    let seen: Vec<&TimelineEntry> = timeline
        .iter()
        .filter(|e| with_engine || e.service != "engine")
        .collect();
    match step.order {
        EventOrder::Strict => {
            seen.len() == step.events.len()
                && seen
                    .iter()
                    .zip(&step.events)
                    .all(|(e, spec)| event_matches(spec, e))
        }
        EventOrder::InOrder => {
            let mut it = seen.iter();
            step.events
                .iter()
                .all(|spec| it.any(|e| event_matches(spec, e)))
        }
        EventOrder::Any => {
            let mut used = vec![false; seen.len()];
            step.events.iter().all(|spec| {
                match seen
                    .iter()
                    .enumerate()
                    .find(|(i, e)| !used[*i] && event_matches(spec, e))
                {
                    Some((i, _)) => {
                        used[i] = true;
                        true
                    }
                    None => false,
                }
            })
        }
    }
}

async fn expect_events(lab: &Lab<'_>, step: &ExpectEventsStep) -> StepOutcome {
    let id = lab.run_id(&step.run)?;
    let order = match step.order {
        EventOrder::Strict => "exactly, in this order",
        EventOrder::InOrder => "in this order",
        EventOrder::Any => "in any order",
    };
    let expected = format!(
        "run {} to show these events {order}:\n{}",
        step.run,
        step.events
            .iter()
            .map(|e| format!("    {}", describe_event(e)))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let mut w = lab.waiter(step.timeout);
    let mut idle_since: Option<Instant> = None;
    loop {
        if let Some(run) = lab.em().run(&id) {
            let matched = events_match(step, &run.timeline);
            let idle = run.pending.is_empty();
            // A strict list must not match a run still on its way: more may come.
            if matched && (idle || step.order != EventOrder::Strict) {
                return Ok(format!("{} event(s) matched", step.events.len()));
            }
            if idle {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= IDLE_GRACE {
                    return Err(StepFailure::unmet(format!(
                        "expected {expected}\nthe run is idle and they did not arrive; {}",
                        lab.account_run(&id)
                    )));
                }
            } else {
                idle_since = None;
            }
        }
        if !w.next().await {
            return Err(w.timeout(expected, lab.account_run(&id)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn entry(node: &str, status: &str, service: &str) -> TimelineEntry {
        serde_json::from_value(json!({"seq": 1, "node_id": node, "node_type": "action",
            "service": service, "status": status, "started_at": "2026-01-01T00:00:00Z",
            "finished_at": "2026-01-01T00:00:00Z", "retries": 0}))
        .unwrap()
    }

    fn step(order: &str, events: Value) -> ExpectEventsStep {
        serde_json::from_value(json!({"run": "r", "order": order, "events": events})).unwrap()
    }

    #[test]
    fn event_orders() {
        let timeline = [
            entry("in", "triggered", "engine"),
            entry("a", "retrying", "s"),
            entry("a", "succeeded", "s"),
            entry("b", "succeeded", "s"),
        ];
        let both = json!([{"node": "a", "status": "succeeded"}, {"node": "b"}]);
        assert!(events_match(&step("in_order", both.clone()), &timeline));
        assert!(!events_match(&step("strict", both.clone()), &timeline));
        let all = json!([{"node": "a", "status": "retrying"}, {"node": "a", "status": "succeeded"}, {"node": "b"}]);
        assert!(events_match(&step("strict", all), &timeline));
        let reversed = json!([{"node": "b"}, {"node": "a", "status": "succeeded"}]);
        assert!(!events_match(
            &step("in_order", reversed.clone()),
            &timeline
        ));
        assert!(events_match(&step("any", reversed), &timeline));
        let engine = json!([{"node": "in", "status": "triggered"}, {"node": "a", "status": "retrying"}, {"node": "a", "status": "succeeded"}, {"node": "b"}]);
        assert!(events_match(&step("strict", engine), &timeline));
    }
}
