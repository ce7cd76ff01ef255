//! The ranges the runtime accepts (settings, an action's timeout and retry policy), and the
//! arithmetic on them that must not overflow: a value out of range is refused where it is given,
//! with a message naming it, rather than wrapping or panicking later in a timer or a cast.

use std::time::Duration;

use crate::error::ActionSettingError;
use crate::wire::Retry;

/// The longest duration the runtime (and triggers-lab's scenario files and command line) accepts
/// anywhere: 100 years (36 500 days). Longer is surely a typo, and far enough from the limits of
/// `Duration`, `Instant` and milliseconds in an `i64` that no arithmetic on it can overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(36_500 * 86_400);

/// [`MAX_DURATION`] in milliseconds.
pub const MAX_DURATION_MS: u64 = 36_500 * 86_400 * 1_000;

/// The most messages a replica runs at once (`max_concurrency`): 1 048 576, far above any real
/// service, and low enough that what is computed from it (JetStream's `max_ack_pending`, four
/// times it; the permits a shutdown waits for) cannot overflow.
pub const MAX_CONCURRENCY: usize = 1 << 20;

/// The largest subscription capacity (messages a subscription holds before NATS drops): 16 777 216.
/// The default is async-nats' 65 536.
pub const MAX_SUBSCRIPTION_CAPACITY: usize = 1 << 24;

/// The most attempts an action may make: the runtime counts attempts in 32 bits.
pub const MAX_ATTEMPTS: i64 = u32::MAX as i64;

/// Checks an action's per-attempt timeout and retry policy against the wire contract (what the
/// orchestrator would refuse) and the runtime's ranges (what it could not honour).
/// `ServiceBuilder::build` calls it for every action; scenario files call it when they are read.
///
/// # Errors
/// The first setting out of range, with what would be accepted.
pub fn check_action(timeout: Duration, retry: &Retry) -> Result<(), ActionSettingError> {
    let fail = |field: &'static str, message: String| Err(ActionSettingError { field, message });
    if timeout < Duration::from_millis(1) {
        return fail(
            "timeout",
            format!(
                "is {timeout:?}, must be at least 1 ms (the manifest carries whole milliseconds)"
            ),
        );
    }
    if timeout > MAX_DURATION {
        return fail(
            "timeout",
            format!("is {timeout:?}, must be at most 100 years"),
        );
    }
    if retry.max_attempts < 1 || retry.max_attempts > MAX_ATTEMPTS {
        return fail(
            "retry.max_attempts",
            format!(
                "is {}, must be from 1 to {MAX_ATTEMPTS} (attempts in all, the first included)",
                retry.max_attempts
            ),
        );
    }
    for (field, ms) in [
        ("retry.initial_backoff_ms", retry.initial_backoff_ms),
        ("retry.max_backoff_ms", retry.max_backoff_ms),
    ] {
        if u64::try_from(ms).is_ok_and(|ms| ms <= MAX_DURATION_MS) {
            continue;
        }
        return fail(
            field,
            format!("is {ms}, must be from 0 to {MAX_DURATION_MS} (100 years)"),
        );
    }
    if !retry.backoff_factor.is_finite() || retry.backoff_factor < 1.0 {
        return fail(
            "retry.backoff_factor",
            format!(
                "is {}, must be a finite number of at least 1",
                retry.backoff_factor
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RETRY: Retry = Retry {
        max_attempts: 3,
        initial_backoff_ms: 100,
        backoff_factor: 2.0,
        max_backoff_ms: 5_000,
    };

    #[test]
    fn out_of_range_settings_are_refused_naming_the_field() {
        let ok = Duration::from_secs(5);
        assert_eq!(check_action(ok, &RETRY), Ok(()));
        let cases: [(Duration, Retry, &str, &str); 10] = [
            (Duration::ZERO, RETRY, "timeout", "at least 1 ms"),
            (
                Duration::from_micros(999),
                RETRY,
                "timeout",
                "at least 1 ms",
            ),
            (Duration::MAX, RETRY, "timeout", "at most 100 years"),
            (
                ok,
                Retry {
                    max_attempts: 0,
                    ..RETRY
                },
                "retry.max_attempts",
                "is 0, must be from 1 to 4294967295",
            ),
            (
                ok,
                Retry {
                    max_attempts: 5_000_000_000,
                    ..RETRY
                },
                "retry.max_attempts",
                "is 5000000000",
            ),
            (
                ok,
                Retry {
                    initial_backoff_ms: -1,
                    ..RETRY
                },
                "retry.initial_backoff_ms",
                "is -1, must be from 0",
            ),
            (
                ok,
                Retry {
                    max_backoff_ms: i64::MAX,
                    ..RETRY
                },
                "retry.max_backoff_ms",
                "100 years",
            ),
            (
                ok,
                Retry {
                    backoff_factor: f64::NAN,
                    ..RETRY
                },
                "retry.backoff_factor",
                "is NaN",
            ),
            (
                ok,
                Retry {
                    backoff_factor: f64::INFINITY,
                    ..RETRY
                },
                "retry.backoff_factor",
                "is inf",
            ),
            (
                ok,
                Retry {
                    backoff_factor: -2.0,
                    ..RETRY
                },
                "retry.backoff_factor",
                "at least 1",
            ),
        ];
        for (timeout, retry, field, says) in cases {
            let e = check_action(timeout, &retry).expect_err(field);
            assert_eq!(e.field, field);
            assert!(e.to_string().contains(says), "{e}");
        }
    }
}
