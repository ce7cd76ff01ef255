//! The commands that look at, or stop, running `up`s: `status`, `down`, `runs`, `flows`,
//! `services`. Each that prints data takes `--json` (the same data, for tools).

use std::time::Duration;

use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::{Value, json};
use triggers_emulator::control::{ControlClient, StateSummary};

use crate::discovery::{self, Instance};
use crate::exit::{CliError, OrKind, Result};
use crate::lab_cmd::{ControlArgs, Target, control, print_timeline, status_word};
use crate::out::{count, outln};

/// `--json`.
#[derive(Debug, Args)]
pub(crate) struct JsonArg {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `runs`.
#[derive(Debug, Subcommand)]
pub(crate) enum RunsCommand {
    /// Every run the emulator holds, oldest first (read a page at a time, so any number of them).
    List {
        /// Only the newest N runs (N ≥ 1).
        #[arg(long, value_name = "N")]
        last: Option<std::num::NonZeroUsize>,
        #[command(flatten)]
        json: JsonArg,
    },
    /// One run: its status, what is pending, its timeline.
    Show {
        /// The run id (as `trigger` printed it).
        id: String,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Cancel an open run: the emulator drops what it still owes it (the nodes it waits on, its
    /// armed timers) and it settles as `cancelled`; events that come later are recorded on its
    /// timeline without reopening it. Exit 1 when it is unknown or settled already.
    Cancel {
        /// The run id (as `trigger` printed it).
        id: String,
        #[command(flatten)]
        json: JsonArg,
    },
}

fn print_json(value: &impl Serialize) -> Result<()> {
    outln!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

async fn state(args: &ControlArgs) -> Result<StateSummary> {
    Ok(control(args).await?.state().await?)
}

/// Nothing running is the environment's state, as for `down`, `trigger` and `watch`: exit 3.
fn none_running(none: bool) -> Result<()> {
    if none {
        return Err(CliError::env(
            "no running `triggers-lab up`: start one with `triggers-lab up --detach`",
        ));
    }
    Ok(())
}

/// `triggers-lab status`: every running `up`, and what each holds; exit 3 when none runs.
pub(crate) async fn status(json: JsonArg) -> Result<()> {
    let running = discovery::running().env()?;
    let mut rows = Vec::new();
    for i in &running {
        let target = Target::from(i);
        // Bounded: a wedged `up` must not hang `status`.
        let summary = tokio::time::timeout(Duration::from_secs(5), async {
            ControlClient::connect_with(&i.url, &target.access)
                .await?
                .state()
                .await
        })
        .await
        .unwrap_or_else(|_| {
            Err(triggers_emulator::ControlError::NoEmulator {
                url: i.url.clone(),
                reason: "no reply within 5 s".into(),
            })
        });
        rows.push((i, summary));
    }
    if json.json {
        let value: Vec<Value> = rows
            .iter()
            .map(|(i, s)| {
                let error = s.as_ref().err().map(ToString::to_string);
                let answers = !matches!(s, Err(triggers_emulator::ControlError::NoEmulator { .. }));
                let s = s.as_ref().ok();
                json!({
                    "instance": i.instance, "pid": i.pid, "url": i.url, "backend": i.backend,
                    "answers": answers,
                    "error": error,
                    "services": s.map(|s| s.services_total.max(s.services.len())),
                    "flows": s.map(|s| s.flows_total.max(s.flows.len())),
                    "runs": s.map(|s| s.runs_total.max(s.runs.len())),
                    "violations": s.map(|s| s.violations),
                    "dropped_messages": s.map(|s| s.dropped_messages),
                    "connection_losses": s.map(|s| s.connection_losses),
                    "dropped_records": s.map(|s| s.dropped_records),
                    "evicted_runs": s.map(|s| s.evicted_runs),
                    "unfollowed_runs": s.map(|s| s.unfollowed_runs),
                    "streams_lost": s.map(|s| s.streams_lost),
                })
            })
            .collect();
        print_json(&value)?;
        return none_running(rows.is_empty());
    }
    none_running(rows.is_empty())?;
    for (i, s) in &rows {
        outln!("{}  pid {}  {}  ({})", i.instance, i.pid, i.url, i.backend);
        match s {
            Ok(s) => {
                outln!(
                    "  {}, {}, {}, {}; clock {}",
                    count(s.services_total.max(s.services.len()) as u64, "service"),
                    count(s.flows_total.max(s.flows.len()) as u64, "flow"),
                    count(s.runs_total.max(s.runs.len()) as u64, "run"),
                    count(s.violations as u64, "violation"),
                    s.clock
                );
                for warning in losses(s) {
                    outln!("  {warning}");
                }
            }
            Err(triggers_emulator::ControlError::NoEmulator { reason, .. }) => {
                outln!("  (its emulator does not answer: {reason})");
            }
            Err(e) => outln!("  (its emulator answers with an error: {e})"),
        }
    }
    Ok(())
}

/// What the emulator missed or let go, one line each, in words; nothing when it missed nothing.
fn losses(s: &StateSummary) -> Vec<String> {
    let mut lines = Vec::new();
    if s.dropped_messages > 0 {
        lines.push(format!(
            "MISSED: NATS dropped {} message(s) the emulator could not take in time (slow consumer): what it recorded and judged is incomplete",
            s.dropped_messages
        ));
    }
    if s.connection_losses > 0 {
        lines.push(format!(
            "MISSED: the emulator lost its NATS connection {} time(s): messages on plain subjects published meanwhile (triggers, heartbeats) were not seen",
            s.connection_losses
        ));
    }
    if s.streams_lost > 0 {
        lines.push(format!(
            "LOST: the emulator's stream TRIGGERS_EVENTS or TRIGGERS_DLQ disappeared {} time(s) (deleted by a client?) and was made again: what was published meanwhile is lost, and runs waiting on it may never settle (`violations`: emulator_stream_lost)",
            s.streams_lost
        ));
    }
    if s.dropped_records > 0 {
        lines.push(format!(
            "{} record(s) dropped off the emulator's ring (max_records, max_record_bytes; `up --max-records` raises the first)",
            s.dropped_records
        ));
    }
    if s.evicted_runs > 0 {
        lines.push(format!(
            "{} settled run(s) evicted beyond max_runs (`up --max-runs` raises it)",
            s.evicted_runs
        ));
    }
    if s.unfollowed_runs > 0 {
        lines.push(format!(
            "NOT FOLLOWED: {} completion event(s) of runs the emulator did not start, while max_followed_runs such runs were open (`up --max-followed-runs` raises it)",
            s.unfollowed_runs
        ));
    }
    lines
}

/// `triggers-lab down`: stops running `up`s (SIGTERM, as Ctrl-C would), and waits until they
/// are gone.
pub(crate) async fn down(instance: Option<String>, all: bool) -> Result<()> {
    let running = discovery::running().env()?;
    let chosen: Vec<&Instance> = match (&instance, all) {
        (Some(_), true) => {
            return Err(CliError::usage("give --instance NAME or --all, not both"));
        }
        (Some(name), false) => running.iter().filter(|i| &i.instance == name).collect(),
        (None, true) => running.iter().collect(),
        (None, false) if running.len() > 1 => {
            return Err(CliError::usage(format!(
                "{} `triggers-lab up`s are running ({}): say which with --instance NAME, or --all",
                running.len(),
                running
                    .iter()
                    .map(|i| i.instance.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        (None, false) => running.iter().collect(),
    };
    if chosen.is_empty() {
        return Err(CliError::env(match instance {
            Some(name) => format!("no running `triggers-lab up` is named {name}"),
            None => "no `triggers-lab up` is running".to_owned(),
        }));
    }
    for i in chosen {
        discovery::terminate(i.pid).failed()?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while discovery::alive(i.pid) {
            if tokio::time::Instant::now() > deadline {
                return Err(CliError::env(format!(
                    "`up` {} (pid {}) did not stop within 30 s of SIGTERM",
                    i.instance, i.pid
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        outln!("stopped {} (pid {}, {})", i.instance, i.pid, i.url);
    }
    Ok(())
}

/// `triggers-lab runs list|show|cancel`.
pub(crate) async fn runs(args: ControlArgs, command: RunsCommand) -> Result<()> {
    match command {
        RunsCommand::List { last, json } => {
            let client = control(&args).await?;
            let runs = match last.map(std::num::NonZeroUsize::get) {
                // The newest N are in the state summary when they fit in one message; else paged.
                Some(n) => {
                    let s = client.state_with_runs(n).await?;
                    if s.runs.len() >= n.min(s.runs_total) {
                        s.runs
                    } else {
                        let mut all = client.run_summaries().await?;
                        all.drain(..all.len().saturating_sub(n));
                        all
                    }
                }
                None => client.run_summaries().await?,
            };
            if json.json {
                return print_json(&runs);
            }
            if runs.is_empty() {
                outln!("no runs yet (`triggers-lab trigger FLOW` starts one)");
            }
            for r in &runs {
                outln!(
                    "{}  {:<9}  {}  {}{}",
                    r.id,
                    status_word(r.status),
                    r.flow_id,
                    count(r.steps as u64, "step"),
                    if r.failed.is_empty() {
                        String::new()
                    } else {
                        format!("  failed: {}", r.failed.join(", "))
                    }
                );
            }
        }
        RunsCommand::Show { id, json } => {
            let run = control(&args).await?.run(&id).await?;
            if json.json {
                return print_json(&run);
            }
            outln!(
                "run {}  flow {} v{}  {}",
                run.id,
                run.flow_id,
                run.flow_version,
                status_word(run.status)
            );
            if !run.pending.is_empty() {
                let pending: Vec<&str> = run.pending.keys().map(String::as_str).collect();
                outln!("  pending: {}", pending.join(", "));
            }
            for t in &run.timers {
                outln!("  timer {} due {}", t.node_id, t.due);
            }
            print_timeline(&run);
            // The run's DLQ entries in full: what failed, with what, and why.
            if !run.dlq.is_empty() {
                let client = control(&args).await?;
                outln!(
                    "  {} DLQ entr{}:",
                    run.dlq.len(),
                    if run.dlq.len() == 1 { "y" } else { "ies" }
                );
                for seq in &run.dlq {
                    match client.records(seq.saturating_sub(1), 1).await?.first() {
                        Some(r) if r.seq == *seq => print_dlq_entry(r, "    "),
                        _ => outln!(
                            "    DLQ entry #{seq}: no longer held (beyond `up --max-records`)"
                        ),
                    }
                }
            }
        }
        RunsCommand::Cancel { id, json } => {
            let cancelled = control(&args).await?.cancel(&id).await?;
            if json.json {
                return print_json(&cancelled);
            }
            outln!("run {} {cancelled}", cancelled.run_id);
        }
    }
    Ok(())
}

/// `triggers-lab flows`.
pub(crate) async fn flows(args: ControlArgs, json: JsonArg) -> Result<()> {
    let client = control(&args).await?;
    let list = client.flow_list().await?;
    if json.json {
        // Whole, one at a time: together they may not fit in one message.
        let mut flows = Vec::with_capacity(list.len());
        for f in &list {
            flows.push(client.flow(&f.id).await?);
        }
        return print_json(&flows);
    }
    if list.is_empty() {
        outln!("no flows deployed (`triggers-lab deploy FLOW.yaml`)");
    }
    for f in &list {
        outln!(
            "{}  v{}  {}  services: {}",
            f.id,
            f.version,
            count(f.nodes as u64, "node"),
            f.services.join(", ")
        );
    }
    Ok(())
}

/// `triggers-lab services`.
pub(crate) async fn services(args: ControlArgs, json: JsonArg) -> Result<()> {
    let s = state(&args).await?;
    if json.json {
        return print_json(&s.services);
    }
    if s.services.is_empty() {
        outln!("no services registered (start one with TRIGGERS_NATS_URL pointing at `up`)");
    }
    for sv in &s.services {
        let liveness = serde_json::to_value(sv.liveness)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        outln!(
            "{}  {}  {}  actions: {}",
            sv.name,
            sv.version,
            liveness,
            if sv.actions.is_empty() && sv.action_count > 0 {
                format!(
                    "{} (their names left out: the state was too large to send them)",
                    sv.action_count
                )
            } else {
                sv.actions.join(", ")
            }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_emulator_missed_is_said_and_nothing_when_it_missed_nothing() {
        let mut s: StateSummary = serde_json::from_value(json!({
            "clock": "2026-12-02T00:00:00Z", "clock_mode": "virtual", "services": [],
            "flows": [], "runs": [], "violations": 0, "last_seq": 0, "dropped_records": 0
        }))
        .unwrap();
        assert!(losses(&s).is_empty());
        s.connection_losses = 2;
        s.dropped_messages = 7;
        let lines = losses(&s);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("MISSED: NATS dropped 7 message(s)"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("MISSED: the emulator lost its NATS connection 2 time(s)"),
            "{lines:?}"
        );
    }
}

/// `dlq`.
#[derive(Debug, Subcommand)]
pub(crate) enum DlqCommand {
    /// The DLQ entries the emulator holds, oldest first: subject, kind, run, message id, error.
    List {
        /// Only the entries of this run (its id, as `trigger` printed it).
        #[arg(long, value_name = "ID")]
        run: Option<String>,
        #[command(flatten)]
        json: JsonArg,
    },
    /// One DLQ entry in full: kind, subject, envelope, body, error.
    Show {
        /// Its message id (`Nats-Msg-Id`, as `dlq list` prints it).
        msg_id: String,
        #[command(flatten)]
        json: JsonArg,
    },
}

/// Records read a page at a time.
const RECORD_PAGE: usize = 500;
/// The most records read looking for DLQ entries: the emulator keeps 100 000 by default
/// (`up --max-records`); a bound all the same.
const MAX_RECORDS_READ: u64 = 10_000_000;

/// Every DLQ record the emulator holds, oldest first.
pub(crate) async fn dlq_records(
    client: &ControlClient,
) -> Result<Vec<triggers_emulator::recorder::Record>> {
    let mut out = Vec::new();
    let mut since = 0;
    loop {
        let page = client.records(since, RECORD_PAGE).await?;
        let Some(last) = page.last() else { break };
        since = last.seq;
        out.extend(
            page.into_iter()
                .filter(|r| matches!(r.kind, triggers_emulator::recorder::RecordKind::Dlq { .. })),
        );
        if since >= MAX_RECORDS_READ {
            break;
        }
    }
    Ok(out)
}

/// A DLQ record's run id, kind and error (what the entry says; empty when it does not decode).
fn dlq_fields(r: &triggers_emulator::recorder::Record) -> (String, String, String, String) {
    match &r.kind {
        triggers_emulator::recorder::RecordKind::Dlq { entry, msg_id } => match entry {
            Some(e) => (
                e.envelope.flow_run_id.clone(),
                e.kind.clone(),
                e.err_msg.clone(),
                msg_id.clone(),
            ),
            None => (
                String::new(),
                "(does not decode)".into(),
                String::new(),
                msg_id.clone(),
            ),
        },
        _ => Default::default(),
    }
}

/// One DLQ entry in full, indented by `indent`.
pub(crate) fn print_dlq_entry(r: &triggers_emulator::recorder::Record, indent: &str) {
    let (run, kind, error, msg_id) = dlq_fields(r);
    outln!("{indent}DLQ entry #{} {}", r.seq, r.subject);
    outln!("{indent}  kind:     {kind}");
    outln!("{indent}  msg id:   {msg_id}");
    if !run.is_empty() {
        outln!("{indent}  run:      {run}");
    }
    outln!("{indent}  error:    {error}");
    if let triggers_emulator::recorder::RecordKind::Dlq { entry: Some(e), .. } = &r.kind {
        let envelope = serde_json::to_string(&e.envelope).unwrap_or_default();
        outln!("{indent}  envelope: {envelope}");
        outln!("{indent}  body:     {}", e.body.get());
        outln!("{indent}  at:       {}", e.occurred_at);
    } else {
        outln!(
            "{indent}  payload:  {}",
            String::from_utf8_lossy(r.payload.as_ref())
        );
    }
}

/// `triggers-lab dlq list|show`.
pub(crate) async fn dlq(args: ControlArgs, command: DlqCommand) -> Result<()> {
    let client = control(&args).await?;
    let records = dlq_records(&client).await?;
    match command {
        DlqCommand::List { run, json } => {
            let records: Vec<_> = records
                .into_iter()
                .filter(|r| run.as_ref().is_none_or(|id| dlq_fields(r).0 == *id))
                .collect();
            if json.json {
                return print_json(&records);
            }
            if records.is_empty() {
                outln!(
                    "no DLQ entries{}",
                    run.map(|r| format!(" of run {r}")).unwrap_or_default()
                );
            }
            for r in &records {
                let (run, kind, error, msg_id) = dlq_fields(r);
                outln!("#{}  {}  {kind}  {run}  {msg_id}", r.seq, r.subject);
                outln!("    {}", error.lines().next().unwrap_or(""));
            }
        }
        DlqCommand::Show { msg_id, json } => {
            let Some(r) = records.iter().find(|r| dlq_fields(r).3 == msg_id) else {
                return Err(CliError::usage(format!(
                    "no DLQ entry with message id {msg_id:?} (`triggers-lab dlq list` lists them)"
                )));
            };
            if json.json {
                return print_json(r);
            }
            print_dlq_entry(r, "");
        }
    }
    Ok(())
}
