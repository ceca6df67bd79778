//! The session registry: creates sessions, routes requests to the engine that runs them, lists
//! them, and shuts this engine's down.
//!
//! Many engines (processes on one data directory, daemons of a fleet on one Postgres) share
//! one store; each has its own id ([`SessionContext::engine_id`]). A session running a turn (or
//! holding waiting messages) is owned by one engine, recorded in the store; an idle session is
//! owned by nobody (see `owner.rs`). Requests for a session this engine runs go to its actor;
//! for a session another live engine runs, to that engine through the store's inbox
//! (`inbox.rs`); for an idle one, this engine takes it and runs it. Lists and infos of sessions
//! come from the store (this engine's own from their actors, which are fresher).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::command::Command;
use super::context::SessionContext;
use super::inbox::Request;
use super::info::{EndState, SessionInfo, SessionStatus};
use super::message::UserMessage;
use super::owner::Route;
use super::queue::QueueCount;
use super::record::{now_ms, Shared};
use super::settings::{validate_agent_mode, SessionSettings};
use super::SessionError;
use crate::store::{EventStore, SessionQuery, SessionRecord};
use crate::sync::RwLockExt;
use crate::universal::PermissionReply;

/// Longest accepted session id.
pub(super) const MAX_ID_LEN: usize = 256;

/// A session this engine has an actor for (running it, or idle after it did).
pub(super) struct Handle {
    pub(super) id: Arc<str>,
    pub(super) settings: Arc<SessionSettings>,
    pub(super) created_at: u64,
    pub(super) shared: Shared,
    pub(super) tx: mpsc::Sender<Command>,
    /// The session's client messages waiting for their turn (bounded, see [`super::queue`]).
    pub(super) queued: QueueCount,
    pub(super) task: Mutex<Option<JoinHandle<()>>>,
    /// True while this engine owns the session in the store (its actor clears it when it
    /// lets the session go).
    pub(super) owned: Arc<AtomicBool>,
    /// Held while a request is routed to the actor and while the actor lets the session go:
    /// a request is only ever handed to an actor that owns its session.
    pub(super) routing: Arc<tokio::sync::Mutex<()>>,
}

impl Handle {
    /// True while the actor runs and owns its session.
    pub(super) fn serving(&self) -> bool {
        self.owned.load(Ordering::SeqCst) && !self.tx.is_closed()
    }
}

/// Commands a session's mailbox holds before senders wait (control commands) or are refused
/// (`queue_full`, for messages): the actor takes them as they come, also while a turn runs.
pub(super) const MAILBOX: usize = 64;

/// What [`SessionManager::cancel_with`] stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// The running turn; messages waiting for their turn run after it (`/v1`, `/v1/ws`, the
    /// terminal).
    Running,
    /// The running turn and every message waiting for its turn (those get
    /// [`SessionError::Cancelled`]): ACP's `session/cancel`.
    RunningAndQueued,
}

/// A message waiting for its turn ([`SessionManager::queue_turn`]).
#[derive(Debug)]
pub struct QueuedTurn(QueuedIn);

#[derive(Debug)]
enum QueuedIn {
    /// In this engine's actor.
    Here(oneshot::Receiver<Result<u64, SessionError>>),
    /// Relayed to the engine that runs the session: its reply.
    There(JoinHandle<Result<u64, SessionError>>),
}

impl QueuedTurn {
    /// Waits until the message's turn starts: the sequence of its `turn.started`, or why it
    /// never will ([`SessionError::Cancelled`] when a cancel dropped it, `Terminated` …).
    pub async fn started(self) -> Result<u64, SessionError> {
        match self.0 {
            QueuedIn::Here(rx) => rx.await.map_err(|_| SessionError::ShuttingDown)?,
            QueuedIn::There(task) => task.await.map_err(|_| SessionError::ShuttingDown)?,
        }
    }
}

/// All sessions, as this engine sees them.
pub struct SessionManager {
    pub(super) ctx: Arc<SessionContext>,
    /// The sessions this engine has actors for.
    pub(super) sessions: RwLock<HashMap<String, Arc<Handle>>>,
    /// Ids being created (their record is being committed, without holding `sessions`).
    pub(super) creating: Mutex<std::collections::HashSet<String>>,
    pub(super) shutting_down: AtomicBool,
    /// Raised when sessions are created (here, or seen created by other engines): followers
    /// of "every session" (the WebSocket door's `*`) learn of new ones without polling.
    pub(super) created: watch::Sender<u64>,
    /// True while other engines share the store (refreshed every second by the reaper): only
    /// then is the inbox looked at.
    pub(super) others: AtomicBool,
    /// The background tasks of ownership (reaper, inbox), stopped at shutdown.
    pub(super) background: Mutex<Vec<JoinHandle<()>>>,
}

impl SessionManager {
    /// An empty manager.
    pub fn new(ctx: SessionContext) -> Self {
        SessionManager {
            ctx: Arc::new(ctx),
            sessions: RwLock::new(HashMap::new()),
            creating: Mutex::new(std::collections::HashSet::new()),
            shutting_down: AtomicBool::new(false),
            created: watch::Sender::new(0),
            others: AtomicBool::new(false),
            background: Mutex::new(Vec::new()),
        }
    }

    /// A receiver that changes when sessions are created (the value counts the changes).
    pub fn creations(&self) -> watch::Receiver<u64> {
        self.created.subscribe()
    }

    /// The ids of every session, newest first.
    pub fn ids(&self) -> Vec<String> {
        self.records(&SessionQuery {
            limit: usize::MAX >> 1,
            ..SessionQuery::default()
        })
        .into_iter()
        .map(|r| r.session_id)
        .collect()
    }

    /// The event log all sessions write to.
    pub fn store(&self) -> &Arc<dyn EventStore> {
        &self.ctx.store
    }

    /// The daemon-wide context.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// This engine's id (the owner it writes into the sessions it runs).
    pub fn engine_id(&self) -> &str {
        &self.ctx.engine_id
    }

    /// The session's local handle, if this engine has an actor for it.
    pub(super) fn handle(&self, id: &str) -> Result<Arc<Handle>, SessionError> {
        let sessions = self.sessions.read_unpoisoned();
        sessions
            .get(id)
            .cloned()
            .ok_or_else(|| SessionError::NotFound(id.to_owned()))
    }

    /// Stored records (an unreadable store lists nothing, and says so in the log).
    fn records(&self, query: &SessionQuery) -> Vec<SessionRecord> {
        match self.ctx.store.coordination().query_sessions(query) {
            Ok(records) => records,
            Err(error) => {
                tracing::error!(%error, "cannot list the stored sessions");
                Vec::new()
            }
        }
    }

    /// The info of a stored session: from this engine's actor when it runs the session,
    /// else from its record.
    fn info_of_record(&self, record: &SessionRecord) -> Option<SessionInfo> {
        if let Ok(h) = self.handle(&record.session_id) {
            if h.serving() {
                return Some(self.counted(&h));
            }
        }
        SessionInfo::from_record(
            record,
            self.ctx.store.last_sequence(&record.session_id).ok(),
        )
    }

    /// Every session, newest first.
    pub fn list(&self) -> Vec<SessionInfo> {
        self.records(&SessionQuery {
            limit: usize::MAX >> 1,
            ..SessionQuery::default()
        })
        .iter()
        .filter_map(|r| self.info_of_record(r))
        .collect()
    }

    /// A page of sessions, newest first: at most `limit` of those after `cursor` (a previous
    /// page's `next`) whose status is one of `statuses` (any when empty). Returns the page
    /// and the cursor of the next one (none when this page is the last). A cursor stays valid
    /// while the sessions around it are deleted: it names a position, not a session.
    pub fn page(
        &self,
        limit: usize,
        cursor: Option<&str>,
        statuses: &[SessionStatus],
    ) -> Result<(Vec<SessionInfo>, Option<String>), SessionError> {
        self.page_owned_by(limit, cursor, statuses, None)
    }

    /// [`SessionManager::page`] of the sessions `owner` runs (`Some("")`: idle ones).
    pub fn page_owned_by(
        &self,
        limit: usize,
        cursor: Option<&str>,
        statuses: &[SessionStatus],
        owner: Option<&str>,
    ) -> Result<(Vec<SessionInfo>, Option<String>), SessionError> {
        let before = cursor.map(parse_cursor).transpose()?;
        let records = self
            .ctx
            .store
            .coordination()
            .query_sessions(&SessionQuery {
                // One more than asked: whether a next page exists.
                limit: limit.saturating_add(1),
                before,
                statuses: statuses.iter().map(|s| s.as_str().to_owned()).collect(),
                owner: owner.map(str::to_owned),
            })?;
        let more = records.len() > limit;
        let page: Vec<&SessionRecord> = records.iter().take(limit).collect();
        let next = match (more, page.last()) {
            (true, Some(last)) => Some(format!("{}.{}", last.created_at, last.session_id)),
            _ => None,
        };
        Ok((
            page.into_iter()
                .filter_map(|r| self.info_of_record(r))
                .collect(),
            next,
        ))
    }

    /// Ended sessions whose last event is older than `age`, for retention.
    pub fn ended_before(&self, age: Duration) -> Vec<String> {
        let cutoff = now_ms().saturating_sub(u64::try_from(age.as_millis()).unwrap_or(u64::MAX));
        self.records(&SessionQuery {
            limit: usize::MAX >> 1,
            statuses: vec![SessionStatus::Ended.as_str().to_owned()],
            ..SessionQuery::default()
        })
        .into_iter()
        .filter(|r| r.updated_at < cutoff)
        .map(|r| r.session_id)
        .collect()
    }

    /// A cursor on session `id`'s committed log after sequence `after` (0: from its first
    /// event): replay, then live, whichever engine appends to it. Every door reads sessions
    /// through it ([`super::Follow`]).
    pub fn follow(&self, id: &str, after: u64) -> Result<super::Follow, SessionError> {
        super::Follow::new(self.ctx.store.clone(), id, after)
    }

    /// One session's info.
    pub fn info(&self, id: &str) -> Result<SessionInfo, SessionError> {
        let info = match self.handle(id) {
            Ok(h) if h.serving() => self.counted(&h),
            _ => {
                let record = self
                    .ctx
                    .store
                    .coordination()
                    .load_session(id)?
                    .ok_or_else(|| SessionError::NotFound(id.to_owned()))?;
                self.info_of_record(&record).ok_or_else(|| {
                    SessionError::InvalidRequest(format!(
                        "the stored settings of session `{id}` are unusable"
                    ))
                })?
            }
        };
        Ok(info)
    }

    /// The info of a session this engine serves, with `eventCount` what its log holds, never
    /// more: the session counts an event from its append, a moment before its commit, and,
    /// when the store refuses a batch, events that never get in (their sequences are given
    /// again after the store recovers, once the session has caught up with its log). A reader
    /// can read every event `eventCount` counts.
    fn counted(&self, h: &Handle) -> SessionInfo {
        let mut info = info_of(h, &self.ctx.engine_id);
        if let Ok(stored) = self.ctx.store.last_sequence(&h.id) {
            info.event_count = info.event_count.min(stored);
        }
        info
    }

    /// Hands a command to the session's actor, waiting while its mailbox is full.
    pub(super) async fn send(&self, handle: &Handle, cmd: Command) -> Result<(), SessionError> {
        handle
            .tx
            .send(cmd)
            .await
            .map_err(|_| SessionError::ShuttingDown)
    }

    /// Hands a command to the session's actor now, or refuses it (`queue_full`) when the
    /// mailbox is full: for requests that cannot wait (a message, a mode change).
    fn try_send(&self, handle: &Handle, cmd: Command) -> Result<(), SessionError> {
        handle.tx.try_send(cmd).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => SessionError::QueueFull(MAILBOX),
            mpsc::error::TrySendError::Closed(_) => SessionError::ShuttingDown,
        })
    }

    /// Queues a client message on the session (within its bound).
    fn queue_message(&self, handle: &Handle, cmd: Command) -> Result<(), SessionError> {
        handle.queued.admit()?;
        self.try_send(handle, cmd)
            .inspect_err(|_| handle.queued.release())
    }

    /// Why the event log cannot be written now, if it cannot (the store is degraded).
    pub fn store_trouble(&self) -> Option<String> {
        let health = self.ctx.store.health()?;
        let why = health.borrow().as_deref().map(str::to_owned);
        why
    }

    fn check_open(&self, handle: &Handle) -> Result<(), SessionError> {
        if let Some(why) = self.store_trouble() {
            return Err(SessionError::StoreUnavailable(why));
        }
        let live = handle.shared.lock();
        if let Some(budget) = handle.settings.max_credits {
            if live.cost.credits >= budget {
                return Err(SessionError::BudgetExhausted {
                    spent: live.cost.credits,
                    budget,
                });
            }
        }
        match &live.end {
            Some(EndState::Terminated) => Err(SessionError::Terminated),
            Some(EndState::Error(m)) => Err(SessionError::AgentExited(m.clone())),
            None => Ok(()),
        }
    }

    /// Queues a message; it runs when the turns before it have ended.
    pub async fn send_message(
        &self,
        id: &str,
        message: impl Into<UserMessage>,
    ) -> Result<(), SessionError> {
        let message = message.into();
        message.validate()?;
        loop {
            match self.route(id).await? {
                Route::Local(handle, _routing) => {
                    self.check_open(&handle)?;
                    return self.queue_message(
                        &handle,
                        Command::Message {
                            message,
                            started: None,
                        },
                    );
                }
                Route::Remote(owner) => {
                    let request = Request::message(&message, false);
                    if let Some(done) = self.relay(id, &owner, &request).await? {
                        return done.map(|_| ());
                    }
                }
            }
        }
    }

    /// Queues a message and waits until its turn starts; returns the sequence of its
    /// `turn.started` (the turn stream starts there).
    pub async fn send_message_and_wait(
        &self,
        id: &str,
        message: impl Into<UserMessage>,
    ) -> Result<u64, SessionError> {
        self.queue_turn(id, message).await?.started().await
    }

    /// Queues a message now (its place in the session's queue is taken before this returns,
    /// so messages queued one after the other run in that order); the answer waits for its
    /// turn to start.
    pub async fn queue_turn(
        &self,
        id: &str,
        message: impl Into<UserMessage>,
    ) -> Result<QueuedTurn, SessionError> {
        let message = message.into();
        message.validate()?;
        loop {
            match self.route(id).await? {
                Route::Local(handle, _routing) => {
                    self.check_open(&handle)?;
                    let (tx, rx) = oneshot::channel();
                    self.queue_message(
                        &handle,
                        Command::Message {
                            message,
                            started: Some(tx),
                        },
                    )?;
                    return Ok(QueuedTurn(QueuedIn::Here(rx)));
                }
                Route::Remote(owner) => {
                    // The request is in the inbox (its place taken) before this returns.
                    let request = Request::message(&message, true);
                    if let Some(posted) = self.post(id, &owner, &request).await? {
                        let task = tokio::spawn(posted.outcome());
                        return Ok(QueuedTurn(QueuedIn::There(task)));
                    }
                }
            }
        }
    }

    /// Answers a pending question (one list of answers per question).
    pub async fn answer(
        &self,
        id: &str,
        question_id: &str,
        answers: Vec<Vec<String>>,
    ) -> Result<(), SessionError> {
        let request = Request::Answer {
            question_id: question_id.to_owned(),
            answers: answers.clone(),
        };
        self.steer(id, request, |reply| Command::Answer {
            question_id: question_id.to_owned(),
            answers: answers.clone(),
            reply,
        })
        .await
    }

    /// Answers a permission request of the session's running turn (`once`, `always`,
    /// `reject`).
    pub async fn reply_permission(
        &self,
        id: &str,
        permission_id: &str,
        answer: PermissionReply,
    ) -> Result<(), SessionError> {
        let request = Request::permission(permission_id, answer);
        self.steer(id, request, |reply| Command::Permission {
            permission_id: permission_id.to_owned(),
            answer,
            reply,
        })
        .await
    }

    /// Declines a pending question.
    pub async fn reject(&self, id: &str, question_id: &str) -> Result<(), SessionError> {
        let request = Request::Reject {
            question_id: question_id.to_owned(),
        };
        self.steer(id, request, |reply| Command::Reject {
            question_id: question_id.to_owned(),
            reply,
        })
        .await
    }

    /// Stops the running turn (if any); the session stays usable and the messages waiting
    /// for their turn run next.
    pub async fn cancel(&self, id: &str) -> Result<(), SessionError> {
        self.cancel_with(id, Cancel::Running).await
    }

    /// Stops the running turn and, with [`Cancel::RunningAndQueued`], drops the messages
    /// waiting for their turn (their senders get [`SessionError::Cancelled`]). A session that
    /// runs nothing has nothing to cancel.
    pub async fn cancel_with(&self, id: &str, what: Cancel) -> Result<(), SessionError> {
        let queued = what == Cancel::RunningAndQueued;
        loop {
            match self.route_running(id).await? {
                None => return Ok(()),
                Some(Route::Local(handle, routing)) => {
                    let (reply, rx) = oneshot::channel();
                    self.send(&handle, Command::Cancel { queued, reply })
                        .await?;
                    drop(routing);
                    let _ = rx.await;
                    return Ok(());
                }
                Some(Route::Remote(owner)) => {
                    if let Some(done) = self.relay(id, &owner, &Request::Cancel { queued }).await? {
                        return done.map(|_| ());
                    }
                }
            }
        }
    }

    /// Changes the agent mode of the session's next turns (`build`, `free`, `max`, `plan`); the
    /// running turn keeps its own. Recorded in the session's record.
    pub async fn set_agent_mode(&self, id: &str, mode: &str) -> Result<(), SessionError> {
        validate_agent_mode(mode)?;
        loop {
            match self.route(id).await? {
                Route::Local(handle, _routing) => {
                    self.check_open(&handle)?;
                    return self.try_send(
                        &handle,
                        Command::SetMode {
                            mode: mode.to_owned(),
                        },
                    );
                }
                Route::Remote(owner) => {
                    let request = Request::SetMode {
                        mode: mode.to_owned(),
                    };
                    if let Some(done) = self.relay(id, &owner, &request).await? {
                        return done.map(|_| ());
                    }
                }
            }
        }
    }

    /// A request that answers with a result: to this engine's actor, or relayed to the
    /// engine that runs the session.
    async fn steer(
        &self,
        id: &str,
        request: Request,
        command: impl Fn(oneshot::Sender<Result<(), SessionError>>) -> Command,
    ) -> Result<(), SessionError> {
        loop {
            match self.route(id).await? {
                Route::Local(handle, routing) => {
                    let (reply, rx) = oneshot::channel();
                    self.send(&handle, command(reply)).await?;
                    drop(routing);
                    return rx.await.map_err(|_| SessionError::ShuttingDown)?;
                }
                Route::Remote(owner) => {
                    if let Some(done) = self.relay(id, &owner, &request).await? {
                        return done.map(|_| ());
                    }
                }
            }
        }
    }
}

/// Reads a page cursor (`"<createdAt>.<sessionId>"`, see [`SessionManager::page`]).
fn parse_cursor(cursor: &str) -> Result<(u64, String), SessionError> {
    let bad = || {
        SessionError::InvalidRequest(format!(
            "`{cursor}` is not a cursor of this daemon's session list"
        ))
    };
    let (at, id) = cursor.split_once('.').ok_or_else(bad)?;
    Ok((at.parse().map_err(|_| bad())?, id.to_owned()))
}

/// The info of a session this engine runs.
/// The info of a session this engine has an actor for; `engine_id` is this engine's id (the
/// owner shown while the actor holds the session).
pub(super) fn info_of(h: &Handle, engine_id: &str) -> SessionInfo {
    let mut info = SessionInfo::from_live(&h.id, &h.settings, h.shared.snapshot(), h.created_at);
    info.owner = h.serving().then(|| engine_id.to_owned());
    info
}
