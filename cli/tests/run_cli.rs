//! `triggers-lab run` from the outside: exit codes (0 passed, 1 failed, 2 malformed), the
//! file:line:col of a malformed file, and the reports it writes.

use triggers_testkit::cli::bin;

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

const FAILING: &str = r#"name: waits for nobody
step_timeout: 300ms
steps:
  - expect_registration: {service: nobody}
"#;

#[test]
fn a_malformed_file_gives_file_line_column_and_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("a-good.scenario.yaml");
    std::fs::write(&good, PASSING).unwrap();
    let bad = dir.path().join("b-bad.scenario.yaml");
    std::fs::write(
        &bad,
        "name: broken\nsteps:\n  - trigger: {flow: f, payload: {a: 1}, az: r1}\n",
    )
    .unwrap();
    let out = bin().arg("run").arg(dir.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let at = format!("{}:3:", bad.display());
    assert!(stderr.contains(&at), "{stderr}");
    assert!(
        stderr.contains("unknown key `az`: did you mean `as`?"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was run"), "{stderr}");
    // A duplicate key, and a YAML 1.1 boolean, are refused too.
    std::fs::write(&bad, "name: a\nname: b\nsteps: []\n").unwrap();
    let out = bin().arg("run").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("{}:2:", bad.display())));
}

/// Three problems of three kinds (a misspelt key, a bad duration, a service that does not
/// exist): all three reported, each at its line, and nothing runs.
#[test]
fn every_problem_of_a_file_is_reported_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("three.scenario.yaml");
    std::fs::write(
        &bad,
        "name: three problems\n\
         services:\n  - name: shop\n    actions: [{name: charge}]\n\
         steps:\n  - expect_registration: {servce: shop}\n\
         \x20 - advance: a while\n\
         \x20 - stop_service: shp\n",
    )
    .unwrap();
    let out = bin().arg("run").arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let f = bad.display();
    for (line, what) in [
        (6, "unknown key `servce`: did you mean `service`?"),
        (7, "steps[1].advance: \"a while\" is not a duration"),
        (
            8,
            "no service \"shp\" in `services` (did you mean \"shop\"?)",
        ),
    ] {
        let at = format!("{f}:{line}:");
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with(&at) && l.contains(what)),
            "no {what:?} at line {line}:\n{stderr}"
        );
    }
    assert!(
        stderr.contains("3 problems in 1 file; nothing was run"),
        "{stderr}"
    );
}

#[test]
fn exit_codes_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let pass = dir.path().join("pass.scenario.yaml");
    let fail = dir.path().join("fail.scenario.yaml");
    std::fs::write(&pass, PASSING).unwrap();
    std::fs::write(&fail, FAILING).unwrap();
    let junit = dir.path().join("out/junit.xml");
    let json = dir.path().join("out/report.json");

    let out = bin()
        .args(["run", "--backend", "binary", "-j", "2", "--junit"])
        .arg(&junit)
        .arg("--json")
        .arg(&json)
        .arg(&pass)
        .arg(&fail)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("PASS registers"), "{stdout}");
    assert!(stdout.contains("FAIL waits for nobody"), "{stdout}");
    assert!(
        stdout.contains("waited 300ms for a registration of \"nobody\" accepted, in vain"),
        "{stdout}"
    );
    assert!(
        stdout.trim_end().ends_with("scenarios: 1 passed, 1 failed"),
        "{stdout}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("<testcase name=\"registers\""), "{xml}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["scenarios"][1]["outcome"], "failed");
    // `-j 2` starts one nats-server for both: each scenario ran in an account of its own on it
    // ("account T2 on the shared nats-server … at nats://127.0.0.1:PORT").
    let nats: Vec<&str> = (0..2)
        .map(|i| report["scenarios"][i]["nats"].as_str().unwrap_or_default())
        .collect();
    let server = |s: &str| s.rsplit_once(" at ").map(|(_, url)| url.to_owned());
    let shared = std::env::var("TRIGGERS_NATS_ISOLATION").ok().as_deref() != Some("server")
        && std::env::var_os("TRIGGERS_NATS_URL").is_none();
    for on in nats.iter().filter(|_| shared) {
        assert!(
            on.starts_with("account T") && on.contains(" on the shared nats-server "),
            "{nats:?}"
        );
    }
    if shared {
        assert!(server(nats[0]).is_some(), "{nats:?}");
        assert_eq!(server(nats[0]), server(nats[1]), "{nats:?}");
    }

    // Only the passing one: exit 0.
    let out = bin()
        .args(["run", "--backend", "binary", "--filter", "^registers$"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A filter nothing matches: nothing to run is a usage error.
    let out = bin()
        .args(["run", "--filter", "nothing-like-this"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // --tui watches one scenario at a time.
    let out = bin()
        .args(["run", "--tui", "-j", "2"])
        .arg(&pass)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("with -j 1"));
}

#[test]
fn coverage_of_a_shipped_scenario_as_json_and_markdown_with_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cov/coverage.json");
    let md = dir.path().join("cov/coverage.md");
    let scenario = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/delivery/timer-after-condition-and-mapping.scenario.yaml");
    let out = bin()
        .args(["run", "--backend", "binary", "--coverage"])
        .arg(&json)
        .arg("--coverage-md")
        .arg(&md)
        .arg(&scenario)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("flow coverage:\n  remind v1: nodes 7/7, edges 6/6 (2 runs)\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "coverage: 2 flow versions, nodes 13/13 (100 %), edges 11/11 (100 %)\nran 1 scenario "
        ),
        "{stdout}"
    );
    assert!(
        stdout.trim_end().ends_with("scenarios: 1 passed, 0 failed"),
        "{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["format"], 1);
    let paid = report["flows"][0]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "paid")
        .unwrap();
    assert_eq!(
        paid["condition"],
        serde_json::json!({"passed": 1, "stopped": 1})
    );
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(md.starts_with("## Flow coverage\n"), "{md}");
    assert!(
        md.contains("| `remind v1` | `paid` | 1 | 1 | yes |"),
        "{md}"
    );
}
