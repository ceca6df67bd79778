//! The shared durable store: the same tables as SQLite in a Postgres database
//! (`--store postgres://USER@HOST/DB`), so many daemons (one per sandbox) keep their sessions
//! in one place that outlives the sandboxes and can be queried centrally.
//!
//! Session ids are the key: daemons sharing a database must use ids that are unique across
//! all of them (the daemon's generated ids are UUIDs; a client-chosen id already used by
//! another daemon is refused as taken). `load_sessions` returns every session in the
//! database, whichever daemon wrote it; each record names its owner (the daemon's instance
//! id) and a daemon restores only its own and unowned ones.
//!
//! The sync `postgres` client blocks on a runtime of its own and must not run on an async
//! runtime's thread, so every database call runs on threads this store owns: the writer
//! thread ([`super::writer`]) and a small pool of reader threads that callers hand their
//! queries to (`postgres_conn.rs`). Connections are plain TCP (no TLS): use a loopback or private network.

use std::collections::HashMap;
use std::time::Duration;

use postgres::{Client, Statement};

use super::batched::{BatchedStore, DurableStore, Logs, StoreOptions, StoreReader};
pub(super) use super::postgres_conn::{PgConn, PgReaders};
use super::postgres_outbox::{self, PgOutbox};
use super::postgres_shared::{PgShared, CHANNEL};
use super::row::{decode_settings, running_process, to_u64, EventRow, RecordInts};
use super::writer::{BatchWriter, Write};
use super::{redact_spec, PageRead, SessionRecord, StoreError, StoredEvent};

/// The schema version this build writes (table `codebuffd_schema`): 1 the first schema, 2 added
/// `sessions.owner`, 3 dropped `sessions.next_item` (written, never read), 4 added the webhook
/// outbox (`postgres_outbox.rs`), 5 the engines of a fleet and the inbox
/// (`postgres_shared.rs`).
const SCHEMA_VERSION: i32 = 5;
/// Reader threads (each with its own connection).
const READERS: usize = 2;
/// How long connecting may take unless the URL says otherwise.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The advisory lock that serializes schema creation between daemons starting together.
const SCHEMA_LOCK: i64 = 0x636f_6465_6275_6666; // "codebuff"

const SCHEMA_V1: &str = "
CREATE TABLE sessions (
    session_id          TEXT PRIMARY KEY,
    agent               TEXT NOT NULL,
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL,
    settings            JSON NOT NULL,
    native_session_id   TEXT,
    status              TEXT NOT NULL,
    ended               BOOLEAN NOT NULL,
    end_reason          TEXT,
    end_message         TEXT,
    cost_credits        DOUBLE PRECISION NOT NULL,
    turns               BIGINT NOT NULL,
    event_count         BIGINT NOT NULL,
    next_item           BIGINT NOT NULL,
    running_pid         BIGINT,
    running_pgid        BIGINT,
    running_start_ticks BIGINT
);
CREATE INDEX sessions_by_age ON sessions (created_at, session_id);
CREATE TABLE events (
    session_id  TEXT NOT NULL,
    sequence    BIGINT NOT NULL,
    type        TEXT NOT NULL,
    event       JSON NOT NULL,
    raw         JSON,
    raw_is_text BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (session_id, sequence)
);
";

/// Version 1 → 2: the instance id of the daemon that owns a session (empty: written before).
const MIGRATE_V2: &str = "ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT ''";

/// Version 2 → 3: `next_item` goes (a restored session's ids go on after its log's last).
const MIGRATE_V3: &str = "ALTER TABLE sessions DROP COLUMN next_item";

/// Version 4 → 5: the engines of the fleet (leases by heartbeat), the inbox of requests for
/// sessions' owners, and an index of owned sessions (`owner` names an engine, `''` when idle).
const MIGRATE_V5: &str = "
CREATE TABLE engines (
    engine_id    TEXT PRIMARY KEY,
    instance_id  TEXT NOT NULL,
    pid          BIGINT NOT NULL,
    command      TEXT NOT NULL,
    url          TEXT,
    started_at   BIGINT NOT NULL,
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE inbox (
    id         BIGSERIAL PRIMARY KEY,
    session_id TEXT NOT NULL,
    body       TEXT NOT NULL,
    state      TEXT NOT NULL,
    reply      TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX inbox_by_state ON inbox (state, session_id);
CREATE INDEX sessions_by_owner ON sessions (owner) WHERE owner <> '';
";

const INSERT_SESSION: &str = "INSERT INTO sessions (session_id, agent, created_at, updated_at, \
    settings, native_session_id, status, ended, end_reason, end_message, cost_credits, turns, \
    event_count, running_pid, running_pgid, running_start_ticks, owner) VALUES \
    ($1, $2, $3, $4, $5::text::json, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) \
    ON CONFLICT (session_id) DO NOTHING";

const UPDATE_SESSION: &str = "UPDATE sessions SET agent = $2, created_at = $3, updated_at = $4, \
    settings = $5::text::json, native_session_id = $6, status = $7, ended = $8, end_reason = $9, \
    end_message = $10, cost_credits = $11, turns = $12, event_count = $13, \
    running_pid = $14, running_pgid = $15, running_start_ticks = $16 \
    WHERE session_id = $1 AND $17::text IS NOT NULL";

const INSERT_EVENTS: &str = "INSERT INTO events (session_id, sequence, type, event, raw, \
    raw_is_text) SELECT s, q, t, e::json, r::json, x FROM \
    UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bool[]) \
    AS u(s, q, t, e, r, x)";

const SELECT_EVENTS: &str = "SELECT sequence, event::text, raw::text FROM events \
    WHERE session_id = $1 AND sequence > $2 AND sequence <= $3 ORDER BY sequence";

/// [`SELECT_EVENTS`] for a reader that does not serve the raw lines.
const SELECT_EVENTS_WITHOUT_RAW: &str = "SELECT sequence, event::text, NULL::text FROM events \
    WHERE session_id = $1 AND sequence > $2 AND sequence <= $3 ORDER BY sequence";

const SELECT_TIP: &str = "SELECT (SELECT max(sequence) FROM events WHERE session_id = $1) \
    FROM sessions WHERE session_id = $1";

/// A session record's columns, in `record_from_row`'s order.
pub(super) const SELECT_RECORD: &str = "SELECT session_id, agent, created_at, updated_at, \
    settings::text, native_session_id, status, ended, end_reason, end_message, cost_credits, \
    turns, event_count, running_pid, running_pgid, running_start_ticks, owner FROM sessions";

const SELECT_SESSIONS: &str = "SELECT session_id, agent, created_at, updated_at, \
    settings::text, native_session_id, status, ended, end_reason, end_message, cost_credits, \
    turns, event_count, running_pid, running_pgid, running_start_ticks, owner \
    FROM sessions ORDER BY created_at, session_id";

/// The Postgres event store: [`PostgresStore::open`] gives the durable store over one Postgres
/// database, which a fleet of daemons may share.
pub struct PostgresStore;

impl PostgresStore {
    /// Connects to the database at `url` (creating the schema if it has none).
    pub fn open(url: &str) -> Result<DurableStore, StoreError> {
        Self::open_with(url, StoreOptions::default())
    }

    /// Connects to the database at `url` with explicit tuning.
    pub fn open_with(url: &str, options: StoreOptions) -> Result<DurableStore, StoreError> {
        let target = redact_spec(url);
        let mut config: postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Backend(format!("invalid Postgres URL `{target}`: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("codebuffd");
        }
        let mut conn = PgConn::new(config.clone(), target.clone());
        // Connect and migrate on a thread of our own: the caller may be on a runtime thread.
        let conn = std::thread::scope(|s| {
            s.spawn(|| {
                migrate(conn.client()?).map_err(|e| {
                    StoreError::Backend(format!(
                        "cannot set up the Postgres database {target}: {e}"
                    ))
                })?;
                Ok::<_, StoreError>(conn)
            })
            .join()
            .unwrap_or_else(|_| {
                Err(StoreError::Backend(
                    "connecting to Postgres failed unexpectedly".into(),
                ))
            })
        })?;
        let readers = PgReaders::start_named(&config, &target, READERS, "reader")?;
        let outbox = PgOutbox::start(&config, &target)?;
        let logs: Logs = Default::default();
        let shared = PgShared::open(config, target, options.lease, logs.clone())?;
        let store = BatchedStore::start_with_outbox(
            "codebuffd-postgres-writer",
            Box::new(readers),
            Box::new(PgWriter { conn }),
            Some(Box::new(outbox)),
            options,
            logs,
            Box::new(shared),
        )?;
        Ok(store)
    }
}

/// A postgres error with the server's message when it sent one.
pub(super) fn pg_error(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {} ({})", db.severity(), db.message(), db.code().code()),
        None => match std::error::Error::source(e) {
            Some(source) => format!("{e}: {source}"),
            None => e.to_string(),
        },
    }
}

pub(super) fn backend(e: postgres::Error) -> StoreError {
    StoreError::Backend(format!("Postgres: {}", pg_error(&e)))
}

/// Creates the schema in an empty database, upgrades an older one, or checks the version.
fn migrate(client: &mut Client) -> Result<(), String> {
    let mut tx = client.transaction().map_err(|e| pg_error(&e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .map_err(|e| pg_error(&e))?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS codebuffd_schema (version INTEGER NOT NULL)")
        .map_err(|e| pg_error(&e))?;
    let version: Option<i32> = tx
        .query_one("SELECT max(version) FROM codebuffd_schema", &[])
        .and_then(|row| row.try_get(0))
        .map_err(|e| pg_error(&e))?;
    let mut upgraded = match version {
        None => {
            tx.batch_execute(SCHEMA_V1).map_err(|e| pg_error(&e))?;
            1
        }
        Some(newer) if newer > SCHEMA_VERSION => {
            return Err(format!(
            "its schema version {newer} is newer than this codebuffd supports ({SCHEMA_VERSION})"
        ))
        }
        Some(current) => current,
    };
    if upgraded == 1 {
        tx.batch_execute(MIGRATE_V2).map_err(|e| pg_error(&e))?;
        upgraded = 2;
    }
    if upgraded == 2 {
        tx.batch_execute(MIGRATE_V3).map_err(|e| pg_error(&e))?;
        upgraded = 3;
    }
    if upgraded == 3 {
        tx.batch_execute(postgres_outbox::MIGRATE_V4)
            .map_err(|e| pg_error(&e))?;
        upgraded = 4;
    }
    if upgraded == 4 {
        tx.batch_execute(MIGRATE_V5).map_err(|e| pg_error(&e))?;
        upgraded = 5;
    }
    if upgraded != SCHEMA_VERSION {
        return Err(format!("its schema version {upgraded} is unknown"));
    }
    if version != Some(upgraded) {
        tx.execute(
            "INSERT INTO codebuffd_schema (version) VALUES ($1)",
            &[&upgraded],
        )
        .map_err(|e| pg_error(&e))?;
    }
    tx.commit().map_err(|e| pg_error(&e))
}

/// Postgres rejects NUL in text: such characters (only ever in agent-provided messages) are
/// replaced.
pub(super) fn text(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains('\0') {
        s.replace('\0', "\u{fffd}").into()
    } else {
        s.into()
    }
}

fn opt_text(s: &Option<String>) -> Option<std::borrow::Cow<'_, str>> {
    s.as_deref().map(text)
}

/// The write connection, owned by the writer thread.
struct PgWriter {
    conn: PgConn,
}

impl PgWriter {
    fn commit_once(&mut self, batch: &[Write<'_>]) -> Result<Vec<bool>, StoreError> {
        let (_, insert_session) = self.conn.prepared(INSERT_SESSION)?;
        let (_, update_session) = self.conn.prepared(UPDATE_SESSION)?;
        let (client, insert_events) = self.conn.prepared(INSERT_EVENTS)?;
        let mut tx = client.transaction().map_err(backend)?;
        let mut flags = Vec::with_capacity(batch.len());
        let mut rows = EventColumns::default();
        for write in batch {
            let flag = match write {
                Write::Create(record) => execute_record(&mut tx, &insert_session, record)? == 1,
                Write::Put(record) => {
                    execute_record(&mut tx, &update_session, record)?;
                    true
                }
                Write::Events { session_id, events } => {
                    for stored in events.iter() {
                        rows.push(session_id, stored)?;
                    }
                    true
                }
                Write::Outbox(new) => {
                    postgres_outbox::insert(&mut tx, new)?;
                    true
                }
                Write::Delete(session_id) => {
                    rows.forget(session_id);
                    tx.execute("DELETE FROM events WHERE session_id = $1", &[session_id])
                        .map_err(backend)?;
                    tx.execute("DELETE FROM inbox WHERE session_id = $1", &[session_id])
                        .map_err(backend)?;
                    tx.execute("DELETE FROM sessions WHERE session_id = $1", &[session_id])
                        .map_err(backend)?
                        == 1
                }
            };
            flags.push(flag);
        }
        // Every listener learns of each session's new tip when the commit lands.
        let mut tips: HashMap<&str, i64> = HashMap::new();
        for (session_id, sequence) in rows.session_id.iter().zip(&rows.sequence) {
            let tip = tips.entry(session_id.as_str()).or_default();
            *tip = (*tip).max(*sequence);
        }
        for (session_id, tip) in &tips {
            tx.execute(
                "SELECT pg_notify($1, $2)",
                &[&CHANNEL, &format!("{tip}:{session_id}")],
            )
            .map_err(backend)?;
        }
        if !rows.sequence.is_empty() {
            tx.execute(
                &insert_events,
                &[
                    &rows.session_id,
                    &rows.sequence,
                    &rows.event_type,
                    &rows.event,
                    &rows.raw,
                    &rows.raw_is_text,
                ],
            )
            .map_err(backend)?;
        }
        tx.commit().map_err(backend)?;
        Ok(flags)
    }
}

/// What a degraded store's probe writes: 256 KiB of incompressible text (8,192 MD5 digests in
/// hex, which Postgres stores as they are), in an `events` row of no session (the empty session
/// id) that the same transaction deletes again, so no reader ever sees it. An empty transaction
/// writes nothing (Postgres does not even log its commit): it succeeded on a full disk, and the
/// store said it was healthy while no event could be written. This one has to extend the table
/// and write its WAL, like a batch of events.
const PROBE: &str = "INSERT INTO events (session_id, sequence, type, event) \
    SELECT '', pg_backend_pid(), 'probe', to_json(string_agg(md5(random()::text), '')) \
    FROM generate_series(1, 8192)";

impl BatchWriter for PgWriter {
    fn commit(&mut self, batch: &[Write<'_>]) -> Result<Vec<bool>, StoreError> {
        self.commit_once(batch)
    }

    /// Commits [`PROBE`]: real data through the table the events go to.
    fn probe(&mut self) -> Result<(), StoreError> {
        let client = self.conn.client()?;
        let mut tx = client.transaction().map_err(backend)?;
        tx.execute(PROBE, &[]).map_err(backend)?;
        tx.execute(
            "DELETE FROM events WHERE session_id = '' AND sequence = pg_backend_pid()",
            &[],
        )
        .map_err(backend)?;
        tx.commit().map_err(backend)
    }
}

/// A batch's events as column arrays, inserted with one `UNNEST`.
#[derive(Default)]
struct EventColumns {
    session_id: Vec<String>,
    sequence: Vec<i64>,
    event_type: Vec<&'static str>,
    event: Vec<String>,
    raw: Vec<Option<String>>,
    raw_is_text: Vec<bool>,
}

impl EventColumns {
    /// Drops the rows gathered for a session that the batch deletes.
    fn forget(&mut self, session_id: &str) {
        let keep: Vec<bool> = self.session_id.iter().map(|s| s != session_id).collect();
        retain_by(&mut self.session_id, &keep);
        retain_by(&mut self.sequence, &keep);
        retain_by(&mut self.event_type, &keep);
        retain_by(&mut self.event, &keep);
        retain_by(&mut self.raw, &keep);
        retain_by(&mut self.raw_is_text, &keep);
    }

    fn push(&mut self, session_id: &str, stored: &StoredEvent) -> Result<(), StoreError> {
        let row = EventRow::new(stored)?;
        self.session_id.push(text(session_id).into_owned());
        self.sequence.push(row.sequence);
        self.event_type.push(row.event_type);
        self.event.push(row.json.to_owned());
        self.raw.push(row.raw.map(|r| r.into_owned()));
        self.raw_is_text.push(row.raw_is_text);
        Ok(())
    }
}

/// Keeps the elements of `column` whose flag in `keep` is true.
fn retain_by<T>(column: &mut Vec<T>, keep: &[bool]) {
    let mut flags = keep.iter();
    column.retain(|_| flags.next().copied().unwrap_or(true));
}

fn execute_record(
    tx: &mut postgres::Transaction<'_>,
    statement: &Statement,
    record: &SessionRecord,
) -> Result<u64, StoreError> {
    let ints = RecordInts::new(record)?;
    let settings = record.settings.to_string();
    tx.execute(
        statement,
        &[
            &text(&record.session_id),
            &text(&record.agent),
            &ints.created_at,
            &ints.updated_at,
            &settings,
            &opt_text(&record.native_session_id),
            &text(&record.status),
            &record.ended,
            &opt_text(&record.end_reason),
            &opt_text(&record.end_message),
            &record.cost_credits,
            &ints.turns,
            &ints.event_count,
            &ints.running_pid,
            &ints.running_pgid,
            &ints.running_start_ticks,
            &text(&record.owner),
        ],
    )
    .map_err(backend)
}

impl StoreReader for PgReaders {
    fn read_events(
        &self,
        session_id: &str,
        after: u64,
        upto: u64,
        how: PageRead,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let session_id = session_id.to_owned();
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let upto = i64::try_from(upto).unwrap_or(i64::MAX);
        // Rows hold one event each: every page is exact.
        let sql = if how.raw {
            SELECT_EVENTS
        } else {
            SELECT_EVENTS_WITHOUT_RAW
        };
        self.call(move |conn| {
            let (client, select) = conn.prepared(sql)?;
            let rows = client
                .query(&select, &[&session_id, &after, &upto])
                .map_err(backend)?;
            rows.into_iter()
                .map(|row| {
                    let sequence: i64 = row.try_get(0).map_err(backend)?;
                    let json: &str = row.try_get(1).map_err(backend)?;
                    let raw: Option<&str> = row.try_get(2).map_err(backend)?;
                    StoredEvent::from_stored(to_u64(sequence, "sequence")?, json, raw)
                })
                .collect()
        })
    }

    fn session_tip(&self, session_id: &str) -> Result<Option<u64>, StoreError> {
        let session_id = session_id.to_owned();
        self.call(move |conn| {
            let (client, select) = conn.prepared(SELECT_TIP)?;
            let row = client.query_opt(&select, &[&session_id]).map_err(backend)?;
            match row {
                None => Ok(None),
                Some(row) => {
                    let last: Option<i64> = row.try_get(0).map_err(backend)?;
                    to_u64(last.unwrap_or(0), "sequence").map(Some)
                }
            }
        })
    }

    fn load_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.call(|conn| {
            let (client, select) = conn.prepared(SELECT_SESSIONS)?;
            let rows = client.query(&select, &[]).map_err(backend)?;
            rows.iter().map(record_from_row).collect()
        })
    }
}

pub(super) fn record_from_row(r: &postgres::Row) -> Result<SessionRecord, StoreError> {
    let settings: String = r.try_get(4).map_err(backend)?;
    Ok(SessionRecord {
        session_id: r.try_get(0).map_err(backend)?,
        agent: r.try_get(1).map_err(backend)?,
        created_at: to_u64(r.try_get(2).map_err(backend)?, "created_at")?,
        updated_at: to_u64(r.try_get(3).map_err(backend)?, "updated_at")?,
        settings: decode_settings(&settings)?,
        native_session_id: r.try_get(5).map_err(backend)?,
        status: r.try_get(6).map_err(backend)?,
        ended: r.try_get(7).map_err(backend)?,
        end_reason: r.try_get(8).map_err(backend)?,
        end_message: r.try_get(9).map_err(backend)?,
        cost_credits: r.try_get(10).map_err(backend)?,
        turns: to_u64(r.try_get(11).map_err(backend)?, "turns")?,
        event_count: to_u64(r.try_get(12).map_err(backend)?, "event_count")?,
        running: running_process(
            r.try_get(13).map_err(backend)?,
            r.try_get(14).map_err(backend)?,
            r.try_get(15).map_err(backend)?,
        )?,
        owner: r.try_get(16).map_err(backend)?,
    })
}
