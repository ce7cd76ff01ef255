//! `triggers-lab up`, and the commands that talk to a running `up` through the control API:
//! `deploy`, `trigger`, `advance`.

use std::io::Write;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use futures::StreamExt;
use serde_json::Value;
use triggers_emulator::control::{ControlAccess, ControlClient, ControlToken};
use triggers_emulator::recorder::RunStatus;
use triggers_emulator::recorder::{Record, RecordKind};
use triggers_emulator::recording::RecordingHeader;
use triggers_emulator::{
    ClockMode, EmulatorConfig, Harness, HashMismatchPolicy, NatsServer, WireTap,
};

use crate::discovery::{self, Instance, Slot};
use crate::exit::{CliError, OrKind, Result};
use crate::files;
use crate::nats_choice::{self, BackendArg};
use crate::out::outln;
use crate::signals::Signals;

/// Options of `triggers-lab up`.
#[derive(Debug, Args)]
pub(crate) struct UpArgs {
    /// Use this nats-server (with JetStream) instead of starting one. TRIGGERS_NATS_URL is not
    /// used unless given here.
    #[arg(long, value_name = "URL")]
    nats: Option<String>,
    /// How to get a nats-server when --nats is not given.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendArg,
    /// The nats-server's client port on 127.0.0.1 (0: any free port). Fixed by default, so
    /// services keep their URL when `up` is restarted.
    #[arg(long, default_value_t = 4222)]
    port: u16,
    /// Run in the background (output in a log file); `triggers-lab down` stops it, `status`
    /// shows it.
    #[arg(long)]
    pub(crate) detach: bool,
    /// Run the scripted services of this scenario file beside the emulator (repeatable);
    /// services given as commands are left out.
    #[arg(long = "services", value_name = "SCENARIO")]
    services: Vec<PathBuf>,
    /// Write every recorded event to FILE as JSON lines, after a header line with the format
    /// (`{"triggers_lab_recording": 1, ...}`).
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// The clock Durable Timers run on.
    #[arg(long, value_enum, default_value_t)]
    clock: ClockMode,
    /// On the virtual clock, jump to the next timer whenever every run is idle.
    #[arg(long)]
    auto_advance: bool,
    /// What to do with a registration whose manifest_hash is wrong.
    #[arg(long, value_enum, default_value_t)]
    hash_mismatch: HashMismatchPolicy,
    /// Run without the wire tap: the emulator's second connection that reads the services'
    /// events, DLQ entries, hops and acks in order, for the rules only order tells
    /// (ack_before_reports, dlq_before_failed_event, handed_on_before_event, hop_not_jetstream).
    #[arg(long)]
    no_wire_tap: bool,
    /// Print nothing but the URL.
    #[arg(long, short)]
    quiet: bool,
    /// Open the terminal UI on the emulator (Ctrl-C or q stops everything).
    #[arg(long)]
    tui: bool,
    /// Name this instance (default: its pid; `default` with --detach), for `--instance` of the
    /// other commands when several `up`s run.
    #[arg(long, value_name = "NAME", value_parser = crate::discovery::instance_name)]
    pub(crate) instance: Option<String>,
    /// Settled runs the emulator keeps; the oldest beyond are evicted (counted: `status`). Raise
    /// it above a `load`'s runs for the load to read every failed run's DLQ entries at its end.
    #[arg(long, value_name = "N", default_value_t = default_bound(|c| c.max_runs))]
    max_runs: NonZeroUsize,
    /// Runs open at once (running, or waiting for a service, a timer or a retry); a trigger
    /// beyond it is refused.
    #[arg(long, value_name = "N", default_value_t = default_bound(|c| c.max_open_runs))]
    max_open_runs: NonZeroUsize,
    /// Open runs the emulator did not start, followed from completion events on the server
    /// (another orchestrator's, or made up): a bound of their own, so that they never refuse a
    /// trigger. Beyond it an event is recorded, its run not followed (counted: `status`).
    #[arg(long, value_name = "N", default_value_t = default_bound(|c| c.max_followed_runs))]
    max_followed_runs: NonZeroUsize,
    /// Records kept in memory (the traffic `watch` shows, the control API's `records`); older
    /// ones drop off, counted. The log and `--record` write each as it comes, reading back from
    /// these any they fell behind on.
    #[arg(long, value_name = "N", default_value_t = default_bound(|c| c.max_records))]
    max_records: NonZeroUsize,
    /// Services registered at once; a registration under a new name beyond it is refused.
    #[arg(long, value_name = "N", default_value_t = default_bound(|c| c.max_services))]
    max_services: NonZeroUsize,
}

/// One of the emulator's default bounds, for a flag's default (so the help shows the emulator's
/// own figure, kept in one place).
fn default_bound(bound: fn(&EmulatorConfig) -> usize) -> NonZeroUsize {
    NonZeroUsize::new(bound(&EmulatorConfig::default())).unwrap_or(NonZeroUsize::MIN)
}

pub(crate) async fn up(args: UpArgs, signals: Option<Signals>) -> Result<()> {
    let signals = signals.unwrap_or_else(Signals::listen);
    let name = args
        .instance
        .clone()
        .unwrap_or_else(|| std::process::id().to_string());
    // Before anything starts: a refused discovery file, or a malformed scenario, costs nothing
    // yet.
    let mut slot = Slot::prepare(&name).env()?;
    if let Some(path) = &args.record
        && let Err(e) = triggers_scenarios::check_output(path)
    {
        return Err(CliError::usage(format!(
            "--record {}: {e}; name a file for the recording",
            path.display()
        )));
    }
    let service_scenarios = service_scenarios(&args.services)?;
    let choice = nats_choice::choose(args.backend, args.nats.as_deref(), "up");
    if args.nats.is_none() && args.port != 0 {
        check_port_free(args.port)?;
    }
    // No server to be had: what was tried and what to do, as `doctor` says it.
    if let Some(why) = choice.nothing_works().await {
        return Err(CliError::env(format!("no nats-server can be had:\n{why}")));
    }
    let nats_config = triggers_emulator::NatsConfig {
        // Services connect without credentials and cannot reach the control API.
        private_control: true,
        client_port: args.nats.is_none().then_some(args.port),
        ..choice.config
    };
    if !args.quiet {
        if let Some(note) = &choice.note {
            eprintln!("note: {note}");
        }
        eprintln!("starting a nats-server with JetStream; {}", choice.said);
    }
    let token = ControlToken::generate();
    let config = EmulatorConfig {
        control_token: Some(token.clone()),
        clock: args.clock,
        auto_advance: args.auto_advance,
        hash_mismatch: args.hash_mismatch,
        max_runs: args.max_runs.get(),
        max_open_runs: args.max_open_runs.get(),
        max_followed_runs: args.max_followed_runs.get(),
        max_records: args.max_records.get(),
        max_services: args.max_services.get(),
        wire_tap: if args.no_wire_tap {
            WireTap::Off
        } else {
            WireTap::Auto
        },
        // A used server holds a dead instance's deliveries: never hand them out as new work.
        clean_start: true,
        // The emulator's connection counts what NATS drops for its slow subscriptions (a
        // counter of its own, in `config.slow_consumers`); the log below says so as it
        // happens, and `state` shows the count.
        ..Default::default()
    };
    // The harness's own start: a server of `up`'s own, the emulator logged in as the
    // orchestrator (the services' user can neither see nor answer its JetStream requests) and
    // serving the control API from the control account.
    let provisioned = Harness::builder(nats_config, config)
        .own_server()
        .connection_names("triggers-lab up", "triggers-lab up control")
        .provision()
        .await
        .env()?;
    if provisioned.control_credentials().is_none() {
        // A server `up` did not start may have an emulator already: two would both answer the
        // control API and registrations, each half the time.
        refuse_a_second_emulator(provisioned.server_url()).await?;
    }
    let mut lab = provisioned.start_emulator().await?;
    let emulator = lab.emulator().clone();

    let scripted = start_scripted(&service_scenarios, lab.url(), args.quiet).await?;

    let credentials = lab.control_credentials().cloned();
    slot.write(&Instance {
        instance: name.clone(),
        pid: std::process::id(),
        url: lab.url().to_owned(),
        backend: lab.backend().to_string(),
        user: credentials.as_ref().map(|c| c.user.clone()),
        password: credentials.as_ref().map(|c| c.password.clone()),
        token: Some(token.as_str().to_owned()),
    })
    .failed()?;

    if args.tui {
        // The UI owns the terminal: no log lines while it is up. A signal ends it as `q` does.
        let mut died = None;
        let label = format!("{} (in-process)", lab.url());
        let result = tokio::select! {
            // The header names the URL services connect to (`in-process` said nothing useful).
            r = triggers_tui::run(
                triggers_tui::Source::InProcess(emulator.clone()),
                ui_options(Some(label)),
            ) => r,
            _ = signals.recv() => Ok(()),
            how = server_died(&mut lab) => {
                died = Some(how);
                Ok(())
            }
        };
        for services in scripted {
            services.stop().await;
        }
        drop(slot);
        drop(emulator);
        lab.stop().await?;
        if let Some(how) = died {
            return Err(server_died_error(&how));
        }
        return result.map_err(Into::into);
    }
    if args.quiet {
        outln!("{}", lab.url());
    } else {
        outln!("triggers-lab emulator is up");
        outln!("  nats:     {}", lab.url());
        outln!("  backend:  {}", lab.nats_summary());
        outln!(
            "  clock:    {}{}",
            match emulator.config().clock {
                ClockMode::Virtual => "virtual (timers fire on `triggers-lab advance`)",
                ClockMode::Real => "real",
            },
            if args.auto_advance {
                " (auto-advance)"
            } else {
                ""
            }
        );
        outln!(
            "  control:  {}.* ({}; docs/emulator.md)",
            triggers_emulator::control::PREFIX,
            if credentials.is_some() {
                "in an account of its own, out of the services' reach"
            } else {
                "needs the token: on a shared server, others who can see triggerslab.> can see it"
            }
        );
        outln!("  instance: {name} ({})", slot.path().display());
        for found in emulator.found_at_start() {
            outln!("  found:    {found}");
        }
        outln!();
        outln!(
            "Point a service at it:   export TRIGGERS_NATS_URL={}",
            lab.url()
        );
        outln!(
            "Then: triggers-lab deploy FLOW.yaml | trigger FLOW_ID '{{...}}' | advance 1h | watch"
        );
        outln!("Ctrl-C stops it.");
        outln!();
    }
    let _ = std::io::stdout().flush();

    // Line-buffered: each record is written whole as it comes, so `tail -f` never shows half a
    // line.
    let record_file = match &args.record {
        Some(path) => {
            let mut f = std::io::LineWriter::new(
                triggers_scenarios::create_output(path, 0o666, false).map_err(|e| {
                    CliError::usage(format!("cannot write {}: {e}", path.display()))
                })?,
            );
            // The header first, so that a reader knows the format before the first record
            // (triggers_emulator::recording).
            let header = RecordingHeader::new(env!("CARGO_PKG_VERSION")).to_line()?;
            f.write_all(header.as_bytes())?;
            f.write_all(b"\n")?;
            Some(f)
        }
        None => None,
    };
    let mut records = emulator.subscribe_records();
    let quiet = args.quiet;
    let mut log = RecordLog {
        file: record_file,
        quiet,
        written: 0,
    };
    // What happened before this loop began (the services of --services registering) is in the
    // emulator's store already.
    log.catch_up(&emulator)?;
    if let Some(path) = std::env::var_os(LOG_ENV) {
        tokio::spawn(keep_log_bounded(PathBuf::from(path), log_cap()));
    }
    let mut drop_check = tokio::time::interval(Duration::from_secs(1));
    let mut drops_told = 0;
    let mut losses_told = 0;
    let mut died = None;
    let mut by_signal = false;
    loop {
        tokio::select! {
            _ = signals.recv() => {
                by_signal = true;
                break;
            }
            _ = drop_check.tick() => {
                if let Some(how) = lab.nats_mut().and_then(NatsServer::exited) {
                    died = Some(how);
                    break;
                }
                let dropped = emulator.dropped_messages();
                if dropped > drops_told {
                    eprintln!(
                        "DROPPED      NATS dropped {} message(s) the emulator could not take in time (slow consumer; {dropped} in all): what it records and judges from now on is incomplete",
                        dropped - drops_told
                    );
                    drops_told = dropped;
                }
                let losses = emulator.connection_losses();
                if losses > losses_told {
                    eprintln!(
                        "DISCONNECTED the emulator lost its NATS connection ({losses} time(s) in all): messages on plain subjects published until it reconnects (triggers, heartbeats) are not seen; completion events and DLQ entries are read from streams and not lost"
                    );
                    losses_told = losses;
                }
            }
            next = records.recv() => match next {
                Ok(record) => {
                    if record.seq > log.written + 1 {
                        log.catch_up(&emulator)?;
                    }
                    log.write(&record)?;
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    log.catch_up(&emulator)?;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
    }
    // A signal has had its line (`SIGINT: stopping cleanly…`): one is enough.
    if !quiet && !by_signal {
        eprintln!("stopping…");
    }
    for services in scripted {
        services.stop().await;
    }
    // What the emulator stored after the loop's last record (a DLQ entry just after a run
    // settled, the services' last heartbeats) goes in the log and the recording too.
    if died.is_none() {
        log.catch_up(&emulator)?;
    }
    if let Some(mut f) = log.file {
        f.flush()?;
        if !quiet && let Some(path) = &args.record {
            eprintln!("recorded events are in {}", path.display());
        }
    }
    drop(slot);
    drop(emulator);
    lab.stop().await?;
    match died {
        Some(how) => Err(server_died_error(&how)),
        None => Ok(()),
    }
}

/// How long `up` waits for an emulator already on its server to answer.
const OTHER_EMULATOR_PROBE: Duration = Duration::from_secs(5);

/// Refuses to start a second emulator on the server at `url`: anything that answers the control
/// API there (an emulator, whatever its token) holds it. Named when a discovery entry of this
/// user's says which `up` it is. Two `up`s starting at the same instant can both pass.
async fn refuse_a_second_emulator(url: &str) -> Result<()> {
    let probe = tokio::time::timeout(OTHER_EMULATOR_PROBE, ControlClient::connect(url)).await;
    let found = match probe {
        Ok(Err(triggers_emulator::ControlError::NoEmulator { .. })) => return Ok(()),
        Ok(Ok(_) | Err(triggers_emulator::ControlError::Refused(_))) => {
            "an emulator answers its control API"
        }
        Ok(Err(_)) => "something answers its control API",
        Err(_) => "something listens on its control API (and does not answer)",
    };
    let holders: Vec<String> = discovery::running()
        .unwrap_or_default()
        .into_iter()
        .filter(|i| i.url == url && i.pid != std::process::id())
        .map(|i| {
            format!(
                "`triggers-lab up` {} (pid {}; `triggers-lab down --instance {}` stops it)",
                i.instance, i.pid, i.instance
            )
        })
        .collect();
    let who = if holders.is_empty() {
        "no `up` of yours on this machine names it: another user's, or another machine's".into()
    } else {
        format!("it is {}", holders.join(", "))
    };
    Err(CliError::env(format!(
        "{url} already has a triggers-lab emulator ({found}; {PREFIX}.*): {who}. One emulator per \
         server: two would each answer half of the control requests and registrations. Use that \
         one (`--instance`), stop it, or give this `up` a server of its own (leave out --nats)",
        PREFIX = triggers_emulator::control::PREFIX
    )))
}

/// Returns once the nats-server `up` started has ended by itself (killed, crashed): how it
/// ended. Checked every second; never returns for a server it cannot watch (an external one,
/// a container), whose loss the emulator's connection reports.
async fn server_died(lab: &mut Harness) -> String {
    let Some(nats) = lab.nats_mut() else {
        return std::future::pending().await;
    };
    let mut check = tokio::time::interval(Duration::from_secs(1));
    loop {
        check.tick().await;
        if let Some(how) = nats.exited() {
            return how;
        }
    }
}

/// `up`'s error when its nats-server died: it serves nothing any more, so it stops rather than
/// stay up answering no one.
fn server_died_error(how: &str) -> CliError {
    CliError::env(format!(
        "the nats-server this `up` started has exited ({how}): services and commands had \
         nothing to talk to, so `up` stopped too (its discovery entry is removed); start it \
         again with `triggers-lab up` (a killed server's store is gone with it)"
    ))
}

/// The scenario files of `--services`, read (and checked) before anything starts.
pub(crate) fn service_scenarios(paths: &[PathBuf]) -> Result<Vec<triggers_scenarios::Scenario>> {
    paths
        .iter()
        .map(|path| {
            triggers_scenarios::load_file(path).map_err(|e| files::FileError(e.to_string()).into())
        })
        .collect()
}

/// Starts the scripted services of each scenario on `url`, saying on standard error (unless
/// `quiet`) what it started and which services, given as commands, it left to the user.
pub(crate) async fn start_scripted(
    scenarios: &[triggers_scenarios::Scenario],
    url: &str,
    quiet: bool,
) -> Result<Vec<triggers_scenarios::ScriptedServices>> {
    let mut all = Vec::new();
    for scenario in scenarios {
        let started = triggers_scenarios::ScriptedServices::start(scenario, url)
            .await
            .map_err(|e| CliError::failed(format!("{}: {e}", scenario.file)))?;
        if !quiet {
            eprintln!(
                "started the scripted services of {}: {}{}",
                scenario.file,
                started.names().join(", "),
                if started.skipped.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (not {}: commands, start them yourself)",
                        started.skipped.join(", ")
                    )
                }
            );
        }
        all.push(started);
    }
    Ok(all)
}

/// The environment variable a detached `up` finds its log file's path in ([`crate::detach`]).
pub(crate) const LOG_ENV: &str = "TRIGGERS_LAB_UP_LOG";

/// How large a detached `up`'s log grows before its earlier part is moved aside: a line per
/// record under load is hundreds of megabytes an hour, and the log lives in the runtime
/// directory, often a small tmpfs. `TRIGGERS_LAB_UP_LOG_CAP` (bytes) changes it, for tests.
const LOG_CAP: u64 = 32 << 20;

fn log_cap() -> u64 {
    std::env::var("TRIGGERS_LAB_UP_LOG_CAP")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&cap| cap > 0)
        .unwrap_or(LOG_CAP)
}

/// Keeps a detached `up`'s log within about twice `cap`: once it passes `cap`, its content is
/// copied to `<log>.1` (replacing the one before) and the log is cut back to nothing; the process
/// writes it in append mode, so the next line starts it again. A line written between the copy
/// and the cut is lost; the log says where the rest went.
async fn keep_log_bounded(path: PathBuf, cap: u64) {
    let mut aside = path.clone().into_os_string();
    aside.push(".1");
    let aside = PathBuf::from(aside);
    let mut check = tokio::time::interval(Duration::from_secs(2));
    loop {
        check.tick().await;
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.len() <= cap {
            continue;
        }
        let moved = std::fs::copy(&path, &aside).and_then(|_| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)?
                .set_len(0)
        });
        match moved {
            Ok(()) => eprintln!(
                "(this log passed {cap} bytes: its earlier part is in {})",
                aside.display()
            ),
            Err(e) => {
                eprintln!(
                    "cannot keep this log within {cap} bytes ({e}); it grows on: stop this `up` \
                     (`triggers-lab down`) before its folder fills"
                );
                return;
            }
        }
    }
}

/// `up`'s log and `--record` file: every record once, in order, from the first. A record the
/// live subscription skipped (it lagged, or the loop began after it) is read back from the
/// emulator's store; one evicted from the store before it could be is counted and told.
struct RecordLog {
    file: Option<std::io::LineWriter<std::fs::File>>,
    quiet: bool,
    /// The last record written (0: none yet).
    written: u64,
}

impl RecordLog {
    fn write(&mut self, record: &triggers_emulator::recorder::Record) -> Result<()> {
        if record.seq <= self.written {
            return Ok(());
        }
        if record.seq > self.written + 1 {
            eprintln!(
                "LOST         records {} to {} were evicted from the emulator's store before they \
                 could be written{}: raise --max-records",
                self.written + 1,
                record.seq - 1,
                if self.file.is_some() {
                    "; the recording misses them"
                } else {
                    ""
                }
            );
        }
        if let Some(f) = self.file.as_mut() {
            serde_json::to_writer(&mut *f, record)?;
            f.write_all(b"\n")?;
        }
        if !self.quiet
            && let Some(line) = log_line(record)
        {
            outln!("{line}");
        }
        self.written = record.seq;
        Ok(())
    }

    /// Writes what the store holds after the last record written.
    fn catch_up(&mut self, emulator: &triggers_emulator::Emulator) -> Result<()> {
        loop {
            let batch = emulator.records_since(self.written, 1024);
            if batch.is_empty() {
                return Ok(());
            }
            for record in &batch {
                self.write(record)?;
            }
        }
    }
}

/// Refuses a taken port before anything starts, saying what probably holds it.
fn check_port_free(port: u16) -> Result<()> {
    if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
        return Ok(());
    }
    let url = format!("nats://127.0.0.1:{port}");
    let holder = discovery::running()
        .unwrap_or_default()
        .into_iter()
        .find(|i| i.url == url)
        .map(|i| {
            format!(
                " by `triggers-lab up` {} (pid {}; `triggers-lab down --instance {}` stops it)",
                i.instance, i.pid, i.instance
            )
        })
        .unwrap_or_default();
    Err(CliError::env(format!(
        "port {port} on 127.0.0.1 is taken{holder}: pass --port N for another one, or --port 0 \
         for any free port"
    )))
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
            "REFUSED      registration of {}: {}",
            if service.is_empty() {
                "an unreadable manifest"
            } else {
                service
            },
            error.clone().unwrap_or_default()
        ),
        RecordKind::Deploy {
            flow_id, version, ..
        } => format!("deployed     {flow_id} v{version}"),
        RecordKind::DeployRefused { flow_id, problems } => {
            format!("REFUSED      deploy of {flow_id}: {}", problems.join("; "))
        }
        RecordKind::Trigger {
            run_id, flow_id, ..
        } => format!("triggered    {flow_id} run {run_id}"),
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
        } => format!("run {:<9} {flow_id} run {run_id}", status_word(*status)),
        RecordKind::Resend {
            run_id,
            dlq_msg_id,
            nodes,
        } => format!(
            "resent       {dlq_msg_id} to {} run {run_id} ({})",
            r.subject,
            nodes.join(", ")
        ),
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

/// A run's status in a word, as the TUI writes it.
pub(crate) fn status_word(status: RunStatus) -> &'static str {
    status.as_str()
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
    #[arg(long, value_name = "NAME", global = true, value_parser = crate::discovery::instance_name)]
    instance: Option<String>,
}

impl ControlArgs {
    /// These flags as given (` --instance ci`), for a command printed to be run again.
    pub(crate) fn as_flags(&self) -> String {
        let mut out = String::new();
        if let Some(url) = &self.nats {
            out.push_str(&format!(" --nats {url}"));
        }
        if let Some(name) = &self.instance {
            out.push_str(&format!(" --instance {name}"));
        }
        out
    }
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
                    (Some(user), Some(password)) => Some(natsbox::ControlCredentials {
                        user: user.clone(),
                        password: password.clone(),
                    }),
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
    let running = discovery::running().env()?;
    if let Some(name) = &args.instance {
        discovery::check_name(name).usage()?;
        return running
            .iter()
            .find(|i| &i.instance == name)
            .map(Target::from)
            .ok_or_else(|| {
                CliError::env(format!(
                    "no running `triggers-lab up` is named {name}{}",
                    if running.is_empty() {
                        String::new()
                    } else {
                        format!("; running: {}", describe(&running))
                    }
                ))
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
            several => Err(CliError::usage(format!(
                "{} `triggers-lab up`s run on {url}: pick one with --instance ({})",
                several.len(),
                several
                    .iter()
                    .map(|i| i.instance.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        };
    }
    match running.as_slice() {
        [] => Err(CliError::env(format!(
            "no running `triggers-lab up` found (looked in {}): start one (`triggers-lab up`), \
             or pass --nats URL / set TRIGGERS_NATS_URL",
            discovery::dir().env()?.display()
        ))),
        [one] => Ok(Target::from(one)),
        several => Err(CliError::usage(format!(
            "{} `triggers-lab up`s are running: {}; say which with --instance NAME (or --nats URL)",
            several.len(),
            describe(several)
        ))),
    }
}

/// A control client on the `up` that `args` names.
pub(crate) async fn control(args: &ControlArgs) -> Result<ControlClient> {
    let target = resolve(args)?;
    Ok(ControlClient::connect_with(&target.url, &target.access).await?)
}

/// A run's timeline, a node a line: id, status, service, and the error if any.
pub(crate) fn print_timeline(run: &triggers_emulator::recorder::Run) {
    for step in &run.timeline {
        let error = if step.error.is_empty() {
            String::new()
        } else {
            format!(": {}", step.error)
        };
        outln!(
            "  {:<12} {:<10} {}{error}",
            step.node_id,
            step.status,
            step.service
        );
    }
}

pub(crate) async fn deploy(args: ControlArgs, file: PathBuf) -> Result<()> {
    // Read as a scenario's `flows: [{file: ...}]` is: the same keys refused, every problem at
    // its line.
    let (name, text) = files::read_text(&file)?;
    let flow = match triggers_scenarios::read_flow(&name, &text) {
        Ok((flow, _)) => flow,
        Err(errors) => {
            let n = errors.len();
            let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return Err(files::FileError(format!(
                "{}\n{} in {name}; nothing was deployed",
                text.join("\n"),
                crate::out::count(n as u64, "problem")
            ))
            .into());
        }
    };
    let client = control(&args).await?;
    let released = client.deploy(&flow).await.map_err(|e| match e {
        triggers_emulator::ControlError::Refused(why) => {
            CliError::verdict(format!("{name}: {why}"))
        }
        other => other.into(),
    })?;
    outln!(
        "deployed {} v{}, broadcast on {}",
        flow.id,
        released.flow.version,
        released.broadcast_subject
    );
    Ok(())
}

/// What `trigger` sends.
pub(crate) enum Payload {
    /// JSON text, `@FILE`, or none (`{}`).
    Json(Option<String>),
    /// Bytes exactly as given (`--raw`).
    Raw(String),
}

/// How long `trigger --wait` waits for a failed run's DLQ entry after the run settled.
const DLQ_GRACE: Duration = Duration::from_secs(3);
/// How long a run idle on the virtual clock is watched (an auto-advancing clock moves at once)
/// before `trigger --wait` says what it waits for.
const IDLE_GRACE: Duration = Duration::from_secs(1);

pub(crate) async fn trigger(
    args: ControlArgs,
    flow: String,
    payload: Payload,
    wait: Option<Duration>,
) -> Result<()> {
    // What is sent, read (and refused) before any `up` is looked for.
    enum Sent {
        Json(Value),
        Raw(String),
    }
    let sent = match payload {
        Payload::Raw(raw) => Sent::Raw(raw),
        Payload::Json(None) => Sent::Json(Value::Object(Default::default())),
        Payload::Json(Some(p)) if p.starts_with('@') => {
            Sent::Json(files::read(std::path::Path::new(&p[1..]))?)
        }
        Payload::Json(Some(p)) => Sent::Json(serde_json::from_str(&p).map_err(|e| {
            CliError::usage(format!(
                "the payload {p:?} is not JSON ({e}); write JSON, @FILE to read one, or --raw \
                 TEXT to send it as it is"
            ))
        })?),
    };
    let client = control(&args).await?;
    let missed_before = if wait.is_some() {
        Some(client.missed().await?)
    } else {
        None
    };
    let run_id = match &sent {
        Sent::Json(json) => client.trigger(&flow, json).await?,
        Sent::Raw(raw) => client.trigger_raw(&flow, None, raw).await?,
    };
    outln!("{run_id}");
    let Some(limit) = wait else {
        return Ok(());
    };
    let deadline = tokio::time::Instant::now() + limit;
    let mut follow = client.follow().await?;
    // On the virtual clock a run waiting on a timer, with nothing pending, is idle until
    // someone advances the clock: no use waiting the whole --wait-timeout for it.
    let virtual_clock =
        client.state_with_runs(0).await?.clock_mode == triggers_emulator::ClockMode::Virtual;
    let mut idle_since: Option<tokio::time::Instant> = None;
    loop {
        let mut run = client.run(&run_id).await?;
        if run.status.is_settled() {
            // A failed run's DLQ entry may be stored a moment after the run settled: wait for
            // it (a bounded grace), so that what is printed, and a recording, holds it.
            let grace = tokio::time::Instant::now() + DLQ_GRACE;
            while run.status == RunStatus::Failed
                && run.dlq.is_empty()
                && tokio::time::timeout_at(grace, follow.next()).await.is_ok()
            {
                run = client.run(&run_id).await?;
            }
            print_timeline(&run);
            outln!("run {run_id}: {}", status_word(run.status));
            if !run.dlq.is_empty() {
                outln!(
                    "run {run_id} ended in the DLQ: {} entr{} (`triggers-lab dlq list --run {run_id}`, or `runs show {run_id}`, shows them)",
                    run.dlq.len(),
                    if run.dlq.len() == 1 { "y" } else { "ies" }
                );
            }
            let missed = client.missed().await?;
            let before = missed_before.unwrap_or(missed);
            if missed > before {
                return Err(CliError::verdict(format!(
                    "MISSED: the emulator missed {} message(s) while run {run_id} ran (a slow \
                     subscription, or its NATS connection lost): its status rests on partial \
                     data and is no verdict",
                    missed - before
                )));
            }
            if run.status == RunStatus::Failed {
                return Err(CliError::verdict(format!("run {run_id} failed")));
            }
            // Cancelled by hand: it did not do its work, so no success either.
            if run.status == RunStatus::Cancelled {
                return Err(CliError::verdict(format!(
                    "run {run_id} was cancelled before it settled (`runs show {run_id}` says what \
                     it dropped)"
                )));
            }
            return Ok(());
        }
        let idle = virtual_clock && run.status == RunStatus::Waiting && run.pending.is_empty();
        // Idle since when (other records, heartbeats among them, keep arriving meanwhile).
        let until = if idle {
            let since = *idle_since.get_or_insert_with(tokio::time::Instant::now);
            deadline.min(since + IDLE_GRACE)
        } else {
            idle_since = None;
            deadline
        };
        let timed_out = tokio::time::Instant::now() >= until
            || tokio::time::timeout_at(until, follow.next()).await.is_err();
        if timed_out {
            let pending: Vec<&str> = run.pending.keys().map(String::as_str).collect();
            let timers: Vec<&str> = run.timers.iter().map(|t| t.node_id.as_str()).collect();
            let mut waiting_on = Vec::new();
            if !pending.is_empty() {
                waiting_on.push(format!("pending: {}", pending.join(", ")));
            }
            if !timers.is_empty() {
                waiting_on.push(format!(
                    "timers armed: {} (`triggers-lab advance` fires them)",
                    timers.join(", ")
                ));
            }
            if idle {
                return Err(CliError::verdict(format!(
                    "run {run_id} is waiting on the virtual clock and will not settle by itself; {}",
                    waiting_on.join("; ")
                )));
            }
            return Err(CliError::verdict(format!(
                "run {run_id} did not settle within {} (--wait-timeout); it is {}{}",
                triggers_scenarios::model::Dur(limit),
                status_word(run.status),
                if waiting_on.is_empty() {
                    String::new()
                } else {
                    format!(", {}", waiting_on.join("; "))
                }
            )));
        }
    }
}

pub(crate) async fn advance(args: ControlArgs, by: Duration) -> Result<()> {
    let client = control(&args).await?;
    let advanced = client.advance(by).await?;
    outln!(
        "clock is now {}; {} fired",
        advanced.clock,
        crate::out::count(advanced.fired.len() as u64, "timer")
    );
    Ok(())
}

/// `triggers-lab watch`: the terminal UI on a running `up` (control API) or, failing that, on any
/// NATS server as a passive observer.
pub(crate) async fn watch(args: ControlArgs, signals: Option<Signals>) -> Result<()> {
    let target = resolve(&args)?;
    let signals = signals.unwrap_or_else(Signals::listen);
    // Dropping the UI on a signal restores the terminal (its guard does). The UI does not listen
    // for signals itself: had it quit on SIGTERM first, `watch` could end before hearing it, and
    // exit 0 rather than 143.
    let ui = async {
        let source = triggers_tui::connect_with(&target.url, &target.access).await?;
        triggers_tui::run(source, ui_options(Some(target.url.clone()))).await
    };
    tokio::select! {
        r = ui => r?,
        _ = signals.recv() => {}
    }
    Ok(())
}

/// The terminal UI's options when the command listens for signals itself (and stops the UI on
/// one): the UI does not.
fn ui_options(source_label: Option<String>) -> triggers_tui::TuiOptions {
    triggers_tui::TuiOptions {
        source_label,
        quit_on_signals: false,
        ..Default::default()
    }
}
