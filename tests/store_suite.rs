//! The event store's behaviour, checked the same way against every implementation: memory,
//! SQLite (a temporary file per test) and Postgres (when `CODEBUFFD_TEST_POSTGRES_URL` names a
//! database; each test then uses session ids of its own, so runs never collide).
//!
//! Start a throwaway server with `.ci/postgres.sh start` (it prints the URL).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use codebuffd::store::{
    open_store, open_store_with, wait_after, EventStore, MemoryStore, PostgresStore,
    RunningProcess, SessionRecord, SqliteStore, StoreError, StoreOptions, StoredEvent,
};
use codebuffd::universal::{
    Cost, ErrorData, EventData, EventDraft, RawLine, SessionEndReason, SessionEndedData,
    TerminatedBy, TurnData, TurnPhase, UniversalEvent,
};
use serde_json::value::RawValue;

const POSTGRES_URL: &str = "CODEBUFFD_TEST_POSTGRES_URL";

// ---------------------------------------------------------------------------------------------
// The implementations under test.

/// One implementation: how to open a store on the test's database, and whether it survives.
trait Backend {
    /// A store on this test's database (a new instance each call).
    fn open(&self) -> Arc<dyn EventStore>;
    /// Whether a second instance sees what the first wrote.
    fn durable(&self) -> bool;
    /// A session id unique to this test run.
    fn id(&self, name: &str) -> String;
}

struct Memory {
    store: Arc<MemoryStore>,
    prefix: String,
}

impl Memory {
    fn new() -> Self {
        Memory {
            store: Arc::new(MemoryStore::new()),
            prefix: uuid::Uuid::new_v4().simple().to_string(),
        }
    }
}

impl Backend for Memory {
    fn open(&self) -> Arc<dyn EventStore> {
        self.store.clone()
    }
    fn durable(&self) -> bool {
        false
    }
    fn id(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let dir =
            std::env::temp_dir().join(format!("codebuffd-store-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Sqlite {
    dir: TempDir,
}

impl Sqlite {
    fn new() -> Self {
        Sqlite {
            dir: TempDir::new(),
        }
    }
    fn path(&self) -> PathBuf {
        self.dir.0.join("codebuffd.db")
    }
}

impl Backend for Sqlite {
    fn open(&self) -> Arc<dyn EventStore> {
        Arc::new(SqliteStore::open(&self.path()).unwrap())
    }
    fn durable(&self) -> bool {
        true
    }
    fn id(&self, name: &str) -> String {
        name.to_owned()
    }
}

struct Postgres {
    url: String,
    prefix: String,
}

impl Postgres {
    /// The test database, or `None` (after saying so) when none is configured.
    fn from_env(test: &str) -> Option<Self> {
        match std::env::var(POSTGRES_URL) {
            Ok(url) if !url.is_empty() => Some(Postgres {
                url,
                prefix: uuid::Uuid::new_v4().simple().to_string(),
            }),
            _ => {
                println!("skipped postgres::{test}: {POSTGRES_URL} is not set");
                None
            }
        }
    }
}

impl Backend for Postgres {
    fn open(&self) -> Arc<dyn EventStore> {
        Arc::new(PostgresStore::open(&self.url).unwrap())
    }
    fn durable(&self) -> bool {
        true
    }
    fn id(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }
}

/// Runs each behaviour against every implementation.
macro_rules! suite {
    ($($test:ident),* $(,)?) => {
        mod memory {
            $(#[test] fn $test() { super::$test(&super::Memory::new()) })*
        }
        mod sqlite {
            $(#[test] fn $test() { super::$test(&super::Sqlite::new()) })*
        }
        mod postgres {
            $(#[test] fn $test() {
                if let Some(db) = super::Postgres::from_env(stringify!($test)) {
                    super::$test(&db)
                }
            })*
        }
    };
}

suite!(
    create_refuses_a_used_id,
    append_assigns_dense_sequences,
    read_pages_across_the_tail_and_the_database,
    raw_lines_round_trip_exactly,
    subscribers_wake_on_append,
    turn_end_is_durable_once_append_returns,
    reopen_keeps_records_events_and_the_next_sequence,
    put_session_round_trips,
    owner_round_trips,
    load_sessions_is_oldest_first,
    flush_makes_everything_durable,
    concurrent_readers_see_no_gap_and_no_duplicate,
    store_calls_work_on_async_runtime_threads,
    delete_removes_the_record_and_every_event_for_good,
);

// ---------------------------------------------------------------------------------------------
// Helpers.

fn record(id: &str, created_at: u64) -> SessionRecord {
    SessionRecord::new(id, "mock", serde_json::json!({}), "daemon-1", created_at)
}

/// An agent event with a raw line: JSON, text, or none, depending on `n`.
fn draft(n: u64) -> EventDraft {
    let data = EventData::Error(ErrorData {
        message: format!("event {n}"),
        code: None,
        details: None,
    });
    let raw = match n % 3 {
        0 => None,
        1 => Some(Arc::new(RawLine::Json(
            RawValue::from_string(format!(r#"{{"type":"text","n":{n},"s":"é\u0000"}}"#)).unwrap(),
        ))),
        _ => Some(Arc::new(RawLine::Text(format!(
            "not json {n} \u{0} ünïcode \"q\""
        )))),
    };
    EventDraft::from_agent(data, raw)
}

fn turn_ended() -> EventDraft {
    EventDraft::synthetic(EventData::TurnEnded(TurnData {
        phase: TurnPhase::Ended,
        turn_id: Some("turn_1".into()),
        metadata: None,
    }))
}

fn session_ended() -> EventDraft {
    EventDraft::synthetic(EventData::SessionEnded(SessionEndedData {
        reason: SessionEndReason::Terminated,
        terminated_by: TerminatedBy::Daemon,
        message: None,
        exit_code: None,
        stderr: None,
        cost: Cost::default(),
    }))
}

/// The record of session `id` as `load_sessions` returns it.
fn find_record(store: &dyn EventStore, id: &str) -> SessionRecord {
    let loaded = store.load_sessions().unwrap();
    loaded.into_iter().find(|r| r.session_id == id).unwrap()
}

fn append(store: &dyn EventStore, id: &str, mut drafts: Vec<EventDraft>) -> u64 {
    store
        .append(
            id,
            &mut drafts,
            "2025-01-01T00:00:00.000Z".into(),
            Some("native"),
        )
        .unwrap()
}

/// Every event of a session with raw, read in pages of `page`.
fn read_all(store: &dyn EventStore, id: &str, page: usize) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let events = store.read(id, out.len() as u64, page).unwrap();
        if events.is_empty() {
            return out;
        }
        for e in &events {
            assert_eq!(e.sequence, out.len() as u64 + 1, "dense, in order");
            out.push(e.json(true).into_owned());
        }
    }
}

/// Appends the same drafts to a memory store, giving what any store must return.
struct Expected {
    store: MemoryStore,
    id: String,
}

impl Expected {
    fn new(id: &str) -> Self {
        let store = MemoryStore::new();
        store.create(&record(id, 1)).unwrap();
        Expected {
            store,
            id: id.to_owned(),
        }
    }
    fn append(&self, drafts: Vec<EventDraft>) {
        append(&self.store, &self.id, drafts);
    }
    fn json(&self) -> Vec<String> {
        read_all(&self.store, &self.id, 1000)
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// The behaviours.

fn create_refuses_a_used_id(db: &impl Backend) {
    let store = db.open();
    let id = db.id("dup");
    store.create(&record(&id, 1)).unwrap();
    assert!(matches!(
        store.create(&record(&id, 2)),
        Err(StoreError::AlreadyExists(e)) if e == id
    ));
    let unknown = db.id("unknown");
    assert!(matches!(
        store.read(&unknown, 0, 10),
        Err(StoreError::UnknownSession(_))
    ));
    assert!(matches!(
        store.last_sequence(&unknown),
        Err(StoreError::UnknownSession(_))
    ));
    assert!(matches!(
        store.append(&unknown, &mut vec![draft(1)], "t".into(), None),
        Err(StoreError::UnknownSession(_))
    ));
    assert!(matches!(
        store.put_session(&record(&unknown, 1)),
        Err(StoreError::UnknownSession(_))
    ));
    if db.durable() {
        // Another instance on the same database (another daemon) finds the id taken.
        let other = db.open();
        assert!(matches!(
            other.create(&record(&id, 3)),
            Err(StoreError::AlreadyExists(_))
        ));
    }
}

fn append_assigns_dense_sequences(db: &impl Backend) {
    let store = db.open();
    let id = db.id("dense");
    store.create(&record(&id, 1)).unwrap();
    assert_eq!(store.last_sequence(&id).unwrap(), 0);
    assert_eq!(append(&*store, &id, (0..3).map(draft).collect()), 3);
    let mut drafts = vec![draft(3)];
    assert_eq!(store.append(&id, &mut drafts, "t".into(), None).unwrap(), 4);
    assert!(drafts.is_empty(), "append takes the drafts");
    assert_eq!(append(&*store, &id, (4..9).map(draft).collect()), 9);
    assert_eq!(append(&*store, &id, Vec::new()), 9, "nothing to append");
    assert_eq!(store.last_sequence(&id).unwrap(), 9);
    let events = store.read(&id, 0, 100).unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.sequence).collect();
    assert_eq!(seqs, (1..=9).collect::<Vec<_>>());
    assert!(events[4].json.contains(r#""event_id":"evt_5""#));
    assert!(
        events[4].json.contains(r#""raw":null"#),
        "stored JSON has no raw"
    );
    assert_eq!(&*events[0].decode().unwrap().session_id, id.as_str());
    let page = store.read(&id, 2, 3).unwrap();
    let seqs: Vec<u64> = page.iter().map(|e| e.sequence).collect();
    assert_eq!(seqs, vec![3, 4, 5]);
    assert!(store.read(&id, 9, 10).unwrap().is_empty());
    assert!(store.read(&id, 100, 10).unwrap().is_empty());
    assert!(store.read(&id, 0, 0).unwrap().is_empty());
}

fn read_pages_across_the_tail_and_the_database(db: &impl Backend) {
    let store = db.open();
    let id = db.id("pages");
    store.create(&record(&id, 1)).unwrap();
    let expected = Expected::new(&id);
    let mut n = 0u64;
    let mut size = 1u64;
    while n < 5000 {
        let batch: Vec<u64> = (n..(n + size).min(5000)).collect();
        n += batch.len() as u64;
        expected.append(batch.iter().map(|&i| draft(i)).collect());
        append(&*store, &id, batch.iter().map(|&i| draft(i)).collect());
        size = size % 64 + 1;
    }
    let want = expected.json();
    assert_eq!(want.len(), 5000);
    // Straight away (the end in the tail, the rest committed or not) …
    assert_eq!(read_all(&*store, &id, 100), want);
    // … after a flush, with odd page sizes crossing the tail's edge …
    store.flush().unwrap();
    assert_eq!(read_all(&*store, &id, 100), want);
    assert_eq!(read_all(&*store, &id, 37), want);
    let page = store.read(&id, 4700, 1000).unwrap();
    assert_eq!(page.len(), 300);
    assert_eq!(page[0].sequence, 4701);
    // … and once the session has ended (nothing kept in memory for it).
    let end = append(&*store, &id, vec![session_ended()]);
    expected.append(vec![session_ended()]);
    assert_eq!(end, 5001);
    let want = expected.json();
    assert_eq!(read_all(&*store, &id, 100), want);
    if db.durable() {
        drop(store);
        assert_eq!(read_all(&*db.open(), &id, 100), want, "after reopening");
    }
}

fn raw_lines_round_trip_exactly(db: &impl Backend) {
    let store = db.open();
    let id = db.id("raw");
    store.create(&record(&id, 1)).unwrap();
    append(&*store, &id, (0..6).map(draft).collect());
    let check = |store: &dyn EventStore| {
        let events = store.read(&id, 0, 10).unwrap();
        assert_eq!(events.len(), 6);
        for (n, e) in events.iter().enumerate() {
            let original = draft(n as u64);
            let event = e.decode().unwrap();
            assert_eq!(event.raw, original.raw, "raw of event {}", n + 1);
            assert_eq!(event.data, original.data);
            assert_eq!(event.native_session_id.as_deref(), Some("native"));
            assert!(!event.synthetic);
        }
        let text = events[2].json(true);
        assert!(
            text.contains(r#""raw":"not json 2 \u0000 ünïcode \"q\"""#),
            "{text}"
        );
    };
    check(&*store);
    if db.durable() {
        store.flush().unwrap();
        check(&*db.open());
    }
}

fn subscribers_wake_on_append(db: &impl Backend) {
    let store = db.open();
    let id = db.id("wake");
    store.create(&record(&id, 1)).unwrap();
    runtime().block_on(async {
        let mut rx = store.subscribe(&id).unwrap();
        let writer = store.clone();
        let writer_id = id.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            append(&*writer, &writer_id, vec![draft(1), draft(2)]);
            tokio::time::sleep(Duration::from_millis(20)).await;
            append(&*writer, &writer_id, vec![turn_ended()]);
        });
        let woke = tokio::time::timeout(Duration::from_secs(5), wait_after(&mut rx, 0)).await;
        assert_eq!(woke.ok(), Some(true));
        assert!(store.last_sequence(&id).unwrap() >= 2);
        let woke = tokio::time::timeout(Duration::from_secs(5), wait_after(&mut rx, 2)).await;
        assert_eq!(woke.ok(), Some(true));
        assert_eq!(*rx.borrow(), 3);
        let events = store.read(&id, 2, 10).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event_type, "turn.ended");
        task.await.unwrap();
    });
}

fn delete_removes_the_record_and_every_event_for_good(db: &impl Backend) {
    let store = db.open();
    let gone = db.id("delete-gone");
    let kept = db.id("delete-kept");
    for id in [&gone, &kept] {
        store.create(&record(id, 1)).unwrap();
        // Enough events to reach the database, and a tail still queued when delete comes.
        append(&*store, id, (0..700).map(draft).collect());
        append(&*store, id, vec![draft(700)]);
    }
    let rx = store.subscribe(&gone).unwrap();
    assert!(store.delete_session(&gone).unwrap());
    assert!(
        !store.delete_session(&gone).unwrap(),
        "a second delete finds nothing"
    );
    let ids = |s: &dyn EventStore| -> Vec<String> {
        s.load_sessions()
            .unwrap()
            .into_iter()
            .map(|r| r.session_id)
            .collect()
    };
    assert!(!ids(&*store).contains(&gone));
    assert!(store
        .read(&gone, 0, 1000)
        .map(|e| e.is_empty())
        .unwrap_or(true));
    // Followers of the deleted log see it end.
    runtime().block_on(async {
        let mut rx = rx;
        let ended = tokio::time::timeout(Duration::from_secs(5), wait_after(&mut rx, 10_000)).await;
        assert_eq!(
            ended.ok(),
            Some(false),
            "the log's end reaches its subscribers"
        );
    });
    // The other session is whole, and the id can be used again from scratch.
    assert_eq!(store.last_sequence(&kept).unwrap(), 701);
    store.create(&record(&gone, 2)).unwrap();
    assert_eq!(append(&*store, &gone, vec![draft(0)]), 1);
    store.delete_session(&gone).unwrap();
    if db.durable() {
        store.flush().unwrap();
        let fresh = db.open();
        assert!(!ids(&*fresh).contains(&gone));
        assert!(ids(&*fresh).contains(&kept));
        assert!(fresh
            .read(&gone, 0, 1000)
            .map(|e| e.is_empty())
            .unwrap_or(true));
        assert_eq!(fresh.read(&kept, 0, 1000).unwrap().len(), 701);
    }
}

fn turn_end_is_durable_once_append_returns(db: &impl Backend) {
    let store = db.open();
    let id = db.id("durable");
    store.create(&record(&id, 1)).unwrap();
    append(&*store, &id, (0..10).map(draft).collect());
    let mut batch: Vec<EventDraft> = (10..14).map(draft).collect();
    batch.push(turn_ended());
    assert_eq!(append(&*store, &id, batch), 15);
    assert_eq!(store.last_sequence(&id).unwrap(), 15);
    if db.durable() {
        // No flush: another instance (a daemon started after a crash) already sees the end,
        // and everything before it.
        let fresh = db.open();
        assert_eq!(fresh.last_sequence(&id).unwrap(), 15);
        let events = fresh.read(&id, 0, 100).unwrap();
        assert_eq!(events.len(), 15);
        assert_eq!(events[14].event_type, "turn.ended");
        // The same holds for session.ended.
        append(&*store, &id, vec![draft(15), session_ended()]);
        let fresh = db.open();
        assert_eq!(fresh.last_sequence(&id).unwrap(), 17);
    }
}

fn reopen_keeps_records_events_and_the_next_sequence(db: &impl Backend) {
    if !db.durable() {
        return;
    }
    let ids = [db.id("reopen-a"), db.id("reopen-b"), db.id("reopen-c")];
    let mut records = Vec::new();
    let expected: Vec<Expected> = ids.iter().map(|id| Expected::new(id)).collect();
    {
        let store = db.open();
        for (n, id) in ids.iter().enumerate() {
            let mut r = record(id, 100 + n as u64);
            store.create(&r).unwrap();
            let drafts = (0..(n as u64 + 1) * 300).map(draft);
            append(&*store, id, drafts.clone().collect());
            expected[n].append(drafts.collect());
            r.status = "running".into();
            r.turns = n as u64;
            r.event_count = (n as u64 + 1) * 300;
            r.running = Some(RunningProcess {
                pid: 4242 + n as u32,
                pgid: 4242 + n as u32,
                start_ticks: 1 << 40,
            });
            store.put_session(&r).unwrap();
            records.push(r);
        }
        // Dropped without a flush: dropping commits what is queued.
    }
    let store = db.open();
    let loaded: Vec<SessionRecord> = store
        .load_sessions()
        .unwrap()
        .into_iter()
        .filter(|r| ids.contains(&r.session_id))
        .collect();
    assert_eq!(loaded, records);
    for (n, id) in ids.iter().enumerate() {
        let last = (n as u64 + 1) * 300;
        assert_eq!(store.last_sequence(id).unwrap(), last);
        assert_eq!(read_all(&*store, id, 100), expected[n].json());
        assert_eq!(append(&*store, id, vec![draft(7)]), last + 1);
        assert_eq!(store.read(id, last, 10).unwrap()[0].sequence, last + 1);
    }
    // Subscriptions work for a session loaded from the database.
    let rx = store.subscribe(&ids[0]).unwrap();
    assert_eq!(*rx.borrow(), 301);
}

fn put_session_round_trips(db: &impl Backend) {
    let store = db.open();
    let id = db.id("put");
    let mut r = record(&id, 1_700_000_000_123);
    store.create(&r).unwrap();
    r.updated_at = 1_700_000_000_999;
    r.settings = serde_json::json!({
        "agent": "codebuff",
        "model": {"name": "x", "params": [1, 2.5, null, true]},
        "empty": {},
        "text": "quote \" and ünïcode",
    });
    r.native_session_id = Some("native-123".into());
    r.status = "ended".into();
    r.ended = true;
    r.end_reason = Some("error".into());
    r.end_message = Some("the agent exited with 1\nsecond line".into());
    r.cost_credits = 12.375;
    r.turns = 4;
    r.event_count = 99;
    r.running = Some(RunningProcess {
        pid: 123,
        pgid: 123,
        start_ticks: 987_654_321_012,
    });
    store.put_session(&r).unwrap();
    assert_eq!(find_record(&*store, &id), r);
    r.running = None;
    r.end_message = None;
    store.put_session(&r).unwrap();
    assert_eq!(find_record(&*store, &id), r);
    if db.durable() {
        assert_eq!(find_record(&*db.open(), &id), r);
    }
}

fn owner_round_trips(db: &impl Backend) {
    let store = db.open();
    // A daemon's session names it; a record written before owners existed names none.
    let owner = uuid::Uuid::new_v4().hyphenated().to_string();
    let (mine, legacy) = (db.id("owned"), db.id("unowned"));
    let mut r = record(&mine, 1);
    r.owner = owner.clone();
    store.create(&r).unwrap();
    let mut old = record(&legacy, 2);
    old.owner = String::new();
    store.create(&old).unwrap();
    assert_eq!(find_record(&*store, &mine).owner, owner);
    assert_eq!(find_record(&*store, &legacy).owner, "");
    // Adopting: the next put names the new owner.
    old.owner = owner.clone();
    store.put_session(&old).unwrap();
    assert_eq!(find_record(&*store, &legacy), old);
    if db.durable() {
        let fresh = db.open();
        assert_eq!(find_record(&*fresh, &mine), r);
        assert_eq!(find_record(&*fresh, &legacy), old);
    }
    // The owner is not part of the key: another daemon cannot create the same id.
    let mut theirs = record(&mine, 3);
    theirs.owner = uuid::Uuid::new_v4().hyphenated().to_string();
    assert!(matches!(
        store.create(&theirs),
        Err(StoreError::AlreadyExists(_))
    ));
    if db.durable() {
        assert!(matches!(
            db.open().create(&theirs),
            Err(StoreError::AlreadyExists(_))
        ));
    }
    assert_eq!(find_record(&*store, &mine), r);
}

fn load_sessions_is_oldest_first(db: &impl Backend) {
    let store = db.open();
    let created = [("c", 30), ("a", 10), ("b2", 20), ("b1", 20)];
    for (name, at) in created {
        store.create(&record(&db.id(name), at)).unwrap();
    }
    let order = |store: &dyn EventStore| -> Vec<String> {
        let mine: Vec<String> = created.iter().map(|(n, _)| db.id(n)).collect();
        store
            .load_sessions()
            .unwrap()
            .into_iter()
            .map(|r| r.session_id)
            .filter(|id| mine.contains(id))
            .collect()
    };
    let want: Vec<String> = ["a", "b1", "b2", "c"].iter().map(|n| db.id(n)).collect();
    assert_eq!(order(&*store), want);
    if db.durable() {
        assert_eq!(order(&*db.open()), want);
    }
}

fn flush_makes_everything_durable(db: &impl Backend) {
    let store = db.open();
    let id = db.id("flush");
    let mut r = record(&id, 1);
    store.create(&r).unwrap();
    append(&*store, &id, (0..100).map(draft).collect());
    r.turns = 1;
    store.put_session(&r).unwrap();
    store.flush().unwrap();
    store.flush().unwrap();
    if db.durable() {
        let fresh = db.open();
        assert_eq!(fresh.last_sequence(&id).unwrap(), 100);
        assert_eq!(fresh.read(&id, 0, 1000).unwrap().len(), 100);
        let loaded = fresh.load_sessions().unwrap();
        assert_eq!(loaded.iter().find(|x| x.session_id == id), Some(&r));
    }
}

fn concurrent_readers_see_no_gap_and_no_duplicate(db: &impl Backend) {
    const TOTAL: u64 = 3000;
    let store = db.open();
    let id = db.id("concurrent");
    store.create(&record(&id, 1)).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let appended = Arc::new(AtomicU64::new(0));
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..4)
            .map(|r| {
                let store = store.clone();
                let id = id.clone();
                let done = done.clone();
                s.spawn(move || {
                    let page = [1, 7, 50, 100][r];
                    let mut cursor = 0u64;
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while cursor < TOTAL {
                        assert!(Instant::now() < deadline, "reader {r} stuck at {cursor}");
                        let events = store.read(&id, cursor, page).unwrap();
                        if events.is_empty() {
                            if done.load(Ordering::SeqCst) {
                                assert_eq!(store.last_sequence(&id).unwrap(), cursor);
                            }
                            std::thread::yield_now();
                            continue;
                        }
                        for e in events {
                            assert_eq!(e.sequence, cursor + 1, "reader {r}");
                            assert!(e.json.contains(&format!("\"evt_{}\"", cursor + 1)));
                            cursor += 1;
                        }
                    }
                    assert!(store.read(&id, cursor, page).unwrap().is_empty());
                    cursor
                })
            })
            .collect();
        let mut n = 0u64;
        let mut size = 1u64;
        while n < TOTAL {
            let count = size.min(TOTAL - n);
            let mut drafts: Vec<EventDraft> = (n..n + count).map(draft).collect();
            if (n + count) % 100 < count {
                drafts.pop();
                drafts.push(turn_ended());
            }
            n = append(&*store, &id, drafts);
            appended.store(n, Ordering::SeqCst);
            size = size % 16 + 1;
        }
        done.store(true, Ordering::SeqCst);
        for reader in readers {
            assert_eq!(reader.join().unwrap(), TOTAL);
        }
    });
    assert_eq!(appended.load(Ordering::SeqCst), TOTAL);
}

fn store_calls_work_on_async_runtime_threads(db: &impl Backend) {
    let store = db.open();
    let id = db.id("async");
    runtime().block_on(async {
        let store = store.clone();
        tokio::spawn(async move {
            store.create(&record(&id, 1)).unwrap();
            append(&*store, &id, (0..600).map(draft).collect());
            append(&*store, &id, vec![turn_ended()]);
            store.flush().unwrap();
            assert_eq!(store.read(&id, 0, 1000).unwrap().len(), 601);
            assert_eq!(store.last_sequence(&id).unwrap(), 601);
            assert!(!store.load_sessions().unwrap().is_empty());
        })
        .await
        .unwrap();
    });
    // Opening may happen on a runtime thread too (the daemon opens its store in `run`).
    let reopened = runtime().block_on(async { db.open() });
    if db.durable() {
        assert_eq!(reopened.last_sequence(&db.id("async")).unwrap(), 601);
    }
}

// ---------------------------------------------------------------------------------------------
// Opening: specs and broken databases.

fn open_error(spec: &str, data_dir: &Path) -> String {
    match open_store(spec, data_dir) {
        Ok(_) => panic!("opening `{spec}` should fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn open_store_understands_every_spec() {
    let dir = TempDir::new();
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
    let dir = TempDir::new();
    runtime().block_on(async {
        let dir = dir.0.clone();
        tokio::spawn(async move {
            open_store("sqlite", &dir).unwrap();
            // Nothing listens on port 1: a clear error, not a panic.
            let message = open_error("postgres://u:secret@127.0.0.1:1/db?connect_timeout=5", &dir);
            assert!(message.contains("127.0.0.1:1"), "{message}");
            assert!(!message.contains("secret"), "{message}");
            if let Ok(url) = std::env::var(POSTGRES_URL) {
                if !url.is_empty() {
                    let store = open_store(&url, &dir).unwrap();
                    store.load_sessions().unwrap();
                }
            }
        })
        .await
        .unwrap();
    });
}

#[test]
fn a_corrupted_database_is_a_clear_error() {
    let dir = TempDir::new();
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
    let dir = TempDir::new();
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
    let dir = TempDir::new();
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
}

#[test]
fn a_database_from_a_newer_version_is_refused() {
    let dir = TempDir::new();
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
    r.owner = "adopter".into();
    store.put_session(&r).unwrap();
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
    let dir = TempDir::new();
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
    assert_eq!(version, 5);
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
    let dir = TempDir::new();
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
                e.json,
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
    drop(store);

    // The view shows one row per event, old and new alike.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 5);
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
}

#[test]
fn the_sqlite_events_view_shows_every_event_of_a_large_batch() {
    let dir = TempDir::new();
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
fn a_version_1_postgres_database_is_upgraded() {
    let Some(db) = Postgres::from_env("a_version_1_postgres_database_is_upgraded") else {
        return;
    };
    // A schema of its own stands for a database version 1 wrote.
    let schema = format!("codebuffd_v1_{}", db.prefix);
    let mut admin = ::postgres::Client::connect(&db.url, ::postgres::NoTls).unwrap();
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
    let separator = if db.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{separator}options=-csearch_path%3D{schema}", db.url);
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
    assert_eq!(versions, vec![1, 4]);
}

#[test]
fn a_record_without_an_owner_deserializes() {
    let mut json = serde_json::to_value(v1_record("x")).unwrap();
    json.as_object_mut().unwrap().remove("owner");
    let r: SessionRecord = serde_json::from_value(json).unwrap();
    assert_eq!(r, v1_record("x"));
}
