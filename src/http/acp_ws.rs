//! `GET /acp` with `Upgrade: websocket`: the WebSocket profile of the ACP remote transport
//! draft (RFD "Streamable HTTP & WebSocket Transport", `docs/acp-http.md`). One text frame is
//! one JSON-RPC message, each way; the `101` carries `Acp-Connection-Id`.
//!
//! The connection is a remote ACP server like those of `/v1/acp` (same door, same durable
//! envelope log, listed by `GET /v1/acp` under the connection id): the reader posts each frame
//! to it, the writer follows its log from the first envelope. When the socket closes, the
//! server is deleted (its sessions end, their agents stop), as the draft asks.

use std::sync::Arc;

use axum::extract::ws::{
    rejection::WebSocketUpgradeRejection, CloseFrame, Message, WebSocket, WebSocketUpgrade,
};
use axum::extract::{Extension, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;

use super::acp::{AcpHttp, AgentQuery};
use super::extract::ApiQuery;
use super::problem::Problem;
use crate::acp::remote::{RegistryError, Server, Servers};
use crate::scope::ConnectionScope;
use crate::session::AgentKind;

/// The subprotocol a client may offer (besides `bearer.<token>`); echoed when offered.
pub const PROTOCOL: &str = "acp";
/// The close code when the daemon shuts down (RFC 6455 "going away").
const CLOSE_GOING_AWAY: u16 = 1001;
/// The close code when the client stayed silent past the heartbeat timeout (as on `/v1/ws`).
const CLOSE_HEARTBEAT: u16 = 4000;
/// Envelopes written per read of the log at most.
const PAGE: usize = 256;

/// The `/acp` route.
pub fn route<S>(state: AcpHttp) -> Router<S> {
    Router::new().route("/acp", get(upgrade)).with_state(state)
}

async fn upgrade(
    State(s): State<AcpHttp>,
    ApiQuery(q): ApiQuery<AgentQuery>,
    scope: Option<Extension<ConnectionScope>>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    // An upgrade slot (`scope.rs`): WebSockets never take the slots plain requests need.
    let scope = match scope.map(|Extension(s)| s.upgrade()) {
        Some(None) => {
            return Problem::new(
                "too_many_websockets",
                StatusCode::SERVICE_UNAVAILABLE,
                "every connection slot WebSockets may take (--max-connections, less those kept for requests) is taken: try again later",
            )
            .into_response()
        }
        Some(Some(upgraded)) => Some(upgraded),
        None => None,
    };
    let ws = match ws {
        Ok(ws) => ws,
        Err(_) => {
            return Problem::invalid(
                "/acp is the ACP WebSocket transport: send a WebSocket upgrade (the draft's \
                 Streamable HTTP profile is not offered here; /v1/acp/{server_id} is ACP over HTTP)",
            )
            .into_response()
        }
    };
    let agent = match q.agent.as_deref() {
        None => AgentKind::Codebuff,
        Some(a) => match AgentKind::parse(a) {
            Some(kind) => kind,
            None => {
                return Problem::new(
                    "unsupported_agent",
                    StatusCode::BAD_REQUEST,
                    format!("unknown agent `{a}`: codebuff or mock"),
                )
                .into_response()
            }
        },
    };
    let id = uuid::Uuid::new_v4().to_string();
    let server = match s.servers.create_for_websocket(&id, agent).await {
        Ok(server) => server,
        Err(e @ RegistryError::TooMany(_)) => {
            return Problem::new(
                "too_many_acp_servers",
                StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
            )
            .into_response()
        }
        Err(e) => {
            return Problem::new(
                "stream_error",
                StatusCode::INTERNAL_SERVER_ERROR,
                e.to_string(),
            )
            .into_response()
        }
    };
    let servers = s.servers.clone();
    let heartbeat = s.heartbeat_timeout;
    let mut resp = ws
        .protocols([PROTOCOL])
        // The body limit of a POST holds for a message here too.
        .max_message_size(s.max_message_bytes)
        .max_frame_size(s.max_message_bytes)
        .on_failed_upgrade({
            let (servers, id) = (servers.clone(), id.clone());
            move |error| {
                tracing::debug!(%error, "an ACP WebSocket upgrade failed");
                tokio::spawn(async move { servers.delete(&id).await });
            }
        })
        .on_upgrade(move |socket| serve(socket, servers, server, scope, heartbeat));
    if let Ok(value) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("acp-connection-id", value);
    }
    resp
}

/// Runs one connection until the client closes it, the daemon stops (a close frame, 1001) or
/// nothing comes from the client for `heartbeat` (4000; the daemon pings every third of it), holding the listener's slot (`scope`), then deletes its server.
async fn serve(
    socket: WebSocket,
    servers: Arc<Servers>,
    server: Arc<Server>,
    scope: Option<ConnectionScope>,
    heartbeat: std::time::Duration,
) {
    let (tx, mut rx) = socket.split();
    let tx = Arc::new(tokio::sync::Mutex::new(tx));
    let log = server.log.clone();
    let sink = tx.clone();
    let writer = tokio::spawn(async move {
        let tx = sink;
        let mut after = 0;
        let mut written = log.subscribe();
        let mut closed = log.subscribe_closed();
        loop {
            let Ok(page) = log.read_after_async(after, PAGE).await else {
                break;
            };
            if !page.is_empty() {
                let mut tx = tx.lock().await;
                for (n, envelope) in page {
                    if tx
                        .send(Message::Text(envelope.to_string().into()))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    after = n;
                }
                continue;
            }
            if log.is_closed() {
                break;
            }
            tokio::select! {
                more = written.wait_for(|n| *n > after) => if more.is_err() { break },
                _ = closed.wait_for(|c| *c) => {}
            }
        }
        let _ = tx.lock().await.send(Message::Close(None)).await;
    });
    let mut scope = scope;
    let mut last_heard = tokio::time::Instant::now();
    let mut ping = tokio::time::interval(heartbeat / 3);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    loop {
        let next = tokio::select! {
            next = rx.next() => next,
            _ = ping.tick() => {
                if last_heard.elapsed() >= heartbeat {
                    writer.abort();
                    let reason = format!("heartbeat timeout: nothing received for {} s", heartbeat.as_secs_f64());
                    tracing::debug!(%reason, "closing an ACP WebSocket");
                    let close = CloseFrame { code: CLOSE_HEARTBEAT, reason: reason.into() };
                    let _ = tx.lock().await.send(Message::Close(Some(close))).await;
                    break;
                }
                if tx.lock().await.send(Message::Ping(Default::default())).await.is_err() {
                    break;
                }
                continue;
            }
            () = async {
                match scope.as_mut() {
                    Some(scope) => scope.closing().await,
                    None => std::future::pending().await,
                }
            } => {
                writer.abort();
                let close = CloseFrame { code: CLOSE_GOING_AWAY, reason: "the daemon is shutting down".into() };
                let _ = tx.lock().await.send(Message::Close(Some(close))).await;
                break;
            }
        };
        let Some(Ok(message)) = next else { break };
        // Anything, a pong included, shows the client is there.
        last_heard = tokio::time::Instant::now();
        let text = match message {
            Message::Text(text) => text.to_string(),
            Message::Close(_) => break,
            // Binary frames are ignored (the draft); pings are answered by axum.
            _ => continue,
        };
        let posted = match serde_json::from_str::<Value>(&text) {
            Ok(v) if v.is_object() => server.post(v).await.map(|_| ()),
            _ => server.post_raw(text).await,
        };
        if posted.is_err() {
            break;
        }
    }
    servers.delete(&server.id).await;
    writer.abort();
}
