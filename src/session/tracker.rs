//! How a turn ended, decided once for every door (pure: a turn's events in, a [`TurnEnd`] out).
//!
//! A door that follows a turn (an ACP prompt, a WebSocket prompt, the terminal's `exec`, the
//! inspector) feeds each event of the turn to a [`TurnTracker`]; when the turn is over (its
//! `turn.ended`, or a `session.ended` that came first) the tracker says how it ended, why, what
//! it cost, the session's cost after it, and its answer. Every door projects that same verdict
//! onto its protocol, so two doors never give two answers for one log.
//!
//! The rules (also in `docs/universal-events.md`, "How a turn ended"):
//!
//! * `turn.ended` decides: its `metadata.status`, `code`, `message`, costs (the turn's, and the
//!   session's total `session_cost`). Without metadata (no daemon writes that) the turn counts
//!   as `interrupted`: the log does not say how it ended.
//! * `session.ended` before `turn.ended` ends the turn with the session: `cancelled` when the
//!   session was terminated, `failed` when it ended with an error, else `interrupted`; code
//!   `session_ended` and the session's own message, cost the session's total.
//! * The cause of a turn that did not complete is its own `code`, else (failed turns) the last
//!   `error` the agent reported, else the status; its explanation is what the agent said (the
//!   last error) and how the turn ended, joined — see [`TurnEnd::reason`].
//! * The answer is the text of the turn's last top-level assistant message.

use crate::universal::{
    Cost, ErrorData, EventData, SessionEndReason, SessionEndedData, TurnData, TurnStatus,
};

/// The verdict on a turn that is over.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnEnd {
    pub turn_id: Option<String>,
    pub status: TurnStatus,
    /// The turn's own reason code (`turn.ended.metadata.code`, or `session_ended`).
    pub code: Option<String>,
    /// How the turn ended, in words, when it did not complete normally.
    pub message: Option<String>,
    /// The last `error` the agent reported during the turn.
    pub last_error: Option<ErrorData>,
    /// The last lines the agent wrote on stderr, for a failure they explain.
    pub stderr_tail: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The turn's own cost.
    pub turn_cost: Cost,
    /// False when the run never reported a cost.
    pub cost_reported: bool,
    /// The session's cost after the turn, this turn included; `None` only for a log written
    /// before `turn.ended` carried it.
    pub session_cost: Option<Cost>,
    /// The text of the turn's last top-level assistant message.
    pub answer: Option<String>,
}

impl TurnEnd {
    /// True when the turn completed normally.
    pub fn completed(&self) -> bool {
        self.status == TurnStatus::Completed
    }

    /// The stable code of why the turn did not complete: its own code, else (a failed turn)
    /// the code of the last error the agent reported, else the status's name.
    pub fn cause(&self) -> String {
        if let Some(code) = &self.code {
            return code.clone();
        }
        if self.status == TurnStatus::Failed {
            if let Some(code) = self.last_error.as_ref().and_then(|e| e.code.clone()) {
                return code;
            }
        }
        self.status.as_str().to_owned()
    }

    /// True when the turn failed for want of a credential: none was found
    /// (`credentials_missing`) or the backend refused it (`auth_failed`). Doors say so in their
    /// own way (ACP's "authentication required", the terminal's exit status 3), so a client can
    /// ask for a key instead of retrying.
    pub fn needs_credentials(&self) -> bool {
        self.status == TurnStatus::Failed
            && matches!(self.cause().as_str(), "auth_failed" | "credentials_missing")
    }

    /// Why the turn did not complete, in words: what the agent said about it (its last error)
    /// and how the turn ended (`said (ended)`, once when they are the same), else a sentence
    /// for the status.
    pub fn reason(&self) -> String {
        let said = self.last_error.as_ref().map(|e| e.message.as_str());
        match (said, self.message.as_deref()) {
            (Some(said), Some(ended)) if said == ended => said.to_owned(),
            (Some(said), Some(ended)) => format!("{said} ({ended})"),
            (Some(one), None) | (None, Some(one)) => one.to_owned(),
            (None, None) => match self.status {
                TurnStatus::Completed => "the turn completed".to_owned(),
                TurnStatus::Failed => "the turn failed".to_owned(),
                TurnStatus::TimedOut => "the turn timed out".to_owned(),
                TurnStatus::Cancelled => "the turn was cancelled".to_owned(),
                TurnStatus::Interrupted => "the turn was interrupted".to_owned(),
                TurnStatus::BudgetExhausted => "the session's credit budget is spent".to_owned(),
            },
        }
    }
}

/// Follows one turn's events to its end.
#[derive(Debug, Default)]
pub struct TurnTracker {
    last_error: Option<ErrorData>,
    answer: Option<String>,
    end: Option<TurnEnd>,
}

impl TurnTracker {
    /// A tracker of a turn whose events follow.
    pub fn new() -> TurnTracker {
        TurnTracker::default()
    }

    /// Takes the turn's next event. Returns the verdict when this event ended the turn (and
    /// every later call returns `None`: a turn ends once).
    pub fn take(&mut self, data: &EventData) -> Option<&TurnEnd> {
        if self.end.is_some() {
            return None;
        }
        match data {
            EventData::ItemCompleted(d) if d.item.is_answer() => {
                if let Some(text) = d.item.text() {
                    self.answer = Some(text);
                }
            }
            EventData::Error(e) => self.last_error = Some(ErrorData::clone(e)),
            EventData::TurnEnded(t) => {
                self.end = Some(self.turn_ended(t));
                return self.end.as_ref();
            }
            EventData::SessionEnded(s) => {
                self.end = Some(self.session_ended(s));
                return self.end.as_ref();
            }
            _ => {}
        }
        None
    }

    /// The verdict, once the turn is over.
    pub fn end(&self) -> Option<&TurnEnd> {
        self.end.as_ref()
    }

    /// The turn's answer so far (its last top-level assistant message).
    pub fn answer(&self) -> Option<&str> {
        self.answer.as_deref()
    }

    /// The last error the agent reported so far.
    pub fn last_error(&self) -> Option<&ErrorData> {
        self.last_error.as_ref()
    }

    fn turn_ended(&mut self, t: &TurnData) -> TurnEnd {
        let last_error = self.last_error.take();
        let answer = self.answer.take();
        match &t.metadata {
            Some(m) => TurnEnd {
                turn_id: t.turn_id.clone(),
                status: m.status,
                code: m.code.clone(),
                message: m.message.clone(),
                last_error,
                stderr_tail: m.stderr_tail.clone(),
                exit_code: m.exit_code,
                signal: m.signal,
                turn_cost: m.cost,
                cost_reported: m.cost_reported,
                session_cost: m.session_cost,
                answer,
            },
            None => TurnEnd {
                turn_id: t.turn_id.clone(),
                status: TurnStatus::Interrupted,
                code: None,
                message: Some("the log does not say how the turn ended".to_owned()),
                last_error,
                stderr_tail: None,
                exit_code: None,
                signal: None,
                turn_cost: Cost::default(),
                cost_reported: false,
                session_cost: None,
                answer,
            },
        }
    }

    fn session_ended(&mut self, s: &SessionEndedData) -> TurnEnd {
        let status = match s.reason {
            SessionEndReason::Terminated => TurnStatus::Cancelled,
            SessionEndReason::Error => TurnStatus::Failed,
            SessionEndReason::Completed => TurnStatus::Interrupted,
        };
        TurnEnd {
            turn_id: None,
            status,
            code: Some("session_ended".to_owned()),
            message: Some(
                s.message
                    .clone()
                    .unwrap_or_else(|| "the session ended before the turn did".to_owned()),
            ),
            last_error: self.last_error.take(),
            stderr_tail: s.stderr.as_ref().and_then(|e| e.last_lines()),
            exit_code: s.exit_code,
            signal: None,
            turn_cost: Cost::default(),
            cost_reported: false,
            session_cost: Some(s.cost),
            answer: self.answer.take(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::universal::{
        ContentPart, Item, ItemEventData, ItemKind, ItemRole, ItemStatus, TerminatedBy,
        TurnMetadata, TurnPhase,
    };

    fn message(id: &str, parent: Option<&str>, text: &str) -> EventData {
        EventData::ItemCompleted(ItemEventData {
            item: Item {
                item_id: id.into(),
                native_item_id: None,
                parent_id: parent.map(Into::into),
                kind: ItemKind::Message,
                role: Some(ItemRole::Assistant),
                content: Arc::new(vec![ContentPart::Text { text: text.into() }]),
                status: ItemStatus::Completed,
            },
        })
    }

    fn error(code: &str, message: &str) -> EventData {
        EventData::Error(Box::new(ErrorData {
            message: message.into(),
            code: Some(code.into()),
            details: None,
        }))
    }

    fn ended(status: TurnStatus, code: Option<&str>, message: Option<&str>) -> EventData {
        EventData::TurnEnded(Box::new(TurnData {
            phase: TurnPhase::Ended,
            turn_id: Some("turn_1".into()),
            metadata: Some(TurnMetadata {
                status,
                cost: Cost::from_credits(3.0),
                cost_reported: true,
                session_cost: Some(Cost::from_credits(10.0)),
                exit_code: None,
                signal: None,
                agent_id: None,
                code: code.map(Into::into),
                message: message.map(Into::into),
                stderr_tail: None,
            }),
        }))
    }

    fn run(events: &[EventData]) -> TurnEnd {
        let mut tracker = TurnTracker::new();
        let mut verdict = None;
        for e in events {
            if let Some(end) = tracker.take(e) {
                assert!(verdict.is_none(), "a turn ends once");
                verdict = Some(end.clone());
            }
        }
        verdict.expect("the turn ended")
    }

    #[test]
    fn a_completed_turn_has_its_answer_and_both_costs() {
        let end = run(&[
            message("itm_1", None, "first"),
            message("itm_2", Some("itm_9"), "a subagent's"),
            message("itm_3", None, "the answer"),
            ended(TurnStatus::Completed, None, None),
        ]);
        assert!(end.completed());
        assert_eq!(end.answer.as_deref(), Some("the answer"));
        assert_eq!(end.turn_cost.credits, 3.0);
        assert_eq!(end.session_cost.map(|c| c.credits), Some(10.0));
        assert_eq!(end.turn_id.as_deref(), Some("turn_1"));
    }

    #[test]
    fn a_failed_turn_explains_itself_with_what_the_agent_said_and_how_it_ended() {
        let end = run(&[
            error("backend_error", "the backend is down"),
            ended(TurnStatus::Failed, None, Some("the agent exited with 1")),
        ]);
        assert_eq!(end.cause(), "backend_error");
        assert_eq!(
            end.reason(),
            "the backend is down (the agent exited with 1)"
        );
        assert!(!end.needs_credentials());
        let own = run(&[
            error("backend_error", "down"),
            ended(TurnStatus::Failed, Some("auth_failed"), Some("down")),
        ]);
        assert_eq!(own.cause(), "auth_failed");
        assert_eq!(own.reason(), "down");
        assert!(own.needs_credentials());
        let missing = run(&[
            error("credentials_missing", "no key"),
            ended(TurnStatus::Failed, None, Some("the agent could not start")),
        ]);
        assert!(missing.needs_credentials());
        let bare = run(&[ended(TurnStatus::TimedOut, None, None)]);
        assert_eq!(bare.cause(), "timed_out");
        assert_eq!(bare.reason(), "the turn timed out");
        // An error before a cancel does not become the cancel's cause.
        let cancelled = run(&[
            error("x", "noise"),
            ended(TurnStatus::Cancelled, None, Some("cancelled")),
        ]);
        assert_eq!(cancelled.cause(), "cancelled");
    }

    #[test]
    fn the_session_ending_first_ends_the_turn_by_the_sessions_reason() {
        let session = |reason, message: Option<&str>| {
            EventData::SessionEnded(Box::new(SessionEndedData {
                reason,
                terminated_by: TerminatedBy::Daemon,
                message: message.map(Into::into),
                exit_code: None,
                stderr: None,
                cost: Cost::from_credits(7.0),
            }))
        };
        let terminated = run(&[session(SessionEndReason::Terminated, None)]);
        assert_eq!(terminated.status, TurnStatus::Cancelled);
        assert_eq!(terminated.cause(), "session_ended");
        assert_eq!(terminated.reason(), "the session ended before the turn did");
        assert_eq!(terminated.session_cost.map(|c| c.credits), Some(7.0));
        let failed = run(&[session(SessionEndReason::Error, Some("out of credits"))]);
        assert_eq!(failed.status, TurnStatus::Failed);
        assert_eq!(failed.reason(), "out of credits");
        let over = run(&[session(SessionEndReason::Completed, None)]);
        assert_eq!(over.status, TurnStatus::Interrupted);
    }

    #[test]
    fn a_turn_ended_without_metadata_is_interrupted() {
        let end = run(&[EventData::TurnEnded(Box::new(TurnData {
            phase: TurnPhase::Ended,
            turn_id: None,
            metadata: None,
        }))]);
        assert_eq!(end.status, TurnStatus::Interrupted);
        assert_eq!(end.session_cost, None);
        assert_eq!(end.reason(), "the log does not say how the turn ended");
    }
}
