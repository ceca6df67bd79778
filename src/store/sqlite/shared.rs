//! [`Coordination`] on one SQLite file shared by the engine processes of one machine:
//! leases by `flock` ([`super::leases`]), owners, the inbox and the lists in the database, and a
//! watcher thread that notices other processes' commits.
//!
//! The watcher reads `PRAGMA data_version` every [`WATCH_EVERY`] on a connection of its own: it
//! changes whenever another connection (another process, or this one's writer) commits, and
//! costs no table read. While this process knows of no other engine it looks only every
//! [`ALONE_EVERY`] (nothing here waits for another process's commits then: an idle daemon
//! should not wake 250 times a second), and is woken as soon as it learns of one. Then it moves [`Coordination::changes`] and, while other engines are
//! alive, raises the visible watermark of each followed log this process does not append to
//! (one indexed read of its tip), so followers here see what an engine there appended within
//! a few milliseconds. Small writes (claims, the inbox) go through a connection of their own,
//! not the batching writer: their callers wait for the answer (off the async runtime).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::watch;

use super::leases::{HeldLease, LeaseDir};
use super::{open_connection, record_from_row, sql_error, RowError, RECORD_COLUMNS};
use crate::store::batched::Logs;
use crate::store::coordination::{
    Coordination, EngineEntry, InboxRequest, InboxState, Lease, SessionQuery,
};
use crate::store::row::to_u64;
use crate::store::{SessionRecord, StoreError};
use crate::sync::LockExt;

/// How often the watcher looks for other processes' commits.
const WATCH_EVERY: Duration = Duration::from_millis(4);

/// How often it looks while no other engine is known to be alive.
const ALONE_EVERY: Duration = Duration::from_secs(1);

/// The shared side of a SQLite store.
pub(crate) struct SqliteShared {
    conn: Mutex<Connection>,
    leases: LeaseDir,
    changes: watch::Sender<u64>,
    /// True while another engine is alive (refreshed by [`Coordination::engines`] and
    /// [`Coordination::engine_alive`]): the watcher refreshes foreign tips, and looks every
    /// [`WATCH_EVERY`], only then.
    others: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    watcher: Option<std::thread::JoinHandle<()>>,
}

impl SqliteShared {
    /// Opens the shared side of the database at `path`; `logs` are the store's session logs.
    pub fn open(path: &Path, logs: Logs) -> Result<SqliteShared, StoreError> {
        let leases = LeaseDir::beside(path).map_err(|e| {
            StoreError::Backend(format!("cannot make the engines' lock directory: {e}"))
        })?;
        let conn = open_connection(path)?;
        let watch_conn = open_connection(path)?;
        let (changes, _) = watch::channel(0);
        let others = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let changes = changes.clone();
            let others = others.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("codebuffd-sqlite-watch".into())
                .spawn(move || watch_commits(watch_conn, logs, changes, others, stop))
                .map_err(|e| StoreError::Backend(format!("cannot start the watcher: {e}")))?
        };
        Ok(SqliteShared {
            conn: Mutex::new(conn),
            leases,
            changes,
            others,
            stop,
            watcher: Some(watcher),
        })
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, rusqlite::Error>,
    ) -> Result<T, StoreError> {
        let conn = self.conn.lock_unpoisoned();
        f(&conn).map_err(sql_error)
    }

    /// Records whether another engine is alive; the watcher wakes up at once when one appears.
    fn set_others(&self, others: bool) {
        let was = self.others.swap(others, Ordering::Relaxed);
        if others && !was {
            if let Some(watcher) = &self.watcher {
                watcher.thread().unpark();
            }
        }
    }

    /// Whether the engine holds its lease; a dead one's row is removed.
    fn alive_or_forget(&self, engine_id: &str) -> bool {
        let alive = self.leases.alive(engine_id).unwrap_or(false);
        if !alive {
            self.forget_engine(engine_id);
        }
        alive
    }

    fn forget_engine(&self, engine_id: &str) {
        let _ = self.with(|c| c.execute("DELETE FROM engines WHERE engine_id = ?1", [engine_id]));
    }
}

/// The engines registered in the file, oldest first, alive or not (their leases tell).
pub(super) fn registered_engines(conn: &Connection) -> Result<Vec<EngineEntry>, rusqlite::Error> {
    let mut s = conn.prepare_cached(
        "SELECT engine_id, instance_id, pid, command, url, started_at FROM engines \
         ORDER BY started_at",
    )?;
    let rows = s.query_map([], |r| {
        Ok(EngineEntry {
            engine_id: r.get(0)?,
            instance_id: r.get(1)?,
            pid: r.get(2)?,
            command: r.get(3)?,
            url: r.get(4)?,
            started_at: u64::try_from(r.get::<_, i64>(5)?).unwrap_or(0),
        })
    })?;
    rows.collect()
}

impl Drop for SqliteShared {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(watcher) = self.watcher.take() {
            watcher.thread().unpark();
            let _ = watcher.join();
        }
    }
}

/// The watcher thread (see the module docs).
fn watch_commits(
    conn: Connection,
    logs: Logs,
    changes: watch::Sender<u64>,
    others: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) {
    let version = |c: &Connection| -> Option<i64> {
        c.query_row("PRAGMA data_version", [], |r| r.get(0)).ok()
    };
    let mut seen = version(&conn);
    while !stop.load(Ordering::SeqCst) {
        std::thread::park_timeout(match others.load(Ordering::Relaxed) {
            true => WATCH_EVERY,
            false => ALONE_EVERY,
        });
        let now = version(&conn);
        if now == seen {
            continue;
        }
        seen = now;
        if others.load(Ordering::Relaxed) {
            for log in crate::store::batched::foreign_followed(&logs) {
                let tip: Result<Option<i64>, _> = conn
                    .prepare_cached(
                        "SELECT MAX(last_sequence) FROM event_chunks WHERE session_id = ?1",
                    )
                    .and_then(|mut s| s.query_row([&*log.session_id], |r| r.get(0)));
                if let Ok(Some(tip)) = tip {
                    log.show_foreign(u64::try_from(tip).unwrap_or(0));
                }
            }
        }
        changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// An engine's registration in a SQLite store: its lock file and its row.
struct SqliteLease {
    _held: HeldLease,
    engine_id: String,
    path: PathBuf,
}

impl Lease for SqliteLease {
    fn announce_url(&self, url: &str) -> Result<(), StoreError> {
        let conn = open_connection(&self.path)?;
        conn.execute(
            "UPDATE engines SET url = ?2 WHERE engine_id = ?1",
            params![self.engine_id, url],
        )
        .map_err(sql_error)?;
        Ok(())
    }
}

impl Drop for SqliteLease {
    fn drop(&mut self) {
        if let Ok(conn) = open_connection(&self.path) {
            let _ = conn.execute(
                "DELETE FROM engines WHERE engine_id = ?1",
                [&self.engine_id],
            );
        }
    }
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl SqliteShared {
    /// The database path (for connections a lease opens at its end).
    fn path(&self) -> Result<PathBuf, StoreError> {
        let conn = self.conn.lock_unpoisoned();
        conn.path()
            .map(PathBuf::from)
            .ok_or_else(|| StoreError::Backend("the database has no path".into()))
    }
}

impl Coordination for SqliteShared {
    fn register(&self, engine: &EngineEntry) -> Result<Box<dyn Lease>, StoreError> {
        let held = self
            .leases
            .hold(&engine.engine_id)
            .map_err(|e| StoreError::Backend(format!("cannot take the engine's lease: {e}")))?;
        self.with(|c| {
            c.execute(
                "INSERT OR REPLACE INTO engines \
                 (engine_id, instance_id, pid, command, url, started_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    engine.engine_id,
                    engine.instance_id,
                    engine.pid,
                    engine.command,
                    engine.url,
                    to_i64(engine.started_at),
                ],
            )
        })?;
        Ok(Box::new(SqliteLease {
            _held: held,
            engine_id: engine.engine_id.clone(),
            path: self.path()?,
        }))
    }

    fn engine_alive(&self, engine_id: &str) -> Result<bool, StoreError> {
        let alive = self.alive_or_forget(engine_id);
        if alive {
            // Perhaps this process's own engine: then the next `engines` says "alone" again.
            self.set_others(true);
        }
        Ok(alive)
    }

    fn engines(&self) -> Result<Vec<EngineEntry>, StoreError> {
        let rows = self.with(registered_engines)?;
        let mut alive = Vec::new();
        for engine in rows {
            if self.alive_or_forget(&engine.engine_id) {
                alive.push(engine);
            }
        }
        self.set_others(alive.len() > 1);
        Ok(alive)
    }

    fn claim(&self, session_id: &str, from: &str, to: &str) -> Result<bool, StoreError> {
        let changed = self.with(|c| {
            c.prepare_cached("UPDATE sessions SET owner = ?3 WHERE session_id = ?1 AND owner = ?2")?
                .execute(params![session_id, from, to])
        })?;
        Ok(changed == 1)
    }

    fn owned_sessions(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.with(|c| {
            let mut s =
                c.prepare_cached("SELECT session_id, owner FROM sessions WHERE owner <> ''")?;
            let rows = s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })
    }

    fn load_session(&self, session_id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let conn = self.conn.lock_unpoisoned();
        let mut s = conn
            .prepare_cached(&format!(
                "SELECT {RECORD_COLUMNS} FROM sessions WHERE session_id = ?1"
            ))
            .map_err(sql_error)?;
        let mut rows = s.query([session_id]).map_err(sql_error)?;
        match rows.next().map_err(sql_error)? {
            Some(row) => record_from_row(row).map(Some).map_err(|e| match e {
                RowError::Sql(e) => sql_error(e),
                RowError::Store(e) => e,
            }),
            None => Ok(None),
        }
    }

    fn query_sessions(&self, q: &SessionQuery) -> Result<Vec<SessionRecord>, StoreError> {
        let mut sql = format!("SELECT {RECORD_COLUMNS} FROM sessions WHERE 1 = 1");
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        if let Some((at, id)) = &q.before {
            args.push(to_i64(*at).into());
            args.push(id.clone().into());
            sql.push_str(&format!(
                " AND (created_at < ?{a} OR (created_at = ?{a} AND session_id < ?{b}))",
                a = args.len() - 1,
                b = args.len()
            ));
        }
        if !q.statuses.is_empty() {
            let marks: Vec<String> = q
                .statuses
                .iter()
                .map(|status| {
                    args.push(status.clone().into());
                    format!("?{}", args.len())
                })
                .collect();
            sql.push_str(&format!(" AND status IN ({})", marks.join(", ")));
        }
        if let Some(owner) = &q.owner {
            args.push(owner.clone().into());
            sql.push_str(&format!(" AND owner = ?{}", args.len()));
        }
        args.push(to_i64(q.limit as u64).into());
        sql.push_str(&format!(
            " ORDER BY created_at DESC, session_id DESC LIMIT ?{}",
            args.len()
        ));
        let conn = self.conn.lock_unpoisoned();
        let mut s = conn.prepare_cached(&sql).map_err(sql_error)?;
        let mut rows = s
            .query(rusqlite::params_from_iter(args))
            .map_err(sql_error)?;
        let mut records = Vec::new();
        while let Some(row) = rows.next().map_err(sql_error)? {
            records.push(record_from_row(row).map_err(|e| match e {
                RowError::Sql(e) => sql_error(e),
                RowError::Store(e) => e,
            })?);
        }
        Ok(records)
    }

    fn inbox_send(&self, session_id: &str, body: &serde_json::Value) -> Result<u64, StoreError> {
        let id = self.with(|c| {
            c.execute(
                "INSERT INTO inbox (session_id, body, state, created_at) \
                 VALUES (?1, ?2, 'pending', ?3)",
                params![session_id, body.to_string(), now_ms()],
            )?;
            Ok(c.last_insert_rowid())
        })?;
        to_u64(id, "inbox id")
    }

    fn inbox_take(&self, owner: &str) -> Result<Vec<InboxRequest>, StoreError> {
        let rows: Vec<(i64, String, String)> = self.with(|c| {
            let mut s = c.prepare_cached(
                "UPDATE inbox SET state = 'taken' WHERE state = 'pending' AND session_id IN \
                 (SELECT session_id FROM sessions WHERE owner = ?1) \
                 RETURNING id, session_id, body",
            )?;
            let rows = s.query_map([owner], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            rows.collect()
        })?;
        let mut taken = rows
            .into_iter()
            .map(|(id, session_id, body)| {
                Ok(InboxRequest {
                    id: to_u64(id, "inbox id")?,
                    session_id,
                    body: serde_json::from_str(&body).map_err(|e| {
                        StoreError::Backend(format!("an inbox request is not JSON: {e}"))
                    })?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        taken.sort_by_key(|r| r.id);
        Ok(taken)
    }

    fn inbox_answer(&self, id: u64, reply: &serde_json::Value) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "UPDATE inbox SET state = 'done', reply = ?2 WHERE id = ?1",
                params![to_i64(id), reply.to_string()],
            )
        })?;
        Ok(())
    }

    fn inbox_state(&self, id: u64) -> Result<InboxState, StoreError> {
        let row: Option<(String, Option<String>)> = self.with(|c| {
            c.prepare_cached("SELECT state, reply FROM inbox WHERE id = ?1")?
                .query_row([to_i64(id)], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })?;
        Ok(match row {
            None => InboxState::Gone,
            Some((state, reply)) => match state.as_str() {
                "pending" => InboxState::Pending,
                "taken" => InboxState::Taken,
                "withdrawn" => InboxState::Withdrawn,
                _ => InboxState::Done(
                    reply
                        .and_then(|r| serde_json::from_str(&r).ok())
                        .unwrap_or(serde_json::Value::Null),
                ),
            },
        })
    }

    fn inbox_withdraw(&self, id: u64) -> Result<bool, StoreError> {
        let changed = self.with(|c| {
            c.execute(
                "UPDATE inbox SET state = 'withdrawn' WHERE id = ?1 AND state = 'pending'",
                [to_i64(id)],
            )
        })?;
        Ok(changed == 1)
    }

    fn inbox_forget(&self, id: u64) -> Result<(), StoreError> {
        self.with(|c| c.execute("DELETE FROM inbox WHERE id = ?1", [to_i64(id)]))?;
        Ok(())
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
