//! The stores' outbox (`src/store/outbox.rs`), checked the same way against every
//! implementation: memory, SQLite (a temporary file per test) and Postgres (the database
//! `CODEBUFFD_TEST_POSTGRES_URL` names; those cases are ignored unless asked for with
//! `--ignored`, as `.ci/run` does, and fail without a database; each uses session ids and
//! endpoints of its own, so runs never collide). Rows are written with their events, claimed by one owner
//! at a time even by several store instances on one database (as several processes would),
//! pass to another owner when a lease runs out, and keep their settlement.

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use codebuffd::store::outbox::{Claim, OutboxQuery, OutboxRoute, OutboxRow, Settlement, TypeMask};
use codebuffd::store::{EventStore, MemoryStore, PostgresStore, SessionRecord, SqliteStore};
use codebuffd::universal::{
    Cost, ErrorData, EventData, EventDraft, TurnData, TurnMetadata, TurnPhase, TurnStatus,
};
use support::store::postgres_url;

trait Backend {
    /// A store instance on the test's database: a new one per call (a second process) for
    /// the durable stores, the same one for memory.
    fn open(&self) -> Arc<dyn EventStore>;
    fn durable(&self) -> bool;
}

struct Memory(Arc<MemoryStore>);

impl Backend for Memory {
    fn open(&self) -> Arc<dyn EventStore> {
        self.0.clone()
    }
    fn durable(&self) -> bool {
        false
    }
}

struct Sqlite(PathBuf);

impl Drop for Sqlite {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Backend for Sqlite {
    fn open(&self) -> Arc<dyn EventStore> {
        Arc::new(SqliteStore::open(&self.0.join("codebuffd.db")).unwrap())
    }
    fn durable(&self) -> bool {
        true
    }
}

struct Postgres(String);

impl Backend for Postgres {
    fn open(&self) -> Arc<dyn EventStore> {
        Arc::new(PostgresStore::open(&self.0).unwrap())
    }
    fn durable(&self) -> bool {
        true
    }
}

macro_rules! suite {
    ($($test:ident),* $(,)?) => {
        mod memory {
            $(#[test] fn $test() { super::$test(&super::Memory(Default::default())) })*
        }
        mod sqlite {
            $(#[test] fn $test() {
                let dir = std::env::temp_dir()
                    .join(format!("codebuffd-outbox-{}", uuid::Uuid::new_v4().simple()));
                std::fs::create_dir_all(&dir).unwrap();
                super::$test(&super::Sqlite(dir))
            })*
        }
        mod postgres {
            $(
                #[test]
                #[ignore = "needs Postgres: CODEBUFFD_TEST_POSTGRES_URL, and --ignored"]
                fn $test() { super::$test(&super::Postgres(super::postgres_url())) }
            )*
        }
    };
}

suite!(
    rows_are_written_with_the_events_an_endpoint_wants,
    each_row_is_claimed_by_one_owner_among_many_instances,
    a_lease_that_runs_out_passes_to_another_owner,
    settlements_decide_what_is_claimed_next,
    rows_survive_a_reopen_and_a_deleted_session,
);

/// Names unique to one test run (Postgres is shared by every test).
fn unique(name: &str) -> String {
    format!("{name}-{}", uuid::Uuid::new_v4().simple())
}

fn turn_ended(credits: f64) -> EventDraft {
    EventDraft::synthetic(EventData::TurnEnded(Box::new(TurnData {
        phase: TurnPhase::Ended,
        turn_id: Some("turn_1".into()),
        metadata: Some(TurnMetadata {
            status: TurnStatus::Completed,
            cost: Cost::from_credits(credits),
            cost_reported: true,
            session_cost: None,
            exit_code: None,
            signal: None,
            agent_id: None,
            code: None,
            message: None,
            stderr_tail: None,
        }),
    })))
}

fn error(n: u64) -> EventDraft {
    EventDraft::synthetic(EventData::Error(Box::new(ErrorData {
        message: format!("event {n}"),
        code: None,
        details: None,
    })))
}

/// A session with `turns` turn ends among other events, its turn ends routed to `endpoint`.
fn session_with_turn_ends(store: &dyn EventStore, endpoint: &str, turns: usize) -> String {
    let id = unique("s");
    let outbox = store.outbox().expect("every store keeps an outbox");
    outbox.routes().set_session(
        &id,
        vec![OutboxRoute {
            endpoint: endpoint.into(),
            session_scoped: false,
            types: TypeMask::from_names(["turn.ended"]).unwrap(),
        }],
    );
    store
        .create(&SessionRecord::new(
            &id,
            "mock",
            serde_json::json!({}),
            "d",
            1,
        ))
        .unwrap();
    for t in 0..turns {
        let mut drafts = vec![error(1), error(2), turn_ended(t as f64 + 1.0), error(3)];
        store.append(&id, &mut drafts, "t".into(), None).unwrap();
    }
    store.flush().unwrap();
    id
}

fn claim(
    store: &dyn EventStore,
    owner: &str,
    endpoint: &str,
    now: u64,
    limit: usize,
) -> Vec<OutboxRow> {
    store
        .outbox()
        .unwrap()
        .claim(&Claim {
            owner,
            now,
            lease: Duration::from_secs(60),
            limit,
            endpoints: &[endpoint.to_owned()],
            session_scoped: false,
        })
        .unwrap()
}

fn list(store: &dyn EventStore, session: &str) -> Vec<OutboxRow> {
    store
        .outbox()
        .unwrap()
        .list(&OutboxQuery {
            session_id: Some(session.to_owned()),
            limit: 1000,
            ..Default::default()
        })
        .unwrap()
}

fn now() -> u64 {
    codebuffd::store::outbox::now_ms()
}

fn rows_are_written_with_the_events_an_endpoint_wants(b: &dyn Backend) {
    let store = b.open();
    let endpoint = unique("http://receiver/a");
    let id = session_with_turn_ends(&*store, &endpoint, 3);
    let rows = list(&*store, &id);
    assert_eq!(rows.len(), 3, "one row per turn.ended, none for the errors");
    // Newest first.
    let sequences: Vec<u64> = rows.iter().map(|r| r.sequence).collect();
    assert_eq!(sequences, [11, 7, 3]);
    for r in &rows {
        assert_eq!(r.event_type, "turn.ended");
        assert_eq!(r.status, "pending");
        assert_eq!(r.attempts, 0);
        assert_eq!(r.endpoint, endpoint);
        let event: serde_json::Value = serde_json::from_str(&r.payload).unwrap();
        assert_eq!(event["sequence"], r.sequence);
        assert_eq!(event["session_id"], id.as_str());
        assert!(r.webhook_id.starts_with("msg_"));
    }
    let ids: BTreeSet<&str> = rows.iter().map(|r| r.webhook_id.as_str()).collect();
    assert_eq!(ids.len(), 3, "every row has its own webhook id");
    // Another session, with no route of its own and no daemon route: no row.
    let quiet = unique("quiet");
    store
        .create(&SessionRecord::new(
            &quiet,
            "mock",
            serde_json::json!({}),
            "d",
            1,
        ))
        .unwrap();
    store
        .append(&quiet, &mut vec![turn_ended(1.0)], "t".into(), None)
        .unwrap();
    store.flush().unwrap();
    assert!(list(&*store, &quiet).is_empty());
}

fn each_row_is_claimed_by_one_owner_among_many_instances(b: &dyn Backend) {
    let endpoint = unique("http://receiver/fleet");
    let writer = b.open();
    let id = session_with_turn_ends(&*writer, &endpoint, 40);
    // Four claimers, each with a store instance of its own (as four processes would), taking
    // a few rows at a time until none is left.
    let claimed: Vec<Vec<i64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|n| {
                let store = b.open();
                let endpoint = endpoint.clone();
                s.spawn(move || {
                    let owner = format!("daemon-{n}");
                    let mut mine = Vec::new();
                    loop {
                        let rows = claim(&*store, &owner, &endpoint, now(), 3);
                        if rows.is_empty() {
                            return mine;
                        }
                        mine.extend(rows.iter().map(|r| r.id));
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all: Vec<i64> = claimed.iter().flatten().copied().collect();
    let distinct: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), 40, "every row claimed: {claimed:?}");
    assert_eq!(distinct.len(), 40, "no row claimed twice: {claimed:?}");
    assert_eq!(list(&*writer, &id).len(), 40);
}

fn a_lease_that_runs_out_passes_to_another_owner(b: &dyn Backend) {
    let store = b.open();
    let endpoint = unique("http://receiver/lease");
    session_with_turn_ends(&*store, &endpoint, 1);
    let t = now();
    let first = claim(&*store, "a", &endpoint, t, 10);
    assert_eq!(first.len(), 1);
    // Within the lease, nobody else gets it (nor does `a` again).
    assert!(claim(&*store, "b", &endpoint, t + 59_000, 10).is_empty());
    assert!(claim(&*store, "a", &endpoint, t + 59_000, 10).is_empty());
    // After it (`a` died), `b` does.
    let second = claim(&*store, "b", &endpoint, t + 61_000, 10);
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].webhook_id, first[0].webhook_id);
    // `a`'s late settlement is not taken; `b`'s is.
    let outbox = store.outbox().unwrap();
    let delivered = Settlement::Delivered { status: 200 };
    assert!(!outbox
        .settle(first[0].id, "a", t + 62_000, &delivered)
        .unwrap());
    assert!(outbox
        .settle(first[0].id, "b", t + 62_000, &delivered)
        .unwrap());
    // Releasing gives up a lease at once.
    let endpoint = unique("http://receiver/release");
    session_with_turn_ends(&*store, &endpoint, 1);
    let t = now();
    assert_eq!(claim(&*store, "c", &endpoint, t, 10).len(), 1);
    assert!(outbox.release("c").unwrap() >= 1);
    assert_eq!(claim(&*store, "d", &endpoint, t, 10).len(), 1);
}

fn settlements_decide_what_is_claimed_next(b: &dyn Backend) {
    let store = b.open();
    let outbox = store.outbox().unwrap();
    let endpoint = unique("http://receiver/settle");
    let id = session_with_turn_ends(&*store, &endpoint, 3);
    let t = now();
    let rows = claim(&*store, "o", &endpoint, t, 10);
    assert_eq!(rows.len(), 3);
    let retry = Settlement::Retry {
        at: t + 5_000,
        status: Some(500),
        error: "the receiver answered 500".into(),
    };
    assert!(outbox.settle(rows[0].id, "o", t, &retry).unwrap());
    assert!(outbox
        .settle(rows[1].id, "o", t, &Settlement::Delivered { status: 204 })
        .unwrap());
    let failed = Settlement::Failed {
        status: None,
        error: "cannot connect".into(),
    };
    assert!(outbox.settle(rows[2].id, "o", t, &failed).unwrap());
    // Not due yet, then due; delivered and failed rows never again.
    assert!(claim(&*store, "o", &endpoint, t + 4_000, 10).is_empty());
    let again = claim(&*store, "o", &endpoint, t + 5_000, 10);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].id, rows[0].id);
    assert_eq!(again[0].attempts, 1);
    assert_eq!(again[0].last_status, Some(500));
    let listed = list(&*store, &id);
    let status = |row: i64| {
        listed
            .iter()
            .find(|r| r.id == row)
            .map(|r| r.status.clone())
            .unwrap()
    };
    assert_eq!(status(rows[1].id), "delivered");
    assert_eq!(status(rows[2].id), "failed");
    let failed_row = listed.iter().find(|r| r.id == rows[2].id).unwrap();
    assert_eq!(failed_row.last_error.as_deref(), Some("cannot connect"));
    let only_failed = outbox
        .list(&OutboxQuery {
            status: Some("failed".into()),
            session_id: Some(id.clone()),
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(only_failed.len(), 1);
    // Pages: newest first, `before` goes on after the last.
    let page = outbox
        .list(&OutboxQuery {
            session_id: Some(id.clone()),
            limit: 2,
            ..Default::default()
        })
        .unwrap();
    let rest = outbox
        .list(&OutboxQuery {
            session_id: Some(id),
            before: Some(page[1].id),
            limit: 2,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(page.len() + rest.len(), 3);
    assert!(page[0].id > page[1].id && page[1].id > rest[0].id);
}

fn rows_survive_a_reopen_and_a_deleted_session(b: &dyn Backend) {
    let endpoint = unique("http://receiver/reopen");
    let id = {
        let store = b.open();
        session_with_turn_ends(&*store, &endpoint, 2)
    };
    let store = b.open();
    if b.durable() {
        // Another instance (a restarted daemon) sees the rows and can claim them.
        assert_eq!(list(&*store, &id).len(), 2);
    }
    assert!(store.delete_session(&id).unwrap());
    // The rows carry their events: deliveries go on after the session is gone.
    let rows = claim(&*store, "o", &endpoint, now(), 10);
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.payload.contains("turn.ended")));
}
