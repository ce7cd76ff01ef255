//! The crate's errors.

use std::fmt;

/// A scenario file that cannot be read, parsed or accepted: where, and what is wrong.
///
/// It displays as `file:line:column: message` (or `file: message` when no position applies),
/// the form editors and CI annotations understand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct LoadError {
    /// The file, as given.
    pub file: String,
    /// 1-based line, 0 when no position applies (the file cannot be read).
    pub line: u64,
    /// 1-based column, 0 when no position applies.
    pub column: u64,
    /// What is wrong, and what to do.
    pub message: String,
}

impl LoadError {
    pub(crate) fn at(file: &str, line: u64, column: u64, message: impl Into<String>) -> Self {
        LoadError {
            file: file.to_owned(),
            line,
            column,
            message: message.into(),
        }
    }

    pub(crate) fn file(file: &str, message: impl Into<String>) -> Self {
        Self::at(file, 0, 0, message)
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file,
                self.line,
                self.column.max(1),
                self.message
            )
        }
    }
}

/// `bytes` as text; else where the first byte that is not UTF-8 is, and what to do.
///
/// # Errors
/// As said.
pub fn utf8_text(name: &str, bytes: Vec<u8>) -> Result<String, LoadError> {
    String::from_utf8(bytes).map_err(|e| {
        let bytes = e.as_bytes();
        let good = &bytes[..e.utf8_error().valid_up_to()];
        // The prefix is valid UTF-8, so it has lines and characters to count.
        let prefix = std::str::from_utf8(good).unwrap_or_default();
        let line = prefix.matches('\n').count() as u64 + 1;
        let line_start = prefix.rfind('\n').map_or(0, |i| i + 1);
        let column = prefix[line_start..].chars().count() as u64 + 1;
        let byte = bytes.get(good.len()).copied().unwrap_or_default();
        LoadError::at(
            name,
            line,
            column,
            format!(
                "not UTF-8 text (byte 0x{byte:02X} at offset {} cannot be read as a character): save the file as UTF-8",
                good.len()
            ),
        )
    })
}

/// How many problems [`LoadErrors`] shows before it says how many more there are: enough to
/// fix a file in one go, few enough that the first ones stay on the screen.
pub const SHOWN_ERRORS: usize = 20;

/// Every problem found in a scenario file (at least one), in the order of the file.
///
/// It displays one [`LoadError`] a line, the first [`SHOWN_ERRORS`] of them, then
/// `and N more problem(s)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct LoadErrors(pub Vec<LoadError>);

impl LoadErrors {
    /// The problems as a list.
    #[must_use]
    pub fn into_vec(self) -> Vec<LoadError> {
        self.0
    }
}

impl std::ops::Deref for LoadErrors {
    type Target = [LoadError];
    fn deref(&self) -> &[LoadError] {
        &self.0
    }
}

impl From<LoadError> for LoadErrors {
    fn from(e: LoadError) -> Self {
        LoadErrors(vec![e])
    }
}

impl fmt::Display for LoadErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_capped(f, &self.0)
    }
}

/// Writes `errors` one a line, the first [`SHOWN_ERRORS`], then how many more there are.
///
/// # Errors
/// Those of the writer.
pub fn write_capped(f: &mut dyn fmt::Write, errors: &[LoadError]) -> fmt::Result {
    for (i, e) in errors.iter().take(SHOWN_ERRORS).enumerate() {
        if i > 0 {
            writeln!(f)?;
        }
        write!(f, "{e}")?;
    }
    if errors.len() > SHOWN_ERRORS {
        write!(f, "\nand {} more problem(s)", errors.len() - SHOWN_ERRORS)?;
    }
    Ok(())
}

/// A report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Writing the file failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The JUnit writer failed.
    #[error("cannot write the JUnit report: {0}")]
    Junit(String),
    /// The JSON writer failed.
    #[error("cannot write the JSON report: {0}")]
    Json(#[from] serde_json::Error),
}

/// A JSON report (`triggers-lab run --json`) that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReportReadError {
    /// The file cannot be opened or read.
    #[error("cannot read the report {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It is not a JSON report: malformed JSON, or a field of the wrong shape.
    #[error(
        "{path}:{line}:{column}: not a triggers-lab JSON report (the file `run --json` writes): {message}"
    )]
    Parse {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What serde found wrong.
        message: String,
    },
    /// A report of a format this triggers-lab does not know (written by a newer one).
    #[error(
        "{path}: a JSON report of format {found}; this triggers-lab reads formats 0 to {supported}: read it with the triggers-lab that wrote it, or a newer one"
    )]
    Format {
        /// The file.
        path: String,
        /// Its `format`.
        found: u64,
        /// The newest this one reads.
        supported: u32,
    },
}

/// Shard reports that cannot be merged into one.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The same scenario is in two reports (or twice in one).
    #[error(
        "scenario {name:?} ({file}) is in both {first} and {second}: merge the reports of one sharded run, each shard once"
    )]
    Duplicate {
        /// Its name.
        name: String,
        /// Its file.
        file: String,
        /// The report it was first found in.
        first: String,
        /// The report it was found again in.
        second: String,
    },
    /// No report to merge.
    #[error("no report to merge: give the JSON reports of the shards")]
    Empty,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_that_is_not_utf8_is_found_at_its_line_and_column() {
        let e = utf8_text("f.yaml", b"id: order\nnodes: [\xc3\xa9t\xff]\n".to_vec()).unwrap_err();
        assert_eq!((e.line, e.column), (2, 11), "{e}");
        assert!(
            e.to_string()
                .starts_with("f.yaml:2:11: not UTF-8 text (byte 0xFF at offset 21"),
            "{e}"
        );
        // A sequence cut short at the end of the file.
        let e = utf8_text("f.yaml", b"a\xe2\x82".to_vec()).unwrap_err();
        assert_eq!((e.line, e.column), (1, 2), "{e}");
        assert_eq!(utf8_text("f.yaml", b"ok".to_vec()).unwrap(), "ok");
    }
}
