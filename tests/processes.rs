//! No process a turn started outlives the turn, not even one that left the turn's process
//! group with `setsid()` (the mock's `escape` scenario starts `sleep 3600` so): after the turn
//! completes, after terminate, and at daemon shutdown.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::daemon::Daemon;
use support::procs::alive;

/// The pid the `escape` scenario announces in its text (`escaped <pid>`).
fn escapee(events: &[Value]) -> u32 {
    events
        .iter()
        .filter(|e| e["type"] == "item.completed")
        .filter_map(|e| e["data"]["item"]["content"][0]["text"].as_str())
        .find_map(|t| t.strip_prefix("escaped "))
        .and_then(|pid| pid.parse().ok())
        .filter(|pid| *pid > 0)
        .unwrap_or_else(|| panic!("no escapee announced: {events:?}"))
}

/// Waits until `pid` is gone or a zombie; kills it and fails the test if it is not within
/// `limit`.
fn assert_dies(pid: u32, limit: Duration, when: &str) {
    let deadline = Instant::now() + limit;
    while alive(pid) {
        if Instant::now() > deadline {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("the escapee {pid} outlived its turn ({when})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the events hold the escapee's announcement.
async fn wait_escapee(d: &Daemon, id: &str) -> u32 {
    let events = d
        .wait_for(id, Duration::from_secs(20), |e| {
            e["type"] == "item.completed"
                && e["data"]["item"]["content"][0]["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("escaped "))
        })
        .await;
    escapee(&events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escapee_of_a_finished_turn_is_killed_when_the_turn_ends() {
    let d = Daemon::start();
    d.create("e1", json!({"agent": "mock"})).await;
    d.message("e1", "escape").await;
    let events = d.wait_turns_ended("e1", 1).await;
    let pid = escapee(&events);
    let ended = events.iter().find(|e| e["type"] == "turn.ended").unwrap();
    assert_eq!(ended["data"]["metadata"]["status"], "completed");
    assert_dies(pid, Duration::from_secs(3), "after the turn completed");
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escapee_is_killed_when_its_session_is_terminated() {
    let d = Daemon::start();
    d.create("e2", json!({"agent": "mock"})).await;
    d.message("e2", "escape hang").await;
    let pid = wait_escapee(&d, "e2").await;
    assert!(alive(pid), "the escapee runs while its turn does");
    let resp = d.post_empty("/v1/sessions/e2/terminate").await;
    assert_eq!(resp.status(), 204);
    assert_dies(pid, Duration::from_secs(3), "after terminate");
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escapee_is_killed_when_the_daemon_shuts_down() {
    let d = Daemon::start();
    d.create("e3", json!({"agent": "mock"})).await;
    d.message("e3", "escape hang").await;
    let pid = wait_escapee(&d, "e3").await;
    d.stop();
    assert_dies(pid, Duration::from_secs(3), "after the daemon stopped");
}
