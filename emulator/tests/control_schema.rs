//! The control API's published JSON Schema, `docs/control-schema.json`: the file is what the
//! protocol's types generate, and every control-API example in docs/emulator.md (requests and
//! replies) validates against it and decodes into those types.

use std::path::PathBuf;

use serde_json::Value;
use triggers_emulator::control::protocol::{
    AdvanceRequest, CancelRequest, CheckReleaseRequest, DeployRequest, ErrorReply, FlowListRequest,
    FlowRequest, FollowRequest, Op, RecordsRequest, Request, ResendDlqRequest, RunPageRequest,
    RunRequest, RunsRequest, ServicesRequest, StateRequest, TriggerRequest, ViolationsRequest,
};
use triggers_emulator::control::{self, PREFIX};

const GUIDE: &str = include_str!("../../docs/emulator.md");

fn schema_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/control-schema.json")
}

#[test]
fn the_published_schema_is_what_the_types_generate() {
    let generated = serde_json::to_string_pretty(&control::schema()).unwrap() + "\n";
    let path = schema_path();
    if std::env::var_os("TRIGGERS_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let published = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        published == generated,
        "docs/control-schema.json is not what the control protocol's types generate: run `{}` \
         and commit the file",
        control::BLESS
    );
}

/// A validator for the definition `name` of the published schema.
fn validator(name: &str) -> jsonschema::Validator {
    let mut schema: Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path()).unwrap()).unwrap();
    assert!(
        schema["$defs"].get(name).is_some(),
        "the schema has no $defs/{name}"
    );
    schema["$ref"] = Value::from(format!("#/$defs/{name}"));
    jsonschema::validator_for(&schema).unwrap()
}

/// Why `instance` does not validate against `$defs/name` (empty when it does).
fn problems(name: &str, instance: &Value) -> Vec<String> {
    validator(name)
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

/// One example: the op, the request's body (when the example shows it), the reply (when shown).
#[derive(Debug)]
struct Example {
    line: usize,
    op: String,
    request: Option<Value>,
    reply: Option<Value>,
}

/// The first JSON value of `text`, if it starts with one.
fn leading_json(text: &str) -> Option<Value> {
    let text = text.trim_start();
    if !text.starts_with('{') {
        return None;
    }
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .next()?
        .ok()
}

/// Every example of the control API section: `// <subject>  <request>` lines followed by their
/// reply in its `jsonc` block, and the `nats req <subject> '<request>'` commands.
fn examples() -> Vec<Example> {
    let start = GUIDE
        .find("\n## The control API")
        .expect("the control API section");
    let end = GUIDE[start + 1..]
        .find("\n## ")
        .map_or(GUIDE.len(), |e| start + 1 + e);
    let first_line = GUIDE[..start].lines().count() + 1;
    let lines: Vec<&str> = GUIDE[start..end].lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let subject = format!("{PREFIX}.");
        if let Some(rest) = line
            .strip_prefix("// ")
            .and_then(|l| l.strip_prefix(&subject))
        {
            let op: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            let reply = lines.get(i + 1).and_then(|l| leading_json(l));
            found.push(Example {
                line: first_line + i,
                request: leading_json(&rest[op.len()..]),
                op,
                reply,
            });
        } else if let Some(at) = line.find(&format!(" req {subject}")) {
            let rest = &line[at + " req ".len() + subject.len()..];
            let op: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
            let body = rest[op.len()..].trim_start();
            let request = body
                .strip_prefix('\'')
                .and_then(|b| b.split('\'').next())
                .and_then(|b| serde_json::from_str(b).ok());
            found.push(Example {
                line: first_line + i,
                op,
                request,
                reply: None,
            });
        }
    }
    found
}

/// The typed reply of `T`'s op: `result` as [`Op::Reply`], or the error reply.
fn decode_reply<T: Op>(reply: &Value) -> Result<(), String> {
    if reply["ok"] == Value::Bool(true) {
        serde_json::from_value::<T::Reply>(reply["result"].clone())
            .map(drop)
            .map_err(|e| e.to_string())
    } else {
        serde_json::from_value::<ErrorReply>(reply.clone())
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

fn decode_reply_of(op: &str, reply: &Value) -> Result<(), String> {
    match op {
        "state" => decode_reply::<StateRequest>(reply),
        "deploy" => decode_reply::<DeployRequest>(reply),
        "check_release" => decode_reply::<CheckReleaseRequest>(reply),
        "trigger" => decode_reply::<TriggerRequest>(reply),
        "resend_dlq" => decode_reply::<ResendDlqRequest>(reply),
        "advance" => decode_reply::<AdvanceRequest>(reply),
        "cancel" => decode_reply::<CancelRequest>(reply),
        "runs" => decode_reply::<RunsRequest>(reply),
        "run_page" => decode_reply::<RunPageRequest>(reply),
        "run" => decode_reply::<RunRequest>(reply),
        "flow" => decode_reply::<FlowRequest>(reply),
        "flow_list" => decode_reply::<FlowListRequest>(reply),
        "records" => decode_reply::<RecordsRequest>(reply),
        "violations" => decode_reply::<ViolationsRequest>(reply),
        "services" => decode_reply::<ServicesRequest>(reply),
        "follow" => decode_reply::<FollowRequest>(reply),
        // An unknown op's reply is an error reply.
        _ => decode_reply::<StateRequest>(reply),
    }
}

#[test]
fn every_control_example_in_the_guide_validates_and_decodes() {
    let examples = examples();
    let requests = examples.iter().filter(|e| e.request.is_some()).count();
    let replies = examples.iter().filter(|e| e.reply.is_some()).count();
    // The section's examples, as written today: a test that found none would prove nothing.
    assert!(
        requests >= 12 && replies >= 9,
        "found {requests} requests and {replies} replies in docs/emulator.md's control API \
         section: {examples:#?}"
    );
    let mut failures = Vec::new();
    for example in &examples {
        let Example {
            line, op, request, ..
        } = example;
        let known = Request::decode(op, b"{}")
            .map_or_else(|e| !e.starts_with("unknown control op"), |_| true);
        if let Some(body) = request {
            let bytes = serde_json::to_vec(body).unwrap();
            match Request::decode(op, &bytes) {
                Ok(_) => {}
                Err(e) if !known => {
                    // The unknown op's example shows the error it gets: the one decode gives.
                    let shown = example.reply.as_ref().map(|r| r["error"].clone());
                    if shown.is_some() && shown != Some(Value::from(e.clone())) {
                        failures.push(format!(
                            "line {line}: {op}: the guide shows {shown:?}, decode says {e}"
                        ));
                    }
                }
                Err(e) => failures.push(format!("line {line}: {op} request: {e}")),
            }
            if known {
                let mut tagged = body.clone();
                tagged["op"] = Value::from(op.as_str());
                if let Err(e) = serde_json::from_value::<Request>(tagged.clone()) {
                    failures.push(format!("line {line}: {op} request as a Request: {e}"));
                }
                for p in problems("Request", &tagged) {
                    failures.push(format!("line {line}: {op} request: {p}"));
                }
            }
        }
        if let Some(reply) = &example.reply {
            let def = if known {
                format!("{}Reply", control::pascal(op))
            } else {
                "ErrorReply".to_owned()
            };
            for p in problems(&def, reply) {
                failures.push(format!("line {line}: {op} reply against {def}: {p}"));
            }
            if let Err(e) = decode_reply_of(op, reply) {
                failures.push(format!("line {line}: {op} reply: {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_schema_refuses_what_the_server_refuses() {
    // The validator is not vacuous: a request missing its required field, an op that does not
    // exist, and a success reply of the wrong shape are refused.
    let missing = serde_json::json!({"op": "trigger", "payload": {}});
    assert!(!problems("Request", &missing).is_empty());
    let unknown = serde_json::json!({"op": "frobnicate"});
    assert!(!problems("Request", &unknown).is_empty());
    let wrong = serde_json::json!({"ok": true, "result": {"run_id": 3}});
    assert!(!problems("TriggerReply", &wrong).is_empty());
    let refused = serde_json::json!({"ok": false, "error": "no run \"x\""});
    assert!(problems("RunReply", &refused).is_empty());
}

/// Sends `body` to `op` as a client in another language would, checks the request against
/// `#/$defs/Request` and the reply against `#/$defs/<Op>Reply`, decodes the reply into the op's
/// type, and returns it.
async fn checked(client: &async_nats::Client, op: &str, body: Value) -> Value {
    let mut tagged = body.clone();
    tagged["op"] = Value::from(op);
    let request = problems("Request", &tagged);
    assert!(request.is_empty(), "{op} request {body}: {request:?}");
    let reply =
        triggers_testkit::peer::control(client, op, &serde_json::to_vec(&body).unwrap()).await;
    let def = format!("{}Reply", control::pascal(op));
    let wrong = problems(&def, &reply);
    assert!(wrong.is_empty(), "{op} reply {reply}: {wrong:?}");
    decode_reply_of(op, &reply).unwrap_or_else(|e| panic!("{op} reply {reply}: {e}"));
    reply
}

#[tokio::test]
async fn every_reply_of_a_live_emulator_validates_and_decodes() {
    use serde_json::json;
    let lab = triggers_testkit::lab().await;
    let client = triggers_testkit::peer::connect(&lab).await;
    triggers_testkit::peer::register(
        &client,
        &triggers_testkit::peer::manifest("shop", &["charge"], &[]),
    )
    .await;
    let flow = serde_json::to_value(triggers_testkit::peer::one_step_flow(
        "order", "shop", "charge",
    ))
    .unwrap();
    let mut refused = flow.clone();
    refused["nodes"][1]["action"] = json!("refund");
    checked(&client, "check_release", json!({ "flow": flow })).await;
    let error = checked(&client, "deploy", json!({ "flow": refused })).await;
    assert_eq!(error["error"]["problems"][0]["code"], "unknown_action");
    assert_eq!(
        checked(&client, "deploy", json!({ "flow": flow })).await["ok"],
        true
    );
    let started = checked(
        &client,
        "trigger",
        json!({"flow_id": "order", "payload": {"n": 1}}),
    )
    .await;
    let run_id = started["result"]["run_id"].clone();
    triggers_testkit::peer::next_delivery(&client, "shop").await;
    // A violation on purpose: the orchestrator's DLQ subject, published by a client.
    client
        .publish("triggers.v2.dlq.source.x", "oops".into())
        .await
        .unwrap();
    client.flush().await.unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while lab.violations().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no violation recorded"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let state = checked(&client, "state", json!({})).await;
    assert_eq!(state["result"]["runs_total"], 1);
    checked(&client, "state", json!({"runs_limit": 0})).await;
    checked(&client, "run_page", json!({"after": 0, "limit": 10})).await;
    checked(&client, "runs", json!({})).await;
    checked(&client, "run", json!({ "run_id": run_id })).await;
    checked(
        &client,
        "run",
        json!({"run_id": run_id, "timeline_from": 0}),
    )
    .await;
    checked(&client, "flow", json!({"flow_id": "order"})).await;
    checked(&client, "flow_list", json!({})).await;
    let records = checked(&client, "records", json!({"since": 0, "limit": 100})).await;
    assert!(
        records["result"].as_array().unwrap().len() >= 3,
        "{records}"
    );
    let violations = checked(&client, "violations", json!({})).await;
    assert_eq!(violations["result"][0]["rule"], "source_dlq_publish");
    checked(&client, "services", json!({"limit": 10})).await;
    checked(&client, "advance", json!({"duration_ms": 1000})).await;
    checked(&client, "follow", json!({"lease_ms": 1000})).await;
    checked(&client, "resend_dlq", json!({"msg_id": "nope"})).await;
    let cancelled = checked(&client, "cancel", json!({ "run_id": run_id })).await;
    assert_eq!(cancelled["result"]["run_id"], run_id);
    let gone = checked(&client, "run", json!({"run_id": "nope"})).await;
    assert_eq!(gone["ok"], false);
}
