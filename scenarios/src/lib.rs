//! YAML scenarios for the triggers platform: end-to-end flows a team keeps beside its service and
//! runs in CI, against the orchestrator emulator on a real nats-server.
//!
//! - [`model`]: the file format, key by key (the guide is `docs/scenarios.md`);
//! - [`load_file`], [`load_str`], [`load_all`]: reading and checking files, every error with
//!   file, line and column;
//! - [`run_scenario`], [`run_suite`]: running them, each on a nats-server and an emulator of its
//!   own, scripted services in-process and external ones as commands;
//! - [`report`]: what was found, as text, JSON and JUnit XML.
//!
//! ```no_run
//! use triggers_scenarios::{RunOptions, load_all, run_suite};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let scenarios = load_all(&["scenarios/flow-lab".into()]).map_err(|errors| errors[0].clone())?;
//! let report = run_suite(scenarios, 2, &RunOptions::default()).await;
//! for s in &report.scenarios {
//!     println!("{}", s.summary_line());
//!     print!("{}", s.failure_text());
//! }
//! std::fs::write("junit.xml", report.to_junit()?)?;
//! # Ok(())
//! # }
//! ```

pub mod conform;
pub mod coverage;
mod describe;
mod discover;
mod error;
mod external;
mod flowfile;
pub mod fuzz;
mod indent;
mod input;
mod interrupt;
mod load;
pub mod loadgen;
pub mod merge;
pub mod model;
mod recover;
pub mod report;
mod runner;
mod scripted;
pub mod shard;
mod steps;
mod suite;
mod vars;

pub use describe::label;
pub use discover::{SCENARIO_SUFFIXES, canonical, discover, is_scenario_file};
pub use error::{
    LoadError, LoadErrors, MergeError, ReportError, ReportReadError, SHOWN_ERRORS, utf8_text,
    write_capped,
};
pub use flowfile::{did_you_mean, read_flow, suggest_in_message};
pub use input::{
    MAX_INPUT_BYTES, check_output, create_output, read_input, read_own_file, read_stdin,
    read_text_file, write_output,
};
pub use interrupt::Interrupt;
pub use load::{
    DEFAULT_STEP_TIMEOUT, DEFAULT_TIMEOUT, FlowDef, Scenario, StepAt, load_file, load_str,
    parse_document,
};
pub use report::{
    FailureKind, Outcome, ScenarioReport, ShardInfo, StepReport, SuiteReport, Totals,
};
pub use runner::{Event, EventFn, RunOptions, WatchFn, run_scenario};
pub use scripted::{Call, ScriptedServices};
pub use suite::{Filter, load_all, run_suite};

/// The user guide, `docs/scenarios.md`, so that its Rust examples are compiled.
#[doc = include_str!("../../docs/scenarios.md")]
#[cfg(doctest)]
pub struct GuideDoctests;
