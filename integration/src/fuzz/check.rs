//! The check after each batch: everything still lives, every message had an outcome, and
//! everything stayed within its bounds (see the module above for the list).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::json;
use triggers_emulator::recorder::{Record, RecordKind, RunStatus};

use super::{CANARY, FuzzReport, Fuzzer, INBOUND, MAX_FLOWS, SERVICE, Sent, preview};

/// Checks what a batch sent, and the emulator and the service after it.
pub(super) async fn check_batch(fuzzer: &Fuzzer, batch: &Sent, report: &mut FuzzReport) {
    if !liveness(fuzzer, batch.n, report).await {
        return;
    }
    consumer_drained(&fuzzer.js, batch.n, report).await;
    canary(fuzzer, batch.n, report).await;
    if outcomes(fuzzer, batch, report).await {
        bounds(fuzzer, batch, report);
    }
}

/// The nats-server lives and the control API answers within a second. Returns false when the
/// server is gone: nothing else can be checked.
async fn liveness(fuzzer: &Fuzzer, n: u64, report: &mut FuzzReport) -> bool {
    if crate::soak::nats_server_pid(fuzzer.lab.url()).is_none() {
        report.crashes += 1;
        report
            .problems
            .push(format!("after message {n}: the nats-server is gone"));
        return false;
    }
    match tokio::time::timeout(Duration::from_secs(1), fuzzer.control.state()).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            report.crashes += 1;
            report
                .problems
                .push(format!("after message {n}: the control API failed: {e}"));
        }
        Err(_) => {
            report.hangs += 1;
            report.problems.push(format!(
                "after message {n}: the control API did not answer within 1 s"
            ));
        }
    }
    true
}

/// Every inbound delivery handled or dead-lettered: the service's consumer has nothing left
/// within 30 s.
async fn consumer_drained(js: &async_nats::jetstream::Context, n: u64, report: &mut FuzzReport) {
    let consumer = triggers_sdk::wire::subject::consumer_name(SERVICE, INBOUND).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let idle = match js.get_stream(format!("triggers-sources-{SERVICE}")).await {
            Ok(stream) => match stream.consumer_info(&consumer).await {
                Ok(info) => info.num_pending == 0 && info.num_ack_pending == 0,
                Err(_) => false,
            },
            Err(_) => false,
        };
        if idle {
            return;
        }
        if Instant::now() >= deadline {
            report.hangs += 1;
            report.problems.push(format!(
                "after message {n}: the service's consumer still has work after 30 s"
            ));
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The canary: the service still runs a flow to success.
async fn canary(fuzzer: &Fuzzer, n: u64, report: &mut FuzzReport) {
    let lab = &fuzzer.lab;
    match lab.trigger(CANARY, &json!({"canary": n})).await {
        Ok(run) => match lab.wait_run_settled(&run).await {
            Ok(r) if r.status == RunStatus::Succeeded => {}
            Ok(r) => report.problems.push(format!(
                "after message {n}: the canary run ended {:?}",
                r.status
            )),
            Err(e) => {
                report.hangs += 1;
                report.problems.push(format!(
                    "after message {n}: the canary run did not settle: {e}"
                ));
            }
        },
        Err(e) => {
            report.crashes += 1;
            report.problems.push(format!(
                "after message {n}: the canary could not be triggered: {e}"
            ));
        }
    }
}

/// What of a batch has no outcome yet.
struct Missing {
    /// Published messages with no record of their subject and bytes (indexes into the batch).
    records: Vec<usize>,
    /// Inbound runs with neither a completion nor a DLQ entry.
    runs: Vec<String>,
    /// Inbound deliveries without a run id, beyond the DLQ entries without one.
    without_run: u64,
}

impl Missing {
    /// Each published message recorded under its subject with its bytes; each delivery's run
    /// completed or dead-lettered.
    fn in_records(records: &[Record], batch: &Sent) -> Self {
        let seen: HashSet<(&str, &[u8])> = records
            .iter()
            .map(|r| (r.subject.as_str(), r.payload.as_bytes()))
            .collect();
        let missing_records = batch
            .published
            .iter()
            .enumerate()
            .filter(|(_, m)| !seen.contains(&(m.subject.as_str(), m.body.as_slice())))
            .map(|(i, _)| i)
            .collect();
        let mut settled_runs: HashSet<&str> = HashSet::new();
        let mut without_run = 0u64;
        for r in records {
            let run = match &r.kind {
                RecordKind::Completion { event } => Some(event.flow_run_id.as_str()),
                RecordKind::Dlq {
                    entry: Some(entry), ..
                } => Some(entry.envelope.flow_run_id.as_str()),
                _ => None,
            };
            match run {
                Some("") => without_run += 1,
                Some(id) => {
                    settled_runs.insert(id);
                }
                None => {}
            }
        }
        Missing {
            records: missing_records,
            runs: (batch.inbound_runs.iter())
                .filter(|r| !settled_runs.contains(r.as_str()))
                .cloned()
                .collect(),
            without_run: batch.without_run.saturating_sub(without_run),
        }
    }

    fn is_empty(&self) -> bool {
        self.records.is_empty() && self.runs.is_empty() && self.without_run == 0
    }
}

/// Waits up to 10 s for every message of the batch to have its outcome (events and DLQ entries
/// come through streams), then counts. Returns false when the batch's records fell off the ring
/// before they could be checked: that is partial, not passed.
async fn outcomes(fuzzer: &Fuzzer, batch: &Sent, report: &mut FuzzReport) -> bool {
    let lab = &fuzzer.lab;
    let deadline = Instant::now() + Duration::from_secs(10);
    let missing = loop {
        let records = lab.records_since(batch.since, usize::MAX);
        let first = records.first().map(|r| r.seq);
        if lab.records().1 > batch.dropped_before && first.is_some_and(|f| f > batch.since + 1) {
            report.partial.push(format!(
                "after message {}: records of the batch fell off the ring before they were checked",
                batch.n
            ));
            return false;
        }
        let missing = Missing::in_records(&records, batch);
        if missing.is_empty() || Instant::now() >= deadline {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    account(missing, fuzzer.running.stats().given_up, batch, report);
    true
}

/// Counts the outcomes and what has none, less the deliveries the service gave up on; names the
/// first few without one.
fn account(missing: Missing, given_up: u64, batch: &Sent, report: &mut FuzzReport) {
    let (by_key, missing_runs): (Vec<String>, Vec<String>) = missing
        .runs
        .into_iter()
        .partition(|r| batch.reused_key.contains(r));
    report.outcome("deduplicated_by_key", by_key.len() as u64);
    let published = batch.published.len() as u64;
    let unaccounted =
        missing.records.len() as u64 + missing_runs.len() as u64 + missing.without_run;
    report.outcome("recorded", published - missing.records.len() as u64);
    let settled = batch.inbound_runs.len() - missing_runs.len() - by_key.len();
    report.outcome("completed_or_dead_lettered", settled as u64);
    report.unaccounted += unaccounted.saturating_sub(given_up);
    for i in missing.records.iter().take(5) {
        let m = &batch.published[*i];
        report.problems.push(format!(
            "{} message on {} has no record: headers {:?}, body {}",
            m.target,
            m.subject,
            m.headers.iter().take(12).collect::<Vec<_>>(),
            preview(&m.body)
        ));
    }
    for r in missing_runs.iter().take(5) {
        let key = batch
            .run_keys
            .get(r)
            .map(String::as_str)
            .unwrap_or_default();
        report.problems.push(format!(
            "delivery for run {r}: neither a completion nor a DLQ entry (idempotency key {key:?})"
        ));
    }
    if missing.without_run > 0 {
        report.problems.push(format!(
            "{} deliveries without a run id had no DLQ entry",
            missing.without_run
        ));
    }
}

/// Records, runs, violations and the service's flows within their bounds.
fn bounds(fuzzer: &Fuzzer, batch: &Sent, report: &mut FuzzReport) {
    let lab = &fuzzer.lab;
    let config = lab.config();
    let (records, _) = lab.records();
    let bytes: usize = records.iter().map(|r| r.size()).sum();
    let all_runs = lab.runs();
    let settled = all_runs.iter().filter(|r| r.status.is_settled()).count();
    let unsettled = all_runs.len() - settled;
    let started_unsettled = all_runs
        .iter()
        .filter(|r| !r.status.is_settled() && !r.is_followed())
        .count();
    let followed_unsettled = unsettled - started_unsettled;
    let violations = lab.violations().len();
    let flows = fuzzer.running.flows().len();
    let slack = config.max_runs / 10 + 1;
    for (what, value, bound) in [
        ("records", records.len(), config.max_records),
        ("record bytes", bytes, config.max_record_bytes),
        ("settled runs", settled, config.max_runs + slack),
        // Never evicted by design: the canary's, and those the fuzzer's control requests
        // started (a timer on the fuzzer's clock may keep them waiting).
        (
            "running or waiting runs it started",
            started_unsettled,
            batch.control_runs + 1,
        ),
        // Followed from fuzzed events for made-up runs (open while their node said
        // `retrying`): a bound of their own, reached under fuzz.
        (
            "running or waiting runs followed from events",
            followed_unsettled,
            config.max_followed_runs,
        ),
        ("violations", violations, config.max_violations),
        ("the service's flows", flows, MAX_FLOWS),
    ] {
        if value > bound {
            report.bound_breaches += 1;
            report.problems.push(format!(
                "after message {}: {what} {value} above the bound {bound}",
                batch.n
            ));
        }
    }
}
