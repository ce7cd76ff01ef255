//! `advance` and `sleep`: move the virtual clock forward (due timers fire), or wait on the
//! wall clock.

use std::ops::{Deref, DerefMut};

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;

use super::{CheckCx, StepFailure, StepKind, StepOutcome};
use crate::model::Dur;
use crate::runner::Lab;

/// `advance`: how far to move the virtual clock.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct AdvanceStep(pub Dur);

/// `sleep`: how long to wait (wall clock).
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct SleepStep(pub Dur);

impl Deref for AdvanceStep {
    type Target = Dur;
    fn deref(&self) -> &Dur {
        &self.0
    }
}

impl DerefMut for AdvanceStep {
    fn deref_mut(&mut self) -> &mut Dur {
        &mut self.0
    }
}

impl Deref for SleepStep {
    type Target = Dur;
    fn deref(&self) -> &Dur {
        &self.0
    }
}

impl DerefMut for SleepStep {
    fn deref_mut(&mut self) -> &mut Dur {
        &mut self.0
    }
}

impl StepKind for AdvanceStep {
    fn label(&self) -> String {
        format!("advance {}", self.0)
    }

    fn check(&self, _: &mut CheckCx<'_>) -> Result<(), String> {
        Ok(())
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        async move {
            let fired = lab
                .em()
                .advance(self.0.0)
                .await
                .map_err(|e| StepFailure::emulator(e.to_string(), e))?;
            Ok(format!(
                "the clock is at {}; {} timer(s) fired",
                lab.em().now(),
                fired.len()
            ))
        }
        .boxed_local()
    }
}

impl StepKind for SleepStep {
    fn label(&self) -> String {
        format!("sleep {}", self.0)
    }

    fn check(&self, _: &mut CheckCx<'_>) -> Result<(), String> {
        Ok(())
    }

    fn run<'a>(&'a self, _: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        async move {
            tokio::time::sleep(self.0.0).await;
            Ok(String::new())
        }
        .boxed_local()
    }
}
