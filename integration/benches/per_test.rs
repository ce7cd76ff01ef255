//! The cost of one isolated test, as a user's `cargo test` pays it: `Harness::start`, an SDK
//! service with one action started and registered, a one-step flow deployed, triggered and
//! settled, everything dropped. Measured with a nats-server of the test's own
//! (`Isolation::Server`) and with an account on the process's shared server
//! (`Isolation::Account`, the default), in the same run: N tests in a row (alternating the two,
//! so a noisy neighbour hits both), then N at once (three rounds of each, alternating; a test's
//! cost is the round's wall time over N).
//!
//! Prints each phase's median and ends with one line,
//! `per-test ratios: shared/own R, concurrent shared/own C` (medians); `docs/benchmarks.md`
//! keeps the figures. The shared server's own start is paid by a warm-up test before the
//! measured ones, as the first test of a process pays it.
//!
//! ```sh
//! cargo bench -p triggers-integration --bench per_test -- 10
//! ```

use std::time::{Duration, Instant};

use natsbox::Isolation;
use serde_json::json;
use triggers_emulator::{Backend, EmulatorConfig, Harness, NatsConfig};
use triggers_integration::{config, one_step};
use triggers_sdk::runtime::{ActionContext, ActionDef, ActionError, Service};

/// Rounds of N tests at once, per isolation.
const CONCURRENT_ROUNDS: usize = 3;

async fn charge(
    order: serde_json::Value,
    _ctx: ActionContext,
) -> Result<serde_json::Value, ActionError> {
    Ok(json!({ "charged": order.get("amount").is_some() }))
}

/// What one test spent on each phase.
#[derive(Debug, Clone, Copy, Default)]
struct Phases {
    start: Duration,
    service: Duration,
    run: Duration,
    drop: Duration,
    whole: Duration,
}

async fn one_test(isolation: Isolation) -> Phases {
    let began = Instant::now();
    let lab = Harness::start_with(
        NatsConfig {
            backend: Backend::Binary,
            isolation,
            ..Default::default()
        },
        EmulatorConfig {
            wait_timeout: Duration::from_secs(60),
            ..Default::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("cannot start the harness: {e}"));
    let started = Instant::now();
    let service = Service::builder("shop", "1.0.0")
        .action(ActionDef::new("charge", charge))
        .nats_source("nats", "shop.inbound")
        .config(config(&lab))
        .build()
        .unwrap();
    let running = service.start().await.unwrap();
    lab.wait_for_registration("shop").await.unwrap();
    let registered = Instant::now();
    lab.deploy(one_step("order", "shop", "charge"))
        .await
        .unwrap();
    let run = lab.trigger("order", &json!({"amount": 5})).await.unwrap();
    let settled = lab.wait_run_settled(&run).await.unwrap();
    assert_eq!(format!("{:?}", settled.status), "Succeeded");
    let ran = Instant::now();
    drop(running);
    drop(lab);
    let dropped = Instant::now();
    Phases {
        start: started - began,
        service: registered - started,
        run: ran - registered,
        drop: dropped - ran,
        whole: dropped - began,
    }
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn report(name: &str, tests: &[Phases]) -> Duration {
    let of = |f: fn(&Phases) -> Duration| median(tests.iter().map(f).collect());
    let whole = of(|p| p.whole);
    println!(
        "{name:<8} in a row ({} tests, medians): start {}, service {}, run {}, drop {}, whole {}",
        tests.len(),
        ms(of(|p| p.start)),
        ms(of(|p| p.service)),
        ms(of(|p| p.run)),
        ms(of(|p| p.drop)),
        ms(whole),
    );
    whole
}

async fn at_once(isolation: Isolation, n: usize) -> Duration {
    let began = Instant::now();
    let tests: Vec<_> = (0..n).map(|_| tokio::spawn(one_test(isolation))).collect();
    for test in tests {
        test.await.unwrap();
    }
    began.elapsed() / u32::try_from(n).unwrap_or(u32::MAX)
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10)
        .max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // Warm-up: the shared server's start (once per process), the binary in the page cache.
        let first = one_test(Isolation::Account).await;
        println!("first shared test (starts the shared server): {}", ms(first.whole));
        one_test(Isolation::Server).await;

        let (mut own, mut shared) = (Vec::new(), Vec::new());
        for _ in 0..n {
            own.push(one_test(Isolation::Server).await);
            shared.push(one_test(Isolation::Account).await);
        }
        let own_whole = report("own", &own);
        let shared_whole = report("shared", &shared);

        let (mut own_at_once, mut shared_at_once) = (Vec::new(), Vec::new());
        for _ in 0..CONCURRENT_ROUNDS {
            own_at_once.push(at_once(Isolation::Server, n).await);
            shared_at_once.push(at_once(Isolation::Account, n).await);
        }
        let own_c = median(own_at_once);
        let shared_c = median(shared_at_once);
        println!(
            "{n} at once (wall time over {n}, median of {CONCURRENT_ROUNDS} rounds): own {}, shared {}",
            ms(own_c),
            ms(shared_c)
        );
        println!(
            "per-test ratios: shared/own {:.3}, concurrent shared/own {:.3}",
            shared_whole.as_secs_f64() / own_whole.as_secs_f64(),
            shared_c.as_secs_f64() / own_c.as_secs_f64()
        );
    });
}
