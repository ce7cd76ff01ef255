//! The errors of the terminal UI. Only starting can fail: once it runs, a lost connection or a
//! refused command is shown on screen, never returned.

use triggers_emulator::ControlError;

/// Why the terminal UI could not start or ended abnormally.
#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    /// No NATS server answered at the URL.
    #[error(
        "cannot connect to NATS at {url}: {reason}; start one (`triggers-lab up`) or pass --nats URL"
    )]
    Connect {
        /// The URL tried.
        url: String,
        /// The client's error.
        reason: String,
    },
    /// The emulator's control API failed while starting.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The passive observer could not subscribe.
    #[error("cannot subscribe to {subject}: {reason}")]
    Subscribe {
        /// The subject.
        subject: String,
        /// The client's error.
        reason: String,
    },
    /// The terminal could not be set up, drawn on or read.
    #[error("terminal: {0}; is this an interactive terminal?")]
    Terminal(#[from] std::io::Error),
}
