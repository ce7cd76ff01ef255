//! The accounting: each run of a batch against its plan, and at the end the DLQ stream's count,
//! the streams' completeness, the drop counters, the services' stats and the violations.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use triggers_emulator::recorder::{Run, RunStatus};
use triggers_emulator::{Emulator, Harness};
use triggers_sdk::runtime::RunningService;

use super::report::DUPLICATE_OR_LOSS_RULES;
use super::{
    MAX_FOLLOWED_RUNS, NODES, RunPlan, SoakReport, Successes, hostile, nats_server_pid,
    peak_rss_kib,
};

/// Checks each run of a batch against its plan, then that no run appeared that the driver did
/// not start.
pub(super) async fn check_batch(
    emulator: &Emulator,
    batch: &[String],
    plans: &HashMap<String, (usize, RunPlan)>,
    successes: &Successes,
    report: &mut SoakReport,
) {
    for id in batch {
        let Some((n, plan)) = plans.get(id) else {
            continue;
        };
        let Some(run) = settled(emulator, id, plan, report).await else {
            continue;
        };
        report.checked += 1;
        let problems = compare(&run, plan, report);
        let reruns = handler_reruns(successes, *n as u64);
        report.handler_reruns += u64::from(reruns);
        if !problems.is_empty() {
            report
                .problems
                .push(format!("run {id} ({plan:?}): {}", problems.join("; ")));
        }
    }
    // A run the driver did not start is a duplicate: events for a run it had already settled
    // and that was evicted, followed anew. The hostile client's made-up runs are its own.
    for run in emulator.runs() {
        if !run.id.starts_with("soak-") && !run.id.starts_with(hostile::FAKE_RUN_PREFIX) {
            report.duplicated += 1;
            report.problems.push(format!(
                "a run the driver did not start: {} ({:?})",
                run.id, run.status
            ));
        }
    }
}

/// The run once settled, with the DLQ entry its plan owes when one comes; `None`, counted as
/// partial or lost, when it did not settle.
async fn settled(
    emulator: &Emulator,
    id: &str,
    plan: &RunPlan,
    report: &mut SoakReport,
) -> Option<Run> {
    let run = match emulator.wait_run_settled(id).await {
        Ok(run) => run,
        Err(e) => {
            if emulator.run(id).is_none() {
                report.partial.push(format!(
                    "run {id} is not in the emulator (evicted before it was checked?): {e}"
                ));
            } else {
                report.lost += 1;
                report.problems.push(format!(
                    "run {id} ({plan:?}) did not settle: {}",
                    emulator.describe_run(id)
                ));
            }
            return None;
        }
    };
    let (_, _, dlq) = plan.expect();
    // A run settles on its failed completion; its DLQ entry is read from another stream and
    // may come a moment later.
    if dlq > 0 && run.dlq.is_empty() {
        let _ = emulator
            .wait_dlq(triggers_emulator::DlqFilter::run(id))
            .await;
        return Some(emulator.run(id).unwrap_or(run));
    }
    Some(run)
}

/// A settled run against its plan: its status, each node's executions, its DLQ entries, no
/// unexpected completions. Counts into the report and returns what differs.
fn compare(run: &Run, plan: &RunPlan, report: &mut SoakReport) -> Vec<String> {
    let (status, executions, dlq) = plan.expect();
    report.dlq_owed += dlq;
    let mut problems = Vec::new();
    if run.status != status {
        report.wrong_status += 1;
        problems.push(format!("status {:?}, planned {status:?}", run.status));
    }
    match run.status {
        RunStatus::Succeeded => report.succeeded += 1,
        RunStatus::Failed => report.failed += 1,
        _ => {}
    }
    for (node, owed) in NODES.iter().zip(executions) {
        let ran = run.executions(node);
        if ran < owed {
            report.lost += u64::from(owed - ran);
        } else if ran > owed {
            report.duplicated += u64::from(ran - owed);
        }
        if ran != owed {
            problems.push(format!("{node} ran {ran} times, owed {owed}"));
        }
    }
    let dlq_seen = run.dlq.len() as u64;
    // More is counted once, from the DLQ stream at the end (a late repeat is only there).
    if dlq_seen < dlq {
        report.lost += dlq - dlq_seen;
    }
    if dlq_seen != dlq {
        problems.push(format!("{dlq_seen} DLQ entries, owed {dlq}"));
    }
    if !run.unexpected.is_empty() {
        report.duplicated += run.unexpected.len() as u64;
        problems.push(format!("unexpected completions {:?}", run.unexpected));
    }
    problems
}

/// Successes of run number `n`'s handlers beyond the first, over its nodes.
fn handler_reruns(successes: &Successes, n: u64) -> u32 {
    let s = successes.lock().unwrap_or_else(|e| e.into_inner());
    (0u8..3)
        .map(|k| s.get(&(n, k)).copied().unwrap_or(0).saturating_sub(1))
        .sum()
}

/// Reads the whole DLQ stream and counts the entries that repeat another for the same delivery.
async fn dlq_repeats(
    stream: &async_nats::jetstream::stream::Stream,
    count: u64,
    report: &mut SoakReport,
) {
    use async_nats::jetstream::consumer::{DeliverPolicy, pull::OrderedConfig};
    let messages = match stream
        .create_consumer(OrderedConfig {
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
    {
        Ok(consumer) => consumer.messages().await,
        Err(e) => {
            report
                .partial
                .push(format!("cannot read the DLQ stream: {e}"));
            return;
        }
    };
    let Ok(mut messages) = messages else {
        report.partial.push("cannot read the DLQ stream".into());
        return;
    };
    let mut seen: HashMap<(String, String), u32> = HashMap::new();
    let mut read = 0;
    while read < count {
        match tokio::time::timeout(Duration::from_secs(10), messages.next()).await {
            Ok(Some(Ok(msg))) => {
                read += 1;
                let key = triggers_sdk::wire::DlqEntry::from_json(&msg.payload)
                    .map(|e| (e.envelope.idempotency_key, e.envelope.flow_run_id))
                    .unwrap_or_default();
                let n = seen.entry((msg.subject.to_string(), key.0)).or_default();
                *n += 1;
                if *n > 1 {
                    report.dlq_repeats += 1;
                    report.dlq_repeat_runs.push(key.1);
                }
            }
            _ => {
                report
                    .partial
                    .push(format!("read {read} of the DLQ stream's {count} entries"));
                return;
            }
        }
    }
    if report.dlq_repeats > 0 {
        report.duplicated += report.dlq_repeats;
        report.problems.push(format!(
            "{} DLQ entries repeat one for the same delivery (runs {:?}): a failure run again by another replica after a server kill lost the first one's ack; the DLQ Nats-Msg-Id's instant differs, so JetStream keeps both",
            report.dlq_repeats, report.dlq_repeat_runs
        ));
    }
}

/// The end of the soak: quiet time for late messages, then the DLQ stream's count, the streams'
/// completeness, the drop counters, the services' stats and the violations.
pub(super) async fn finish(
    lab: &Harness,
    services: &[RunningService],
    successes: &Successes,
    report: &mut SoakReport,
) {
    // Late duplicates (a redelivery after a crash) would arrive now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let js = async_nats::jetstream::new(lab.client().clone());
    for name in [
        triggers_emulator::DLQ_STREAM,
        triggers_emulator::EVENTS_STREAM,
    ] {
        match js.get_stream(name).await {
            Ok(mut stream) => match stream.info().await.cloned() {
                Ok(info) => {
                    if info.state.first_sequence > 1 {
                        report.partial.push(format!(
                            "stream {name} discarded messages (first sequence {}): the accounting would be partial",
                            info.state.first_sequence
                        ));
                    }
                    if name == triggers_emulator::DLQ_STREAM {
                        report.dlq_stored = info.state.messages;
                        dlq_repeats(&stream, info.state.messages, report).await;
                    }
                }
                Err(e) => report.partial.push(format!("stream {name}: {e}")),
            },
            Err(e) => report.partial.push(format!("stream {name}: {e}")),
        }
    }
    let state = lab.emulator().summary();
    if state.dropped_messages > 0 {
        report.partial.push(format!(
            "the emulator's subscriptions dropped {} messages (slow consumer)",
            state.dropped_messages
        ));
    }
    for s in services {
        if s.dropped_messages() > 0 {
            report.partial.push(format!(
                "a replica of {} dropped {} messages (slow consumer)",
                s.name(),
                s.dropped_messages()
            ));
        }
        let stats = s.stats();
        report.given_up += stats.given_up;
        report.cache_evictions += stats.handled_keys_evicted + stats.outcomes_evicted;
    }
    if state.dropped_violations > 0 {
        report.partial.push(format!(
            "{} violations were counted, not kept",
            state.dropped_violations
        ));
    }
    for v in lab.violations() {
        *report.violations.entry(v.rule.to_owned()).or_default() += 1;
        if DUPLICATE_OR_LOSS_RULES.contains(&v.rule) {
            report.problems.push(format!("{}: {}", v.rule, v.message));
        }
    }
    let _ = successes;
    report.unfollowed_runs = state.unfollowed_runs;
    if report.fake_events > MAX_FOLLOWED_RUNS as u64 && report.unfollowed_runs == 0 {
        report.problems.push(format!(
            "hostile: {} fake events for made-up runs, and none went unfollowed: max_followed_runs ({MAX_FOLLOWED_RUNS}) was not reached",
            report.fake_events
        ));
    }
    report.peak_rss_kib = peak_rss_kib(None);
    report.nats_peak_rss_kib = report
        .nats_peak_rss_kib
        .max(peak_rss_kib(nats_server_pid(lab.url())));
}
