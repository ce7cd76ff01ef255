//! The chaos soak, small: a few hundred runs across three services with random failures,
//! panics, timeouts and poison messages, one nats-server kill (SIGKILL and a restart on the same
//! store) and one replica crash; every run must settle exactly once, none lost, none duplicated.
//! Seeded: `TRIGGERS_SOAK_SEED` picks another seed, and a failure prints the one it ran with.
//! The full soak is the `soak` example (`docs/benchmarks.md`).

use std::time::Duration;

use triggers_integration::soak::{self, SoakConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_settles_exactly_once_through_kills_and_crashes() {
    let seed: u64 = std::env::var("TRIGGERS_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let report = soak::run(SoakConfig {
        runs: 400,
        seed,
        batch: 200,
        replicas: 2,
        nats_kills: 1,
        replica_crash: true,
        fault_rate: 0.08,
        poison_rate: 0.01,
        ack_wait: Some(Duration::from_secs(30)),
        ..Default::default()
    })
    .await;
    eprintln!("{report}");
    assert!(
        report.passed(),
        "the soak failed with seed {seed} (rerun with TRIGGERS_SOAK_SEED={seed}):\n{report}"
    );
    assert_eq!(
        report.nats_kills, 1,
        "seed {seed}: the server was not killed"
    );
    assert_eq!(report.replica_crashes, 1, "seed {seed}: no replica crashed");
    assert!(
        report.faults.total() > 0,
        "seed {seed}: no fault was planned"
    );
}
