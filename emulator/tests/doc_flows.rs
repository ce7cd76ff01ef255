//! docs/flows.md stays true: every flow example on the page goes through the release check with
//! the outcome the page states, and every expression example evaluates to what the page says.
//! Each JSON block on the page is preceded by a `<!-- doc-example: KIND -->` marker naming what
//! it is, so an example added without one fails here rather than going unchecked.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use triggers_emulator::KeptManifest;
use triggers_emulator::conformance::Manifests;
use triggers_emulator::release::check_release;
use triggers_sdk::flow::{self, Flow, NodeType};
use triggers_sdk::wire::Manifest;

const PAGE: &str = include_str!("../../docs/flows.md");

/// One JSON block of the page: its marker, the line it starts at, its text.
struct Example {
    kind: String,
    line: usize,
    text: String,
}

fn examples() -> Vec<Example> {
    let mut out = Vec::new();
    let mut marker: Option<String> = None;
    let mut block: Option<(usize, String)> = None;
    for (i, line) in PAGE.lines().enumerate() {
        let line_no = i + 1;
        if let Some((start, text)) = block.as_mut() {
            if line.trim_start().starts_with("```") {
                let kind = marker.take().unwrap_or_else(|| {
                    panic!("docs/flows.md:{start}: a JSON block without a <!-- doc-example: KIND --> marker")
                });
                out.push(Example {
                    kind,
                    line: *start,
                    text: std::mem::take(text),
                });
                block = None;
            } else {
                text.push_str(line);
                text.push('\n');
            }
            continue;
        }
        if let Some(kind) = line
            .trim()
            .strip_prefix("<!-- doc-example:")
            .and_then(|r| r.strip_suffix("-->"))
        {
            marker = Some(kind.trim().to_owned());
        } else if line.trim_start().starts_with("```json") {
            block = Some((line_no, String::new()));
        } else if line.trim_start().starts_with("```") {
            assert!(
                marker.is_none(),
                "docs/flows.md:{line_no}: a doc-example marker before a block that is not JSON"
            );
        }
    }
    assert!(block.is_none(), "docs/flows.md: a JSON block is not closed");
    out
}

fn parse(e: &Example) -> Value {
    serde_json::from_str(&e.text)
        .unwrap_or_else(|err| panic!("docs/flows.md:{}: not JSON: {err}", e.line))
}

/// The two services the page's examples assume (its "Examples" section says what they declare).
fn services() -> Manifests {
    let manifest = |service: &str, actions: &[&str], nodes: &[&str], lookups: Value| -> Manifest {
        let actions: Vec<Value> = actions
            .iter()
            .map(|a| {
                json!({"name": a, "input_schema": {"type": "object"}, "result_schema": {"type": "object"},
                       "timeout_ms": 1000,
                       "retry": {"max_attempts": 1, "initial_backoff_ms": 0, "backoff_factor": 1, "max_backoff_ms": 0},
                       "dlq": format!("triggers.v2.dlq.{service}.{a}")})
            })
            .collect();
        serde_json::from_value(json!({
            "protocol_version": "1.0.0", "service": service, "service_version": "1.0.0",
            "manifest_hash": "", "actions": actions,
            "service_sources": [{"name": "inbound", "transport": "nats", "default": format!("{service}.inbound")}],
            "supports_nodes": nodes,
            "runtime_capabilities": ["durable_timer.v1"],
            "runtime_lookups": lookups,
        }))
        .expect("a manifest")
    };
    let mut m = Manifests::new();
    m.insert(
        "shop".into(),
        KeptManifest::new(manifest(
            "shop",
            &["charge", "refund"],
            &["condition", "mapping"],
            json!(null),
        )),
    );
    m.insert(
        "mail".into(),
        KeptManifest::new(manifest(
            "mail",
            &["send_reminder"],
            &["lookup", "mapping"],
            json!([{"name": "customer_tier",
                    "params": [{"name": "email", "type": "string", "required": true}],
                    "result_fields": [{"name": "tier", "type": "string"}]}]),
        )),
    );
    m
}

#[test]
fn every_flow_on_the_page_is_released_or_refused_as_it_says() {
    let manifests = services();
    let mut released = 0;
    let mut refused = 0;
    for e in examples() {
        let Some(expect) = e.kind.strip_prefix("release ") else {
            continue;
        };
        let flow: Flow = serde_json::from_value(parse(&e))
            .unwrap_or_else(|err| panic!("docs/flows.md:{}: not a flow: {err}", e.line));
        let at = format!("docs/flows.md:{} (flow {})", e.line, flow.id);
        match (expect, check_release(&flow, &manifests)) {
            ("ok", Ok(resolved)) => {
                released += 1;
                // What release writes into the flow, as the page says.
                for n in &resolved.body.nodes {
                    if n.node_type == NodeType::Timer {
                        assert!(n.service.is_empty(), "{at}: timer {} got a service", n.id);
                        continue;
                    }
                    assert!(!n.service.is_empty(), "{at}: node {} has no owner", n.id);
                    let first = format!("{}.inbound", n.service);
                    assert_eq!(n.inbound, first, "{at}: node {}'s inbound", n.id);
                    if n.node_type == NodeType::ServiceIn {
                        assert_eq!(n.config.get("transport"), Some(&json!("nats")), "{at}");
                        assert_eq!(n.config.get("target"), Some(&json!(first)), "{at}");
                    }
                }
            }
            ("ok", Err(problems)) => {
                panic!("{at}: the page says it is released; refused: {problems:#?}")
            }
            (code, Ok(_)) => panic!("{at}: the page says it is refused ({code}); released"),
            (code, Err(problems)) => {
                refused += 1;
                let codes: BTreeSet<&str> = problems.iter().map(|p| p.code.as_str()).collect();
                assert_eq!(
                    codes,
                    BTreeSet::from([code]),
                    "{at}: refused with other codes than the page says: {problems:#?}"
                );
            }
        }
    }
    assert!(
        released >= 2 && refused >= 4,
        "the page's examples went missing"
    );
}

#[test]
fn every_expression_example_evaluates_as_the_page_says() {
    let mut seen = 0;
    for e in examples() {
        let v = parse(&e);
        let at = format!("docs/flows.md:{}", e.line);
        match e.kind.as_str() {
            "mapping" => {
                seen += 1;
                let config = v["config"].as_object().expect("config");
                let out =
                    flow::mapping(config, &v["input"]).unwrap_or_else(|err| panic!("{at}: {err}"));
                assert_eq!(out, v["output"], "{at}");
            }
            "condition" => {
                for case in v["cases"].as_array().expect("cases") {
                    seen += 1;
                    let config = case[0].as_object().expect("a config");
                    let got = flow::condition(config, &v["input"]);
                    match (&case[1], got) {
                        (Value::Bool(want), Ok(got)) => {
                            assert_eq!(*want, got, "{at}: {}", case[0]);
                        }
                        (Value::String(s), Err(_)) if s == "error" => {}
                        (want, got) => {
                            panic!("{at}: {}: the page says {want}, got {got:?}", case[0])
                        }
                    }
                }
            }
            kind if kind.starts_with("release ") => {}
            other => panic!("{at}: unknown doc-example kind {other:?}"),
        }
    }
    assert!(seen >= 10, "the page's expression examples went missing");
}
