//! Schema-driven fuzzing of an action: inputs generated from its registered `input_schema`
//! (boundary values and awkward strings first, then random ones), each sent through a flow of
//! its own (service-in, the action, an output that captures the result), judged (a DLQ entry, a
//! failed or stuck run, a result that does not validate against `result_schema`, a conformance
//! error), and a failing input shrunk to a minimal one that still fails. The same seed gives the
//! same inputs, so a failure is reproduced by its seed.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::{Map, Number, Value, json};
use triggers_emulator::conformance::Severity;
use triggers_emulator::control::ControlClient;
use triggers_emulator::recorder::{RecordKind, Run, RunStatus};
use triggers_emulator::{Emulator, TriggerOptions};
use triggers_sdk::flow::Flow;
use triggers_sdk::wire::Manifest;
use triggers_sdk::wire::json;

/// Strings a fuzzer is for: empty, blank, control characters, quotes, markup, non-ASCII,
/// right-to-left, astral-plane, long.
const AWKWARD: &[&str] = &[
    "",
    " ",
    "0",
    "-1",
    "null",
    "true",
    "\n",
    "\t\r",
    "\u{0}",
    "\"",
    "\\",
    "'; DROP TABLE orders; --",
    "<script>alert(1)</script>",
    "${jndi:ldap://x}",
    "ü",
    "日本語",
    "\u{202e}abc",
    "\u{2028}",
    "😀",
    "a.b.c",
    "$.path",
];

/// Integers at the edges of what services mishandle.
const EDGE_INTS: &[i64] = &[
    0,
    1,
    -1,
    2,
    255,
    256,
    65_535,
    65_536,
    i32::MAX as i64,
    i32::MIN as i64,
    (1 << 31) + 1,
    1 << 53,
    (1 << 53) + 1,
    i64::MAX,
    i64::MIN,
];

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
                "input {} fails: {}\n  (shrunk from {}, found at run {} of seed {}; the same seed reproduces it)",
                serde_json::to_string(&f.minimal).unwrap_or_default(),
                f.reason,
                cut(&serde_json::to_string(&f.original).unwrap_or_default(), 200),
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

/// Generates inputs from a JSON Schema, boundary values first.
pub struct Generator {
    rng: StdRng,
    /// Inputs made so far: the first ones favour edges.
    made: u32,
}

impl Generator {
    /// A generator for `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Generator {
            rng: StdRng::seed_from_u64(seed),
            made: 0,
        }
    }

    /// An input valid for `schema`.
    pub fn valid(&mut self, schema: &Value) -> Value {
        self.made += 1;
        self.value(schema, 0)
    }

    /// An input that breaks `schema` (a wrong type, a required field left out, a bound
    /// crossed), or `None` when the schema takes anything.
    pub fn invalid(&mut self, schema: &Value) -> Option<Value> {
        let obj = schema.as_object()?;
        let types = types_of(obj);
        if types.is_empty() && !obj.contains_key("enum") && !obj.contains_key("const") {
            return None;
        }
        // A required field left out, or a wrong type at the top.
        if let Some(required) = obj.get("required").and_then(Value::as_array)
            && !required.is_empty()
            && self.rng.random_bool(0.5)
        {
            let mut valid = self.value(schema, 0);
            if let Some(map) = valid.as_object_mut() {
                let i = self.rng.random_range(0..required.len());
                if let Some(name) = required[i].as_str() {
                    map.remove(name);
                    return Some(valid);
                }
            }
        }
        let wrong = [
            json!("not the declared type"),
            json!(12345),
            json!(true),
            json!(null),
            json!([1, 2]),
            json!({"unexpected": 1}),
        ];
        let candidates: Vec<&Value> = wrong.iter().filter(|v| !matches_type(v, &types)).collect();
        if candidates.is_empty() {
            return None;
        }
        Some(candidates[self.rng.random_range(0..candidates.len())].clone())
    }

    fn edge_first(&self) -> bool {
        self.made <= 40
    }

    fn value(&mut self, schema: &Value, depth: usize) -> Value {
        let Some(obj) = schema.as_object() else {
            // `true` or anything else: any JSON.
            return self.any(depth);
        };
        if let Some(c) = obj.get("const") {
            return c.clone();
        }
        if let Some(values) = obj.get("enum").and_then(Value::as_array)
            && !values.is_empty()
        {
            return values[self.rng.random_range(0..values.len())].clone();
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = obj.get(key).and_then(Value::as_array)
                && !branches.is_empty()
            {
                let i = self.rng.random_range(0..branches.len());
                return self.value(&branches[i], depth);
            }
        }
        if let Some(all) = obj.get("allOf").and_then(Value::as_array)
            && let Some(first) = all.first()
        {
            return self.value(first, depth);
        }
        let types = types_of(obj);
        let ty = if types.is_empty() {
            if obj.contains_key("properties") {
                "object".to_owned()
            } else if obj.contains_key("items") {
                "array".to_owned()
            } else {
                return self.any(depth);
            }
        } else {
            types[self.rng.random_range(0..types.len())].clone()
        };
        match ty.as_str() {
            "null" => Value::Null,
            "boolean" => Value::Bool(self.rng.random_bool(0.5)),
            "integer" => self.integer(obj),
            "number" => self.number(obj),
            "string" => self.string(obj),
            "array" => self.array(obj, depth),
            "object" => self.object(obj, depth),
            _ => self.any(depth),
        }
    }

    fn any(&mut self, depth: usize) -> Value {
        match self.rng.random_range(0..if depth > 2 { 4 } else { 6 }) {
            0 => Value::Null,
            1 => Value::Bool(self.rng.random_bool(0.5)),
            2 => json!(EDGE_INTS[self.rng.random_range(0..EDGE_INTS.len())]),
            3 => json!(AWKWARD[self.rng.random_range(0..AWKWARD.len())]),
            4 => json!([self.any(depth + 1)]),
            _ => json!({"k": self.any(depth + 1)}),
        }
    }

    fn integer(&mut self, obj: &Map<String, Value>) -> Value {
        let min = bound(obj, "minimum").map(|m| m.ceil() as i64);
        let max = bound(obj, "maximum").map(|m| m.floor() as i64);
        let (lo, hi) = (min.unwrap_or(i64::MIN), max.unwrap_or(i64::MAX));
        let mut edges: Vec<i64> = EDGE_INTS
            .iter()
            .copied()
            .filter(|v| (lo..=hi).contains(v))
            .collect();
        for b in [min, max].into_iter().flatten() {
            edges.extend([b, b.saturating_add(1), b.saturating_sub(1)]);
        }
        edges.retain(|v| (lo..=hi).contains(v));
        let v = if !edges.is_empty() && (self.edge_first() || self.rng.random_bool(0.3)) {
            edges[self.rng.random_range(0..edges.len())]
        } else {
            let (a, b) = (lo.max(-1_000_000_000), hi.min(1_000_000_000));
            if a <= b {
                self.rng.random_range(a..=b)
            } else {
                lo
            }
        };
        json!(v)
    }

    fn number(&mut self, obj: &Map<String, Value>) -> Value {
        let lo = bound(obj, "minimum").unwrap_or(-1e12);
        let hi = bound(obj, "maximum").unwrap_or(1e12);
        let edges = [
            0.0,
            -0.0,
            0.5,
            -1.5,
            1e-7,
            1e21,
            9_007_199_254_740_993.0,
            lo,
            hi,
        ];
        let v = if self.edge_first() || self.rng.random_bool(0.3) {
            edges[self.rng.random_range(0..edges.len())].clamp(lo, hi)
        } else if lo < hi {
            self.rng.random_range(lo..hi)
        } else {
            lo
        };
        Number::from_f64(v).map_or(Value::Null, Value::Number)
    }

    fn string(&mut self, obj: &Map<String, Value>) -> Value {
        let min = bound(obj, "minLength").map_or(0, |v| v as usize);
        let max = bound(obj, "maxLength")
            .map_or(4096, |v| v as usize)
            .max(min);
        let base = if self.edge_first() || self.rng.random_bool(0.4) {
            match self.rng.random_range(0..4) {
                0 => "x".repeat(max.min(4096)),
                1 => "x".repeat(min),
                _ => AWKWARD[self.rng.random_range(0..AWKWARD.len())].to_owned(),
            }
        } else {
            let len = self.rng.random_range(min..=max.min(min + 40));
            (0..len)
                .map(|_| char::from(self.rng.random_range(b'a'..=b'z')))
                .collect()
        };
        // Within the declared lengths, counted in characters as JSON Schema does.
        let mut s: String = base.chars().take(max).collect();
        while s.chars().count() < min {
            s.push('x');
        }
        Value::String(s)
    }

    fn array(&mut self, obj: &Map<String, Value>, depth: usize) -> Value {
        let min = bound(obj, "minItems").map_or(0, |v| v as usize);
        let max = bound(obj, "maxItems")
            .map_or(if depth > 2 { 1 } else { 5 }, |v| v as usize)
            .max(min);
        let len = if self.edge_first() && self.rng.random_bool(0.5) {
            if self.rng.random_bool(0.5) {
                min
            } else {
                max.min(50)
            }
        } else {
            self.rng.random_range(min..=max.min(min + 5))
        };
        let items = obj.get("items").cloned().unwrap_or(Value::Bool(true));
        Value::Array((0..len).map(|_| self.value(&items, depth + 1)).collect())
    }

    fn object(&mut self, obj: &Map<String, Value>, depth: usize) -> Value {
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out = Map::new();
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (name, schema) in props {
                if required.contains(&name.as_str()) || self.rng.random_bool(0.5) {
                    out.insert(name.clone(), self.value(schema, depth + 1));
                }
            }
        }
        for name in &required {
            if !out.contains_key(*name) {
                out.insert((*name).to_owned(), self.any(depth + 1));
            }
        }
        Value::Object(out)
    }
}

fn bound(obj: &Map<String, Value>, key: &str) -> Option<f64> {
    obj.get(key).and_then(Value::as_f64)
}

fn types_of(obj: &Map<String, Value>) -> Vec<String> {
    match obj.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

fn matches_type(v: &Value, types: &[String]) -> bool {
    types.iter().any(|t| match t.as_str() {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => false,
    })
}

/// Smaller inputs than `v`, simplest first: fields removed, strings and arrays cut, numbers
/// brought toward zero (halfway, and one step).
#[must_use]
pub fn shrink(v: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    match v {
        Value::Object(map) => {
            for key in map.keys() {
                let mut smaller = map.clone();
                smaller.remove(key);
                out.push(Value::Object(smaller));
            }
            for (key, inner) in map {
                for s in shrink(inner) {
                    let mut smaller = map.clone();
                    smaller.insert(key.clone(), s);
                    out.push(Value::Object(smaller));
                }
            }
        }
        Value::Array(items) => {
            if !items.is_empty() {
                out.push(Value::Array(Vec::new()));
                out.push(Value::Array(items[..items.len() / 2].to_vec()));
                out.push(Value::Array(items[1..].to_vec()));
            }
            for (i, inner) in items.iter().enumerate() {
                for s in shrink(inner) {
                    let mut smaller = items.clone();
                    smaller[i] = s;
                    out.push(Value::Array(smaller));
                }
            }
        }
        Value::String(s) if !s.is_empty() => {
            let chars: Vec<char> = s.chars().collect();
            out.push(json!(""));
            out.push(json!(chars[..chars.len() / 2].iter().collect::<String>()));
            out.push(json!(chars[1..].iter().collect::<String>()));
        }
        Value::Number(n) => {
            if let Some(i) = n.as_i64()
                && i != 0
            {
                // Toward zero by ever smaller steps (half, a quarter... one): taking the first
                // that still fails homes in on a boundary like a bisection.
                out.push(json!(0));
                for k in 1..64 {
                    let step = i / (1i64 << k.min(62));
                    if step == 0 {
                        break;
                    }
                    out.push(json!(i - step));
                }
                out.push(json!(i - i.signum()));
            } else if let Some(f) = n.as_f64()
                && f != 0.0
            {
                out.push(json!(0));
                if let Some(t) = Number::from_f64(f.trunc()).filter(|t| t.as_f64() != Some(f)) {
                    out.push(Value::Number(t));
                }
                if let Some(h) = Number::from_f64(f / 2.0) {
                    out.push(Value::Number(h));
                }
            }
        }
        Value::Bool(true) => out.push(json!(false)),
        _ => {}
    }
    out.retain(|s| s != v);
    out
}

/// What a fuzz campaign drives: an emulator in this process ([`Emulator`]), or a running
/// `triggers-lab up` through its control API ([`ControlClient`]). Errors are messages for the
/// user.
#[allow(async_fn_in_trait)] // the campaign runs on the caller's task: no `Send` bound needed
pub trait FuzzTarget {
    /// Every registered service's manifest, by name.
    async fn manifests(&self) -> Result<BTreeMap<String, Manifest>, String>;
    /// Deploys the campaign's flow.
    async fn deploy(&self, flow: Flow) -> Result<(), String>;
    /// Starts a run with exactly these JSON bytes; its id.
    async fn trigger(&self, flow_id: &str, payload: Vec<u8>) -> Result<String, String>;
    /// The run once settled; `None` when it has not within `timeout`.
    async fn settled(&self, run_id: &str, timeout: Duration) -> Option<Run>;
    /// The run's first DLQ entry (kind, error), waiting up to `timeout` for one.
    async fn dead_letter(&self, run_id: &str, timeout: Duration) -> Option<(String, String)>;
    /// The run in a line or two, for a failure's reason.
    async fn describe_run(&self, run_id: &str) -> String;
    /// Every conformance error so far (`rule: message`).
    async fn errors(&self) -> Vec<String>;
}

impl FuzzTarget for Emulator {
    async fn manifests(&self) -> Result<BTreeMap<String, Manifest>, String> {
        Ok(self
            .services()
            .into_iter()
            .map(|(name, s)| (name, s.manifest))
            .collect())
    }

    async fn deploy(&self, flow: Flow) -> Result<(), String> {
        Emulator::deploy(self, flow)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn trigger(&self, flow_id: &str, payload: Vec<u8>) -> Result<String, String> {
        self.trigger_bytes(flow_id, payload, TriggerOptions::default())
            .await
            .map(|r| r.0)
            .map_err(|e| e.to_string())
    }

    async fn settled(&self, run_id: &str, timeout: Duration) -> Option<Run> {
        self.with_wait_timeout(timeout)
            .wait_run_settled(run_id)
            .await
            .ok()
    }

    async fn dead_letter(&self, run_id: &str, timeout: Duration) -> Option<(String, String)> {
        self.with_wait_timeout(timeout)
            .wait_dlq(triggers_emulator::DlqFilter::run(run_id))
            .await
            .ok()
            .and_then(|r| r.entry)
            .map(|e| (e.kind, e.err_msg))
    }

    async fn describe_run(&self, run_id: &str) -> String {
        Emulator::describe_run(self, run_id).replace('\n', "; ")
    }

    async fn errors(&self) -> Vec<String> {
        self.violations()
            .into_iter()
            .filter(|v| v.severity == Severity::Error)
            .map(|v| format!("{}: {}", v.rule, v.message))
            .collect()
    }
}

/// How often a running `up` is asked whether a run has settled.
const POLL: Duration = Duration::from_millis(50);

impl FuzzTarget for ControlClient {
    async fn manifests(&self) -> Result<BTreeMap<String, Manifest>, String> {
        Ok(self
            .services()
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|(name, s)| (name, s.manifest))
            .collect())
    }

    async fn deploy(&self, flow: Flow) -> Result<(), String> {
        ControlClient::deploy(self, &flow)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn trigger(&self, flow_id: &str, payload: Vec<u8>) -> Result<String, String> {
        let text = String::from_utf8(payload).map_err(|e| e.to_string())?;
        self.trigger_json(flow_id, &text)
            .await
            .map_err(|e| e.to_string())
    }

    async fn settled(&self, run_id: &str, timeout: Duration) -> Option<Run> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Ok(run) = self.run(run_id).await
                && run.status.is_settled()
            {
                return Some(run);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn dead_letter(&self, run_id: &str, timeout: Duration) -> Option<(String, String)> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Ok(run) = self.run(run_id).await
                && let Some(&seq) = run.dlq.first()
            {
                let records = self.records(seq.saturating_sub(1), 1).await.ok()?;
                return records.into_iter().find_map(|r| match r.kind {
                    RecordKind::Dlq { entry: Some(e), .. } if r.seq == seq => {
                        Some((e.kind, e.err_msg))
                    }
                    _ => None,
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn describe_run(&self, run_id: &str) -> String {
        match self.run(run_id).await {
            Ok(run) => {
                let steps: Vec<String> = run.timeline.iter().map(ToString::to_string).collect();
                format!(
                    "run {run_id} {:?}, pending {:?}; {}",
                    run.status,
                    run.pending.keys().collect::<Vec<_>>(),
                    steps.join("; ")
                )
            }
            Err(e) => format!("run {run_id}: {e}"),
        }
    }

    async fn errors(&self) -> Vec<String> {
        self.violations()
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|v| v["severity"] == "error")
            .map(|v| {
                format!(
                    "{}: {}",
                    v["rule"].as_str().unwrap_or_default(),
                    v["message"].as_str().unwrap_or_default()
                )
            })
            .collect()
    }
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
    let results = jsonschema::validator_for(&result_schema).map_err(|e| {
        format!(
            "{}.{}'s result_schema is not a usable JSON Schema: {e}",
            config.service, config.action
        )
    })?;
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
        let input = if bad {
            match generator.invalid(&input_schema) {
                Some(v) => {
                    invalid_runs += 1;
                    v
                }
                None => generator.valid(&input_schema),
            }
        } else {
            generator.valid(&input_schema)
        };
        let expect_invalid = bad && !jsonschema::is_valid(&input_schema, &input);
        if let Err(reason) = probe.judge(&input, expect_invalid).await? {
            progress(FuzzProgress::Failed {
                run,
                reason: reason.clone(),
            });
            let mut minimal = input.clone();
            let mut why = reason;
            // Greedy shrinking, bounded: take the first smaller input that still fails, the
            // same way (a valid input stays valid), until none does.
            let mut budget = 600;
            'shrinking: while budget > 0 {
                for candidate in shrink(&minimal) {
                    budget -= 1;
                    if budget == 0 {
                        break 'shrinking;
                    }
                    let candidate_invalid = !jsonschema::is_valid(&input_schema, &candidate);
                    if candidate_invalid != expect_invalid {
                        continue;
                    }
                    if let Err(r) = probe.judge(&candidate, expect_invalid).await? {
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
            return Ok(FuzzReport {
                runs: run + 1,
                invalid_runs,
                seed: config.seed,
                failure: Some(FuzzFailure {
                    original: input,
                    minimal,
                    reason: why,
                    run,
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

struct Probe<'a, T> {
    lab: &'a T,
    flow_id: &'a str,
    sub: &'a mut async_nats::Subscriber,
    results: &'a jsonschema::Validator,
    timeout: Duration,
}

impl<T: FuzzTarget> Probe<'_, T> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_inputs_and_they_validate() {
        let schema = json!({
            "type": "object",
            "properties": {
                "id": {"type": "string", "maxLength": 8},
                "amount": {"type": "integer", "minimum": 1, "maximum": 500},
                "tags": {"type": "array", "items": {"type": "string"}},
                "kind": {"enum": ["a", "b"]},
                "note": {"type": ["string", "null"]}
            },
            "required": ["id", "amount"],
            "additionalProperties": false
        });
        let (mut a, mut b) = (Generator::new(7), Generator::new(7));
        for _ in 0..300 {
            let (x, y) = (a.valid(&schema), b.valid(&schema));
            assert_eq!(x, y);
            assert!(jsonschema::is_valid(&schema, &x), "{x}");
        }
    }

    #[test]
    fn boundary_values_come_early() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 100}}, "required": ["n"]});
        let mut g = Generator::new(1);
        let seen: Vec<i64> = (0..40)
            .map(|_| g.valid(&schema)["n"].as_i64().unwrap())
            .collect();
        assert!(seen.contains(&100) && seen.contains(&0), "{seen:?}");
    }

    #[test]
    fn invalid_inputs_break_the_schema() {
        let schema =
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        let mut g = Generator::new(3);
        for _ in 0..100 {
            let v = g.invalid(&schema).expect("the schema refuses something");
            assert!(!jsonschema::is_valid(&schema, &v), "{v}");
        }
        assert!(g.invalid(&json!({})).is_none());
    }

    #[test]
    fn shrinking_goes_toward_small_values() {
        assert!(shrink(&json!(1000)).contains(&json!(500)));
        assert!(shrink(&json!(1000)).contains(&json!(999)));
        assert!(shrink(&json!({"a": 1, "b": "xy"})).contains(&json!({"b": "xy"})));
        assert!(shrink(&json!("")).is_empty());
        assert!(shrink(&json!(0)).is_empty());
    }
}
