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

use triggers_emulator::{ControlError, EmulatorError, HarnessError, NatsError};
use triggers_scenarios::conform::ConformError;
use triggers_tui::TuiError;

use crate::signals::Sig;

/// The table every `--help` ends with.
pub(crate) const HELP: &str = "\
Exit codes (the same for every command):
  0    done; every check passed
  1    a verdict failed (a scenario, a run, a manifest check, a refused deploy)
  2    usage: a bad flag or argument, a malformed or unreadable input file
  3    environment: no nats-server, no running `triggers-lab up`, cannot connect
  130  stopped by SIGINT (Ctrl-C); 143 by SIGTERM; 129 by SIGHUP (terminal closed)";

/// A command's result.
pub(crate) type Result<T, E = CliError> = std::result::Result<T, E>;

/// What kind of failure a command's error is: it chooses the exit code. Decided where the error
/// is made: by the call site that knows (`CliError::usage(..)`, `.env()?`), or, for a library's
/// error, by that error type's one `From` impl below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A verdict failed (a scenario, a run, a check, a refused deploy), or the command could not
    /// finish for a reason that is neither its input nor its environment (a write that failed).
    /// Exit code 1.
    Failed,
    /// The user's input is wrong: a flag, an argument, a file. Exit code 2.
    Usage,
    /// What the command needs around it is missing: a server, an `up`, a connection. Exit code 3.
    Environment,
    /// Stopped by this signal (130, 143 or 129), whatever else went wrong.
    Interrupted(Sig),
}

impl Kind {
    /// The exit code of this kind.
    pub(crate) fn code(self) -> u8 {
        match self {
            Kind::Failed => 1,
            Kind::Usage => 2,
            Kind::Environment => 3,
            Kind::Interrupted(sig) => sig.code(),
        }
    }
}

/// A command's error: its kind, and what to say (nothing when the command has said it already,
/// as `run` does in its summary).
#[derive(Debug)]
pub(crate) struct CliError {
    kind: Kind,
    error: Option<anyhow::Error>,
}

impl CliError {
    /// `error`, of this kind.
    pub(crate) fn new(kind: Kind, error: impl Into<anyhow::Error>) -> Self {
        CliError {
            kind,
            error: Some(error.into()),
        }
    }

    fn message(kind: Kind, message: impl Into<String>) -> Self {
        CliError::new(kind, anyhow::Error::msg(message.into()))
    }

    /// The user's input is wrong (the message says what, and what to give instead).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        CliError::message(Kind::Usage, message)
    }

    /// What the command needs around it is missing (the message says what to start or set).
    pub(crate) fn env(message: impl Into<String>) -> Self {
        CliError::message(Kind::Environment, message)
    }

    /// A check the user asked for failed (the message says which).
    pub(crate) fn verdict(message: impl Into<String>) -> Self {
        CliError::message(Kind::Failed, message)
    }

    /// The command could not finish (the message says why, and what to do).
    pub(crate) fn failed(message: impl Into<String>) -> Self {
        CliError::message(Kind::Failed, message)
    }

    /// A failure of this kind the command has already told the user about.
    pub(crate) fn said(kind: Kind) -> Self {
        CliError { kind, error: None }
    }

    /// The same error, stopped by a signal: the signal's code wins, the error is still said.
    pub(crate) fn interrupted(self, sig: Sig) -> Self {
        CliError {
            kind: Kind::Interrupted(sig),
            ..self
        }
    }

    /// Its kind.
    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    /// Prints `error: ...` on standard error, unless the command said it already.
    pub(crate) fn say(&self) {
        if let Some(error) = &self.error {
            eprintln!("error: {}", chain_text(error));
        }
    }
}

/// Gives an error of any type the kind the call site knows it to be, its text unchanged:
/// `discovery::running().env()?`.
pub(crate) trait OrKind<T>: Sized {
    /// The error, of this kind.
    fn or_kind(self, kind: Kind) -> Result<T, CliError>;

    /// The error, a usage error (exit code 2).
    fn usage(self) -> Result<T, CliError> {
        self.or_kind(Kind::Usage)
    }

    /// The error, an environment error (exit code 3).
    fn env(self) -> Result<T, CliError> {
        self.or_kind(Kind::Environment)
    }

    /// The error, a failure (exit code 1).
    fn failed(self) -> Result<T, CliError> {
        self.or_kind(Kind::Failed)
    }
}

impl<T, E: Into<anyhow::Error>> OrKind<T> for Result<T, E> {
    fn or_kind(self, kind: Kind) -> Result<T, CliError> {
        self.map_err(|e| CliError::new(kind, e))
    }
}

// The kind of each library error, decided once per error type.

impl From<crate::files::FileError> for CliError {
    /// A file the user gave that cannot be read or parsed: usage.
    fn from(e: crate::files::FileError) -> Self {
        CliError::new(Kind::Usage, e)
    }
}

impl From<ControlError> for CliError {
    fn from(e: ControlError) -> Self {
        let kind = match &e {
            // What the user asked to send is too large: theirs to make smaller.
            ControlError::TooLarge { .. } => Kind::Usage,
            ControlError::NoEmulator { .. } => Kind::Environment,
            // A refusal of what was asked (an unknown run, a refused trigger), a bad reply.
            _ => Kind::Failed,
        };
        CliError::new(kind, e)
    }
}

impl From<EmulatorError> for CliError {
    fn from(e: EmulatorError) -> Self {
        let kind = match &e {
            EmulatorError::Nats { .. } => Kind::Environment,
            _ => Kind::Failed,
        };
        CliError::new(kind, e)
    }
}

impl From<HarnessError> for CliError {
    fn from(e: HarnessError) -> Self {
        match e {
            HarnessError::Emulator(e) => e.into(),
            // No server, no connection, no login: the environment.
            e => CliError::new(Kind::Environment, e),
        }
    }
}

impl From<NatsError> for CliError {
    /// A nats-server that cannot be had, started or stopped: the environment.
    fn from(e: NatsError) -> Self {
        CliError::new(Kind::Environment, e)
    }
}

impl From<TuiError> for CliError {
    fn from(e: TuiError) -> Self {
        match e {
            TuiError::Control(e) => e.into(),
            e @ TuiError::Terminal(_) => CliError::new(Kind::Failed, e),
            // No server at the URL, or one that refuses a subscription: the environment.
            e => CliError::new(Kind::Environment, e),
        }
    }
}

impl From<ConformError> for CliError {
    fn from(e: ConformError) -> Self {
        let kind = match &e {
            ConformError::NoCommand
            | ConformError::UnknownCheck(_)
            | ConformError::TimeoutTooShort(_) => Kind::Usage,
            // The server, the emulator, the peer or the command could not be started.
            _ => Kind::Environment,
        };
        CliError::new(kind, e)
    }
}

impl From<std::io::Error> for CliError {
    /// A write or a read the command itself did (a report, a recording) failed.
    fn from(e: std::io::Error) -> Self {
        CliError::new(Kind::Failed, e)
    }
}

impl From<serde_json::Error> for CliError {
    /// What the command writes as JSON could not be.
    fn from(e: serde_json::Error) -> Self {
        CliError::new(Kind::Failed, e)
    }
}

impl From<std::fmt::Error> for CliError {
    /// Text the command composes could not be.
    fn from(e: std::fmt::Error) -> Self {
        CliError::new(Kind::Failed, e)
    }
}

/// Says the error (`error: ...`), unless the command said it already, and gives its exit code.
pub(crate) fn report(result: Result<(), CliError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            e.say();
            ExitCode::from(e.kind.code())
        }
    }
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

/// The multi-threaded Tokio runtime every async command runs on; one that cannot be built is
/// the environment's problem.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::env(format!("cannot start the async runtime: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(e: impl Into<CliError>) -> u8 {
        e.into().kind().code()
    }

    fn nats_error() -> NatsError {
        NatsError::InvalidConfig {
            setting: "TRIGGERS_NATS_BACKEND",
            value: "x".into(),
            expected: "auto, binary or docker",
        }
    }

    fn nats_call() -> EmulatorError {
        EmulatorError::Nats {
            action: "subscribe",
            source: "connection closed".into(),
        }
    }

    #[test]
    fn a_control_error_says_its_kind() {
        let no_emulator = ControlError::NoEmulator {
            url: "nats://127.0.0.1:4222".into(),
            reason: "no responders".into(),
        };
        assert_eq!(code(no_emulator), 3);
        let too_large = ControlError::TooLarge {
            op: "deploy".into(),
            bytes: 2 << 20,
            max: 1 << 20,
        };
        assert_eq!(code(too_large), 2);
        assert_eq!(code(ControlError::Refused("no run r-1".into())), 1);
        assert_eq!(code(ControlError::BadReply("not JSON".into())), 1);
    }

    #[test]
    fn an_emulator_error_is_the_environment_only_for_a_nats_call() {
        assert_eq!(code(nats_call()), 3);
        assert_eq!(code(EmulatorError::UnknownFlow("order".into())), 1);
    }

    #[test]
    fn a_harness_error_is_the_environment_unless_the_emulator_says_otherwise() {
        assert_eq!(code(HarnessError::Nats(nats_error())), 3);
        let unknown = HarnessError::Emulator(EmulatorError::UnknownFlow("order".into()));
        assert_eq!(code(unknown), 1);
        assert_eq!(code(HarnessError::Emulator(nats_call())), 3);
    }

    #[test]
    fn a_nats_error_is_the_environment() {
        assert_eq!(code(nats_error()), 3);
    }

    #[test]
    fn a_tui_error_says_its_kind() {
        let connect = TuiError::Connect {
            url: "nats://127.0.0.1:1".into(),
            source: async_nats::ConnectErrorKind::Io.into(),
        };
        assert_eq!(code(connect), 3);
        let too_large = TuiError::Control(ControlError::TooLarge {
            op: "trigger".into(),
            bytes: 2,
            max: 1,
        });
        assert_eq!(code(too_large), 2);
        assert_eq!(code(TuiError::Terminal(std::io::Error::other("no tty"))), 1);
    }

    #[test]
    fn a_conform_error_is_usage_or_the_environment() {
        assert_eq!(code(ConformError::NoCommand), 2);
        assert_eq!(code(ConformError::UnknownCheck("nope".into())), 2);
        let short = ConformError::TimeoutTooShort(std::time::Duration::from_millis(1));
        assert_eq!(code(short), 2);
        assert_eq!(code(ConformError::Harness("no server".into())), 3);
        assert_eq!(code(ConformError::Start("no such file".into())), 3);
    }

    #[test]
    fn a_file_error_is_usage_and_a_write_of_our_own_a_failure() {
        assert_eq!(code(crate::files::FileError("f.yaml:1:1: bad".into())), 2);
        assert_eq!(code(std::io::Error::other("disk full")), 1);
        assert_eq!(code(std::fmt::Error), 1);
    }

    #[test]
    fn a_call_site_says_the_kind_and_a_signal_wins() {
        let e = Err::<(), _>(std::io::Error::other("refused"))
            .env()
            .unwrap_err();
        assert_eq!(e.kind().code(), 3);
        assert_eq!(e.interrupted(Sig::Term).kind().code(), 143);
        assert_eq!(
            CliError::said(Kind::Interrupted(Sig::Int)).kind().code(),
            130
        );
        assert_eq!(CliError::usage("--x").kind().code(), 2);
        assert_eq!(CliError::verdict("run r-1 failed").kind().code(), 1);
    }

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
