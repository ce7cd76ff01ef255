//! Reading a flow file (YAML, or JSON, which is YAML) the one way `triggers-lab deploy` and a
//! scenario's `flows: [{file: ...}]` both use: unknown keys refused with a "did you mean", every
//! problem of the file reported (not only the first), each at its line and column.

use serde_json::{Map, Value};
use triggers_sdk::flow::Flow;

use crate::error::LoadError;
use crate::load::{parse_document, parse_yaml};

/// The keys a flow, a node and an edge may have.
const FLOW_KEYS: &[&str] = &["id", "version", "nodes", "edges"];
const NODE_KEYS: &[&str] = &["id", "type", "service", "action", "config", "inbound"];
const EDGE_KEYS: &[&str] = &["id", "from", "to", "mapping"];

/// Reads a flow from `text`; `name` names the file in errors.
///
/// # Errors
/// Every problem found, each with file, line and column where one applies.
pub fn read_flow(name: &str, text: &str) -> Result<(Flow, Value), Vec<LoadError>> {
    let value = read_flow_value(name, text)?;
    let flow: Flow = serde_path_to_error::deserialize(value.clone()).map_err(|e| {
        // Read from the text again, the parser knows where it stopped: the value that is wrong
        // (a node's `type: bogus`), not only the key above it.
        if let Err(located) = parse_yaml::<Flow>(name, text)
            && located.line > 0
        {
            let (line, column) = back_to_value(text, &located);
            return vec![LoadError {
                line,
                column,
                message: format!("not a flow: {}", located.message),
                ..located
            }];
        }
        let path = e.path().to_string();
        let message = format!(
            "not a flow: {}{}",
            suggest_in_message(&e.inner().to_string()),
            if path == "." {
                String::new()
            } else {
                format!(" (at {path})")
            }
        );
        // The key the path ends at, found in the text: near enough to the value that is wrong.
        let key = path
            .rsplit('.')
            .next()
            .map(|k| k.split('[').next().unwrap_or(k))
            .unwrap_or_default();
        vec![match find_key(text, key) {
            Some((line, column)) => LoadError::at(name, line, column, message),
            None => LoadError::file(name, message),
        }]
    })?;
    if flow.version < 1 {
        let message = format!(
            "flow {:?}: version: is {}, must be 1 or more (leave it out for 1; a redeploy gets the next)",
            flow.id, flow.version
        );
        return Err(vec![match find_key(text, "version") {
            Some((line, column)) => LoadError::at(name, line, column, message),
            None => LoadError::file(name, message),
        }]);
    }
    Ok((flow, value))
}

/// The flow's text parsed and its keys checked, not yet read as a flow (a scenario's flow may
/// hold `${...}` that only make sense once replaced).
pub(crate) fn read_flow_value(name: &str, text: &str) -> Result<Value, Vec<LoadError>> {
    let mut value: Value = parse_document(name, text).map_err(|e| vec![e])?;
    let mut problems = key_problems(&value);
    problems.extend(timer_delays(&mut value));
    if !problems.is_empty() {
        return Err(problems
            .into_iter()
            .map(|(key, message)| match find_key(text, &key) {
                Some((line, column)) => LoadError::at(name, line, column, message),
                None => LoadError::file(name, message),
            })
            .collect());
    }
    Ok(value)
}

/// Where the value an error names (the first `word` in backticks of its message: `bogus` in
/// "unknown variant `bogus`", `3` in "invalid type: integer `3`") is last written at or before
/// the error's place; the error's place when it is not found. A node is read whole before its
/// `type` decides what it is, so the parser's place is the end of the node, lines below the
/// value that is wrong.
fn back_to_value(text: &str, error: &LoadError) -> (u64, u64) {
    let here = (error.line, error.column);
    let Some(word) = error.message.split('`').nth(1).filter(|w| !w.is_empty()) else {
        return here;
    };
    let is_word = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '.');
    let lines: Vec<&str> = text.lines().collect();
    let last = usize::try_from(error.line)
        .unwrap_or(usize::MAX)
        .min(lines.len());
    for (i, line) in lines[..last].iter().enumerate().rev() {
        // On the error's own line, only what comes before its column.
        let line = if i + 1 == last && u64::try_from(i + 1) == Ok(error.line) {
            let end = line
                .char_indices()
                .nth(usize::try_from(error.column.saturating_sub(1)).unwrap_or(usize::MAX))
                .map_or(line.len(), |(at, _)| at);
            &line[..end]
        } else {
            line
        };
        let found = line.rmatch_indices(word).find(|(at, _)| {
            let before = line[..*at].chars().next_back();
            let after = line[at + word.len()..].chars().next();
            !before.is_some_and(is_word) && !after.is_some_and(is_word)
        });
        if let Some((at, _)) = found {
            return (i as u64 + 1, line[..at].chars().count() as u64 + 1);
        }
    }
    here
}

/// For a flow written as JSON (a `.json` file, or text that opens with `{` or `[`) that the
/// YAML reader refused: the JSON reader's error, when it refuses it too. JSON is YAML, but a
/// mistake in JSON (`,,`, a missing quote) reads to the YAML reader as something else ("an
/// implicit flow mapping"), at another place; a YAML-only refusal (a repeated key) stays its own.
pub(crate) fn json_error(name: &str, text: &str) -> Option<LoadError> {
    let looks_json = name.ends_with(".json") || text.trim_start().starts_with(['{', '[']);
    if !looks_json {
        return None;
    }
    let e = serde_json::from_str::<serde::de::IgnoredAny>(text).err()?;
    // serde_json says the place in words at the end: it goes in front, as file:line:column.
    let message = crate::load::strip_position(&e.to_string());
    Some(LoadError::at(
        name,
        e.line() as u64,
        e.column().max(1) as u64,
        format!("not JSON: {message}"),
    ))
}

/// A timer's `delay_ms` written as a duration (`1h`, `30s`, `1d`, as every other duration of a
/// scenario is) made the milliseconds the flow carries on the wire; a number stays as it is.
/// What is wrong: (the key, the message).
pub(crate) fn timer_delays(flow: &mut Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let nodes = flow
        .get_mut("nodes")
        .and_then(Value::as_array_mut)
        .map(|n| n.iter_mut())
        .into_iter()
        .flatten();
    for node in nodes {
        if node.get("type").and_then(Value::as_str) != Some("timer") {
            continue;
        }
        let id = node
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        let Some(delay) = node.get_mut("config").and_then(|c| c.get_mut("delay_ms")) else {
            continue;
        };
        let Some(text) = delay.as_str() else { continue };
        // A `${vars.…}` is replaced when the scenario runs; a number in quotes is read as the
        // flow reads numbers.
        if text.contains("${") || text.trim().parse::<f64>().is_ok() {
            continue;
        }
        match crate::model::Dur::parse(text) {
            Ok(d) if d.0.subsec_nanos() % 1_000_000 == 0 => {
                let ms = u64::try_from(d.0.as_millis()).unwrap_or(u64::MAX);
                *delay = Value::from(ms);
            }
            Ok(_) => out.push((
                "delay_ms".to_owned(),
                format!("node {id}: config.delay_ms: {text:?} is finer than a millisecond"),
            )),
            Err(e) => out.push((
                "delay_ms".to_owned(),
                format!(
                    "node {id}: config.delay_ms: {e} (or a number of milliseconds, e.g. 3600000)"
                ),
            )),
        }
    }
    out
}

/// Every unknown key of a flow, its nodes and its edges: (the key, the message).
pub(crate) fn key_problems(flow: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut only = |at: &str, map: &Map<String, Value>, keys: &[&str]| {
        for k in map.keys().filter(|k| !keys.contains(&k.as_str())) {
            out.push((
                k.clone(),
                format!(
                    "{at}: unknown key `{k}`{}, expected one of {}",
                    did_you_mean(k, keys)
                        .map(|s| format!(" (did you mean `{s}`?)"))
                        .unwrap_or_default(),
                    keys.join(", ")
                ),
            ));
        }
    };
    let Some(map) = flow.as_object() else {
        return vec![(String::new(), "a flow must be a map".into())];
    };
    only("flow", map, FLOW_KEYS);
    let list = |key: &str| {
        map.get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    for (i, n) in list("nodes").iter().enumerate() {
        if let Some(n) = n.as_object() {
            let id = n.get("id").and_then(Value::as_str).unwrap_or("?");
            only(&format!("nodes[{i}] ({id})"), n, NODE_KEYS);
        }
    }
    for (i, e) in list("edges").iter().enumerate() {
        if let Some(e) = e.as_object() {
            let id = e.get("id").and_then(Value::as_str).unwrap_or("?");
            only(&format!("edges[{i}] ({id})"), e, EDGE_KEYS);
        }
    }
    out
}

/// The 1-based line and column where `key` is first written as a key (`key:` in YAML,
/// `"key":` in JSON).
fn find_key(text: &str, key: &str) -> Option<(u64, u64)> {
    if key.is_empty() {
        return None;
    }
    for (i, line) in text.lines().enumerate() {
        for candidate in [format!("\"{key}\""), format!("'{key}'"), key.to_owned()] {
            let mut from = 0;
            while let Some(at) = line[from..].find(&candidate) {
                let start = from + at;
                let end = start + candidate.len();
                let before_ok = line[..start]
                    .chars()
                    .next_back()
                    .is_none_or(|c| matches!(c, ' ' | '\t' | '{' | ',' | '-'));
                let after_ok = line[end..].trim_start().starts_with(':');
                if before_ok && after_ok {
                    return Some((i as u64 + 1, line[..start].chars().count() as u64 + 1));
                }
                from = end;
            }
        }
    }
    None
}

/// The candidate closest to `word`, if one is close enough to be a typo of it.
#[must_use]
pub fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (distance(&word, &c.to_ascii_lowercase()), *c))
        .filter(|(d, c)| *d <= c.len().div_ceil(3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (prev + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// A serde message about an unknown field or variant (`unknown variant `wait_for_it`, expected
/// one of `a`, `b``) in plainer words, with the closest expected name when one is close.
#[must_use]
pub fn suggest_in_message(message: &str) -> String {
    let (what, rest) = if let Some(rest) = message.strip_prefix("unknown variant `") {
        ("unknown step or value", rest)
    } else if let Some(rest) = message.strip_prefix("unknown field `") {
        ("unknown key", rest)
    } else {
        return message.to_owned();
    };
    let Some((word, expected)) = rest.split_once('`') else {
        return message.to_owned();
    };
    let mut names: Vec<&str> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() {
        // The YAML parser lists them without quotes: `, expected one of a, b, c`.
        let Some(list) = expected
            .strip_prefix(", expected one of ")
            .or_else(|| expected.strip_prefix(", expected "))
        else {
            return message.to_owned();
        };
        names = list
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect();
    }
    if names.is_empty() {
        return message.to_owned();
    }
    let hint = did_you_mean(word, &names)
        .map(|s| format!(": did you mean `{s}`?"))
        .unwrap_or_default();
    format!(
        "{what} `{word}`{hint} (expected one of {})",
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_as_large_as_release_accepts_is_read() {
        // 20 000 nodes and 19 999 edges, the flow the docs promise is released in milliseconds:
        // more YAML nodes than the parser's default budget of 250 000.
        let mut nodes = vec![serde_json::json!({"id": "in", "type": "service-in", "service": "s"})];
        let mut edges = Vec::new();
        for i in 1..20_000 {
            nodes.push(serde_json::json!({
                "id": format!("n{i}"), "type": "action", "service": "s", "action": "a",
                "config": {"note": "x"}
            }));
            let from = if i == 1 {
                "in".to_owned()
            } else {
                format!("n{}", i - 1)
            };
            edges.push(
                serde_json::json!({"id": format!("e{i}"), "from": from, "to": format!("n{i}")}),
            );
        }
        let text = serde_json::json!({"id": "big", "nodes": nodes, "edges": edges}).to_string();
        let (flow, _) = read_flow("big.json", &text).unwrap();
        assert_eq!(flow.body.nodes.len(), 20_000);
    }

    #[test]
    fn every_misspelt_key_is_reported_at_its_line_with_a_suggestion() {
        let text = "id: f\nnodse: []\nedges:\n  - {id: e1, form: a, to: b}\n";
        let errors = read_flow("f.yaml", text).unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert_eq!((errors[0].line, errors[0].column), (2, 1), "{}", errors[0]);
        assert!(
            errors[0].message.contains("did you mean `nodes`?"),
            "{}",
            errors[0]
        );
        assert_eq!((errors[1].line, errors[1].column), (4, 14), "{}", errors[1]);
        assert!(
            errors[1].message.contains("did you mean `from`?"),
            "{}",
            errors[1]
        );
    }

    #[test]
    fn json_flows_are_read_and_checked_the_same() {
        let text = "{\n  \"id\": \"f\",\n  \"nodes\": [],\n  \"edgez\": []\n}";
        let errors = read_flow("f.json", text).unwrap_err();
        assert_eq!((errors[0].line, errors[0].column), (4, 3), "{}", errors[0]);
        let (flow, _) =
            read_flow("f.json", "{\"id\": \"f\", \"nodes\": [], \"edges\": []}").unwrap();
        assert_eq!(flow.version, 1);
    }

    /// Found by an audit: these were reported without a place, or at the wrong one.
    #[test]
    fn a_wrong_value_a_json_mistake_and_a_repeated_key_are_reported_where_they_are() {
        let at = |name: &str, text: &str| {
            let e = read_flow(name, text).unwrap_err();
            assert_eq!(e.len(), 1, "{e:?}");
            (e[0].line, e[0].column, e[0].message.clone())
        };
        // A node read whole before its type decides what it is: the value, not the node's end.
        let (line, column, message) = at(
            "f.yaml",
            "id: order\nnodes:\n  - {id: in, type: bogus, service: shop}\nedges: []\n",
        );
        assert_eq!((line, column), (3, 20), "{message}");
        assert!(
            message.contains("unknown step or value `bogus`"),
            "{message}"
        );
        let (line, column, message) = at(
            "f.yaml",
            "id: order\nnodes:\n  - id: in\n    type: service-in\n    service: 3\nedges: []\n",
        );
        assert_eq!((line, column), (5, 14), "{message}");
        // A JSON mistake in JSON's words, at its place: not "an implicit flow mapping".
        let (line, column, message) = at("f.json", r#"{"id": "order",, "nodes": []}"#);
        assert_eq!((line, column), (1, 16), "{message}");
        assert_eq!(message, "not JSON: key must be a string");
        let (line, _, message) = at("f", "{\"id\": \"order\",\n \"nodes\": [}\n");
        assert_eq!(line, 2, "{message}");
        assert!(message.starts_with("not JSON: "), "{message}");
        // JSON the JSON reader takes but YAML's refuses (a repeated key) keeps YAML's reason.
        let (_, _, message) = at(
            "f.json",
            r#"{"id": "a", "id": "b", "nodes": [], "edges": []}"#,
        );
        assert!(message.contains("duplicate"), "{message}");
    }

    #[test]
    fn serde_jargon_becomes_a_suggestion() {
        let m = suggest_in_message(
            "unknown variant `wait_for_it`, expected one of `sleep`, `wait_for`",
        );
        assert!(m.contains("did you mean `wait_for`?"), "{m}");
        assert!(!m.contains("variant"), "{m}");
        assert_eq!(did_you_mean("zzzz", &["sleep"]), None);
    }

    /// A timer's delay is written like every other duration (`1h`), or in milliseconds; the
    /// flow carries milliseconds either way.
    #[test]
    fn a_timer_delay_is_a_duration_or_milliseconds() {
        let flow = |delay: &str| {
            format!(
                "id: f\nnodes:\n  - {{id: in, type: service-in, service: s}}\n  - {{id: wait, type: timer, config: {{delay_ms: {delay}}}}}\nedges:\n  - {{id: e1, from: in, to: wait}}\n"
            )
        };
        for (written, ms) in [
            ("1h", 3_600_000u64),
            ("3600000", 3_600_000),
            ("1m30s", 90_000),
        ] {
            let (_, value) = read_flow("f.yaml", &flow(written)).unwrap();
            assert_eq!(
                value["nodes"][1]["config"]["delay_ms"],
                serde_json::json!(ms),
                "{written}"
            );
        }
        let e = read_flow("f.yaml", &flow("soon")).unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].line, 4, "{e:?}");
        assert!(
            e[0].message
                .contains("node wait: config.delay_ms: \"soon\" is not a duration"),
            "{}",
            e[0].message
        );
    }
}
