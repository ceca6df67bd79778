//! The actor's side of holding a session in a shared store: writing the session's record
//! (what other engines list and recover from) and letting an idle session go so any engine
//! may run its next turn (see `owner.rs` for the manager's side: routing and recovery).

use std::sync::atomic::Ordering;

use super::actor::Actor;
use super::record::{to_record, RecordOf};
use crate::store::RunningProcess;
use crate::sync::LockExt;

impl Actor {
    /// Writes the session's record (with the running agent process, if any).
    pub(super) fn persist(&self, running: Option<RunningProcess>) {
        self.recorded_process.lock_unpoisoned().clone_from(&running);
        self.persist_record(running);
    }

    /// Rewrites the record after a status change, keeping the recorded agent process.
    pub(super) fn persist_status(&self) {
        let running = self.recorded_process.lock_unpoisoned().clone();
        self.persist_record(running);
    }

    fn persist_record(&self, running: Option<RunningProcess>) {
        let live = self.shared.snapshot();
        let record = to_record(RecordOf {
            session_id: &self.id,
            settings: &self.settings,
            live: &live,
            created_at: self.created_at,
            running,
            // Only a new record takes it: a put never changes the owner (claims do).
            owner: &self.ctx.engine_id,
        });
        if let Err(error) = self.ctx.store.put_session(&record) {
            tracing::error!(session = %self.id, %error, "saving the session record failed");
        }
    }

    /// Lets the session go (owner `""` in the store) when nothing is left to do: no turn runs
    /// (the caller says so), no message waits, no request is on its way (the manager hands
    /// requests over under `routing`). Any engine may then take the session; this actor stays
    /// as it is, to be woken if this engine takes it again while the log has not moved.
    pub(super) async fn release_if_idle(&mut self) {
        if !self.owned.load(Ordering::SeqCst) || self.store_failure.is_some() {
            return;
        }
        let routing = self.routing.clone();
        let _routing = routing.lock().await;
        if !self.rx.is_empty() || (self.ended().is_none() && self.queue.len() > 0) {
            return;
        }
        let store = self.ctx.store.clone();
        let id = self.id.to_string();
        let me = self.ctx.engine_id.clone();
        let released =
            tokio::task::spawn_blocking(move || store.coordination().claim(&id, &me, "")).await;
        match released {
            Ok(Ok(_)) => self.owned.store(false, Ordering::SeqCst),
            Ok(Err(error)) => {
                tracing::warn!(session = %self.id, %error, "cannot let the session go; it stays this engine's")
            }
            Err(_) => {}
        }
    }
}
