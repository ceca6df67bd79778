//! Daemons sharing one store behave as one: each lists and reads every session, a live
//! engine's running turn is left alone (never recovered, appended to, or its agent killed),
//! and a dead engine's turn is ended `interrupted` by a survivor within the lease.
//!
//! The two-daemon test needs Postgres, so it is `#[ignore]`d: run it with `--ignored` (as
//! `.ci/run` does) and `CODEBUFFD_TEST_POSTGRES_URL` naming a database (`.ci/postgres.sh start`
//! prints one); without the variable it fails.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use support::daemon::{session_members, wait_session_empty, Daemon, TempDir};
use support::events::assert_dense;
use support::store::postgres_url;

fn instance_id(data_dir: &Path) -> String {
    std::fs::read_to_string(data_dir.join("instance-id"))
        .expect("the instance id file")
        .trim()
        .to_owned()
}

async fn listed(d: &Daemon) -> Vec<String> {
    let sessions: Value = d.get("/v1/sessions").await.json().await.unwrap();
    sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["sessionId"].as_str().map(str::to_owned))
        .collect()
}

async fn create_status(d: &Daemon, id: &str) -> u16 {
    d.post(&format!("/v1/sessions/{id}"), json!({"agent": "mock"}))
        .await
        .status()
        .as_u16()
}

/// A session as the database holds it: its owner, event count and last sequence.
fn stored(url: &str, id: &str) -> (String, i64, Option<i64>) {
    // The sync client must not run on the test's runtime thread.
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
            let owner: String = client
                .query_one("SELECT owner FROM sessions WHERE session_id = $1", &[&id])
                .unwrap()
                .get(0);
            let row = client
                .query_one(
                    "SELECT count(*), max(sequence) FROM events WHERE session_id = $1",
                    &[&id],
                )
                .unwrap();
            (owner, row.get(0), row.get(1))
        })
        .join()
        .unwrap()
    })
}

/// The engine id of the engine behind `d` (`GET /v1/engines`).
async fn engine_id(d: &Daemon) -> String {
    let engines: Value = d.get("/v1/engines").await.json().await.unwrap();
    engines["engines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["current"] == true)
        .and_then(|e| e["engineId"].as_str())
        .expect("the current engine")
        .to_owned()
}

#[tokio::test]
#[ignore = "needs Postgres: CODEBUFFD_TEST_POSTGRES_URL, and --ignored"]
async fn daemons_sharing_postgres_see_every_session_and_recover_a_dead_ones_turn() {
    let url = postgres_url();
    let (dir_a, dir_b) = (TempDir::new("owner-a"), TempDir::new("owner-b"));
    let store = ["--store", url.as_str(), "--store-lease", "3"];
    let a = Daemon::start_in(dir_a.path(), &store);
    let id = format!("a-{}", uuid::Uuid::new_v4());
    a.create(&id, json!({"agent": "mock"})).await;
    a.message(&id, "echo from daemon A").await;
    a.wait_turns_ended(&id, 1).await;
    // A turn left running: a daemon wrongly recovering the session would kill its agent.
    a.message(&id, "hang").await;
    a.wait_for(&id, Duration::from_secs(30), |e| {
        e["type"] == "item.completed"
            && e["data"]["item"]["content"][0]["label"] == "codebuff.start"
            && e["sequence"].as_u64() > Some(8)
    })
    .await;
    let agents = a.agents().await;
    assert!(!agents.is_empty(), "A's agent runs");
    let before = a.events(&id).await;
    let engine_a = engine_id(&a).await;
    assert_eq!(stored(&url, &id).0, engine_a, "the record names A's engine");

    let b = Daemon::start_in(dir_b.path(), &store);
    assert_ne!(
        instance_id(dir_a.path()),
        instance_id(dir_b.path()),
        "every data directory has its own instance id"
    );
    assert!(listed(&b).await.contains(&id), "B lists A's session");
    let info = b.info(&id).await;
    assert_eq!(info["status"], "running", "{info}");
    assert_eq!(info["owner"], engine_a.as_str(), "{info}");
    assert_eq!(b.events(&id).await, before, "B reads A's log");
    assert_eq!(create_status(&b, &id).await, 409, "the id is taken");
    // Give a wrongly recovering B time to act (kill, append, persist).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let after = a.events(&id).await;
    assert_eq!(after, before, "nothing was appended to A's session");
    assert_eq!(
        stored(&url, &id).0,
        engine_a,
        "B did not take the session over"
    );
    let alive: Vec<i32> = session_members(a.pid())
        .into_iter()
        .filter(|p| agents.contains(p))
        .collect();
    assert_eq!(alive, agents, "B killed none of A's agents");

    // B's own sessions are seen by A too.
    let own = format!("b-{}", uuid::Uuid::new_v4());
    b.create(&own, json!({"agent": "mock"})).await;
    assert_eq!(create_status(&a, &own).await, 409);
    assert!(listed(&a).await.contains(&own));

    // A dies: B ends its turn `interrupted` within the lease and kills the agent it left.
    let old = a.kill9();
    let events = b
        .wait_for(&id, Duration::from_secs(15), |e| {
            e["type"] == "turn.ended" && e["data"]["metadata"]["status"] == "interrupted"
        })
        .await;
    assert_dense(&events);
    assert_eq!(&events[..before.len()], &before[..]);
    assert!(
        wait_session_empty(old, Duration::from_secs(10)).is_empty(),
        "B killed the agent A left"
    );
    // The session goes on through B.
    b.message(&id, "echo after the crash").await;
    let events = b.wait_turns_ended(&id, 3).await;
    assert_dense(&events);
    assert_eq!(
        events.last().unwrap()["data"]["metadata"]["status"],
        "completed"
    );
    b.stop();
}

/// Sets the owner column of a session in a stopped daemon's SQLite database.
fn set_owner(data_dir: &Path, id: &str, owner: &str) {
    let conn = rusqlite::Connection::open(data_dir.join("codebuffd.db")).unwrap();
    let changed = conn
        .execute(
            "UPDATE sessions SET owner = ?1 WHERE session_id = ?2",
            [owner, id],
        )
        .unwrap();
    assert_eq!(changed, 1);
}

fn owner_of(data_dir: &Path, id: &str) -> String {
    let conn = rusqlite::Connection::open(data_dir.join("codebuffd.db")).unwrap();
    conn.query_row(
        "SELECT owner FROM sessions WHERE session_id = ?1",
        [id],
        |r| r.get(0),
    )
    .unwrap()
}

/// A session left held by an engine that is gone (an old daemon's instance id, a killed
/// engine) is freed by the next engine; every session is listed and usable.
#[tokio::test]
async fn sessions_held_by_gone_engines_are_freed_and_all_are_listed() {
    let dir = TempDir::new("owner-sqlite");
    let d = Daemon::start_in(dir.path(), &[]);
    for id in ["legacy", "foreign"] {
        d.create(id, json!({"agent": "mock"})).await;
        d.message(id, &format!("echo {id}")).await;
        d.wait_turns_ended(id, 1).await;
    }
    let legacy_before = d.events("legacy").await;
    d.stop();
    // An engine stopping lets go of its idle sessions.
    assert_eq!(owner_of(dir.path(), "legacy"), "");
    // As written before sessions had owners, and as held by an engine that is gone.
    set_owner(dir.path(), "legacy", "");
    set_owner(dir.path(), "foreign", "another-daemon");

    let d = Daemon::start_in(dir.path(), &[]);
    let mut ids = listed(&d).await;
    ids.sort();
    assert_eq!(ids, vec!["foreign".to_owned(), "legacy".to_owned()]);
    assert_eq!(d.events("legacy").await, legacy_before);
    assert_eq!(create_status(&d, "foreign").await, 409);
    for id in ["legacy", "foreign"] {
        d.message(id, "echo taken").await;
        let events = d.wait_turns_ended(id, 2).await;
        assert_dense(&events);
        assert_eq!(
            events.last().unwrap()["data"]["metadata"]["status"],
            "completed"
        );
    }
    d.stop();
    assert_eq!(owner_of(dir.path(), "legacy"), "");
    assert_eq!(owner_of(dir.path(), "foreign"), "");
}

#[test]
fn a_malformed_instance_id_is_a_clear_error_at_start() {
    let dir = TempDir::new("bad-instance-id");
    std::fs::write(dir.path().join("instance-id"), "not-a-uuid\n").unwrap();
    let out = std::process::Command::new(support::daemon::binary())
        .args(["server", "--no-token", "--port", "0", "--data-dir"])
        .arg(dir.path())
        .output()
        .expect("run codebuffd");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "must not start without its instance id"
    );
    assert!(stderr.contains("instance-id"), "names the file: {stderr}");
    assert!(stderr.contains("not-a-uuid"), "shows the content: {stderr}");
    assert!(!stderr.contains("panicked"), "no panic: {stderr}");
}
