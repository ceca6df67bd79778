//! The session registry: creates sessions, routes requests to their actors, lists them, and
//! shuts them all down.
//!
//! Ownership: every session record names the daemon that runs it (its instance id, see
//! [`crate::instance`]). Many daemons may share one store, so at start a daemon restores only
//! the sessions it owns, plus unowned ones (records written before sessions had owners), which
//! it adopts: its next write of the record names it. Other daemons' sessions are not loaded at
//! all — never recovered, appended to, or their agents killed — and creating a session under
//! an id one of them uses fails as taken (the store refuses the duplicate).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::command::Command;
use super::context::SessionContext;
use super::info::{EndState, SessionInfo, SessionStatus};
use super::message::UserMessage;
use super::queue::QueueCount;
use super::record::{now_ms, Shared};
use super::settings::{validate_agent_mode, SessionSettings};
use super::SessionError;
use crate::codebuff::PermissionReply;
use crate::store::EventStore;
use crate::sync::RwLockExt;

/// Longest accepted session id.
pub(super) const MAX_ID_LEN: usize = 256;

pub(super) struct Handle {
    pub(super) id: Arc<str>,
    pub(super) settings: Arc<SessionSettings>,
    pub(super) created_at: u64,
    /// Creation order in this daemon: breaks ties of `created_at` (milliseconds) in `list`.
    pub(super) order: u64,
    pub(super) shared: Shared,
    pub(super) tx: mpsc::Sender<Command>,
    /// The session's client messages waiting for their turn (bounded, see [`super::queue`]).
    pub(super) queued: QueueCount,
    pub(super) task: Mutex<Option<JoinHandle<()>>>,
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
pub struct QueuedTurn(oneshot::Receiver<Result<u64, SessionError>>);

impl QueuedTurn {
    /// Waits until the message's turn starts: the sequence of its `turn.started`, or why it
    /// never will ([`SessionError::Cancelled`] when a cancel dropped it, `Terminated` …).
    pub async fn started(self) -> Result<u64, SessionError> {
        self.0.await.map_err(|_| SessionError::ShuttingDown)?
    }
}

/// All sessions of the daemon.
pub struct SessionManager {
    pub(super) ctx: Arc<SessionContext>,
    pub(super) sessions: RwLock<HashMap<String, Arc<Handle>>>,
    /// Ids being created (their record is being committed, without holding `sessions`).
    pub(super) creating: Mutex<std::collections::HashSet<String>>,
    pub(super) shutting_down: AtomicBool,
    /// The next session's `Handle::order`.
    pub(super) next_order: AtomicU64,
    /// How many sessions this manager has created: raised after each, so followers of "every
    /// session" (the WebSocket door's `*`) learn of new ones without polling the list.
    pub(super) created: watch::Sender<u64>,
}

impl SessionManager {
    /// An empty manager.
    pub fn new(ctx: SessionContext) -> Self {
        SessionManager {
            ctx: Arc::new(ctx),
            sessions: RwLock::new(HashMap::new()),
            creating: Mutex::new(std::collections::HashSet::new()),
            shutting_down: AtomicBool::new(false),
            next_order: AtomicU64::new(0),
            created: watch::Sender::new(0),
        }
    }

    /// A receiver that changes each time a session is created (the value counts them).
    pub fn creations(&self) -> watch::Receiver<u64> {
        self.created.subscribe()
    }

    /// The ids of every session, in no order (cheaper than [`SessionManager::list`]).
    pub fn ids(&self) -> Vec<String> {
        let sessions = self.sessions.read_unpoisoned();
        sessions.keys().cloned().collect()
    }

    /// The event log all sessions write to.
    pub fn store(&self) -> &Arc<dyn EventStore> {
        &self.ctx.store
    }

    /// The daemon-wide context.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    pub(super) fn handle(&self, id: &str) -> Result<Arc<Handle>, SessionError> {
        let sessions = self.sessions.read_unpoisoned();
        sessions
            .get(id)
            .cloned()
            .ok_or_else(|| SessionError::NotFound(id.to_owned()))
    }

    /// Every session, newest first.
    pub fn list(&self) -> Vec<SessionInfo> {
        let sessions = self.sessions.read_unpoisoned();
        let mut handles: Vec<&Arc<Handle>> = sessions.values().collect();
        handles.sort_by_key(|h| std::cmp::Reverse((h.created_at, h.order)));
        handles
            .into_iter()
            .map(|h| self.counted(h))
            .collect::<Vec<_>>()
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
        let after = cursor.map(parse_cursor).transpose()?;
        let sessions = self.sessions.read_unpoisoned();
        let mut handles: Vec<&Arc<Handle>> = sessions
            .values()
            .filter(|h| after.is_none_or(|a| (h.created_at, h.order) < a))
            .collect();
        handles.sort_by_key(|h| std::cmp::Reverse((h.created_at, h.order)));
        let mut page = Vec::new();
        let mut last = None;
        let mut more = false;
        for h in handles {
            let info = self.counted(h);
            if !statuses.is_empty() && !statuses.contains(&info.status) {
                continue;
            }
            if page.len() == limit {
                more = true;
                break;
            }
            last = Some((h.created_at, h.order));
            page.push(info);
        }
        let next = match (more, last) {
            (true, Some((at, order))) => Some(format!("{at}.{order}")),
            _ => None,
        };
        Ok((page, next))
    }

    /// Ended sessions whose last event is older than `age`, for retention.
    pub fn ended_before(&self, age: Duration) -> Vec<String> {
        let cutoff = now_ms().saturating_sub(u64::try_from(age.as_millis()).unwrap_or(u64::MAX));
        let sessions = self.sessions.read_unpoisoned();
        sessions
            .values()
            .filter(|h| {
                let live = h.shared.lock();
                live.end.is_some() && live.updated_at < cutoff
            })
            .map(|h| h.id.to_string())
            .collect()
    }

    /// A cursor on session `id`'s committed log after sequence `after` (0: from its first
    /// event): replay, then live. Every door reads sessions through it ([`super::Follow`]).
    pub fn follow(&self, id: &str, after: u64) -> Result<super::Follow, SessionError> {
        super::Follow::new(self.ctx.store.clone(), id, after)
    }

    /// One session's info.
    pub fn info(&self, id: &str) -> Result<SessionInfo, SessionError> {
        Ok(self.counted(&*self.handle(id)?))
    }

    /// A session's info with `eventCount` what its log holds, never more: the session counts
    /// an event from its append, a moment before its commit, and, when the store refuses a
    /// batch, events that never get in (their sequences are given again after the store
    /// recovers, once the session has caught up with its log). A reader can read every event
    /// `eventCount` counts.
    fn counted(&self, h: &Handle) -> SessionInfo {
        let mut info = info_of(h);
        if let Ok(stored) = self.ctx.store.last_sequence(&h.id) {
            info.event_count = info.event_count.min(stored);
        }
        info
    }

    /// Hands a command to the session's actor, waiting while its mailbox is full.
    async fn send(&self, handle: &Handle, cmd: Command) -> Result<(), SessionError> {
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
    pub fn send_message(
        &self,
        id: &str,
        message: impl Into<UserMessage>,
    ) -> Result<(), SessionError> {
        let message = message.into();
        message.validate()?;
        let handle = self.handle(id)?;
        self.check_open(&handle)?;
        self.queue_message(
            &handle,
            Command::Message {
                message,
                started: None,
            },
        )
    }

    /// Queues a message and waits until its turn starts; returns the sequence of its
    /// `turn.started` (the turn stream starts there).
    pub async fn send_message_and_wait(
        &self,
        id: &str,
        message: impl Into<UserMessage>,
    ) -> Result<u64, SessionError> {
        self.queue_turn(id, message)?.started().await
    }

    /// Queues a message now (its place in the session's queue is taken before this returns,
    /// so messages queued one after the other run in that order); the answer waits for its
    /// turn to start.
    pub fn queue_turn(
        &self,
        id: &str,
        message: impl Into<UserMessage>,
    ) -> Result<QueuedTurn, SessionError> {
        let message = message.into();
        message.validate()?;
        let handle = self.handle(id)?;
        self.check_open(&handle)?;
        let (tx, rx) = oneshot::channel();
        self.queue_message(
            &handle,
            Command::Message {
                message,
                started: Some(tx),
            },
        )?;
        Ok(QueuedTurn(rx))
    }

    /// Answers a pending question (one list of answers per question).
    pub async fn answer(
        &self,
        id: &str,
        question_id: &str,
        answers: Vec<Vec<String>>,
    ) -> Result<(), SessionError> {
        let handle = self.handle(id)?;
        let (reply, rx) = oneshot::channel();
        self.send(
            &handle,
            Command::Answer {
                question_id: question_id.to_owned(),
                answers,
                reply,
            },
        )
        .await?;
        rx.await.map_err(|_| SessionError::ShuttingDown)?
    }

    /// Answers a permission request of the session's running turn (`once`, `always`,
    /// `reject`).
    pub async fn reply_permission(
        &self,
        id: &str,
        permission_id: &str,
        answer: PermissionReply,
    ) -> Result<(), SessionError> {
        let handle = self.handle(id)?;
        let (reply, rx) = oneshot::channel();
        self.send(
            &handle,
            Command::Permission {
                permission_id: permission_id.to_owned(),
                answer,
                reply,
            },
        )
        .await?;
        rx.await.map_err(|_| SessionError::ShuttingDown)?
    }

    /// Declines a pending question.
    pub async fn reject(&self, id: &str, question_id: &str) -> Result<(), SessionError> {
        let handle = self.handle(id)?;
        let (reply, rx) = oneshot::channel();
        self.send(
            &handle,
            Command::Reject {
                question_id: question_id.to_owned(),
                reply,
            },
        )
        .await?;
        rx.await.map_err(|_| SessionError::ShuttingDown)?
    }

    /// Stops the running turn (if any); the session stays usable and the messages waiting
    /// for their turn run next.
    pub async fn cancel(&self, id: &str) -> Result<(), SessionError> {
        self.cancel_with(id, Cancel::Running).await
    }

    /// Stops the running turn and, with [`Cancel::RunningAndQueued`], drops the messages
    /// waiting for their turn (their senders get [`SessionError::Cancelled`]).
    pub async fn cancel_with(&self, id: &str, what: Cancel) -> Result<(), SessionError> {
        let handle = self.handle(id)?;
        let (reply, rx) = oneshot::channel();
        let queued = what == Cancel::RunningAndQueued;
        self.send(&handle, Command::Cancel { queued, reply })
            .await?;
        let _ = rx.await;
        Ok(())
    }

    /// Changes the agent mode of the session's next turns (`build`, `free`, `max`, `plan`); the
    /// running turn keeps its own. Recorded in the session's record.
    pub fn set_agent_mode(&self, id: &str, mode: &str) -> Result<(), SessionError> {
        validate_agent_mode(mode)?;
        let handle = self.handle(id)?;
        self.check_open(&handle)?;
        self.try_send(
            &handle,
            Command::SetMode {
                mode: mode.to_owned(),
            },
        )
    }
}

/// Reads a page cursor (`"<createdAt>.<order>"`, see [`SessionManager::page`]).
fn parse_cursor(cursor: &str) -> Result<(u64, u64), SessionError> {
    let bad = || {
        SessionError::InvalidRequest(format!(
            "`{cursor}` is not a cursor of this daemon's session list"
        ))
    };
    let (at, order) = cursor.split_once('.').ok_or_else(bad)?;
    Ok((
        at.parse().map_err(|_| bad())?,
        order.parse().map_err(|_| bad())?,
    ))
}

pub(super) fn info_of(h: &Handle) -> SessionInfo {
    let live = h.shared.snapshot();
    let s = &h.settings;
    SessionInfo {
        session_id: h.id.to_string(),
        agent: s.agent.id().to_owned(),
        agent_mode: live.agent_mode.clone(),
        permission_mode: s.permission_mode.clone(),
        model: s.model.clone(),
        variant: s.variant.clone(),
        native_session_id: live.native_session_id,
        ended: live.end.is_some(),
        event_count: live.event_count,
        created_at: h.created_at,
        updated_at: live.updated_at,
        directory: s.directory.display().to_string(),
        title: s.title.clone(),
        status: live.status,
        budget: s.max_credits,
        remaining: s.max_credits.map(|b| (b - live.cost.credits).max(0.0)),
        cost: live.cost,
        turns: live.turns,
        first_prompt: live.first_prompt,
    }
}
