//! Runtime configuration: from code, with the environment as the documented fallback.

use std::time::Duration;

use crate::error::ConfigError;
use crate::runtime::limits::{
    MAX_CONCURRENCY, MAX_DURATION, MAX_DURATION_MS, MAX_SUBSCRIPTION_CAPACITY,
};
use crate::transport::DropCounter;

/// Every environment variable the runtime reads, for docs and error messages.
pub const ENV_VARS: [(&str, &str); 11] = [
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
        "the heartbeat period (default 5000; 1 to 3153600000000)",
    ),
    (
        "TRIGGERS_REGISTER_TIMEOUT_MS",
        "how long registration waits for the orchestrator (default 10000; 1 to 3153600000000)",
    ),
    (
        "TRIGGERS_MAX_CONCURRENCY",
        "messages processed at once (default 64; 1 to 1048576)",
    ),
    (
        "TRIGGERS_SHUTDOWN_GRACE_MS",
        "how long a graceful shutdown waits for in-flight work (default 30000; 0 to 3153600000000)",
    ),
    (
        "TRIGGERS_FLOW_WAIT_MS",
        "how long a message for an unknown flow waits for its broadcast (default 2000; 0 to 3153600000000)",
    ),
    (
        "TRIGGERS_HTTP_TIMEOUT_MS",
        "the timeout of HTTP outputs (default 10000; 1 to 3153600000000)",
    ),
    (
        "TRIGGERS_NATS_SUBSCRIPTION_CAPACITY",
        "messages a subscription holds before NATS drops (default 65536; 1 to 16777216)",
    ),
    (
        "TRIGGERS_MAX_DELIVER",
        "deliveries of one message before it is dead-lettered as delivery_exhausted (default 5; 1 to 1000)",
    ),
    (
        "TRIGGERS_MAX_FLOWS",
        "flows held at once; more are refused and counted (default 10000; 1 to 1048576)",
    ),
];

/// How the runtime connects and behaves. Fields left `None` fall back to the environment, then
/// to the defaults in [`ENV_VARS`]. A value out of range (a zero heartbeat interval, a
/// concurrency of 0 or above [`MAX_CONCURRENCY`], a duration above [`MAX_DURATION`]) makes
/// `start()` fail with `StartError::Config`, naming it.
#[derive(Debug, Clone, Default)]
pub struct RuntimeConfig {
    /// The NATS server URL.
    pub nats_url: Option<String>,
    /// The inbound stream's name, when it is not `triggers-sources-<service>`.
    pub source_stream: Option<String>,
    /// The heartbeat period (at least 1 ms).
    pub heartbeat_interval: Option<Duration>,
    /// How long registration waits for a reply (at least 1 ms).
    pub register_timeout: Option<Duration>,
    /// Messages processed at once (1 to [`MAX_CONCURRENCY`]).
    pub max_concurrency: Option<usize>,
    /// How long a graceful shutdown waits for in-flight work.
    pub shutdown_grace: Option<Duration>,
    /// How long a message for a flow the service does not hold yet waits for the broadcast.
    pub flow_wait: Option<Duration>,
    /// The timeout of HTTP outputs (at least 1 ms).
    pub http_timeout: Option<Duration>,
    /// Messages each NATS subscription holds before NATS drops what comes next (1 to
    /// [`MAX_SUBSCRIPTION_CAPACITY`]; default async-nats' 65 536). Drops are counted:
    /// `RunningService::dropped_messages`.
    pub subscription_capacity: Option<usize>,
    /// How many times JetStream delivers one message (the consumer's `max_deliver`, 1 to
    /// [`MAX_DELIVER`]): a message whose outcome cannot be reported is given back for a
    /// redelivery, and on the last one dead-lettered as `delivery_exhausted`.
    pub max_deliver: Option<usize>,
    /// Flows held at once (1 to [`MAX_CONCURRENCY`]); a flow beyond it is not installed (counted
    /// in [`RuntimeStats::flows_refused`](crate::runtime::RuntimeStats)).
    pub max_flows: Option<usize>,
    /// How long JetStream waits for the ack of a delivery before it delivers the message again,
    /// to this replica or another (the consumer's `ack_wait`; 1 s to 1 day, default 30 s). While
    /// a message is handled the runtime sends an in-progress ack every third of it, so long work
    /// (retries, backoff) keeps the message; a delivery lost with its connection (a server node
    /// killed mid-delivery) comes back after it.
    pub ack_wait: Option<Duration>,
}

/// The most deliveries of one message a consumer may be set to.
pub const MAX_DELIVER: usize = 1000;

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
    pub(crate) subscription_capacity: Option<usize>,
    pub(crate) max_deliver: u32,
    pub(crate) max_flows: usize,
    pub(crate) ack_wait: Duration,
    /// Idempotency keys of handled messages remembered (fixed).
    pub(crate) max_handled_keys: usize,
    /// Action outcomes kept for redeliveries (fixed).
    pub(crate) max_kept_outcomes: usize,
    /// Not a setting: the drop counter of the connection made with these settings, kept here so
    /// that the connect options and `RunningService` reach the same one.
    pub(crate) drops: DropCounter,
}

fn env(name: &'static str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A duration setting: its variable, its `RuntimeConfig` field, its default, the shortest and
/// the longest it may be, and how that range reads.
struct DurationSetting {
    var: &'static str,
    field: &'static str,
    default_ms: u64,
    min_ms: u64,
    max_ms: u64,
    expected: &'static str,
}

/// The range of most duration settings, from `min_ms`.
const FROM_0: &str = "a whole number of milliseconds from 0 to 3153600000000 (100 years)";
const FROM_1: &str = "a whole number of milliseconds from 1 to 3153600000000 (100 years)";

impl DurationSetting {
    /// The value set in code, else the variable's, else the default; in range.
    fn pick(
        &self,
        set: Option<Duration>,
        env: impl Fn(&'static str) -> Option<String>,
    ) -> Result<Duration, ConfigError> {
        let (value, shown, setting) = match (set, env(self.var)) {
            (Some(d), _) => (d, format!("{d:?}"), self.field),
            (None, Some(v)) => match v.trim().parse::<u64>() {
                Ok(ms) => (Duration::from_millis(ms), v, self.var),
                Err(_) => {
                    return Err(ConfigError {
                        setting: self.var,
                        value: v,
                        expected: self.expected,
                    });
                }
            },
            (None, None) => return Ok(Duration::from_millis(self.default_ms)),
        };
        if value < Duration::from_millis(self.min_ms)
            || value > Duration::from_millis(self.max_ms).min(MAX_DURATION)
        {
            return Err(ConfigError {
                setting,
                value: shown,
                expected: self.expected,
            });
        }
        Ok(value)
    }
}

const HEARTBEAT: DurationSetting = DurationSetting {
    var: "TRIGGERS_HEARTBEAT_INTERVAL_MS",
    field: "RuntimeConfig::heartbeat_interval",
    default_ms: 5_000,
    min_ms: 1,
    max_ms: MAX_DURATION_MS,
    expected: FROM_1,
};
const REGISTER: DurationSetting = DurationSetting {
    var: "TRIGGERS_REGISTER_TIMEOUT_MS",
    field: "RuntimeConfig::register_timeout",
    default_ms: 10_000,
    min_ms: 1,
    max_ms: MAX_DURATION_MS,
    expected: FROM_1,
};
const SHUTDOWN: DurationSetting = DurationSetting {
    var: "TRIGGERS_SHUTDOWN_GRACE_MS",
    field: "RuntimeConfig::shutdown_grace",
    default_ms: 30_000,
    min_ms: 0,
    max_ms: MAX_DURATION_MS,
    expected: FROM_0,
};
const FLOW_WAIT: DurationSetting = DurationSetting {
    var: "TRIGGERS_FLOW_WAIT_MS",
    field: "RuntimeConfig::flow_wait",
    default_ms: 2_000,
    min_ms: 0,
    max_ms: MAX_DURATION_MS,
    expected: FROM_0,
};
const HTTP: DurationSetting = DurationSetting {
    var: "TRIGGERS_HTTP_TIMEOUT_MS",
    field: "RuntimeConfig::http_timeout",
    default_ms: 10_000,
    min_ms: 1,
    max_ms: MAX_DURATION_MS,
    expected: FROM_1,
};
const ACK_WAIT: DurationSetting = DurationSetting {
    var: "TRIGGERS_ACK_WAIT_MS",
    field: "RuntimeConfig::ack_wait",
    default_ms: 30_000,
    min_ms: 1_000,
    max_ms: 86_400_000,
    expected: "a whole number of milliseconds from 1000 (1 s) to 86400000 (1 day)",
};

/// A count setting in `1..=max`: the value set in code, else the variable's, else `default`.
fn count(
    set: Option<usize>,
    (var, field): (&'static str, &'static str),
    default: Option<usize>,
    max: usize,
    expected: &'static str,
    env: impl Fn(&'static str) -> Option<String>,
) -> Result<Option<usize>, ConfigError> {
    let (value, shown, setting) = match (set, env(var)) {
        (Some(n), _) => (n, n.to_string(), field),
        (None, Some(v)) => match v.trim().parse::<usize>() {
            Ok(n) => (n, v, var),
            Err(_) => {
                return Err(ConfigError {
                    setting: var,
                    value: v,
                    expected,
                });
            }
        },
        (None, None) => return Ok(default),
    };
    if value == 0 || value > max {
        return Err(ConfigError {
            setting,
            value: shown,
            expected,
        });
    }
    Ok(Some(value))
}

impl RuntimeConfig {
    /// Decides every value: this config, then the environment, then the default.
    ///
    /// # Errors
    /// When a value (set here or in the environment) is not understood or out of range.
    pub(crate) fn resolve(&self) -> Result<Resolved, ConfigError> {
        self.resolve_with(env)
    }

    fn resolve_with(
        &self,
        env: impl Fn(&'static str) -> Option<String> + Copy,
    ) -> Result<Resolved, ConfigError> {
        let max_concurrency = count(
            self.max_concurrency,
            ("TRIGGERS_MAX_CONCURRENCY", "RuntimeConfig::max_concurrency"),
            Some(64),
            MAX_CONCURRENCY,
            "a whole number from 1 to 1048576",
            env,
        )?
        .unwrap_or(64);
        let subscription_capacity = count(
            self.subscription_capacity,
            (
                "TRIGGERS_NATS_SUBSCRIPTION_CAPACITY",
                "RuntimeConfig::subscription_capacity",
            ),
            None,
            MAX_SUBSCRIPTION_CAPACITY,
            "a whole number from 1 to 16777216",
            env,
        )?;
        let max_deliver = count(
            self.max_deliver,
            ("TRIGGERS_MAX_DELIVER", "RuntimeConfig::max_deliver"),
            Some(5),
            MAX_DELIVER,
            "a whole number from 1 to 1000",
            env,
        )?
        .unwrap_or(5);
        let max_flows = count(
            self.max_flows,
            ("TRIGGERS_MAX_FLOWS", "RuntimeConfig::max_flows"),
            Some(10_000),
            MAX_CONCURRENCY,
            "a whole number from 1 to 1048576",
            env,
        )?
        .unwrap_or(10_000);
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
            heartbeat_interval: HEARTBEAT.pick(self.heartbeat_interval, env)?,
            register_timeout: REGISTER.pick(self.register_timeout, env)?,
            max_concurrency,
            shutdown_grace: SHUTDOWN.pick(self.shutdown_grace, env)?,
            flow_wait: FLOW_WAIT.pick(self.flow_wait, env)?,
            http_timeout: HTTP.pick(self.http_timeout, env)?,
            subscription_capacity,
            max_deliver: u32::try_from(max_deliver).unwrap_or(u32::MAX),
            max_flows,
            ack_wait: ACK_WAIT.pick(self.ack_wait, env)?,
            max_handled_keys: 100_000,
            max_kept_outcomes: 10_000,
            drops: DropCounter::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(
        pairs: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&'static str) -> Option<String> + Copy {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn defaults_and_in_range_values_resolve() {
        let r = RuntimeConfig::default().resolve_with(with(&[])).unwrap();
        assert_eq!(r.heartbeat_interval, Duration::from_secs(5));
        assert_eq!(r.max_concurrency, 64);
        assert_eq!(r.subscription_capacity, None);
        assert_eq!(r.ack_wait, Duration::from_secs(30));
        let r = RuntimeConfig::default()
            .resolve_with(with(&[
                ("TRIGGERS_MAX_CONCURRENCY", "1048576"),
                ("TRIGGERS_FLOW_WAIT_MS", "0"),
                ("TRIGGERS_SHUTDOWN_GRACE_MS", "3153600000000"),
                ("TRIGGERS_NATS_SUBSCRIPTION_CAPACITY", "8"),
                ("TRIGGERS_ACK_WAIT_MS", "86400000"),
            ]))
            .unwrap();
        assert_eq!(r.ack_wait, Duration::from_secs(86_400));
        assert_eq!(r.max_concurrency, MAX_CONCURRENCY);
        assert_eq!(r.flow_wait, Duration::ZERO);
        assert_eq!(r.shutdown_grace, MAX_DURATION);
        assert_eq!(r.subscription_capacity, Some(8));
    }

    #[test]
    fn out_of_range_environment_values_are_refused_naming_the_variable() {
        let cases: [(&'static [(&'static str, &'static str)], &str); 14] = [
            (
                &[("TRIGGERS_MAX_CONCURRENCY", "0")],
                "TRIGGERS_MAX_CONCURRENCY=\"0\"",
            ),
            (
                &[("TRIGGERS_MAX_CONCURRENCY", "1048577")],
                "from 1 to 1048576",
            ),
            (
                &[("TRIGGERS_MAX_CONCURRENCY", "99999999999999999999999")],
                "from 1 to 1048576",
            ),
            (
                &[("TRIGGERS_MAX_CONCURRENCY", "-4")],
                "TRIGGERS_MAX_CONCURRENCY",
            ),
            (&[("TRIGGERS_HEARTBEAT_INTERVAL_MS", "0")], "from 1 to"),
            (
                &[("TRIGGERS_REGISTER_TIMEOUT_MS", "0")],
                "TRIGGERS_REGISTER_TIMEOUT_MS",
            ),
            (
                &[("TRIGGERS_HTTP_TIMEOUT_MS", "0")],
                "TRIGGERS_HTTP_TIMEOUT_MS",
            ),
            (
                &[("TRIGGERS_FLOW_WAIT_MS", "18446744073709551615")],
                "from 0 to 3153600000000 (100 years)",
            ),
            (
                &[("TRIGGERS_SHUTDOWN_GRACE_MS", "18446744073709551616")],
                "TRIGGERS_SHUTDOWN_GRACE_MS",
            ),
            (
                &[("TRIGGERS_SHUTDOWN_GRACE_MS", "-1")],
                "whole number of milliseconds",
            ),
            (&[("TRIGGERS_HEARTBEAT_INTERVAL_MS", "1.5")], "whole number"),
            (
                &[("TRIGGERS_NATS_SUBSCRIPTION_CAPACITY", "0")],
                "from 1 to 16777216",
            ),
            (&[("TRIGGERS_ACK_WAIT_MS", "999")], "from 1000 (1 s)"),
            (
                &[("TRIGGERS_ACK_WAIT_MS", "86400001")],
                "to 86400000 (1 day)",
            ),
        ];
        for (env, says) in cases {
            let e = RuntimeConfig::default()
                .resolve_with(with(env))
                .expect_err(says);
            assert!(e.to_string().contains(says), "{env:?}: {e}");
        }
    }

    #[test]
    fn out_of_range_values_set_in_code_are_refused_naming_the_field() {
        let cases = [
            (
                RuntimeConfig {
                    heartbeat_interval: Some(Duration::ZERO),
                    ..Default::default()
                },
                "RuntimeConfig::heartbeat_interval=\"0ns\"",
            ),
            (
                RuntimeConfig {
                    flow_wait: Some(Duration::MAX),
                    ..Default::default()
                },
                "RuntimeConfig::flow_wait",
            ),
            (
                RuntimeConfig {
                    max_concurrency: Some(0),
                    ..Default::default()
                },
                "RuntimeConfig::max_concurrency=\"0\"",
            ),
            (
                RuntimeConfig {
                    max_concurrency: Some(usize::MAX),
                    ..Default::default()
                },
                "RuntimeConfig::max_concurrency",
            ),
            (
                RuntimeConfig {
                    subscription_capacity: Some(0),
                    ..Default::default()
                },
                "RuntimeConfig::subscription_capacity",
            ),
        ];
        for (config, says) in cases {
            let e = config.resolve_with(with(&[])).expect_err(says);
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    proptest::proptest! {
        /// Any text in any variable: resolved in range, or a ConfigError naming a variable.
        #[test]
        fn any_environment_text_resolves_or_is_refused(
            var in proptest::sample::select(&ENV_VARS[2..]),
            text in "(\\PC{0,24}|[0-9]{1,25}|-[0-9]{1,5})",
        ) {
            let name = var.0;
            let value = text.clone();
            let env = move |n: &'static str| (n == name).then(|| value.clone());
            match RuntimeConfig::default().resolve_with(&env) {
                Ok(r) => {
                    proptest::prop_assert!(r.max_concurrency >= 1 && r.max_concurrency <= MAX_CONCURRENCY);
                    proptest::prop_assert!(r.heartbeat_interval >= Duration::from_millis(1));
                    for d in [r.heartbeat_interval, r.register_timeout, r.shutdown_grace, r.flow_wait, r.http_timeout] {
                        proptest::prop_assert!(d <= MAX_DURATION);
                    }
                }
                Err(e) => proptest::prop_assert_eq!(e.setting, name),
            }
        }
    }

    #[test]
    fn code_wins_over_an_out_of_range_environment() {
        let r = RuntimeConfig {
            max_concurrency: Some(2),
            ..Default::default()
        }
        .resolve_with(with(&[("TRIGGERS_MAX_CONCURRENCY", "0")]))
        .unwrap();
        assert_eq!(r.max_concurrency, 2);
    }
}
