//! A container whose owner was SIGKILLed (so it could not remove it) is removed by the next Docker
//! start on the machine, and only such a one: a container of a process that still runs stays.
//!
//! The owner is this test binary again, run as a child that starts a Docker nats-server and waits
//! to be killed. Runs unless TRIGGERS_SKIP_DOCKER_TESTS=1, as the other Docker tests do.

#![cfg(unix)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use testcontainers::bollard::query_parameters::ListContainersOptionsBuilder;
use testcontainers::core::client::docker_client_instance;
use triggers_emulator::{Backend, NatsConfig, NatsServer};

/// Set in the child: start a Docker server and wait.
const CHILD: &str = "TRIGGERS_TEST_STALE_CONTAINER_CHILD";

fn docker_config() -> NatsConfig {
    NatsConfig {
        backend: Backend::Docker,
        ..Default::default()
    }
}

/// The ids of the nats containers owned by `pid`, running or not.
async fn containers_of(pid: u32) -> Vec<String> {
    let docker = docker_client_instance().await.expect("a Docker client");
    let filters = HashMap::from([("label", vec![format!("org.triggers-lab.owner-pid={pid}")])]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    docker
        .list_containers(Some(options))
        .await
        .expect("the engine lists containers")
        .into_iter()
        .filter_map(|c| c.id)
        .collect()
}

/// The child's side; without the variable it has nothing to do.
#[tokio::test]
async fn child_starts_a_docker_server_and_waits() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    let server = NatsServer::start(docker_config())
        .await
        .expect("a container");
    println!("READY {}", server.url());
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_of_killed_owners_are_removed_at_the_next_start() {
    if std::env::var("TRIGGERS_SKIP_DOCKER_TESTS").as_deref() == Ok("1") {
        eprintln!("TRIGGERS_SKIP_DOCKER_TESTS=1: skipping a Docker backend test");
        return;
    }
    let spawn_owner = || {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_starts_a_docker_server_and_waits",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut seen = Vec::new();
        loop {
            let mut line = String::new();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "the owner ended before its container was up: {seen:?}"
            );
            // libtest prints "test <name> ... " first, on the same line.
            if line.contains("READY nats://") {
                break;
            }
            seen.push(line);
        }
        child
    };
    let kill = |child: &mut std::process::Child| {
        child.kill().unwrap();
        child.wait().unwrap();
    };

    // One owner killed, one still running.
    let mut killed = spawn_owner();
    let mut alive = spawn_owner();
    let killed_pid = killed.id();
    assert_eq!(containers_of(killed_pid).await.len(), 1);
    kill(&mut killed);
    assert_eq!(
        containers_of(killed_pid).await.len(),
        1,
        "a SIGKILLed owner cannot remove its container"
    );

    // The next start sweeps the killed owner's container, and only that one.
    let server = NatsServer::start(docker_config())
        .await
        .unwrap_or_else(|e| {
            kill(&mut alive);
            panic!(
                "the Docker backend test needs a running Docker engine and a nats image: run \
                 emulator/docker/build-nats-image.sh (or set TRIGGERS_SKIP_DOCKER_TESTS=1).\n{e}"
            )
        });
    assert_eq!(containers_of(killed_pid).await, Vec::<String>::new());
    assert_eq!(containers_of(alive.id()).await.len(), 1);
    server.stop().await.unwrap();

    let alive_pid = alive.id();
    kill(&mut alive);
    // Our own clean-up of the living owner's container: the next sweep's job, done here now.
    NatsServer::start(docker_config())
        .await
        .unwrap()
        .stop()
        .await
        .unwrap();
    assert_eq!(containers_of(alive_pid).await, Vec::<String>::new());
}
