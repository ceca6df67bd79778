//! Bringing a session back from its log: the actor reads the log once ([`LogSummary`]),
//! rebuilds its converter from it and ends the turn the log left open. Used after a daemon
//! restart (the turn was interrupted).

use super::actor::Actor;
use super::info::SessionStatus;
use super::recovery::LogSummary;
use crate::agent::procfs;
use crate::codebuff::CodebuffConverter;
use crate::store::RunningProcess;

/// Events read from the log per page while summarizing it.
const PAGE: usize = 1024;

impl Actor {
    /// Brings a stored session back: kills the agent of a turn the previous daemon left running
    /// (only if it is still the same process), ends that turn as interrupted, and restores the
    /// converter's state from the log.
    pub(super) async fn recover(&mut self, running: Option<RunningProcess>) {
        if let Some(p) = &running {
            if procfs::kill_group_if_same(p.pid, p.pgid, p.start_ticks) {
                tracing::warn!(session = %self.id, pid = p.pid, "killed the agent a previous daemon left running");
            }
        }
        let summary = self.summarize_log().await;
        self.restore_from(&summary);
        self.drafts.extend(
            summary.interrupted_turn("the daemon stopped during this turn and was restarted"),
        );
        self.flush();
        self.persist(None);
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
    fn restore_from(&mut self, summary: &LogSummary) {
        self.converter = CodebuffConverter::restored(
            summary.last_item,
            summary.turns,
            summary.native_session_id.clone(),
            summary.cost,
            summary.pending_questions.values().cloned().collect(),
            summary.resolved_questions.clone(),
        );
        let mut live = self.shared.lock();
        live.cost = summary.cost;
        live.turns = summary.turns;
        live.native_session_id = summary.native_session_id.clone();
        if live.end.is_none() {
            live.status = SessionStatus::Idle;
        }
    }
}
