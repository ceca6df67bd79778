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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::actor::{Actor, Command, Origin};
use super::context::SessionContext;
use super::info::{EndState, SessionInfo, SessionStatus};
use super::message::UserMessage;
use super::record::{from_record, now_ms, to_record, Live, RecordOf, Shared};
use super::settings::{validate_agent_mode, CreateRequest, SessionSettings};
use super::SessionError;
use crate::agent::AgentKind;
use crate::codebuff::PermissionReply;
use crate::store::{EventStore, StoreError};
use crate::sync::{LockExt, RwLockExt};
use crate::universal::format_time;

/// Longest accepted session id.
const MAX_ID_LEN: usize = 256;

struct Handle {
    id: Arc<str>,
    settings: Arc<SessionSettings>,
    created_at: u64,
    /// Creation order in this daemon: breaks ties of `created_at` (milliseconds) in `list`.
    order: u64,
    shared: Shared,
    tx: mpsc::UnboundedSender<Command>,
    task: Mutex<Option<JoinHandle<()>>>,
}

/// All sessions of the daemon.
pub struct SessionManager {
    ctx: Arc<SessionContext>,
    sessions: RwLock<HashMap<String, Arc<Handle>>>,
    shutting_down: AtomicBool,
    /// The next session's `Handle::order`.
    next_order: AtomicU64,
    /// How many sessions this manager has created: raised after each, so followers of "every
    /// session" (the WebSocket door's `*`) learn of new ones without polling the list.
    created: watch::Sender<u64>,
}

impl SessionManager {
    /// An empty manager.
    pub fn new(ctx: SessionContext) -> Self {
        SessionManager {
            ctx: Arc::new(ctx),
            sessions: RwLock::new(HashMap::new()),
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

    fn handle(&self, id: &str) -> Result<Arc<Handle>, SessionError> {
        let sessions = self.sessions.read_unpoisoned();
        sessions
            .get(id)
            .cloned()
            .ok_or_else(|| SessionError::NotFound(id.to_owned()))
    }

    /// Whether a session of `agent` can start now: it needs no key, or the daemon finds one
    /// (the terminal's REPL warns before the first turn fails).
    pub fn has_credential(&self, agent: AgentKind) -> bool {
        self.ctx.agents.has_credential(agent, None)
    }

    /// The refusal of a session that needs a key when none is found: where the daemon looked,
    /// where to get one, and the agent that needs none. Every door says the same (ACP's
    /// `authenticate` too).
    pub fn credentials_missing(&self) -> SessionError {
        SessionError::CredentialsMissing {
            places: crate::agent::credentials::places(self.ctx.agents.home.as_deref()),
            get_one: crate::agent::credentials::GET_A_KEY,
        }
    }

    /// Creates a session: validates the request, makes sure its agent can run (installing the
    /// adapter's dependencies when missing), records `session.started` and starts its actor.
    /// Returns the native session id (none yet for a new session).
    pub async fn create(&self, id: &str, req: CreateRequest) -> Result<SessionInfo, SessionError> {
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err(SessionError::ShuttingDown);
        }
        if id.is_empty() || id.len() > MAX_ID_LEN || id.chars().any(char::is_control) {
            return Err(SessionError::InvalidRequest(format!(
                "a session id must be 1 to {MAX_ID_LEN} printable characters"
            )));
        }
        if self.handle(id).is_ok() {
            return Err(SessionError::AlreadyExists(id.to_owned()));
        }
        let settings = SessionSettings::validate(req, &self.ctx.policy)?;
        if !self
            .ctx
            .agents
            .has_credential(settings.agent, settings.api_key.as_deref())
        {
            return Err(self.credentials_missing());
        }
        if settings.agent == AgentKind::Codebuff {
            self.ctx
                .agents
                .launcher
                .install(AgentKind::Codebuff, false)
                .await
                .map_err(|e| SessionError::AgentNotInstalled {
                    agent: "codebuff".into(),
                    how: e.0,
                })?;
        }
        // A warm agent for its first turn.
        self.ctx.agents.prewarm(settings.agent);
        let settings = Arc::new(settings);
        let mut sessions = self.sessions.write_unpoisoned();
        if sessions.contains_key(id) {
            return Err(SessionError::AlreadyExists(id.to_owned()));
        }
        let now = now_ms();
        // The record counts the `session.started` appended next.
        let live = Live::created(now, &settings.agent_mode);
        let record = to_record(RecordOf {
            session_id: id,
            settings: &settings,
            live: &live,
            created_at: now,
            running: None,
            owner: &self.ctx.instance_id,
        });
        self.ctx.store.create(&record).map_err(|e| match e {
            StoreError::AlreadyExists(id) => SessionError::AlreadyExists(id),
            other => SessionError::from(other),
        })?;
        let mut drafts = vec![settings.started_event()];
        let time = format_time(time::OffsetDateTime::now_utc()).into();
        self.ctx.store.append(id, &mut drafts, time, None)?;
        let handle = self.start_actor(id, settings, live, now, Origin::Created);
        tracing::info!(session = %id, agent = handle.settings.agent.id(), "session created");
        let info = info_of(&handle);
        sessions.insert(id.to_string(), handle);
        drop(sessions);
        self.created.send_modify(|n| *n += 1);
        Ok(info)
    }

    /// Loads this daemon's stored sessions (its own and unowned ones, see the module docs) and
    /// starts their actors; sessions whose turn was running when the previous daemon died are
    /// recovered (their agent killed, the turn ended as interrupted). Returns how many
    /// sessions were loaded.
    pub fn restore(&self) -> Result<usize, SessionError> {
        let records = self.ctx.store.load_sessions()?;
        let mut sessions = self.sessions.write_unpoisoned();
        let mut loaded = 0;
        let mut others = 0;
        for record in records {
            if !record.owner.is_empty() && record.owner != self.ctx.instance_id {
                others += 1;
                continue;
            }
            let last = self.ctx.store.last_sequence(&record.session_id).ok();
            let Some(restored) = from_record(&record, last) else {
                tracing::error!(session = %record.session_id, "stored settings are unusable; session skipped");
                continue;
            };
            let handle = self.start_actor(
                &record.session_id,
                Arc::new(restored.settings),
                restored.live,
                restored.created_at,
                Origin::Restored {
                    running: restored.running,
                },
            );
            if handle.shared.lock().end.is_none() {
                // A warm agent for the session's next turn.
                self.ctx.agents.prewarm(handle.settings.agent);
            }
            sessions.insert(record.session_id.clone(), handle);
            loaded += 1;
        }
        if others > 0 {
            tracing::info!(
                sessions = others,
                "left the stored sessions of other daemons alone"
            );
        }
        Ok(loaded)
    }

    /// Starts the actor of a session and returns its handle.
    fn start_actor(
        &self,
        id: &str,
        settings: Arc<SessionSettings>,
        live: Live,
        created_at: u64,
        origin: Origin,
    ) -> Arc<Handle> {
        let shared = Shared::new(live);
        let (tx, rx) = mpsc::unbounded_channel();
        let id: Arc<str> = id.into();
        let actor = Actor::new(
            id.clone(),
            settings.clone(),
            self.ctx.clone(),
            shared.clone(),
            rx,
            created_at,
            origin,
        );
        let task = tokio::spawn(actor.run());
        Arc::new(Handle {
            id,
            settings,
            created_at,
            order: self.next_order.fetch_add(1, Ordering::Relaxed),
            shared,
            tx,
            task: Mutex::new(Some(task)),
        })
    }

    /// Every session, newest first.
    pub fn list(&self) -> Vec<SessionInfo> {
        let sessions = self.sessions.read_unpoisoned();
        let mut handles: Vec<&Arc<Handle>> = sessions.values().collect();
        handles.sort_by_key(|h| std::cmp::Reverse((h.created_at, h.order)));
        handles.into_iter().map(|h| info_of(h)).collect::<Vec<_>>()
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
            let info = info_of(h);
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
        Ok(info_of(&*self.handle(id)?))
    }

    fn send(&self, handle: &Handle, cmd: Command) -> Result<(), SessionError> {
        handle.tx.send(cmd).map_err(|_| SessionError::ShuttingDown)
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
        self.send(
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
        let message = message.into();
        message.validate()?;
        let handle = self.handle(id)?;
        self.check_open(&handle)?;
        let (tx, rx) = oneshot::channel();
        self.send(
            &handle,
            Command::Message {
                message,
                started: Some(tx),
            },
        )?;
        rx.await.map_err(|_| SessionError::ShuttingDown)?
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
        )?;
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
        )?;
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
        )?;
        rx.await.map_err(|_| SessionError::ShuttingDown)?
    }

    /// Stops the running turn (if any); the session stays usable.
    pub async fn cancel(&self, id: &str) -> Result<(), SessionError> {
        let handle = self.handle(id)?;
        let (reply, rx) = oneshot::channel();
        self.send(&handle, Command::Cancel { reply })?;
        let _ = rx.await;
        Ok(())
    }

    /// Changes the agent mode of the session's next turns (`build`, `free`, `max`, `plan`); the
    /// running turn keeps its own. Recorded in the session's record.
    pub fn set_agent_mode(&self, id: &str, mode: &str) -> Result<(), SessionError> {
        validate_agent_mode(mode)?;
        let handle = self.handle(id)?;
        self.check_open(&handle)?;
        self.send(
            &handle,
            Command::SetMode {
                mode: mode.to_owned(),
            },
        )
    }

    /// Ends the session (idempotent): stops its turn, records `session.ended`.
    pub async fn terminate(&self, id: &str) -> Result<(), SessionError> {
        let handle = self.handle(id)?;
        let (reply, rx) = oneshot::channel();
        if handle.tx.send(Command::Terminate { reply }).is_ok() {
            let _ = rx.await;
        }
        self.release_spare_if_unused(handle.settings.agent);
        Ok(())
    }

    /// Deletes a session for good: ends it as `terminate` does (its turn stopped, its agent
    /// killed), stops its actor, then removes its record and whole log from the store. Streams
    /// following it end. Unknown ids are `NotFound`; a store that cannot delete now leaves the
    /// session listed (ended) so the delete can be retried.
    pub async fn delete(&self, id: &str) -> Result<(), SessionError> {
        let handle = self.handle(id)?;
        self.terminate(id).await?;
        let (reply, rx) = oneshot::channel();
        if handle.tx.send(Command::Shutdown { reply }).is_ok() {
            let _ = rx.await;
        }
        let task = handle.task.lock_unpoisoned().take();
        if let Some(task) = task {
            let _ = task.await;
        }
        let store = self.ctx.store.clone();
        let owned = id.to_owned();
        let deleted = tokio::task::spawn_blocking(move || store.delete_session(&owned))
            .await
            .map_err(|e| SessionError::StoreUnavailable(e.to_string()))?;
        if let Err(e) = deleted {
            // The actor is gone; a fresh one keeps the (ended) session readable until the
            // delete is retried.
            self.revive(&handle);
            return Err(e.into());
        }
        let mut sessions = self.sessions.write_unpoisoned();
        if sessions.get(id).is_some_and(|h| Arc::ptr_eq(h, &handle)) {
            sessions.remove(id);
        }
        tracing::info!(session = %id, "session deleted");
        Ok(())
    }

    /// Starts a new actor for a session whose actor was stopped (a delete the store refused),
    /// from its log, as a restart would.
    fn revive(&self, old: &Arc<Handle>) {
        let handle = self.start_actor(
            &old.id,
            old.settings.clone(),
            old.shared.snapshot(),
            old.created_at,
            Origin::Restored { running: None },
        );
        let mut sessions = self.sessions.write_unpoisoned();
        sessions.insert(old.id.to_string(), handle);
    }

    /// Drops the warm spare of `kind` when no session that can still take a turn uses it.
    fn release_spare_if_unused(&self, kind: AgentKind) {
        let in_use = {
            let sessions = self.sessions.read_unpoisoned();
            sessions
                .values()
                .any(|h| h.settings.agent == kind && h.shared.lock().end.is_none())
        };
        if !in_use {
            self.ctx.agents.drop_spare(kind);
        }
    }

    /// Stops accepting sessions, ends every running turn (recording its ending) and waits for
    /// the actors, at most `limit`.
    pub async fn shutdown(&self, limit: Duration) {
        self.shutting_down.store(true, Ordering::SeqCst);
        let handles: Vec<Arc<Handle>> = {
            let sessions = self.sessions.read_unpoisoned();
            sessions.values().cloned().collect()
        };
        let mut waits = Vec::new();
        for h in &handles {
            let (reply, rx) = oneshot::channel();
            if h.tx.send(Command::Shutdown { reply }).is_ok() {
                waits.push(rx);
            }
        }
        let all = async {
            for rx in waits {
                let _ = rx.await;
            }
            for h in &handles {
                let task = h.task.lock_unpoisoned().take();
                if let Some(task) = task {
                    let _ = task.await;
                }
            }
        };
        if tokio::time::timeout(limit, all).await.is_err() {
            tracing::warn!("some sessions did not stop in time");
        }
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

fn info_of(h: &Handle) -> SessionInfo {
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
