//! The triggers orchestrator emulator: it runs inside a test process (or as `triggers-lab up`) in
//! place of the real orchestrator, against a real nats-server.
//!
//! - [`NatsServer`] (from the [`natsbox`] crate): a nats-server with JetStream from Docker, a local
//!   binary or an external URL, behind one handle that stops it on drop.
//! - [`Emulator`]: registration, heartbeats, releases and broadcasts, flow runs, Durable Timers on
//!   a virtual clock, a recorder with waiters, and a conformance checker over everything an SDK
//!   sends.
//! - [`Harness`]: both together, for a `#[tokio::test]`.
//! - [`control`]: the control API other processes (the CLI, the terminal UI) use.
//!
//! ```no_run
//! use serde_json::json;
//! use triggers_emulator::Harness;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let lab = Harness::start().await?;
//! // ... start the service under test against lab.url(), then:
//! lab.emulator().wait_for_registration("shop").await?;
//! let flow = serde_json::from_value(json!({"id": "order", "nodes": [
//!     {"id": "in", "type": "service-in", "service": "shop"},
//!     {"id": "pay", "type": "action", "service": "shop", "action": "charge"}],
//!   "edges": [{"id": "e1", "from": "in", "to": "pay"}]}))?;
//! lab.emulator().deploy(flow).await?;
//! let run = lab.emulator().trigger("order", &json!({"amount": 12})).await?;
//! let step = lab.emulator().wait_for_node(&run, "pay").await?;
//! assert_eq!(step.status, "succeeded");
//! lab.emulator().assert_conformant();
//! # Ok(())
//! # }
//! ```

mod cancel;
mod clock;
mod config;
pub mod conformance;
mod consumers;
pub mod control;
mod deploy;
pub mod drops;
mod emulator;
mod error;
mod harness;
mod kept_manifest;
mod observe;
mod order;
mod read;
pub mod recorder;
pub mod recording;
mod registration;
pub mod release;
mod reply_fit;
mod resend;
mod run;
mod shared;
mod state;
mod streams;
mod timeline;
mod timers;
mod topics;
mod trigger;
mod wait;

pub use clock::ClockMode;
pub use emulator::{
    DLQ_STREAM, Deployment, EVENTS_STREAM, Emulator, EmulatorConfig, FiredTimer, FoundAtStart,
    HashMismatchPolicy, RunId, TriggerOptions, WireTap, describe_violations,
};
pub use error::{
    BoxError, ControlError, EmulatorError, HarnessError, NatsError, RecordingError, WaitError,
};
pub use harness::{Harness, HarnessBuilder, ProvisionedNats};
pub use kept_manifest::KeptManifest;
pub use natsbox::{Backend, ChosenBackend, NatsConfig, NatsServer, SkippedBackend};
pub use release::{ReleaseCode, ReleaseProblem};
pub use resend::Resent;
pub use wait::{DlqFilter, DlqRecord};

/// The user guide, `docs/emulator.md`, so that its Rust examples are compiled (and those that need
/// no server run) by `cargo test --doc`.
#[doc = include_str!("../../docs/emulator.md")]
#[cfg(doctest)]
pub struct GuideDoctests;

#[cfg(test)]
mod guide_tests {
    const GUIDE: &str = include_str!("../../docs/emulator.md");

    #[test]
    fn the_guide_lists_every_conformance_rule_with_its_severity() {
        for (rule, severity, _) in crate::conformance::RULES {
            let row = format!("| `{rule}` | {severity} |");
            assert!(GUIDE.contains(&row), "docs/emulator.md lacks the row {row}");
        }
    }

    #[test]
    fn the_guide_lists_every_release_code() {
        for code in crate::ReleaseCode::ALL {
            let row = format!("| `{code}` |");
            assert!(GUIDE.contains(&row), "docs/emulator.md lacks the row {row}");
        }
    }

    /// The server `up` starts gives the emulator this inbox prefix; no service source may
    /// overlap it.
    #[test]
    fn the_reserved_sources_name_the_emulators_inbox() {
        use triggers_sdk::wire::subject;
        assert_eq!(subject::EMULATOR_INBOX_PREFIX, natsbox::ORCHESTRATOR_INBOX);
        let inbox = format!("{}.>", natsbox::ORCHESTRATOR_INBOX);
        assert!(subject::RESERVED_SOURCES.iter().any(|(p, _)| *p == inbox));
    }

    /// The server `up` starts denies the services' user the removal of these streams.
    #[test]
    fn the_protected_streams_are_the_emulators() {
        assert_eq!(
            natsbox::PROTECTED_STREAMS,
            [crate::DLQ_STREAM, crate::EVENTS_STREAM]
        );
    }
}
