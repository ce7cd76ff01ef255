//! The DLQ from the command line (`dlq list`, `dlq show`, `runs show`), `trigger --wait` on a
//! run that ends in the DLQ (its entry waited for, and named), and on a run parked on the
//! virtual clock (it returns at once, saying what the run waits for, not after the timeout).

#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use triggers_testkit::cli::{Up, bin_in, streams, text};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn lab(xdg: &Path, args: &[&str]) -> Output {
    bin_in(xdg).args(args).output().unwrap()
}

/// `up` with the scripted `shop`, once it has registered.
fn up(xdg: &Path) -> Up {
    up_with(xdg, &[])
}

/// [`up`] with more flags.
fn up_with(xdg: &Path, extra: &[&str]) -> Up {
    let mut child = bin_in(xdg)
        .args(["up", "--backend", "binary", "--port", "0", "--quiet"])
        .args(extra)
        .arg("--services")
        .arg(data("dlq-and-timer.scenario.yaml"))
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
        let out = lab(xdg, &["services", "--json"]);
        if String::from_utf8_lossy(&out.stdout).contains("\"shop\"") {
            return up;
        }
        assert!(
            Instant::now() < deadline,
            "shop never registered: {}",
            text(&out)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_dlq_from_the_command_line() {
    let xdg = tempfile::tempdir().unwrap();
    let _up = up(xdg.path());
    for flow in ["order.flow.yaml", "later.flow.yaml"] {
        let out = lab(xdg.path(), &["deploy", data(flow).to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    }

    // A run that ends in the DLQ: --wait says so, with its entry (waited for if late).
    let out = lab(
        xdg.path(),
        &["trigger", "order", r#"{"order_id":"o-1"}"#, "--wait"],
    );
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let run_id = stdout.lines().next().unwrap().trim().to_owned();
    assert!(
        stdout.contains(&format!("run {run_id} ended in the DLQ: 1 entry")),
        "{stdout}{stderr}"
    );

    // dlq list, all and by run; --json.
    let out = lab(xdg.path(), &["dlq", "list", "--run", &run_id]);
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let first = stdout.lines().next().unwrap_or("");
    assert!(
        first.contains("triggers.v2.dlq.shop.ship")
            && first.contains("action_failed")
            && first.contains(&run_id),
        "{stdout}"
    );
    assert!(stdout.contains("carrier refused"), "{stdout}");
    let msg_id = first.split_whitespace().last().unwrap().to_owned();
    let out = lab(
        xdg.path(),
        &["dlq", "list", "--run", "run-0000000000000000"],
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no DLQ entries of run"),
        "{}",
        text(&out)
    );
    let out = lab(xdg.path(), &["dlq", "list", "--json"]);
    let entries: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(entries.as_array().map(Vec::len), Some(1), "{entries}");

    // dlq show: the entry in full.
    let out = lab(xdg.path(), &["dlq", "show", &msg_id]);
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    for want in [
        "kind:     action_failed",
        "error:    carrier refused",
        "envelope: {",
        "body:     {\"order_id\":\"o-1\"}",
    ] {
        assert!(stdout.contains(want), "{want:?} in:\n{stdout}");
    }
    let out = lab(xdg.path(), &["dlq", "show", "nope"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    // runs show lists the run's DLQ entries in full.
    let out = lab(xdg.path(), &["runs", "show", &run_id]);
    let (stdout, _) = streams(&out);
    assert!(
        stdout.contains("1 DLQ entry:") && stdout.contains("error:    carrier refused"),
        "{stdout}"
    );

    // A run parked on the virtual clock: --wait returns at once, saying what it waits for.
    let started = Instant::now();
    let out = lab(
        xdg.path(),
        &["trigger", "later", "{}", "--wait", "--wait-timeout", "10m"],
    );
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("is waiting on the virtual clock and will not settle by itself")
            && stderr.contains("timers armed: hold"),
        "{stdout}{stderr}"
    );
    // Not the ten minutes of --wait-timeout (a bound generous for a loaded machine).
    assert!(
        started.elapsed() < Duration::from_secs(300),
        "{:?}",
        started.elapsed()
    );
}

/// cli.md's record/replay sequence: `up --record`, a run that ends in the DLQ waited for, then
/// `up` stopped at once. The recording holds the run's DLQ entry (it arrived after the run
/// settled, and was lost, so `replay` reported a difference against identical services).
#[test]
fn a_recording_stopped_right_after_trigger_wait_holds_the_dlq_entry() {
    let xdg = tempfile::tempdir().unwrap();
    let record = xdg.path().join("rec.jsonl");
    let mut up = up_with(xdg.path(), &["--record", record.to_str().unwrap()]);
    let out = lab(
        xdg.path(),
        &["deploy", data("order.flow.yaml").to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = lab(
        xdg.path(),
        &["trigger", "order", r#"{"order_id":"o-1"}"#, "--wait"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    // Stopped as Ctrl-C stops it, at once.
    if let Some(pid) = rustix::process::Pid::from_raw(up.0.id() as i32) {
        rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    }
    up.0.wait().unwrap();
    let recording = std::fs::read_to_string(&record).unwrap();
    assert!(
        recording
            .lines()
            .any(|l| l.contains("triggers.v2.dlq.shop.ship")),
        "no DLQ entry in the recording:\n{recording}"
    );
}
