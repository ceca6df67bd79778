//! The durable store's side of [`Coordination`]: the database's own coordination (engines,
//! owners, the inbox), and a claim that also moves the session's log to the engine that takes
//! it (it appends from the database's tip) or away from the one that lets it go.

use tokio::sync::watch;

use super::DurableStore;
use crate::store::coordination::{
    Coordination, EngineEntry, InboxRequest, InboxState, Lease, SessionQuery,
};
use crate::store::{EventStore, SessionRecord, StoreError};
use crate::sync::RwLockExt;

impl Coordination for DurableStore {
    fn register(&self, engine: &EngineEntry) -> Result<Box<dyn Lease>, StoreError> {
        let lease = self.shared.register(engine)?;
        *self.me.write_unpoisoned() = Some(engine.engine_id.clone());
        Ok(lease)
    }

    fn engine_alive(&self, engine_id: &str) -> Result<bool, StoreError> {
        self.shared.engine_alive(engine_id)
    }

    fn engines(&self) -> Result<Vec<EngineEntry>, StoreError> {
        self.shared.engines()
    }

    /// Also moves the session's log here: the engine that takes a session appends to it from
    /// where the database is (another engine may have appended since this one last did), and
    /// the one that lets it go reads what others append from the database.
    fn claim(&self, session_id: &str, from: &str, to: &str) -> Result<bool, StoreError> {
        // Anything this engine queued (its last record, its last events) lands first.
        if self.writer.check().is_ok() {
            self.flush()?;
        }
        if !self.shared.claim(session_id, from, to)? {
            return Ok(false);
        }
        let me = self.me.read_unpoisoned().clone();
        if let Some(me) = me {
            if to == me {
                let tip = self.reader.session_tip(session_id)?.unwrap_or(0);
                let log = self.log(session_id)?;
                let _appending = log.appending();
                log.adopt(tip);
            } else if from == me {
                if let Ok(log) = self.log(session_id) {
                    log.set_appends_here(false);
                }
            }
        }
        Ok(true)
    }

    fn owned_sessions(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.shared.owned_sessions()
    }

    fn load_session(&self, session_id: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.shared.load_session(session_id)
    }

    fn query_sessions(&self, query: &SessionQuery) -> Result<Vec<SessionRecord>, StoreError> {
        self.shared.query_sessions(query)
    }

    fn inbox_send(&self, session_id: &str, body: &serde_json::Value) -> Result<u64, StoreError> {
        self.shared.inbox_send(session_id, body)
    }

    fn inbox_take(&self, owner: &str) -> Result<Vec<InboxRequest>, StoreError> {
        self.shared.inbox_take(owner)
    }

    fn inbox_answer(&self, id: u64, reply: &serde_json::Value) -> Result<(), StoreError> {
        self.shared.inbox_answer(id, reply)
    }

    fn inbox_state(&self, id: u64) -> Result<InboxState, StoreError> {
        self.shared.inbox_state(id)
    }

    fn inbox_withdraw(&self, id: u64) -> Result<bool, StoreError> {
        self.shared.inbox_withdraw(id)
    }

    fn inbox_forget(&self, id: u64) -> Result<(), StoreError> {
        self.shared.inbox_forget(id)
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.shared.changes()
    }
}
