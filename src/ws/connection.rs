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
use super::outbox::{self, Outbox};
use super::prompt;
use super::server::{ServerAction, ServerMessage};
use super::subscription;
use super::Door;
use crate::scope::ConnectionScope;
use crate::sync::LockExt;

/// The close code of a connection closed for its silence (application-defined range).
pub const CLOSE_HEARTBEAT: u16 = 4000;
/// The close code when the daemon shuts down (RFC 6455 "going away").
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// How long the writer gets to deliver what is queued once the connection ends.
const WRITER_GRACE: Duration = Duration::from_secs(5);

/// Which session this connection's prompts, questions and permission requests belong to, so
/// `cancel`, `answer` and `permission-reply` find it without naming it.
#[derive(Debug, Default)]
pub struct Routes {
    inner: Mutex<RoutesInner>,
}

#[derive(Debug, Default)]
struct RoutesInner {
    /// Running prompt id → its session.
    prompts: HashMap<String, String>,
    /// Open question or permission id → (its session, the prompt that showed it).
    asks: HashMap<String, (String, String)>,
}

impl Routes {
    fn lock(&self) -> std::sync::MutexGuard<'_, RoutesInner> {
        self.inner.lock_unpoisoned()
    }

    fn prompt_started(&self, prompt_id: &str, session: &str) {
        self.lock()
            .prompts
            .insert(prompt_id.to_owned(), session.to_owned());
    }

    /// Forgets a prompt that is over, with what it asked.
    pub fn prompt_ended(&self, prompt_id: &str) {
        let mut inner = self.lock();
        inner.prompts.remove(prompt_id);
        inner.asks.retain(|_, (_, p)| p != prompt_id);
    }

    /// Remembers that prompt `prompt_id` of session `session` showed question or permission
    /// request `ask`.
    pub fn asked(&self, ask: &str, session: &str, prompt_id: &str) {
        self.lock()
            .asks
            .insert(ask.to_owned(), (session.to_owned(), prompt_id.to_owned()));
    }

    fn session_of_prompt(&self, prompt_id: &str) -> Option<String> {
        self.lock().prompts.get(prompt_id).cloned()
    }

    fn session_of_ask(&self, ask: &str) -> Option<String> {
        self.lock().asks.get(ask).map(|(s, _)| s.clone())
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
            Ok(None | Some(Err(_))) => break,
            Ok(Some(Ok(frame))) => frame,
        };
        match frame {
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
                self.routes.prompt_started(&p.prompt_id, &session);
                let routes = self.routes.clone();
                self.tasks
                    .spawn(prompt::run(door, out, routes, session, *p));
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
                let known = c
                    .prompt_id
                    .as_deref()
                    .and_then(|p| self.routes.session_of_prompt(p));
                let Some(session) = self.target(c.session_id.clone(), known).await else {
                    return;
                };
                self.tasks.spawn(actions::cancel(door, out, session));
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
