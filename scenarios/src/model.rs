//! The scenario file, as written: what each key means is in `docs/scenarios.md`.
//!
//! Every struct refuses unknown keys; durations are text (`250ms`, `10s`, `1h30m`) or a number of
//! seconds; a key that takes a short form (`deploy: flow-lab`) also takes the full one
//! (`deploy: {flow: flow-lab, expect_error: unknown_action}`).

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use serde_saphyr::Spanned;
// The emulator's own settings, as a scenario's `emulator:` names them (`clock: real`,
// `hash_mismatch: record`): one type each for the emulator, scenario files and `up`'s flags.
pub use triggers_emulator::{ClockMode, HashMismatchPolicy};
use triggers_sdk::runtime::DEFAULT_RETRY;
use triggers_sdk::wire::Retry;

pub use crate::steps::{
    AdvanceStep, DEFAULT_FUZZ_RUNS, DEFAULT_LOAD_CONCURRENCY, DEFAULT_LOAD_RUNS, DeployStep,
    EventOrder, EventSpec, ExpectBroadcastStep, ExpectCallsStep, ExpectDlqStep, ExpectEventsStep,
    ExpectHeartbeatStep, ExpectHttpStep, ExpectRegistrationStep, ExpectServiceStep,
    ExpectViolationStep, FuzzStep, KillNatsNodeStep, LoadExpect, LoadStep, MAX_FUZZ_RUNS, NodeRef,
    PublishStep, RegisterStep, RestartNatsNodeStep, RestartNatsStep, SleepStep, StopNatsNodeStep,
    StopServiceStep, TriggerStep, WaitIdleStep, WaitNodeStep, WaitRunStep, WaitSettledStep,
};

/// A scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// The scenario's name (default: the file name without extension).
    #[serde(default)]
    pub name: Option<String>,
    /// What it checks, for people.
    #[serde(default)]
    pub description: Option<String>,
    /// The whole scenario's time limit, once its services are ready (default 60 s).
    #[serde(default)]
    pub timeout: Option<Dur>,
    /// The default time limit of each step that waits (default 10 s).
    #[serde(default)]
    pub step_timeout: Option<Dur>,
    /// Which conformance violations fail the scenario (default `errors`).
    #[serde(default)]
    pub conformance: Conformance,
    /// Emulator settings.
    #[serde(default)]
    pub emulator: EmulatorSpec,
    /// The nats-server: one (default), or `{cluster: 3}` for a JetStream cluster whose streams
    /// are replicated on every node, for the `*_nats_node` steps.
    #[serde(default)]
    pub nats: NatsSpec,
    /// HTTP endpoints (wiremock servers) that flows can call.
    #[serde(default)]
    pub http_stubs: Vec<Spanned<StubSpec>>,
    /// The services: scripted (run in-process) or external (a command).
    #[serde(default)]
    pub services: Vec<Spanned<ServiceSpec>>,
    /// The flows: `{file: path}` or a flow written inline.
    #[serde(default)]
    pub flows: Vec<Spanned<Value>>,
    /// What to do and what to expect, in order.
    pub steps: Vec<Spanned<Step>>,
}

/// Which conformance violations fail a scenario.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Conformance {
    /// Any violation, warning or error.
    Strict,
    /// Violations of severity error (the default).
    #[default]
    Errors,
    /// None.
    Off,
}

impl fmt::Display for Conformance {
    /// The name a scenario file uses: `strict`, `errors`, `off`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Conformance::Strict => "strict",
            Conformance::Errors => "errors",
            Conformance::Off => "off",
        })
    }
}

/// Emulator settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmulatorSpec {
    /// `virtual` (default) or `real`.
    #[serde(default)]
    pub clock: ClockMode,
    /// Jump the virtual clock to the next timer whenever every run is idle (default false).
    #[serde(default)]
    pub auto_advance: bool,
    /// `reject` (default) or `record` a registration whose `manifest_hash` is wrong.
    #[serde(default)]
    pub hash_mismatch: HashMismatchPolicy,
    /// Settled runs the emulator keeps; the oldest beyond are evicted (default: the emulator's,
    /// 10 000). A `load` of more runs than this that has failures wants it raised, so that the
    /// failed runs' DLQ entries can still be read at its end.
    #[serde(default)]
    pub max_runs: Option<NonZeroUsize>,
    /// Runs open at once; a trigger beyond it is refused (default: the emulator's, 100 000).
    #[serde(default)]
    pub max_open_runs: Option<NonZeroUsize>,
    /// Records kept; older ones drop off, counted (default: the emulator's, 100 000).
    #[serde(default)]
    pub max_records: Option<NonZeroUsize>,
}

/// `nats:` settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsSpec {
    /// Nodes of a JetStream cluster (1 to 9; 3 for failover); absent: one server.
    #[serde(default)]
    pub cluster: Option<usize>,
}

impl NatsSpec {
    /// How many servers: the cluster's nodes, else 1.
    pub fn nodes(&self) -> usize {
        self.cluster.unwrap_or(1)
    }
}

/// An HTTP stub: a wiremock server answering one method and path.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StubSpec {
    /// How steps and flows refer to it (`${stubs.<name>.url}`).
    pub name: String,
    /// The method it answers (default `POST`).
    #[serde(default = "post")]
    pub method: String,
    /// The path it answers (default `/`).
    #[serde(default = "slash")]
    pub path: String,
    /// The status it answers with (default 200).
    #[serde(default = "ok_status")]
    pub status: u16,
    /// A JSON body to answer with (default none).
    #[serde(default)]
    pub body: Option<Value>,
    /// How long it waits before answering (default none).
    #[serde(default)]
    pub delay: Option<Dur>,
}

fn post() -> String {
    "POST".into()
}
fn slash() -> String {
    "/".into()
}
fn ok_status() -> u16 {
    200
}

/// A service: scripted (no `command`: the runner runs it in-process on the SDK runtime) or
/// external (`command`: the runner starts it and waits until it has registered).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    /// The service name, as it registers.
    pub name: String,
    /// Scripted: its version (default `1.0.0`).
    #[serde(default)]
    pub version: Option<String>,
    /// Scripted: how many replicas to start (default 1).
    #[serde(default)]
    pub replicas: Option<u32>,
    /// Scripted: runtime capabilities, e.g. `durable_timer.v1`.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Scripted: node types it evaluates (default: condition, lookup, mapping).
    #[serde(default)]
    pub supports_nodes: Option<Vec<String>>,
    /// Scripted: its NATS sources (default one, `nats` on `<name>.inbound`).
    #[serde(default)]
    pub sources: Option<Vec<SourceSpec>>,
    /// Scripted: the inbound JetStream stream's name, as `TRIGGERS_NATS_SOURCE_STREAM` sets it
    /// (default `triggers-sources-<name>`).
    #[serde(default)]
    pub source_stream: Option<String>,
    /// Scripted: its actions.
    #[serde(default)]
    pub actions: Vec<Spanned<ActionSpec>>,
    /// External: the command and its arguments.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// External: extra environment (`TRIGGERS_NATS_URL` is always set).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// External: the working directory, relative to the scenario file (default its folder).
    #[serde(default)]
    pub cwd: Option<String>,
    /// External: when it counts as ready: `registered` (default) or `started`.
    #[serde(default)]
    pub ready: Option<Readiness>,
    /// External: how long it may take to be ready (default 5 minutes: a `cargo run` may build).
    #[serde(default)]
    pub ready_timeout: Option<Dur>,
}

impl ServiceSpec {
    /// Whether the runner starts it as a command.
    #[must_use]
    pub fn is_external(&self) -> bool {
        self.command.is_some()
    }
}

/// When an external service is ready.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Readiness {
    /// The emulator has accepted its registration.
    #[default]
    Registered,
    /// As soon as the process is started.
    Started,
}

/// A NATS source of a scripted service.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    /// The source's name.
    pub name: String,
    /// The subject.
    pub subject: String,
}

/// An action of a scripted service.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionSpec {
    /// The action name.
    pub name: String,
    /// Per-attempt timeout (default 5 s).
    #[serde(default)]
    pub timeout: Option<Dur>,
    /// The retry policy; unset fields take the SDK's defaults.
    #[serde(default)]
    pub retry: Option<RetrySpec>,
    /// The input schema (default `{}`: anything).
    #[serde(default)]
    pub input: Option<Value>,
    /// The result schema (default: inferred from `behavior.return`, else `{}`).
    #[serde(default)]
    pub result: Option<Value>,
    /// `auto` (default: derived from the result schema) or `off`.
    #[serde(default)]
    pub result_event: ResultEventSpec,
    /// What the handler does (default: echo its input).
    #[serde(default)]
    pub behavior: Behavior,
}

/// The per-attempt timeout of a scripted action that does not set one.
pub const DEFAULT_ACTION_TIMEOUT: Duration = Duration::from_secs(5);

impl ActionSpec {
    /// The per-attempt timeout: as written, else [`DEFAULT_ACTION_TIMEOUT`].
    #[must_use]
    pub fn timeout(&self) -> Duration {
        self.timeout.map_or(DEFAULT_ACTION_TIMEOUT, |d| d.0)
    }

    /// The retry policy: as written, each unset field the SDK's default.
    #[must_use]
    pub fn retry(&self) -> Retry {
        let r = self.retry.clone().unwrap_or_default();
        Retry {
            max_attempts: r.max_attempts.unwrap_or(DEFAULT_RETRY.max_attempts),
            initial_backoff_ms: r
                .initial_backoff_ms
                .unwrap_or(DEFAULT_RETRY.initial_backoff_ms),
            backoff_factor: r.backoff_factor.unwrap_or(DEFAULT_RETRY.backoff_factor),
            max_backoff_ms: r.max_backoff_ms.unwrap_or(DEFAULT_RETRY.max_backoff_ms),
        }
    }
}

/// The retry policy of a scripted action.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySpec {
    /// Attempts in all.
    #[serde(default)]
    pub max_attempts: Option<i64>,
    /// The first backoff.
    #[serde(default)]
    pub initial_backoff_ms: Option<i64>,
    /// Each backoff is the previous times this.
    #[serde(default)]
    pub backoff_factor: Option<f64>,
    /// The longest backoff.
    #[serde(default)]
    pub max_backoff_ms: Option<i64>,
}

/// Whether a scripted action declares a `result_event`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultEventSpec {
    /// Derived from the result schema, as the SDK does.
    #[default]
    Auto,
    /// None.
    Off,
}

/// What a scripted action does on each attempt: first `sleep`, then `fail_first` and `fail_if`,
/// then one outcome (`return`, `echo`, `map`, `fail`, `panic`; default `echo`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Behavior {
    /// Sleep this long first, on every attempt.
    #[serde(default)]
    pub sleep: Option<Dur>,
    /// Fail attempts 1..=N (then go on with the rest).
    #[serde(default)]
    pub fail_first: Option<u32>,
    /// Fail when the input satisfies this condition (`{path, op, value}`, as a condition node).
    #[serde(default)]
    pub fail_if: Option<Map<String, Value>>,
    /// The message of `fail_first` and `fail_if` failures; `{attempt}` and `{max_attempts}`
    /// are replaced.
    #[serde(default)]
    pub error: Option<String>,
    /// Return this value.
    #[serde(default, rename = "return", deserialize_with = "present")]
    pub returns: Option<Value>,
    /// Return the input.
    #[serde(default)]
    pub echo: Option<bool>,
    /// Return a mapping of the input: `{field: $.path}`, as a mapping node's `fields`.
    #[serde(default)]
    pub map: Option<Map<String, Value>>,
    /// Fail every attempt with this message.
    #[serde(default)]
    pub fail: Option<String>,
    /// Panic with this message.
    #[serde(default)]
    pub panic: Option<String>,
    /// Failures are permanent: no retry (default false: retryable).
    #[serde(default)]
    pub permanent: bool,
}

/// `return: null` is a value, not an absent key.
pub(crate) fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// One step. What each kind checks when the file is read, what it does when it runs and how
/// it is labelled live together in the kind's own module (`src/steps/`); adding a kind is a
/// module there and a variant here.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Release a flow (or expect the release to be refused).
    Deploy(Short<DeployStep>),
    /// Start a run.
    Trigger(TriggerStep),
    /// Move the virtual clock forward; due timers fire.
    Advance(AdvanceStep),
    /// Wait this long (wall clock). Prefer a `wait_*` or `expect_*` step.
    Sleep(SleepStep),
    /// Wait until a node of a run has finished, with a status.
    WaitNode(WaitNodeStep),
    /// Wait until a run has settled, with a status.
    WaitSettled(Short<WaitSettledStep>),
    /// Wait until nothing of a run is pending (settled, or waiting on a timer).
    WaitIdle(Short<WaitIdleStep>),
    /// Expect completion events of a run.
    ExpectEvents(ExpectEventsStep),
    /// Expect DLQ entries.
    ExpectDlq(ExpectDlqStep),
    /// Expect a registration (accepted or refused).
    ExpectRegistration(ExpectRegistrationStep),
    /// Send a registration by hand.
    Register(RegisterStep),
    /// Expect a heartbeat.
    ExpectHeartbeat(ExpectHeartbeatStep),
    /// Expect what the emulator knows of a service (replicas).
    ExpectService(ExpectServiceStep),
    /// Expect every replica of the scripted services of a flow to hold it.
    ExpectBroadcast(Short<ExpectBroadcastStep>),
    /// Expect calls of a scripted action.
    ExpectCalls(ExpectCallsStep),
    /// Expect requests on an HTTP stub.
    ExpectHttp(ExpectHttpStep),
    /// Expect a conformance violation.
    ExpectViolation(Short<ExpectViolationStep>),
    /// Publish raw bytes on a subject.
    Publish(PublishStep),
    /// Restart the nats-server (same URL, same store).
    RestartNats(RestartNatsStep),
    /// Stop a node of a `nats: {cluster: ..}` gracefully; it hands over what it leads.
    StopNatsNode(StopNatsNodeStep),
    /// Kill a node of a cluster (SIGKILL): a crash, no hand-over.
    KillNatsNode(KillNatsNodeStep),
    /// Start a node of a cluster again, with its store; waits until it is ready.
    RestartNatsNode(RestartNatsNodeStep),
    /// Stop a service gracefully.
    StopService(StopServiceStep),
    /// Fuzz an action with inputs generated from its registered `input_schema`.
    Fuzz(FuzzStep),
    /// Drive a deployed flow with many runs and check how it held up.
    Load(LoadStep),
}

/// A key that takes nothing: `restart_nats: {}` (or an empty value).
#[derive(Debug, Clone, Default)]
pub struct Nothing;

impl<'de> Deserialize<'de> for Nothing {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Nothing;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("nothing: write `{}`")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Nothing, E> {
                Ok(Nothing)
            }
            fn visit_none<E: de::Error>(self) -> Result<Nothing, E> {
                Ok(Nothing)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Nothing, A::Error> {
                match map.next_key::<String>()? {
                    None => Ok(Nothing),
                    Some(k) => Err(de::Error::custom(format!(
                        "unknown key `{k}`: this step takes no settings, write `{{}}`"
                    ))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// A value written either in short form (a string) or in full (a map).
#[derive(Debug, Clone)]
pub struct Short<T>(pub T);

impl<'de, T> Deserialize<'de> for Short<T>
where
    T: Deserialize<'de> + From<String>,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T> Visitor<'de> for V<T>
        where
            T: Deserialize<'de> + From<String>,
        {
            type Value = Short<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name, or a map of settings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Short<T>, E> {
                Ok(Short(T::from(v.to_owned())))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Short<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Short)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// One string or a list of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneOrMany(pub Vec<String>);

impl<'de> Deserialize<'de> for OneOrMany {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OneOrMany;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<OneOrMany, E> {
                Ok(OneOrMany(vec![v.to_owned()]))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<OneOrMany, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    out.push(s);
                }
                Ok(OneOrMany(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration: `250ms`, `10s`, `5m`, `1h30m`, `1d` (humantime's forms), or a number of seconds;
/// never negative, at most [`Dur::MAX`] (100 years). The scenario files and the command line
/// (`--timeout`, `triggers-lab advance`) read durations with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl Dur {
    /// The longest duration accepted: 100 years (36 500 days). Longer is surely a typo, and would
    /// overflow the clocks and deadlines it is added to.
    pub const MAX: Duration = triggers_sdk::runtime::MAX_DURATION;

    /// Parses the text form.
    ///
    /// # Errors
    /// When it is not a duration, or is negative, or longer than [`Dur::MAX`]; the message says
    /// which, and how to write one.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if let Ok(secs) = t.parse::<f64>() {
            return Self::seconds(secs, text);
        }
        match humantime::parse_duration(t) {
            Ok(d) if d <= Self::MAX => Ok(Dur(d)),
            Ok(_) | Err(humantime::DurationError::NumberOverflow) => Err(too_long(text)),
            Err(_) => Err(format!(
                "{text:?} is not a duration: write e.g. 250ms, 10s, 5m, 1h30m or 1d"
            )),
        }
    }

    /// A number of seconds, in range. `shown` is how the input was written, for the message.
    fn seconds(secs: f64, shown: &str) -> Result<Self, String> {
        if secs.is_nan() {
            Err(format!(
                "{shown:?} is not a duration: write e.g. 250ms, 10s, 5m, 1h30m or 1d"
            ))
        } else if secs < 0.0 {
            Err(negative(shown))
        } else if secs > Self::MAX.as_secs_f64() {
            Err(too_long(shown))
        } else {
            Duration::try_from_secs_f64(secs)
                .map(Dur)
                .map_err(|_| too_long(shown))
        }
    }
}

fn negative(shown: &str) -> String {
    format!("{shown:?} is negative: a duration is 0 or more")
}

fn too_long(shown: &str) -> String {
    format!("{shown:?} is too long: a duration is at most 100 years (36500d)")
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as 250ms, 10s or 1h30m")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                Dur::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                if v > Dur::MAX.as_secs() {
                    return Err(E::custom(too_long(&v.to_string())));
                }
                Ok(Dur(Duration::from_secs(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(negative(&v.to_string()))),
                }
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dur, E> {
                Dur::seconds(v, &format!("{v:?}")).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_range_parse() {
        for (text, want) in [
            ("250ms", Duration::from_millis(250)),
            ("1h30m", Duration::from_secs(5400)),
            ("1.5", Duration::from_millis(1500)),
            ("0", Duration::ZERO),
            ("-0", Duration::ZERO),
            ("36500d", Dur::MAX),
            ("3153600000", Dur::MAX),
        ] {
            assert_eq!(Dur::parse(text), Ok(Dur(want)), "{text}");
        }
    }

    #[test]
    fn out_of_range_durations_are_refused_saying_why() {
        for (text, says) in [
            (
                "1e300",
                "\"1e300\" is too long: a duration is at most 100 years",
            ),
            ("36501d", "too long"),
            ("3153600001", "too long"),
            ("99999999999d", "too long"),
            ("18446744073709551616s", "too long"),
            ("inf", "too long"),
            ("-5", "\"-5\" is negative"),
            ("-0.001", "negative"),
            ("-inf", "negative"),
            ("NaN", "not a duration"),
            ("soon", "not a duration: write e.g. 250ms"),
            ("", "not a duration"),
        ] {
            let e = Dur::parse(text).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    proptest::proptest! {
        /// Any text: a duration within 100 years, or an error; never a panic.
        #[test]
        fn any_text_parses_or_is_refused(text in "\\PC{0,40}") {
            if let Ok(d) = Dur::parse(&text) {
                proptest::prop_assert!(d.0 <= Dur::MAX);
            }
        }

        /// Numbers of seconds, of any size and sign, and the unit forms humantime reads.
        #[test]
        fn any_number_parses_or_is_refused(
            secs in proptest::num::f64::ANY,
            n in proptest::num::u64::ANY,
            unit in "(ns|us|ms|s|m|h|d|w|M|y|)",
        ) {
            for text in [format!("{secs}"), format!("{secs:e}"), format!("{n}{unit}")] {
                if let Ok(d) = Dur::parse(&text) {
                    proptest::prop_assert!(d.0 <= Dur::MAX, "{}", text);
                }
            }
        }
    }
}
