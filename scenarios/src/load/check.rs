//! Checking what the parser cannot: names that must exist, one outcome per behavior, values that
//! would panic a library later... Every service, action, flow, stub and step is checked, each
//! reporting its first problem at its line and column. A step's own checks are its kind's
//! (`crate::steps`); what spans steps (the nodes of a named run's flow) is here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;
use serde_saphyr::Spanned;
use triggers_sdk::flow::Flow;
use triggers_sdk::runtime::check_action;
use triggers_sdk::wire::{ResultEvent, subject};

use super::{DEFAULT_STEP_TIMEOUT, DEFAULT_TIMEOUT, FlowDef, MAX_REPLICAS, Scenario, StepAt};
use crate::error::LoadError;
use crate::model::{ActionSpec, Behavior, ScenarioFile, ServiceSpec, Step, StubSpec};
use crate::steps::{CheckCx, mean};
use crate::vars;

pub(crate) struct Checker<'a> {
    file: &'a str,
    base_dir: &'a Path,
    /// What the pieces left out of the check (they could not be read) name: the services,
    /// flows, stubs and runs that the rest uses are not missing.
    pub(crate) elided_names: BTreeSet<String>,
    /// Steps were left out of the check, so no steps is not a problem of its own.
    pub(crate) steps_elided: bool,
}

/// The flows of a file, as read and checked.
#[derive(Default)]
struct Flows {
    defs: Vec<FlowDef>,
    /// Every flow's id, those with a problem included.
    ids: BTreeSet<String>,
    /// Each flow's node ids.
    nodes: BTreeMap<String, Vec<String>>,
}

impl Flows {
    /// What is wrong with `node` of `run` (of flow `flow`, when the run's trigger named one of
    /// the file), when that flow has no such node.
    fn lacks_node(&self, flow: Option<&String>, run: &str, node: &str) -> Option<String> {
        let flow = flow?;
        let nodes = self.nodes.get(flow)?;
        if node.contains("${") || nodes.iter().any(|n| n == node) {
            return None;
        }
        Some(format!(
            "no node {node:?} in flow {flow:?} of run {run:?}{} (its nodes: {})",
            mean(node, nodes.iter().map(String::as_str)),
            nodes.join(", ")
        ))
    }
}

/// What the steps may name: the rest of the file, checked.
struct Known<'a> {
    flows: &'a Flows,
    services: &'a [ServiceSpec],
    stubs: &'a BTreeSet<String>,
    nats_nodes: usize,
}

fn pos<T>(s: &Spanned<T>) -> (u64, u64) {
    (s.referenced.line(), s.referenced.column())
}

impl<'a> Checker<'a> {
    pub(crate) fn new(file: &'a str, base_dir: &'a Path) -> Self {
        Checker {
            file,
            base_dir,
            elided_names: BTreeSet::new(),
            steps_elided: false,
        }
    }

    fn err(&self, at: (u64, u64), message: impl Into<String>) -> LoadError {
        LoadError::at(self.file, at.0, at.1, message)
    }

    pub(crate) fn check(&self, raw: ScenarioFile) -> Result<Scenario, Vec<LoadError>> {
        // Every item is checked, each reporting its first problem: one bad service does not
        // hide the next one's.
        let mut errors = Vec::new();
        let (http_stubs, mut stub_names) = self.check_stubs(&raw.http_stubs, &mut errors);
        stub_names.extend(self.elided_names.iter().cloned());
        let services = self.check_services(&raw.services, &mut errors);
        let flows = self.check_flows(&raw.flows, &stub_names, &mut errors);
        let known = Known {
            flows: &flows,
            services: &services,
            stubs: &stub_names,
            nats_nodes: raw.nats.nodes(),
        };
        let steps = self.check_steps(&raw.steps, &known, &mut errors);
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Scenario {
            name: raw.name.clone().unwrap_or_else(|| self.name_from_file()),
            file: self.file.to_owned(),
            base_dir: self.base_dir.to_path_buf(),
            description: raw.description.unwrap_or_default(),
            timeout: raw.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0),
            step_timeout: raw.step_timeout.map_or(DEFAULT_STEP_TIMEOUT, |d| d.0),
            conformance: raw.conformance,
            emulator: raw.emulator,
            nats: raw.nats,
            http_stubs,
            services,
            flows: flows.defs,
            steps,
        })
    }

    /// The scenario's name when the file gives none: the file name without its extension.
    fn name_from_file(&self) -> String {
        let file_name = Path::new(self.file)
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.file.to_owned());
        crate::discover::SCENARIO_SUFFIXES
            .iter()
            .chain(&[".yaml", ".yml"])
            .find_map(|s| file_name.strip_suffix(s).filter(|n| !n.is_empty()))
            .map_or_else(|| file_name.clone(), str::to_owned)
    }

    /// The HTTP stubs, and their names.
    fn check_stubs(
        &self,
        raw: &[Spanned<StubSpec>],
        errors: &mut Vec<LoadError>,
    ) -> (Vec<StubSpec>, BTreeSet<String>) {
        let mut stubs = Vec::new();
        let mut names = BTreeSet::new();
        for s in raw {
            if !names.insert(s.value.name.clone()) {
                errors.push(self.err(
                    pos(s),
                    format!("a second HTTP stub named {:?}", s.value.name),
                ));
                continue;
            }
            if !s.value.path.starts_with('/') {
                errors.push(self.err(
                    pos(s),
                    format!("stub path {:?} must start with /", s.value.path),
                ));
            } else if let Err(m) = check_stub(&s.value) {
                errors.push(self.err(pos(s), m));
            }
            stubs.push(s.value.clone());
        }
        (stubs, names)
    }

    /// The services, each once.
    fn check_services(
        &self,
        raw: &[Spanned<ServiceSpec>],
        errors: &mut Vec<LoadError>,
    ) -> Vec<ServiceSpec> {
        let mut services = Vec::new();
        let mut names = BTreeSet::new();
        for s in raw {
            self.check_service(s, errors);
            if !names.insert(s.value.name.clone()) {
                errors.push(self.err(pos(s), format!("a second service named {:?}", s.value.name)));
                continue;
            }
            services.push(s.value.clone());
        }
        services
    }

    /// The flows, their ids (a flow with a problem still has its id: steps that deploy it are
    /// not wrong as well) and their nodes.
    fn check_flows(
        &self,
        raw: &[Spanned<Value>],
        stub_names: &BTreeSet<String>,
        errors: &mut Vec<LoadError>,
    ) -> Flows {
        let mut flows = Flows::default();
        for f in raw {
            match self.check_flow(f, stub_names) {
                Ok(def) => {
                    let nodes = node_ids(&def.value);
                    errors.extend(
                        edge_problems(&def, &nodes)
                            .into_iter()
                            .map(|m| self.err(pos(f), m)),
                    );
                    flows.nodes.insert(def.id.clone(), nodes);
                    if !flows.ids.insert(def.id.clone()) {
                        errors
                            .push(self.err(pos(f), format!("a second flow with id {:?}", def.id)));
                    }
                    flows.defs.push(def);
                }
                Err(mut e) => {
                    if let Some(id) = f.value.get("id").and_then(Value::as_str) {
                        flows.ids.insert(id.to_owned());
                    }
                    errors.append(&mut e);
                }
            }
        }
        flows
    }

    /// The steps, each by its kind's checks, in order: a step may use only the runs that the
    /// triggers before it named, and a node of a named run's flow.
    fn check_steps(
        &self,
        raw: &[Spanned<Step>],
        known: &Known<'_>,
        errors: &mut Vec<LoadError>,
    ) -> Vec<StepAt> {
        if raw.is_empty() && !self.steps_elided {
            errors.push(LoadError::file(
                self.file,
                "`steps` is empty: a scenario needs at least one step",
            ));
        }
        let flow_ids: BTreeSet<&str> = known.flows.ids.iter().map(String::as_str).collect();
        let mut runs = self.elided_names.clone();
        let mut downed = BTreeSet::new();
        // The flow of each named run: a step's node must be one of its run's flow (a typo
        // would wait its whole timeout, or pass vacuously).
        let mut run_flow: BTreeMap<String, String> = BTreeMap::new();
        let mut steps = Vec::new();
        for s in raw {
            let kind = s.value.kind();
            let mut cx = CheckCx {
                flows: &flow_ids,
                services: known.services,
                stubs: known.stubs,
                nats_nodes: known.nats_nodes,
                elided: &self.elided_names,
                runs: &mut runs,
                downed: &mut downed,
            };
            if let Err(message) = kind.check(&mut cx) {
                errors.push(self.err(pos(s), message));
            }
            for (run, node) in kind.nodes_named() {
                if let Some(message) = known.flows.lacks_node(run_flow.get(run), run, node) {
                    errors.push(self.err(pos(s), message));
                }
            }
            if let Some((name, flow)) = kind.run_named() {
                run_flow.insert(name.to_owned(), flow.to_owned());
            }
            steps.push(StepAt {
                step: s.value.clone(),
                line: s.referenced.line(),
                column: s.referenced.column(),
            });
        }
        steps
    }

    fn check_service(&self, s: &Spanned<ServiceSpec>, errors: &mut Vec<LoadError>) {
        if let Err(e) = self.check_service_itself(s) {
            errors.push(e);
            return;
        }
        let mut names = BTreeSet::new();
        for a in &s.value.actions {
            if !names.insert(a.value.name.clone()) {
                errors.push(self.err(pos(a), format!("a second action named {:?}", a.value.name)));
            } else if let Err(e) = self.check_action(&s.value.name, a) {
                errors.push(e);
            }
        }
    }

    /// The service's own keys, not its actions.
    fn check_service_itself(&self, s: &Spanned<ServiceSpec>) -> Result<(), LoadError> {
        let spec = &s.value;
        let at = pos(s);
        subject::check_service(&spec.name)
            .map_err(|e| self.err(at, format!("service name {:?}: {e}", spec.name)))?;
        if let Some(stream) = &spec.source_stream {
            subject::stream_name(&spec.name, Some(stream))
                .map_err(|e| self.err(at, format!("source_stream: {e}")))?;
        }
        if let Some(command) = &spec.command {
            if command.is_empty() || command[0].trim().is_empty() {
                return Err(self.err(at, "`command` is empty: give the program and its arguments"));
            }
            let scripted = [
                ("version", spec.version.is_some()),
                ("replicas", spec.replicas.is_some()),
                ("capabilities", !spec.capabilities.is_empty()),
                ("supports_nodes", spec.supports_nodes.is_some()),
                ("sources", spec.sources.is_some()),
                ("source_stream", spec.source_stream.is_some()),
                ("actions", !spec.actions.is_empty()),
            ];
            if let Some((key, _)) = scripted.iter().find(|(_, set)| *set) {
                return Err(self.err(
                    at,
                    format!(
                        "service {:?} has a `command`, so it is external: `{key}` belongs to scripted services (its program declares its own)",
                        spec.name
                    ),
                ));
            }
            return Ok(());
        }
        let external = [
            ("env", !spec.env.is_empty()),
            ("cwd", spec.cwd.is_some()),
            ("ready", spec.ready.is_some()),
            ("ready_timeout", spec.ready_timeout.is_some()),
        ];
        if let Some((key, _)) = external.iter().find(|(_, set)| *set) {
            return Err(self.err(
                at,
                format!(
                    "service {:?} has no `command`, so it is scripted: `{key}` belongs to external services",
                    spec.name
                ),
            ));
        }
        if spec.replicas == Some(0) {
            return Err(self.err(at, "`replicas` must be at least 1"));
        }
        if let Some(n) = spec.replicas
            && n > MAX_REPLICAS
        {
            return Err(self.err(
                at,
                format!(
                    "`replicas: {n}` is too many: at most {MAX_REPLICAS} (each replica is a service runtime with its own NATS connection in this process)"
                ),
            ));
        }
        if let Some(sources) = &spec.sources
            && sources.is_empty()
        {
            return Err(self.err(at, "`sources` is empty: a service needs a NATS source (leave the key out for <name>.inbound)"));
        }
        Ok(())
    }

    fn check_action(&self, service: &str, a: &Spanned<ActionSpec>) -> Result<(), LoadError> {
        let at = pos(a);
        let spec = &a.value;
        subject::check_action(&spec.name)
            .map_err(|e| self.err(at, format!("action name {:?}: {e}", spec.name)))?;
        check_action(spec.timeout(), &spec.retry())
            .map_err(|e| self.err(at, format!("action {:?}: {e}", spec.name)))?;
        let b = &spec.behavior;
        let outcomes = outcomes(b);
        if outcomes.len() > 1 {
            return Err(self.err(
                at,
                format!(
                    "action {:?}: the behavior has {} outcomes ({}); give one of return, echo, map, fail, panic",
                    spec.name,
                    outcomes.len(),
                    outcomes.join(", ")
                ),
            ));
        }
        if b.echo == Some(false) {
            return Err(self.err(
                at,
                format!(
                    "action {:?}: `echo: false` means nothing; leave it out, or give another outcome",
                    spec.name
                ),
            ));
        }
        if let Some(cond) = &b.fail_if
            && !cond.contains_key("op")
        {
            return Err(self.err(
                at,
                format!(
                    "action {:?}: `fail_if` needs an `op` (eq, ne, gt, gte, lt, lte, in, exists, not_exists, truthy, falsy)",
                    spec.name
                ),
            ));
        }
        for (what, schema) in [("input", &spec.input), ("result", &spec.result)] {
            if let Some(s) = schema
                && !s.is_object()
            {
                return Err(self.err(
                    at,
                    format!(
                        "action {:?}: `{what}` must be a JSON Schema object",
                        spec.name
                    ),
                ));
            }
        }
        if spec.result_event == crate::model::ResultEventSpec::Auto
            && let Some(Value::Object(schema)) = &spec.result
        {
            let normalised = triggers_sdk::wire::schema::normalize(&Value::Object(schema.clone()))
                .map_err(|e| self.err(at, format!("action {:?}: result schema: {e}", spec.name)))?;
            ResultEvent::derive(service, &spec.name, &normalised).map_err(|e| {
                self.err(
                    at,
                    format!("action {:?}: {e}; add `result_event: off`", spec.name),
                )
            })?;
        }
        Ok(())
    }

    fn check_flow(
        &self,
        f: &Spanned<Value>,
        stubs: &BTreeSet<String>,
    ) -> Result<FlowDef, Vec<LoadError>> {
        let at = pos(f);
        let (value, origin, file_name) = match &f.value {
            Value::Object(map) if map.contains_key("file") => {
                if map.len() > 1 {
                    let extra: Vec<&String> = map.keys().filter(|k| *k != "file").collect();
                    return Err(vec![self.err(
                        at,
                        format!("a flow given by `file` takes no other keys (found {extra:?})"),
                    )]);
                }
                let Some(rel) = map.get("file").and_then(Value::as_str) else {
                    return Err(vec![self.err(at, "`file` must be a path")]);
                };
                let path = self.base_dir.join(rel);
                let shown = path.display().to_string();
                let bytes = crate::input::read_input(&path).map_err(|e| {
                    vec![self.err(at, format!("cannot read the flow file {shown}: {e}"))]
                })?;
                let text = crate::error::utf8_text(&shown, bytes).map_err(|e| vec![e])?;
                // As `triggers-lab deploy` reads it: every key checked, at its own line.
                let value = crate::flowfile::read_flow_value(&shown, &text)?;
                (value, shown.clone(), Some(shown))
            }
            Value::Object(_) => {
                let mut value = f.value.clone();
                if let Some((_, message)) = crate::flowfile::timer_delays(&mut value).pop() {
                    return Err(vec![self.err(at, message)]);
                }
                (value, format!("{}:{}:{}", self.file, at.0, at.1), None)
            }
            _ => {
                return Err(vec![self.err(
                    at,
                    "a flow is `{file: path}` or a flow written inline ({id, nodes, edges})",
                )]);
            }
        };
        let fail = |message: String| match &file_name {
            Some(name) => LoadError::file(name, message),
            None => self.err(at, message),
        };
        let problems = crate::flowfile::key_problems(&value);
        if !problems.is_empty() {
            return Err(problems.into_iter().map(|(_, m)| fail(m)).collect());
        }
        let probe = vars::substitute(&value, &|name| {
            // `--var` values are known only when the scenario runs.
            if name.strip_prefix("vars.").is_some_and(|v| !v.is_empty()) {
                return Some("var".to_owned());
            }
            let stub = name.strip_prefix("stubs.")?.strip_suffix(".url")?;
            stubs
                .contains(stub)
                .then(|| format!("http://127.0.0.1:9/{stub}"))
        })
        .map_err(|e| vec![fail(format!("{e} (declare it under http_stubs)"))])?;
        let flow: Flow = serde_path_to_error::deserialize(probe).map_err(|e| {
            vec![fail(format!(
                "not a flow: {}{}",
                e.inner(),
                at_path(&e.path().to_string())
            ))]
        })?;
        if flow.version < 1 {
            return Err(vec![fail(format!(
                "flow {:?}: version: is {}, must be 1 or more (leave it out for 1; a redeploy gets the next)",
                flow.id, flow.version
            ))]);
        }
        Ok(FlowDef {
            id: flow.id,
            value,
            origin,
            file: file_name.map(PathBuf::from),
        })
    }
}

/// The ids of a flow's nodes.
fn node_ids(flow: &Value) -> Vec<String> {
    flow.get("nodes")
        .and_then(Value::as_array)
        .map(|nodes| {
            nodes
                .iter()
                .filter_map(|n| n.get("id").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Edges of a flow that start or end at a node it lacks.
fn edge_problems(def: &FlowDef, nodes: &[String]) -> Vec<String> {
    let Some(edges) = def.value.get("edges").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    for edge in edges {
        let id = edge.get("id").and_then(Value::as_str).unwrap_or("?");
        for end in ["from", "to"] {
            if let Some(node) = edge.get(end).and_then(Value::as_str)
                && !node.contains("${")
                && !nodes.iter().any(|n| n == node)
            {
                problems.push(format!(
                    "flow {:?}: edge {id:?} goes {end} {node:?}, which is not a node of the flow{} (its nodes: {})",
                    def.id,
                    mean(node, nodes.iter().map(String::as_str)),
                    nodes.join(", ")
                ));
            }
        }
    }
    problems
}

/// ` at <path>` for a serde path, nothing for the root.
pub(crate) fn at_path(path: &str) -> String {
    if path == "." {
        String::new()
    } else {
        format!(" at {path}")
    }
}

/// What wiremock would panic on when the stub is mounted: an unknown status or method, a `?` in
/// the path.
fn check_stub(stub: &StubSpec) -> Result<(), String> {
    // What `http::StatusCode::from_u16` (wiremock's conversion) accepts.
    if !(100..=999).contains(&stub.status) {
        return Err(format!(
            "stub {:?}: status: is {}, must be an HTTP status from 100 to 999",
            stub.name, stub.status
        ));
    }
    let method = stub.method.to_ascii_uppercase();
    if method.is_empty() || wiremock::http::Method::from_bytes(method.as_bytes()).is_err() {
        return Err(format!(
            "stub {:?}: method: {:?} is not an HTTP method (GET, POST, PUT, ...)",
            stub.name, stub.method
        ));
    }
    if stub.path.contains('?') {
        return Err(format!(
            "stub {:?}: path: {:?} has a query (`?`); a stub answers a path, without its query",
            stub.name, stub.path
        ));
    }
    Ok(())
}

/// The outcome keys a behavior sets.
pub(crate) fn outcomes(b: &Behavior) -> Vec<&'static str> {
    [
        ("return", b.returns.is_some()),
        ("echo", b.echo.is_some()),
        ("map", b.map.is_some()),
        ("fail", b.fail.is_some()),
        ("panic", b.panic.is_some()),
    ]
    .into_iter()
    .filter(|(_, set)| *set)
    .map(|(k, _)| k)
    .collect()
}
