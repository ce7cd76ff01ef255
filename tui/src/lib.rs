//! The triggers-lab terminal UI: watch services, flows, runs, DLQ entries, conformance
//! violations and raw traffic live, the way k9s or nats-top watch theirs.
//!
//! Three sources, one app:
//! - [`watch`]: any NATS server. Against a running `triggers-lab up` it uses the emulator's
//!   control API (state, records, trigger a flow, advance the clock); anywhere else it is a
//!   passive, read-only observer of `triggers.v2.>` and says so on screen.
//! - [`run_in_process`]: an [`Emulator`] in this process (`up --tui`, `run --tui`).
//! - [`run`]: either, from a [`Source`] and [`TuiOptions`].
//!
//! It follows The Elm Architecture: a [`Model`], [`Msg`]s from the terminal and from background
//! tasks (over a channel), a pure [`update`] that returns a [`Cmd`] for the runtime to perform,
//! and [`view`]. See `docs/tui.md` for the views and the key map.
//!
//! ```no_run
//! # async fn example() -> Result<(), triggers_tui::TuiError> {
//! triggers_tui::watch("nats://127.0.0.1:4222").await?;
//! # Ok(())
//! # }
//! ```

mod app;
mod error;
// Sample data for the snapshot tests and the rendering bench (which enables the feature through
// the dev-dependency on this crate), not part of the UI's API.
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
mod format;
mod model;
mod msg;
mod source;
mod theme;
mod update;
mod view;

#[cfg(test)]
mod snapshot_tests;

use std::time::Duration;

use triggers_emulator::Emulator;
use triggers_emulator::control::{ControlAccess, ControlClient};
use triggers_sdk::transport::DropCounter;

pub use app::{TuiOptions, run};
pub use error::{SubscribeError, TuiError};
pub use model::{Connection, Mode, Model, ModelConfig, Tab};
pub use msg::{Cmd, Msg, Observed};
pub use source::Source;
pub use theme::Theme;
pub use update::update;
pub use view::view;

/// How long `watch` waits for an emulator to answer before watching passively.
const CONTROL_PROBE: Duration = Duration::from_secs(2);

/// Watches the NATS server at `url`: through the control API when a `triggers-lab up` answers
/// there, else as a passive, read-only observer of `triggers.v2.>`. For an open control API;
/// [`watch_with`] takes what a closed one needs.
///
/// # Errors
/// When no NATS server answers at `url`, or the terminal cannot be used.
pub async fn watch(url: &str) -> Result<(), TuiError> {
    watch_with(url, &ControlAccess::default()).await
}

/// As [`watch`], reaching the control API with `access` (the credentials and token `up` wrote
/// down).
///
/// # Errors
/// As [`watch`].
pub async fn watch_with(url: &str, access: &ControlAccess) -> Result<(), TuiError> {
    run(
        connect_with(url, access).await?,
        TuiOptions {
            source_label: Some(url.to_owned()),
            ..TuiOptions::default()
        },
    )
    .await
}

/// Connects to `url` and picks the source [`watch`] uses: the control API when an emulator
/// answers within 2 s, else the passive observer.
///
/// # Errors
/// When no NATS server answers at `url`.
pub async fn connect(url: &str) -> Result<Source, TuiError> {
    connect_with(url, &ControlAccess::default()).await
}

/// As [`connect`], reaching the control API with `access`. The passive observer, if it comes to
/// that, connects without credentials, as a service does. Both count what NATS drops for their
/// slow subscriptions.
///
/// # Errors
/// As [`connect`].
pub async fn connect_with(url: &str, access: &ControlAccess) -> Result<Source, TuiError> {
    let drops = DropCounter::new();
    let plain = || {
        triggers_emulator::drops::connect_options("triggers-lab watch", &drops)
            .connection_timeout(Duration::from_secs(5))
    };
    let connect_error = |source| TuiError::Connect {
        url: url.to_owned(),
        source,
    };
    let plain = || triggers_sdk::transport::with_url_credentials(plain(), url);
    let options = match &access.credentials {
        Some(c) => c.apply(plain()),
        None => plain(),
    };
    let client = options.connect(url).await.map_err(connect_error)?;
    let control = ControlClient::from_client(client.clone(), url)
        .with_token(access.token.clone())
        .with_drops(drops.clone());
    if let Ok(Ok(_)) = tokio::time::timeout(CONTROL_PROBE, control.state()).await {
        return Ok(Source::Control(control));
    }
    if access.credentials.is_none() {
        return Ok(Source::Passive(client, drops));
    }
    // The control account sees none of the services' traffic: watch it as a service would.
    let client = plain().connect(url).await.map_err(connect_error)?;
    Ok(Source::Passive(client, drops))
}

/// Runs the app on an emulator in this process (for `triggers-lab up --tui` and `run --tui`).
///
/// # Errors
/// When the terminal cannot be used.
pub async fn run_in_process(emulator: Emulator) -> Result<(), TuiError> {
    run(Source::InProcess(emulator), TuiOptions::default()).await
}
