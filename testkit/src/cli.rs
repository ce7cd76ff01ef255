//! The `triggers-lab` binary as its tests run it: the command with no server of the caller's
//! environment leaking in, its output as text, and guards that stop what a test started when the
//! test ends early (a failed assertion), so that no test leaves a process behind.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

/// The `triggers-lab` binary cargo built for the running test: `CARGO_BIN_EXE_triggers-lab` when
/// the runner sets it, else the file beside the test binary's `deps/` folder (the tests of the
/// `triggers-lab` package have cargo build it first).
///
/// # Panics
/// When there is no such file: the running test is not one of the `triggers-lab` package's.
#[must_use]
pub fn bin_path() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_triggers-lab") {
        return path.into();
    }
    let exe = std::env::current_exe().expect("the running test's path");
    // target/<profile>/deps/<test>-<hash>: the binary is target/<profile>/triggers-lab.
    let path = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join(format!("triggers-lab{}", std::env::consts::EXE_SUFFIX)))
        .unwrap_or_default();
    assert!(
        path.is_file(),
        "no triggers-lab binary at {:?}: bin() serves the tests of the triggers-lab package, which \
         cargo builds it for",
        path
    );
    path
}

/// `triggers-lab`, with `TRIGGERS_NATS_URL` removed so that no server of the caller's leaks in.
#[must_use]
pub fn bin() -> Command {
    let mut c = Command::new(bin_path());
    c.env_remove("TRIGGERS_NATS_URL");
    c
}

/// [`bin`], with its discovery files and temporary files under `xdg` (so that the `up`
/// instances of one test are its own).
#[must_use]
pub fn bin_in(xdg: &Path) -> Command {
    let mut c = bin();
    c.env("XDG_RUNTIME_DIR", xdg).env("TMPDIR", xdg);
    c
}

/// Standard output then standard error, as one text.
#[must_use]
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Standard output and standard error, apart.
#[must_use]
pub fn streams(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A process a test started (an `up`, a `run`), stopped with SIGTERM when the test ends without
/// stopping it: `up` then stops its nats-server and deletes its store on the way out.
#[derive(Debug)]
pub struct Up(pub Child);

impl Deref for Up {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for Up {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            terminate(self.0.id());
            let _ = self.0.wait();
        }
    }
}

#[cfg(unix)]
fn terminate(pid: u32) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
}

#[cfg(not(unix))]
fn terminate(_pid: u32) {}

/// Runs `triggers-lab down --all` in `xdg` (see [`bin_in`]) when dropped, whatever the test's
/// assertions did: every `up --detach` of the test stops.
#[derive(Debug)]
pub struct DownAll(pub PathBuf);

impl Drop for DownAll {
    fn drop(&mut self) {
        let _ = bin_in(&self.0).args(["down", "--all"]).output();
    }
}

/// Whether `pid` runs (a zombie does not), from the process table.
#[must_use]
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// The living children of `pid`, from the process table.
///
/// # Panics
/// Where there is no `/proc` to read: an empty list there would pass a test that checks nothing
/// is left.
#[must_use]
pub fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("the process table, /proc")
        .flatten()
        .filter_map(|e| {
            let child: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // The parent's pid is the second field after the command, which may hold `)`.
            let ppid: u32 = stat
                .rsplit(')')
                .next()?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == pid && alive(child)).then_some(child)
        })
        .collect()
}
