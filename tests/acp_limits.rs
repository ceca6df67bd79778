//! Limits on the ACP doors, against the binary: a POST that cannot be answered is refused at
//! once, ACP servers are capped and idle ones retired (and cost no descriptor while idle), and
//! the `/acp` WebSocket honours the body limit, has a heartbeat, and never starves
//! `/v1/health` of connections.

mod support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use support::acp_http::{initialize, post};
use support::daemon::{Daemon, DaemonOptions, TempDir};

fn start(args: &[&str]) -> Daemon {
    Daemon::start_with(DaemonOptions {
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        ..Default::default()
    })
}

async fn server_ids(d: &Daemon) -> Vec<String> {
    let v: Value = d.get("/v1/acp").await.json().await.unwrap();
    v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["serverId"].as_str().unwrap().to_owned())
        .collect()
}

/// `GET /v1/health` answers within two seconds.
async fn health_answers(d: &Daemon) -> bool {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    client
        .get(d.url("/v1/health"))
        .send()
        .await
        .is_ok_and(|r| r.status() == 200)
}

fn open_descriptors(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_acp_layer_cannot_answer_is_refused_at_once() {
    let d = start(&["--max-connections", "6"]);
    initialize(&d, "srv", "mock").await;
    let bad = [
        json!({"jsonrpc": "1.0", "id": 1, "method": "session/list", "params": {}}),
        json!({"id": 2, "method": "session/list", "params": {}}),
        json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "session/list", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 18_446_744_073_709_551_615_u64, "method": "session/list"}),
        serde_json::from_str::<Value>(
            r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"session/list"}"#,
        )
        .unwrap(),
        json!({"jsonrpc": "2.0", "id": 1.5, "method": "session/list", "params": {}}),
        json!({"jsonrpc": "2.0", "id": true, "method": "session/list", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": 7}),
        json!({"jsonrpc": "2.0", "id": 4}),
    ];
    // More of them than there are connections: none may hold one.
    for envelope in bad.iter().chain(bad.iter()) {
        let answer = tokio::time::timeout(Duration::from_secs(5), post(&d, "srv", None, envelope))
            .await
            .unwrap_or_else(|_| panic!("{envelope} got no answer within 5 s"));
        assert_eq!(answer.status, 400, "{envelope}: {}", answer.text);
        let problem = answer.json();
        assert_eq!(problem["type"], "urn:sandbox-agent:error:invalid_request");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("not a JSON-RPC 2.0 message"),
            "{problem}"
        );
    }
    assert!(health_answers(&d).await);
    // A good request on the same server is still answered.
    let ok = post(
        &d,
        "srv",
        None,
        &json!({"jsonrpc": "2.0", "id": 9, "method": "session/list", "params": {}}),
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(ok.json()["id"], 9);
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_servers_are_capped_cost_no_descriptor_and_idle_ones_retire() {
    let d = start(&["--max-acp-servers", "20", "--acp-idle-timeout", "3"]);
    initialize(&d, "first", "mock").await;
    let before = open_descriptors(d.pid());
    for i in 1..20 {
        initialize(&d, &format!("srv-{i:02}"), "mock").await;
    }
    let after = open_descriptors(d.pid());
    assert!(
        after <= before + 2,
        "19 idle servers hold {} descriptors",
        after.saturating_sub(before)
    );
    // The 21st is refused, and says why.
    let refused = post(
        &d,
        "one-more",
        Some("mock"),
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}),
    )
    .await;
    assert_eq!(refused.status, 503, "{}", refused.text);
    let problem = refused.json();
    assert_eq!(
        problem["type"],
        "urn:sandbox-agent:error:too_many_acp_servers"
    );
    assert!(problem["detail"]
        .as_str()
        .unwrap()
        .contains("--max-acp-servers"));
    assert_eq!(server_ids(&d).await.len(), 20);
    // A server whose stream is read stays; the others are retired once idle.
    let stream = support::acp_http::open_stream(&d, "first", None).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ids = server_ids(&d).await;
        if ids == ["first"] {
            break;
        }
        assert!(Instant::now() < deadline, "not retired: {ids:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(stream);
    initialize(&d, "one-more", "mock").await;
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_restores_no_more_servers_than_the_cap() {
    let data = TempDir::new("acp-cap-restart");
    let d = Daemon::start_in(data.path(), &["--max-acp-servers", "10"]);
    for i in 0..8 {
        initialize(&d, &format!("srv-{i}"), "mock").await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    d.stop();
    let d = Daemon::start_in(data.path(), &["--max-acp-servers", "3"]);
    // The most recent three.
    assert_eq!(server_ids(&d).await, ["srv-5", "srv-6", "srv-7"]);
    assert_eq!(
        support::acp_http::recorded_servers(data.path()),
        3,
        "the retired servers' records are removed"
    );
    d.stop();
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(d: &Daemon) -> Result<Ws, u16> {
    let url = format!("{}/acp?agent=mock", d.base.replace("http://", "ws://"));
    match tokio_tungstenite::connect_async(url).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("connect: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_never_starve_health_of_connections() {
    let d = start(&["--max-connections", "6"]);
    let mut open = Vec::new();
    let mut refused = 0;
    for _ in 0..8 {
        match connect(&d).await {
            Ok(ws) => open.push(ws),
            Err(status) => {
                assert_eq!(status, 503);
                refused += 1;
            }
        }
    }
    assert_eq!(
        (open.len(), refused),
        (4, 4),
        "6 slots, 2 kept for requests"
    );
    for _ in 0..3 {
        assert!(health_answers(&d).await, "health answers");
    }
    // A closed socket frees its slot.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    let again = loop {
        if let Ok(ws) = connect(&d).await {
            break ws;
        }
        assert!(Instant::now() < deadline, "the slot never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    drop(again);
    drop(open);
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acp_websocket_honours_the_body_limit_and_closes_a_silent_client() {
    let d = start(&[
        "--max-body-bytes",
        "100000",
        "--ws-heartbeat-timeout",
        "1.5",
    ]);
    // A 4 MiB message is refused: the connection ends, nothing of it is taken.
    let mut ws = connect(&d).await.unwrap();
    let huge = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": 1, "pad": "x".repeat(4 << 20)}});
    use futures_util::SinkExt;
    let _ = ws.send(Message::Text(huge.to_string().into())).await;
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match ws.next().await {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return true,
                Some(Ok(Message::Text(t))) => panic!("answered a 4 MiB message: {t:.200}"),
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert_eq!(ended, Ok(true), "the connection ends");
    // A client that answers nothing (its socket is never read, so no pong) is closed, and its
    // server deleted.
    let silent = connect(&d).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !server_ids(&d).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the silent socket's server is still there"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(silent);
    // One that is read (pongs) stays past the timeout.
    let mut alive = connect(&d).await.unwrap();
    let until = tokio::time::Instant::now() + Duration::from_secs(4);
    let mut pings = 0;
    loop {
        match tokio::time::timeout_at(until, alive.next()).await {
            Err(_) => break,
            Ok(Some(Ok(Message::Ping(_)))) => pings += 1,
            other => panic!("only pings may come: {other:?}"),
        }
    }
    assert!(pings >= 2, "{pings} pings in 4 s");
    assert_eq!(server_ids(&d).await.len(), 1);
    d.stop();
}
