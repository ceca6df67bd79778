//! The default durable store: one SQLite database file in WAL mode (`--store sqlite://PATH`,
//! or `<data-dir>/codebuffd.db`).
//!
//! A writer thread owns the one write connection and commits in batches ([`super::writer`]);
//! reads use a small pool of read connections on the caller's thread (WAL lets them run
//! beside the writer). Every commit is durable against a crash of the daemon (the WAL is
//! written before the commit returns). A commit holding `turn.ended`, `session.ended` or a new
//! session is also synced to disk (`synchronous=FULL` for that commit, `NORMAL` otherwise), so
//! it survives a power loss together with everything committed before it; ordinary event
//! batches do not pay an fsync each, nor do the small writes of the other connections (claims,
//! the inbox, webhook deliveries: [`open_connection`]).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

mod checkpoint;
mod chunk;
mod compact;
mod leases;
mod outbox;
mod schema;
mod shared;

use checkpoint::Checkpointer;
use chunk::{encode_chunk, ChunkBuffers, ChunkReader, ChunkRow, Chunks};
use outbox::SqliteOutbox;
use schema::{migrate, migration_lock};

use super::batched::{BatchedStore, DurableStore, Logs, StoreOptions, StoreReader};
use super::row::{decode_settings, running_process, to_i64, to_u64, RecordInts};
use super::writer::{BatchWriter, Write};
use super::{PageRead, SessionRecord, StoreError, StoredEvent};
use crate::sync::LockExt;
use shared::SqliteShared;

/// The page size of a new database.
const PAGE_SIZE: u32 = 16 * 1024;
/// The most bytes of WAL file kept once the WAL starts over (SQLite's `journal_size_limit`):
/// above what a catch-up lets it grow to (`checkpoint`), so a file of that size is reused,
/// never cut and grown again.
const WAL_KEPT: usize = 96 << 20;
/// Read connections kept open between reads.
const IDLE_READERS: usize = 4;
/// How long a connection waits for a lock held by another connection.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) const RECORD_COLUMNS: &str = "session_id, agent, created_at, updated_at, settings, \
    native_session_id, status, ended, end_reason, end_message, cost_credits, turns, \
    event_count, running_pid, running_pgid, running_start_ticks, owner";

/// The SQLite event store: [`SqliteStore::open`] gives the durable store over one SQLite file,
/// which any number of engine processes of this machine may open at once.
pub struct SqliteStore;

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: &Path) -> Result<DurableStore, StoreError> {
        Self::open_with(path, StoreOptions::default())
    }

    /// Opens the database at `path` with explicit tuning.
    pub fn open_with(path: &Path, options: StoreOptions) -> Result<DurableStore, StoreError> {
        let writer = {
            // One process at a time creates or upgrades the schema.
            let _migrating = migration_lock(path)?;
            open_writer(path)?
        };
        let logs: Logs = Default::default();
        let reader = SqliteReader {
            path: path.to_owned(),
            idle: Mutex::new(vec![open_reader(path)?]),
        };
        let outbox = SqliteOutbox::open(path)?;
        let store = BatchedStore::start_with_outbox(
            "codebuffd-sqlite-writer",
            Box::new(reader),
            Box::new(SqliteWriter {
                checkpointer: Checkpointer::spawn(open_checkpointer(path)?)?,
                conn: writer,
                full_sync: true,
                buffers: ChunkBuffers::default(),
            }),
            Some(Box::new(outbox)),
            options,
            logs.clone(),
            Box::new(SqliteShared::open(path, logs)?),
        )?;
        Ok(store)
    }
}

pub(super) fn open_error(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!(
        "cannot open the SQLite database {}: {e}",
        path.display()
    ))
}

pub(super) fn sql_error(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(format!("SQLite: {e}"))
}

/// Opens the write connection: WAL, full sync, schema created or checked.
fn open_writer(path: &Path) -> Result<Connection, StoreError> {
    if path.is_dir() {
        return Err(open_error(path, "it is a directory"));
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| open_error(path, e))?;
    }
    // Transcripts may quote secrets: a new database is readable by its owner only (SQLite
    // gives its -wal and -shm files the same permissions).
    {
        use std::os::unix::fs::OpenOptionsExt;
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(open_error(path, e)),
        }
    }
    let conn = Connection::open(path).map_err(|e| open_error(path, e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| open_error(path, e))?;
    // Before WAL mode, so it takes for a new database (an existing one keeps its own): the
    // writer writes a WAL frame per page, and with 16 KiB pages a flood of events costs a
    // quarter of the writes (measured: about 1 µs less per event than with 4 KiB).
    conn.execute_batch(&format!("PRAGMA page_size={PAGE_SIZE};"))
        .map_err(|e| open_error(path, e))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(|e| open_error(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(open_error(
            path,
            format!("cannot use WAL mode (journal mode is {mode})"),
        ));
    }
    // Checkpoints run on a thread of their own (see `checkpoint`). The writer appends at
    // the end of each session's range: it needs the upper pages of two B-trees cached, not
    // SQLite's default 2 MiB. A WAL that grew large once (a reader held it, or an older
    // build's flood) is cut back to `WAL_KEPT` when it next starts over.
    conn.execute_batch(&format!(
        "PRAGMA synchronous=FULL; PRAGMA wal_autocheckpoint=0; PRAGMA cache_size=-512; \
         PRAGMA journal_size_limit={WAL_KEPT};"
    ))
    .map_err(|e| open_error(path, e))?;
    migrate(&conn, path).map_err(|e| open_error(path, e))?;
    Ok(conn)
}

/// A connection to a database the writer opened (and so set up).
///
/// Such a connection never checkpoints on its own: SQLite's automatic checkpoint would run
/// inside whichever of its small commits (a claim, an inbox request, an outbox mark) finds
/// the WAL past 1,000 pages, which a flood keeps it (a passive checkpoint per claim, measured
/// at 1.5 % of a 20-session flood's CPU); the checkpoint thread does that work. Its commits
/// are not synced one by one (`synchronous=NORMAL`): the WAL is appended to in order, so the
/// writer's next synced commit (every turn's and session's end) or checkpoint makes them
/// durable too, and until then a power cut can only undo them together with the events after
/// them (a claim undone leaves the session with its old owner, whose engine died with the
/// power too and is recovered like any other).
pub(super) fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(|e| open_error(path, e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| open_error(path, e))?;
    conn.execute_batch("PRAGMA wal_autocheckpoint=0; PRAGMA synchronous=NORMAL;")
        .map_err(|e| open_error(path, e))?;
    Ok(conn)
}

/// The checkpoint thread's connection: it copies WAL frames to the database file and reads
/// nothing else, so it needs next to no page cache.
fn open_checkpointer(path: &Path) -> Result<Connection, StoreError> {
    let conn = open_connection(path)?;
    conn.execute_batch("PRAGMA cache_size=-64;")
        .map_err(|e| open_error(path, e))?;
    Ok(conn)
}

fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let conn = open_connection(path)?;
    // Readers mostly read recent chunks once: a small page cache each is enough.
    conn.execute_batch("PRAGMA query_only=ON; PRAGMA cache_size=-256;")
        .map_err(|e| open_error(path, e))?;
    Ok(conn)
}

/// The write connection, owned by the writer thread.
struct SqliteWriter {
    /// First, so it stops before the write connection closes.
    checkpointer: Checkpointer,
    conn: Connection,
    /// Whether the connection is in `synchronous=FULL` now.
    full_sync: bool,
    buffers: ChunkBuffers,
}

impl SqliteWriter {
    /// Syncs the commits that end turns or sessions, or create sessions; not the others.
    fn set_sync(&mut self, batch: &[Write<'_>]) -> Result<(), StoreError> {
        let full = batch.iter().any(|w| match w {
            Write::Create(_) | Write::Delete(_) => true,
            // Outbox rows share their events' fate (a crash of the daemon loses neither).
            Write::Put(_) | Write::Outbox(_) => false,
            Write::Events { events, .. } => events.iter().any(|e| e.ends_something()),
        });
        if full != self.full_sync {
            let pragma = if full {
                "PRAGMA synchronous=FULL;"
            } else {
                "PRAGMA synchronous=NORMAL;"
            };
            self.conn.execute_batch(pragma).map_err(sql_error)?;
            self.full_sync = full;
        }
        Ok(())
    }
}

/// What a degraded store's probe writes: about a batch of events. An empty transaction writes
/// nothing, so it succeeded on a disk still full, and the store said it was healthy while no
/// event could be written.
const PROBE_BYTES: usize = 256 * 1024;

impl BatchWriter for SqliteWriter {
    /// Commits [`PROBE_BYTES`] of real pages (a chunk of no session: the empty session id, an
    /// empty JSON array padded with spaces, invisible to every reader), then removes it.
    fn probe(&mut self) -> Result<(), StoreError> {
        let padding = format!("[{}]", " ".repeat(PROBE_BYTES));
        self.conn
            .execute(
                "INSERT OR REPLACE INTO event_chunks \
                 (session_id, last_sequence, first_sequence, events, raws) \
                 VALUES ('', 0, 0, ?1, NULL)",
                [padding],
            )
            .map_err(sql_error)?;
        // The space is given back; a failure here only leaves the chunk for the next probe.
        if let Err(error) = self
            .conn
            .execute("DELETE FROM event_chunks WHERE session_id = ''", [])
        {
            tracing::debug!(%error, "removing the probe's chunk failed");
        }
        Ok(())
    }

    fn commit(&mut self, batch: &[Write<'_>]) -> Result<Vec<bool>, StoreError> {
        self.checkpointer.catch_up(&self.conn);
        self.set_sync(batch)?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_error)?;
        let mut flags = Vec::with_capacity(batch.len());
        let mut chunks = Chunks::default();
        let mut bytes = 0;
        for write in batch {
            let flag = match write {
                Write::Create(record) => {
                    let mut insert = tx
                        .prepare_cached(&format!(
                            "INSERT INTO sessions ({RECORD_COLUMNS}) VALUES \
                             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17) \
                             ON CONFLICT (session_id) DO NOTHING"
                        ))
                        .map_err(sql_error)?;
                    execute_record(&mut insert, record)? == 1
                }
                Write::Put(record) => {
                    // Not `owner`: it changes only by a claim (`Coordination::claim`); the
                    // record's owner parameter is bound (`?17 = ?17`) and left unused.
                    let mut update = tx
                        .prepare_cached(
                            "UPDATE sessions SET agent = ?2, created_at = ?3, updated_at = ?4, \
                             settings = ?5, native_session_id = ?6, status = ?7, ended = ?8, \
                             end_reason = ?9, end_message = ?10, cost_credits = ?11, turns = ?12, \
                             event_count = ?13, running_pid = ?14, \
                             running_pgid = ?15, running_start_ticks = ?16 \
                             WHERE session_id = ?1 AND ?17 = ?17",
                        )
                        .map_err(sql_error)?;
                    execute_record(&mut update, record)?;
                    true
                }
                Write::Events { session_id, events } => {
                    chunks.add(session_id, events);
                    true
                }
                Write::Outbox(rows) => {
                    outbox::insert(&tx, rows)?;
                    true
                }
                Write::Delete(session_id) => {
                    chunks.forget(session_id);
                    tx.execute(
                        "DELETE FROM event_chunks WHERE session_id = ?1",
                        params![session_id],
                    )
                    .map_err(sql_error)?;
                    tx.execute(
                        "DELETE FROM inbox WHERE session_id = ?1",
                        params![session_id],
                    )
                    .map_err(sql_error)?;
                    tx.execute(
                        "DELETE FROM sessions WHERE session_id = ?1",
                        params![session_id],
                    )
                    .map_err(sql_error)?
                        == 1
                }
            };
            flags.push(flag);
        }
        if !chunks.is_empty() {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO event_chunks \
                     (session_id, last_sequence, first_sequence, events, raws, native) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(sql_error)?;
            chunks.write(|session_id, events| {
                let chunk = encode_chunk(session_id, events, &mut self.buffers);
                bytes += chunk.events.len() + chunk.raws.map_or(0, str::len);
                insert
                    .execute(params![
                        session_id,
                        to_i64(chunk.last, "sequence")?,
                        to_i64(chunk.first, "sequence")?,
                        chunk.events,
                        chunk.raws,
                        chunk.native,
                    ])
                    .map_err(sql_error)?;
                Ok(())
            })?;
        }
        tx.commit().map_err(sql_error)?;
        // A record written counts as a page.
        let records = batch
            .iter()
            .filter(|w| !matches!(w, Write::Events { .. }))
            .count();
        self.checkpointer
            .committed(bytes + records * PAGE_SIZE as usize);
        Ok(flags)
    }
}

/// Runs an insert or update of a session record whose parameters are the record's columns
/// in `RECORD_COLUMNS` order.
fn execute_record(
    statement: &mut rusqlite::CachedStatement<'_>,
    record: &SessionRecord,
) -> Result<usize, StoreError> {
    let ints = RecordInts::new(record)?;
    let settings = record.settings.to_string();
    statement
        .execute(params![
            record.session_id,
            record.agent,
            ints.created_at,
            ints.updated_at,
            settings,
            record.native_session_id,
            record.status,
            record.ended,
            record.end_reason,
            record.end_message,
            record.cost_credits,
            ints.turns,
            ints.event_count,
            ints.running_pid,
            ints.running_pgid,
            ints.running_start_ticks,
            record.owner,
        ])
        .map_err(sql_error)
}

/// Read connections, opened as needed and kept for reuse.
struct SqliteReader {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl SqliteReader {
    fn with_conn<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let idle = self.idle.lock_unpoisoned().pop();
        let conn = match idle {
            Some(conn) => conn,
            None => open_reader(&self.path)?,
        };
        let result = f(&conn);
        let mut idle = self.idle.lock_unpoisoned();
        if idle.len() < IDLE_READERS {
            idle.push(conn);
        }
        result
    }
}

impl StoreReader for SqliteReader {
    fn read_events(
        &self,
        session_id: &str,
        after: u64,
        upto: u64,
        how: PageRead,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let after_i = i64::try_from(after).unwrap_or(i64::MAX);
        // Without the raw lines SQLite does not read them (a third of a flood's chunk bytes).
        let sql = if how.raw {
            "SELECT first_sequence, last_sequence, events, raws, native FROM event_chunks \
             WHERE session_id = ?1 AND last_sequence > ?2 ORDER BY last_sequence"
        } else {
            "SELECT first_sequence, last_sequence, events, NULL, native FROM event_chunks \
             WHERE session_id = ?1 AND last_sequence > ?2 ORDER BY last_sequence"
        };
        self.with_conn(|conn| {
            let mut select = conn.prepare_cached(sql).map_err(sql_error)?;
            let mut rows = select
                .query(params![session_id, after_i])
                .map_err(sql_error)?;
            let mut events = Vec::new();
            let mut chunks = ChunkReader::new(session_id);
            while let Some(row) = rows.next().map_err(sql_error)? {
                let first = to_u64(row.get(0).map_err(sql_error)?, "sequence")?;
                if first > upto {
                    break;
                }
                let last = to_u64(row.get(1).map_err(sql_error)?, "sequence")?;
                if last > upto && !how.exact && !events.is_empty() {
                    // The page ends with the chunk before: the next read starts with this one
                    // instead of reading it twice (a reader far behind reads whole chunks).
                    break;
                }
                let column = |i: usize| -> Result<Option<&str>, StoreError> {
                    let value = row.get_ref(i).map_err(sql_error)?;
                    value
                        .as_str_or_null()
                        .map_err(|e| StoreError::Backend(format!("SQLite: {e}")))
                };
                let chunk = ChunkRow {
                    first,
                    last,
                    events: column(2)?.unwrap_or(""),
                    raws: column(3)?,
                    native: column(4)?,
                };
                chunks.decode(&chunk, after, upto, &mut events)?;
            }
            Ok(events)
        })
    }

    fn session_tip(&self, session_id: &str) -> Result<Option<u64>, StoreError> {
        self.with_conn(|conn| {
            let tip: Option<Option<i64>> = conn
                .prepare_cached(
                    "SELECT (SELECT MAX(last_sequence) FROM event_chunks WHERE session_id = ?1) \
                     FROM sessions WHERE session_id = ?1",
                )
                .and_then(|mut s| s.query_row([session_id], |r| r.get(0)).optional())
                .map_err(sql_error)?;
            tip.map(|last| to_u64(last.unwrap_or(0), "sequence"))
                .transpose()
        })
    }

    fn load_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.with_conn(|conn| {
            let mut select = conn
                .prepare(&format!(
                    "SELECT {RECORD_COLUMNS} FROM sessions ORDER BY created_at, session_id"
                ))
                .map_err(sql_error)?;
            let mut rows = select.query([]).map_err(sql_error)?;
            let mut records = Vec::new();
            while let Some(r) = rows.next().map_err(sql_error)? {
                records.push(record_from_row(r).map_err(|e| match e {
                    RowError::Sql(e) => sql_error(e),
                    RowError::Store(e) => e,
                })?);
            }
            Ok(records)
        })
    }
}

pub(super) enum RowError {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for RowError {
    fn from(e: rusqlite::Error) -> Self {
        RowError::Sql(e)
    }
}

impl From<StoreError> for RowError {
    fn from(e: StoreError) -> Self {
        RowError::Store(e)
    }
}

pub(super) fn record_from_row(r: &rusqlite::Row<'_>) -> Result<SessionRecord, RowError> {
    let settings: String = r.get(4)?;
    Ok(SessionRecord {
        session_id: r.get(0)?,
        agent: r.get(1)?,
        created_at: to_u64(r.get(2)?, "created_at")?,
        updated_at: to_u64(r.get(3)?, "updated_at")?,
        settings: decode_settings(&settings)?,
        native_session_id: r.get(5)?,
        status: r.get(6)?,
        ended: r.get(7)?,
        end_reason: r.get(8)?,
        end_message: r.get(9)?,
        cost_credits: r.get(10)?,
        turns: to_u64(r.get(11)?, "turns")?,
        event_count: to_u64(r.get(12)?, "event_count")?,
        running: running_process(r.get(13)?, r.get(14)?, r.get(15)?)?,
        owner: r.get(16)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EventStore;
    use crate::universal::{
        Cost, EventData, EventDraft, SessionEndReason, SessionEndedData, TerminatedBy,
    };

    #[tokio::test]
    async fn an_ending_batch_is_handed_back_to_await_and_visible_once_committed() {
        let dir = std::env::temp_dir().join(format!(
            "codebuffd-sqlite-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let store = SqliteStore::open_with(
            &dir.join("t.db"),
            StoreOptions {
                visible_after_commit: true,
                ..StoreOptions::default()
            },
        )
        .unwrap();
        store
            .create(&SessionRecord::new(
                "s",
                "mock",
                serde_json::json!({}),
                "",
                0,
            ))
            .unwrap();
        let mut drafts = vec![EventDraft::synthetic(EventData::SessionEnded(Box::new(
            SessionEndedData {
                reason: SessionEndReason::Terminated,
                terminated_by: TerminatedBy::Daemon,
                message: None,
                exit_code: None,
                stderr: None,
                cost: Cost::default(),
            },
        )))];
        let appended = store
            .append_deferred("s", &mut drafts, "t".into(), None)
            .unwrap();
        assert_eq!(appended.last, 1);
        // The SQLite store defers the commit wait to the caller (no runtime thread parked).
        let durable = appended
            .durable
            .expect("an ending batch is awaited by its appender");
        durable.wait().await.unwrap();
        assert_eq!(store.last_sequence("s").unwrap(), 1);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
