//! docs/wire.md states the recipe of every key and id once, each with a worked example in a
//! ```` ```recipe KIND ```` block. This test reads every such block and recomputes it with the
//! SDK's own functions (`wire::idempotency`, `wire::header`, `wire::subject`...), so the page
//! cannot drift from the bytes the SDK writes. Where a block shows `hashed` (the exact input of
//! SHA-256, as a JSON string), the test also checks that hashing it gives the digest in the key,
//! so the prose recipe (what is hashed, in which order, with which separators) is proved too.

use std::collections::BTreeMap;

use triggers_sdk::wire::durable_timer::payload_sha256;
use triggers_sdk::wire::header::dlq_msg_id;
use triggers_sdk::wire::{GoTime, Traceparent, idempotency, subject};

const PAGE: &str = include_str!("../../docs/wire.md");

struct Recipe {
    kind: String,
    line: usize,
    fields: BTreeMap<String, String>,
}

impl Recipe {
    fn get(&self, name: &str) -> &str {
        self.fields.get(name).unwrap_or_else(|| {
            panic!(
                "docs/wire.md:{}: the {} recipe lacks `{name}:`",
                self.line, self.kind
            )
        })
    }

    fn trail(&self) -> Vec<&str> {
        self.get("trail")
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect()
    }

    /// A field written as a JSON string (exact bytes, escapes and all).
    fn json_string(&self, name: &str) -> String {
        serde_json::from_str(self.get(name)).unwrap_or_else(|e| {
            panic!(
                "docs/wire.md:{}: `{name}` is not a JSON string: {e}",
                self.line
            )
        })
    }

    fn at(&self) -> String {
        format!("docs/wire.md:{} ({} recipe)", self.line, self.kind)
    }
}

fn recipes() -> Vec<Recipe> {
    let mut out = Vec::new();
    let mut open: Option<Recipe> = None;
    for (i, line) in PAGE.lines().enumerate() {
        if let Some(r) = open.as_mut() {
            if line.trim() == "```" {
                out.push(open.take().expect("open"));
            } else {
                let (name, value) = line.split_once(':').unwrap_or_else(|| {
                    panic!("docs/wire.md:{}: a recipe line is `name: value`", i + 1)
                });
                let old = r
                    .fields
                    .insert(name.trim().to_owned(), value.trim().to_owned());
                assert!(
                    old.is_none(),
                    "docs/wire.md:{}: `{name}` twice in one recipe",
                    i + 1
                );
            }
        } else if let Some(kind) = line.trim().strip_prefix("```recipe") {
            open = Some(Recipe {
                kind: kind.trim().to_owned(),
                line: i + 1,
                fields: BTreeMap::new(),
            });
        }
    }
    assert!(open.is_none(), "docs/wire.md: a recipe block is not closed");
    out
}

/// The 16-hex digest at the end of a key is the first 8 bytes of SHA-256 over `hashed`.
fn digest_of_hashed(r: &Recipe, key: &str) {
    let hashed = r.json_string("hashed");
    let digest = &payload_sha256(hashed.as_bytes())[..16];
    assert!(
        key.ends_with(&format!(":{digest}")),
        "{}: SHA-256 of `hashed` starts {digest}, which is not the digest of the key {key}",
        r.at()
    );
}

#[test]
fn every_recipe_on_the_page_is_the_sdks() {
    let mut seen = BTreeMap::<String, usize>::new();
    for r in recipes() {
        *seen.entry(r.kind.clone()).or_default() += 1;
        let at = r.at();
        match r.kind.as_str() {
            "root" => assert_eq!(
                idempotency::root(r.get("run"), r.get("entry")),
                r.get("key"),
                "{at}"
            ),
            "timer" => {
                let n = |f: &str| -> u64 {
                    r.get(f)
                        .parse()
                        .unwrap_or_else(|e| panic!("{at}: {f}: {e}"))
                };
                assert_eq!(
                    idempotency::timer(
                        r.get("run"),
                        r.get("timer"),
                        n("occurrence"),
                        n("fence"),
                        r.get("edge")
                    ),
                    r.get("key"),
                    "{at}"
                );
            }
            "hop" => {
                let key = idempotency::hop(
                    r.get("run"),
                    r.get("inbound_key"),
                    &r.trail(),
                    r.get("from"),
                    r.get("service"),
                );
                assert_eq!(key, r.get("key"), "{at}");
                digest_of_hashed(&r, &key);
            }
            "output" => {
                let key = idempotency::output(
                    r.get("run"),
                    r.get("inbound_key"),
                    &r.trail(),
                    r.get("node"),
                );
                assert_eq!(key, r.get("key"), "{at}");
                digest_of_hashed(&r, &key);
            }
            "event" => {
                let retry_count: i64 = r
                    .get("retry_count")
                    .parse()
                    .unwrap_or_else(|e| panic!("{at}: retry_count: {e}"));
                let id = idempotency::event(
                    r.get("inbound_key"),
                    &r.trail(),
                    r.get("node"),
                    r.get("status"),
                    retry_count,
                );
                assert_eq!(id, r.get("id"), "{at}");
                let hashed = r.json_string("hashed");
                assert_eq!(
                    format!("ev:{}", payload_sha256(hashed.as_bytes())),
                    id,
                    "{at}: `hashed` is not what the id hashes"
                );
            }
            "dlq" => {
                let occurred = GoTime::parse(r.get("occurred_at"))
                    .unwrap_or_else(|e| panic!("{at}: occurred_at: {e}"));
                assert_eq!(occurred.unix_nanos().to_string(), r.get("unix_ns"), "{at}");
                assert_eq!(
                    dlq_msg_id(r.get("key"), occurred.unix_nanos()),
                    r.get("id"),
                    "{at}"
                );
            }
            "payload_sha256" => assert_eq!(
                payload_sha256(r.json_string("payload").as_bytes()),
                r.get("sha256"),
                "{at}"
            ),
            "consumer" => assert_eq!(
                subject::consumer_name(r.get("service"), r.get("subject"))
                    .unwrap_or_else(|e| panic!("{at}: {e}")),
                r.get("name"),
                "{at}"
            ),
            "traceparent" => assert_eq!(
                Traceparent::new(r.get("trace_id"), r.get("span_id"), true).to_string(),
                r.get("traceparent"),
                "{at}"
            ),
            other => panic!("{at}: no test knows the recipe kind {other:?}"),
        }
    }
    for kind in [
        "root",
        "timer",
        "hop",
        "output",
        "event",
        "dlq",
        "payload_sha256",
        "consumer",
        "traceparent",
    ] {
        assert!(
            seen.contains_key(kind),
            "docs/wire.md lost its {kind} recipe"
        );
    }
}
