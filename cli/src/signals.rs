//! SIGINT, SIGTERM and SIGHUP for the long-running commands (`run`, `demo`, `up`, `watch`): the
//! first asks for a clean stop, a second forces a quick exit that still takes down what we
//! started. SIGHUP is what a closed terminal or a dropped SSH session sends: it stops as SIGTERM
//! does, so the reports are still written.
//!
//! The exit code of a stop by signal is 128 + its number, as a shell reports it: 130 for SIGINT,
//! 143 for SIGTERM, 129 for SIGHUP.

use std::time::Duration;

use tokio::sync::watch;

/// A stop signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sig {
    Int,
    Term,
    Hup,
}

impl Sig {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Sig::Int => "SIGINT",
            Sig::Term => "SIGTERM",
            Sig::Hup => "SIGHUP",
        }
    }

    /// 130, 143 or 129.
    pub(crate) fn code(self) -> u8 {
        match self {
            Sig::Int => 130,
            Sig::Term => 143,
            Sig::Hup => 129,
        }
    }
}

/// How long a forced exit may spend removing containers before it goes anyway.
const FORCED_CLEANUP: Duration = Duration::from_secs(5);

/// The first stop signal received, once there is one. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Signals(watch::Receiver<Option<Sig>>);

impl Signals {
    /// Starts listening on the current Tokio runtime. The first signal is reported to whoever
    /// waits; a second one prints a line, force-removes this process's containers (bounded) and
    /// exits at once with the first signal's code. The servers and external services we spawned
    /// die with us: each has a watchdog.
    pub(crate) fn listen() -> Signals {
        let (tx, rx) = watch::channel(None);
        // The handlers are in place when this returns, not when the task first runs: a signal
        // in between would otherwise kill the process (the default action) or go unheard.
        let stream = stream();
        tokio::spawn(async move {
            let Some(mut next) = stream else {
                return;
            };
            let Some(first) = next.recv().await else {
                return;
            };
            let _ = tx.send(Some(first));
            // (This binary's `eprintln!` never panics: after a SIGHUP the terminal may be gone.)
            eprintln!(
                "\n{}: stopping cleanly; press Ctrl-C again to force (what was started is still killed)",
                first.name()
            );
            if next.recv().await.is_some() {
                eprintln!("forced: killing what is left and exiting");
                natsbox::remove_own_containers(FORCED_CLEANUP).await;
                std::process::exit(i32::from(first.code()));
            }
        });
        Signals(rx)
    }

    /// The first signal, if one came.
    pub(crate) fn received(&self) -> Option<Sig> {
        *self.0.borrow()
    }

    /// Waits for the first signal.
    pub(crate) async fn recv(&self) -> Sig {
        let mut rx = self.0.clone();
        let got = rx.wait_for(Option::is_some).await.map(|sig| *sig);
        match got {
            Ok(sig) => sig.unwrap_or(Sig::Int),
            // The listener ended without a signal (it could not install handlers).
            Err(_) => std::future::pending().await,
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP as one stream.
struct Stream {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hup: tokio::signal::unix::Signal,
}

fn stream() -> Option<Stream> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            (Ok(int), Ok(term), Ok(hup)) => Some(Stream { int, term, hup }),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                eprintln!(
                    "warning: cannot handle SIGINT/SIGTERM/SIGHUP ({e}); Ctrl-C will not clean up"
                );
                None
            }
        }
    }
    #[cfg(not(unix))]
    {
        Some(Stream {})
    }
}

impl Stream {
    async fn recv(&mut self) -> Option<Sig> {
        #[cfg(unix)]
        {
            tokio::select! {
                s = self.int.recv() => s.map(|()| Sig::Int),
                s = self.term.recv() => s.map(|()| Sig::Term),
                s = self.hup.recv() => s.map(|()| Sig::Hup),
            }
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c().await.ok().map(|()| Sig::Int)
        }
    }
}
