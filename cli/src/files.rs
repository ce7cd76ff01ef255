//! Reading the files users write: flows (and payloads) as JSON or YAML, with errors that say
//! file, line and column. Every file is read by `triggers_scenarios::read_input` (standard input
//! by `read_stdin`): regular files only, of at most `MAX_INPUT_BYTES`.

use std::path::Path;

use serde::de::DeserializeOwned;
use triggers_emulator::RecordingError;
use triggers_emulator::recording::{Recording, parse_recording};

/// A file that could not be read or parsed: the message already names the file and position.
#[derive(Debug)]
pub(crate) struct FileError(pub(crate) String);

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FileError {}

/// Parses text as YAML, or JSON (which is YAML), as scenarios read their files: errors name the
/// file, line and column.
pub(crate) fn parse_text<T: DeserializeOwned>(name: &str, text: &str) -> Result<T, FileError> {
    triggers_scenarios::parse_document(name, text).map_err(|e| FileError(e.to_string()))
}

/// Reads and parses a file (`-` is standard input).
pub(crate) fn read<T: DeserializeOwned>(path: &Path) -> Result<T, FileError> {
    let (name, text) = read_text(path)?;
    parse_text(&name, &text)
}

/// A file's name (as errors should show it) and text (`-` is standard input).
pub(crate) fn read_text(path: &Path) -> Result<(String, String), FileError> {
    Ok(if path.as_os_str() == "-" {
        let bytes = triggers_scenarios::read_stdin()
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

/// A recording (`up --record FILE`), read as every input is.
pub(crate) fn read_recording(path: &Path) -> Result<Recording, FileError> {
    let name = path.display().to_string();
    let bytes = triggers_scenarios::read_input(path).map_err(|source| {
        FileError(
            RecordingError::Io {
                path: name.clone(),
                source,
            }
            .to_string(),
        )
    })?;
    let text = triggers_scenarios::utf8_text(&name, bytes).map_err(|e| FileError(e.to_string()))?;
    parse_recording(&name, &text).map_err(|e| FileError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_and_json_errors_say_where() {
        #[derive(serde::Deserialize, Debug)]
        #[expect(dead_code, reason = "decoded for the error it gives, never read")]
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
        // A JSON mistake in JSON's words and place, not YAML's.
        let e = parse_text::<T>("f.json", "{\"a\": 1,,}").unwrap_err();
        assert!(e.0.starts_with("f.json:1:9: not JSON"), "{e}");
    }
}
