//! `triggers-lab manifest hash` of a 5 000-action manifest (about 3 MB) beside the Go reference
//! (`testdata/go`, `encoding/json`) hashing the same file, measured in the same run: the Rust path
//! in-process (read, hash from the text), the decoding path in-process (read, decode into
//! `Manifest`, canonicalise, hash: what a manifest the text path declines takes), the release CLI
//! as a whole process, and the Go program as a whole process. Prints the medians and the ratios; `docs/benchmarks.md` keeps them.
//!
//! ```sh
//! cargo bench -p triggers-lab --bench manifest_hash_go [-- ACTIONS [RUNS]]
//! ```
//!
//! The Go program is built with `go build` into a temporary folder; without `go` on the `PATH`
//! the Go side is skipped with a message (the Rust figures are still printed).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use triggers_sdk::wire::Manifest;

/// A wire manifest of `actions` actions, in reverse name order (so the hash has sorting to do),
/// each with catalog fields (not hashed) and input and result schemas of nested properties whose
/// keys are not in order and whose numbers go through Go's `float64`.
fn manifest(actions: usize) -> Value {
    let schema = |field: &str, i: usize| {
        json!({
            "type": "object",
            "required": [field, "count"],
            "properties": {
                field: {"type": "string", "minLength": 1, "description": format!("the {field} of item {i}")},
                "count": {"type": "integer", "minimum": 0, "maximum": 1_000_000},
                "ratio": {"type": "number", "maximum": 1.5, "multipleOf": 0.001},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 16},
                "note": {"type": ["string", "null"]},
                "address": {"type": "object", "properties": {
                    "street": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}
                }}
            },
            "additionalProperties": false
        })
    };
    let actions: Vec<Value> = (0..actions)
        .rev()
        .map(|i| {
            json!({
                "name": format!("action_{i:05}"),
                "display_name": format!("Action {i}"),
                "description": "catalog text that is not hashed, but must be read past",
                "version": "1.2.3",
                "lifecycle": "stable",
                "input_schema": schema("tenant_id", i),
                "result_schema": schema("delivered", i),
                "timeout_ms": 30_000,
                "retry": {"max_attempts": 3, "initial_backoff_ms": 100, "backoff_factor": 2.5, "max_backoff_ms": 5_000},
                "dlq": format!("triggers.v2.dlq.bench.action_{i:05}"),
            })
        })
        .collect();
    json!({
        "protocol_version": "1.0.0",
        "service": "bench",
        "service_version": "1.0.0",
        "manifest_hash": "",
        "actions": actions,
        "service_sources": [{"name": "nats", "transport": "nats", "default": "triggers.v2.bench.inbound"}],
        "supports_nodes": ["mapping", "condition", "lookup"],
        "runtime_capabilities": ["durable_timer.v1"],
    })
}

/// The whole job in-process, as the CLI does it: read the file, hash it from its text
/// (`Manifest::hash_of_json`), or decode, canonicalise and hash where that path declines.
fn rust_in_process(file: &Path) -> String {
    let bytes = std::fs::read(file).expect("read the manifest");
    Manifest::hash_of_json(&bytes).unwrap_or_else(|| {
        Manifest::from_json(&bytes)
            .expect("a valid manifest")
            .compute_hash()
            .expect("hashable")
    })
}

/// The decoding path alone (read, decode into `Manifest`, canonicalise, hash): what the CLI
/// did before it hashed from the text, and still does for a manifest that path declines.
fn rust_decoded(file: &Path) -> String {
    let bytes = std::fs::read(file).expect("read the manifest");
    let manifest = Manifest::from_json(&bytes).expect("a valid manifest");
    let hash = manifest.compute_hash().expect("hashable");
    std::mem::forget(manifest); // as the CLI leaves it to the operating system
    hash
}

/// Runs `cmd` and returns its standard output's first word (the hash), failing on a bad exit.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("start the program");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Builds the Go reference into `dir`; `None` (with a message) when there is no Go toolchain.
fn build_go(dir: &Path) -> Option<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/go");
    let binary = dir.join("crosscheck");
    match Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&binary)
        .arg(".")
        .current_dir(&source)
        .status()
    {
        Ok(s) if s.success() => Some(binary),
        Ok(s) => {
            println!(
                "skipping the Go side: `go build` in {} failed ({s})",
                source.display()
            );
            None
        }
        Err(e) => {
            println!(
                "skipping the Go side: no `go` to build {} ({e})",
                source.display()
            );
            None
        }
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2
    } else {
        v[mid]
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` does not, and then a small run
    // only checks the benchmark still works.
    let measuring = std::env::args().any(|a| a == "--bench");
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let actions: usize = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(if measuring { 5_000 } else { 50 });
    let runs: usize = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(if measuring { 11 } else { 1 });

    let dir = tempfile::tempdir().expect("a temporary folder");
    let file = dir.path().join("manifest.json");
    std::fs::write(&file, serde_json::to_vec(&manifest(actions)).unwrap()).unwrap();
    let size = std::fs::metadata(&file).unwrap().len();
    let cli = PathBuf::from(env!("CARGO_BIN_EXE_triggers-lab"));
    let go = build_go(dir.path());
    println!(
        "{actions} actions, {:.2} MB, {runs} runs of each, interleaved",
        size as f64 / 1e6
    );

    let expected = rust_in_process(&file);
    let (mut inproc, mut decoded, mut process, mut gos) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Interleaved, so that a burst of load on the shared machine hits all four alike.
    for _ in 0..runs {
        let t = Instant::now();
        assert_eq!(rust_in_process(&file), expected);
        inproc.push(t.elapsed());

        let t = Instant::now();
        assert_eq!(rust_decoded(&file), expected, "the decoding path's hash");
        decoded.push(t.elapsed());

        let t = Instant::now();
        let h = run(Command::new(&cli).args(["manifest", "hash"]).arg(&file));
        process.push(t.elapsed());
        assert_eq!(h, expected, "the CLI's hash");

        if let Some(go) = &go {
            let t = Instant::now();
            let h = run(Command::new(go).arg("hash").arg(&file));
            gos.push(t.elapsed());
            assert_eq!(h, expected, "Go's hash");
        }
    }
    let (i, d, p) = (
        median(&mut inproc),
        median(&mut decoded),
        median(&mut process),
    );
    println!(
        "rust in-process (read, hash from the text):         {:8.1} ms",
        ms(i)
    );
    println!(
        "rust in-process, decoding path (read, decode, hash): {:7.1} ms",
        ms(d)
    );
    println!(
        "triggers-lab manifest hash (whole process):        {:8.1} ms",
        ms(p)
    );
    if go.is_some() {
        let g = median(&mut gos);
        println!(
            "go crosscheck hash (whole process, encoding/json):  {:8.1} ms",
            ms(g)
        );
        println!(
            "ratios: go/cli {:.2}x, go/in-process {:.2}x",
            g.as_secs_f64() / p.as_secs_f64(),
            g.as_secs_f64() / i.as_secs_f64()
        );
    }
}
