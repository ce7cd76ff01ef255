//! `triggers-lab fuzz` against a running `up` with a scenario's scripted services beside it: a
//! planted bug (an action that fails above 1000) is found and shrunk to the boundary, with the
//! seed that reproduces it, the same twice (exit 1); a correct action passes (exit 0, `--json`);
//! a service that is not registered is a usage error (exit 2).

#![cfg(unix)]

use triggers_testkit::cli::{DownAll, bin_in, streams};

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

const BANK: &str = r"name: bank
services:
  - name: bank
    actions:
      - name: charge
        retry: {max_attempts: 1}
        input:
          type: object
          properties: {amount: {type: integer, minimum: 0, maximum: 100000}}
          required: [amount]
        behavior: {fail_if: {path: $.amount, op: gt, value: 1000}, error: ledger overflow, echo: true}
      - name: refund
        retry: {max_attempts: 1}
        input:
          type: object
          properties: {amount: {type: integer, minimum: 0, maximum: 100000}}
          required: [amount]
        behavior: {echo: true}
steps:
  - expect_registration: {service: bank}
";

fn lab(xdg: &Path, args: &[&str]) -> Output {
    bin_in(xdg).args(args).output().unwrap()
}

#[test]
fn fuzz_finds_shrinks_and_reproduces_a_planted_bug_on_up() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path();
    let scenario = xdg.join("bank.scenario.yaml");
    std::fs::write(&scenario, BANK).unwrap();
    let out = lab(
        xdg,
        &[
            "up",
            "--detach",
            "--backend",
            "binary",
            "--port",
            "0",
            "--services",
            scenario.to_str().unwrap(),
        ],
    );
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    // Stopped whatever happens below.
    let _down = DownAll(xdg.to_owned());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = lab(xdg, &["services", "--json"]);
        if String::from_utf8_lossy(&out.stdout).contains("\"bank\"") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "bank never registered: {:?}",
            streams(&out)
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The planted bug: found, shrunk to the smallest amount that fails, reproduced by its seed.
    let fuzz = |action: &str, extra: &[&str]| {
        let mut args = vec![
            "fuzz",
            "--service",
            "bank",
            "--action",
            action,
            "--runs",
            "40",
            "--seed",
            "7",
        ];
        args.extend_from_slice(extra);
        lab(xdg, &args)
    };
    let out = fuzz("charge", &[]);
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("fuzzing bank.charge: 40 inputs, seed 7"),
        "{stderr}"
    );
    assert!(stderr.contains("shrinking it"), "{stderr}");
    assert!(stdout.contains("FAIL bank.charge: input "), "{stdout}");
    assert!(
        stdout.contains("minimal failing input: {\"amount\":1001}"),
        "{stdout}"
    );
    assert!(stdout.contains("ledger overflow"), "{stdout}");
    assert!(
        stdout.contains(
            "reproduce: triggers-lab fuzz --service bank --action charge --runs 40 --seed 7"
        ),
        "{stdout}"
    );
    // The same seed, the same verdict.
    let again = fuzz("charge", &[]);
    assert_eq!(streams(&again).0, stdout);

    // A correct action passes. (No --invalid: scripted services do not check their input
    // schema; scenarios/tests/fuzz.rs covers that against the SDK.)
    let out = fuzz("refund", &["--json"]);
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["runs"], 40);
    assert_eq!(report["seed"], 7);
    assert_eq!(report["invalid_runs"], 0);
    assert!(report["failure"].is_null(), "{report:#}");

    // Nothing registered by that name: a usage error naming what is.
    let out = lab(xdg, &["fuzz", "--service", "nobody", "--action", "x"]);
    let (_, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("(registered: bank)"), "{stderr}");
}
