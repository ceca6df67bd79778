//! Who runs a session, among the engines sharing the store.
//!
//! * A request for a session goes to the engine that owns it: this one ([`Route::Local`],
//!   its actor), or another live one ([`Route::Remote`], through the inbox, `inbox.rs`).
//!   A session owned by nobody (idle) or by a dead engine is claimed by this engine first
//!   (compare-and-swap in the store: of several claimers exactly one wins), and its actor is
//!   started from the log, or woken when it is still in step with the log.
//! * An actor lets its session go (owner `""`) as soon as it is idle: no turn, no waiting
//!   message, nothing in its mailbox (see `Actor::release`), so any engine may take it next.
//! * The reaper (every [`REAP_EVERY`]) finds sessions whose owner died — its `kill -9`,
//!   crash or lost machine ended its lease — claims them and recovers them: the dead owner's
//!   agent is killed if it is still the same process, its turn ends `interrupted`. The inbox
//!   keeper takes the requests other engines sent for the sessions this one runs.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;

use super::actor::Origin;
use super::inbox::{self, blocking, Addressee, Remote, Reply, Request};
use super::manager::{Handle, SessionManager};
use super::record::from_record;
use super::{Cancel, SessionError};
use crate::store::SessionRecord;
use crate::sync::{LockExt, RwLockExt};
use crate::universal::PermissionReply;

/// How often an engine looks for sessions of dead engines (and for other engines at all).
pub const REAP_EVERY: Duration = Duration::from_secs(1);

/// Where a request for a session goes.
pub(super) enum Route {
    /// To this engine's actor, which owns the session; the guard keeps it owning it until
    /// the request is in its mailbox.
    Local(Arc<Handle>, OwnedMutexGuard<()>),
    /// To the engine with this id, which owns the session.
    Remote(String),
}

/// A request in the inbox, taken by its addressee, its outcome still to come.
pub(super) struct Posted {
    to: Addressee,
    sent: u64,
}

impl Posted {
    /// The sequence the relayed message's turn started at.
    pub(super) async fn outcome(self) -> Result<u64, SessionError> {
        match inbox::wait(&self.to, self.sent).await? {
            Remote::Done(result) => result?.ok_or_else(|| {
                SessionError::InvalidRequest("the owner did not say where the turn starts".into())
            }),
            // Taken, then gone: the session was deleted before its turn started.
            Remote::Retry => Err(SessionError::Cancelled),
        }
    }
}

impl SessionManager {
    /// Where requests for session `id` go, taking the session when nobody runs it.
    pub(super) async fn route(&self, id: &str) -> Result<Route, SessionError> {
        loop {
            if let Some(route) = self.route_here(id).await {
                return Ok(route);
            }
            let record = self.load(id).await?;
            let me = self.engine_id().to_owned();
            if record.owner != me && !record.owner.is_empty() && self.alive(&record.owner).await {
                return Ok(Route::Remote(record.owner));
            }
            if record.owner != me && !self.claim(id, &record.owner, &me).await? {
                // Another engine took it first: route again.
                continue;
            }
            let dead =
                (!record.owner.is_empty() && record.owner != me).then_some(record.owner.as_str());
            let handle = self.adopt(&record, dead).await?;
            let routing = handle.routing.clone().lock_owned().await;
            if handle.serving() {
                return Ok(Route::Local(handle, routing));
            }
        }
    }

    /// Like [`SessionManager::route`], for a request that only concerns a running turn (a
    /// cancel): `None` when nobody runs the session, which is then left alone.
    pub(super) async fn route_running(&self, id: &str) -> Result<Option<Route>, SessionError> {
        if let Some(route) = self.route_here(id).await {
            return Ok(Some(route));
        }
        let record = self.load(id).await?;
        if !record.owner.is_empty()
            && record.owner != self.engine_id()
            && self.alive(&record.owner).await
        {
            return Ok(Some(Route::Remote(record.owner)));
        }
        Ok(None)
    }

    /// The local route, when this engine's actor owns the session.
    async fn route_here(&self, id: &str) -> Option<Route> {
        let handle = self.handle(id).ok()?;
        if !handle.serving() {
            return None;
        }
        let routing = handle.routing.clone().lock_owned().await;
        handle.serving().then_some(Route::Local(handle, routing))
    }

    /// The session's record as stored now.
    async fn load(&self, id: &str) -> Result<SessionRecord, SessionError> {
        let store = self.ctx.store.clone();
        let owned = id.to_owned();
        blocking(move || store.coordination().load_session(&owned))
            .await?
            .ok_or_else(|| SessionError::NotFound(id.to_owned()))
    }

    async fn alive(&self, engine_id: &str) -> bool {
        let store = self.ctx.store.clone();
        let owned = engine_id.to_owned();
        blocking(move || store.coordination().engine_alive(&owned))
            .await
            .unwrap_or(false)
    }

    async fn claim(&self, id: &str, from: &str, to: &str) -> Result<bool, SessionError> {
        let store = self.ctx.store.clone();
        let (id, from, to) = (id.to_owned(), from.to_owned(), to.to_owned());
        blocking(move || store.coordination().claim(&id, &from, &to)).await
    }

    /// Gives this engine an actor for a session it has just claimed: the one it has when that
    /// one is in step with the log, else a new one restored from the log (which recovers the
    /// turn a dead owner, `dead`, left open).
    async fn adopt(
        &self,
        record: &SessionRecord,
        dead: Option<&str>,
    ) -> Result<Arc<Handle>, SessionError> {
        let id = record.session_id.as_str();
        let last = {
            let store = self.ctx.store.clone();
            let owned = id.to_owned();
            blocking(move || store.last_sequence(&owned)).await?
        };
        if let Ok(h) = self.handle(id) {
            let in_step = h.shared.lock().event_count == last;
            if dead.is_none() && in_step && !h.tx.is_closed() {
                h.owned.store(true, Ordering::SeqCst);
                return Ok(h);
            }
            self.stop_actor(&h).await;
        }
        let restored = from_record(record, Some(last)).ok_or_else(|| {
            SessionError::InvalidRequest(format!(
                "the stored settings of session `{id}` are unusable"
            ))
        })?;
        let running = match dead {
            Some(_) => restored.running,
            None => None,
        };
        let why = match dead {
            Some(engine) => format!(
                "the engine running this turn ({engine}) stopped; another took the session over"
            ),
            None => "the daemon stopped during this turn and was restarted".to_owned(),
        };
        if dead.is_some() {
            tracing::warn!(session = %id, owner = dead, "recovering a session whose engine died");
        }
        let handle = self.start_actor(
            id,
            Arc::new(restored.settings),
            restored.live,
            restored.created_at,
            Origin::Restored { running, why },
        );
        handle.owned.store(true, Ordering::SeqCst);
        if handle.shared.lock().end.is_none() {
            // A warm agent for the session's next turn.
            self.ctx.agents.prewarm(handle.settings.agent);
        }
        self.sessions
            .write_unpoisoned()
            .insert(id.to_owned(), handle.clone());
        Ok(handle)
    }

    /// Stops a local actor (stale, or replaced).
    pub(super) async fn stop_actor(&self, h: &Handle) {
        let (reply, rx) = tokio::sync::oneshot::channel();
        if h.tx
            .send(super::command::Command::Shutdown { reply })
            .await
            .is_ok()
        {
            let _ = rx.await;
        }
        let task = h.task.lock_unpoisoned().take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    fn addressee(&self, id: &str, owner: &str) -> Addressee {
        Addressee {
            store: self.ctx.store.clone(),
            session_id: id.to_owned(),
            owner: owner.to_owned(),
        }
    }

    /// Puts `request` into the inbox of `owner`, the engine that runs session `id`, and waits
    /// until the owner has taken it (its place in the owner's queue is then taken); `None`
    /// when the owner let the session go (or died) before taking it: the request was withdrawn,
    /// route again. Why wait: an owner finishing its turn lets the session go without looking
    /// at the inbox, and a message withdrawn after that must run elsewhere, not fail.
    pub(super) async fn post(
        &self,
        id: &str,
        owner: &str,
        request: &Request,
    ) -> Result<Option<Posted>, SessionError> {
        let sent = inbox::post(&self.ctx.store, id, request).await?;
        let to = self.addressee(id, owner);
        if !inbox::wait_taken(&to, sent).await? {
            return Ok(None);
        }
        Ok(Some(Posted { to, sent }))
    }

    /// Relays `request` to `owner` and waits for its outcome; `None`: route again.
    pub(super) async fn relay(
        &self,
        id: &str,
        owner: &str,
        request: &Request,
    ) -> Result<Option<Result<Option<u64>, SessionError>>, SessionError> {
        let sent = inbox::post(&self.ctx.store, id, request).await?;
        match inbox::wait(&self.addressee(id, owner), sent).await? {
            Remote::Done(result) => Ok(Some(result)),
            Remote::Retry => Ok(None),
        }
    }

    /// Starts the background work of an engine that shares its store: the reaper (its first
    /// round at once: a restarted engine recovers its predecessor's turns right away) and the
    /// inbox keeper. Call within a tokio runtime.
    pub fn start_ownership(self: &Arc<Self>) {
        let reaper = {
            let manager = Arc::downgrade(self);
            tokio::spawn(async move {
                if let Some(manager) = manager.upgrade() {
                    let recovered = manager.reap().await;
                    if recovered > 0 {
                        tracing::info!(
                            sessions = recovered,
                            "recovered the sessions of stopped engines"
                        );
                    }
                }
                loop {
                    tokio::time::sleep(REAP_EVERY).await;
                    let Some(manager) = manager.upgrade() else {
                        return;
                    };
                    if manager.shutting_down.load(Ordering::SeqCst) {
                        return;
                    }
                    manager.reap().await;
                }
            })
        };
        let keeper = {
            let manager = Arc::downgrade(self);
            let mut changes = self.ctx.store.coordination().changes();
            tokio::spawn(async move {
                loop {
                    // Every change of the store, but not more often than every few ms (a
                    // flood commits every millisecond), and once a second regardless.
                    let _ = tokio::time::timeout(REAP_EVERY, changes.changed()).await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let Some(manager) = manager.upgrade() else {
                        return;
                    };
                    if manager.shutting_down.load(Ordering::SeqCst) {
                        return;
                    }
                    if manager.others.load(Ordering::Relaxed) {
                        manager.keep_inbox().await;
                    }
                }
            })
        };
        self.background.lock_unpoisoned().extend([reaper, keeper]);
    }

    /// One round of the reaper: who else is alive, and the sessions of the dead. Returns how
    /// many sessions it recovered.
    async fn reap(self: &Arc<Self>) -> usize {
        let store = self.ctx.store.clone();
        let (engines, owned) = match blocking(move || {
            Ok((
                store.coordination().engines()?,
                store.coordination().owned_sessions()?,
            ))
        })
        .await
        {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(%error, "cannot look for the sessions of stopped engines");
                return 0;
            }
        };
        let me = self.engine_id().to_owned();
        self.others
            .store(engines.iter().any(|e| e.engine_id != me), Ordering::Relaxed);
        let mut alive: HashMap<String, bool> =
            engines.into_iter().map(|e| (e.engine_id, true)).collect();
        let mut recovered = 0;
        for (id, owner) in owned {
            if owner == me {
                continue;
            }
            let live = match alive.get(&owner) {
                Some(live) => *live,
                None => {
                    let live = self.alive(&owner).await;
                    alive.insert(owner.clone(), live);
                    live
                }
            };
            if live {
                continue;
            }
            // Exactly one survivor wins the claim and recovers the session.
            match self.claim(&id, &owner, &me).await {
                Ok(true) => {}
                _ => continue,
            }
            let record = match self.load(&id).await {
                Ok(record) => record,
                Err(_) => continue,
            };
            if let Err(error) = self.adopt(&record, Some(&owner)).await {
                tracing::error!(session = %id, %error, "cannot recover the session of a stopped engine");
                continue;
            }
            recovered += 1;
        }
        if recovered > 0 {
            self.created.send_modify(|n| *n += 1);
        }
        recovered
    }

    /// Executes the requests other engines sent for the sessions this one runs.
    async fn keep_inbox(self: &Arc<Self>) {
        let store = self.ctx.store.clone();
        let me = self.engine_id().to_owned();
        let taken = match blocking(move || store.coordination().inbox_take(&me)).await {
            Ok(taken) => taken,
            Err(error) => {
                tracing::warn!(%error, "cannot read the inbox");
                return;
            }
        };
        for request in taken {
            let parsed: Result<Request, _> = serde_json::from_value(request.body.clone());
            let manager = self.clone();
            let store = self.ctx.store.clone();
            let sent = request.id;
            let Ok(parsed) = parsed else {
                answer(
                    store,
                    sent,
                    Err(SessionError::InvalidRequest(
                        "a request this engine cannot read".into(),
                    )),
                )
                .await;
                continue;
            };
            let id = request.session_id.clone();
            match parsed {
                // Messages are queued in the order they came; the reply of one that waits for
                // its turn comes when the turn starts.
                Request::Message { text, images, wait } => {
                    let message = inbox::message_of(text, images);
                    if wait {
                        match manager.queue_turn(&id, message).await {
                            Ok(queued) => {
                                tokio::spawn(async move {
                                    let started = queued.started().await.map(Some);
                                    answer(store, sent, started).await;
                                });
                            }
                            Err(e) => answer(store, sent, Err(e)).await,
                        }
                    } else {
                        let queued = manager.send_message(&id, message).await;
                        answer(store, sent, queued.map(|()| None)).await;
                    }
                }
                other => {
                    tokio::spawn(async move {
                        let result = manager.execute(&id, other).await;
                        answer(store, sent, result.map(|()| None)).await;
                    });
                }
            }
        }
    }

    /// Executes a relayed request other than a message.
    async fn execute(&self, id: &str, request: Request) -> Result<(), SessionError> {
        match request {
            Request::Message { .. } => Err(SessionError::InvalidRequest(
                "messages are queued by the inbox keeper".into(),
            )),
            Request::Answer {
                question_id,
                answers,
            } => self.answer(id, &question_id, answers).await,
            Request::Reject { question_id } => self.reject(id, &question_id).await,
            Request::Permission {
                permission_id,
                reply,
            } => {
                let reply = PermissionReply::parse(&reply).ok_or_else(|| {
                    SessionError::InvalidRequest(format!("`{reply}` is not a permission reply"))
                })?;
                self.reply_permission(id, &permission_id, reply).await
            }
            Request::Cancel { queued } => {
                let what = if queued {
                    Cancel::RunningAndQueued
                } else {
                    Cancel::Running
                };
                self.cancel_with(id, what).await
            }
            Request::SetMode { mode } => self.set_agent_mode(id, &mode).await,
            Request::Terminate => self.terminate(id).await,
            Request::Delete => self.delete(id).await,
        }
    }
}

/// Writes the reply to inbox request `sent`.
async fn answer(
    store: Arc<dyn crate::store::EventStore>,
    sent: u64,
    result: Result<Option<u64>, SessionError>,
) {
    let body = serde_json::to_value(Reply::of(result)).unwrap_or_default();
    if let Err(error) = blocking(move || store.coordination().inbox_answer(sent, &body)).await {
        tracing::warn!(%error, "cannot answer an inbox request");
    }
}
