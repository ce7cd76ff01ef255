//! `triggers-lab scenario from-record FILE`: a readable scenario from a recording, so that what
//! was done by hand on `up` becomes a test: its flows, its deploys, triggers and clock advances
//! as steps, and what the runs did as expectations. Each step's comment names the record it
//! came from.
//!
//! What services do is not in a recording: `--services SCENARIO` copies another scenario's
//! `services:` section; else `--command NAME=CMD` starts a service by its command, and every other
//! service is a scripted stand-in made from the manifest it registered (its actions, schemas and
//! policies; echoing, and failing for the inputs the recording dead-lettered).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::Value;
use triggers_emulator::recorder::{Record, RecordKind, RunStatus};
use triggers_emulator::recording::{Recording, advanced_by};
use triggers_sdk::wire::subject::LockedSubject;
use triggers_sdk::wire::{CompletionEvent, Manifest};

use crate::exit::{CliError, Result};
use crate::files::FileError;
use crate::lab_cmd::status_word;
use crate::out::outln;

/// `triggers-lab scenario ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum ScenarioCommand {
    /// Write a scenario from a recording (`up --record FILE`): its flows, deploy, trigger and
    /// advance steps, and the runs' status, events and DLQ entries as expectations.
    FromRecord(FromRecordArgs),
}

/// Options of `scenario from-record`.
#[derive(Debug, Args)]
pub(crate) struct FromRecordArgs {
    /// The recording.
    file: PathBuf,
    /// Write the scenario here (default: standard output).
    #[arg(short, long, value_name = "OUT.yaml")]
    output: Option<PathBuf>,
    /// Copy the `services:` section of this scenario (else each service is a stand-in made from
    /// the manifest it registered, or a `--command`).
    #[arg(long, value_name = "SCENARIO.yaml")]
    services: Option<PathBuf>,
    /// Start service NAME with this shell command instead of a stand-in (repeatable), e.g.
    /// `--command flowlab="cargo run -p triggers-sdk --example flow_lab"`.
    #[arg(long, value_name = "NAME=CMD", conflicts_with = "services", value_parser = named_command)]
    command: Vec<(String, String)>,
}

/// `NAME=CMD`.
fn named_command(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, cmd)) if !name.trim().is_empty() && !cmd.trim().is_empty() => {
            Ok((name.trim().to_owned(), cmd.trim().to_owned()))
        }
        _ => Err(format!(
            "{s:?} is not NAME=CMD (a service name, `=`, the command that starts it)"
        )),
    }
}

pub(crate) fn run(cmd: ScenarioCommand) -> Result<()> {
    let ScenarioCommand::FromRecord(args) = cmd;
    from_record(&args)
}

fn from_record(args: &FromRecordArgs) -> Result<()> {
    let recording = crate::files::read_recording(&args.file)?;
    let services = match &args.services {
        Some(path) => Services::Copied {
            section: services_section(path)?,
            // The runner counts the calls of scripted services only: those without a command.
            scripted: triggers_scenarios::load_file(path)
                .map_err(|e| FileError(e.to_string()))?
                .services
                .iter()
                .filter(|s| !s.is_external())
                .map(|s| s.name.clone())
                .collect(),
        },
        None => Services::Made(args.command.iter().cloned().collect()),
    };
    let name = args.file.display().to_string();
    let text = scenario(&name, &recording, &services)?;
    match &args.output {
        Some(out) => {
            triggers_scenarios::write_output(out, text.as_bytes())
                .map_err(|e| CliError::usage(format!("cannot write {}: {e}", out.display())))?;
            eprintln!("wrote {}", out.display());
        }
        None => outln!("{}", text.trim_end()),
    }
    Ok(())
}

/// The `services:` section of a scenario file, as written (comments kept): from its
/// `services:` line to the next top-level key.
fn services_section(path: &Path) -> Result<String> {
    let (name, text) = crate::files::read_text(path)?;
    let mut lines = text.lines().skip_while(|l| !l.starts_with("services:"));
    let Some(first) = lines.next() else {
        return Err(FileError(format!(
            "{name} has no top-level `services:` section to copy"
        ))
        .into());
    };
    let mut out = format!("{first}\n");
    for line in lines {
        let top_level_key = line.starts_with(|c: char| c.is_ascii_alphabetic());
        if top_level_key {
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    Ok(format!(
        "# Copied from {name} (paths in it are relative to that file's folder).\n{}",
        out.trim_end()
    ))
}

/// A JSON value on one line: YAML reads JSON.
fn json(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Where the scenario's services come from.
enum Services {
    /// Another scenario's `services:` section, as written, and its scripted services.
    Copied {
        section: String,
        scripted: BTreeSet<String>,
    },
    /// Made here: a service named in the map runs its command; any other is a stand-in made from
    /// the manifest it registered (or, with none recorded, a command to fill in).
    Made(BTreeMap<String, String>),
}

/// The `services:` section made from the recording: `commands` for the services named there, a
/// stand-in from its registered manifest for every other service the recording saw (registered
/// or named by a flow), in name order.
fn made_services(
    records: &[Record],
    flow_services: &BTreeSet<String>,
    commands: &BTreeMap<String, String>,
) -> Result<(String, BTreeSet<String>)> {
    // The last manifest each service registered, and the inputs each action dead-lettered.
    let mut manifests: BTreeMap<String, (u64, Manifest)> = BTreeMap::new();
    let mut failed: BTreeMap<(String, String), (Vec<Value>, String)> = BTreeMap::new();
    for r in records {
        match &r.kind {
            RecordKind::Registration {
                service,
                accepted: true,
                ..
            } => {
                if let Ok(m) = Manifest::from_json(r.payload.as_bytes()) {
                    manifests.insert(service.clone(), (r.seq, m));
                }
            }
            RecordKind::Dlq {
                entry: Some(entry), ..
            } => {
                if let Some(LockedSubject::Dlq { service, tail }) = LockedSubject::parse(&r.subject)
                    && let Ok(input) = serde_json::from_str::<Value>(entry.body.get())
                {
                    let (inputs, error) = failed.entry((service, tail)).or_default();
                    if !inputs.contains(&input) {
                        inputs.push(input);
                    }
                    error.clone_from(&entry.err_msg);
                }
            }
            _ => {}
        }
    }
    let mut names: BTreeSet<String> = flow_services.clone();
    names.extend(manifests.keys().cloned());
    names.extend(commands.keys().cloned());
    let mut out = String::from("services:\n");
    let mut scripted = BTreeSet::new();
    for service in &names {
        if let Some(cmd) = commands.get(service) {
            writeln!(
                out,
                "  - name: {service}\n    command: [sh, -c, {}]",
                json(&Value::String(cmd.clone()))
            )?;
        } else if let Some((seq, m)) = manifests.get(service) {
            stand_in(&mut out, *seq, m, &failed)?;
            scripted.insert(service.clone());
        } else {
            writeln!(
                out,
                "  # No registration of {service} was recorded: give the command that starts it.\n  \
                 - name: {service}\n    command: [\"false\"]  # TODO"
            )?;
        }
    }
    Ok((out.trim_end().to_owned(), scripted))
}

/// A scripted stand-in for the service of manifest `m` (registered in record `seq`): its
/// version, capabilities, sources, and actions with their schemas, timeouts and retry policies.
/// What an action does is not in a recording: each echoes its input, and fails (with the
/// recorded message, retried by its policy) for the inputs the recording dead-lettered.
fn stand_in(
    out: &mut String,
    seq: u64,
    m: &Manifest,
    failed: &BTreeMap<(String, String), (Vec<Value>, String)>,
) -> Result<()> {
    writeln!(
        out,
        "  # A stand-in made from the manifest {} registered (record {seq}). A recording does not\n  \
         # say what actions do: each echoes its input and fails, as recorded, for the inputs the\n  \
         # recording dead-lettered. Write what the service does, or use --command / --services.",
        m.service
    )?;
    writeln!(out, "  - name: {}", m.service)?;
    writeln!(
        out,
        "    version: {}",
        json(&Value::String(m.service_version.clone()))
    )?;
    if !m.runtime_capabilities.is_empty() {
        writeln!(
            out,
            "    capabilities: {}",
            json(&serde_json::to_value(&m.runtime_capabilities)?)
        )?;
    }
    let nats: Vec<Value> = m
        .service_sources
        .iter()
        .filter(|s| s.transport == triggers_sdk::wire::manifest::TRANSPORT_NATS)
        .map(|s| serde_json::json!({"name": s.name, "subject": s.default}))
        .collect();
    let default =
        [serde_json::json!({"name": "nats", "subject": format!("{}.inbound", m.service)})];
    if nats != default {
        writeln!(out, "    sources: {}", json(&Value::Array(nats)))?;
    }
    writeln!(out, "    actions:")?;
    for a in &m.actions {
        writeln!(out, "      - name: {}", a.name)?;
        writeln!(out, "        timeout: {}ms", a.timeout_ms.max(1))?;
        writeln!(
            out,
            "        retry: {}",
            json(&serde_json::to_value(a.retry)?)
        )?;
        if let Some(schema) = &a.input_schema {
            writeln!(
                out,
                "        input: {}",
                json(&Value::Object(schema.clone()))
            )?;
        }
        if let Some(schema) = &a.result_schema {
            writeln!(
                out,
                "        result: {}",
                json(&Value::Object(schema.clone()))
            )?;
        }
        let behavior = match failed.get(&(m.service.clone(), a.name.clone())) {
            Some((inputs, error)) => serde_json::json!({
                "fail_if": {"path": "$", "op": "in", "value": inputs},
                "error": error,
                "echo": true,
            }),
            None => serde_json::json!({"echo": true}),
        };
        writeln!(out, "        behavior: {}", json(&behavior))?;
    }
    Ok(())
}

/// The scenario's text.
fn scenario(name: &str, recording: &Recording, services: &Services) -> Result<String> {
    let records = &recording.records;
    let mut out = String::new();
    let by = recording
        .header
        .as_ref()
        .map(|h| {
            format!(
                " (triggers-lab {}, started {})",
                h.tool_version, h.created_at
            )
        })
        .unwrap_or_default();
    writeln!(
        out,
        "# Generated by `triggers-lab scenario from-record {name}`{by}.\n\
         # Each step's comment names the record (its `seq`) it came from."
    )?;
    writeln!(out, "name: from {name}")?;

    let mut flows = Vec::new();
    let mut flow_services = BTreeSet::new();
    // (flow, version, node) -> the action it runs, as the recording deployed it.
    let mut actions = BTreeMap::new();
    for r in records {
        if let RecordKind::Deploy {
            flow: Some(flow), ..
        } = &r.kind
        {
            for node in &flow.body.nodes {
                if !node.service.is_empty() {
                    flow_services.insert(node.service.clone());
                }
                if !node.action.is_empty() {
                    actions.insert(
                        (flow.id.clone(), flow.version, node.id.clone()),
                        node.action.clone(),
                    );
                }
            }
            // A node or an edge a line, in the flow-body format's key order.
            let mut v = format!(
                "id: {}\n    version: {}\n    nodes:\n",
                flow.id, flow.version
            );
            for node in &flow.body.nodes {
                // Set by the release, not part of the flow-body format.
                let node = triggers_sdk::flow::Node {
                    inbound: String::new(),
                    ..node.clone()
                };
                writeln!(v, "      - {}", serde_json::to_string(&node)?)?;
            }
            v.push_str("    edges:\n");
            for edge in &flow.body.edges {
                writeln!(v, "      - {}", serde_json::to_string(edge)?)?;
            }
            flows.push((r.seq, flow.id.clone(), flow.version, v));
        }
    }
    let scripted = match services {
        Services::Copied { section, scripted } => {
            writeln!(out, "{section}")?;
            scripted.clone()
        }
        Services::Made(commands) => {
            let (section, scripted) = made_services(records, &flow_services, commands)?;
            writeln!(out, "{section}")?;
            scripted
        }
    };
    writeln!(out, "flows:")?;
    for (seq, id, version, v) in &flows {
        write!(out, "  # record {seq}: deploy of {id} v{version}\n  - {v}")?;
    }

    writeln!(out, "steps:")?;
    let mut runs: Vec<String> = Vec::new();
    // Runs whose settlement has been written: the rest are in flight.
    let mut settled = BTreeSet::new();
    let alias = |runs: &[String], id: &str| {
        runs.iter()
            .position(|r| r == id)
            .map(|i| format!("run{}", i + 1))
    };
    for (i, r) in records.iter().enumerate() {
        match &r.kind {
            RecordKind::Deploy {
                flow_id, version, ..
            } => {
                writeln!(out, "  # record {}: deploy of {flow_id} v{version}", r.seq)?;
                writeln!(out, "  - deploy: {flow_id}")?;
            }
            RecordKind::Trigger {
                run_id,
                flow_id,
                entry,
            } => {
                runs.push(run_id.clone());
                let name = format!("run{}", runs.len());
                let text = r.payload.text();
                // A payload that is not JSON (a poison message) is sent as it was, as `raw`.
                let payload = if text.is_empty() {
                    "payload: {}".to_string()
                } else {
                    match serde_json::from_str::<Value>(&text) {
                        Ok(v) => format!("payload: {}", json(&v)),
                        Err(_) => format!("raw: {}", json(&Value::String(text.into_owned()))),
                    }
                };
                writeln!(
                    out,
                    "  # record {}: trigger of {flow_id}, run {run_id}",
                    r.seq
                )?;
                let entry = if entry.is_empty() {
                    String::new()
                } else {
                    format!(", entry: {entry}")
                };
                writeln!(
                    out,
                    "  - trigger: {{flow: {flow_id}{entry}, {payload}, as: {name}}}"
                )?;
            }
            // A scenario cannot cancel a run (`wait_settled` knows no `cancelled`): said, and
            // nothing expected of it; from here on no step waits for it either.
            RecordKind::RunSettled {
                run_id,
                status: RunStatus::Cancelled,
                ..
            } => {
                let Some(name) = alias(&runs, run_id) else {
                    continue;
                };
                settled.insert(run_id.clone());
                writeln!(
                    out,
                    "  # record {}: run {run_id} ({name}) was cancelled by hand; a scenario cannot cancel a run, so nothing is expected of it",
                    r.seq
                )?;
            }
            RecordKind::RunSettled { run_id, status, .. } => {
                let Some(name) = alias(&runs, run_id) else {
                    continue;
                };
                settled.insert(run_id.clone());
                expectations(
                    &mut out,
                    records,
                    r,
                    (run_id, &name, status_word(*status)),
                    &Counted {
                        scripted: &scripted,
                        actions: &actions,
                    },
                )?;
            }
            RecordKind::ClockAdvanced { to, .. } => {
                let by = advanced_by(records, i).unwrap_or_default();
                // The runs in flight reach their timers first, as they had when it was recorded.
                for run_id in runs.iter().filter(|id| !settled.contains(*id)) {
                    if let Some(name) = alias(&runs, run_id) {
                        writeln!(out, "  - wait_idle: {name}")?;
                    }
                }
                writeln!(out, "  # record {}: the clock advanced to {to}", r.seq)?;
                writeln!(out, "  - advance: {}", duration(by))?;
            }
            _ => {}
        }
    }
    if runs.is_empty() && flows.is_empty() {
        return Err(CliError::usage(format!(
            "{name} has no deploy (with its flow) and no trigger: there is nothing to make steps of"
        )));
    }
    Ok(out)
}

/// A settled run's expectations: its status, its completion events in order, its DLQ entries
/// by subject and kind, and the calls (attempts) of each action `counted` counts.
fn expectations(
    out: &mut String,
    records: &[Record],
    settled: &Record,
    (run_id, name, status): (&str, &str, &str),
    counted: &Counted<'_>,
) -> Result<()> {
    writeln!(
        out,
        "  # record {}: run {run_id} settled {status}",
        settled.seq
    )?;
    writeln!(out, "  - wait_settled: {{run: {name}, status: {status}}}")?;
    let events: Vec<(u64, String, String)> = records
        .iter()
        .filter_map(|r| match &r.kind {
            RecordKind::Completion { event } if event.flow_run_id == run_id => {
                Some((r.seq, event.node_id.clone(), event.status.clone()))
            }
            _ => None,
        })
        .collect();
    if !events.is_empty() {
        let seqs: Vec<String> = events.iter().map(|(s, _, _)| s.to_string()).collect();
        writeln!(
            out,
            "  # records {}: its completion events",
            seqs.join(", ")
        )?;
        writeln!(
            out,
            "  - expect_events:\n      run: {name}\n      order: in_order\n      events:"
        )?;
        for (_, node, status) in &events {
            writeln!(out, "        - {{node: {node}, status: {status}}}")?;
        }
    }
    // (service, action) -> attempts, each an action node's completion event, in first-call order.
    let calls = grouped(records.iter().filter_map(|r| match &r.kind {
        RecordKind::Completion { event } if event.flow_run_id == run_id => {
            counted.action(event).map(|key| (key, r.seq))
        }
        _ => None,
    }));
    if !calls.is_empty() {
        writeln!(
            out,
            "  # the calls (attempts) of each action, from its completion events"
        )?;
        for ((service, action), seqs) in calls {
            writeln!(
                out,
                "  - expect_calls: {{service: {service}, action: {action}, run: {name}, count: {}}}",
                seqs.len()
            )?;
        }
    }
    // (subject, kind) -> the records.
    let dlq = grouped(records.iter().filter_map(|r| match &r.kind {
        RecordKind::Dlq {
            entry: Some(entry), ..
        } if entry.envelope.flow_run_id == run_id => {
            Some(((r.subject.clone(), entry.kind.clone()), r.seq))
        }
        _ => None,
    }));
    for ((subject, kind), seqs) in dlq {
        let list: Vec<String> = seqs.iter().map(ToString::to_string).collect();
        writeln!(
            out,
            "  # record(s) {}: DLQ entries of run {run_id}",
            list.join(", ")
        )?;
        writeln!(
            out,
            "  - expect_dlq: {{run: {name}, subject: {subject}, kind: {kind}, count: {}}}",
            seqs.len()
        )?;
    }
    Ok(())
}

/// Which completion events are calls `expect_calls` can count: those of action nodes of the
/// scripted services (the runner counts the calls of scripted services only).
struct Counted<'a> {
    scripted: &'a BTreeSet<String>,
    /// (flow, version, node) -> the action it runs.
    actions: &'a BTreeMap<(String, i64, String), String>,
}

impl Counted<'_> {
    /// The (service, action) `event` is a call of, if it counts.
    fn action(&self, event: &CompletionEvent) -> Option<(String, String)> {
        if event.node_type != "action" || !self.scripted.contains(&event.service) {
            return None;
        }
        let node = (
            event.flow_id.clone(),
            event.flow_version,
            event.node_id.clone(),
        );
        let action = self.actions.get(&node)?;
        Some((event.service.clone(), action.clone()))
    }
}

/// The records of each key, keys in the order they first came.
fn grouped<K: PartialEq>(items: impl Iterator<Item = (K, u64)>) -> Vec<(K, Vec<u64>)> {
    let mut groups: Vec<(K, Vec<u64>)> = Vec::new();
    for (key, seq) in items {
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, seqs)) => seqs.push(seq),
            None => groups.push((key, vec![seq])),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use triggers_sdk::wire::GoTime;

    fn record(seq: u64, kind: RecordKind) -> Record {
        Record {
            seq,
            at: GoTime::now(),
            clock: GoTime::now(),
            subject: String::new(),
            headers: Vec::new().into(),
            payload: Default::default(),
            kind,
        }
    }

    #[test]
    fn a_cancelled_run_is_said_and_nothing_is_expected_of_it() {
        let settled = |run: &str, status| RecordKind::RunSettled {
            run_id: run.into(),
            flow_id: "order".into(),
            status,
        };
        let trigger = |run: &str| RecordKind::Trigger {
            run_id: run.into(),
            flow_id: "order".into(),
            entry: String::new(),
        };
        let recording = Recording {
            format: 1,
            header: None,
            records: vec![
                record(1, trigger("run-a")),
                record(2, trigger("run-b")),
                record(3, settled("run-a", RunStatus::Cancelled)),
                record(4, settled("run-b", RunStatus::Succeeded)),
            ],
        };
        let text = scenario("rec.jsonl", &recording, &Services::Made(BTreeMap::new())).unwrap();
        assert!(
            text.contains("# record 3: run run-a (run1) was cancelled by hand"),
            "{text}"
        );
        assert!(!text.contains("cancelled}"), "{text}");
        assert!(
            text.contains("wait_settled: {run: run2, status: succeeded}"),
            "{text}"
        );
    }
}
