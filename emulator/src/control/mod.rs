//! The control API: how other processes (the `triggers-lab` CLI, the terminal UI) drive a running
//! emulator over NATS. Ours, not the platform's: it lives under `triggerslab.v1.`, outside the
//! locked `triggers.v2.` namespace.
//!
//! Requests are JSON on `triggerslab.v1.control.<op>`; every reply is
//! `{"ok": true, "result": ...}` or `{"ok": false, "error": "..."}`. While someone follows (a
//! `follow` request, renewed before its lease runs out), every record is also published, as JSON,
//! on `triggerslab.v1.records`; nobody following, nothing is serialised nor sent.
//!
//! Who may use it: by default anyone on the server (tests in one process). `triggers-lab up`
//! closes it two ways ([`ControlAccess`]): on a server it starts, the API lives in a NATS account
//! of its own that services cannot reach ([`crate::NatsConfig::private_control`]); and every
//! request must carry a per-instance [`ControlToken`] in the [`TOKEN_HEADER`] header (checked in
//! constant time), with the records on [`records_subject`]`(token)`. On an external server only
//! the token applies: anyone who can subscribe to `triggerslab.>` there sees the token go by.
//!
//! The messages are typed in [`protocol`] ([`Request`] and a reply type per op), shared by the
//! server and [`ControlClient`]; [`schema()`] generates their JSON Schema,
//! `docs/control-schema.json`, for clients in other languages. Where each part lives: `protocol`
//! (what is on the wire), `server` (what each op does), `client`, `access` (the token), `summary`
//! (the state summary and run pages the emulator builds).
//!
//! | op | request | result |
//! |---|---|---|
//! | `state` | `{"runs_limit"?}` | [`StateSummary`], with the newest `runs_limit` runs ([`STATE_RUNS`] unless asked; fewer when they would not fit in one message) |
//! | `deploy` | `{"flow": Flow}` | the released flow and broadcast subject, or `{"problems": [...]}` in the error |
//! | `check_release` | `{"flow": Flow}` | the resolved flow |
//! | `trigger` | `{"flow_id", "payload", "entry"?, "payload_json"?}` | `{"run_id"}`; `payload_json`, when given, is the payload's exact JSON text, sent as is (a 64-bit integer stays exact) instead of `payload` |
//! | `advance` | `{"duration_ms"}` | the timers fired |
//! | `cancel` | `{"run_id"}` | [`Cancelled`](crate::recorder::Cancelled): what the run still owed, dropped; it settles `cancelled` |
//! | `resend_dlq` | `{"msg_id"}` | [`Resent`](crate::Resent) |
//! | `runs` | `{}` | every run, whole (timelines included): fails once they outgrow one message; page with `run_page` |
//! | `run_page` | `{"after"?, "limit"?}` | [`RunPage`]: the runs' summaries in start order after the place `after` (from the last page's `next`), at most `limit` ([`RUN_PAGE`]) |
//! | `run` | `{"run_id", "timeline_from"?, "timeline_limit"?}` | the run; with either key, only the timeline entries from `timeline_from` that fit (at most `timeline_limit`), and `timeline_from`, `timeline_total` |
//! | `flow` | `{"flow_id"}` | the deployed flow (as released, its latest version) |
//! | `flow_list` | `{}` | [`FlowSummary`] of every deployed flow |
//! | `records` | `{"since": seq, "limit": n}` | records after `since` |
//! | `violations` | `{}` | every conformance violation |
//! | `services` | `{}` | every registered service by name, with its whole manifest (schemas included) |
//! | `follow` | `{"lease_ms"?}` | `{"subject", "lease_ms"}`: records are published on `subject` for the lease |

mod access;
mod client;
pub mod protocol;
mod schema;
mod server;
mod summary;

use std::time::Duration;

pub use access::{ControlAccess, ControlToken, records_subject};
pub use client::ControlClient;
pub use protocol::{
    FlowSummary, Request, RunPage, RunSummary, ServiceSummary, StateSummary, ViolationReport,
};
pub use schema::{BLESS, FlowSchema, GoTimeSchema, pascal, schema};
pub(crate) use server::serve;

/// The prefix of every control subject.
pub const PREFIX: &str = "triggerslab.v1.control";
/// Where records are published as JSON while someone follows (followed by `.<token>` when the
/// emulator has one).
pub const RECORDS_SUBJECT: &str = "triggerslab.v1.records";
/// How long a `follow` request keeps the records published unless renewed, when it names no
/// `lease_ms`; [`ControlClient::follow`] renews it every third of this.
pub const FOLLOW_LEASE: Duration = Duration::from_secs(10);
/// The longest lease a `follow` request gets (a `nats sub` by hand can ask for this much).
pub const MAX_FOLLOW_LEASE: Duration = Duration::from_secs(3600);
/// The header a control request carries its [`ControlToken`] in.
pub const TOKEN_HEADER: &str = "Triggers-Lab-Token";

/// How many of the newest runs a `state` reply holds when the request names no `runs_limit`:
/// enough for a screen or a glance, small enough for one NATS message. All of them are read a
/// page at a time with `run_page` ([`ControlClient::run_summaries`]).
pub const STATE_RUNS: usize = 1000;
/// The most run summaries a `run_page` reply holds (fewer when they would not fit in one message).
pub const RUN_PAGE: usize = 1000;
