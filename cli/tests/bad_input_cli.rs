//! Out-of-range input on the command line: a usage error (exit code 2) naming the argument and
//! what would be accepted, never a panic or a silent wrap. None of these needs a running `up`:
//! the input is refused before anything connects.

use std::process::Output;

use triggers_testkit::cli::bin;

fn refused(out: &Output, says: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for s in says {
        assert!(stderr.contains(s), "{s:?} not in: {stderr}");
    }
}

const SCENARIO: &str = "steps:\n  - sleep: 10ms\n";

#[test]
fn advance_refuses_durations_out_of_range() {
    for (text, says) in [
        (
            "99999999999d",
            "\"99999999999d\" is too long: a duration is at most 100 years",
        ),
        ("1e300", "\"1e300\" is too long"),
        ("18446744073709551616", "too long"),
        ("NaN", "not a duration"),
        ("soon", "not a duration"),
    ] {
        let out = bin()
            .args(["advance", "--nats", "nats://127.0.0.1:1", text])
            .output()
            .unwrap();
        refused(&out, &["<DURATION>", says]);
    }
}

#[test]
fn run_refuses_a_timeout_out_of_range_and_no_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.yaml");
    std::fs::write(&file, SCENARIO).unwrap();
    for (args, says) in [
        (
            &["--timeout", "1e300"][..],
            &["--timeout <DURATION>", "too long"][..],
        ),
        (
            &["--timeout", "99999999999d"],
            &["--timeout <DURATION>", "at most 100 years"],
        ),
        (
            &["--timeout=-5"],
            &["--timeout <DURATION>", "\"-5\" is negative"],
        ),
        (&["-j", "0"], &["--jobs <N>", "would run none"]),
        (
            &["-j", "99999999999999999999999"],
            &["--jobs <N>", "not a whole number"],
        ),
    ] {
        let out = bin().arg("run").args(args).arg(&file).output().unwrap();
        refused(&out, says);
    }
}

#[test]
fn run_refuses_scenario_values_out_of_range_with_file_line_column() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.yaml");
    for (text, at, says) in [
        (
            "timeout: 1e300\nsteps:\n  - sleep: 1s\n",
            ":1:10:",
            "timeout: \"1e300\" is too long",
        ),
        (
            "steps:\n  - advance: 99999999999d\n",
            ":2:14:",
            "steps[0].advance",
        ),
        (
            "steps:\n  - publish: {subject: a, headers: {\"a b\": v}}\n",
            ":2:5:",
            "header \"a b\" cannot be sent on NATS",
        ),
        (
            "services:\n  - name: s\n    actions:\n      - {name: a, retry: {backoff_factor: .inf}}\nsteps:\n  - sleep: 1s\n",
            ":4:9:",
            "retry.backoff_factor: is inf",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let out = bin().arg("run").arg(&file).output().unwrap();
        refused(
            &out,
            &[&format!("{}{at}", file.display()), says, "nothing was run"],
        );
    }
}

#[test]
fn deploy_refuses_a_flow_version_below_1() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("flow.yaml");
    for version in ["0", "-7"] {
        std::fs::write(
            &file,
            format!(
                "id: order\nversion: {version}\nnodes:\n  - {{id: in, type: service-in, service: shop}}\nedges: []\n"
            ),
        )
        .unwrap();
        let out = bin()
            .args(["deploy", "--nats", "nats://127.0.0.1:1"])
            .arg(&file)
            .output()
            .unwrap();
        refused(
            &out,
            &[&format!(
                "{}:2:1: flow \"order\": version: is {version}, must be 1 or more",
                file.display()
            )],
        );
    }
    // Beyond i64: the file does not even decode as a flow.
    std::fs::write(
        &file,
        "id: order\nversion: 9223372036854775808\nnodes: []\nedges: []\n",
    )
    .unwrap();
    let out = bin()
        .args(["deploy", "--nats", "nats://127.0.0.1:1"])
        .arg(&file)
        .output()
        .unwrap();
    refused(&out, &[&format!("{}:2:", file.display())]);
}
