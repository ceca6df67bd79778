//! The pure part of a turn: the one path from an agent's output to event drafts, shared by the
//! daemon's turn loop (`turn.rs`) and `codebuffd convert`. [`TurnDriver`] feeds each
//! [`ProcessEvent`] to the converter (stdout lines, stderr lines, oversized lines) and, once
//! the output is over, [`decide_outcome`] says how the turn ended from why the daemon stopped
//! it, how the agent exited and what the agent itself reported. No I/O here.

use crate::agent::{ExitInfo, OutputStream, ProcessEvent};
use crate::codebuff::{CodebuffConverter, Stream, TurnOutcome};
use crate::universal::{EventDraft, StderrCollector, TurnStatus};

/// How long an agent may take to exit after its run said `finish`; then it is stopped (and the
/// turn completes all the same).
pub(super) const FINISH_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Why the daemon stopped a running turn.
#[derive(Debug, Clone, PartialEq)]
pub enum StopReason {
    /// `cancel`: the turn ends, the session goes on.
    Cancelled,
    /// `terminate`: the turn ends, then the session.
    Terminated,
    /// The daemon is shutting down.
    Shutdown,
    /// A clock ran out (the turn's timeout, or the agent's silence); the message says which.
    TimedOut(String),
    /// The event log could not take the turn's events; the message says why.
    StoreFailed(String),
    /// The run said `finish` but the agent did not exit within [`FINISH_GRACE`].
    Lingered,
    /// The session reached its credit budget; the message says how far.
    BudgetExhausted(String),
}

/// How the agent's output ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ending {
    /// The agent process exited.
    Exited(ExitInfo),
    /// The output ended without a process to report an exit (`codebuffd convert`).
    OutputEnded,
}

/// How a turn ended: the status and its reason.
///
/// A stop by the daemon decides; otherwise the exit: 0 completed, a signal failed, another
/// code whatever the agent's own last error suggests (`failure_status`: timed out, cancelled,
/// else failed). Output that just ends (no process: `codebuffd convert`) completed if the run
/// said `finish` (`finished`), else takes the suggested status.
pub fn decide_outcome(
    stop: Option<&StopReason>,
    ending: Ending,
    failure_status: TurnStatus,
    finished: bool,
) -> (TurnStatus, String) {
    match stop {
        Some(StopReason::Lingered) => (
            TurnStatus::Completed,
            format!(
                "the agent did not exit within {} s of its finish and was stopped",
                FINISH_GRACE.as_secs()
            ),
        ),
        Some(StopReason::Cancelled) => (TurnStatus::Cancelled, "cancelled".to_owned()),
        Some(StopReason::Terminated) => (
            TurnStatus::Cancelled,
            "the session was terminated".to_owned(),
        ),
        Some(StopReason::Shutdown) => (
            TurnStatus::Interrupted,
            "the daemon shut down during the turn".to_owned(),
        ),
        Some(StopReason::TimedOut(m)) => (TurnStatus::TimedOut, m.clone()),
        Some(StopReason::StoreFailed(m)) => (TurnStatus::Failed, m.clone()),
        Some(StopReason::BudgetExhausted(m)) => (TurnStatus::BudgetExhausted, m.clone()),
        None => match ending {
            Ending::OutputEnded if finished => {
                (TurnStatus::Completed, "the agent's output ended".to_owned())
            }
            Ending::OutputEnded => (
                failure_status,
                "the agent's output ended without a `finish` event".to_owned(),
            ),
            Ending::Exited(ExitInfo { code: Some(0), .. }) => {
                (TurnStatus::Completed, "the agent exited".to_owned())
            }
            Ending::Exited(ExitInfo {
                signal: Some(sig), ..
            }) => (
                TurnStatus::Failed,
                format!("the agent was killed by signal {sig}"),
            ),
            Ending::Exited(ExitInfo {
                code: Some(code), ..
            }) => (
                failure_status,
                format!("the agent exited with status {code}"),
            ),
            Ending::Exited(ExitInfo {
                code: None,
                signal: None,
            }) => (TurnStatus::Failed, "the agent vanished".to_owned()),
        },
    }
}

/// Feeds one turn's agent output to the session's converter.
#[derive(Debug)]
pub struct TurnDriver {
    stderr: StderrCollector,
    max_line_bytes: usize,
}

impl TurnDriver {
    /// A driver for agent output read with lines of at most `max_line_bytes`.
    pub fn new(max_line_bytes: usize) -> Self {
        TurnDriver {
            stderr: StderrCollector::default(),
            max_line_bytes,
        }
    }

    /// Converts one output event into `out`; returns the exit when the event is the exit.
    pub fn take(
        &mut self,
        converter: &mut CodebuffConverter,
        event: ProcessEvent,
        out: &mut Vec<EventDraft>,
    ) -> Option<ExitInfo> {
        match event {
            ProcessEvent::Line {
                stream: OutputStream::Stdout,
                line,
            } => converter.convert_stdout_line(line, out),
            ProcessEvent::Line {
                stream: OutputStream::Stderr,
                line,
            } => {
                if !converter.convert_stderr_line(&line, out) {
                    self.stderr
                        .push(String::from_utf8_lossy(&line).trim_end_matches('\r'));
                }
            }
            ProcessEvent::Oversized {
                stream,
                length,
                prefix,
            } => {
                let stream = match stream {
                    OutputStream::Stdout => Stream::Stdout,
                    OutputStream::Stderr => Stream::Stderr,
                };
                out.push(converter.oversized_line(stream, length, self.max_line_bytes, &prefix));
            }
            ProcessEvent::Exited(info) => return Some(info),
        }
        None
    }

    /// The turn's outcome once its output is over (used when the agent did not end it).
    pub fn outcome(
        &self,
        converter: &CodebuffConverter,
        stop: Option<&StopReason>,
        ending: Ending,
    ) -> TurnOutcome {
        let (status, message) = decide_outcome(
            stop,
            ending,
            converter.failure_status(),
            converter.run_finished(),
        );
        let (exit_code, signal) = match ending {
            Ending::Exited(info) => (info.code, info.signal),
            Ending::OutputEnded => (None, None),
        };
        TurnOutcome {
            status,
            exit_code,
            signal,
            message: Some(message),
            stderr: self.stderr.output(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: Option<i32>, signal: Option<i32>) -> Ending {
        Ending::Exited(ExitInfo { code, signal })
    }

    fn status(stop: Option<StopReason>, ending: Ending) -> TurnStatus {
        decide_outcome(stop.as_ref(), ending, TurnStatus::Failed, false).0
    }

    #[test]
    fn a_clean_exit_completes_the_turn() {
        assert_eq!(
            decide_outcome(None, exited(Some(0), None), TurnStatus::Failed, false),
            (TurnStatus::Completed, "the agent exited".into())
        );
    }

    #[test]
    fn a_signal_fails_the_turn_and_says_which() {
        let (status, message) =
            decide_outcome(None, exited(None, Some(9)), TurnStatus::TimedOut, false);
        assert_eq!(status, TurnStatus::Failed);
        assert_eq!(message, "the agent was killed by signal 9");
    }

    #[test]
    fn a_non_zero_exit_takes_the_status_the_agents_own_errors_suggest() {
        for suggested in [
            TurnStatus::Failed,
            TurnStatus::TimedOut,
            TurnStatus::Cancelled,
        ] {
            let (status, message) = decide_outcome(None, exited(Some(3), None), suggested, false);
            assert_eq!(status, suggested);
            assert_eq!(message, "the agent exited with status 3");
        }
    }

    #[test]
    fn an_exit_nobody_could_read_fails_the_turn() {
        assert_eq!(status(None, exited(None, None)), TurnStatus::Failed);
    }

    #[test]
    fn output_that_just_ends_takes_the_suggested_status() {
        let (status, message) =
            decide_outcome(None, Ending::OutputEnded, TurnStatus::TimedOut, false);
        assert_eq!(status, TurnStatus::TimedOut);
        assert!(message.contains("without a `finish`"), "{message}");
    }

    #[test]
    fn after_finish_only_a_clean_end_completes() {
        let done = |ending| decide_outcome(None, ending, TurnStatus::Failed, true).0;
        assert_eq!(done(Ending::OutputEnded), TurnStatus::Completed);
        assert_eq!(done(exited(Some(0), None)), TurnStatus::Completed);
        assert_eq!(done(exited(Some(1), None)), TurnStatus::Failed);
        assert_eq!(done(exited(None, Some(9))), TurnStatus::Failed);
        let lingered = decide_outcome(
            Some(&StopReason::Lingered),
            exited(None, Some(15)),
            TurnStatus::Failed,
            true,
        );
        assert_eq!(lingered.0, TurnStatus::Completed);
    }

    #[test]
    fn a_stop_by_the_daemon_decides_whatever_the_exit() {
        for ending in [
            exited(Some(0), None),
            exited(None, Some(15)),
            Ending::OutputEnded,
        ] {
            assert_eq!(
                status(Some(StopReason::Cancelled), ending),
                TurnStatus::Cancelled
            );
            assert_eq!(
                status(Some(StopReason::Terminated), ending),
                TurnStatus::Cancelled
            );
            assert_eq!(
                status(Some(StopReason::Shutdown), ending),
                TurnStatus::Interrupted
            );
            assert_eq!(
                status(Some(StopReason::TimedOut("t".into())), ending),
                TurnStatus::TimedOut
            );
            assert_eq!(
                status(Some(StopReason::StoreFailed("disk full".into())), ending),
                TurnStatus::Failed
            );
        }
        let (_, message) = decide_outcome(
            Some(&StopReason::TimedOut(
                "the turn exceeded its timeout of 2 s".into(),
            )),
            exited(None, Some(15)),
            TurnStatus::Failed,
            false,
        );
        assert_eq!(message, "the turn exceeded its timeout of 2 s");
    }

    #[test]
    fn the_driver_routes_each_stream_and_keeps_stderr_diagnostics() {
        let mut converter = CodebuffConverter::new();
        let mut driver = TurnDriver::new(1024);
        let mut out = Vec::new();
        converter.begin_turn(None, &mut out);
        out.clear();
        let line = |stream, text: &str| ProcessEvent::Line {
            stream,
            line: bytes::Bytes::copy_from_slice(text.as_bytes()),
        };
        assert_eq!(
            driver.take(
                &mut converter,
                line(OutputStream::Stdout, r#"{"type":"text","text":"hi"}"#),
                &mut out
            ),
            None
        );
        driver.take(&mut converter, line(OutputStream::Stdout, "   "), &mut out);
        driver.take(
            &mut converter,
            line(OutputStream::Stderr, "a warning"),
            &mut out,
        );
        driver.take(
            &mut converter,
            ProcessEvent::Oversized {
                stream: OutputStream::Stdout,
                length: 5000,
                prefix: b"xx".to_vec(),
            },
            &mut out,
        );
        let types: Vec<&str> = out.iter().map(|d| d.data.event_type()).collect();
        assert_eq!(
            types,
            [
                "item.started",
                "item.delta",
                "item.completed",
                "agent.unparsed"
            ]
        );
        let exit = ExitInfo {
            code: Some(2),
            signal: None,
        };
        assert_eq!(
            driver.take(&mut converter, ProcessEvent::Exited(exit), &mut out),
            Some(exit)
        );
        let outcome = driver.outcome(&converter, None, Ending::Exited(exit));
        assert_eq!(outcome.status, TurnStatus::Failed);
        assert_eq!(outcome.exit_code, Some(2));
        let stderr = outcome.stderr.expect("the diagnostic is kept");
        assert_eq!(stderr.head.as_deref(), Some("a warning"));
    }
}
