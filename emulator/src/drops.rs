//! Slow consumers: messages NATS drops because a subscription of the emulator's connection fell
//! behind. A verdict reached on partial data is not a verdict, so every drop is counted, logged,
//! and shown: in [`Emulator::dropped_messages`], in the control API's `state`
//! (`dropped_messages`), in the terminal UI, and as a failure of the scenario it happened in.
//!
//! async-nats reports a drop only to the connection's event callback, and the emulator does not
//! make its connection ([`Emulator::start`] takes one), so the counter travels in
//! [`EmulatorConfig::slow_consumers`](crate::EmulatorConfig::slow_consumers) and the connection
//! must be made with [`connect_options`] over the same counter. The [`Harness`](crate::Harness),
//! `triggers-lab up` and the scenario runner do; with a connection of your own:
//!
//! ```no_run
//! use triggers_emulator::{Emulator, EmulatorConfig, drops};
//! use triggers_sdk::transport::DropCounter;
//!
//! # async fn example(url: &str) -> Result<(), Box<dyn std::error::Error>> {
//! let counter = DropCounter::new();
//! let client = drops::connect_options("my emulator", &counter).connect(url).await?;
//! let emulator = Emulator::start(
//!     client,
//!     EmulatorConfig {
//!         slow_consumers: counter,
//!         ..Default::default()
//!     },
//! )
//! .await?;
//! assert_eq!(emulator.dropped_messages(), 0);
//! # Ok(())
//! # }
//! ```

use triggers_sdk::transport::DropCounter;

use crate::emulator::Emulator;

/// Connect options named `name` whose event callback counts every slow-consumer drop in `counter`
/// (and logs it), and logs the connection's other events. Add what you need
/// (`.subscription_capacity(..)`, `.retry_on_initial_connect()`) and connect.
#[must_use]
pub fn connect_options(name: &str, counter: &DropCounter) -> async_nats::ConnectOptions {
    let counter = counter.clone();
    let connection = name.to_owned();
    async_nats::ConnectOptions::new()
        .name(name)
        .event_callback(move |event| {
            let counter = counter.clone();
            let connection = connection.clone();
            async move {
                if counter.observe(&event, &connection) {
                    return;
                }
                match event {
                    async_nats::Event::Disconnected => {
                        tracing::warn!(connection, "NATS connection lost; reconnecting");
                    }
                    async_nats::Event::Connected => {
                        tracing::info!(connection, "NATS connection (re)established");
                    }
                    other => tracing::debug!(connection, "NATS event: {other}"),
                }
            }
        })
}

impl Emulator {
    /// Messages NATS dropped because a subscription of the emulator's connection fell behind
    /// (at least this many; see [the module](crate::drops)). Above zero, the emulator missed
    /// traffic: what it recorded, and any verdict on it, is incomplete. Always 0 when the
    /// connection was not made with [`connect_options`] over
    /// [`EmulatorConfig::slow_consumers`](crate::EmulatorConfig::slow_consumers).
    #[must_use]
    pub fn dropped_messages(&self) -> u64 {
        self.config().slow_consumers.count()
    }

    /// How many times the emulator's connection to NATS was lost (and made again): a server
    /// restart, or the server cutting off a connection that fell more than its `max_pending`
    /// behind (a flood). Messages on plain subjects published meanwhile were not seen; the
    /// streams it follows (DLQ entries, completion events) lose nothing. Counted as
    /// [`Emulator::dropped_messages`] is, on a connection made with [`connect_options`].
    #[must_use]
    pub fn connection_losses(&self) -> u64 {
        self.config().slow_consumers.disconnects()
    }
}
