//! Golden files in `testdata/`: one test per file, so adding a case is adding a file.
//!
//! The expected bytes are what Go's `encoding/json` writes; `testdata/go` (the Go cross-check)
//! recomputes every one of them with Go and fails on any difference. To write the expected files
//! for a new case, run with `TRIGGERS_BLESS=1`, then run the Go cross-check before committing.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use rstest::rstest;
use serde::Deserialize;
use serde_json::Value;
use triggers_sdk::wire::durable_timer::TimerContext;
use triggers_sdk::wire::json;
use triggers_sdk::wire::{
    CompletionEvent, DlqEntry, Envelope, FlowEnvelope, GoTime, Headers, Heartbeat, Manifest,
    RegisterReply,
};

fn blessing() -> bool {
    std::env::var_os("TRIGGERS_BLESS").is_some()
}

/// Compares `actual` with the file, or writes the file when blessing.
fn golden(path: &Path, actual: &[u8]) {
    if blessing() {
        fs::write(path, actual).unwrap();
        return;
    }
    let expected = fs::read(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with TRIGGERS_BLESS=1 to write it, then check it with the Go cross-check",
            path.display()
        )
    });
    assert!(
        expected == actual,
        "{} differs\nexpected: {}\n  actual: {}",
        path.display(),
        String::from_utf8_lossy(&expected),
        String::from_utf8_lossy(actual)
    );
}

#[rstest]
fn manifest_hash_cases(#[files("../testdata/manifests/*/manifest.json")] path: PathBuf) {
    let dir = path.parent().unwrap();
    let bytes = fs::read(&path).unwrap();
    let manifest = Manifest::from_json(&bytes).unwrap();
    let canonical = manifest.hash_input().unwrap();
    golden(&dir.join("canonical.json"), &canonical);
    let hash = manifest.compute_hash().unwrap();
    golden(&dir.join("hash.txt"), format!("{hash}\n").as_bytes());
    // The CLI's path, from the text: the same hash.
    assert_eq!(Manifest::hash_of_json(&bytes), Some(hash.clone()));
    // The whole manifest re-encodes and decodes to the same value (catalog fields included).
    let again = Manifest::from_json(&manifest.to_json().unwrap()).unwrap();
    assert_eq!(again.compute_hash().unwrap(), hash);
}

#[test]
fn catalog_fields_never_change_the_hash() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/manifests");
    for case in [
        "024_every_catalog_field",
        "042_result_event_excluded",
        "026_lookup_catalog_excluded",
    ] {
        let full =
            Manifest::from_json(&fs::read(root.join(case).join("manifest.json")).unwrap()).unwrap();
        let mut bare = full.clone();
        bare.display_name.clear();
        bare.description.clear();
        bare.owner.clear();
        bare.tags.clear();
        for a in &mut bare.actions {
            a.display_name.clear();
            a.description.clear();
            a.version.clear();
            a.lifecycle.clear();
            a.action_env = None;
            a.result_event = None;
            a.compatibility = None;
        }
        for l in &mut bare.runtime_lookups {
            l.display_name.clear();
            l.description.clear();
        }
        assert_ne!(full, bare, "{case} sets catalog fields");
        assert_eq!(
            full.compute_hash().unwrap(),
            bare.compute_hash().unwrap(),
            "{case}"
        );
    }
}

#[derive(Deserialize)]
struct LookupGolden {
    manifest: Value,
    hash_input: String,
    manifest_hash: String,
}

#[test]
fn lookup_v1_golden() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/lookup_v1_golden.json");
    let text = fs::read_to_string(&path).unwrap();
    let golden: LookupGolden = serde_json::from_str(&text).unwrap();
    let manifest = Manifest::from_json(golden.manifest.to_string().as_bytes()).unwrap();
    if blessing() {
        let canonical = String::from_utf8(manifest.hash_input().unwrap()).unwrap();
        let blessed = text
            .replace(
                &format!(
                    "\"hash_input\": {}",
                    serde_json::to_string(&golden.hash_input).unwrap()
                ),
                &format!(
                    "\"hash_input\": {}",
                    serde_json::to_string(&canonical).unwrap()
                ),
            )
            .replace(
                &format!("\"manifest_hash\": {:?}", golden.manifest_hash),
                &format!("\"manifest_hash\": {:?}", manifest.compute_hash().unwrap()),
            );
        fs::write(&path, blessed).unwrap();
        return;
    }
    assert_eq!(
        String::from_utf8(manifest.hash_input().unwrap()).unwrap(),
        golden.hash_input
    );
    assert_eq!(manifest.compute_hash().unwrap(), golden.manifest_hash);
    assert!(golden.hash_input.contains(r#""params":null"#));
    assert!(!golden.hash_input.contains("display_name"));
}

/// Decodes a shape golden by its file name and re-encodes it: the bytes must not move.
fn reencode(name: &str, bytes: &[u8]) -> Vec<u8> {
    fn again<T: serde::de::DeserializeOwned + serde::Serialize>(bytes: &[u8]) -> Vec<u8> {
        let value: T = triggers_sdk::wire::decode::from_slice("golden", bytes).unwrap();
        json::to_vec(&value).unwrap()
    }
    type Reencode = fn(&[u8]) -> Vec<u8>;
    let prefixes: [(&str, Reencode); 9] = [
        ("heartbeat", again::<Heartbeat>),
        ("completion_event", again::<CompletionEvent>),
        ("dlq_entry", again::<DlqEntry>),
        ("register_reply", again::<RegisterReply>),
        ("flow_envelope", again::<FlowEnvelope>),
        ("envelope", again::<Envelope>),
        ("manifest", again::<Manifest>),
        ("durable_timer_root", |b| {
            TimerContext::parse(std::str::from_utf8(b).unwrap())
                .unwrap()
                .to_header_value()
                .into_bytes()
        }),
        ("durable_timer_elapsed", |b| {
            TimerContext::parse(std::str::from_utf8(b).unwrap())
                .unwrap()
                .to_header_value()
                .into_bytes()
        }),
    ];
    let (_, f) = prefixes
        .iter()
        .filter(|(p, _)| name.starts_with(p))
        .max_by_key(|(p, _)| p.len())
        .unwrap_or_else(|| panic!("no shape for {name}"));
    f(bytes)
}

#[rstest]
fn shape_goldens_round_trip(#[files("../testdata/shapes/*.json")] path: PathBuf) {
    let bytes = fs::read(&path).unwrap();
    let name = path.file_name().unwrap().to_str().unwrap();
    let again = reencode(name, &bytes);
    assert_eq!(
        String::from_utf8(again).unwrap(),
        String::from_utf8(bytes).unwrap(),
        "{name}"
    );
}

#[derive(Deserialize, serde::Serialize)]
struct TimeCase {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unix_ns: Option<i128>,
    #[serde(default)]
    expected: String,
}

#[test]
fn time_cases() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/time/cases.json");
    let mut cases: Vec<TimeCase> = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    for case in &mut cases {
        let t = match (&case.input, case.unix_ns) {
            (Some(text), None) => GoTime::parse(text).unwrap(),
            (None, Some(ns)) => GoTime::from_unix_nanos(ns).unwrap(),
            _ => panic!("a case has input or unix_ns"),
        };
        let text = t.to_string();
        if blessing() {
            case.expected = text;
        } else {
            assert_eq!(text, case.expected, "{:?} {:?}", case.input, case.unix_ns);
            // Reading Go's text back gives the same instant.
            assert_eq!(GoTime::parse(&text).unwrap(), t);
        }
    }
    if blessing() {
        let mut text = serde_json::to_string_pretty(&cases).unwrap();
        text.push('\n');
        fs::write(&path, text).unwrap();
    }
}

#[derive(Deserialize)]
struct HeaderCase {
    headers: Vec<(String, String)>,
    envelope: Box<serde_json::value::RawValue>,
    /// Whether `headers` is exactly what the SDK writes (canonical names, in order).
    #[serde(default)]
    canonical: bool,
}

#[rstest]
fn header_round_trips(#[files("../testdata/headers/*.json")] path: PathBuf) {
    let case: HeaderCase = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    let headers: Headers = case.headers.iter().cloned().collect();
    let from_headers = Envelope::from_headers(&headers).unwrap();
    let envelope = Envelope::from_json(case.envelope.get().as_bytes()).unwrap();
    assert_eq!(from_headers, envelope, "{}", path.display());
    assert_eq!(
        String::from_utf8(envelope.to_json().unwrap()).unwrap(),
        case.envelope.get(),
        "the envelope object is Go's bytes"
    );
    if case.canonical {
        let written: Vec<(String, String)> = envelope.to_headers().into_iter().collect();
        assert_eq!(written, case.headers, "{}", path.display());
    }
}

/// Which Rust types must normalise to which schema golden. Several types map to one file: the
/// same shape gives the same bytes whatever the names, doc comments and integer widths.
mod schemas {
    #![expect(
        dead_code,
        reason = "the types exist for their schemas; no value is made"
    )]
    use std::collections::HashMap;

    use schemars::JsonSchema;

    #[derive(JsonSchema)]
    pub(crate) struct SendInput {
        pub(crate) tenant_id: String,
        pub(crate) count: u32,
        pub(crate) note: Option<String>,
    }

    /// A doc comment that must not reach the hash.
    #[derive(JsonSchema)]
    #[schemars(title = "Entirely Different")]
    pub(crate) struct OtherName {
        /// Field docs do not matter either.
        pub(crate) tenant_id: String,
        pub(crate) count: i64,
        pub(crate) note: Option<String>,
    }

    #[derive(JsonSchema)]
    pub(crate) struct Address {
        pub(crate) city: String,
        pub(crate) zip: Option<u16>,
    }

    #[derive(JsonSchema)]
    pub(crate) struct Customer {
        pub(crate) name: String,
        pub(crate) address: Address,
        pub(crate) previous: Vec<Address>,
        pub(crate) billing: Option<Address>,
    }

    #[derive(JsonSchema)]
    pub(crate) struct Location {
        pub(crate) city: String,
        pub(crate) zip: Option<i32>,
    }

    /// Same shape as `Customer`, differently named types all the way down.
    #[derive(JsonSchema)]
    pub(crate) struct Client {
        pub(crate) name: String,
        pub(crate) address: Location,
        pub(crate) previous: Vec<Location>,
        pub(crate) billing: Option<Location>,
    }

    #[derive(JsonSchema)]
    #[serde(rename_all = "snake_case")]
    pub(crate) enum Channel {
        Email,
        Sms,
        InApp,
    }

    #[derive(JsonSchema)]
    pub(crate) struct Notify {
        pub(crate) channel: Channel,
        pub(crate) labels: HashMap<String, String>,
        pub(crate) scores: Vec<f64>,
        pub(crate) urgent: bool,
    }

    #[derive(JsonSchema)]
    pub(crate) struct Delivered {
        pub(crate) delivered: bool,
    }

    #[derive(JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct Strict {
        pub(crate) id: String,
    }

    #[derive(JsonSchema)]
    pub(crate) struct Renamed {
        #[serde(rename = "tenantId")]
        pub(crate) tenant_id: String,
        #[serde(default)]
        pub(crate) retries: u8,
    }
}

fn schema_goldens() -> BTreeMap<&'static str, Vec<(&'static str, Value)>> {
    use schemas::*;
    use triggers_sdk::wire::schema::schema_for;
    let s = |m: serde_json::Map<String, Value>| Value::Object(m);
    let mut cases: BTreeMap<&'static str, Vec<(&'static str, Value)>> = BTreeMap::new();
    let mut add = |file: &'static str, ty: &'static str, v: Value| {
        cases.entry(file).or_default().push((ty, v));
    };
    add(
        "flat_object",
        "SendInput",
        s(schema_for::<SendInput>().unwrap()),
    );
    add(
        "flat_object",
        "OtherName",
        s(schema_for::<OtherName>().unwrap()),
    );
    add(
        "nested_inlined",
        "Customer",
        s(schema_for::<Customer>().unwrap()),
    );
    add(
        "nested_inlined",
        "Client",
        s(schema_for::<Client>().unwrap()),
    );
    add(
        "enum_map_list",
        "Notify",
        s(schema_for::<Notify>().unwrap()),
    );
    add(
        "boolean_result",
        "Delivered",
        s(schema_for::<Delivered>().unwrap()),
    );
    add(
        "no_additional_properties",
        "Strict",
        s(schema_for::<Strict>().unwrap()),
    );
    add(
        "renamed_and_default",
        "Renamed",
        s(schema_for::<Renamed>().unwrap()),
    );
    add("unit", "()", s(schema_for::<()>().unwrap()));
    add(
        "any_json",
        "serde_json::Value",
        s(schema_for::<Value>().unwrap()),
    );
    cases
}

#[test]
fn schema_normalisation_goldens() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/schemas");
    fs::create_dir_all(&dir).unwrap();
    for (file, types) in schema_goldens() {
        let path = dir.join(format!("{file}.json"));
        let first = json::to_vec(&json::GoAny(&types[0].1)).unwrap();
        for (ty, value) in &types {
            let bytes = json::to_vec(&json::GoAny(value)).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&bytes),
                String::from_utf8_lossy(&first),
                "{ty} and {} must normalise to the same bytes",
                types[0].0
            );
        }
        golden(&path, &first);
    }
}
