//! The messages that drive the model, and the commands `update` asks the runtime to perform.

use std::time::Duration;

use ratatui::crossterm::event::{KeyEvent, MouseEvent};
use serde_json::Value;
use triggers_emulator::control::StateSummary;
use triggers_emulator::recorder::{Record, Run};
use triggers_sdk::wire::GoTime;

/// A raw NATS message seen by the passive observer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// When it arrived (wall clock).
    pub at: GoTime,
    /// Its subject.
    pub subject: String,
    /// Its headers as received.
    pub headers: Vec<(String, String)>,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// Everything that can happen: input, time, data from a source, and the outcome of a command.
#[derive(Debug, Clone)]
pub enum Msg {
    /// A key press.
    Key(KeyEvent),
    /// A mouse event (the wheel scrolls).
    Mouse(MouseEvent),
    /// The terminal was resized (the next frame redraws at the new size).
    Resize(u16, u16),
    /// The wall clock moved on (heartbeat ages, liveness).
    Tick(GoTime),
    /// The emulator's state summary (control and in-process modes).
    Summary(StateSummary),
    /// Emulator records, oldest first.
    Records(Vec<Record>),
    /// Messages seen on `triggers.v2.>` (passive mode), oldest first.
    Observed(Vec<Observed>),
    /// A run's full account, fetched on drill-in.
    RunLoaded(Box<Run>),
    /// Messages NATS has dropped so far because this UI's own subscription fell behind (slow
    /// consumer).
    Dropped(u64),
    /// The NATS connection is up.
    Connected,
    /// The NATS connection was lost (the client reconnects by itself).
    Disconnected(String),
    /// A source could not do something; shown, not fatal.
    SourceError(String),
    /// A command finished: what to tell the user, and whether it went wrong.
    Done {
        /// What happened.
        text: String,
        /// Whether it failed.
        error: bool,
    },
    /// Quit (a signal, or the source ended).
    Quit,
}

/// A side effect `update` asks for; the runtime performs it and reports back with a [`Msg`].
#[derive(Debug, Clone, PartialEq)]
pub enum Cmd {
    /// Leave the app.
    Quit,
    /// Start a run of a flow with a payload.
    Trigger {
        /// The flow.
        flow_id: String,
        /// Its input.
        payload: Value,
    },
    /// Re-send a DLQ entry (by its `Nats-Msg-Id`) to its service as a new delivery.
    ResendDlq(String),
    /// Cancel an open run (by its id): the emulator drops what it still owes it.
    CancelRun(String),
    /// Advance the emulator's virtual clock.
    Advance(Duration),
    /// Fetch a run's full timeline from the emulator.
    LoadRun(String),
    /// Put text on the terminal's clipboard (OSC 52: works over SSH and in tmux with
    /// `set-clipboard on`).
    Copy(String),
}
