//! The errors of the terminal UI. Only starting can fail: once it runs, a lost connection or a
//! refused command is shown on screen, never returned.

use triggers_emulator::ControlError;
use triggers_sdk::transport::RoundTripError;

/// Why the terminal UI could not start or ended abnormally.
#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    /// No NATS server answered at the URL.
    #[error(
        "cannot connect to NATS at {url}: {source}; start one (`triggers-lab up`) or pass --nats URL"
    )]
    Connect {
        /// The URL tried.
        url: String,
        /// The client's error.
        #[source]
        source: async_nats::ConnectError,
    },
    /// The emulator's control API failed while starting.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The passive observer or the control API's records could not be followed.
    #[error("cannot subscribe to {subject}: {source}")]
    Subscribe {
        /// The subject.
        subject: String,
        /// Why.
        #[source]
        source: SubscribeError,
    },
    /// The terminal could not be set up, drawn on or read.
    #[error("terminal: {0}; is this an interactive terminal?")]
    Terminal(#[from] std::io::Error),
}

/// Why a subscription the UI watches through could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SubscribeError {
    /// The control API's records could not be followed.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The NATS client refused the subscription.
    #[error(transparent)]
    Nats(#[from] async_nats::SubscribeError),
    /// The subscription was not confirmed in place at the server.
    #[error(transparent)]
    RoundTrip(#[from] RoundTripError),
}
