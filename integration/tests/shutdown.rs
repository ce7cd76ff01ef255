//! Graceful shutdown when the NATS server is gone: `shutdown()` and `run_until_signal()` still
//! return (every wait in the goodbye is bounded) and say the goodbye did not reach the server.
//!
//! The signal test runs the service in a child process (this test binary again, asked to run
//! only `child_runs_a_service_until_a_signal`), so the SIGTERM it gets is a real one.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use triggers_integration::{lab, own_lab};
use triggers_sdk::runtime::{ActionContext, ActionDef, ActionError, RuntimeConfig, Service};

/// Set in the child: the URL its service connects to.
const CHILD_URL: &str = "TRIGGERS_TEST_SHUTDOWN_CHILD_URL";
/// The grace the services get; the bounds below are generous multiples of it.
const GRACE: Duration = Duration::from_secs(2);

async fn echo(v: serde_json::Value, _ctx: ActionContext) -> Result<serde_json::Value, ActionError> {
    Ok(v)
}

fn service(url: &str) -> Service {
    Service::builder("stopper", "1.0.0")
        .action(ActionDef::new("echo", echo))
        .nats_source("nats", "stopper.inbound")
        .config(RuntimeConfig {
            nats_url: Some(url.to_owned()),
            heartbeat_interval: Some(Duration::from_millis(200)),
            shutdown_grace: Some(GRACE),
            ..Default::default()
        })
        .build()
        .expect("a valid service")
}

#[tokio::test]
async fn shutdown_returns_and_says_so_when_nats_is_gone() {
    // It stops the server: one of its own.
    let lab = own_lab().await;
    let running = service(lab.url()).start().await.expect("starts");
    lab.wait_for_registration("stopper").await.unwrap();
    lab.stop().await.expect("the server stops");
    let report = tokio::time::timeout(GRACE + Duration::from_secs(30), running.shutdown())
        .await
        .expect("shutdown returned although NATS is gone");
    assert!(report.drained, "{report:?}");
    assert!(!report.said_goodbye, "{report:?}");
}

#[tokio::test]
async fn shutdown_says_goodbye_when_nats_is_up() {
    let lab = lab().await;
    let running = service(lab.url()).start().await.expect("starts");
    lab.wait_for_registration("stopper").await.unwrap();
    let report = running.shutdown().await;
    assert!(report.drained && report.said_goodbye, "{report:?}");
    lab.wait_for_heartbeat("stopper", |hb| hb.shutting_down)
        .await
        .expect("the last heartbeat arrived");
}

/// The child's side of the next test, run only by it (ignored otherwise: alone it has nothing to
/// do).
#[tokio::test]
#[ignore = "the child process of run_until_signal_exits_on_sigterm_with_nats_gone"]
async fn child_runs_a_service_until_a_signal() {
    let url = std::env::var(CHILD_URL)
        .expect("run only as the child of run_until_signal_exits_on_sigterm_with_nats_gone");
    let running = service(&url).start().await.expect("starts");
    println!("READY");
    let report = running.run_until_signal().await;
    println!("REPORT {report:?}");
}

// Two workers: the emulator answers the child's registration while this test blocks on its
// output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_until_signal_exits_on_sigterm_with_nats_gone() {
    // It stops the server: one of its own.
    let lab = own_lab().await;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_runs_a_service_until_a_signal",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_URL, lab.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the child ended before its service was ready: {lines:?}"
        );
        // libtest prints "test <name> ... " first, on the same line.
        if line.trim_end().ends_with("READY") {
            break;
        }
        lines.push(line);
    }
    lab.wait_for_registration("stopper").await.unwrap();
    lab.stop().await.expect("the server stops");

    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let deadline = Instant::now() + GRACE + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the service ignored SIGTERM with its NATS server gone");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(status.success(), "{status}: {rest}");
    assert!(rest.contains("said_goodbye: false"), "{rest}");
}
