//! Reading scenario files: parsing them (YAML 1.2 booleans, unknown and duplicate
//! keys refused) and checking what the parser cannot (names that must exist, one outcome per
//! behavior...), every error with file, line and column.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use serde_saphyr::Spanned;
use triggers_emulator::ReleaseCode;
use triggers_emulator::conformance::RULES;
use triggers_sdk::flow::Flow;
use triggers_sdk::runtime::check_action;
use triggers_sdk::transport::check_header;
use triggers_sdk::wire::{Manifest, ResultEvent, subject};

use crate::error::{LoadError, LoadErrors};
use crate::model::{
    ActionSpec, Behavior, Conformance, EmulatorSpec, NatsSpec, NodeRef, ScenarioFile, ServiceSpec,
    Short, Step, StubSpec,
};
use crate::vars;

/// The most replicas a scripted service may have: each is a runtime with its own connection,
/// started one after another, in the runner's process.
pub(crate) const MAX_REPLICAS: u32 = 64;

/// The whole scenario's default time limit.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// A waiting step's default time limit.
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// A scenario, read and checked.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Its name (the file's `name`, else the file name without extension).
    pub name: String,
    /// The file it came from, as given.
    pub file: String,
    /// The folder relative paths are resolved against (the file's).
    pub base_dir: PathBuf,
    /// What it checks.
    pub description: String,
    /// The time limit of its steps, all together.
    pub timeout: Duration,
    /// The default time limit of one waiting step.
    pub step_timeout: Duration,
    /// Which violations fail it.
    pub conformance: Conformance,
    /// Emulator settings.
    pub emulator: EmulatorSpec,
    /// The nats-server: one, or a cluster.
    pub nats: NatsSpec,
    /// HTTP stubs.
    pub http_stubs: Vec<StubSpec>,
    /// Services.
    pub services: Vec<ServiceSpec>,
    /// Flows, as JSON (`${...}` not yet replaced).
    pub flows: Vec<FlowDef>,
    /// Steps, each with its position.
    pub steps: Vec<StepAt>,
}

/// A flow of a scenario.
#[derive(Debug, Clone)]
pub struct FlowDef {
    /// Its id.
    pub id: String,
    /// The flow, as JSON; `${stubs.<name>.url}` is replaced when the scenario runs.
    pub value: Value,
    /// Where it was written: `file:line:col`, or the flow file.
    pub origin: String,
    /// The flow file it was read from (`flows: [{file: ...}]`), resolved against the
    /// scenario's folder; `None` for a flow written inline.
    pub file: Option<PathBuf>,
}

impl Scenario {
    /// The files this scenario names, which `run` reads or a service it starts runs: its flow
    /// files, its load steps' `payloads_file`s, and the files its services' commands name (an
    /// argument, or the program, that is a file in the command's folder). What `run --watch`
    /// watches beside the scenario itself.
    #[must_use]
    pub fn files_named(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self.flows.iter().filter_map(|f| f.file.clone()).collect();
        for s in &self.steps {
            if let Step::Load(l) = &s.step
                && let Some(file) = &l.payloads_file
            {
                out.push(self.base_dir.join(file));
            }
        }
        for service in &self.services {
            let cwd = match &service.cwd {
                Some(dir) => self.base_dir.join(dir),
                None => self.base_dir.clone(),
            };
            for word in service.command.iter().flatten() {
                let path = cwd.join(word);
                if path.is_file() {
                    out.push(path);
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

/// A step and where it was written.
#[derive(Debug, Clone)]
pub struct StepAt {
    /// The step.
    pub step: Step,
    /// 1-based line of the step in the scenario file.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
}

/// What is wrong with an `expect_dlq` step's `kind` or `subject`, when it names a kind no SDK
/// writes, or an action a scripted service of the scenario does not have.
fn dlq_filter_problem(d: &crate::model::ExpectDlqStep, services: &[ServiceSpec]) -> Option<String> {
    use triggers_sdk::wire::shapes::dlq_kind;
    use triggers_sdk::wire::subject::FallbackKind;
    let kinds: Vec<&str> = dlq_kind::ALL
        .into_iter()
        .chain(FallbackKind::ALL.map(FallbackKind::as_str))
        .collect();
    if let Some(kind) = &d.kind
        && !kinds.contains(&kind.as_str())
    {
        let hint = crate::flowfile::did_you_mean(kind, &kinds)
            .map(|k| format!(" (did you mean `{k}`?)"))
            .unwrap_or_default();
        return Some(format!(
            "kind `{kind}` is no DLQ kind{hint}; the kinds are {}",
            kinds.join(", ")
        ));
    }
    let subject = d.subject.as_deref()?;
    if subject.contains("${") {
        return None;
    }
    let rest = subject.strip_prefix(subject::DLQ_PREFIX)?;
    let (service, last) = rest.split_once('.')?;
    // `triggers.v2.dlq.source.<id>` is the orchestrator's, not a service's.
    if service == "*" || service == ">" || service == "source" {
        return None;
    }
    // A misspelt service segment matches nothing either: only the services of the file publish.
    if !services.iter().any(|s| s.name == service) {
        let names: Vec<&str> = services.iter().map(|s| s.name.as_str()).collect();
        let hint = crate::flowfile::did_you_mean(service, &names)
            .map(|n| format!(" (did you mean `{}{n}.{last}`?)", subject::DLQ_PREFIX))
            .unwrap_or_default();
        return Some(format!(
            "subject `{subject}` names service {service:?}, which is not in `services`{hint}: no entry can arrive there"
        ));
    }
    let spec = services
        .iter()
        .find(|s| s.name == service && !s.is_external())?;
    let mut names: Vec<&str> = spec.actions.iter().map(|a| a.value.name.as_str()).collect();
    names.extend(FallbackKind::ALL.map(FallbackKind::as_str));
    if names.contains(&last) {
        return None;
    }
    let hint = crate::flowfile::did_you_mean(last, &names)
        .map(|n| format!(" (did you mean `{}{service}.{n}`?)", subject::DLQ_PREFIX))
        .unwrap_or_default();
    Some(format!(
        "subject `{subject}` names neither an action of {service} nor a fallback kind{hint}: no entry can arrive there"
    ))
}

/// The most YAML nodes a file may hold: room for the largest flow release accepts (20 000
/// nodes, 40 000 edges: about 700 000 YAML nodes); still a bound.
const YAML_MAX_NODES: usize = 2_000_000;
/// The most parser events a file may produce.
const YAML_MAX_EVENTS: usize = 4_000_000;
/// The most text a file's values (scalars) may hold in all: 64 MiB, the parser's own default,
/// named here so that a refusal can say it.
const YAML_MAX_SCALAR_BYTES: usize = 64 * 1024 * 1024;

/// YAML options: YAML 1.2 booleans only (`yes` is a string), duplicate keys refused.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        duplicate_keys: serde_saphyr::options::DuplicateKeyPolicy::Error,
        budget: serde_saphyr::budget! {
            max_nodes: YAML_MAX_NODES,
            max_events: YAML_MAX_EVENTS,
            max_total_scalar_bytes: YAML_MAX_SCALAR_BYTES,
        },
    }
}

/// Parses YAML (or JSON, which is YAML) text, errors as `name:line:col: message`.
pub(crate) fn parse_yaml<T: serde::de::DeserializeOwned>(
    name: &str,
    text: &str,
) -> Result<T, LoadError> {
    // The path names the key a value belongs to (`steps[2].timeout`): the parser's own message
    // does not, and "is negative" alone would not say which of a step's durations is.
    let mut path = String::new();
    serde_saphyr::with_deserializer_from_str_with_options(text, yaml_options(), |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = key_path(&e.path().to_string());
            e.into_inner()
        })
    })
    .map_err(|e| {
        let mut message = crate::flowfile::suggest_in_message(&plain_words(&strip_position(
            &e.without_snippet().to_string(),
        )));
        if message.starts_with("non-finite float") {
            message.push_str(": write a finite number (or a duration such as 10s)");
        }
        let message = if path.is_empty() {
            message
        } else {
            format!("{}: {message}", clip_path(&path))
        };
        // The parser's words on a structure error name no line that is out of place: find it.
        if crate::indent::is_structure_error(&message)
            && let Some(m) = e
                .location()
                .and_then(|l| crate::indent::misplaced(text, l.line()))
        {
            return LoadError::at(
                name,
                m.line,
                m.column,
                format!("{} (the YAML parser: {message})", m.message),
            );
        }
        match e.location() {
            Some(l) => LoadError::at(name, l.line(), l.column(), message),
            None => LoadError::file(name, message),
        }
    })
}

/// Parses a file users write (a flow, a payload) as YAML, or JSON, which is YAML; errors as
/// `name:line:col: message`, a JSON-looking text's syntax error in JSON's own words and place
/// (`not JSON: key must be a string`), not YAML's.
///
/// # Errors
/// The first problem, at its line and column.
pub fn parse_document<T: serde::de::DeserializeOwned>(
    name: &str,
    text: &str,
) -> Result<T, LoadError> {
    parse_yaml(name, text).map_err(|e| crate::flowfile::json_error(name, text).unwrap_or(e))
}

/// A serde path as the file's keys: without the root's `.`, and without the `value` of the
/// position-keeping wrapper around list items (`steps[0].value.sleep` is `steps[0].sleep`).
fn key_path(path: &str) -> String {
    // `?`: the parser stopped before any key (a syntax error), so there is no path to name.
    if path == "." || path == "?" {
        return String::new();
    }
    // `services[0].?`: the parser stopped before it knew the key.
    path.trim_end_matches(".?").replace("].value", "]")
}

/// The YAML parser's messages that speak to a programmer using it (`set DuplicateKeyPolicy in
/// Options`, `use Option<String>`, `Depth { depth: 65 }`), in the words of the file's writer.
fn plain_words(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("duplicate mapping key: ") {
        let key = rest
            .split(", set DuplicateKeyPolicy")
            .next()
            .unwrap_or(rest);
        return format!("duplicate key `{key}`: a key may be given once in a mapping");
    }
    if message.starts_with("multiple YAML documents detected") {
        return "more than one YAML document (a `---` line after the first): a file holds one"
            .into();
    }
    if let Some(rest) = message.strip_prefix("cannot deserialize null into ") {
        let what = rest.split("; use Option<").next().unwrap_or(rest);
        return format!("empty (null) where a {what} is needed: write a value");
    }
    if let Some(rest) = message.strip_prefix("budget breached: ") {
        let number = |field: &str| {
            rest.split_once(field)
                .and_then(|(_, n)| n.trim_start_matches(": ").split(' ').next())
                .and_then(|n| n.parse::<u64>().ok())
        };
        if let Some(depth) = number("depth") {
            return format!(
                "nested too deeply ({depth} levels): a file may nest at most {} levels",
                depth.saturating_sub(1)
            );
        }
        // Each bound in its own words: a file of five nodes holding one huge value is not
        // "over 2000000 YAML nodes".
        if rest.starts_with("ScalarBytes") {
            return format!(
                "the file's values hold more than {} MiB of text in all (one long string, or \
                 many): a scenario or flow needs far less; move the data out of the file",
                YAML_MAX_SCALAR_BYTES >> 20
            );
        }
        if rest.starts_with("Nodes") {
            return format!(
                "the file holds more than {YAML_MAX_NODES} YAML nodes (values, lists and \
                 mappings): split it"
            );
        }
        if rest.starts_with("Events") {
            return format!(
                "the file is too large to read (more than {YAML_MAX_EVENTS} YAML parser events): \
                 split it"
            );
        }
        return format!("the file is too large to read ({rest}): split it");
    }
    message.to_owned()
}

/// A key path cut to a readable length (a deeply nested value's path runs to hundreds of keys).
fn clip_path(path: &str) -> String {
    const KEEP: usize = 80;
    match path.char_indices().nth(KEEP) {
        Some((at, _)) => format!("{}…", &path[..at]),
        None => path.to_owned(),
    }
}

pub(crate) fn strip_position(message: &str) -> String {
    // The parser appends the position in words; the error puts it in front as file:line:col.
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

/// Reads and checks one scenario file.
///
/// # Errors
/// Every problem found, each with file, line and column (see [`load_str`]).
pub fn load_file(path: &Path) -> Result<Scenario, LoadErrors> {
    let name = path.display().to_string();
    let text = crate::input::read_text_file(path)?;
    // A bare file name's parent is the empty path: as a service's working folder that is no
    // folder at all ("cannot start service ... in ''"), so it is the current one, `.`.
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    load_str(&name, &text, &base)
}

/// Reads and checks a scenario from text; `file` names it in errors and reports, `base_dir` is
/// where its relative paths start.
///
/// # Errors
/// Every problem found, in the order of the file, each with file, line and column: every
/// service, action, flow, stub and step is checked even when an earlier one is wrong. A YAML
/// syntax error is the one exception: what follows it cannot be read, so it comes alone.
pub fn load_str(file: &str, text: &str, base_dir: &Path) -> Result<Scenario, LoadErrors> {
    let errors = match parse_yaml::<ScenarioFile>(file, text) {
        Ok(raw) => match Checker::new(file, base_dir).check(raw) {
            Ok(scenario) => return Ok(scenario),
            Err(errors) => errors,
        },
        Err(first) => crate::recover::every_problem(file, text, base_dir, first),
    };
    Err(LoadErrors(in_file_order(file, errors)))
}

/// The scenario file's own problems by position (those without one last), then those of the
/// flow files it names, each file's in the order found.
fn in_file_order(file: &str, mut errors: Vec<LoadError>) -> Vec<LoadError> {
    errors.sort_by_key(|e| (e.file != file, e.line == 0, e.line, e.column));
    errors.dedup();
    errors
}

pub(crate) struct Checker<'a> {
    file: &'a str,
    base_dir: &'a Path,
    /// What the pieces left out of the check (they could not be read) name: the services,
    /// flows, stubs and runs that the rest uses are not missing.
    pub(crate) elided_names: BTreeSet<String>,
    /// Steps were left out of the check, so no steps is not a problem of its own.
    pub(crate) steps_elided: bool,
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

    /// A step's service must be one of the file's `services`.
    fn declared(
        &self,
        name: &str,
        ctx: &StepCtx<'_>,
        at: (u64, u64),
        step: &str,
    ) -> Result<(), LoadError> {
        if ctx.services.iter().any(|s| s.name == name) {
            return Ok(());
        }
        Err(self.err(
            at,
            format!(
                "{step}: no service {name:?} in `services`{}",
                mean(name, self.service_names(ctx))
            ),
        ))
    }

    /// The services' names, with those of services that could not be read.
    fn service_names<'s>(&'s self, ctx: &'s StepCtx<'_>) -> impl Iterator<Item = &'s str> {
        ctx.services
            .iter()
            .map(|s| s.name.as_str())
            .chain(self.elided_names.iter().map(String::as_str))
    }

    pub(crate) fn check(&self, raw: ScenarioFile) -> Result<Scenario, Vec<LoadError>> {
        let name = raw.name.clone().unwrap_or_else(|| {
            let file_name = Path::new(self.file)
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| self.file.to_owned());
            crate::discover::SCENARIO_SUFFIXES
                .iter()
                .chain(&[".yaml", ".yml"])
                .find_map(|s| file_name.strip_suffix(s).filter(|n| !n.is_empty()))
                .map_or_else(|| file_name.clone(), str::to_owned)
        });
        // Every item is checked, each reporting its first problem: one bad service does not
        // hide the next one's.
        let mut errors = Vec::new();
        let mut stubs = Vec::new();
        let mut stub_names = BTreeSet::new();
        for s in &raw.http_stubs {
            if !stub_names.insert(s.value.name.clone()) {
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
        stub_names.extend(self.elided_names.iter().cloned());
        let mut services = Vec::new();
        let mut service_names = BTreeSet::new();
        for s in &raw.services {
            self.check_service(s, &mut errors);
            if !service_names.insert(s.value.name.clone()) {
                errors.push(self.err(pos(s), format!("a second service named {:?}", s.value.name)));
                continue;
            }
            services.push(s.value.clone());
        }
        let mut flows: Vec<FlowDef> = Vec::new();
        let mut flow_ids: BTreeSet<String> = BTreeSet::new();
        // Each flow's node ids, and the flow of each named run: a step's node must be one of
        // its run's flow (a typo would wait its whole timeout, or pass vacuously).
        let mut flow_nodes: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        let mut run_flow: std::collections::BTreeMap<String, String> = Default::default();
        for f in &raw.flows {
            match self.check_flow(f, &stub_names) {
                Ok(def) => {
                    let nodes = node_ids(&def.value);
                    errors.extend(
                        edge_problems(&def, &nodes)
                            .into_iter()
                            .map(|m| self.err(pos(f), m)),
                    );
                    flow_nodes.insert(def.id.clone(), nodes);
                    if !flow_ids.insert(def.id.clone()) {
                        errors
                            .push(self.err(pos(f), format!("a second flow with id {:?}", def.id)));
                    }
                    flows.push(def);
                }
                Err(mut e) => {
                    // A flow with a problem still has its id: steps that deploy it are not
                    // wrong as well.
                    if let Some(id) = f.value.get("id").and_then(Value::as_str) {
                        flow_ids.insert(id.to_owned());
                    }
                    errors.append(&mut e);
                }
            }
        }
        let flow_ids: BTreeSet<&str> = flow_ids.iter().map(String::as_str).collect();
        let mut runs = self.elided_names.clone();
        // Services whose stream leader a step took down: what `restart_nats_node {leader_of}`
        // can bring back.
        let mut downed = BTreeSet::new();
        let mut steps = Vec::new();
        if raw.steps.is_empty() && !self.steps_elided {
            errors.push(LoadError::file(
                self.file,
                "`steps` is empty: a scenario needs at least one step",
            ));
        }
        for s in &raw.steps {
            let ctx = StepCtx {
                at: pos(s),
                flows: &flow_ids,
                services: &services,
                stubs: &stub_names,
                nats_nodes: raw.nats.nodes(),
            };
            if let Err(e) = self.check_step(&s.value, &ctx, &mut runs, &mut downed) {
                errors.push(e);
            }
            let nodes_of = |run: &str| {
                run_flow
                    .get(run)
                    .and_then(|f| flow_nodes.get(f).map(|n| (f.as_str(), n)))
            };
            let named: Vec<(&str, &str)> = match &s.value {
                Step::WaitNode(w) => vec![(w.run.as_str(), w.node.as_str())],
                Step::ExpectEvents(e) => e
                    .events
                    .iter()
                    .map(|ev| (e.run.as_str(), ev.node.as_str()))
                    .collect(),
                _ => Vec::new(),
            };
            for (run, node) in named {
                if let Some((flow, nodes)) = nodes_of(run)
                    && !node.contains("${")
                    && !nodes.iter().any(|n| n == node)
                {
                    errors.push(self.err(
                        pos(s),
                        format!(
                            "no node {node:?} in flow {flow:?} of run {run:?}{} (its nodes: {})",
                            mean(node, nodes.iter().map(String::as_str)),
                            nodes.join(", ")
                        ),
                    ));
                }
            }
            if let Step::Trigger(t) = &s.value
                && let Some(name) = &t.name
            {
                run_flow.insert(name.clone(), t.flow.clone());
            }
            steps.push(StepAt {
                step: s.value.clone(),
                line: s.referenced.line(),
                column: s.referenced.column(),
            });
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Scenario {
            name,
            file: self.file.to_owned(),
            base_dir: self.base_dir.to_path_buf(),
            description: raw.description.unwrap_or_default(),
            timeout: raw.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0),
            step_timeout: raw.step_timeout.map_or(DEFAULT_STEP_TIMEOUT, |d| d.0),
            conformance: raw.conformance,
            emulator: raw.emulator,
            nats: raw.nats,
            http_stubs: stubs,
            services,
            flows,
            steps,
        })
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

    fn check_step(
        &self,
        step: &Step,
        ctx: &StepCtx<'_>,
        runs: &mut BTreeSet<String>,
        downed: &mut BTreeSet<String>,
    ) -> Result<(), LoadError> {
        let at = ctx.at;
        let flow = |id: &str| -> Result<(), LoadError> {
            if ctx.flows.contains(id) || self.elided_names.contains(id) {
                Ok(())
            } else {
                Err(self.err(
                    at,
                    format!(
                        "no flow {id:?} in `flows`{} (there are {:?})",
                        mean(id, ctx.flows.iter().copied()),
                        ctx.flows.iter().collect::<Vec<_>>()
                    ),
                ))
            }
        };
        let run = |name: &str, runs: &BTreeSet<String>| -> Result<(), LoadError> {
            if runs.contains(name) {
                Ok(())
            } else {
                Err(self.err(
                    at,
                    format!(
                        "no run named {name:?}{}: name one with `as:` on an earlier trigger (named so far: {:?})",
                        mean(name, runs.iter().map(String::as_str)),
                        runs.iter().collect::<Vec<_>>()
                    ),
                ))
            }
        };
        let status = |s: &Option<String>, allowed: &[&str]| -> Result<(), LoadError> {
            match s {
                Some(s) if !allowed.contains(&s.as_str()) => Err(self.err(
                    at,
                    format!("status {s:?} is not one of {}", allowed.join(", ")),
                )),
                _ => Ok(()),
            }
        };
        match step {
            Step::Deploy(Short(d)) => {
                flow(&d.flow)?;
                if let Some(codes) = &d.expect_error {
                    if codes.0.is_empty() {
                        return Err(self.err(at, "`expect_error` lists no code"));
                    }
                    for c in &codes.0 {
                        if ReleaseCode::parse(c).is_none() {
                            return Err(self.err(
                                at,
                                format!(
                                    "{c:?} is not a release code; the codes are {}",
                                    ReleaseCode::ALL.map(|c| c.as_str()).join(", ")
                                ),
                            ));
                        }
                    }
                }
            }
            Step::Trigger(t) => {
                // The run's name first: a trigger with a problem still names its run, and the
                // steps that use it are not wrong as well.
                if let Some(name) = &t.name
                    && !runs.insert(name.clone())
                {
                    return Err(self.err(at, format!("a second run named {name:?}")));
                }
                flow(&t.flow)?;
                if t.payload.is_some() && t.raw.is_some() {
                    return Err(self.err(at, "give `payload` (JSON) or `raw` (bytes), not both"));
                }
            }
            Step::Advance(_) | Step::Sleep(_) | Step::RestartNats(_) => {}
            Step::StopNatsNode(n) | Step::KillNatsNode(n) | Step::RestartNatsNode(n) => {
                if ctx.nats_nodes < 2 {
                    return Err(self.err(
                        at,
                        "a `*_nats_node` step needs a cluster: add `nats: {cluster: 3}` to the scenario",
                    ));
                }
                match n {
                    NodeRef::Number(n) if !(1..=ctx.nats_nodes).contains(n) => {
                        return Err(self.err(
                            at,
                            format!(
                                "no nats node {n}: the cluster has nodes 1 to {}",
                                ctx.nats_nodes
                            ),
                        ));
                    }
                    NodeRef::LeaderOf { leader_of }
                        if !ctx.services.iter().any(|s| &s.name == leader_of)
                            && !self.elided_names.contains(leader_of) =>
                    {
                        return Err(self.err(
                            at,
                            format!(
                                "`leader_of: {leader_of}` names no service of the scenario{}",
                                mean(leader_of, self.service_names(ctx))
                            ),
                        ));
                    }
                    NodeRef::LeaderOf { leader_of } => {
                        if matches!(step, Step::RestartNatsNode(_)) {
                            if !downed.contains(leader_of) {
                                return Err(self.err(
                                    at,
                                    format!(
                                        "`restart_nats_node: {{leader_of: {leader_of}}}` brings back the node an earlier \
                                         `stop_nats_node` or `kill_nats_node` with `leader_of: {leader_of}` took down, \
                                         and none did; name the node instead (restart_nats_node: N)"
                                    ),
                                ));
                            }
                        } else {
                            downed.insert(leader_of.clone());
                        }
                    }
                    NodeRef::Number(_) => {}
                }
            }
            Step::WaitNode(w) => {
                run(&w.run, runs)?;
                status(&w.status, &["succeeded", "failed", "skipped", "any"])?;
            }
            Step::WaitSettled(Short(w)) => {
                run(&w.run, runs)?;
                status(&w.status, &["succeeded", "failed", "any"])?;
            }
            Step::WaitIdle(Short(w)) => {
                run(&w.run, runs)?;
                status(&w.status, &["succeeded", "failed", "waiting", "any"])?;
            }
            Step::ExpectEvents(e) => {
                run(&e.run, runs)?;
                if e.events.is_empty() {
                    return Err(self.err(at, "`events` is empty"));
                }
                for ev in &e.events {
                    status(
                        &ev.status,
                        &[
                            "succeeded",
                            "retrying",
                            "failed",
                            "skipped",
                            "triggered",
                            "armed",
                            "fired",
                        ],
                    )?;
                }
            }
            Step::ExpectDlq(d) => {
                if let Some(r) = &d.run {
                    run(r, runs)?;
                }
                // A misspelt filter matches nothing: with `count: 0` the step could never fail.
                if let Some(problem) = dlq_filter_problem(d, ctx.services) {
                    return Err(self.err(at, format!("expect_dlq: {problem}")));
                }
            }
            Step::ExpectRegistration(_) => {}
            // Only the services of the file heartbeat and have replicas: another name (a typo)
            // would wait its whole timeout for nothing.
            Step::ExpectHeartbeat(h) if !self.elided_names.contains(&h.service) => {
                self.declared(&h.service, ctx, at, "expect_heartbeat")?;
            }
            Step::ExpectService(s) if !self.elided_names.contains(&s.service) => {
                self.declared(&s.service, ctx, at, "expect_service")?;
            }
            Step::ExpectHeartbeat(_) | Step::ExpectService(_) => {}
            Step::Register(r) => {
                let manifest: Result<Manifest, _> = serde_path_to_error::deserialize(&r.manifest);
                if let Err(e) = manifest {
                    return Err(self.err(
                        at,
                        format!(
                            "`manifest` is not a manifest: {}{}",
                            e.inner(),
                            at_path(&e.path().to_string())
                        ),
                    ));
                }
            }
            Step::ExpectBroadcast(Short(b)) => {
                flow(&b.flow)?;
                if let Some(s) = &b.service
                    && !ctx
                        .services
                        .iter()
                        .any(|x| x.name == *s && !x.is_external())
                {
                    return Err(self.err(
                        at,
                        format!("no scripted service {s:?}: only scripted services' replicas can be asked what they hold"),
                    ));
                }
            }
            Step::ExpectCalls(c) if self.elided_names.contains(&c.service) => {}
            Step::ExpectCalls(c) => {
                let Some(service) = ctx
                    .services
                    .iter()
                    .find(|s| s.name == c.service && !s.is_external())
                else {
                    return Err(self.err(
                        at,
                        format!(
                            "no scripted service {:?}: only scripted services' calls are seen",
                            c.service
                        ),
                    ));
                };
                if !service.actions.iter().any(|a| a.value.name == c.action) {
                    return Err(self.err(
                        at,
                        format!("service {:?} has no action {:?}", c.service, c.action),
                    ));
                }
                if let Some(r) = &c.run {
                    run(r, runs)?;
                }
            }
            Step::ExpectHttp(h) => {
                if !ctx.stubs.contains(&h.stub) {
                    return Err(self.err(
                        at,
                        format!(
                            "no HTTP stub {:?} in `http_stubs`{}",
                            h.stub,
                            mean(&h.stub, ctx.stubs.iter().map(String::as_str))
                        ),
                    ));
                }
            }
            Step::ExpectViolation(Short(v)) => {
                if !RULES.iter().any(|(r, _, _)| *r == v.rule) {
                    return Err(self.err(
                        at,
                        format!(
                            "{:?} is not a conformance rule; the rules are {}",
                            v.rule,
                            RULES
                                .iter()
                                .map(|(r, _, _)| *r)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
            }
            Step::Publish(p) => {
                if p.body.is_some() && p.json.is_some() {
                    return Err(self.err(at, "give `body` (text) or `json`, not both"));
                }
                for (name, value) in &p.headers {
                    check_header(name, value).map_err(|e| self.err(at, format!("headers: {e}")))?;
                }
            }
            Step::StopService(name) => {
                if !ctx.services.iter().any(|s| s.name == *name)
                    && !self.elided_names.contains(name)
                {
                    return Err(self.err(
                        at,
                        format!(
                            "no service {name:?} in `services`{}",
                            mean(name, self.service_names(ctx))
                        ),
                    ));
                }
            }
            Step::Fuzz(f) if self.elided_names.contains(&f.service) => {}
            Step::Fuzz(f) => {
                let Some(service) = ctx.services.iter().find(|s| s.name == f.service) else {
                    return Err(self.err(
                        at,
                        format!(
                            "no service {:?} in `services`{}",
                            f.service,
                            mean(&f.service, self.service_names(ctx))
                        ),
                    ));
                };
                if !service.is_external()
                    && !service.actions.iter().any(|a| a.value.name == f.action)
                {
                    return Err(self.err(
                        at,
                        format!("service {:?} has no action {:?}", f.service, f.action),
                    ));
                }
                let runs = f.runs.unwrap_or(crate::model::DEFAULT_FUZZ_RUNS);
                if runs == 0 || runs > crate::model::MAX_FUZZ_RUNS {
                    return Err(self.err(
                        at,
                        format!(
                            "runs: {runs} is out of range (1 to {})",
                            crate::model::MAX_FUZZ_RUNS
                        ),
                    ));
                }
            }
            Step::Load(l) => {
                if !ctx.flows.contains(l.flow.as_str()) {
                    return Err(self.err(at, format!("no flow {:?} in `flows`", l.flow)));
                }
                if l.rate.is_some() && l.concurrency.is_some() {
                    return Err(self.err(
                        at,
                        "give `rate` (runs started per second) or `concurrency` (runs in flight), not both",
                    ));
                }
                if l.payload.is_some() && l.payloads_file.is_some() {
                    return Err(self.err(at, "give `payload` or `payloads_file`, not both"));
                }
                crate::loadgen::check(
                    l.runs.unwrap_or(crate::model::DEFAULT_LOAD_RUNS),
                    crate::loadgen::Pace::of(l.rate, l.concurrency),
                )
                .map_err(|e| self.err(at, e))?;
            }
        }
        Ok(())
    }
}

struct StepCtx<'a> {
    at: (u64, u64),
    flows: &'a BTreeSet<&'a str>,
    services: &'a [ServiceSpec],
    stubs: &'a BTreeSet<String>,
    /// Servers of the scenario's `nats:` (1 unless a cluster).
    nats_nodes: usize,
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

/// ` (did you mean "x"?)` when one of `names` is close to `word`, else nothing.
fn mean<'a>(word: &str, names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    crate::flowfile::did_you_mean(word, &names)
        .map(|n| format!(" (did you mean {n:?}?)"))
        .unwrap_or_default()
}

/// ` at <path>` for a serde path, nothing for the root.
fn at_path(path: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        load_str("s.yaml", text, Path::new("."))
            .map(|_| "no error".to_owned())
            .unwrap_or_else(|e| e.to_string())
    }

    /// A name the file does not declare, in an edge, a step's node, a service an expectation
    /// waits on or a DLQ subject's service segment: refused at load, at its place, with "did
    /// you mean" (issue 33: each used to wait its whole timeout, or pass vacuously).
    #[test]
    fn names_the_file_lacks_are_refused_before_anything_runs() {
        let head = "services:\n  - name: shop\n    actions: [{name: charge, behavior: {echo: true}}]\n\
                    flows:\n  - id: order\n    nodes:\n      - {id: in, type: service-in, service: shop}\n\
                    \x20     - {id: charge, type: action, service: shop, action: charge}\n";
        let cases = [
            (
                "    edges: [{id: e1, from: in, to: chrage}]\nsteps:\n  - deploy: order\n",
                "s.yaml:5:5: flow \"order\": edge \"e1\" goes to \"chrage\", which is not a node of the flow (did you mean \"charge\"?)",
            ),
            (
                "    edges: [{id: e1, from: in, to: charge}]\nsteps:\n  - trigger: {flow: order, as: r1}\n  - wait_node: {run: r1, node: chage}\n",
                "s.yaml:12:5: no node \"chage\" in flow \"order\" of run \"r1\" (did you mean \"charge\"?)",
            ),
            (
                "    edges: [{id: e1, from: in, to: charge}]\nsteps:\n  - trigger: {flow: order, as: r1}\n  - expect_events: {run: r1, events: [{node: chareg}]}\n",
                "s.yaml:12:5: no node \"chareg\" in flow \"order\" of run \"r1\" (did you mean \"charge\"?)",
            ),
            (
                "    edges: []\nsteps:\n  - expect_heartbeat: {service: shp}\n",
                "s.yaml:11:5: expect_heartbeat: no service \"shp\" in `services` (did you mean \"shop\"?)",
            ),
            (
                "    edges: []\nsteps:\n  - expect_service: {service: shpo}\n",
                "s.yaml:11:5: expect_service: no service \"shpo\" in `services` (did you mean \"shop\"?)",
            ),
            (
                "    edges: []\nsteps:\n  - expect_dlq: {subject: triggers.v2.dlq.shpo.charge, count: 0}\n",
                "s.yaml:11:5: expect_dlq: subject `triggers.v2.dlq.shpo.charge` names service \"shpo\", which is not in `services` (did you mean `triggers.v2.dlq.shop.charge`?)",
            ),
        ];
        for (tail, want) in cases {
            let text = format!("{head}{tail}");
            let got = error(&text);
            assert!(
                got.contains(want),
                "{text}\n---\n{got}\n--- wanted:\n{want}"
            );
        }
    }

    #[test]
    fn parse_errors_say_file_line_and_column() {
        let cases = [
            (
                "steps:\n  - deploy: {flow: f, bogus: 1}\n",
                "s.yaml:2:",
                "unknown key `bogus`",
            ),
            (
                "steps:\n  - deplo: f\n",
                "s.yaml:2:5:",
                "unknown step or value `deplo`: did you mean `deploy`?",
            ),
            (
                "conformance: yes\nsteps: []\n",
                "s.yaml:1:14:",
                "unknown step or value `yes`",
            ),
            (
                "emulator: {auto_advance: yes}\nsteps: []\n",
                "s.yaml:1:26:",
                "invalid boolean",
            ),
            ("name: a\nname: b\nsteps: []\n", "s.yaml:2:", "duplicate"),
            (
                "steps:\n  - advance: soon\n",
                "s.yaml:2:14:",
                "not a duration",
            ),
            ("stepz: []\n", "s.yaml:1:1:", "unknown key `stepz`"),
            (
                "steps:\n  - restart_nats: {now: true}\n",
                "s.yaml:2:",
                "takes no settings",
            ),
        ];
        for (text, at, what) in cases {
            let e = error(text);
            assert!(e.starts_with(at) && e.contains(what), "{text:?} gave {e}");
        }
    }

    #[test]
    fn names_are_checked_where_they_are_used() {
        let flow =
            "flows:\n  - {id: f, nodes: [{id: in, type: service-in, service: s}], edges: []}\n";
        let cases = [
            (format!("{flow}steps:\n  - deploy: g\n"), "s.yaml:4:5:", "no flow \"g\""),
            (format!("{flow}steps:\n  - wait_settled: r1\n"), "s.yaml:4:5:", "no run named \"r1\""),
            (
                format!("{flow}steps:\n  - trigger: {{flow: f, as: r1}}\n  - trigger: {{flow: f, as: r1}}\n"),
                "s.yaml:5:5:",
                "a second run named \"r1\"",
            ),
            (
                format!("{flow}steps:\n  - deploy: {{flow: f, expect_error: nope}}\n"),
                "s.yaml:4:5:",
                "\"nope\" is not a release code",
            ),
            (
                "steps:\n  - expect_violation: made_up\n".to_owned(),
                "s.yaml:2:5:",
                "not a conformance rule",
            ),
            (
                "steps:\n  - expect_http: {stub: hook}\n".to_owned(),
                "s.yaml:2:5:",
                "no HTTP stub \"hook\"",
            ),
            (
                "services:\n  - {name: s, command: [x], actions: [{name: a}]}\nsteps:\n  - sleep: 1s\n".to_owned(),
                "s.yaml:2:5:",
                "`actions` belongs to scripted services",
            ),
            (
                "services:\n  - name: s\n    actions:\n      - {name: a, behavior: {echo: true, fail: x}}\nsteps:\n  - sleep: 1s\n".to_owned(),
                "s.yaml:4:9:",
                "2 outcomes (echo, fail)",
            ),
            (
                "flows:\n  - {id: f, nodes: [{id: in, type: service-in, servise: s}], edges: []}\nsteps:\n  - sleep: 1s\n".to_owned(),
                "s.yaml:2:5:",
                "unknown key `servise`",
            ),
            (
                "flows:\n  - {id: f, nodes: [{id: o, type: output, config: {target: \"${stubs.x.url}\"}}]}\nsteps:\n  - sleep: 1s\n".to_owned(),
                "s.yaml:2:5:",
                "unknown ${stubs.x.url}",
            ),
            (
                "flows:\n  - file: nowhere.yaml\nsteps:\n  - sleep: 1s\n".to_owned(),
                "s.yaml:2:5:",
                "cannot read the flow file",
            ),
        ];
        for (text, at, what) in cases {
            let e = error(&text);
            assert!(e.starts_with(at) && e.contains(what), "{text}\ngave {e}");
        }
    }

    #[test]
    fn the_parser_s_messages_are_put_in_the_file_writer_s_words() {
        let deep = format!(
            "steps:\n  - publish: {{subject: a, json: {}1{}}}\n",
            "{a: ".repeat(70),
            "}".repeat(70)
        );
        let cases: Vec<(String, &str, &str)> = vec![
            (
                "name: a\nname: b\nsteps:\n  - sleep: 1s\n".into(),
                "s.yaml:2:1:",
                "duplicate key `name`: a key may be given once",
            ),
            (
                "steps:\n  - sleep: 1s\n---\nsteps: []\n".into(),
                "s.yaml:4:1:",
                "more than one YAML document",
            ),
            (
                "~: 1\nsteps:\n  - sleep: 1s\n".into(),
                "s.yaml:1:1:",
                "empty (null) where a string is needed",
            ),
            (
                deep,
                "s.yaml:2:",
                "nested too deeply (65 levels): a file may nest at most 64 levels",
            ),
        ];
        for (text, at, what) in cases {
            let e = error(&text);
            assert!(e.starts_with(at) && e.contains(what), "{text}\ngave {e}");
            for internal in [
                "DuplicateKeyPolicy",
                "from_str_multiple",
                "Option<",
                "budget breached",
                "a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a",
            ] {
                assert!(!e.contains(internal), "{e}");
            }
        }
    }

    #[test]
    fn out_of_range_values_are_refused_with_file_line_column_and_field() {
        let service = |action: &str| {
            format!(
                "services:\n  - name: s\n    actions:\n      - {action}\nsteps:\n  - sleep: 1s\n"
            )
        };
        let flow =
            "flows:\n  - {id: f, nodes: [{id: in, type: service-in, service: s}], edges: []}\n";
        let cases: Vec<(String, &str, &str)> = vec![
            // Durations: every key that takes one, and both forms.
            ("timeout: 1e300\nsteps:\n  - sleep: 1s\n".into(), "s.yaml:1:10:", "timeout: \"1e300\" is too long: a duration is at most 100 years"),
            ("step_timeout: -5\nsteps:\n  - sleep: 1s\n".into(), "s.yaml:1:15:", "step_timeout: \"-5\" is negative"),
            ("steps:\n  - sleep: .inf\n".into(), "s.yaml:2:12:", "steps[0].sleep: non-finite float `.inf` rejected by the configured policy: write a finite number"),
            ("steps:\n  - sleep: -1.5\n".into(), "s.yaml:2:12:", "steps[0].sleep: \"-1.5\" is negative"),
            ("steps:\n  - advance: 99999999999d\n".into(), "s.yaml:2:14:", "steps[0].advance: \"99999999999d\" is too long"),
            ("steps:\n  - advance: 18446744073709551615\n".into(), "s.yaml:2:14:", "steps[0].advance: \"18446744073709551615\" is too long"),
            ("steps:\n  - wait_settled: {run: r, timeout: 1e20}\n".into(), "s.yaml:2:", "steps[0].wait_settled.timeout: \"1e20\" is too long"),
            ("steps:\n  - expect_dlq: {settle: -1}\n".into(), "s.yaml:2:", "steps[0].expect_dlq.settle: \"-1\" is negative"),
            ("http_stubs:\n  - {name: h, delay: 40000d}\nsteps:\n  - sleep: 1s\n".into(), "s.yaml:2:", "http_stubs[0].delay: \"40000d\" is too long"),
            ("services:\n  - {name: x, command: [x], ready_timeout: 1e300}\nsteps:\n  - sleep: 1s\n".into(), "s.yaml:2:", "services[0].ready_timeout: \"1e300\" is too long"),
            (service("{name: a, timeout: 1e19}"), "s.yaml:4:", "timeout: \"1e19\" is too long"),
            // Retry policies and timeouts of scripted actions.
            (service("{name: a, timeout: 0s}"), "s.yaml:4:9:", "action \"a\": timeout: is 0ns, must be at least 1 ms"),
            (service("{name: a, retry: {backoff_factor: .nan}}"), "s.yaml:4:9:", "action \"a\": retry.backoff_factor: is NaN"),
            (service("{name: a, retry: {backoff_factor: .inf}}"), "s.yaml:4:9:", "retry.backoff_factor: is inf"),
            (service("{name: a, retry: {backoff_factor: -2}}"), "s.yaml:4:9:", "retry.backoff_factor: is -2"),
            (service("{name: a, retry: {max_attempts: 0}}"), "s.yaml:4:9:", "retry.max_attempts: is 0, must be from 1 to 4294967295"),
            (service("{name: a, retry: {max_attempts: 9223372036854775807}}"), "s.yaml:4:9:", "retry.max_attempts: is 9223372036854775807"),
            (service("{name: a, retry: {initial_backoff_ms: -1}}"), "s.yaml:4:9:", "retry.initial_backoff_ms: is -1"),
            (service("{name: a, retry: {max_backoff_ms: 9223372036854775807}}"), "s.yaml:4:9:", "retry.max_backoff_ms: is 9223372036854775807"),
            // Replicas: each is a runtime with a connection; a billion would never finish starting.
            ("services:\n  - {name: s, replicas: 1000000000}\nsteps:\n  - sleep: 1s\n".into(), "s.yaml:2:5:", "`replicas: 1000000000` is too many: at most 64"),
            ("services:\n  - {name: s, replicas: 0}\nsteps:\n  - sleep: 1s\n".into(), "s.yaml:2:5:", "`replicas` must be at least 1"),
            // DLQ filters that can match nothing (a `count: 0` of them could never fail).
            ("services:\n  - {name: shop, actions: [{name: fastfail}]}\nsteps:\n  - expect_dlq: {kind: action_faild, count: 0}\n".into(), "s.yaml:4:5:", "kind `action_faild` is no DLQ kind (did you mean `action_failed`?)"),
            ("services:\n  - {name: shop, actions: [{name: fastfail}]}\nsteps:\n  - expect_dlq: {subject: triggers.v2.dlq.shop.fastfial, count: 0}\n".into(), "s.yaml:4:5:", "(did you mean `triggers.v2.dlq.shop.fastfail`?)"),
            ("services:\n  - {name: shop, actions: [{name: fastfail}]}\nsteps:\n  - expect_dlq: {subject: triggers.v2.dlq.shop.invalid_json, kind: invalid_json, count: 0}\n".into(), "no error", ""),
            // Headers async-nats would panic on.
            ("steps:\n  - publish: {subject: a, headers: {\"bad name\": v}}\n".into(), "s.yaml:2:5:", "headers: header \"bad name\" cannot be sent on NATS"),
            ("steps:\n  - publish: {subject: a, headers: {\"a:b\": v}}\n".into(), "s.yaml:2:5:", "header \"a:b\""),
            ("steps:\n  - publish: {subject: a, headers: {\"é\": v}}\n".into(), "s.yaml:2:5:", "printable ASCII"),
            ("steps:\n  - publish: {subject: a, headers: {\"\": v}}\n".into(), "s.yaml:2:5:", "not empty"),
            ("steps:\n  - publish: {subject: a, headers: {X-A: \"a\\r\\nInjected: 1\"}}\n".into(), "s.yaml:2:5:", "a value must not contain CR or LF"),
            // HTTP stubs wiremock would panic on.
            ("http_stubs:\n  - {name: h, status: 1000}\nsteps:\n  - sleep: 1s\n".into(), "s.yaml:2:5:", "stub \"h\": status: is 1000, must be an HTTP status from 100 to 999"),
            ("http_stubs:\n  - {name: h, status: 0}\nsteps:\n  - sleep: 1s\n".into(), "s.yaml:2:5:", "status: is 0"),
            ("http_stubs:\n  - {name: h, method: \"GE T\"}\nsteps:\n  - sleep: 1s\n".into(), "s.yaml:2:5:", "method: \"GE T\" is not an HTTP method"),
            ("http_stubs:\n  - {name: h, path: \"/a?b=1\"}\nsteps:\n  - sleep: 1s\n".into(), "s.yaml:2:5:", "path: \"/a?b=1\" has a query"),
            ("http_stubs:\n  - {name: h, status: 70000}\nsteps:\n  - sleep: 1s\n".into(), "s.yaml:2:", "http_stubs[0].status"),
            // Flow versions.
            ("flows:\n  - {id: f, version: 0, nodes: [{id: in, type: service-in, service: s}], edges: []}\nsteps:\n  - sleep: 1s\n".into(), "s.yaml:2:5:", "flow \"f\": version: is 0, must be 1 or more"),
            ("flows:\n  - {id: f, version: -3, nodes: [{id: in, type: service-in, service: s}], edges: []}\nsteps:\n  - sleep: 1s\n".into(), "s.yaml:2:5:", "version: is -3"),
            ("flows:\n  - {id: f, version: 9223372036854775808, nodes: [{id: in, type: service-in, service: s}], edges: []}\nsteps:\n  - sleep: 1s\n".into(), "s.yaml:2:5:", "not a flow"),
            (format!("{flow}steps:\n  - sleep: 1s\n"), "no error", ""),
        ];
        for (text, at, what) in cases {
            let e = error(&text);
            assert!(e.starts_with(at) && e.contains(what), "{text}\ngave {e}");
        }
    }

    #[test]
    fn a_flow_file_with_a_version_below_1_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("f.yaml"),
            "id: f\nversion: 0\nnodes: [{id: in, type: service-in, service: s}]\nedges: []\n",
        )
        .unwrap();
        let e = load_str(
            "s.yaml",
            "flows:\n  - file: f.yaml\nsteps:\n  - sleep: 1s\n",
            dir.path(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("f.yaml: flow \"f\": version: is 0, must be 1 or more"),
            "{e}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn one_huge_value_is_refused_by_the_text_bound_not_the_node_count() {
        // Five nodes, one of them 100 MiB long: the audit's file.
        let text = format!(
            "name: big\ndescription: {}\nsteps: []\n",
            "x".repeat(100 << 20)
        );
        let e = error(&text);
        assert!(
            e.contains(
                "the file's values hold more than 64 MiB of text in all (one long string, or many)"
            ),
            "{}",
            &e[..e.len().min(400)]
        );
        assert!(!e.contains("nodes"), "{}", &e[..e.len().min(400)]);
    }

    #[test]
    fn a_flow_file_that_is_no_regular_file_is_refused_without_reading_it() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("ff.fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // No writer ever opens the FIFO, and /dev/zero never ends: either read hangs the test.
        for (file, what) in [("ff.fifo", "a FIFO"), ("/dev/zero", "a device")] {
            let text = format!("flows:\n  - file: {file}\nsteps:\n  - sleep: 1s\n");
            let base = dir.path().to_path_buf();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                tx.send(
                    load_str("s.yaml", &text, &base)
                        .map(|_| ())
                        .unwrap_err()
                        .to_string(),
                )
            });
            let e = rx
                .recv_timeout(Duration::from_secs(20))
                .expect("the flow file was read");
            assert!(
                e.starts_with("s.yaml:2:5: cannot read the flow file "),
                "{e}"
            );
            assert!(
                e.ends_with(&format!(
                    "{file}: is {what}, not a regular file; only regular files are read"
                )),
                "{e}"
            );
        }
    }

    #[test]
    fn defaults() {
        let s = load_str(
            "dir/my-case.yaml",
            "steps:\n  - sleep: 10ms\n",
            Path::new("dir"),
        )
        .unwrap();
        assert_eq!(s.name, "my-case");
        assert_eq!(s.timeout, DEFAULT_TIMEOUT);
        assert_eq!(s.step_timeout, DEFAULT_STEP_TIMEOUT);
        assert_eq!(s.conformance, Conformance::Errors);
        assert_eq!((s.steps[0].line, s.steps[0].column), (2, 5));
    }
}
