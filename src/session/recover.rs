//! Bringing a session back from its log: the actor reads the log once ([`LogSummary`]),
//! rebuilds its converter from it and ends the turn the log left open. Used after a daemon
//! restart (the turn was interrupted), and after the log refused or lost some of the
//! session's events (the turn failed with `store_error`, recorded once the log can be
//! written again).

use super::actor::Actor;
use super::command::Command;
use super::info::{EndState, SessionStatus};
use super::recovery::LogSummary;
use super::SessionError;
use crate::agent::procfs;
use crate::codebuff::CodebuffConverter;
use crate::store::RunningProcess;
use crate::universal::{
    EventData, EventDraft, SessionEndReason, SessionEndedData, TerminatedBy, TurnStatus,
};

/// Events read from the log per page while summarizing it.
const PAGE: usize = 1024;

impl Actor {
    /// Brings a stored session back: kills the agent of a turn the previous daemon left running
    /// (only if it is still the same process), ends that turn as interrupted, and restores the
    /// converter's state from the log.
    pub(super) async fn recover(&mut self, running: Option<RunningProcess>, why: &str) {
        if let Some(p) = &running {
            if procfs::kill_group_if_same(p.pid, p.pgid, p.start_ticks) {
                tracing::warn!(session = %self.id, pid = p.pid, "killed the agent a previous daemon left running");
            }
        }
        let summary = self.summarize_log().await;
        self.restore_from(&summary);
        self.drafts.extend(summary.interrupted_turn(why));
        super::observe::turn_ended(&self.id, self.settings.agent, None, &self.drafts);
        // Idle only once the log holds the turn's end (a failed flush leaves it failed).
        if self.flush().await {
            self.set_status(SessionStatus::Idle);
        }
        self.persist(None);
    }

    /// Resynchronises the session with its log after the log refused or lost its events:
    /// waits until the log can be written (serving what can be served meanwhile), rebuilds
    /// the converter from the log, ends the turn the log left open as failed (`store_error`)
    /// and records a `session.ended` the log is missing. If the log fails again, the run loop
    /// comes back here.
    pub(super) async fn resync(&mut self) {
        let Some(cause) = self.store_failure.clone() else {
            return;
        };
        self.set_status(SessionStatus::Failed);
        if let Some(mut health) = self.ctx.store.health() {
            loop {
                if health.borrow_and_update().is_none() {
                    break;
                }
                tokio::select! {
                    changed = health.changed() => {
                        if changed.is_err() {
                            break;
                        }
                    }
                    cmd = self.rx.recv() => match cmd {
                        Some(cmd) => self.handle_while_failed(cmd),
                        None => self.exit = true,
                    },
                }
                if self.exit {
                    return;
                }
            }
        }
        self.store_failure = None;
        let summary = self.summarize_log().await;
        self.restore_from(&summary);
        let message = format!("the event log could not take this turn's events: {cause}");
        self.drafts.extend(summary.close_open_turn(
            TurnStatus::Failed,
            Some("store_error"),
            &message,
        ));
        let end = self.shared.lock().end.clone();
        if let (Some(end), false) = (end, summary.session_ended) {
            self.reject_stale_questions();
            let (reason, terminated_by, message) = match end {
                EndState::Terminated => (SessionEndReason::Terminated, TerminatedBy::Daemon, None),
                EndState::Error(m) => (SessionEndReason::Error, TerminatedBy::Agent, Some(m)),
            };
            self.drafts
                .push(EventDraft::synthetic(EventData::SessionEnded(Box::new(
                    SessionEndedData {
                        reason,
                        terminated_by,
                        message,
                        exit_code: None,
                        stderr: None,
                        cost: self.converter.session_cost(),
                    },
                ))));
        }
        super::observe::turn_ended(&self.id, self.settings.agent, None, &self.drafts);
        if !self.flush().await {
            return;
        }
        self.set_status(SessionStatus::Idle);
        tracing::info!(session = %self.id, "the session is back in step with its event log");
        self.persist(None);
        for w in self.waiting.drain(..) {
            let _ = w.send(());
        }
    }

    /// Serves a request while the session waits for its log: nothing that needs the log.
    fn handle_while_failed(&mut self, cmd: Command) {
        let unavailable =
            || SessionError::StoreUnavailable(self.store_failure.clone().unwrap_or_default());
        match cmd {
            Command::Message { message, started } => self.enqueue(message, started),
            Command::Answer { reply, .. }
            | Command::Reject { reply, .. }
            | Command::Permission { reply, .. } => {
                let _ = reply.send(Err(unavailable()));
            }
            Command::Cancel { queued, reply } => {
                self.cancel_queued(queued);
                let _ = reply.send(());
            }
            Command::SetMode { mode } => self.shared.lock().agent_mode = mode,
            Command::Terminate { reply } => {
                // Recorded once the log can be written.
                self.mark_terminated();
                let _ = reply.send(());
            }
            Command::Shutdown { reply } => {
                self.waiting.push(reply);
                self.exit = true;
            }
        }
    }

    /// Reads the whole log (off the runtime's threads) into a summary.
    pub(super) async fn summarize_log(&self) -> LogSummary {
        let store = self.ctx.store.clone();
        let id = self.id.clone();
        tokio::task::spawn_blocking(move || {
            let mut summary = LogSummary::default();
            loop {
                match store.read(&id, summary.last_sequence, PAGE) {
                    Ok(page) if !page.is_empty() => {
                        for stored in &page {
                            match stored.decode() {
                                Ok(event) => summary.observe(&event),
                                Err(error) => {
                                    tracing::error!(session = %id, %error, "an event of the log cannot be read back");
                                    summary.last_sequence = stored.sequence;
                                }
                            }
                        }
                    }
                    Ok(_) => break,
                    Err(error) => {
                        tracing::error!(session = %id, %error, "reading the log to restore the session failed");
                        break;
                    }
                }
            }
            summary
        })
        .await
        .unwrap_or_default()
    }

    /// Rebuilds the converter and the live info from a summary of the log.
    pub(super) fn restore_from(&mut self, summary: &LogSummary) {
        self.converter = CodebuffConverter::restored(
            summary.last_item,
            summary.turns,
            summary.native_session_id.clone(),
            summary.cost,
            summary.pending_questions.values().cloned().collect(),
            summary.resolved_questions.clone(),
        );
        self.converter.set_permission_mode(
            crate::codebuff::PermissionMode::parse(&self.settings.permission_mode)
                .unwrap_or(crate::codebuff::PermissionMode::Bypass),
        );
        let mut live = self.shared.lock();
        live.cost = summary.cost;
        live.turns = summary.turns;
        live.native_session_id = summary.native_session_id.clone();
        if live.first_prompt.is_none() {
            live.first_prompt = summary.first_prompt.clone();
        }
        // The status stays as it is: the caller makes the session idle once the log holds
        // the end of the turn it left open.
    }
}
