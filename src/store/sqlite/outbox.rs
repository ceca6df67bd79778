//! The SQLite store's outbox (`store/outbox.rs`): the table `webhook_outbox`, filled by the
//! writer in the transaction of the events, claimed and settled here on a connection of its
//! own. SQLite serialises writers across processes, so a claim (one `UPDATE … RETURNING`) is
//! atomic however many processes share the file.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{params, Connection, Transaction};

use super::{open_connection, sql_error};
use crate::store::outbox::{
    Claim, NewOutboxRow, Outbox, OutboxQuery, OutboxRoutes, OutboxRow, Settlement, PENDING,
};
use crate::store::row::{to_i64, to_u64};
use crate::store::StoreError;
use crate::sync::LockExt;

/// Version 4 → 5: the outbox. `AUTOINCREMENT`: an id is never reused, so a listing's pages
/// stay put.
pub(super) const MIGRATE_V5: &str = "
CREATE TABLE webhook_outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id      TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    sequence        INTEGER NOT NULL,
    event_type      TEXT NOT NULL,
    endpoint        TEXT NOT NULL,
    session_scoped  INTEGER NOT NULL,
    payload         TEXT NOT NULL,
    status          TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    lease_owner     TEXT,
    lease_until     INTEGER,
    last_status     INTEGER,
    last_error      TEXT
);
CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_outbox_by_session ON webhook_outbox (session_id, id);
";

const COLUMNS: &str = "id, webhook_id, session_id, sequence, event_type, endpoint, \
    session_scoped, payload, status, attempts, created_at, next_attempt_at, last_status, last_error";

/// Inserts the rows of a batch (on the writer's transaction).
pub(super) fn insert(tx: &Transaction<'_>, rows: &[NewOutboxRow]) -> Result<(), StoreError> {
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO webhook_outbox (webhook_id, session_id, sequence, event_type, endpoint, \
             session_scoped, payload, status, created_at, next_attempt_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', ?8, ?8)",
        )
        .map_err(sql_error)?;
    for row in rows {
        insert
            .execute(params![
                row.webhook_id,
                row.session_id,
                to_i64(row.sequence, "sequence")?,
                row.event_type,
                &*row.endpoint,
                row.session_scoped,
                row.payload,
                to_i64(row.created_at, "created_at")?,
            ])
            .map_err(sql_error)?;
    }
    Ok(())
}

/// The outbox's connection.
pub(super) struct SqliteOutbox {
    routes: Arc<OutboxRoutes>,
    conn: Mutex<Connection>,
}

impl SqliteOutbox {
    /// Opens its connection to a database the writer set up.
    pub(super) fn open(path: &Path) -> Result<Self, StoreError> {
        Ok(SqliteOutbox {
            routes: Arc::default(),
            conn: Mutex::new(open_connection(path)?),
        })
    }

    fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn.lock_unpoisoned();
        f(&mut conn).map_err(sql_error)
    }
}

fn row_from(r: &rusqlite::Row<'_>) -> rusqlite::Result<OutboxRow> {
    let int = |i: usize| -> rusqlite::Result<u64> {
        let v: i64 = r.get(i)?;
        to_u64(v, "outbox column").map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Integer, e.into())
        })
    };
    Ok(OutboxRow {
        id: r.get(0)?,
        webhook_id: r.get(1)?,
        session_id: r.get(2)?,
        sequence: int(3)?,
        event_type: r.get(4)?,
        endpoint: r.get(5)?,
        session_scoped: r.get(6)?,
        payload: r.get(7)?,
        status: r.get(8)?,
        attempts: u32::try_from(int(9)?).unwrap_or(u32::MAX),
        created_at: int(10)?,
        next_attempt_at: int(11)?,
        last_status: r
            .get::<_, Option<i64>>(12)?
            .and_then(|s| u16::try_from(s).ok()),
        last_error: r.get(13)?,
    })
}

fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl Outbox for SqliteOutbox {
    fn routes(&self) -> &Arc<OutboxRoutes> {
        &self.routes
    }

    fn claim(&self, claim: &Claim<'_>) -> Result<Vec<OutboxRow>, StoreError> {
        let endpoints = serde_json::to_string(claim.endpoints).unwrap_or_else(|_| "[]".into());
        let until = claim.now.saturating_add(claim.lease.as_millis() as u64);
        let mut rows = self.with_conn(|conn| {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let rows = {
                let mut update = tx.prepare_cached(&format!(
                    "UPDATE webhook_outbox SET lease_owner = ?1, lease_until = ?2 WHERE id IN \
                     (SELECT id FROM webhook_outbox WHERE status = 'pending' \
                      AND next_attempt_at <= ?3 AND (lease_until IS NULL OR lease_until <= ?3) \
                      AND (CASE WHEN session_scoped THEN ?4 \
                           ELSE endpoint IN (SELECT value FROM json_each(?5)) END) \
                      ORDER BY next_attempt_at, id LIMIT ?6) \
                     RETURNING {COLUMNS}"
                ))?;
                let rows = update
                    .query_map(
                        params![
                            claim.owner,
                            ms(until),
                            ms(claim.now),
                            claim.session_scoped,
                            endpoints,
                            claim.limit as i64
                        ],
                        row_from,
                    )?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                rows
            };
            tx.commit()?;
            Ok(rows)
        })?;
        rows.sort_by_key(|r| (r.next_attempt_at, r.id));
        Ok(rows)
    }

    fn settle(
        &self,
        id: i64,
        owner: &str,
        now: u64,
        settlement: &Settlement,
    ) -> Result<bool, StoreError> {
        let (at, status, error) = settlement.columns(now);
        let changed = self.with_conn(|conn| {
            conn.prepare_cached(
                "UPDATE webhook_outbox SET status = ?3, attempts = attempts + 1, \
                 next_attempt_at = ?4, last_status = ?5, last_error = ?6, \
                 lease_owner = NULL, lease_until = NULL \
                 WHERE id = ?1 AND lease_owner = ?2",
            )?
            .execute(params![
                id,
                owner,
                settlement.status(),
                ms(at),
                status,
                error
            ])
        })?;
        Ok(changed == 1)
    }

    fn release(&self, owner: &str) -> Result<u64, StoreError> {
        let changed = self.with_conn(|conn| {
            conn.execute(
                "UPDATE webhook_outbox SET lease_owner = NULL, lease_until = NULL \
                 WHERE lease_owner = ?1",
                [owner],
            )
        })?;
        Ok(changed as u64)
    }

    fn lease_owners(&self) -> Result<Vec<String>, StoreError> {
        self.with_conn(|conn| {
            let mut select = conn.prepare_cached(
                "SELECT DISTINCT lease_owner FROM webhook_outbox WHERE lease_owner IS NOT NULL",
            )?;
            let owners = select
                .query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(owners)
        })
    }

    fn list(&self, query: &OutboxQuery) -> Result<Vec<OutboxRow>, StoreError> {
        self.with_conn(|conn| {
            let mut select = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM webhook_outbox WHERE id < ?1 \
                 AND (?2 IS NULL OR status = ?2) AND (?3 IS NULL OR session_id = ?3) \
                 ORDER BY id DESC LIMIT ?4"
            ))?;
            let rows = select
                .query_map(
                    params![
                        query.before.unwrap_or(i64::MAX),
                        query.status,
                        query.session_id,
                        query.limit as i64
                    ],
                    row_from,
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }

    fn pending(&self) -> Result<u64, StoreError> {
        let n: i64 = self.with_conn(|conn| {
            conn.query_row(
                "SELECT count(*) FROM webhook_outbox WHERE status = ?1",
                [PENDING],
                |r| r.get(0),
            )
        })?;
        Ok(n.max(0) as u64)
    }
}
