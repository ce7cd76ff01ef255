//! `triggers-lab up` from the outside: it starts, answers a registration from another client,
//! takes `deploy`, `trigger` and `advance` through the control API, and stops cleanly on SIGINT.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_triggers-lab"))
}

#[test]
fn up_answers_registrations_and_control_commands_then_stops_on_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("events.jsonl");
    let mut up = bin()
        .args(["up", "--backend", "binary", "--quiet", "--record"])
        .arg(&record)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(up.stdout.take().unwrap());
    let mut url = String::new();
    stdout.read_line(&mut url).unwrap();
    let url = url.trim().to_owned();
    assert!(url.starts_with("nats://"), "{url:?}");

    // A registration from a plain NATS client (any language would do the same).
    let manifest = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/manifests/001_spec_example/manifest.json"),
    )
    .unwrap();
    let mut manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    manifest["manifest_hash"] =
        json!("sha256:289888788fd67c1c96727dc28cd3e772969279b224e455a0c0543cf09b53606f");
    let reply = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let client = async_nats::connect(&url).await.unwrap();
        let reply = client
            .request("triggers.v2.manifest.register", manifest.to_string().into())
            .await
            .unwrap();
        String::from_utf8(reply.payload.to_vec()).unwrap()
    });
    assert_eq!(reply, r#"{"flows":null}"#);

    let flow = dir.path().join("flow.yaml");
    std::fs::write(
        &flow,
        "id: inapp\nnodes:\n  - {id: in, type: service-in, service: my-python-svc}\n  - {id: send, type: action, service: my-python-svc, action: send_inapp}\nedges:\n  - {id: e1, from: in, to: send}\n",
    )
    .unwrap();
    let out = bin()
        .args(["deploy", "--nats", &url])
        .arg(&flow)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("deployed inapp v1"));

    let out = bin()
        .args(["trigger", "--nats", &url, "inapp", r#"{"tenant_id":"t1"}"#])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("run-"));

    let out = bin()
        .args(["advance", "--nats", &url, "1h30m"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = bin()
        .args(["trigger", "--nats", &url, "no-such-flow"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no flow \"no-such-flow\" is deployed"));

    rustix::process::kill_process(
        rustix::process::Pid::from_raw(up.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = up.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "up did not stop on SIGINT"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // Stopped by SIGINT, cleanly: 128 + 2, as a shell reports it.
    assert_eq!(status.code(), Some(130), "{status}");
    let records = std::fs::read_to_string(&record).unwrap();
    for kind in [
        "\"kind\":\"registration\"",
        "\"kind\":\"deploy\"",
        "\"kind\":\"trigger\"",
    ] {
        assert!(records.contains(kind), "{kind} not in the record file");
    }
    // The nats-server it started is gone.
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}
