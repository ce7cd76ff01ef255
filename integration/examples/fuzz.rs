//! The full protocol fuzzer of issue 10: `cargo run --release -p triggers-integration --example
//! fuzz -- [MESSAGES] [SEED] [DURATION_S]` (default 50 000 messages, seed 1, no time limit).
//! Random and mutated messages to the emulator and to an SDK service, in batches of 500, each
//! batch checked (liveness, a control API answer within a second, bounds, an outcome for every
//! message). Prints a line per batch, the report and the figures as a markdown row; exit 1 on any
//! crash, hang, bound breach or message without an outcome.

use std::time::Duration;

use triggers_integration::fuzz::{self, FuzzConfig, FuzzReport};

#[tokio::main(flavor = "multi_thread")]
async fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let messages: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(50_000);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let duration = args
        .next()
        .and_then(|a| a.parse().ok())
        .map(Duration::from_secs);
    eprintln!("fuzz: {messages} messages, seed {seed}, time limit {duration:?}");
    let report = fuzz::run(FuzzConfig {
        messages,
        seed,
        batch: 500,
        duration,
        progress: true,
    })
    .await;
    println!("{report}");
    println!("{}", FuzzReport::TABLE_HEADER);
    println!("{}", report.table_row());
    if report.passed() {
        std::process::ExitCode::SUCCESS
    } else {
        eprintln!(
            "rerun with: cargo run --release -p triggers-integration --example fuzz -- {messages} {seed}"
        );
        std::process::ExitCode::FAILURE
    }
}
