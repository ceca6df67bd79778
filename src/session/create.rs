//! Bringing sessions to life: creating one (validated settings, its agent installed, its
//! record committed, its actor started, `session.started` recorded by the actor) and restoring
//! this daemon's stored sessions at start.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use super::actor::{Actor, Origin};
use super::command::{Command, Mailbox};
use super::info::SessionInfo;
use super::manager::{info_of, Handle, SessionManager, MAILBOX, MAX_ID_LEN};
use super::queue::QueueCount;
use super::record::{now_ms, to_record, Live, RecordOf, Shared};
use super::settings::{CreateRequest, SessionSettings};
use super::SessionError;
use crate::agent::AgentKind;
use crate::store::StoreError;
use crate::sync::{LockExt, RwLockExt};

impl SessionManager {
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
    /// Returns the new session's info.
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
        // The id is reserved while its record is committed; nothing is locked meanwhile.
        if !self.creating.lock_unpoisoned().insert(id.to_owned()) || self.handle(id).is_ok() {
            return Err(SessionError::AlreadyExists(id.to_owned()));
        }
        let created = self.create_reserved(id, settings).await;
        self.creating.lock_unpoisoned().remove(id);
        let handle = created?;
        tracing::info!(session = %id, agent = handle.settings.agent.id(), "session created");
        let info = info_of(&handle, &self.ctx.engine_id);
        self.sessions
            .write_unpoisoned()
            .insert(id.to_string(), handle);
        self.created.send_modify(|n| *n += 1);
        Ok(info)
    }

    /// Commits the record of a session whose id is reserved, starts its actor and waits until
    /// the actor has recorded `session.started`.
    async fn create_reserved(
        &self,
        id: &str,
        settings: Arc<SessionSettings>,
    ) -> Result<Arc<Handle>, SessionError> {
        let now = now_ms();
        // The record counts the `session.started` its actor appends first.
        let live = Live::created(now, &settings.agent_mode);
        let record = to_record(RecordOf {
            session_id: id,
            settings: &settings,
            live: &live,
            created_at: now,
            running: None,
            // Its creator runs it first (its actor lets it go once idle).
            owner: &self.ctx.engine_id,
        });
        let store = self.ctx.store.clone();
        let committed = tokio::task::spawn_blocking(move || store.create(&record))
            .await
            .map_err(|e| SessionError::StoreUnavailable(e.to_string()))?;
        committed.map_err(|e| match e {
            StoreError::AlreadyExists(id) => SessionError::AlreadyExists(id),
            other => SessionError::from(other),
        })?;
        let (ready, recorded) = oneshot::channel();
        let handle = self.start_actor(
            id,
            settings,
            live,
            now,
            Origin::Created { ready: Some(ready) },
        );
        match recorded.await {
            Ok(Ok(())) => Ok(handle),
            outcome => {
                // The actor waits for the log to come back; it is stopped, and the session
                // record stays for the next start to restore.
                let (reply, stopped) = oneshot::channel();
                if handle.tx.send(Command::Shutdown { reply }).await.is_ok() {
                    let _ = stopped.await;
                }
                Err(match outcome {
                    Ok(Err(error)) => error,
                    _ => SessionError::ShuttingDown,
                })
            }
        }
    }

    /// Starts the actor of a session and returns its handle.
    pub(super) fn start_actor(
        &self,
        id: &str,
        settings: Arc<SessionSettings>,
        live: Live,
        created_at: u64,
        origin: Origin,
    ) -> Arc<Handle> {
        // Before its actor records anything (`session.started`, a recovered turn's end): the
        // session's own webhooks may want it.
        crate::webhooks::route_session(&*self.ctx.store, id, &settings.webhooks);
        let shared = Shared::new(live);
        let (tx, rx) = mpsc::channel(MAILBOX);
        let queued = QueueCount::default();
        let id: Arc<str> = id.into();
        let owned = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let routing = Arc::new(tokio::sync::Mutex::new(()));
        let actor = Actor::new(
            id.clone(),
            settings.clone(),
            self.ctx.clone(),
            shared.clone(),
            Mailbox {
                rx,
                queued: queued.clone(),
                owned: owned.clone(),
                routing: routing.clone(),
            },
            created_at,
            origin,
        );
        let task = tokio::spawn(actor.run());
        Arc::new(Handle {
            id,
            settings,
            created_at,
            shared,
            tx,
            queued,
            task: Mutex::new(Some(task)),
            owned,
            routing,
        })
    }
}
