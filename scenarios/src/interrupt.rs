//! Stopping a run early (Ctrl-C, SIGTERM): what the caller sets, and what the runner waits on.

use std::sync::Arc;

use tokio::sync::watch;

/// Asks a run to stop. The step in progress is abandoned and reported as
/// [`Outcome::Interrupted`](crate::Outcome::Interrupted), the scenario's services and nats-server
/// are stopped as at its normal end, and scenarios not started yet are reported as
/// [`Outcome::NotRun`](crate::Outcome::NotRun). Clones share the request.
///
/// ```
/// let interrupt = triggers_scenarios::Interrupt::new();
/// let options = triggers_scenarios::RunOptions {
///     interrupt: interrupt.clone(),
///     ..Default::default()
/// };
/// // From a signal handler:
/// interrupt.request("SIGINT");
/// assert_eq!(options.interrupt.reason().as_deref(), Some("SIGINT"));
/// ```
#[derive(Clone, Debug)]
pub struct Interrupt(Arc<watch::Sender<Option<String>>>);

impl Default for Interrupt {
    fn default() -> Self {
        Interrupt::new()
    }
}

impl Interrupt {
    /// A request nobody has made yet.
    #[must_use]
    pub fn new() -> Self {
        Interrupt(Arc::new(watch::Sender::new(None)))
    }

    /// Asks the run to stop; `why` (e.g. `SIGINT`) goes into the reports. The first request wins.
    pub fn request(&self, why: impl Into<String>) {
        let why = why.into();
        self.0.send_if_modified(|reason| {
            if reason.is_some() {
                return false;
            }
            *reason = Some(why);
            true
        });
    }

    /// Why the run was asked to stop, once it was.
    #[must_use]
    pub fn reason(&self) -> Option<String> {
        self.0.borrow().clone()
    }

    /// Waits until the run is asked to stop; returns why.
    pub(crate) async fn requested(&self) -> String {
        let mut rx = self.0.subscribe();
        let got = rx.wait_for(Option::is_some).await.map(|r| r.clone());
        match got {
            Ok(reason) => reason.unwrap_or_default(),
            // The sender lives in `self`: it cannot be dropped while this waits.
            Err(_) => std::future::pending().await,
        }
    }
}
