//! The full chaos soak of issue 10: `cargo run --release -p triggers-integration --example soak
//! -- [RUNS] [SEED] [DURATION_S]` (default 100 000 runs, seed 1, no time limit). Three services
//! with two replicas each, random failures, panics, timeouts and poison messages, three
//! nats-server kills (SIGKILL, restart on the same store) and one replica crash; then every run is
//! accounted for. Prints a line per batch, the report and the figures as a markdown row; exit 1
//! unless every run settled exactly once with the accounting complete.

use std::time::Duration;

use triggers_integration::soak::{self, SoakConfig, SoakReport};

#[tokio::main(flavor = "multi_thread")]
async fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let duration = args
        .next()
        .and_then(|a| a.parse().ok())
        .map(Duration::from_secs);
    eprintln!("soak: {runs} runs, seed {seed}, time limit {duration:?}");
    let report = soak::run(SoakConfig {
        runs,
        seed,
        duration,
        progress: true,
        ..Default::default()
    })
    .await;
    println!("{report}");
    println!("{}", SoakReport::TABLE_HEADER);
    println!("{}", report.table_row());
    if report.passed() {
        std::process::ExitCode::SUCCESS
    } else {
        eprintln!(
            "rerun with: cargo run --release -p triggers-integration --example soak -- {runs} {seed}"
        );
        std::process::ExitCode::FAILURE
    }
}
