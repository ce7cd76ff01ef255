//! `triggers-lab up` from the outside: it starts, answers a registration from another client,
//! takes `deploy`, `trigger` and `advance` through the control API, which services (clients
//! without credentials) cannot reach, finds instances through private discovery files, and
//! stops cleanly on SIGINT.

#![cfg(unix)]

use triggers_testkit::cli::{Up, bin_in, children_of, text};

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use async_nats::RequestErrorKind;
use futures::StreamExt;
use serde_json::json;

/// Starts `up` with `args`; returns it and the URL it printed.
fn up(xdg: &Path, args: &[&str]) -> (Up, String) {
    let mut up = bin_in(xdg)
        .args(["up", "--backend", "binary", "--port", "0", "--quiet"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(up.stdout.take().unwrap());
    let mut url = String::new();
    stdout.read_line(&mut url).unwrap();
    let url = url.trim().to_owned();
    let up = Up(up);
    assert!(url.starts_with("nats://"), "{url:?}");
    (up, url)
}

fn run(xdg: &Path, args: &[&str]) -> Output {
    bin_in(xdg).args(args).output().unwrap()
}

/// Runs `up` on a binary server on any port with `args`, to its end (for one that is refused).
fn up_refused(xdg: &Path, args: &[&str]) -> Output {
    bin_in(xdg)
        .args(["up", "--backend", "binary", "--port", "0"])
        .args(args)
        .output()
        .unwrap()
}

fn interrupt(up: &mut Child) -> std::process::ExitStatus {
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(up.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = up.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "up did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Registers the spec's example service (`my-python-svc`, which FLOW runs) as `service`;
/// returns the reply.
async fn register_spec_example(service: &async_nats::Client) -> String {
    let manifest = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/manifests/001_spec_example/manifest.json"),
    )
    .unwrap();
    let mut manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    manifest["manifest_hash"] =
        json!("sha256:289888788fd67c1c96727dc28cd3e772969279b224e455a0c0543cf09b53606f");
    let reply = service
        .request("triggers.v2.manifest.register", manifest.to_string().into())
        .await
        .unwrap();
    String::from_utf8(reply.payload.to_vec()).unwrap()
}

const FLOW: &str = "id: inapp\nnodes:\n  - {id: in, type: service-in, service: my-python-svc}\n  - {id: send, type: action, service: my-python-svc, action: send_inapp}\nedges:\n  - {id: e1, from: in, to: send}\n";

#[test]
fn up_answers_registrations_and_control_commands_then_stops_on_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path();
    let record = xdg.join("events.jsonl");
    let (mut one, url) = up(
        xdg,
        &["--instance", "one", "--record", record.to_str().unwrap()],
    );

    // The discovery file: private, and what it holds.
    let discovery = xdg.join("triggers-lab");
    let file = discovery.join("one.json");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&discovery), 0o700);
    assert_eq!(mode(&file), 0o600);
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(written["url"], url.as_str());
    assert!(written["password"].as_str().is_some_and(|p| p.len() >= 32));
    assert!(written["token"].as_str().is_some_and(|t| t.len() >= 32));

    let runtime = tokio::runtime::Runtime::new().unwrap();
    // A service: a plain client, no credentials.
    let service = runtime.block_on(async_nats::connect(&url)).unwrap();
    assert_eq!(
        runtime.block_on(register_spec_example(&service)),
        r#"{"flows":null}"#
    );

    // The service can neither drive the emulator nor see the lab's traffic.
    runtime.block_on(async {
        for op in ["deploy", "trigger", "advance", "state"] {
            let err = service
                .request(format!("triggerslab.v1.control.{op}"), "{}".into())
                .await
                .expect_err("a service reached the control API");
            assert_eq!(err.kind(), RequestErrorKind::NoResponders, "{op}: {err}");
        }
    });
    let mut everything = runtime.block_on(service.subscribe(">")).unwrap();
    runtime.block_on(service.flush()).unwrap();

    // The CLI: by URL (the credentials come from the discovery file), then as the only one.
    let flow = xdg.join("flow.yaml");
    std::fs::write(&flow, FLOW).unwrap();
    let out = run(xdg, &["deploy", "--nats", &url, flow.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("deployed inapp v1"));
    let out = run(xdg, &["trigger", "inapp", r#"{"tenant_id":"t1"}"#]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("run-"));
    let out = run(xdg, &["advance", "--instance", "one", "1h30m"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = run(xdg, &["trigger", "no-such-flow"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("no flow \"no-such-flow\" is deployed"));

    runtime.block_on(async {
        service.flush().await.unwrap();
        while let Ok(Some(msg)) =
            tokio::time::timeout(Duration::from_millis(200), everything.next()).await
        {
            assert!(
                !msg.subject.starts_with("triggerslab."),
                "the service saw {}",
                msg.subject
            );
        }
    });

    // A second `up`: its own file; the commands ask which; stopping it leaves the first alone.
    let (mut two, url_two) = up(xdg, &["--instance", "two"]);
    assert!(discovery.join("two.json").exists() && file.exists());
    let out = run(xdg, &["advance", "1m"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("2 `triggers-lab up`s are running"),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("--instance"), "{}", text(&out));
    let out = run(xdg, &["advance", "--instance", "two", "1m"]);
    assert!(out.status.success(), "{}", text(&out));
    // A third with a name in use is refused before it starts anything.
    let out = up_refused(xdg, &["--instance", "two"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("already running"), "{}", text(&out));
    assert_eq!(interrupt(&mut two).code(), Some(130));
    assert!(!discovery.join("two.json").exists());
    assert!(file.exists());
    let _ = url_two;

    // Stopped by SIGINT, cleanly: 128 + 2, as a shell reports it.
    let status = interrupt(&mut one);
    assert_eq!(status.code(), Some(130), "{status}");
    assert!(!file.exists());
    let records = std::fs::read_to_string(&record).unwrap();
    // A versioned recording: the header, then records the reader takes.
    assert!(
        records.starts_with(r#"{"triggers_lab_recording":1,"#),
        "{records}"
    );
    let recording = triggers_emulator::recording::read_recording(&record).unwrap();
    assert_eq!(recording.format, 1);
    assert_eq!(
        recording.header.unwrap().tool_version,
        env!("CARGO_PKG_VERSION")
    );
    assert!(!recording.records.is_empty());
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

#[test]
fn symlinks_at_the_discovery_paths_are_refused() {
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("target");
    std::fs::write(&target, "untouched").unwrap();

    // A symlink planted at the file's path.
    let a = tempfile::tempdir().unwrap();
    let dir = a.path().join("triggers-lab");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink(&target, dir.join("evil.json")).unwrap();
    let out = run(
        a.path(),
        &[
            "up",
            "--backend",
            "binary",
            "--port",
            "0",
            "--instance",
            "evil",
        ],
    );
    assert!(!out.status.success());
    assert!(text(&out).contains("symbolic link"), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
    // The commands do not read through it either.
    let out = run(a.path(), &["advance", "1m"]);
    assert!(
        text(&out).contains("no running `triggers-lab up` found"),
        "{}",
        text(&out)
    );

    // The directory itself a symlink.
    let b = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), b.path().join("triggers-lab")).unwrap();
    let out = run(b.path(), &["up", "--backend", "binary", "--port", "0"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("symbolic link"), "{}", text(&out));
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        1,
        "something was written through the symlinked directory"
    );
}

#[test]
fn on_an_external_server_the_control_api_needs_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new("nats-server")
        .args([
            "-a",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-js",
            "--store_dir",
        ])
        .arg(xdg.join("store"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nats-server on PATH");
    let url = format!("nats://127.0.0.1:{port}");
    let (mut up, printed) = up(xdg, &["--nats", &url, "--instance", "ext"]);
    assert_eq!(printed, url);

    // The CLI has the token.
    let out = run(xdg, &["advance", "--instance", "ext", "1m"]);
    assert!(out.status.success(), "{}", text(&out));

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let other = async_nats::connect(&url).await.unwrap();
        let mut records = other.subscribe("triggerslab.v1.records").await.unwrap();
        other.flush().await.unwrap();
        let reply = other
            .request(
                "triggerslab.v1.control.advance",
                r#"{"duration_ms": 1000}"#.into(),
            )
            .await
            .unwrap();
        let reply: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
        assert_eq!(reply["ok"], false, "{reply}");
        assert!(
            reply["error"]
                .as_str()
                .unwrap()
                .contains("Triggers-Lab-Token")
        );
        // Something is recorded (a refused registration); it is not on the guessable subject.
        let _ = other
            .request("triggers.v2.manifest.register", "{}".into())
            .await;
        other.flush().await.unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(300), records.next())
                .await
                .is_err(),
            "a record went to triggerslab.v1.records"
        );
    });

    assert_eq!(interrupt(&mut up).code(), Some(130));
    let _ = server.kill();
    let _ = server.wait();
}

/// The emulator's bounds are `up`'s flags: runs of a service that is not consuming stay open, and
/// the one beyond `--max-open-runs` is refused, with what to raise. A bound of 0 is a usage error.
#[test]
fn up_takes_the_emulators_bounds_as_flags() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path();
    let out = up_refused(xdg, &["--max-runs", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    let (mut up, url) = up(xdg, &["--max-open-runs", "2", "--max-runs", "5"]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let service = runtime.block_on(async_nats::connect(&url)).unwrap();
    assert_eq!(
        runtime.block_on(register_spec_example(&service)),
        r#"{"flows":null}"#
    );
    let flow = xdg.join("flow.yaml");
    std::fs::write(&flow, FLOW).unwrap();
    let out = run(xdg, &["deploy", flow.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    for _ in 0..2 {
        let out = run(xdg, &["trigger", "inapp", r#"{"tenant_id":"t1"}"#]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let out = run(xdg, &["trigger", "inapp", r#"{"tenant_id":"t1"}"#]);
    assert!(!out.status.success(), "a third open run was started");
    assert!(
        text(&out).contains("2 runs the emulator started are open")
            && text(&out).contains("--max-open-runs"),
        "{}",
        text(&out)
    );
    assert_eq!(interrupt(&mut up).code(), Some(130));
}

/// Found by an audit: the nats-server `up` started was SIGKILLed, and `up` stayed up serving
/// nothing (a zombie child, one DISCONNECTED line) while the CLI said no emulator answered.
/// `up` now says its server died and exits 3, its discovery entry gone.
#[cfg(target_os = "linux")]
#[test]
fn up_whose_nats_server_is_killed_says_so_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path();
    let mut up = bin_in(xdg)
        .args([
            "up",
            "--backend",
            "binary",
            "--port",
            "0",
            "--quiet",
            "--instance",
            "dies",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(up.stdout.take().unwrap());
    let mut url = String::new();
    stdout.read_line(&mut url).unwrap();
    assert!(url.starts_with("nats://"), "{url:?}");
    let mut up = Up(up);
    let server = children_of(up.id())
        .into_iter()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("nats-server"))
        })
        .expect("the nats-server child of up");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(server as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = up.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "up stayed up without its nats-server"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut up.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the nats-server this `up` started has exited (pid {server}, signal: 9 (SIGKILL))"
        )),
        "{stderr}"
    );
    // Its entry is gone: the CLI says no `up` runs, not that one does not answer.
    let out = run(xdg, &["status"]);
    assert!(
        text(&out).contains("no running `triggers-lab up`"),
        "{}",
        text(&out)
    );
}

/// Found by an audit: two `up --nats URL` on one external server both started, and every
/// command and registration then reached one or the other. The second refuses, naming the
/// first.
#[test]
fn a_second_up_on_a_server_that_has_one_refuses_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new("nats-server")
        .args([
            "-a",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-js",
            "--store_dir",
        ])
        .arg(xdg.join("store"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nats-server on PATH");
    let url = format!("nats://127.0.0.1:{port}");
    let (mut first, printed) = up(xdg, &["--nats", &url, "--instance", "first"]);
    assert_eq!(printed, url);
    let second = bin_in(xdg)
        .args(["up", "--quiet", "--nats", &url, "--instance", "second"])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(3), "{}", text(&second));
    assert!(
        text(&second).contains(&format!("{url} already has a triggers-lab emulator"))
            && text(&second).contains("`triggers-lab up` first (pid"),
        "{}",
        text(&second)
    );
    // The first still has the server to itself.
    let out = run(xdg, &["advance", "--instance", "first", "1m"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(interrupt(&mut first).code(), Some(130));
    // Once it is gone, an `up` may take the server.
    let (mut third, _) = up(xdg, &["--nats", &url, "--instance", "third"]);
    assert_eq!(interrupt(&mut third).code(), Some(130));
    let _ = server.kill();
    let _ = server.wait();
}
