//! Recordings: the JSON-lines files `triggers-lab up --record FILE` writes, one [`Record`] a line
//! after a header line that says which format the file is in, and the reader for them.
//!
//! Format 1 (this one): the first line is a [`RecordingHeader`]
//! (`{"triggers_lab_recording":1,"created_at":"…","tool_version":"0.1.0"}`), every later line a
//! record. A file without the header is read as format 0 (written before the header existed) when
//! its lines are records of today's shape, and refused otherwise.

use std::path::Path;

use serde::{Deserialize, Serialize};
use triggers_sdk::wire::GoTime;

use crate::error::RecordingError;
use crate::recorder::{Record, RecordKind};

/// The format recordings are written in, and the newest this crate reads.
pub const RECORDING_FORMAT: u32 = 1;

/// A recording's first line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingHeader {
    /// The recording's format ([`RECORDING_FORMAT`] when written by this crate).
    pub triggers_lab_recording: u32,
    /// When the recording was started (wall clock, UTC).
    pub created_at: GoTime,
    /// The version of the triggers-lab that wrote it.
    pub tool_version: String,
}

impl RecordingHeader {
    /// The header of a recording started now by `tool_version`.
    #[must_use]
    pub fn new(tool_version: &str) -> Self {
        RecordingHeader {
            triggers_lab_recording: RECORDING_FORMAT,
            created_at: GoTime::now(),
            tool_version: tool_version.to_owned(),
        }
    }

    /// The header as its line (without the newline).
    ///
    /// # Errors
    /// Never in practice (every field serialises).
    pub fn to_line(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }
}

/// A recording, read.
#[derive(Debug, Clone)]
pub struct Recording {
    /// Its format: 0 for a file without a header line, else the header's.
    pub format: u32,
    /// Its header, when it has one.
    pub header: Option<RecordingHeader>,
    /// Every record, in the file's order.
    pub records: Vec<Record>,
}

impl Recording {
    /// What a reader should tell its user about how the file was read: for a file without a
    /// header line, that it was read as format 0.
    #[must_use]
    pub fn note(&self, path: &str) -> Option<String> {
        (self.format == 0).then(|| {
            format!(
                "{path} has no header line: read as a format-0 recording (written before recordings were versioned); its records are of today's shape"
            )
        })
    }
}

/// How far the `clock_advanced` record at `records[index]` moved the virtual clock (`None` for
/// another kind of record). A record carries where the clock came from; one written before it did
/// is measured from the clock of the last record before it, leaving out the timers the advance
/// fired (those were recorded at the new time, before the advance).
#[must_use]
pub fn advanced_by(records: &[Record], index: usize) -> Option<std::time::Duration> {
    let RecordKind::ClockAdvanced { from, to } = &records.get(index)?.kind else {
        return None;
    };
    let from = from
        .or_else(|| {
            records[..index]
                .iter()
                .rev()
                .find(|r| !matches!(r.kind, RecordKind::TimerFired { .. }))
                .map(|r| r.clock)
        })
        .unwrap_or(*to);
    let nanos = (to.unix_nanos() - from.unix_nanos()).max(0);
    Some(std::time::Duration::from_nanos(
        u64::try_from(nanos).unwrap_or(u64::MAX),
    ))
}

/// Reads a recording of format 0 or [`RECORDING_FORMAT`].
///
/// # Errors
/// The file cannot be read, a line is not a record (with its line and column), the header is
/// of another format, or a file without a header is not of today's shape.
pub fn read_recording(path: &Path) -> Result<Recording, RecordingError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| RecordingError::Io {
        path: name.clone(),
        source,
    })?;
    parse_recording(&name, &text)
}

/// [`read_recording`] on text already read; `path` names it in errors.
///
/// # Errors
/// As [`read_recording`].
pub fn parse_recording(path: &str, text: &str) -> Result<Recording, RecordingError> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty())
        .peekable();
    let header = match lines.peek() {
        Some((n, first)) if is_header(first) => {
            let n = *n;
            let header = read_header(path, n, first)?;
            lines.next();
            Some(header)
        }
        _ => None,
    };
    let format = header.as_ref().map_or(0, |h| h.triggers_lab_recording);
    let mut records = Vec::new();
    for (n, line) in lines {
        let record = serde_json::from_str::<Record>(line).map_err(|e| {
            let at = (path.to_owned(), n, e.column(), serde_message(&e));
            if header.is_none() {
                RecordingError::NotARecording {
                    path: at.0,
                    line: at.1,
                    column: at.2,
                    message: at.3,
                }
            } else {
                RecordingError::Line {
                    path: at.0,
                    line: at.1,
                    column: at.2,
                    message: at.3,
                }
            }
        })?;
        records.push(record);
    }
    Ok(Recording {
        format,
        header,
        records,
    })
}

/// What serde found wrong, without its ` at line 1 column 5`: each line is parsed alone, so its
/// line is always 1, and the error already names the file's line and column.
fn serde_message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// Whether a line is a header: an object with `triggers_lab_recording`, whatever its format.
fn is_header(line: &str) -> bool {
    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(line)
        .is_ok_and(|m| m.contains_key("triggers_lab_recording"))
}

fn read_header(path: &str, line: usize, text: &str) -> Result<RecordingHeader, RecordingError> {
    // The version first, on its own: a newer header may have other fields.
    #[derive(Deserialize)]
    struct Version {
        triggers_lab_recording: serde_json::Value,
        #[serde(default)]
        tool_version: Option<String>,
    }
    let bad = |e: serde_json::Error| RecordingError::Line {
        path: path.to_owned(),
        line,
        column: e.column(),
        message: format!("the header line: {}", serde_message(&e)),
    };
    let version: Version = serde_json::from_str(text).map_err(bad)?;
    let found = version.triggers_lab_recording.as_u64();
    if found != Some(u64::from(RECORDING_FORMAT)) {
        return Err(RecordingError::Format {
            path: path.to_owned(),
            found: version.triggers_lab_recording.to_string(),
            written_by: version.tool_version,
            supported: RECORDING_FORMAT,
        });
    }
    serde_json::from_str(text).map_err(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::RecordKind;

    const RECORD: &str = r#"{"seq":1,"at":"2026-12-01T03:00:00Z","clock":"2026-12-01T03:00:00Z","kind":"deploy","flow_id":"f","version":1}"#;

    #[test]
    fn a_recording_reads_back_with_its_header() {
        let header = RecordingHeader::new("9.9.9").to_line().unwrap();
        assert!(
            header.starts_with(r#"{"triggers_lab_recording":1,"created_at":""#),
            "{header}"
        );
        let text = format!("{header}\n{RECORD}\n{RECORD}\n");
        let recording = parse_recording("r.jsonl", &text).unwrap();
        assert_eq!(recording.format, 1);
        assert_eq!(recording.header.unwrap().tool_version, "9.9.9");
        assert_eq!(recording.records.len(), 2);
        assert_eq!(recording.records[0].kind.name(), "deploy");
    }

    #[test]
    fn without_a_header_it_is_format_0_if_its_lines_are_records() {
        let recording = parse_recording("old.jsonl", &format!("{RECORD}\n")).unwrap();
        assert_eq!(recording.format, 0);
        assert!(recording.note("old.jsonl").unwrap().contains("format-0"));
        let e = parse_recording("x.jsonl", &format!("{RECORD}\n{{\"seq\": 2}}\n")).unwrap_err();
        assert!(
            matches!(e, RecordingError::NotARecording { line: 2, .. }),
            "{e}"
        );
        assert!(e.to_string().starts_with("x.jsonl:2:"), "{e}");
    }

    #[test]
    fn a_deploy_carries_its_flow_and_a_trigger_its_entry_and_older_lines_still_read() {
        let header = RecordingHeader::new("0.1.0").to_line().unwrap();
        let deploy = r#"{"seq":2,"at":"2026-12-01T03:00:00Z","clock":"2026-12-01T03:00:00Z","kind":"deploy","flow_id":"f","version":2,"flow":{"id":"f","version":2,"nodes":[{"id":"in","type":"service-in","service":"s"}],"edges":[]}}"#;
        let trigger = r#"{"seq":3,"at":"2026-12-01T03:00:00Z","clock":"2026-12-01T03:00:00Z","payload":"{\"a\":1}","kind":"trigger","run_id":"r","flow_id":"f","entry":"in"}"#;
        let old_trigger = r#"{"seq":4,"at":"2026-12-01T03:00:00Z","clock":"2026-12-01T03:00:00Z","kind":"trigger","run_id":"r2","flow_id":"f"}"#;
        let text = format!("{header}\n{RECORD}\n{deploy}\n{trigger}\n{old_trigger}\n");
        let records = parse_recording("r.jsonl", &text).unwrap().records;
        assert!(matches!(
            &records[0].kind,
            RecordKind::Deploy { flow: None, .. }
        ));
        let RecordKind::Deploy {
            flow: Some(flow), ..
        } = &records[1].kind
        else {
            panic!("{:?}", records[1].kind)
        };
        assert_eq!((flow.id.as_str(), flow.version), ("f", 2));
        assert!(matches!(&records[2].kind, RecordKind::Trigger { entry, .. } if entry == "in"));
        assert_eq!(records[2].payload, r#"{"a":1}"#);
        assert!(matches!(&records[3].kind, RecordKind::Trigger { entry, .. } if entry.is_empty()));
        // Written back, the new fields are there and an empty entry is left out.
        let line = serde_json::to_string(&records[2]).unwrap();
        assert!(line.contains(r#""entry":"in""#), "{line}");
        assert!(
            !serde_json::to_string(&records[3])
                .unwrap()
                .contains("entry")
        );
    }

    #[test]
    fn another_format_names_the_one_needed() {
        let text = format!(
            "{{\"triggers_lab_recording\":2,\"created_at\":\"2030-01-01T00:00:00Z\",\"tool_version\":\"3.0.0\"}}\n{RECORD}\n"
        );
        let e = parse_recording("new.jsonl", &text).unwrap_err();
        let message = e.to_string();
        assert!(matches!(e, RecordingError::Format { .. }), "{message}");
        assert!(message.contains("format 2"), "{message}");
        assert!(
            message.contains("written by triggers-lab 3.0.0"),
            "{message}"
        );
        assert!(message.contains("reads formats 0 and 1"), "{message}");
    }

    #[test]
    fn a_bad_line_is_placed() {
        let header = RecordingHeader::new("1.0.0").to_line().unwrap();
        let text = format!("{header}\n{RECORD}\n\n{{\"seq\":\"x\"}}\n");
        let e = parse_recording("r.jsonl", &text).unwrap_err();
        assert!(matches!(e, RecordingError::Line { line: 4, .. }), "{e}");
        assert!(e.to_string().starts_with("r.jsonl:4:"), "{e}");
        // One place: the file's, not also the line's own `at line 1 column 7`.
        assert!(!e.to_string().contains("at line"), "{e}");
    }
}
