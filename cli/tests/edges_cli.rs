//! The rough edges of issue 16, each tried as a new user would: from the outside, on the built
//! binary, with the paths, pipes and environments people have.

use triggers_testkit::cli::streams;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    let mut c = Command::new(triggers_testkit::cli::bin_path());
    c.env_remove("TRIGGERS_NATS_URL")
        .env_remove("TRIGGERS_NATS_BACKEND")
        .env("NO_COLOR", "1");
    c
}

const PASSING: &str = r#"name: registers
steps:
  - register:
      manifest:
        protocol_version: 1.0.0
        service: shop
        service_version: 1.0.0
        actions: []
        service_sources: [{name: nats, transport: nats, default: shop.inbound}]
        supports_nodes: []
  - expect_registration: {service: shop}
"#;

/// A scripted service whose flow calls `charge` once per run.
const ONE_CALL: &str = r#"name: one call
services:
  - name: shop
    capabilities: [durable_timer.v1]
    actions:
      - name: charge
        behavior: {return: {ok: true}}
flows:
  - id: order
    nodes:
      - {id: in, type: service-in, service: shop}
      - {id: charge, type: action, service: shop, action: charge}
    edges:
      - {id: e1, from: in, to: charge}
steps:
  - deploy: order
  - trigger: {flow: order, payload: {n: 1}, as: r1}
  - wait_settled: r1
  - expect_calls: {service: shop, action: charge, run: r1, count: 2, timeout: 30s}
"#;

/// The flow of ONE_CALL as a flow file, for `deploy`.
const ORDER_FLOW: &str = "id: order\nnodes:\n  - {id: in, type: service-in, service: shop}\n  - {id: charge, type: action, service: shop, action: charge}\nedges:\n  - {id: e1, from: in, to: charge}\n";

/// A flow of ONE_CALL's shop that waits a day after its charge: its runs stay open (waiting)
/// until the clock is advanced.
const LATER_FLOW: &str = "id: later\nnodes:\n  - {id: in, type: service-in, service: shop, config: {transport: nats, target: shop.inbound}}\n  - {id: charge, type: action, service: shop, action: charge}\n  - {id: wait, type: timer, config: {delay_ms: 86400000}}\n  - {id: in2, type: service-in, service: shop, config: {transport: nats, target: shop.inbound}}\n  - {id: again, type: action, service: shop, action: charge}\nedges:\n  - {id: e1, from: in, to: charge}\n  - {id: e2, from: charge, to: wait}\n  - {id: e3, from: wait, to: in2}\n  - {id: e4, from: in2, to: again}\n";

/// Stops every `up` of a test's runtime directory when dropped, whatever its assertions did.
struct DownAll<'a>(&'a dyn Fn(&[&str]) -> Output);

impl Drop for DownAll<'_> {
    fn drop(&mut self) {
        (self.0)(&["down", "--all"]);
    }
}

/// `up --detach` on a binary server on `port`, with ONE_CALL's scripted services (written into
/// `dir`), through `lab`; its output.
fn up_detached_with_one_call(lab: &dyn Fn(&[&str]) -> Output, dir: &Path, port: &str) -> Output {
    let scenario = dir.join("shop.scenario.yaml");
    std::fs::write(&scenario, ONE_CALL).unwrap();
    lab(&[
        "up",
        "--detach",
        "--backend",
        "binary",
        "--port",
        port,
        "--services",
        scenario.to_str().unwrap(),
    ])
}

#[test]
fn run_does_not_use_an_exported_nats_url_and_says_so() {
    // What `up` tells people to export; here nothing listens there at all.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.scenario.yaml");
    std::fs::write(&file, PASSING).unwrap();
    let out = bin()
        .env("TRIGGERS_NATS_URL", "nats://127.0.0.1:1")
        .arg("run")
        .arg(&file)
        .output()
        .unwrap();
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("TRIGGERS_NATS_URL is set (nats://127.0.0.1:1)")
            && stderr.contains("--nats nats://127.0.0.1:1"),
        "{stderr}"
    );
    // --backend auto says what it chose.
    assert!(stderr.contains("nats-server: "), "{stderr}");
}

#[test]
fn a_bare_file_name_runs_its_external_service_in_the_current_folder() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("svc.sh"),
        "#!/bin/sh\necho started in $(pwd)\nsleep 30\n",
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.path().join("svc.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    }
    std::fs::write(
        dir.path().join("longext.yaml"),
        "name: bare\nservices:\n  - {name: svc, command: [./svc.sh], ready: started}\nsteps:\n  - sleep: 100ms\n",
    )
    .unwrap();
    let out = bin()
        .current_dir(dir.path())
        .args(["run", "longext.yaml"])
        .output()
        .unwrap();
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");

    // A missing program is named as such, not blamed on the folder.
    std::fs::write(
        dir.path().join("missing.yaml"),
        "name: missing\nservices:\n  - {name: svc, command: [./nope.sh], ready: started}\nsteps:\n  - sleep: 100ms\n",
    )
    .unwrap();
    let out = bin()
        .current_dir(dir.path())
        .args(["run", "missing.yaml"])
        .output()
        .unwrap();
    let (stdout, _) = streams(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("the program \"./nope.sh\" was not found"),
        "{stdout}"
    );
}

#[test]
fn a_closed_pipe_is_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["a", "b"] {
        std::fs::write(dir.path().join(format!("{name}.scenario.yaml")), PASSING).unwrap();
    }
    // As `run ... | head -0`: the reader is gone before anything is written.
    let mut child = bin()
        .arg("run")
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn folders_give_scenario_files_only() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("flows")).unwrap();
    std::fs::create_dir_all(root.join(".hidden")).unwrap();
    std::fs::write(root.join("a.scenario.yaml"), PASSING).unwrap();
    // None of these is a scenario: each would abort the run if it were read as one.
    std::fs::write(
        root.join("flows/order.yaml"),
        "id: order\nnodes: []\nedges: []\n",
    )
    .unwrap();
    std::fs::write(root.join(".hidden/b.scenario.yaml"), "not: [a scenario").unwrap();
    std::fs::write(root.join(".c.scenario.yaml"), "not: [a scenario").unwrap();
    std::fs::write(root.join("ci.yml"), "jobs: {}\n").unwrap();
    let out = bin().arg("run").arg(root).output().unwrap();
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("scenarios: 1 passed, 0 failed"), "{stdout}");
    // --list shows what would run, and runs nothing.
    let out = bin().args(["run", "--list"]).arg(root).output().unwrap();
    let (stdout, _) = streams(&out);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.starts_with("registers  ("), "{stdout}");
}

#[test]
fn verbose_parallel_output_keeps_each_scenario_together() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["a", "b", "c"] {
        std::fs::write(
            dir.path().join(format!("{name}.scenario.yaml")),
            PASSING.replace("name: registers", &format!("name: scenario {name}")),
        )
        .unwrap();
    }
    let out = bin()
        .args(["run", "-v", "-j", "3"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    // Each block: the header, its 2 steps, its verdict, with no other scenario's line between.
    for name in ["a", "b", "c"] {
        let lines: Vec<&str> = stdout.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.ends_with(&format!("] scenario {name}")))
            .unwrap_or_else(|| panic!("{stdout}"));
        assert!(lines[at + 1].contains("ok   1/2"), "{stdout}");
        assert!(lines[at + 2].contains("ok   2/2"), "{stdout}");
        assert!(
            lines[at + 3].starts_with(&format!("PASS scenario {name}")),
            "{stdout}"
        );
    }
}

#[test]
fn timeout_flag_is_the_limit_reported_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slow.scenario.yaml");
    std::fs::write(
        &file,
        "name: slow\ntimeout: 1m\nsteps:\n  - expect_registration: {service: nobody, timeout: 30s}\n",
    )
    .unwrap();
    let started = Instant::now();
    let out = bin()
        .args(["run", "--timeout", "1s"])
        .arg(&file)
        .output()
        .unwrap();
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("the scenario's timeout, 1s, ran out"),
        "{stdout}"
    );
    assert!(!stdout.contains("(1m)"), "{stdout}");
    // The server's start and stop around it, but not the file's minute nor the step's 30 s.
    assert!(started.elapsed() < Duration::from_secs(15), "{stdout}");
}

#[test]
fn expect_calls_with_a_wrong_count_fails_once_the_run_has_settled() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("calls.scenario.yaml");
    std::fs::write(&file, ONE_CALL).unwrap();
    let started = Instant::now();
    let out = bin().arg("run").arg(&file).output().unwrap();
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("exactly 2 call(s) of shop.charge")
            && stdout.contains("found 1: the run settled"),
        "{stdout}"
    );
    // Not the step's 30 s.
    assert!(started.elapsed() < Duration::from_secs(15), "{stdout}");
}

#[test]
fn deploy_refuses_a_misspelt_key_at_its_line_with_a_suggestion_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("flow.yaml");
    std::fs::write(
        &flow,
        "id: order\nnodes:\n  - {id: in, type: service-in, service: shop}\nedgs: []\nversoin: 2\n",
    )
    .unwrap();
    // Read before anything is asked of an `up`: none needs to run.
    let xdg = tempfile::tempdir().unwrap();
    let out = bin()
        .env("XDG_RUNTIME_DIR", xdg.path())
        .arg("deploy")
        .arg(&flow)
        .output()
        .unwrap();
    let (_, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let shown = flow.display();
    assert!(
        stderr.contains(&format!(
            "{shown}:4:1: flow: unknown key `edgs` (did you mean `edges`?)"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{shown}:5:1: flow: unknown key `versoin`")),
        "every problem, not only the first: {stderr}"
    );
    assert!(stderr.contains("2 problems"), "{stderr}");
}

#[test]
fn exit_codes_are_the_same_across_commands_and_in_every_help() {
    let xdg = tempfile::tempdir().unwrap();
    // No `up` running: the environment, 3.
    for args in [
        &["trigger", "order", "--wait"][..],
        &["advance", "5 mins"][..],
        &["status"][..],
        &["status", "--json"][..],
    ] {
        let out = bin()
            .env("XDG_RUNTIME_DIR", xdg.path())
            .args(args)
            .output()
            .unwrap();
        let (_, stderr) = streams(&out);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stderr}");
        assert!(stderr.contains("no running `triggers-lab up`"), "{stderr}");
        assert!(!stderr.contains("no responders"), "{stderr}");
    }
    // Usage: 2.
    let out = bin().args(["run", "-j", "0", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = bin()
        .args(["trigger", "order", "{not json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", streams(&out).1);
    // A bad --instance name is a usage error wherever it is given, before anything is started.
    for args in [
        &["up", "--detach", "--instance", "../evil"][..],
        &["up", "--instance", "a b"][..],
        &["runs", "list", "--instance", ""][..],
        &["down", "--instance", "x/y"][..],
    ] {
        let out = bin()
            .env("XDG_RUNTIME_DIR", xdg.path())
            .args(args)
            .output()
            .unwrap();
        let (_, stderr) = streams(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("letters, digits"), "{args:?}: {stderr}");
    }
    for command in [
        "run", "demo", "up", "deploy", "trigger", "advance", "watch", "manifest",
    ] {
        let out = bin().args([command, "--help"]).output().unwrap();
        let (stdout, _) = streams(&out);
        assert!(
            stdout.contains("Exit codes") && stdout.contains("3    environment"),
            "{command}: {stdout}"
        );
    }
    // The help of `run --backend` names no flag `run` lacks.
    let (stdout, _) = streams(&bin().args(["run", "--help"]).output().unwrap());
    assert!(!stdout.contains("--nats/"), "{stdout}");
}

#[test]
fn reports_go_to_standard_output_with_a_dash_and_hold_totals() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.scenario.yaml");
    std::fs::write(&file, PASSING).unwrap();
    let out = bin()
        .args(["run", "--json", "-"])
        .arg(&file)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!dir.path().join("-").exists());
    // Standard output holds the report and nothing else.
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("{e}: {stdout}");
    });
    assert_eq!(report["totals"]["passed"], 1);
    assert_eq!(report["totals"]["failed"], 0);
}

#[test]
fn the_readme_manifest_example_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let command = readme
        .lines()
        .find_map(|l| {
            l.split('`')
                .find(|part| part.starts_with("cargo run -p triggers-lab -- manifest check "))
        })
        .expect("the README shows a manifest check");
    let file = command.rsplit(' ').next().unwrap();
    let out = bin()
        .current_dir(&root)
        .args(["manifest", "check", file])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", streams(&out).0);
}

#[test]
fn demo_runs_from_any_folder_with_the_binary_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = bin()
        .current_dir(dir.path())
        // No cargo, no source tree: only the binary and a nats-server.
        .env("CARGO", "/nonexistent")
        .args(["demo", "-j", "2"])
        .output()
        .unwrap();
    let (stdout, stderr) = streams(&out);
    assert!(
        stdout.contains("PASS flow-lab, scripted"),
        "{stdout}\n{stderr}"
    );
    // Every shipped flow-lab scenario but the two that need cargo (the real example).
    let shipped =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/flow-lab"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".scenario.yaml"))
            .filter(|n| n != "flow-lab.scenario.yaml" && n != "fuzz.scenario.yaml")
            .count();
    assert!(
        stdout.contains(&format!("ran {shipped} scenarios")),
        "{shipped} expected: {stdout}"
    );
    assert!(!stderr.contains("No such file"), "{stderr}");
    // Step by step; what each step did only with -v.
    assert!(stdout.contains("  ok   1/"), "{stdout}");
    assert!(!stdout.contains("(0.00s): "), "{stdout}");
}

#[test]
fn demo_v_adds_what_each_step_did() {
    let dir = tempfile::tempdir().unwrap();
    let out = bin()
        .current_dir(dir.path())
        .args(["demo", "-v", "-j", "2"])
        .output()
        .unwrap();
    let (stdout, _) = streams(&out);
    assert!(stdout.contains("): v1, broadcast on"), "{stdout}");
}

#[test]
fn up_detaches_on_a_fixed_port_and_status_runs_flows_down_find_it() {
    let xdg = tempfile::tempdir().unwrap();
    let lab = |args: &[&str]| {
        bin()
            .env("XDG_RUNTIME_DIR", xdg.path())
            .args(args)
            .output()
            .unwrap()
    };
    // A port of our own: 4222 may be in use on a shared machine.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    // With a scenario's scripted services beside it.
    let out = up_detached_with_one_call(&lab, xdg.path(), &port);
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("nats://127.0.0.1:{port}")),
        "{stdout}"
    );
    assert!(stdout.contains("instance: default"), "{stdout}");
    // Stopped whatever happens below.
    let _down = DownAll(&lab);

    // The port is taken now: a second `up` on it says by whom, exit 3.
    let out = lab(&[
        "up",
        "--backend",
        "binary",
        "--port",
        &port,
        "--instance",
        "two",
    ]);
    let (_, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "port {port} on 127.0.0.1 is taken by `triggers-lab up` default"
        )),
        "{stderr}"
    );

    let out = lab(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status[0]["instance"], "default");
    assert_eq!(status[0]["answers"], true);

    let out = lab(&["services", "--json"]);
    let services: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(services[0]["name"], "shop", "{services}");

    // A refused deploy: exit 1, and the reason in `up`'s log.
    let flow = xdg.path().join("flow.yaml");
    std::fs::write(
        &flow,
        "id: order\nnodes:\n  - {id: in, type: service-in, service: nobody}\nedges: []\n",
    )
    .unwrap();
    let out = lab(&["deploy", flow.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", streams(&out).1);
    let log = std::fs::read_to_string(xdg.path().join("triggers-lab/default.log")).unwrap();
    assert!(
        log.contains("REFUSED      deploy of order: unknown_service"),
        "{log}"
    );
    assert!(log.contains("clock:    virtual"), "no Debug text: {log}");

    for args in [&["flows", "--json"][..], &["runs", "list", "--json"]] {
        let out = lab(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v, serde_json::json!([]), "{args:?}");
    }
    // A flow on the scripted service: deployed, triggered, settled, listed.
    std::fs::write(&flow, ORDER_FLOW).unwrap();
    let out = lab(&["deploy", flow.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", streams(&out).1);
    let out = lab(&["trigger", "order", "{\"n\": 1}", "--wait"]);
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains(": succeeded"), "no Debug text: {stdout}");
    let out = lab(&["runs", "list", "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs[0]["status"], "succeeded", "{runs}");
    let out = lab(&["trigger", "order", "{\"n\": 2}", "--wait"]);
    assert_eq!(out.status.code(), Some(0), "{}", streams(&out).1);
    let out = lab(&["runs", "list", "--last", "1", "--json"]);
    let last: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(last.as_array().map(Vec::len), Some(1), "{last}");
    let out = lab(&["runs", "list", "--json"]);
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(all.as_array().map(Vec::len), Some(2), "{all}");
    assert_eq!(last[0]["id"], all[1]["id"], "the newest: {all}");

    // A run left waiting on a day's timer is cancelled by hand: its timer is dropped, it settles
    // `cancelled`, and stays so when the clock passes the timer's due time.
    std::fs::write(&flow, LATER_FLOW).unwrap();
    let out = lab(&["deploy", flow.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", streams(&out).1);
    let out = lab(&["trigger", "later", "{}"]);
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let run_id = stdout
        .split_whitespace()
        .find(|w| w.starts_with("run-"))
        .unwrap_or_else(|| panic!("no run id in {stdout}"))
        .to_owned();
    // Waiting (the charge done, the timer armed): nothing is fired until `advance`.
    let show = || {
        let out = lab(&["runs", "show", &run_id, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", streams(&out).1);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let mut run = show();
    for _ in 0..600 {
        if run["status"] == "waiting" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        run = show();
    }
    assert_eq!(run["status"], "waiting", "{run}");
    let out = lab(&["runs", "cancel", &run_id]);
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "run {run_id} cancelled by hand; dropped: timers wait"
        )),
        "{stdout}"
    );
    let run = show();
    assert_eq!(run["status"], "cancelled", "{run}");
    assert_eq!(run["timers"], serde_json::json!([]), "{run}");
    // Cancelled already: a verdict, exit 1, saying so; an unknown run likewise.
    let out = lab(&["runs", "cancel", &run_id, "--json"]);
    let (_, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("it was cancelled already"), "{stderr}");
    let out = lab(&["runs", "cancel", "run-nosuch"]);
    let (_, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no such run is kept"), "{stderr}");
    // The day passes: nothing fires for the cancelled run.
    let out = lab(&["advance", "48h"]);
    assert_eq!(out.status.code(), Some(0), "{}", streams(&out).1);
    let run = show();
    assert_eq!(run["status"], "cancelled", "{run}");
    assert!(
        !run["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["status"] == "fired"),
        "{run}"
    );

    let out = lab(&["down"]);
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.starts_with("stopped default"), "{stdout}");
    let out = lab(&["status", "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
    // Nothing left to stop: the environment, 3.
    assert_eq!(lab(&["down"]).status.code(), Some(3));
}

/// A detached `up` logs a line per record: hundreds of megabytes an hour under load, in the
/// runtime directory (often a small tmpfs). Its log stays within about twice its cap: past it, the
/// earlier part goes to `<log>.1` and the log starts again, saying so.
#[test]
fn a_detached_ups_log_is_kept_within_its_cap() {
    let xdg = tempfile::tempdir().unwrap();
    let lab = |args: &[&str]| {
        bin()
            .env("XDG_RUNTIME_DIR", xdg.path())
            .env("TRIGGERS_LAB_UP_LOG_CAP", "4096")
            .args(args)
            .output()
            .unwrap()
    };
    let out = up_detached_with_one_call(&lab, xdg.path(), "0");
    assert_eq!(out.status.code(), Some(0), "{}", streams(&out).1);
    let _down = DownAll(&lab);
    let flow = xdg.path().join("flow.yaml");
    std::fs::write(&flow, ORDER_FLOW).unwrap();
    assert_eq!(
        lab(&["deploy", flow.to_str().unwrap()]).status.code(),
        Some(0)
    );
    let out = lab(&["load", "order", "--runs", "100", "--concurrency", "8"]);
    assert_eq!(out.status.code(), Some(0), "{}", streams(&out).1);

    let log = xdg.path().join("triggers-lab/default.log");
    let aside = xdg.path().join("triggers-lab/default.log.1");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !aside.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no {} after 20 s; the log is {} bytes",
            aside.display(),
            std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Idle now: the next check cuts the log back if the load left it over the cap again.
    std::thread::sleep(Duration::from_secs(3));
    let size = std::fs::metadata(&log).unwrap().len();
    assert!(size <= 4096, "the log is {size} bytes, above its cap");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("its earlier part is in"), "{text}");
    assert!(std::fs::metadata(&aside).unwrap().len() > 4096);
}

#[test]
fn retries_fail_fast_vars_and_json_messages() {
    let dir = tempfile::tempdir().unwrap();
    let failing = dir.path().join("a-fails.scenario.yaml");
    std::fs::write(
        &failing,
        "name: fails\nsteps:\n  - expect_registration: {service: nobody, timeout: 200ms}\n",
    )
    .unwrap();
    let with_var = dir.path().join("b-var.scenario.yaml");
    std::fs::write(
        &with_var,
        // In the manifest (a value the runner substitutes); the expectation names the result.
        PASSING.replace("service: shop\n", "service: \"${vars.svc}\"\n"),
    )
    .unwrap();

    // --retries: the failure is tried again, and reported as such.
    let out = bin()
        .args(["run", "--retries", "1", "--json", "-", "--var", "svc=shop"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("RETRY fails (attempt 2 of 2)"), "{stderr}");
    assert!(
        stderr.contains("FAIL fails") && stderr.contains("after 2 attempts"),
        "{stderr}"
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["totals"]["passed"], 1, "--var reached the scenario");
    assert_eq!(
        report["scenarios"][0]["failed_attempts"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // Without the var: said plainly.
    let out = bin().arg("run").arg(&with_var).output().unwrap();
    let (stdout, _) = streams(&out);
    assert!(stdout.contains("--var svc=VALUE"), "{stdout}");

    // --fail-fast: the second is not run.
    let out = bin()
        .args(["run", "--fail-fast", "--var", "svc=shop"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (stdout, _) = streams(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout.contains("stopped by --fail-fast"), "{stdout}");
    assert!(!stdout.contains("PASS registers"), "{stdout}");

    // --message-format json: one JSON object a line, nothing else, on stdout.
    let out = bin()
        .args(["run", "--message-format", "json", "--var", "svc=shop"])
        .arg(&with_var)
        .output()
        .unwrap();
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let types: Vec<String> = stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            v["type"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(types.first().map(String::as_str), Some("scenario_started"));
    assert_eq!(types.last().map(String::as_str), Some("scenario_finished"));
}

#[test]
fn init_scaffolds_a_scenario_and_a_flow_that_run_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let out = bin()
        .current_dir(dir.path())
        .args(["init", "checks", "--service", "billing"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", streams(&out).1);
    assert!(dir.path().join("checks/flows/order.yaml").is_file());
    // The folder holds a flow and a scenario: `run` takes the scenario only, and it passes.
    let out = bin()
        .current_dir(dir.path())
        .args(["run", "checks"])
        .output()
        .unwrap();
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("scenarios: 1 passed, 0 failed"), "{stdout}");
    // The flow file deploys as written: it reads without a problem.
    let again = bin()
        .current_dir(dir.path())
        .args(["init", "checks"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2), "nothing is overwritten");

    for shell in ["bash", "zsh", "fish"] {
        let out = bin().args(["completions", shell]).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&out.stdout).contains("triggers-lab"));
    }
}

/// A scripted service whose `hang` action answers in an hour: a run of `slow` stays running.
const HANGS: &str = r#"name: hangs
services:
  - name: slow
    actions:
      - name: hang
        timeout: 2h
        behavior: {sleep: 1h, return: {ok: true}}
flows:
  - id: slow
    nodes:
      - {id: in, type: service-in, service: slow}
      - {id: hang, type: action, service: slow, action: hang}
    edges:
      - {id: e1, from: in, to: hang}
steps:
  - deploy: slow
"#;

#[test]
fn trigger_wait_on_a_run_cancelled_by_hand_exits_1() {
    let xdg = tempfile::tempdir().unwrap();
    let lab = |args: &[&str]| {
        bin()
            .env("XDG_RUNTIME_DIR", xdg.path())
            .args(args)
            .output()
            .unwrap()
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let scenario = xdg.path().join("slow.scenario.yaml");
    std::fs::write(&scenario, HANGS).unwrap();
    let out = lab(&[
        "up",
        "--detach",
        "--backend",
        "binary",
        "--port",
        &port,
        "--services",
        scenario.to_str().unwrap(),
    ]);
    let _down = DownAll(&lab);
    assert_eq!(out.status.code(), Some(0), "{}", streams(&out).1);
    let flow = xdg.path().join("slow.yaml");
    std::fs::write(
        &flow,
        "id: slow\nnodes:\n  - {id: in, type: service-in, service: slow}\n  - {id: hang, type: action, service: slow, action: hang}\nedges:\n  - {id: e1, from: in, to: hang}\n",
    )
    .unwrap();
    let out = lab(&["deploy", flow.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", streams(&out).1);

    // `trigger --wait` prints the run's id first, then waits: it is cancelled meanwhile (or
    // before --wait looks at it: either way it sees the run settled `cancelled`).
    let mut waiting = bin()
        .env("XDG_RUNTIME_DIR", xdg.path())
        .args(["trigger", "slow", "{}", "--wait", "--wait-timeout", "10m"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(waiting.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    let run_id = first.trim().to_owned();
    assert!(run_id.starts_with("run-"), "no run id: {first:?}");
    let out = lab(&["runs", "cancel", &run_id]);
    assert_eq!(out.status.code(), Some(0), "{}", streams(&out).1);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let mut stderr = String::new();
    waiting
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = waiting.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{rest}\n{stderr}");
    assert!(rest.contains(&format!("run {run_id}: cancelled")), "{rest}");
    assert!(
        stderr.contains(&format!("run {run_id} was cancelled before it settled")),
        "{stderr}"
    );
}
