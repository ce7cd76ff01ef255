//! Hashing a 100-action manifest (canonical Go JSON + SHA-256), beside serde_json's plain
//! serialisation of the same manifest as the baseline measured in the same run.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use triggers_sdk::wire::{Action, Manifest, Retry, ServiceSource};

fn manifest(actions: usize) -> Manifest {
    let schema = |field: &str| {
        json!({
            "type": "object",
            "properties": {
                field: {"type": "string"},
                "count": {"type": "integer"},
                "ratio": {"type": "number", "maximum": 1.5},
                "tags": {"type": "array", "items": {"type": "string"}},
                "note": {"type": ["string", "null"]}
            },
            "required": [field, "count"]
        })
        .as_object()
        .cloned()
    };
    Manifest {
        protocol_version: "1.0.0".into(),
        service: "bench".into(),
        service_version: "1.0.0".into(),
        // Reverse order, so the hash has sorting to do.
        actions: (0..actions)
            .rev()
            .map(|i| Action {
                name: format!("action_{i:03}"),
                description: "catalog text that is not hashed".into(),
                input_schema: schema("tenant_id"),
                result_schema: schema("delivered"),
                timeout_ms: 30_000,
                retry: Retry {
                    max_attempts: 3,
                    initial_backoff_ms: 100,
                    backoff_factor: 2.0,
                    max_backoff_ms: 5_000,
                },
                dlq: format!("triggers.v2.dlq.bench.action_{i:03}"),
                ..Action::default()
            })
            .collect(),
        service_sources: vec![ServiceSource {
            name: "nats".into(),
            transport: "nats".into(),
            default: "triggers.v2.bench.inbound".into(),
        }],
        supports_nodes: vec!["mapping".into(), "condition".into(), "lookup".into()],
        ..Manifest::default()
    }
}

fn bench(c: &mut Criterion) {
    let m = manifest(100);
    let mut group = c.benchmark_group("manifest_100_actions");
    group.bench_function("serde_json_to_vec (baseline)", |b| {
        b.iter(|| serde_json::to_vec(black_box(&m)).unwrap())
    });
    group.bench_function("compute_hash", |b| {
        b.iter(|| black_box(&m).compute_hash().unwrap())
    });
    group.bench_function("hash_input (canonical bytes only)", |b| {
        b.iter(|| black_box(&m).hash_input().unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
