//! `triggers-lab up`, and the commands that talk to a running `up` through the control API:
//! `deploy`, `trigger`, `advance`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use futures::StreamExt;
use serde_json::Value;
use triggers_emulator::control::ControlClient;
use triggers_emulator::recorder::{Record, RecordKind};
use triggers_emulator::{
    Backend, ClockMode, Emulator, EmulatorConfig, HashMismatchPolicy, NatsConfig, NatsServer,
};
use triggers_sdk::flow::Flow;

use crate::files;
use crate::signals::Signals;

/// Where `up` tells the other commands its NATS URL.
fn discovery_file() -> PathBuf {
    std::env::temp_dir().join("triggers-lab").join("up.json")
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum BackendArg {
    /// The first that works: --nats/TRIGGERS_NATS_URL, Docker, a nats-server binary.
    Auto,
    /// Docker (testcontainers), the official image or triggers-lab/nats-server:local.
    Docker,
    /// A nats-server binary on PATH (or TRIGGERS_NATS_SERVER_BIN).
    Binary,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ClockArg {
    /// Timers fire only on `triggers-lab advance` (or --auto-advance).
    Virtual,
    /// Timers fire on the wall clock.
    Real,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum HashArg {
    /// Refuse a registration whose manifest_hash is wrong.
    Reject,
    /// Accept it and record a conformance violation.
    Record,
}

/// Options of `triggers-lab up`.
#[derive(Debug, Args)]
pub(crate) struct UpArgs {
    /// Use this nats-server (with JetStream) instead of starting one.
    #[arg(long, value_name = "URL")]
    nats: Option<String>,
    /// How to get a nats-server when --nats is not given.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendArg,
    /// Write every recorded event to FILE as JSON lines.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// The clock Durable Timers run on.
    #[arg(long, value_enum, default_value = "virtual")]
    clock: ClockArg,
    /// On the virtual clock, jump to the next timer whenever every run is idle.
    #[arg(long)]
    auto_advance: bool,
    /// What to do with a registration whose manifest_hash is wrong.
    #[arg(long, value_enum, default_value = "reject")]
    hash_mismatch: HashArg,
    /// Print nothing but the URL.
    #[arg(long, short)]
    quiet: bool,
    /// Open the terminal UI on the emulator (Ctrl-C or q stops everything).
    #[arg(long)]
    tui: bool,
}

pub(crate) async fn up(args: UpArgs, signals: Option<Signals>) -> Result<()> {
    let signals = signals.unwrap_or_else(Signals::listen);
    let nats_config = NatsConfig {
        url: args.nats.clone(),
        backend: match (&args.nats, args.backend) {
            (Some(_), _) => Backend::External,
            (None, BackendArg::Auto) => Backend::Auto,
            (None, BackendArg::Docker) => Backend::Docker,
            (None, BackendArg::Binary) => Backend::Binary,
        },
        ..Default::default()
    };
    if !args.quiet {
        eprintln!("starting a nats-server with JetStream…");
    }
    let nats = NatsServer::start(nats_config).await?;
    let client = async_nats::ConnectOptions::new()
        .name("triggers-lab up")
        .connect(nats.url())
        .await
        .with_context(|| format!("cannot connect to {}", nats.url()))?;
    let emulator = Emulator::start(
        client,
        EmulatorConfig {
            clock: match args.clock {
                ClockArg::Virtual => ClockMode::Virtual,
                ClockArg::Real => ClockMode::Real,
            },
            auto_advance: args.auto_advance,
            hash_mismatch: match args.hash_mismatch {
                HashArg::Reject => HashMismatchPolicy::Reject,
                HashArg::Record => HashMismatchPolicy::Record,
            },
            ..Default::default()
        },
    )
    .await?;

    let discovery = discovery_file();
    if let Some(dir) = discovery.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(
        &discovery,
        serde_json::json!({"url": nats.url(), "pid": std::process::id()}).to_string(),
    );

    if args.tui {
        // The UI owns the terminal: no log lines while it is up. A signal ends it as `q` does.
        let result = tokio::select! {
            r = triggers_tui::run_in_process(emulator.clone()) => r,
            _ = signals.recv() => Ok(()),
        };
        let _ = std::fs::remove_file(&discovery);
        drop(emulator);
        nats.stop().await?;
        return result.map_err(Into::into);
    }
    if args.quiet {
        println!("{}", nats.url());
    } else {
        println!("triggers-lab emulator is up");
        println!("  nats:     {}", nats.url());
        println!("  backend:  {}", nats.summary());
        println!(
            "  clock:    {:?}{}",
            emulator.config().clock,
            if args.auto_advance {
                " (auto-advance)"
            } else {
                ""
            }
        );
        println!(
            "  control:  {}.* (docs/emulator.md)",
            triggers_emulator::control::PREFIX
        );
        println!();
        println!(
            "Point a service at it:   export TRIGGERS_NATS_URL={}",
            nats.url()
        );
        println!(
            "Then: triggers-lab deploy FLOW.yaml | trigger FLOW_ID '{{...}}' | advance 1h | watch"
        );
        println!("Ctrl-C stops it.");
        println!();
    }
    let _ = std::io::stdout().flush();

    let mut record_file = match &args.record {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => None,
    };
    let mut records = emulator.subscribe_records();
    let quiet = args.quiet;
    loop {
        tokio::select! {
            _ = signals.recv() => break,
            next = records.recv() => match next {
                Ok(record) => {
                    if let Some(f) = record_file.as_mut() {
                        serde_json::to_writer(&mut *f, &record)?;
                        f.write_all(b"\n")?;
                    }
                    if !quiet && let Some(line) = log_line(&record) {
                        println!("{line}");
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    eprintln!("(the log fell behind: {n} records not printed)");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
    }
    if !quiet {
        eprintln!("stopping…");
    }
    if let Some(mut f) = record_file {
        f.flush()?;
        if !quiet && let Some(path) = &args.record {
            eprintln!("recorded events are in {}", path.display());
        }
    }
    let _ = std::fs::remove_file(&discovery);
    drop(emulator);
    nats.stop().await?;
    Ok(())
}

/// One line of `up`'s log for a record worth a line.
fn log_line(r: &Record) -> Option<String> {
    let t = r.at.to_string();
    let time = t.get(11..19).unwrap_or(&t);
    let line = match &r.kind {
        RecordKind::Registration {
            service,
            accepted: true,
            manifest_hash,
            ..
        } => {
            format!("registered   {service} ({})", short_hash(manifest_hash))
        }
        RecordKind::Registration { service, error, .. } => format!(
            "REFUSED      registration of {:?}: {}",
            service,
            error.clone().unwrap_or_default()
        ),
        RecordKind::Deploy { flow_id, version } => format!("deployed     {flow_id} v{version}"),
        RecordKind::Trigger { run_id, flow_id } => format!("triggered    {flow_id} run {run_id}"),
        RecordKind::Completion { event } => format!(
            "  {:<10} {} {} on {}{}",
            event.status,
            event.flow_run_id,
            event.node_id,
            event.service,
            if event.error.is_empty() {
                String::new()
            } else {
                format!(": {}", event.error)
            }
        ),
        RecordKind::RunSettled {
            run_id,
            flow_id,
            status,
        } => format!("run {status:?}   {flow_id} run {run_id}").to_lowercase(),
        RecordKind::Dlq { entry, .. } => format!(
            "DLQ          {} {}",
            r.subject,
            entry
                .as_ref()
                .map(|e| format!("{}: {}", e.kind, e.err_msg))
                .unwrap_or_default()
        ),
        RecordKind::TimerFired {
            run_id, node_id, ..
        } => format!("timer fired  {node_id} of run {run_id}"),
        RecordKind::Violation {
            severity,
            rule,
            message,
        } => {
            format!(
                "VIOLATION    [{severity}] {rule} on {}: {message}",
                r.subject
            )
        }
        _ => return None,
    };
    Some(format!("{time} {line}"))
}

fn short_hash(h: &str) -> &str {
    h.strip_prefix("sha256:")
        .and_then(|h| h.get(..12))
        .unwrap_or(h)
}

/// The NATS URL of a running `up`: --nats, then TRIGGERS_NATS_URL, then what `up` wrote down.
pub(crate) fn resolve_url(flag: Option<String>) -> Result<String> {
    if let Some(url) = flag {
        return Ok(url);
    }
    if let Ok(url) = std::env::var("TRIGGERS_NATS_URL")
        && !url.is_empty()
    {
        return Ok(url);
    }
    let path = discovery_file();
    let text = std::fs::read_to_string(&path).map_err(|_| {
        anyhow::anyhow!(
            "no running `triggers-lab up` found: start one in another terminal, or pass --nats URL / set TRIGGERS_NATS_URL"
        )
    })?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is unreadable", path.display()))?;
    v.get("url")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("{} has no url", path.display()))
}

/// Options shared by the commands that talk to a running `up`.
#[derive(Debug, Args)]
pub(crate) struct ControlArgs {
    /// The NATS URL of the running `triggers-lab up` (default: TRIGGERS_NATS_URL, then the one
    /// `up` wrote down).
    #[arg(long, value_name = "URL", global = true)]
    nats: Option<String>,
}

async fn control(args: &ControlArgs) -> Result<ControlClient> {
    let url = resolve_url(args.nats.clone())?;
    Ok(ControlClient::connect(&url).await?)
}

pub(crate) async fn deploy(args: ControlArgs, file: PathBuf) -> Result<()> {
    let flow: Flow = files::read(&file)?;
    let client = control(&args).await?;
    let released = client.deploy(&flow).await?;
    let version = released
        .pointer("/flow/version")
        .and_then(Value::as_i64)
        .unwrap_or_default();
    let subject = released
        .get("broadcast_subject")
        .and_then(Value::as_str)
        .unwrap_or_default();
    println!("deployed {} v{version}, broadcast on {subject}", flow.id);
    Ok(())
}

pub(crate) async fn trigger(
    args: ControlArgs,
    flow: String,
    payload: Option<String>,
    wait: bool,
) -> Result<()> {
    let payload: Value = match payload.as_deref() {
        None => Value::Object(Default::default()),
        Some(p) if p.starts_with('@') => files::read(std::path::Path::new(&p[1..]))?,
        Some(p) => serde_json::from_str(p)
            .with_context(|| format!("the payload {p:?} is not JSON (use @file to read one)"))?,
    };
    let client = control(&args).await?;
    let run_id = client.trigger(&flow, &payload).await?;
    println!("{run_id}");
    if wait {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut follow = client.follow().await?;
        loop {
            let run = client.run(&run_id).await?;
            if run.status.is_settled() {
                for step in &run.timeline {
                    println!(
                        "  {:<12} {:<10} {}{}",
                        step.node_id,
                        step.status,
                        step.service,
                        if step.error.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", step.error)
                        }
                    );
                }
                println!("run {run_id}: {:?}", run.status);
                if run.status == triggers_emulator::recorder::RunStatus::Failed {
                    bail!("run {run_id} failed");
                }
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, follow.next())
                .await
                .is_err()
            {
                bail!(
                    "run {run_id} did not settle within 60 s; it is {:?} (`triggers-lab watch` shows why)",
                    run.status
                );
            }
        }
    }
    Ok(())
}

pub(crate) async fn advance(args: ControlArgs, duration: String) -> Result<()> {
    let by = files::parse_duration(&duration).map_err(anyhow::Error::msg)?;
    let client = control(&args).await?;
    let result = client.advance(by).await?;
    let fired = result
        .get("fired")
        .and_then(Value::as_array)
        .map(Vec::len)
        .unwrap_or(0);
    let clock = result
        .get("clock")
        .and_then(Value::as_str)
        .unwrap_or_default();
    println!("clock is now {clock}; {fired} timer(s) fired");
    Ok(())
}

/// `triggers-lab watch`: the terminal UI on a running `up` (control API) or, failing that, on any
/// NATS server as a passive observer.
pub(crate) async fn watch(args: ControlArgs, signals: Option<Signals>) -> Result<()> {
    let url = resolve_url(args.nats)?;
    let signals = signals.unwrap_or_else(Signals::listen);
    // Dropping the UI on a signal restores the terminal (its guard does).
    tokio::select! {
        r = triggers_tui::watch(&url) => r?,
        _ = signals.recv() => {}
    }
    Ok(())
}
