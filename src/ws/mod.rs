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
//! * [`server`]: what the daemon sends (pure); [`state`]: the Codebuff `sessionState` of a
//!   `prompt-response` (pure).
//! * [`turn`]: a prompt's turn events → chunks, questions, the final response (pure).
//! * [`session`]: the session behind a request: find or create it, `costMode`, causes.
//! * [`connection`]: one connection's loop, heartbeat and tasks; [`outbox`]: its writer;
//!   [`frames`]: the message size limit.
//! * [`prompt`], [`actions`], [`subscription`]: what the messages run.

mod actions;
pub mod client;
mod connection;
mod frames;
mod outbox;
mod prompt;
pub mod server;
mod session;
pub mod state;
mod subscription;
pub mod turn;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{rejection::WebSocketUpgradeRejection, WebSocketUpgrade};
use axum::extract::Extension;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodRouter};

use crate::scope::ConnectionScope;
use crate::session::SessionManager;
use crate::sync::LockExt;

pub use connection::CLOSE_HEARTBEAT;
pub use frames::CLOSE_TOO_BIG;
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
    /// The largest message a client may send (`--ws-max-frame-bytes`).
    pub max_frame_bytes: usize,
    /// How long a question of a prompt whose client does not take `question` actions waits
    /// for an answer from elsewhere before the door declines it (the agent goes on, skipped).
    pub question_timeout: Duration,
}

/// The default message limit: large enough for a big project's `fileContext`.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;
/// The smallest message limit.
pub const MIN_FRAME_BYTES: usize = 64 * 1024;
/// The largest message limit.
pub const MAX_FRAME_BYTES: usize = 1024 * 1024 * 1024;
/// The default question timeout, in seconds.
pub const DEFAULT_QUESTION_TIMEOUT_SECS: f64 = 60.0;

impl Default for WsOptions {
    fn default() -> Self {
        WsOptions {
            heartbeat_timeout: Duration::from_secs(60),
            default_agent: "codebuff".to_owned(),
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            question_timeout: Duration::from_secs_f64(DEFAULT_QUESTION_TIMEOUT_SECS),
        }
    }
}

/// What every connection of the door shares.
pub struct Door {
    manager: Arc<SessionManager>,
    options: WsOptions,
    /// The largest message a client may send.
    max_message_bytes: usize,
    /// Running prompts of every connection, by prompt id, so that a `cancel-user-input`
    /// from any connection finds its prompt.
    prompts: Mutex<HashMap<String, RunningPrompt>>,
}

/// A prompt in the door's table.
#[derive(Debug)]
struct RunningPrompt {
    session: String,
    /// Its turn has started (a cancel stops the session's running turn).
    started: bool,
    /// A cancel came before its turn started: stop the turn as soon as it does.
    cancel: bool,
}

/// What a cancel of a prompt found.
#[derive(Debug, PartialEq, Eq)]
enum CancelTarget {
    /// The prompt's turn runs in this session: stop it.
    Running(String),
    /// The prompt waits for its turn: it is stopped as soon as it starts.
    Pending,
    /// No such prompt runs (over, or never was).
    Unknown,
}

impl Door {
    fn prompts(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunningPrompt>> {
        self.prompts.lock_unpoisoned()
    }

    /// Records that prompt `prompt_id` runs in `session` (its turn not started yet).
    fn prompt_started(&self, prompt_id: &str, session: &str) {
        self.prompts().insert(
            prompt_id.to_owned(),
            RunningPrompt {
                session: session.to_owned(),
                started: false,
                cancel: false,
            },
        );
    }

    /// Records that the turn of prompt `prompt_id` started; true when a cancel came first
    /// (the caller stops the turn).
    fn turn_started(&self, prompt_id: &str) -> bool {
        match self.prompts().get_mut(prompt_id) {
            Some(p) => {
                p.started = true;
                p.cancel
            }
            None => false,
        }
    }

    /// Forgets prompt `prompt_id` of `session` (unless another prompt took its id since).
    fn prompt_ended(&self, prompt_id: &str, session: &str) {
        let mut prompts = self.prompts();
        if prompts.get(prompt_id).is_some_and(|p| p.session == session) {
            prompts.remove(prompt_id);
        }
    }

    /// A cancel of prompt `prompt_id`: what to stop.
    fn cancel_prompt(&self, prompt_id: &str) -> CancelTarget {
        match self.prompts().get_mut(prompt_id) {
            Some(p) if p.started => CancelTarget::Running(p.session.clone()),
            Some(p) => {
                p.cancel = true;
                CancelTarget::Pending
            }
            None => CancelTarget::Unknown,
        }
    }
}

/// The `GET /v1/ws` handler, for any router state: upgrades the request and serves the
/// connection.
pub fn route<S>(manager: Arc<SessionManager>, options: &WsOptions) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    let door = Arc::new(Door {
        manager,
        options: options.clone(),
        max_message_bytes: options
            .max_frame_bytes
            .clamp(MIN_FRAME_BYTES, MAX_FRAME_BYTES),
        prompts: Mutex::new(HashMap::new()),
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
    // Read a little past the limit: the connection answers such a message by its txid.
    let hard = door
        .max_message_bytes
        .saturating_add(frames::READ_PAST_LIMIT);
    ws.protocols([PROTOCOL])
        .max_message_size(hard)
        .max_frame_size(hard)
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
