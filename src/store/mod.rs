//! The event log: every event the daemon emits is appended here before anyone sees it, and
//! polling, SSE replay, live SSE and turn streams all read it at their own cursor.
//!
//! One trait, [`EventStore`], with an in-memory implementation ([`MemoryStore`]); durable
//! stores implement the same trait.

mod memory;

use std::sync::Arc;

use tokio::sync::watch;

use crate::universal::{EventDraft, UniversalEvent};

pub use memory::MemoryStore;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("session `{0}` has no log")]
    UnknownSession(String),
    #[error("session `{0}` already has a log")]
    AlreadyExists(String),
    #[error("storage failure: {0}")]
    Backend(String),
}

/// An event as stored: the event and its compact JSON without `raw` (serialized once at append
/// time, so serving many readers costs no re-serialization).
#[derive(Debug)]
pub struct StoredEvent {
    pub event: UniversalEvent,
    pub json: String,
}

impl StoredEvent {
    /// Wraps an event, serializing it once.
    pub fn new(event: UniversalEvent) -> Self {
        let json = event.to_json(false);
        StoredEvent { event, json }
    }

    /// The event's JSON as a reader asked for it.
    pub fn json(&self, include_raw: bool) -> std::borrow::Cow<'_, str> {
        if include_raw && self.event.raw.is_some() {
            self.event.to_json(true).into()
        } else {
            self.json.as_str().into()
        }
    }
}

/// The append-only, per-session event log.
///
/// A session has exactly one writer (its actor), so `append` is never raced for a session;
/// readers are many and never block the writer for long.
pub trait EventStore: Send + Sync + 'static {
    /// Creates the empty log of a new session.
    fn create(&self, session_id: &str) -> Result<(), StoreError>;

    /// Appends drafts at the next sequences (dense, from 1), stamping them with `time` and the
    /// native session id; returns the last sequence. Subscribers are woken after the append.
    fn append(
        &self,
        session_id: &str,
        drafts: &mut Vec<EventDraft>,
        time: Arc<str>,
        native_session_id: Option<&str>,
    ) -> Result<u64, StoreError>;

    /// Up to `limit` events with `sequence > after`, in order.
    fn read(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Arc<StoredEvent>>, StoreError>;

    /// The sequence of the last event (0 for an empty log).
    fn last_sequence(&self, session_id: &str) -> Result<u64, StoreError>;

    /// A receiver of the last sequence, changed after every append.
    fn subscribe(&self, session_id: &str) -> Result<watch::Receiver<u64>, StoreError>;
}

/// Waits until the log holds an event after `cursor`. Returns false when the log is gone.
pub async fn wait_after(rx: &mut watch::Receiver<u64>, cursor: u64) -> bool {
    rx.wait_for(|last| *last > cursor).await.is_ok()
}
