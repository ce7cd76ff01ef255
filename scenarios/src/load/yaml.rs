//! Parsing YAML (or JSON, which is YAML) text into the file format: YAML 1.2 booleans, unknown
//! and duplicate keys refused, bounded, and the parser's messages put in the file writer's words
//! at file:line:column.

use crate::error::LoadError;

/// The most YAML nodes a file may hold: room for the largest flow release accepts (20 000
/// nodes, 40 000 edges: about 700 000 YAML nodes); still a bound.
const YAML_MAX_NODES: usize = 2_000_000;
/// The most parser events a file may produce.
const YAML_MAX_EVENTS: usize = 4_000_000;
/// The most text a file's values (scalars) may hold in all: 64 MiB, the parser's own default,
/// named here so that a refusal can say it.
const YAML_MAX_SCALAR_BYTES: usize = 64 * 1024 * 1024;

/// YAML options: YAML 1.2 booleans only (`yes` is a string), duplicate keys refused.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        duplicate_keys: serde_saphyr::options::DuplicateKeyPolicy::Error,
        budget: serde_saphyr::budget! {
            max_nodes: YAML_MAX_NODES,
            max_events: YAML_MAX_EVENTS,
            max_total_scalar_bytes: YAML_MAX_SCALAR_BYTES,
        },
    }
}

/// Parses YAML (or JSON, which is YAML) text, errors as `name:line:col: message`.
pub(crate) fn parse_yaml<T: serde::de::DeserializeOwned>(
    name: &str,
    text: &str,
) -> Result<T, LoadError> {
    // The path names the key a value belongs to (`steps[2].timeout`): the parser's own message
    // does not, and "is negative" alone would not say which of a step's durations is.
    let mut path = String::new();
    serde_saphyr::with_deserializer_from_str_with_options(text, yaml_options(), |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = key_path(&e.path().to_string());
            e.into_inner()
        })
    })
    .map_err(|e| {
        let mut message = crate::flowfile::suggest_in_message(&plain_words(&strip_position(
            &e.without_snippet().to_string(),
        )));
        if message.starts_with("non-finite float") {
            message.push_str(": write a finite number (or a duration such as 10s)");
        }
        let message = if path.is_empty() {
            message
        } else {
            format!("{}: {message}", clip_path(&path))
        };
        // The parser's words on a structure error name no line that is out of place: find it.
        if crate::indent::is_structure_error(&message)
            && let Some(m) = e
                .location()
                .and_then(|l| crate::indent::misplaced(text, l.line()))
        {
            return LoadError::at(
                name,
                m.line,
                m.column,
                format!("{} (the YAML parser: {message})", m.message),
            );
        }
        match e.location() {
            Some(l) => LoadError::at(name, l.line(), l.column(), message),
            None => LoadError::file(name, message),
        }
    })
}

/// Parses a file users write (a flow, a payload) as YAML, or JSON, which is YAML; errors as
/// `name:line:col: message`, a JSON-looking text's syntax error in JSON's own words and place
/// (`not JSON: key must be a string`), not YAML's.
///
/// # Errors
/// The first problem, at its line and column.
pub fn parse_document<T: serde::de::DeserializeOwned>(
    name: &str,
    text: &str,
) -> Result<T, LoadError> {
    parse_yaml(name, text).map_err(|e| crate::flowfile::json_error(name, text).unwrap_or(e))
}

/// A serde path as the file's keys: without the root's `.`, and without the `value` of the
/// position-keeping wrapper around list items (`steps[0].value.sleep` is `steps[0].sleep`).
fn key_path(path: &str) -> String {
    // `?`: the parser stopped before any key (a syntax error), so there is no path to name.
    if path == "." || path == "?" {
        return String::new();
    }
    // `services[0].?`: the parser stopped before it knew the key.
    path.trim_end_matches(".?").replace("].value", "]")
}

/// The YAML parser's messages that speak to a programmer using it (`set DuplicateKeyPolicy in
/// Options`, `use Option<String>`, `Depth { depth: 65 }`), in the words of the file's writer.
fn plain_words(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("duplicate mapping key: ") {
        let key = rest
            .split(", set DuplicateKeyPolicy")
            .next()
            .unwrap_or(rest);
        return format!("duplicate key `{key}`: a key may be given once in a mapping");
    }
    if message.starts_with("multiple YAML documents detected") {
        return "more than one YAML document (a `---` line after the first): a file holds one"
            .into();
    }
    if let Some(rest) = message.strip_prefix("cannot deserialize null into ") {
        let what = rest.split("; use Option<").next().unwrap_or(rest);
        return format!("empty (null) where a {what} is needed: write a value");
    }
    if let Some(rest) = message.strip_prefix("budget breached: ") {
        let number = |field: &str| {
            rest.split_once(field)
                .and_then(|(_, n)| n.trim_start_matches(": ").split(' ').next())
                .and_then(|n| n.parse::<u64>().ok())
        };
        if let Some(depth) = number("depth") {
            return format!(
                "nested too deeply ({depth} levels): a file may nest at most {} levels",
                depth.saturating_sub(1)
            );
        }
        // Each bound in its own words: a file of five nodes holding one huge value is not
        // "over 2000000 YAML nodes".
        if rest.starts_with("ScalarBytes") {
            return format!(
                "the file's values hold more than {} MiB of text in all (one long string, or \
                 many): a scenario or flow needs far less; move the data out of the file",
                YAML_MAX_SCALAR_BYTES >> 20
            );
        }
        if rest.starts_with("Nodes") {
            return format!(
                "the file holds more than {YAML_MAX_NODES} YAML nodes (values, lists and \
                 mappings): split it"
            );
        }
        if rest.starts_with("Events") {
            return format!(
                "the file is too large to read (more than {YAML_MAX_EVENTS} YAML parser events): \
                 split it"
            );
        }
        return format!("the file is too large to read ({rest}): split it");
    }
    message.to_owned()
}

/// A key path cut to a readable length (a deeply nested value's path runs to hundreds of keys).
fn clip_path(path: &str) -> String {
    const KEEP: usize = 80;
    match path.char_indices().nth(KEEP) {
        Some((at, _)) => format!("{}…", &path[..at]),
        None => path.to_owned(),
    }
}

pub(crate) fn strip_position(message: &str) -> String {
    // The parser appends the position in words; the error puts it in front as file:line:col.
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}
