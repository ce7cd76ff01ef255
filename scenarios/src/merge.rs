//! Reading JSON reports back, and merging the reports of a sharded run (`triggers-lab run
//! --shard K/N`) into the report one unsharded run would have written.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::{MergeError, ReportReadError};
use crate::report::{REPORT_FORMAT, SuiteReport};

/// Reads a JSON report (`triggers-lab run --json`) of format 0 (no `format` field) or
/// [`REPORT_FORMAT`].
///
/// # Errors
/// The file cannot be read (or is no regular file, or is over [`crate::MAX_INPUT_BYTES`]), is
/// not a report (with line and column), or is of a newer format.
pub fn read_report(path: &Path) -> Result<SuiteReport, ReportReadError> {
    let name = path.display().to_string();
    let io = |source| ReportReadError::Io {
        path: name.clone(),
        source,
    };
    let bytes = crate::input::read_input(path).map_err(io)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    parse_report(&name, &text)
}

/// [`read_report`] on text already read; `path` names it in errors.
///
/// # Errors
/// As [`read_report`].
pub fn parse_report(path: &str, text: &str) -> Result<SuiteReport, ReportReadError> {
    let parse = |e: serde_json::Error| ReportReadError::Parse {
        path: path.to_owned(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    };
    // The format first: a newer report may not fit today's shape, and saying "newer" beats a
    // missing field.
    #[derive(Deserialize)]
    struct Format {
        #[serde(default)]
        format: u64,
    }
    let Format { format } = serde_json::from_str(text).map_err(parse)?;
    if format > u64::from(REPORT_FORMAT) {
        return Err(ReportReadError::Format {
            path: path.to_owned(),
            found: format,
            supported: REPORT_FORMAT,
        });
    }
    serde_json::from_str(text).map_err(parse)
}

/// Merges the reports of a sharded run: every scenario once, each with its own result, in the
/// order one unsharded run would have run them. That order comes from each report's
/// [`crate::ShardInfo`]; scenarios of a report without one keep their order, after the others.
/// The run's time is the longest report's (shards run side by side), `jobs` the largest.
///
/// `reports` pairs each report with what names it in errors (its file).
///
/// # Errors
/// No report, or a scenario (by name and file) in two of them.
pub fn merge(reports: Vec<(String, SuiteReport)>) -> Result<SuiteReport, MergeError> {
    if reports.is_empty() {
        return Err(MergeError::Empty);
    }
    let mut seen: BTreeMap<(String, String), String> = BTreeMap::new();
    // (place in the whole selection, or none; which report; place in it) for a stable order.
    let mut scenarios = Vec::new();
    let mut duration = std::time::Duration::ZERO;
    let mut jobs = 0;
    let mut interrupted = None;
    for (r, (source, report)) in reports.into_iter().enumerate() {
        duration = duration.max(report.duration);
        jobs = jobs.max(report.jobs);
        interrupted = interrupted.or(report.interrupted);
        let positions = report
            .shard
            .map(|s| s.positions)
            .filter(|p| p.len() == report.scenarios.len());
        for (i, s) in report.scenarios.into_iter().enumerate() {
            let key = (s.name.clone(), s.file.clone());
            if let Some(first) = seen.get(&key) {
                return Err(MergeError::Duplicate {
                    name: key.0,
                    file: key.1,
                    first: first.clone(),
                    second: source,
                });
            }
            seen.insert(key, source.clone());
            let place = positions.as_ref().map_or(usize::MAX, |p| p[i]);
            scenarios.push(((place, r, i), s));
        }
    }
    scenarios.sort_by_key(|(order, _)| *order);
    Ok(SuiteReport {
        scenarios: scenarios.into_iter().map(|(_, s)| s).collect(),
        duration,
        jobs,
        interrupted,
        shard: None,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::report::{Outcome, ScenarioReport, ShardInfo};

    fn scenario(name: &str, outcome: Outcome) -> ScenarioReport {
        ScenarioReport {
            name: name.into(),
            file: format!("{name}.scenario.yaml"),
            description: String::new(),
            outcome,
            duration: Duration::from_millis(1234),
            nats: String::new(),
            steps: Vec::new(),
            failure: None,
            dropped_messages: 0,
            services: Vec::new(),
            failed_attempts: Vec::new(),
        }
    }

    fn shard(index: usize, names: &[(&str, usize)]) -> SuiteReport {
        SuiteReport {
            scenarios: names
                .iter()
                .map(|(n, _)| scenario(n, Outcome::Passed))
                .collect(),
            duration: Duration::from_secs(index as u64),
            jobs: 1,
            interrupted: None,
            shard: Some(ShardInfo {
                index,
                count: 2,
                selected: 3,
                positions: names.iter().map(|(_, p)| *p).collect(),
            }),
        }
    }

    #[test]
    fn shards_go_back_in_the_order_of_the_whole_selection() {
        let merged = merge(vec![
            ("b.json".into(), shard(2, &[("b", 1)])),
            ("a.json".into(), shard(1, &[("a", 0), ("c", 2)])),
        ])
        .unwrap();
        let names: Vec<_> = merged.scenarios.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(merged.duration, Duration::from_secs(2));
        assert_eq!(merged.shard, None);
    }

    #[test]
    fn a_scenario_in_two_reports_is_refused_by_name() {
        let e = merge(vec![
            ("a.json".into(), shard(1, &[("a", 0)])),
            ("b.json".into(), shard(2, &[("a", 0)])),
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("scenario \"a\" (a.scenario.yaml) is in both a.json and b.json"),
            "{e}"
        );
    }

    #[test]
    fn a_report_reads_back_as_written() {
        let report = shard(1, &[("a", 0)]);
        let text = report.to_json().unwrap();
        let back = parse_report("r.json", &text).unwrap();
        assert_eq!(back.to_json().unwrap(), text);
        assert_eq!(back.scenarios[0].duration, Duration::from_millis(1234));
    }

    #[test]
    fn a_newer_format_is_refused_and_a_bad_file_is_placed() {
        let e = parse_report("r.json", r#"{"format": 2, "scenarios": 3}"#).unwrap_err();
        assert!(e.to_string().contains("format 2"), "{e}");
        let e = parse_report(
            "r.json",
            "{\n  \"scenarios\": 3,\n  \"duration_ms\": 1, \"jobs\": 1}",
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("r.json:2:"), "{e}");
        // Format 0: the same shape without the field.
        let old = r#"{"scenarios": [], "duration_ms": 1.5, "jobs": 2}"#;
        assert_eq!(parse_report("old.json", old).unwrap().jobs, 2);
    }
}
