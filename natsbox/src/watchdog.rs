//! Children that die with this process, however it ends: a [`Watchdog`] per process group.
//!
//! A nats-server the binary backend spawned, or a scenario's external service, must not outlive
//! the process that started it, even when that process is SIGKILLed (a CI runner's timeout, the
//! OOM killer, a second Ctrl-C that forces the exit). Nothing in the child runs when its parent is
//! killed, so a small supervisor does it: a `/bin/sh` in a process group of its own whose standard
//! input is the read end of a pipe whose only write end this process holds. When this process
//! ends, however it ends, the kernel closes the write end; `read` returns at end of file and the
//! watchdog SIGKILLs the watched process group (and removes the directory it was given, a
//! nats-server's JetStream store).
//!
//! Why not `prctl(PR_SET_PDEATHSIG)` in a `pre_exec` hook: it needs `unsafe` (the workspace
//! forbids it), it is Linux only, and it fires when the *thread* that spawned the child exits,
//! not the process: a server spawned from a Tokio blocking-pool thread would be killed when that
//! idle thread retires.
//!
//! Disarming (dropping the [`Watchdog`]) kills the watchdog first, so a graceful stop is never
//! cut short by it.
//!
//! A process group is not the whole tree: a descendant that calls `setsid` (a daemon's double
//! fork, `setsid cmd &` in a script) leaves it. So a service's processes also carry a mark in
//! their environment ([`TREE_MARK_VAR`], inherited by everything they start, whatever group or
//! session it moves to), and [`marked_processes`] finds them by it, as Jenkins' process tree
//! killer finds a build's by `BUILD_ID`. A [`Watchdog::process_tree`] kills the group and every
//! marked process (Linux, where `/proc` shows environments; elsewhere the group only).

use std::io::{self, PipeWriter};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The environment variable whose value marks the processes of one tree ([`marked_processes`]).
pub const TREE_MARK_VAR: &str = "TRIGGERS_LAB_TREE";

/// Waits for end of file on standard input, then SIGKILLs process group `$1` and, when `$3` is
/// not empty, every process whose environment holds `TRIGGERS_LAB_TREE=$3`; when `$2` is not
/// empty, removes that directory once the group is gone (or after 5 s: an init that does not
/// reap leaves zombies, which still count as members).
const SCRIPT: &str = r#"read -r _ignored
kill -s KILL -- "-$1" 2>/dev/null
if [ -n "$3" ]; then
  for f in /proc/[0-9]*/environ; do
    if tr '\0' '\n' < "$f" 2>/dev/null | grep -qxF "TRIGGERS_LAB_TREE=$3"; then
      p=${f#/proc/}
      kill -s KILL "${p%/environ}" 2>/dev/null
    fi
  done
fi
if [ -n "$2" ]; then
  i=0
  while kill -s 0 -- "-$1" 2>/dev/null && [ "$i" -lt 50 ]; do
    sleep 0.1 2>/dev/null || sleep 1
    i=$((i + 1))
  done
  rm -rf -- "$2"
fi
"#;

/// Kills a process group (and removes a directory) when this process ends without disarming it.
/// Dropping it disarms it.
#[derive(Debug)]
pub struct Watchdog {
    child: Option<Child>,
    // Closed after the watchdog is killed (fields drop after `Drop::drop`): closing it first
    // would make the watchdog fire.
    _armed: PipeWriter,
}

impl Watchdog {
    /// Arms a watchdog over the process group `pgid` (a child spawned with
    /// `process_group(0)` leads a group whose id is its pid). When this process ends without
    /// dropping the watchdog, the group gets SIGKILL and `remove`, if given, is deleted.
    ///
    /// # Errors
    /// When the pipe or `/bin/sh` cannot be had; the caller decides whether to go on unguarded.
    pub fn process_group(pgid: u32, remove: Option<&Path>) -> io::Result<Watchdog> {
        Self::arm(pgid, remove, None)
    }

    /// Arms a watchdog over the process group `pgid` and every process marked `mark`
    /// ([`TREE_MARK_VAR`]; [`new_tree_mark`]): when this process ends without dropping the
    /// watchdog, all of them get SIGKILL, those that left the group (`setsid`) too.
    ///
    /// # Errors
    /// As [`Watchdog::process_group`].
    pub fn process_tree(pgid: u32, mark: &str) -> io::Result<Watchdog> {
        Self::arm(pgid, None, Some(mark))
    }

    fn arm(pgid: u32, remove: Option<&Path>, mark: Option<&str>) -> io::Result<Watchdog> {
        let (read, write) = io::pipe()?;
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(SCRIPT)
            .arg("triggers-lab-watchdog")
            .arg(pgid.to_string())
            .arg(remove.map(Path::as_os_str).unwrap_or_default())
            .arg(mark.unwrap_or_default())
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Out of the terminal's process group: a Ctrl-C meant for us must not kill the watchdog
        // before we have stopped what it watches.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn()?;
        // `command` holds our copy of the read end until it is dropped; only the watchdog's may
        // remain.
        drop(command);
        Ok(Watchdog {
            child: Some(child),
            _armed: write,
        })
    }

    /// The watchdog's own pid (for tests).
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// Whether the process `pid` of this machine still runs (a process we may not signal does).
#[must_use]
pub fn process_alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Some(pid) = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        else {
            return false;
        };
        !matches!(
            rustix::process::test_kill_process(pid),
            Err(rustix::io::Errno::SRCH)
        )
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// Whether any process of group `pgid` still runs. A zombie does not count: whether it is reaped
/// is its parent's business (an init that does not reap would otherwise keep a group alive).
#[must_use]
pub fn process_group_alive(pgid: u32) -> bool {
    #[cfg(target_os = "linux")]
    {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return false;
        };
        entries.flatten().any(|entry| {
            let name = entry.file_name();
            if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
                return false;
            }
            running_pgrp(&entry.path()) == Some(pgid)
        })
    }
    #[cfg(all(unix, not(target_os = "linux")))]
    {
        i32::try_from(pgid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .is_some_and(|pid| rustix::process::test_kill_process_group(pid).is_ok())
    }
    #[cfg(not(unix))]
    {
        let _ = pgid;
        false
    }
}

/// The process group of the process whose `/proc` entry is `dir`, if it runs (a zombie does
/// not: whether it is reaped is its parent's business).
#[cfg(target_os = "linux")]
fn running_pgrp(dir: &Path) -> Option<u32> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    // After the command's closing parenthesis: state, ppid, pgrp, ...
    let mut fields = stat.rsplit(')').next()?.split_whitespace();
    let state = fields.next()?;
    let pgrp = fields.nth(1)?.parse().ok()?;
    (state != "Z" && state != "X").then_some(pgrp)
}

/// A mark no other tree has: this process's pid, a count and the time.
#[must_use]
pub fn new_tree_mark() -> String {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{}-{nanos:x}",
        std::process::id(),
        COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// The running processes (zombies not counted) whose environment holds
/// `TRIGGERS_LAB_TREE=<mark>`, this process excepted. Empty where `/proc` does not show
/// environments (not Linux), and for processes of other users (theirs cannot be read).
#[must_use]
pub fn marked_processes(mark: &str) -> Vec<u32> {
    #[cfg(target_os = "linux")]
    {
        let wanted = format!("{TREE_MARK_VAR}={mark}");
        let me = std::process::id();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|entry| {
                let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
                if pid == me {
                    return None;
                }
                let environ = std::fs::read(entry.path().join("environ")).ok()?;
                if !environ.split(|b| *b == 0).any(|v| v == wanted.as_bytes()) {
                    return None;
                }
                running_pgrp(&entry.path()).map(|_| pid)
            })
            .collect()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = mark;
        Vec::new()
    }
}

/// Makes this process the "child subreaper" of everything it starts (Linux): a process whose
/// parent exits is then given to this process, not to init, so a service's descendant that
/// detached (`setsid`, a double fork) stays below the process that started the service, where
/// [`TreeKiller`] finds it by its parent even if it dropped the [`TREE_MARK_VAR`] mark.
/// Returns whether it took effect (false elsewhere than Linux, or if the kernel refused).
pub fn become_child_subreaper() -> bool {
    #[cfg(target_os = "linux")]
    {
        rustix::process::set_child_subreaper(Some(rustix::process::getpid())).is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Kills one process tree for good: its process group, every process carrying its mark, and
/// every descendant of any of them (found by parent), again and again until none is left. One
/// pass is not enough: a process that forks and exits over and over (a re-forking daemon) has a
/// new pid by the time a single scan's kill arrives. What is killed and given to this process
/// (a subreaper: [`become_child_subreaper`]) is reaped here, not left a zombie.
#[derive(Debug)]
pub struct TreeKiller {
    pgid: Option<u32>,
    mark: String,
    /// The process this one started and waits for itself (its exit status is someone else's to
    /// collect): never reaped here.
    leader: Option<u32>,
    /// Every pid seen in the tree so far: a descendant of one is in the tree even when its
    /// parent has exited since.
    seen: std::collections::BTreeSet<u32>,
}

/// How many pids a [`TreeKiller`] remembers: a bound for a tree that forks without end.
const MAX_SEEN: usize = 100_000;

/// How many passes in a row must find nothing of a tree for [`TreeKiller::kill_all`] to call it
/// gone.
pub const QUIET_PASSES: usize = 5;

impl TreeKiller {
    /// The tree of process group `pgid` (its leader, `leader`, excepted from reaping) and mark
    /// `mark`.
    #[must_use]
    pub fn new(pgid: Option<u32>, mark: &str, leader: Option<u32>) -> TreeKiller {
        TreeKiller {
            pgid,
            mark: mark.to_owned(),
            leader,
            seen: leader.into_iter().collect(),
        }
    }

    /// One pass: SIGKILLs (SIGTERM unless `kill`) every running process of the tree found now,
    /// and reaps the tree's zombies that are this process's children. Returns how many running
    /// processes it signalled: 0 means none is left.
    pub fn pass(&mut self, kill: bool) -> usize {
        self.scan(Some(kill))
    }

    /// A pass that signals nothing: it learns the tree's processes as they are now and reaps
    /// the tree's zombies given to this process (a subreaper adopts every orphan of the tree,
    /// and must collect their exits, or they pile up as zombies while the service runs).
    /// Returns how many processes of the tree run.
    pub fn reap(&mut self) -> usize {
        self.scan(None)
    }

    fn scan(&mut self, signal: Option<bool>) -> usize {
        #[cfg(target_os = "linux")]
        {
            let table = process_table();
            let wanted = format!("{TREE_MARK_VAR}={}", self.mark);
            let me = std::process::id();
            // To a fixed point: a child of a process found in this pass is in the tree too.
            loop {
                let before = self.seen.len();
                for p in &table {
                    if p.pid == me || self.seen.contains(&p.pid) || self.seen.len() >= MAX_SEEN {
                        continue;
                    }
                    // The mark is looked for everywhere when killing; when only reaping, in
                    // the processes this one adopted (it reads every process's environment).
                    let in_tree = self.pgid.is_some_and(|g| g == p.pgrp)
                        || self.seen.contains(&p.ppid)
                        || (!p.zombie
                            && (signal.is_some() || p.ppid == me)
                            && has_env(p.pid, &wanted));
                    if in_tree {
                        self.seen.insert(p.pid);
                    }
                }
                if self.seen.len() == before {
                    break;
                }
            }
            // What has gone is forgotten (its children, if any, have a new parent by now): the
            // set holds what runs, not every pid the tree ever had.
            let present: std::collections::BTreeSet<u32> = table.iter().map(|p| p.pid).collect();
            self.seen
                .retain(|pid| present.contains(pid) || Some(*pid) == self.leader);
            let mut signalled = 0;
            for p in &table {
                if !self.seen.contains(&p.pid) || p.pid == me {
                    continue;
                }
                if p.zombie {
                    if p.ppid == me && Some(p.pid) != self.leader {
                        reap(p.pid);
                    }
                    continue;
                }
                if let Some(kill) = signal {
                    signal_pid(p.pid, kill);
                }
                signalled += 1;
            }
            signalled
        }
        #[cfg(not(target_os = "linux"))]
        {
            if signal.is_none() {
                return usize::from(self.pgid.is_some_and(process_group_alive));
            }
            if let Some(pgid) = self.pgid
                && process_group_alive(pgid)
            {
                #[cfg(unix)]
                if let Some(pid) = i32::try_from(pgid)
                    .ok()
                    .and_then(rustix::process::Pid::from_raw)
                {
                    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
                }
                return 1;
            }
            0
        }
    }

    /// SIGKILL passes until [`QUIET_PASSES`] in a row find no running process of the tree, or
    /// `bound` has passed; whether the tree is gone. Blocks (a few milliseconds a pass).
    ///
    /// One empty pass is no proof: a process caught between fork and exec, or whose environment
    /// could not be read at that instant, and whose parent had just exited, is in no pass's
    /// view for a moment.
    pub fn kill_all(&mut self, bound: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + bound;
        let mut quiet = 0;
        loop {
            if self.pass(true) == 0 {
                quiet += 1;
                if quiet >= QUIET_PASSES {
                    return true;
                }
            } else {
                quiet = 0;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(if quiet > 0 {
                20
            } else {
                2
            }));
        }
    }
}

/// One process of the table: its pid, parent, group and whether it is a zombie.
#[cfg(target_os = "linux")]
struct Proc {
    pid: u32,
    ppid: u32,
    pgrp: u32,
    zombie: bool,
}

#[cfg(target_os = "linux")]
fn process_table() -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // After the command's closing parenthesis: state, ppid, pgrp, ...
            let mut fields = stat.rsplit(')').next()?.split_whitespace();
            let state = fields.next()?;
            let ppid = fields.next()?.parse().ok()?;
            let pgrp = fields.next()?.parse().ok()?;
            Some(Proc {
                pid,
                ppid,
                pgrp,
                zombie: state == "Z" || state == "X",
            })
        })
        .collect()
}

#[cfg(target_os = "linux")]
fn has_env(pid: u32, wanted: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|environ| environ.split(|b| *b == 0).any(|v| v == wanted.as_bytes()))
}

#[cfg(unix)]
fn signal_pid(pid: u32, kill: bool) {
    use rustix::process::{Pid, Signal, kill_process};
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = kill_process(pid, if kill { Signal::KILL } else { Signal::TERM });
    }
}

/// Collects the exit of `pid`, a child of this process that has exited (without waiting).
#[cfg(target_os = "linux")]
fn reap(pid: u32) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG);
    }
}

/// Sends SIGTERM (or SIGKILL, `kill`) to every process [`marked_processes`] finds; returns how
/// many there were.
pub fn signal_marked(mark: &str, kill: bool) -> usize {
    let pids = marked_processes(mark);
    #[cfg(unix)]
    for pid in &pids {
        use rustix::process::{Pid, Signal, kill_process};
        if let Some(pid) = i32::try_from(*pid).ok().and_then(Pid::from_raw) {
            let _ = kill_process(pid, if kill { Signal::KILL } else { Signal::TERM });
        }
    }
    pids.len()
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};

    fn gone(pid: u32) -> bool {
        // A zombie counts as gone: whether it is reaped is its parent's business.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z')),
            Err(_) => true,
        }
    }

    fn wait_gone(pid: u32) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if gone(pid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn a_disarmed_watchdog_leaves_the_group_alone() {
        let mut sleeper = Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let watchdog = Watchdog::process_group(sleeper.id(), Some(dir.path())).unwrap();
        let watchdog_pid = watchdog.pid().unwrap();
        drop(watchdog);
        assert!(wait_gone(watchdog_pid));
        assert!(
            sleeper.try_wait().unwrap().is_none(),
            "the sleeper was killed"
        );
        assert!(dir.path().exists(), "the directory was removed");
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_tree_watchdog_kills_the_marked_processes_outside_the_group() {
        let mark = new_tree_mark();
        let mut leader = Command::new("sleep")
            .arg("300")
            .process_group(0)
            .env(TREE_MARK_VAR, &mark)
            .spawn()
            .unwrap();
        // Another group (a session of its own, as after `setsid`), the same mark.
        let mut escaped = Command::new("sleep")
            .arg("300")
            .process_group(0)
            .env(TREE_MARK_VAR, &mark)
            .spawn()
            .unwrap();
        let mut other = Command::new("sleep")
            .arg("300")
            .env(TREE_MARK_VAR, new_tree_mark())
            .spawn()
            .unwrap();
        let mut found = marked_processes(&mark);
        found.sort_unstable();
        let mut expected = vec![leader.id(), escaped.id()];
        expected.sort_unstable();
        assert_eq!(found, expected);
        let mut watchdog = Watchdog::process_tree(leader.id(), &mark).unwrap();
        // This process's death, as the watchdog sees it.
        let mut child = watchdog.child.take().unwrap();
        drop(watchdog);
        assert!(wait_gone(leader.id()) && wait_gone(escaped.id()));
        let _ = leader.wait();
        let _ = escaped.wait();
        assert!(
            other.try_wait().unwrap().is_none(),
            "an unmarked process stays"
        );
        other.kill().unwrap();
        other.wait().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn the_watchdog_fires_when_the_write_end_closes() {
        // The watchdog's end of file comes from the kernel closing our write end; forgetting the
        // child handle and closing the pipe is what this process's death looks like to it.
        let mut sleeper = Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        std::fs::create_dir(&store).unwrap();
        std::fs::write(store.join("data"), b"x").unwrap();
        let mut watchdog = Watchdog::process_group(sleeper.id(), Some(&store)).unwrap();
        let mut child = watchdog.child.take().unwrap();
        drop(watchdog);
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = sleeper.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the sleeper outlived its watchdog"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(!status.success());
        child.wait().unwrap();
        assert!(!store.exists(), "the watched directory is still there");
    }
}
