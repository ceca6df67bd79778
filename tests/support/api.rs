//! What the tests know about the `/v1` surface itself: its routes, and the shape of its
//! problem documents (`application/problem+json`, `type` = `urn:sandbox-agent:error:<kind>`).
//! Shared by the real-binary suites and the in-process router tests.

use reqwest::Method;
use serde_json::{json, Value};

/// Every route of the API with a concrete path for session `s`, and a valid body where it
/// takes one.
pub fn routes(s: &str) -> Vec<(Method, String, Option<Value>)> {
    let msg = json!({"message": "echo hi"});
    vec![
        (Method::GET, "/v1/agents".into(), None),
        (Method::POST, "/v1/agents/mock/install".into(), None),
        (Method::GET, "/v1/agents/mock/modes".into(), None),
        (Method::GET, "/v1/agents/mock/models".into(), None),
        (Method::GET, "/v1/sessions".into(), None),
        (
            Method::POST,
            "/v1/sessions/other".into(),
            Some(json!({"agent": "mock"})),
        ),
        (Method::GET, format!("/v1/sessions/{s}"), None),
        (
            Method::POST,
            format!("/v1/sessions/{s}/messages"),
            Some(msg.clone()),
        ),
        (
            Method::POST,
            format!("/v1/sessions/{s}/messages/stream"),
            Some(msg),
        ),
        (Method::POST, format!("/v1/sessions/{s}/terminate"), None),
        (Method::POST, format!("/v1/sessions/{s}/cancel"), None),
        (Method::GET, format!("/v1/sessions/{s}/events"), None),
        (Method::GET, format!("/v1/sessions/{s}/events/sse"), None),
        (Method::GET, format!("/v1/sessions/{s}/events.jsonl"), None),
        (
            Method::POST,
            format!("/v1/sessions/{s}/questions/q1/reply"),
            Some(json!({"answers": [["a"]]})),
        ),
        (
            Method::POST,
            format!("/v1/sessions/{s}/questions/q1/reject"),
            None,
        ),
        (
            Method::POST,
            format!("/v1/sessions/{s}/permissions/p1/reply"),
            Some(json!({"reply": "once"})),
        ),
        (Method::GET, "/v1/openapi.json".into(), None),
    ]
}

/// Asserts that a parsed body is a problem document of `kind` with `status`, a title and a
/// detail. `what` names the request in failure messages.
pub fn assert_problem_body(what: &str, body: &Value, status: u16, kind: &str) {
    assert_eq!(
        body["type"],
        format!("urn:sandbox-agent:error:{kind}"),
        "{what}: {body}"
    );
    assert_eq!(body["status"], status, "{what}: {body}");
    assert!(
        body["title"].as_str().is_some_and(|t| !t.is_empty()),
        "{what}: title in {body}"
    );
    assert!(
        body["detail"].as_str().is_some_and(|t| !t.is_empty()),
        "{what}: detail in {body}"
    );
}

/// Asserts that a response (its status, `content-type` and body text) is a problem document
/// of `kind` with `status`; returns the document.
pub fn assert_problem_response(
    what: &str,
    got_status: u16,
    content_type: Option<&str>,
    text: &str,
    status: u16,
    kind: &str,
) -> Value {
    assert_eq!(got_status, status, "status of {what}: {text}");
    assert_eq!(
        content_type,
        Some("application/problem+json"),
        "content type of {what}: {text}"
    );
    let body: Value = serde_json::from_str(text).expect("a problem document is JSON");
    assert_problem_body(what, &body, status, kind);
    body
}

/// The response's JSON body, after checking that its status is `status` (a failure names the
/// URL and shows the body).
pub async fn json_of(resp: reqwest::Response, status: u16) -> Value {
    let url = resp.url().to_string();
    let got = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    assert_eq!(got, status, "{url}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {text}"))
}

/// The response's status and JSON body (`null` when it has none, or none that parses).
pub async fn status_and_json(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}
