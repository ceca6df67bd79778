//! ACP over HTTP (`/v1/acp`, sandbox-agent's dialect; `docs/acp-http.md`) against the real
//! binary with a real HTTP client: the mock agent for the protocol, the durable stream and the
//! processes; the real Codebuff adapter with its fake backend for one end-to-end case.

mod support;

use std::time::Duration;

use serde_json::{json, Value};

use support::acp_http::{
    agent_text, assert_dense, initialize, new_session, open_stream, post, prompt, prompt_continues,
    recorded_servers, request, stream_response,
};
use support::daemon::{wait_session_empty, Daemon, DaemonOptions, TempDir};

/// The sessions of `GET /v1/sessions`.
async fn sessions(d: &Daemon) -> Vec<Value> {
    let v: Value = d.get("/v1/sessions").await.json().await.unwrap();
    v["sessions"].as_array().cloned().unwrap_or_default()
}

async fn servers(d: &Daemon) -> Value {
    let resp = d.get("/v1/acp").await;
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mock_session_runs_over_post_and_sse_and_delete_ends_it() {
    let d = Daemon::start();
    let work = TempDir::new("acp-http-work");
    let init = initialize(&d, "srv-1", "mock").await;
    assert_eq!(init["result"]["agentInfo"]["name"], "codebuffd", "{init}");

    let listed = servers(&d).await;
    let list = listed["servers"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{listed}");
    assert_eq!(list[0]["serverId"], "srv-1");
    assert_eq!(list[0]["agent"], "mock");
    assert!(list[0]["createdAtMs"].as_i64().unwrap() > 1_600_000_000_000);

    let mut sse = open_stream(&d, "srv-1", None).await;
    let session = new_session(&d, "srv-1", 1, work.path()).await;
    // An ordinary session of the engine.
    let all = sessions(&d).await;
    let info = all
        .iter()
        .find(|s| s["sessionId"] == session.as_str())
        .expect("the ACP session is listed in /v1/sessions");
    assert_eq!(info["agent"], "mock");

    let answer = prompt(&d, "srv-1", 2, &session, "stream Hello over HTTP").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");

    // The stream holds every envelope the agent side sent, answers included, numbered from 1.
    let envelopes = sse.until_response(2).await;
    assert_dense(&envelopes, 1);
    assert_eq!(envelopes[0].1["id"], 0, "the initialize answer comes first");
    assert!(envelopes[0].1["result"]["protocolVersion"].is_number());
    assert_eq!(agent_text(&envelopes), "Hello over HTTP");
    assert!(envelopes
        .iter()
        .any(|(_, e)| e["id"] == 1 && e["result"]["sessionId"] == session.as_str()));
    assert!(envelopes
        .iter()
        .all(|(_, e)| e.get("method").is_none() || e["params"]["sessionId"] == session.as_str()));
    // The turn is in the session's own log, with its cost.
    let events = d.wait_turns_ended(&session, 1).await;
    assert!(events.iter().any(|e| e["type"] == "turn.ended"));

    // A second reader from the start sees exactly the same envelopes.
    let mut again = open_stream(&d, "srv-1", None).await;
    let replayed = again.until_response(2).await;
    assert_eq!(replayed, envelopes);

    // DELETE: 204, the server is gone, its stream ends, its session ended.
    let resp = d.delete("/v1/acp/srv-1").await;
    assert_eq!(resp.status(), 204);
    assert!(
        sse.next().await.is_none(),
        "the stream ends with its server"
    );
    assert_eq!(servers(&d).await["servers"], json!([]));
    assert_eq!(stream_response(&d, "srv-1", None).await.status(), 404);
    let info = d.info(&session).await;
    assert_eq!(info["ended"], true, "{info}");
    // The session stays readable.
    assert!(!d.events(&session).await.is_empty());
    // Deleting again is still 204 (as the peer answers).
    let resp = d.delete("/v1/acp/srv-1").await;
    assert_eq!(resp.status(), 204);
    assert_eq!(
        d.wait_no_agents(Duration::from_secs(10)).await,
        Vec::<i32>::new()
    );
    assert_eq!(
        d.spares().await,
        Vec::<i32>::new(),
        "no warm spare is left for it"
    );
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_and_problems_match_the_peer() {
    let d = Daemon::start();
    let url = d.url("/v1/acp/srv-s");
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}});
    let problem = |v: &Value, status: u16, kind: &str| {
        assert_eq!(v["status"], status, "{v}");
        assert_eq!(v["type"], format!("urn:sandbox-agent:error:{kind}"), "{v}");
        assert!(v["title"].is_string() && v["detail"].is_string(), "{v}");
    };

    // 415 without a JSON content type.
    let resp = d
        .http
        .post(format!("{url}?agent=mock"))
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 415);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    problem(&resp.json().await.unwrap(), 415, "unsupported_media_type");
    // 406 when the client accepts no JSON.
    let resp = d
        .http
        .post(format!("{url}?agent=mock"))
        .header("content-type", "application/json")
        .header("accept", "text/html")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 406);
    problem(&resp.json().await.unwrap(), 406, "not_acceptable");
    // 400: not JSON, not an object, no agent on the first POST, an unknown agent.
    let resp = d
        .http
        .post(format!("{url}?agent=mock"))
        .header("content-type", "application/json")
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let a = post(&d, "srv-s", Some("mock"), &json!([init])).await;
    assert_eq!(a.status, 400, "{}", a.text);
    problem(&a.json(), 400, "invalid_request");
    let a = post(&d, "srv-s", None, &init).await;
    assert_eq!(a.status, 400, "{}", a.text);
    assert!(a.json()["detail"].as_str().unwrap().contains("agent"));
    let a = post(&d, "srv-s", Some("claude"), &init).await;
    assert_eq!(a.status, 400);
    problem(&a.json(), 400, "unsupported_agent");
    // Nothing was created by the refused posts.
    assert_eq!(servers(&d).await["servers"], json!([]));
    // 404: the stream of an unknown server.
    let resp = stream_response(&d, "nope", None).await;
    assert_eq!(resp.status(), 404);
    problem(&resp.json().await.unwrap(), 404, "session_not_found");

    initialize(&d, "srv-s", "mock").await;
    // 409: the server runs another agent; the same agent or none is fine.
    let a = post(&d, "srv-s", Some("codebuff"), &init).await;
    assert_eq!(a.status, 409, "{}", a.text);
    problem(&a.json(), 409, "conflict");
    // 202: a notification (and a response of the client) is accepted without a body.
    let a = post(
        &d,
        "srv-s",
        Some("mock"),
        &json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "none"}}),
    )
    .await;
    assert_eq!(a.status, 202);
    assert_eq!(a.text, "");
    let a = post(
        &d,
        "srv-s",
        None,
        &json!({"jsonrpc": "2.0", "id": 77, "result": {}}),
    )
    .await;
    assert_eq!(a.status, 202);
    // A JSON-RPC error is a 200 with the error envelope.
    let v = request(&d, "srv-s", None, 5, "no/such_method", json!({})).await;
    assert_eq!(v["error"]["code"], -32601, "{v}");
    // 413 (a problem document) past --max-body-bytes (1 MiB by default).
    let big = json!({"jsonrpc": "2.0", "method": "x", "params": {"pad": "x".repeat(2 << 20)}});
    let a = post(&d, "srv-s", None, &big).await;
    assert_eq!(a.status, 413);
    problem(&a.json(), 413, "payload_too_large");
    // 406 for a stream the client does not accept; 400 for a bad Last-Event-ID.
    let resp = d
        .http
        .get(&url)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 406);
    let resp = d
        .http
        .get(&url)
        .header("last-event-id", "abc")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_guards_every_acp_route_and_is_never_read_from_the_url() {
    let d = Daemon::start_with(DaemonOptions {
        token: Some("s3cret".into()),
        ..Default::default()
    });
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}});
    for (method, path) in [
        ("GET", "/v1/acp"),
        ("GET", "/v1/acp/t1"),
        ("POST", "/v1/acp/t1?agent=mock"),
        ("DELETE", "/v1/acp/t1"),
        ("POST", "/v1/acp/t1?agent=mock&token=s3cret"),
    ] {
        for auth in [None, Some("Bearer wrong")] {
            let mut rb = d
                .http
                .request(method.parse().unwrap(), d.url(path))
                .header("content-type", "application/json")
                .body(init.to_string());
            if let Some(a) = auth {
                rb = rb.header("authorization", a);
            }
            let resp = rb.send().await.unwrap();
            assert_eq!(resp.status(), 401, "{method} {path} with {auth:?}");
            let v: Value = resp.json().await.unwrap();
            assert_eq!(v["type"], "urn:sandbox-agent:error:token_invalid");
        }
    }
    // With the token, it works.
    initialize(&d, "t1", "mock").await;
    d.stop();
}

/// Reads `n` envelopes from a fresh stream of `server` starting after `after`.
async fn read_n(d: &Daemon, server: &str, after: Option<u64>, n: usize) -> Vec<(u64, Value)> {
    let mut s = open_stream(d, server, after).await;
    let mut out = Vec::new();
    while out.len() < n {
        out.push(s.envelope().await.expect("an envelope"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_resumes_exactly_also_after_a_restart_and_a_crash() {
    let data = TempDir::new("acp-http-restart");
    let work = TempDir::new("acp-http-restart-work");
    let d = Daemon::start_in(data.path(), &[]);
    initialize(&d, "r1", "mock").await;
    let session = new_session(&d, "r1", 1, work.path()).await;
    let answer = prompt(&d, "r1", 2, &session, "flood 300").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let mut s = open_stream(&d, "r1", None).await;
    let all = s.until_response(2).await;
    assert_dense(&all, 1);
    let text = agent_text(&all);
    for i in 0..300 {
        assert!(
            text.contains(&format!("{i}:")),
            "delta {i} is in the stream"
        );
    }
    // A resume from the middle: exactly the rest, same numbers, same envelopes.
    let middle = all.len() as u64 / 2;
    let rest = read_n(&d, "r1", Some(middle), all.len() - middle as usize).await;
    assert_eq!(rest[..], all[middle as usize..]);
    drop(s);
    d.stop();

    // After a clean restart: the server is back, the stream resumes where the client was.
    let d = Daemon::start_in(data.path(), &[]);
    let listed = servers(&d).await;
    assert_eq!(listed["servers"][0]["serverId"], "r1", "{listed}");
    let rest = read_n(&d, "r1", Some(middle), all.len() - middle as usize).await;
    assert_eq!(rest[..], all[middle as usize..]);
    // The restored server takes prompts without a new initialize; numbers continue.
    let more = prompt_continues(&d, "r1", 3, &session, all.len() as u64, "after the restart").await;
    let total = all.len() + more.len();
    d.crash();

    // After a crash (SIGKILL): everything written before it is there, in order.
    let d = Daemon::start_in(data.path(), &[]);
    let whole = read_n(&d, "r1", None, total).await;
    assert_dense(&whole, 1);
    assert_eq!(whole[..all.len()], all[..]);
    assert_eq!(whole[all.len()..], more[..]);
    d.stop();
}

/// Two daemons on one data directory: the second leaves the first's server (created after the
/// second started) alone while the first lives, and takes it up once the first is killed (same
/// stream, numbers continuing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survivor_takes_up_the_servers_of_a_killed_daemon_on_its_data_directory() {
    let data = TempDir::new("acp-http-survivor");
    let work = TempDir::new("acp-http-survivor-work");
    let first = Daemon::start_in(data.path(), &[]);
    let second = Daemon::start_in(data.path(), &[]);
    initialize(&first, "s1", "mock").await;
    let session = new_session(&first, "s1", 1, work.path()).await;
    let answer = prompt(&first, "s1", 2, &session, "stream before").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let before = open_stream(&first, "s1", None)
        .await
        .until_response(2)
        .await;
    // A few of the second's looks (1 s apart) pass meanwhile.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        servers(&second).await["servers"],
        json!([]),
        "the first serves it"
    );
    assert_eq!(stream_response(&second, "s1", None).await.status(), 404);
    first.crash();
    // Taken up within a sweep (1 s); the wait allows for a loaded machine.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while servers(&second).await["servers"] == json!([]) {
        assert!(std::time::Instant::now() < deadline, "never taken up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let again = read_n(&second, "s1", None, before.len()).await;
    assert_eq!(again, before);
    prompt_continues(&second, "s1", 3, &session, before.len() as u64, "after").await;
    second.stop();
}

/// Server ids are a daemon's: two daemons on one data directory each serve their own `dup`. A
/// survivor leaves the killed one's `dup` alone (it serves one of that id), and the killed one,
/// started again, serves its own again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_on_one_data_directory_keep_their_own_servers_of_one_id() {
    let data = TempDir::new("acp-http-dup");
    let work = TempDir::new("acp-http-dup-work");
    async fn serve_dup(d: &Daemon, work: &std::path::Path, text: &str) -> Vec<(u64, Value)> {
        initialize(d, "dup", "mock").await;
        let session = new_session(d, "dup", 1, work).await;
        let answer = prompt(d, "dup", 2, &session, text).await;
        assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
        open_stream(d, "dup", None).await.until_response(2).await
    }
    let first = Daemon::start_in(data.path(), &[]);
    let mut streams = vec![serve_dup(&first, work.path(), "stream one").await];
    // Started after the first recorded its `dup`: that record waits for the first to be gone.
    let second = Daemon::start_in(data.path(), &[]);
    streams.push(serve_dup(&second, work.path(), "stream two").await);
    assert_eq!(agent_text(&streams[0]), "one");
    assert_eq!(agent_text(&streams[1]), "two");
    first.crash();
    // A few of the survivor's sweeps (1 s apart) look at the killed one's record meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        servers(&second).await["servers"].as_array().unwrap().len(),
        1
    );
    assert_eq!(
        read_n(&second, "dup", None, streams[1].len()).await,
        streams[1]
    );
    assert_eq!(
        recorded_servers(data.path()),
        2,
        "the killed daemon's record is left as it is"
    );
    // Started again, the first serves its own `dup`: the same envelopes as before the crash.
    let first = Daemon::start_in(data.path(), &[]);
    assert_eq!(
        read_n(&first, "dup", None, streams[0].len()).await,
        streams[0]
    );
    first.stop();
    second.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_does_not_read_is_never_skipped() {
    let d = Daemon::start();
    let work = TempDir::new("acp-http-lag-work");
    initialize(&d, "lag", "mock").await;
    let session = new_session(&d, "lag", 1, work.path()).await;
    // Opened, then left unread while 20 000 deltas stream through.
    let mut paused = open_stream(&d, "lag", None).await;
    let answer = prompt(&d, "lag", 2, &session, "flood 20000").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let got = paused.until_response(2).await;
    assert_dense(&got, 1);
    let text = agent_text(&got);
    let mut at = 0;
    for i in 0..20000 {
        let mark = format!("{i}:");
        let found = text[at..]
            .find(&mark)
            .unwrap_or_else(|| panic!("delta {i} is missing"));
        at += found + mark.len();
    }
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_shutdown_and_a_crash_leave_no_agent_process() {
    let data = TempDir::new("acp-http-procs");
    let work = TempDir::new("acp-http-procs-work");
    let d = Daemon::start_in(data.path(), &[]);
    // DELETE while a turn hangs: its POST is answered, its agent killed.
    initialize(&d, "p1", "mock").await;
    let session = new_session(&d, "p1", 1, work.path()).await;
    let hanging = {
        let envelope = json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "hang"}]}});
        let http = d.http.clone();
        let url = d.url("/v1/acp/p1");
        tokio::spawn(async move {
            let resp = http
                .post(url)
                .header("content-type", "application/json")
                .body(envelope.to_string())
                .send()
                .await
                .unwrap();
            (resp.status().as_u16(), resp.text().await.unwrap())
        })
    };
    d.wait_for(&session, Duration::from_secs(30), |e| {
        e["type"] == "turn.started"
    })
    .await;
    assert!(
        !d.agents().await.is_empty(),
        "the hanging turn runs an agent"
    );
    let resp = d.delete("/v1/acp/p1").await;
    assert_eq!(resp.status(), 204);
    let (status, text) = hanging.await.unwrap();
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["id"], 2);
    assert!(
        v.get("error").is_some() || v["result"]["stopReason"] == "cancelled",
        "{v}"
    );
    assert_eq!(
        d.wait_no_agents(Duration::from_secs(10)).await,
        Vec::<i32>::new()
    );
    assert_eq!(d.spares().await, Vec::<i32>::new());

    // Shutdown while a turn hangs: stop() asserts that nothing of the daemon is left.
    initialize(&d, "p2", "mock").await;
    let session = new_session(&d, "p2", 1, work.path()).await;
    let url = d.url("/v1/acp/p2");
    let http = d.http.clone();
    let envelope = json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "hang"}]}});
    let _hanging = tokio::spawn(async move {
        let _ = http
            .post(url)
            .header("content-type", "application/json")
            .body(envelope.to_string())
            .send()
            .await;
    });
    d.wait_for(&session, Duration::from_secs(30), |e| {
        e["type"] == "turn.started"
    })
    .await;
    d.stop();

    // A crash while a turn hangs, then a restart: the restarted daemon kills what was left.
    let d = Daemon::start_in(data.path(), &[]);
    let before = d.events(&session).await.len() as u64;
    let _hanging = prompt_in_background(&d, "p2", 3, &session, "hang");
    d.wait_for(&session, Duration::from_secs(30), |e| {
        e["type"] == "turn.started" && e["sequence"].as_u64() > Some(before)
    })
    .await;
    let agents = d.agents().await;
    let pid = d.kill9();
    assert!(!agents.is_empty());
    let d = Daemon::start_in(data.path(), &[]);
    assert_eq!(
        wait_session_empty(pid, Duration::from_secs(15)),
        Vec::<i32>::new()
    );
    // Deleting the restored server ends its session: nothing runs for it.
    let resp = d.delete("/v1/acp/p2").await;
    assert_eq!(resp.status(), 204);
    assert_eq!(d.info(&session).await["ended"], true);
    assert_eq!(
        d.wait_no_agents(Duration::from_secs(10)).await,
        Vec::<i32>::new()
    );
    assert_eq!(d.spares().await, Vec::<i32>::new());
    d.stop();
}

/// Posts a prompt without waiting for its answer.
fn prompt_in_background(
    d: &Daemon,
    server: &str,
    id: u64,
    session: &str,
    text: &str,
) -> tokio::task::JoinHandle<()> {
    let envelope = json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": text}]}});
    let http = d.http.clone();
    let url = d.url(&format!("/v1/acp/{server}"));
    tokio::spawn(async move {
        let _ = http
            .post(url)
            .header("content-type", "application/json")
            .body(envelope.to_string())
            .send()
            .await;
    })
}

/// A prompt that runs 150 s (the peer answers 504 after 120 s while its agent runs on): the
/// POST stays open, carrying a newline per keep-alive interval, and answers `end_turn`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_of_150_seconds_completes_on_its_open_post() {
    let d = Daemon::start_with(DaemonOptions {
        args: vec!["--sse-keep-alive".into(), "5".into()],
        ..Default::default()
    });
    let work = TempDir::new("acp-http-long-work");
    initialize(&d, "long", "mock").await;
    let session = new_session(&d, "long", 1, work.path()).await;
    let mut sse = open_stream(&d, "long", None).await;
    // 150 deltas, one a second.
    let a = post(
        &d,
        "long",
        None,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "flood 150 1"}]}}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert!(
        a.text.starts_with("\n\n"),
        "newlines kept the POST alive: {:?}",
        &a.text[..a.text.len().min(40)]
    );
    let v = a.json();
    assert_eq!(v["result"]["stopReason"], "end_turn", "{v}");
    let envelopes = sse.until_response(2).await;
    let text = agent_text(&envelopes);
    assert!(
        text.contains("149:"),
        "every delta came: {}",
        &text[text.len().saturating_sub(60)..]
    );
    d.stop();
}

/// The real Codebuff adapter against the fake model backend, through `/v1/acp`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codebuff_session_answers_over_http_with_its_cost() {
    use support::codebuff::{credits, start_daemon};
    use support::fake_backend::FakeBackend;
    let backend = FakeBackend::start("text");
    let home = TempDir::new("acp-http-cb-home");
    let work = TempDir::new("acp-http-cb-work");
    let d = start_daemon(&backend, &home, &[]);
    let init = initialize(&d, "cb", "codebuff").await;
    assert_eq!(
        init["result"]["authMethods"][0]["id"], "codebuff-api-key",
        "{init}"
    );
    let mut sse = open_stream(&d, "cb", None).await;
    let session = new_session(&d, "cb", 1, work.path()).await;
    let answer = prompt(&d, "cb", 2, &session, "Say hello.").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let envelopes = sse.until_response(2).await;
    assert_eq!(agent_text(&envelopes), "Hello from the fake model.");
    let usage = envelopes
        .iter()
        .map(|(_, e)| &e["params"]["update"])
        .find(|u| u["sessionUpdate"] == "usage_update")
        .expect("a usage_update at the turn's end");
    assert_eq!(
        usage["_meta"]["codebuff"]["credits"].as_f64(),
        Some(credits(0.05)),
        "{usage}"
    );
    // An ordinary codebuff session of the daemon, with its cost.
    let info = d.info(&session).await;
    assert_eq!(info["agent"], "codebuff");
    assert_eq!(info["cost"]["credits"].as_f64(), Some(credits(0.05)));
    let resp = d.delete("/v1/acp/cb").await;
    assert_eq!(resp.status(), 204);
    assert_eq!(
        d.wait_no_agents(Duration::from_secs(15)).await,
        Vec::<i32>::new()
    );
    assert_eq!(d.spares().await, Vec::<i32>::new());
    d.stop();
}

/// The agent's question reaches the client as a request on the stream; the client's answer
/// (a response envelope) is a POST answered 202, and reaches the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_asked_on_the_stream_and_answered_by_a_post() {
    let d = Daemon::start();
    let work = TempDir::new("acp-http-ask-work");
    initialize(&d, "ask", "mock").await;
    let session = new_session(&d, "ask", 1, work.path()).await;
    let mut sse = open_stream(&d, "ask", None).await;
    let asking = {
        let envelope = json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "ask"}]}});
        let http = d.http.clone();
        let url = d.url("/v1/acp/ask");
        tokio::spawn(async move {
            let resp = http
                .post(url)
                .header("content-type", "application/json")
                .body(envelope.to_string())
                .send()
                .await
                .unwrap();
            resp.json::<Value>().await.unwrap()
        })
    };
    // Without `elicitation.form`, the door asks the first question as a permission request.
    let got = sse
        .until(|e| e["method"] == "session/request_permission")
        .await;
    let request = &got.last().unwrap().1;
    let options: Vec<&str> = request["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(options[..2], ["vitest", "jest"], "{request}");
    let a = post(
        &d,
        "ask",
        None,
        &json!({"jsonrpc": "2.0", "id": request["id"].clone(),
            "result": {"outcome": {"outcome": "selected", "optionId": "option-1"}}}),
    )
    .await;
    assert_eq!(a.status, 202, "{}", a.text);
    let answer = asking.await.unwrap();
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let events = d.wait_turns_ended(&session, 1).await;
    let resolved = events
        .iter()
        .find(|e| e["type"] == "question.resolved")
        .expect("the question was resolved");
    assert!(resolved.to_string().contains("jest"), "{resolved}");
    d.stop();
}
