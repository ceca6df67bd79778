//! One turn from the terminal: send the message, follow the session's log from the turn's
//! `turn.started` to its end — showing it (`render.rs` → `view.rs`), writing each event as a
//! JSON line with `--json`, answering questions and permission requests (`prompts.rs`) — and
//! say how it ended. How it ended is the engine's verdict ([`TurnTracker`]), the same every
//! door gives for the same log; the terminal only shows it.
//!
//! Ctrl-C and SIGTERM cancel the turn through the engine (the daemon's cancel, not a kill) and
//! wait for its end; a second one within 2 s gives up waiting.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::signal::unix::{signal, Signal, SignalKind};

use super::error::{exit, ClientError};
use super::format::closing_line;
use super::format::Style;
use super::prompts::{Asker, PermissionAnswer, QuestionReply};
use super::render::{Piece, Renderer};
use super::transport::{Events, Transport};
use super::view::View;
use crate::session::{TurnEnd, TurnTracker};
use crate::universal::{EventData, TurnStatus, UniversalEvent};

/// A second Ctrl-C within this long exits at once.
const SECOND_INTERRUPT: Duration = Duration::from_secs(2);

/// How a turn ended, as the terminal shows it.
#[derive(Debug, Clone)]
pub struct TurnResult {
    /// The engine's verdict.
    pub end: TurnEnd,
    pub elapsed: Duration,
    /// The signal that made the client cancel the turn, when one did.
    pub stopped_by: Option<Stop>,
}

/// How a turn's follow ended.
pub enum Followed {
    Ended(Box<TurnResult>),
    /// Ctrl-C (or SIGTERM) twice: stop waiting now.
    Abandoned(Stop),
}

/// Everything a turn is shown with.
pub struct TurnIo<'a> {
    pub view: &'a mut View,
    pub renderer: &'a mut Renderer,
    pub asker: &'a Asker,
    /// Every event of the turn on stdout as a JSON line.
    pub json: bool,
}

/// A signal that stops the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
}

/// Ctrl-C and SIGTERM, as a stream (neither ends the process once this is made).
pub struct Interrupts {
    interrupt: Option<Signal>,
    terminate: Option<Signal>,
}

impl Interrupts {
    pub fn new() -> Interrupts {
        Interrupts {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }

    async fn next(&mut self) -> Stop {
        async fn recv(signal: &mut Option<Signal>) {
            match signal {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = recv(&mut self.interrupt) => Stop::Interrupt,
            () = recv(&mut self.terminate) => Stop::Terminate,
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
    io.view.start_turn();
    let started = Instant::now();
    io.view.show(&[Piece::Activity("starting".into())]);
    let after = transport.send(id, text).await?;
    let events = transport.events(id, after).await?;
    let follower = Follower {
        transport,
        id,
        io,
        watch: TurnWatch::default(),
        stopping: None,
        pieces: Vec::new(),
        dir: None,
    };
    follower.follow(events, interrupts, started).await
}

/// One turn being followed.
struct Follower<'a> {
    transport: &'a dyn Transport,
    id: &'a str,
    io: TurnIo<'a>,
    watch: TurnWatch,
    /// The client asked the engine to cancel the turn: when, and why.
    stopping: Option<(Instant, Stop)>,
    pieces: Vec<Piece>,
    /// The session's directory, once a permission request needed it.
    dir: Option<PathBuf>,
}

impl Follower<'_> {
    /// Follows the first turn that starts in `events` to its end.
    async fn follow(
        mut self,
        mut events: Events,
        interrupts: &mut Interrupts,
        started: Instant,
    ) -> Result<Followed, ClientError> {
        loop {
            let event = tokio::select! {
                event = events.next() => event.transpose()?,
                stop = interrupts.next() => {
                    if self.stop(stop).await? {
                        self.io.view.finish();
                        return Ok(Followed::Abandoned(stop));
                    }
                    continue;
                }
            };
            let Some(event) = event else {
                self.io.view.finish();
                return Err(ClientError::failed("the session's event log is gone"));
            };
            if let Some(end) = self.event(&event).await? {
                self.io.view.finish();
                return Ok(Followed::Ended(Box::new(TurnResult {
                    end,
                    elapsed: started.elapsed(),
                    stopped_by: self.stopping.map(|(_, why)| why),
                })));
            }
        }
    }

    /// Cancels the turn (once; the engine answers with its end). True when the user insists
    /// (a second Ctrl-C soon after the first): stop waiting.
    async fn stop(&mut self, why: Stop) -> Result<bool, ClientError> {
        if self
            .stopping
            .is_some_and(|(at, _)| at.elapsed() < SECOND_INTERRUPT)
        {
            return Ok(true);
        }
        self.stopping = Some((Instant::now(), why));
        self.io.view.show(&[Piece::Activity(
            "cancelling (Ctrl-C again to quit now)".into(),
        )]);
        self.transport.cancel(self.id).await?;
        Ok(false)
    }

    /// Shows an event of the turn and answers what it asks; the verdict when it ended the turn.
    async fn event(&mut self, event: &UniversalEvent) -> Result<Option<TurnEnd>, ClientError> {
        if !self.watch.admits(&event.data) {
            // A turn queued ahead of this one.
            return Ok(None);
        }
        if !self.watch.started() {
            // The session ended before this turn started (it was queued): the turn is over.
            self.io.renderer.apply(event, &mut self.pieces);
            return Ok(self.watch.take(&event.data));
        }
        if self.io.json {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", event.to_json(false)).and_then(|()| out.flush());
        }
        self.pieces.clear();
        self.io.renderer.apply(event, &mut self.pieces);
        // Once the client cancelled, the agent's report that it was stopped (`error
        // [aborted]`) says nothing new: the closing line says it.
        if !(self.stopping.is_some() && matches!(event.data, EventData::Error(_))) {
            self.io.view.show(&self.pieces);
        }
        match &event.data {
            EventData::QuestionRequested(q) => {
                let reply = self.io.asker.question(q, &mut *self.io.view).await?;
                let id = self.id;
                let answered = match reply {
                    QuestionReply::Answer(answers) => {
                        self.transport.answer(id, &q.question_id, answers).await
                    }
                    QuestionReply::Skip => self.transport.reject_question(id, &q.question_id).await,
                    QuestionReply::CancelTurn => return self.cancel_at_prompt().await,
                };
                report(&mut *self.io.view, answered);
            }
            EventData::PermissionRequested(p) => {
                let dir = self.directory().await?;
                match self
                    .io
                    .asker
                    .permission(p, &mut *self.io.view, &dir)
                    .await?
                {
                    PermissionAnswer::Reply(reply) => {
                        let answered = self
                            .transport
                            .permission(self.id, &p.permission_id, reply)
                            .await;
                        report(&mut *self.io.view, answered);
                    }
                    PermissionAnswer::CancelTurn => return self.cancel_at_prompt().await,
                }
            }
            _ => {}
        }
        Ok(self.watch.take(&event.data))
    }

    /// The session's directory (asked once, at its first permission request).
    async fn directory(&mut self) -> Result<PathBuf, ClientError> {
        if self.dir.is_none() {
            let info = self.transport.info(self.id).await?;
            self.dir = Some(PathBuf::from(info.directory));
        }
        Ok(self.dir.clone().unwrap_or_default())
    }

    /// Ctrl-C at a question or an approval: the turn is cancelled.
    async fn cancel_at_prompt(&mut self) -> Result<Option<TurnEnd>, ClientError> {
        self.stopping = Some((Instant::now(), Stop::Interrupt));
        self.transport.cancel(self.id).await?;
        Ok(None)
    }
}

/// Which of the session's events belong to the turn being followed, and the engine's verdict
/// on it. The terminal follows the log from before its message was queued, so a turn queued
/// ahead of it may go by first: its events are not this turn's. Pure (the cross-door verdict
/// test, `tests/turn_verdicts.rs`, runs it on the same logs as the other doors).
#[derive(Debug, Default)]
pub struct TurnWatch {
    tracker: TurnTracker,
    /// The turn's `turn.started` was seen.
    started: bool,
}

impl TurnWatch {
    /// True when `data` is the followed turn's: from its `turn.started` on, or a
    /// `session.ended` before it (which ends the turn that never started).
    pub fn admits(&mut self, data: &EventData) -> bool {
        match data {
            _ if self.started => true,
            EventData::TurnStarted(_) => {
                self.started = true;
                true
            }
            EventData::SessionEnded(_) => true,
            _ => false,
        }
    }

    /// True once the turn's `turn.started` was seen.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Takes an admitted event; the verdict when it ended the turn.
    pub fn take(&mut self, data: &EventData) -> Option<TurnEnd> {
        self.tracker.take(data).cloned()
    }
}

/// Says how a turn ended: why, when it did not complete (a cancel needs no reason: the user
/// asked for it), and (with `closing`) the closing line — status, duration, the turn's and the
/// session's cost, and how to resume.
pub fn show_ending(view: &mut View, result: &TurnResult, id: &str, closing: bool) {
    for (style, line) in ending_lines(result, id, closing) {
        view.notice(style, &line);
    }
}

/// The lines [`show_ending`] shows on stderr (pure).
pub fn ending_lines(result: &TurnResult, id: &str, closing: bool) -> Vec<(Style, String)> {
    let end = &result.end;
    let mut lines = Vec::new();
    match end.status {
        TurnStatus::Completed => {}
        TurnStatus::Cancelled if result.stopped_by.is_some() => {}
        // Cancelled by someone else: say who or what.
        TurnStatus::Cancelled => lines.push((Style::Warn, format!("codebuffd: {}", end.reason()))),
        _ => lines.push((Style::Error, format!("codebuffd: {}", end.reason()))),
    }
    if closing {
        lines.push(closing_line(
            end.status,
            result.elapsed,
            end.turn_cost,
            end.session_cost,
            id,
        ));
    }
    lines
}

/// An answer the engine refused (already answered, timed out): said, not fatal.
fn report(view: &mut View, result: Result<(), ClientError>) {
    if let Err(e) = result {
        view.notice(Style::Warn, &format!("codebuffd: {e}"));
    }
}

/// The exit status of a turn that ended as `result` says.
pub fn exit_code(result: &TurnResult) -> u8 {
    match result.end.status {
        TurnStatus::Completed => exit::OK,
        TurnStatus::Cancelled => stopped_code(result.stopped_by),
        TurnStatus::BudgetExhausted => exit::BUDGET_OR_CREDENTIALS,
        // No credential, or one the backend refused (as ACP's "authentication required").
        TurnStatus::Failed if result.end.needs_credentials() => exit::BUDGET_OR_CREDENTIALS,
        TurnStatus::Failed | TurnStatus::TimedOut | TurnStatus::Interrupted => exit::FAILED,
    }
}

/// The exit status of a turn cancelled (or given up on) after `stop`: 143 after SIGTERM, as a
/// process ended by it, 130 otherwise (Ctrl-C, or a cancel from elsewhere).
pub fn stopped_code(stop: Option<Stop>) -> u8 {
    match stop {
        Some(Stop::Terminate) => exit::TERMINATED,
        Some(Stop::Interrupt) | None => exit::CANCELLED,
    }
}
