//! The `/v1` HTTP surface (`spec/http-api.md`) over real HTTP on loopback, against the real
//! `codebuffd server` binary: compatible start and auth, agents, session creation, bad requests
//! as problem documents, CORS, event polling and transcripts, and the OpenAPI document.
//!
//! Each test starts its own daemon and ends with [`Daemon::stop`] (exit 0, no leftover process).

mod support;

use reqwest::header::{CONTENT_TYPE, ORIGIN};
use reqwest::{Method, Response};
use serde_json::{json, Value};
use support::daemon::{free_port, Daemon, DaemonOptions, TempDir};
use support::invariants::assert_well_formed;

/// Every route of the spec with a concrete path for session `s`, and a valid body where it
/// takes one.
fn routes(s: &str) -> Vec<(Method, String, Option<Value>)> {
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

/// A request to `path` on `d` without any `Authorization` header.
fn bare(d: &Daemon, method: Method, path: &str, body: Option<&Value>) -> reqwest::RequestBuilder {
    let rb = d.http.request(method, d.url(path));
    match body {
        Some(b) => rb.json(b),
        None => rb,
    }
}

/// Asserts that `resp` is a problem document of `kind` with `status`; returns its body.
async fn assert_problem(resp: Response, status: u16, kind: &str) -> Value {
    let url = resp.url().to_string();
    assert_eq!(resp.status().as_u16(), status, "status of {url}");
    let ct = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let text = resp.text().await.expect("problem body");
    assert_eq!(
        ct, "application/problem+json",
        "content type of {url}: {text}"
    );
    let body: Value = serde_json::from_str(&text).expect("a problem document is JSON");
    assert_eq!(
        body["type"],
        format!("urn:sandbox-agent:error:{kind}"),
        "{url}: {body}"
    );
    assert_eq!(body["status"], status, "{url}: {body}");
    assert!(
        body["title"].as_str().is_some_and(|t| !t.is_empty()),
        "{url}: title in {body}"
    );
    assert!(
        body["detail"].as_str().is_some_and(|t| !t.is_empty()),
        "{url}: detail in {body}"
    );
    body
}

async fn json_of(resp: Response, status: u16) -> Value {
    let url = resp.url().to_string();
    let got = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    assert_eq!(got, status, "{url}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {text}"))
}

fn header(resp: &Response, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

#[tokio::test]
async fn the_compatible_command_line_starts_and_every_route_but_health_needs_the_token() {
    let port = free_port();
    let token = "s3cret-T0ken";
    let port_arg = port.to_string();
    let d = Daemon::start_with_args(
        &["--host", "127.0.0.1", "--port", &port_arg, "--token", token],
        Some(token),
    );
    assert_eq!(d.base, format!("http://127.0.0.1:{port}"));

    // Health never needs a token, not even a wrong one gets in its way.
    for auth in [None, Some("Bearer wrong")] {
        let mut rb = d.http.get(d.url("/v1/health"));
        if let Some(a) = auth {
            rb = rb.header("authorization", a);
        }
        let body = json_of(rb.send().await.unwrap(), 200).await;
        assert_eq!(body, json!({"status": "ok"}));
    }

    d.create("s1", json!({"agent": "mock"})).await;
    let wrong = [
        None,
        Some("Bearer wrong".to_owned()),
        Some(format!("Bearer {token}x")),
        Some("Token wrong".to_owned()),
        Some("Basic dXNlcjp3cm9uZw==".to_owned()), // user:wrong
        Some(format!("Digest {token}")),
        Some(token.to_owned()),
    ];
    for (method, path, body) in routes("s1") {
        for auth in &wrong {
            let mut rb = bare(&d, method.clone(), &path, body.as_ref());
            if let Some(a) = auth {
                rb = rb.header("authorization", a);
            }
            let resp = rb.send().await.unwrap();
            let p = assert_problem(resp, 401, "token_invalid").await;
            assert_eq!(p["title"], "Token invalid", "{method} {path} with {auth:?}");
        }
    }
    // None of the rejected requests had an effect.
    let sessions = json_of(d.get("/v1/sessions").await, 200).await;
    let ids: Vec<&str> = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["sessionId"].as_str())
        .collect();
    assert_eq!(ids, vec!["s1"]);
    let info = json_of(d.get("/v1/sessions/s1").await, 200).await;
    assert_eq!(info["eventCount"], 1);
    assert_eq!(info["ended"], false);

    // The three ways to present the token.
    let schemes: Vec<Box<dyn Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder>> = vec![
        Box::new(move |rb| rb.bearer_auth(token)),
        Box::new(move |rb| rb.header("authorization", format!("Token {token}"))),
        Box::new(move |rb| rb.basic_auth("anyone", Some(token))),
        Box::new(move |rb| rb.header("authorization", format!("bearer  {token} "))),
    ];
    for scheme in &schemes {
        let agents = json_of(
            scheme(bare(&d, Method::GET, "/v1/agents", None))
                .send()
                .await
                .unwrap(),
            200,
        )
        .await;
        assert_eq!(agents["agents"][0]["id"], "codebuff");
        let info = json_of(
            scheme(bare(&d, Method::GET, "/v1/sessions/s1", None))
                .send()
                .await
                .unwrap(),
            200,
        )
        .await;
        assert_eq!(info["sessionId"], "s1");
    }
    // An authenticated turn runs.
    d.message("s1", "echo with a token").await;
    let events = d.wait_turns_ended("s1", 1).await;
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn agents_modes_models_and_install() {
    let d = Daemon::start();
    let body = json_of(d.get("/v1/agents").await, 200).await;
    let agents = body["agents"].as_array().expect("agents array");
    let ids: Vec<&str> = agents.iter().filter_map(|a| a["id"].as_str()).collect();
    assert_eq!(ids, vec!["codebuff", "mock"]);
    let flags = [
        "planMode",
        "permissions",
        "questions",
        "toolCalls",
        "toolResults",
        "textMessages",
        "images",
        "fileAttachments",
        "sessionLifecycle",
        "errorEvents",
        "reasoning",
        "status",
        "commandExecution",
        "fileChanges",
        "mcpTools",
        "streamingDeltas",
        "itemStarted",
        "variants",
        "sharedProcess",
    ];
    for a in agents {
        assert!(a["installed"].is_boolean(), "{a}");
        assert!(a["credentialsAvailable"].is_boolean(), "{a}");
        let caps = a["capabilities"].as_object().expect("capabilities");
        let mut keys: Vec<&str> = caps.keys().map(String::as_str).collect();
        keys.sort_unstable();
        let mut want = flags.to_vec();
        want.sort_unstable();
        assert_eq!(keys, want, "{}: exactly the 19 flags", a["id"]);
        assert!(caps.values().all(Value::is_boolean), "{a}");
        // Truthful: both ask questions, stream deltas and call tools; neither gates permissions.
        for on in ["questions", "streamingDeltas", "toolCalls", "textMessages"] {
            assert_eq!(caps[on], true, "{}: {on}", a["id"]);
        }
        assert_eq!(caps["permissions"], false, "{}", a["id"]);
    }
    let mock = &agents[1];
    assert_eq!(mock["installed"], true);
    assert_eq!(mock["credentialsAvailable"], true);

    for agent in ["codebuff", "mock"] {
        let modes = json_of(d.get(&format!("/v1/agents/{agent}/modes")).await, 200).await;
        let modes = modes["modes"].as_array().expect("modes");
        let ids: Vec<&str> = modes.iter().filter_map(|m| m["id"].as_str()).collect();
        assert_eq!(ids, vec!["build", "free", "max", "plan"]);
        for m in modes {
            assert!(m["name"].as_str().is_some_and(|s| !s.is_empty()), "{m}");
            assert!(
                m["description"].as_str().is_some_and(|s| !s.is_empty()),
                "{m}"
            );
        }
        let models = json_of(d.get(&format!("/v1/agents/{agent}/models")).await, 200).await;
        assert!(models["models"].is_array(), "{models}");
        for m in models["models"].as_array().unwrap() {
            assert!(m["id"].is_string(), "{m}");
        }
    }
    let models = json_of(d.get("/v1/agents/mock/models").await, 200).await;
    assert_eq!(models["defaultModel"], "mock");
    assert_eq!(models["models"][0]["id"], "mock");

    for path in [
        "/v1/agents/claude/modes",
        "/v1/agents/claude/models",
        "/v1/agents/amp/modes",
    ] {
        let p = assert_problem(d.get(path).await, 400, "unsupported_agent").await;
        assert!(p["agent"].is_string(), "{p}");
    }
    let p = assert_problem(
        d.post_empty("/v1/agents/claude/install").await,
        400,
        "unsupported_agent",
    )
    .await;
    assert_eq!(p["agent"], "claude");

    // Install: no body, an empty body, and `{reinstall}` all work for the mock.
    let resp = d.post_empty("/v1/agents/mock/install").await;
    assert_eq!(resp.status(), 204);
    assert_eq!(resp.text().await.unwrap(), "");
    let resp = d
        .post("/v1/agents/mock/install", json!({"reinstall": true}))
        .await;
    assert_eq!(resp.status(), 204);
    let resp = d.post("/v1/agents/mock/install", json!({})).await;
    assert_eq!(resp.status(), 204);
    d.stop();
}

#[tokio::test]
async fn sessions_are_created_validated_and_described_without_their_api_key() {
    let d = Daemon::start();
    let work = TempDir::new("http-api-dir");
    let secret = "sk-cb-NEVER-ECHO-4f1d9a";

    let resp = d
        .post(
            "/v1/sessions/s1",
            json!({
                "agent": "mock",
                "agentMode": "plan",
                "permissionMode": "bypass",
                "model": "mock-model",
                "directory": work.path(),
                "title": "A title",
                "apiKey": secret,
                "unknownKey": {"nested": [1, 2]},
                "agentVersion": "1.2.3",
                "variant": "v1",
            }),
        )
        .await;
    assert_eq!(json_of(resp, 200).await, json!({"healthy": true}));

    // Same id again.
    let p = assert_problem(
        d.post("/v1/sessions/s1", json!({"agent": "mock"})).await,
        409,
        "session_already_exists",
    )
    .await;
    assert_eq!(p["sessionId"], "s1");
    // Bad agents and modes.
    let p = assert_problem(
        d.post("/v1/sessions/c1", json!({"agent": "claude"})).await,
        400,
        "unsupported_agent",
    )
    .await;
    assert_eq!(p["agent"], "claude");
    let p = assert_problem(
        d.post(
            "/v1/sessions/c2",
            json!({"agent": "mock", "agentMode": "turbo"}),
        )
        .await,
        400,
        "mode_not_supported",
    )
    .await;
    assert!(p["detail"].as_str().unwrap().contains("turbo"), "{p}");
    let p = assert_problem(
        d.post(
            "/v1/sessions/c3",
            json!({"agent": "codebuff", "permissionMode": "ask"}),
        )
        .await,
        400,
        "mode_not_supported",
    )
    .await;
    assert!(p["detail"].as_str().unwrap().contains("ask"), "{p}");
    // A directory that does not exist.
    let missing = work.path().join("does-not-exist");
    let p = assert_problem(
        d.post(
            "/v1/sessions/c4",
            json!({"agent": "mock", "directory": missing}),
        )
        .await,
        400,
        "invalid_request",
    )
    .await;
    assert!(
        p["detail"].as_str().unwrap().contains("does-not-exist"),
        "{p}"
    );
    // A file is not a directory either.
    let file = work.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    assert_problem(
        d.post(
            "/v1/sessions/c5",
            json!({"agent": "mock", "directory": file}),
        )
        .await,
        400,
        "invalid_request",
    )
    .await;
    // The agent is required.
    assert_problem(
        d.post("/v1/sessions/c6", json!({"directory": work.path()}))
            .await,
        422,
        "invalid_request",
    )
    .await;
    // None of the failed creations left a session behind.
    for id in ["c1", "c2", "c3", "c4", "c5", "c6"] {
        assert_problem(
            d.get(&format!("/v1/sessions/{id}")).await,
            404,
            "session_not_found",
        )
        .await;
    }

    let info = json_of(d.get("/v1/sessions/s1").await, 200).await;
    let mut keys: Vec<&str> = info
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    let mut want = vec![
        "sessionId",
        "agent",
        "agentMode",
        "permissionMode",
        "model",
        "variant",
        "nativeSessionId",
        "ended",
        "eventCount",
        "createdAt",
        "updatedAt",
        "directory",
        "title",
        "status",
        "cost",
        "turns",
    ];
    want.sort_unstable();
    assert_eq!(keys, want, "SessionInfo fields: {info}");
    assert_eq!(info["sessionId"], "s1");
    assert_eq!(info["agent"], "mock");
    assert_eq!(info["agentMode"], "plan");
    assert_eq!(info["permissionMode"], "bypass");
    assert_eq!(info["model"], "mock-model");
    assert_eq!(info["variant"], "v1");
    assert_eq!(info["nativeSessionId"], Value::Null);
    assert_eq!(info["ended"], false);
    assert_eq!(info["eventCount"], 1);
    assert_eq!(info["directory"], work.path().display().to_string());
    assert_eq!(info["title"], "A title");
    assert_eq!(info["status"], "idle");
    assert_eq!(info["turns"], 0);
    assert_eq!(info["cost"]["credits"], 0.0);
    let created = info["createdAt"].as_u64().expect("createdAt epoch ms");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        created > now_ms - 600_000 && created <= now_ms + 1000,
        "{created} vs {now_ms}"
    );
    assert!(info["updatedAt"].as_u64().unwrap() >= created);

    // A session with all defaults: build, bypass, the daemon's directory.
    d.create("s2", json!({"agent": "mock"})).await;
    let info2 = json_of(d.get("/v1/sessions/s2").await, 200).await;
    assert_eq!(info2["agentMode"], "build");
    assert_eq!(info2["permissionMode"], "bypass");
    assert_eq!(info2["model"], Value::Null);
    assert_eq!(info2["title"], Value::Null);
    assert!(info2["directory"].as_str().is_some_and(|s| !s.is_empty()));

    // A turn; then the info reflects it.
    d.message("s1", "echo hello").await;
    let events = d.wait_turns_ended("s1", 1).await;
    assert_well_formed(&events);
    let started = &events[0];
    assert_eq!(
        started["data"]["metadata"],
        json!({"agent": "mock", "agentMode": "plan", "model": "mock-model",
               "permissionMode": "bypass", "variant": "v1"})
    );
    let info = json_of(d.get("/v1/sessions/s1").await, 200).await;
    assert_eq!(info["turns"], 1);
    assert_eq!(info["status"], "idle");
    assert_eq!(info["eventCount"], events.len());
    assert!(info["nativeSessionId"].is_string(), "{info}");
    assert_eq!(info["cost"]["credits"], 1.25);

    // Newest first.
    let list = json_of(d.get("/v1/sessions").await, 200).await;
    let ids: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["sessionId"].as_str())
        .collect();
    assert_eq!(ids, vec!["s2", "s1"]);
    assert_eq!(list["sessions"][1], info);

    // The api key is never echoed: not in the info, the list, the events (raw or not) or the
    // transcript.
    for path in [
        "/v1/sessions/s1",
        "/v1/sessions",
        "/v1/sessions/s1/events",
        "/v1/sessions/s1/events?includeRaw=true",
        "/v1/sessions/s1/events.jsonl",
        "/v1/sessions/s1/events.jsonl?includeRaw=true",
    ] {
        let text = d.get(path).await.text().await.unwrap();
        assert!(!text.contains(secret), "{path} echoes the api key");
        assert!(!text.contains("apiKey"), "{path} mentions apiKey");
    }

    // Terminate: idempotent, ends the session, messages are refused.
    for _ in 0..2 {
        let resp = d.post_empty("/v1/sessions/s1/terminate").await;
        assert_eq!(resp.status(), 204);
    }
    let info = json_of(d.get("/v1/sessions/s1").await, 200).await;
    assert_eq!(info["ended"], true);
    assert_eq!(info["status"], "ended");
    let p = assert_problem(
        d.post("/v1/sessions/s1/messages", json!({"message": "echo late"}))
            .await,
        400,
        "invalid_request",
    )
    .await;
    assert!(p["detail"].as_str().unwrap().contains("terminated"), "{p}");
    let p = assert_problem(
        d.post(
            "/v1/sessions/s1/messages/stream",
            json!({"message": "echo late"}),
        )
        .await,
        400,
        "invalid_request",
    )
    .await;
    assert!(p["detail"].as_str().unwrap().contains("terminated"), "{p}");
    let events = d.events("s1").await;
    assert_well_formed(&events);
    let ended: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "session.ended")
        .collect();
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0]["data"]["reason"], "terminated");
    d.stop();
}

#[tokio::test]
async fn bad_requests_get_problem_documents() {
    let d = Daemon::start_with(DaemonOptions {
        args: vec!["--max-body-bytes".into(), "2048".into()],
        ..Default::default()
    });
    d.create("s1", json!({"agent": "mock"})).await;
    let post_raw = |path: &str, ct: Option<&str>, body: Vec<u8>| {
        let mut rb = d.http.post(d.url(path)).body(body);
        if let Some(ct) = ct {
            rb = rb.header(CONTENT_TYPE, ct);
        }
        rb.send()
    };

    // Malformed JSON: 400 with the parser's message.
    for path in ["/v1/sessions/new1", "/v1/sessions/s1/messages"] {
        let resp = post_raw(path, Some("application/json"), b"{\"agent\": ".to_vec())
            .await
            .unwrap();
        let p = assert_problem(resp, 400, "invalid_request").await;
        let detail = p["detail"].as_str().unwrap();
        assert!(detail.contains("EOF while parsing"), "{path}: {detail}");
    }
    let resp = post_raw(
        "/v1/agents/mock/install",
        Some("application/json"),
        b"{nope".to_vec(),
    )
    .await
    .unwrap();
    let p = assert_problem(resp, 400, "invalid_request").await;
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("key must be a string"),
        "{p}"
    );

    // Wrong shapes: 422 with the parser's message.
    let resp = d
        .post("/v1/sessions/s1/messages", json!({"message": 5}))
        .await;
    let p = assert_problem(resp, 422, "invalid_request").await;
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("invalid type: integer `5`"),
        "{p}"
    );
    let resp = d
        .post("/v1/sessions/new2", json!({"agent": ["mock"]}))
        .await;
    assert_problem(resp, 422, "invalid_request").await;
    let resp = d
        .post(
            "/v1/sessions/s1/questions/q1/reply",
            json!({"answers": "yes"}),
        )
        .await;
    assert_problem(resp, 422, "invalid_request").await;
    let resp = d.post("/v1/sessions/s1/messages", json!([1, 2])).await;
    assert_problem(resp, 422, "invalid_request").await;

    // Missing or wrong content type: 415.
    let msg = serde_json::to_vec(&json!({"message": "echo x"})).unwrap();
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let resp = post_raw("/v1/sessions/s1/messages", ct, msg.clone())
            .await
            .unwrap();
        let p = assert_problem(resp, 415, "invalid_request").await;
        assert!(
            p["detail"].as_str().unwrap().contains("application/json"),
            "{ct:?}: {p}"
        );
    }

    // Bodies over --max-body-bytes 2048: 413.
    let big = json!({"message": "echo ".to_owned() + &"x".repeat(4096)});
    let resp = d.post("/v1/sessions/s1/messages", big.clone()).await;
    assert_problem(resp, 413, "payload_too_large").await;
    let resp = d
        .post(
            "/v1/sessions/big",
            json!({"agent": "mock", "title": "t".repeat(4096)}),
        )
        .await;
    assert_problem(resp, 413, "payload_too_large").await;
    let resp = post_raw(
        "/v1/agents/mock/install",
        Some("application/json"),
        format!(
            "{{\"reinstall\": false, \"pad\": \"{}\"}}",
            "p".repeat(4096)
        )
        .into_bytes(),
    )
    .await
    .unwrap();
    assert_problem(resp, 413, "payload_too_large").await;
    // The limit holds for chunked bodies (no Content-Length) too.
    let mut chunks = vec![b"{\"message\": \"echo ".to_vec()];
    chunks.extend((0..8).map(|_| vec![b'z'; 512]));
    chunks.push(b"\"}".to_vec());
    let chunks = chunks.into_iter().map(Ok::<_, std::io::Error>);
    let resp = d
        .http
        .post(d.url("/v1/sessions/s1/messages"))
        .header(CONTENT_TYPE, "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    // The unread rest of the body makes the connection unusable: the daemon says so.
    assert_eq!(resp.headers()["connection"], "close");
    assert_problem(resp, 413, "payload_too_large").await;
    // A body just under the limit is fine.
    let resp = d
        .post(
            "/v1/sessions/s1/messages",
            json!({"message": "echo ".to_owned() + &"y".repeat(1500)}),
        )
        .await;
    assert_eq!(resp.status(), 204);

    // Bad query strings: 400.
    for q in [
        "/v1/sessions/s1/events?offset=abc",
        "/v1/sessions/s1/events?limit=-1",
        "/v1/sessions/s1/events?includeRaw=maybe",
        "/v1/sessions/s1/events/sse?offset=x",
        "/v1/sessions/s1/events.jsonl?includeRaw=2",
    ] {
        let p = assert_problem(d.get(q).await, 400, "invalid_request").await;
        assert!(
            p["detail"].as_str().unwrap().contains("query string"),
            "{q}: {p}"
        );
    }
    let resp = d
        .http
        .get(d.url("/v1/sessions/s1/events/sse"))
        .header("last-event-id", "not-a-number")
        .send()
        .await
        .unwrap();
    assert_problem(resp, 400, "invalid_request").await;

    // Unknown session on every session route: 404.
    for (method, path, body) in routes("ghost") {
        if !path.starts_with("/v1/sessions/ghost") {
            continue;
        }
        let resp = bare(&d, method.clone(), &path, body.as_ref())
            .send()
            .await
            .unwrap();
        let p = assert_problem(resp, 404, "session_not_found").await;
        assert_eq!(p["sessionId"], "ghost", "{method} {path}");
    }

    // Path segments that are not UTF-8.
    for (method, path) in [
        (Method::GET, "/v1/sessions/%FF"),
        (Method::GET, "/v1/sessions/%FF/events"),
        (Method::GET, "/v1/sessions/%C3%28/events/sse"),
        (Method::POST, "/v1/sessions/s1/questions/%FE/reject"),
        (Method::GET, "/v1/agents/%FF/modes"),
    ] {
        let resp = d.http.request(method, d.url(path)).send().await.unwrap();
        let p = assert_problem(resp, 400, "invalid_request").await;
        assert!(
            p["detail"].as_str().unwrap().contains("UTF-8"),
            "{path}: {p}"
        );
    }

    // Unknown routes and methods.
    for path in [
        "/v1/nothing",
        "/v2/health",
        "/",
        "/v1/sessions/s1/events/extra",
    ] {
        let p = assert_problem(d.get(path).await, 404, "not_found").await;
        assert_eq!(p["title"], "Not found");
    }
    let resp = d
        .http
        .delete(d.url("/v1/sessions/s1"))
        .send()
        .await
        .unwrap();
    assert_problem(resp, 405, "method_not_allowed").await;

    // Permission replies: nothing is ever pending (bypass), bad values are refused.
    for body in [
        json!({"reply": "once"}),
        json!({"reply": "always"}),
        json!({"reply": "maybe"}),
        json!({}),
    ] {
        let resp = d
            .post("/v1/sessions/s1/permissions/p1/reply", body.clone())
            .await;
        let p = assert_problem(resp, 400, "invalid_request").await;
        assert_eq!(p["sessionId"], "s1", "{body}");
    }
    // An unknown question id.
    let resp = d
        .post(
            "/v1/sessions/s1/questions/q-unknown/reply",
            json!({"answers": [["x"]]}),
        )
        .await;
    assert_problem(resp, 400, "invalid_request").await;
    let resp = d
        .post_empty("/v1/sessions/s1/questions/q-unknown/reject")
        .await;
    assert_problem(resp, 400, "invalid_request").await;
    // An empty message.
    let resp = d
        .post("/v1/sessions/s1/messages", json!({"message": "  "}))
        .await;
    assert_problem(resp, 400, "invalid_request").await;
    // Session ids that cannot be.
    let resp = d
        .post(
            &format!("/v1/sessions/{}", "i".repeat(300)),
            json!({"agent": "mock"}),
        )
        .await;
    assert_problem(resp, 400, "invalid_request").await;

    // Nothing above took the daemon or the session down: the queued message ran.
    let events = d.wait_turns_ended("s1", 1).await;
    assert_well_formed(&events);
    let health = json_of(d.get("/v1/health").await, 200).await;
    assert_eq!(health, json!({"status": "ok"}));
    d.stop();
}

#[tokio::test]
async fn cors_is_closed_by_default_and_open_to_configured_origins_only() {
    // Closed by default.
    let d = Daemon::start();
    let resp = d
        .http
        .get(d.url("/v1/agents"))
        .header(ORIGIN, "http://a.example")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "access-control-allow-origin"), None);
    let resp = d
        .http
        .request(Method::OPTIONS, d.url("/v1/sessions/x"))
        .header(ORIGIN, "http://a.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(header(&resp, "access-control-allow-origin"), None);
    assert_eq!(header(&resp, "access-control-allow-methods"), None);
    d.stop();

    // One allowed origin, and a token.
    let token = "cors-token";
    let d = Daemon::start_with(DaemonOptions {
        token: Some(token.into()),
        args: vec!["--cors-allow-origin".into(), "http://a.example".into()],
        ..Default::default()
    });
    let preflight = |origin: &'static str, path: &'static str| {
        d.http
            .request(Method::OPTIONS, d.url(path))
            .header(ORIGIN, origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type,last-event-id",
            )
            .send()
    };
    for path in ["/v1/sessions/x", "/v1/sessions/x/messages", "/v1/agents"] {
        let resp = preflight("http://a.example", path).await.unwrap();
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
        assert_eq!(
            header(&resp, "access-control-allow-origin").as_deref(),
            Some("http://a.example")
        );
        let methods = header(&resp, "access-control-allow-methods").unwrap_or_default();
        for m in ["GET", "POST"] {
            assert!(methods.contains(m), "{path}: allow-methods {methods}");
        }
        let headers = header(&resp, "access-control-allow-headers")
            .unwrap_or_default()
            .to_ascii_lowercase();
        for h in ["authorization", "content-type", "last-event-id"] {
            assert!(headers.contains(h), "{path}: allow-headers {headers}");
        }
    }
    // Other origins are not allowed.
    for origin in [
        "http://b.example",
        "http://a.example.evil",
        "https://a.example",
    ] {
        let resp = preflight(origin, "/v1/sessions/x").await.unwrap();
        assert_eq!(
            header(&resp, "access-control-allow-origin"),
            None,
            "{origin}"
        );
    }
    // Actual requests: the allowed origin gets the header (with the token), others don't; the
    // token is still required.
    let resp = d
        .http
        .get(d.url("/v1/agents"))
        .bearer_auth(token)
        .header(ORIGIN, "http://a.example")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "access-control-allow-origin").as_deref(),
        Some("http://a.example")
    );
    let resp = d
        .http
        .get(d.url("/v1/agents"))
        .bearer_auth(token)
        .header(ORIGIN, "http://b.example")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "access-control-allow-origin"), None);
    let resp = d
        .http
        .get(d.url("/v1/agents"))
        .header(ORIGIN, "http://a.example")
        .send()
        .await
        .unwrap();
    // The browser may read the error: it carries the allow header too.
    assert_eq!(
        header(&resp, "access-control-allow-origin").as_deref(),
        Some("http://a.example")
    );
    assert_problem(resp, 401, "token_invalid").await;
    d.stop();
}

#[tokio::test]
async fn events_are_polled_in_pages_with_raw_on_request_and_match_the_transcript() {
    let d = Daemon::start();
    d.create("s1", json!({"agent": "mock"})).await;
    d.message("s1", "stream one two three four five six").await;
    d.message("s1", "garbage").await;
    let all = d.wait_turns_ended("s1", 2).await;
    assert_well_formed(&all);
    let n = all.len();
    assert!(n > 20, "{n} events");
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e["sequence"], i + 1);
        assert_eq!(e["raw"], Value::Null, "raw without includeRaw: {e}");
    }

    // Default poll: everything, no more.
    let page = json_of(d.get("/v1/sessions/s1/events").await, 200).await;
    assert_eq!(page["events"].as_array().unwrap(), &all);
    assert_eq!(page["hasMore"], false);
    let mut keys: Vec<&str> = page
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, vec!["events", "hasMore"]);

    // Pages of 7 from every offset.
    for limit in [1usize, 7, n - 1, n, n + 5] {
        let mut got: Vec<Value> = Vec::new();
        let mut offset = 0;
        loop {
            let page = json_of(
                d.get(&format!(
                    "/v1/sessions/s1/events?offset={offset}&limit={limit}"
                ))
                .await,
                200,
            )
            .await;
            let events = page["events"].as_array().unwrap();
            assert!(events.len() <= limit);
            let more = page["hasMore"].as_bool().unwrap();
            assert_eq!(
                more,
                offset + events.len() < n,
                "offset {offset} limit {limit}"
            );
            if let Some(first) = events.first() {
                assert_eq!(first["sequence"], offset + 1);
            }
            got.extend(events.iter().cloned());
            offset += events.len();
            if !more {
                break;
            }
        }
        assert_eq!(got, all, "limit {limit}");
    }
    for offset in [n, n + 100] {
        let page = json_of(
            d.get(&format!("/v1/sessions/s1/events?offset={offset}"))
                .await,
            200,
        )
        .await;
        assert_eq!(page, json!({"events": [], "hasMore": false}));
    }
    let page = json_of(d.get("/v1/sessions/s1/events?offset=3&limit=2").await, 200).await;
    let seqs: Vec<u64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![4, 5]);
    assert_eq!(page["hasMore"], true);

    // includeRaw: the agent's original line, parsed when it is JSON, the text when it is not.
    let raw = json_of(
        d.get("/v1/sessions/s1/events?includeRaw=true&limit=10000")
            .await,
        200,
    )
    .await;
    let raw = raw["events"].as_array().unwrap();
    assert_eq!(raw.len(), n);
    for (with, without) in raw.iter().zip(&all) {
        let mut stripped = with.clone();
        stripped["raw"] = Value::Null;
        assert_eq!(&stripped, without, "only `raw` differs");
        if with["synthetic"] == true {
            assert_eq!(with["raw"], Value::Null, "{with}");
        } else {
            assert!(
                !with["raw"].is_null(),
                "an agent event carries its line: {with}"
            );
        }
    }
    let unparsed: Vec<&Value> = raw
        .iter()
        .filter(|e| e["type"] == "agent.unparsed")
        .map(|e| &e["raw"])
        .collect();
    assert_eq!(
        unparsed,
        vec![
            &json!("not json at all"),
            &json!("{broken"),
            &json!({"no_type": true})
        ]
    );
    let deltas: Vec<&Value> = raw
        .iter()
        .filter(|e| e["type"] == "item.delta")
        .map(|e| &e["raw"])
        .collect();
    assert!(
        deltas
            .iter()
            .any(|r| r["type"] == "text_delta" && r["text"] == "Some"),
        "{deltas:?}"
    );
    let raw_false = json_of(d.get("/v1/sessions/s1/events?includeRaw=false").await, 200).await;
    assert_eq!(raw_false["events"].as_array().unwrap(), &all);

    // The transcript: the same events as JSON lines.
    for (query, want) in [("", &all), ("?includeRaw=true", &raw.to_vec())] {
        let resp = d.get(&format!("/v1/sessions/s1/events.jsonl{query}")).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(
            header(&resp, "content-type").as_deref(),
            Some("application/x-ndjson")
        );
        let text = resp.text().await.unwrap();
        assert!(text.ends_with('\n'));
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("each line is one JSON event"))
            .collect();
        assert_eq!(&lines, want, "events.jsonl{query}");
    }
    d.stop();
}

#[tokio::test]
async fn the_openapi_document_lists_every_route() {
    let d = Daemon::start();
    let doc = json_of(d.get("/v1/openapi.json").await, 200).await;
    assert!(
        doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")),
        "openapi version: {}",
        doc["openapi"]
    );
    assert!(doc["info"]["title"].is_string());
    let spec = [
        ("get", "/v1/health"),
        ("get", "/v1/agents"),
        ("post", "/v1/agents/{agent}/install"),
        ("get", "/v1/agents/{agent}/modes"),
        ("get", "/v1/agents/{agent}/models"),
        ("get", "/v1/sessions"),
        ("post", "/v1/sessions/{id}"),
        ("get", "/v1/sessions/{id}"),
        ("post", "/v1/sessions/{id}/messages"),
        ("post", "/v1/sessions/{id}/messages/stream"),
        ("post", "/v1/sessions/{id}/terminate"),
        ("post", "/v1/sessions/{id}/cancel"),
        ("get", "/v1/sessions/{id}/events"),
        ("get", "/v1/sessions/{id}/events/sse"),
        ("post", "/v1/sessions/{id}/questions/{question_id}/reply"),
        ("post", "/v1/sessions/{id}/questions/{question_id}/reject"),
        (
            "post",
            "/v1/sessions/{id}/permissions/{permission_id}/reply",
        ),
        ("get", "/v1/openapi.json"),
    ];
    let paths = doc["paths"].as_object().expect("paths");
    for (method, path) in spec {
        let op = &paths
            .get(path)
            .unwrap_or_else(|| panic!("{path} missing; have {:?}", paths.keys()))[method];
        assert!(op.is_object(), "{method} {path} missing");
        assert!(op["responses"].is_object(), "{method} {path}: responses");
    }
    // Every documented operation is served (not a routing 404/405).
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            let concrete = path
                .replace("{id}", "nosuch")
                .replace("{agent}", "mock")
                .replace("{question_id}", "q")
                .replace("{permission_id}", "p");
            let m = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
            let resp = d.http.request(m, d.url(&concrete)).send().await.unwrap();
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap();
            assert!(
                !text.contains("urn:sandbox-agent:error:not_found")
                    && !text.contains("method_not_allowed"),
                "{method} {path} is documented but not routed: {status} {text}"
            );
        }
    }
    let ops: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
    assert!(ops >= spec.len());
    // The problem document is described.
    assert!(doc["components"]["schemas"]["Problem"].is_object());
    d.stop();
}
