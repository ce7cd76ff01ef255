//! `triggers-lab replay` and `scenario from-record` from the outside: one recording of the
//! scripted flow-lab services (a run that succeeds, one that fails into the DLQ, one that waits a
//! day on a Durable Timer) replays the same against the same services and names the run and node
//! that changed against services that now behave differently; the scenario made of it passes,
//! and fails at the step that no longer holds.

#![cfg(unix)]

use triggers_testkit::cli::{Up, bin_in, text};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

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
    let mut child = bin_in(xdg)
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
    bin_in(xdg).args(args).output().unwrap()
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

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The flow-lab stand-in of `scenario`, able to run Durable Timers, with `fail` as the customer
/// whose stock cannot be reserved replaced by `fails`; written to `out`.
fn flow_lab_services(out: &Path, fails: &str) {
    let scenario = repo().join("scenarios/flow-lab/flow-lab-scripted.scenario.yaml");
    let original = std::fs::read_to_string(scenario).unwrap();
    let edited = original
        .replace(
            "  - name: flowlab\n    actions:",
            "  - name: flowlab\n    capabilities: [durable_timer.v1]\n    actions:",
        )
        .replace("value: fail}", &format!("value: {fails}}}"))
        .replace("../../sdk/", &format!("{}/sdk/", repo().display()));
    assert!(edited.contains("durable_timer.v1") && edited.contains(fails));
    std::fs::write(out, edited).unwrap();
}

/// A day's reminder on the flow-lab service: place the order, wait a day (a Durable Timer), then
/// notify the customer.
const REMINDER: &str = r#"{"id":"flow-lab-reminder","nodes":[
 {"id":"in","type":"service-in","service":"flowlab","config":{"transport":"nats","target":"flowlab.inbound"}},
 {"id":"place","type":"action","service":"flowlab","action":"place_order"},
 {"id":"wait","type":"timer","config":{"delay_ms":86400000}},
 {"id":"back","type":"service-in","service":"flowlab","config":{"transport":"nats","target":"flowlab.inbound"}},
 {"id":"notify","type":"action","service":"flowlab","action":"notify_customer"}],
 "edges":[{"id":"e1","from":"in","to":"place"},{"id":"e2","from":"place","to":"wait"},
 {"id":"e3","from":"wait","to":"back","mapping":{"fields":{"order_id":"$.order_id"}}},
 {"id":"e4","from":"back","to":"notify"}]}"#;

/// One recording of `up` with the flow-lab example: a run that succeeds, one that fails into the
/// DLQ, a poison message (not JSON), and one that waits on a Durable Timer until the clock is
/// advanced a day. It replays the
/// same against the same services and becomes a scenario that passes; against services whose
/// failing action now succeeds, the replay names run 2 and what changed in it, and the scenario
/// fails at the step that expected the failure.
#[test]
fn a_recording_with_a_dlq_entry_and_a_timer_replays_and_becomes_a_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path();
    let services = xdg.join("flow-lab.scenario.yaml");
    flow_lab_services(&services, "fail");
    let flow = repo().join("sdk/examples/flows/flow_lab.yaml");
    let reminder = xdg.join("reminder.json");
    std::fs::write(&reminder, REMINDER).unwrap();
    let recording = xdg.join("rec.jsonl");

    let mut rec = up(
        xdg,
        "rec",
        &services,
        &["--record", recording.to_str().unwrap()],
    );
    let on = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--instance", "rec"]);
        lab(xdg, &all)
    };
    for (args, code) in [
        (vec!["deploy", flow.to_str().unwrap()], 0),
        (vec!["deploy", reminder.to_str().unwrap()], 0),
        (
            vec![
                "trigger",
                "flow-lab",
                r#"{"customer":"ada","items":3}"#,
                "--wait",
            ],
            0,
        ),
        (
            vec![
                "trigger",
                "flow-lab",
                r#"{"customer":"fail","items":1}"#,
                "--wait",
            ],
            1,
        ),
        // A poison message: not JSON, dead-lettered as invalid_json before any node runs.
        (
            vec!["trigger", "flow-lab", "--raw", "not json", "--wait"],
            1,
        ),
        (
            vec![
                "trigger",
                "flow-lab-reminder",
                r#"{"customer":"bo","items":2}"#,
            ],
            0,
        ),
    ] {
        let out = on(&args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", text(&out));
    }
    // The DLQ entry comes after the run settles; the reminder reaches its timer, then a day
    // passes and it settles.
    wait_recorded(
        &recording,
        "triggers.v2.dlq.flowlab.reserve_stock",
        "no DLQ entry was recorded",
    );
    wait_recorded(
        &recording,
        "triggers.v2.dlq.flowlab.invalid_json",
        "the poison message was not dead-lettered",
    );
    wait_recorded(&recording, "timer_armed", "the timer was never armed");
    let out = on(&["advance", "1d"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let settled = || {
        std::fs::read_to_string(&recording)
            .unwrap_or_default()
            .matches("run_settled")
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while settled() < 4 {
        assert!(Instant::now() < deadline, "the reminder never settled");
        std::thread::sleep(Duration::from_millis(100));
    }
    signal(&rec.0, rustix::process::Signal::INT);
    let _ = rec.0.wait();

    // A scenario from the recording, with the services it was recorded with, passes.
    let generated = xdg.join("gen.scenario.yaml");
    let out = from_record(xdg, &recording, &services, &generated);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let yaml = std::fs::read_to_string(&generated).unwrap();
    for wanted in [
        "- deploy: flow-lab\n",
        "- deploy: flow-lab-reminder\n",
        "as: run2}",
        "- wait_settled: {run: run2, status: failed}",
        "order: in_order",
        "- expect_dlq: {run: run2, subject: triggers.v2.dlq.flowlab.reserve_stock, kind: action_failed, count: 1}",
        ": trigger of flow-lab, run run-",
        "- expect_calls: {service: flowlab, action: reserve_stock, run: run2, count: 3}",
        "- expect_calls: {service: flowlab, action: notify_customer, run: run4, count: 1}",
        r#"raw: "not json", as: run3}"#,
        "- expect_dlq: {run: run3, subject: triggers.v2.dlq.flowlab.invalid_json, kind: invalid_json, count: 1}",
        "- wait_idle: run4\n",
        "- advance: 86400s",
    ] {
        assert!(yaml.contains(wanted), "{wanted:?} not in:\n{yaml}");
    }
    let out = run(xdg, &generated);
    assert_eq!(out.status.code(), Some(0), "{}\n{yaml}", text(&out));

    // Without --services: a stand-in made from the registered manifest (its actions, failing
    // for the input the recording dead-lettered), or the command given; either way a scenario
    // that reads.
    let standin = xdg.join("standin.scenario.yaml");
    let out = lab(
        xdg,
        &[
            "scenario",
            "from-record",
            recording.to_str().unwrap(),
            "-o",
            standin.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let yaml = std::fs::read_to_string(&standin).unwrap();
    for wanted in [
        "  - name: flowlab\n    version: \"1.0.0\"\n    capabilities: [\"durable_timer.v1\"]\n",
        "      - name: reserve_stock\n",
        r#""fail_if":{"op":"in","path":"$","value":[{"order_id":"fail","total_cents":1}]}"#,
        "      - name: notify_customer\n",
    ] {
        assert!(yaml.contains(wanted), "{wanted:?} not in:\n{yaml}");
    }
    let out = lab(xdg, &["run", "--list", standin.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}\n{yaml}", text(&out));
    let out = lab(
        xdg,
        &[
            "scenario",
            "from-record",
            recording.to_str().unwrap(),
            "--command",
            "flowlab=cargo run -p triggers-sdk --example flow_lab",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains(
            "  - name: flowlab\n    command: [sh, -c, \"cargo run -p triggers-sdk --example flow_lab\"]\n"
        ),
        "{}",
        text(&out)
    );
    // The runner counts the calls of scripted services only.
    assert!(!text(&out).contains("expect_calls"), "{}", text(&out));

    // The same services (started by the replay itself): the same runs, the timer's included.
    let out = lab(
        xdg,
        &[
            "replay",
            "--services",
            services.to_str().unwrap(),
            recording.to_str().unwrap(),
        ],
    );
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("run 1 (was run-"), "{said}");
    assert_eq!(said.matches("): same").count(), 4, "{said}");

    // reserve_stock no longer fails: run 2 differs, at node reserve, without its DLQ entry.
    let changed = xdg.join("changed.scenario.yaml");
    flow_lab_services(&changed, "never-fails");
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
    assert_eq!(said.matches("): same").count(), 3, "{said}");
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

    // A recording without a run is refused before any `up` is looked for.
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(
        &empty,
        "{\"triggers_lab_recording\":1,\"created_at\":\"2026-12-01T03:00:00Z\",\"tool_version\":\"0.1.0\"}\n",
    )
    .unwrap();
    let out = lab(dir.path(), &["replay", empty.to_str().unwrap()]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("nothing to replay"), "{said}");
}
