//! What a connection knows about the listener that accepted it, handed to every request in its
//! extensions by `http/serve.rs`.
//!
//! An upgraded connection (a WebSocket door) outlives the HTTP exchange that started it, so it
//! keeps its [`ConnectionScope`] for as long as it is open: the listener's slot (so upgraded
//! connections count against `--max-connections` like any other) and the listener's stop signal
//! (so it can close cleanly, with a close frame, when the daemon shuts down). Doors that are
//! served some other way (tests calling a router directly) simply find no scope.
//!
//! Upgraded connections may take only part of the slots ([`ConnectionScope::upgrade`]): the
//! rest stay for plain requests, so WebSockets, however many, never starve `/v1/health` and
//! the API of connections.

use std::sync::Arc;

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// A connection's hold on its listener; clones share one slot, freed when the last is dropped.
#[derive(Clone, Debug)]
pub struct ConnectionScope {
    _slot: Arc<OwnedSemaphorePermit>,
    closing: watch::Receiver<bool>,
    /// The slots upgraded connections may hold (fewer than all).
    upgrades: Arc<Semaphore>,
    /// This connection's upgrade slot, once upgraded.
    _upgrade: Option<Arc<OwnedSemaphorePermit>>,
}

/// Slots kept for plain requests out of `max`: an eighth, at least 2 (fewer only when there
/// are fewer slots), so at most `max - reserved` connections can be WebSockets.
pub fn reserved_for_requests(max: usize) -> usize {
    (max / 8).max(2).min(max.saturating_sub(1)).max(1).min(max)
}

impl ConnectionScope {
    /// A scope holding `slot` until its last clone is dropped, and watching `closing`;
    /// `upgrades` are the slots upgraded connections share.
    pub fn new(
        slot: OwnedSemaphorePermit,
        closing: watch::Receiver<bool>,
        upgrades: Arc<Semaphore>,
    ) -> ConnectionScope {
        ConnectionScope {
            _slot: Arc::new(slot),
            closing,
            upgrades,
            _upgrade: None,
        }
    }

    /// The scope for the connection once upgraded (a WebSocket): it also holds an upgrade slot;
    /// `None` when every upgrade slot is taken (the upgrade must be refused, 503).
    pub fn upgrade(&self) -> Option<ConnectionScope> {
        let permit = self.upgrades.clone().try_acquire_owned().ok()?;
        Some(ConnectionScope {
            _upgrade: Some(Arc::new(permit)),
            ..self.clone()
        })
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
        let upgrades = Arc::new(Semaphore::new(1));
        let scope =
            ConnectionScope::new(slots.clone().acquire_owned().await.unwrap(), rx, upgrades);
        let mut kept = scope.clone();
        drop(scope);
        assert_eq!(slots.available_permits(), 0, "a clone still holds the slot");
        tx.send(true).unwrap();
        kept.closing().await;
        drop(kept);
        assert_eq!(slots.available_permits(), 1);
    }

    #[tokio::test]
    async fn upgrades_take_only_their_share_of_the_slots() {
        assert_eq!(reserved_for_requests(64), 8);
        assert_eq!(reserved_for_requests(12), 2);
        assert_eq!(reserved_for_requests(2), 1);
        assert_eq!(reserved_for_requests(1), 1);
        let slots = Arc::new(Semaphore::new(3));
        let upgrades = Arc::new(Semaphore::new(1));
        let (_tx, rx) = watch::channel(false);
        let scope = |slots: &Arc<Semaphore>| {
            ConnectionScope::new(
                slots.clone().try_acquire_owned().unwrap(),
                rx.clone(),
                upgrades.clone(),
            )
        };
        let first = scope(&slots).upgrade().expect("one upgrade");
        assert!(scope(&slots).upgrade().is_none(), "the second is refused");
        drop(first);
        assert!(scope(&slots).upgrade().is_some());
    }
}
