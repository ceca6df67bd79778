//! The SQLite database's schema: its versions, creating it in a new file and upgrading an
//! older one, one process at a time (`<db>.migrate.lock`: engines sharing the file may start
//! together).

use std::path::Path;

use rusqlite::Connection;

use super::{open_error, outbox};
use crate::store::StoreError;

/// The schema version this build writes (`PRAGMA user_version`): 1 the first schema, 2 added
/// `sessions.owner`, 3 stores events in chunks (with a view `events` of one row per event),
/// 4 dropped `sessions.next_item` (written, never read: ids go on after the log's last), 5
/// added the webhook outbox (`outbox.rs`), 6 the engines sharing the file and the inbox
/// (`shared.rs`), 7 compact event lines in chunks (`compact.rs`).
const SCHEMA_VERSION: i64 = 7;
const SCHEMA_V1: &str = "
CREATE TABLE sessions (
    session_id          TEXT PRIMARY KEY NOT NULL,
    agent               TEXT NOT NULL,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    settings            TEXT NOT NULL,
    native_session_id   TEXT,
    status              TEXT NOT NULL,
    ended               INTEGER NOT NULL,
    end_reason          TEXT,
    end_message         TEXT,
    cost_credits        REAL NOT NULL,
    turns               INTEGER NOT NULL,
    event_count         INTEGER NOT NULL,
    next_item           INTEGER NOT NULL,
    running_pid         INTEGER,
    running_pgid        INTEGER,
    running_start_ticks INTEGER
);
CREATE INDEX sessions_by_age ON sessions (created_at, session_id);
CREATE TABLE events (
    session_id  TEXT NOT NULL,
    sequence    INTEGER NOT NULL,
    type        TEXT NOT NULL,
    event       TEXT NOT NULL,
    raw         TEXT,
    raw_is_text INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, sequence)
);
";

/// Version 1 → 2: the instance id of the daemon that owns a session (empty: written before).
const MIGRATE_V2: &str = "ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT '';";

/// Version 2 → 3: events in chunks, one row per run of a session's events committed together,
/// instead of one row each (an insert per event cost more than everything else an event
/// costs). `events` holds the chunk's events as a JSON array with one event (its compact JSON
/// without `raw`) per line, `raws` their raw lines the same way (`null` for none; the column is
/// NULL when no event has one). The view `events` shows one row per event, as before.
const MIGRATE_V3: &str = "
CREATE TABLE event_chunks (
    session_id     TEXT NOT NULL,
    last_sequence  INTEGER NOT NULL,
    first_sequence INTEGER NOT NULL,
    events         TEXT NOT NULL,
    raws           TEXT,
    PRIMARY KEY (session_id, last_sequence)
);
INSERT INTO event_chunks (session_id, last_sequence, first_sequence, events, raws)
    SELECT session_id, sequence, sequence, '[' || char(10) || event || char(10) || ']',
        CASE WHEN raw IS NULL THEN NULL ELSE '[' || char(10) || raw || char(10) || ']' END
    FROM events ORDER BY session_id, sequence;
DROP TABLE events;
CREATE VIEW events (session_id, sequence, type, event, raw) AS
    SELECT c.session_id, c.first_sequence + e.key, e.value ->> '$.type', e.value,
        c.raws -> e.key
    FROM event_chunks c, json_each(c.events) e;
";

/// Version 3 → 4: `next_item` goes (a restored session's ids go on after its log's last).
const MIGRATE_V4: &str = "ALTER TABLE sessions DROP COLUMN next_item;";

/// Version 5 → 6: the engines working on the file, the inbox of requests for sessions' owners,
/// and an index of owned sessions (`sessions.owner` now names an engine, `''` when idle).
const MIGRATE_V6: &str = "
CREATE TABLE engines (
    engine_id   TEXT PRIMARY KEY NOT NULL,
    instance_id TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    command     TEXT NOT NULL,
    url         TEXT,
    started_at  INTEGER NOT NULL
);
CREATE TABLE inbox (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    body       TEXT NOT NULL,
    state      TEXT NOT NULL,
    reply      TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX inbox_by_state ON inbox (state, session_id);
CREATE INDEX sessions_by_owner ON sessions (owner) WHERE owner <> '';
";

/// Version 6 → 7: a chunk's events may be compact lines (`compact.rs`), which leave out what
/// the row says, the native session id among it: `native` (its JSON; NULL for a chunk of
/// whole events only, as every chunk before). The view puts each compact event back whole;
/// the events already stored stay as they are.
const MIGRATE_V7: &str = "
ALTER TABLE event_chunks ADD COLUMN native TEXT;
DROP VIEW events;
CREATE VIEW events (session_id, sequence, type, event, raw) AS
    SELECT c.session_id, c.first_sequence + e.key,
        CASE e.type WHEN 'array' THEN e.value ->> 2 ELSE e.value ->> '$.type' END,
        CASE e.type WHEN 'array' THEN json_object(
            'event_id', 'evt_' || (c.first_sequence + e.key),
            'sequence', c.first_sequence + e.key,
            'time', e.value -> 0,
            'session_id', c.session_id,
            'native_session_id', json(c.native),
            'synthetic', e.value -> 1,
            'source', CASE e.value ->> 1 WHEN 1 THEN 'daemon' ELSE 'agent' END,
            'type', e.value ->> 2,
            'data', e.value -> 3,
            'raw', NULL)
        ELSE e.value END,
        c.raws -> e.key
    FROM event_chunks c, json_each(c.events) e;
";

/// Refuses to upgrade a version-6 database while engines of that version use it (many
/// processes share one file since version 6): they would read the compact lines of version 7
/// as broken events. They are asked to stop first, by name; dead ones (their lease let go)
/// do not count.
fn refuse_under_live_engines(conn: &Connection, path: &Path) -> Result<(), String> {
    let leases = super::leases::LeaseDir::beside(path).map_err(|e| e.to_string())?;
    let engines = super::shared::registered_engines(conn).map_err(|e| e.to_string())?;
    let live: Vec<String> = engines
        .into_iter()
        .filter(|e| leases.alive(&e.engine_id).unwrap_or(true))
        .map(|e| format!("pid {} ({})", e.pid, e.command))
        .collect();
    if live.is_empty() {
        return Ok(());
    }
    Err(format!(
        "an older codebuffd still uses it: {}; stop it first: this codebuffd upgrades the \
         file to schema version {SCHEMA_VERSION}, which stores events in a form older ones cannot read",
        live.join(", ")
    ))
}

/// Held while a process creates or upgrades the database's schema: `<db>.migrate.lock`.
pub(super) fn migration_lock(path: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| open_error(path, e))?;
    }
    let mut name = path.as_os_str().to_owned();
    name.push(".migrate.lock");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&name)
        .map_err(|e| open_error(path, e))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| open_error(path, errno))
}

fn schema_version(conn: &Connection) -> Result<i64, String> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| e.to_string())
}

/// Creates the schema in a new database (at `path`), upgrades an older one, or checks the
/// version.
pub(super) fn migrate(conn: &Connection, path: &Path) -> Result<(), String> {
    match schema_version(conn)? {
        SCHEMA_VERSION => Ok(()),
        newer if newer > SCHEMA_VERSION => Err(format!(
            "its schema version {newer} is newer than this codebuffd supports ({SCHEMA_VERSION})"
        )),
        _ => {
            conn.execute_batch("BEGIN IMMEDIATE")
                .map_err(|e| e.to_string())?;
            match upgrade(conn, path) {
                Ok(()) => conn.execute_batch("COMMIT").map_err(|e| e.to_string()),
                Err(e) => {
                    let _ = conn.execute_batch("ROLLBACK");
                    Err(e)
                }
            }
        }
    }
}

/// Brings the schema to `SCHEMA_VERSION`, inside the caller's write transaction.
fn upgrade(conn: &Connection, path: &Path) -> Result<(), String> {
    // Read again under the write lock: another process may have upgraded meanwhile.
    let mut version = schema_version(conn)?;
    if version == 0 {
        let has_tables: bool = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name IN ('sessions', 'events'))",
                [],
                |r| r.get(0),
            )
            .map_err(|e| e.to_string())?;
        if has_tables {
            return Err(
                "it holds tables named sessions/events that codebuffd did not create".into(),
            );
        }
        conn.execute_batch(SCHEMA_V1).map_err(|e| e.to_string())?;
        version = 1;
    }
    if version == 1 {
        conn.execute_batch(MIGRATE_V2).map_err(|e| e.to_string())?;
        version = 2;
    }
    if version == 2 {
        conn.execute_batch(MIGRATE_V3).map_err(|e| e.to_string())?;
        version = 3;
    }
    if version == 3 {
        conn.execute_batch(MIGRATE_V4).map_err(|e| e.to_string())?;
        version = 4;
    }
    if version == 4 {
        conn.execute_batch(outbox::MIGRATE_V5)
            .map_err(|e| e.to_string())?;
        version = 5;
    }
    if version == 5 {
        conn.execute_batch(MIGRATE_V6).map_err(|e| e.to_string())?;
        version = 6;
    }
    if version == 6 {
        refuse_under_live_engines(conn, path)?;
        conn.execute_batch(MIGRATE_V7).map_err(|e| e.to_string())?;
        version = 7;
    }
    if version != SCHEMA_VERSION {
        return Err(format!(
            "its schema version {version} is newer than this codebuffd supports ({SCHEMA_VERSION})"
        ));
    }
    conn.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION};"))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory, removed when dropped (also when a test fails).
    struct Scratch(std::path::PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Takes a new file back to version 6: the chunks without `native`, the view of then.
    fn as_version_6(conn: &Connection) {
        conn.execute_batch(
            "DROP VIEW events;
             ALTER TABLE event_chunks DROP COLUMN native;
             CREATE VIEW events (session_id, sequence, type, event, raw) AS
                 SELECT c.session_id, c.first_sequence + e.key, e.value ->> '$.type', e.value,
                     c.raws -> e.key
                 FROM event_chunks c, json_each(c.events) e;
             PRAGMA user_version = 6;",
        )
        .unwrap();
    }

    #[test]
    fn a_version_6_file_is_not_upgraded_while_an_engine_of_then_uses_it() {
        let scratch = Scratch(
            std::env::temp_dir().join(format!("codebuffd-schema-{}", uuid::Uuid::new_v4())),
        );
        std::fs::create_dir_all(&scratch.0).unwrap();
        let path = scratch.0.join("codebuffd.db");
        let conn = Connection::open(&path).unwrap();
        migrate(&conn, &path).unwrap();
        as_version_6(&conn);
        let live = uuid::Uuid::new_v4().to_string();
        let dead = uuid::Uuid::new_v4().to_string();
        for (id, pid) in [(&live, 4242), (&dead, 4343)] {
            conn.execute(
                "INSERT INTO engines VALUES (?1, 'inst', ?2, 'acp', NULL, 0)",
                rusqlite::params![id, pid],
            )
            .unwrap();
        }
        let leases = super::super::leases::LeaseDir::beside(&path).unwrap();
        let held = leases.hold(&live).unwrap();
        let error = migrate(&conn, &path).unwrap_err();
        assert!(error.contains("pid 4242 (acp)"), "{error}");
        assert!(!error.contains("4343"), "a dead engine counts: {error}");
        assert_eq!(schema_version(&conn).unwrap(), 6, "left as it was");
        drop(held);
        migrate(&conn, &path).unwrap();
        assert_eq!(schema_version(&conn).unwrap(), SCHEMA_VERSION);
    }
}
