//! What the engine tells operators about sessions besides their logs: a line per turn end in
//! the daemon's own log (`info`: session, turn, status, duration, cost), and the session
//! figures of `/metrics` (`docs/metrics.md`): turns and credits counted as turns end, pending
//! questions and permissions kept per session as shares of a gauge, the rest read at scrape
//! ([`sample`]).

use std::time::Instant;

use super::info::SessionStatus;
use super::SessionManager;
use crate::agent::AgentKind;
use crate::metrics::metrics;
use crate::universal::{EventData, EventDraft, TurnStatus};

/// The wire name of a turn status (as `turn.ended.metadata.status` says it).
pub fn turn_status_name(status: TurnStatus) -> &'static str {
    match status {
        TurnStatus::Completed => "completed",
        TurnStatus::Failed => "failed",
        TurnStatus::TimedOut => "timed_out",
        TurnStatus::Cancelled => "cancelled",
        TurnStatus::Interrupted => "interrupted",
        TurnStatus::BudgetExhausted => "budget_exhausted",
    }
}

/// Logs and counts the turn that `drafts` end (if they hold its `turn.ended`), which began at
/// `started` (unknown for a turn recovered after a restart).
pub(super) fn turn_ended(
    session: &str,
    agent: AgentKind,
    started: Option<Instant>,
    drafts: &[EventDraft],
) {
    let Some((turn_id, metadata)) = drafts.iter().rev().find_map(|d| match &d.data {
        EventData::TurnEnded(t) => Some((t.turn_id.as_deref(), t.metadata.as_ref())),
        _ => None,
    }) else {
        return;
    };
    let status = metadata.map_or("completed", |m| turn_status_name(m.status));
    let cost = metadata.map(|m| m.cost).unwrap_or_default();
    metrics().turn_ended(agent.id(), status, cost.credits);
    let duration_ms = started.map(|s| s.elapsed().as_millis() as u64);
    tracing::info!(
        session = %session,
        turn = turn_id.unwrap_or("-"),
        status,
        duration_ms,
        cost_credits = cost.credits,
        cost_usd = cost.usd,
        "turn ended"
    );
}

/// A session's share of the pending-questions and pending-permissions gauges: the actor
/// updates it after each append (two integer compares), and it leaves the gauges with the
/// actor.
#[derive(Debug, Default)]
pub(super) struct PendingShare {
    questions: i64,
    permissions: i64,
}

impl PendingShare {
    pub(super) fn update(&mut self, questions: usize, permissions: usize) {
        let (q, p) = (questions as i64, permissions as i64);
        if q != self.questions {
            metrics().questions_pending.inc_by(q - self.questions);
            self.questions = q;
        }
        if p != self.permissions {
            metrics().permissions_pending.inc_by(p - self.permissions);
            self.permissions = p;
        }
    }
}

impl Drop for PendingShare {
    fn drop(&mut self) {
        self.update(0, 0);
    }
}

/// Sets the gauges read at scrape: sessions by status, warm spares, the store's health.
pub fn sample(manager: &SessionManager) {
    let mut counts: Vec<(&'static str, i64)> =
        SessionStatus::ALL.iter().map(|s| (s.as_str(), 0)).collect();
    for info in manager.list() {
        if let Some(c) = counts
            .iter_mut()
            .find(|(name, _)| *name == info.status.as_str())
        {
            c.1 += 1;
        }
    }
    let m = metrics();
    m.set_sessions(&counts);
    let agents = &manager.context().agents;
    let spares = AgentKind::ALL
        .iter()
        .filter(|k| agents.spare_pid(**k).is_some())
        .count();
    m.warm_spares.set(spares as i64);
    m.store_degraded
        .set(i64::from(manager.store_trouble().is_some()));
}
