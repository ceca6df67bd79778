//! One turn from the terminal: send the message, follow the session's log from the turn's
//! `turn.started` to its `turn.ended` — showing it (`render.rs` → `view.rs`), writing each event
//! as a JSON line with `--json`, answering questions and permission requests (`prompts.rs`) —
//! and say how it ended. Ctrl-C cancels the turn through the engine (the daemon's cancel, not a
//! kill); a second Ctrl-C within 2 s gives up waiting.

use std::io::Write;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::signal::unix::{signal, Signal, SignalKind};

use super::error::ClientError;
use super::format::closing_line;
use super::prompts::{Asker, PermissionAnswer, QuestionReply};
use super::render::{Piece, Renderer, Style};
use super::transport::Transport;
use super::view::View;
use crate::universal::{Cost, EventData, TurnStatus};

/// A second Ctrl-C within this long exits at once.
const SECOND_INTERRUPT: Duration = Duration::from_secs(2);

/// How a turn ended.
#[derive(Debug, Clone)]
pub struct TurnResult {
    pub status: TurnStatus,
    /// The turn's cost.
    pub cost: Cost,
    /// Its final answer (last top-level assistant message).
    pub answer: Option<String>,
    pub elapsed: Duration,
    /// Why it failed, when it did.
    pub message: Option<String>,
}

/// How a turn's follow ended.
pub enum Followed {
    Ended(TurnResult),
    /// Ctrl-C twice: stop waiting now.
    Abandoned,
}

/// Everything a turn is shown with.
pub struct TurnIo<'a> {
    pub view: &'a mut View,
    pub renderer: &'a mut Renderer,
    pub asker: &'a Asker,
    /// Every event of the turn on stdout as a JSON line.
    pub json: bool,
}

/// Ctrl-C, as a stream (SIGINT no longer ends the process once this is made).
pub struct Interrupts {
    signal: Option<Signal>,
}

impl Interrupts {
    pub fn new() -> Interrupts {
        Interrupts {
            signal: signal(SignalKind::interrupt()).ok(),
        }
    }

    async fn next(&mut self) {
        match &mut self.signal {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
}

impl Default for Interrupts {
    fn default() -> Self {
        Interrupts::new()
    }
}

/// Sends `text` to session `id` and follows its turn to the end.
pub async fn run(
    transport: &dyn Transport,
    id: &str,
    text: &str,
    io: TurnIo<'_>,
    interrupts: &mut Interrupts,
) -> Result<Followed, ClientError> {
    io.view.start_clock();
    let started = Instant::now();
    io.view.show(&[Piece::Activity("starting".into())]);
    let after = transport.send(id, text).await?;
    follow(transport, id, after, io, interrupts, started).await
}

/// Follows the first turn that starts after sequence `after` to its end.
pub async fn follow(
    transport: &dyn Transport,
    id: &str,
    after: u64,
    io: TurnIo<'_>,
    interrupts: &mut Interrupts,
    started: Instant,
) -> Result<Followed, ClientError> {
    let TurnIo {
        view,
        renderer,
        asker,
        json,
    } = io;
    let mut events = transport.events(id, after).await?;
    let mut in_turn = false;
    let mut cancelled_at: Option<Instant> = None;
    let mut pieces = Vec::new();
    let mut last_error: Option<String> = None;
    loop {
        let event = tokio::select! {
            event = events.next() => event.transpose()?,
            () = interrupts.next() => {
                if cancelled_at.is_some_and(|at| at.elapsed() < SECOND_INTERRUPT) {
                    view.finish();
                    return Ok(Followed::Abandoned);
                }
                cancelled_at = Some(Instant::now());
                view.notice(Style::Warn, "cancelling the turn… (Ctrl-C again to quit now)");
                transport.cancel(id).await?;
                continue;
            }
        };
        let Some(event) = event else {
            view.finish();
            return Err(ClientError::failed("the session's event log is gone"));
        };
        if !in_turn {
            // Events of the session before this turn (a turn queued ahead of it).
            if !matches!(event.data, EventData::TurnStarted(_)) {
                continue;
            }
            in_turn = true;
        }
        if json {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", event.to_json(false)).and_then(|()| out.flush());
        }
        pieces.clear();
        renderer.apply(&event, &mut pieces);
        view.show(&pieces);
        match &event.data {
            EventData::Error(e) => last_error = Some(e.message.clone()),
            EventData::QuestionRequested(q) => match asker.question(q, view).await? {
                QuestionReply::Answer(answers) => {
                    report(view, transport.answer(id, &q.question_id, answers).await);
                }
                QuestionReply::Skip => {
                    report(view, transport.reject_question(id, &q.question_id).await);
                }
                QuestionReply::CancelTurn => {
                    cancelled_at = Some(Instant::now());
                    transport.cancel(id).await?;
                }
            },
            EventData::PermissionRequested(p) => match asker.permission(p, view).await? {
                PermissionAnswer::Reply(reply) => {
                    report(
                        view,
                        transport.permission(id, &p.permission_id, reply).await,
                    );
                }
                PermissionAnswer::CancelTurn => {
                    cancelled_at = Some(Instant::now());
                    transport.cancel(id).await?;
                }
            },
            EventData::TurnEnded(turn) => {
                view.finish();
                let meta = turn.metadata.clone();
                let status = meta.as_ref().map_or(TurnStatus::Failed, |m| m.status);
                let message = meta
                    .as_ref()
                    .and_then(|m| m.message.clone())
                    .or(last_error.clone());
                return Ok(Followed::Ended(TurnResult {
                    status,
                    cost: meta.map(|m| m.cost).unwrap_or_default(),
                    answer: renderer.answer().map(str::to_owned),
                    elapsed: started.elapsed(),
                    message,
                }));
            }
            EventData::SessionEnded(end) => {
                view.finish();
                return Ok(Followed::Ended(TurnResult {
                    status: TurnStatus::Failed,
                    cost: Cost::default(),
                    answer: renderer.answer().map(str::to_owned),
                    elapsed: started.elapsed(),
                    message: end.message.clone().or(Some("the session ended".into())),
                }));
            }
            _ => {}
        }
    }
}

/// Says how a turn ended: why, when it did not complete, and (with `closing`) the closing line
/// — status, duration, cost and how to resume.
pub fn show_ending(view: &mut View, result: &TurnResult, id: &str, closing: bool) {
    if let (Some(message), false) = (&result.message, result.status == TurnStatus::Completed) {
        view.notice(Style::Error, &format!("codebuffd: {message}"));
    }
    if closing {
        let (style, line) = closing_line(result.status, result.elapsed, result.cost, id);
        view.notice(style, &line);
    }
}

/// An answer the engine refused (already answered, timed out): said, not fatal.
fn report(view: &mut View, result: Result<(), ClientError>) {
    if let Err(e) = result {
        view.notice(Style::Warn, &format!("codebuffd: {e}"));
    }
}

/// The exit status of a turn that ended with `status`.
pub fn exit_code(status: TurnStatus) -> u8 {
    use super::error::exit;
    match status {
        TurnStatus::Completed => exit::OK,
        TurnStatus::Cancelled => exit::CANCELLED,
        TurnStatus::BudgetExhausted => exit::BUDGET_OR_CREDENTIALS,
        TurnStatus::Failed | TurnStatus::TimedOut | TurnStatus::Interrupted => exit::FAILED,
    }
}
