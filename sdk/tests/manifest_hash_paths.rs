//! Property test: the manifest hash computed from the text (`Manifest::hash_of_json`, the CLI's
//! path) is the hash of the decoded manifest, for manifests whose schemas hold any JSON (keys in
//! any order and repeated, every kind of number, strings with escapes and non-ASCII, written
//! compact or spaced); where the text path answers, it never differs, and on such manifests it
//! answers.

use proptest::prelude::*;
use serde_json::json;
use triggers_sdk::wire::Manifest;

/// JSON text of a free-form value (a schema's insides), written by hand so that keys can repeat
/// and come unsorted, numbers keep their written form and whitespace varies.
fn json_text() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| f.to_string()),
        Just("-0".to_owned()),
        Just("1E+21".to_owned()),
        Just("0.000001".to_owned()),
        Just("9007199254740993".to_owned()),
        Just("123456789012345678901234567890".to_owned()),
    ];
    let string = prop_oneof![
        "[a-zé😀 <>&\u{2028}]{0,6}".prop_map(|s| serde_json::to_string(&s).unwrap()),
        Just(r#""esc \" \\ \/ \b\f\n\r\t \u0001 \u00e9 \ud83d\ude00""#.to_owned()),
    ];
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        number,
        string,
    ];
    let key = prop_oneof![
        Just("type".to_owned()),
        Just("properties".to_owned()),
        Just("a".to_owned()),
        Just("B".to_owned()),
        Just("é".to_owned()),
        "[a-z_]{1,6}",
    ];
    let ws = prop_oneof![Just(""), Just(" "), Just("\n  ")];
    leaf.prop_recursive(4, 40, 6, move |inner| {
        prop_oneof![
            (prop::collection::vec(inner.clone(), 0..5), ws.clone())
                .prop_map(|(items, ws)| format!("[{ws}{}{ws}]", items.join(&format!(",{ws}")))),
            (
                prop::collection::vec((key.clone(), inner), 0..6),
                ws.clone()
            )
                .prop_map(|(members, ws)| {
                    let members: Vec<String> = members
                        .into_iter()
                        .map(|(k, v)| format!("{}{ws}:{ws}{v}", serde_json::to_string(&k).unwrap()))
                        .collect();
                    format!("{{{ws}{}{ws}}}", members.join(","))
                }),
        ]
    })
}

fn manifest(schemas: &[(String, Option<String>)]) -> String {
    let actions: Vec<String> = schemas
        .iter()
        .enumerate()
        .map(|(i, (input, result))| {
            format!(
                r#"{{"name":"a{n}","input_schema":{input},"result_schema":{result},"timeout_ms":1000,
                "retry":{{"max_attempts":2,"initial_backoff_ms":10,"backoff_factor":1.5,"max_backoff_ms":100}},
                "dlq":"triggers.v2.dlq.svc.a{n}","description":"not hashed"}}"#,
                n = 100 - i,
                result = result.as_deref().unwrap_or("null"),
            )
        })
        .collect();
    let doc = json!({
        "protocol_version": "1.0.0", "service": "svc", "service_version": "1.0.0",
        "service_sources": [{"name": "nats", "transport": "nats", "default": "svc.in"}],
        "supports_nodes": ["mapping"], "actions": "ACTIONS"
    });
    doc.to_string()
        .replace("\"ACTIONS\"", &format!("[{}]", actions.join(",")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_hash_from_the_text_is_the_hash_of_the_decoded_manifest(
        bodies in prop::collection::vec((json_text(), prop::option::of(json_text())), 1..4)
    ) {
        // Schemas are objects: each body becomes the value of a property.
        let schemas: Vec<(String, Option<String>)> = bodies
            .into_iter()
            .map(|(i, r)| (format!(r#"{{"type":"object","x":{i},"type":"again"}}"#), r.map(|r| format!("{{ \"r\" : {r} }}"))))
            .collect();
        let text = manifest(&schemas);
        let decoded = Manifest::from_json(text.as_bytes())
            .ok()
            .and_then(|m| m.compute_hash().ok());
        let fast = Manifest::hash_of_json(text.as_bytes());
        prop_assert!(decoded.is_some(), "the generated manifest decodes: {}", text);
        prop_assert_eq!(&fast, &decoded, "{}", text);
    }
}
