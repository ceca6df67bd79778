//! A `/v1/ws` client for the tests (tokio-tungstenite): a daemon whose WebSocket sessions run
//! the mock agent, connections that send messages with txids and read them back, and the
//! small readers of what came back.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::daemon::{Daemon, DaemonOptions};

/// Generous limit for anything that waits on the daemon (the machine is shared and loaded).
pub const WAIT: Duration = Duration::from_secs(60);

/// A daemon whose WebSocket sessions run the mock agent unless a prompt names another.
pub fn daemon(extra: &[&str]) -> Daemon {
    let mut args = vec!["--ws-default-agent".to_owned(), "mock".to_owned()];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    Daemon::start_with(DaemonOptions {
        args,
        ..Default::default()
    })
}

/// One client connection.
pub struct Ws {
    pub stream: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_txid: i64,
}

/// The `/v1/ws` URL of a daemon.
pub fn ws_url(d: &Daemon) -> String {
    format!("{}/v1/ws", d.base.replacen("http://", "ws://", 1))
}

/// Opens `/v1/ws` with these extra request headers.
pub async fn connect_with(
    d: &Daemon,
    headers: &[(&'static str, &str)],
) -> Result<
    (
        Ws,
        tokio_tungstenite::tungstenite::handshake::client::Response,
    ),
    WsError,
> {
    let mut request = ws_url(d).into_client_request()?;
    for (name, value) in headers {
        request
            .headers_mut()
            .insert(*name, HeaderValue::from_str(value).expect("header value"));
    }
    let (stream, response) = tokio_tungstenite::connect_async(request).await?;
    Ok((
        Ws {
            stream,
            next_txid: 1,
        },
        response,
    ))
}

impl Ws {
    /// Opens `/v1/ws` with the daemon's token (if any) in `Authorization`.
    pub async fn connect(d: &Daemon) -> Ws {
        let bearer = d.token.as_ref().map(|t| format!("Bearer {t}"));
        let headers: Vec<(&'static str, &str)> = bearer
            .as_deref()
            .map(|b| vec![("authorization", b)])
            .unwrap_or_default();
        connect_with(d, &headers).await.expect("connect /v1/ws").0
    }

    pub async fn send_text(&mut self, text: &str) {
        self.stream
            .send(Message::Text(text.into()))
            .await
            .expect("send a frame");
    }

    /// Sends a message with the next txid; returns the txid.
    pub async fn send(&mut self, mut message: Value) -> i64 {
        let txid = self.next_txid;
        self.next_txid += 1;
        message["txid"] = json!(txid);
        self.send_text(&message.to_string()).await;
        txid
    }

    /// Sends an `action` with `data`; returns the txid.
    pub async fn action(&mut self, data: Value) -> i64 {
        self.send(json!({"type": "action", "data": data})).await
    }

    /// The next text message, parsed (panics on close or after `WAIT`).
    pub async fn recv(&mut self) -> Value {
        loop {
            let frame = tokio::time::timeout(WAIT, self.stream.next())
                .await
                .expect("a message in time")
                .expect("the connection is open")
                .expect("a frame");
            match frame {
                Message::Text(text) => return serde_json::from_str(&text).expect("JSON message"),
                Message::Close(close) => panic!("the connection closed: {close:?}"),
                _ => {}
            }
        }
    }

    /// Every message up to and including the first that satisfies `pred`.
    pub async fn recv_until(&mut self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut got = Vec::new();
        loop {
            let m = self.recv().await;
            let done = pred(&m);
            got.push(m);
            if done {
                return got;
            }
        }
    }

    /// Expects the next message to be the successful ack of `txid`.
    pub async fn acked(&mut self, txid: i64) {
        let m = self.recv().await;
        assert_eq!(m, json!({"type": "ack", "txid": txid, "success": true}));
    }

    /// Sends `identify` and expects its ack.
    pub async fn identify(&mut self, session: &str) {
        let txid = self
            .send(json!({"type": "identify", "clientSessionId": session}))
            .await;
        self.acked(txid).await;
    }

    /// Sends a prompt, expects its ack, and returns every message up to the prompt's end
    /// (`prompt-response` or `prompt-error`).
    pub async fn prompt(&mut self, data: Value) -> Vec<Value> {
        let prompt_id = data["promptId"].as_str().expect("promptId").to_owned();
        let mut data = data;
        data["type"] = json!("prompt");
        let txid = self.action(data).await;
        self.acked(txid).await;
        self.recv_until(|m| ends_prompt(m, &prompt_id)).await
    }
}

/// True for the `prompt-response` or `prompt-error` of `prompt_id`.
pub fn ends_prompt(m: &Value, prompt_id: &str) -> bool {
    let d = &m["data"];
    m["type"] == "action"
        && ((d["type"] == "prompt-response" && d["promptId"] == prompt_id)
            || (d["type"] == "prompt-error" && d["userInputId"] == prompt_id))
}

/// The `data` of the server actions of type `kind`.
pub fn actions<'m>(messages: &'m [Value], kind: &str) -> Vec<&'m Value> {
    messages
        .iter()
        .filter(|m| m["type"] == "action" && m["data"]["type"] == kind)
        .map(|m| &m["data"])
        .collect()
}

/// The chunks of `prompt_id`, in order.
pub fn chunks(messages: &[Value], prompt_id: &str) -> Vec<String> {
    actions(messages, "response-chunk")
        .into_iter()
        .filter(|d| d["userInputId"] == prompt_id)
        .map(|d| d["chunk"].as_str().expect("chunk text").to_owned())
        .collect()
}

/// The last message's `data` (a prompt's end).
pub fn last_data(messages: &[Value]) -> &Value {
    &messages.last().expect("messages")["data"]
}

/// The status of an upgrade the daemon refused.
pub fn refused<T>(result: Result<T, WsError>) -> u16 {
    match result {
        Err(WsError::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("not an HTTP refusal: {other}"),
        Ok(_) => panic!("the upgrade was accepted"),
    }
}

/// Waits until the session exists (a prompt creates it after its ack) and its status is
/// `status` (over HTTP).
pub async fn wait_status(d: &Daemon, id: &str, status: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    while d.get(&format!("/v1/sessions/{id}")).await.status() != 200 {
        assert!(Instant::now() < deadline, "session {id} was never created");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    d.wait_status(id, status, WAIT).await
}
