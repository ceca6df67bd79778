//! The Postgres store's outbox (`store/outbox.rs`): the table `webhook_outbox`, filled by the
//! writer in the transaction of the events, claimed and settled here on a connection of its
//! own (on a thread of its own: the sync client must not run on a runtime thread).
//!
//! A fleet of daemons on one database claims with `FOR UPDATE SKIP LOCKED` and a lease, so
//! each row is claimed by one daemon at a time and delivered once by the fleet (again only if
//! its claimer died before settling it). Ids come from a sequence and are not committed in
//! order by concurrent writers: nothing here assumes they are (no "last id" cursor).

use std::sync::Arc;

use postgres::Transaction;

use super::outbox::{
    Claim, NewOutboxRow, Outbox, OutboxQuery, OutboxRoutes, OutboxRow, Settlement, PENDING,
};
use super::postgres::{backend, text, PgReaders};
use super::row::{to_i64, to_u64};
use super::StoreError;

/// Version 3 → 4: the outbox.
pub(super) const MIGRATE_V4: &str = "
CREATE TABLE webhook_outbox (
    id              BIGSERIAL PRIMARY KEY,
    webhook_id      TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    sequence        BIGINT NOT NULL,
    event_type      TEXT NOT NULL,
    endpoint        TEXT NOT NULL,
    session_scoped  BOOLEAN NOT NULL,
    payload         TEXT NOT NULL,
    status          TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    created_at      BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    lease_owner     TEXT,
    lease_until     BIGINT,
    last_status     INTEGER,
    last_error      TEXT
);
CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_outbox_by_session ON webhook_outbox (session_id, id);
";

const INSERT: &str = "INSERT INTO webhook_outbox (webhook_id, session_id, sequence, event_type, \
    endpoint, session_scoped, payload, status, created_at, next_attempt_at) \
    SELECT w, s, q, t, e, x, p, 'pending', c, c FROM UNNEST($1::text[], $2::text[], \
    $3::bigint[], $4::text[], $5::text[], $6::bool[], $7::text[], $8::bigint[]) \
    AS u(w, s, q, t, e, x, p, c)";

/// Inserts the rows of a batch (on the writer's transaction).
pub(super) fn insert(tx: &mut Transaction<'_>, rows: &[NewOutboxRow]) -> Result<(), StoreError> {
    let mut ids = Vec::with_capacity(rows.len());
    let mut sessions = Vec::with_capacity(rows.len());
    let mut sequences = Vec::with_capacity(rows.len());
    let mut types = Vec::with_capacity(rows.len());
    let mut endpoints = Vec::with_capacity(rows.len());
    let mut scoped = Vec::with_capacity(rows.len());
    let mut payloads = Vec::with_capacity(rows.len());
    let mut created = Vec::with_capacity(rows.len());
    for row in rows {
        ids.push(row.webhook_id.as_str());
        sessions.push(text(&row.session_id).into_owned());
        sequences.push(to_i64(row.sequence, "sequence")?);
        types.push(row.event_type);
        endpoints.push(&*row.endpoint);
        scoped.push(row.session_scoped);
        payloads.push(text(&row.payload).into_owned());
        created.push(to_i64(row.created_at, "created_at")?);
    }
    tx.execute(
        INSERT,
        &[
            &ids, &sessions, &sequences, &types, &endpoints, &scoped, &payloads, &created,
        ],
    )
    .map_err(backend)?;
    Ok(())
}

/// The outbox's connection (one thread).
pub(super) struct PgOutbox {
    routes: Arc<OutboxRoutes>,
    conn: PgReaders,
}

impl PgOutbox {
    pub(super) fn start(config: &postgres::Config, target: &str) -> Result<Self, StoreError> {
        Ok(PgOutbox {
            routes: Arc::default(),
            conn: PgReaders::start_named(config, target, 1, "outbox")?,
        })
    }
}

fn row_from(r: &postgres::Row) -> Result<OutboxRow, StoreError> {
    let int = |i: usize| -> Result<u64, StoreError> {
        to_u64(r.try_get::<_, i64>(i).map_err(backend)?, "outbox column")
    };
    Ok(OutboxRow {
        id: r.try_get(0).map_err(backend)?,
        webhook_id: r.try_get(1).map_err(backend)?,
        session_id: r.try_get(2).map_err(backend)?,
        sequence: int(3)?,
        event_type: r.try_get(4).map_err(backend)?,
        endpoint: r.try_get(5).map_err(backend)?,
        session_scoped: r.try_get(6).map_err(backend)?,
        payload: r.try_get(7).map_err(backend)?,
        status: r.try_get(8).map_err(backend)?,
        attempts: u32::try_from(r.try_get::<_, i32>(9).map_err(backend)?).unwrap_or(0),
        created_at: int(10)?,
        next_attempt_at: int(11)?,
        last_status: r
            .try_get::<_, Option<i32>>(12)
            .map_err(backend)?
            .and_then(|s| u16::try_from(s).ok()),
        last_error: r.try_get(13).map_err(backend)?,
    })
}

fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl Outbox for PgOutbox {
    fn routes(&self) -> &Arc<OutboxRoutes> {
        &self.routes
    }

    fn claim(&self, claim: &Claim<'_>) -> Result<Vec<OutboxRow>, StoreError> {
        let owner = claim.owner.to_owned();
        let until = ms(claim.now.saturating_add(claim.lease.as_millis() as u64));
        let now = ms(claim.now);
        let scoped = claim.session_scoped;
        let endpoints = claim.endpoints.to_vec();
        let limit = claim.limit as i64;
        let mut rows = self.conn.call(move |conn| {
            let (client, update) = conn.prepared(
                "UPDATE webhook_outbox SET lease_owner = $1, lease_until = $2 WHERE id IN \
                 (SELECT id FROM webhook_outbox WHERE status = 'pending' \
                  AND next_attempt_at <= $3 AND (lease_until IS NULL OR lease_until <= $3) \
                  AND (CASE WHEN session_scoped THEN $4 ELSE endpoint = ANY($5) END) \
                  ORDER BY next_attempt_at, id LIMIT $6 FOR UPDATE SKIP LOCKED) \
                 RETURNING id, webhook_id, session_id, sequence, event_type, endpoint, \
                 session_scoped, payload, status, attempts, created_at, next_attempt_at, \
                 last_status, last_error",
            )?;
            let rows = client
                .query(
                    &update,
                    &[&owner, &until, &now, &scoped, &endpoints, &limit],
                )
                .map_err(backend)?;
            rows.iter().map(row_from).collect::<Result<Vec<_>, _>>()
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
        let owner = owner.to_owned();
        let new_status = settlement.status();
        let at = ms(at);
        let status = status.map(i32::from);
        let error = error.map(|e| text(e).into_owned());
        let changed = self.conn.call(move |conn| {
            let (client, update) = conn.prepared(
                "UPDATE webhook_outbox SET status = $3, attempts = attempts + 1, \
                 next_attempt_at = $4, last_status = $5, last_error = $6, \
                 lease_owner = NULL, lease_until = NULL WHERE id = $1 AND lease_owner = $2",
            )?;
            client
                .execute(&update, &[&id, &owner, &new_status, &at, &status, &error])
                .map_err(backend)
        })?;
        Ok(changed == 1)
    }

    fn release(&self, owner: &str) -> Result<u64, StoreError> {
        let owner = owner.to_owned();
        self.conn.call(move |conn| {
            let (client, update) = conn.prepared(
                "UPDATE webhook_outbox SET lease_owner = NULL, lease_until = NULL \
                 WHERE lease_owner = $1",
            )?;
            client.execute(&update, &[&owner]).map_err(backend)
        })
    }

    fn lease_owners(&self) -> Result<Vec<String>, StoreError> {
        self.conn.call(|conn| {
            let (client, select) = conn.prepared(
                "SELECT DISTINCT lease_owner FROM webhook_outbox WHERE lease_owner IS NOT NULL",
            )?;
            let rows = client.query(&select, &[]).map_err(backend)?;
            rows.iter()
                .map(|r| r.try_get::<_, String>(0).map_err(backend))
                .collect()
        })
    }

    fn list(&self, query: &OutboxQuery) -> Result<Vec<OutboxRow>, StoreError> {
        let before = query.before.unwrap_or(i64::MAX);
        let status = query.status.clone();
        let session = query.session_id.clone();
        let limit = query.limit as i64;
        self.conn.call(move |conn| {
            let (client, select) = conn.prepared(
                "SELECT id, webhook_id, session_id, sequence, event_type, endpoint, \
                 session_scoped, payload, status, attempts, created_at, next_attempt_at, \
                 last_status, last_error FROM webhook_outbox WHERE id < $1 \
                 AND ($2::text IS NULL OR status = $2) AND ($3::text IS NULL OR session_id = $3) \
                 ORDER BY id DESC LIMIT $4",
            )?;
            let rows = client
                .query(&select, &[&before, &status, &session, &limit])
                .map_err(backend)?;
            rows.iter().map(row_from).collect()
        })
    }

    fn pending(&self) -> Result<u64, StoreError> {
        self.conn.call(|conn| {
            let (client, select) =
                conn.prepared("SELECT count(*) FROM webhook_outbox WHERE status = $1")?;
            let n: i64 = client
                .query_one(&select, &[&PENDING])
                .and_then(|r| r.try_get(0))
                .map_err(backend)?;
            to_u64(n, "count")
        })
    }
}
