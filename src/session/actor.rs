//! The session actor: one task per session that owns its converter, its mailbox and its queue
//! of messages, and dispatches every request.
//!
//! Everything that changes a session goes through the actor's mailbox, so the log has exactly
//! one writer and the lifecycle rules (`docs/universal-events.md` §3) are enforced in one
//! place: messages queue and run one turn at a time ([`super::turn`]); every turn gets exactly
//! one `turn.ended` and a session at most one `session.ended`.

use std::sync::Arc;

use nix::sys::signal::Signal;
use tokio::sync::{mpsc, oneshot, watch};

use super::answers::answer_prompt;
use super::command::{Command, Mailbox};
use super::context::SessionContext;
use super::driver::StopReason;
use super::info::{EndState, SessionStatus};
use super::message::UserMessage;
use super::observe::PendingShare;
use super::queue::MessageQueue;
use super::record::{now_ms, Shared};
use super::{SessionError, SessionSettings};
use crate::agent::AgentProcess;
use crate::codebuff::{CodebuffConverter, DecidedBy, PermissionMode};
use crate::store::RunningProcess;
use crate::universal::{
    format_time, EventData, EventDraft, SessionEndReason, SessionEndedData, TerminatedBy,
};

/// The drafts a session keeps room for between turns (a turn's batches grow it to hundreds).
const IDLE_DRAFTS: usize = 8;

/// Where an actor's session comes from.
#[derive(Debug)]
pub(crate) enum Origin {
    /// Created just now: the actor records `session.started` (every event of the log is
    /// appended by its actor) and says on `ready` whether the log took it.
    Created {
        ready: Option<oneshot::Sender<Result<(), SessionError>>>,
    },
    /// Loaded from the store (taken over from an engine that let it go or died); `running`
    /// is the agent process its record names (a turn a dead engine left running), if any,
    /// ended for `why`.
    Restored {
        running: Option<RunningProcess>,
        why: String,
    },
}

/// One session's actor.
pub(crate) struct Actor {
    pub(super) id: Arc<str>,
    pub(super) settings: Arc<SessionSettings>,
    pub(super) ctx: Arc<SessionContext>,
    pub(super) shared: Shared,
    pub(super) converter: CodebuffConverter,
    pub(super) queue: MessageQueue,
    pub(super) rx: mpsc::Receiver<Command>,
    /// Whether this engine owns the session in the store (see `owner.rs`).
    pub(super) owned: Arc<std::sync::atomic::AtomicBool>,
    pub(super) routing: Arc<tokio::sync::Mutex<()>>,
    pub(super) drafts: Vec<EventDraft>,
    /// Replies owed once the running turn has ended (terminate, shutdown).
    pub(super) waiting: Vec<oneshot::Sender<()>>,
    pub(super) exit: bool,
    pub(super) created_at: u64,
    origin: Origin,
    /// Whether the store's write queue has room (a store whose appends can wait; see
    /// [`crate::store::EventStore::room`]).
    room: Option<watch::Receiver<bool>>,
    /// Set when the log refused (or lost) this session's events: the converter is ahead of
    /// the log, nothing more is appended until the session is resynchronised from the log
    /// ([`Actor::resync`]).
    pub(super) store_failure: Option<String>,
    /// This session's share of the pending-questions/permissions gauges (`observe.rs`).
    pending: PendingShare,
    /// The running turn's agent process as last recorded (status changes rewrite the record
    /// with it, so other engines' lists see `awaiting_input`).
    pub(super) recorded_process: std::sync::Mutex<Option<RunningProcess>>,
}

impl Actor {
    pub(crate) fn new(
        id: Arc<str>,
        settings: Arc<SessionSettings>,
        ctx: Arc<SessionContext>,
        shared: Shared,
        mailbox: Mailbox,
        created_at: u64,
        origin: Origin,
    ) -> Self {
        let mut converter = CodebuffConverter::new();
        converter.set_permission_mode(
            PermissionMode::parse(&settings.permission_mode).unwrap_or(PermissionMode::Bypass),
        );
        Actor {
            room: ctx.store.room(),
            origin,
            created_at,
            id,
            settings,
            ctx,
            shared,
            converter,
            queue: MessageQueue::new(mailbox.queued),
            rx: mailbox.rx,
            owned: mailbox.owned,
            routing: mailbox.routing,
            drafts: Vec::new(),
            waiting: Vec::new(),
            exit: false,
            store_failure: None,
            pending: PendingShare::default(),
            recorded_process: std::sync::Mutex::new(None),
        }
    }

    /// Runs until the daemon shuts down (or every handle to the session is gone).
    pub(crate) async fn run(mut self) {
        match std::mem::replace(&mut self.origin, Origin::Created { ready: None }) {
            Origin::Restored { running, why } => self.recover(running, &why).await,
            Origin::Created { ready } => {
                self.drafts.push(self.settings.started_event());
                let recorded = match self.flush().await {
                    true => Ok(()),
                    false => Err(SessionError::StoreUnavailable(
                        self.store_failure.clone().unwrap_or_default(),
                    )),
                };
                if let Some(ready) = ready {
                    let _ = ready.send(recorded);
                }
            }
        }
        while !self.exit {
            if self.store_failure.is_some() {
                self.resync().await;
                continue;
            }
            if self.ended().is_none() {
                if let Some(next) = self.queue.pop() {
                    self.run_turn(next).await;
                    // A turn's batches grew the drafts to hundreds; a session between turns
                    // needs room for a few (many idle sessions would each keep ~100 KiB).
                    self.drafts.shrink_to(IDLE_DRAFTS);
                    continue;
                }
            }
            self.release_if_idle().await;
            match self.rx.recv().await {
                Some(cmd) => self.handle_idle(cmd).await,
                None => break,
            }
        }
        self.release_if_idle().await;
        for w in self.waiting.drain(..) {
            let _ = w.send(());
        }
    }

    pub(super) fn ended(&self) -> Option<EndState> {
        self.shared.lock().end.clone()
    }

    pub(super) fn set_status(&self, status: SessionStatus) {
        let mut live = self.shared.lock();
        if live.end.is_none() {
            live.status = status;
        }
    }

    /// The error a message to an ended session gets.
    fn ended_error(end: &EndState) -> SessionError {
        match end {
            EndState::Terminated => SessionError::Terminated,
            EndState::Error(message) => SessionError::AgentExited(message.clone()),
        }
    }

    /// Waits while the store's write queue is full, so the append after it does not block
    /// a runtime thread (other sessions' tasks go on meanwhile); the agent's output waits in
    /// its pipe.
    pub(super) async fn wait_for_room(&mut self) {
        if let Some(room) = &mut self.room {
            let _ = room.wait_for(|room| *room).await;
        }
    }

    /// Appends the pending drafts to the log and refreshes the live info; a batch that must be
    /// durable before anyone sees it (a turn's or the session's end) is awaited here, without
    /// parking a runtime thread. Returns false when the log refused them (or lost earlier
    /// ones): the drafts are dropped, and the session appends nothing more until it is
    /// resynchronised from the log.
    pub(super) async fn flush(&mut self) -> bool {
        if self.store_failure.is_some() {
            self.drafts.clear();
            return false;
        }
        if self.drafts.is_empty() {
            return true;
        }
        let time: Arc<str> = format_time(time::OffsetDateTime::now_utc()).into();
        let native = self.converter.native_session_id();
        let batch = self.drafts.len() as u64;
        {
            // Before the append: the writer thread may commit these events (and a reader act
            // on a `turn.ended` among them) before this task runs again, and whoever then
            // asks for the session must see the cost those events report.
            let mut live = self.shared.lock();
            live.updated_at = now_ms();
            // The conversation id changes once; don't copy it on every append.
            if live.native_session_id.as_deref() != native {
                live.native_session_id = native.map(str::to_owned);
            }
            live.cost = self.converter.session_cost();
        }
        let appended = self
            .ctx
            .store
            .append_deferred(&self.id, &mut self.drafts, time, native);
        let appended = match appended {
            Ok(appended) => {
                self.shared.lock().event_count = appended.last;
                match appended.durable {
                    Some(commit) => commit.wait().await,
                    None => Ok(()),
                }
            }
            Err(error) => Err(error),
        };
        if let Err(error) = appended {
            tracing::error!(session = %self.id, %error, "appending to the event log failed; the session waits for the log and resumes from it");
            self.drafts.clear();
            self.store_failure = Some(error.to_string());
            self.set_status(SessionStatus::Failed);
            return false;
        }
        crate::metrics::metrics().events_appended.inc_by(batch);
        self.pending.update(
            self.converter.pending_question_count(),
            self.converter.pending_permission_count(),
        );
        true
    }

    /// Queues a message, or refuses it when the session has ended.
    pub(super) fn enqueue(
        &mut self,
        message: UserMessage,
        started: Option<oneshot::Sender<Result<u64, SessionError>>>,
    ) {
        self.queue.push(message, started);
        if let Some(end) = self.ended() {
            self.queue.refuse_all(|| Self::ended_error(&end));
        }
    }

    /// Cancels what a `Cancel` names while no turn runs: the waiting messages, if it says so.
    pub(super) fn cancel_queued(&mut self, queued: bool) {
        if queued {
            self.queue.refuse_all(|| SessionError::Cancelled);
        }
    }

    /// Marks the session terminated: no more turns; queued messages are refused.
    pub(super) fn mark_terminated(&mut self) {
        {
            let mut live = self.shared.lock();
            if live.end.is_some() {
                return;
            }
            live.end = Some(EndState::Terminated);
            live.status = SessionStatus::Ended;
        }
        self.queue.refuse_all(|| SessionError::Terminated);
    }

    /// Handles a command while no turn runs.
    async fn handle_idle(&mut self, cmd: Command) {
        match cmd {
            Command::Message { message, started } => self.enqueue(message, started),
            Command::Answer {
                question_id,
                answers,
                reply,
            } => {
                let result = self.resolve_question(&question_id, Some(answers)).await;
                let result = result.map(|(question, _line)| {
                    // The run that asked is over: the answer becomes the next turn's prompt,
                    // which resumes the conversation with `--continue`.
                    if self.ended().is_none() {
                        self.queue.push_front(answer_prompt(&question).into());
                    }
                });
                let _ = reply.send(result);
            }
            Command::Reject { question_id, reply } => {
                let result = self.resolve_question(&question_id, None).await;
                let _ = reply.send(result.map(|_| ()));
            }
            Command::Cancel { queued, reply } => {
                self.cancel_queued(queued);
                let _ = reply.send(());
            }
            Command::SetMode { mode } => self.set_mode(mode),
            Command::Permission {
                permission_id,
                answer,
                reply,
            } => {
                // No turn runs: its requests were resolved when it ended, so this says
                // which of unknown or already resolved the id is.
                let result = self
                    .converter
                    .resolve_permission(
                        &permission_id,
                        answer,
                        DecidedBy::User,
                        None,
                        &mut self.drafts,
                    )
                    .map_err(|e| SessionError::InvalidRequest(e.to_string()));
                if result.is_ok() {
                    self.flush().await;
                }
                let _ = reply.send(result.map(|_line| ()));
            }
            Command::Terminate { reply } => {
                self.end_session_terminated().await;
                let _ = reply.send(());
            }
            Command::Shutdown { reply } => {
                self.waiting.push(reply);
                self.exit = true;
            }
        }
    }

    /// Handles a command while a turn runs.
    pub(super) async fn handle_running(
        &mut self,
        cmd: Command,
        process: &mut AgentProcess,
        stop: &mut Option<StopReason>,
    ) {
        let limits = self.ctx.limits.clone();
        match cmd {
            Command::Message { message, started } => self.enqueue(message, started),
            Command::Answer {
                question_id,
                answers,
                reply,
            } => {
                let result = match self.resolve_question(&question_id, Some(answers)).await {
                    Ok((question, line)) => {
                        if let Err(error) = process.write_line(&line).await {
                            tracing::warn!(session = %self.id, %error, "the agent no longer reads answers; the answer goes into the next turn");
                            self.queue.push_front(answer_prompt(&question).into());
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                };
                let _ = reply.send(result);
            }
            Command::Reject { question_id, reply } => {
                let result = match self.resolve_question(&question_id, None).await {
                    Ok((_, line)) => {
                        let _ = process.write_line(&line).await;
                        Ok(())
                    }
                    Err(e) => Err(e),
                };
                let _ = reply.send(result);
            }
            Command::SetMode { mode } => self.set_mode(mode),
            Command::Permission {
                permission_id,
                answer,
                reply,
            } => {
                let result = self
                    .resolve_permission(process, &permission_id, answer, DecidedBy::User, None)
                    .await;
                let _ = reply.send(result);
            }
            Command::Cancel { queued, reply } => {
                self.cancel_queued(queued);
                if stop.is_none() {
                    *stop = Some(StopReason::Cancelled);
                    process.stop(Signal::SIGINT, limits.cancel_grace);
                }
                let _ = reply.send(());
            }
            Command::Terminate { reply } => {
                if !matches!(stop, Some(StopReason::Terminated | StopReason::Shutdown)) {
                    *stop = Some(StopReason::Terminated);
                    process.stop(Signal::SIGTERM, limits.stop_grace);
                }
                self.waiting.push(reply);
            }
            Command::Shutdown { reply } => {
                if stop.as_ref() != Some(&StopReason::Terminated) {
                    *stop = Some(StopReason::Shutdown);
                }
                process.stop(Signal::SIGTERM, limits.stop_grace);
                self.waiting.push(reply);
            }
        }
    }

    /// Changes the agent mode of the next turns and records it.
    pub(super) fn set_mode(&mut self, mode: String) {
        self.shared.lock().agent_mode = mode;
        self.persist(None);
    }

    pub(super) async fn end_session_terminated(&mut self) {
        if self.ended().is_some() {
            return;
        }
        self.reject_stale_questions();
        self.drafts
            .push(EventDraft::synthetic(EventData::SessionEnded(Box::new(
                SessionEndedData {
                    reason: SessionEndReason::Terminated,
                    terminated_by: TerminatedBy::Daemon,
                    message: None,
                    exit_code: None,
                    stderr: None,
                    cost: self.converter.session_cost(),
                },
            ))));
        // A log that refuses it gets it on resynchronisation.
        self.flush().await;
        self.mark_terminated();
        self.persist(None);
    }
}
