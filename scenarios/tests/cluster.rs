//! The cluster scenarios (`scenarios/cluster/`) on a three-node JetStream cluster, with the binary
//! backend and with Docker: services and the emulator ride out a node's loss and a leader change,
//! nothing lost and nothing run twice.
//!
//! The Docker run is `#[ignore]`d (a machine without Docker reports it ignored, not passed);
//! scripts/test runs it, with every `docker_` test, when Docker answers.

use std::path::{Path, PathBuf};

use triggers_emulator::{Backend, NatsConfig};
use triggers_scenarios::{RunOptions, load_file, load_str, run_suite};

fn cluster_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster")
}

async fn run_all(backend: Backend) {
    let mut scenarios = Vec::new();
    for entry in std::fs::read_dir(cluster_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".scenario.yaml") {
            scenarios.push(load_file(&path).unwrap_or_else(|e| panic!("{e}")));
        }
    }
    assert!(scenarios.len() >= 2, "the cluster scenarios are missing");
    let options = RunOptions {
        nats: NatsConfig {
            backend,
            ..Default::default()
        },
        ..Default::default()
    };
    let report = run_suite(scenarios, 1, &options).await;
    for scenario in &report.scenarios {
        assert!(
            scenario.passed(),
            "{} failed on {backend}: {:?}",
            scenario.name,
            scenario.failure
        );
        assert!(scenario.nats.contains("cluster of 3"), "{}", scenario.nats);
        // A restart by `leader_of` brings back the node the kill took down (another leads by
        // then): "node N killed", then "node N restarted".
        let node = |verb: &str| {
            scenario.steps.iter().find_map(|s| {
                let (n, rest) = s.detail.strip_prefix("node ")?.split_once(' ')?;
                rest.starts_with(verb).then(|| n.to_owned())
            })
        };
        if let (Some(killed), Some(restarted)) = (node("killed"), node("restarted")) {
            assert_eq!(killed, restarted, "{}: {:?}", scenario.name, scenario.steps);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scenarios_pass_on_binary_nodes() {
    run_all(Backend::Binary).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Docker: scripts/test runs the docker_ tests when Docker answers"]
async fn docker_cluster_scenarios_pass() {
    run_all(Backend::Docker).await;
}

#[test]
fn node_steps_need_a_cluster_and_a_node_it_has() {
    let base = cluster_dir();
    let one = "services: [{name: s, actions: [{name: a}]}]\nsteps:\n  - kill_nats_node: 2\n";
    let err = load_str("one.yaml", one, &base).unwrap_err().to_string();
    assert!(err.contains("nats: {cluster: 3}"), "{err}");
    let four = format!("nats: {{cluster: 3}}\n{}", one.replace("2\n", "4\n"));
    let err = load_str("four.yaml", &four, &base).unwrap_err().to_string();
    assert!(err.contains("no nats node 4"), "{err}");
    let leader = format!(
        "nats: {{cluster: 3}}\n{}",
        one.replace("2\n", "{leader_of: ghost}\n")
    );
    let err = load_str("leader.yaml", &leader, &base)
        .unwrap_err()
        .to_string();
    assert!(err.contains("ghost"), "{err}");
    // Restarting "the leader" names the node an earlier step took down as the leader.
    let restart = format!(
        "nats: {{cluster: 3}}\n{}",
        one.replace("kill_nats_node: 2\n", "restart_nats_node: {leader_of: s}\n")
    );
    let err = load_str("restart.yaml", &restart, &base)
        .unwrap_err()
        .to_string();
    assert!(err.contains("none did"), "{err}");
    let killed_first = restart.replace(
        "  - restart_nats_node",
        "  - kill_nats_node: {leader_of: s}\n  - restart_nats_node",
    );
    load_str("killed.yaml", &killed_first, &base).unwrap_or_else(|e| panic!("{e}"));
}
