//! The large run of the flow-shape property test: `cargo run --release -p triggers-integration
//! --example flow_shapes -- [FLOWS] [SEED]` (default 2 000 flows). Generates random valid flows
//! over four SDK services (two replicas each), runs each twice (its conditions passing, then
//! not), checks every run against the oracle, and prints the counts: flows, runs, node executions
//! checked, lost, duplicated, hung, wrong status. Exit 1 on any problem, with the flows that show
//! it.

use std::time::Instant;

use triggers_integration::lab_with;
use triggers_integration::shapes::{self, Tally};

#[tokio::main(flavor = "multi_thread")]
async fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let flows: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2_000);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let lab = lab_with(shapes::emulator_config()).await;
    let services = shapes::start_services(&lab, 2).await;
    let mut rng = shapes::rng(seed);
    let mut tally = Tally::default();
    let started = Instant::now();
    let batch = 50;
    let mut made = 0;
    while made < flows {
        let n = batch.min(flows - made);
        let generated: Vec<_> = (made..made + n)
            .map(|i| shapes::generate(&mut rng, &format!("shape-{i}"), 2 + i % 3))
            .collect();
        shapes::run_batch(&lab, &generated, &mut tally).await;
        made += n;
        eprintln!(
            "{made}/{flows} flows, {} runs, {} executions checked, {} problems ({:.0?})",
            tally.runs,
            tally.executions,
            tally.problems.len(),
            started.elapsed()
        );
    }
    let violations: Vec<_> = lab
        .violations()
        .into_iter()
        .filter(|v| {
            matches!(
                v.rule,
                "idempotency_key_reused" | "delivery_deduplicated" | "completion_unexpected"
            )
        })
        .collect();
    println!("flow shapes, seed {seed}");
    println!(
        "| flows | runs | node executions checked | lost | duplicated | hung runs | wrong status | key/dedup violations | time |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1?} |",
        tally.flows,
        tally.runs,
        tally.executions,
        tally.lost,
        tally.duplicated,
        tally.hung,
        tally.wrong_status,
        violations.len(),
        started.elapsed()
    );
    for p in &tally.problems {
        eprintln!("{p}");
    }
    drop(services);
    if tally.problems.is_empty() && violations.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
