//! Words for people: a step's one-line label (each kind words its own, in `steps/`), and
//! accounts of what arrived (run timelines, DLQ entries, registrations, heartbeats, calls, HTTP
//! requests) for failure messages.

use std::collections::BTreeMap;

use triggers_emulator::Emulator;
use triggers_emulator::recorder::{Record, RecordKind};

use crate::model::Step;
use crate::scripted::Call;

/// A step in a few words: `trigger flow-lab as r1`, `wait_settled r1`...
#[must_use]
pub fn label(step: &Step) -> String {
    step.kind().label()
}

/// The run names of a scenario, by run id, to show `r1 (run-…)`.
pub(crate) type RunNames = BTreeMap<String, String>;

fn run_name(names: &RunNames, id: &str) -> String {
    match names.get(id) {
        Some(n) => format!("{n} ({id})"),
        None => id.to_owned(),
    }
}

/// A run's status, timeline, what is pending, armed timers and DLQ entries.
pub(crate) fn run(em: &Emulator, id: &str, names: &RunNames) -> String {
    let Some(run) = em.run(id) else {
        let known: Vec<String> = em
            .runs()
            .iter()
            .rev()
            .take(5)
            .map(|r| run_name(names, &r.id))
            .collect();
        return format!("no run {id} is known (latest runs: {known:?})");
    };
    let mut out = format!(
        "run {} of flow {} v{} is {}",
        run_name(names, &run.id),
        run.flow_id,
        run.flow_version,
        run.status.as_str()
    );
    out.push_str("\n  timeline:");
    if run.timeline.is_empty() {
        out.push_str(" (empty: no completion event arrived; is the service running?)");
    }
    for e in &run.timeline {
        out.push_str(&format!("\n    {e}"));
    }
    if !run.pending.is_empty() {
        out.push_str(&format!(
            "\n  pending: {}",
            run.pending
                .iter()
                .map(|(node, n)| if *n == 1 {
                    node.clone()
                } else {
                    format!("{node} x{n}")
                })
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for t in &run.timers {
        out.push_str(&format!(
            "\n  timer {} armed, due {} (the clock says {}): advance the clock, or set emulator.auto_advance",
            t.node_id,
            t.due,
            em.now()
        ));
    }
    if !run.dlq.is_empty() {
        out.push_str("\n  DLQ entries of the run:");
        for r in em.dlq().iter().filter(|r| run.dlq.contains(&r.seq)) {
            out.push_str(&format!("\n    {}", dlq_line(r)));
        }
    }
    out
}

/// One DLQ record: subject, kind, run, message id, error, and body.
pub(crate) fn dlq_line(r: &Record) -> String {
    match &r.kind {
        RecordKind::Dlq {
            entry: Some(e),
            msg_id,
        } => format!(
            "#{} {} kind={} run={} msg_id={}: {}\n      body: {}",
            r.seq,
            r.subject,
            e.kind,
            e.envelope.flow_run_id,
            msg_id,
            e.err_msg,
            e.body.get()
        ),
        RecordKind::Dlq {
            entry: None,
            msg_id,
        } => format!(
            "#{} {} (not a DLQ entry) msg_id={msg_id}: {}",
            r.seq,
            r.subject,
            clip(&r.payload.text())
        ),
        _ => String::new(),
    }
}

fn clip(text: &str) -> String {
    let t: String = text.chars().take(300).collect();
    if t.len() < text.len() {
        format!("{t}…")
    } else {
        t
    }
}

/// Every registration request and its answer.
pub(crate) fn registrations(em: &Emulator) -> String {
    let (records, _) = em.records();
    listing(
        records
            .iter()
            .filter_map(|r| match &r.kind {
                RecordKind::Registration {
                    service,
                    accepted,
                    error,
                    manifest_hash,
                } => Some(if *accepted {
                    format!(
                        "#{} registration of {service:?} accepted ({manifest_hash})",
                        r.seq
                    )
                } else {
                    format!(
                        "#{} registration of {service:?} refused: {}",
                        r.seq,
                        error.clone().unwrap_or_default()
                    )
                }),
                _ => None,
            })
            .collect(),
    )
}

/// Every heartbeat.
pub(crate) fn heartbeats(em: &Emulator) -> String {
    let (records, _) = em.records();
    listing(
        records
            .iter()
            .filter_map(|r| match &r.kind {
                RecordKind::Heartbeat { heartbeat: h } => Some(format!(
                    "#{} heartbeat of {} started_at={} shutting_down={}",
                    r.seq, h.service, h.started_at, h.shutting_down
                )),
                _ => None,
            })
            .collect(),
    )
}

/// Calls of a scripted action.
pub(crate) fn calls(calls: &[Call], names: &RunNames) -> String {
    listing(
        calls
            .iter()
            .map(|c| {
                format!(
                    "{} attempt {} of run {} on replica {}: input {}",
                    c.action,
                    c.attempt,
                    run_name(names, &c.run_id),
                    c.replica,
                    c.input
                )
            })
            .collect(),
    )
}

/// Requests an HTTP stub received.
pub(crate) fn requests(requests: &[wiremock::Request]) -> String {
    listing(
        requests
            .iter()
            .map(|r| {
                let mut headers: Vec<String> = r
                    .headers
                    .iter()
                    .filter(|(n, _)| n.as_str().starts_with("x-triggers") || *n == "content-type")
                    .map(|(n, v)| format!("{n}: {}", v.to_str().unwrap_or("?")))
                    .collect();
                headers.sort();
                format!(
                    "{} {}\n      headers: {}\n      body: {}",
                    r.method,
                    r.url.path(),
                    headers.join("; "),
                    clip(&String::from_utf8_lossy(&r.body))
                )
            })
            .collect(),
    )
}

/// "what arrived:" and the lines, or that nothing did (the last 20 of many).
pub(crate) fn listing(lines: Vec<String>) -> String {
    if lines.is_empty() {
        return "nothing of that kind arrived".into();
    }
    let skipped = lines.len().saturating_sub(20);
    let mut out = String::from("what arrived:");
    if skipped > 0 {
        out.push_str(&format!("\n  ({skipped} earlier not shown)"));
    }
    for l in lines.into_iter().skip(skipped) {
        out.push_str("\n  ");
        out.push_str(&l);
    }
    out
}
