//! What a registered service costs the emulator, against its manifest's size: the audit measured
//! 17 MB per service of ~940 KiB manifests (18x): one parsed copy for the service table and
//! another for the checker's registry, each schema a tree of small maps. Now they share one copy,
//! kept as the received bytes with an outline without schemas. Measured from the process's
//! resident memory while services with large manifests register (a figure, printed with
//! `--nocapture`; docs/benchmarks.md keeps it).

use serde_json::json;
use triggers_sdk::wire::Manifest;

use triggers_testkit::lab;
use triggers_testkit::peer::*;

/// Resident memory of this process, in bytes (Linux; 0 elsewhere).
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// A sealed manifest of about `kib` KiB: actions with wide schemas.
fn large_manifest(service: &str, kib: usize) -> Manifest {
    let mut m = manifest(service, &[], &[]);
    let mut value = serde_json::to_value(&m).unwrap();
    let props: serde_json::Map<String, serde_json::Value> = (0..12)
        .map(|p| {
            (
                format!("field_{p}"),
                json!({"type": "string", "description": "a field of the order"}),
            )
        })
        .collect();
    let mut actions = Vec::new();
    let mut size = 0;
    let mut i = 0;
    while size < kib * 1024 {
        let a = json!({
            "name": format!("act{i}"),
            "input_schema": {"type": "object", "properties": props},
            "result_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
            "timeout_ms": 1000,
            "retry": {"max_attempts": 2, "initial_backoff_ms": 10, "backoff_factor": 2.0, "max_backoff_ms": 100},
            "dlq": format!("triggers.v2.dlq.{service}.act{i}"),
        });
        size += a.to_string().len();
        actions.push(a);
        i += 1;
    }
    value["actions"] = json!(actions);
    m = serde_json::from_value(value).unwrap();
    m.seal().unwrap();
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_service_keeps_its_manifest_bytes_once() {
    let lab = lab().await;
    let client = connect(&lab).await;
    let services = 12;
    let manifests: Vec<Manifest> = (0..services)
        .map(|n| large_manifest(&format!("big{n}"), 900))
        .collect();
    let bytes = manifests[0].to_json().unwrap().len();
    // One first, so what every registration costs once (the stream machinery) is not counted.
    assert_eq!(register(&client, &manifests[0]).await.error, "");
    let before = rss();
    for m in &manifests[1..] {
        assert_eq!(register(&client, m).await.error, "");
    }
    let per_service = rss().saturating_sub(before) / (services - 1);
    let ratio = per_service as f64 / bytes as f64;
    println!(
        "manifest {bytes} bytes; {per_service} bytes of resident memory per service ({ratio:.1}x)"
    );
    let services_now = lab.services();
    assert_eq!(services_now.len(), services);
    // The figure is printed, not bounded: resident memory moves with the allocator and the
    // machine. What the change made is asserted: one kept manifest per service, held by the
    // service table and the checker's registry alike (this clone holds a third reference; two
    // copies would leave it two); its bytes are the ones received, and no schema is kept parsed.
    for m in &manifests {
        let (name, s) = (&m.service, &services_now[&m.service]);
        assert!(
            s.manifest.holders() >= 3,
            "{name}'s manifest is not shared by the service table and the checker's registry"
        );
        assert_eq!(s.manifest.bytes(), m.to_json().unwrap().as_slice());
        assert!(
            s.manifest
                .actions
                .iter()
                .all(|a| a.input_schema.is_none() && a.result_schema.is_none()),
            "{name}'s schemas are kept parsed"
        );
        assert_eq!(s.manifest.full().unwrap(), *m);
    }
}
