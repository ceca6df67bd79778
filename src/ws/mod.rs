//! The Codebuff WebSocket protocol at `GET /v1/ws` (`docs/ws.md`): a front door that lets
//! Codebuff-protocol clients drive codebuffd sessions — `identify`, `ping`, `subscribe`,
//! `unsubscribe`, and the `prompt` and `init` actions, answered with `ack`, `response-chunk`,
//! `prompt-response`, `prompt-error`, `init-response` and `action-error` — plus our
//! extensions: universal events of subscribed sessions (`event`), the agent's questions and
//! permission requests (`question`, `permission`) and the client's `answer`, `cancel` and
//! `permission-reply`.
//!
//! Like every door it translates and owns nothing: sessions, turns and the log are the
//! engine's ([`SessionManager`]); prompts and subscriptions read the log at their own cursor.
//! The route is mounted by `http` (one listener, its auth and browser guard); this module
//! supplies the handler.
//!
//! * [`client`]: what clients send, and the parser (pure).
//! * [`server`]: what the daemon sends (pure).
//! * [`turn`]: a prompt's turn events → chunks, questions, the final response (pure).
//! * [`session`]: the session behind a request: find or create it, `costMode`, causes.
//! * [`connection`]: one connection's loop, heartbeat and tasks; [`outbox`]: its writer.
//! * [`prompt`], [`actions`], [`subscription`]: what the messages run.

mod actions;
pub mod client;
mod connection;
mod outbox;
mod prompt;
pub mod server;
mod session;
mod subscription;
mod turn;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{rejection::WebSocketUpgradeRejection, WebSocketUpgrade};
use axum::extract::Extension;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodRouter};

use crate::scope::ConnectionScope;
use crate::session::SessionManager;

pub use connection::CLOSE_HEARTBEAT;
pub use session::agent_mode_for;

/// The subprotocol the daemon selects when a client offers it (a browser that sends its
/// token as the `bearer.<token>` subprotocol must also offer this one).
pub const PROTOCOL: &str = "codebuff";

/// The door's settings.
#[derive(Debug, Clone)]
pub struct WsOptions {
    /// A connection that sends nothing this long is closed.
    pub heartbeat_timeout: Duration,
    /// The agent of the sessions the door creates when a prompt names none (`codebuff` or
    /// `mock`).
    pub default_agent: String,
}

impl Default for WsOptions {
    fn default() -> Self {
        WsOptions {
            heartbeat_timeout: Duration::from_secs(60),
            default_agent: "codebuff".to_owned(),
        }
    }
}

/// What every connection of the door shares.
pub struct Door {
    manager: Arc<SessionManager>,
    options: WsOptions,
    /// The largest message a client may send.
    max_message_bytes: usize,
}

/// The smallest message limit, whatever the HTTP body limit.
const MIN_MESSAGE_BYTES: usize = 64 * 1024;

/// The `GET /v1/ws` handler, for any router state: upgrades the request and serves the
/// connection. Messages may be as large as `max_message_bytes` (the daemon's body limit).
pub fn route<S>(
    manager: Arc<SessionManager>,
    options: &WsOptions,
    max_message_bytes: usize,
) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    let door = Arc::new(Door {
        manager,
        options: options.clone(),
        max_message_bytes: max_message_bytes.max(MIN_MESSAGE_BYTES),
    });
    get(
        move |scope: Option<Extension<ConnectionScope>>,
              ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>| {
            let door = door.clone();
            async move { upgrade(door, ws, scope.map(|Extension(s)| s)) }
        },
    )
}

/// Upgrades the request; the connection keeps the listener's `scope` (its slot among
/// `--max-connections`, the stop signal) until it closes.
fn upgrade(
    door: Arc<Door>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    scope: Option<ConnectionScope>,
) -> Response {
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => {
            return not_an_upgrade(rejection.status(), &rejection.body_text());
        }
    };
    // An upgrade slot (`scope.rs`): WebSockets never take the slots plain requests need.
    let scope = match scope.map(|s| s.upgrade()) {
        Some(None) => return too_many_websockets(),
        Some(Some(upgraded)) => Some(upgraded),
        None => None,
    };
    ws.protocols([PROTOCOL])
        .max_message_size(door.max_message_bytes)
        .max_frame_size(door.max_message_bytes)
        .on_failed_upgrade(|error| tracing::debug!(%error, "a WebSocket upgrade failed"))
        .on_upgrade(move |socket| connection::serve(socket, door, scope))
}

/// 503 when every slot WebSockets may take is taken.
pub fn too_many_websockets() -> Response {
    let body = serde_json::json!({
        "type": "urn:sandbox-agent:error:too_many_websockets",
        "title": "Too many WebSocket connections",
        "status": 503,
        "detail": "every connection slot WebSockets may take (--max-connections, less those kept for requests) is taken: try again later",
    });
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

/// The problem document of a request to `/v1/ws` that is not a WebSocket upgrade.
fn not_an_upgrade(status: StatusCode, why: &str) -> Response {
    let body = serde_json::json!({
        "type": "urn:sandbox-agent:error:invalid_request",
        "title": "Invalid request",
        "status": status.as_u16(),
        "detail": format!("/v1/ws takes WebSocket upgrades only: {why}"),
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}
