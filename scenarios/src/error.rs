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
