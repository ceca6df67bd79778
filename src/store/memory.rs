//! The in-memory event log: for tests, benchmarks and throwaway daemons (`--store memory`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::watch;

use super::memory_outbox::MemoryOutbox;
use super::outbox::{now_ms, Outbox};
use super::{EventStore, SessionRecord, StoreError, StoredEvent};
use crate::sync::{LockExt, RwLockExt};
use crate::universal::EventDraft;

struct Log {
    session_id: Arc<str>,
    events: RwLock<Vec<Arc<StoredEvent>>>,
    /// Held for a whole append, so sequences stay dense even if two writers raced.
    append: Mutex<()>,
    last: watch::Sender<u64>,
}

/// Every session's events in a vector; nothing survives the process.
#[derive(Default)]
pub struct MemoryStore {
    logs: RwLock<HashMap<String, Arc<Log>>>,
    records: RwLock<HashMap<String, SessionRecord>>,
    outbox: MemoryOutbox,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn log(&self, session_id: &str) -> Result<Arc<Log>, StoreError> {
        let logs = self.logs.read_unpoisoned();
        logs.get(session_id)
            .cloned()
            .ok_or_else(|| StoreError::UnknownSession(session_id.to_owned()))
    }
}

impl EventStore for MemoryStore {
    fn create(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let session_id = record.session_id.as_str();
        let mut logs = self.logs.write_unpoisoned();
        if logs.contains_key(session_id) {
            return Err(StoreError::AlreadyExists(session_id.to_owned()));
        }
        let (last, _) = watch::channel(0);
        logs.insert(
            session_id.to_owned(),
            Arc::new(Log {
                session_id: session_id.into(),
                events: RwLock::new(Vec::new()),
                append: Mutex::new(()),
                last,
            }),
        );
        self.records
            .write_unpoisoned()
            .insert(session_id.to_owned(), record.clone());
        Ok(())
    }

    fn put_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let mut records = self.records.write_unpoisoned();
        match records.get_mut(&record.session_id) {
            Some(r) => {
                *r = record.clone();
                Ok(())
            }
            None => Err(StoreError::UnknownSession(record.session_id.clone())),
        }
    }

    fn delete_session(&self, session_id: &str) -> Result<bool, StoreError> {
        let record = self.records.write_unpoisoned().remove(session_id);
        let log = self.logs.write_unpoisoned().remove(session_id);
        Ok(record.is_some() || log.is_some())
    }

    fn load_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        let records = self.records.read_unpoisoned();
        let mut all: Vec<SessionRecord> = records.values().cloned().collect();
        all.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then(a.session_id.cmp(&b.session_id))
        });
        Ok(all)
    }

    fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn append(
        &self,
        session_id: &str,
        drafts: &mut Vec<EventDraft>,
        time: Arc<str>,
        native_session_id: Option<&str>,
    ) -> Result<u64, StoreError> {
        let log = self.log(session_id)?;
        // One writer at a time; readers wait only while the finished events are pushed.
        let _writer = log.append.lock_unpoisoned();
        let first = log.events.read_unpoisoned().len() as u64 + 1;
        let stored =
            StoredEvent::stamp_all(drafts, first, &time, &log.session_id, native_session_id);
        let mut rows = Vec::new();
        self.outbox
            .routes()
            .rows_for(&log.session_id, &stored, now_ms(), &mut rows);
        self.outbox.insert(rows);
        let last = {
            let mut events = log.events.write_unpoisoned();
            events.extend(stored);
            events.len() as u64
        };
        log.last.send_replace(last);
        Ok(last)
    }

    fn read(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Arc<StoredEvent>>, StoreError> {
        let log = self.log(session_id)?;
        let events = log.events.read_unpoisoned();
        let start = (after as usize).min(events.len());
        let end = start.saturating_add(limit).min(events.len());
        Ok(events[start..end].to_vec())
    }

    fn last_sequence(&self, session_id: &str) -> Result<u64, StoreError> {
        Ok(*self.log(session_id)?.last.borrow())
    }

    fn subscribe(&self, session_id: &str) -> Result<watch::Receiver<u64>, StoreError> {
        Ok(self.log(session_id)?.last.subscribe())
    }

    fn outbox(&self) -> Option<&dyn Outbox> {
        Some(&self.outbox)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::universal::{ErrorData, EventData};

    fn draft(message: &str) -> EventDraft {
        EventDraft::synthetic(EventData::Error(ErrorData {
            message: message.into(),
            code: None,
            details: None,
        }))
    }

    pub(crate) fn record(id: &str) -> SessionRecord {
        SessionRecord::new(id, "mock", serde_json::json!({}), "", 1)
    }

    #[test]
    fn append_assigns_dense_sequences_and_read_pages() {
        let store = MemoryStore::new();
        store.create(&record("s")).unwrap();
        let mut drafts: Vec<EventDraft> = (0..5).map(|i| draft(&i.to_string())).collect();
        assert_eq!(store.append("s", &mut drafts, "t".into(), None).unwrap(), 5);
        assert!(drafts.is_empty());
        let page = store.read("s", 1, 2).unwrap();
        let seqs: Vec<u64> = page.iter().map(|e| e.sequence).collect();
        assert_eq!(seqs, vec![2, 3]);
        assert!(page[0].json.contains(r#""event_id":"evt_2""#));
        assert!(store.read("s", 9, 10).unwrap().is_empty());
        assert!(matches!(
            store.create(&record("s")),
            Err(StoreError::AlreadyExists(_))
        ));
        assert!(matches!(
            store.read("x", 0, 1),
            Err(StoreError::UnknownSession(_))
        ));
    }

    #[tokio::test]
    async fn subscribers_wake_after_appends_past_their_cursor() {
        let store = Arc::new(MemoryStore::new());
        store.create(&record("s")).unwrap();
        let mut rx = store.subscribe("s").unwrap();
        let writer = store.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            writer
                .append("s", &mut vec![draft("a")], "t".into(), None)
                .unwrap();
        });
        assert!(super::super::wait_after(&mut rx, 0).await);
        assert_eq!(store.last_sequence("s").unwrap(), 1);
        task.await.unwrap();
    }
}
