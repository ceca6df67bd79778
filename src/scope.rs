//! What a connection knows about the listener that accepted it, handed to every request in its
//! extensions by `http/serve.rs`.
//!
//! An upgraded connection (a WebSocket door) outlives the HTTP exchange that started it, so it
//! keeps its [`ConnectionScope`] for as long as it is open: the listener's slot (so upgraded
//! connections count against `--max-connections` like any other) and the listener's stop signal
//! (so it can close cleanly, with a close frame, when the daemon shuts down). Doors that are
//! served some other way (tests calling a router directly) simply find no scope.

use std::sync::Arc;

use tokio::sync::{watch, OwnedSemaphorePermit};

/// A connection's hold on its listener; clones share one slot, freed when the last is dropped.
#[derive(Clone, Debug)]
pub struct ConnectionScope {
    _slot: Arc<OwnedSemaphorePermit>,
    closing: watch::Receiver<bool>,
}

impl ConnectionScope {
    /// A scope holding `slot` until its last clone is dropped, and watching `closing`.
    pub fn new(slot: OwnedSemaphorePermit, closing: watch::Receiver<bool>) -> ConnectionScope {
        ConnectionScope {
            _slot: Arc::new(slot),
            closing,
        }
    }

    /// Resolves once the listener stops (at once if it already has; never if its server is
    /// gone without saying so).
    pub async fn closing(&mut self) {
        if self.closing.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::Semaphore;

    #[tokio::test]
    async fn the_slot_is_held_until_the_last_clone_is_dropped() {
        let slots = Arc::new(Semaphore::new(1));
        let (tx, rx) = watch::channel(false);
        let scope = ConnectionScope::new(slots.clone().acquire_owned().await.unwrap(), rx);
        let mut kept = scope.clone();
        drop(scope);
        assert_eq!(slots.available_permits(), 0, "a clone still holds the slot");
        tx.send(true).unwrap();
        kept.closing().await;
        drop(kept);
        assert_eq!(slots.available_permits(), 1);
    }
}
