//! `triggers-lab replay FILE`: re-drives a recording (`up --record`) against a running `up` and
//! says, run by run, whether the services still behave as recorded.
//!
//! What is compared is what a test would assert, never ids or times: each run's settled status,
//! the sequence of (node, status) of its completion events, its DLQ entries by subject and kind,
//! and conformance violations the recording did not have. Both sides are read from records (the
//! file's, and the running `up`'s through the control API), so they are judged the same way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use triggers_emulator::control::ControlClient;
use triggers_emulator::recorder::{Record, RecordKind, RunStatus};
use triggers_emulator::recording::advanced_by;
use triggers_sdk::flow::Flow;

use crate::exit::{CliError, OrKind, Result};
use crate::lab_cmd::{ControlArgs, control, status_word};
use crate::out::outln;

/// Options of `triggers-lab replay`.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// The recording (`triggers-lab up --record FILE`).
    file: PathBuf,
    /// How long each run may take to settle (and its DLQ entries to arrive) before it is judged
    /// as it stands.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::parse_duration)]
    settle_timeout: Duration,
    /// Instead of a running `up`: start a nats-server and an emulator of its own with the
    /// scripted services of this scenario file (repeatable), replay against them, and stop them.
    #[arg(long = "services", value_name = "SCENARIO")]
    services: Vec<PathBuf>,
}

/// `replay --services`: a nats-server, an emulator and the scenarios' scripted services, for
/// the replay alone (stopped when it is dropped, or when the process dies).
struct OwnLab {
    services: Vec<triggers_scenarios::ScriptedServices>,
    harness: triggers_emulator::Harness,
}

impl OwnLab {
    async fn start(paths: &[PathBuf]) -> Result<Self> {
        let scenarios = crate::lab_cmd::service_scenarios(paths)?;
        let choice =
            crate::nats_choice::choose(crate::nats_choice::BackendArg::Auto, None, "replay");
        eprintln!(
            "starting a nats-server and an emulator for the replay; {}",
            choice.said
        );
        let harness = triggers_emulator::Harness::start_with(
            choice.config,
            triggers_emulator::EmulatorConfig::default(),
        )
        .await
        .env()?;
        let services = crate::lab_cmd::start_scripted(&scenarios, harness.url(), false).await?;
        Ok(OwnLab { services, harness })
    }

    async fn stop(self) {
        for services in self.services {
            services.stop().await;
        }
        drop(self.harness);
    }
}

/// One thing to do again, in the recording's order.
#[derive(Debug)]
enum Step {
    Deploy(Box<Flow>),
    Trigger {
        was: String,
        flow_id: String,
        entry: String,
        payload: String,
    },
    Advance(Duration),
}

/// What is compared of one run.
#[derive(Debug, Default, PartialEq)]
struct RunFacts {
    /// `succeeded` / `failed`, or `None` when it never settled.
    status: Option<&'static str>,
    /// (node, status) of each completion event, in order.
    steps: Vec<(String, String)>,
    /// (subject, kind) of each DLQ entry, in order.
    dlq: Vec<(String, String)>,
}

/// The steps of a recording; a deploy without its flow (an older recording) cannot be replayed.
fn plan(path: &Path, records: &[Record]) -> Result<Vec<Step>> {
    let mut steps = Vec::new();
    for (i, r) in records.iter().enumerate() {
        match &r.kind {
            RecordKind::Deploy {
                flow: Some(flow), ..
            } => steps.push(Step::Deploy(flow.clone())),
            RecordKind::Deploy { flow_id, .. } => {
                return Err(CliError::usage(format!(
                    "{}: record {} (deploy of {flow_id}) carries no flow: it was recorded by an \
                     older triggers-lab; record it again with this one to replay it",
                    path.display(),
                    r.seq
                )));
            }
            RecordKind::Trigger {
                run_id,
                flow_id,
                entry,
            } => steps.push(Step::Trigger {
                was: run_id.clone(),
                flow_id: flow_id.clone(),
                entry: entry.clone(),
                payload: r.payload.text().into_owned(),
            }),
            RecordKind::ClockAdvanced { .. } => {
                steps.extend(advanced_by(records, i).map(Step::Advance));
            }
            _ => {}
        }
    }
    Ok(steps)
}

/// What `records` say of run `run_id`.
fn facts(records: &[Record], run_id: &str) -> RunFacts {
    let mut facts = RunFacts::default();
    for r in records {
        match &r.kind {
            RecordKind::Completion { event } if event.flow_run_id == run_id => {
                facts
                    .steps
                    .push((event.node_id.clone(), event.status.clone()));
            }
            RecordKind::RunSettled {
                run_id: id, status, ..
            } if id == run_id => facts.status = Some(status_word(*status)),
            RecordKind::Dlq {
                entry: Some(entry), ..
            } if entry.envelope.flow_run_id == run_id => {
                facts.dlq.push((r.subject.clone(), entry.kind.clone()));
            }
            _ => {}
        }
    }
    facts
}

/// Each conformance violation's (severity, rule), counted.
fn violations(records: &[Record]) -> BTreeMap<(String, String), (usize, String)> {
    let mut out: BTreeMap<(String, String), (usize, String)> = BTreeMap::new();
    for r in records {
        if let RecordKind::Violation {
            severity,
            rule,
            message,
        } = &r.kind
        {
            let slot = out
                .entry((severity.clone(), rule.clone()))
                .or_insert((0, message.clone()));
            slot.0 += 1;
        }
    }
    out
}

/// Whether the recorded run was cancelled by hand: where it stopped depends on when someone
/// cancelled it, which a replay cannot know, so its replay is not compared with it.
fn cancelled_by_hand(was: &RunFacts) -> bool {
    was.status == Some(status_word(RunStatus::Cancelled))
}

/// How a run's replay differs from its recording, a phrase a difference; empty when the same.
fn differences(was: &RunFacts, now: &RunFacts) -> Vec<String> {
    let mut out = Vec::new();
    let status = |s: Option<&str>| s.unwrap_or("not settled").to_owned();
    if was.status != now.status {
        out.push(format!(
            "status now {}, was {}",
            status(now.status),
            status(was.status)
        ));
    }
    if was.steps != now.steps {
        // Node by node, in the order the nodes first appear (recorded first, then new ones).
        let mut nodes: Vec<&str> = Vec::new();
        for (node, _) in was.steps.iter().chain(&now.steps) {
            if !nodes.contains(&node.as_str()) {
                nodes.push(node);
            }
        }
        let of = |steps: &[(String, String)], node: &str| -> Vec<String> {
            steps
                .iter()
                .filter(|(n, _)| n == node)
                .map(|(_, s)| s.clone())
                .collect()
        };
        let mut per_node = false;
        for node in nodes {
            let (w, n) = (of(&was.steps, node), of(&now.steps, node));
            if w == n {
                continue;
            }
            per_node = true;
            let say = |s: &[String]| match s.last() {
                None => "not run".to_owned(),
                // The last status is the one that matters; the whole sequence when only the
                // ones before it (the retries) changed.
                Some(_) if w.last() == n.last() => s.join(", "),
                Some(last) => last.clone(),
            };
            out.push(format!("node {node} now {}, was {}", say(&n), say(&w)));
        }
        if !per_node {
            let seq = |s: &[(String, String)]| {
                s.iter()
                    .map(|(n, st)| format!("{n} {st}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            out.push(format!(
                "events in another order: now {}; was {}",
                seq(&now.steps),
                seq(&was.steps)
            ));
        }
    }
    let mut missing = was.dlq.clone();
    let mut new = Vec::new();
    for entry in &now.dlq {
        match missing.iter().position(|e| e == entry) {
            Some(i) => {
                missing.remove(i);
            }
            None => new.push(entry),
        }
    }
    for (subject, kind) in &missing {
        out.push(format!("DLQ entry {subject} {kind} missing"));
    }
    for (subject, kind) in new {
        out.push(format!("DLQ entry {subject} {kind} new"));
    }
    out
}

/// Every record after `since`, a page at a time.
async fn records_since(client: &ControlClient, mut since: u64) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    loop {
        let page = client.records(since, 500).await?;
        let Some(last) = page.last() else {
            return Ok(out);
        };
        since = last.seq;
        out.extend(page);
    }
}

/// Waits until run `run_id` settles, or waits on a timer (only an advance moves it on), or the
/// deadline passes.
async fn wait_run(client: &ControlClient, run_id: &str, limit: Duration) -> Result<()> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let run = client.run(run_id).await?;
        if run.status.is_settled() || run.status == RunStatus::Waiting {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) async fn replay(args: ReplayArgs) -> Result<()> {
    let recording = crate::files::read_recording(&args.file)?;
    let name = args.file.display().to_string();
    if let Some(note) = recording.note(&name) {
        eprintln!("note: {note}");
    }
    let steps = plan(&args.file, &recording.records)?;
    if !steps.iter().any(|s| matches!(s, Step::Trigger { .. })) {
        return Err(CliError::usage(format!(
            "{name} records no run (no trigger record): there is nothing to replay; record one \
             with `triggers-lab up --record FILE` and trigger runs while it records"
        )));
    }
    let own = if args.services.is_empty() {
        None
    } else {
        Some(OwnLab::start(&args.services).await?)
    };
    let client = match &own {
        Some(lab) => ControlClient::connect(lab.harness.url()).await?,
        None => control(&args.control).await?,
    };
    let verdict = replay_on(&args, &name, &steps, &recording.records, &client).await;
    if let Some(lab) = own {
        lab.stop().await;
    }
    verdict
}

/// The replay proper, against `client`'s emulator.
async fn replay_on(
    args: &ReplayArgs,
    name: &str,
    steps: &[Step],
    recorded: &[Record],
    client: &ControlClient,
) -> Result<()> {
    let since = client.state().await?.last_seq;

    // (run in the recording, run now), in trigger order.
    let mut runs: Vec<(String, String)> = Vec::new();
    for step in steps {
        match step {
            Step::Deploy(flow) => {
                client.deploy(flow).await.map_err(|e| {
                    CliError::verdict(format!(
                        "the recorded flow {} was not deployed: {e}",
                        flow.id
                    ))
                })?;
            }
            Step::Trigger {
                was,
                flow_id,
                entry,
                payload,
            } => {
                let payload = if payload.is_empty() { "{}" } else { payload };
                let entry = (!entry.is_empty()).then_some(entry.as_str());
                // A payload that is not JSON (a poison message) goes as it was.
                let json = serde_json::from_str::<serde::de::IgnoredAny>(payload).is_ok();
                let started = if json {
                    client.trigger_at(flow_id, entry, payload).await
                } else {
                    client.trigger_raw(flow_id, entry, payload).await
                };
                let run_id = started.map_err(|e| {
                    CliError::verdict(format!("run {was} of {flow_id} was not started again: {e}"))
                })?;
                if cancelled_by_hand(&facts(recorded, was)) {
                    // Cancelled at once, as it was by hand (best effort: it may have settled
                    // already); it is not compared, so it is not waited for either.
                    let _ = client.cancel(&run_id).await;
                } else {
                    wait_run(client, &run_id, args.settle_timeout).await?;
                }
                runs.push((was.clone(), run_id));
            }
            Step::Advance(by) => {
                client.advance(*by).await?;
            }
        }
    }

    // Runs that waited on a timer settle after the advances; DLQ entries come after a run has
    // settled: wait for both, bounded, until every run has what its recording has.
    // A DLQ entry that is not coming (the service now succeeds) costs a grace period, not the
    // whole timeout.
    const DLQ_GRACE: Duration = Duration::from_secs(3);
    let mut deadline = tokio::time::Instant::now() + args.settle_timeout;
    let mut settled = false;
    let mut now_records;
    loop {
        now_records = records_since(client, since).await?;
        let all_settled = runs
            .iter()
            .all(|(_, now)| facts(&now_records, now).status.is_some());
        let all_there = all_settled
            && runs.iter().all(|(was, now)| {
                facts(&now_records, now).dlq.len() >= facts(recorded, was).dlq.len()
            });
        if all_there || tokio::time::Instant::now() >= deadline {
            break;
        }
        if all_settled && !settled {
            settled = true;
            deadline = deadline.min(tokio::time::Instant::now() + DLQ_GRACE);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut differing = 0;
    let mut not_compared = 0u64;
    for (i, (was, now)) in runs.iter().enumerate() {
        let was_facts = facts(recorded, was);
        if cancelled_by_hand(&was_facts) {
            outln!(
                "run {} (was {was}): cancelled by hand in the recording: not compared (a replay \
                 cannot cancel it at the same point)",
                i + 1
            );
            not_compared += 1;
            continue;
        }
        let diff = differences(&was_facts, &facts(&now_records, now));
        if diff.is_empty() {
            outln!("run {} (was {was}): same", i + 1);
        } else {
            differing += 1;
            outln!("run {} (was {was}): differs: {}", i + 1, diff.join("; "));
        }
    }
    let (before, after) = (violations(recorded), violations(&now_records));
    let mut new_violations = 0;
    for ((severity, rule), (count, message)) in &after {
        let had = before
            .get(&(severity.clone(), rule.clone()))
            .map_or(0, |(n, _)| *n);
        if *count > had {
            new_violations += 1;
            outln!(
                "new conformance violation: [{severity}] {rule} ({} more than recorded): {message}",
                count - had
            );
        }
    }
    if differing > 0 || new_violations > 0 {
        return Err(CliError::verdict(format!(
            "the replay of {name} differs from its recording: {differing} of {} differ, \
             {} of conformance violation",
            crate::out::count(runs.len() as u64, "run"),
            crate::out::count(new_violations as u64, "new kind")
        )));
    }
    outln!(
        "replay of {name}: {} the same as recorded{}",
        match runs.len() {
            1 => "the 1 run".to_owned(),
            n => format!("all {n} runs"),
        },
        if not_compared > 0 {
            format!(
                " ({} cancelled by hand not compared)",
                crate::out::count(not_compared, "run")
            )
        } else {
            String::new()
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(s: &[(&str, &str)]) -> Vec<(String, String)> {
        s.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    #[test]
    fn a_run_cancelled_by_hand_is_not_compared() {
        let was = RunFacts {
            status: Some("cancelled"),
            steps: steps(&[("a", "succeeded")]),
            dlq: Vec::new(),
        };
        assert!(cancelled_by_hand(&was));
        let failed = RunFacts {
            status: Some("failed"),
            ..RunFacts::default()
        };
        assert!(!cancelled_by_hand(&failed));
    }

    #[test]
    fn the_same_run_has_no_difference() {
        let run = RunFacts {
            status: Some("failed"),
            steps: steps(&[("a", "succeeded"), ("b", "failed")]),
            dlq: steps(&[("triggers.v2.dlq.s.b", "action_failed")]),
        };
        assert!(differences(&run, &run).is_empty());
    }

    #[test]
    fn a_node_that_now_succeeds_is_named_with_the_dlq_entry_missing() {
        let was = RunFacts {
            status: Some("failed"),
            steps: steps(&[("a", "retrying"), ("a", "failed")]),
            dlq: steps(&[("triggers.v2.dlq.s.a", "action_failed")]),
        };
        let now = RunFacts {
            status: Some("succeeded"),
            steps: steps(&[("a", "succeeded"), ("b", "succeeded")]),
            dlq: Vec::new(),
        };
        assert_eq!(
            differences(&was, &now),
            [
                "status now succeeded, was failed",
                "node a now succeeded, was failed",
                "node b now succeeded, was not run",
                "DLQ entry triggers.v2.dlq.s.a action_failed missing",
            ]
        );
    }

    #[test]
    fn only_the_retries_changed_shows_the_sequences() {
        let was = RunFacts {
            steps: steps(&[("a", "retrying"), ("a", "succeeded")]),
            ..RunFacts::default()
        };
        let now = RunFacts {
            steps: steps(&[("a", "succeeded")]),
            ..RunFacts::default()
        };
        assert_eq!(
            differences(&was, &now),
            ["node a now succeeded, was retrying, succeeded"]
        );
    }
}
