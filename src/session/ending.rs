//! Ending sessions: terminating one, deleting one for good, and stopping them all when the
//! daemon shuts down; the warm spare of an agent kind nobody uses any more is released.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::actor::Origin;
use super::command::Command;
use super::inbox::Request;
use super::manager::{Handle, SessionManager};
use super::owner::Route;
use super::SessionError;
use crate::agent::AgentKind;
use crate::sync::{LockExt, RwLockExt};

impl SessionManager {
    /// Ends the session (idempotent): stops its turn, records `session.ended`.
    pub async fn terminate(&self, id: &str) -> Result<(), SessionError> {
        loop {
            match self.route(id).await? {
                Route::Local(handle, routing) => {
                    let (reply, rx) = oneshot::channel();
                    let sent = handle.tx.send(Command::Terminate { reply }).await.is_ok();
                    drop(routing);
                    if sent {
                        let _ = rx.await;
                    }
                    self.release_spare_if_unused(handle.settings.agent);
                    return Ok(());
                }
                Route::Remote(owner) => {
                    if let Some(done) = self.relay(id, &owner, &Request::Terminate).await? {
                        return done.map(|_| ());
                    }
                }
            }
        }
    }

    /// Deletes a session for good: ends it as `terminate` does (its turn stopped, its agent
    /// killed), stops its actor, then removes its record and whole log from the store. Streams
    /// following it end. Unknown ids are `NotFound`; a store that cannot delete now leaves the
    /// session listed (ended) so the delete can be retried.
    pub async fn delete(&self, id: &str) -> Result<(), SessionError> {
        self.terminate(id).await?;
        // Deleted by the engine that holds the session (here, unless another one does).
        let handle = loop {
            match self.route(id).await? {
                Route::Local(handle, _routing) => break handle,
                Route::Remote(owner) => {
                    if let Some(done) = self.relay(id, &owner, &Request::Delete).await? {
                        return done.map(|_| ());
                    }
                }
            }
        };
        let (reply, rx) = oneshot::channel();
        if handle.tx.send(Command::Shutdown { reply }).await.is_ok() {
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
        drop(sessions);
        crate::webhooks::route_session(&*self.ctx.store, id, &[]);
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
            Origin::Restored {
                running: None,
                why: "the session was revived after a failed delete".to_owned(),
            },
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
            if h.tx.send(Command::Shutdown { reply }).await.is_ok() {
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
