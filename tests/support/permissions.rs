//! Permission requests over `/v1`: waiting for one, and replying to it.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::daemon::Daemon;
use super::events::of_type;

/// How long a request may take to show up (a real Codebuff run on a loaded machine is slow).
const WAIT: Duration = Duration::from_secs(60);

/// Waits for the `n`th `permission.requested` of the session and returns it.
pub async fn requested(d: &Daemon, id: &str, n: usize) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let events = d.events(id).await;
        let asked = of_type(&events, "permission.requested");
        if asked.len() >= n {
            return asked[n - 1].clone();
        }
        assert!(Instant::now() < deadline, "no request {n}: {events:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The request's `permission_id`.
pub fn permission_id(e: &Value) -> String {
    e["data"]["permission_id"].as_str().unwrap().to_owned()
}

/// Replies `answer` (`once`, `always`, `reject`) to a request; the response's status.
pub async fn reply(d: &Daemon, id: &str, permission: &str, answer: &str) -> u16 {
    d.post(
        &format!("/v1/sessions/{id}/permissions/{permission}/reply"),
        json!({ "reply": answer }),
    )
    .await
    .status()
    .as_u16()
}

/// [`reply`], which must be taken (204).
pub async fn reply_ok(d: &Daemon, id: &str, permission: &str, answer: &str) {
    let status = reply(d, id, permission, answer).await;
    assert_eq!(status, 204, "reply {answer} to {permission}");
}
