//! A container whose owner was SIGKILLed (so it could not remove it) is removed by the next Docker
//! start on the machine, and only such a one: a container of a process that still runs stays.
//!
//! The owner is this test binary again, run as a child that starts a Docker nats-server and waits
//! to be killed. `#[ignore]`d as every Docker test (`docker_*`): scripts/test runs it when Docker
//! answers.

#![cfg(unix)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use natsbox::{Backend, NatsConfig, NatsServer};
use testcontainers::bollard::query_parameters::ListContainersOptionsBuilder;
use testcontainers::core::client::docker_client_instance;

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

/// The child's side, run only by the test below (ignored otherwise: alone it has nothing to do, and
/// its name keeps it out of the `docker_` filter).
#[tokio::test]
#[ignore = "the child process of docker_containers_of_killed_owners_are_removed_at_the_next_start"]
async fn child_owner_of_a_container_waits() {
    assert!(
        std::env::var(CHILD).is_ok(),
        "run only as the child of docker_containers_of_killed_owners_are_removed_at_the_next_start"
    );
    let server = NatsServer::start(docker_config())
        .await
        .expect("a container");
    println!("READY {}", server.url());
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: scripts/test runs the docker_ tests when Docker answers"]
async fn docker_containers_of_killed_owners_are_removed_at_the_next_start() {
    let spawn_owner = || {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_owner_of_a_container_waits",
                "--ignored",
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
                 natsbox/docker/build-nats-image.sh.\n{e}"
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
