//! The protocol fuzzer, small: a few hundred random and mutated messages to the emulator and to
//! an SDK service on a real nats-server, checked batch by batch (everything lives, answers within
//! a second, stays within its bounds, and every message had an outcome). Seeded:
//! `TRIGGERS_FUZZ_SEED` picks another seed, and a failure prints the one it ran with. The full
//! fuzzer is the `fuzz` example (`docs/benchmarks.md`).

use triggers_integration::fuzz::{self, FuzzConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fuzzed_message_has_an_outcome_and_nothing_falls_over() {
    let seed: u64 = std::env::var("TRIGGERS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(11);
    let report = fuzz::run(FuzzConfig {
        messages: 600,
        seed,
        batch: 150,
        ..Default::default()
    })
    .await;
    eprintln!("{report}");
    assert!(
        report.passed(),
        "the fuzzer failed with seed {seed} (rerun with TRIGGERS_FUZZ_SEED={seed}):\n{report}"
    );
    assert_eq!(
        report.total(),
        600,
        "seed {seed}: not every message was sent"
    );
}
