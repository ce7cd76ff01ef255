//! Writes random manifests full of edge cases, each with the canonical bytes and hash this crate
//! computes, in the golden layout (`<dir>/<case>/{manifest.json,canonical.json,hash.txt}`), so the
//! Go cross-check can judge manifests nobody wrote by hand:
//!
//! ```sh
//! cargo run -p triggers-sdk --example manifest_cases -- /tmp/cases 300 42
//! (cd testdata/go && go run . check-manifests /tmp/cases)
//! ```

use std::path::PathBuf;

use serde_json::{Map, Value, json};
use triggers_sdk::wire::Manifest;

/// SplitMix64: deterministic from the seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const PIECES: &[&str] = &[
    "a",
    "Z",
    "_",
    "0",
    "<",
    ">",
    "&",
    "<script>",
    "\u{2028}",
    "\u{2029}",
    "\u{0}",
    "\u{1}",
    "\u{8}",
    "\u{c}",
    "\n",
    "\r",
    "\t",
    "\u{b}",
    "\u{1f}",
    "\u{7f}",
    "é",
    "ü",
    "中文",
    "😀",
    "👨\u{200d}👩\u{200d}👧",
    "\"",
    "\\",
    "/",
    " ",
    "\u{10ffff}",
    "e\u{301}",
    "~",
    "ä",
];

fn text(rng: &mut Rng) -> String {
    (0..rng.below(5)).map(|_| *rng.pick(PIECES)).collect()
}

fn name(rng: &mut Rng) -> String {
    const NAMES: &[&str] = &[
        "send", "Send", "_x", "alpha", "b", "B", "zeta", "é", "mid", "a0", "a",
    ];
    format!("{}{}", rng.pick(NAMES), rng.below(50))
}

fn number(rng: &mut Rng) -> Value {
    match rng.below(14) {
        0 => json!(2.0),
        1 => json!(1e21),
        2 => json!(1e20),
        3 => json!(1e-7),
        4 => json!(1e-6),
        5 => json!(-0.0),
        6 => json!(9_007_199_254_740_993u64),
        7 => json!(u64::MAX),
        8 => json!(1.5e300),
        9 => json!(5e-324),
        10 => json!(rng.next() as i64),
        11 => json!((rng.next() % 10_000) as f64 / 8.0),
        _ => {
            let f = f64::from_bits(rng.next());
            if f.is_finite() { json!(f) } else { json!(0.1) }
        }
    }
}

fn free_form(rng: &mut Rng, depth: u32) -> Value {
    match rng.below(if depth > 2 { 4 } else { 6 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(50)),
        2 => number(rng),
        3 => Value::String(text(rng)),
        4 => Value::Array(
            (0..rng.below(4))
                .map(|_| free_form(rng, depth + 1))
                .collect(),
        ),
        _ => Value::Object(
            (0..rng.below(5))
                .map(|_| (text(rng), free_form(rng, depth + 1)))
                .collect(),
        ),
    }
}

fn schema(rng: &mut Rng) -> Value {
    if rng.chance(5) {
        return Value::Null;
    }
    let mut props = Map::new();
    for _ in 0..rng.below(4) {
        let mut p = Map::new();
        p.insert(
            "type".into(),
            json!(rng.pick(&["string", "integer", "number", "boolean"])),
        );
        if rng.chance(30) {
            p.insert(
                "enum".into(),
                Value::Array((0..3).map(|_| json!(text(rng))).collect()),
            );
        }
        if rng.chance(30) {
            p.insert("maximum".into(), number(rng));
        }
        if rng.chance(20) {
            p.insert("x-extra".into(), free_form(rng, 0));
        }
        props.insert(text(rng), Value::Object(p));
    }
    let mut s = Map::new();
    s.insert("type".into(), json!("object"));
    s.insert("properties".into(), Value::Object(props));
    if rng.chance(50) {
        s.insert("required".into(), json!([text(rng)]));
    }
    Value::Object(s)
}

fn list<T>(rng: &mut Rng, max: usize, mut f: impl FnMut(&mut Rng) -> T) -> Vec<T> {
    (0..rng.below(max + 1)).map(|_| f(rng)).collect()
}

/// A list field: usually present, sometimes empty, sometimes null, sometimes left out.
fn maybe_list(
    rng: &mut Rng,
    m: &mut Map<String, Value>,
    key: &str,
    items: Vec<Value>,
    omit_ok: bool,
) {
    match rng.below(10) {
        0 => {
            m.insert(key.into(), Value::Null);
        }
        1 if omit_ok => {}
        2 => {
            m.insert(key.into(), json!([]));
        }
        _ => {
            m.insert(key.into(), Value::Array(items));
        }
    }
}

fn unique_names(rng: &mut Rng, n: usize) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    while names.len() < n {
        let candidate = name(rng);
        if !names.contains(&candidate) {
            names.push(candidate);
        }
    }
    names
}

fn field(rng: &mut Rng, name: String) -> Value {
    let mut f = Map::new();
    f.insert("name".into(), json!(name));
    f.insert(
        "type".into(),
        json!(rng.pick(&["string", "integer", "number", "boolean"])),
    );
    if rng.chance(60) {
        f.insert("required".into(), json!(rng.chance(50)));
    }
    Value::Object(f)
}

fn manifest(rng: &mut Rng) -> Value {
    let service = format!("svc{}", rng.below(100));
    let mut m = Map::new();
    m.insert("protocol_version".into(), json!("1.0.0"));
    m.insert("service".into(), json!(service));
    m.insert("service_version".into(), json!(text(rng)));
    m.insert("manifest_hash".into(), json!(""));
    if rng.chance(30) {
        m.insert("display_name".into(), json!(text(rng)));
        m.insert("description".into(), json!(text(rng)));
        m.insert("owner".into(), json!(text(rng)));
        m.insert("tags".into(), json!([text(rng), text(rng)]));
    }
    let n_actions = rng.below(5);
    let actions = unique_names(rng, n_actions)
        .into_iter()
        .map(|n| {
            let mut a = Map::new();
            a.insert("dlq".into(), json!(format!("triggers.v2.dlq.{service}.{n}")));
            a.insert("name".into(), json!(n));
            a.insert("input_schema".into(), schema(rng));
            a.insert("result_schema".into(), schema(rng));
            a.insert("timeout_ms".into(), json!(rng.next() as i64 >> rng.below(64)));
            a.insert(
                "retry".into(),
                json!({
                    "max_attempts": rng.below(10),
                    "initial_backoff_ms": rng.below(100_000),
                    "backoff_factor": number(rng).as_f64().unwrap_or(2.0),
                    "max_backoff_ms": rng.next() >> 2,
                }),
            );
            if rng.chance(30) {
                a.insert("display_name".into(), json!(text(rng)));
                a.insert("description".into(), json!(text(rng)));
                a.insert("version".into(), json!(text(rng)));
                a.insert("lifecycle".into(), json!("beta"));
                a.insert("action_env".into(), free_form(rng, 0));
                a.insert("compatibility".into(), free_form(rng, 0));
            }
            if rng.chance(30) {
                a.insert(
                    "result_event".into(),
                    json!({"event_type": text(rng), "schema_id": text(rng), "schema_version": 1, "fields": []}),
                );
            }
            Value::Object(a)
        })
        .collect();
    maybe_list(rng, &mut m, "actions", actions, false);
    let n_sources = rng.below(4);
    let sources = unique_names(rng, n_sources)
        .into_iter()
        .map(|n| json!({"name": n, "transport": rng.pick(&["nats", "http", "kafka"]), "default": text(rng)}))
        .collect();
    maybe_list(rng, &mut m, "service_sources", sources, false);
    let nodes = list(rng, 4, |r| {
        json!(r.pick(&["mapping", "condition", "lookup", "rate_limit", "é", "Z"]))
    });
    maybe_list(rng, &mut m, "supports_nodes", nodes, false);
    if rng.chance(40) {
        m.insert("supports_rate_limit".into(), json!(rng.chance(50)));
    }
    if rng.chance(50) {
        let caps = list(rng, 3, |r| {
            json!(r.pick(&["durable_timer.v1", "zeta.v2", "alpha.v1", "Beta"]))
        });
        maybe_list(rng, &mut m, "runtime_capabilities", caps, true);
    }
    if rng.chance(50) {
        let n_lookups = rng.below(4);
        let lookups = unique_names(rng, n_lookups)
            .into_iter()
            .map(|n| {
                let mut l = Map::new();
                l.insert("name".into(), json!(n));
                if rng.chance(50) {
                    l.insert("display_name".into(), json!(text(rng)));
                    l.insert("description".into(), json!(text(rng)));
                }
                for key in ["params", "result_fields"] {
                    let n_fields = rng.below(4);
                    let fields = unique_names(rng, n_fields)
                        .into_iter()
                        .map(|f| field(rng, f))
                        .collect();
                    maybe_list(rng, &mut l, key, fields, true);
                }
                Value::Object(l)
            })
            .collect();
        maybe_list(rng, &mut m, "runtime_lookups", lookups, true);
    }
    Value::Object(m)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or("usage: manifest_cases DIR [COUNT] [SEED]")?,
    );
    let count: usize = args.next().map_or(Ok(300), |s| s.parse())?;
    let seed: u64 = args.next().map_or(Ok(1), |s| s.parse())?;
    let mut rng = Rng(seed);
    for i in 0..count {
        let value = manifest(&mut rng);
        let text = serde_json::to_string_pretty(&value)?;
        let parsed = Manifest::from_json(text.as_bytes()).map_err(|e| {
            format!("case {i}: the generator wrote a manifest the decoder refuses: {e}")
        })?;
        let case = dir.join(format!("gen_{seed}_{i:04}"));
        std::fs::create_dir_all(&case)?;
        std::fs::write(case.join("manifest.json"), text)?;
        std::fs::write(case.join("canonical.json"), parsed.hash_input()?)?;
        std::fs::write(
            case.join("hash.txt"),
            format!("{}\n", parsed.compute_hash()?),
        )?;
    }
    eprintln!(
        "wrote {count} manifest cases (seed {seed}) to {}",
        dir.display()
    );
    Ok(())
}
