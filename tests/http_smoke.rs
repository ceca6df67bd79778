//! The daemon answers over real HTTP and a `mock` turn runs end to end.

mod support;

use serde_json::json;
use support::daemon::Daemon;
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
    let texts: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "item.completed" && e["data"]["item"]["role"] == "assistant")
        .filter_map(|e| e["data"]["item"]["content"][0]["text"].as_str())
        .collect();
    assert_eq!(texts, vec!["hello from the test"]);
    let ended = events.iter().find(|e| e["type"] == "turn.ended").unwrap();
    assert_eq!(ended["data"]["metadata"]["status"], "completed");
    assert!(
        ended["data"]["metadata"]["cost"]["credits"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    d.stop();
}
