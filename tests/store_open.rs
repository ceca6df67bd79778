//! Opening stores: every spec of `--store`, broken and unopenable databases, the SQLite commit
//! and view details, and upgrading databases written by older versions (SQLite and, when
//! `CODEBUFFD_TEST_POSTGRES_URL` names a database and the run asks for ignored tests,
//! Postgres). The behaviour every store shares is `store_suite.rs`.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use codebuffd::store::{
    open_store, open_store_with, EventStore, PostgresStore, SessionRecord, SqliteStore,
    StoreOptions, StoredEvent,
};
use codebuffd::universal::UniversalEvent;
use support::daemon::TempDir;
use support::store::{
    append, draft, find_record, postgres_url, record, runtime, turn_ended, turn_started,
};

fn open_error(spec: &str, data_dir: &Path) -> String {
    match open_store(spec, data_dir) {
        Ok(_) => panic!("opening `{spec}` should fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn open_store_understands_every_spec() {
    let dir = TempDir::new("store-open");
    let store = open_store("memory", &dir.0).unwrap();
    store.create(&record("m", 1)).unwrap();
    assert!(!dir.0.join("codebuffd.db").exists());

    let store = open_store("sqlite", &dir.0).unwrap();
    store.create(&record("s", 1)).unwrap();
    let meta = std::fs::metadata(dir.0.join("codebuffd.db")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "owner only");
    drop(store);
    let store = open_store("", &dir.0).unwrap();
    assert_eq!(
        store.load_sessions().unwrap().len(),
        1,
        "the same default file"
    );
    drop(store);

    let file = dir.0.join("nested/dir/other.db");
    let spec = format!("sqlite://{}", file.display());
    open_store(&spec, &dir.0).unwrap();
    assert!(file.exists(), "parent directories are created");

    assert!(open_error("sqlite://", &dir.0).contains("sqlite://PATH"));
    let message = open_error("mysql://u:secret@h/db", &dir.0);
    assert!(message.contains("unknown store"), "{message}");
    assert!(!message.contains("secret"), "{message}");
}

#[test]
fn open_store_in_a_runtime_does_not_panic() {
    let dir = TempDir::new("store-open");
    runtime().block_on(async {
        let dir = dir.0.clone();
        tokio::spawn(async move {
            open_store("sqlite", &dir).unwrap();
            // Nothing listens on port 1: a clear error, not a panic.
            let message = open_error("postgres://u:secret@127.0.0.1:1/db?connect_timeout=5", &dir);
            assert!(message.contains("127.0.0.1:1"), "{message}");
            assert!(!message.contains("secret"), "{message}");
        })
        .await
        .unwrap();
    });
}

#[test]
#[ignore = "needs Postgres: CODEBUFFD_TEST_POSTGRES_URL, and --ignored"]
fn open_store_opens_postgres_in_a_runtime() {
    let dir = TempDir::new("store-open");
    let url = postgres_url();
    runtime().block_on(async {
        let dir = dir.0.clone();
        tokio::spawn(async move {
            let store = open_store(&url, &dir).unwrap();
            store.load_sessions().unwrap();
        })
        .await
        .unwrap();
    });
}

#[test]
fn a_corrupted_database_is_a_clear_error() {
    let dir = TempDir::new("store-open");
    let path = dir.0.join("codebuffd.db");
    std::fs::write(
        &path,
        b"this is not a database, just some garbage bytes\n".repeat(200),
    )
    .unwrap();
    let message = match SqliteStore::open(&path) {
        Ok(_) => panic!("a garbage file opened"),
        Err(e) => e.to_string(),
    };
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("not a database"), "{message}");
}

#[test]
fn a_database_that_cannot_be_opened_is_a_clear_error() {
    let dir = TempDir::new("store-open");
    // A directory where the file should be.
    let message = match SqliteStore::open(&dir.0) {
        Ok(_) => panic!("a directory opened"),
        Err(e) => e.to_string(),
    };
    assert!(message.contains(&dir.0.display().to_string()), "{message}");
    // A parent that is a file.
    let file = dir.0.join("file");
    std::fs::write(&file, b"x").unwrap();
    let inside = file.join("codebuffd.db");
    let message = match SqliteStore::open(&inside) {
        Ok(_) => panic!("a path under a file opened"),
        Err(e) => e.to_string(),
    };
    assert!(message.contains(&inside.display().to_string()), "{message}");
    // A directory without permission (skipped where permissions do not bind, as for root).
    use std::os::unix::fs::PermissionsExt;
    let locked = dir.0.join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    if std::fs::read_dir(&locked).is_err() {
        let path = locked.join("codebuffd.db");
        let result = SqliteStore::open(&path);
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
        let message = result.err().expect("an unreadable directory").to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
    } else {
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
        println!("skipped the permission check: permissions do not bind this user");
    }
}

#[test]
fn with_visible_after_commit_nothing_seen_is_ever_lost() {
    let dir = TempDir::new("store-open");
    let options = StoreOptions {
        visible_after_commit: true,
        ..StoreOptions::default()
    };
    let store = open_store_with("sqlite", &dir.0, options).unwrap();
    store.create(&record("s", 1)).unwrap();
    let mut rx = store.subscribe("s").unwrap();
    for round in 0..20u64 {
        let last = append(&*store, "s", (0..5).map(draft).collect());
        // The writer commits in the background, so each look may see more than the one
        // before it; none may see more than was appended or skip a sequence.
        let announced = store.last_sequence("s").unwrap();
        assert!(announced <= last);
        let events = store.read("s", 0, 1000).unwrap();
        let seen = events.len() as u64;
        assert!(
            seen >= announced && seen <= last,
            "round {round}: read {seen}, announced {announced}, appended {last}"
        );
        for (i, event) in events.iter().enumerate() {
            assert_eq!(event.sequence, i as u64 + 1, "round {round}: a gap");
        }
        // What any reader could see is already in the file.
        let fresh = SqliteStore::open(&dir.0.join("codebuffd.db")).unwrap();
        let durable = fresh.last_sequence("s").unwrap();
        assert!(
            durable >= seen,
            "round {round}: {durable} < {seen} (last {last})"
        );
    }
    // Every event becomes visible once committed, without a flush.
    runtime().block_on(async {
        let woke = tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|v| *v == 100)).await;
        assert!(woke.is_ok());
    });
    assert_eq!(append(&*store, "s", vec![turn_ended()]), 101);
    assert_eq!(
        store.last_sequence("s").unwrap(),
        101,
        "ending events wait for their commit"
    );
    // So does a turn's start: a session shows `running` only once its turn is in the log.
    assert_eq!(append(&*store, "s", vec![draft(1), turn_started()]), 103);
    assert_eq!(
        store.last_sequence("s").unwrap(),
        103,
        "a turn's start waits for its commit"
    );
}

#[test]
fn a_database_from_a_newer_version_is_refused() {
    let dir = TempDir::new("store-open");
    let path = dir.0.join("codebuffd.db");
    drop(SqliteStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA user_version = 99").unwrap();
    drop(conn);
    let message = match SqliteStore::open(&path) {
        Ok(_) => panic!("a newer schema opened"),
        Err(e) => e.to_string(),
    };
    assert!(message.contains("schema version 99"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// Upgrading databases written by older versions.

/// A session record as version 1 stored it (no owner column).
const V1_SESSION: &str = "INSERT INTO sessions (session_id, agent, created_at, updated_at, \
    settings, native_session_id, status, ended, end_reason, end_message, cost_credits, turns, \
    event_count, next_item, running_pid, running_pgid, running_start_ticks) VALUES \
    ('old', 'mock', 5, 6, '{\"agent\":\"mock\"}', 'native-1', 'idle', FALSE, NULL, NULL, 1.5, 2, \
    0, 3, NULL, NULL, NULL)";

/// What [`V1_SESSION`] loads as: a record without an owner.
fn v1_record(id: &str) -> SessionRecord {
    SessionRecord {
        session_id: id.into(),
        agent: "mock".into(),
        created_at: 5,
        updated_at: 6,
        settings: serde_json::json!({"agent": "mock"}),
        native_session_id: Some("native-1".into()),
        status: "idle".into(),
        ended: false,
        end_reason: None,
        end_message: None,
        cost_credits: 1.5,
        turns: 2,
        event_count: 0,
        running: None,
        owner: String::new(),
    }
}

/// After the upgrade: the old record loads without an owner, can be adopted, and its log works.
fn check_upgraded(open: &dyn Fn() -> Arc<dyn EventStore>, id: &str) {
    let store = open();
    let mut r = v1_record(id);
    assert_eq!(find_record(&*store, id), r);
    assert_eq!(store.last_sequence(id).unwrap(), 0);
    assert_eq!(append(&*store, id, vec![draft(1)]), 1);
    assert!(store.coordination().claim(id, "", "adopter").unwrap());
    r.owner = "adopter".into();
    store.flush().unwrap();
    drop(store);
    let store = open();
    assert_eq!(find_record(&*store, id), r);
    assert_eq!(store.last_sequence(id).unwrap(), 1);
    let mut fresh = record(&format!("{id}-new"), 7);
    fresh.owner = "someone".into();
    store.create(&fresh).unwrap();
    assert_eq!(find_record(&*store, id).owner, "adopter");
}

/// The tables of a version-1 SQLite database (one row per event).
const SQLITE_V1_TABLES: &str = "
        CREATE TABLE sessions (
            session_id TEXT PRIMARY KEY NOT NULL, agent TEXT NOT NULL,
            created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, settings TEXT NOT NULL,
            native_session_id TEXT, status TEXT NOT NULL, ended INTEGER NOT NULL,
            end_reason TEXT, end_message TEXT, cost_credits REAL NOT NULL,
            turns INTEGER NOT NULL, event_count INTEGER NOT NULL, next_item INTEGER NOT NULL,
            running_pid INTEGER, running_pgid INTEGER, running_start_ticks INTEGER
        );
        CREATE INDEX sessions_by_age ON sessions (created_at, session_id);
        CREATE TABLE events (
            session_id TEXT NOT NULL, sequence INTEGER NOT NULL, type TEXT NOT NULL,
            event TEXT NOT NULL, raw TEXT, raw_is_text INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (session_id, sequence)
        );
";

#[test]
fn a_version_1_sqlite_database_is_upgraded() {
    let dir = TempDir::new("store-open");
    let path = dir.0.join("codebuffd.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(SQLITE_V1_TABLES).unwrap();
    conn.execute_batch("PRAGMA user_version = 1;").unwrap();
    conn.execute_batch(V1_SESSION).unwrap();
    drop(conn);
    check_upgraded(&|| Arc::new(SqliteStore::open(&path).unwrap()), "old");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 7);
    // Version 5 added the webhook outbox.
    let outbox: i64 = conn
        .query_row("SELECT count(*) FROM webhook_outbox", [], |r| r.get(0))
        .unwrap();
    assert_eq!(outbox, 0);
}

#[test]
fn a_version_2_sqlite_database_keeps_its_events_when_upgraded() {
    // Version 2 still kept one row per event, and added the owner.
    const SCHEMA_V2: &str = "ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT '';
        PRAGMA user_version = 2;";
    let dir = TempDir::new("store-open");
    let path = dir.0.join("codebuffd.db");
    // The events as a version-2 daemon wrote them: the same JSON and raw text this one makes.
    let written: Vec<StoredEvent> = (1..=5)
        .map(|n| {
            let event = UniversalEvent::from_draft(draft(n), n, "t".into(), "old".into(), None);
            StoredEvent::new(event)
        })
        .collect();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(SQLITE_V1_TABLES).unwrap();
    conn.execute_batch(SCHEMA_V2).unwrap();
    conn.execute_batch(V1_SESSION).unwrap();
    for e in &written {
        conn.execute(
            "INSERT INTO events VALUES ('old', ?1, ?2, ?3, ?4, ?5)",
            rusqlite::params![
                e.sequence as i64,
                e.event_type,
                e.json.as_str(),
                e.raw.as_ref().map(|r| r.json().into_owned()),
                e.raw.as_ref().is_some_and(|r| r.is_text()),
            ],
        )
        .unwrap();
    }
    drop(conn);

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.last_sequence("old").unwrap(), 5);
    let read = store.read("old", 0, 10).unwrap();
    assert_eq!(read.len(), 5);
    for (got, want) in read.iter().zip(&written) {
        assert_eq!(got.json(true), want.json(true));
        assert_eq!(got.decode().unwrap(), want.decode().unwrap());
    }
    assert_eq!(append(&store, "old", vec![draft(6)]), 6);
    store.flush().unwrap();
    let sixth = store.read("old", 5, 6).unwrap().pop().unwrap();
    drop(store);

    // The view shows one row per event, old and new alike.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 7);
    let rows: Vec<(i64, String, String, Option<String>)> = conn
        .prepare("SELECT sequence, type, event, raw FROM events WHERE session_id = 'old' ORDER BY sequence")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows.len(), 6);
    for (row, want) in rows.iter().zip(&written) {
        assert_eq!(row.0, want.sequence as i64);
        assert_eq!(row.1, "error");
        let event: serde_json::Value = serde_json::from_str(&row.2).unwrap();
        let expected: serde_json::Value = serde_json::from_str(&want.json).unwrap();
        assert_eq!(event, expected);
        let raw = row
            .3
            .as_deref()
            .map(|r| serde_json::from_str::<serde_json::Value>(r).unwrap());
        let expected_raw = want
            .raw
            .as_ref()
            .map(|r| serde_json::from_str::<serde_json::Value>(&r.json()).unwrap());
        assert_eq!(raw, expected_raw, "raw of event {}", want.sequence);
    }
    // The sixth, written by this build as a compact line, is shown whole by the view.
    let stored: String = conn
        .query_row(
            "SELECT events FROM event_chunks WHERE session_id = 'old' AND first_sequence = 6",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(stored.starts_with("[\n[\""), "{stored}");
    assert!(stored.len() < sixth.json.len(), "{stored}");
    let (sequence, event_type, event, _) = &rows[5];
    assert_eq!((*sequence, event_type.as_str()), (6, "error"));
    let event: serde_json::Value = serde_json::from_str(event).unwrap();
    let expected: serde_json::Value = serde_json::from_str(&sixth.json).unwrap();
    assert_eq!(event, expected);
}

#[test]
fn the_sqlite_events_view_shows_every_event_of_a_large_batch() {
    let dir = TempDir::new("store-open");
    let path = dir.0.join("codebuffd.db");
    let store = SqliteStore::open(&path).unwrap();
    store.create(&record("big", 1)).unwrap();
    // More events than one chunk row holds, appended at once so they are committed together.
    assert_eq!(append(&store, "big", (1..=700).map(draft).collect()), 700);
    store.flush().unwrap();
    let read = store.read("big", 250, 300).unwrap();
    assert_eq!(read.first().unwrap().sequence, 251);
    assert_eq!(read.last().unwrap().sequence, 550);
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let (count, min, max, chunks): (i64, i64, i64, i64) = conn
        .query_row(
            "SELECT count(*), min(sequence), max(sequence), \
             (SELECT count(*) FROM event_chunks WHERE session_id = 'big') \
             FROM events WHERE session_id = 'big'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!((count, min, max), (700, 1, 700));
    assert!(chunks >= 3, "{chunks} chunks");
    let (page_size, journal): (i64, String) = conn
        .query_row(
            "SELECT (SELECT page_size FROM pragma_page_size), (SELECT journal_mode FROM pragma_journal_mode)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (page_size, journal.as_str()),
        (16384, "wal"),
        "a new database"
    );
    let message: String = conn
        .query_row(
            "SELECT event ->> '$.data.message' FROM events WHERE session_id = 'big' AND sequence = 613",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(message, "event 613");
}

#[test]
#[ignore = "needs Postgres: CODEBUFFD_TEST_POSTGRES_URL, and --ignored"]
fn a_version_1_postgres_database_is_upgraded() {
    let db_url = postgres_url();
    // A schema of its own stands for a database version 1 wrote.
    let schema = format!("codebuffd_v1_{}", uuid::Uuid::new_v4().simple());
    let mut admin = ::postgres::Client::connect(&db_url, ::postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
            SET search_path TO {schema};
            CREATE TABLE codebuffd_schema (version INTEGER NOT NULL);
            INSERT INTO codebuffd_schema (version) VALUES (1);
            CREATE TABLE sessions (
                session_id TEXT PRIMARY KEY, agent TEXT NOT NULL, created_at BIGINT NOT NULL,
                updated_at BIGINT NOT NULL, settings JSON NOT NULL, native_session_id TEXT,
                status TEXT NOT NULL, ended BOOLEAN NOT NULL, end_reason TEXT,
                end_message TEXT, cost_credits DOUBLE PRECISION NOT NULL, turns BIGINT NOT NULL,
                event_count BIGINT NOT NULL, next_item BIGINT NOT NULL, running_pid BIGINT,
                running_pgid BIGINT, running_start_ticks BIGINT
            );
            CREATE INDEX sessions_by_age ON sessions (created_at, session_id);
            CREATE TABLE events (
                session_id TEXT NOT NULL, sequence BIGINT NOT NULL, type TEXT NOT NULL,
                event JSON NOT NULL, raw JSON, raw_is_text BOOLEAN NOT NULL DEFAULT FALSE,
                PRIMARY KEY (session_id, sequence)
            );
            {V1_SESSION};"
        ))
        .unwrap();
    let separator = if db_url.contains('?') { '&' } else { '?' };
    let url = format!("{db_url}{separator}options=-csearch_path%3D{schema}");
    let result = std::panic::catch_unwind(|| {
        check_upgraded(&|| Arc::new(PostgresStore::open(&url).unwrap()), "old");
    });
    let versions: Vec<i32> = admin
        .query("SELECT version FROM codebuffd_schema ORDER BY version", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .unwrap();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    assert_eq!(versions, vec![1, 5]);
}

#[test]
fn a_record_without_an_owner_deserializes() {
    let mut json = serde_json::to_value(v1_record("x")).unwrap();
    json.as_object_mut().unwrap().remove("owner");
    let r: SessionRecord = serde_json::from_value(json).unwrap();
    assert_eq!(r, v1_record("x"));
}
