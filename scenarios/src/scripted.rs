//! Scripted services: a scenario's `services` entry without a `command`, run in-process on the
//! SDK runtime. Each action does what its `behavior` says, and every call is logged for
//! `expect_calls`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use triggers_sdk::flow;
use triggers_sdk::runtime::{
    ActionContext, ActionDef, ActionError, ResultEventConfig, RunningService, RuntimeConfig,
    Service,
};

use crate::model::{ActionSpec, Behavior, ResultEventSpec, ServiceSpec};

/// One call of a scripted action (one attempt).
#[derive(Debug, Clone, Serialize)]
pub struct Call {
    /// The action.
    pub action: String,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The run.
    pub run_id: String,
    /// The input it got.
    pub input: Value,
    /// Which replica ran it (0-based).
    pub replica: usize,
}

/// The calls of a scripted service, shared by its replicas.
pub(crate) type Calls = Arc<Mutex<Vec<Call>>>;

/// A running scripted service: its replicas and their calls.
pub(crate) struct Scripted {
    pub(crate) replicas: Vec<RunningService>,
    pub(crate) calls: Calls,
}

impl Scripted {
    /// Starts every replica against `nats_url`; each has registered when this returns.
    pub(crate) async fn start(spec: &ServiceSpec, nats_url: &str) -> Result<Self, String> {
        let calls: Calls = Arc::default();
        if spec
            .actions
            .iter()
            .any(|a| a.value.behavior.panic.is_some())
        {
            quiet_scripted_panics();
        }
        let mut replicas = Vec::new();
        for replica in 0..spec.replicas.unwrap_or(1) as usize {
            let service = build(spec, nats_url, replica, calls.clone())?;
            let running = service
                .start()
                .await
                .map_err(|e| format!("scripted service {:?} did not start: {e}", spec.name))?;
            replicas.push(running);
        }
        Ok(Scripted { replicas, calls })
    }

    /// Messages NATS dropped for the replicas' slow subscriptions, all together.
    pub(crate) fn dropped_messages(&self) -> u64 {
        self.replicas
            .iter()
            .map(RunningService::dropped_messages)
            .fold(0, u64::saturating_add)
    }

    /// Stops every replica gracefully.
    pub(crate) async fn stop(self) {
        for r in self.replicas {
            r.shutdown().await;
        }
    }
}

thread_local! {
    /// Set just before a scripted `panic`: the panic is the behavior asked for, not a bug, so
    /// the panic hook does not print it (the SDK reports it as `action_panicked`).
    static QUIET_PANIC: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Wraps the process's panic hook, once, so scripted panics stay quiet and others do not.
fn quiet_scripted_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET_PANIC.with(|q| q.replace(false)) {
                previous(info);
            }
        }));
    });
}

/// The result schema of an action: as written, else inferred from `return`, else anything.
/// The bool says whether it was inferred.
fn result_schema(spec: &ActionSpec) -> (Value, bool) {
    match (&spec.result, &spec.behavior.returns) {
        (Some(schema), _) => (schema.clone(), false),
        (None, Some(value)) => (infer_schema(value), true),
        (None, None) => (Value::Bool(true), false),
    }
}

/// The schema of a value's shape: what a typed handler returning it would declare.
pub(crate) fn infer_schema(value: &Value) -> Value {
    let ty = |t: &str| serde_json::json!({"type": t});
    match value {
        Value::Null => ty("null"),
        Value::Bool(_) => ty("boolean"),
        Value::Number(n) if n.is_f64() => ty("number"),
        Value::Number(_) => ty("integer"),
        Value::String(_) => ty("string"),
        Value::Array(items) => match items.first() {
            Some(first) => serde_json::json!({"type": "array", "items": infer_schema(first)}),
            None => ty("array"),
        },
        Value::Object(map) => {
            let properties: Map<String, Value> = map
                .iter()
                .map(|(k, v)| (k.clone(), infer_schema(v)))
                .collect();
            let required: Vec<Value> = map.keys().map(|k| Value::from(k.as_str())).collect();
            serde_json::json!({"type": "object", "properties": properties, "required": required})
        }
    }
}

fn build(
    spec: &ServiceSpec,
    nats_url: &str,
    replica: usize,
    calls: Calls,
) -> Result<Service, String> {
    let mut builder = Service::builder(
        spec.name.clone(),
        spec.version.clone().unwrap_or_else(|| "1.0.0".into()),
    );
    match &spec.sources {
        Some(sources) => {
            for s in sources {
                builder = builder.nats_source(s.name.clone(), s.subject.clone());
            }
        }
        None => builder = builder.nats_source("nats", format!("{}.inbound", spec.name)),
    }
    for c in &spec.capabilities {
        builder = builder.capability(c.clone());
    }
    if let Some(nodes) = &spec.supports_nodes {
        builder = builder.supports_nodes(nodes.clone());
    }
    for a in &spec.actions {
        builder = builder.action(action(&spec.name, &a.value, replica, calls.clone()));
    }
    builder
        .config(RuntimeConfig {
            nats_url: Some(nats_url.to_owned()),
            source_stream: spec.source_stream.clone(),
            heartbeat_interval: Some(Duration::from_millis(500)),
            shutdown_grace: Some(Duration::from_secs(5)),
            register_timeout: Some(Duration::from_secs(10)),
            // Deploys come before triggers in a scenario: a broadcast is never far behind.
            flow_wait: Some(Duration::from_secs(1)),
            ..Default::default()
        })
        .build()
        .map_err(|e| format!("scripted service {:?}: {e}", spec.name))
}

fn action(service: &str, spec: &ActionSpec, replica: usize, calls: Calls) -> ActionDef {
    let (result, inferred) = result_schema(spec);
    let input = spec.input.clone().unwrap_or(Value::Bool(true));
    let behavior = Arc::new(spec.behavior.clone());
    let name = spec.name.clone();
    let handler = move |input: Value, ctx: ActionContext| {
        let behavior = behavior.clone();
        let calls = calls.clone();
        let name = name.clone();
        async move {
            calls.lock().unwrap_or_else(|e| e.into_inner()).push(Call {
                action: name,
                attempt: ctx.attempt,
                run_id: ctx.envelope.flow_run_id.clone(),
                input: input.clone(),
                replica,
            });
            perform(&behavior, input, &ctx).await
        }
    };
    let mut def = ActionDef::dynamic(spec.name.clone(), &input, &result, handler)
        .timeout(spec.timeout())
        .retry(spec.retry());
    // A declared input schema is enforced as registered (normalised as the wire contract says,
    // which keeps types and required fields, not bounds), as a typed action's input type is: an
    // input that breaks it is dead-lettered as `invalid_input` and the behaviour never sees it.
    if spec.input.is_some()
        && let Ok(registered) = triggers_sdk::wire::schema::normalize(&input)
        && let Ok(validator) = jsonschema::validator_for(&Value::Object(registered))
    {
        def = def.check_input(move |value| {
            let problems: Vec<String> = validator
                .iter_errors(value)
                .take(3)
                .map(|e| {
                    let at = e.instance_path().to_string();
                    if at.is_empty() {
                        e.to_string()
                    } else {
                        format!("{at}: {e}")
                    }
                })
                .collect();
            if problems.is_empty() {
                Ok(())
            } else {
                Err(problems.join("; "))
            }
        });
    }
    let derivable = || {
        triggers_sdk::wire::schema::normalize(&result)
            .ok()
            .is_some_and(|s| {
                triggers_sdk::wire::ResultEvent::derive(service, &spec.name, &s).is_ok()
            })
    };
    // An inferred schema that cannot be flattened (a nested return value) declares no result
    // event rather than failing the build; a written one was checked when the file was read.
    if spec.result_event == ResultEventSpec::Off || (inferred && !derivable()) {
        def = def.result_event(ResultEventConfig::Off);
    }
    def
}

fn message(template: &str, ctx: &ActionContext) -> String {
    template
        .replace("{attempt}", &ctx.attempt.to_string())
        .replace("{max_attempts}", &ctx.max_attempts.to_string())
}

async fn perform(b: &Behavior, input: Value, ctx: &ActionContext) -> Result<Value, ActionError> {
    let fail = |text: String| {
        if b.permanent {
            ActionError::permanent(text)
        } else {
            ActionError::retryable(text)
        }
    };
    if let Some(d) = b.sleep {
        tokio::time::sleep(d.0).await;
    }
    let error = || {
        message(
            b.error
                .as_deref()
                .unwrap_or("scripted failure (attempt {attempt} of {max_attempts})"),
            ctx,
        )
    };
    if b.fail_first.is_some_and(|n| ctx.attempt <= n) {
        return Err(fail(error()));
    }
    if let Some(cond) = &b.fail_if {
        match flow::condition(cond, &input) {
            Ok(true) => return Err(fail(error())),
            Ok(false) => {}
            Err(e) => return Err(ActionError::permanent(format!("fail_if: {e}"))),
        }
    }
    if let Some(v) = &b.returns {
        return Ok(v.clone());
    }
    if let Some(fields) = &b.map {
        let mut config = Map::new();
        config.insert("fields".into(), Value::Object(fields.clone()));
        return flow::mapping(&config, &input)
            .map_err(|e| ActionError::permanent(format!("map: {e}")));
    }
    if let Some(text) = &b.fail {
        return Err(fail(message(text, ctx)));
    }
    if let Some(text) = &b.panic {
        QUIET_PANIC.with(|q| q.set(true));
        panic!("{}", message(text, ctx));
    }
    Ok(input)
}

/// A scenario's scripted services, running against a NATS server the caller chose: what
/// `triggers-lab up --services FILE` runs beside its emulator, so that flows can be deployed and
/// triggered by hand against services that behave as the scenario says.
pub struct ScriptedServices {
    running: Vec<(String, Scripted)>,
    /// Services of the scenario that are commands (`command:`): not started.
    pub skipped: Vec<String>,
}

impl ScriptedServices {
    /// Starts every scripted service of `scenario` against `nats_url`; each has registered when
    /// this returns. Services given as commands are left out (listed in `skipped`).
    ///
    /// # Errors
    /// The first service that does not start (the ones started are stopped).
    pub async fn start(
        scenario: &crate::load::Scenario,
        nats_url: &str,
    ) -> Result<ScriptedServices, String> {
        let mut running = Vec::new();
        let mut skipped = Vec::new();
        for spec in &scenario.services {
            if spec.command.is_some() {
                skipped.push(spec.name.clone());
                continue;
            }
            match Scripted::start(spec, nats_url).await {
                Ok(s) => running.push((spec.name.clone(), s)),
                Err(e) => {
                    for (_, s) in running {
                        s.stop().await;
                    }
                    return Err(e);
                }
            }
        }
        Ok(ScriptedServices { running, skipped })
    }

    /// The services started.
    #[must_use]
    pub fn names(&self) -> Vec<&str> {
        self.running.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Stops every replica gracefully.
    pub async fn stop(self) {
        for (_, s) in self.running {
            s.stop().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inferred_schemas_are_what_a_typed_handler_declares() {
        assert_eq!(
            infer_schema(&json!({"ok": true, "n": 3, "x": 1.5, "id": "a"})),
            json!({"type": "object", "properties": {
                "id": {"type": "string"}, "n": {"type": "integer"},
                "ok": {"type": "boolean"}, "x": {"type": "number"}},
                "required": ["id", "n", "ok", "x"]})
        );
    }

    #[test]
    fn a_scripted_action_declares_the_schemas_and_result_event_it_is_given() {
        let a: ActionSpec = serde_json::from_value(json!({
            "name": "charge",
            "behavior": {"return": {"charged": true, "id": "c-1"}}
        }))
        .unwrap();
        let service = Service::builder("shop", "1.0.0")
            .action(action("shop", &a, 0, Calls::default()))
            .nats_source("nats", "shop.inbound")
            .build()
            .unwrap();
        let declared = &service.manifest().actions[0];
        assert_eq!(
            Value::Object(declared.result_schema.clone().unwrap()),
            json!({"type": "object", "properties": {"charged": {"type": "boolean"}, "id": {"type": "string"}}, "required": ["charged", "id"]})
        );
        let ev = declared.result_event.as_ref().unwrap();
        assert_eq!(ev["event_type"], "shop.charge.result");
        assert_eq!(
            Value::Object(declared.input_schema.clone().unwrap()),
            json!({})
        );
    }
}
