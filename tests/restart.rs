//! Durable sessions: a daemon killed (SIGKILL) or stopped (SIGTERM) mid-turn and started
//! again on the same data directory keeps every session and event, ends the interrupted turn,
//! leaves no orphaned agent, and resumes the conversation.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::daemon::{session_members, wait_session_empty, Daemon, TempDir};
use support::events::{assert_dense, count, turn_ends};
use support::invariants::assert_well_formed;

fn store_arg(dir: &TempDir) -> String {
    format!("sqlite://{}", dir.path().join("codebuffd.db").display())
}

/// Starts `hang` in a new session and waits until its agent is running; returns the agent's
/// pids (members of the daemon's process session other than the daemon).
async fn start_hanging_turn(d: &Daemon, id: &str) -> Vec<i32> {
    d.create(id, json!({"agent": "mock"})).await;
    d.message(id, "echo first turn").await;
    d.wait_turns_ended(id, 1).await;
    d.message(id, "hang").await;
    d.wait_for(id, Duration::from_secs(30), |e| {
        e["type"] == "item.completed"
            && e["data"]["item"]["content"][0]["label"] == "codebuff.start"
            && e["native_session_id"].is_string()
            && e["sequence"].as_u64() > Some(8)
    })
    .await;
    let agents = d.agents().await;
    assert!(!agents.is_empty(), "the hanging agent runs");
    agents
}

/// After a restart: the interrupted turn ended once, everything is well-formed, and a new
/// message resumes the same conversation.
async fn check_recovered(d: &Daemon, id: &str, before: &[Value]) {
    let events = d
        .wait_for(id, Duration::from_secs(30), |e| {
            e["type"] == "turn.ended" && e["data"]["metadata"]["status"] == "interrupted"
        })
        .await;
    assert_dense(&events);
    // Nothing recorded before the restart was lost or changed.
    assert_eq!(&events[..before.len()], before);
    assert_eq!(count(&events, "turn.ended"), 2, "one ending per turn");
    assert_well_formed(&events);
    let native = events
        .iter()
        .rev()
        .find_map(|e| e["native_session_id"].as_str())
        .expect("a native session id")
        .to_owned();

    let info = d.info(id).await;
    assert_eq!(info["status"], "idle");
    assert_eq!(info["ended"], false);
    assert_eq!(info["turns"], 2);
    // Not in the stored record: read back from the log.
    assert_eq!(info["firstPrompt"], "echo first turn");

    d.message(id, "echo after the restart").await;
    let events = d.wait_turns_ended(id, 3).await;
    assert_dense(&events);
    assert_well_formed(&events);
    let third = events
        .iter()
        .rposition(|e| e["type"] == "turn.started")
        .unwrap();
    let last_turn = &events[third..];
    let start = last_turn
        .iter()
        .find(|e| e["data"]["item"]["content"][0]["label"] == "codebuff.start")
        .expect("the third turn's start");
    // The mock was run with --continue: same conversation, history carried over.
    assert_eq!(start["native_session_id"], native.as_str());
    let detail = start["data"]["item"]["content"][0]["detail"]
        .as_str()
        .unwrap();
    assert!(!detail.contains("messageHistoryLength=0"), "{detail}");
    let ended = events.last().unwrap();
    assert_eq!(ended["type"], "turn.ended");
    assert_eq!(ended["data"]["metadata"]["status"], "completed");
}

#[tokio::test]
async fn a_daemon_killed_mid_turn_recovers_its_sessions() {
    let dir = TempDir::new("restart-kill");
    let store = store_arg(&dir);
    let d = Daemon::start_in(dir.path(), &["--store", &store]);
    let agents = start_hanging_turn(&d, "r1").await;
    let before = d.events("r1").await;
    let old = d.kill9();
    // The agent outlives the crashed daemon (its own process group) …
    assert!(!session_members(old).is_empty());

    let d = Daemon::start_in(dir.path(), &["--store", &store]);
    // … until the new daemon kills it.
    let left = wait_session_empty(old, Duration::from_secs(10));
    assert!(
        left.is_empty(),
        "orphaned agents {left:?} (were {agents:?})"
    );
    check_recovered(&d, "r1", &before).await;

    // SSE clients resume exactly where they were.
    let resp = d
        .http
        .get(d.url("/v1/sessions/r1/events/sse"))
        .header("Last-Event-ID", before.len().to_string())
        .send()
        .await
        .unwrap();
    let mut body = resp;
    let chunk = tokio::time::timeout(Duration::from_secs(10), body.chunk())
        .await
        .expect("SSE data")
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&chunk);
    assert!(
        text.starts_with(&format!("id: {}\n", before.len() + 1)),
        "resumes after Last-Event-ID: {text}"
    );
    drop(body);
    d.stop();
}

#[tokio::test]
async fn a_daemon_stopped_mid_turn_ends_the_turn_and_resumes() {
    let dir = TempDir::new("restart-term");
    let store = store_arg(&dir);
    let d = Daemon::start_in(dir.path(), &["--store", &store]);
    start_hanging_turn(&d, "r2").await;
    let before = d.events("r2").await;
    d.stop(); // SIGTERM: the turn ends as interrupted, the agent is killed, exit 0

    let d = Daemon::start_in(dir.path(), &["--store", &store]);
    let events = d.events("r2").await;
    // The ending was recorded by the stopping daemon; the new one adds nothing to it.
    let interrupted = turn_ends(&events)
        .into_iter()
        .filter(|m| m["status"] == "interrupted")
        .count();
    assert_eq!(interrupted, 1);
    check_recovered(&d, "r2", &before).await;
    let sessions: Value = d.get("/v1/sessions").await.json().await.unwrap();
    assert_eq!(sessions["sessions"][0]["sessionId"], "r2");
    d.stop();
}

#[test]
fn a_corrupted_database_is_a_clear_error_at_start() {
    let dir = TempDir::new("corrupt");
    let db = dir.path().join("codebuffd.db");
    std::fs::write(&db, vec![0x42u8; 64 * 1024]).unwrap();
    let out = std::process::Command::new(support::daemon::binary())
        .args(["server", "--no-token", "--port", "0", "--data-dir"])
        .arg(dir.path())
        .arg("--store")
        .arg(format!("sqlite://{}", db.display()))
        .output()
        .expect("run codebuffd");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "must not start on a corrupted database"
    );
    assert!(stderr.contains("codebuffd.db"), "names the file: {stderr}");
    assert!(!stderr.contains("panicked"), "no panic: {stderr}");
}
