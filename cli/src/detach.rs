//! `triggers-lab up --detach`: the same `up`, started again in the background with its output
//! in a log file beside its discovery entry; this process waits until it is up (or says why it
//! is not) and returns. `triggers-lab down` stops it.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::discovery;
use crate::exit::{CliError, OrKind, Result};
use crate::out::outln;

/// The instance name of a detached `up` given no `--instance`: one name, so that `down` and the
/// other commands find it without being told, and a second one is refused rather than stacked.
pub(crate) const DEFAULT_NAME: &str = "default";

/// How long `up` may take to be ready (a Docker image may be started).
const READY_WITHIN: Duration = Duration::from_secs(90);

/// The most of the log of an `up` that stopped at once that is shown.
const LOG_SHOWN: u64 = 1 << 20;

/// Starts `up` again without `--detach`, in the background; returns once its discovery entry is
/// written.
pub(crate) fn detach(instance: Option<&str>) -> Result<()> {
    let name = instance.unwrap_or(DEFAULT_NAME).to_owned();
    // Refused now (a running `up` of that name, a bad name) rather than in the log.
    drop(discovery::Slot::prepare(&name).env()?);
    let log_path = discovery::log_path(&name).failed()?;
    drop(
        triggers_scenarios::create_output(&log_path, 0o600, false)
            .with_context(|| format!("cannot create {}", log_path.display()))
            .failed()?,
    );
    // Appending: when the log is cut back to its start (`lab_cmd::keep_log_bounded`), the next
    // line lands there rather than at the old offset, past a hole.
    let log = triggers_scenarios::create_output(&log_path, 0o600, true)
        .with_context(|| format!("cannot open {}", log_path.display()))
        .failed()?;
    let mut args: Vec<std::ffi::OsString> = std::env::args_os()
        .skip(1)
        .filter(|a| a != "--detach")
        .collect();
    if instance.is_none() {
        args.extend(["--instance".into(), name.clone().into()]);
    }
    let exe = std::env::current_exe()
        .context("cannot find this program's path")
        .failed()?;
    let mut command = Command::new(exe);
    command
        .args(&args)
        .env(crate::lab_cmd::LOG_ENV, &log_path)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // Its own process group: a Ctrl-C in this terminal is not for it.
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command
        .spawn()
        .context("cannot start `up` in the background")
        .failed()?;
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            // An `up` that stopped at once wrote a few lines; a log grown larger is not shown.
            let bytes = triggers_scenarios::read_own_file(&log_path, LOG_SHOWN).unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes);
            return Err(CliError::env(format!(
                "`up` stopped at once ({status}); its log ({}):\n{}",
                log_path.display(),
                text.trim_end()
            )));
        }
        let running = discovery::running().unwrap_or_default();
        if let Some(i) = running.iter().find(|i| i.pid == child.id()) {
            outln!("triggers-lab up is running in the background");
            outln!("  instance: {} (pid {})", i.instance, i.pid);
            outln!("  nats:     {}", i.url);
            outln!("  log:      {}", log_path.display());
            outln!();
            outln!(
                "Point a service at it:   export TRIGGERS_NATS_URL={}",
                i.url
            );
            outln!(
                "Then: triggers-lab deploy FLOW.yaml | trigger FLOW_ID '{{...}}' | status | runs list"
            );
            outln!(
                "Stop it: triggers-lab down{}",
                if name == DEFAULT_NAME {
                    String::new()
                } else {
                    format!(" --instance {name}")
                }
            );
            return Ok(());
        }
        if started.elapsed() > READY_WITHIN {
            let _ = child.kill();
            return Err(CliError::env(format!(
                "`up` was not ready within {} s; its log is {}",
                READY_WITHIN.as_secs(),
                log_path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
