//! Runtime configuration: from code, with the environment as the documented fallback.

use std::time::Duration;

use crate::error::ConfigError;

/// Every environment variable the runtime reads, for docs and error messages.
pub const ENV_VARS: [(&str, &str); 10] = [
    (
        "TRIGGERS_NATS_URL",
        "the NATS server (default nats://127.0.0.1:4222)",
    ),
    (
        "TRIGGERS_NATS_SOURCE_STREAM",
        "the inbound JetStream stream's name (default triggers-sources-<service>)",
    ),
    (
        "TRIGGERS_HEARTBEAT_INTERVAL_MS",
        "the heartbeat period (default 5000)",
    ),
    (
        "TRIGGERS_REGISTER_TIMEOUT_MS",
        "how long registration waits for the orchestrator (default 10000)",
    ),
    (
        "TRIGGERS_MAX_CONCURRENCY",
        "messages processed at once (default 64)",
    ),
    (
        "TRIGGERS_SHUTDOWN_GRACE_MS",
        "how long a graceful shutdown waits for in-flight work (default 30000)",
    ),
    (
        "TRIGGERS_FLOW_WAIT_MS",
        "how long a message for an unknown flow waits for its broadcast (default 2000)",
    ),
    (
        "TRIGGERS_HTTP_TIMEOUT_MS",
        "the timeout of HTTP outputs (default 10000)",
    ),
    (
        "TRIGGERS_MAX_DELIVER",
        "deliveries of one message before it is dead-lettered as delivery_exhausted (default 5)",
    ),
    (
        "TRIGGERS_MAX_FLOWS",
        "flows held at once; more are refused and counted (default 10000)",
    ),
];

/// How the runtime connects and behaves. Fields left `None` fall back to the environment, then
/// to the defaults in [`ENV_VARS`].
#[derive(Debug, Clone, Default)]
pub struct RuntimeConfig {
    /// The NATS server URL.
    pub nats_url: Option<String>,
    /// The inbound stream's name, when it is not `triggers-sources-<service>`.
    pub source_stream: Option<String>,
    /// The heartbeat period.
    pub heartbeat_interval: Option<Duration>,
    /// How long registration waits for a reply.
    pub register_timeout: Option<Duration>,
    /// Messages processed at once.
    pub max_concurrency: Option<usize>,
    /// How long a graceful shutdown waits for in-flight work.
    pub shutdown_grace: Option<Duration>,
    /// How long a message for a flow the service does not hold yet waits for the broadcast.
    pub flow_wait: Option<Duration>,
    /// The timeout of HTTP outputs.
    pub http_timeout: Option<Duration>,
    /// How many times JetStream delivers one message (the consumer's `max_deliver`): a message
    /// whose outcome cannot be reported is given back for a redelivery, and on the last one
    /// dead-lettered as `delivery_exhausted`. At least 1.
    pub max_deliver: Option<u32>,
    /// Flows held at once; a flow beyond it is not installed (counted in
    /// [`RuntimeStats::flows_refused`](crate::runtime::RuntimeStats)).
    pub max_flows: Option<usize>,
}

/// The configuration with every value decided.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) nats_url: String,
    pub(crate) source_stream: Option<String>,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) register_timeout: Duration,
    pub(crate) max_concurrency: usize,
    pub(crate) shutdown_grace: Duration,
    pub(crate) flow_wait: Duration,
    pub(crate) http_timeout: Duration,
    pub(crate) max_deliver: u32,
    pub(crate) max_flows: usize,
    /// Idempotency keys of handled messages remembered (fixed).
    pub(crate) max_handled_keys: usize,
    /// Action outcomes kept for redeliveries (fixed).
    pub(crate) max_kept_outcomes: usize,
}

fn env(name: &'static str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn env_ms(name: &'static str) -> Result<Option<Duration>, ConfigError> {
    env(name)
        .map(|v| {
            v.parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| ConfigError {
                    setting: name,
                    value: v,
                    expected: "a whole number of milliseconds",
                })
        })
        .transpose()
}

impl RuntimeConfig {
    /// Decides every value: this config, then the environment, then the default.
    ///
    /// # Errors
    /// When an environment variable holds something that is not understood.
    pub(crate) fn resolve(&self) -> Result<Resolved, ConfigError> {
        let concurrency = match self.max_concurrency {
            Some(n) => n,
            None => match env("TRIGGERS_MAX_CONCURRENCY") {
                Some(v) => v.parse().map_err(|_| ConfigError {
                    setting: "TRIGGERS_MAX_CONCURRENCY",
                    value: v,
                    expected: "a positive whole number",
                })?,
                None => 64,
            },
        };
        Ok(Resolved {
            nats_url: self
                .nats_url
                .clone()
                .or_else(|| env("TRIGGERS_NATS_URL"))
                .unwrap_or_else(|| "nats://127.0.0.1:4222".into()),
            source_stream: self
                .source_stream
                .clone()
                .or_else(|| env(crate::wire::subject::SOURCE_STREAM_ENV)),
            heartbeat_interval: pick(
                self.heartbeat_interval,
                "TRIGGERS_HEARTBEAT_INTERVAL_MS",
                5_000,
            )?,
            register_timeout: pick(
                self.register_timeout,
                "TRIGGERS_REGISTER_TIMEOUT_MS",
                10_000,
            )?,
            max_concurrency: concurrency.max(1),
            shutdown_grace: pick(self.shutdown_grace, "TRIGGERS_SHUTDOWN_GRACE_MS", 30_000)?,
            flow_wait: pick(self.flow_wait, "TRIGGERS_FLOW_WAIT_MS", 2_000)?,
            http_timeout: pick(self.http_timeout, "TRIGGERS_HTTP_TIMEOUT_MS", 10_000)?,
            max_deliver: match self.max_deliver {
                Some(n) => n,
                None => count_env("TRIGGERS_MAX_DELIVER", "a whole number from 1")?.unwrap_or(5),
            }
            .max(1),
            max_flows: match self.max_flows {
                Some(n) => n,
                None => count_env("TRIGGERS_MAX_FLOWS", "a whole number from 1")?.unwrap_or(10_000),
            }
            .max(1),
            max_handled_keys: 100_000,
            max_kept_outcomes: 10_000,
        })
    }
}

fn count_env<T: std::str::FromStr>(
    name: &'static str,
    expected: &'static str,
) -> Result<Option<T>, ConfigError> {
    env(name)
        .map(|v| {
            v.parse::<T>().map_err(|_| ConfigError {
                setting: name,
                value: v,
                expected,
            })
        })
        .transpose()
}

fn pick(
    set: Option<Duration>,
    var: &'static str,
    default_ms: u64,
) -> Result<Duration, ConfigError> {
    match set {
        Some(d) => Ok(d),
        None => Ok(env_ms(var)?.unwrap_or(Duration::from_millis(default_ms))),
    }
}
