//! What the counting `expect_*` steps share: wait until enough match, then, for an exact count,
//! watch a little longer (and until the run concerned is quiet) before the count is a verdict.

use serde_json::Value;

use super::StepFailure;
use crate::runner::{DEFAULT_SETTLE, Lab};

/// Waits until `matching` finds at least `count` (or one), then, for an exact count, watches
/// `settle` longer and checks the number. Returns how many matched.
pub(super) async fn counted<T>(
    lab: &Lab<'_>,
    timeout: Option<crate::model::Dur>,
    count: Option<usize>,
    settle: Option<crate::model::Dur>,
    what: &str,
    matching: impl Fn() -> Vec<T>,
    saw: impl Fn() -> String,
) -> Result<usize, StepFailure> {
    let runs = RunsConcerned {
        settled: &|| false,
        quiet: None,
    };
    counted_until(lab, timeout, count, settle, what, matching, saw, runs).await
}

/// What a count knows of the runs it concerns.
pub(super) struct RunsConcerned<'a> {
    /// They have settled: nothing more can come.
    pub(super) settled: &'a dyn Fn() -> bool,
    /// Where the count is of one run: whether that run is quiet (nothing in flight: settled, or
    /// waiting only for a timer). An exact count is judged only then, since while the run is
    /// running more may come after the count is first reached.
    pub(super) quiet: Option<(&'a str, &'a dyn Fn() -> bool)>,
}

/// Whether run `id` has settled, and whether it is quiet (not running): both false and true
/// respectively when no run is given or it is not known.
pub(super) fn run_concerned<'a>(
    lab: &'a Lab<'_>,
    id: Option<&'a str>,
) -> (impl Fn() -> bool + 'a, impl Fn() -> bool + 'a) {
    let status = move || id.and_then(|id| lab.em().run(id)).map(|r| r.status);
    (
        move || status().is_some_and(|s| s.is_settled()),
        move || status().is_none_or(|s| s != triggers_emulator::recorder::RunStatus::Running),
    )
}

/// [`counted`], ending early when `runs.settled` says nothing more can come (the runs it
/// concerns have settled): an exact count that is short then fails after `settle`, rather than at the
/// end of the step's timeout.
#[allow(clippy::too_many_arguments)]
pub(super) async fn counted_until<T>(
    lab: &Lab<'_>,
    timeout: Option<crate::model::Dur>,
    count: Option<usize>,
    settle: Option<crate::model::Dur>,
    what: &str,
    matching: impl Fn() -> Vec<T>,
    saw: impl Fn() -> String,
    runs: RunsConcerned<'_>,
) -> Result<usize, StepFailure> {
    let settle = settle.map_or(DEFAULT_SETTLE, |d| d.0);
    let want = count.unwrap_or(1);
    let mut w = lab.waiter(timeout);
    if want > 0 {
        let mut finished_at: Option<tokio::time::Instant> = None;
        while matching().len() < want {
            if count.is_some() && (runs.settled)() {
                let at = *finished_at.get_or_insert_with(tokio::time::Instant::now);
                if at.elapsed() >= settle {
                    let n = matching().len();
                    return Err(StepFailure::unmet(format!(
                        "expected {what}, found {n}: the run settled, so no more can come \
                         (watched {} after it did); {}",
                        crate::model::Dur(settle),
                        saw()
                    )));
                }
            } else {
                finished_at = None;
            }
            if !w.next().await {
                return Err(w.timeout(what.to_owned(), saw()));
            }
        }
    }
    let Some(exact) = count else {
        return Ok(matching().len());
    };
    // A count of a run still running is not a verdict yet: its next retry, DLQ entry or call
    // may be on the way.
    if let Some((label, quiet)) = runs.quiet {
        while !quiet() {
            if !w.next().await {
                return Err(StepFailure::timeout(format!(
                    "expected {what}, found {} so far, but run {label} is still running: more may \
                     come, so the count is not a verdict yet; wait for the run first \
                     (`wait_settled: {label}`), or give the step a longer `timeout`; {}",
                    matching().len(),
                    saw()
                )));
            }
        }
    }
    tokio::time::sleep(settle).await;
    let n = matching().len();
    if n == exact {
        Ok(n)
    } else {
        Err(StepFailure::unmet(format!(
            "expected {what}, found {n} (after watching {} more); {}",
            crate::model::Dur(settle),
            saw()
        )))
    }
}

/// JSON equality with numbers compared as numbers (`1` equals `1.0`).
pub(super) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_numbers_compare_as_numbers() {
        assert!(json_eq(&json!({"a": [1, 2.0]}), &json!({"a": [1.0, 2]})));
        assert!(!json_eq(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
    }
}
