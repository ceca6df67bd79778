//! The daemon answers over real HTTP and a `mock` turn runs end to end.

mod support;

use serde_json::json;
use support::daemon::Daemon;
use support::events::{assistant_texts, turn_ends};
use support::invariants::assert_well_formed;

#[tokio::test]
async fn a_mock_echo_turn_runs_end_to_end() {
    let d = Daemon::start();
    let health: serde_json::Value = d.get("/v1/health").await.json().await.unwrap();
    assert_eq!(health, json!({"status": "ok"}));
    d.create("s1", json!({"agent": "mock"})).await;
    d.message("s1", "echo hello from the test").await;
    let events = d.wait_turns_ended("s1", 1).await;
    assert_well_formed(&events);
    assert_eq!(assistant_texts(&events), vec!["hello from the test"]);
    let ended = turn_ends(&events)[0];
    assert_eq!(ended["status"], "completed");
    assert!(ended["cost"]["credits"].as_f64().unwrap() > 0.0);
    d.stop();
}
