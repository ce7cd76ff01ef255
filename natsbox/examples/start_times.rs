//! How long a single nats-server and a three-node JetStream cluster take to start (until every
//! node answers `/healthz` and JetStream), with the binary backend and with Docker. The numbers
//! in `docs/benchmarks.md` come from it:
//!
//! ```text
//! cargo run -p natsbox --example start_times -- 5
//! ```
//!
//! The argument is the number of starts of each kind (default 5); the median and the range are
//! printed. Docker rows are left out when no engine answers.

use std::time::{Duration, Instant};

use natsbox::{Backend, NatsConfig, NatsServer};

async fn time_starts(
    backend: Backend,
    cluster: Option<usize>,
    runs: usize,
) -> Option<Vec<Duration>> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let server = match NatsServer::start(NatsConfig {
            backend,
            cluster,
            ..Default::default()
        })
        .await
        {
            Ok(server) => server,
            Err(e) => {
                eprintln!("{backend} {cluster:?}: {e}");
                return None;
            }
        };
        times.push(started.elapsed());
        if let Err(e) = server.stop().await {
            eprintln!("stopping: {e}");
        }
    }
    times.sort();
    Some(times)
}

#[tokio::main]
async fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(5);
    println!("| backend | servers | median | min | max |");
    println!("|---|---|---|---|---|");
    for backend in [Backend::Binary, Backend::Docker] {
        for cluster in [None, Some(3)] {
            let Some(times) = time_starts(backend, cluster, runs).await else {
                continue;
            };
            let ms = |d: Duration| format!("{} ms", d.as_millis());
            println!(
                "| {backend} | {} | {} | {} | {} |",
                cluster.unwrap_or(1),
                ms(times[times.len() / 2]),
                ms(times[0]),
                ms(times[times.len() - 1]),
            );
        }
    }
}
