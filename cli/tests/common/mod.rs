//! What the tests of the binary share: the command (with no server of the caller's environment
//! leaking in) and its output as text. Each test file uses some of it.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// `triggers-lab`, with `TRIGGERS_NATS_URL` removed so that no server of the caller's leaks in.
pub(crate) fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_triggers-lab"));
    c.env_remove("TRIGGERS_NATS_URL");
    c
}

/// [`bin`], with its discovery files and temporary files under `xdg` (so that `up` instances of
/// one test are its own).
pub(crate) fn bin_in(xdg: &Path) -> Command {
    let mut c = bin();
    c.env("XDG_RUNTIME_DIR", xdg).env("TMPDIR", xdg);
    c
}

/// Standard output then standard error, as one text.
pub(crate) fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Standard output and standard error, apart.
pub(crate) fn streams(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
