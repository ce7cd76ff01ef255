//! `triggers-lab replay` from the outside: a recording of the scripted flow-lab services (a run
//! that succeeds, one that fails into the DLQ) replays the same against the same services, and
//! names the run and node that changed against services that now behave differently; and
//! `scenario from-record` makes a scenario of it that passes.

#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin(xdg: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_triggers-lab"));
    c.env_remove("TRIGGERS_NATS_URL")
        .env("XDG_RUNTIME_DIR", xdg)
        .env("TMPDIR", xdg);
    c
}

/// An `up` process, stopped (SIGTERM) when the test ends without stopping it.
struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            signal(&self.0, rustix::process::Signal::TERM);
            let _ = self.0.wait();
        }
    }
}

fn signal(child: &Child, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a child's pid");
    let _ = rustix::process::kill_process(pid, signal);
}

/// Starts `up --instance NAME --services SCENARIO` with `extra` args, once flowlab has
/// registered.
fn up(xdg: &Path, name: &str, services: &Path, extra: &[&str]) -> Up {
    up_until(xdg, name, services, extra, "flowlab")
}

/// [`up`], once `service` has registered.
fn up_until(xdg: &Path, name: &str, services: &Path, extra: &[&str], service: &str) -> Up {
    let mut child = bin(xdg)
        .args(["up", "--backend", "binary", "--port", "0", "--quiet"])
        .args(["--instance", name, "--services", services.to_str().unwrap()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut url = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut url)
        .unwrap();
    let up = Up(child);
    assert!(url.starts_with("nats://"), "{url:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = lab(xdg, &["services", "--json", "--instance", name]);
        if String::from_utf8_lossy(&out.stdout).contains(&format!("\"{service}\"")) {
            return up;
        }
        assert!(
            Instant::now() < deadline,
            "{service} never registered: {}",
            text(&out)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn lab(xdg: &Path, args: &[&str]) -> Output {
    bin(xdg).args(args).output().unwrap()
}

/// Waits (30 s at most) until the recording holds `needle`; else fails saying `never`.
fn wait_recorded(recording: &Path, needle: &str, never: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(recording)
        .unwrap_or_default()
        .contains(needle)
    {
        assert!(Instant::now() < deadline, "{never}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `scenario from-record RECORDING --services SERVICES -o OUT`.
fn from_record(xdg: &Path, recording: &Path, services: &Path, out: &Path) -> Output {
    lab(
        xdg,
        &[
            "scenario",
            "from-record",
            recording.to_str().unwrap(),
            "--services",
            services.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
    )
}

/// `run --backend binary SCENARIO`.
fn run(xdg: &Path, scenario: &Path) -> Output {
    lab(
        xdg,
        &["run", "--backend", "binary", scenario.to_str().unwrap()],
    )
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn a_recording_replays_the_same_and_a_changed_service_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path();
    let scenario = repo().join("scenarios/flow-lab/flow-lab-scripted.scenario.yaml");
    let flow = repo().join("sdk/examples/flows/flow_lab.yaml");
    let recording = xdg.join("rec.jsonl");

    // Record: a run that succeeds, one that fails into the DLQ.
    let mut rec = up(
        xdg,
        "rec",
        &scenario,
        &["--record", recording.to_str().unwrap()],
    );
    let on = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--instance", "rec"]);
        lab(xdg, &all)
    };
    let out = on(&["deploy", flow.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = on(&[
        "trigger",
        "flow-lab",
        r#"{"customer":"ada","items":3}"#,
        "--wait",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = on(&[
        "trigger",
        "flow-lab",
        r#"{"customer":"fail","items":1}"#,
        "--wait",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    // The DLQ entry comes after the run settles.
    wait_recorded(
        &recording,
        "triggers.v2.dlq.flowlab.reserve_stock",
        "no DLQ entry was recorded",
    );
    signal(&rec.0, rustix::process::Signal::INT);
    let _ = rec.0.wait();

    // A scenario from the recording, with the services it was recorded with, passes.
    let generated = xdg.join("gen.scenario.yaml");
    let out = from_record(xdg, &recording, &scenario, &generated);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let yaml = std::fs::read_to_string(&generated).unwrap();
    for wanted in [
        "- deploy: flow-lab",
        "as: run2}",
        "- wait_settled: {run: run2, status: failed}",
        "order: in_order",
        "- expect_dlq: {run: run2, subject: triggers.v2.dlq.flowlab.reserve_stock, kind: action_failed, count: 1}",
        ": trigger of flow-lab, run run-",
    ] {
        assert!(yaml.contains(wanted), "{wanted:?} not in:\n{yaml}");
    }
    let out = run(xdg, &generated);
    assert_eq!(out.status.code(), Some(0), "{}\n{yaml}", text(&out));

    // The same services: the same runs.
    let same = up(xdg, "same", &scenario, &[]);
    let out = lab(
        xdg,
        &["replay", "--instance", "same", recording.to_str().unwrap()],
    );
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("run 1 (was run-"), "{said}");
    assert_eq!(said.matches("): same").count(), 2, "{said}");
    drop(same);

    // reserve_stock no longer fails: run 2 differs, at node reserve, without its DLQ entry.
    let changed = xdg.join("changed.scenario.yaml");
    let original = std::fs::read_to_string(&scenario).unwrap();
    let edited = original
        .replace("value: fail}", "value: never-fails}")
        .replace("../../sdk/", &format!("{}/sdk/", repo().display()));
    assert_ne!(edited, original);
    std::fs::write(&changed, edited).unwrap();
    let _changed = up(xdg, "changed", &changed, &[]);
    let out = lab(
        xdg,
        &[
            "replay",
            "--instance",
            "changed",
            recording.to_str().unwrap(),
        ],
    );
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("run 1 (was run-"), "{said}");
    let run2 = said
        .lines()
        .find(|l| l.starts_with("run 2 (was run-"))
        .unwrap_or_else(|| panic!("no verdict for run 2: {said}"));
    assert!(
        run2.contains("differs: status now succeeded, was failed"),
        "{run2}"
    );
    assert!(
        run2.contains("node reserve now succeeded, was failed"),
        "{run2}"
    );
    assert!(
        run2.contains("DLQ entry triggers.v2.dlq.flowlab.reserve_stock action_failed missing"),
        "{run2}"
    );

    // The generated scenario, with the changed services in it, fails at the step that expected
    // run 2 to fail, naming it.
    let regenerated = xdg.join("gen-changed.scenario.yaml");
    let out = from_record(xdg, &recording, &changed, &regenerated);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = run(xdg, &regenerated);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("wait_settled run2") || said.contains("run2 (run-"),
        "the failing step is not named: {said}"
    );
    assert!(said.contains("gen-changed.scenario.yaml:"), "{said}");
}

#[test]
fn a_recording_that_does_not_read_is_a_usage_error_placed_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.jsonl");
    std::fs::write(
        &file,
        "{\"triggers_lab_recording\":1,\"created_at\":\"2026-12-01T03:00:00Z\",\"tool_version\":\"0.1.0\"}\n{\"seq\":\"x\"}\n",
    )
    .unwrap();
    let out = lab(dir.path(), &["replay", file.to_str().unwrap()]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("bad.jsonl:2:"), "{said}");
}

/// A Durable Timer advanced while recording: the replay advances the clock as far (not to the
/// recorded instant), after the run reached its timer, and the generated scenario waits for the
/// run to be idle before its `advance`.
#[test]
fn a_recorded_clock_advance_replays_and_becomes_a_step() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path();
    let scenario = repo().join("scenarios/flow-lab/durable-timer.scenario.yaml");
    let flow = xdg.join("remind.json");
    std::fs::write(
        &flow,
        r#"{"id":"remind","nodes":[
 {"id":"in","type":"service-in","service":"shop","config":{"transport":"nats","target":"shop.inbound"}},
 {"id":"charge","type":"action","service":"shop","action":"charge"},
 {"id":"wait","type":"timer","config":{"delay_ms":86400000}},
 {"id":"in2","type":"service-in","service":"mail","config":{"transport":"nats","target":"mail.inbound"}},
 {"id":"send","type":"action","service":"mail","action":"send_reminder"}],
 "edges":[{"id":"e1","from":"in","to":"charge"},{"id":"e2","from":"charge","to":"wait"},
 {"id":"e3","from":"wait","to":"in2","mapping":{"fields":{"order":"$.order_id"}}},
 {"id":"e4","from":"in2","to":"send"}]}"#,
    )
    .unwrap();
    let recording = xdg.join("rec.jsonl");
    let mut rec = up_until(
        xdg,
        "rec",
        &scenario,
        &["--record", recording.to_str().unwrap()],
        "mail",
    );
    for args in [
        vec!["deploy", flow.to_str().unwrap()],
        vec!["trigger", "remind", r#"{"order_id":"o-7"}"#],
    ] {
        let mut all = args.clone();
        all.extend(["--instance", "rec"]);
        let out = lab(xdg, &all);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    }
    // The run reaches its timer, then a day passes.
    wait_recorded(&recording, "timer_armed", "the timer was never armed");
    let out = lab(xdg, &["advance", "1d", "--instance", "rec"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    wait_recorded(&recording, "run_settled", "the run never settled");
    signal(&rec.0, rustix::process::Signal::INT);
    let _ = rec.0.wait();

    let again = up_until(xdg, "again", &scenario, &[], "mail");
    let out = lab(
        xdg,
        &["replay", "--instance", "again", recording.to_str().unwrap()],
    );
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("): same"), "{said}");
    drop(again);

    let generated = xdg.join("timer.scenario.yaml");
    let out = from_record(xdg, &recording, &scenario, &generated);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let yaml = std::fs::read_to_string(&generated).unwrap();
    assert!(
        yaml.contains("- wait_idle: run1\n") && yaml.contains("- advance: 86400s"),
        "{yaml}"
    );
    let out = run(xdg, &generated);
    assert_eq!(out.status.code(), Some(0), "{}\n{yaml}", text(&out));
}
