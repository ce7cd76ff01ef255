//! Exit codes, the same for every command, and the errors that choose them.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done; every verdict passed |
//! | 1 | a verdict failed: a scenario, a run, a manifest check, a refused deploy |
//! | 2 | usage: a bad flag or argument, a malformed or unreadable input file |
//! | 3 | environment: no nats-server, no running `up`, cannot connect |
//! | 130 / 143 / 129 | stopped by SIGINT / SIGTERM / SIGHUP |

use std::process::ExitCode;

/// A verdict failed.
pub(crate) const FAILED: u8 = 1;
/// Usage, or a malformed input file.
pub(crate) const USAGE: u8 = 2;
/// The environment: no server, no `up`, no connection.
pub(crate) const ENVIRONMENT: u8 = 3;

/// The table every `--help` ends with.
pub(crate) const HELP: &str = "\
Exit codes (the same for every command):
  0    done; every check passed
  1    a verdict failed (a scenario, a run, a manifest check, a refused deploy)
  2    usage: a bad flag or argument, a malformed or unreadable input file
  3    environment: no nats-server, no running `triggers-lab up`, cannot connect
  130  stopped by SIGINT (Ctrl-C); 143 by SIGTERM; 129 by SIGHUP (terminal closed)";

/// The user's input is wrong: a flag, an argument, a file. Exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub(crate) String);

/// What the command needs around it is missing: a server, an `up`, a connection. Exit code 3.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct EnvironmentError(pub(crate) String);

/// A check the user asked for failed (the message says which). Exit code 1.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct VerdictFailed(pub(crate) String);

/// The exit code for an error of a command.
pub(crate) fn code_of(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if cause.is::<UsageError>()
            || cause.is::<crate::files::FileError>()
            || matches!(
                cause.downcast_ref::<triggers_emulator::ControlError>(),
                Some(triggers_emulator::ControlError::TooLarge { .. })
            )
        {
            return USAGE;
        }
        if cause.is::<EnvironmentError>() {
            return ENVIRONMENT;
        }
        if cause.is::<VerdictFailed>() {
            return FAILED;
        }
        if matches!(
            cause.downcast_ref::<triggers_emulator::ControlError>(),
            Some(triggers_emulator::ControlError::NoEmulator { .. })
        ) || matches!(
            cause.downcast_ref::<triggers_emulator::EmulatorError>(),
            Some(triggers_emulator::EmulatorError::Nats { .. })
        ) || cause.is::<triggers_emulator::NatsError>()
            || cause.is::<async_nats::ConnectError>()
        {
            return ENVIRONMENT;
        }
    }
    FAILED
}

/// Prints `error: ...` and gives the error's exit code.
pub(crate) fn report(e: &anyhow::Error) -> ExitCode {
    eprintln!("error: {}", chain_text(e));
    ExitCode::from(code_of(e))
}

/// The error and its causes, `: `-separated as `{e:#}` shows them, each cause said once: the
/// libraries' errors keep their cause as `source()` and also say it in their own message (their
/// callers mostly print `{e}` alone), so a cause its error has said already is left out.
pub(crate) fn chain_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let said = cause.to_string();
        if text.contains(&said) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&said);
    }
    text
}

/// The multi-threaded Tokio runtime every async command runs on; when it cannot be built, the
/// exit code to return (an environment problem), the reason already printed.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::from(ENVIRONMENT)
        })
}

#[cfg(test)]
mod tests {
    use super::chain_text;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot connect to nats://x: {source}")]
    struct SaysItsCause {
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn a_cause_said_by_its_error_is_not_said_twice() {
        let e = anyhow::Error::from(SaysItsCause {
            source: std::io::Error::other("connection refused"),
        })
        .context("up cannot start");
        assert_eq!(
            chain_text(&e),
            "up cannot start: cannot connect to nats://x: connection refused"
        );
    }

    #[test]
    fn a_cause_not_said_is_shown_after_its_error() {
        let e = anyhow::Error::from(std::io::Error::other("connection refused"))
            .context("cannot connect to nats://x");
        assert_eq!(
            chain_text(&e),
            "cannot connect to nats://x: connection refused"
        );
    }
}
