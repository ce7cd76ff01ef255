//! External services: a scenario's `services` entry with a `command`. The runner starts it in a
//! process group of its own with `TRIGGERS_NATS_URL` set, keeps the end of its output for the
//! report, waits until it is ready, and stops it with SIGTERM (SIGKILL if it lingers, and on drop).
//! A [`Watchdog`] kills the group if this process dies without stopping it (SIGKILL, a forced
//! exit): a service must not outlive the run that started it.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::sync::watch;

use natsbox::watchdog::{
    TREE_MARK_VAR, TreeKiller, Watchdog, marked_processes, new_tree_mark, process_group_alive,
    signal_marked,
};

use crate::model::ServiceSpec;

/// Lines of output kept per service.
const KEPT_LINES: usize = 400;
/// How long a stopped service may take to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long the kill passes after the grace period may go on: each finds and SIGKILLs what
/// runs of the service's tree, until a pass finds nothing (a process that keeps re-forking
/// escapes a single pass).
const KILL_BOUND: Duration = Duration::from_secs(10);

/// The end of a process's output, stdout and stderr interleaved as they arrived.
#[derive(Clone, Default)]
pub(crate) struct Output(Arc<Mutex<VecDeque<String>>>);

impl Output {
    fn push(&self, line: String) {
        let mut lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        lines.push_back(line);
        while lines.len() > KEPT_LINES {
            lines.pop_front();
        }
    }

    /// The kept lines, joined.
    pub(crate) fn text(&self) -> String {
        let lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        lines.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

/// A running external service.
pub(crate) struct External {
    pub(crate) name: String,
    /// Whether it has not been stopped yet (what [`Drop`] kills).
    running: bool,
    /// The process's exit status, as text, once it has exited: a task owns the child and waits
    /// on it, so that anyone can learn of its exit at once ([`External::exit_watch`]).
    exit: watch::Receiver<Option<String>>,
    /// The child's process group (its pid): it outlives the child's handle, which forgets the
    /// pid once the child is reaped.
    pgid: Option<u32>,
    /// The value of [`TREE_MARK_VAR`] in its environment, and so in that of everything it
    /// starts: what finds a descendant that left the process group (`setsid`).
    mark: String,
    watchdog: Option<Watchdog>,
    /// Reaps the zombies of the service's processes given to this process (the subreaper, in
    /// `run`) while it runs; aborted when it stops.
    reaper: Option<tokio::task::JoinHandle<()>>,
    pub(crate) output: Output,
}

/// How often the zombies of a running service's adopted processes are reaped.
const REAP_EVERY: Duration = Duration::from_secs(1);

/// Reaps, every [`REAP_EVERY`], the zombies of the tree that this process adopted.
async fn reap_while_running(mut tree: TreeKiller) {
    loop {
        tokio::time::sleep(REAP_EVERY).await;
        tree = match tokio::task::spawn_blocking(move || {
            tree.reap();
            tree
        })
        .await
        {
            Ok(tree) => tree,
            Err(_) => return,
        };
    }
}

impl External {
    /// Starts the command (its folder: `cwd`, else the scenario's).
    pub(crate) fn start(
        spec: &ServiceSpec,
        base_dir: &Path,
        nats_url: &str,
    ) -> Result<Self, String> {
        let cwd = match &spec.cwd {
            Some(dir) => base_dir.join(dir),
            None => base_dir.to_path_buf(),
        };
        Self::spawn(
            &spec.name,
            spec.command.as_deref().unwrap_or_default(),
            &spec.env,
            &cwd,
            nats_url,
        )
    }

    /// Starts `command` (the program, then its arguments) as service `name`, in `cwd`, in a
    /// process group of its own watched by a watchdog, with `TRIGGERS_NATS_URL` set and a mark
    /// of its own in [`TREE_MARK_VAR`].
    pub(crate) fn spawn(
        name: &str,
        command: &[String],
        env: &BTreeMap<String, String>,
        cwd: &Path,
        nats_url: &str,
    ) -> Result<Self, String> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| format!("service {name:?} has an empty command"))?;
        // A scenario named by a bare file name (`run order.yaml`) has an empty folder: here.
        let cwd = if cwd.as_os_str().is_empty() {
            Path::new(".").to_path_buf()
        } else {
            cwd.to_path_buf()
        };
        let mark = new_tree_mark();
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(&cwd)
            .envs(env)
            .env("TRIGGERS_NATS_URL", nats_url)
            .env(TREE_MARK_VAR, &mark)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        #[cfg(unix)]
        cmd.process_group(0);
        if !cwd.is_dir() {
            return Err(format!(
                "cannot start service {name:?}: its working folder {} does not exist (`cwd` is \
                 relative to the scenario file's folder)",
                cwd.display()
            ));
        }
        let mut child = cmd.spawn().map_err(|e| {
            // ENOENT from spawn is about the program once the folder is known to exist: say so,
            // rather than leave the reader to guess which of the two was missing.
            let what = if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "the program {program:?} was not found (a relative path starts in {}; a \
                     bare name is looked up on PATH)",
                    cwd.display()
                )
            } else {
                e.to_string()
            };
            format!(
                "cannot start service {name:?} (`{}` in {}): {what}",
                command.join(" "),
                cwd.display()
            )
        })?;
        let pgid = child.id();
        let watchdog = pgid
            .and_then(|pid| match Watchdog::process_tree(pid, &mark) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(%e, service = %name, "no watchdog: the service would outlive a SIGKILL of this process");
                    None
                }
            });
        let output = Output::default();
        if let Some(out) = child.stdout.take() {
            tokio::spawn(collect(out, output.clone()));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(collect(err, output.clone()));
        }
        let (tx, exit) = watch::channel(None);
        tokio::spawn(async move {
            let status = match child.wait().await {
                Ok(status) => status.to_string(),
                Err(e) => format!("cannot wait on it: {e}"),
            };
            let _ = tx.send(Some(status));
        });
        let reaper = Some(tokio::spawn(reap_while_running(TreeKiller::new(
            pgid, &mark, pgid,
        ))));
        Ok(External {
            name: name.to_owned(),
            running: true,
            exit,
            pgid,
            mark,
            watchdog,
            reaper,
            output,
        })
    }

    /// Sends SIGTERM to its process group (and its processes that left the group), and nothing
    /// more: [`External::wait_exit`] waits, [`External::stop`] (or dropping it) makes sure it is
    /// gone.
    pub(crate) fn terminate(&self) {
        signal(self.pgid, false);
        signal_marked(&self.mark, false);
    }

    /// SIGKILL to its process group and to its processes that left the group, at once: a crash,
    /// for the conformance kit's fault checks. [`External::stop`] still reaps what is left.
    pub(crate) fn kill(&self) {
        signal(self.pgid, true);
        signal_marked(&self.mark, true);
    }

    /// Waits up to `patience` for the process to exit; its status text when it did.
    pub(crate) async fn wait_exit(&mut self, patience: Duration) -> Option<String> {
        let mut exit = self.exit.clone();
        match tokio::time::timeout(patience, exit.wait_for(Option::is_some)).await {
            Ok(Ok(status)) => status.clone(),
            // The waiting task is gone only with the runtime.
            _ => self.exited(),
        }
    }

    /// `Some(status text)` when the process has exited.
    pub(crate) fn exited(&self) -> Option<String> {
        self.exit.borrow().clone()
    }

    /// What learns of the process's exit as it happens (its status text, once `Some`).
    pub(crate) fn exit_watch(&self) -> watch::Receiver<Option<String>> {
        self.exit.clone()
    }

    /// SIGTERM to its process group and to its processes that left the group (`setsid`);
    /// SIGKILL to what is left of them after the grace period. The group, not only the leader:
    /// the leader's exit does not end its children (a shell's, a wrapper's), and a leader that
    /// exits at once on SIGTERM may have left a child still finishing its own graceful shutdown.
    pub(crate) async fn stop(&mut self) -> Result<(), String> {
        if !self.running {
            return Ok(());
        }
        self.running = false;
        let deadline = tokio::time::Instant::now() + STOP_GRACE;
        self.terminate();
        let mut exit = self.exit.clone();
        let leader = tokio::time::timeout_at(deadline, exit.wait_for(Option::is_some))
            .await
            .map(|r| r.map(|_| ()));
        let mut rest_gone = false;
        while tokio::time::Instant::now() < deadline {
            if !self.pgid.is_some_and(process_group_alive)
                && marked_processes(&self.mark).is_empty()
            {
                rest_gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if let Some(reaper) = self.reaper.take() {
            reaper.abort();
        }
        let mut killer = TreeKiller::new(self.pgid, &self.mark, self.pgid);
        let gone = tokio::task::spawn_blocking(move || killer.kill_all(KILL_BOUND))
            .await
            .unwrap_or(false);
        self.watchdog = None;
        if !gone {
            return Err(format!(
                "service {:?}: processes of its own were still starting after {KILL_BOUND:?} of \
                 SIGKILL passes (a fork loop?); some may outlive this run",
                self.name
            ));
        }
        if matches!(leader, Ok(Ok(_))) && rest_gone {
            Ok(())
        } else {
            Err(format!(
                "service {:?} did not exit within {STOP_GRACE:?} of SIGTERM and was killed",
                self.name
            ))
        }
    }
}

impl Drop for External {
    fn drop(&mut self) {
        if let Some(reaper) = self.reaper.take() {
            reaper.abort();
        }
        if self.running {
            signal(self.pgid, true);
            // Bounded: a drop must not hold its thread long.
            TreeKiller::new(self.pgid, &self.mark, self.pgid).kill_all(Duration::from_secs(1));
        }
    }
}

/// Signals the child's process group (the child and whatever it started, as `cargo run` does).
fn signal(pgid: Option<u32>, kill: bool) {
    #[cfg(unix)]
    {
        use rustix::process::{Pid, Signal, kill_process_group};
        if let Some(pid) = pgid
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw)
        {
            let _ = kill_process_group(pid, if kill { Signal::KILL } else { Signal::TERM });
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (pgid, kill);
    }
}

async fn collect(stream: impl AsyncRead + Unpin, output: Output) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        output.push(line);
    }
}
