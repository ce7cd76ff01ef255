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
