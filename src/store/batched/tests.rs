//! Tests of the durable store's core against a fake database.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::*;
use crate::store::writer::Write;
use crate::universal::{Cost, TerminatedBy};
use crate::universal::{ErrorData, EventData, SessionEndReason, SessionEndedData};

/// Stored events by session and sequence: their JSON and raw line.
type EventRows = BTreeMap<(String, u64), (crate::store::EventText, Option<String>)>;

/// A database in memory that can be told to fail its commits.
#[derive(Default)]
struct FakeDb {
    records: Mutex<BTreeMap<String, SessionRecord>>,
    events: Mutex<EventRows>,
    broken: AtomicBool,
    /// Held by a test to hold up commits.
    gate: Mutex<()>,
    commits: std::sync::atomic::AtomicUsize,
    /// Pages read from the database.
    reads: std::sync::atomic::AtomicUsize,
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
                        let raw = e.raw.as_ref().map(|raw| raw.json().into_owned());
                        events.insert(key, (e.json.clone(), raw));
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
        how: PageRead,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.0.reads.fetch_add(1, Ordering::SeqCst);
        let events = self.0.events.lock().unwrap();
        events
            .range((session_id.to_owned(), after + 1)..=(session_id.to_owned(), upto))
            .map(|((_, seq), (json, raw))| {
                StoredEvent::from_stored(*seq, json, raw.as_deref().filter(|_| how.raw))
            })
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

/// An error event whose message is `i`.
fn error_data(i: usize) -> EventData {
    EventData::Error(Box::new(ErrorData {
        message: i.to_string(),
        code: None,
        details: None,
    }))
}

fn drafts(n: usize) -> Vec<EventDraft> {
    (0..n)
        .map(|i| EventDraft::synthetic(error_data(i)))
        .collect()
}

fn session_ended() -> EventDraft {
    EventDraft::synthetic(EventData::SessionEnded(Box::new(SessionEndedData {
        reason: SessionEndReason::Completed,
        terminated_by: TerminatedBy::Agent,
        message: None,
        exit_code: None,
        stderr: None,
        cost: Cost::default(),
    })))
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

#[test]
fn a_hole_in_the_database_is_reported_when_a_reader_reaches_it() {
    let options = StoreOptions {
        tail_events: 32,
        ..StoreOptions::default()
    };
    let (db, store) = session_store(options);
    store
        .append("s", &mut drafts(1000), "t".into(), None)
        .unwrap();
    store.flush().unwrap();
    db.events.lock().unwrap().remove(&("s".to_owned(), 500));
    // An exact read reports it; a streaming one ends its page before it (nothing after it is
    // skipped), and the next page reports it.
    let error = store.read("s", 0, 2000).unwrap_err().to_string();
    assert!(error.contains("missing event 500"), "{error}");
    let page = store
        .read_page(
            "s",
            0,
            2000,
            PageRead {
                raw: true,
                exact: false,
            },
        )
        .unwrap();
    assert_eq!(page.len(), 499);
    assert!(page.iter().zip(1..).all(|(e, n)| e.sequence == n));
    let streaming = PageRead {
        raw: false,
        exact: false,
    };
    let error = store
        .read_page("s", 499, 10, streaming)
        .unwrap_err()
        .to_string();
    assert!(error.contains("missing event 500"), "{error}");
    // Past the hole, reads go on.
    assert_eq!(store.read("s", 500, 2000).unwrap().len(), 500);
}

/// Drafts from agent lines: the `i`th's raw line is `{"line":i}`.
fn agent_drafts(from: usize, n: usize) -> Vec<EventDraft> {
    (from..from + n)
        .map(|i| {
            let raw = crate::universal::RawLine::json_or_text(format!(r#"{{"line":{i}}}"#));
            EventDraft::from_agent(error_data(i), Some(raw))
        })
        .collect()
}

#[test]
fn readers_of_raw_lines_get_every_one_after_the_tail_dropped_the_committed_ones() {
    let (db, store) = session_store(StoreOptions::default());
    store
        .append("s", &mut agent_drafts(1, 100), "t".into(), None)
        .unwrap();
    store.flush().unwrap();
    // The next append trims the tail: the 100 committed events stay, without raw lines.
    store
        .append("s", &mut agent_drafts(101, 10), "t".into(), None)
        .unwrap();
    let raw_line = |e: &StoredEvent| e.raw.as_ref().map(|r| r.json().into_owned());
    let reads = db.reads.load(Ordering::SeqCst);
    let without = store
        .read_page(
            "s",
            0,
            200,
            PageRead {
                raw: false,
                exact: false,
            },
        )
        .unwrap();
    assert_eq!(without.len(), 110);
    assert!(without.iter().all(|e| e.raw.is_none()));
    assert_eq!(
        db.reads.load(Ordering::SeqCst),
        reads,
        "a reader without raw lines reads the tail alone"
    );
    // A reader of raw lines gets each event's own, the committed ones from the database and
    // the uncommitted ones from the tail.
    let with = store.read("s", 0, 200).unwrap();
    assert_eq!(with.len(), 110);
    for (e, i) in with.iter().zip(1..) {
        assert_eq!(e.sequence, i);
        assert_eq!(
            raw_line(e).as_deref(),
            Some(format!(r#"{{"line":{i}}}"#).as_str())
        );
    }
    assert!(db.reads.load(Ordering::SeqCst) > reads);
    // Same once everything is committed.
    store.flush().unwrap();
    let with = store.read("s", 95, 200).unwrap();
    let lines: Vec<_> = with.iter().map(|e| raw_line(e).unwrap()).collect();
    assert_eq!(lines.len(), 15);
    assert_eq!(lines[0], r#"{"line":96}"#);
    assert_eq!(lines[14], r#"{"line":110}"#);
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
