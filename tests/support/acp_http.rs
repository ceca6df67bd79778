//! A raw HTTP client of `/v1/acp/{server_id}` (sandbox-agent's ACP-over-HTTP dialect) for the
//! tests: POST one JSON-RPC envelope, read the SSE stream of the agent side's envelopes
//! (`event: message`, `id: <n>`, `data: <envelope>`), checking its framing as it goes.

use std::pin::Pin;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use serde_json::{json, Value};

use super::daemon::Daemon;

/// Longest wait for any one SSE frame (the machine is loaded; nothing is timed).
pub const FRAME_WAIT: Duration = Duration::from_secs(60);

/// A POST's outcome: status and body (JSON when there is one).
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub text: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }
}

/// Posts `envelope` to `/v1/acp/{server}` (with `?agent=` when given).
pub async fn post(d: &Daemon, server: &str, agent: Option<&str>, envelope: &Value) -> Answer {
    let mut url = d.url(&format!("/v1/acp/{server}"));
    if let Some(agent) = agent {
        url.push_str(&format!("?agent={agent}"));
    }
    let mut rb = d
        .http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(envelope.to_string());
    if let Some(t) = &d.token {
        rb = rb.bearer_auth(t);
    }
    let resp = rb.send().await.expect("POST /v1/acp");
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let text = resp.text().await.expect("POST body");
    Answer {
        status,
        content_type,
        text,
    }
}

/// Sends request `method` with `params` and id `id`; returns the response envelope (200).
pub async fn request(
    d: &Daemon,
    server: &str,
    agent: Option<&str>,
    id: u64,
    method: &str,
    params: Value,
) -> Value {
    let envelope = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let a = post(d, server, agent, &envelope).await;
    assert_eq!(a.status, 200, "{method}: {}", a.text);
    assert!(
        a.content_type.starts_with("application/json"),
        "{}",
        a.content_type
    );
    let v = a.json();
    assert_eq!(v["id"], id, "{v}");
    v
}

/// `initialize` (creating the server for `agent`).
pub async fn initialize(d: &Daemon, server: &str, agent: &str) -> Value {
    let v = request(
        d,
        server,
        Some(agent),
        0,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "test", "version": "1"}}),
    )
    .await;
    assert!(v["result"]["protocolVersion"].is_number(), "{v}");
    v
}

/// `session/new` in `cwd`; returns the session id.
pub async fn new_session(d: &Daemon, server: &str, id: u64, cwd: &std::path::Path) -> String {
    let v = request(
        d,
        server,
        None,
        id,
        "session/new",
        json!({"cwd": cwd.display().to_string(), "mcpServers": []}),
    )
    .await;
    v["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("session/new: {v}"))
        .to_owned()
}

/// A text prompt; returns the response envelope.
pub async fn prompt(d: &Daemon, server: &str, id: u64, session: &str, text: &str) -> Value {
    request(
        d,
        server,
        None,
        id,
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
    )
    .await
}

/// Opens the SSE stream of `server`, after `last_event_id` when given.
pub async fn open_stream(d: &Daemon, server: &str, last_event_id: Option<u64>) -> EnvelopeStream {
    let resp = stream_response(d, server, last_event_id).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    EnvelopeStream::new(resp)
}

/// The raw response of `GET /v1/acp/{server}`.
pub async fn stream_response(
    d: &Daemon,
    server: &str,
    last_event_id: Option<u64>,
) -> reqwest::Response {
    let mut rb = d
        .http
        .get(d.url(&format!("/v1/acp/{server}")))
        .header("accept", "text/event-stream");
    if let Some(id) = last_event_id {
        rb = rb.header("last-event-id", id.to_string());
    }
    if let Some(t) = &d.token {
        rb = rb.bearer_auth(t);
    }
    rb.send().await.expect("GET /v1/acp/{server}")
}

/// One SSE frame of the envelope stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Envelope { id: u64, data: Value },
    Comment(String),
}

/// The envelope stream of a server, one frame at a time.
pub struct EnvelopeStream {
    body: Pin<Box<dyn Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl EnvelopeStream {
    pub fn new(resp: reqwest::Response) -> EnvelopeStream {
        EnvelopeStream {
            body: Box::pin(resp.bytes_stream()),
            buf: Vec::new(),
        }
    }

    /// The next frame; `None` when the stream ends. Panics after [`FRAME_WAIT`] without one.
    pub async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buf.drain(..at + 2).collect();
                return Some(parse(&block[..at]));
            }
            match tokio::time::timeout(FRAME_WAIT, self.body.next()).await {
                Err(_) => panic!(
                    "no SSE frame within {FRAME_WAIT:?}; buffered: {:?}",
                    String::from_utf8_lossy(&self.buf)
                ),
                Ok(None) | Ok(Some(Err(_))) => {
                    assert!(self.buf.is_empty(), "stream cut mid-frame");
                    return None;
                }
                Ok(Some(Ok(chunk))) => self.buf.extend_from_slice(&chunk),
            }
        }
    }

    /// The next envelope, skipping comments.
    pub async fn envelope(&mut self) -> Option<(u64, Value)> {
        loop {
            match self.next().await? {
                Frame::Envelope { id, data } => return Some((id, data)),
                Frame::Comment(_) => {}
            }
        }
    }

    /// Envelopes until (and including) the response with JSON-RPC id `id`.
    pub async fn until_response(&mut self, id: u64) -> Vec<(u64, Value)> {
        let mut out = Vec::new();
        loop {
            let (n, e) = self
                .envelope()
                .await
                .unwrap_or_else(|| panic!("the stream ended before the response {id}"));
            let done = e.get("method").is_none() && e["id"] == id;
            out.push((n, e));
            if done {
                return out;
            }
        }
    }

    /// Envelopes until one satisfies `pred` (inclusive).
    pub async fn until(&mut self, pred: impl Fn(&Value) -> bool) -> Vec<(u64, Value)> {
        let mut out = Vec::new();
        loop {
            let (n, e) = self
                .envelope()
                .await
                .expect("the stream ended before the envelope looked for");
            let done = pred(&e);
            out.push((n, e));
            if done {
                return out;
            }
        }
    }
}

/// Parses one frame: `event: message`, `id: <n>`, `data: <compact JSON>`, or comments.
fn parse(block: &[u8]) -> Frame {
    let text = std::str::from_utf8(block).expect("SSE is UTF-8");
    let lines: Vec<&str> = text.split('\n').collect();
    if lines.iter().all(|l| l.starts_with(':')) {
        return Frame::Comment(lines[0][1..].trim_start().to_owned());
    }
    assert_eq!(lines.len(), 3, "event, id, data: {text:?}");
    assert_eq!(lines[0], "event: message", "{text:?}");
    let id: u64 = lines[1]
        .strip_prefix("id: ")
        .and_then(|i| i.parse().ok())
        .unwrap_or_else(|| panic!("id: {text:?}"));
    let data = lines[2]
        .strip_prefix("data: ")
        .unwrap_or_else(|| panic!("data: {text:?}"));
    let data: Value = serde_json::from_str(data).expect("data is JSON");
    assert_eq!(data["jsonrpc"], "2.0", "{data}");
    Frame::Envelope { id, data }
}

/// The text of the `agent_message_chunk` updates among `envelopes`, joined.
pub fn agent_text(envelopes: &[(u64, Value)]) -> String {
    envelopes
        .iter()
        .filter(|(_, e)| e["method"] == "session/update")
        .filter(|(_, e)| e["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|(_, e)| e["params"]["update"]["content"]["text"].as_str())
        .collect()
}

/// Asserts that the numbers are `first, first+1, …` (no gap, no duplicate).
pub fn assert_dense(envelopes: &[(u64, Value)], first: u64) {
    for (i, (n, _)) in envelopes.iter().enumerate() {
        assert_eq!(*n, first + i as u64, "envelope numbers are dense");
    }
}

/// The ACP servers recorded in the data directory `data_dir`: a directory each under
/// `acp-http/` (beside them the restore lock, a file).
pub fn recorded_servers(data_dir: &std::path::Path) -> usize {
    std::fs::read_dir(data_dir.join("acp-http"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().is_dir())
        .count()
}

/// Prompts `stream <text>` as request `id` on `server`'s session, reading the stream from after
/// envelope `after`: the turn ends, its envelopes continue the numbers, the agent says `text`.
/// Returns the envelopes up to the prompt's answer.
pub async fn prompt_continues(
    d: &Daemon,
    server: &str,
    id: u64,
    session: &str,
    after: u64,
    text: &str,
) -> Vec<(u64, Value)> {
    let mut live = open_stream(d, server, Some(after)).await;
    let answer = prompt(d, server, id, session, &format!("stream {text}")).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let envelopes = live.until_response(id).await;
    assert_dense(&envelopes, after + 1);
    assert_eq!(agent_text(&envelopes), text);
    envelopes
}
