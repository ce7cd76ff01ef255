//! `triggers-lab conform`: usage errors, the list of checks, a command that cannot start, and a
//! service that does not register (the kit's verdicts are tested in the scenarios crate).

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(triggers_testkit::cli::bin_path())
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn without_a_command_it_is_a_usage_error() {
    let out = run(&["conform"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("after `--`"), "{err}");
}

#[test]
fn list_names_every_check_and_help_names_the_exit_codes() {
    let out = run(&["conform", "--list"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for check in [
        "register",
        "hop_in",
        "timer_rejected",
        "conformant",
        "shutdown",
    ] {
        assert!(text.contains(check), "{text}");
    }
    let help = run(&["conform", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("Exit codes"), "{text}");
}

#[test]
fn an_unknown_check_is_a_usage_error_and_a_missing_program_an_environment_one() {
    let out = run(&["conform", "--only", "nope", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = run(&["conform", "--", "/nonexistent/service"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/service"), "{err}");
}

#[test]
fn a_service_that_never_registers_fails_with_exit_1() {
    let out = run(&["conform", "--timeout", "3s", "--", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("FAIL  register"), "{text}");
    assert!(text.contains("score: 0%"), "{text}");
}

#[test]
fn a_timeout_below_the_protocols_own_waits_is_a_usage_error() {
    for timeout in ["0s", "1s"] {
        let out = run(&["conform", "--timeout", timeout, "--", "true"]);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("too short") && err.contains("3s"), "{err}");
    }
}
