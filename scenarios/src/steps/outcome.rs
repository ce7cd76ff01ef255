//! What a step ends with: a short detail for the report when it passed, else a [`StepFailure`]
//! that says which kind of failure it is, so that the runner decides the step's outcome (and the
//! report its words) from the kind, never from the message.

use std::error::Error;

use triggers_emulator::EmulatorError;

use crate::report::FailureKind;

/// A step's result: the detail the report shows (a run id, a version), or why it failed.
pub(crate) type StepOutcome = Result<String, StepFailure>;

/// Why a step did not pass: its kind, the message the report shows (what was expected, what
/// arrived), and the error underneath, when there is one.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct StepFailure {
    kind: FailureKind,
    message: String,
    #[source]
    source: Option<Box<dyn Error + Send + Sync + 'static>>,
}

impl StepFailure {
    fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        StepFailure {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// What the step expects did not hold.
    pub(crate) fn unmet(message: impl Into<String>) -> Self {
        Self::new(FailureKind::Expectation, message)
    }

    /// The step could not be carried out as written.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(FailureKind::Invalid, message)
    }

    /// The step waited its time limit out.
    pub(crate) fn timeout(message: impl Into<String>) -> Self {
        Self::new(FailureKind::Timeout, message)
    }

    /// The run was interrupted while the step ran.
    pub(crate) fn interrupted(message: impl Into<String>) -> Self {
        Self::new(FailureKind::Interrupted, message)
    }

    /// What the step needs around it failed (add the error underneath with
    /// [`caused_by`](Self::caused_by)).
    pub(crate) fn environment(message: impl Into<String>) -> Self {
        Self::new(FailureKind::Environment, message)
    }

    /// The emulator refused or failed what the step asked: the environment's failure when NATS
    /// failed under it, else the step's expectation that did not hold.
    pub(crate) fn emulator(message: impl Into<String>, source: EmulatorError) -> Self {
        let kind = match source {
            EmulatorError::Nats { .. } | EmulatorError::Publish { .. } => FailureKind::Environment,
            _ => FailureKind::Expectation,
        };
        Self::new(kind, message).caused_by(source)
    }

    /// The same failure, with the error underneath kept.
    #[must_use]
    pub(crate) fn caused_by(mut self, source: impl Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Its kind.
    pub(crate) fn kind(&self) -> FailureKind {
        self.kind
    }

    /// The message the report shows.
    pub(crate) fn message(&self) -> &str {
        &self.message
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Outcome;

    #[test]
    fn the_kind_decides_the_outcome_and_the_message_is_kept_as_written() {
        let cause = EmulatorError::UnknownFlow("f".into());
        let f = StepFailure::emulator(format!("cannot trigger f: {cause}"), cause);
        assert_eq!(f.kind(), FailureKind::Expectation);
        assert_eq!(f.kind().outcome(), Outcome::Failed);
        assert_eq!(
            f.to_string(),
            "cannot trigger f: no flow \"f\" is deployed; deploy it first"
        );
        assert!(f.source().is_some(), "the emulator's error is kept");
        let lost = std::io::Error::other("connection lost");
        let f = StepFailure::environment("cannot publish on a: connection lost").caused_by(lost);
        assert_eq!(f.kind(), FailureKind::Environment);
        assert_eq!(
            f.source().map(ToString::to_string).as_deref(),
            Some("connection lost")
        );
        assert_eq!(
            StepFailure::interrupted("by SIGINT").kind().outcome(),
            Outcome::Interrupted
        );
    }
}
