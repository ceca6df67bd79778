//! The in-memory event log: for tests, benchmarks and throwaway daemons (`--store memory`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::watch;

use super::coordination::{
    Coordination, EngineEntry, InboxRequest, InboxState, Lease, SessionQuery,
};
use super::memory_outbox::MemoryOutbox;
use super::outbox::{now_ms, Outbox};
use super::{EventStore, SessionRecord, StoreError, StoredEvent};
use crate::sync::{LockExt, RwLockExt};
use crate::universal::EventDraft;

struct Log {
    session_id: Arc<str>,
    events: RwLock<Vec<StoredEvent>>,
    /// Held for a whole append, so sequences stay dense even if two writers raced.
    append: Mutex<()>,
    last: watch::Sender<u64>,
}

/// Every session's events in a vector; nothing survives the process. Engines sharing it live
/// in this process (tests), so a registration lasts until its lease is dropped.
#[derive(Default)]
pub struct MemoryStore {
    logs: RwLock<HashMap<String, Arc<Log>>>,
    records: RwLock<HashMap<String, SessionRecord>>,
    engines: Arc<Mutex<Vec<EngineEntry>>>,
    inbox: Mutex<InboxRows>,
    changes: watch::Sender<u64>,
    outbox: MemoryOutbox,
}

/// The inbox's rows: (session id, body, state).
#[derive(Default)]
struct InboxRows {
    next: u64,
    rows: std::collections::BTreeMap<u64, (String, serde_json::Value, InboxState)>,
}

/// A registration in a memory store.
struct MemoryLease {
    engines: Arc<Mutex<Vec<EngineEntry>>>,
    engine_id: String,
}

impl Lease for MemoryLease {
    fn announce_url(&self, url: &str) -> Result<(), StoreError> {
        let mut engines = self.engines.lock_unpoisoned();
        if let Some(e) = engines.iter_mut().find(|e| e.engine_id == self.engine_id) {
            e.url = Some(url.to_owned());
        }
        Ok(())
    }
}

impl Drop for MemoryLease {
    fn drop(&mut self) {
        self.engines
            .lock_unpoisoned()
            .retain(|e| e.engine_id != self.engine_id);
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn log(&self, session_id: &str) -> Result<Arc<Log>, StoreError> {
        let logs = self.logs.read_unpoisoned();
        logs.get(session_id)
            .cloned()
            .ok_or_else(|| StoreError::UnknownSession(session_id.to_owned()))
    }
}

impl EventStore for MemoryStore {
    fn coordination(&self) -> &dyn Coordination {
        self
    }

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
        self.changed();
        Ok(())
    }

    fn put_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let mut records = self.records.write_unpoisoned();
        match records.get_mut(&record.session_id) {
            Some(r) => {
                // The owner changes only by `claim`.
                let owner = std::mem::take(&mut r.owner);
                *r = record.clone();
                r.owner = owner;
                Ok(())
            }
            None => Err(StoreError::UnknownSession(record.session_id.clone())),
        }
    }

    fn delete_session(&self, session_id: &str) -> Result<bool, StoreError> {
        let record = self.records.write_unpoisoned().remove(session_id);
        let log = self.logs.write_unpoisoned().remove(session_id);
        self.inbox
            .lock_unpoisoned()
            .rows
            .retain(|_, (id, _, _)| id != session_id);
        self.changed();
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
    ) -> Result<Vec<StoredEvent>, StoreError> {
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

impl Coordination for MemoryStore {
    fn register(&self, engine: &EngineEntry) -> Result<Box<dyn Lease>, StoreError> {
        self.engines.lock_unpoisoned().push(engine.clone());
        Ok(Box::new(MemoryLease {
            engines: self.engines.clone(),
            engine_id: engine.engine_id.clone(),
        }))
    }

    fn engine_alive(&self, engine_id: &str) -> Result<bool, StoreError> {
        Ok(self
            .engines
            .lock_unpoisoned()
            .iter()
            .any(|e| e.engine_id == engine_id))
    }

    fn engines(&self) -> Result<Vec<EngineEntry>, StoreError> {
        Ok(self.engines.lock_unpoisoned().clone())
    }

    fn claim(&self, session_id: &str, from: &str, to: &str) -> Result<bool, StoreError> {
        let claimed = {
            let mut records = self.records.write_unpoisoned();
            match records.get_mut(session_id) {
                Some(r) if r.owner == from => {
                    r.owner = to.to_owned();
                    true
                }
                _ => false,
            }
        };
        if claimed {
            self.changed();
        }
        Ok(claimed)
    }

    fn owned_sessions(&self) -> Result<Vec<(String, String)>, StoreError> {
        let records = self.records.read_unpoisoned();
        Ok(records
            .values()
            .filter(|r| !r.owner.is_empty())
            .map(|r| (r.session_id.clone(), r.owner.clone()))
            .collect())
    }

    fn load_session(&self, session_id: &str) -> Result<Option<SessionRecord>, StoreError> {
        Ok(self.records.read_unpoisoned().get(session_id).cloned())
    }

    fn query_sessions(&self, q: &SessionQuery) -> Result<Vec<SessionRecord>, StoreError> {
        let records = self.records.read_unpoisoned();
        let mut page: Vec<&SessionRecord> = records
            .values()
            .filter(|r| {
                q.before.as_ref().is_none_or(|(at, id)| {
                    (r.created_at, r.session_id.as_str()) < (*at, id.as_str())
                })
            })
            .filter(|r| q.statuses.is_empty() || q.statuses.contains(&r.status))
            .filter(|r| q.owner.as_ref().is_none_or(|o| *o == r.owner))
            .collect();
        page.sort_by(|a, b| (b.created_at, &b.session_id).cmp(&(a.created_at, &a.session_id)));
        Ok(page.into_iter().take(q.limit).cloned().collect())
    }

    fn inbox_send(&self, session_id: &str, body: &serde_json::Value) -> Result<u64, StoreError> {
        let id = {
            let mut inbox = self.inbox.lock_unpoisoned();
            inbox.next += 1;
            let id = inbox.next;
            inbox.rows.insert(
                id,
                (session_id.to_owned(), body.clone(), InboxState::Pending),
            );
            id
        };
        self.changed();
        Ok(id)
    }

    fn inbox_take(&self, owner: &str) -> Result<Vec<InboxRequest>, StoreError> {
        let owned: std::collections::HashSet<String> = self
            .records
            .read_unpoisoned()
            .values()
            .filter(|r| r.owner == owner)
            .map(|r| r.session_id.clone())
            .collect();
        let mut inbox = self.inbox.lock_unpoisoned();
        let mut taken = Vec::new();
        for (id, (session_id, body, state)) in inbox.rows.iter_mut() {
            if *state == InboxState::Pending && owned.contains(session_id) {
                *state = InboxState::Taken;
                taken.push(InboxRequest {
                    id: *id,
                    session_id: session_id.clone(),
                    body: body.clone(),
                });
            }
        }
        Ok(taken)
    }

    fn inbox_answer(&self, id: u64, reply: &serde_json::Value) -> Result<(), StoreError> {
        if let Some(row) = self.inbox.lock_unpoisoned().rows.get_mut(&id) {
            row.2 = InboxState::Done(reply.clone());
        }
        self.changed();
        Ok(())
    }

    fn inbox_state(&self, id: u64) -> Result<InboxState, StoreError> {
        let inbox = self.inbox.lock_unpoisoned();
        Ok(inbox
            .rows
            .get(&id)
            .map_or(InboxState::Gone, |(_, _, state)| state.clone()))
    }

    fn inbox_withdraw(&self, id: u64) -> Result<bool, StoreError> {
        let mut inbox = self.inbox.lock_unpoisoned();
        match inbox.rows.get_mut(&id) {
            Some(row) if row.2 == InboxState::Pending => {
                row.2 = InboxState::Withdrawn;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn inbox_forget(&self, id: u64) -> Result<(), StoreError> {
        self.inbox.lock_unpoisoned().rows.remove(&id);
        Ok(())
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::universal::{ErrorData, EventData};

    fn draft(message: &str) -> EventDraft {
        EventDraft::synthetic(EventData::Error(Box::new(ErrorData {
            message: message.into(),
            code: None,
            details: None,
        })))
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
