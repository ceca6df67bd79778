//! The shutdown signals of a long-running command (SIGTERM, SIGINT), caught from the moment it
//! starts.
//!
//! Tokio installs a signal's handler only when the signal's stream is created. Created lazily
//! (when the shutdown `select!` is first polled), a SIGTERM arriving between the ready line and
//! that poll found no handler and killed the process by the default action instead of a clean
//! stop with exit 0 — under load, a client that stops the daemon right after it said it was
//! ready hit that window. So the streams are created first thing, before the engine starts; a
//! signal that comes early waits in its stream for the shutdown to take it.

use tokio::signal::unix::{signal, Signal, SignalKind};

/// SIGTERM and SIGINT, caught from [`ShutdownSignals::install`] on.
pub struct ShutdownSignals {
    term: Option<Signal>,
    int: Option<Signal>,
}

impl ShutdownSignals {
    /// Catches both signals from now on (within a tokio runtime). A signal that cannot be
    /// caught (never the case on Linux) is simply not waited for.
    pub fn install() -> ShutdownSignals {
        let catch = |kind: SignalKind| match signal(kind) {
            Ok(s) => Some(s),
            Err(error) => {
                tracing::warn!(%error, "cannot catch a shutdown signal");
                None
            }
        };
        ShutdownSignals {
            term: catch(SignalKind::terminate()),
            int: catch(SignalKind::interrupt()),
        }
    }

    /// Resolves at the first SIGTERM or SIGINT received since [`ShutdownSignals::install`].
    pub async fn recv(&mut self) {
        async fn next(signal: &mut Option<Signal>) {
            match signal {
                Some(s) => {
                    if s.recv().await.is_none() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            () = next(&mut self.term) => {}
            () = next(&mut self.int) => {}
        }
    }
}
