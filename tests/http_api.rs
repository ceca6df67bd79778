//! The `/v1` HTTP surface over real HTTP on loopback, against the real `codebuffd server`
//! binary: the compatible command line and auth, sessions described end to end, event polling
//! and transcripts, and what only a real connection shows (a chunked body over the limit).
//! Request validation, problem documents, CORS and the browser guard are tested in process, in
//! `router.rs`.
//!
//! Each test starts its own daemon and ends with [`Daemon::stop`] (exit 0, no leftover process).

mod support;

use reqwest::header::CONTENT_TYPE;
use reqwest::{Method, Response};
use serde_json::{json, Value};
use support::api::{assert_problem_response, routes};
use support::daemon::{free_port, Daemon, DaemonOptions, TempDir};
use support::invariants::assert_well_formed;

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
    let got = resp.status().as_u16();
    let ct = header(&resp, "content-type");
    let text = resp.text().await.expect("problem body");
    assert_problem_response(&url, got, ct.as_deref(), &text, status, kind)
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
async fn sessions_are_described_and_ended_without_ever_echoing_their_api_key() {
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
async fn a_chunked_body_over_the_limit_is_a_413_and_closes_the_connection() {
    let d = Daemon::start_with(DaemonOptions {
        args: vec!["--max-body-bytes".into(), "2048".into()],
        ..Default::default()
    });
    d.create("s1", json!({"agent": "mock"})).await;
    // No Content-Length: the limit holds while the body streams in.
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
    assert_eq!(d.info("s1").await["turns"], 0);
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
