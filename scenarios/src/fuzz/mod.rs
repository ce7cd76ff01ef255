//! Schema-driven fuzzing of an action: inputs generated from its registered `input_schema`
//! (boundary values and awkward strings first, then random ones), each sent through a flow of
//! its own (service-in, the action, an output that captures the result), judged (a DLQ entry, a
//! failed or stuck run, a result that does not validate against `result_schema`, a conformance
//! error), and a failing input shrunk to a minimal one that still fails. The same seed gives the
//! same inputs, so a failure is reproduced by its seed.

mod generate;
mod keywords;
mod shrink;
mod strings;
mod target;

use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};
use triggers_emulator::Emulator;
use triggers_emulator::recorder::RunStatus;
use triggers_sdk::flow::Flow;
use triggers_sdk::wire::json;

pub use generate::{Generator, Inputs};
pub use shrink::shrink;
pub use target::FuzzTarget;

/// The most smaller inputs one failure's shrinking tries.
const SHRINK_TRIES: u32 = 600;
/// The longest one failure's shrinking takes, unless [`FuzzConfig::shrink_time`] says.
pub const SHRINK_TIME: Duration = Duration::from_secs(120);

/// What `fuzz` is asked to do.
#[derive(Debug, Clone)]
pub struct FuzzConfig {
    /// The service.
    pub service: String,
    /// Its action.
    pub action: String,
    /// How many inputs to try.
    pub runs: u32,
    /// The seed (the same seed gives the same inputs).
    pub seed: u64,
    /// Also send inputs that break the schema: each must be dead-lettered as `invalid_input`
    /// (the service keeps serving).
    pub invalid: bool,
    /// How long one run may take to settle.
    pub run_timeout: Duration,
    /// The longest a failure's shrinking may take ([`SHRINK_TIME`] by default): an input that
    /// hangs costs a whole `run_timeout` per smaller input tried.
    pub shrink_time: Duration,
}

/// How a fuzz campaign went.
#[derive(Debug, Clone, Serialize)]
pub struct FuzzReport {
    /// Inputs sent.
    pub runs: u32,
    /// Of which broke the schema on purpose.
    pub invalid_runs: u32,
    /// The seed.
    pub seed: u64,
    /// The first failure, shrunk, if any.
    pub failure: Option<FuzzFailure>,
}

/// A failing input, shrunk.
#[derive(Debug, Clone, Serialize)]
pub struct FuzzFailure {
    /// The input as first found.
    pub original: Value,
    /// The smallest input found that still fails.
    pub minimal: Value,
    /// What went wrong with the minimal input.
    pub reason: String,
    /// Which run (0-based) found it.
    pub run: u32,
    /// Why shrinking stopped before it ran out of smaller inputs (its time or try budget), if
    /// it did: the minimal input may then not be the smallest.
    pub shrinking_stopped: Option<String>,
}

impl FuzzReport {
    /// A line for the step's report.
    #[must_use]
    pub fn describe(&self) -> String {
        match &self.failure {
            None => format!(
                "{} inputs ({} breaking the schema on purpose), seed {}: no failure",
                self.runs, self.invalid_runs, self.seed
            ),
            Some(f) => format!(
                "input {} fails: {}\n  (shrunk from {}{}, found at run {} of seed {}; the same seed reproduces it)",
                serde_json::to_string(&f.minimal).unwrap_or_default(),
                f.reason,
                cut(&serde_json::to_string(&f.original).unwrap_or_default(), 200),
                f.shrinking_stopped
                    .as_ref()
                    .map(|s| format!(", shrinking stopped {s}"))
                    .unwrap_or_default(),
                f.run + 1,
                self.seed
            ),
        }
    }
}

/// `text`, cut to `max` characters (with a note of how much was left out).
fn cut(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let head: String = text.chars().take(max).collect();
    format!("{head}… ({} more characters)", count - max)
}

/// Progress of a campaign, for a terminal.
#[derive(Debug, Clone)]
pub enum FuzzProgress {
    /// Input `run` (0-based) of `runs` passed.
    Passed {
        /// Which.
        run: u32,
        /// Of how many.
        runs: u32,
    },
    /// Input `run` failed; shrinking starts.
    Failed {
        /// Which.
        run: u32,
        /// Why.
        reason: String,
    },
    /// A smaller input that still fails.
    Shrunk {
        /// It.
        input: Value,
    },
}

/// Runs a fuzz campaign against `config.service`'s `config.action` on `lab`: deploys a flow of
/// its own for the action, sends `config.runs` inputs, and stops at the first failure, which it
/// shrinks. `client` must reach the services' subjects (the action's result is read there).
///
/// # Errors
/// When the campaign cannot run at all: the service or action is not registered, the flow is
/// refused, a trigger cannot be sent. A service that misbehaves is a report with a failure.
pub async fn fuzz(
    lab: &Emulator,
    client: &async_nats::Client,
    config: &FuzzConfig,
) -> Result<FuzzReport, String> {
    fuzz_target(lab, client, config, &mut |_| {}).await
}

/// [`fuzz`] against any [`FuzzTarget`] (a running `up`, say), telling `progress` as it goes.
///
/// # Errors
/// As [`fuzz`].
pub async fn fuzz_target<T: FuzzTarget>(
    lab: &T,
    client: &async_nats::Client,
    config: &FuzzConfig,
    progress: &mut dyn FnMut(FuzzProgress),
) -> Result<FuzzReport, String> {
    let (inputs, results) = schemas(lab, config).await?;
    let (flow_id, capture, flow) = fuzz_flow(config)?;
    lab.deploy(flow)
        .await
        .map_err(|e| format!("the fuzz flow {flow_id} was refused: {e}"))?;
    let mut sub = client
        .subscribe(capture.clone())
        .await
        .map_err(|e| format!("cannot subscribe to {capture}: {e}"))?;
    // The subscription is in place before the first run's output can come.
    triggers_sdk::transport::round_trip(client)
        .await
        .map_err(|e| format!("cannot subscribe to {capture}: {e}"))?;
    let mut probe = Probe {
        lab,
        flow_id: &flow_id,
        sub: &mut sub,
        results: &results,
        timeout: config.run_timeout,
    };
    let mut generator = Generator::new(config.seed);
    let mut invalid_runs = 0;
    for run in 0..config.runs {
        let bad = config.invalid && run % 4 == 3;
        let broken = if bad {
            inputs.invalid(&mut generator)
        } else {
            None
        };
        let expect_invalid = broken.is_some();
        let input = match broken {
            Some(v) => {
                invalid_runs += 1;
                v
            }
            None => inputs
                .valid(&mut generator)
                .map_err(|e| format!("{}.{}: {e}", config.service, config.action))?,
        };
        if let Err(reason) = probe.judge(&input, expect_invalid).await? {
            progress(FuzzProgress::Failed {
                run,
                reason: reason.clone(),
            });
            let (minimal, why, stopped) = probe
                .shrink(&input, reason, expect_invalid, &inputs, config, progress)
                .await?;
            return Ok(FuzzReport {
                runs: run + 1,
                invalid_runs,
                seed: config.seed,
                failure: Some(FuzzFailure {
                    original: input,
                    minimal,
                    reason: why,
                    run,
                    shrinking_stopped: stopped,
                }),
            });
        }
        progress(FuzzProgress::Passed {
            run,
            runs: config.runs,
        });
    }
    Ok(FuzzReport {
        runs: config.runs,
        invalid_runs,
        seed: config.seed,
        failure: None,
    })
}

/// The action's inputs (generated from its registered `input_schema`) and the validator of its
/// results (its `result_schema`).
async fn schemas<T: FuzzTarget>(
    lab: &T,
    config: &FuzzConfig,
) -> Result<(Inputs, jsonschema::Validator), String> {
    let services = lab.manifests().await?;
    let manifest = services.get(&config.service).ok_or_else(|| {
        format!(
            "service {:?} has not registered (registered: {:?})",
            config.service,
            services.keys().collect::<Vec<_>>()
        )
    })?;
    let action = manifest
        .actions
        .iter()
        .find(|a| a.name == config.action)
        .ok_or_else(|| {
            format!(
                "{} has no action {:?} (it has {:?})",
                config.service,
                config.action,
                manifest.actions.iter().map(|a| &a.name).collect::<Vec<_>>()
            )
        })?;
    let input_schema = action
        .input_schema
        .clone()
        .map_or(Value::Bool(true), Value::Object);
    let result_schema = action
        .result_schema
        .clone()
        .map_or(Value::Bool(true), Value::Object);
    let results = generate::validator(&result_schema).map_err(|e| {
        format!(
            "{}.{}'s result_schema is not a usable JSON Schema: {e}",
            config.service, config.action
        )
    })?;
    let inputs = Inputs::new(input_schema).map_err(|e| {
        format!(
            "{}.{}'s input_schema is not a usable JSON Schema: {e}",
            config.service, config.action
        )
    })?;
    Ok((inputs, results))
}

/// The flow each input goes through: the action, its result captured on a subject of its own.
/// Its id, the capture subject, and the flow.
fn fuzz_flow(config: &FuzzConfig) -> Result<(String, String, Flow), String> {
    let flow_id = format!("fuzz-{}-{}", config.service, config.action);
    let capture = format!("fuzz.capture.{}.{}", config.service, config.action);
    let flow: Flow = serde_json::from_value(json!({
        "id": flow_id,
        "nodes": [
            {"id": "in", "type": "service-in", "service": config.service},
            {"id": "act", "type": "action", "service": config.service, "action": config.action},
            {"id": "capture", "type": "output", "config": {"transport": "nats", "target": capture}}
        ],
        "edges": [
            {"id": "e1", "from": "in", "to": "act"},
            {"id": "e2", "from": "act", "to": "capture"}
        ]
    }))
    .map_err(|e| e.to_string())?;
    Ok((flow_id, capture, flow))
}

struct Probe<'a, T> {
    lab: &'a T,
    flow_id: &'a str,
    sub: &'a mut async_nats::Subscriber,
    results: &'a jsonschema::Validator,
    timeout: Duration,
}

impl<T: FuzzTarget> Probe<'_, T> {
    /// Shrinks a failing input greedily, bounded in tries and in time (an input that hangs
    /// costs a whole run timeout per try): takes the first smaller input that still fails (a
    /// valid input stays valid), until none does. The smallest input, why it fails, and why
    /// shrinking stopped early, if it did.
    async fn shrink(
        &mut self,
        input: &Value,
        reason: String,
        expect_invalid: bool,
        inputs: &Inputs,
        config: &FuzzConfig,
        progress: &mut dyn FnMut(FuzzProgress),
    ) -> Result<(Value, String, Option<String>), String> {
        let mut minimal = input.clone();
        let mut why = reason;
        let mut budget = SHRINK_TRIES;
        let deadline = tokio::time::Instant::now() + config.shrink_time;
        let mut stopped = None;
        'shrinking: loop {
            for candidate in shrink(&minimal) {
                if budget == 0 {
                    stopped = Some(format!("after {SHRINK_TRIES} tries"));
                    break 'shrinking;
                }
                if tokio::time::Instant::now() >= deadline {
                    stopped = Some(format!("after {:?}", config.shrink_time));
                    break 'shrinking;
                }
                budget -= 1;
                let candidate_invalid = !inputs.accepts(&candidate);
                if candidate_invalid != expect_invalid {
                    continue;
                }
                if let Err(r) = self.judge(&candidate, expect_invalid).await? {
                    progress(FuzzProgress::Shrunk {
                        input: candidate.clone(),
                    });
                    minimal = candidate;
                    why = r;
                    continue 'shrinking;
                }
            }
            break;
        }
        Ok((minimal, why, stopped))
    }

    /// Sends one input; `Ok(Err(reason))` when the service got it wrong.
    async fn judge(&mut self, input: &Value, invalid: bool) -> Result<Result<(), String>, String> {
        let errors_before = self.lab.errors().await;
        // The exact JSON (an i64 stays an integer), not Go's float64 view of it.
        let bytes = serde_json::to_vec(input).map_err(|e| e.to_string())?;
        let run = self
            .lab
            .trigger(self.flow_id, bytes)
            .await
            .map_err(|e| format!("cannot trigger {}: {e}", self.flow_id))?;
        let Some(settled) = self.lab.settled(&run, self.timeout).await else {
            return Ok(Err(format!(
                "the run did not settle within {:?} (a hang, or a lost message): {}",
                self.timeout,
                self.lab.describe_run(&run).await
            )));
        };
        // The run settles when its node fails; the DLQ entry follows the failed event.
        let dead: Option<(String, String)> =
            if settled.status != RunStatus::Succeeded || !settled.dlq.is_empty() {
                self.lab
                    .dead_letter(&run, Duration::from_secs(2).min(self.timeout))
                    .await
            } else {
                None
            };
        if invalid {
            // It must be refused as invalid_input, and nothing else.
            return Ok(match &dead {
                Some((kind, _)) if kind == "invalid_input" => Ok(()),
                Some((kind, msg)) => Err(format!(
                    "an input that breaks the schema was dead-lettered as {kind}, not invalid_input: {msg}"
                )),
                None => Err(
                    "an input that breaks the schema was accepted, not dead-lettered as invalid_input"
                        .into(),
                ),
            });
        }
        if let Some((kind, msg)) = &dead {
            return Ok(Err(format!("dead-lettered as {kind}: {msg}")));
        }
        if settled.status != RunStatus::Succeeded {
            return Ok(Err(format!(
                "the run {:?}: {}",
                settled.status,
                self.lab.describe_run(&run).await
            )));
        }
        // The captured result: the output node's message for this run.
        let result = loop {
            match tokio::time::timeout(self.timeout, self.sub.next()).await {
                Ok(Some(msg)) => {
                    let headers = triggers_sdk::transport::from_nats(msg.headers.as_ref());
                    if headers.get(triggers_sdk::wire::header::names::FLOW_RUN_ID)
                        == Some(run.as_str())
                    {
                        break serde_json::from_slice::<Value>(&msg.payload).ok();
                    }
                }
                _ => break None,
            }
        };
        let Some(result) = result else {
            return Ok(Err("the action's result never reached the output".into()));
        };
        if let Some(e) = self.results.iter_errors(&result).next() {
            return Ok(Err(format!(
                "the result {} does not validate against the result_schema: {e} (at {})",
                json::to_string(&json::GoAny(&result)).unwrap_or_default(),
                e.instance_path()
            )));
        }
        let errors = self.lab.errors().await;
        if errors.len() > errors_before.len() {
            return Ok(Err(format!(
                "conformance error(s): {}",
                errors[errors_before.len()..].join(" | ")
            )));
        }
        Ok(Ok(()))
    }
}
