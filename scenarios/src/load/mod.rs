//! Reading scenario files: parsing them (YAML 1.2 booleans, unknown and duplicate
//! keys refused; `yaml.rs`) and checking what the parser cannot (names that must exist, one
//! outcome per behavior...; `check.rs`), every error with file, line and column.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::error::{LoadError, LoadErrors};
use crate::model::{
    Conformance, EmulatorSpec, NatsSpec, ScenarioFile, ServiceSpec, Step, StubSpec,
};

mod check;
mod yaml;

pub(crate) use check::{Checker, at_path};
pub use yaml::parse_document;
pub(crate) use yaml::{parse_yaml, strip_position};

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
            out.extend(
                s.step
                    .kind()
                    .files_named()
                    .into_iter()
                    .map(|file| self.base_dir.join(file)),
            );
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
