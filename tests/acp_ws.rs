//! `GET /acp` with `Upgrade: websocket`: the WebSocket profile of the ACP remote transport
//! draft, with a real WebSocket client (tokio-tungstenite) against the binary.

mod support;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

use support::daemon::{Daemon, DaemonOptions, TempDir};

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(d: &Daemon, query: &str, auth: Option<&str>) -> Result<(Ws, String), u16> {
    let url = format!("{}/acp{query}", d.base.replace("http://", "ws://"));
    let mut request = url.into_client_request().expect("request");
    if let Some(a) = auth {
        request
            .headers_mut()
            .insert("authorization", HeaderValue::from_str(a).unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((ws, resp)) => {
            let id = resp
                .headers()
                .get("acp-connection-id")
                .and_then(|v| v.to_str().ok())
                .expect("Acp-Connection-Id on the 101")
                .to_owned();
            Ok((ws, id))
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("connect: {e}"),
    }
}

async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::Text(v.to_string().into())).await.unwrap();
}

/// Messages until the response with id `id` (inclusive).
async fn until_response(ws: &mut Ws, id: u64) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(60), ws.next())
            .await
            .expect("a message within 60 s")
            .expect("the socket is open")
            .expect("a frame");
        let Message::Text(text) = msg else { continue };
        let v: Value = serde_json::from_str(&text).expect("JSON text frame");
        let done = v.get("method").is_none() && v["id"] == id;
        out.push(v);
        if done {
            return out;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_session_runs_over_the_websocket_and_ends_with_it() {
    let d = Daemon::start_with(DaemonOptions {
        token: Some("tok".into()),
        ..Default::default()
    });
    let work = TempDir::new("acp-ws-work");
    // The token at the upgrade, never in the URL; no upgrade is a 400.
    assert_eq!(connect(&d, "?agent=mock", None).await.err(), Some(401));
    assert_eq!(
        connect(&d, "?agent=mock&token=tok", Some("Bearer no"))
            .await
            .err(),
        Some(401)
    );
    let plain = d.get("/acp").await;
    assert_eq!(plain.status(), 400);

    let (mut ws, conn) = connect(&d, "?agent=mock", Some("Bearer tok"))
        .await
        .unwrap();
    send(
        &mut ws,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}}),
    )
    .await;
    let init = until_response(&mut ws, 1).await;
    assert_eq!(
        init.last().unwrap()["result"]["agentInfo"]["name"],
        "codebuffd"
    );
    // Not JSON: the connection answers a parse error, and goes on.
    ws.send(Message::Text("{nope".into())).await.unwrap();
    send(
        &mut ws,
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
        "params": {"cwd": work.path().display().to_string(), "mcpServers": []}}),
    )
    .await;
    let got = until_response(&mut ws, 2).await;
    assert!(got.iter().any(|v| v["error"]["code"] == -32700), "{got:?}");
    let session = got.last().unwrap()["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let listed: Value = d.get("/v1/acp").await.json().await.unwrap();
    assert_eq!(listed["servers"][0]["serverId"], conn.as_str(), "{listed}");

    send(&mut ws, json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "stream Over a socket"}]}})).await;
    let got = until_response(&mut ws, 3).await;
    assert_eq!(got.last().unwrap()["result"]["stopReason"], "end_turn");
    let text: String = got
        .iter()
        .filter(|v| v["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|v| v["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert_eq!(text, "Over a socket");

    // Closing the socket ends the connection and its session.
    ws.close(None).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let listed: Value = d.get("/v1/acp").await.json().await.unwrap();
        if listed["servers"] == json!([]) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the connection is gone"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Its session ends as the server goes (it is unlisted first).
    while d.info(&session).await["ended"] != true {
        assert!(tokio::time::Instant::now() < deadline, "the session ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        d.wait_no_agents(Duration::from_secs(10)).await,
        Vec::<i32>::new()
    );
    assert_eq!(d.spares().await, Vec::<i32>::new());
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_the_socket_with_1001_and_a_restart_forgets_it() {
    let data = TempDir::new("acp-ws-restart");
    let work = TempDir::new("acp-ws-restart-work");
    let d = Daemon::start_in(data.path(), &[]);
    let (mut ws, _) = connect(&d, "?agent=mock", None).await.unwrap();
    send(
        &mut ws,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}}),
    )
    .await;
    until_response(&mut ws, 1).await;
    let closing = tokio::spawn(async move {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                _ => return None,
            }
        }
    });
    d.stop();
    assert_eq!(closing.await.unwrap(), Some(1001));

    // A crash with a session open on a socket: the next start ends it and forgets the server.
    let d = Daemon::start_in(data.path(), &[]);
    assert_eq!(
        d.get("/v1/acp").await.json::<Value>().await.unwrap()["servers"],
        json!([])
    );
    let (mut ws, _) = connect(&d, "?agent=mock", None).await.unwrap();
    send(
        &mut ws,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}}),
    )
    .await;
    until_response(&mut ws, 1).await;
    send(
        &mut ws,
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
        "params": {"cwd": work.path().display().to_string(), "mcpServers": []}}),
    )
    .await;
    let got = until_response(&mut ws, 2).await;
    let session = got.last().unwrap()["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    d.crash();
    let d = Daemon::start_in(data.path(), &[]);
    assert_eq!(
        d.get("/v1/acp").await.json::<Value>().await.unwrap()["servers"],
        json!([])
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while d.info(&session).await["ended"] != true {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the socket's session is ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    d.stop();
}
