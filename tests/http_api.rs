//! The `/v1` HTTP surface over real HTTP on loopback, against the real `codebuffd server`
//! binary: the compatible command line and auth, sessions described end to end, event polling
//! and transcripts, and what only a real connection shows (a chunked body over the limit, idle
//! connections). Request validation, problem documents, CORS and the browser guard are tested
//! in process, in `router.rs`.
//!
//! Each test starts its own daemon and ends with [`Daemon::stop`] (exit 0, no leftover process).

mod support;

use std::time::Duration;

use reqwest::header::CONTENT_TYPE;
use reqwest::{Method, Response};
use serde_json::{json, Value};
use support::api::{assert_problem_response, json_of, routes};
use support::daemon::{free_port, Daemon, DaemonOptions, TempDir};
use support::events::{assistant_texts, count, of_type, turn_ends};
use support::invariants::assert_well_formed;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

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
        // (ours) Present while an engine holds the session, which it lets go of when idle.
        .filter(|k| *k != "owner")
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
    // The same, but for `owner`: the engine lets an idle session go a moment after its turn
    // (any engine may then run the next), so one read may show it and the next not.
    let without_owner = |mut v: Value| {
        v.as_object_mut().unwrap().remove("owner");
        v
    };
    assert_eq!(
        without_owner(list["sessions"][1].clone()),
        without_owner(info.clone())
    );

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

// ----- idle connections ---------------------------------------------------------------------

/// One kept-alive HTTP/1.1 connection spoken by hand, one request at a time: a client that
/// keeps its connection while others hold every slot the daemon serves.
struct RawConnection {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl RawConnection {
    async fn open(addr: &str) -> RawConnection {
        RawConnection {
            stream: TcpStream::connect(addr).await.expect("connect"),
            buf: Vec::new(),
        }
    }

    /// Sends one request and reads its answer: the status and the JSON body (null if empty).
    async fn request(&mut self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let body = body.map(Value::to_string).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        let exchange = async {
            self.stream.write_all(head.as_bytes()).await?;
            self.stream.write_all(body.as_bytes()).await?;
            let end = loop {
                if let Some(at) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break at + 4;
                }
                self.read_more().await?;
            };
            let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
            let status: u16 = head[9..12].parse().expect("a status code");
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |n| n.trim().parse().expect("a content length"));
            assert!(!head.contains("transfer-encoding"), "unexpected: {head}");
            while self.buf.len() < end + length {
                self.read_more().await?;
            }
            let body: Vec<u8> = self.buf.drain(..end + length).skip(end).collect();
            let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
            Ok::<_, std::io::Error>((status, body))
        };
        tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .unwrap_or_else(|_| panic!("no answer to {method} {path} within 10 s"))
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    async fn read_more(&mut self) -> std::io::Result<()> {
        let mut chunk = [0u8; 64 * 1024];
        let n = self.stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

/// The daemon's `host:port`.
fn address(d: &Daemon) -> String {
    d.base.trim_start_matches("http://").to_owned()
}

#[tokio::test]
async fn idle_connections_are_capped_and_timed_out_and_agents_still_start_meanwhile() {
    const IDLE: usize = 200;
    const MAX_CONNECTIONS: usize = 64;
    let d = Daemon::start_with(DaemonOptions {
        args: vec![
            "--max-connections".into(),
            MAX_CONNECTIONS.to_string(),
            "--header-read-timeout".into(),
            "3".into(),
        ],
        // A low soft limit of open files, as many machines have: the daemon raises its own.
        open_files_soft_limit: Some(160),
        ..Default::default()
    });
    let addr = address(&d);
    // A client connected before the flood keeps its connection (and its slot).
    let mut client = RawConnection::open(&addr).await;
    let created = client
        .request("POST", "/v1/sessions/s", Some(&json!({"agent": "mock"})))
        .await;
    assert_eq!(created.0, 200, "{created:?}");

    // The flood: connections that send half a request line, then nothing. Each task reports
    // when the daemon ends its connection. (They connect concurrently: beyond the listen
    // backlog, a connect waits for SYN retries.)
    let (connected_tx, mut connected_rx) = tokio::sync::mpsc::unbounded_channel();
    let (closed_tx, mut closed_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        let (addr, connected, closed) = (addr.clone(), connected_tx.clone(), closed_tx.clone());
        idle.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(&addr).await.expect("connect");
            stream
                .write_all(b"GET /v1/health HTT")
                .await
                .expect("write");
            let _ = connected.send(());
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf).await;
            let _ = closed.send(Instant::now());
        }));
    }
    let flooded = Instant::now();
    // Every slot is taken (and the backlog filling) before the client goes on.
    for n in 0..MAX_CONNECTIONS + 64 {
        tokio::time::timeout_at(flooded + Duration::from_secs(5), connected_rx.recv())
            .await
            .unwrap_or_else(|_| panic!("only {n} idle connections got through within 5 s"));
    }

    // Meanwhile an agent can start: the daemon kept descriptors for its pipes.
    let sent = client
        .request(
            "POST",
            "/v1/sessions/s/messages",
            Some(&json!({"message": "echo during the flood"})),
        )
        .await;
    assert_eq!(sent.0, 204, "{sent:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let events = loop {
        let (status, page) = client
            .request("GET", "/v1/sessions/s/events?limit=10000", None)
            .await;
        assert_eq!(status, 200, "{page}");
        let events = page["events"].as_array().cloned().unwrap_or_default();
        if count(&events, "turn.ended") > 0 {
            break events;
        }
        assert!(Instant::now() < deadline, "the turn never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        turn_ends(&events)[0]["status"],
        "completed",
        "{:?}",
        turn_ends(&events)
    );
    assert!(
        of_type(&events, "error").is_empty(),
        "{:?}",
        of_type(&events, "error")
    );
    assert_eq!(assistant_texts(&events), vec!["during the flood"]);
    drop(client);

    // The daemon ends an idle connection once the header-read timeout (3 s here) passes, and
    // served at most MAX_CONNECTIONS at once: the others wait in the listen backlog for a free
    // slot (and meet their own timeout 3 s after it).
    let first = tokio::time::timeout_at(flooded + Duration::from_secs(8), closed_rx.recv())
        .await
        .expect("the daemon closes idle connections within 8 s")
        .expect("a close");
    let mut closed = 1;
    while let Ok(Some(_)) =
        tokio::time::timeout_at(first + Duration::from_secs(1), closed_rx.recv()).await
    {
        closed += 1;
    }
    assert!(
        closed <= MAX_CONNECTIONS,
        "{closed} idle connections ended at once; at most {MAX_CONNECTIONS} are served"
    );

    // Once the idle clients go away, a new client is answered at once and turns run.
    for task in &idle {
        task.abort();
    }
    let health = tokio::time::timeout(Duration::from_secs(5), d.get("/v1/health"))
        .await
        .expect("health answers within 5 s of the idle clients leaving");
    assert_eq!(json_of(health, 200).await, json!({"status": "ok"}));
    d.message("s", "echo after the flood").await;
    let events = d.wait_turns_ended("s", 2).await;
    assert_eq!(turn_ends(&events)[1]["status"], "completed");
    assert_well_formed(&events);
    d.stop();
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_header_read_timeout() {
    let d = Daemon::start_with(DaemonOptions {
        args: vec![
            "--max-connections".into(),
            "4".into(),
            "--header-read-timeout".into(),
            "2".into(),
        ],
        ..Default::default()
    });
    let addr = address(&d);
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(&addr).await.expect("connect"));
    }
    // A new client waits in the backlog until the timeout has freed a slot.
    let health = tokio::time::timeout(Duration::from_secs(8), d.get("/v1/health"))
        .await
        .expect("health answers once the silent connections have timed out");
    assert_eq!(json_of(health, 200).await, json!({"status": "ok"}));
    for mut stream in silent {
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "a silent connection is closed: {read:?}"
        );
    }
    d.stop();
}
