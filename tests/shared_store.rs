//! Daemons sharing one store: each restores only the sessions it owns (its instance id, kept
//! in `<data-dir>/instance-id`) and unowned ones from before owners existed; another daemon's
//! sessions are never listed, recovered, appended to, or their agents killed.
//!
//! The two-daemon test needs Postgres (SQLite is one daemon's file), so it is `#[ignore]`d: run
//! it with `--ignored` (as `.ci/run` does) and `CODEBUFFD_TEST_POSTGRES_URL` naming a database
//! (`.ci/postgres.sh start` prints one); without the variable it fails.

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

#[tokio::test]
#[ignore = "needs Postgres: CODEBUFFD_TEST_POSTGRES_URL, and --ignored"]
async fn daemons_sharing_postgres_leave_each_others_sessions_alone() {
    let url = postgres_url();
    let (dir_a, dir_b) = (TempDir::new("owner-a"), TempDir::new("owner-b"));
    let store = ["--store", url.as_str()];
    let a = Daemon::start_in(dir_a.path(), &store);
    let id = format!("a-{}", uuid::Uuid::new_v4());
    a.create(&id, json!({"agent": "mock"})).await;
    a.message(&id, "echo from daemon A").await;
    a.wait_turns_ended(&id, 1).await;
    // A turn left running: a daemon adopting the session would kill its agent.
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
    let owner_a = instance_id(dir_a.path());
    assert_eq!(stored(&url, &id).0, owner_a, "the record names A");

    let b = Daemon::start_in(dir_b.path(), &store);
    let owner_b = instance_id(dir_b.path());
    assert_ne!(
        owner_a, owner_b,
        "every data directory has its own instance id"
    );
    assert!(
        !listed(&b).await.contains(&id),
        "B does not list A's session"
    );
    assert_eq!(b.get(&format!("/v1/sessions/{id}")).await.status(), 404);
    assert_eq!(
        b.get(&format!("/v1/sessions/{id}/events")).await.status(),
        404
    );
    assert_eq!(create_status(&b, &id).await, 409, "the id is taken");
    // Give a wrongly adopting B time to recover the session (kill, append, persist).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = a.events(&id).await;
    assert_eq!(after, before, "nothing was appended to A's session");
    assert_dense(&after);
    let (owner, count, last) = stored(&url, &id);
    assert_eq!(owner, owner_a, "B did not take the session over");
    assert_eq!(
        (count, last),
        (before.len() as i64, Some(before.len() as i64))
    );
    let alive: Vec<i32> = session_members(a.pid())
        .into_iter()
        .filter(|p| agents.contains(p))
        .collect();
    assert_eq!(alive, agents, "B killed none of A's agents");

    // B's own sessions are B's; A still works and its log stays dense.
    let own = format!("b-{}", uuid::Uuid::new_v4());
    b.create(&own, json!({"agent": "mock"})).await;
    assert_eq!(create_status(&a, &own).await, 409);
    assert!(!listed(&a).await.contains(&own));
    assert_eq!(stored(&url, &own).0, owner_b);

    // A crashes and comes back on its data directory: it recovers its own session.
    let old = a.kill9();
    let a = Daemon::start_in(dir_a.path(), &store);
    assert!(
        wait_session_empty(old, Duration::from_secs(10)).is_empty(),
        "A's restart kills the agent it left"
    );
    let events = a
        .wait_for(&id, Duration::from_secs(30), |e| {
            e["type"] == "turn.ended" && e["data"]["metadata"]["status"] == "interrupted"
        })
        .await;
    assert_dense(&events);
    assert_eq!(&events[..before.len()], &before[..]);
    assert!(
        !listed(&a).await.contains(&own),
        "A leaves B's session alone"
    );
    a.message(&id, "echo after the restart").await;
    let events = a.wait_turns_ended(&id, 3).await;
    assert_dense(&events);
    assert!(!listed(&b).await.contains(&id));
    a.stop();
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

#[tokio::test]
async fn unowned_sessions_are_adopted_and_foreign_ones_are_not_loaded() {
    let dir = TempDir::new("owner-sqlite");
    let d = Daemon::start_in(dir.path(), &[]);
    let me = instance_id(dir.path());
    for id in ["legacy", "foreign"] {
        d.create(id, json!({"agent": "mock"})).await;
        d.message(id, &format!("echo {id}")).await;
        d.wait_turns_ended(id, 1).await;
    }
    let legacy_before = d.events("legacy").await;
    d.stop();
    assert_eq!(owner_of(dir.path(), "legacy"), me);
    // As written before sessions had owners, and as written by another daemon.
    set_owner(dir.path(), "legacy", "");
    set_owner(dir.path(), "foreign", "another-daemon");

    let d = Daemon::start_in(dir.path(), &[]);
    assert_eq!(instance_id(dir.path()), me, "the instance id is stable");
    assert_eq!(listed(&d).await, vec!["legacy".to_owned()]);
    assert_eq!(d.events("legacy").await, legacy_before);
    assert_eq!(create_status(&d, "foreign").await, 409);
    assert_eq!(d.get("/v1/sessions/foreign").await.status(), 404);
    d.message("legacy", "echo adopted").await;
    let events = d.wait_turns_ended("legacy", 2).await;
    assert_dense(&events);
    d.stop();
    assert_eq!(owner_of(dir.path(), "legacy"), me, "adopted");
    assert_eq!(owner_of(dir.path(), "foreign"), "another-daemon");
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
