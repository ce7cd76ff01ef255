//! `triggers-lab up`, and the commands that talk to a running `up` through the control API:
//! `deploy`, `trigger`, `advance`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use futures::StreamExt;
use serde_json::Value;
use triggers_emulator::control::{ControlAccess, ControlClient, ControlToken};
use triggers_emulator::recorder::{Record, RecordKind};
use triggers_emulator::{
    Backend, ClockMode, Emulator, EmulatorConfig, HashMismatchPolicy, NatsConfig, NatsServer,
};
use triggers_sdk::flow::Flow;
use triggers_sdk::transport::DropCounter;

use crate::discovery::{self, Instance, Slot};
use crate::files;
use crate::signals::Signals;

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
    /// Name this instance (default: its pid), for `--instance` of the other commands when
    /// several `up`s run.
    #[arg(long, value_name = "NAME")]
    instance: Option<String>,
}

pub(crate) async fn up(args: UpArgs, signals: Option<Signals>) -> Result<()> {
    let signals = signals.unwrap_or_else(Signals::listen);
    let name = args
        .instance
        .clone()
        .unwrap_or_else(|| std::process::id().to_string());
    // Before anything starts: a refused discovery file costs nothing yet.
    let mut slot = Slot::prepare(&name)?;
    let nats_config = NatsConfig {
        url: args.nats.clone(),
        backend: match (&args.nats, args.backend) {
            (Some(_), _) => Backend::External,
            (None, BackendArg::Auto) => Backend::Auto,
            (None, BackendArg::Docker) => Backend::Docker,
            (None, BackendArg::Binary) => Backend::Binary,
        },
        // Services connect without credentials and cannot reach the control API.
        private_control: true,
        ..Default::default()
    };
    if !args.quiet {
        eprintln!("starting a nats-server with JetStream…");
    }
    let nats = NatsServer::start(nats_config).await?;
    // The emulator's connection counts what NATS drops for its slow subscriptions; the log
    // below says so as it happens, and `state` shows the count.
    let slow_consumers = DropCounter::new();
    let client = triggers_emulator::drops::connect_options("triggers-lab up", &slow_consumers)
        .connect(nats.url())
        .await
        .with_context(|| format!("cannot connect to {}", nats.url()))?;
    let control_client = match nats.control_credentials() {
        Some(credentials) => Some(
            credentials
                .connect_options()
                .name("triggers-lab up control")
                .connect(nats.url())
                .await
                .with_context(|| format!("cannot log in to {}'s control account", nats.url()))?,
        ),
        None => None,
    };
    let token = ControlToken::generate();
    let emulator = Emulator::start(
        client,
        EmulatorConfig {
            slow_consumers,
            control_client,
            control_token: Some(token.clone()),
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

    let credentials = nats.control_credentials();
    slot.write(&Instance {
        instance: name.clone(),
        pid: std::process::id(),
        url: nats.url().to_owned(),
        backend: nats.backend().to_string(),
        user: credentials.map(|c| c.user.clone()),
        password: credentials.map(|c| c.password.clone()),
        token: Some(token.as_str().to_owned()),
    })?;

    if args.tui {
        // The UI owns the terminal: no log lines while it is up. A signal ends it as `q` does.
        let result = tokio::select! {
            r = triggers_tui::run_in_process(emulator.clone()) => r,
            _ = signals.recv() => Ok(()),
        };
        drop(slot);
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
            "  control:  {}.* ({}; docs/emulator.md)",
            triggers_emulator::control::PREFIX,
            if credentials.is_some() {
                "in an account of its own, out of the services' reach"
            } else {
                "needs the token: on a shared server, others who can see triggerslab.> can see it"
            }
        );
        println!("  instance: {name} ({})", slot.path().display());
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
    let mut drop_check = tokio::time::interval(Duration::from_secs(1));
    let mut drops_told = 0;
    loop {
        tokio::select! {
            _ = signals.recv() => break,
            _ = drop_check.tick() => {
                let dropped = emulator.dropped_messages();
                if dropped > drops_told {
                    eprintln!(
                        "DROPPED      NATS dropped {} message(s) the emulator could not take in time (slow consumer; {dropped} in all): what it records and judges from now on is incomplete",
                        dropped - drops_told
                    );
                    drops_told = dropped;
                }
            }
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
    drop(slot);
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

/// Options shared by the commands that talk to a running `up`.
#[derive(Debug, Args)]
pub(crate) struct ControlArgs {
    /// The NATS URL of the running `triggers-lab up` (default: TRIGGERS_NATS_URL, then the one
    /// `up` wrote down).
    #[arg(long, value_name = "URL", global = true)]
    nats: Option<String>,
    /// Which running `up`, by name (`up --instance NAME`, else its pid), when several run.
    #[arg(long, value_name = "NAME", global = true)]
    instance: Option<String>,
}

/// A running `up`: where it is and what its control API needs.
pub(crate) struct Target {
    pub(crate) url: String,
    pub(crate) access: ControlAccess,
}

impl From<&Instance> for Target {
    fn from(i: &Instance) -> Self {
        Target {
            url: i.url.clone(),
            access: ControlAccess {
                credentials: match (&i.user, &i.password) {
                    (Some(user), Some(password)) => {
                        Some(triggers_emulator::nats::ControlCredentials {
                            user: user.clone(),
                            password: password.clone(),
                        })
                    }
                    _ => None,
                },
                token: i.token.clone().map(ControlToken::new),
            },
        }
    }
}

fn describe(instances: &[Instance]) -> String {
    instances
        .iter()
        .map(|i| format!("{} (pid {}, {})", i.instance, i.pid, i.url))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `up` to talk to: `--instance`, else `--nats` / `TRIGGERS_NATS_URL` (with the credentials
/// of the `up` at that URL, if one wrote them down), else the only one running.
pub(crate) fn resolve(args: &ControlArgs) -> Result<Target> {
    let running = discovery::running()?;
    if let Some(name) = &args.instance {
        discovery::check_name(name)?;
        return running
            .iter()
            .find(|i| &i.instance == name)
            .map(Target::from)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no running `triggers-lab up` is named {name}{}",
                    if running.is_empty() {
                        String::new()
                    } else {
                        format!("; running: {}", describe(&running))
                    }
                )
            });
    }
    let url = args.nats.clone().or_else(|| {
        std::env::var("TRIGGERS_NATS_URL")
            .ok()
            .filter(|u| !u.trim().is_empty())
    });
    if let Some(url) = url {
        let at: Vec<&Instance> = running.iter().filter(|i| i.url == url).collect();
        return match at.as_slice() {
            [one] => Ok(Target::from(*one)),
            [] => Ok(Target {
                url,
                access: ControlAccess::default(),
            }),
            several => bail!(
                "{} `triggers-lab up`s run on {url}: pick one with --instance ({})",
                several.len(),
                several
                    .iter()
                    .map(|i| i.instance.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
    }
    match running.as_slice() {
        [] => bail!(
            "no running `triggers-lab up` found (looked in {}): start one in another terminal, \
             or pass --nats URL / set TRIGGERS_NATS_URL",
            discovery::dir()?.display()
        ),
        [one] => Ok(Target::from(one)),
        several => bail!(
            "{} `triggers-lab up`s are running: {}; say which with --instance NAME (or --nats URL)",
            several.len(),
            describe(several)
        ),
    }
}

async fn control(args: &ControlArgs) -> Result<ControlClient> {
    let target = resolve(args)?;
    Ok(ControlClient::connect_with(&target.url, &target.access).await?)
}

pub(crate) async fn deploy(args: ControlArgs, file: PathBuf) -> Result<()> {
    let flow: Flow = files::read(&file)?;
    if flow.version < 1 {
        return Err(files::FileError(format!(
            "{}: flow {:?}: version: is {}, must be 1 or more (leave it out for 1; a redeploy gets the next)",
            file.display(),
            flow.id,
            flow.version
        ))
        .into());
    }
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

pub(crate) async fn advance(args: ControlArgs, by: Duration) -> Result<()> {
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
    let target = resolve(&args)?;
    let signals = signals.unwrap_or_else(Signals::listen);
    // Dropping the UI on a signal restores the terminal (its guard does).
    tokio::select! {
        r = triggers_tui::watch_with(&target.url, &target.access) => r?,
        _ = signals.recv() => {}
    }
    Ok(())
}
