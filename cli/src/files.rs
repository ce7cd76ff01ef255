//! Reading the files users write: flows (and payloads) as JSON or YAML, with errors that say
//! file, line and column.

use std::path::Path;

use serde::de::DeserializeOwned;

/// A file that could not be read or parsed: the message already names the file and position.
#[derive(Debug)]
pub(crate) struct FileError(pub(crate) String);

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FileError {}

/// YAML options: YAML 1.2 booleans only (`yes` is a string), duplicate keys refused.
pub(crate) fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        duplicate_keys: serde_saphyr::options::DuplicateKeyPolicy::Error,
        // Room for the largest flow release accepts (20 000 nodes, 40 000 edges: about 700 000
        // YAML nodes); still a bound.
        budget: serde_saphyr::budget! {
            max_nodes: 2_000_000,
            max_events: 4_000_000,
        },
    }
}

/// Parses text as JSON when it looks like JSON (or the name ends in .json), else as YAML.
pub(crate) fn parse_text<T: DeserializeOwned>(name: &str, text: &str) -> Result<T, FileError> {
    let looks_json = name.ends_with(".json") || text.trim_start().starts_with(['{', '[']);
    if looks_json {
        let mut de = serde_json::Deserializer::from_str(text);
        return serde_path_to_error::deserialize(&mut de)
            .map_err(|e| {
                let inner = e.inner();
                let path = e.path().to_string();
                let at = if path == "." {
                    String::new()
                } else {
                    format!(" at {path}")
                };
                FileError(format!(
                    "{name}:{}:{}: {}{at}",
                    inner.line(),
                    inner.column().max(1),
                    triggers_scenarios::suggest_in_message(&strip_position(&inner.to_string()))
                ))
            })
            .and_then(|v| {
                de.end().map_err(|e| {
                    FileError(format!("{name}:{}:{}: {e}", e.line(), e.column().max(1)))
                })?;
                Ok(v)
            });
    }
    serde_saphyr::from_str_with_options(text, yaml_options()).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!("{name}:{}:{}", l.line(), l.column()))
            .unwrap_or_else(|| name.to_owned());
        FileError(format!(
            "{at}: {}",
            triggers_scenarios::suggest_in_message(&strip_position(
                &e.without_snippet().to_string()
            ))
        ))
    })
}

/// Reads and parses a file (`-` is standard input).
pub(crate) fn read<T: DeserializeOwned>(path: &Path) -> Result<T, FileError> {
    let (name, text) = read_text(path)?;
    parse_text(&name, &text)
}

/// A file's name (as errors should show it) and text (`-` is standard input).
pub(crate) fn read_text(path: &Path) -> Result<(String, String), FileError> {
    Ok(if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
            .map_err(|e| FileError(format!("<stdin>: cannot read: {e}")))?;
        let text = triggers_scenarios::utf8_text("<stdin>", bytes)
            .map_err(|e| FileError(e.to_string()))?;
        ("<stdin>".to_owned(), text)
    } else {
        let text =
            triggers_scenarios::read_text_file(path).map_err(|e| FileError(e.to_string()))?;
        (path.display().to_string(), text)
    })
}

fn strip_position(message: &str) -> String {
    // Both parsers append the position in words; the caller puts it in front as file:line:col.
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_and_json_errors_say_where() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct T {
            a: u32,
        }
        let e = parse_text::<T>("f.yaml", "a: 1\na: 2\n").unwrap_err();
        assert!(e.0.starts_with("f.yaml:2:"), "{e}");
        let e = parse_text::<T>("f.yaml", "a: yes\n").unwrap_err();
        assert!(e.0.starts_with("f.yaml:1:"), "{e}");
        let e = parse_text::<T>("f.json", "{\n \"a\": \"x\"}").unwrap_err();
        assert!(e.0.starts_with("f.json:2:"), "{e}");
        assert!(parse_text::<T>("f.yaml", "a: 3").is_ok());
    }
}
