//! The turn lifecycle (rules 2 and 5 of `docs/universal-events.md` §3): a turn opens with
//! `turn.started`, collects what its run said about its ending (a `finish`, a fatal `error`,
//! the last error code), and ends exactly once with `turn.ended`, whose status and metadata come
//! from that and from how the caller saw the run end ([`TurnOutcome`]).
//!
//! Pure state: the converter owns one [`Turn`] and asks it for the drafts; items are its own.

use super::cost::Spending;
use crate::universal::{
    Cost, ErrorData, EventData, EventDraft, RawLine, StderrOutput, TurnData, TurnMetadata,
    TurnPhase, TurnStatus,
};

/// How a turn ended when the agent's run did not end it with `finish`: what the caller saw.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    pub status: TurnStatus,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub message: Option<String>,
    /// The agent's stderr, for `session.ended` when the run failed fatally.
    pub stderr: Option<StderrOutput>,
}

/// The run's `finish`, held until the agent's exit confirms it (an agent may still fail after
/// it: `docs/agent-command.md` §2.1).
#[derive(Debug)]
pub(super) struct Finished {
    pub cost: Cost,
    pub cost_reported: bool,
    pub agent_id: Option<String>,
    pub raw: Option<RawLine>,
}

/// What a fatal `error` of the run said; it decides how the turn ended.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Failure {
    pub code: String,
    pub message: String,
}

/// The current turn (after the last one ended, that one, `ended`).
#[derive(Debug, Default)]
pub(super) struct Turn {
    id: Option<String>,
    ended: bool,
    finished: Option<Finished>,
    failure: Option<Failure>,
    last_error_code: Option<String>,
}

/// How [`Turn::end`] ends a turn.
#[derive(Debug)]
pub(super) struct Ending {
    /// Whether the run's open items must fail first (every ending but a confirmed `finish`,
    /// which completed them already).
    pub fail_open_items: bool,
    /// The `turn.ended` draft, to push after the items are closed.
    pub turn_ended: EventDraft,
}

impl Turn {
    /// The state of a session restored from its log: its last turn is over.
    pub(super) fn restored() -> Turn {
        Turn {
            ended: true,
            ..Turn::default()
        }
    }

    /// The session's turn number `number` (from 1) opens: the turn and its `turn.started`.
    pub(super) fn open(number: u64) -> (Turn, EventDraft) {
        let turn_id = format!("turn_{number}");
        let turn = Turn {
            id: Some(turn_id.clone()),
            ..Turn::default()
        };
        let started = EventDraft::synthetic(EventData::TurnStarted(Box::new(TurnData {
            phase: TurnPhase::Started,
            turn_id: Some(turn_id),
            metadata: None,
        })));
        (turn, started)
    }

    /// True once the turn has its `turn.ended`.
    pub(super) fn ended(&self) -> bool {
        self.ended
    }

    /// True once the run said `finish` (the turn's ending waits for the exit).
    pub(super) fn run_finished(&self) -> bool {
        self.finished.is_some()
    }

    /// True while the run may still spend and its `finish` would settle the turn: neither
    /// finished nor ended (a later `finish` is only a status line).
    pub(super) fn running(&self) -> bool {
        !self.ended && self.finished.is_none()
    }

    /// Holds the run's `finish` until the exit confirms it.
    pub(super) fn finish(&mut self, finished: Finished) {
        self.finished = Some(finished);
    }

    /// Notes an `error` of the run: its code suggests the status, and a fatal one decides it.
    pub(super) fn record_error(&mut self, code: &str, message: &str, fatal: bool) {
        if fatal {
            self.failure = Some(Failure {
                code: code.to_owned(),
                message: message.to_owned(),
            });
        }
        self.last_error_code = Some(code.to_owned());
    }

    /// The turn failed before the agent could run: the synthetic `error` with `code`.
    pub(super) fn fail_to_start(&mut self, code: &str, message: &str) -> EventDraft {
        self.last_error_code = Some(code.to_owned());
        EventDraft::synthetic(EventData::Error(Box::new(ErrorData {
            message: message.to_owned(),
            code: Some(code.to_owned()),
            details: None,
        })))
    }

    /// The status the run's own error events suggest (`timeout`, `aborted`), else `failed`.
    pub(super) fn failure_status(&self) -> TurnStatus {
        status_for_code(self.last_error_code.as_deref())
    }

    /// Ends the turn, once (`None` when it already ended): `completed` with the run's cost when
    /// it said `finish`, reported no fatal error and `outcome` completed (the exit was clean);
    /// otherwise the outcome, the failure's code and message, and what the run spent (a run
    /// stopped before its `finish` counts its `cost` events into `spending`).
    pub(super) fn end(&mut self, outcome: TurnOutcome, spending: &mut Spending) -> Option<Ending> {
        if self.ended {
            return None;
        }
        self.ended = true;
        let finished = self.finished.take();
        let failure = self.failure.take();
        if let (Some(f), None, TurnStatus::Completed) = (&finished, &failure, outcome.status) {
            return Some(Ending {
                fail_open_items: false,
                turn_ended: EventDraft::from_agent(
                    EventData::TurnEnded(Box::new(TurnData {
                        phase: TurnPhase::Ended,
                        turn_id: self.id.clone(),
                        metadata: Some(TurnMetadata {
                            status: TurnStatus::Completed,
                            cost: f.cost,
                            cost_reported: f.cost_reported,
                            session_cost: Some(spending.session()),
                            exit_code: None,
                            signal: None,
                            agent_id: f.agent_id.clone(),
                            code: None,
                            message: None,
                            stderr_tail: None,
                        }),
                    })),
                    f.raw.clone(),
                ),
            });
        }
        let status = match (&failure, outcome.status) {
            // A clean exit after a fatal error: the error decides.
            (Some(failure), TurnStatus::Completed) => status_for_code(Some(&failure.code)),
            (_, status) => status,
        };
        let (code, message) = match failure {
            Some(Failure { code, message }) => (Some(code), Some(message)),
            None => (None, outcome.message),
        };
        let spent = match &finished {
            Some(f) => f.cost,
            None => spending.stopped(),
        };
        let cost_reported =
            finished.as_ref().is_some_and(|f| f.cost_reported) || spending.turn_reported();
        // What the agent said on stderr explains a failure; a cancel or an interruption needs
        // no explaining.
        let stderr_tail = match status {
            TurnStatus::Failed | TurnStatus::TimedOut | TurnStatus::BudgetExhausted => {
                outcome.stderr.as_ref().and_then(StderrOutput::last_lines)
            }
            _ => None,
        };
        Some(Ending {
            fail_open_items: true,
            turn_ended: EventDraft::synthetic(EventData::TurnEnded(Box::new(TurnData {
                phase: TurnPhase::Ended,
                turn_id: self.id.clone(),
                metadata: Some(TurnMetadata {
                    status,
                    cost: spent,
                    cost_reported,
                    session_cost: Some(spending.session()),
                    exit_code: outcome.exit_code,
                    signal: outcome.signal,
                    agent_id: finished.and_then(|f| f.agent_id),
                    code,
                    message,
                    stderr_tail,
                }),
            }))),
        })
    }
}

/// The turn status an error code stands for: `timeout` timed out, `aborted` cancelled, any
/// other failure failed.
fn status_for_code(code: Option<&str>) -> TurnStatus {
    match code {
        Some("timeout") => TurnStatus::TimedOut,
        Some("aborted") => TurnStatus::Cancelled,
        _ => TurnStatus::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: TurnStatus) -> TurnOutcome {
        TurnOutcome {
            status,
            exit_code: Some(1),
            signal: None,
            message: Some("the caller's message".into()),
            stderr: Some(StderrOutput {
                head: Some("first\nlast".into()),
                tail: None,
                truncated: false,
                total_lines: Some(2),
            }),
        }
    }

    fn finished(credits: f64) -> Finished {
        Finished {
            cost: Cost::from_credits(credits),
            cost_reported: true,
            agent_id: Some("base".into()),
            raw: None,
        }
    }

    fn ended(draft: &EventDraft) -> (&TurnData, &TurnMetadata) {
        match &draft.data {
            EventData::TurnEnded(data) => (data, data.metadata.as_ref().unwrap()),
            other => panic!("expected turn.ended, got {other:?}"),
        }
    }

    #[test]
    fn turns_open_numbered_and_started() {
        let (turn, started) = Turn::open(3);
        assert!(!turn.ended() && turn.running());
        assert!(started.synthetic);
        match started.data {
            EventData::TurnStarted(data) => {
                assert_eq!(data.turn_id.as_deref(), Some("turn_3"));
                assert_eq!(data.phase, TurnPhase::Started);
                assert!(data.metadata.is_none());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_confirmed_finish_completes_with_the_runs_cost_and_keeps_its_items() {
        let (mut turn, _) = Turn::open(1);
        let mut spending = Spending::restored(Cost::from_credits(1.0));
        turn.finish(finished(spending.finished(Some(4.0)).credits));
        assert!(turn.run_finished() && !turn.running());
        let ending = turn
            .end(outcome(TurnStatus::Completed), &mut spending)
            .unwrap();
        assert!(!ending.fail_open_items);
        assert!(!ending.turn_ended.synthetic, "from the agent's finish line");
        let (data, meta) = ended(&ending.turn_ended);
        assert_eq!(data.turn_id.as_deref(), Some("turn_1"));
        assert_eq!(meta.status, TurnStatus::Completed);
        assert_eq!(meta.cost.credits, 4.0);
        assert_eq!(meta.session_cost.map(|c| c.credits), Some(5.0));
        assert_eq!(meta.agent_id.as_deref(), Some("base"));
        assert_eq!((meta.exit_code, meta.code.as_ref()), (None, None));
        assert!(meta.stderr_tail.is_none());
    }

    #[test]
    fn a_turn_ends_once() {
        let (mut turn, _) = Turn::open(1);
        let mut spending = Spending::default();
        assert!(turn
            .end(outcome(TurnStatus::Cancelled), &mut spending)
            .is_some());
        assert!(turn.ended());
        assert!(turn
            .end(outcome(TurnStatus::Failed), &mut spending)
            .is_none());
        assert!(Turn::restored().ended());
    }

    #[test]
    fn a_fatal_error_before_a_clean_exit_decides_status_code_and_message() {
        let (mut turn, _) = Turn::open(2);
        turn.record_error("timeout", "the model took too long", true);
        turn.finish(finished(1.0));
        let mut spending = Spending::default();
        let ending = turn
            .end(outcome(TurnStatus::Completed), &mut spending)
            .unwrap();
        assert!(ending.fail_open_items);
        assert!(ending.turn_ended.synthetic);
        let (_, meta) = ended(&ending.turn_ended);
        assert_eq!(meta.status, TurnStatus::TimedOut);
        assert_eq!(meta.code.as_deref(), Some("timeout"));
        assert_eq!(meta.message.as_deref(), Some("the model took too long"));
        assert_eq!(meta.cost.credits, 1.0, "the finish's cost still counts");
        assert_eq!(meta.exit_code, Some(1));
        assert_eq!(meta.stderr_tail.as_deref(), Some("first\nlast"));
    }

    #[test]
    fn a_failure_the_caller_saw_keeps_its_status_and_message() {
        let (mut turn, _) = Turn::open(1);
        turn.record_error("aborted", "not fatal", false);
        assert_eq!(turn.failure_status(), TurnStatus::Cancelled);
        let ending = turn
            .end(outcome(TurnStatus::Failed), &mut Spending::default())
            .unwrap();
        let (_, meta) = ended(&ending.turn_ended);
        assert_eq!(meta.status, TurnStatus::Failed);
        assert_eq!(meta.code, None);
        assert_eq!(meta.message.as_deref(), Some("the caller's message"));
    }

    #[test]
    fn only_failures_carry_the_stderr_tail() {
        for (status, tail) in [
            (TurnStatus::Failed, true),
            (TurnStatus::TimedOut, true),
            (TurnStatus::BudgetExhausted, true),
            (TurnStatus::Cancelled, false),
            (TurnStatus::Interrupted, false),
        ] {
            let (mut turn, _) = Turn::open(1);
            let ending = turn.end(outcome(status), &mut Spending::default()).unwrap();
            let (_, meta) = ended(&ending.turn_ended);
            assert_eq!(meta.stderr_tail.is_some(), tail, "{status:?}");
        }
    }

    #[test]
    fn a_run_stopped_before_finish_costs_its_running_total() {
        let (mut turn, _) = Turn::open(1);
        let mut spending = Spending::restored(Cost::from_credits(2.0));
        spending.progress(0.5);
        let ending = turn
            .end(outcome(TurnStatus::Cancelled), &mut spending)
            .unwrap();
        let (_, meta) = ended(&ending.turn_ended);
        assert_eq!(meta.cost.credits, 0.5);
        assert!(meta.cost_reported);
        assert_eq!(spending.session().credits, 2.5);
        assert_eq!(meta.session_cost.map(|c| c.credits), Some(2.5));
    }

    #[test]
    fn failing_to_start_is_an_error_whose_code_suggests_the_status() {
        let mut turn = Turn::default();
        let draft = turn.fail_to_start("timeout", "could not start in time");
        assert!(draft.synthetic);
        match draft.data {
            EventData::Error(e) => {
                assert_eq!(e.code.as_deref(), Some("timeout"));
                assert_eq!(e.message, "could not start in time");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(turn.failure_status(), TurnStatus::TimedOut);
        assert_eq!(Turn::default().failure_status(), TurnStatus::Failed);
    }
}
