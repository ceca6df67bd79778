//! Server-sent events over real HTTP (`docs/http-api.md`, "SSE framing"): headers and framing,
//! replay then live without gap or duplicate, `?offset` and `Last-Event-ID` resumption, paused
//! readers, keep-alive comments, resources of dropped clients, and the per-turn stream of
//! `POST …/messages/stream`.
//!
//! The stream is parsed from the raw bytes by [`support::sse::SseReader`]: each event must be
//! exactly an `id:` line, a `data:` line and a blank line.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::daemon::{Daemon, DaemonOptions};
use support::events::{assert_dense, assert_dense_from, assistant_texts, count, of_type};
use support::invariants::assert_well_formed;
use support::sse::{Frame, SseReader, FRAME_WAIT};

/// Opens `GET /v1/sessions/{id}/events/sse{query}` with extra headers; asserts 200.
async fn open_sse(d: &Daemon, id: &str, query: &str, headers: &[(&str, &str)]) -> SseReader {
    let mut rb = d
        .http
        .get(d.url(&format!("/v1/sessions/{id}/events/sse{query}")));
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let resp = rb.send().await.expect("SSE request");
    assert_eq!(resp.status(), 200, "SSE status");
    SseReader::new(resp)
}

/// `POST /v1/sessions/{id}/messages/stream`; asserts 200 and SSE headers.
async fn post_stream(d: &Daemon, id: &str, message: &str) -> SseReader {
    let resp = d
        .http
        .post(d.url(&format!("/v1/sessions/{id}/messages/stream")))
        .json(&json!({ "message": message }))
        .send()
        .await
        .expect("POST messages/stream");
    assert_eq!(resp.status(), 200, "messages/stream status");
    assert_sse_headers(&resp);
    SseReader::new(resp)
}

fn assert_sse_headers(resp: &reqwest::Response) {
    let h = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(h("content-type").as_deref(), Some("text/event-stream"));
    assert_eq!(h("cache-control").as_deref(), Some("no-cache"));
    assert_eq!(h("x-accel-buffering").as_deref(), Some("no"));
}

/// The session's last sequence (from `SessionInfo.eventCount`).
async fn event_count(d: &Daemon, id: &str) -> u64 {
    d.info(id).await["eventCount"].as_u64().unwrap()
}

/// Waits until the session has more than `n` events.
async fn wait_count_above(d: &Daemon, id: &str, n: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let c = event_count(d, id).await;
        if c > n {
            return c;
        }
        assert!(Instant::now() < deadline, "{id} stuck at {c} events");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn sse_sends_its_headers_and_one_id_and_data_line_per_event() {
    let d = Daemon::start();
    d.create("s1", json!({"agent": "mock"})).await;
    let resp = d
        .http
        .get(d.url("/v1/sessions/s1/events/sse"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_sse_headers(&resp);
    let mut sse = SseReader::new(resp);
    // The replay: session.started.
    let (id, first) = sse.next_event().await.unwrap();
    assert_eq!(id, 1);
    assert_eq!(first["type"], "session.started");
    // Live: a turn.
    d.message("s1", "stream live words over sse").await;
    let mut events = vec![first];
    events.extend(sse.events_until("turn.ended").await);
    assert_dense(&events);
    assert_well_formed(&events);
    // Exactly what polling returns.
    assert_eq!(events, d.events("s1").await);
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "item.delta")
        .filter_map(|e| e["data"]["delta"].as_str())
        .collect();
    assert!(deltas.contains("live words over sse"), "{deltas:?}");
    // includeRaw on SSE carries the agent's lines.
    let mut raw = open_sse(&d, "s1", "?includeRaw=true", &[]).await;
    let mut saw_raw = false;
    for _ in 0..events.len() {
        let (_, e) = raw.next_event().await.unwrap();
        if e["synthetic"] == false {
            assert!(!e["raw"].is_null(), "{e}");
            saw_raw = true;
        } else {
            assert!(e["raw"].is_null(), "{e}");
        }
    }
    assert!(saw_raw);
    drop(raw);
    drop(sse);
    d.stop();
}

#[tokio::test]
async fn sse_replays_then_follows_live_without_gap_or_duplicate() {
    let d = Daemon::start();
    d.create("s1", json!({"agent": "mock"})).await;
    d.message("s1", "flood 20000").await;
    // A second turn queued behind the flood: whatever the timing, some events are live.
    d.message("s1", "stream the live tail").await;
    // Connect mid-turn: some events are in the log, most are still to come.
    let before = wait_count_above(&d, "s1", 10).await;
    let mut sse = open_sse(&d, "s1", "", &[]).await;
    let mut events = sse.events_until("turn.ended").await;
    let flood_end = events.last().unwrap()["sequence"].as_u64().unwrap();
    events.extend(sse.events_until("turn.ended").await);
    let last = events.last().unwrap()["sequence"].as_u64().unwrap();
    assert!(
        before < flood_end && flood_end < last,
        "{before} < {flood_end} < {last}"
    );
    assert_dense(&events);
    assert_well_formed(&events);
    let deltas = count(&events, "item.delta");
    assert!(deltas > 20_000, "{deltas} deltas");
    // Nothing after the second turn's end, nothing missing from the log.
    assert_eq!(event_count(&d, "s1").await, last);
    drop(sse);
    d.stop();
}

#[tokio::test]
async fn sse_offset_starts_after_that_sequence() {
    let d = Daemon::start();
    d.create("s1", json!({"agent": "mock"})).await;
    d.message("s1", "stream a b c d e").await;
    let all = d.wait_turns_ended("s1", 1).await;
    let n = all.len() as u64;
    for k in [0, 1, 4, n - 1] {
        let mut sse = open_sse(&d, "s1", &format!("?offset={k}"), &[]).await;
        let mut got = Vec::new();
        while (got.len() as u64) < n - k {
            got.push(sse.next_event().await.unwrap().1);
        }
        assert_eq!(got, all[k as usize..].to_vec(), "offset {k}");
    }
    // `offset` wins over `Last-Event-ID`.
    let mut sse = open_sse(&d, "s1", "?offset=2", &[("last-event-id", "5")]).await;
    assert_eq!(sse.next_event().await.unwrap().0, 3);
    drop(sse);
    // From the end: nothing is replayed; the next event is the first live one.
    let mut sse = open_sse(&d, "s1", &format!("?offset={n}"), &[]).await;
    d.message("s1", "echo after the end").await;
    let (id, e) = sse.next_event().await.unwrap();
    assert_eq!(id, n + 1);
    assert_eq!(e["type"], "turn.started");
    // Beyond the end: waits for that sequence.
    let events = d.wait_turns_ended("s1", 2).await;
    let m = events.len() as u64;
    let mut ahead = open_sse(&d, "s1", &format!("?offset={}", m + 1), &[]).await;
    d.message("s1", "echo one more").await;
    let (id, _) = ahead.next_event().await.unwrap();
    assert_eq!(id, m + 2);
    drop(ahead);
    drop(sse);
    d.stop();
}

#[tokio::test]
async fn sse_resumes_after_last_event_id() {
    let d = Daemon::start();
    d.create("s1", json!({"agent": "mock"})).await;
    d.message("s1", "flood 20000").await;
    wait_count_above(&d, "s1", 10).await;
    // Read part of the stream, then disconnect.
    let mut first = open_sse(&d, "s1", "", &[]).await;
    let mut events = Vec::new();
    for _ in 0..700 {
        events.push(first.next_event().await.unwrap().1);
    }
    drop(first);
    let last_id = events.last().unwrap()["sequence"].as_u64().unwrap();
    assert_eq!(last_id, 700);
    // Reconnect with the last id seen; the union has no gap and no duplicate.
    let mut second = open_sse(&d, "s1", "", &[("Last-Event-ID", &last_id.to_string())]).await;
    events.extend(second.events_until("turn.ended").await);
    assert_dense(&events);
    assert_well_formed(&events);
    assert_eq!(events.len(), d.events("s1").await.len());
    drop(second);
    d.stop();
}

#[tokio::test]
async fn a_paused_sse_client_still_gets_every_event() {
    let d = Daemon::start();
    d.create("s1", json!({"agent": "mock"})).await;
    let mut sse = open_sse(&d, "s1", "", &[]).await;
    d.message("s1", "flood 20000").await;
    // Read nothing while the flood runs.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let events = sse.events_until("turn.ended").await;
    let end = events.last().unwrap()["sequence"].as_u64().unwrap();
    assert_dense(&events);
    assert!(end > 20_000, "{end}");
    assert_well_formed(&events);
    // The daemon kept serving others meanwhile, and the session goes on.
    d.message("s1", "echo still here").await;
    let more = sse.events_until("turn.ended").await;
    assert_eq!(more[0]["sequence"], end + 1);
    drop(sse);
    d.stop();
}

#[tokio::test]
async fn sse_sends_keep_alive_comments_while_idle() {
    let d = Daemon::start_with(DaemonOptions {
        args: vec!["--sse-keep-alive".into(), "0.3".into()],
        ..Default::default()
    });
    d.create("s1", json!({"agent": "mock"})).await;
    let mut sse = open_sse(&d, "s1", "", &[]).await;
    assert_eq!(
        sse.next().await,
        Some(Frame::Event {
            id: 1,
            data: d.events("s1").await[0].clone()
        })
    );
    let mut comments = 0;
    while comments < 3 {
        match sse.next().await.expect("the stream stays open") {
            Frame::Comment(c) => {
                assert_eq!(c, "keep-alive");
                comments += 1;
            }
            Frame::Event { id, .. } => panic!("unexpected event {id} on an idle session"),
        }
    }
    // Events still flow after keep-alives.
    d.message("s1", "echo after the silence").await;
    let events = sse.events_until("turn.ended").await;
    assert_eq!(events[0]["sequence"], 2);
    // SIGTERM with the stream still open: the daemon closes it and exits 0 (checked by stop).
    d.stop();
    assert!(
        sse.closes_within(FRAME_WAIT).await,
        "the stream ends when the daemon stops"
    );
}

/// Open file descriptors of process `pid`.
fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Threads of process `pid`.
fn thread_count(pid: i32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn dropped_sse_clients_free_their_resources() {
    const CLIENTS: usize = 200;
    let d = Daemon::start();
    d.create("s1", json!({"agent": "mock"})).await;
    d.message("s1", "echo warm up").await;
    d.wait_turns_ended("s1", 1).await;
    let pid = d.pid();
    // Warm up one SSE connection so lazily created resources exist in the baseline.
    {
        let mut one = open_sse(&d, "s1", "", &[]).await;
        one.next_event().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (fds0, threads0) = (fd_count(pid), thread_count(pid));

    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut streams = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        let resp = client
            .get(d.url("/v1/sessions/s1/events/sse"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let mut sse = SseReader::new(resp);
        assert_eq!(sse.next_event().await.unwrap().0, 1);
        streams.push(sse);
    }
    let fds_open = fd_count(pid);
    assert!(
        fds_open >= fds0 + CLIENTS,
        "each open stream holds a connection: {fds0} -> {fds_open}"
    );
    drop(streams);
    drop(client);

    // The daemon notices the closed connections (without any new event) and lets them go.
    let deadline = Instant::now() + Duration::from_secs(30);
    let fds = loop {
        let fds = fd_count(pid);
        if fds <= fds0 + 10 || Instant::now() > deadline {
            break fds;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        fds <= fds0 + 10,
        "file descriptors after dropping {CLIENTS} streams: {fds0} -> {fds_open} -> {fds}"
    );
    let threads = thread_count(pid);
    assert!(threads <= threads0 + 8, "threads: {threads0} -> {threads}");

    // And it still serves: health, a new turn, a new stream.
    let health: Value = d.get("/v1/health").await.json().await.unwrap();
    assert_eq!(health, json!({"status": "ok"}));
    let mut sse = open_sse(&d, "s1", "", &[]).await;
    d.message("s1", "echo after the crowd").await;
    sse.events_until("turn.ended").await;
    let events = sse.events_until("turn.ended").await;
    assert_well_formed(&d.events("s1").await);
    assert!(events.iter().any(|e| e["type"] == "item.completed"
        && e["data"]["item"]["content"][0]["text"] == "after the crowd"));
    drop(sse);
    d.stop();
}

#[tokio::test]
async fn message_stream_carries_this_turn_only_and_closes_after_turn_ended() {
    let d = Daemon::start();
    d.create("s1", json!({"agent": "mock"})).await;
    d.message("s1", "echo first").await;
    let before = d.wait_turns_ended("s1", 1).await;
    let mut sse = post_stream(&d, "s1", "echo second").await;
    let mut events = Vec::new();
    while let Some((_, e)) = sse.next_event().await {
        events.push(e);
    }
    assert_eq!(events[0]["type"], "turn.started");
    assert_eq!(events[0]["sequence"], before.len() + 1);
    assert_eq!(events.last().unwrap()["type"], "turn.ended");
    assert_eq!(
        events.last().unwrap()["data"]["metadata"]["status"],
        "completed"
    );
    assert_eq!(count(&events, "turn.ended"), 1);
    assert_dense_from(&events, before.len() as u64 + 1);
    let user = &events[1]["data"]["item"];
    assert_eq!(user["role"], "user");
    assert_eq!(user["content"][0]["text"], "echo second");
    assert_eq!(assistant_texts(&events), vec!["second"]);
    // The same events as the log holds for that range.
    let all = d.events("s1").await;
    assert_eq!(events, all[before.len()..].to_vec());
    assert_well_formed(&all);
    // `?includeRaw=true` on the turn stream carries the agent's lines.
    let resp = d
        .http
        .post(d.url("/v1/sessions/s1/messages/stream?includeRaw=true"))
        .json(&json!({"message": "echo raw please"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut sse = SseReader::new(resp);
    let mut agent_events = 0;
    while let Some((_, e)) = sse.next_event().await {
        if e["synthetic"] == false {
            assert!(e["raw"].is_object(), "{e}");
            agent_events += 1;
        }
    }
    assert!(agent_events > 0);
    d.stop();
}

#[tokio::test]
async fn message_stream_closes_after_a_question_and_the_turn_goes_on_after_the_answer() {
    let d = Daemon::start();
    d.create("s1", json!({"agent": "mock"})).await;
    let mut sse = post_stream(&d, "s1", "ask").await;
    let mut events = Vec::new();
    while let Some((_, e)) = sse.next_event().await {
        events.push(e);
    }
    assert_eq!(events[0]["type"], "turn.started");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "question.requested", "{events:?}");
    assert!(events.iter().all(|e| e["type"] != "turn.ended"));
    let qid = last["data"]["question_id"].as_str().unwrap().to_owned();
    // The session says it waits for input (its status follows the log within moments).
    d.wait_status("s1", "awaiting_input", Duration::from_secs(30))
        .await;
    // Answer it: the turn finishes.
    let resp = d
        .post(
            &format!("/v1/sessions/s1/questions/{qid}/reply"),
            json!({"answers": [["vitest"], ["unit", "e2e"]]}),
        )
        .await;
    assert_eq!(resp.status(), 204);
    let all = d.wait_turns_ended("s1", 1).await;
    assert_well_formed(&all);
    let resolved = of_type(&all, "question.resolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["data"]["status"], "answered");
    d.stop();
}

#[tokio::test]
async fn a_queued_message_streams_from_its_own_turn() {
    let d = Daemon::start();
    d.create("s1", json!({"agent": "mock"})).await;
    // The first turn runs a while; the second message queues behind it.
    let mut first = post_stream(&d, "s1", "flood 3000").await;
    let second = tokio::spawn({
        let http = d.http.clone();
        let url = d.url("/v1/sessions/s1/messages/stream");
        async move {
            let resp = http
                .post(url)
                .json(&json!({"message": "echo the second"}))
                .send()
                .await
                .expect("second stream");
            assert_eq!(resp.status(), 200);
            assert_sse_headers(&resp);
            let mut sse = SseReader::new(resp);
            let mut events = Vec::new();
            while let Some((_, e)) = sse.next_event().await {
                events.push(e);
            }
            events
        }
    });
    let mut a = Vec::new();
    while let Some((_, e)) = first.next_event().await {
        a.push(e);
    }
    let b = tokio::time::timeout(FRAME_WAIT, second)
        .await
        .expect("the second stream ends")
        .expect("second stream task");
    assert_eq!(a[0]["type"], "turn.started");
    assert_eq!(a[0]["sequence"], 2);
    assert_eq!(a.last().unwrap()["type"], "turn.ended");
    assert_eq!(b[0]["type"], "turn.started");
    assert_eq!(
        b[0]["sequence"],
        a.last().unwrap()["sequence"].as_u64().unwrap() + 1
    );
    assert_eq!(
        b[1]["data"]["item"]["content"][0]["text"],
        "echo the second"
    );
    assert_eq!(b.last().unwrap()["type"], "turn.ended");
    let mut both = vec![d.events("s1").await[0].clone()];
    both.extend(a);
    both.extend(b);
    assert_eq!(both, d.events("s1").await);
    assert_well_formed(&both);
    d.stop();
}
