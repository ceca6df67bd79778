//! The core of the durable stores (SQLite, Postgres): per-session tails in memory, a writer
//! thread that commits in batches, and reads that fall back to the database for older events.
//!
//! The durability rule: an append returns without waiting for the disk, unless its batch holds
//! an event a session's status follows (a session's or turn's start or end, a question or
//! permission request or its resolution: [`StoredEvent::awaits_commit`]); then it waits for
//! the writer's commit (synced for the ends) before raising the session's *visible*
//! watermark. Readers (`read`, `last_sequence`,
//! `subscribe`) never look past that watermark, and a session's appends are serialized, so
//! nothing appended after such an event becomes visible before it. `flush` waits until
//! everything queued is committed.
//!
//! With [`StoreOptions::visible_after_commit`] every event waits for its commit to become
//! visible (the writer raises the watermark), but `append` still waits only for those.
//!
//! Memory is bounded: each session keeps a small tail (only committed events leave it, none
//! once the session has ended), and the writer's queue is capped (`append` waits when full;
//! `room` lets an appender on an async runtime wait without blocking its thread).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use super::coordination::Coordination;
use super::outbox::{Outbox, OutboxRoutes};
use super::tail::SessionLog;
use super::writer::{BatchWriter, EventsReply, Op, Writer};
use super::{Appended, Durable, EventStore, PageRead, SessionRecord, StoreError, StoredEvent};
use crate::sync::RwLockExt;
use crate::universal::EventDraft;

mod coordination;
#[cfg(test)]
mod tests;

/// The read side of a database, callable from any thread (including async runtime threads).
pub(crate) trait StoreReader: Send + Sync + 'static {
    /// A session's events with `after < sequence <= upto`, in order, read as `how` asks
    /// ([`PageRead`]: without the raw lines; unless `exact`, a database that keeps events in
    /// chunks may stop before `upto` where one ends, never with no event).
    fn read_events(
        &self,
        session_id: &str,
        after: u64,
        upto: u64,
        how: PageRead,
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
        self.read_page(session_id, after, limit, PageRead::EXACT)
    }

    /// From the tail while the events are in it, else from the database, as `how` asks.
    fn read_page(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
        how: PageRead,
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
                let first = tail.first_with(how.raw);
                if cursor + 1 >= first && cursor < tail.last() {
                    let before = out.len();
                    tail.copy_from(cursor + 1, (end - cursor) as usize, how.raw, &mut out);
                    if let Some(last) = out[before..].last() {
                        cursor = last.sequence;
                    }
                    continue;
                }
                if cursor + 1 >= first {
                    // Past the tail: appended by another engine, only in the database.
                    end
                } else {
                    // Everything before the tail (or before its events that kept their raw
                    // lines) is committed.
                    (first - 1).min(end)
                }
            };
            let events = self.reader.read_events(session_id, cursor, upto, how)?;
            let from = cursor;
            for (stored, expected) in events.into_iter().zip(cursor + 1..) {
                if stored.sequence != expected {
                    break;
                }
                cursor = expected;
                out.push(stored);
            }
            if cursor == from || (cursor < upto && how.exact) {
                return Err(StoreError::Backend(format!(
                    "the log of session `{session_id}` is missing event {}",
                    cursor + 1
                )));
            }
            if cursor < upto {
                // The database's page ended where a chunk ends (or before a missing event,
                // which the next read reports).
                break;
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
