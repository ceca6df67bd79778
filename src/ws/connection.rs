//! One `/v1/ws` connection: reads frames until the client closes or sends nothing for the
//! heartbeat timeout (then a close frame with the reason), acks each message, and runs what
//! the messages ask for as tasks of the connection — prompts, actions, subscriptions — all
//! writing through its [`Outbox`]. A connection may drive many sessions; when it ends, its
//! tasks stop, and the sessions' turns go on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use futures_util::StreamExt;
use tokio::task::{AbortHandle, JoinSet};

use super::actions;
use super::client::{self, ClientAction, ClientMessage, Topic};
use super::frames::{self, CLOSE_TOO_BIG};
use super::outbox::{self, Outbox};
use super::prompt;
use super::server::{ServerAction, ServerMessage};
use super::subscription;
use super::{CancelTarget, Door};
use crate::scope::ConnectionScope;
use crate::sync::LockExt;

/// The close code of a connection closed for its silence (application-defined range).
pub const CLOSE_HEARTBEAT: u16 = 4000;
/// The close code when the daemon shuts down (RFC 6455 "going away").
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// How long the writer gets to deliver what is queued once the connection ends.
const WRITER_GRACE: Duration = Duration::from_secs(5);

/// Which session the questions and permission requests this connection was shown belong
/// to, so `answer` and `permission-reply` find it without naming it. (Running prompts are
/// the door's: `cancel-user-input` may come from any connection.)
#[derive(Debug, Default)]
pub struct Routes {
    /// Open question or permission id → (its session, the prompt that showed it).
    asks: Mutex<HashMap<String, (String, String)>>,
}

impl Routes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, String)>> {
        self.asks.lock_unpoisoned()
    }

    /// Forgets what a prompt that is over asked.
    pub fn prompt_ended(&self, prompt_id: &str) {
        self.lock().retain(|_, (_, p)| p != prompt_id);
    }

    /// Remembers that prompt `prompt_id` of session `session` showed question or permission
    /// request `ask`.
    pub fn asked(&self, ask: &str, session: &str, prompt_id: &str) {
        self.lock()
            .insert(ask.to_owned(), (session.to_owned(), prompt_id.to_owned()));
    }

    fn session_of_ask(&self, ask: &str) -> Option<String> {
        self.lock().get(ask).map(|(s, _)| s.clone())
    }
}

/// The state of one connection.
struct Connection {
    door: Arc<Door>,
    out: Outbox,
    /// The session `identify` named (or the first one a prompt or init used).
    session: Option<String>,
    /// Followed topics by name.
    subscriptions: HashMap<String, AbortHandle>,
    /// Every task of the connection: aborted when it ends.
    tasks: JoinSet<()>,
    routes: Arc<Routes>,
}

/// Serves one upgraded connection to its end; with a listener `scope`, closes it (1001) when
/// the daemon shuts down, and holds the scope's slot until then.
pub async fn serve(socket: WebSocket, door: Arc<Door>, scope: Option<ConnectionScope>) {
    let mut scope = scope;
    let (sink, mut stream) = socket.split();
    let (out, rx) = Outbox::new();
    let mut writer = tokio::spawn(outbox::write(sink, rx));
    let timeout = door.options.heartbeat_timeout;
    let mut conn = Connection {
        door,
        out,
        session: None,
        subscriptions: HashMap::new(),
        tasks: JoinSet::new(),
        routes: Arc::new(Routes::default()),
    };
    loop {
        let next = tokio::select! {
            next = tokio::time::timeout(timeout, stream.next()) => next,
            () = async {
                match scope.as_mut() {
                    Some(scope) => scope.closing().await,
                    None => std::future::pending().await,
                }
            } => {
                conn.tasks.shutdown().await;
                tracing::debug!("closing a WebSocket connection: the daemon is shutting down");
                conn.out
                    .close(CLOSE_GOING_AWAY, "the daemon is shutting down".to_owned())
                    .await;
                break;
            }
        };
        let frame = match next {
            Err(_) => {
                conn.tasks.shutdown().await;
                let reason = format!(
                    "heartbeat timeout: nothing received for {} s",
                    timeout.as_secs_f64()
                );
                tracing::debug!(%reason, "closing a WebSocket connection");
                conn.out.close(CLOSE_HEARTBEAT, reason).await;
                break;
            }
            Ok(None) => break,
            Ok(Some(Err(error))) => {
                // A message far over the limit is refused unread (its txid unknown); any other
                // read error means the connection is broken, and the close is a courtesy.
                tracing::debug!(%error, "a WebSocket connection failed to read");
                conn.tasks.shutdown().await;
                let (code, reason) = if frames::is_capacity(&error) {
                    (
                        CLOSE_TOO_BIG,
                        frames::too_big_reason(None, conn.door.max_message_bytes),
                    )
                } else {
                    (frames::PROTOCOL_ERROR, "the connection failed".to_owned())
                };
                conn.out.close(code, reason).await;
                break;
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let limit = conn.door.max_message_bytes;
        match frame {
            Message::Text(text) if text.len() > limit => {
                conn.too_big(Some(text.as_str()), text.len()).await;
                break;
            }
            Message::Binary(bytes) if bytes.len() > limit => {
                conn.too_big(None, bytes.len()).await;
                break;
            }
            Message::Text(text) => conn.take(text.as_str()).await,
            Message::Binary(_) => {
                conn.out
                    .send(&ServerMessage::nack(
                        None,
                        "binary frames are not taken: send JSON text",
                    ))
                    .await;
            }
            Message::Close(_) => break,
            // Pings are answered by the socket itself; either counts as a heartbeat.
            Message::Ping(_) | Message::Pong(_) => {}
        }
        while conn.tasks.try_join_next().is_some() {}
    }
    // Followers stop here; turns do not (they belong to their sessions).
    conn.tasks.shutdown().await;
    drop(conn);
    if tokio::time::timeout(WRITER_GRACE, &mut writer)
        .await
        .is_err()
    {
        writer.abort();
    }
}

impl Connection {
    /// Answers a message over the limit and closes the connection (1009): a failed `ack` with
    /// its `txid`, and a prompt's `prompt-error`, when they can be read from `text`.
    async fn too_big(&mut self, text: Option<&str>, size: usize) {
        let limit = self.door.max_message_bytes;
        let reason = frames::too_big_reason(Some(size), limit);
        tracing::debug!(size, limit, "a WebSocket message over the limit");
        let head = text.map(frames::head).unwrap_or_default();
        self.out
            .send(&ServerMessage::nack(head.txid, reason.clone()))
            .await;
        if let Some(prompt_id) = head.prompt_id {
            self.out
                .action(ServerAction::PromptError {
                    user_input_id: prompt_id,
                    message: reason.clone(),
                    error: Some("message_too_big".into()),
                    remaining_balance: None,
                    session_id: head
                        .session_id
                        .or_else(|| self.session.clone())
                        .unwrap_or_default(),
                })
                .await;
        }
        self.tasks.shutdown().await;
        // A close reason is at most 123 bytes (this one is ASCII).
        let mut short = reason;
        short.truncate(123);
        self.out.close(CLOSE_TOO_BIG, short).await;
    }

    /// Takes one text frame: acks it, then starts what it asks for.
    async fn take(&mut self, text: &str) {
        let message = match client::parse(text) {
            Ok(message) => message,
            Err(e) => {
                self.out.send(&ServerMessage::nack(e.txid, e.message)).await;
                return;
            }
        };
        match message {
            ClientMessage::Identify {
                txid,
                client_session_id,
            } => {
                self.session = Some(client_session_id);
                self.out.send(&ServerMessage::ack(txid)).await;
            }
            ClientMessage::Ping { txid } => {
                self.out.send(&ServerMessage::ack(txid)).await;
            }
            ClientMessage::Subscribe { txid, topics } => {
                self.out.send(&ServerMessage::ack(txid)).await;
                for topic in topics {
                    self.subscribe(topic);
                }
            }
            ClientMessage::Unsubscribe { txid, topics } => {
                for topic in topics {
                    if let Some(task) = self.subscriptions.remove(&topic.name) {
                        task.abort();
                    }
                }
                self.out.send(&ServerMessage::ack(txid)).await;
            }
            ClientMessage::Action { txid, action } => {
                self.out.send(&ServerMessage::ack(txid)).await;
                self.act(action).await;
            }
        }
    }

    /// Starts following `topic` (again, from its new cursor, when it was followed already).
    fn subscribe(&mut self, topic: Topic) {
        if let Some(old) = self.subscriptions.remove(&topic.name) {
            old.abort();
        }
        let name = topic.name.clone();
        let task = self.tasks.spawn(subscription::follow(
            self.door.manager.clone(),
            topic,
            self.out.clone(),
        ));
        self.subscriptions.insert(name, task);
    }

    /// The session of a request that names none: the connection's, else a new one (which
    /// becomes the connection's).
    fn session_or_new(&mut self) -> String {
        self.session
            .get_or_insert_with(|| format!("ws-{}", uuid::Uuid::new_v4().simple()))
            .clone()
    }

    /// Runs an acked action as a task of the connection.
    async fn act(&mut self, action: ClientAction) {
        let door = self.door.clone();
        let out = self.out.clone();
        match action {
            ClientAction::Prompt(p) => {
                let session = match p
                    .session_id
                    .clone()
                    .or_else(|| p.state_session().map(str::to_owned))
                {
                    Some(named) => {
                        self.session.get_or_insert_with(|| named.clone());
                        named
                    }
                    None => self.session_or_new(),
                };
                let routes = self.routes.clone();
                // In the door's table before the next message is read: a cancel right behind
                // the prompt finds it.
                let running = prompt::Running::new(&door, &p.prompt_id, &session);
                self.tasks
                    .spawn(prompt::run(door, out, routes, running, *p));
            }
            ClientAction::Init(init) => {
                let session = match init.session_id.clone() {
                    Some(named) => named,
                    None => self.session_or_new(),
                };
                self.tasks.spawn(actions::init(door, out, session, *init));
            }
            ClientAction::Answer(a) => {
                let known = self.routes.session_of_ask(&a.question_id);
                let Some(session) = self.target(a.session_id.clone(), known).await else {
                    return;
                };
                self.tasks.spawn(actions::answer(door, out, session, a));
            }
            ClientAction::PermissionReply(r) => {
                let known = self.routes.session_of_ask(&r.permission_id);
                let Some(session) = self.target(r.session_id.clone(), known).await else {
                    return;
                };
                self.tasks
                    .spawn(actions::permission_reply(door, out, session, r));
            }
            ClientAction::Cancel(c) => {
                let known = match (c.session_id.is_some(), c.prompt_id.as_deref()) {
                    (false, Some(prompt_id)) => match self.door.cancel_prompt(prompt_id) {
                        CancelTarget::Running(session) => Some(session),
                        // Stopped as soon as its turn starts (by its own task).
                        CancelTarget::Pending => return,
                        // That prompt is over (or never ran): nothing to stop, and no other
                        // prompt of the connection's session is stopped in its place.
                        CancelTarget::Unknown => {
                            tracing::debug!(prompt = %prompt_id, "cancel of a prompt that is not running");
                            return;
                        }
                    },
                    _ => None,
                };
                let Some(session) = self.target(c.session_id.clone(), known).await else {
                    return;
                };
                self.tasks.spawn(actions::cancel(door, out, session));
            }
            ClientAction::Unsupported { kind } => {
                let remaining_balance = self
                    .session
                    .as_deref()
                    .and_then(|id| self.door.manager.info(id).ok())
                    .and_then(|i| i.remaining);
                self.out
                    .action(ServerAction::ActionError {
                        message: format!(
                            "`{kind}` is an action of the codebuff CLI 1.0 generation of the \
                             protocol, which codebuffd does not serve: /v1/ws speaks the \
                             generation of @codebuff/sdk 0.3 (`prompt`, `cancel-user-input`, \
                             `init`; docs/ws.md)"
                        ),
                        error: Some("unsupported_client".into()),
                        remaining_balance,
                    })
                    .await;
            }
        }
    }

    /// The session an action is for: the one it names, else the one this connection saw its
    /// subject in, else the connection's. None (after an `action-error`) when there is none.
    async fn target(&self, named: Option<String>, known: Option<String>) -> Option<String> {
        let session = named.or(known).or_else(|| self.session.clone());
        if session.is_none() {
            self.out
                .action(ServerAction::ActionError {
                    message: "no session: send `identify` first, or name the action's `sessionId`"
                        .into(),
                    error: Some("session_not_found".into()),
                    remaining_balance: None,
                })
                .await;
        }
        session
    }
}
