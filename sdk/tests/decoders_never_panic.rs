//! Property tests: no decoder of the wire contract panics, whatever bytes arrive, and the Go JSON
//! writer's output is always JSON that reads back to the same value.

use proptest::prelude::*;
use serde_json::Value;
use triggers_sdk::wire::durable_timer::{self, TimerContext};
use triggers_sdk::wire::{
    CompletionEvent, DlqEntry, Envelope, FlowEnvelope, GoTime, Headers, Heartbeat, Manifest,
    RawJson, RegisterReply, Traceparent, json, schema,
};

/// Arbitrary JSON values, biased towards the shapes the decoders expect.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("1.0.0"),
            Just("svc"),
            Just("nats"),
            Just("2026-05-26T14:30:45Z"),
            Just("action"),
            Just("root"),
            Just("elapsed")
        ]
        .prop_map(Value::from),
    ];
    let keys = prop_oneof![
        Just("protocol_version".to_owned()),
        Just("service".to_owned()),
        Just("actions".to_owned()),
        Just("name".to_owned()),
        Just("retry".to_owned()),
        Just("timeout_ms".to_owned()),
        Just("input_schema".to_owned()),
        Just("service_sources".to_owned()),
        Just("supports_nodes".to_owned()),
        Just("runtime_lookups".to_owned()),
        Just("params".to_owned()),
        Just("envelope".to_owned()),
        Just("body".to_owned()),
        Just("flows".to_owned()),
        Just("started_at".to_owned()),
        Just("v".to_owned()),
        Just("kind".to_owned()),
        "[a-z_]{1,8}",
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(keys.clone(), inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn decode_everything(bytes: &[u8]) {
    let _ = Manifest::from_json(bytes).map(|m| {
        let _ = m.validate();
        let _ = m.compute_hash();
    });
    let _ = Heartbeat::from_json(bytes);
    let _ = CompletionEvent::from_json(bytes);
    let _ = DlqEntry::from_json(bytes);
    let _ = RegisterReply::from_json(bytes);
    let _ = FlowEnvelope::from_json(bytes);
    let _ = Envelope::from_json(bytes);
    let _ = RawJson::from_slice(bytes);
    if let Ok(text) = std::str::from_utf8(bytes) {
        let _ = TimerContext::parse(text);
        let _ = GoTime::parse(text);
        let _ = Traceparent::parse(text);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        decode_everything(&bytes);
    }

    #[test]
    fn random_json_never_panics(value in json_value()) {
        decode_everything(value.to_string().as_bytes());
        let _ = schema::normalize(&value);
    }

    #[test]
    fn random_headers_never_panic(
        pairs in prop::collection::vec(
            (prop_oneof![
                prop::sample::select(triggers_sdk::wire::header::names::ALL.to_vec()).prop_map(str::to_owned),
                prop::sample::select(triggers_sdk::wire::header::names::ALL.to_vec()).prop_map(str::to_lowercase),
                "[A-Za-z-]{0,20}",
            ], ".{0,80}"),
            0..16,
        ),
        payload in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut headers: Headers = pairs.into_iter().collect();
        let _ = Envelope::from_headers(&headers);
        let _ = durable_timer::read_triplet(&headers, &payload);
        durable_timer::strip_triplet(&mut headers);
        prop_assert!(!durable_timer::has_triplet(&headers));
    }

    #[test]
    fn go_json_reads_back_to_the_same_value(value in json_value()) {
        let bytes = json::to_vec(&json::GoAny(&value)).unwrap();
        let back: Value = serde_json::from_slice(&bytes).unwrap();
        prop_assert!(same_as_float64(&value, &back), "{value} -> {}", String::from_utf8_lossy(&bytes));
    }
}

/// Equal once every number is seen as Go's float64.
fn same_as_float64(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_as_float64(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_as_float64(v, w)))
        }
        _ => a == b,
    }
}
