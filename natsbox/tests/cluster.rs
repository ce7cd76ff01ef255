//! A three-node JetStream cluster: an R3 stream keeps every message through a node's crash, a
//! leader's loss and the node's return.

use std::time::Duration;

use async_nats::jetstream;
use natsbox::{Backend, NatsConfig, NatsError, NatsServer};

/// How long a publish is retried while the cluster elects a leader.
const STORE_PATIENCE: Duration = Duration::from_secs(60);

async fn r3_survives_losing_a_node(mut server: NatsServer) {
    assert_eq!(server.node_count(), 3);
    assert!(server.backend().to_string().starts_with("cluster of 3: "));
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(server.url())
        .await
        .unwrap();
    let js = jetstream::new(client);
    let mut stream = js
        .create_stream(jetstream::stream::Config {
            name: "R3".into(),
            subjects: vec!["r3.>".into()],
            num_replicas: 3,
            ..Default::default()
        })
        .await
        .unwrap();
    let publish = |n: u32| {
        let js = js.clone();
        async move {
            // A publish during a leader election may time out, or find no stream leader to
            // answer ("no stream found"); JetStream dedup makes the retry safe, and the id keeps
            // it from counting twice. The patience is generous: on two shared cores, with other
            // tests running, the stream's new leader has taken more than 10 s to be elected.
            let deadline = tokio::time::Instant::now() + STORE_PATIENCE;
            while tokio::time::Instant::now() < deadline {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Nats-Msg-Id", format!("m{n}").as_str());
                match js
                    .publish_with_headers(format!("r3.{n}"), headers, n.to_string().into())
                    .await
                {
                    Ok(ack) => match ack.await {
                        Ok(_) => return,
                        Err(e) => eprintln!("ack {n}: {e}"),
                    },
                    Err(e) => eprintln!("publish {n}: {e}"),
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            panic!("message {n} was not stored within {STORE_PATIENCE:?}");
        }
    };
    for n in 0..10 {
        publish(n).await;
    }
    let leader = stream
        .info()
        .await
        .unwrap()
        .cluster
        .clone()
        .unwrap()
        .leader
        .unwrap();
    let number: usize = leader.trim_start_matches('n').parse().unwrap();
    server.kill_node(number).await.unwrap();
    for n in 10..20 {
        publish(n).await;
    }
    let after = stream.info().await.unwrap().cluster.clone().unwrap().leader;
    assert!(
        after.is_some() && after.as_deref() != Some(leader.as_str()),
        "the leader changed from {leader}: {after:?}"
    );
    server.restart_node(number).await.unwrap();
    server.stop_node(1).await.unwrap();
    for n in 20..30 {
        publish(n).await;
    }
    server.restart_node(1).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(info) = stream.info().await {
            assert_eq!(info.state.messages, 30, "no message lost, none twice");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let err = server.stop_node(4).await.unwrap_err();
    assert!(
        matches!(
            err,
            NatsError::NoSuchNode {
                number: 4,
                count: 3
            }
        ),
        "{err}"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn binary_cluster_keeps_an_r3_stream_through_node_loss() {
    let server = NatsServer::start(NatsConfig {
        backend: Backend::Binary,
        ..NatsConfig::cluster(3)
    })
    .await
    .unwrap();
    r3_survives_losing_a_node(server).await;
}

#[tokio::test]
async fn node_operations_on_a_single_server_say_it_is_not_a_cluster() {
    let mut server = NatsServer::start(NatsConfig {
        backend: Backend::Binary,
        ..Default::default()
    })
    .await
    .unwrap();
    let err = server.kill_node(1).await.unwrap_err();
    assert!(matches!(err, NatsError::NotACluster { .. }), "{err}");
}

#[tokio::test]
#[ignore = "needs Docker: scripts/test runs the docker_ tests when Docker answers"]
async fn docker_cluster_keeps_an_r3_stream_through_node_loss() {
    let server = NatsServer::start(NatsConfig {
        backend: Backend::Docker,
        ..NatsConfig::cluster(3)
    })
    .await
    .unwrap();
    assert!(
        server.backend().to_string().contains("docker ("),
        "{}",
        server.backend()
    );
    r3_survives_losing_a_node(server).await;
}
