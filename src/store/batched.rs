//! The core of the durable stores (SQLite, Postgres): per-session tails in memory, a writer
//! thread that commits in batches, and reads that fall back to the database for older events.
//!
//! The durability rule: an append returns without waiting for the disk, unless its batch holds
//! `session.started`, `turn.ended` or `session.ended` ([`StoredEvent::awaits_commit`]); then
//! it waits for the writer's commit (synced for the ends) before raising the session's
//! *visible* watermark. Readers (`read`, `last_sequence`, `subscribe`) never look
//! past that watermark, and a session's appends are serialized, so nothing appended after such
//! an event becomes visible before it. `flush` waits until everything queued is committed.
//!
//! With [`StoreOptions::visible_after_commit`] every event waits for its commit to become
//! visible (the writer raises the watermark), but `append` still waits only for those three.
//!
//! Memory is bounded: each session keeps a small tail (only committed events leave it, none
//! once the session has ended), and the writer's queue is capped (`append` waits when full;
//! `room` lets an appender on an async runtime wait without blocking its thread).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use super::coordination::{
    Coordination, EngineEntry, InboxRequest, InboxState, Lease, SessionQuery,
};
use super::outbox::{Outbox, OutboxRoutes};
use super::tail::SessionLog;
use super::writer::{BatchWriter, EventsReply, Op, Writer};
use super::{Appended, Durable, EventStore, SessionRecord, StoreError, StoredEvent};
use crate::sync::RwLockExt;
use crate::universal::EventDraft;

/// The read side of a database, callable from any thread (including async runtime threads).
pub(crate) trait StoreReader: Send + Sync + 'static {
    /// A session's events with `after < sequence <= upto`, in order.
    fn read_events(
        &self,
        session_id: &str,
        after: u64,
        upto: u64,
    ) -> Result<Vec<StoredEvent>, StoreError>;

    /// The last stored sequence of a session (0 when it has no event), or `None` when the
    /// session has no record.
    fn session_tip(&self, session_id: &str) -> Result<Option<u64>, StoreError>;

    /// Every session record, oldest first.
    fn load_sessions(&self) -> Result<Vec<SessionRecord>, StoreError>;
}

/// Tuning of a durable store.
#[derive(Debug, Clone, Copy)]
pub struct StoreOptions {
    /// Events kept in memory per live session.
    pub tail_events: usize,
    /// Events queued for the writer before `append` waits.
    pub max_pending_events: usize,
    /// How long an engine of a fleet on Postgres stays alive without a heartbeat (its lease):
    /// a survivor recovers a dead engine's turns within it. (SQLite leases need no time: the
    /// kernel ends them with their process.)
    pub lease: std::time::Duration,
    /// Show every event only once it is committed, not just `turn.ended`/`session.ended`:
    /// then nothing a reader saw can be lost by a crash (and reused by the next sequence
    /// after a restart), at the price of about one commit of latency for live readers.
    pub visible_after_commit: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            tail_events: 128,
            max_pending_events: 4096,
            lease: std::time::Duration::from_secs(30),
            visible_after_commit: false,
        }
    }
}

/// The session logs a durable store holds in memory, shared with its change watcher.
pub(crate) type Logs = Arc<RwLock<HashMap<String, Arc<SessionLog>>>>;

/// The logs of `logs` that other engines append to and readers here follow: the ones whose
/// visible watermark a change watcher raises from the database.
pub(crate) fn foreign_followed(logs: &Logs) -> Vec<Arc<SessionLog>> {
    logs.read_unpoisoned()
        .values()
        .filter(|log| !log.appends_here() && log.followed())
        .cloned()
        .collect()
}

/// A durable event store (SQLite or Postgres): a database's reader and writer, the logs of
/// the sessions in memory, and the database's side of [`Coordination`] (engines, owners, the
/// inbox) for the engines sharing it.
pub struct DurableStore {
    reader: Box<dyn StoreReader>,
    logs: Logs,
    options: StoreOptions,
    shared: Box<dyn Coordination>,
    /// The engine registered through this store (it appends to the sessions it claims).
    me: RwLock<Option<String>>,
    /// The outbox the writer fills (with the events) and the dispatcher claims from.
    outbox: Option<Box<dyn Outbox>>,
    // Last, so dropping the store commits what is queued after everything else is gone.
    writer: Writer,
}

/// The former name, for the core's own code.
pub(crate) type BatchedStore = DurableStore;

impl BatchedStore {
    /// Starts the writer thread (named `thread_name`) and serves reads from `reader`.
    #[cfg(test)]
    pub(crate) fn start(
        thread_name: &str,
        reader: Box<dyn StoreReader>,
        writer: Box<dyn BatchWriter>,
        options: StoreOptions,
        logs: Logs,
        shared: Box<dyn Coordination>,
    ) -> Result<Self, StoreError> {
        Self::start_with_outbox(thread_name, reader, writer, None, options, logs, shared)
    }

    /// [`BatchedStore::start`] with an outbox: the writer adds its rows to the batches whose
    /// events its routes want.
    pub(crate) fn start_with_outbox(
        thread_name: &str,
        reader: Box<dyn StoreReader>,
        writer: Box<dyn BatchWriter>,
        outbox: Option<Box<dyn Outbox>>,
        options: StoreOptions,
        logs: Logs,
        shared: Box<dyn Coordination>,
    ) -> Result<Self, StoreError> {
        let routes = outbox
            .as_ref()
            .map_or_else(|| Arc::new(OutboxRoutes::default()), |o| o.routes().clone());
        Ok(BatchedStore {
            reader,
            logs,
            shared,
            me: RwLock::new(None),
            writer: Writer::spawn(thread_name, writer, options.max_pending_events, routes)?,
            options,
            outbox,
        })
    }

    /// Raises a log another engine appends to up to what the database holds now: its
    /// readers here then read the rest from the database.
    fn catch_up(&self, log: &SessionLog) -> Result<(), StoreError> {
        if log.appends_here() {
            return Ok(());
        }
        if let Some(tip) = self.reader.session_tip(&log.session_id)? {
            log.show_foreign(tip);
        }
        Ok(())
    }

    /// The session's log, loaded from the database on first use.
    fn log(&self, session_id: &str) -> Result<Arc<SessionLog>, StoreError> {
        if let Some(log) = self.logs.read_unpoisoned().get(session_id) {
            return Ok(log.clone());
        }
        let last = self
            .reader
            .session_tip(session_id)?
            .ok_or_else(|| StoreError::UnknownSession(session_id.to_owned()))?;
        Ok(self.insert_log(session_id, last))
    }

    fn insert_log(&self, session_id: &str, last: u64) -> Arc<SessionLog> {
        let mut logs = self.logs.write_unpoisoned();
        logs.entry(session_id.to_owned())
            .or_insert_with(|| {
                Arc::new(SessionLog::new(
                    session_id,
                    last,
                    self.options.tail_events,
                    self.options.visible_after_commit,
                ))
            })
            .clone()
    }

    /// Appends; a batch that must be durable before it is visible waits for its commit here
    /// (`defer` false), or hands the wait to the caller (`defer` true).
    fn append_with(
        &self,
        session_id: &str,
        drafts: &mut Vec<EventDraft>,
        time: Arc<str>,
        native_session_id: Option<&str>,
        defer: bool,
    ) -> Result<Appended, StoreError> {
        let log = self.log(session_id)?;
        let _appending = log.appending();
        log.set_appends_here(true);
        // The epoch first: a failure after it refuses these events (their sequences are
        // reused); a failure before it is seen by `check`.
        let epoch = self.writer.epoch();
        self.writer.check()?;
        if log.rewind_unless(epoch) {
            // The appender must learn that what it appended last is not in the log.
            return Err(StoreError::Unavailable(
                "the event log failed and lost this session's latest events".into(),
            ));
        }
        let first = log.tail().last() + 1;
        if drafts.is_empty() {
            return Ok(Appended {
                last: first - 1,
                durable: None,
            });
        }
        self.writer.reserve(drafts.len())?;
        let events =
            StoredEvent::stamp_all(drafts, first, &time, &log.session_id, native_session_id);
        let last = first + events.len() as u64 - 1;
        let must_commit = events.iter().any(|e| e.awaits_commit());
        let closes = events.iter().any(|e| e.ends_session());
        log.tail().push(&events, closes);
        if must_commit && defer {
            let (done, committed) = tokio::sync::oneshot::channel();
            self.writer.send(Op::Events {
                log: log.clone(),
                events,
                done: Some(EventsReply::Notify(done)),
                epoch,
            })?;
            self.writer.hurry();
            let log = log.clone();
            let durable = Durable::new(async move {
                committed
                    .await
                    .map_err(|_| StoreError::Backend("the store's writer has stopped".into()))??;
                // Everything is committed now: trim here, not on the writer thread.
                log.tail().trim();
                log.show_up_to(last);
                Ok(())
            });
            return Ok(Appended {
                last,
                durable: Some(durable),
            });
        }
        if must_commit {
            self.writer.call(|done| Op::Events {
                log: log.clone(),
                events,
                done: Some(EventsReply::Wait(done)),
                epoch,
            })?;
            // Everything is committed now: trim here, not on the writer thread.
            log.tail().trim();
        } else {
            self.writer.send(Op::Events {
                log: log.clone(),
                events,
                done: None,
                epoch,
            })?;
            if self.options.visible_after_commit {
                // The writer shows them once committed.
                return Ok(Appended {
                    last,
                    durable: None,
                });
            }
        }
        log.show_up_to(last);
        Ok(Appended {
            last,
            durable: None,
        })
    }
}

impl EventStore for BatchedStore {
    fn coordination(&self) -> &dyn Coordination {
        self
    }

    fn create(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let session_id = record.session_id.as_str();
        self.writer.check()?;
        let known = self.logs.read_unpoisoned().contains_key(session_id);
        if known {
            return Err(StoreError::AlreadyExists(session_id.to_owned()));
        }
        let created = self.writer.call(|done| Op::Create {
            record: record.clone(),
            done,
        })?;
        if !created {
            return Err(StoreError::AlreadyExists(session_id.to_owned()));
        }
        self.insert_log(session_id, 0).set_appends_here(true);
        Ok(())
    }

    fn put_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        self.log(&record.session_id)?;
        // Also while degraded: the writer keeps the record and writes it on recovery.
        self.writer.send(Op::Put {
            record: record.clone(),
        })
    }

    fn delete_session(&self, session_id: &str) -> Result<bool, StoreError> {
        self.writer.check()?;
        let existed = self.writer.call(|done| Op::Delete {
            session_id: session_id.to_owned(),
            done,
        })?;
        let log = self.logs.write_unpoisoned().remove(session_id);
        Ok(existed || log.is_some())
    }

    fn load_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        // Records put but still queued are part of the answer.
        if self.writer.check().is_ok() {
            self.flush()?;
        }
        self.reader.load_sessions()
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.writer.check()?;
        self.writer.call(|done| Op::Flush { done })?;
        // Everything is committed: trim every tail (here, not on the writer thread).
        let logs: Vec<Arc<SessionLog>> = self.logs.read_unpoisoned().values().cloned().collect();
        for log in logs {
            log.tail().trim();
        }
        Ok(())
    }

    fn append(
        &self,
        session_id: &str,
        drafts: &mut Vec<EventDraft>,
        time: Arc<str>,
        native_session_id: Option<&str>,
    ) -> Result<u64, StoreError> {
        self.append_with(session_id, drafts, time, native_session_id, false)
            .map(|appended| appended.last)
    }

    fn append_deferred(
        &self,
        session_id: &str,
        drafts: &mut Vec<EventDraft>,
        time: Arc<str>,
        native_session_id: Option<&str>,
    ) -> Result<Appended, StoreError> {
        self.append_with(session_id, drafts, time, native_session_id, true)
    }

    fn read(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let log = self.log(session_id)?;
        self.catch_up(&log)?;
        let end = log.visible().min(after.saturating_add(limit as u64));
        let mut out = Vec::new();
        let mut cursor = after;
        while cursor < end {
            let upto = {
                let mut tail = log.tail();
                // The lowest is kept: a read that goes on in the database noted its start.
                tail.reading_from(cursor + 1);
                let first = tail.first();
                if cursor + 1 >= first && cursor < tail.last() {
                    let before = out.len();
                    tail.copy_from(cursor + 1, (end - cursor) as usize, &mut out);
                    if let Some(last) = out[before..].last() {
                        cursor = last.sequence;
                    }
                    continue;
                }
                if cursor + 1 >= first {
                    // Past the tail: appended by another engine, only in the database.
                    end
                } else {
                    // Everything before the tail is committed.
                    (first - 1).min(end)
                }
            };
            let events = self.reader.read_events(session_id, cursor, upto)?;
            for (stored, expected) in events.into_iter().zip(cursor + 1..) {
                if stored.sequence != expected {
                    break;
                }
                cursor = expected;
                out.push(stored);
            }
            if cursor < upto {
                return Err(StoreError::Backend(format!(
                    "the log of session `{session_id}` is missing event {}",
                    cursor + 1
                )));
            }
        }
        Ok(out)
    }

    fn last_sequence(&self, session_id: &str) -> Result<u64, StoreError> {
        let log = self.log(session_id)?;
        self.catch_up(&log)?;
        Ok(log.visible())
    }

    fn subscribe(&self, session_id: &str) -> Result<watch::Receiver<u64>, StoreError> {
        Ok(self.log(session_id)?.subscribe())
    }

    fn room(&self) -> Option<watch::Receiver<bool>> {
        Some(self.writer.room())
    }

    fn health(&self) -> Option<watch::Receiver<Option<Arc<str>>>> {
        Some(self.writer.health())
    }

    fn outbox(&self) -> Option<&dyn Outbox> {
        self.outbox.as_deref()
    }
}

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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    use super::*;
    use crate::store::writer::Write;
    use crate::universal::{Cost, TerminatedBy};
    use crate::universal::{ErrorData, EventData, SessionEndReason, SessionEndedData};

    /// A database in memory that can be told to fail its commits.
    #[derive(Default)]
    struct FakeDb {
        records: Mutex<BTreeMap<String, SessionRecord>>,
        events: Mutex<BTreeMap<(String, u64), Arc<str>>>,
        broken: AtomicBool,
        /// Held by a test to hold up commits.
        gate: Mutex<()>,
        commits: std::sync::atomic::AtomicUsize,
        panics: AtomicBool,
    }

    struct FakeWriter(Arc<FakeDb>);
    struct FakeReader(Arc<FakeDb>);

    impl BatchWriter for FakeWriter {
        fn commit(&mut self, batch: &[Write<'_>]) -> Result<Vec<bool>, StoreError> {
            drop(self.0.gate.lock().unwrap());
            self.0.commits.fetch_add(1, Ordering::SeqCst);
            assert!(
                !self.0.panics.load(Ordering::SeqCst),
                "the writer panics (on purpose)"
            );
            if self.0.broken.load(Ordering::SeqCst) {
                return Err(StoreError::Backend("disk on fire".into()));
            }
            let mut records = self.0.records.lock().unwrap();
            let mut events = self.0.events.lock().unwrap();
            Ok(batch
                .iter()
                .map(|write| match write {
                    Write::Create(r) => {
                        let new = !records.contains_key(&r.session_id);
                        records.entry(r.session_id.clone()).or_insert((*r).clone());
                        new
                    }
                    Write::Put(r) => {
                        records.insert(r.session_id.clone(), (*r).clone());
                        true
                    }
                    Write::Events {
                        session_id,
                        events: list,
                    } => {
                        for e in list.iter() {
                            let key = ((*session_id).to_owned(), e.sequence);
                            events.insert(key, e.json.clone());
                        }
                        true
                    }
                    Write::Delete(session_id) => {
                        events.retain(|(id, _), _| id != session_id);
                        records.remove(*session_id).is_some()
                    }
                    Write::Outbox(_) => true,
                })
                .collect())
        }
    }

    impl StoreReader for FakeReader {
        fn read_events(
            &self,
            session_id: &str,
            after: u64,
            upto: u64,
        ) -> Result<Vec<StoredEvent>, StoreError> {
            let events = self.0.events.lock().unwrap();
            events
                .range((session_id.to_owned(), after + 1)..=(session_id.to_owned(), upto))
                .map(|((_, seq), json)| StoredEvent::from_stored(*seq, json, None))
                .collect()
        }

        fn session_tip(&self, session_id: &str) -> Result<Option<u64>, StoreError> {
            if !self.0.records.lock().unwrap().contains_key(session_id) {
                return Ok(None);
            }
            let events = self.0.events.lock().unwrap();
            Ok(Some(
                events
                    .range((session_id.to_owned(), 0)..=(session_id.to_owned(), u64::MAX))
                    .next_back()
                    .map_or(0, |((_, seq), _)| *seq),
            ))
        }

        fn load_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
            Ok(self.0.records.lock().unwrap().values().cloned().collect())
        }
    }

    /// A store on a fresh fake database, with the session `s` created.
    fn session_store(options: StoreOptions) -> (Arc<FakeDb>, BatchedStore) {
        let db = Arc::new(FakeDb::default());
        let store = BatchedStore::start(
            "test-writer",
            Box::new(FakeReader(db.clone())),
            Box::new(FakeWriter(db.clone())),
            options,
            Logs::default(),
            Box::new(crate::store::MemoryStore::new()),
        )
        .unwrap();
        store.create(&record("s")).unwrap();
        (db, store)
    }

    fn record(id: &str) -> SessionRecord {
        SessionRecord::new(id, "mock", serde_json::json!({}), "", 1)
    }

    /// Waits (up to 5 s, else panics with `why`) until the store's queue shows room.
    fn wait_for_room(room: &mut watch::Receiver<bool>, why: &str) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(5), room.wait_for(|r| *r))
                .await
                .expect(why)
                .unwrap();
        });
    }

    fn drafts(n: usize) -> Vec<EventDraft> {
        (0..n)
            .map(|i| {
                EventDraft::synthetic(EventData::Error(ErrorData {
                    message: i.to_string(),
                    code: None,
                    details: None,
                }))
            })
            .collect()
    }

    fn session_ended() -> EventDraft {
        EventDraft::synthetic(EventData::SessionEnded(SessionEndedData {
            reason: SessionEndReason::Completed,
            terminated_by: TerminatedBy::Agent,
            message: None,
            exit_code: None,
            stderr: None,
            cost: Cost::default(),
        }))
    }

    fn tail_len(store: &BatchedStore, id: &str) -> usize {
        let log = store.log(id).unwrap();
        let tail = log.tail();
        (tail.last() + 1 - tail.first()) as usize
    }

    #[test]
    fn the_tail_stays_small_and_empties_once_the_session_ends() {
        let options = StoreOptions {
            tail_events: 32,
            ..StoreOptions::default()
        };
        let (db, store) = session_store(options);
        for _ in 0..100 {
            store
                .append("s", &mut drafts(10), "t".into(), None)
                .unwrap();
        }
        store.flush().unwrap();
        // The capacity, and up to as much again of the last commit (for readers behind).
        let len = tail_len(&store, "s");
        assert!((32..=64).contains(&len), "{len} events in the tail");
        assert_eq!(db.events.lock().unwrap().len(), 1000);
        let all = store.read("s", 0, 2000).unwrap();
        assert_eq!(all.len(), 1000);
        assert!(all.iter().zip(1..).all(|(e, n)| e.sequence == n));
        store
            .append("s", &mut vec![session_ended()], "t".into(), None)
            .unwrap();
        assert_eq!(tail_len(&store, "s"), 0, "an ended session keeps nothing");
        assert_eq!(store.read("s", 990, 100).unwrap().len(), 11);
    }

    /// Waits (up to 5 s, else panics) until the store's health is `healthy`.
    fn wait_health(store: &BatchedStore, healthy: bool) -> Option<Arc<str>> {
        let mut health = store.health().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let seen = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                health.wait_for(|h| h.is_none() == healthy),
            )
            .await
            .expect("the store's health changes in time")
            .unwrap();
            seen.clone()
        })
    }

    fn stored_sequences(db: &FakeDb, id: &str) -> Vec<u64> {
        let events = db.events.lock().unwrap();
        events
            .keys()
            .filter(|(s, _)| s == id)
            .map(|(_, seq)| *seq)
            .collect()
    }

    #[test]
    fn a_failing_database_degrades_the_store_which_recovers_without_a_gap() {
        let options = StoreOptions {
            visible_after_commit: true,
            ..StoreOptions::default()
        };
        let (db, store) = session_store(options);
        assert_eq!(store.health().unwrap().borrow().clone(), None);
        store.append("s", &mut drafts(3), "t".into(), None).unwrap();
        store.flush().unwrap();
        db.broken.store(true, Ordering::SeqCst);
        // Ordinary events are accepted before the failure is known …
        store.append("s", &mut drafts(2), "t".into(), None).unwrap();
        // … flush reports it once the retries are spent, and the store is degraded.
        let error = store.flush().unwrap_err();
        assert!(
            matches!(&error, StoreError::Unavailable(why) if why.contains("disk on fire")),
            "{error:?}"
        );
        let why = wait_health(&store, false).unwrap();
        assert!(why.contains("disk on fire"), "{why}");
        // While degraded, appends and creates are refused at once …
        let refused = store.append("s", &mut drafts(1), "t".into(), None);
        assert!(
            matches!(refused, Err(StoreError::Unavailable(_))),
            "{refused:?}"
        );
        assert!(matches!(
            store.create(&record("t")),
            Err(StoreError::Unavailable(_))
        ));
        // … session records are kept aside …
        let mut r = record("s");
        r.turns = 7;
        store.put_session(&r).unwrap();
        // … and readers saw nothing that was not committed.
        assert_eq!(stored_sequences(&db, "s"), vec![1, 2, 3]);
        assert_eq!(store.read("s", 0, 10).unwrap().len(), 3);
        assert_eq!(store.last_sequence("s").unwrap(), 3);

        // The database works again: the store probes, writes the kept record, recovers.
        db.broken.store(false, Ordering::SeqCst);
        wait_health(&store, true);
        assert_eq!(db.records.lock().unwrap()["s"].turns, 7);
        // The appender hears once that its last events were lost; then appends follow the
        // last committed event: no gap, no duplicate.
        let lost = store.append("s", &mut drafts(2), "t".into(), None);
        assert!(
            matches!(&lost, Err(StoreError::Unavailable(why)) if why.contains("lost")),
            "{lost:?}"
        );
        assert_eq!(
            store.append("s", &mut drafts(2), "t".into(), None).unwrap(),
            5
        );
        store.flush().unwrap();
        assert_eq!(stored_sequences(&db, "s"), vec![1, 2, 3, 4, 5]);
        let read: Vec<u64> = store
            .read("s", 0, 10)
            .unwrap()
            .iter()
            .map(|e| e.sequence)
            .collect();
        assert_eq!(read, vec![1, 2, 3, 4, 5]);
        assert!(store.create(&record("t")).is_ok());
    }

    #[test]
    fn events_stamped_before_a_failure_are_never_written_after_it() {
        let (db, store) = session_store(StoreOptions::default());
        store.append("s", &mut drafts(2), "t".into(), None).unwrap();
        store.flush().unwrap();
        // Hold the writer inside a commit, queue events behind it, then fail that commit.
        let gate = db.gate.lock().unwrap();
        store.append("s", &mut drafts(1), "t".into(), None).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        store.append("s", &mut drafts(1), "t".into(), None).unwrap();
        db.broken.store(true, Ordering::SeqCst);
        drop(gate);
        wait_health(&store, false);
        db.broken.store(false, Ordering::SeqCst);
        wait_health(&store, true);
        assert!(store.append("s", &mut drafts(1), "t".into(), None).is_err());
        assert_eq!(
            store.append("s", &mut drafts(1), "t".into(), None).unwrap(),
            3
        );
        store.flush().unwrap();
        assert_eq!(stored_sequences(&db, "s"), vec![1, 2, 3]);
    }

    #[test]
    fn an_ending_event_is_not_visible_when_its_commit_fails() {
        let (db, store) = session_store(StoreOptions::default());
        store.append("s", &mut drafts(2), "t".into(), None).unwrap();
        db.broken.store(true, Ordering::SeqCst);
        assert!(store
            .append("s", &mut vec![session_ended()], "t".into(), None)
            .is_err());
        assert_eq!(store.last_sequence("s").unwrap(), 2);
        assert_eq!(store.read("s", 0, 10).unwrap().len(), 2);
    }

    #[test]
    fn a_trickle_of_appends_is_committed_in_few_transactions() {
        let (db, store) = session_store(StoreOptions::default());
        let before = db.commits.load(Ordering::SeqCst);
        let start = std::time::Instant::now();
        for _ in 0..40 {
            store.append("s", &mut drafts(1), "t".into(), None).unwrap();
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        let elapsed_ms = start.elapsed().as_millis() as usize;
        let commits = db.commits.load(Ordering::SeqCst) - before;
        store.flush().unwrap();
        assert_eq!(db.events.lock().unwrap().len(), 40);
        // At most one commit a millisecond (plus the first), not one per append.
        assert!(
            commits <= elapsed_ms + 2,
            "{commits} commits for 40 appends in {elapsed_ms} ms"
        );
    }

    #[test]
    fn a_writer_that_panicked_fails_appends_instead_of_hanging_them() {
        let options = StoreOptions {
            max_pending_events: 4,
            ..StoreOptions::default()
        };
        let (db, store) = session_store(options);
        db.panics.store(true, Ordering::SeqCst);
        // Queued (3 of 4: no room), then the writer panics on them and never releases them.
        store.append("s", &mut drafts(3), "t".into(), None).unwrap();
        let mut room = store.room().unwrap();
        wait_for_room(&mut room, "room is shown once the writer is gone");
        // Appends fail at once, even past the queue's cap, instead of waiting forever.
        for batch in [vec![session_ended()], drafts(4)] {
            let error = store
                .append("s", &mut batch.clone(), "t".into(), None)
                .unwrap_err();
            assert!(error.to_string().contains("stopped"), "{error}");
        }
    }

    #[test]
    fn room_says_when_an_append_would_wait() {
        let options = StoreOptions {
            max_pending_events: 16,
            ..StoreOptions::default()
        };
        let (db, store) = session_store(options);
        let mut room = store.room().expect("a durable store bounds its queue");
        assert!(*room.borrow_and_update());
        let gate = db.gate.lock().unwrap();
        // The writer is held up: the queue fills past three quarters.
        for _ in 0..7 {
            store.append("s", &mut drafts(2), "t".into(), None).unwrap();
        }
        assert!(!*room.borrow_and_update(), "no room with 14 of 16 queued");
        drop(gate);
        wait_for_room(&mut room, "room once the writer drains");
        store.flush().unwrap();
        assert_eq!(db.events.lock().unwrap().len(), 14);
    }

    #[test]
    fn appends_wait_when_the_writer_falls_behind() {
        let options = StoreOptions {
            tail_events: 8,
            max_pending_events: 16,
            ..StoreOptions::default()
        };
        let (db, store) = session_store(options);
        for _ in 0..200 {
            store.append("s", &mut drafts(7), "t".into(), None).unwrap();
            let pending =
                store.log("s").unwrap().tail().last() as usize - db.events.lock().unwrap().len();
            // At most the queue's cap plus the batch being committed.
            assert!(pending <= 16 + 7, "{pending} pending");
        }
        store.flush().unwrap();
        assert_eq!(db.events.lock().unwrap().len(), 1400);
    }
}
