//! Cancelling a run by hand: the way out of a run that would go on too long (a storm of retries,
//! a flow that multiplies its work, a service that never answers). The emulator drops what it
//! still owes the run (the arrivals it waits on, its armed timers, so no timer delivers for it
//! again and no resend is made for it) and settles it as `cancelled`, for good: events that come
//! later (deliveries already in a service's hands, hops the services make among themselves) are
//! recorded on its timeline and open nothing.

use triggers_sdk::wire::{GoTime, Headers};

use crate::recorder::{Body, RecordKind, RunStatus};
use crate::run::Cancelled;
use crate::{Emulator, EmulatorError};

impl Emulator {
    /// Cancels the open run `run_id`: see the module's account. Records `run_settled` with
    /// status `cancelled`, and a `cancelled` step on the run's timeline saying what was dropped.
    ///
    /// # Errors
    /// [`EmulatorError::NotCancellable`] for a run that is not kept (unknown, or settled and
    /// evicted) or has settled already (succeeded, failed, or cancelled before).
    pub fn cancel(&self, run_id: &str) -> Result<Cancelled, EmulatorError> {
        let refuse = |why: String| EmulatorError::NotCancellable {
            run_id: crate::conformance::clip(run_id, 200),
            why,
        };
        let cancelled = {
            let mut state = self.lock();
            let st = &mut *state;
            let next_seq = st.records.next_seq();
            let run = st.runs.get_mut(run_id).ok_or_else(|| {
                refuse("no such run is kept (unknown, or settled and evicted)".into())
            })?;
            let flow_id = run.flow_id.clone();
            // The step shares the seq of the `run_settled` record pushed next.
            let cancelled = run.cancel(next_seq, GoTime::now()).ok_or_else(|| {
                refuse(match run.status {
                    RunStatus::Cancelled => "it was cancelled already".into(),
                    status => format!("it has {} already", status.as_str()),
                })
            })?;
            self.shared.push_locked(
                st,
                "",
                &Headers::new(),
                Body::default(),
                RecordKind::RunSettled {
                    run_id: run_id.to_owned(),
                    flow_id,
                    status: RunStatus::Cancelled,
                },
            );
            st.settled(run_id);
            cancelled
        };
        tracing::info!(run = %run_id, "{cancelled}");
        self.shared.notify();
        Ok(cancelled)
    }
}
